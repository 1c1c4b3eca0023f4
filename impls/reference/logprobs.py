"""RAW and PROCESSED logprobs, top-k logprobs and ranks (SEMANTICS §1.7)."""

from __future__ import annotations

import torch

__all__ = ["raw_logprobs", "top_logprobs", "rank"]


def raw_logprobs(x: torch.Tensor) -> torch.Tensor:
    """``log_softmax`` at temperature 1 of ``x`` (``(V,)``), same dtype.

    Which logits ``x`` are (after rewrites, or before any processing) is the
    profile's ``raw_logprobs_stage``.
    """
    return torch.log_softmax(x, dim=-1)


def top_logprobs(lp: torch.Tensor, k: int, token: int) -> list:
    """The ``k`` largest logprobs as ``(id, logprob)``, plus ``token`` if absent.

    Ties are ordered by lowest id (a stable descending sort).

    Parameters
    ----------
    lp : torch.Tensor
        ``(V,)`` logprobs.
    k : int
        ``>= 0``.
    token : int
        The sampled token, always included (§1.7).

    Returns
    -------
    list of (int, float)
    """
    order = torch.sort(lp, descending=True, stable=True).indices[:max(k, 0)].tolist()
    out = [(int(i), float(lp[i])) for i in order]
    if token not in order:
        out.append((int(token), float(lp[token])))
    return out


def rank(lp: torch.Tensor, token: int, rule: str) -> int:
    """Rank of ``token`` under ``lp`` (``(V,)``).

    ``rule == "strict_plus_one"`` (trtllm): 1 + number of tokens with a
    strictly greater logprob. ``"greater_equal"`` (vLLM): number of tokens
    with logprob ``>=`` (ties get the worst rank).
    """
    v = lp[token]
    if rule == "strict_plus_one":
        return 1 + int((lp > v).sum())
    if rule == "greater_equal":
        return int((lp >= v).sum())
    raise ValueError(f"unknown rank rule {rule!r}")
