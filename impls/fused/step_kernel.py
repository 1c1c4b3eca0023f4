"""The kernels that make the fused sampler a whole single step: rewrites before the filters, logprobs after.

A step (:func:`impls.fused.step.fused_step`) is three groups of launches on one
CUDA stream, with no host synchronisation between them:

1. ``_rewrite_kernel`` (``B x S`` programs, the filters' split of a row into
   parts): copies its part of the row to the float32 rewritten-logits buffer
   ``y`` (any input dtype, upcast; with ``HAS_MASK`` the ids the row's
   allowed-ids mask bans become ``-inf``, NaN included), then applies the row's **sparse rewrites**
   in registers and writes the entries that fall in its part, and (with
   logprobs) takes the part's ``(max, sum exp(y - max))`` of the rewritten
   part for the log-softmax. Program part 0 zeroes the row's logprob counters.
2. the five launches of :mod:`impls.fused.kernel` (plus the probabilities
   launch) on ``y``: temperature, min-p, top-k, top-p, greedy and the
   canonical draw.
3. with ``MODES`` only, ``_kth_kernel`` (``B`` programs): the k-th largest survivor of a row whose
   processed logits need it (the row's top-k boundary underflows to ``e = 0``), once per row;
   ``_logprobs_kernel`` (``B x S``): RAW logprobs ``(y - M) - log Z`` of its
   part (with ``MODES``, the vector of each row's ``logprobs_mode`` instead:
   :func:`_mode_lp`; the whole vector when asked), the count of tokens with a strictly
   greater value than the drawn token's (rank), and the part's top-``KL``
   values; the last program of the row (atomic ticket) merges the parts'
   lists and writes the row's logprob, rank, PROCESSED logprob and top list. With ``SPLIT``
   the processed values (the PROCESSED logprob, the processed ``logprobs_mode`` vectors) read a
   second buffer, the logits the filters read (:mod:`impls.fused.chain`'s outcome for its rows),
   the RAW values the rewritten logits.

The sparse rewrites of a row (SEMANTICS §1.2-§1.4, profile ``trtllm``) come
as one list of ``NU`` entries ``(id, value, tag)``: the logit bias first
(tag 1, in the request's order), then the history ``prompt + generated``
(tag 2, in order), then the unconditional bans (tag 4), the end ids
banned under ``min_length`` (tag 5) and the DRY penalties (tag 6, one
entry per penalised id, matched on the host). Each program sorts the entries by id
(``tl.sort`` on ``id * 8 + tag``), so the entries of one token form a run;
per run it derives, from the run's tags: the bias (the values added one by
one in the request's order, so repeated ids add up exactly as the
reference's sequential ``out[t] + v``), whether the token was *seen*
(repetition), its *count* over the counted positions (presence/frequency:
history positions ``>= min(max(prompt_ignore_length, 0), len(prompt))``,
decided here from the position), and whether it is banned (tag 4, or tag 5
while ``generated < min_length``). The run's last entry computes
``bias -> repetition -> presence/frequency -> DRY -> ban`` exactly as
:mod:`impls.reference.rewrites` does in float32 on the CPU (IEEE division,
no FMA; PyTorch's CUDA division by a Python scalar multiplies by its
reciprocal instead, which can be 1 ulp away) and writes it when the id lies
in the program's part. Ids outside ``[0, V)`` in
the history are ignored (§1.3).

RAW logprobs are ``(y - M) - log(Z)``, ``M`` the row's largest rewritten
logit and ``Z = sum exp(y - M)`` summed per lane with rescaling, so ``Z``
differs from PyTorch's ``log_softmax`` sum by float32 rounding (relative
``~1e-7``). The rank (profile ``rank_rule = "strict_plus_one"``, §1.7) is 1
plus the number of tokens whose logprob, computed by this formula, is
strictly greater than the drawn token's; top logprobs are ordered by
logprob, ties by lowest id (a stable descending sort, as
:func:`impls.reference.logprobs.top_logprobs`).
"""

from __future__ import annotations

import triton
import triton.language as tl

