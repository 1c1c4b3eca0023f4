"""Latency-only peers: what the fused sampler is timed against that is not a sampler under test.

* ``torch-sort`` — PyTorch sort-based sampling, the shape of vLLM's native path
  (:func:`sort_based`);
* ``argmax`` — ``torch.argmax``, the floor of an all-greedy batch.

Both are entries of the implementation registry (:mod:`impls.registry`) with the
``latency`` role only: the corpus never runs on them.
"""

from __future__ import annotations

from typing import Optional

import torch

from ..base import LatencyBatch, LatencyUnsupported
from ..registry import Entry

__all__ = ["sort_based", "TorchSortPeer", "ArgmaxPeer", "IMPLEMENTATIONS"]


def sort_based(logits, T, K, P, M):
    """PyTorch sort-based sampling (the shape of vLLM's native path): temperature, min-p, top-k, top-p, race.

    Parameters
    ----------
    logits : torch.Tensor
        ``(B, V)`` float32.
    T, P, M : torch.Tensor
        ``(B,)`` float32 temperature (0: greedy), top-p, min-p.
    K : torch.Tensor
        ``(B,)`` int64 top-k (0: off).

    Returns
    -------
    torch.Tensor
        ``(B,)`` int64 tokens.
    """
    x = logits.float() / torch.where(T > 0, T, 1.0).unsqueeze(1)
    probs = torch.softmax(x, -1)
    keep_minp = probs >= (M.unsqueeze(1) * probs.max(-1, keepdim=True).values)
    x = x.masked_fill(~keep_minp, float("-inf"))
    xs, order = x.sort(-1, descending=True)
    V = x.shape[1]
    k = torch.where((K > 0) & (K < V), K, V)
    kth = xs.gather(1, (k - 1).unsqueeze(1))
    xs = xs.masked_fill(xs < kth, float("-inf"))
    ps = torch.softmax(xs, -1)
    cum = ps.cumsum(-1) - ps
    xs = xs.masked_fill(cum >= P.unsqueeze(1), float("-inf"))
    ps = torch.softmax(xs, -1)
    q = torch.empty_like(ps).exponential_()
    pick = (ps / q).argmax(-1)
    tok = order.gather(1, pick.unsqueeze(1)).squeeze(1)
    return torch.where(T > 0, tok, logits.argmax(-1))


class _Peer:
    """What both peers share: no profile, no corpus, every device torch has."""

    roles = frozenset({"latency"})
    devices = frozenset({"cpu", "cuda"})
    slow = False
    features = frozenset()
    stages: dict = {}
    profile = None

    def version(self) -> str:
        """torch's version."""
        return torch.__version__

    def available(self, device: str) -> Optional[str]:
        """``None`` where torch can allocate on ``device``."""
        if str(device).startswith("cuda") and not torch.cuda.is_available():
            return "no CUDA device"
        return None


class TorchSortPeer(_Peer):
    """``torch-sort``: :func:`sort_based` on the mix's per-row tensors."""

    name = "torch-sort"

    def latency_call(self, batch: LatencyBatch) -> tuple:
        """``(fn, graphable=False)``: ``fn(logits)`` is :func:`sort_based`."""
        T, K, P, M = batch.tensors()
        return (lambda x: sort_based(x, T, K, P, M)), False


class ArgmaxPeer(_Peer):
    """``argmax``: ``logits.argmax(-1)``, timed on all-greedy batches only."""

    name = "argmax"

    def latency_call(self, batch: LatencyBatch) -> tuple:
        """``(fn, graphable=True)``.

        Raises
        ------
        LatencyUnsupported
            For any mix but ``greedy``.
        """
        if batch.mix != "greedy":
            raise LatencyUnsupported("argmax is timed on all-greedy batches only")
        return (lambda x: x.argmax(-1)), True


IMPLEMENTATIONS = (Entry("torch-sort", TorchSortPeer), Entry("argmax", ArgmaxPeer))
