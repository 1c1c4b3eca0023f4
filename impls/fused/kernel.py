"""The fused sampling kernels: temperature, min-p, top-k, top-p, greedy and the canonical draw.

Version 5 (:data:`impls.fused.FUSED_VERSION`: version 3's launches, which
version 4 wrapped in the step's rewrites and logprobs, with early accept): a
few light streaming launches over a batch, each row split over ``S`` programs
when the batch is small, then one small launch that decides.
Every parameter is a per-row tensor; which filters apply, and which path a row
takes, is decided on the device from the values (SEMANTICS §1.1 sentinels):
no host branching per row and no kernel per parameter combination.

The kept set of a sampling row is ``{j : x_j >= theta}`` (min-p, top-k with
ties kept and the top-p "mass strictly above" rule each keep a prefix of the
tokens sorted by logit), so the kernels search for ``theta`` with a two-level
radix select instead of sorting the vocabulary. Notation: ``m`` is the largest
finite logit, ``s = (x - m) / T`` (IEEE division, as the reference), ``e =
exp(s)`` the unnormalised probability (``e = 1`` at the maximum; every
normalisation the reference does with ``softmax`` is a ratio of ``e`` sums,
so the softmax denominator is never needed). Min-p keeps ``A = {x finite, e
>= min_p}``, as the threshold ``x >= x_A`` found once per row by bisection
on the float order (within 8 keys of ``m + T ln(min_p)`` when the test confirms
that bracket), testing ``e >= min_p`` in float64 (as the reference,
SEMANTICS §1.5), so every pass decides ``A`` the same way. The *fine bin*
of a survivor is ``f = floor((m - x) * C)`` (monotone in ``x``; ``C`` spreads
``(NB1 - 1) * 256`` fine bins over the survivors' range, at most ``RMAX``
units of ``s``); its level-1 bin is ``f >> 8``.

Launches (each streaming one reads its part of the row once; rows a launch
has nothing to do for exit at once):

1. ``_stats_kernel`` (``B x S`` programs) — per part of a row: NaN/+inf flags,
   largest logit (the row's ``m`` once NaN and +inf rows are rejected; ``-inf``
   when none is finite) and smallest finite one; greedy rows: first argmax
   only.
2. ``_hist_kernel`` (``B x S``) — combines the stats (status, ``m``, ``x_A``,
   ``C``). Rows without filters: Gumbel-max over the part (the draw is done).
   Min-p-only rows: the survivors are packed into the row's workspace
   (``KMAX`` entries). Top-k/top-p rows: a ``NB1``-bin histogram of the
   survivors' level-1 bins, their count and exact mass; the last program of
   the row to finish (atomic ticket) adds the parts and chooses the *window*
   of fine bins that holds the boundary: exact counts for top-k; for top-p a
   *bracket* from bounds on each bin's mass (its tokens lie between its
   edges), tightened by the exact total minus the bounds of the rest
   (``_bracket``). When the window would not fit the workspace, the row is
   *refined*: from the *bracket list* (mode 4) when the bracket's survivors
   fit its ``KBR`` entries (the gather pass packs them, the decide launch
   refines), else by the refine pass. *Early accept* (``EARLY``, on unless
   the kept set is wanted: probabilities, the step's PROCESSED logprobs), for top-p rows without
   top-k (with top-k the extra work did not pay, measured): the same pass
   also takes the Gumbel-max over each part's survivors; the draw's key does not depend
   on the kept set ``K``, so when the row's winner over all survivors is in
   ``K`` it is the draw over ``K`` (ties to the lowest id both ways). The last
   program accepts it when it is certainly kept: it is the row's maximum, or
   the upper bound of the mass up to and including its level-1 bin is below
   ``top_p`` times the mass of the survivors (``_sure_kept``). The row is then done (path 5):
   the later launches return at once for it.
3. ``_refine_kernel`` (``B x S``, rows whose bracket exceeds ``KBR`` only) — an ``NBS``-bin histogram
   over the bracket's level-1 bins (``2**rsh`` fine bins per refined bin,
   chosen per row so that ``NBS - 1`` of them cover the bracket), and the exact mass
   above them; the last program chooses the window in these, by the same
   bounds.
4. ``_gather_kernel`` (``B x S``) — the survivors in the window go to the
   workspace (packed ``(logit key, -id)``), the survivors above it (all kept)
   to a second workspace of ``KBIG`` entries; when there are more of those,
   their Gumbel-max and mass are taken in this pass instead. Rows of mode 4 pack
   their bracket's survivors into the bracket list instead of a window, with those above it when they fit
   (``one_list``: one list instead of two); a row's only program writes such a list in a segment a warp, each
   warp from its own running count (``seg_lists``, :func:`_seg_append`). Min-p-only rows
   whose survivors overflowed the workspace take their draw here.
5. ``_decide_kernel`` (``B`` programs) — rows of mode 4 first refine their bracket
   list as the refine pass would (same refined bins and checks; the mass below the list
   is exact, where the refine pass bounds it), pack the
   window into the window list and append the listed survivors above it to the above-window list, drawn
   there (a Philox per kept entry only; in the list's loop when they would not fit); a window of more than
   ``NSUB`` entries is refined the same way from its own list to at most ``NSUB``; the window is sorted (``tl.sort`` on
   ``(key, -id)``) and min-p, top-k (ties kept) and top-p (keep a token iff
   the mass strictly above it is ``< top_p``; the most likely tokens always
   kept) are decided exactly as the reference does on the renormalised
   survivors; the boundary is verified to lie inside the window. Gumbel-max
   with the canonical Philox draw (DESIGN.md decision 1) over the kept tokens
   of the window, combined with the best of the tokens above it. A row whose
   window cannot be isolated (huge tie groups, a boundary in the clamped tail,
   a failed verification) takes the *slow* path in this launch: bisection on
   the 32-bit logit key, one pass over the row per bit. It is correct and
   rare, and the path each row took is returned.
6. ``_probs_kernel`` (``B x S``, only when the distribution is asked for;
   early accept is then off).

A call its caller says is all greedy (the hint) is ``_stats_kernel`` then
``_greedy_kernel`` (``B`` programs, combining the parts), or from
``greedy_rows`` rows ``_greedy_row_kernel`` alone (a program per whole row).

Why several launches: each streaming pass needs a row-wide result of the one
before (the maximum, then the boundary bin), and splitting a row over
programs is what lets a small batch use the whole GPU; the decide step's
large arrays live only in the small decide launch, so the streaming launches
stay light (measured in ``benchmarks/README.md``).

Each streaming loop carries ``num_stages`` (``NSTG``: Triton pipelines a loop without ``tl.dot`` only
then), and Triton specialises the vocabulary, the row stride and the part length (only ``S`` is left
unspecialised): when they are multiples of 16, as every vocabulary of the latency suite, each thread loads
16 bytes at a time instead of one float (``tests/_compile_sm90.py`` checks it); a row that is its launch's
only program fills its workspace lists from a running count (``LOCAL``), others reserve slots with one
atomic per block; rows at ``T == 1`` take the histogram and refine passes' masses from ``x - m``
(``UNIT_T``: the IEEE quotient by 1 is the same value). Tuning only: the tokens do not depend on them
(benchmarks/README.md, "Tuning the streaming passes").

Masses are summed in 40-bit fixed point (int64), so every sum is exact in
any order: results do not depend on how a row was split, nor on the batch it
is in. Outcome codes per row (``status``): 0 ok, 1 ``nan_logits``, 2
``posinf_logits``, 3 ``no_valid_token``, 4 ``invalid_temperature``, 5
``invalid_top_k``, 6 ``invalid_top_p``, 7 ``invalid_min_p``; the token of a
rejected row is -1. Path codes: 0 greedy, 1 untruncated (the draw scanned the
row), 2 fast (every kept token was in the workspace), 3 boundary (only the
window was), 4 slow, 5 accepted (early accept: the full-row winner, certainly
kept, drawn in the histogram pass; the kept set's threshold and mass are not
computed, so the record's ``e_thr`` and kept mass are 0), -1 rejected.

Ties are grouped by probability, as the reference does (SEMANTICS §1.5):
top-k keeps every survivor with ``e`` at least the k-th largest's, top-p
groups equal ``e`` (the mass strictly above a group), and the kept set is
stored as a threshold on ``e``. Distinct logits can have equal float32
``e`` (a huge temperature makes every ``e`` 1), so the decide launch checks
that no survivor just outside the window ties with the window's edge: from
the edges' fine bins where that rules a tie out (nearly always), else with
one exact pass over the row for the neighbours' keys; and the slow path
bisects top-p on the bits of ``e``. Ties are those of this kernel's float32
``e``, not of the reference's (equal logits, SEMANTICS §1.5): distinct logits
whose ``e`` round to one float32 tie here and not there (1-ulp cases at
``T = 1`` with neighbouring-float logits; many at ``T`` of 1e3 to 1e8), the
kernel's own known difference. ``benchmarks/README.md`` has reproducers.

Top-p membership is exact (SEMANTICS §1.5): a token is kept iff the fixed-point
mass strictly above it is below ``ceil(top_p * S)``, ``S`` the fixed-point mass
of the survivors it is renormalised over and ``top_p`` read as float64 (a
float64 ``top_p`` tensor is compared as given). Version 3 of the kernel; before,
float32 cumulative sums could round up to ``>= top_p`` near ``top_p = 1``.
"""

from __future__ import annotations

import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

__all__ = ["STATUS_KINDS", "PATHS", "LAYOUT", "SLOTS", "launch_args", "launch_specs", "greedy_row_shape",
           "warp_lists", "seg_lists", "pdl"]

STATUS_KINDS = {0: None, 1: "nan_logits", 2: "posinf_logits", 3: "no_valid_token", 4: "invalid_temperature",
                5: "invalid_top_k", 6: "invalid_top_p", 7: "invalid_min_p"}
PATHS = {-1: "rejected", 0: "greedy", 1: "untruncated", 2: "fast", 3: "boundary", 4: "slow", 5: "accepted"}

_INT32_MAX = tl.constexpr(2147483647)
_INT32_MIN = tl.constexpr(-2147483648)
_FIX = tl.constexpr(1099511627776.0)  # 2**40: masses in fixed point, exact sums in any order
_UNFIX = tl.constexpr(1.0 / 1099511627776.0)
_NB2 = tl.constexpr(256)  # fine bins per level-1 bin
_SB = tl.constexpr(32)  # parts combined per step
# per-row workspace layout: int32 [S*_PI partials | S*NB1 histograms | S*NBS histograms | _RI record | _CNT counters],
# float32 [S*_PF partials | _RF record], int64 [S*_P64 partials | _R64 record | KMAX window | KBIG above]
_PI = tl.constexpr(8)
_PF = tl.constexpr(8)
_P64 = tl.constexpr(4)
_RI = tl.constexpr(16)
_CNT = tl.constexpr(24)  # counters: 0 histogram ticket, 1 refine ticket, 2/3 list lengths, 4 entries lifted, 5-7
# unused, 8-23 the lengths of a segmented bracket list's segments (_seg_append: one a warp, up to 16 warps)
_SEG0 = tl.constexpr(8)
_RF = tl.constexpr(8)
_R64 = tl.constexpr(4)
#: Sizes of the per-row records (the host allocates ``LAYOUT``-shaped workspaces).
LAYOUT = {"PI": 8, "PF": 8, "P64": 4, "RI": 16, "RF": 8, "R64": 4, "CNT": 24}

# row record fields
_I_STATUS = tl.constexpr(0)
_I_KIND = tl.constexpr(1)  # -1 rejected, 0 greedy, 1 no filter, 2 min-p only, 3 top-k/top-p
_I_GIDX = tl.constexpr(2)
_I_MODE = tl.constexpr(3)  # kind 3: 0 gather, 1 refine, 2 slow, 3 accepted (drawn in the histogram pass), 4 list
_I_FLO = tl.constexpr(4)
_I_FHI = tl.constexpr(5)
_I_NA = tl.constexpr(6)
_I_NABOVE = tl.constexpr(7)
_I_F0 = tl.constexpr(8)  # first fine bin of the refined range
_I_NABOVE0 = tl.constexpr(9)  # survivors above the refined range
_I_KACT = tl.constexpr(10)
_I_ETOK = tl.constexpr(11)  # the accepted token (mode 3)
_I_ABOVE = tl.constexpr(12)  # survivors above the window: 0 none, 1 packed in the second workspace, 2 drawn in the pass
_I_RSH = tl.constexpr(13)  # fine bins per refined bin: 2**RSH
_F_M = tl.constexpr(0)
_F_T = tl.constexpr(1)
_F_XA = tl.constexpr(2)
#: The key (:func:`_key`) of -inf, one below the least finite float32's.
_KEY_NEG_INF = tl.constexpr(-2139095041)
#: The least finite float32: x_A of a row without min-p (:func:`_row_stats`).
_LEAST_FINITE = tl.constexpr(-3.4028234663852886e38)
_F_C = tl.constexpr(3)
_F_EKEEP = tl.constexpr(4)
_F_ETHR = tl.constexpr(5)  # kept: survivors with e = exp((x - m) / T) >= this (ties by probability)
_Q_EA = tl.constexpr(0)
_Q_MASS0 = tl.constexpr(1)  # exact mass above the refined range


# ----------------------------------------------------------------------------- helpers

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
def _fix(e):
    # probability mass -> 40-bit fixed point (round to nearest); e in [0, 1]
    return (e * _FIX + 0.5).to(tl.int64)


@triton.jit
def _probe():
    pass


#: Whether Triton runs these kernels in its interpreter (``TRITON_INTERPRET=1`` when it was imported).
INTERPRETED = type(_probe).__name__ == "InterpretedFunction"
#: The same for a kernel body: compiled, inline PTX applies.
_PTX = tl.constexpr(not INTERPRETED)


@triton.jit
def _mass(s, sel):
    """``_fix(exp(s))`` where ``sel``, else 0: the fixed-point mass of a streaming pass, in fewer instructions.
    Compiled, ``exp`` is ``ex2.approx.ftz`` of ``s * log2(e)`` (inline PTX): the instruction ``tl.exp`` lowers to,
    without the rescaling of results below 2**-126, which ``_fix`` maps to 0 either way; and ``e * 2**40 + 0.5`` is
    one FMA, exact as the product is (a power of two). Bit for bit ``tl.where(sel, _fix(tl.exp(s)), 0)``."""
    if _PTX:
        e = tl.inline_asm_elementwise("ex2.approx.ftz.f32 $0, $1;", "=f,f", [s * 1.4426950216293334961],
                                      dtype=tl.float32, is_pure=True, pack=1)
    else:
        e = tl.exp(s)
    return tl.fma(tl.where(sel, e, 0.0), _FIX, 0.5).to(tl.int64)


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
def _params(row, temp_ptr, top_k_ptr, top_p_ptr, min_p_ptr, V):
    T = tl.load(temp_ptr + row).to(tl.float32)
    k = tl.load(top_k_ptr + row).to(tl.int64)
    # top_p in float64: a float64 caller's value is compared as given (SEMANTICS §1.5)
    top_p = tl.load(top_p_ptr + row).to(tl.float64)
    min_p = tl.load(min_p_ptr + row).to(tl.float32)
    # validation (SEMANTICS §1.1 rule 5; reference order: temperature, top_p, top_k, min_p)
    status = tl.where((T != T) | (T < 0), 4,
                      tl.where((top_p != top_p) | (top_p < 0) | (top_p > 1), 6,
                               tl.where(k < 0, 5, tl.where((min_p != min_p) | (min_p < 0) | (min_p > 1), 7, 0))))
    greedy = (T == 0) | (k == 1) | (top_p == 0) | (min_p == 1)
    T_eff = tl.where(greedy | (status != 0), 1.0, T)
    k_on = (k > 0) & (k < V)
    p_on = top_p < 1.0
    mp_on = min_p > 0
    return T_eff, k, top_p, min_p, status, greedy, k_on, p_on, mp_on


@triton.jit
def _ws(row, wsi, wsf, ws64, S, NB1: tl.constexpr, NBS: tl.constexpr, KMAX: tl.constexpr, KBIG: tl.constexpr):
    bi = wsi + row * (S * (_PI + NB1 + NBS) + _RI + _CNT)
    hist1 = bi + S * _PI
    hist2 = hist1 + S * NB1
    ri = hist2 + S * NBS
    cnt = ri + _RI
    bf = wsf + row * (S * _PF + _RF)
    rf = bf + S * _PF
    b64 = ws64 + row * (S * _P64 + _R64 + KMAX + KBIG)
    r64 = b64 + S * _P64
    cand = r64 + _R64
    abv = cand + KMAX
    return bi, hist1, hist2, ri, cnt, bf, rf, b64, r64, cand, abv


@triton.jit
def _brk(row, ws64, S, KMAX: tl.constexpr, KBIG: tl.constexpr, KBR: tl.constexpr):
    # the row's bracket list (mode 4): KBR int64 after the per-row regions of the launch's rows
    # (tl.num_programs(0) of the gather and decide launches is the batch)
    return ws64 + tl.num_programs(0).to(tl.int64) * (S * _P64 + _R64 + KMAX + KBIG) + row * KBR


@triton.jit
def _gather_tile(base, st, V, x_lo, x_hi, xA, R4: tl.constexpr, FLAT: tl.constexpr = False):
    """One ``[R4, 4]`` tile of the gather pass (``FLAT``: ``[4 R4]``, for :func:`_warp_append`): the survivors in
    the window (``x_lo <= x <= x_hi``, :func:`_fine_bounds`), those above it (``x > x_hi``, all kept), and every
    logit packed as a list entry (``(key, -id)``, :func:`_pack`). A sampling row has no NaN nor +inf."""
    if FLAT:
        offs, x = _tile1(base, st, V, R4 * 4)
    else:
        offs, x = _tile(base, st, V, R4)
    return (x >= x_lo) & (x <= x_hi), (x > x_hi) & (x >= xA), _pack(x, offs)


