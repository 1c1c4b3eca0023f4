"""Temperature, min-p, top-k and top-p: the kept set of a sampling row (SEMANTICS §1.5).

:func:`kept_set` returns a boolean mask ``(V,)`` of the tokens that survive
the filters, and :func:`processed_probs` the renormalised distribution the
draw uses. One row at a time; the kept set is decided in float64 (SEMANTICS §1.5),
the draw's distribution in the working dtype (float32 by default, float64 for oracles). Engine differences (order, joint vs
renormalised, tie rules, the top-p boundary rule) are profile fields.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import torch

from .. import processors
from ..profiles import Profile

__all__ = ["kept_set", "chain", "Outcome", "processed_probs", "mixture_probs", "min_p_mask", "top_k_mask",
           "top_p_mask", "top_n_sigma_mask", "typical_mask", "xtc_cut", "dynamic_temperature"]


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
    ``rule == "prefix_reaches"`` (llama.cpp ``llama_sampler_top_p_apply``): the shortest
    descending prefix (ties by lowest id: llama.cpp's sort order among ties is unspecified)
    whose mass is ``>= top_p``, no tie rule.
    ``rule == "prefix_exceeds"`` (SGLang ``top_k_top_p_min_p_sampling_from_probs_torch``: a
    token goes when the mass sorted before it is ``> top_p``): the shortest descending prefix
    (ties by lowest id) whose mass is ``> top_p``, all kept when none is.
    ``top_p >= 1`` keeps all. Under every rule the most likely token (and
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
    if rule == "prefix_reaches":
        s, order = torch.sort(vals, descending=True, stable=True)
        cum = torch.cumsum(s, 0)
        hit = torch.nonzero(cum >= top_p).flatten()
        last = int(hit[0]) + 1 if len(hit) else int(keep.sum())
        out = torch.zeros_like(keep)
        out[order[:max(last, 1)]] = True
        return keep & out
    if rule == "prefix_exceeds":
        s, order = torch.sort(vals, descending=True, stable=True)
        excl = torch.cumsum(s, 0) - s
        out = torch.zeros_like(keep)
        out[order] = excl <= top_p
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


@dataclass
class Outcome:
    """One way a sampling row's chain can end (SEMANTICS §1.5).

    Attributes
    ----------
    keep : torch.Tensor
        ``(V,)`` bool, the tokens the draw may pick.
    temperature : float
        The temperature of the draw: the row's, or the dynamic one (``dynatemp_range > 0``).
    weight : float
        The chance of this outcome: 1.0, or XTC's ``probability`` / ``1 - probability``
        when its coin decides between two outcomes.
    order : str
        The order of the candidates when the draw walks them (a profile with ``rng ==
        "mt19937"``): ``"id"`` (the order the array was built in), ``"descending"`` (by logit,
        ties by lowest id) or ``"typical"`` (by ``|-log p - H|`` ascending, ties by lowest id).
    typical_key : torch.Tensor or None
        ``(V,)`` float64 ``|-log p - H|`` of typical-p's pass, for ``order == "typical"``.
    xtc_cut : bool
        Whether XTC's coin fell on "cut" in this outcome.
    xtc_coin : bool
        Whether XTC drew its coin (it was active and saw at least two tokens): the
        outcomes are then in coin order, the cut (``coin <= probability``) first.
    mirostat : impls.reference.mirostat.MirostatStep or None
        A mirostat row's step (SEMANTICS §1.5a): its kept prefix in array order and the float32
        probabilities its own draw (``std::discrete_distribution``) and the update of ``mu`` read.
    """

    keep: torch.Tensor
    temperature: float
    weight: float = 1.0
    order: str = "id"
    typical_key: Optional[torch.Tensor] = None
    xtc_cut: bool = False
    xtc_coin: bool = False
    mirostat: Optional[object] = None


def _mirostat_outcome(x: torch.Tensor, res) -> "Outcome":
    """A mirostat row (``res.mirostat`` 1 or 2): the temperature, then mirostat's cut (:mod:`.mirostat`).

    common_sampler_init builds no other filter with mirostat, so the row's top-k, top-p, min-p,
    typical-p, top-n-sigma, XTC and dynamic temperature are not applied.
    """
    from .mirostat import mirostat_step
    st = mirostat_step(x, res.temperature, res.mirostat, res.mirostat_tau, res.mirostat_eta, res.mirostat_mu)
    keep = torch.zeros(x.shape[-1], dtype=torch.bool, device=x.device)
    keep[torch.from_numpy(st.ids).to(x.device)] = True
    return Outcome(keep, res.temperature, 1.0, "descending", mirostat=st)


def _keep_first(keep: torch.Tensor, out: torch.Tensor, key: torch.Tensor, n: int) -> torch.Tensor:
    """``out`` plus the first ``n`` tokens of ``keep`` by ascending ``key`` (ties lowest id): min_keep."""
    if n <= 0:
        return out
    big = torch.where(keep, key, torch.full_like(key, float("inf")))
    order = torch.sort(big, stable=True).indices[:min(n, int(keep.sum()))]
    out = out.clone()
    out[order] = True
    return out


def top_n_sigma_mask(z: torch.Tensor, keep: torch.Tensor, n: float) -> torch.Tensor:
    """Keep ``z >= max(z) - n * std(z)`` among ``keep`` (population std of the kept finite ``z``).

    ``z`` are logits on any scale (dividing by a temperature scales max and std alike, so
    the set does not depend on where temperature stands). ``n <= 0`` or fewer than two
    survivors: no cut. Source: llama.cpp ``llama_sampler_top_n_sigma_apply`` (the profile's
    ``filter_order`` citation); it leaves the cut tokens in its array at ``-inf``.
    """
    if n <= 0 or int(keep.sum()) <= 1:
        return keep
    v = z[keep]
    std = torch.sqrt(((v - v.mean()) ** 2).mean())
    # llama.cpp removes a token when its logit is < max - n * std: a NaN bound (n = inf, std = 0) removes none
    return keep & ~(z < v.max() - n * std)


def typical_mask(q: torch.Tensor, keep: torch.Tensor, mass: float, min_keep: int, rule: str):
    """Locally typical sampling on ``q`` (renormalised over ``keep``).

    ``H = -sum q log q``; tokens in ascending ``|-log q - H|`` (ties by lowest id) are kept up
    to ``mass``: under ``rule == "mass_above"`` a token is kept iff the mass of the tokens
    strictly more typical than it is ``< mass`` (ties at the boundary kept: Hugging Face
    ``TypicalLogitsWarper``, whose ``last_ind`` counts ``cumsum < mass``); under
    ``"prefix_exceeds"`` the shortest prefix whose mass is ``> mass`` (llama.cpp
    ``llama_sampler_typical_apply``: ``cum_sum > p``, no tie rule). Either way at least
    ``max(min_keep, 1)`` tokens stay. ``mass >= 1`` keeps all.

    Returns
    -------
    (torch.Tensor, torch.Tensor)
        ``(V,)`` bool kept set, and ``(V,)`` float64 keys ``|-log q - H|`` (inf outside ``keep``).
    """
    q = q.to(torch.float64)
    inf = torch.full_like(q, float("inf"))
    if mass >= 1.0:
        return keep, inf
    lq = torch.where(keep & (q > 0), torch.log(q), torch.zeros_like(q))
    H = -(torch.where(keep, q, torch.zeros_like(q)) * lq).sum()
    key = torch.where(keep, torch.abs(-lq - H), inf)
    s, order = torch.sort(key, stable=True)
    qs = torch.where(keep, q, torch.zeros_like(q))[order]
    cum = torch.cumsum(qs, 0)
    n = int(keep.sum())
    if rule == "mass_above":
        first = torch.searchsorted(s, s, right=False)
        above = (cum - qs)[first]
        kept_sorted = (above < mass) | (first == 0)
    elif rule == "prefix_exceeds":
        hit = torch.nonzero(cum[:n] > mass).flatten()
        last = int(hit[0]) + 1 if len(hit) else n
        kept_sorted = torch.arange(len(q)) < last
    else:
        raise ValueError(f"unknown typical_p rule {rule!r}")
    out = torch.zeros_like(keep)
    out[order] = kept_sorted
    out = keep & out
    return _keep_first(keep, out, key, max(min_keep, 1)), key


def xtc_cut(q: torch.Tensor, keep: torch.Tensor, threshold: float, min_keep: int) -> torch.Tensor:
    """XTC's cut, when its coin says so: drop every token at least ``threshold`` likely but the least likely one.

    Among ``keep`` in descending ``q`` (ties by lowest id), ``last`` is the position of the
    last token of the leading run with ``q >= threshold``; when ``last > 0`` and at least
    ``min_keep`` tokens remain, the first ``last`` are removed. Fewer than two survivors: no
    cut. Source: llama.cpp ``llama_sample_xtc_apply``.
    """
    n = int(keep.sum())
    if n < 2:
        return keep
    vals = torch.where(keep, q.to(torch.float64), torch.full_like(q, -1.0, dtype=torch.float64))
    order = torch.sort(vals, descending=True, stable=True).indices[:n]
    run = vals[order] >= threshold
    last = 0
    for i in range(n):
        if not bool(run[i]):
            break
        last = i
    if last > 0 and n - last >= min_keep:
        out = keep.clone()
        out[order[:last]] = False
        return out
    return keep


def dynamic_temperature(x64: torch.Tensor, keep: torch.Tensor, res) -> float:
    """The dynamic temperature of a row (``res.dynatemp_range > 0``), else ``res.temperature``.

    ``T' = lo + (hi - lo) * (H / log n) ** exponent`` with ``lo = max(0, T - range)``,
    ``hi = T + range``, ``H`` the entropy of ``softmax(x)`` over the ``n`` kept tokens (``n <= 1``:
    no change). ``x64`` are the logits the temperature stage sees. Source: llama.cpp
    ``llama_sampler_temp_ext_apply``.
    """
    T, rng = res.temperature, res.dynatemp_range
    n = int(keep.sum())
    if not rng > 0 or n <= 1:   # llama.cpp tests delta > 0: a NaN range is the plain temperature
        return T
    lo, hi = max(0.0, T - rng), T + rng
    v = x64[keep]
    p = torch.softmax(v - v.max(), dim=-1)
    H = float(-(torch.where(p > 0, p * torch.log(p), torch.zeros_like(p))).sum())
    return lo + (hi - lo) * (H / math.log(n)) ** res.dynatemp_exponent


def _check_row(x: torch.Tensor) -> None:
    # chain's precondition, located: a +inf or NaN logit has no softmax to filter (the filters would index
    # an empty or NaN-ordered kept set), a row of -inf nothing to keep
    for name, bad in (("NaN", torch.isnan(x)), ("+inf", torch.isposinf(x))):
        if bool(bad.any()):
            raise ValueError(f"filters.chain: logit {name} at token id {int(bad.nonzero()[0, 0])} (of {x.numel()}): "
                             "a sampling row's logits must be finite or -inf")
    if not bool(torch.isfinite(x).any()):
        raise ValueError(f"filters.chain: no finite logit in the row (all {x.numel()} are -inf): nothing to keep")


def chain(x: torch.Tensor, res, profile: Profile) -> list:
    """The outcomes of a sampling row's filters: one, or two when XTC's coin decides.

    Parameters
    ----------
    x : torch.Tensor
        ``(V,)`` rewritten logits (after bias, penalties, bans), float32 or float64;
        ``-inf`` marks banned tokens. No NaN, no ``+inf``.
    res : impls.reference.modes.Resolved
        The row's resolved values, read by name: ``temperature`` (``> 0``), one value per
        filter of ``profile.filter_order`` (``top_k`` 0, ``top_p`` 1.0, ``min_p`` 0.0,
        ``typical_p`` 1.0, ``top_n_sigma`` 0.0, ``xtc_probability`` 0.0 mean "off"),
        ``min_keep``, ``dynatemp_range``.
    profile : Profile
        Reads ``temperature_first``, ``filter_order``, ``filters_renormalise``,
        ``top_k_ties``, ``top_p_rule``, ``typical_p_rule``.

    Returns
    -------
    list of Outcome
        Weights summing to 1. With ``0 < xtc_probability < 1`` and a cut that changes the
        set: the cut (weight ``p``) then the uncut outcome.

    Raises
    ------
    ValueError
        If ``x`` holds NaN or ``+inf`` (the harness rejects such rows before sampling: ``bad_input``
        cases) or no finite logit; the message names the first offending token id.

    Membership is decided in float64 whatever the dtype of ``x`` (the probabilities are
    ``softmax`` of the float64 values of ``x``, cumulative masses are float64 sums), so
    the kept set is exact arithmetic's up to ~1e-16; tokens tie iff their logits are
    equal. ``"custom"`` in ``filter_order`` runs the row's argmax-invariant custom logits processors
    (:func:`impls.processors.filter_keep`) on the temperature-scaled logits (§1.4b).
    Source: SEMANTICS §1.5. Profile trtllm: ``probs = softmax(x / T)``, then
    min-p, then top-k, then top-p on the renormalised survivors, then the filters only
    llama.cpp has (top-n-sigma, typical-p, XTC). A mirostat row (``res.mirostat`` 1 or 2) is
    one outcome, mirostat's cut after the temperature, decided in float32 as llama.cpp does
    (§1.5a, :mod:`.mirostat`). With ``temperature_first`` False
    (llama.cpp) the filters see ``softmax(x)`` and the temperature (dynamic or not) is
    applied last; with it True a dynamic temperature is computed on every finite token
    before the filters.
    """
    _check_row(x)
    if getattr(res, "mirostat", 0) in (1, 2):
        return [_mirostat_outcome(x, res)]
    # Membership is decided in float64 on the row's logits (SEMANTICS §1.5): a float32
    # cumulative sum can round up to >= top_p near top_p = 1 and drop a token that exact
    # arithmetic keeps. Equal logits stay exactly equal, so ties are ties of the logits.
    # Shift by the max before dividing, so a tiny temperature cannot overflow
    # x / T to inf (softmax is shift-invariant; the draw uses the same shift).
    x64 = x.to(torch.float64)
    finite = torch.isfinite(x64)
    top = x64[finite].max()
    T = res.temperature
    if profile.temperature_first:
        T = dynamic_temperature(x64, finite, res)
        if T <= 0:
            return [_argmax_outcome(x64, finite)]
        scaled = (x64 - top) / T
    else:
        scaled = x64 - top
    p = torch.softmax(scaled, dim=-1)
    mk = res.min_keep
    neg = -scaled
    state = {"keep": finite, "cur": p, "order": "id", "key": None}

    def run(name, keep, cur):
        """One filter: the new kept set, and the order it leaves (llama.cpp's array), or
        ``(keep, "typical", key)`` for typical-p."""
        if name == "min_p":
            if res.min_p <= 0:
                return keep, None
            m = min_p_mask(cur, keep, res.min_p)
            # llama.cpp keeps its array's order unless the cut leaves fewer than min_keep (then it sorts)
            return _keep_first(keep, m, neg, mk), ("descending" if int(m.sum()) < mk else None)
        if name == "top_k":
            return top_k_mask(cur, keep, res.top_k, profile.top_k_ties), ("descending" if res.top_k > 0 else None)
        if name == "top_p":
            out = _keep_first(keep, top_p_mask(cur, keep, res.top_p, profile.top_p_rule), neg, mk)
            return out, ("descending" if res.top_p < 1 else None)
        if name == "top_n_sigma":
            return top_n_sigma_mask(scaled, keep, res.top_n_sigma), None
        if name == "custom":
            # the argmax-invariant custom processors (§1.4b), on the logits this stage sees
            # (vLLM's Sampler.sample: after the temperature and min-p, before top-k/top-p)
            return processors.filter_keep(scaled, keep, res.processors, res.processor_steps), None
        if name == "typical_p":
            out, key = typical_mask(cur, keep, res.typical_p, mk, profile.typical_p_rule)
            # a NaN mass is not >= 1: llama.cpp runs the sampler (it keeps all, in typical order)
            return (out, "typical", key) if not res.typical_p >= 1 else (out, None)
        raise ValueError(f"unknown filter {name!r} in profile {profile.name}")

    def finish(st, weight, cut, coin):
        keep, order = st["keep"], st["order"]
        t = T if profile.temperature_first else dynamic_temperature(x64, keep, res)
        if not profile.temperature_first and res.dynatemp_range > 0 and int(keep.sum()) > 1:
            order = "descending"
        if t <= 0:
            o = _argmax_outcome(x64, keep, weight)
        else:
            o = Outcome(keep, t, weight, order, st["key"] if order == "typical" else None, cut)
        o.xtc_coin = coin
        return o

    names = list(profile.filter_order)
    for i, name in enumerate(names):
        if name == "xtc":
            keep, cur = state["keep"], state["cur"]
            if not res.xtc_active or int(keep.sum()) < 2:
                continue   # llama.cpp returns before drawing its coin
            cut = xtc_cut(cur, keep, res.xtc_threshold, mk)
            rest = names[i + 1:]
            a = _run_all(rest, run, state | {"keep": cut, "order": "descending",
                                             "cur": _renorm(p, cut) if profile.filters_renormalise else p}, p, profile)
            if res.xtc_probability >= 1.0:
                return [finish(a, 1.0, True, True)]
            b = _run_all(rest, run, dict(state), p, profile)
            if torch.equal(a["keep"], b["keep"]) and a["order"] == b["order"]:
                return [finish(a, 1.0, False, True)]
            return [finish(a, res.xtc_probability, True, True), finish(b, 1.0 - res.xtc_probability, False, True)]
        state = _run_all([name], run, state, p, profile)
    return [finish(state, 1.0, False, False)]


def _run_all(names, run, state, p, profile) -> dict:
    """Apply the filters ``names`` in order to ``state`` (keep, cur, order, key); XTC is not among them."""
    state = dict(state)
    finite = state["keep"]
    for name in names:
        if name == "xtc":
            raise ValueError("XTC must come once, and is handled by chain()")
        keep, cur = state["keep"], state["cur"]
        got = run(name, keep, cur) if profile.filters_renormalise else run(name, finite, p)
        new, order = got[0], got[1]
        if len(got) == 3:
            state["key"] = got[2]
        if profile.filters_renormalise:
            state["cur"] = _renorm(p, new)
        else:
            new = keep & new
        state["keep"] = new
        if order is not None and not (order == "descending" and state["order"] == "descending"):
            state["order"] = order
    return state


def _argmax_outcome(x64: torch.Tensor, keep: torch.Tensor, weight: float = 1.0) -> Outcome:
    """A temperature of 0 (a dynamic one that reached it): the first maximum alone."""
    out = torch.zeros_like(keep)
    out[int(torch.argmax(torch.where(keep, x64, torch.full_like(x64, float("-inf")))))] = True
    return Outcome(out, 1.0, weight, "id")


def kept_set(x: torch.Tensor, res, profile: Profile) -> torch.Tensor:
    """The tokens a sampling row may draw: the union of :func:`chain`'s outcomes.

    Parameters
    ----------
    x, res, profile
        As in :func:`chain`.

    Returns
    -------
    torch.Tensor
        ``(V,)`` bool.
    """
    outs = chain(x, res, profile)
    keep = outs[0].keep
    for o in outs[1:]:
        keep = keep | o.keep
    return keep


def mixture_probs(x: torch.Tensor, outcomes: list) -> torch.Tensor:
    """The distribution sampled from: each outcome's :func:`processed_probs`, weighted.

    Returns
    -------
    torch.Tensor
        ``(V,)`` in ``x``'s dtype, summing to 1.
    """
    probs = None
    for o in outcomes:
        q = processed_probs(x, o.keep, o.temperature) * o.weight
        probs = q if probs is None else probs + q
    return probs


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