from .kernel import _F_EKEEP, _F_ETHR, _F_M, _F_T, _F_XA, _I_KIND, _INT32_MAX, _key, _latest_combine, _unkey, _ws

__all__ = ["TAG_BIAS", "TAG_HISTORY", "TAG_BAN", "TAG_EOS_MIN_LENGTH", "TAG_DRY", "META_I", "META_F", "LP_COUNTERS"]

#: Tags of the sparse entries of a row.
TAG_BIAS = 1
TAG_HISTORY = 2  # becomes 3 in the kernel where the position counts for presence/frequency
TAG_BAN = 4
TAG_EOS_MIN_LENGTH = 5
TAG_DRY = 6
#: int32 columns per row of ``meta_i``: entries, bias entries, history entries, the logprobs mode
#: (:data:`LP_MODES`), prompt length (in the history given: ``penalty_last_n`` may cut it), prompt_ignore_length
#: (the same), generated length (plus draft position), min_length, DRY entries (the list's last), 3 unused.
META_I = 12
_META_I = tl.constexpr(META_I)
#: float32 columns per row of ``meta_f``: repetition, presence, frequency penalty, (unused).
META_F = 4
#: int32 counters per row: logprobs ticket, rank count.
LP_COUNTERS = 4
#: The code of each ``logprobs_mode`` (:data:`impls.params.LOGPROBS_MODES`) in ``meta_i`` column 3: the vector
#: the logprobs launch reads the token's logprob, rank, top list and whole vector from (:func:`_mode_lp`).
LP_MODES = {"raw_logprobs": 0, "raw_logits": 1, "processed_logits": 2, "processed_logprobs": 3}

_INT64_MIN = tl.constexpr(-9223372036854775808)
_FMAX = tl.constexpr(3.4028234663852886e38)


@triton.jit
def _clamp_finite(x_in, y):
    # reference _finish: clamp to +-finfo(float32).max; a non-finite input passes through unchanged
    c = tl.minimum(tl.maximum(y, -_FMAX), _FMAX)
    fin = (x_in == x_in) & (x_in > float("-inf")) & (x_in < float("inf"))
    return tl.where(fin, c, x_in)


@triton.jit
def _allowed(mask_ptr, MW, row, offs, inb):
    # bit offs % 32 of the row's word offs // 32 (a row without a mask has every bit set)
    w = tl.load(mask_ptr + row * MW + (offs >> 5), mask=inb, other=-1)
    return ((w >> (offs & 31)) & 1) != 0


