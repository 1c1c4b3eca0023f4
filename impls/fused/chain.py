"""llama.cpp's extra filters on the device: ``min_keep``, top-n-sigma, typical-p and XTC.

The kernel's filters keep a *prefix* of the tokens sorted by logit (``x >= theta``); these do
not always (typical-p keeps a band around the entropy, XTC cuts the head, ``min_keep`` unions a
prefix into a cut), so a row that sets one takes this pass instead of the kernel's filters: the
whole chain of SEMANTICS §1.5 and §1.5a under profile ``trtllm``, in its order, each filter on the
survivors renormalised —

1. min-p (``q >= min_p * max q``), then at least the ``min_keep`` most likely;
2. top-k, ties with the k-th kept (``min_keep`` ignored);
3. top-p, a token kept iff the mass strictly more likely than it is ``< top_p`` (the most likely
   always), then at least the ``min_keep`` most likely;
4. top-n-sigma (``n > 0``, two survivors or more): a scaled logit ``< max - n * sigma`` is removed, ``sigma``
   their population standard deviation over the survivors (``min_keep`` ignored; a NaN bound, ``n = inf``
   with ``sigma = 0``, removes none, as llama.cpp's comparison);
5. typical-p (``p < 1``): ``H`` the survivors' entropy; in ascending ``|-log q - H|`` (ties by lowest
   id) a token kept iff the mass strictly more typical than it is ``< p``, then at least the
   ``max(min_keep, 1)`` most typical;
6. XTC (``xtc_probability > 0``, ``xtc_threshold <= 0.5``, two survivors or more): in descending ``q``
   (ties by lowest id), the leading run of survivors with ``q >= threshold``; when it has ``r >= 2``
   tokens and at least ``min_keep`` would remain, the cut removes its first ``r - 1``. With
   ``probability >= 1`` the cut is the outcome; otherwise, when it changes the set, the row draws from
   the mixture ``probability * softmax(cut) + (1 - probability) * softmax(uncut)``.

Every membership is decided in float64 from ``softmax((x - max) / T)`` of the row's rewritten logits
at its float64 temperature (a dynamic one where set), as SEMANTICS §1.5 asks. The outcome goes to the
kernel as logits with its filters off: the rewritten logits with ``-inf`` outside the kept set at the
row's temperature, or a mixture's float32 log-probabilities at temperature 1 (SEMANTICS §1.5a: the
canonical draw is Gumbel-max over the mixture's logarithm). The kernel then draws, and computes the
probabilities and PROCESSED logprobs, from these (:func:`impls.fused.step.fused_step`'s ``filtered``),
the RAW logprobs from the rewritten logits.

All batched over the rows that need it, on the device, with no host synchronisation: a few sorts of
``(R, V)`` per step, ``R`` those rows. Sources: llama-cpp-python 0.3.36's bundled
``src/llama-sampler.cpp`` (``llama_sampler_min_p_apply``, ``llama_sampler_top_p_apply``,
``llama_sampler_top_n_sigma_apply``, ``llama_sampler_typical_apply``, ``llama_sample_xtc_apply``)
for what each filter does; their order, their renormalisation and the typical-p boundary
(``typical_p_rule = "mass_above"``) are the ``trtllm`` profile's (SEMANTICS §1.5a).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Sequence

import torch

__all__ = ["ChainParams", "needs_chain", "chain_params", "chain_keep", "apply_chain"]

_NEG = float("-inf")


@dataclass
class ChainParams:
    """Per-row parameters of the chain, ``(R,)`` tensors on the device.

    Attributes
    ----------
    temperature : torch.Tensor
        float64, ``> 0`` (the admitted one, or the dynamic one).
    top_k : torch.Tensor
        int64, 0 off.
    top_p, min_p, top_n_sigma, typical_p, xtc_probability, xtc_threshold : torch.Tensor
        float64: 1, 0, 0, 1, 0 are off; ``xtc_threshold`` 0.1 unset.
    min_keep : torch.Tensor
        int64 ``>= 0``.
    """

    temperature: torch.Tensor
    top_k: torch.Tensor
    top_p: torch.Tensor
    min_p: torch.Tensor
    top_n_sigma: torch.Tensor
    typical_p: torch.Tensor
    xtc_probability: torch.Tensor
    xtc_threshold: torch.Tensor
    min_keep: torch.Tensor


def needs_chain(adm) -> bool:
    """Whether an admitted sampling row (:class:`impls.fused.admit.Admitted`) takes this pass: it sets
    ``min_keep``, top-n-sigma, typical-p or an active XTC, and no mirostat (whose chain has none of them)."""
    return not adm.mirostat and (adm.min_keep > 0 or adm.top_n_sigma > 0 or adm.typical_p < 1
            or (adm.xtc_probability > 0 and not adm.xtc_threshold > 0.5))


def chain_params(adms: Sequence, temperature: torch.Tensor) -> ChainParams:
    """:class:`ChainParams` of admitted rows.

    Parameters
    ----------
    adms : sequence of impls.fused.admit.Admitted
        The rows, in order.
    temperature : torch.Tensor
        ``(R,)`` float64 temperatures of the same rows (a dynamic one where set); its device is used.

    Returns
    -------
    ChainParams
        On ``temperature``'s device (``top_k`` and ``min_keep`` as admission capped them, ``<= 2**62``).
    """
    dev = temperature.device

    def t(name, dt):
        return torch.tensor([getattr(a, name) for a in adms], dtype=dt, device=dev)

    f64, i64 = torch.float64, torch.int64
    return ChainParams(temperature.to(f64), t("top_k", i64), t("top_p", f64), t("min_p", f64),
                       t("top_n_sigma", f64), t("typical_p", f64), t("xtc_probability", f64),
                       t("xtc_threshold", f64), t("min_keep", i64))


def _renorm(p: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    q = torch.where(keep, p, 0.0)
    return q / q.sum(-1, keepdim=True).clamp_min(torch.finfo(torch.float64).tiny)


def _group_first(s: torch.Tensor) -> torch.Tensor:
    # in each row of sorted values s, the index of the first element equal to each element
    pos = torch.arange(s.shape[-1], device=s.device).expand_as(s)
    new = torch.ones_like(s, dtype=torch.bool)
    new[:, 1:] = s[:, 1:] != s[:, :-1]
    return torch.cummax(torch.where(new, pos, 0), dim=-1).values


def _scatter(order: torch.Tensor, sorted_mask: torch.Tensor) -> torch.Tensor:
    # a mask over sorted positions back to token ids
    return torch.zeros_like(sorted_mask).scatter_(1, order, sorted_mask)


def _first_n(keep: torch.Tensor, order: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
    # the first n tokens of keep in the given order (n: (R,) int64)
    ks = keep.gather(1, order)
    return _scatter(order, ks & (torch.cumsum(ks.to(torch.int64), -1) <= n[:, None]))


def _mass_above(vals: torch.Tensor, order: torch.Tensor, mass: torch.Tensor, key: torch.Tensor) -> torch.Tensor:
    # tokens kept by "the mass strictly before the token's tie group, in this order, is < mass; the first
    # group always": vals (R, V) float64 masses (0 outside the survivors), order the sort of key, whose equal
    # values are the tie groups
    s = vals.gather(1, order)
    first = _group_first(key.gather(1, order))
    above = (torch.cumsum(s, -1) - s).gather(1, first)
    return _scatter(order, (above < mass[:, None]) | (first == 0))


def chain_keep(y: torch.Tensor, prm: ChainParams) -> tuple:
    """The chain's outcome for each row (the module docstring's steps 1-6).

    Parameters
    ----------
    y : torch.Tensor
        ``(R, V)`` rewritten logits (float32; ``-inf`` banned), each row with a finite logit and
        neither NaN nor ``+inf`` (the caller leaves other rows out).
    prm : ChainParams

    Returns
    -------
    (torch.Tensor, torch.Tensor, torch.Tensor)
        ``keep`` ``(R, V)`` bool, the kept set (XTC's uncut one for a mixture row); ``cut`` ``(R, V)``
        bool, XTC's cut where the row is a mixture (else equal to ``keep``); ``mix`` ``(R,)`` bool, the
        rows drawn from the mixture.
    """
    x = y.to(torch.float64)
    R, V = x.shape
    finite = torch.isfinite(x)
    top = torch.where(finite, x, _NEG).amax(-1, keepdim=True)
    T = prm.temperature[:, None]
    z = torch.where(finite, (x - top) / T, _NEG)            # scaled logits, 0 at the maximum
    p = torch.softmax(z, dim=-1)
    # descending logit, ties by lowest id (a stable sort of the ids' order): top-k/top-p/min_keep's order
    order_x = torch.sort(torch.where(finite, z, _NEG), dim=-1, descending=True, stable=True).indices
    keep, cur = finite, p
    mk = prm.min_keep
    # 1. min-p, then min_keep
    on = (prm.min_p > 0)[:, None]
    best = torch.where(keep, cur, -1.0).amax(-1, keepdim=True)
    m = keep & (cur >= prm.min_p[:, None] * best)
    keep = torch.where(on, m | _first_n(keep, order_x, mk), keep)
    cur = _renorm(p, keep)
    # 2. top-k, ties kept
    alive = keep.sum(-1)
    k = prm.top_k
    on = ((k > 0) & (k < V) & (k < alive))[:, None]
    # Until typical-p the survivors are a prefix of order_x and their probabilities do not increase along it, so
    # order_x sorts them by probability too (equal probabilities adjacent): no sort of its own for top-k, top-p
    vals = torch.where(keep, cur, -1.0).gather(1, order_x)
    kth = vals.gather(1, (k - 1).clamp(0, V - 1)[:, None])
    keep = torch.where(on, keep & (cur >= kth), keep)
    cur = _renorm(p, keep)
    # 3. top-p ("mass_above"), then min_keep
    on = (prm.top_p < 1)[:, None]
    vals = torch.where(keep, cur, 0.0)
    kept = keep & _mass_above(vals, order_x, prm.top_p, vals)
    keep = torch.where(on, kept | _first_n(keep, order_x, mk), keep)
    cur = _renorm(p, keep)
    # 4. top-n-sigma on the scaled logits of the survivors
    alive = keep.sum(-1)
    on = ((prm.top_n_sigma > 0) & (alive > 1))[:, None]
    n = alive.clamp_min(1).to(torch.float64)[:, None]
    zk = torch.where(keep, z, 0.0)
    mean = zk.sum(-1, keepdim=True) / n
    std = torch.sqrt((torch.where(keep, (z - mean) ** 2, 0.0)).sum(-1, keepdim=True) / n)
    zmax = torch.where(keep, z, _NEG).amax(-1, keepdim=True)
    # llama.cpp removes a token when z < max - n * sigma: a NaN bound (n = inf, sigma = 0) removes none
    keep = torch.where(on, keep & ~(z < zmax - prm.top_n_sigma[:, None] * std), keep)
    cur = _renorm(p, keep)
    # 5. typical-p ("mass_above" in typical order), then the max(min_keep, 1) most typical
    on = (prm.typical_p < 1)[:, None]
    lq = torch.where(keep & (cur > 0), torch.log(cur), 0.0)
    H = -(torch.where(keep, cur, 0.0) * lq).sum(-1, keepdim=True)
    key = torch.where(keep, torch.abs(-lq - H), float("inf"))
    order_t = torch.sort(key, dim=-1, stable=True).indices
    # ties are equal keys: equal probabilities, or two at the same distance above and below H
    kept = keep & _mass_above(torch.where(keep, cur, 0.0), order_t, prm.typical_p, key)
    keep = torch.where(on, kept | _first_n(keep, order_t, mk.clamp_min(1)), keep)
    cur = _renorm(p, keep)
    # 6. XTC: the leading run of likely tokens, all but its last removed
    alive = keep.sum(-1)
    active = (prm.xtc_probability > 0) & ~(prm.xtc_threshold > 0.5) & (alive >= 2)
    vals = torch.where(keep, cur, -1.0)
    sv, order = torch.sort(vals, dim=-1, descending=True, stable=True)
    pos = torch.arange(V, device=y.device).expand(R, V)
    # its length, over the survivors only (the removed ones sort last at -1, which a threshold <= -1 would count)
    run = torch.cumprod(((sv >= prm.xtc_threshold[:, None]) & (pos < alive[:, None])).to(torch.int64), -1).sum(-1)
    last = (run - 1).clamp_min(0)
    cuts = active & (last > 0) & (alive - last >= mk)
    cut = keep & ~_scatter(order, pos < last[:, None])
    cut = torch.where(cuts[:, None], cut, keep)
    always = prm.xtc_probability >= 1
    keep = torch.where((cuts & always)[:, None], cut, keep)
    mix = cuts & ~always
    return keep, cut, mix


def _probs(x: torch.Tensor, keep: torch.Tensor, T: torch.Tensor) -> torch.Tensor:
    # softmax((x - max over keep) / T) on keep, float64
    top = torch.where(keep, x, _NEG).amax(-1, keepdim=True)
    return torch.softmax(torch.where(keep, (x - top) / T[:, None], _NEG), dim=-1)


def apply_chain(y: torch.Tensor, rows: torch.Tensor, prm: ChainParams) -> tuple:
    """The logits and temperatures the kernel's draw reads for the chain's rows.

    Parameters
    ----------
    y : torch.Tensor
        ``(B, V)`` float32 rewritten logits (not modified).
    rows : torch.Tensor
        ``(R,)`` int64 indices into ``y`` of the rows that take the chain (sampling rows).
    prm : ChainParams
        Their parameters, in the same order.

    Returns
    -------
    (torch.Tensor, torch.Tensor)
        ``filtered`` ``(B, V)`` float32: a copy of ``y`` whose chain rows hold their outcome's logits
        (``y`` on the kept set, ``-inf`` elsewhere; a mixture row's float32 log-probabilities); and
        ``temperature`` ``(R,)`` float32, the temperature the kernel draws those rows at (theirs; 1 for
        a mixture row). A row with no finite logit, or holding NaN or ``+inf`` (the kernel rejects it),
        or whose temperature is 0 (a dynamic one that reached it: the caller keeps its argmax alone) is copied
        as it is. The kernel is then called with those rows' top-k, top-p and min-p off.
    """
    out = y.clone()
    sub = y.index_select(0, rows)
    ok = (torch.isfinite(sub).any(-1) & ~torch.isnan(sub).any(-1) & ~torch.isposinf(sub).any(-1)
          & (prm.temperature > 0))
    safe = torch.where(ok[:, None], sub, 0.0)    # rows the kernel rejects: any finite values, result unused
    t_row = prm.temperature
    prm = dataclasses.replace(prm, temperature=torch.where(ok, t_row, 1.0))
    keep, cut, mix = chain_keep(safe, prm)
    x = safe.to(torch.float64)
    w = prm.xtc_probability[:, None]
    mixture = w * _probs(x, cut, prm.temperature) + (1 - w) * _probs(x, keep, prm.temperature)
    logp = torch.log(mixture).to(torch.float32)
    f = torch.where(mix[:, None], logp, torch.where(keep, safe, _NEG))
    out.index_copy_(0, rows, torch.where(ok[:, None], f, sub))
    temp = torch.where(mix & ok, torch.ones_like(t_row), t_row).to(torch.float32)
    return out, temp
