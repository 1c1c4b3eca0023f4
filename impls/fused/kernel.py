"""The fused sampling kernel: temperature, min-p, top-k, top-p, greedy and the canonical draw.

One Triton program per row, one launch per batch. Every parameter is a
per-row tensor; which filters apply, and which path a row takes, is decided
on the device from the values (SEMANTICS §1.1 sentinels), so there is no host
branching per row and no kernel per parameter combination.

The kept set of a sampling row is always ``{j : x_j >= theta}`` for one
threshold ``theta`` (min-p, top-k with ties kept and the top-p "mass strictly
above" rule all keep a prefix of the tokens sorted by logit), so the kernel
searches for that threshold instead of sorting the vocabulary. Passes over
the row (each reads the logits once from memory):

1. **stats** — greedy rows: first argmax and the NaN flag (nothing else);
   other rows: maximum ``m`` over finite logits, NaN / ``+inf`` flags and
   ``Z = sum exp((x - m) / T)`` (online, per lane). Accumulators live in
   registers per lane and are reduced once after the loop. Greedy rows stop
   here.
2. **histogram** (rows with a filter) — the min-p survivors ``A`` are
   binned by ``s = (x - m) / T`` into ``NB`` bins of width ``R / NB`` (bin 0
   holds the maximum; the last bin collects ``s < -R`` and non-survivors),
   and ``S_A = sum p`` over ``A``. From the counts (exact for top-k) and
   the estimated mass of each bin (``count * exp(s_mid)``, for top-p), the
   bins that hold the boundary are chosen, with a margin of ``MARGIN`` bins.
3. **gather** — survivors in those bins go to a per-row workspace of at
   most ``KMAX`` entries (its size is fixed, independent of the vocabulary),
   with the exact mass of the survivors above them.
4. **decide** — the workspace is sorted (``tl.sort`` on packed
   ``(logit key, -id)``), and min-p, top-k (ties kept) and top-p (keep a
   token iff the mass strictly above it is ``< top_p``; the most likely
   tokens always kept) are decided exactly as the reference does, on the
   renormalised probabilities, yielding ``theta``. For top-p the gathered
   range is verified with the exact masses (the survivors above it kept, the
   first one below it not); a miss sends the row to the slow path.
5. **draw** — Gumbel-max with the canonical Philox draw (DESIGN.md decision
   1) over the kept tokens: inside the workspace when every kept token is
   there ("fast" path), otherwise in one more pass over the row
   ("boundary" and "untruncated" paths).

Rows whose boundary cannot be isolated in ``KMAX`` entries (``top_k >
KMAX``, huge tie groups, a boundary among the ``s < -R`` tail) take the
"slow" path: bisection on the 32-bit logit key, one pass per bit. It is
correct and rare, and the path each row took is returned.

Outcome codes per row (``status``): 0 ok, 1 ``nan_logits``, 2
``posinf_logits``, 3 ``no_valid_token``, 4 ``invalid_temperature``, 5
``invalid_top_k``, 6 ``invalid_top_p``, 7 ``invalid_min_p``; the token of a
rejected row is -1. Path codes: 0 greedy, 1 untruncated, 2 fast, 3
boundary, 4 slow, -1 rejected.
"""

from __future__ import annotations

import triton
import triton.language as tl

__all__ = ["fused_sample_kernel", "STATUS_KINDS", "PATHS"]

STATUS_KINDS = {0: None, 1: "nan_logits", 2: "posinf_logits", 3: "no_valid_token", 4: "invalid_temperature",
                5: "invalid_top_k", 6: "invalid_top_p", 7: "invalid_min_p"}
PATHS = {-1: "rejected", 0: "greedy", 1: "untruncated", 2: "fast", 3: "boundary", 4: "slow"}

_INT32_MAX = tl.constexpr(2147483647)
_INT32_MIN = tl.constexpr(-2147483648)