@triton.jit(do_not_specialize=["S"])
def _rewrite_kernel(logits_ptr, stride_row, V, y_ptr, sp_ids, sp_val, sp_tag, meta_i, meta_f, lpw, lpc, S, CH,
                    mask_ptr, MW, BLOCK: tl.constexpr, NU: tl.constexpr, WANT_LP: tl.constexpr,
                    HAS_MASK: tl.constexpr = False):
    row = tl.program_id(0).to(tl.int64)
    part = tl.program_id(1)
    base = logits_ptr + row * stride_row
    ybase = y_ptr + row * V
    ar = tl.arange(0, BLOCK)
    lo = part * CH
    hi = tl.minimum(lo + CH, V)
    for st in range(lo, hi, BLOCK):
        offs = st + ar
        inb = offs < hi
        x = tl.load(base + offs, mask=inb, other=0.0).to(tl.float32)
        if HAS_MASK:
            # the allowed-ids mask (§1.4a): a 0 bit bans its token, whatever its logit (NaN included)
            x = tl.where(_allowed(mask_ptr, MW, row, offs, inb), x, float("-inf"))
        tl.store(ybase + offs, x, mask=inb)
    mi = meta_i + row * _META_I
    n_sp = tl.load(mi + 0)
    if n_sp > 0:
        n_bias = tl.load(mi + 1)
        prompt_len = tl.load(mi + 4)
        pil = tl.load(mi + 5)
        gen_len = tl.load(mi + 6)
        min_len = tl.load(mi + 7)
        r = tl.load(meta_f + row * 4 + 0)
        a = tl.load(meta_f + row * 4 + 1)
        f = tl.load(meta_f + row * 4 + 2)
        u = tl.arange(0, NU)
        ids = tl.load(sp_ids + row * NU + u, mask=u < n_sp, other=-1)
        tag = tl.load(sp_tag + row * NU + u, mask=u < n_sp, other=0)
        # presence/frequency count the history from min(max(prompt_ignore_length, 0), len(prompt)) on (§1.3)
        skip = tl.minimum(tl.maximum(pil, 0), prompt_len)
        tag = tl.where((tag == 2) & (u - n_bias >= skip), 3, tag)
        valid = (tag > 0) & (ids >= 0) & (ids < V)
        sk = tl.sort(tl.where(valid, ids * 8 + tag, _INT32_MAX), 0)
        ok = sk != _INT32_MAX
        sid = tl.where(ok, sk >> 3, 0)
        stag = sk & 7
        x0 = tl.load(base + sid, mask=ok, other=0.0).to(tl.float32)
        if HAS_MASK:
            x0 = tl.where(_allowed(mask_ptr, MW, row, sid, ok), x0, float("-inf"))
        # logit bias (§1.2 step 1), in the request's order: a repeated id adds its values one by one
        xb = x0
        for j in range(0, n_bias):
            bid = tl.load(sp_ids + row * NU + j)
            bv = tl.load(sp_val + row * NU + j)
            xb = tl.where(sid == bid, xb + bv, xb)
        # DRY (§1.3): the row's last n_dry entries, one per penalised id, value the penalty
        n_dry = tl.load(mi + 8)
        dry = tl.zeros([NU], dtype=tl.float32)
        for j in range(n_sp - n_dry, n_sp):
            did = tl.load(sp_ids + row * NU + j)
            dv = tl.load(sp_val + row * NU + j)
            dry = tl.where(sid == did, dv, dry)
        # runs of one id: totals up to each entry, from the run's start (segmented by the start flags)
        prev = tl.gather(sk, tl.maximum(u - 1, 0), 0) >> 3
        start = ((u == 0) | (prev != (sk >> 3))).to(tl.int32)
        nxt = tl.gather(sk, tl.minimum(u + 1, NU - 1), 0) >> 3
        end = ok & ((u == NU - 1) | (nxt != (sk >> 3)))
        c_seen = tl.cumsum(((stag == 2) | (stag == 3)).to(tl.int32), 0)
        c_cnt = tl.cumsum((stag == 3).to(tl.int32), 0)
        ban_e = (stag == 4) | ((stag == 5) & (gen_len < min_len))
        c_ban = tl.cumsum(ban_e.to(tl.int32), 0)
        c_dry = tl.cumsum((stag == 6).to(tl.int32), 0)
        first = tl.where(start != 0, u, 0)
        _f, s_pos = tl.associative_scan((start, first), 0, _latest_combine)
        at = tl.maximum(s_pos - 1, 0)
        before_seen = tl.where(s_pos > 0, tl.gather(c_seen, at, 0), 0)
        before_cnt = tl.where(s_pos > 0, tl.gather(c_cnt, at, 0), 0)
        before_ban = tl.where(s_pos > 0, tl.gather(c_ban, at, 0), 0)
        before_dry = tl.where(s_pos > 0, tl.gather(c_dry, at, 0), 0)
        seen = (c_seen - before_seen) > 0
        cnt = c_cnt - before_cnt
        banned = (c_ban - before_ban) > 0
        # repetition (§1.3): x < 0 ? x * r : x / r over seen tokens, then the clamp
        rep = (seen.to(tl.int32) * (r != 1.0).to(tl.int32)) != 0
        v = tl.where(xb < 0, xb * r, tl.div_rn(xb, r))
        x1 = tl.where(rep, _clamp_finite(xb, v), xb)
        # presence/frequency: x -= a + f * count where count > 0, then the clamp
        pf = ((cnt > 0).to(tl.int32) * ((a != 0.0) | (f != 0.0)).to(tl.int32)) != 0
        w = x1 - (a + f * cnt.to(tl.float32))
        x2 = tl.where(pf, _clamp_finite(x1, w), x1)
        # DRY: x -= penalty, unclamped (llama.cpp subtracts in float)
        has_dry = (c_dry - before_dry) > 0
        x2 = tl.where(has_dry, x2 - dry, x2)
        # bans (§1.4): -inf
        x3 = tl.where(banned, float("-inf"), x2)
        tl.debug_barrier()  # the part's copy is stored before its patched entries
        tl.store(ybase + sid, x3, mask=end & (sid >= lo) & (sid < hi))
    if WANT_LP:
        tl.debug_barrier()
        m_v = tl.full([BLOCK], float("-inf"), tl.float32)
        s_v = tl.zeros([BLOCK], dtype=tl.float32)
        for st in range(lo, hi, BLOCK):
            offs = st + ar
            yv = tl.load(ybase + offs, mask=offs < hi, other=float("-inf"), cache_modifier=".cg")
            m_new = tl.maximum(m_v, yv)
            live = m_new > float("-inf")
            s_v = tl.where(live, s_v * tl.exp(m_v - m_new) + tl.exp(yv - m_new), 0.0)
            m_v = m_new
        mp = tl.max(m_v, 0)
        sp = tl.sum(tl.where(m_v > float("-inf"), s_v * tl.exp(m_v - mp), 0.0), 0)
        tl.store(lpw + (row * S + part) * 2 + 0, mp)
        tl.store(lpw + (row * S + part) * 2 + 1, sp)
        if part == 0:
            tl.store(lpc + row * 4 + tl.arange(0, 4), tl.zeros([4], dtype=tl.int32))


