"""Temperature, min-p, top-k and top-p: the kept set of a sampling row (SEMANTICS §1.5).

:func:`kept_set` returns a boolean mask ``(V,)`` of the tokens that survive
the filters, and :func:`processed_probs` the renormalised distribution the
draw uses. One row at a time; the kept set is decided in float64 (SEMANTICS §1.5),
the draw's distribution in the working dtype (float32 by default, float64 for oracles). Engine differences (order, joint vs
renormalised, tie rules, the top-p boundary rule) are profile fields.
"""

from __future__ import annotations

import torch

from ..profiles import Profile

__all__ = ["kept_set", "processed_probs", "min_p_mask", "top_k_mask", "top_p_mask"]


def _renorm(p: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    q = torch.where(keep, p, torch.zeros_like(p))
    return q / q.sum()


def min_p_mask(q: torch.Tensor, keep: torch.Tensor, min_p: float) -> torch.Tensor:
    """Keep ``q >= min_p * max(q)`` among ``keep`` (``q`` already renormalised or not:
    the rule is scale-invariant). ``min_p <= 0`` keeps all (§1.1 rule 6).

    Parameters
    ----------
    q : torch.Tensor
        ``(V,)`` probabilities (zeros outside ``keep``).
    keep : torch.Tensor
        ``(V,)`` bool, the tokens still alive.
    min_p : float

    Returns
    -------
    torch.Tensor
        ``(V,)`` bool, a subset of ``keep``.
    """
    if min_p <= 0:
        return keep
    top = q[keep].max()
    return keep & (q >= min_p * top)


def top_k_mask(q: torch.Tensor, keep: torch.Tensor, k: int, ties: str) -> torch.Tensor:
    """Keep the ``k`` most likely tokens among ``keep``.

    ``k`` outside ``(0, V)`` keeps all (§1.1 rule 6), as does ``k >=`` the
    number of survivors. ``ties == "keep_all"``: every token whose value
    equals the k-th largest is kept (so more than ``k`` may survive);
    ``"exactly_k"``: exactly ``k``, ties broken by lowest token id.

    Returns
    -------
    torch.Tensor
        ``(V,)`` bool, a subset of ``keep``.
    """
    V = q.shape[-1]
    alive = int(keep.sum())
    if not 0 < k < V or k >= alive:
        return keep
    vals = torch.where(keep, q, torch.full_like(q, -1.0))
    order = torch.sort(vals, descending=True, stable=True).indices
    if ties == "keep_all":
        kth = vals[order[k - 1]]
        return keep & (q >= kth)
    out = torch.zeros_like(keep)
    out[order[:k]] = True
    return out


def top_p_mask(q: torch.Tensor, keep: torch.Tensor, top_p: float, rule: str) -> torch.Tensor:
    """Nucleus filter on ``q`` (already renormalised over ``keep`` when the
    profile renormalises between filters).

    ``rule == "mass_above"`` (trtllm reference, FlashInfer): keep a token iff
    the mass of tokens strictly more likely than it is ``< top_p``. This is
    the minimal descending prefix reaching ``top_p`` plus every token tied
    with the last one kept; when the mass above every token is ``< top_p``
    (``top_p = 0.9999999`` and no token below ~1e-7), everything is kept.
    ``rule == "ascending_cumsum"`` (Hugging Face ``TopPLogitsWarper``):
    sort ascending (stable), remove tokens whose inclusive cumulative sum is
    ``<= 1 - top_p``, always keep the most likely one.
    ``top_p >= 1`` keeps all. Under either rule the most likely token (and
    its ties, under ``"mass_above"``) is always kept.

    Precision (SEMANTICS §1.5): exact arithmetic's answer for the ``top_p`` as given.
    ``top_p`` stays a float64 (an engine that rounds it to float32, where 0.9999999
    becomes 1 - 2**-23, differs from exact arithmetic: a finding, not a profile
    field); the masses are float64 sums of ``q``'s values, so a float32 cumulative
    sum's round-up near ``top_p = 1`` cannot drop a token. Ties are equal values of
    ``q``.

    Returns
    -------
    torch.Tensor
        ``(V,)`` bool, a subset of ``keep``.
    """
    if top_p >= 1.0:
        return keep
    q = q.to(torch.float64)
    vals = torch.where(keep, q, torch.zeros_like(q))
    if rule == "mass_above":
        s, order = torch.sort(vals, descending=True, stable=True)
        excl = torch.cumsum(s, 0) - s
        # first index of each tie group in the descending order
        first = torch.searchsorted(-s, -s, right=False)
        above = excl[first]
        # The most likely tokens are always kept (top_p = 0 would otherwise keep
        # nothing when a profile does not treat it as greedy).
        kept_sorted = (above < top_p) | (first == 0)
        out = torch.zeros_like(keep)
        out[order] = kept_sorted
        return keep & out
    if rule == "ascending_cumsum":
        s, order = torch.sort(vals, descending=False, stable=True)
        cum = torch.cumsum(s, 0)
        remove = cum <= (1 - top_p)
        remove[-1] = False
        out = torch.ones_like(keep)
        out[order] = ~remove
        return keep & out
    raise ValueError(f"unknown top_p rule {rule!r}")


def kept_set(x: torch.Tensor, res, profile: Profile) -> torch.Tensor:
    """The tokens a sampling row may draw.

    Parameters
    ----------
    x : torch.Tensor
        ``(V,)`` rewritten logits (after bias, penalties, bans), float32 or
        float64; ``-inf`` marks banned tokens. No NaN, no ``+inf``.
    res : impls.reference.modes.Resolved
        The row's resolved values, read by name: ``temperature`` (``> 0``) and one value per
        filter of ``profile.filter_order`` (``top_k`` 0, ``top_p`` 1.0, ``min_p`` 0.0 mean "off").
    profile : Profile
        Reads ``temperature_first``, ``filter_order``,
        ``filters_renormalise``, ``top_k_ties``, ``top_p_rule``.

    Returns
    -------
    torch.Tensor
        ``(V,)`` bool.

    Membership is decided in float64 whatever the dtype of ``x`` (the probabilities are
    ``softmax`` of the float64 values of ``x``, cumulative masses are float64 sums), so
    the kept set is exact arithmetic's up to ~1e-16; tokens tie iff their logits are
    equal. Source: SEMANTICS §1.5. Profile trtllm: ``probs = softmax(x / T)``, then
    min-p, then top-k, then top-p on the renormalised survivors.
    """
    # Membership is decided in float64 on the row's logits (SEMANTICS §1.5): a float32
    # cumulative sum can round up to >= top_p near top_p = 1 and drop a token that exact
    # arithmetic keeps. Equal logits stay exactly equal, so ties are ties of the logits.
    # Shift by the max before dividing, so a tiny temperature cannot overflow
    # x / T to inf (softmax is shift-invariant; the draw uses the same shift).
    x64 = x.to(torch.float64)
    top = x64[torch.isfinite(x64)].max()
    scaled = (x64 - top) / res.temperature if profile.temperature_first else x64 - top
    p = torch.softmax(scaled, dim=-1)
    finite = torch.isfinite(x64)
    keep, cur = finite, p
    filters = {
        "min_p": lambda q, k: min_p_mask(q, k, res.min_p),
        "top_k": lambda q, k: top_k_mask(q, k, res.top_k, profile.top_k_ties),
        "top_p": lambda q, k: top_p_mask(q, k, res.top_p, profile.top_p_rule),
    }
    for name in profile.filter_order:
        if name not in filters:
            raise ValueError(f"unknown filter {name!r} in profile {profile.name}")
        if profile.filters_renormalise:
            # each filter sees the renormalised survivors of the previous one
            keep = filters[name](cur, keep)
            cur = _renorm(p, keep)
        else:
            # joint: every filter judges the original distribution
            keep = keep & filters[name](p, finite)
    return keep


def processed_probs(x: torch.Tensor, keep: torch.Tensor, temperature: float) -> torch.Tensor:
    """The distribution sampled from: ``softmax(x / T)`` restricted to ``keep``.

    Returns
    -------
    torch.Tensor
        ``(V,)`` same dtype as ``x``, zeros outside ``keep``, summing to 1.
    """
    top = x[keep].max()
    scaled = torch.where(keep, (x - top) / temperature, torch.full_like(x, float("-inf")))
    return torch.softmax(scaled, dim=-1)