@triton.jit
def _least_key_below(m, C, c, NBF: tl.constexpr):
    # the least key k (_key) of a row value (<= m) whose fine bin is below c (_fine: 0 at m, non-decreasing as x
    # falls, so the keys that qualify are those from k up): key(m) + 1 where none does (c <= 0), the key of -inf
    # where every one does (c >= NBF). Bisected from a bracket of 16 keys around m - c / C where it holds (4 steps),
    # else over every key (32 steps), as x_A's (_row_stats)
    hi0 = _key(m).to(tl.int64)
    g = _key(m - c.to(tl.float32) / C).to(tl.int64)
    a = tl.maximum(tl.minimum(g, hi0) - 8, _KEY_NEG_INF)
    b = tl.minimum(a + 16, hi0)
    ok_b = _fine(_unkey(b.to(tl.int32)), m, C, NBF) < c
    ok_a = _fine(_unkey(a.to(tl.int32)), m, C, NBF) < c
    near = ok_b & (ok_a == 0)
    lo = tl.where(near, a, _KEY_NEG_INF)   # does not qualify (c < NBF: the bin of -inf is NBF - 1)
    hi = tl.where(near, b, hi0)            # qualifies (c >= 1: the bin of m is 0)
    for _it in range(0, tl.where(near, 4, 32)):
        mid = lo + (hi - lo) // 2
        ok = _fine(_unkey(mid.to(tl.int32)), m, C, NBF) < c
        hi = tl.where(ok, mid, hi)
        lo = tl.where(ok, lo, mid)
    return tl.where(c <= 0, hi0 + 1, tl.where(c >= NBF, _KEY_NEG_INF, hi))


@triton.jit
def _fine_bounds(m, C, xA, f_lo, f_hi, NBF: tl.constexpr):
    """``(x_lo, x_hi)``: a survivor (``x >= xA``, finite) lies in fine bins ``[f_lo, f_hi]`` (:func:`_fine`) iff
    ``x_lo <= x <= x_hi``, and above them iff ``x > x_hi``: fine bins do not rise as ``x`` rises (each step of
    ``_fine`` is monotone), so each bound is a bisection on the float order with ``_fine``'s own arithmetic
    (:func:`_least_key_below`), once a program, instead of a fine bin a logit in the gather pass. ``x_hi`` is -inf
    where no bin reaches ``f_lo`` (an empty window: ``f_lo = NBF``), ``m`` where every one does (``f_lo = 0``)."""
    k_lo = _least_key_below(m, C, f_hi + 1, NBF)
    k_hi = _least_key_below(m, C, f_lo, NBF)
    x_lo = tl.maximum(_unkey(k_lo.to(tl.int32)), xA)
    x_hi = tl.where(k_hi == _KEY_NEG_INF, float("-inf"), _unkey((k_hi - 1).to(tl.int32)))
    return x_lo, x_hi


@triton.jit
def _tile(base, st, V, R4: tl.constexpr):
    # one block of a row as a [BLOCK // 4, 4] tile: each row of the tile is one Philox counter; -inf past V (a
    # sampling row has no NaN nor +inf: x >= x_A alone tells a survivor, _row_stats)
    r4 = tl.arange(0, R4)
    c4 = tl.arange(0, 4)
    offs = st + r4[:, None] * 4 + c4[None, :]
    x = tl.load(base + offs, mask=offs < V, other=float("-inf")).to(tl.float32)
    return offs, x


@triton.jit
def _tile1(base, st, V, BLOCK: tl.constexpr):
    # one block of a row, flat (_tile's values)
    offs = st + tl.arange(0, BLOCK)
    x = tl.load(base + offs, mask=offs < V, other=float("-inf")).to(tl.float32)
    return offs, x


def _lane_hist_ptx() -> str:
    """PTX of :func:`_lane_hist` for 64 bins: per element, a warp ballot of each of the 6 bits of its bin (as
    Triton's ``tl.histogram`` lowering does, after @apgoucher), the lane's own two bins (``lane + 32 j``) matched
    with one AND per bit and counted with ``popc``; operands ``$0-3`` out, ``$4-7`` bins, ``$8-11`` counters
    (``pack=4``). (The refine pass's 128 bins keep ``tl.histogram``: it is rare.)"""
    nbits = 6
    own = 1 << (nbits - 5)
    a = ["{", ".reg .u32 ln, t, acc, sel, c<4>, m<7>, inv<5>;", ".reg .pred p;", "mov.u32 ln, %laneid;"]
    for k in range(5):
        a += [f"bfe.u32 t, ln, {k}, 1;", f"sub.u32 inv{k}, t, 1;"]   # 0 where the lane's bit k is set, else ~0
    a += [f"mov.u32 c{j}, ${8 + j};" for j in range(4)]
    for e in range(4):
        for k in range(nbits):
            a += [f"and.b32 t, ${4 + e}, {1 << k};", "setp.ne.u32 p, t, 0;", f"vote.sync.ballot.b32 m{k}, p, -1;"]
        a += ["xor.b32 acc, m0, inv0;"] + [f"xor.b32 t, m{k}, inv{k};\nand.b32 acc, acc, t;" for k in range(1, 5)]
        for j in range(own):
            a.append("mov.u32 sel, acc;")
            for k in range(5, nbits):
                a.append(f"and.b32 sel, sel, m{k};" if (j >> (k - 5)) & 1 else f"not.b32 t, m{k};\nand.b32 sel, sel, t;")
            a += ["popc.b32 t, sel;", f"add.u32 c{j}, c{j}, t;"]
    a += [f"mov.u32 ${j}, c{j};" for j in range(4)] + ["}"]
    return "\n".join(a)


_LANE_HIST_64 = tl.constexpr(_lane_hist_ptx())
_LANE_BINS_64 = tl.constexpr("mov.u32 $0, %laneid;\nadd.u32 $1, $0, 32;\nmov.u32 $2, -1;\nmov.u32 $3, -1;")


@triton.jit
def _lane_hist(b, cnt):
    # per-lane counters of a 64-bin histogram (GPU only: inline PTX): the lane's bins lane and lane + 32 in the
    # first two of each 4 consecutive elements it holds; no shared memory and no barrier per tile
    return tl.inline_asm_elementwise(_LANE_HIST_64, "=r,=r,=r,=r,r,r,r,r,r,r,r,r", [b, cnt], dtype=tl.int32,
                                     is_pure=False, pack=4)


@triton.jit
def _lane_hist_total(cnt, NB: tl.constexpr):
    # the [NB] histogram of _lane_hist's counters: each element's bin, then a sum per bin (once per program)
    ids = tl.inline_asm_elementwise(_LANE_BINS_64, "=r,=r,=r,=r,r,r,r,r", [cnt], dtype=tl.int32, is_pure=True,
                                    pack=4)
    bins = tl.arange(0, NB)
    return tl.sum(tl.where(ids[None, :] == bins[:, None], cnt[None, :], 0), 1)


@triton.jit
def _hist_add(b1, h, hc, NB1: tl.constexpr, LANE: tl.constexpr):
    # one tile's level-1 bins into the histogram: tl.histogram's [NB1] (h), or with LANE the per-lane counters (hc)
    if LANE:
        hc = _lane_hist(b1, hc)
    else:
        h += tl.histogram(b1, NB1)
    return h, hc


@triton.jit
def _hist_done(h, hc, NB1: tl.constexpr, LANE: tl.constexpr):
    # the [NB1] histogram after the last tile (_hist_add)
    if LANE:
        h += _lane_hist_total(hc, NB1)
    return h


@triton.jit
def _fine(x, m, C, NBF: tl.constexpr):
    # fine bin of a survivor: 0 at the maximum, non-decreasing as x decreases
    return tl.minimum((m - x) * C, NBF - 1.0).to(tl.int32)


@triton.jit
def _coarse(x, m, C8, NBF: tl.constexpr):
    # level-1 bin of a survivor, _fine(x) >> 8 exactly with C8 = C / 256: scaling by a power of two commutes with
    # the product's rounding, the clamp's bound (NBF - 1) / 256 is exact, and floor(min(z, N) / 256) =
    # min(floor(z), N) >> 8 for z >= 0 (a survivor's (m - x) * C); one shift a logit fewer
    return tl.minimum((m - x) * C8, (NBF - 1.0) / _NB2).to(tl.int32)


def _warp_ranks_ptx() -> list:
    """PTX lines shared by :func:`_warp_append_ptx` and :func:`_seg_append_ptx`: from ``c``, the lane's count of
    selected elements (0-4, three bits: one ballot each), ``r`` the count of the lanes before it (the ballots masked
    with ``%lanemask_lt``) and ``n`` the warp's (registers ``c t r n b0 b1 b2 lt``, predicate ``p``)."""
    a = []
    for k in range(3):   # the lane's count, bit by bit, across the warp
        a += [f"and.b32 t, c, {1 << k};", "setp.ne.u32 p, t, 0;", f"vote.sync.ballot.b32 b{k}, p, -1;"]
    a += ["mov.u32 lt, %lanemask_lt;", "and.b32 t, b0, lt;", "popc.b32 r, t;"]
    for k in (1, 2):   # the lanes before this one
        a += [f"and.b32 t, b{k}, lt;", "popc.b32 t, t;", f"shl.b32 t, t, {k};", "add.u32 r, r, t;"]
    a += ["popc.b32 n, b0;"]
    for k in (1, 2):   # the warp
        a += [f"popc.b32 t, b{k};", f"shl.b32 t, t, {k};", "add.u32 n, n, t;"]
    return a


def _warp_append_ptx() -> str:
    """PTX of :func:`_warp_append` (``pack=4``; operands: ``$0-3`` out, each element's slot, unused; ``$4-7`` the
    selection, 0 or 1; ``$8-11`` the packed entries (64-bit); then the same for all elements: ``$12-15`` and
    ``$16-19`` the low and high words of the list's address, ``$20-23`` and ``$24-27`` those of its count's,
    ``$28-31`` its capacity). A lane's count (0-4) is three bits: one ballot each gives every lane the warp's
    count and, masked with ``%lanemask_lt``, the count of the lanes before it; lane 0 reserves the warp's slots
    with one atomic and a shuffle hands out their start. An element's slot is that start, the lanes before it,
    then the lane's selected elements before it (any order will do: every reader of the lists is order-free); a
    selected element below the capacity is stored there."""
    a = ["{", ".reg .u32 c, t, r, n, b0, b1, b2, lt, ln, old;", ".reg .u64 a, d, w;", ".reg .pred p, q;",
         "add.u32 c, $4, $5;", "add.u32 c, c, $6;", "add.u32 c, c, $7;"]
    a += _warp_ranks_ptx()
    a += ["mov.u32 ln, %laneid;", "setp.eq.u32 p, ln, 0;", "setp.ne.u32 q, n, 0;", "and.pred p, p, q;",
          "mov.b64 a, {$20, $24};", "mov.u32 old, 0;", "@p atom.global.add.u32 old, [a], n;",
          "shfl.sync.idx.b32 old, old, 0, 0x1f, -1;", "add.u32 r, r, old;", "mov.b64 d, {$12, $16};"]
    for e in range(4):   # each element: its slot out, stored if selected and below the capacity
        if e:
            a += [f"add.u32 r, r, ${3 + e};"]
        a += [f"mov.u32 ${e}, r;", f"setp.ne.u32 p, ${4 + e}, 0;", "setp.lt.u32 q, r, $28;", "and.pred p, p, q;",
              "mul.wide.u32 w, r, 8;", "add.u64 w, d, w;", f"@p st.global.b64 [w], ${8 + e};"]
    return "\n".join(a + ["}"])


_WARP_APPEND = tl.constexpr(_warp_append_ptx())


_WARP_APPEND_IO = tl.constexpr(",".join(["=r"] * 4 + ["r"] * 4 + ["l"] * 4 + ["r"] * 20))


@triton.jit
def _warp_append(dst, cnt_ptr, cap, sel, packed):
    # append a tile's selected entries to a per-row list with one atomic per warp (WARP, GPU only: inline PTX,
    # four logits a thread, _WARP_APPEND): no block scan, no barrier. The stores are in the asm: Triton 3.6
    # rematerialises an inline asm (side effects and all) once per layout its result is used in, which would
    # repeat the atomic (offline sm_90, 2026-12-06)
    si = sel.to(tl.int32)
    z = tl.zeros_like(si)
    d = dst.to(tl.int64)
    c = cnt_ptr.to(tl.int64)
    tl.inline_asm_elementwise(_WARP_APPEND, _WARP_APPEND_IO,
                              [si, packed, (d & 0xFFFFFFFF).to(tl.int32) + z, (d >> 32).to(tl.int32) + z,
                               (c & 0xFFFFFFFF).to(tl.int32) + z, (c >> 32).to(tl.int32) + z, cap + z],
                              dtype=tl.int32, is_pure=False, pack=4)


def _seg_append_ptx() -> str:
    """PTX of :func:`_seg_append` (``pack=4``; operands: ``$0-3`` out, the warp's count after the tile; ``$4-7`` the
    selection, 0 or 1; ``$8-11`` the packed entries (64-bit); then the same for all elements: ``$12-15`` and
    ``$16-19`` the low and high words of the list's address, ``$20-23`` the warp's count before the tile,
    ``$24-27`` a segment's capacity). The ranks as in :func:`_warp_append_ptx` (three ballots, ``popc``); the warp
    ``%tid.x / 32`` writes its segment, from ``warp * capacity``, at its own running count: no atomic, no shuffle,
    no wait on another warp. A selected element whose rank in the segment is below the capacity is stored."""
    a = ["{", ".reg .u32 c, t, r, n, b0, b1, b2, lt, sg;", ".reg .u64 d, w;", ".reg .pred p, q;",
         "add.u32 c, $4, $5;", "add.u32 c, c, $6;", "add.u32 c, c, $7;"]
    a += _warp_ranks_ptx()
    a += ["add.u32 r, r, $20;", "mov.u32 sg, %tid.x;", "shr.u32 sg, sg, 5;", "mul.lo.u32 sg, sg, $24;",
          "mov.b64 d, {$12, $16};"]
    for e in range(4):   # each element: stored if selected and below the capacity
        if e:
            a += [f"add.u32 r, r, ${3 + e};"]
        a += [f"setp.ne.u32 p, ${4 + e}, 0;", "setp.lt.u32 q, r, $24;", "and.pred p, p, q;", "add.u32 t, sg, r;",
              "mul.wide.u32 w, t, 8;", "add.u64 w, d, w;", f"@p st.global.b64 [w], ${8 + e};"]
    a += ["add.u32 t, $20, n;"] + [f"mov.u32 ${e}, t;" for e in range(4)]
    return "\n".join(a + ["}"])


_SEG_APPEND = tl.constexpr(_seg_append_ptx())
_SEG_APPEND_IO = tl.constexpr(",".join(["=r"] * 4 + ["r"] * 4 + ["l"] * 4 + ["r"] * 16))
_WARP_ID = tl.constexpr("mov.u32 $0, %tid.x;\nshr.u32 $0, $0, 5;")