@triton.jit
def _pack_lp(lp, offs):
    # larger packed value: larger logprob, then lower id
    return (_key(lp).to(tl.int64) << 32) | (4294967295 - offs.to(tl.int64))


@triton.jit
def _merge_top(best, pk, KL: tl.constexpr):
    # the KL largest of best (KL entries) and pk (a vector): replace best's least by pk's largest while larger
    kl = tl.arange(0, KL)
    bmax = tl.max(pk, 0)
    bmin = tl.min(best, 0)
    while bmax > bmin:
        pos = tl.min(tl.where(best == bmin, kl, KL), 0)
        best = tl.where(kl == pos, bmax, best)
        pk = tl.where(pk == bmax, _INT64_MIN, pk)
        bmax = tl.max(pk, 0)
        bmin = tl.min(best, 0)
    return best


@triton.jit
def _kth_logit(ybase, V, xA, k, BLOCK: tl.constexpr):
    # the k-th largest survivor (finite, >= xA) of the whole row: the smallest key t with fewer than k survivors
    # above it, 32 bisections of a pass each; -inf when k <= 0 or the row has fewer than k survivors
    ar = tl.arange(0, BLOCK)
    lo = tl.full([], -2147483648, tl.int64)
    hi = tl.full([], 2147483647, tl.int64)
    n_it = tl.where(k > 0, 32, 0)
    for _it in range(0, n_it):
        mid = lo + (hi - lo) // 2
        c = tl.zeros([BLOCK], dtype=tl.int32)
        for st in range(0, V, BLOCK):
            offs = st + ar
            y = tl.load(ybase + offs, mask=offs < V, other=float("-inf"))
            A = (y > float("-inf")) & (y < float("inf")) & (y >= xA)
            c += (A & (_key(y).to(tl.int64) > mid)).to(tl.int32)
        ok = tl.sum(c, 0) < k
        hi = tl.where(ok, mid, hi)
        lo = tl.where(ok, lo, mid)
    # the least finite key is -FLT_MAX's (-2139095040): below it, fewer than k survivors
    return tl.where((k > 0) & (hi >= -2139095040), _unkey(hi.to(tl.int32)), float("-inf"))


