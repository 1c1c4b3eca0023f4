"""RAW and PROCESSED logprobs, top-k logprobs and ranks (SEMANTICS §1.7)."""

from __future__ import annotations

import torch

from ..params import LOGPROBS_MODES

__all__ = ["raw_logprobs", "posinf_point_mass", "top_logprobs", "rank", "ranks", "mode_vector", "LOGPROBS_MODES"]


def posinf_point_mass(x: torch.Tensor) -> torch.Tensor:
    """The limit of ``softmax(x)`` when ``x`` holds ``+inf``: the point mass on its first ``+inf``.

    Parameters
    ----------
    x : torch.Tensor
        ``(V,)`` logits holding at least one ``+inf``.

    Returns
    -------
    torch.Tensor
        ``(V,)`` bool, True only at the lowest token id holding ``+inf``
        (the id ``torch.argmax`` returns for a row without NaN).

    Raises
    ------
    ValueError
        If ``x`` holds no ``+inf``.

    Source: profile field ``posinf_logits == "argmax"`` (SEMANTICS §5).
    """
    ids = torch.nonzero(torch.isposinf(x)).flatten()
    if ids.numel() == 0:
        raise ValueError("posinf_point_mass: the logits hold no +inf")
    out = torch.zeros(x.shape, dtype=torch.bool, device=x.device)
    out[int(ids[0])] = True
    return out


def raw_logprobs(x: torch.Tensor, posinf_logits: str = "error") -> torch.Tensor:
    """``log_softmax`` at temperature 1 of ``x`` (``(V,)``), same dtype.

    Which logits ``x`` are (after rewrites, or before any processing) is the
    profile's ``raw_logprobs_stage``.

    Parameters
    ----------
    x : torch.Tensor
        ``(V,)`` logits.
    posinf_logits : {"error", "argmax"}
        The profile's field. ``"argmax"``: logits holding ``+inf`` give the
        point mass of :func:`posinf_point_mass` (0 at the lowest ``+inf``
        id, ``-inf`` everywhere else, another ``+inf`` included);
        ``"error"``: plain ``log_softmax`` (NaN everywhere for such logits).

    Returns
    -------
    torch.Tensor
        ``(V,)`` logprobs, dtype of ``x``.

    Raises
    ------
    ValueError
        For an unknown ``posinf_logits``.
    """
    if posinf_logits not in ("error", "argmax"):
        raise ValueError(f"unknown posinf_logits rule {posinf_logits!r}")
    if posinf_logits == "argmax" and bool(torch.isposinf(x).any()):
        mass = posinf_point_mass(x)
        return torch.where(mass, torch.zeros_like(x), torch.full_like(x, float("-inf")))
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
    """Rank of ``token`` under ``lp`` (``(V,)``): :func:`ranks` of one token."""
    return int(ranks(lp, torch.tensor([int(token)]), rule)[0])


def ranks(lp: torch.Tensor, tokens: torch.Tensor, rule: str) -> torch.Tensor:
    """Ranks of ``tokens`` under ``lp``, one sort for all of them (counts by comparison for a few).

    Parameters
    ----------
    lp : torch.Tensor
        ``(V,)`` logprobs (NaN-free).
    tokens : torch.Tensor
        ``(n,)`` int64 token ids.
    rule : {"strict_plus_one", "greater_equal"}
        The profile's ``rank_rule``. ``"strict_plus_one"`` (trtllm): 1 +
        number of tokens with a strictly greater logprob. ``"greater_equal"``
        (vLLM): number of tokens with logprob ``>=`` (ties get the worst rank).

    Returns
    -------
    torch.Tensor
        ``(n,)`` int64.

    Raises
    ------
    ValueError
        For an unknown ``rule``.
    """
    if rule not in ("strict_plus_one", "greater_equal"):
        raise ValueError(f"unknown rank rule {rule!r}")
    v = lp[tokens.to(torch.int64)]
    if v.numel() <= 8 and not bool(torch.isnan(lp).any()):
        # a few tokens: count by comparison, O(nV) instead of a sort (the same counts without NaN)
        if rule == "strict_plus_one":
            return 1 + (lp.reshape(1, -1) > v.reshape(-1, 1)).sum(dim=1)
        return (lp.reshape(1, -1) >= v.reshape(-1, 1)).sum(dim=1)
    srt = torch.sort(lp).values
    n = srt.numel()
    if rule == "strict_plus_one":
        return 1 + n - torch.searchsorted(srt, v, right=True)
    return n - torch.searchsorted(srt, v, right=False)


def mode_vector(mode, raw_src: torch.Tensor, x: torch.Tensor, keep, temperature: float, probs: torch.Tensor,
                posinf_logits: str = "error") -> torch.Tensor:
    """The ``(V,)`` vector a row's logprobs are read from under ``logprobs_mode`` (SEMANTICS §1.7).

    Parameters
    ----------
    mode : str or None
        One of :data:`LOGPROBS_MODES`; None is ``"raw_logprobs"``.
    raw_src : torch.Tensor
        ``(V,)`` logits at the profile's ``raw_logprobs_stage``.
    x : torch.Tensor
        ``(V,)`` logits after the rewrites.
    keep : torch.Tensor or None
        ``(V,)`` bool kept set of a sampling row; None for a greedy or beam row.
    temperature : float
        The sampling row's temperature.
    probs : torch.Tensor
        ``(V,)`` the distribution sampled from (a sampling row's ``processed_logprobs`` is its log).
    posinf_logits : str
        The profile's field, for ``raw_logprobs`` (:func:`raw_logprobs`).

    Returns
    -------
    torch.Tensor
        ``raw_logprobs``: :func:`raw_logprobs` of ``raw_src``; ``raw_logits``: ``raw_src``;
        ``processed_logits``: a sampling row's ``x / T`` with ``-inf`` outside ``keep``, a greedy
        row's ``x``; ``processed_logprobs``: ``log(probs)`` of a sampling row, ``log_softmax(x)``
        of a greedy row.

    Raises
    ------
    ValueError
        An unknown mode.

    Source: vllm-project/vllm:vllm/v1/sample/sampler.py@v0.32.0 ``Sampler.forward`` (raw modes: the
    input logits before any processing, log-softmaxed or cloned) and ``Sampler.sample`` (processed
    modes: an all-greedy batch's logits after the logits processors; a sampling row's after
    temperature, min-p and top-k/top-p, from ``TopKTopPSampler``). vLLM reads a greedy row of a
    batch that also samples after temperature 1 and its filters: not modelled.
    """
    mode = mode or "raw_logprobs"
    if mode == "raw_logprobs":
        return raw_logprobs(raw_src, posinf_logits)
    if mode == "raw_logits":
        return raw_src.clone()
    if mode == "processed_logits":
        if keep is None:
            return x.clone()
        return torch.where(keep, x / temperature, torch.full_like(x, float("-inf")))
    if mode == "processed_logprobs":
        if keep is None:
            return torch.log_softmax(x, dim=-1)
        return torch.log(probs)
    raise ValueError(f"unknown logprobs_mode {mode!r}; known: {', '.join(LOGPROBS_MODES)}")
