"""The reference as a latency peer: ``reference-cpu`` and ``reference-cuda`` (a per-row Python pipeline, slow)."""

from __future__ import annotations

from typing import Optional


from ..base import LatencyBatch, LatencyUnsupported, Row
from ..registry import Entry
from .impl import Reference

__all__ = ["ReferencePeer", "REFERENCE_GRID", "IMPLEMENTATIONS"]

#: The reference is timed at these batches and vocabularies only (seconds per call at batch 16).
REFERENCE_GRID = {"batches": (1, 16), "vocabs": (32000, 128256)}


class ReferencePeer:
    """The reference's :meth:`~impls.reference.sampler.ReferenceSession.step` on one device, timed.

    Parameters
    ----------
    device : {"cpu", "cuda"}
    """

    roles = frozenset({"latency"})
    slow = True
    features = frozenset()
    stages: dict = {}
    profile = None

    def __init__(self, device: str):
        self.device = device
        self.name = f"reference-{device}"
        self.devices = frozenset({device})

    def version(self) -> str:
        """The reference's version."""
        return Reference().version()

    def available(self, device: str) -> Optional[str]:
        """``None`` when ``device`` is usable."""
        return Reference().available(self.device)

    def latency_call(self, batch: LatencyBatch) -> tuple:
        """``(fn, graphable=False)``: one step of rows ``Row(logits[i], temperature, top_k, top_p, min_p, seed=7+i)``.

        Raises
        ------
        LatencyUnsupported
            Outside :data:`REFERENCE_GRID`.
        """
        if batch.batch not in REFERENCE_GRID["batches"] or batch.vocab not in REFERENCE_GRID["vocabs"]:
            raise LatencyUnsupported(f"the reference (a per-row Python pipeline) is timed at batch "
                                     f"{REFERENCE_GRID['batches']} and vocab {REFERENCE_GRID['vocabs']} only")
        impl, device, params = Reference(), self.device, batch.params

        def call(x):
            xs = x.to(device)
            rows = [Row(xs[i], temperature=t, top_k=k, top_p=p, min_p=m, seed=7 + i, slot=i)
                    for i, (t, k, p, m) in enumerate(params)]
            return impl.open_session(device).step(rows)
        return call, False


IMPLEMENTATIONS = (Entry("reference-cuda", lambda: ReferencePeer("cuda")),
                   Entry("reference-cpu", lambda: ReferencePeer("cpu")))
