"""The fused GPU sampler (one Triton kernel) as an implementation under test.

Pipeline of :meth:`FusedSession.step`, in order:

1. per row on the host, as an engine does at admission: the slot check, the
   reference's validation and mode resolution (:func:`impls.reference.modes.resolve`),
   which turns unset parameters into the tensors' sentinels (a greedy row gets
   ``temperature = 0``);
2. the reference's logits rewrites (bias, penalties, bans; PyTorch on the
   device), NaN left for the kernel to report;
3. ``(seed, offset)`` per sampling row from the same per-slot bookkeeping as
   the reference (:class:`impls.reference.seeds.SeedManager`);
4. one call of :func:`impls.fused.ops.fused_sample` per vocabulary size
   (temperature, min-p, top-k, top-p, greedy and the canonical draw, all on
   the device; a few kernel launches, see :mod:`impls.fused.kernel`), with
   the probabilities of the same filtering;
5. logprobs and finish reasons from the reference's functions at the token
   the kernel drew.

On a CPU the kernel runs under Triton's interpreter (``TRITON_INTERPRET=1``
must be set before Triton is imported; :meth:`FusedImpl.available` says so).
"""

from __future__ import annotations

import os
from typing import Optional, Sequence

import torch

from ..base import FEATURES, Row, RowError, RowResult, claim_slot
from ..profiles import TRTLLM

__all__ = ["FusedImpl", "FusedSession", "FUSED_VERSION"]

#: Bumped whenever the kernel's decisions change.
FUSED_VERSION = "2"


def _triton_state(device: str) -> Optional[str]:
    try:
        import triton  # noqa: F401
    except ImportError:
        return "triton is not installed"
    if device == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
        return "on a CPU the fused kernel needs TRITON_INTERPRET=1 set before the run starts"
    if device.startswith("cuda") and not torch.cuda.is_available():
        return "no CUDA device"
    if device.startswith("cuda") and os.environ.get("TRITON_INTERPRET") == "1":
        return "TRITON_INTERPRET=1 is set: compiled GPU kernels need a process without it"
    return None


class FusedSession:
    """Per-slot state of the fused sampler (the reference's seed bookkeeping)."""

    def __init__(self, device: str = "cpu"):
        from ..reference.seeds import SeedManager
        self.device = torch.device(device)
        self.seeds = SeedManager(TRTLLM)

    def step(self, rows: Sequence[Row]) -> list:
        """Sample one step; see the module docstring for the pipeline.

        Returns
        -------
        list of RowResult
        """
        from ..reference.modes import BEAM, GREEDY, effective_seed, resolve
        from ..reference.sampler import rewrite_logits, token_outputs
        from ..reference.logprobs import raw_logprobs
        from .kernel import STATUS_KINDS, PATHS
        from .ops import fused_sample

        out: list = [None] * len(rows)
        staged = {}
        used = set()
        for i, row in enumerate(rows):
            try:
                claim_slot(row, used)
                res = resolve(row, TRTLLM)
                x = rewrite_logits(row.logits.to(self.device).to(torch.float32), row, TRTLLM, allow_nan=True)
                self.seeds.observe(row.slot, row.request_id, effective_seed(row))
                if res.mode in (GREEDY, BEAM):
                    params = (0.0, 0, 1.0, 0.0, 0, 0)
                else:
                    seed, off = self.seeds.take(row.slot)
                    params = (res.temperature, res.top_k, res.top_p, res.min_p, seed, off)
                staged[i] = (res, x, params)
            except RowError as e:
                out[i] = RowResult.failed(e)
        by_vocab: dict = {}
        for i in staged:
            by_vocab.setdefault(rows[i].vocab, []).append(i)
        for V, idx in by_vocab.items():
            x = torch.stack([staged[i][1] for i in idx])
            cols = list(zip(*[staged[i][2] for i in idx]))
            f32 = lambda c: torch.tensor(c, dtype=torch.float32, device=self.device)
            i64 = lambda c: torch.tensor(c, dtype=torch.int64, device=self.device)
            tok, status, path, probs = fused_sample(x, f32(cols[0]), i64(cols[1]), f32(cols[2]), f32(cols[3]),
                                                    i64(cols[4]), i64(cols[5]), want_probs=True)
            for j, i in enumerate(idx):
                res, xr, params = staged[i]
                kind = STATUS_KINDS[int(status[j])]
                if kind is not None:
                    out[i] = RowResult(error=kind, message=f"rejected by the fused kernel ({kind})")
                    continue
                t = int(tok[j])
                r = RowResult(token=t, mode=res.mode, rewritten_logits=xr, probs=probs[j],
                              extra={"path": PATHS[int(path[j])]})
                if res.mode not in (GREEDY, BEAM):
                    r.extra.update(seed=params[4], offset=params[5])
                r.raw_logprobs = raw_logprobs(xr)
                for key, v in token_outputs(rows[i], t, r.raw_logprobs, probs[j], TRTLLM).items():
                    setattr(r, key, v)
                out[i] = r
        return out

    def sample_many(self, row: Row, seeds: Sequence[int], chunk: int = 4096) -> torch.Tensor:
        """``(V,)`` int64 counts of one draw per seed (offset 0), in batched launches.

        Raises
        ------
        RowError
            If the row is rejected.
        """
        from ..reference.modes import SAMPLING, effective_seed, resolve
        from ..reference.sampler import rewrite_logits
        from .kernel import STATUS_KINDS
        from .ops import fused_sample

        res = resolve(row, TRTLLM)
        x = rewrite_logits(row.logits.to(self.device).to(torch.float32), row, TRTLLM, allow_nan=True)
        V = x.shape[-1]
        counts = torch.zeros(V, dtype=torch.int64)
        T = res.temperature if res.mode == SAMPLING else 0.0
        for start in range(0, len(seeds), chunk):
            part = [effective_seed(row.replace(seed=int(s))) for s in seeds[start:start + chunk]]
            n = len(part)
            full = lambda v, dt: torch.full((n,), v, dtype=dt, device=self.device)
            tok, status, _, _ = fused_sample(x.expand(n, V), full(T, torch.float32), full(res.top_k, torch.int64),
                                             full(res.top_p, torch.float32), full(res.min_p, torch.float32),
                                             torch.tensor(part, dtype=torch.int64, device=self.device),
                                             full(0, torch.int64))
            bad = status != 0
            if bool(bad.any()):
                kind = STATUS_KINDS[int(status[bad][0])]
                raise RowError(kind, f"rejected by the fused kernel ({kind})")
            counts += torch.bincount(tok.cpu(), minlength=V)
        return counts


class FusedImpl:
    """The fused Triton sampler behind the implementation protocol (profile ``trtllm``)."""

    name = "fused"
    profile = TRTLLM
    features = frozenset(FEATURES)

    def version(self) -> str:
        """Kernel rule version and the Triton version it runs on."""
        import triton
        return f"{FUSED_VERSION} (triton {triton.__version__})"

    def available(self, device: str) -> Optional[str]:
        """``None`` when the kernel can run on ``device``, else the reason."""
        return _triton_state(device)

    def unsupported(self, row: Row) -> Optional[str]:
        """Every single-step row is expressible: always ``None``."""
        return None

    def open_session(self, device: str = "cpu") -> FusedSession:
        """A fresh :class:`FusedSession`."""
        return FusedSession(device)