@triton.jit(do_not_specialize=["S"])
def _kth_kernel(yp_ptr, V, status_ptr, wsi, wsf, ws64, S, meta_i, top_k_ptr, xk_ptr, BLOCK: tl.constexpr,
                NB1: tl.constexpr, NBS: tl.constexpr, KMAX: tl.constexpr, KBIG: tl.constexpr):
    # B programs, before the logprobs launch when a row may ask for processed logits (MODES). A top-k boundary
    # whose e = exp((x_k - m) / T) rounds to 0 in float32 (x_k some 104 T below the largest) keeps, by the
    # filters' membership, every survivor tied with it at e = 0; the processed logits need exact arithmetic's
    # set: the k-th largest survivor x_k, found here once for such a row (-inf for every other row, which then
    # reads no logit). The reference decides in float64, exact until its probabilities underflow too (a boundary
    # some 745 T below the largest): there it keeps every tie at 0, a known difference (SEMANTICS §1.5's rule is
    # exact arithmetic's)
    row = tl.program_id(0).to(tl.int64)
    x_k = tl.full([], float("-inf"), tl.float32)
    if tl.load(status_ptr + row) == 0:
        bi, hist1, hist2, ri, cnt, bf, rf, b64, r64, cand, abv = _ws(row, wsi, wsf, ws64, S, NB1, NBS, KMAX, KBIG)
        if (tl.load(meta_i + row * _META_I + 3) == 2) & (tl.load(ri + _I_KIND) == 3) & (tl.load(rf + _F_ETHR) == 0.0):
            x_k = _kth_logit(yp_ptr + row * V, V, tl.load(rf + _F_XA), tl.load(top_k_ptr + row), BLOCK)
    tl.store(xk_ptr + row, x_k)


@triton.jit
def _mode_lp(y, yp, M, L, mode, kind, m, T, E, e_thr, xA, x_k):
    # the logprobs_mode vector at rewritten logits y (SEMANTICS §1.7, the reference's mode_vector): 0 RAW
    # logprobs; 1 the rewritten logits; 2 a sampling row's yp / T on its kept set (the probabilities launch's
    # membership, and yp >= x_k: the k-th largest survivor where that membership cannot tell, e_thr 0), -inf
    # elsewhere, a greedy row's y; 3 the log of the probability the draw used, a greedy row's RAW logprobs
    # (log_softmax of y). yp: the logits the filters read (y, or impls.fused.chain's outcome)
    raw = (y - M) - L
    e = tl.exp(tl.div_rn(yp - m, T))
    kept = (yp > float("-inf")) & (yp < float("inf")) & (yp >= xA) & (e >= e_thr) & (yp >= x_k)
    greedy = kind == 0
    pl = tl.where(greedy, y, tl.where(kept, tl.div_rn(yp, T), float("-inf")))
    plp = tl.where(greedy, raw, tl.where(kept, tl.log(tl.div_rn(e, E)), float("-inf")))
    return tl.where(mode == 1, y, tl.where(mode == 2, pl, tl.where(mode == 3, plp, raw)))