@triton.jit
def _key(x):
    # float32 -> int32 whose signed order is the float order; -0.0 maps with +0.0
    # (they compare equal, so they must tie)
    b = tl.where(x == 0.0, 0.0, x).to(tl.int32, bitcast=True)
    return tl.where(b < 0, b ^ 0x7FFFFFFF, b)


@triton.jit
def _unkey(k):
    b = tl.where(k < 0, k ^ 0x7FFFFFFF, k)
    return b.to(tl.float32, bitcast=True)


@triton.jit
def _uniform(seed, offset, idx):
    # DESIGN.md decision 1: Philox4x32-10 on counter (j // 4, 0, o_lo, o_hi), word j % 4,
    # then Triton's uint_to_uniform_float.
    g = (idx // 4).to(tl.uint32)
    z = g * 0
    o_lo = (offset & 0xFFFFFFFF).to(tl.uint32)
    o_hi = ((offset >> 32) & 0xFFFFFFFF).to(tl.uint32)
    w0, w1, w2, w3 = tl.philox(seed, g, z, z + o_lo, z + o_hi)
    r = idx % 4
    w = tl.where(r == 0, w0, tl.where(r == 1, w1, tl.where(r == 2, w2, w3)))
    return tl.uint_to_uniform_float(w)


@triton.jit
def _gumbel(x, m, T, seed, offset, idx):
    u = _uniform(seed, offset, idx)
    return tl.div_rn(x - m, T) - tl.log(-tl.log(u))


@triton.jit
def _shift_combine(a_len, a_prev, a_cur, b_len, b_prev, b_cur):
    # scan that yields, at position i, the value at position i - 1
    return a_len + b_len, tl.where(b_len > 1, b_prev, a_cur), b_cur


@triton.jit
def _latest_combine(a_flag, a_val, b_flag, b_val):
    # scan that yields, at position i, the value carried by the latest flagged position <= i
    return a_flag | b_flag, tl.where(b_flag != 0, b_val, a_val)


@triton.jit
def _block(base, start, ar, V, ms, T_eff, Zs, thr_minp, INV_W, NB: tl.constexpr):
    # One block of a row and what every pass after the first derives from it:
    # offsets, logits (float32), min-p survivors A, probabilities p and the bin.
    offs = start + ar
    inb = offs < V
    x = tl.load(base + offs, mask=inb, other=float("-inf")).to(tl.float32)
    fin = inb & (x > float("-inf")) & (x < float("inf"))
    s = tl.div_rn(x - ms, T_eff)
    p = tl.div_rn(tl.exp(s), Zs)
    A = fin & (p >= thr_minp)
    b = tl.maximum(tl.minimum(tl.floor(-s * INV_W), NB - 1).to(tl.int32), 0)
    return offs, x, A, p, b


@triton.jit
def fused_sample_kernel(
    logits_ptr, stride_row, V,
    temp_ptr, top_k_ptr, top_p_ptr, min_p_ptr, seed_ptr, offset_ptr,
    token_ptr, status_ptr, path_ptr, probs_ptr, ws_ptr,
    WANT_PROBS: tl.constexpr, BLOCK: tl.constexpr, NB: tl.constexpr, R: tl.constexpr,
    KMAX: tl.constexpr, MARGIN: tl.constexpr = 2,
):
    """Sample one token per row (one program per row). See the module docstring."""
    row = tl.program_id(0).to(tl.int64)
    base = logits_ptr + row * stride_row
    T = tl.load(temp_ptr + row).to(tl.float32)
    k = tl.load(top_k_ptr + row).to(tl.int64)
    top_p = tl.load(top_p_ptr + row).to(tl.float32)
    min_p = tl.load(min_p_ptr + row).to(tl.float32)
    seed = tl.load(seed_ptr + row)
    offset = tl.load(offset_ptr + row)
    ar = tl.arange(0, BLOCK)
    NEG_INF = float("-inf")
    POS_INF = float("inf")

    # ---- validation (SEMANTICS §1.1 rule 5; reference order: temperature, top_p, top_k, min_p)
    status = tl.where((T != T) | (T < 0), 4,
                      tl.where((top_p != top_p) | (top_p < 0) | (top_p > 1), 6,
                               tl.where(k < 0, 5, tl.where((min_p != min_p) | (min_p < 0) | (min_p > 1), 7, 0))))
    greedy = (T == 0) | (k == 1) | (top_p == 0) | (min_p == 1)
    T_eff = tl.where(greedy | (status != 0), 1.0, T)

    # ---- pass 1: stats, accumulated per lane and reduced once after the loop
    nan_v = tl.zeros([BLOCK], dtype=tl.int32)
    pinf_v = tl.zeros([BLOCK], dtype=tl.int32)
    nfin_v = tl.zeros([BLOCK], dtype=tl.int32)
    gbest_v = tl.full([BLOCK], NEG_INF, tl.float32)
    gidx_v = tl.zeros([BLOCK], dtype=tl.int32)
    m_v = tl.full([BLOCK], NEG_INF, tl.float32)
    z_v = tl.zeros([BLOCK], dtype=tl.float32)
    # greedy rows: argmax only (first index on ties, +inf included, NaN flagged)
    n1g = tl.where(greedy, V, 0)
    for start in range(0, n1g, BLOCK):
        offs = start + ar
        inb = offs < V
        x = tl.load(base + offs, mask=inb, other=NEG_INF).to(tl.float32)
        isnan = x != x
        nan_v = nan_v | isnan.to(tl.int32)
        xg = tl.where(isnan | (inb == 0), NEG_INF, x)
        take = xg > gbest_v
        gidx_v = tl.where(take, offs, gidx_v)
        gbest_v = tl.where(take, xg, gbest_v)
    # other rows: maximum and softmax denominator over finite logits (online, per lane)
    n1s = tl.where(greedy, 0, V)
    for start in range(0, n1s, BLOCK):
        offs = start + ar
        inb = offs < V
        x = tl.load(base + offs, mask=inb, other=NEG_INF).to(tl.float32)
        isnan = x != x
        nan_v = nan_v | isnan.to(tl.int32)
        pinf_v = pinf_v | (x == POS_INF).to(tl.int32)
        fin = inb & (x > NEG_INF) & (x < POS_INF)
        nfin_v += fin.to(tl.int32)
        xf = tl.where(fin, x, NEG_INF)
        m_new = tl.maximum(m_v, xf)
        safe = m_new > NEG_INF
        m_ref = tl.where(safe, m_new, 0.0)
        e = tl.where(fin, tl.exp(tl.div_rn(xf - m_ref, T_eff)), 0.0)
        z_v = tl.where(safe, z_v * tl.exp(tl.div_rn(m_v - m_ref, T_eff)) + e, 0.0)
        m_v = m_new
    any_nan = tl.max(nan_v, 0)
    any_pinf = tl.max(pinf_v, 0)
    n_fin = tl.sum(nfin_v, 0)
    g_best = tl.max(gbest_v, 0)
    g_idx = tl.min(tl.where(gbest_v == g_best, gidx_v, 2147483647), 0)
    m = tl.max(m_v, 0)
    m_safe = tl.where(m > NEG_INF, m, 0.0)
    Z = tl.sum(tl.where(m_v > NEG_INF, z_v * tl.exp(tl.div_rn(m_v - m_safe, T_eff)), 0.0), 0)

    status = tl.where(any_nan != 0, 1, status)
    status = tl.where((status == 0) & greedy & (g_best == NEG_INF), 3, status)
    status = tl.where((status == 0) & (greedy == 0) & (any_pinf != 0), 2, status)
    status = tl.where((status == 0) & (greedy == 0) & (n_fin == 0), 3, status)
    sampling = (status == 0) & (greedy == 0)

    Zs = tl.where(sampling, Z, 1.0)
    ms = tl.where(sampling, m, 0.0)
    pmax = tl.div_rn(1.0, Zs)
    thr_minp = tl.where(min_p > 0, min_p * pmax, 0.0)
    k_on = (k > 0) & (k < V)
    p_on = top_p < 1.0
    filt = sampling & (k_on | p_on | (min_p > 0))
    INV_W = NB / R

    # ---- pass 2: histogram of the min-p survivors, their mass and count
    bins = tl.arange(0, NB)
    hist = tl.zeros([NB], dtype=tl.int32)
    sa_v = tl.zeros([BLOCK], dtype=tl.float32)
    na_v = tl.zeros([BLOCK], dtype=tl.int32)
    n2 = tl.where(filt, V, 0)
    for start in range(0, n2, BLOCK):
        offs, x, A, p, b = _block(base, start, ar, V, ms, T_eff, Zs, thr_minp, INV_W, NB)
        b = tl.where(A, b, NB - 1)
        hist += tl.histogram(b, NB)
        sa_v += tl.where(A, p, 0.0)
        na_v += A.to(tl.int32)
    S_A = tl.sum(sa_v, 0)
    n_A = tl.sum(na_v, 0)

    # ---- choose the bins to gather
    cum = tl.cumsum(hist, 0)
    k_act = k_on & (k < n_A)
    # top-k boundary bin: first bin whose cumulative count reaches k (counts are exact)
    b_k = tl.sum((cum < k).to(tl.int32), 0)
    cnt_upto_bk = tl.sum(tl.where(bins == b_k, cum, 0), 0)
    # top-p boundary bins: estimate each bin's mass at its midpoint, take a margin
    # of bins on each side; the gathered range is verified exactly afterwards
    mid_e = tl.exp(-(bins.to(tl.float32) + 0.5) / INV_W)
    cum_mid = tl.cumsum(hist.to(tl.float32) * mid_e, 0) / Zs
    target = top_p * S_A
    b_mid = tl.sum((cum_mid < target).to(tl.int32), 0)
    b_hi = tl.minimum(b_mid + MARGIN, NB - 1)
    b_lo = tl.maximum(b_mid - MARGIN, 0)
    cnt_upto_bhi = tl.sum(tl.where(bins == b_hi, cum, 0), 0)
    cnt_below_blo = tl.sum(tl.where(bins == b_lo - 1, cum, 0), 0)
    # path: 2 fast (every kept token gathered), 3 boundary (only the boundary bins), 1 untruncated, 4 slow
    fast_k = k_act & (b_k < NB - 1) & (cnt_upto_bk <= KMAX)
    fast_p = (k_act == 0) & p_on & (b_hi < NB - 1) & (cnt_upto_bhi <= KMAX)
    bound_p = (k_act == 0) & p_on & (b_hi < NB - 1) & (fast_p == 0) & (cnt_upto_bhi - cnt_below_blo <= KMAX)
    fast_m = (k_act == 0) & (p_on == 0) & (n_A <= KMAX)
    path = tl.where((sampling == 0), tl.where(status == 0, 0, -1),
                    tl.where((filt == 0), 1,
                             tl.where(fast_k | fast_p | fast_m, 2,
                                      tl.where(bound_p, 3, tl.where((k_act == 0) & (p_on == 0), 1, 4)))))
    g_lo = tl.where(path == 3, b_lo, 0)
    g_hi = tl.where(fast_k, b_k, tl.where(fast_p | (path == 3), b_hi, NB - 1))

    # ---- pass 3: gather the chosen survivors into the workspace
    ws = ws_ptr + row * KMAX
    n_g = 0
    ma_v = tl.zeros([BLOCK], dtype=tl.float32)
    n3 = tl.where((path == 2) | (path == 3), V, 0)
    for start in range(0, n3, BLOCK):
        offs, x, A, p, b = _block(base, start, ar, V, ms, T_eff, Zs, thr_minp, INV_W, NB)
        sel = A & (b >= g_lo) & (b <= g_hi)
        ma_v += tl.where(A & (b < g_lo), p, 0.0)
        pos = n_g + tl.cumsum(sel.to(tl.int32), 0) - 1
        packed = (_key(x).to(tl.int64) << 32) | (4294967295 - offs.to(tl.int64))
        tl.store(ws + pos, packed, mask=sel & (pos < KMAX))
        n_g += tl.sum(sel.to(tl.int32), 0)
    mass_above = tl.sum(ma_v, 0)
    tl.debug_barrier()

    # ---- decide on the sorted workspace (exactly the reference's rules)
    i = tl.arange(0, KMAX)
    gathered = (path == 2) | (path == 3)
    n_use = tl.where(gathered, tl.minimum(n_g, KMAX), 0)
    valid = i < n_use
    packed = tl.load(ws + i, mask=valid, other=-9223372036854775808)
    packed = tl.sort(packed, 0, descending=True)
    key = (packed >> 32).to(tl.int32)
    idx = 4294967295 - (packed & 4294967295)
    xs = _unkey(key)
    ps = tl.where(valid, tl.div_rn(tl.exp(tl.div_rn(xs - ms, T_eff)), Zs), 0.0)
    # top-k, ties kept: the k-th largest survivor (all survivors down to it are gathered)
    p_kth = tl.sum(tl.where(i == k - 1, ps, 0.0), 0)
    keep_k = valid & ((k_act == 0) | (ps >= p_kth))
    S1 = tl.sum(tl.where(keep_k, ps, 0.0), 0)
    S_use = tl.where(k_act, S1, S_A)
    cur = tl.where(keep_k, tl.div_rn(ps, S_use), 0.0)
    excl = tl.cumsum(cur, 0) - cur + tl.div_rn(mass_above, S_use)
    ones = tl.full([KMAX], 1, tl.int32)
    _len, prev_key, _cur = tl.associative_scan((ones, key, key), 0, _shift_combine)
    start_flag = ((i == 0) | (prev_key != key)).to(tl.int32)
    _flag, above = tl.associative_scan((start_flag, excl), 0, _latest_combine)
    top_group = (g_lo == 0) & (key == tl.max(tl.where(valid, key, _INT32_MIN), 0))
    keep = keep_k & ((p_on == 0) | (above < top_p) | top_group)
    # the top-p boundary must lie inside the gathered range: the survivors above it
    # are kept (mass above < top_p) and the first survivor below it is not
    # (mass above >= top_p); otherwise the row falls back to the slow path
    above0 = tl.div_rn(mass_above, S_use)
    total = above0 + tl.sum(cur, 0)
    p_gathered = gathered & p_on & (k_act == 0) & (n_A > n_use)
    missed = (p_gathered & ((total < top_p) | ((above0 >= top_p) & (g_lo > 0)))) | (gathered & (n_g > KMAX))
    path = tl.where(missed, 4, path)
    theta_ws = tl.min(tl.where(keep, key, _INT32_MAX), 0)
    S_keep_ws = tl.sum(tl.where(keep, ps, 0.0), 0)
    # fast path: Gumbel-max inside the workspace
    sc = tl.where(keep, _gumbel(xs, ms, T_eff, seed, offset, idx), NEG_INF)
    best = tl.max(sc, 0)
    tok_ws = tl.min(tl.where(keep & (sc == best), idx, 2147483647), 0)

    # ---- slow path: bisection on the 32-bit logit key (one pass per bit)
    theta_slow = tl.full([], _INT32_MIN, tl.int32)
    n_bits = tl.where(path == 4, 32, 0)
    if path == 4:
        # top-k: smallest t with #(survivors with key > t) < k
        lo = tl.full([], _INT32_MIN, tl.int64)
        hi = tl.full([], _INT32_MAX, tl.int64)
        n_k = tl.where(k_act, n_bits, 0)
        for _it_k in range(0, n_k):
            mid = lo + (hi - lo) // 2
            cnt = 0
            for start in range(0, V, BLOCK):
                offs, x, A, p, b = _block(base, start, ar, V, ms, T_eff, Zs, thr_minp, INV_W, NB)
                cnt += tl.sum((A & (_key(x).to(tl.int64) > mid)).to(tl.int32), 0)
            ok = cnt < k
            hi = tl.where(ok, mid, hi)
            lo = tl.where(ok, lo, mid)
        theta_k = tl.where(k_act, hi, _INT32_MIN)
        S_k = 0.0
        for start in range(0, V, BLOCK):
            offs, x, A, p, b = _block(base, start, ar, V, ms, T_eff, Zs, thr_minp, INV_W, NB)
            A = A & (_key(x).to(tl.int64) >= theta_k)
            S_k += tl.sum(tl.where(A, p, 0.0), 0)
        # top-p: smallest t with mass(kept with key > t) / S_k < top_p
        lo = tl.full([], _INT32_MIN, tl.int64)
        hi = tl.full([], _INT32_MAX, tl.int64)
        n_p = tl.where(p_on, n_bits, 0)
        for _it_p in range(0, n_p):
            mid = lo + (hi - lo) // 2
            mass = 0.0
            for start in range(0, V, BLOCK):
                offs, x, A, p, b = _block(base, start, ar, V, ms, T_eff, Zs, thr_minp, INV_W, NB)
                kx = _key(x).to(tl.int64)
                A = A & (kx >= theta_k)
                mass += tl.sum(tl.where(A & (kx > mid), tl.div_rn(p, S_k), 0.0), 0)
            ok = mass < top_p
            hi = tl.where(ok, mid, hi)
            lo = tl.where(ok, lo, mid)
        theta_p = tl.where(p_on, hi, _INT32_MIN)
        theta_slow = tl.maximum(theta_k, theta_p).to(tl.int32)

    # ---- pass 4: Gumbel-max over the row (untruncated, boundary and slow paths)
    full = (path == 1) | (path == 3) | (path == 4)
    n4 = tl.where(full, V, 0)
    b4_v = tl.full([BLOCK], NEG_INF, tl.float32)
    t4_v = tl.zeros([BLOCK], dtype=tl.int32)
    sk_v = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, n4, BLOCK):
        offs, x, A, p, b = _block(base, start, ar, V, ms, T_eff, Zs, thr_minp, INV_W, NB)
        kx = _key(x)
        kept = tl.where(path == 3, A & ((b < g_lo) | ((b <= g_hi) & (kx >= theta_ws))),
                        tl.where(path == 4, A & (kx >= theta_slow), A))
        sc4 = tl.where(kept, _gumbel(x, ms, T_eff, seed, offset, offs), NEG_INF)
        take = sc4 > b4_v
        t4_v = tl.where(take, offs, t4_v)
        b4_v = tl.where(take, sc4, b4_v)
        sk_v += tl.where(kept, p, 0.0)
    best4 = tl.max(b4_v, 0)
    tok4 = tl.min(tl.where(b4_v == best4, t4_v, 2147483647), 0)
    S_keep4 = tl.sum(sk_v, 0)

    token = tl.where(path == 0, g_idx, tl.where(path == 2, tok_ws, tok4))
    token = tl.where(status != 0, -1, token)
    tl.store(token_ptr + row, token.to(tl.int64))
    tl.store(status_ptr + row, status.to(tl.int32))
    tl.store(path_ptr + row, path.to(tl.int32))

    # ---- optional: the distribution sampled from (same filtering as the draw)
    if WANT_PROBS:
        S_keep = tl.where(path == 2, S_keep_ws, S_keep4)
        theta_final = tl.where(path == 2, theta_ws, tl.where(path == 4, theta_slow, _INT32_MIN))
        pbase = probs_ptr + row * V
        for start in range(0, V, BLOCK):
            offs, x, A, p, b = _block(base, start, ar, V, ms, T_eff, Zs, thr_minp, INV_W, NB)
            inb = offs < V
            kx = _key(x)
            kept = tl.where(path == 3, A & ((b < g_lo) | ((b <= g_hi) & (kx >= theta_ws))), A & (kx >= theta_final))
            out = tl.where(kept, tl.div_rn(p, S_keep), 0.0)
            out = tl.where(path == 0, tl.where(offs == g_idx, 1.0, 0.0), out)
            out = tl.where(status != 0, 0.0, out)
            tl.store(pbase + offs, out, mask=inb)
