"""A plain PyTorch top-k/top-p sampler, as a third-party package would plug it into sampcheck.

Per row of a step (:meth:`ExampleSession.step`):

1. the slot check (:func:`impls.base.claim_slot`: one row per slot, 1-D logits);
2. validation: ``temperature >= 0``, ``top_p`` in ``(0, 1]``, ``top_k >= 0``, an integer
   seed in ``[-2**63, 2**64)``, no NaN logit (a rejected row carries its error kind; the
   rest of the batch is sampled);
3. defaults: ``temperature`` 1, ``top_k`` 0 (off), ``top_p`` 1 (off): a row that sets
   nothing samples; ``temperature == 0`` is greedy (``torch.argmax``: the lowest id of a tie);
4. sampling: ``softmax(x / T)``; top-k keeps every token whose logit is at least the k-th
   largest (ties kept); top-p, on the renormalised top-k survivors, keeps a token while the
   mass strictly above it is below ``top_p``; then ``torch.multinomial`` on a
   ``torch.Generator`` seeded with the request's seed folded to 32 bits (:func:`fold_seed`;
   kept per slot while the same request holds it), or torch's global generator for an
   unseeded row.

Everything differing from sampcheck's default profile is a field of :data:`EXAMPLE_TORCH`,
cited to this file.
"""

from __future__ import annotations

import dataclasses
import operator
from typing import Optional

import torch

from impls.base import Row, RowError, RowResult, claim_slot
from impls.profiles import TRTLLM

__all__ = ["ExampleTorchSampler", "ExampleSession", "EXAMPLE_TORCH", "fold_seed", "__version__"]

__version__ = "0.1.0"
_HERE = f"sampcheck-example-torch:src/sampcheck_example_torch/__init__.py@{__version__}"

#: The semantics of this sampler, as deltas from sampcheck's default profile, each cited.
EXAMPLE_TORCH = dataclasses.replace(
    TRTLLM,
    name="example-torch",
    versions=f"=={__version__}",
    description="sampcheck-example-torch: plain PyTorch temperature, top-k, top-p, torch.multinomial",
    greedy_when_unset=False,
    explicit_greedy=frozenset({"temperature_0"}),
    top_p_zero_valid=False,
    rng="other",
    citations={
        "greedy_when_unset": f"{_HERE} ExampleSession._resolve (temperature defaults to 1.0: a row that sets "
                             "nothing samples)",
        "explicit_greedy": f"{_HERE} ExampleSession._resolve (only temperature == 0 is greedy; top_k = 1 "
                           "samples its one kept token)",
        "top_p_zero_valid": f"{_HERE} ExampleSession._resolve (top_p must lie in (0, 1])",
        "rng": f"{_HERE} ExampleSession._draw (torch.multinomial on a per-request torch.Generator)",
    },
)


def fold_seed(seed: int) -> int:
    """The 64 bits of ``seed`` hashed into the 32 that torch's CPU generator (mt19937) keeps.

    ``torch.Generator.manual_seed`` on a CPU keeps only the low 32 bits, so seeds that differ
    only in their high bits would draw identically (sampcheck's case
    ``seeds/seed-high-bits-matter``); XOR-ing the halves would still make 2**63 and 2**63 - 1
    collide (``seeds/seed-2pow63-reinterpreted-not-clamped``). The finaliser of SplitMix64
    (Steele, Lea and Flood 2014) mixes every input bit into every output bit.
    """
    m = (1 << 64) - 1
    z = (seed + 0x9E3779B97F4A7C15) & m
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & m
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & m
    return (z ^ (z >> 31)) & 0xFFFFFFFF


