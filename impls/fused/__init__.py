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

from ..base import LatencyBatch, Row, RowError, RowResult, claim_slot
from ..profiles import TRTLLM
from ..registry import Entry

__all__ = ["FusedImpl", "FusedSession", "FUSED_VERSION", "IMPLEMENTATIONS"]

#: Bumped whenever the kernel's decisions change.
FUSED_VERSION = "3"


#: The per-row arguments of :func:`impls.fused.ops.fused_sample`, by name, with their dtypes.
_PARAM_DTYPES = {"temperature": torch.float32, "top_k": torch.int64, "top_p": torch.float64, "min_p": torch.float32,
                 "seed": torch.int64, "offset": torch.int64}
#: A greedy row's arguments: temperature 0 (SEMANTICS §1.1), the filters off, no draw.
_GREEDY_PARAMS = {"temperature": 0.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0, "seed": 0, "offset": 0}


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
        from ..reference.sampler import rewrite_logits, token_outputs, vector_outputs
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
                    params = dict(_GREEDY_PARAMS)
                else:
                    seed, off = self.seeds.take(row.slot)
                    params = {"temperature": res.temperature, "top_k": res.top_k, "top_p": res.top_p,
                              "min_p": res.min_p, "seed": seed, "offset": off}
                staged[i] = (res, x, params)
            except RowError as e:
                out[i] = RowResult.failed(e)
        by_vocab: dict = {}
        for i in staged:
            by_vocab.setdefault(rows[i].vocab, []).append(i)
        for V, idx in by_vocab.items():
            x = torch.stack([staged[i][1] for i in idx])
            # one (batch,) tensor per argument of fused_sample, by name
            args = {name: torch.tensor([staged[i][2][name] for i in idx], dtype=dt, device=self.device)
                    for name, dt in _PARAM_DTYPES.items()}
            tok, status, path, probs = fused_sample(x, **args, want_probs=True)
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
                    r.extra.update(seed=params["seed"], offset=params["offset"])
                r.raw_logprobs = raw_logprobs(xr)
                for key, v in (*vector_outputs(rows[i], r.raw_logprobs).items(),
                               *token_outputs(rows[i], t, r.raw_logprobs, probs[j], TRTLLM).items()):
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
            tok, status, _, _ = fused_sample(x.expand(n, V), temperature=full(T, torch.float32),
                                             top_k=full(res.top_k, torch.int64), top_p=full(res.top_p, torch.float64),
                                             min_p=full(res.min_p, torch.float32),
                                             seed=torch.tensor(part, dtype=torch.int64, device=self.device),
                                             offset=full(0, torch.int64))
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
    roles = frozenset({"conformance", "latency"})
    #: Every single-step feature: the kernel samples, the reference's code does the rest (``stages``).
    features = frozenset({
        "temperature", "top_k", "top_p", "min_p", "top_p_decay", "beam_search", "repetition_penalty",
        "presence_penalty", "frequency_penalty", "prompt_ignore_length", "logit_bias", "min_length", "bad_words",
        "no_repeat_ngram", "end_id", "end_id_set", "ignore_eos", "stop_words", "max_new_tokens", "max_seq_len",
        "seed", "logprobs", "processed_logits", "canonical_rng", "low_precision_logits", "finish_reason",
    })
    devices = frozenset({"cpu", "cuda"})
    #: Timed on a GPU only (on a CPU it runs under Triton's interpreter, a correctness tool).
    latency_devices = frozenset({"cuda"})
    slow = False
    #: The kernel filters and draws; validation, rewrites, seed bookkeeping, logprobs and finish
    #: reasons are the reference's PyTorch code around it (the module docstring's pipeline).
    stages = {"validation": "reference", "logit_bias": "reference", "penalties": "reference", "bans": "reference",
              "filters": "own", "draw": "own", "seeds": "reference", "logprobs": "reference",
              "finish": "reference"}

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

    def latency_call(self, batch: LatencyBatch) -> tuple:
        """``(fn, graphable=True)``: :func:`impls.fused.ops.fused_sample` on the mix's per-row tensors."""
        from .ops import fused_sample
        T, K, P, M = batch.tensors()
        seed, off = batch.seeds()
        return (lambda x: fused_sample(x, T, K, P, M, seed, off)), True


IMPLEMENTATIONS = (Entry("fused", FusedImpl),)