@triton.jit
def _seg_append(dst, segcap, sel, packed, used, SEG: tl.constexpr, PTX: tl.constexpr):
    """Append a flat tile's selected entries to a *segmented* list: ``SEG`` segments of ``segcap`` entries, the
    ``w``-th written by warp ``w`` alone (a row's only program; ``SEG`` its warps) from its own running count
    ``used``, with no atomic and no block scan. With ``PTX`` (compiled, four logits a thread) the ranks are warp
    ballots (:func:`_seg_append_ptx`) and ``used`` is ``[BLOCK]``, each element holding its warp's count; otherwise
    (the interpreter) the same lists from a ``[SEG, BLOCK // SEG]`` view of the tile, warp ``w`` taking the
    ``w``-th run of ``BLOCK // SEG`` logits, as four logits a thread give each warp, and ``used`` is ``[SEG]``.
    Entries past a segment's capacity are counted, not stored (the decide launch sends the row to the slow path).
    Returns the new ``used``."""
    if PTX:
        z = tl.zeros_like(used)
        d = dst.to(tl.int64)
        used = tl.inline_asm_elementwise(_SEG_APPEND, _SEG_APPEND_IO,
                                         [sel.to(tl.int32), packed, (d & 0xFFFFFFFF).to(tl.int32) + z,
                                          (d >> 32).to(tl.int32) + z, used, segcap + z],
                                         dtype=tl.int32, is_pure=False, pack=4)
    else:
        BLOCK: tl.constexpr = sel.shape[0]
        si = tl.reshape(sel.to(tl.int32), [SEG, BLOCK // SEG])
        pk = tl.reshape(packed, [SEG, BLOCK // SEG])
        rank = used[:, None] + tl.cumsum(si, 1) - 1
        pos = tl.arange(0, SEG)[:, None] * segcap + rank
        tl.store(dst + pos, pk, mask=(si != 0) & (rank < segcap))
        used = used + tl.sum(si, 1)
    return used


@triton.jit
def _seg_end(cnt, used, SEG: tl.constexpr, PTX: tl.constexpr):
    """After the last tile of :func:`_seg_append`: each segment's length to counters ``_SEG0 ...``, their sum
    (the list's length) to counter 2."""
    if PTX:
        wid = tl.inline_asm_elementwise(_WARP_ID, "=r,r", [used], dtype=tl.int32, is_pure=True, pack=1)
        tl.store(cnt + _SEG0 + wid, used)   # every element of a warp stores its warp's count
        n = tl.sum(used, 0) // (used.shape[0] // SEG)
    else:
        tl.store(cnt + _SEG0 + tl.arange(0, SEG), used)
        n = tl.sum(used, 0)
    tl.store(cnt + 2, n)


@triton.jit
def _seg_pos(i, n_w, SEG: tl.constexpr, SEGCAP: tl.constexpr):
    # where the i-th entry of a segmented list lies (_seg_append; n_w: the [SEG] segment lengths, each at most
    # SEGCAP): segment s = the last with i >= its start, at s * SEGCAP + i - start. SEG <= 1: a packed list (i)
    pos = i
    if SEG > 1:
        wa = tl.arange(0, SEG)
        for w in tl.static_range(1, SEG):
            start = tl.sum(tl.where(wa < w, n_w, 0), 0)
            gap = SEGCAP - tl.sum(tl.where(wa == w - 1, n_w, 0), 0)
            pos = pos + tl.where(i >= start, gap, 0)
    return pos


@triton.jit
def _compact(dst, cnt_ptr, cap, sel, packed, used, own, WARP: tl.constexpr = False):
    # append the selected entries of a tile to a per-row list; returns `used` + their number. A program
    # that owns the row's list in this launch (`own`: it is the row's only program) takes its slots from
    # `used` (the list's length before the tile); otherwise one atomic reserves them, whose round trip
    # each tile would wait for. The owner stores the final length (_compact_end). With WARP, one atomic per warp
    # (_warp_append; never `own`, and `used` is returned as given)
    if WARP:
        _warp_append(dst, cnt_ptr, cap, sel, packed)
    else:
        si = sel.to(tl.int32)
        rs = tl.sum(si, 1)
        n = tl.sum(rs, 0)
        if n > 0:
            if own:
                base = used
            else:
                base = tl.atomic_add(cnt_ptr, n)
            pos = base + (tl.cumsum(rs, 0) - rs)[:, None] + tl.cumsum(si, 1) - 1
            tl.store(dst + pos, packed, mask=sel & (pos < cap))
        used = used + n
    return used


@triton.jit
def _compact2(dst, cnt_ptr, cap, sel, dst2, cnt2_ptr, cap2, sel2, packed, used, used2, own, WARP: tl.constexpr = False):
    # _compact of two disjoint selections of one tile into two lists, with one block reduction and one block scan
    # for both (each selection's per-row counts in one half of an int32: BLOCK <= 16384 keeps the upper half's
    # count, up to BLOCK, below the sign bit; ops.apply_tuning refuses larger blocks)
    if WARP:
        _warp_append(dst, cnt_ptr, cap, sel, packed)
        _warp_append(dst2, cnt2_ptr, cap2, sel2, packed)
    else:
        si = sel.to(tl.int32)
        si2 = sel2.to(tl.int32)
        rs = tl.sum(si + (si2 << 16), 1)
        n_both = tl.sum(rs, 0)
        if n_both > 0:
            n = n_both & 0xFFFF
            n2 = n_both >> 16
            if own:
                base = used
                base2 = used2
            else:
                base = tl.atomic_add(cnt_ptr, n, mask=n > 0)
                base2 = tl.atomic_add(cnt2_ptr, n2, mask=n2 > 0)
            before = tl.cumsum(rs, 0) - rs
            pos = base + (before & 0xFFFF)[:, None] + tl.cumsum(si, 1) - 1
            tl.store(dst + pos, packed, mask=sel & (pos < cap))
            pos2 = base2 + (before >> 16)[:, None] + tl.cumsum(si2, 1) - 1
            tl.store(dst2 + pos2, packed, mask=sel2 & (pos2 < cap2))
            used = used + n
            used2 = used2 + n2
    return used, used2


@triton.jit
def _compact_start(cnt_ptr, own):
    # the list's length before a launch's first tile (read only by an owner, see _compact)
    used = tl.sum(tl.zeros([1], dtype=tl.int32), 0)
    if own:
        used = tl.load(cnt_ptr)
    return used


@triton.jit
def _compact_end(cnt_ptr, used, own):
    if own:
        tl.store(cnt_ptr, used)


@triton.jit
def _pack(x, offs):
    return (_key(x).to(tl.int64) << 32) | (4294967295 - offs.to(tl.int64))


@triton.jit
def _unpack(packed):
    # a list entry (_pack) -> (key, token id), int32 both
    return (packed >> 32).to(tl.int32), (4294967295 - (packed & 4294967295)).to(tl.int32)


@triton.jit
def _tile_uniform(seed, st, o_lo, o_hi, R4: tl.constexpr):
    # the uniforms of a [R4, 4] tile starting at st (a multiple of 4): one Philox counter per tile row
    # (DESIGN.md decision 1, as _uniform)
    r4 = tl.arange(0, R4)
    c4 = tl.arange(0, 4)[None, :]
    g = (st // 4 + r4).to(tl.uint32)
    z = g * 0
    w0, w1, w2, w3 = tl.philox(seed, g, z, z + o_lo, z + o_hi)
    w = tl.where(c4 == 0, w0[:, None], tl.where(c4 == 1, w1[:, None], tl.where(c4 == 2, w2[:, None], w3[:, None])))
    return tl.uint_to_uniform_float(w)


@triton.jit
def _gumbel_scan(base, lo, hi, V, m, T, xA, C, f_lo, e_thr, seed, offset, BLOCK: tl.constexpr, NBF: tl.constexpr,
                 NSTG: tl.constexpr):
    """Gumbel-max and fixed-point mass over ``A & (f < f_lo) & (e >= e_thr)`` in ``[lo, hi)``.

    Philox is evaluated once per counter (4 tokens) on ``[BLOCK // 4, 4]`` tiles.
    """
    R4: tl.constexpr = BLOCK // 4
    b_v = tl.full([R4, 4], float("-inf"), tl.float32)
    t_v = tl.zeros([R4, 4], dtype=tl.int32)
    e_v = tl.zeros([R4, 4], dtype=tl.int64)
    o_lo = (offset & 0xFFFFFFFF).to(tl.uint32)
    o_hi = ((offset >> 32) & 0xFFFFFFFF).to(tl.uint32)
    for st in tl.range(lo, hi, BLOCK, num_stages=NSTG):
        offs, x = _tile(base, st, V, R4)
        s = tl.div_rn(x - m, T)
        kept = (x >= xA) & (_fine(x, m, C, NBF) < f_lo) & (tl.exp(s) >= e_thr)   # (_row_stats: x_A is finite)
        u = _tile_uniform(seed, st, o_lo, o_hi, R4)
        sc = tl.where(kept, s - tl.log(-tl.log(u)), float("-inf"))
        take = sc > b_v
        t_v = tl.where(take, offs, t_v)
        b_v = tl.where(take, sc, b_v)
        e_v += tl.where(kept, _fix(tl.exp(s)), 0)
    best = tl.max(tl.max(b_v, 1), 0)
    tok = tl.min(tl.min(tl.where(b_v == best, t_v, _INT32_MAX), 1), 0)
    mass = tl.sum(tl.sum(e_v, 1), 0)
    return best, tok, mass


@triton.jit
def _sum_parts_i(ptr, S, stride, N: tl.constexpr):
    # sum over the S parts of a row of an int32 [S, stride] array, first N columns
    cols = tl.arange(0, N)
    acc = tl.zeros([N], dtype=tl.int32)
    sr = tl.arange(0, _SB)
    for s0 in range(0, S, _SB):
        ss = s0 + sr
        v = tl.load(ptr + ss[:, None] * stride + cols[None, :], mask=(ss < S)[:, None], other=0, cache_modifier=".cg")
        acc += tl.sum(v, 0)
    return acc


@triton.jit
def _parts_before(hist1, part, b_lo, b_hi, NB1: tl.constexpr):
    # the survivors of a row's parts before `part`, from their level-1 histograms: in bins b_lo..b_hi (a window or
    # bracket on level-1 bounds) and in the bins above b_lo (the last bin, the non-survivors', never counts)
    cols = tl.arange(0, NB1)
    h = _sum_parts_i(hist1, part, NB1, NB1)
    return tl.sum(tl.where((cols >= b_lo) & (cols <= b_hi), h, 0), 0), tl.sum(tl.where(cols < b_lo, h, 0), 0)


@triton.jit
def _sum_col(ptr, S, stride, col, DT: tl.constexpr):
    # sum over the S parts of one partial (column ``col`` of rows ``stride`` apart), accumulated in DT
    sr = tl.arange(0, _SB)
    acc = tl.zeros([_SB], dtype=DT)
    for s0 in range(0, S, _SB):
        ss = s0 + sr
        acc += tl.load(ptr + ss * stride + col, mask=ss < S, other=0, cache_modifier=".cg")
    return tl.sum(acc, 0)


@triton.jit
def _best_parts(pf, pi, S, col):
    # combine per-part (score, token) maxima: largest score, lowest token on ties
    sr = tl.arange(0, _SB)
    b = tl.full([_SB], float("-inf"), tl.float32)
    t = tl.full([_SB], _INT32_MAX, tl.int32)
    for s0 in range(0, S, _SB):
        ss = s0 + sr
        bs = tl.load(pf + ss * _PF + col, mask=ss < S, other=float("-inf"), cache_modifier=".cg")
        ts = tl.load(pi + ss * _PI + col, mask=ss < S, other=_INT32_MAX, cache_modifier=".cg")
        take = (bs > b) | ((bs == b) & (ts < t))
        b = tl.where(take, bs, b)
        t = tl.where(take, ts, t)
    best = tl.max(b, 0)
    tok = tl.min(tl.where(b == best, t, _INT32_MAX), 0)
    return best, tok


@triton.jit
def _edge_keys(base, V, m, C, xA, f_lo, f_hi, BLOCK: tl.constexpr, NBF: tl.constexpr):
    # one pass over a row: the survivors' largest key below the window (f > f_hi) and smallest above it (f < f_lo)
    ar = tl.arange(0, BLOCK)
    kb = tl.full([BLOCK], _INT32_MIN, tl.int32)
    ka = tl.full([BLOCK], _INT32_MAX, tl.int32)
    for st in range(0, V, BLOCK):
        offs = st + ar
        x = tl.load(base + offs, mask=offs < V, other=float("-inf")).to(tl.float32)
        A = (x > float("-inf")) & (x < float("inf")) & (x >= xA)
        f = _fine(x, m, C, NBF)
        kx = _key(x)
        kb = tl.maximum(kb, tl.where(A & (f > f_hi), kx, _INT32_MIN))
        ka = tl.minimum(ka, tl.where(A & (f < f_lo), kx, _INT32_MAX))
    return tl.max(kb, 0), tl.min(ka, 0)


# ----------------------------------------------------------------------------- 1: stats

@triton.jit
def _argmax_loop(base, lo, hi, V, BLOCK: tl.constexpr, NSTG: tl.constexpr):
    """Per lane of a block, over logits ``[lo, hi)`` of a row: ``(NaN seen, largest, its first index)``.

    The greedy rule (SEMANTICS §1.1): first index on ties, ``+inf`` included, NaN skipped (and flagged);
    lane ``l`` sees ``lo + l``, ``lo + l + BLOCK``, ... in order, so the lowest index among the lanes holding
    the row's largest value is the first argmax.
    """
    NEG_INF = float("-inf")
    ar = tl.arange(0, BLOCK)
    nan_v = tl.zeros([BLOCK], dtype=tl.int32)
    m_v = tl.full([BLOCK], NEG_INF, tl.float32)
    gidx_v = tl.zeros([BLOCK], dtype=tl.int32)
    for st in tl.range(lo, hi, BLOCK, num_stages=NSTG):
        offs = st + ar
        inb = offs < V
        x = tl.load(base + offs, mask=inb, other=NEG_INF).to(tl.float32)
        isnan = x != x
        nan_v = nan_v | isnan.to(tl.int32)
        xg = tl.where(isnan, NEG_INF, x)
        take = xg > m_v
        gidx_v = tl.where(take, offs, gidx_v)
        m_v = tl.where(take, xg, m_v)
    return nan_v, m_v, gidx_v


@triton.jit
def _pdl_start(PDL: tl.constexpr):
    # Programmatic dependent launch (Hopper; tuning option ``pdl``): wait until the launch before this one has
    # finished and its writes are visible (before any access to memory), then let the launch after this one
    # start its programs, which wait the same way: its launch overlaps this one's work instead of following it.
    # PTX ISA, "griddepcontrol"; Triton's triton/language/extra/cuda/gdc.py.
    if PDL:
        gdc_wait()
        gdc_launch_dependents()


@triton.jit(do_not_specialize=["S"])
def _stats_kernel(logits_ptr, stride_row, V, temp_ptr, top_k_ptr, top_p_ptr, min_p_ptr, wsi, wsf, ws64, S, CH,
                  BLOCK: tl.constexpr, NB1: tl.constexpr, NBS: tl.constexpr, KMAX: tl.constexpr, KBIG: tl.constexpr,
                  NSTG: tl.constexpr = 1, ALL_GREEDY: tl.constexpr = False, PDL: tl.constexpr = False):
    _pdl_start(PDL)
    row = tl.program_id(0).to(tl.int64)
    part = tl.program_id(1)
    base = logits_ptr + row * stride_row
    T, k, top_p, min_p, status, greedy, k_on, p_on, mp_on = _params(row, temp_ptr, top_k_ptr, top_p_ptr, min_p_ptr, V)
    greedy = greedy | ALL_GREEDY
    bi, hist1, hist2, ri, cnt, bf, rf, b64, r64, cand, abv = _ws(row, wsi, wsf, ws64, S, NB1, NBS, KMAX, KBIG)
    NEG_INF = float("-inf")
    POS_INF = float("inf")
    ar = tl.arange(0, BLOCK)
    lo = part * CH
    hi = tl.minimum(lo + CH, V)
    nan_v = tl.zeros([BLOCK], dtype=tl.int32)
    pinf_v = tl.zeros([BLOCK], dtype=tl.int32)
    m_v = tl.full([BLOCK], NEG_INF, tl.float32)
    mn_v = tl.full([BLOCK], POS_INF, tl.float32)
    gidx_v = tl.zeros([BLOCK], dtype=tl.int32)
    if greedy:
        nan_v, m_v, gidx_v = _argmax_loop(base, lo, hi, V, BLOCK, NSTG)
    else:
        for st in tl.range(lo, hi, BLOCK, num_stages=NSTG):
            offs = st + ar
            inb = offs < V
            x = tl.load(base + offs, mask=inb, other=NEG_INF).to(tl.float32)
            # two updates per logit: a sampling row with a NaN or +inf is rejected, so its largest logit
            # is taken over every logit with NaN propagated (NaN or +inf there flags the row), and the
            # finite count is not needed (none finite <=> largest == -inf once NaN and +inf are ruled out)
            m_v = tl.maximum(m_v, x, propagate_nan=tl.PropagateNan.ALL)
            mn_v = tl.minimum(mn_v, tl.where(x > NEG_INF, x, POS_INF))
        nan_v = (m_v != m_v).to(tl.int32)
        pinf_v = (m_v == POS_INF).to(tl.int32)
    mx = tl.max(m_v, 0)
    gi = tl.min(tl.where(m_v == mx, gidx_v, _INT32_MAX), 0)
    pf = bf + part * _PF
    pi = bi + part * _PI
    tl.store(pf + 0, mx)
    tl.store(pf + 1, tl.min(mn_v, 0))
    tl.store(pi + 0, tl.max(nan_v, 0) | (tl.max(pinf_v, 0) * 2))
    tl.store(pi + 2, gi)
    if part == 0:
        # counters of the later launches (tickets and workspace slots) start at zero
        c32 = tl.arange(0, 32)
        tl.store(cnt + c32, tl.zeros([32], dtype=tl.int32), mask=c32 < _CNT)


@triton.jit(do_not_specialize=["S"])
def _greedy_kernel(token_ptr, status_ptr, path_ptr, wsi, wsf, ws64, S, NB1: tl.constexpr, NBS: tl.constexpr,
                   KMAX: tl.constexpr, KBIG: tl.constexpr, RMAX: tl.constexpr, PDL: tl.constexpr = False):
    """An all-greedy call's second and last launch (``B`` programs): the parts' first argmax combined.

    The statistics of the parts are combined as for any greedy row (:func:`_row_stats`): status 1
    (``nan_logits``) for a row holding a NaN, else 3 (``no_valid_token``) when every logit is
    ``-inf``; the row record gets the status, the kind and the token for the probabilities launch.
    """
    _pdl_start(PDL)
    row = tl.program_id(0).to(tl.int64)
    NBF: tl.constexpr = (NB1 - 1) * _NB2
    bi, hist1, hist2, ri, cnt, bf, rf, b64, r64, cand, abv = _ws(row, wsi, wsf, ws64, S, NB1, NBS, KMAX, KBIG)
    no = row < 0   # every row is greedy and no filter is on (device values, as _row_stats takes them)
    status, kind, g_idx, m, xA, C = _row_stats(bi, bf, S, 1, tl.full([], 1.0, tl.float32), tl.full([], 0.0, tl.float32),
                                               tl.full([], 0, tl.int32), no == 0, no, no, no, RMAX, NBF)
    tl.store(ri + _I_STATUS, status)
    tl.store(ri + _I_KIND, kind)
    tl.store(ri + _I_GIDX, g_idx)
    tl.store(token_ptr + row, tl.where(status != 0, -1, g_idx.to(tl.int64)))
    tl.store(status_ptr + row, status)
    tl.store(path_ptr + row, tl.where(status != 0, -1, 0))


@triton.jit(do_not_specialize=["S"])
def _greedy_row_kernel(logits_ptr, stride_row, V, token_ptr, status_ptr, path_ptr, wsi, wsf, ws64, S,
                       BLOCK: tl.constexpr, NB1: tl.constexpr, NBS: tl.constexpr, KMAX: tl.constexpr,
                       KBIG: tl.constexpr, NSTG: tl.constexpr = 1, PDL: tl.constexpr = False):
    """A large all-greedy call in one launch (``B`` programs, a whole row each): first argmax, status, outputs.

    The same rule and outcomes as ``_stats_kernel`` with ``ALL_GREEDY`` followed by ``_greedy_kernel``
    (status 1 ``nan_logits`` for a row holding a NaN, else 3 ``no_valid_token`` when every logit is ``-inf``;
    parameters not read), without the parts' partials: one launch instead of two, for batches that fill the
    GPU with one program per row (tuning option ``greedy_rows``). ``S`` is the buffers' parts per row, used
    only to find the row's record (which the probabilities launch reads).
    """
    _pdl_start(PDL)
    row = tl.program_id(0).to(tl.int64)
    base = logits_ptr + row * stride_row
    bi, hist1, hist2, ri, cnt, bf, rf, b64, r64, cand, abv = _ws(row, wsi, wsf, ws64, S, NB1, NBS, KMAX, KBIG)
    nan_v, m_v, gidx_v = _argmax_loop(base, 0, V, V, BLOCK, NSTG)
    m = tl.max(m_v, 0)
    g_idx = tl.min(tl.where(m_v == m, gidx_v, _INT32_MAX), 0)
    status = tl.where(tl.max(nan_v, 0) != 0, 1, tl.where(m == float("-inf"), 3, 0))
    tl.store(ri + _I_STATUS, status)
    tl.store(ri + _I_KIND, tl.where(status != 0, -1, 0))
    tl.store(ri + _I_GIDX, g_idx)
    tl.store(token_ptr + row, tl.where(status != 0, -1, g_idx.to(tl.int64)))
    tl.store(status_ptr + row, status)
    tl.store(path_ptr + row, tl.where(status != 0, -1, 0))


# ----------------------------------------------------------------------------- 2: row stats, histogram

@triton.jit
def _row_stats(bi, bf, S, V, T, min_p, status, greedy, k_on, p_on, mp_on, RMAX: tl.constexpr, NBF: tl.constexpr):
    """Combine the parts' stats: final status, kind, greedy token, m, x_A, C (identical in every program)."""
    sr = tl.arange(0, _SB)
    flags = tl.zeros([_SB], dtype=tl.int32)
    mxs = tl.full([_SB], float("-inf"), tl.float32)
    mns = tl.full([_SB], float("inf"), tl.float32)
    gis = tl.full([_SB], _INT32_MAX, tl.int32)
    for s0 in range(0, S, _SB):
        ss = s0 + sr
        ok = ss < S
        f_s = tl.load(bi + ss * _PI + 0, mask=ok, other=0)
        g_s = tl.load(bi + ss * _PI + 2, mask=ok, other=_INT32_MAX)
        m_s = tl.load(bf + ss * _PF + 0, mask=ok, other=float("-inf"))
        mn_s = tl.load(bf + ss * _PF + 1, mask=ok, other=float("inf"))
        flags = flags | f_s
        take = (m_s > mxs) | ((m_s == mxs) & (g_s < gis))
        gis = tl.where(take, g_s, gis)
        mxs = tl.where(take, m_s, mxs)
        mns = tl.minimum(mns, mn_s)
    # the flags are bits (1 NaN, 2 +inf): combined with OR, not max (NaN in one part and +inf in another is
    # nan_logits, as the reference, whichever part is larger)
    fl = tl.max(flags & 1, 0) | tl.max(flags & 2, 0)
    m = tl.max(mxs, 0)
    g_idx = tl.min(tl.where(mxs == m, gis, _INT32_MAX), 0)
    xmin = tl.min(mns, 0)
    status = tl.where((fl & 1) != 0, 1, status)
    status = tl.where((status == 0) & greedy & (m == float("-inf")), 3, status)
    status = tl.where((status == 0) & (greedy == 0) & ((fl & 2) != 0), 2, status)
    # no finite logit: the largest is -inf (NaN and +inf rows are rejected above)
    status = tl.where((status == 0) & (greedy == 0) & (m == float("-inf")), 3, status)
    kind = tl.where(status != 0, -1, tl.where(greedy, 0, tl.where(k_on | p_on, 3, tl.where(mp_on, 2, 1))))
    sampling = kind > 0
    m = tl.where(sampling, m, 0.0)
    # min-p: A = {x finite, exp((x - m) / T) >= min_p} = {x >= x_A}; bisection on the float order
    # (key(m) always qualifies: exp(0) = 1 >= min_p). The test runs in float64, as the reference's
    # (SEMANTICS §1.5: exact arithmetic up to ~1e-16): in float32, exp of a logit 2e-9 below
    # ln(min_p) rounds onto min_p and keeps it (case filters/min-p-threshold-inclusive).
    # The bisection starts from a bracket of 8 keys around m + T * ln(min_p) (float64, rounded to float32: the
    # threshold's key lies within about one of it, the test being exact to ~1e-16) when the test confirms it
    # (false at its low end, true at its high end; the test is monotone in the key), so 5 float64 exp's
    # instead of 32: a chain of dependent float64 operations each program of a min-p row ran before its
    # first load (kernel_times, H100, 2026-12-06: the histogram pass of min-p rows 21.7 us at 16 x 32000).
    # Otherwise the whole range, as before: the same x_A either way.
    kA = tl.full([], _INT32_MIN, tl.int64)
    if sampling & mp_on:
        hi0 = _key(m).to(tl.int64)
        m64 = m.to(tl.float64)
        T64 = T.to(tl.float64)
        mp64 = min_p.to(tl.float64)
        g = _key((m64 + T64 * tl.log(mp64)).to(tl.float32)).to(tl.int64)
        a = tl.maximum(tl.minimum(g, hi0) - 4, _INT32_MIN)
        b = tl.minimum(a + 8, hi0)
        ok_b = tl.exp((_unkey(b.to(tl.int32)).to(tl.float64) - m64) / T64) >= mp64
        ok_a = tl.exp((_unkey(a.to(tl.int32)).to(tl.float64) - m64) / T64) >= mp64
        near = ok_b & ((ok_a == 0) | (a == _INT32_MIN))
        lo = tl.where(near, a, tl.full([], _INT32_MIN, tl.int64))
        hi = tl.where(near, b, hi0)
        for _it in range(0, tl.where(near, 3, 32)):
            mid = lo + (hi - lo) // 2
            ok = tl.exp((_unkey(mid.to(tl.int32)).to(tl.float64) - m64) / T64) >= mp64
            hi = tl.where(ok, mid, hi)
            lo = tl.where(ok, lo, mid)
        kA = hi
    # no min-p: the least finite float rather than -inf, so that the passes that bin a sampling row (which has no
    # NaN nor +inf: rejected above) tell a survivor with one compare, x >= x_A (-inf fails it, as a masked load's)
    xA = tl.where(kA == _INT32_MIN, _LEAST_FINITE, _unkey(kA.to(tl.int32)))
    # fine bins span the survivors' range, at most RMAX units of s
    x_lo = tl.maximum(xmin, xA)
    Rx = tl.minimum(m - x_lo, RMAX * T)
    Rx = tl.maximum(Rx, 1e-30)
    C = tl.where(sampling, NBF / Rx, 0.0)
    return status, kind, g_idx, m, xA, C


@triton.jit
def _mass_bounds(f_first, f_next, CT, NBF: tl.constexpr):
    """Lower and upper bounds of ``e = exp(s)`` over the fine bins ``[f_first, f_next)``.

    A survivor in fine bin ``f`` has ``s`` in ``(-(f + 1) / CT, -f / CT]``; one fine bin of slack
    on each side and a relative 1e-4 cover the rounding of the bin, of ``exp`` and of the float32
    sums they enter. A range that reaches the last fine bin (the clamped tail, ``s`` down to -inf)
    has a lower bound of 0. (Bounds only choose the window: the decide launch verifies it.)
    """
    e_hi = tl.exp(-(f_first.to(tl.float32) - 1.0) / CT) * 1.0001
    e_lo = tl.where(f_next >= NBF, 0.0, tl.exp(-(f_next.to(tl.float32) + 1.0) / CT) * 0.9999)
    return e_lo, e_hi


@triton.jit
def _cum_bounds(H, e_lo, e_hi, above, below_hi, total):
    """Lower and upper bounds of the mass up to and including each bin (see :func:`_bracket`)."""
    Hf = H.to(tl.float32)
    m_lo = Hf * e_lo
    m_hi = Hf * e_hi
    c_lo = tl.cumsum(m_lo, 0)
    c_hi = tl.cumsum(m_hi, 0)
    slack = total * 1e-4
    cum_lo = tl.maximum(above + c_lo, total - (tl.sum(m_hi, 0) - c_hi + below_hi) - slack)
    cum_hi = tl.minimum(above + c_hi, total - (tl.sum(m_lo, 0) - c_lo) + slack)
    return cum_lo, cum_hi


@triton.jit
def _sure_kept(bins, H, e_lo, e_hi, E_A, w_bin, top_p):
    """Whether every survivor of level-1 bin ``w_bin`` is certainly kept (early accept: top-p rows without
    top-k, the only rows whose histogram pass draws a winner).

    A token is kept when the mass strictly above it is below ``top_p`` times the mass ``E_A`` of the
    survivors; that mass is at most the upper bound of the mass up to and including ``w_bin``. The
    bounds are those of :func:`_bracket` (one fine bin and 1e-4 of slack), and 1e-3 more each way
    covers ``top_p`` rounded to float32.
    """
    cum_lo, cum_hi = _cum_bounds(H, e_lo, e_hi, 0.0, 0.0, E_A)
    thru = tl.sum(tl.where(bins == w_bin, cum_hi, 0.0), 0)
    return thru * 1.001 < top_p.to(tl.float32) * E_A * 0.999


@triton.jit
def _bracket(H, e_lo, e_hi, above, below_hi, total, target, last):
    """``(j_lo, j_hi)``: the bins between which the top-p boundary must lie, from mass bounds.

    Each bin's mass is in ``[H * e_lo, H * e_hi]``; ``above`` is the exact mass before bin 0,
    ``below_hi`` bounds the mass after the last bin, and ``total`` is the exact mass of all
    survivors, so the mass up to a bin is bounded both by summing down from the top and by
    subtracting the bounds of the rest from ``total`` (the tighter of the two: near
    ``top_p = 0.9`` the rest is small, and so is its error). Before ``j_lo`` the mass is certainly
    below ``target`` (every token there is kept); up to ``j_hi`` it certainly reaches it (the first
    token after ``j_hi`` is dropped). Both are at most ``last`` (``j_hi == last`` may mean "not
    reached in these bins": callers check).
    """
    cum_lo, cum_hi = _cum_bounds(H, e_lo, e_hi, above, below_hi, total)
    j_lo = tl.sum((cum_hi < target).to(tl.int32), 0)
    j_hi = tl.sum((cum_lo < target).to(tl.int32), 0)
    return tl.minimum(j_lo, last), tl.minimum(j_hi, last)


@triton.jit
def _refined_shift(wf, NBS: tl.constexpr):
    # the smallest rsh with (NBS - 1) << rsh >= wf: refined bins of 2**rsh fine bins covering wf fine bins
    rsh = wf * 0
    for _i in tl.static_range(16):
        rsh = tl.where(((rsh * 0 + (NBS - 1)) << rsh) < wf, rsh + 1, rsh)
    return rsh


@triton.jit
def _pick(b1, t1, b2, t2):
    # the better of two Gumbel-max results: the larger key, the lowest id on ties
    take = (b2 > b1) | ((b2 == b1) & (t2 < t1))
    return tl.where(take, b2, b1), tl.where(take, t2, t1)


@triton.jit
def _select_window(hist1, r64, ri, S, k, k_act, p_on, top_p, n_A, E_A, C, T, w_bin, w_top, w_ok,
                   NB1: tl.constexpr, KMAX: tl.constexpr, KAB: tl.constexpr, NBF: tl.constexpr, NBS: tl.constexpr,
                   EARLY: tl.constexpr, KBR: tl.constexpr, ONE: tl.constexpr = False, KBRL: tl.constexpr = 0):
    """Last program of a top-k/top-p row: choose the window of fine bins, or have it refined: from the list of
    the bracket's survivors when they fit its ``KBR`` entries (mode 4: the gather pass packs them, the decide
    launch refines), else by the refine pass (mode 1).

    With ``ONE``, a mode-4 row whose survivors above the bracket fit the bracket list with it (and the
    above-window list: ``KAB``) has them all in that one list (``f_lo = 0``, none counted above it): the gather
    pass appends to one list instead of two, and the decide launch lifts the entries above the bracket
    (``_I_F0``) to the above-window list as it does those above its refined window. ``KBRL`` (0: ``KBR``) is the
    most entries a bracket list is given: less than ``KBR`` when it is segmented (:func:`_seg_append`), so that a
    segment seldom overflows.

    With ``EARLY``, a row whose full-row Gumbel-max winner (``w_ok``: its key is finite) is certainly
    kept is accepted instead (mode 3): the winner is the row's maximum (``w_top``: always kept), or its
    level-1 bin ``w_bin`` holds only certainly kept survivors (:func:`_sure_kept`).
    """
    bins = tl.arange(0, NB1)
    H = _sum_parts_i(hist1, S, NB1, NB1)
    H = tl.where(bins == NB1 - 1, 0, H)  # the last bin collects the non-survivors
    cum = tl.cumsum(H, 0)
    # top-k: the first bin whose cumulative count reaches k (counts are exact)
    b_k = tl.sum((cum < k).to(tl.int32), 0)
    # top-p: the bins between which the boundary lies, from bounds of each bin's mass (a bin's tokens
    # may sit anywhere in it: a midpoint estimate is off by several bins on rows whose mass is held
    # by a few top tokens)
    e_lo, e_hi = _mass_bounds(bins * _NB2, bins * _NB2 + _NB2, C * T, NBF)
    p_lo, p_hi = _bracket(H, e_lo, e_hi, 0.0, 0.0, E_A, top_p.to(tl.float32) * E_A, NB1 - 2)
    b_lo = tl.where(k_act, b_k, p_lo)
    b_hi = tl.where(k_act, b_k, p_hi)
    before = tl.sum(tl.where(bins < b_lo, H, 0), 0)
    upto = tl.sum(tl.where(bins <= b_hi, H, 0), 0)
    # rows that keep every survivor (top-k neutral for this row, no top-p)
    all_kept = (k_act == 0) & (p_on == 0)
    f_lo = tl.where(all_kept, tl.where(n_A <= KMAX, 0, NBF), tl.where(upto <= KMAX, 0, b_lo * _NB2))
    f_hi = tl.where(all_kept, NBF - 1, b_hi * _NB2 + _NB2 - 1)
    n_above = tl.where(all_kept, tl.where(n_A <= KMAX, 0, n_A), tl.where(upto <= KMAX, 0, before))
    fits = all_kept | (upto - tl.where(f_lo == 0, 0, before) <= KMAX)
    # otherwise refine bins b_lo..b_hi: NBS - 1 refined bins of 2**rsh fine bins cover them
    rsh = _refined_shift((b_hi - b_lo + 1) * _NB2, NBS)
    LIM: tl.constexpr = KBR if KBRL == 0 else KBRL
    mode = tl.where(fits, 0, tl.where((KBR > KMAX) & (upto - before <= LIM), 4, 1))
    if ONE:
        one = (mode == 4) & (upto <= LIM) & (before <= KAB)
        f_lo = tl.where(one, 0, f_lo)
        n_above = tl.where(one, 0, n_above)
    if EARLY:
        mode = tl.where(w_ok & (w_top | _sure_kept(bins, H, e_lo, e_hi, E_A, w_bin, top_p)), 3, mode)
    tl.store(ri + _I_MODE, mode)
    tl.store(ri + _I_FLO, f_lo)
    tl.store(ri + _I_FHI, f_hi)
    tl.store(ri + _I_NABOVE, n_above)
    tl.store(ri + _I_ABOVE, tl.where(f_lo == 0, 0, tl.where(n_above <= KAB, 1, 2)))
    tl.store(ri + _I_F0, b_lo * _NB2)
    tl.store(ri + _I_RSH, rsh)
    tl.store(ri + _I_NABOVE0, before)


@triton.jit
def _survivors(h, NB1: tl.constexpr):
    # the survivors counted in a level-1 histogram: every bin but the last. A survivor's fine bin is at most
    # NBF - 1 = (NB1 - 1) * 256 - 1, so its level-1 bin at most NB1 - 2; the last holds the rest (and padding)
    return tl.sum(tl.where(tl.arange(0, NB1) < NB1 - 1, h, 0), 0)


@triton.jit
def _hist_draw(base, lo, hi, V, m, T, xA, C, seed, offset, BLOCK: tl.constexpr, NB1: tl.constexpr,
               NBF: tl.constexpr, NSTG: tl.constexpr, UNIT_T: tl.constexpr, LANE: tl.constexpr = False):
    """One part of a top-p row (early accept), read once: the level-1 histogram of its survivors, their count,
    their fixed-point mass, and their Gumbel-max (key, lowest id on ties), as in :func:`_gumbel_scan`. The count
    comes from the histogram (:func:`_survivors`) and the mass from per-thread sums, so a tile takes no block
    reduction. With ``UNIT_T`` a row at ``T == 1`` takes a copy of the loop without the division, as in
    :func:`_hist_plain`."""
    if UNIT_T:
        if T == 1.0:
            h, n_a, e_a, best, tok = _hist_draw_loop(base, lo, hi, V, m, T, xA, C, seed, offset, BLOCK, NB1, NBF,
                                                     NSTG, LANE, True)
        else:
            h, n_a, e_a, best, tok = _hist_draw_loop(base, lo, hi, V, m, T, xA, C, seed, offset, BLOCK, NB1, NBF,
                                                     NSTG, LANE, False)
    else:
        h, n_a, e_a, best, tok = _hist_draw_loop(base, lo, hi, V, m, T, xA, C, seed, offset, BLOCK, NB1, NBF, NSTG,
                                                 LANE, False)
    return h, n_a, e_a, best, tok


@triton.jit
def _hist_draw_loop(base, lo, hi, V, m, T, xA, C, seed, offset, BLOCK: tl.constexpr, NB1: tl.constexpr,
                    NBF: tl.constexpr, NSTG: tl.constexpr, LANE: tl.constexpr, UNIT: tl.constexpr):
    # the loop of _hist_draw; UNIT: the row is at T == 1 (scaled logits x - m, no division)
    R4: tl.constexpr = BLOCK // 4
    h = tl.zeros([NB1], dtype=tl.int32)
    hc = tl.zeros([BLOCK], dtype=tl.int32)
    e_v = tl.zeros([R4, 4], dtype=tl.int64)
    b_v = tl.full([R4, 4], float("-inf"), tl.float32)
    t_v = tl.zeros([R4, 4], dtype=tl.int32)
    o_lo = (offset & 0xFFFFFFFF).to(tl.uint32)
    o_hi = ((offset >> 32) & 0xFFFFFFFF).to(tl.uint32)
    C8 = C * (1.0 / _NB2)
    for st in tl.range(lo, hi, BLOCK, num_stages=NSTG):
        offs, x = _tile(base, st, V, R4)
        A = x >= xA   # a sampling row's survivor (_row_stats: x_A is finite)
        b1 = tl.where(A, _coarse(x, m, C8, NBF), NB1 - 1)
        h, hc = _hist_add(tl.reshape(b1, [BLOCK]), h, hc, NB1, LANE)
        s = _scaled(x, m, T, UNIT)
        e_v += tl.where(A, _fix(tl.exp(s)), 0)
        u = _tile_uniform(seed, st, o_lo, o_hi, R4)
        sc = tl.where(A, s - tl.log(-tl.log(u)), float("-inf"))
        take = sc > b_v
        t_v = tl.where(take, offs, t_v)
        b_v = tl.where(take, sc, b_v)
    h = _hist_done(h, hc, NB1, LANE)
    best = tl.max(tl.max(b_v, 1), 0)
    tok = tl.min(tl.min(tl.where(b_v == best, t_v, _INT32_MAX), 1), 0)
    return h, _survivors(h, NB1), tl.sum(tl.sum(e_v, 1), 0), best, tok


@triton.jit
def _scaled(x, m, T, UNIT: tl.constexpr):
    # s = (x - m) / T with IEEE division, as the reference; UNIT (a row with T == 1): x - m, the same value
    # (x / 1 is exact), without the division's instructions
    if UNIT:
        return x - m
    else:
        return tl.div_rn(x - m, T)


@triton.jit
def _hist_loop(base, lo, hi, V, m, T, xA, C, h, e_v, BLOCK: tl.constexpr, NB1: tl.constexpr,
               NBF: tl.constexpr, NSTG: tl.constexpr, MASS: tl.constexpr, UNIT: tl.constexpr,
               LANE: tl.constexpr = False):
    hc = tl.zeros([BLOCK], dtype=tl.int32)
    C8 = C * (1.0 / _NB2)
    for st in tl.range(lo, hi, BLOCK, num_stages=NSTG):
        offs, x = _tile1(base, st, V, BLOCK)
        A = x >= xA   # a sampling row's survivor (_row_stats: x_A is finite)
        b1 = tl.where(A, _coarse(x, m, C8, NBF), NB1 - 1)
        h, hc = _hist_add(b1, h, hc, NB1, LANE)
        if MASS:
            e_v += _mass(_scaled(x, m, T, UNIT), A)
    h = _hist_done(h, hc, NB1, LANE)
    return h, e_v


@triton.jit
def _hist_plain(base, lo, hi, V, m, T, xA, C, p_on, BLOCK: tl.constexpr, NB1: tl.constexpr, NBF: tl.constexpr,
                NSTG: tl.constexpr, UNIT_T: tl.constexpr, LANE: tl.constexpr = False):
    """One part of a top-k/top-p row, read once: the level-1 histogram of its survivors, their count and, for a
    top-p row (``p_on``), their fixed-point mass (else 0). Copies of the loop on purpose (the hot pass): only a
    top-p row pays the exp of its mass, and with ``UNIT_T`` a row at ``T == 1`` skips the division. The count
    comes from the histogram (:func:`_survivors`)."""
    e_v = tl.zeros([BLOCK], dtype=tl.int64)
    h = tl.zeros([NB1], dtype=tl.int32)
    if p_on:
        if UNIT_T:
            if T == 1.0:
                h, e_v = _hist_loop(base, lo, hi, V, m, T, xA, C, h, e_v, BLOCK, NB1, NBF, NSTG, True,
                                          True, LANE)
            else:
                h, e_v = _hist_loop(base, lo, hi, V, m, T, xA, C, h, e_v, BLOCK, NB1, NBF, NSTG, True,
                                          False, LANE)
        else:
            h, e_v = _hist_loop(base, lo, hi, V, m, T, xA, C, h, e_v, BLOCK, NB1, NBF, NSTG, True, False, LANE)
    else:
        h, e_v = _hist_loop(base, lo, hi, V, m, T, xA, C, h, e_v, BLOCK, NB1, NBF, NSTG, False, False, LANE)
    return h, _survivors(h, NB1), tl.sum(e_v, 0)


@triton.jit(do_not_specialize=["S"])
def _hist_kernel(logits_ptr, stride_row, V, temp_ptr, top_k_ptr, top_p_ptr, min_p_ptr, seed_ptr, offset_ptr,
                 wsi, wsf, ws64, S, CH,
                 BLOCK: tl.constexpr, NB1: tl.constexpr, NBS: tl.constexpr, KMAX: tl.constexpr, KBIG: tl.constexpr,
                 RMAX: tl.constexpr, KAB: tl.constexpr, EARLY: tl.constexpr = False, NSTG: tl.constexpr = 1,
                 LOCAL: tl.constexpr = True, UNIT_T: tl.constexpr = True, KBR: tl.constexpr = 0,
                 LANE: tl.constexpr = False, WARP: tl.constexpr = False, PDL: tl.constexpr = False,
                 ONE: tl.constexpr = False, KBRL: tl.constexpr = 0):
    _pdl_start(PDL)
    row = tl.program_id(0).to(tl.int64)
    part = tl.program_id(1)
    base = logits_ptr + row * stride_row
    NBF: tl.constexpr = (NB1 - 1) * _NB2
    R4: tl.constexpr = BLOCK // 4
    T, k, top_p, min_p, status, greedy, k_on, p_on, mp_on = _params(row, temp_ptr, top_k_ptr, top_p_ptr, min_p_ptr, V)
    bi, hist1, hist2, ri, cnt, bf, rf, b64, r64, cand, abv = _ws(row, wsi, wsf, ws64, S, NB1, NBS, KMAX, KBIG)
    status, kind, g_idx, m, xA, C = _row_stats(bi, bf, S, V, T, min_p, status, greedy, k_on, p_on, mp_on, RMAX, NBF)
    if part == 0:
        tl.store(ri + _I_STATUS, status)
        tl.store(ri + _I_KIND, kind)
        tl.store(ri + _I_GIDX, g_idx)
        tl.store(ri + _I_MODE, 0)
        tl.store(ri + _I_ABOVE, 0)
        tl.store(rf + _F_M, m)
        tl.store(rf + _F_T, T)
        tl.store(rf + _F_XA, xA)
        tl.store(rf + _F_C, C)
    lo = part * CH
    hi = tl.minimum(lo + CH, V)
    if kind == 1:
        # no filter: the draw over every finite logit, here
        seed = tl.load(seed_ptr + row)
        offset = tl.load(offset_ptr + row)
        best, tok, mass = _gumbel_scan(base, lo, hi, V, m, T, xA, C, NBF, 0.0, seed, offset, BLOCK, NBF, NSTG)
        tl.store(bf + part * _PF + 2, best)
        tl.store(bi + part * _PI + 3, tok)
        tl.store(b64 + part * _P64 + 1, mass)
    if kind == 2:
        # min-p only: pack the survivors into the workspace (the decide launch draws among them)
        own = (S == 1) & (LOCAL and not WARP)
        used = _compact_start(cnt + 2, own)
        for st in tl.range(lo, hi, BLOCK, num_stages=NSTG):
            if WARP:
                offs, x = _tile1(base, st, V, BLOCK)
            else:
                offs, x = _tile(base, st, V, R4)
            A = x >= xA   # a sampling row's survivor (_row_stats: x_A is finite)
            used = _compact(cand, cnt + 2, KMAX, A, _pack(x, offs), used, own, WARP)
        _compact_end(cnt + 2, used, own)
    if kind == 3:
        if EARLY:
            # top-p rows without top-k: the histogram, and the Gumbel-max over the part's survivors in the same
            # pass. Rows with top-k keep the plain pass: on an H100 (2026-12-05, benchmarks/README.md, "Fused
            # kernel v5") the draw made the pass 2-4x dearer while few top-k rows were accepted.
            if p_on & (k_on == 0):
                seed = tl.load(seed_ptr + row)
                offset = tl.load(offset_ptr + row)
                h, n_p, e_p, best, tok = _hist_draw(base, lo, hi, V, m, T, xA, C, seed, offset, BLOCK, NB1, NBF, NSTG,
                                                    UNIT_T, LANE)
            else:
                h, n_p, e_p = _hist_plain(base, lo, hi, V, m, T, xA, C, p_on, BLOCK, NB1, NBF, NSTG, UNIT_T, LANE)
                best = tl.max(tl.full([1], float("-inf"), tl.float32), 0)   # no winner: the row is not accepted
                tok = tl.sum(tl.zeros([1], dtype=tl.int32), 0)
            tl.store(bf + part * _PF + 4, best)
            tl.store(bi + part * _PI + 6, tok)
        else:
            h, n_p, e_p = _hist_plain(base, lo, hi, V, m, T, xA, C, p_on, BLOCK, NB1, NBF, NSTG, UNIT_T, LANE)
        tl.store(hist1 + part * NB1 + tl.arange(0, NB1), h)
        tl.store(bi + part * _PI + 4, n_p)
        tl.store(b64 + part * _P64 + 0, e_p)
        # the last program of the row to finish adds the parts and chooses the window
        tl.debug_barrier()
        ticket = tl.atomic_add(cnt + 0, 1)
        if ticket == S - 1:
            n_A = _sum_col(bi, S, _PI, 4, tl.int32)
            EA_q = _sum_col(b64, S, _P64, 0, tl.int64)
            k_act = k_on & (k < n_A)
            E_A = EA_q.to(tl.float32) * _UNFIX
            tl.store(ri + _I_NA, n_A)
            tl.store(ri + _I_KACT, k_act.to(tl.int32))
            tl.store(r64 + _Q_EA, EA_q)
            w_ok = n_A < 0
            w_top = w_ok
            w_bin = n_A * 0
            if EARLY:
                # the row's winner: largest key over the parts, lowest id on ties (as every draw here)
                best, tok = _best_parts(bf + 4, bi + 6, S, 0)
                w_ok = best > float("-inf")
                tok = tl.where(w_ok, tok, 0)
                x_w = tl.load(base + tok).to(tl.float32)
                w_top = x_w == m
                w_bin = _fine(x_w, m, C, NBF) >> 8
                tl.store(ri + _I_ETOK, tok)
            _select_window(hist1, r64, ri, S, k, k_act, p_on, top_p, n_A, E_A, C, T, w_bin, w_top, w_ok, NB1, KMAX,
                           KAB, NBF, NBS, EARLY, KBR, ONE, KBRL)


# ----------------------------------------------------------------------------- 3: refine

@triton.jit
def _refine_loop(base, lo, hi, V, m, T, xA, C, f0, rsh, W, p_on, h, e_v, BLOCK: tl.constexpr, NBS: tl.constexpr,
                 NBF: tl.constexpr, NSTG: tl.constexpr, UNIT: tl.constexpr):
    # one part of a refined row: the histogram of the refined bins and the exact mass above them (top-p)
    for st in tl.range(lo, hi, BLOCK, num_stages=NSTG):
        offs, x = _tile1(base, st, V, BLOCK)
        A = x >= xA   # a sampling row's survivor (_row_stats: x_A is finite)
        d = _fine(x, m, C, NBF) - f0
        b2 = tl.where(A & (d >= 0) & (d < W), d >> rsh, NBS - 1)
        h += tl.histogram(b2, NBS)
        if p_on:
            e_v += _mass(_scaled(x, m, T, UNIT), A & (d < 0))
    return h, e_v


@triton.jit(do_not_specialize=["S"])
def _refine_kernel(logits_ptr, stride_row, V, temp_ptr, top_k_ptr, top_p_ptr, min_p_ptr, wsi, wsf, ws64, S, CH,
                   BLOCK: tl.constexpr, NB1: tl.constexpr, NBS: tl.constexpr, KMAX: tl.constexpr,
                   KBIG: tl.constexpr, KAB: tl.constexpr, NSTG: tl.constexpr = 1, UNIT_T: tl.constexpr = True,
                   PDL: tl.constexpr = False):
    _pdl_start(PDL)
    row = tl.program_id(0).to(tl.int64)
    part = tl.program_id(1)
    base = logits_ptr + row * stride_row
    NBF: tl.constexpr = (NB1 - 1) * _NB2
    bi, hist1, hist2, ri, cnt, bf, rf, b64, r64, cand, abv = _ws(row, wsi, wsf, ws64, S, NB1, NBS, KMAX, KBIG)
    kind = tl.load(ri + _I_KIND)
    mode = tl.load(ri + _I_MODE)
    if (kind == 3) & (mode == 1):
        m = tl.load(rf + _F_M)
        T = tl.load(rf + _F_T)
        xA = tl.load(rf + _F_XA)
        C = tl.load(rf + _F_C)
        f0 = tl.load(ri + _I_F0)
        # refined bins: 2**rsh fine bins each, NBS - 1 of them (the level-1 bins of the bracket); the last
        # collects the rest
        rsh = tl.load(ri + _I_RSH)
        W = (rsh * 0 + (NBS - 1)) << rsh
        top_p = tl.load(top_p_ptr + row).to(tl.float64)
        p_on = top_p < 1.0
        lo = part * CH
        hi = tl.minimum(lo + CH, V)
        h = tl.zeros([NBS], dtype=tl.int32)
        e_v = tl.zeros([BLOCK], dtype=tl.int64)
        if UNIT_T:
            if T == 1.0:
                h, e_v = _refine_loop(base, lo, hi, V, m, T, xA, C, f0, rsh, W, p_on, h, e_v, BLOCK, NBS, NBF,
                                      NSTG, True)
            else:
                h, e_v = _refine_loop(base, lo, hi, V, m, T, xA, C, f0, rsh, W, p_on, h, e_v, BLOCK, NBS, NBF,
                                      NSTG, False)
        else:
            h, e_v = _refine_loop(base, lo, hi, V, m, T, xA, C, f0, rsh, W, p_on, h, e_v, BLOCK, NBS, NBF, NSTG,
                                  False)
        tl.store(hist2 + part * NBS + tl.arange(0, NBS), h)
        tl.store(b64 + part * _P64 + 2, tl.sum(e_v, 0))
        tl.debug_barrier()
        ticket = tl.atomic_add(cnt + 1, 1)
        if ticket == S - 1:
            j = tl.arange(0, NBS)
            H = _sum_parts_i(hist2, S, NBS, NBS)
            H = tl.where(j == NBS - 1, 0, H)
            cum = tl.cumsum(H, 0)
            mass0_q = _sum_col(b64, S, _P64, 2, tl.int64)
            tl.store(r64 + _Q_MASS0, mass0_q)
            k = tl.load(top_k_ptr + row).to(tl.int64)
            k_act = tl.load(ri + _I_KACT) != 0
            n_ab0 = tl.load(ri + _I_NABOVE0)
            E_A = tl.load(r64 + _Q_EA).to(tl.float32) * _UNFIX
            mass0 = mass0_q.to(tl.float32) * _UNFIX
            # top-k: exact; top-p: the refined bins between which the boundary lies (mass bounds, as in
            # _select_window, with the exact mass above the refined range)
            j_k = tl.sum((n_ab0 + cum < k).to(tl.int32), 0)
            e_lo, e_hi = _mass_bounds(f0 + (j << rsh), f0 + ((j + 1) << rsh), C * T, NBF)
            # survivors below the refined range: their count, and e at most that of the range's end
            n_below = tl.load(ri + _I_NA) - n_ab0 - tl.sum(H, 0)
            _e, e_end = _mass_bounds(f0 + W, f0 + W, C * T, NBF)
            target = top_p.to(tl.float32) * E_A
            p_lo, p_hi = _bracket(H, e_lo, e_hi, mass0, n_below.to(tl.float32) * e_end, E_A, target, NBS - 1)
            j_lo = tl.where(k_act, j_k, tl.minimum(p_lo, NBS - 2))
            j_hi = tl.where(k_act, j_k, tl.minimum(p_hi, NBS - 2))
            before = n_ab0 + tl.sum(tl.where(j < j_lo, H, 0), 0)
            upto = n_ab0 + tl.sum(tl.where(j <= j_hi, H, 0), 0)
            fast = upto <= KMAX
            f_lo = tl.where(fast, 0, f0 + (j_lo << rsh))
            n_above = tl.where(fast, 0, before)
            ok = (upto - tl.where(fast, 0, before) <= KMAX) & (j_lo <= NBS - 2)
            # a top-p boundary outside the refined range (never, but for rounding beyond the bounds' slack)
            # goes to the slow path
            ok = ok & (k_act | ((mass0 < target) & (p_hi <= NBS - 2)))
            tl.store(ri + _I_MODE, tl.where(ok, 0, 2))
            tl.store(ri + _I_FLO, f_lo)
            tl.store(ri + _I_FHI, f0 + ((j_hi + 1) << rsh) - 1)
            tl.store(ri + _I_NABOVE, n_above)
            tl.store(ri + _I_ABOVE, tl.where(f_lo == 0, 0, tl.where(n_above <= KAB, 1, 2)))


# ----------------------------------------------------------------------------- 4: gather

@triton.jit(do_not_specialize=["S"])
def _gather_kernel(logits_ptr, stride_row, V, seed_ptr, offset_ptr, wsi, wsf, ws64, S, CH,
                   BLOCK: tl.constexpr, NB1: tl.constexpr, NBS: tl.constexpr, KMAX: tl.constexpr,
                   KBIG: tl.constexpr, NSTG: tl.constexpr = 1, LOCAL: tl.constexpr = True, KBR: tl.constexpr = 0,
                   OFFS: tl.constexpr = False, WARP: tl.constexpr = False, PDL: tl.constexpr = False,
                   SEGL: tl.constexpr = 0, SEGC: tl.constexpr = 0, SEGPTX: tl.constexpr = False):
    _pdl_start(PDL)
    row = tl.program_id(0).to(tl.int64)
    part = tl.program_id(1)
    base = logits_ptr + row * stride_row
    NBF: tl.constexpr = (NB1 - 1) * _NB2
    R4: tl.constexpr = BLOCK // 4
    bi, hist1, hist2, ri, cnt, bf, rf, b64, r64, cand, abv = _ws(row, wsi, wsf, ws64, S, NB1, NBS, KMAX, KBIG)
    kind = tl.load(ri + _I_KIND)
    mode = tl.load(ri + _I_MODE)
    above = tl.load(ri + _I_ABOVE)
    lo = part * CH
    hi = tl.minimum(lo + CH, V)
    m = tl.load(rf + _F_M)
    T = tl.load(rf + _F_T)
    xA = tl.load(rf + _F_XA)
    C = tl.load(rf + _F_C)
    # rows whose kept tokens are drawn in this pass: min-p only with more survivors than the
    # workspace holds, and top-k/top-p rows with more survivors above the window than KBIG
    minp_over = (kind == 2) & (tl.load(cnt + 2) > KMAX)
    # mode 4: the bracket's survivors go to the bracket list instead of the window's
    listed = (kind == 3) & ((mode == 0) | (mode == 4))
    if minp_over | (listed & (above == 2)):
        f_lo = tl.where(kind == 2, NBF, tl.load(ri + _I_FLO))
        seed = tl.load(seed_ptr + row)
        offset = tl.load(offset_ptr + row)
        best, tok, mass = _gumbel_scan(base, lo, hi, V, m, T, xA, C, f_lo, 0.0, seed, offset, BLOCK, NBF, NSTG)
        tl.store(bf + part * _PF + 3, best)
        tl.store(bi + part * _PI + 5, tok)
        tl.store(b64 + part * _P64 + 3, mass)
    if listed:
        f_lo = tl.load(ri + _I_FLO)
        f_hi = tl.load(ri + _I_FHI)
        x_lo, x_hi = _fine_bounds(m, C, xA, f_lo, f_hi, NBF)
        dst = tl.where(mode == 4, _brk(row, ws64, S, KMAX, KBIG, KBR), cand)
        cap = tl.where(mode == 4, KBR, KMAX)
        own = (S == 1) & (LOCAL and not WARP)
        used = _compact_start(cnt + 2, own)
        used_a = _compact_start(cnt + 3, own)
        exact = own & False  # False, typed as own: Triton needs exact to keep one type across `if OFFS`
        pre_w = used
        if OFFS:
            # a window or bracket on level-1 bounds (the histogram pass's): each part writes from its exact
            # offset, the entries of the parts before it (their histograms), with no atomic per tile
            exact = ((f_lo % _NB2) == 0) & (((f_hi + 1) % _NB2) == 0)
            pre_w, pre_a = _parts_before(hist1, part, f_lo // _NB2, f_hi // _NB2, NB1)
            used = tl.where(exact, pre_w, used)
            used_a = tl.where(exact, pre_a, used_a)
        if above == 1:
            for st in tl.range(lo, hi, BLOCK, num_stages=NSTG):
                in_w, up, packed = _gather_tile(base, st, V, x_lo, x_hi, xA, R4, WARP)
                used, used_a = _compact2(dst, cnt + 2, cap, in_w, abv, cnt + 3, KBIG, up, packed, used, used_a,
                                         own | exact, WARP)
            _compact_end(cnt + 3, used_a, own)
            if OFFS:
                if exact:
                    tl.atomic_add(cnt + 3, used_a - pre_a)
            _compact_end(cnt + 2, used, own)
            if OFFS:
                if exact:
                    tl.atomic_add(cnt + 2, used - pre_w)
        else:
            if SEGL > 0:
                # a bracket list this pass writes alone (mode 4 without an above-window list: one list, or the
                # survivors above the bracket drawn above) of a row's only program (SEGL: its warps): one segment a
                # warp (_seg_append), as the decide launch reads it
                if mode == 4:
                    if SEGPTX:
                        used_s = tl.zeros([BLOCK], dtype=tl.int32)
                    else:
                        used_s = tl.zeros([SEGL], dtype=tl.int32)
                    for st in tl.range(lo, hi, BLOCK, num_stages=NSTG):
                        in_w, _up, packed = _gather_tile(base, st, V, x_lo, x_hi, xA, R4, True)
                        used_s = _seg_append(dst, SEGC, in_w, packed, used_s, SEGL, SEGPTX)
                    _seg_end(cnt, used_s, SEGL, SEGPTX)
                else:
                    _gather_one(base, lo, hi, V, x_lo, x_hi, xA, dst, cnt, cap, used, own, exact, pre_w, R4,
                                BLOCK, NSTG, OFFS, WARP)
            else:
                _gather_one(base, lo, hi, V, x_lo, x_hi, xA, dst, cnt, cap, used, own, exact, pre_w, R4, BLOCK,
                            NSTG, OFFS, WARP)


@triton.jit
def _gather_one(base, lo, hi, V, x_lo, x_hi, xA, dst, cnt, cap, used, own, exact, pre_w, R4: tl.constexpr,
                BLOCK: tl.constexpr, NSTG: tl.constexpr, OFFS: tl.constexpr, WARP: tl.constexpr):
    # the gather pass of a row with one list (the window's or bracket's, no survivor above it listed): packed
    for st in tl.range(lo, hi, BLOCK, num_stages=NSTG):
        in_w, _up, packed = _gather_tile(base, st, V, x_lo, x_hi, xA, R4, WARP)
        used = _compact(dst, cnt + 2, cap, in_w, packed, used, own | exact, WARP)
    _compact_end(cnt + 2, used, own)
    if OFFS:
        if exact:
            tl.atomic_add(cnt + 2, used - pre_w)


# ----------------------------------------------------------------------------- 5: decide

@triton.jit
def _draw_add(sel, x, idx, m, T, seed, offset, b_v, t_v, e_v):
    # one chunk of a Gumbel-max over the selected entries (lowest id on ties) and their fixed-point mass
    sc = tl.where(sel, _gumbel(x, m, T, seed, offset, idx), float("-inf"))
    take = sel & ((sc > b_v) | ((sc == b_v) & (idx < t_v)))
    return tl.where(take, sc, b_v), tl.where(take, idx, t_v), e_v + tl.where(sel, _fix(tl.exp(tl.div_rn(x - m, T))), 0)


@triton.jit
def _draw_result(b_v, t_v, e_v):
    best = tl.max(b_v, 0)
    return best, tl.min(tl.where(b_v == best, t_v, _INT32_MAX), 0), tl.sum(e_v, 0)


@triton.jit
def _draw_unsorted(ws, n, m, T, seed, offset, N: tl.constexpr):
    # Gumbel-max and fixed-point mass over the n entries of a packed list (any order)
    b_v = tl.full([N], float("-inf"), tl.float32)
    t_v = tl.full([N], _INT32_MAX, tl.int32)
    e_v = tl.zeros([N], dtype=tl.int64)
    ar = tl.arange(0, N)
    for i0 in range(0, n, N):
        ok = i0 + ar < n
        packed = tl.load(ws + (i0 + ar), mask=ok, other=0)
        key, idx = _unpack(packed)
        b_v, t_v, e_v = _draw_add(ok, _unkey(key), idx, m, T, seed, offset, b_v, t_v, e_v)
    return _draw_result(b_v, t_v, e_v)


@triton.jit
def _top_k_kept(valid, es, e_kth, k_act, mass_q, EA_q, top_p):
    # a window's entries top-k keeps (ties kept: e at least the k-th's), their fixed-point masses, and top-p's limit
    # on the mass above a kept token: above < top_p * S  <=>  above < ceil(top_p * S), S the survivors' mass (top-k
    # on: those it keeps), top_p float64 (SEMANTICS §1.5)
    keep_k = valid & ((k_act == 0) | (es >= e_kth))
    cur_q = tl.where(keep_k, _fix(es), 0)
    S_q = tl.where(k_act, mass_q + tl.sum(cur_q, 0), EA_q)
    return keep_k, cur_q, tl.math.ceil(top_p * S_q.to(tl.float64)).to(tl.int64)


@triton.jit
def _window_decided(keep, es, cur_q, xs, idx, m, T, seed, offset, k_act, p_on, r_k, n_g, n_above, n_below, mass_q,
                    lim_q, e_kth, e_top):
    # a window's outputs once its kept entries are known (keep, within top-k's: cur_q their fixed-point masses):
    # whether the decision missed, the kept set's threshold and mass, the draw (_decide_window, _decide_bisect)
    total_q = mass_q + tl.sum(cur_q, 0)
    missed = (k_act & ((r_k < 0) | (r_k >= n_g)))
    # the top-p boundary must lie inside the window: the survivors above it are kept (mass above
    # the window < top_p) and the first survivor below it is not (mass above it >= top_p)
    missed = missed | (p_on & (n_above > 0) & (mass_q >= lim_q))
    missed = missed | (p_on & (k_act == 0) & (n_below > 0) & (total_q < lim_q))
    # ties in probability across the window's edges: a survivor below it as likely as the least likely
    # kept one (top-k: as the k-th), or one above it as likely as the window's first (top-p groups)
    e_thr = tl.min(tl.where(keep, es, float("inf")), 0)
    e_cut = tl.where(k_act, e_kth, e_thr)
    keep_q = mass_q + tl.sum(tl.where(keep, cur_q, 0), 0)
    sc = tl.where(keep, _gumbel(xs, m, T, seed, offset, idx), float("-inf"))
    best = tl.max(sc, 0)
    tok = tl.min(tl.where(keep & (sc == best), idx, _INT32_MAX), 0)
    return e_thr, keep_q, best, tok, missed, e_cut, e_top


@triton.jit
def _decide_window(cand, n_g, m, T, seed, offset, k, k_act, top_p, p_on, n_above, mass_q, EA_q, has_top, n_below,
                   N: tl.constexpr):
    """Sort the window and decide exactly as the reference (min-p survivors renormalised, top-k ties
    kept, top-p on the mass strictly above, ties grouped by probability); verify that the boundary lies
    in the window. Top-p membership is exact: the masses are fixed-point sums (int64) and a token is
    kept iff the mass above it is below ``ceil(top_p * S)``, ``top_p`` float64 (SEMANTICS §1.5). Returns the kept set as a threshold on ``e``, and for the caller's check that no tie
    in probability crosses the window's edges: ``e_cut`` (no survivor below the window may be as likely)
    and ``e_top`` (the window's largest ``e``)."""
    i = tl.arange(0, N)
    valid = i < n_g
    packed = tl.load(cand + i, mask=valid, other=-9223372036854775808)
    packed = tl.sort(packed, 0, descending=True)
    key, idx = _unpack(packed)
    xs = _unkey(key)
    es = tl.where(valid, tl.exp(tl.div_rn(xs - m, T)), 0.0)
    # top-k, ties kept: the k-th largest survivor is at position k - 1 - n_above of the window
    r_k = k - 1 - n_above
    e_kth = tl.sum(tl.where(i == r_k, es, 0.0), 0)
    keep_k, cur_q, lim_q = _top_k_kept(valid, es, e_kth, k_act, mass_q, EA_q, top_p)
    excl = tl.cumsum(cur_q, 0) - cur_q + mass_q
    ones = tl.full([N], 1, tl.int32)
    # a group of equal probabilities has the mass strictly above its first member (SEMANTICS §1.5)
    _len, prev_e, _cur = tl.associative_scan((ones, es, es), 0, _shift_combine)
    start_flag = ((i == 0) | (prev_e != es)).to(tl.int32)
    _flag, above = tl.associative_scan((start_flag, excl), 0, _latest_combine)
    e_top = tl.max(tl.where(valid, es, -1.0), 0)
    top_group = has_top & (es == e_top)
    keep = keep_k & ((p_on == 0) | (above < lim_q) | top_group)
    return _window_decided(keep, es, cur_q, xs, idx, m, T, seed, offset, k_act, p_on, r_k, n_g, n_above, n_below,
                           mass_q, lim_q, e_kth, e_top)


@triton.jit
def _decide_bisect(cand, n_g, m, T, seed, offset, k, k_act, top_p, p_on, n_above, mass_q, EA_q, has_top, n_below,
                   N: tl.constexpr):
    """:func:`_decide_window`'s decision without sorting the window: the k-th largest key and the top-p threshold
    bisected over the window's entries held in registers (one block reduction a step, as many steps as the bits
    of the window's key range, about 20-25 each for top-k and top-p), the same outputs: the entries in the sort's
    order (by key, descending), each keeps the mass above the first of its run of equal ``e``, so a run of equal
    ``e`` across distinct logits is one group (SEMANTICS §1.5) and an ``e`` one ulp off the key's order (float32
    ``exp`` is not monotone to the ulp) is grouped as the sort groups it."""
    i = tl.arange(0, N)
    valid = i < n_g
    packed = tl.load(cand + i, mask=valid, other=0)
    key, idx = _unpack(packed)
    xs = _unkey(key)
    es = tl.where(valid, tl.exp(tl.div_rn(xs - m, T)), 0.0)
    key64 = key.to(tl.int64)
    # top-k, ties kept: the key of the window's (r_k + 1)-th largest entry, the least t with #(key > t) <= r_k
    r_k = k - 1 - n_above
    lo = tl.min(tl.where(valid, key64, _INT32_MAX), 0) - 1
    hi = tl.max(tl.where(valid, key64, _INT32_MIN), 0)
    lo = tl.where(k_act & (r_k >= 0) & (r_k < n_g), lo, hi)
    while hi - lo > 1:
        mid = lo + (hi - lo) // 2
        ok = tl.sum((valid & (key64 > mid)).to(tl.int32), 0) <= r_k
        hi = tl.where(ok, mid, hi)
        lo = tl.where(ok, lo, mid)
    # e of that key, read from the entries (not recomputed: an exp of a scalar need not round as the vector's did)
    e_kth = tl.max(tl.where(valid & (key64 == hi) & k_act & (r_k >= 0) & (r_k < n_g), es, 0.0), 0)
    keep_k, cur_q, lim_q = _top_k_kept(valid, es, e_kth, k_act, mass_q, EA_q, top_p)
    # top-p in the sort's order (by key, ties by equal e): K*, the least key t with mass(key > t) < lim among the
    # entries top-k keeps, is the last kept key; the entries below it stay kept while their e equals K*'s (its run of
    # equal e in key order: e need not fall as the key falls, float32 exp is not monotone to the ulp), down to the
    # largest key below K* whose e differs (K_low). None kept by top-p (then only the top group, below) when the mass
    # above the window already reaches the limit
    e_top = tl.max(tl.where(valid, es, -1.0), 0)
    hi = tl.max(tl.where(keep_k, key64, _INT32_MIN), 0)
    lo = tl.min(tl.where(keep_k, key64, _INT32_MAX), 0) - 1
    p_hi = mass_q < lim_q
    lo = tl.where(p_on & p_hi, lo, hi)
    while hi - lo > 1:
        mid = lo + (hi - lo) // 2
        ok = mass_q + tl.sum(tl.where(key64 > mid, cur_q, 0), 0) < lim_q
        hi = tl.where(ok, mid, hi)
        lo = tl.where(ok, lo, mid)
    e_star = tl.max(tl.where(valid & (key64 == hi), es, -1.0), 0)
    k_low = tl.max(tl.where(valid & (key64 < hi) & (es != e_star), key64, _INT32_MIN - 1), 0)
    keep_p = p_hi & (key64 > k_low)
    top_group = has_top & (es == e_top)
    keep = keep_k & ((p_on == 0) | keep_p | top_group)
    return _window_decided(keep, es, cur_q, xs, idx, m, T, seed, offset, k_act, p_on, r_k, n_g, n_above, n_below,
                           mass_q, lim_q, e_kth, e_top)


@triton.jit
def _decide_any(cand, n_g, m, T, seed, offset, k, k_act, top_p, p_on, n_above, mass_q, EA_q, has_top, n_below,
                N: tl.constexpr, BISECT: tl.constexpr):
    # the window's decision: bisected (_decide_bisect; BISECT, tuning option ``bisect``: the least width N
    # bisected, 0 never) or sorted (_decide_window)
    if (BISECT > 0) and (N >= BISECT):
        return _decide_bisect(cand, n_g, m, T, seed, offset, k, k_act, top_p, p_on, n_above, mass_q, EA_q, has_top,
                              n_below, N)
    else:
        return _decide_window(cand, n_g, m, T, seed, offset, k, k_act, top_p, p_on, n_above, mass_q, EA_q, has_top,
                              n_below, N)


@triton.jit
def _list_window(brk, n_L, cand, m, T, C, seed, offset, k, k_act, top_p, f0, rsh, f_end, n_ab0, mass0_q, EA_q,
                 ab_best, ab_tok, abv, n_abv, NBS: tl.constexpr, NBF: tl.constexpr, KMAX: tl.constexpr,
                 KBIG: tl.constexpr, N: tl.constexpr, seg_n=0, SEG: tl.constexpr = 1, SEGCAP: tl.constexpr = 0):
    """Refine a packed list ``brk`` of ``n_L`` survivors (fine bins up to ``f_end``: a bracket, mode 4, or a wide
    window) in the refine pass's way: refined bins of ``2**rsh`` fine bins from ``f0`` (listed entries above ``f0``
    count as above the range), the same bounds and checks; pack the window's entries into the window list ``cand``
    and draw over the listed entries above the window (they are kept).

    ``n_ab0`` survivors above the list, of exact fixed-point mass ``mass0_q``; ``EA_q`` the survivors' (fixed
    point): with the list's own exact mass, the mass below the list is exact too, which bounds the bracket's low
    end as tightly as the histogram pass's (where every survivor is binned).
    ``ab_best, ab_tok`` the Gumbel-max over the survivors above the list. The listed entries above the window are
    appended to the above-window list ``abv`` after its first ``n_abv`` entries and drawn from there (a Philox per
    entry kept, none for the window's and those below it: ``benchmarks/README.md`` "The ninth session"),
    or drawn in the loop where they would not fit its ``KBIG`` entries. Returns ``ok`` (else nothing is written
    nor drawn: a bracket list's row then takes the slow path, a wide window keeps its ``kmax``-wide sort), the
    window's fine bins ``f_lo, f_hi``, the survivors above it, its size, the Gumbel-max (key, token) and
    fixed-point mass of all survivors above it (``ab_best, ab_tok`` and ``mass0_q`` with the listed ones), and the
    entries of ``abv`` now used. ``SEG > 1``: ``brk`` is segmented (:func:`_seg_append`; ``seg_n`` the ``[SEG]``
    segment lengths, each at most ``SEGCAP``) and read through :func:`_seg_pos`.
    """
    ar = tl.arange(0, N)
    mass_in = mass0_q
    h = tl.zeros([NBS], dtype=tl.int32)
    l_v = tl.zeros([N], dtype=tl.int64)
    u_v = tl.zeros([N], dtype=tl.int64)
    n_up = tl.sum(tl.zeros([1], dtype=tl.int32), 0)
    for i0 in range(0, n_L, N):
        ok_i = i0 + ar < n_L
        packed = tl.load(brk + _seg_pos(i0 + ar, seg_n, SEG, SEGCAP), mask=ok_i, other=0)
        x = _unkey((packed >> 32).to(tl.int32))
        d = _fine(x, m, C, NBF) - f0
        h += tl.histogram(tl.where(ok_i & (d >= 0), d >> rsh, NBS - 1), NBS)
        e_q = _fix(tl.exp(tl.div_rn(x - m, T)))
        l_v += tl.where(ok_i & (d >= 0), e_q, 0)
        u_v += tl.where(ok_i & (d < 0), e_q, 0)
        n_up += tl.sum((ok_i & (d < 0)).to(tl.int32), 0)
    # the listed entries above f0 join those above the list
    n_ab0 = n_ab0 + n_up
    mass0_q = mass0_q + tl.sum(u_v, 0)
    j = tl.arange(0, NBS)
    H = tl.where(j == NBS - 1, 0, h)
    cum = tl.cumsum(H, 0)
    mass0 = mass0_q.to(tl.float32) * _UNFIX
    # top-k: exact; top-p: the refined bins between which the boundary lies (as in _refine_kernel)
    j_k = tl.sum((n_ab0 + cum < k).to(tl.int32), 0)
    e_lo, e_hi = _mass_bounds(f0 + (j << rsh), f0 + ((j + 1) << rsh), C * T, NBF)
    # the mass below the list, exact: the survivors' less the list's and the mass above it
    E_A = EA_q.to(tl.float32) * _UNFIX
    below = (EA_q - mass0_q - tl.sum(l_v, 0)).to(tl.float32) * _UNFIX
    target = top_p.to(tl.float32) * E_A
    p_lo, p_hi = _bracket(H, e_lo, e_hi, mass0, below, E_A, target, NBS - 1)
    j_lo = tl.where(k_act, j_k, tl.minimum(p_lo, NBS - 2))
    j_hi = tl.where(k_act, j_k, tl.minimum(p_hi, NBS - 2))
    n_above = n_ab0 + tl.sum(tl.where(j < j_lo, H, 0), 0)
    n_w = tl.sum(tl.where((j >= j_lo) & (j <= j_hi), H, 0), 0)
    ok = (n_w <= KMAX) & (j_lo <= j_hi) & (j_hi <= NBS - 2) & (k_act | ((mass0 < target) & (p_hi <= NBS - 2)))
    b_v = tl.full([N], float("-inf"), tl.float32)
    t_v = tl.full([N], _INT32_MAX, tl.int32)
    e_v = tl.zeros([N], dtype=tl.int64)
    used = tl.sum(tl.zeros([1], dtype=tl.int32), 0)
    # the listed entries above the window: appended to the above-window list when they fit (exact count)
    n_lift = n_above - n_ab0 + n_up
    lift = n_abv + n_lift <= KBIG
    n_abv_out = n_abv
    if ok:
        if lift:
            for i0 in range(0, n_L, N):
                ok_i = i0 + ar < n_L
                packed = tl.load(brk + _seg_pos(i0 + ar, seg_n, SEG, SEGCAP), mask=ok_i, other=0)
                d = _fine(_unkey((packed >> 32).to(tl.int32)), m, C, NBF) - f0
                jj = tl.where(d < 0, -1, d >> rsh)
                wi = (ok_i & (jj >= j_lo) & (jj <= j_hi)).to(tl.int32)
                ui = (ok_i & (jj < j_lo)).to(tl.int32)
                # one block scan for both lists: the window's count in the low half, the lifted in the high
                both = wi + (ui << 16)
                before = tl.cumsum(both, 0) - both
                tl.store(cand + used + (before & 0xFFFF), packed, mask=wi != 0)
                tl.store(abv + n_abv_out + (before >> 16), packed, mask=ui != 0)
                n_both = tl.sum(both, 0)
                used += n_both & 0xFFFF
                n_abv_out += n_both >> 16
        else:
            for i0 in range(0, n_L, N):
                ok_i = i0 + ar < n_L
                packed = tl.load(brk + _seg_pos(i0 + ar, seg_n, SEG, SEGCAP), mask=ok_i, other=0)
                key, idx = _unpack(packed)
                x = _unkey(key)
                d = _fine(x, m, C, NBF) - f0
                jj = tl.where(d < 0, -1, d >> rsh)
                win = ok_i & (jj >= j_lo) & (jj <= j_hi)
                up = ok_i & (jj < j_lo)
                wi = win.to(tl.int32)
                tl.store(cand + used + tl.cumsum(wi, 0) - 1, packed, mask=win)
                used += tl.sum(wi, 0)
                b_v, t_v, e_v = _draw_add(up, x, idx, m, T, seed, offset, b_v, t_v, e_v)
    best, tok, mass = _draw_result(b_v, t_v, e_v)
    if n_abv_out > n_abv:
        tl.debug_barrier()  # the lifted entries, written by every thread, are read below
        l_best, l_tok, l_mass = _draw_unsorted(abv + n_abv, n_abv_out - n_abv, m, T, seed, offset, N)
        best, tok = _pick(best, tok, l_best, l_tok)
        mass += l_mass
    best, tok = _pick(ab_best, ab_tok, best, tok)
    f_lo = f0 + (j_lo << rsh)
    f_hi = tl.minimum(f0 + ((j_hi + 1) << rsh) - 1, f_end)
    return ok, f_lo, f_hi, n_above, used, best, tok, mass_in + mass, n_abv_out


@triton.jit(do_not_specialize=["S"])
def _decide_kernel(logits_ptr, stride_row, V, temp_ptr, top_k_ptr, top_p_ptr, min_p_ptr, seed_ptr, offset_ptr,
                   token_ptr, status_ptr, path_ptr, wsi, wsf, ws64, S,
                   BLOCK: tl.constexpr, NB1: tl.constexpr, NBS: tl.constexpr, KMAX: tl.constexpr,
                   KBIG: tl.constexpr, NSTG: tl.constexpr = 1, KBR: tl.constexpr = 0, NSUB: tl.constexpr = 512,
                   PDL: tl.constexpr = False, SEGL: tl.constexpr = 0, SEGC: tl.constexpr = 0,
                   PACKED: tl.constexpr = False, BISECT: tl.constexpr = 0):
    _pdl_start(PDL)
    row = tl.program_id(0).to(tl.int64)
    base = logits_ptr + row * stride_row
    NBF: tl.constexpr = (NB1 - 1) * _NB2
    bi, hist1, hist2, ri, cnt, bf, rf, b64, r64, cand, abv = _ws(row, wsi, wsf, ws64, S, NB1, NBS, KMAX, KBIG)
    status = tl.load(ri + _I_STATUS)
    kind = tl.load(ri + _I_KIND)
    m = tl.load(rf + _F_M)
    T = tl.load(rf + _F_T)
    xA = tl.load(rf + _F_XA)
    C = tl.load(rf + _F_C)
    k = tl.load(top_k_ptr + row).to(tl.int64)
    top_p = tl.load(top_p_ptr + row).to(tl.float64)
    p_on = top_p < 1.0
    seed = tl.load(seed_ptr + row)
    offset = tl.load(offset_ptr + row)
    token = tl.load(ri + _I_GIDX)
    zero = status * 0
    path = tl.where(status != 0, -1, zero)
    e_thr = tl.full([], 0.0, tl.float32)
    keep_q = tl.full([], 0, tl.int64)
    slow = kind == 4  # (never: set below for top-k/top-p rows)
    lifted = zero  # listed entries the decide launch appended to the above-window list (_list_window)
    if kind == 1:
        best, token = _best_parts(bf + 2, bi + 3, S, 0)
        keep_q = _sum_col(b64, S, _P64, 1, tl.int64)
        path = zero + 1
    if kind == 2:
        n = tl.load(cnt + 2)
        if n <= KMAX:
            best, token, keep_q = _draw_unsorted(cand, n, m, T, seed, offset, 512)
            path = zero + 2
        else:
            best, token = _best_parts(bf + 3, bi + 5, S, 0)
            keep_q = _sum_col(b64, S, _P64, 3, tl.int64)
            path = zero + 1
    if kind == 3:
        mode = tl.load(ri + _I_MODE)
        slow = mode == 2
        if mode == 3:
            # accepted in the histogram pass: the full-row winner, certainly kept
            token = tl.load(ri + _I_ETOK)
            path = zero + 5
        if (mode == 0) | (mode == 4):
            above = tl.load(ri + _I_ABOVE)
            f_lo = tl.load(ri + _I_FLO)
            f_hi = tl.load(ri + _I_FHI)
            n_A = tl.load(ri + _I_NA)
            n_above = tl.load(ri + _I_NABOVE)
            k_act = tl.load(ri + _I_KACT) != 0
            EA_q = tl.load(r64 + _Q_EA)
            n_g = tl.load(cnt + 2)
            n_ab = tl.load(cnt + 3)
            ab_best = tl.full([], float("-inf"), tl.float32)
            ab_tok = tl.full([], _INT32_MAX, tl.int32)
            mass_q = tl.full([], 0, tl.int64)
            brk = _brk(row, ws64, S, KMAX, KBIG, KBR)
            slow = (n_g > tl.where(mode == 4, KBR, KMAX)) | ((above == 1) & (n_ab != n_above))
            seg_n = 0   # SEGL == 0: packed lists (_seg_pos reads position i)
            if SEGL > 0:
                # a bracket list that the gather pass wrote alone (no above-window list: one list, or the survivors
                # above it drawn in that pass) is segmented (_seg_append): its segments' lengths; a segment that
                # overflowed sends the row to the slow path
                wa = tl.arange(0, SEGL)
                segd = (mode == 4) & (above != 1)
                seg_n = tl.where(segd, tl.load(cnt + _SEG0 + wa), tl.where(wa == 0, n_g, 0))
                slow = slow | (segd & (tl.max(seg_n, 0) > SEGC))
            n_abv0 = tl.where(above == 1, tl.minimum(n_ab, KBIG), 0)  # entries of the above-window list in use
            n_abv = n_abv0
            if above == 1:
                ab_best, ab_tok, mass_q = _draw_unsorted(abv, n_abv, m, T, seed, offset, 1024)
            if above == 2:
                ab_best, ab_tok = _best_parts(bf + 3, bi + 5, S, 0)
                mass_q = _sum_col(b64, S, _P64, 3, tl.int64)
            if (mode == 4) & (slow == 0):
                # the bracket's list: refine it here, then decide its window as any other
                # refined from the bracket's first fine bin (_I_F0: f_lo, or 0 when the list also holds the
                # survivors above the bracket, _select_window's ONE)
                f0 = tl.load(ri + _I_F0)
                rsh = tl.load(ri + _I_RSH)
                if (SEGL > 0) and PACKED:
                    # a packed list (two lists) is read without the segments' positions (7 compares an entry)
                    if segd:
                        ok, f_lo, f_hi, n_above, n_g, ab_best, ab_tok, mass_q, n_abv = _list_window(
                            brk, n_g, cand, m, T, C, seed, offset, k, k_act, top_p, f0, rsh, f_hi, n_above, mass_q,
                            EA_q, ab_best, ab_tok, abv, n_abv, NBS, NBF, KMAX, KBIG, 1024, seg_n, SEGL, SEGC)
                    else:
                        ok, f_lo, f_hi, n_above, n_g, ab_best, ab_tok, mass_q, n_abv = _list_window(
                            brk, n_g, cand, m, T, C, seed, offset, k, k_act, top_p, f0, rsh, f_hi, n_above, mass_q,
                            EA_q, ab_best, ab_tok, abv, n_abv, NBS, NBF, KMAX, KBIG, 1024)
                else:
                    ok, f_lo, f_hi, n_above, n_g, ab_best, ab_tok, mass_q, n_abv = _list_window(
                        brk, n_g, cand, m, T, C, seed, offset, k, k_act, top_p, f0, rsh, f_hi, n_above, mass_q, EA_q,
                        ab_best, ab_tok, abv, n_abv, NBS, NBF, KMAX, KBIG, 1024, seg_n, SEGL, SEGC)
                slow = ok == 0
                tl.debug_barrier()  # the window list, written by every thread, is read below
            src = cand
            if (slow == 0) & (n_g > NSUB) & (KBR >= NSUB) & ((k_act == 0) | (p_on == 0)):
                # a window wider than NSUB: refined once more, from its own list, to at most NSUB entries (in the
                # bracket list's space), so that it is sorted NSUB wide instead of KMAX wide. Refined bins from the
                # bracket's first level-1 bin (a window from the top of the row spans far more fine bins than its
                # boundary needs: coarser bins, wider windows). Not rows with both top-k and top-p: refined around
                # the k-th, the window could lose the top-p boundary above it (then the slow path)
                f0 = tl.load(ri + _I_F0)
                ok, f_lo2, f_hi2, n_above2, n_g2, ab_best, ab_tok, mass_q, n_abv = _list_window(
                    cand, n_g, brk, m, T, C, seed, offset, k, k_act, top_p, f0, _refined_shift(f_hi - f0 + 1, NBS),
                    f_hi, n_above, mass_q, EA_q, ab_best, ab_tok, abv, n_abv, NBS, NBF, NSUB, KBIG, 1024)
                if ok:
                    f_lo = f_lo2
                    f_hi = f_hi2
                    n_above = n_above2
                    n_g = n_g2
                    src = brk
                tl.debug_barrier()  # the sub-window, written by every thread, is read below
            lifted = n_abv - n_abv0
            n_below = n_A - n_above - n_g
            if slow == 0:
                has_top = f_lo == 0
                if n_g <= 64:
                    e_thr, keep_q, best, tok, missed, e_cut, e_top = _decide_any(
                        src, n_g, m, T, seed, offset, k, k_act, top_p, p_on, n_above, mass_q, EA_q, has_top, n_below,
                        64, BISECT)
                elif n_g <= NSUB:
                    e_thr, keep_q, best, tok, missed, e_cut, e_top = _decide_any(
                        src, n_g, m, T, seed, offset, k, k_act, top_p, p_on, n_above, mass_q, EA_q, has_top, n_below,
                        NSUB, BISECT)
                else:
                    e_thr, keep_q, best, tok, missed, e_cut, e_top = _decide_any(
                        src, n_g, m, T, seed, offset, k, k_act, top_p, p_on, n_above, mass_q, EA_q, has_top, n_below,
                        KMAX, BISECT)
                e_thr = tl.where(n_g == 0, 0.0, e_thr)
                _b, token = _pick(best, tok, ab_best, ab_tok)
                path = tl.where(f_lo == 0, 2, 3)
                # ties in probability across the window's edges (distinct logits, equal float32 e: a huge
                # temperature): bounds from the edges' fine bins first (a survivor below has (m - x) * C >=
                # f_hi + 1, one above < f_lo; slack for the rounding of f and of e), and only where they cannot
                # rule a tie out, one exact pass over the row for the neighbours' keys
                CT = C * T
                eb_hi = tl.exp(-((f_hi + 1).to(tl.float32) * 0.999999 - 0.01) / CT) * 1.00001
                ea_lo = tl.exp(-(f_lo.to(tl.float32) * 1.000001 + 0.01) / CT) * 0.99999
                tie_b = (n_below > 0) & (eb_hi >= e_cut)
                tie_a = p_on & (n_above > 0) & (ea_lo <= e_top)
                if (missed == 0) & (tie_b | tie_a):
                    kb, ka = _edge_keys(base, V, m, C, xA, f_lo, f_hi, BLOCK, NBF)
                    tie_b = (n_below > 0) & (tl.exp(tl.div_rn(_unkey(kb) - m, T)) >= e_cut)
                    tie_a = p_on & (n_above > 0) & (tl.exp(tl.div_rn(_unkey(ka) - m, T)) <= e_top)
                    missed = tie_b | tie_a
                slow = missed
    if slow:
        # bisections, one pass over the row per bit: top-k on the 32-bit logit key (the k-th largest
        # survivor), top-p on the bits of e (ties grouped by probability, SEMANTICS §1.5)
        ar = tl.arange(0, BLOCK)
        k_act = tl.load(ri + _I_KACT) != 0
        # top-k: smallest t with #(survivors with key > t) < k: the key of the k-th largest survivor
        lo = tl.full([], _INT32_MIN, tl.int64)
        hi = tl.full([], _INT32_MAX, tl.int64)
        n_k = tl.where(k_act, 32, 0)
        for _it_k in range(0, n_k):
            mid = lo + (hi - lo) // 2
            c = 0
            for st in range(0, V, BLOCK):
                offs = st + ar
                x = tl.load(base + offs, mask=offs < V, other=float("-inf")).to(tl.float32)
                A = (x > float("-inf")) & (x < float("inf")) & (x >= xA)
                c += tl.sum((A & (_key(x).to(tl.int64) > mid)).to(tl.int32), 0)
            ok = c < k
            hi = tl.where(ok, mid, hi)
            lo = tl.where(ok, lo, mid)
        # kept by top-k: every survivor as likely as the k-th or more
        e_k = tl.where(k_act, tl.exp(tl.div_rn(_unkey(hi.to(tl.int32)) - m, T)), 0.0)
        ek_v = tl.zeros([BLOCK], dtype=tl.int64)
        for st in range(0, V, BLOCK):
            offs = st + ar
            x = tl.load(base + offs, mask=offs < V, other=float("-inf")).to(tl.float32)
            e = tl.exp(tl.div_rn(x - m, T))
            A = (x > float("-inf")) & (x < float("inf")) & (x >= xA) & (e >= e_k)
            ek_v += tl.where(A, _fix(e), 0)
        # top-p: the smallest v (a float in [0, 1], bisected on its bits) with mass(e > v) < top_p * E_k,
        # in fixed point as in the window; a token is kept iff its e >= v (the mass strictly above it is
        # then < top_p)
        lim_k = tl.math.ceil(top_p * tl.sum(ek_v, 0).to(tl.float64)).to(tl.int64)
        lo = tl.full([], -1, tl.int64)  # v = -1: every kept token is above it, mass ratio 1
        hi = tl.full([], 1065353216, tl.int64)  # the bits of 1.0: nothing is above it
        n_p = tl.where(p_on, 31, 0)
        for _it_p in range(0, n_p):
            mid = lo + (hi - lo) // 2
            v = tl.where(mid < 0, -1.0, mid.to(tl.int32).to(tl.float32, bitcast=True))
            mq = tl.zeros([BLOCK], dtype=tl.int64)
            for st in range(0, V, BLOCK):
                offs = st + ar
                x = tl.load(base + offs, mask=offs < V, other=float("-inf")).to(tl.float32)
                e = tl.exp(tl.div_rn(x - m, T))
                A = (x > float("-inf")) & (x < float("inf")) & (x >= xA) & (e >= e_k) & (e > v)
                mq += tl.where(A, _fix(e), 0)
            ok = tl.sum(mq, 0) < lim_k
            hi = tl.where(ok, mid, hi)
            lo = tl.where(ok, lo, mid)
        e_p = tl.where(p_on, hi.to(tl.int32).to(tl.float32, bitcast=True), 0.0)
        e_thr = tl.maximum(e_k, e_p)
        best, token, keep_q = _gumbel_scan(base, 0, V, V, m, T, xA, C, NBF, e_thr, seed, offset, BLOCK, NBF, NSTG)
        path = zero + 4
    token = tl.where(status != 0, -1, token)
    tl.store(token_ptr + row, token.to(tl.int64))
    tl.store(status_ptr + row, status)
    tl.store(path_ptr + row, path)
    tl.store(cnt + 4, lifted)
    tl.store(rf + _F_ETHR, e_thr)
    tl.store(rf + _F_EKEEP, keep_q.to(tl.float32) * _UNFIX)


# ----------------------------------------------------------------------------- 6: probabilities

@triton.jit(do_not_specialize=["S"])
def _probs_kernel(logits_ptr, stride_row, V, probs_ptr, wsi, wsf, ws64, S, CH,
                  BLOCK: tl.constexpr, NB1: tl.constexpr, NBS: tl.constexpr, KMAX: tl.constexpr,
                  KBIG: tl.constexpr, NSTG: tl.constexpr = 1, PDL: tl.constexpr = False):
    # the distribution sampled from (same filtering as the draw)
    _pdl_start(PDL)
    row = tl.program_id(0).to(tl.int64)
    part = tl.program_id(1)
    base = logits_ptr + row * stride_row
    bi, hist1, hist2, ri, cnt, bf, rf, b64, r64, cand, abv = _ws(row, wsi, wsf, ws64, S, NB1, NBS, KMAX, KBIG)
    status = tl.load(ri + _I_STATUS)
    kind = tl.load(ri + _I_KIND)
    g_idx = tl.load(ri + _I_GIDX)
    e_thr = tl.load(rf + _F_ETHR)
    m = tl.load(rf + _F_M)
    T = tl.load(rf + _F_T)
    xA = tl.load(rf + _F_XA)
    E = tl.load(rf + _F_EKEEP)
    pbase = probs_ptr + row * V
    ar = tl.arange(0, BLOCK)
    lo = part * CH
    hi = tl.minimum(lo + CH, V)
    for st in tl.range(lo, hi, BLOCK, num_stages=NSTG):
        offs = st + ar
        inb = offs < V
        x = tl.load(base + offs, mask=inb, other=float("-inf")).to(tl.float32)
        e = tl.exp(tl.div_rn(x - m, T))
        kept = (x > float("-inf")) & (x < float("inf")) & (x >= xA) & (e >= e_thr)
        out = tl.where(kept, tl.div_rn(e, E), 0.0)
        out = tl.where(kind == 0, tl.where(offs == g_idx, 1.0, 0.0), out)
        out = tl.where(status != 0, 0.0, out)
        tl.store(pbase + offs, out, mask=inb)


#: The tensors of one call, in the order :func:`launch_args` and :func:`impls.fused.launch.run_call` take them; the
#: argument lists of :func:`launch_specs` name them by these strings.
SLOTS = ("logits", "temperature", "top_k", "top_p", "min_p", "seed", "offset", "tokens", "status", "path", "probs",
         "wsi", "wsf", "ws64")


def lane_hist(CH: int, cfg: dict) -> bool:
    """Whether the histogram launch of a call whose parts stream ``CH`` logits counts its bins per lane
    (:func:`_lane_hist`): ``cfg["lane_hist"]`` True, or an int ``n >= 1`` and parts of at least ``n`` tiles of
    ``cfg["block"]`` logits (the counters' combine, once per program, costs more than the per-tile barriers it
    saves on short parts: H100, 2026-12-06, the pass at 64 x 32000, 4 tiles a part, 17 -> 23 us); and only where
    its PTX applies: compiled (not Triton's interpreter), 64 level-1 bins, four logits a thread (``block = 128
    num_warps``). The tokens do not depend on it."""
    n = cfg.get("lane_hist", False)
    return (bool(n) and CH >= int(n) * cfg["block"] and cfg["nb"] == 64
            and cfg["block"] == 128 * cfg["num_warps"] and not INTERPRETED)


def warp_lists(S: int, cfg: dict) -> bool:
    """Whether the gather pass (and a min-p row's list in the histogram pass) of a call whose rows are split in
    ``S`` parts appends with one atomic per warp (:func:`_warp_append`): ``cfg["warp_lists"]`` True and ``S > 1``
    (a row's only program keeps its running count: on an H100, 2026-12-07, 1024 x 128256 top-k 50 + top-p 0.9
    gather 221 against 251 µs, min-p histogram pass 252 against 260; at 2-32 parts the warps won, e.g. 256 x
    128256 top-p 0.9 gather 202 -> 158 µs, min-p histogram pass 125 -> 75: benchmarks/README.md "Lists appended
    per warp"), and only where its PTX applies: compiled (not Triton's interpreter) and four logits a thread
    (``block = 128 num_warps``). A gather launch whose split rows write from the parts' offsets (``part_offsets``)
    does that instead. The tokens do not depend on it."""
    return (bool(cfg.get("warp_lists", False)) and S > 1 and cfg["block"] == 128 * cfg["num_warps"]
            and not INTERPRETED)


def seg_lists(S: int, cfg: dict) -> int:
    """Segments of a bracket list that the gather pass writes alone (mode 4 without an above-window list: a one-list
    row's, or one whose survivors above the bracket that pass draws; :func:`_seg_append`: one a warp of the gather
    launch, each written from the warp's own running count), or 0 (packed as before, from a block scan per tile);
    ``S`` the programs per row, ``cfg`` a tuning set (:data:`impls.fused.ops.DEFAULTS`): ``cfg["seg_lists"]``
    True, a row's only program (``S == 1``), a bracket list (``kbr``) that the warps divide, at most 16 warps
    (the record's counters). Compiled with four logits a thread, the ranks are warp ballots (inline PTX); else the
    same lists from plain Triton (the interpreter's tests). The tokens do not depend on it; a row whose segment
    would overflow takes the slow path (a bracket list is given at most 7/8 of ``kbr`` entries when segmented)."""
    w, kbr = cfg["num_warps"], cfg.get("kbr", 0)
    return w if (cfg.get("seg_lists", False) and S == 1 and kbr and kbr % w == 0 and w <= 16) else 0


def greedy_row_shape(cfg: dict) -> tuple:
    """``(warps, block)`` of ``_greedy_row_kernel``: ``cfg["greedy_warps"]`` (else ``num_warps``), and the block
    scaled with them so a thread keeps the logits per load of the other launches (16 bytes of fp32 at the GPU
    defaults)."""
    gw = cfg.get("greedy_warps", cfg["num_warps"])
    return gw, max(32 * gw, cfg["block"] * gw // cfg["num_warps"])


def launch_specs(B: int, V: int, sr: int, S: int, CH: int, want_probs: bool, cfg: dict, greedy: bool = False) -> list:
    """The launches of one call shape, in order, with the tensors left as names.

    Parameters
    ----------
    B, V : int
        Batch and vocabulary.
    sr : int
        Row stride of the logits, in elements.
    S, CH : int
        Programs per row and logits per program (:func:`impls.fused.workspace.splits`).
    want_probs : bool
        Add the probabilities launch (and turn early accept off: it needs the kept set).
    cfg : dict
        Tuning constants (:data:`impls.fused.ops.DEFAULTS`); ``cfg["early"]`` turns on early accept in the
        histogram launch (path 5, ``accepted``): True, False (also when absent), or an int, for batches of at
        most that many rows.
    greedy : bool
        Every row is decoded greedily whatever its parameters (the caller's all-greedy hint): the statistics
        launch, then ``_greedy_kernel`` (and the probabilities launch when asked), two launches instead of five;
        from ``cfg["greedy_rows"]`` rows (absent: never) ``_greedy_row_kernel`` alone, one program per row.

    Returns
    -------
    list of (name, kernel, grid, args, constexprs, options)
        ``args`` holds a :data:`SLOTS` name for each tensor and the value of each scalar; ``options`` are Triton's
        launch options (warps, ``maxnreg`` where a :data:`REG_OPTIONS` cap is set, ``launch_pdl``).
    """
    c = dict(BLOCK=cfg["block"], NB1=cfg["nb"], NBS=cfg["nbs"], KMAX=cfg["kmax"], KBIG=cfg["kbig"],
             NSTG=cfg.get("stages", 1))
    # early accept leaves no kept set (threshold, mass) for the probabilities launch
    e = cfg.get("early", False)
    early = (e if isinstance(e, bool) else B <= int(e)) and not want_probs
    # the most survivors above the histogram (or refine) pass's window listed for the decide launch (more are drawn
    # in the gather pass, over the row's parts): none at batches of at most cfg["draw_above"] rows (a bracket
    # list's entries above its refined window are still drawn by the decide launch, lifted)
    kab = 0 if B <= cfg.get("draw_above", 0) else cfg["kbig"]
    kw = dict(num_warps=cfg["num_warps"], enable_fp_fusion=False)
    c_stats = dict(c, NSTG=cfg.get("stats_stages", c["NSTG"]))
    grid = (B, S)
    kbr = cfg.get("kbr", 0)
    # split rows write from the parts' offsets (part_offsets), other calls append per warp (warp_lists); a row's
    # only program writes a one-list bracket row's list in segments, one a warp (seg_lists)
    offs = 1 < S <= cfg.get("part_offsets", 0)
    warp = warp_lists(S, cfg)
    segl = seg_lists(S, cfg)
    seg = dict(SEGL=segl, SEGC=kbr // segl if segl else 0)
    params = ("temperature", "top_k", "top_p", "min_p")
    ws = ("wsi", "wsf", "ws64")
    if greedy and B >= cfg.get("greedy_rows", B + 1):
        gw, gblock = greedy_row_shape(cfg)
        out = [("greedy_row", _greedy_row_kernel, (B,), ("logits", sr, V, "tokens", "status", "path", *ws, S),
                dict(BLOCK=gblock, NB1=c["NB1"], NBS=c["NBS"], KMAX=c["KMAX"], KBIG=c["KBIG"], NSTG=c_stats["NSTG"]),
                dict(kw, num_warps=gw))]
    elif greedy:
        out = [("stats", _stats_kernel, grid, ("logits", sr, V, *params, *ws, S, CH), dict(c_stats, ALL_GREEDY=True),
                kw),
               ("greedy", _greedy_kernel, (B,), ("tokens", "status", "path", *ws, S),
                dict(NB1=c["NB1"], NBS=c["NBS"], KMAX=c["KMAX"], KBIG=c["KBIG"], RMAX=cfg["r"]), kw)]
    if greedy:
        if want_probs:
            out.append(("probs", _probs_kernel, grid, ("logits", sr, V, "probs", *ws, S, CH), c, kw))
        return _pdl(out, cfg)
    out = [
        ("stats", _stats_kernel, grid, ("logits", sr, V, *params, *ws, S, CH), c_stats, kw),
        ("hist", _hist_kernel, grid, ("logits", sr, V, *params, "seed", "offset", *ws, S, CH),
         dict(c, RMAX=cfg["r"], KAB=kab, EARLY=early, LOCAL=cfg.get("local", True), UNIT_T=cfg.get("unit_t", True),
              KBR=kbr, LANE=lane_hist(CH, cfg), WARP=warp, ONE=cfg.get("one_list", False),
              KBRL=kbr - kbr // 8 if segl else kbr), kw),
        ("refine", _refine_kernel, grid, ("logits", sr, V, *params, *ws, S, CH),
         dict(c, KAB=kab, UNIT_T=cfg.get("unit_t", True)), kw),
        ("gather", _gather_kernel, grid, ("logits", sr, V, "seed", "offset", *ws, S, CH),
         dict(c, LOCAL=cfg.get("local", True), KBR=kbr, WARP=warp and not offs, OFFS=offs, **seg,
              SEGPTX=bool(segl) and cfg["block"] == 128 * cfg["num_warps"] and not INTERPRETED), kw),
        ("decide", _decide_kernel, (B,), ("logits", sr, V, *params, "seed", "offset", "tokens", "status", "path", *ws,
                                          S), dict(c, KBR=kbr, NSUB=cfg.get("nsub", c["KMAX"]), **seg,
                                                   PACKED=bool(segl) and cfg.get("packed_read", False),
                                                   BISECT=cfg.get("bisect", 0)),
         dict(num_warps=cfg["decide_warps"], enable_fp_fusion=False)),
    ]
    if want_probs:
        out.append(("probs", _probs_kernel, grid, ("logits", sr, V, "probs", *ws, S, CH), c, kw))
    return _pdl(_regs(out, cfg), cfg)


#: Tuning options that cap a launch's registers per thread (Triton's ``maxnreg``), by the launch they apply to.
REG_OPTIONS = {"hist_regs": "hist", "gather_regs": "gather", "decide_regs": "decide"}


def _regs(specs: list, cfg: dict) -> list:
    # a launch whose cap (REG_OPTIONS) is set compiles with Triton's ``maxnreg``; the interpreter has no registers
    if INTERPRETED:
        return specs
    cap = {launch: cfg.get(option, 0) for option, launch in REG_OPTIONS.items()}
    return [(name, kernel, grid, args, meta, dict(options, maxnreg=cap[name]) if cap.get(name) else options)
            for name, kernel, grid, args, meta, options in specs]


def pdl(cfg: dict) -> bool:
    """Whether a call's launches use programmatic dependent launch (:func:`_pdl_start`): ``cfg["pdl"]`` and
    compiled (not Triton's interpreter, which runs no PTX). Each launch then waits for the one before it at its
    start, so the tokens do not depend on it; what it saves is the gap between launches (Hopper and later)."""
    return bool(cfg.get("pdl", False)) and not INTERPRETED


def _pdl(specs: list, cfg: dict) -> list:
    # every launch of the call with PDL on: the constexpr that waits, and the launch attribute (Triton's
    # CUDA option ``launch_pdl``)
    if not pdl(cfg):
        return specs
    return [(name, kernel, grid, args, dict(meta, PDL=True), dict(options, launch_pdl=True))
            for name, kernel, grid, args, meta, options in specs]


def launch_args(logits, temperature, top_k, top_p, min_p, seed, offset, tokens, status, path, probs, wsi, wsf, ws64,
                S, CH, want_probs, cfg, greedy=False):
    """The launches of one call, in order: ``(name, kernel, grid, args, constexprs, options)`` each.

    :func:`launch_specs` with the tensors put in. All tensors are allocated by the caller
    (:func:`impls.fused.ops.fused_sample`). ``cfg`` is taken as given: a caller launching on a GPU older than
    Hopper passes it through :func:`impls.fused.launch.device_cfg` first, as ``run_call`` does.
    """
    vals = dict(zip(SLOTS, (logits, temperature, top_k, top_p, min_p, seed, offset, tokens, status, path, probs, wsi,
                            wsf, ws64)))
    B, V = logits.shape
    return [(name, kernel, grid, tuple(vals[a] if isinstance(a, str) else a for a in args), meta, options)
            for name, kernel, grid, args, meta, options in launch_specs(B, V, logits.stride(0), S, CH, want_probs,
                                                                         cfg, greedy)]