class ExampleSession:
    """Per-slot generators of one decode."""

    def __init__(self, device: str = "cpu"):
        self.device = torch.device(device)
        self._gens: dict = {}   # slot -> (request id, seed, generator)

    @staticmethod
    def _resolve(row: Row) -> tuple:
        t = 1.0 if row.temperature is None else row.temperature
        k = 0 if row.top_k is None else row.top_k
        p = 1.0 if row.top_p is None else row.top_p
        if not t >= 0:
            raise RowError("invalid_temperature", f"temperature={t!r}: must be >= 0")
        if not 0 < p <= 1:
            raise RowError("invalid_top_p", f"top_p={p!r}: must be in (0, 1]")
        if not isinstance(k, int) or k < 0:
            raise RowError("invalid_top_k", f"top_k={k!r}: must be an integer >= 0")
        if row.seed is not None:
            try:
                s = operator.index(row.seed)
            except TypeError:
                raise RowError("invalid_seed", f"seed={row.seed!r}: must be an integer") from None
            if not -(1 << 63) <= s < (1 << 64):
                raise RowError("invalid_seed", f"seed={s}: outside [-2**63, 2**64)")
        return t, k, p

    def _generator(self, row: Row) -> Optional[torch.Generator]:
        if row.seed is None:
            return None
        held = self._gens.get(row.slot)
        if held is None or held[0] != row.request_id or held[1] != row.seed:
            g = torch.Generator(device=self.device)
            g.manual_seed(fold_seed(row.seed))
            held = self._gens[row.slot] = (row.request_id, row.seed, g)
        return held[2]

    @staticmethod
    def _kept(probs: torch.Tensor, x: torch.Tensor, k: int, p: float) -> torch.Tensor:
        keep = torch.isfinite(x)
        V = x.shape[-1]
        if 0 < k < V:
            kth = torch.topk(x, k).values[-1]
            keep &= x >= kth
        if p < 1:
            q = torch.where(keep, probs, torch.zeros_like(probs))
            q = q / q.sum()
            order = torch.argsort(q, descending=True, stable=True)
            above = torch.cumsum(q[order], 0) - q[order]
            top = torch.zeros_like(keep)
            top[order] = above < p
            # tokens tied with the last kept one stay (the mass above a tie is the same)
            last = q[order][top[order]].min()
            keep &= top | (q == last)
        return keep

    def step(self, rows) -> list:
        """Sample one step; one :class:`impls.base.RowResult` per row, in order."""
        out, used = [], set()
        for row in rows:
            try:
                claim_slot(row, used)
                t, k, p = self._resolve(row)
                x = row.logits.to(self.device, torch.float32)
                if torch.isnan(x).any():
                    raise RowError("nan_logits", "NaN logit")
                if t == 0:
                    tok = int(torch.argmax(x))
                    probs = torch.zeros_like(x)
                    probs[tok] = 1.0
                    out.append(RowResult(token=tok, mode="greedy", probs=probs))
                    continue
                if torch.isposinf(x).any():
                    raise RowError("posinf_logits", "+inf logit in a sampling row")
                if not torch.isfinite(x).any():
                    raise RowError("no_valid_token", "every logit is -inf")
                y = (x - x[torch.isfinite(x)].max()) / t
                probs = torch.softmax(y, -1)
                keep = self._kept(probs, y, k, p)
                probs = torch.where(keep, probs, torch.zeros_like(probs))
                probs = probs / probs.sum()
                tok = int(torch.multinomial(probs, 1, generator=self._generator(row)))
                out.append(RowResult(token=tok, mode="sampling", probs=probs))
            except RowError as e:
                out.append(RowResult.failed(e))
        return out


class ExampleTorchSampler:
    """The sampler behind sampcheck's implementation protocol (``docs/adapters.md``)."""

    name = "example-torch"
    profile = EXAMPLE_TORCH
    features = frozenset({"temperature", "top_k", "top_p", "seed", "low_precision_logits"})
    devices = frozenset({"cpu", "cuda"})
    slow = False
    stages = {"validation": "own", "filters": "own", "draw": "own", "seeds": "own"}

    def version(self) -> str:
        """This package's version."""
        return __version__

    def available(self, device: str) -> Optional[str]:
        """``None`` where torch can allocate on ``device``."""
        if str(device).startswith("cuda") and not torch.cuda.is_available():
            return "no CUDA device"
        return None

    def unsupported(self, row: Row) -> Optional[str]:
        """Every row it has the features for is expressible."""
        return None

    def open_session(self, device: str = "cpu") -> ExampleSession:
        """A fresh session: no generators yet."""
        return ExampleSession(device)