@triton.jit(do_not_specialize=["S"])
def _logprobs_kernel(y_ptr, yp_ptr, V, token_ptr, status_ptr, ntop_ptr, lpw, lpc, topw, wsi, wsf, ws64,
                     lp_tok_ptr, rank_ptr, plp_ptr, top_id_ptr, top_lp_ptr, vec_ptr, S, CH, meta_i, xk_ptr,
                     BLOCK: tl.constexpr, NB1: tl.constexpr, NBS: tl.constexpr, KMAX: tl.constexpr,
                     KBIG: tl.constexpr, KL: tl.constexpr, WANT_VEC: tl.constexpr, MODES: tl.constexpr = False,
                     SPLIT: tl.constexpr = False):
    row = tl.program_id(0).to(tl.int64)
    part = tl.program_id(1)
    status = tl.load(status_ptr + row)
    if status == 0:
        bi, hist1, hist2, ri, cnt, bf, rf, b64, r64, cand, abv = _ws(row, wsi, wsf, ws64, S, NB1, NBS, KMAX, KBIG)
        kind = tl.load(ri + _I_KIND)
        m = tl.load(rf + _F_M)
        T = tl.load(rf + _F_T)
        E = tl.load(rf + _F_EKEEP)
        ybase = y_ptr + row * V
        # the logits the filters read (SPLIT: impls.fused.chain's outcome for some rows), for the processed values
        if SPLIT:
            ypbase = yp_ptr + row * V
        else:
            ypbase = ybase
        # M and Z of the row from the parts' (max, sum exp(y - max))
        M = tl.full([], float("-inf"), tl.float32)
        for s in range(0, S):
            M = tl.maximum(M, tl.load(lpw + (row * S + s) * 2 + 0))
        Z = tl.full([], 0.0, tl.float32)
        for s in range(0, S):
            mp = tl.load(lpw + (row * S + s) * 2 + 0)
            sp = tl.load(lpw + (row * S + s) * 2 + 1)
            Z += tl.where(mp > float("-inf"), sp * tl.exp(mp - M), 0.0)
        L = tl.log(Z)
        tok = tl.load(token_ptr + row)
        if MODES:
            mode = tl.load(meta_i + row * _META_I + 3)
            e_thr = tl.load(rf + _F_ETHR)
            xA = tl.load(rf + _F_XA)
            x_k = tl.load(xk_ptr + row)   # _kth_kernel's, once per row
            lpt = _mode_lp(tl.load(ybase + tok), tl.load(ypbase + tok), M, L, mode, kind, m, T, E, e_thr, xA, x_k)
        else:
            lpt = (tl.load(ybase + tok) - M) - L
        k_row = tl.load(ntop_ptr + row)
        ar = tl.arange(0, BLOCK)
        lo = part * CH
        hi = tl.minimum(lo + CH, V)
        n_gt = tl.zeros([BLOCK], dtype=tl.int32)
        best = tl.full([KL], _INT64_MIN, tl.int64)
        for st in range(lo, hi, BLOCK):
            offs = st + ar
            inb = offs < hi
            yv = tl.load(ybase + offs, mask=inb, other=float("-inf"))
            if MODES:
                if SPLIT:
                    ypv = tl.load(ypbase + offs, mask=inb, other=float("-inf"))
                else:
                    ypv = yv
                lp = _mode_lp(yv, ypv, M, L, mode, kind, m, T, E, e_thr, xA, x_k)
            else:
                lp = (yv - M) - L
            if WANT_VEC:
                tl.store(vec_ptr + row * V + offs, lp, mask=inb)
            n_gt += (inb & (lp > lpt)).to(tl.int32)
            if k_row > 0:
                best = _merge_top(best, tl.where(inb, _pack_lp(lp, offs), _INT64_MIN), KL)
        kl = tl.arange(0, KL)
        tl.store(topw + (row * S + part) * KL + kl, best)
        tl.atomic_add(lpc + row * 4 + 1, tl.sum(n_gt, 0))
        tl.debug_barrier()
        ticket = tl.atomic_add(lpc + row * 4 + 0, 1)
        if ticket == S - 1:
            rank = tl.atomic_add(lpc + row * 4 + 1, 0) + 1
            if k_row > 0:
                allb = tl.full([KL], _INT64_MIN, tl.int64)
                for s in range(0, S):
                    allb = _merge_top(allb, tl.load(topw + (row * S + s) * KL + kl, cache_modifier=".cg"), KL)
                allb = tl.sort(allb, 0, descending=True)
                tl.store(top_id_ptr + row * KL + kl, (4294967295 - (allb & 4294967295)).to(tl.int32))
                tl.store(top_lp_ptr + row * KL + kl, _unkey((allb >> 32).to(tl.int32)))
            # PROCESSED logprob: log of the probability the draw used (the probabilities launch's formula)
            e = tl.exp(tl.div_rn(tl.load(ypbase + tok) - m, T))
            p = tl.where(kind == 0, 1.0, tl.div_rn(e, E))
            tl.store(plp_ptr + row, tl.log(p.to(tl.float64)))
            tl.store(lp_tok_ptr + row, lpt)
            tl.store(rank_ptr + row, rank)
