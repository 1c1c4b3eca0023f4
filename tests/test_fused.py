"""The fused kernel against the reference, token for token (issue: fused GPU sampler).

On a machine without CUDA these run under Triton's interpreter (set by
``conftest.py``) with the small interpreter constants of
:data:`impls.fused.ops.INTERPRETER`, which send rows down every path (greedy,
untruncated, fast, boundary, slow); vocabularies span several blocks.
Expected tokens come from the reference (:mod:`impls.reference`), whose draw
is pinned to Triton's ``tl.philox`` and to Random123's known answers in
``test_philox_triton.py``; the few hand-checked rows below pin the kernel
directly.
"""

import random

import pytest
import torch

triton = pytest.importorskip("triton", reason="triton is not installed (the tox env installs it)")
import triton.language as tl  # noqa: E402

from impls.fused.kernel import (PATHS, STATUS_KINDS, _lane_hist, _lane_hist_total, _seg_append, _seg_end,  # noqa: E402
                                _warp_append)
from impls.fused.ops import fused_sample  # noqa: E402
from impls.profiles import TRTLLM  # noqa: E402
from impls.reference.draw import gumbel_argmax  # noqa: E402
from impls.reference.filters import kept_set, processed_probs  # noqa: E402
from impls.reference.modes import SAMPLING, Resolved  # noqa: E402

DEV = "cuda" if torch.cuda.is_available() else "cpu"


def reference_rows(logits, T, K, P, M, S, O):
    """Reference tokens and distributions for parameter tensors (greedy rows: T == 0 etc.)."""
    toks, dists = [], []
    for i in range(logits.shape[0]):
        x = logits[i].float().cpu()
        greedy = T[i] == 0 or K[i] == 1 or P[i] == 0 or M[i] == 1
        if greedy:
            toks.append(int(torch.argmax(x)))
            d = torch.zeros_like(x)
            d[toks[-1]] = 1
            dists.append(d)
            continue
        keep = kept_set(x, Resolved(SAMPLING, temperature=float(T[i]), top_k=int(K[i]), top_p=float(P[i]),
                                     min_p=float(M[i])), TRTLLM)
        toks.append(int(gumbel_argmax(x[None], keep[None], T[i:i + 1].float(), S[i:i + 1], O[i:i + 1])[0]))
        dists.append(processed_probs(x, keep, float(T[i])))
    return toks, dists


def t(v, dt):
    return torch.tensor(v, dtype=dt, device=DEV)


def test_hand_checked_rows():
    # row 0: SEMANTICS §1.5 example: logits [2, 1.5, 1, 0, -1], min_p 0.3, top_p 0.8 keep {0, 1}
    #        with probabilities 1/(1+e^-0.5) = 0.62245933 and 0.37754067.
    # row 1: greedy through top_k = 1: argmax, ties -> lowest id (1 and 3 tie at 3.0).
    # row 2: top_k = 2 with a tie at the 2nd value keeps {1, 2, 3} (all tied tokens).
    logits = t([[2.0, 1.5, 1.0, 0.0, -1.0], [0.0, 3.0, 1.0, 3.0, 2.0], [0.0, 3.0, 2.0, 2.0, 1.0]], torch.float32)
    tok, status, path, probs = fused_sample(
        logits, t([1.0, 1.0, 1.0], torch.float32), t([0, 1, 2], torch.int64), t([0.8, 1.0, 1.0], torch.float32),
        t([0.3, 0.0, 0.0], torch.float32), t([1, 2, 3], torch.int64), t([0, 0, 0], torch.int64), want_probs=True)
    assert status.tolist() == [0, 0, 0]
    assert [PATHS[p] for p in path.tolist()][1] == "greedy"
    assert probs[0].tolist()[2:] == [0.0, 0.0, 0.0]
    assert probs[0, 0].item() == pytest.approx(0.62245933, rel=1e-6)
    assert probs[0, 1].item() == pytest.approx(0.37754067, rel=1e-6)
    assert tok[1].item() == 1
    assert (probs[2] > 0).nonzero().flatten().tolist() == [1, 2, 3]


def test_errors_per_row():
    # Each bad row gets the reference's error kind; the good row beside them is sampled.
    nan = float("nan")
    logits = t([[0.0, 1.0, 2.0]] * 7, torch.float32)
    logits[1, 0] = nan
    logits[2, 2] = float("inf")
    logits[3] = float("-inf")
    tok, status, _, _ = fused_sample(
        logits, t([1.0, 1.0, 1.0, 1.0, -1.0, 1.0, nan], torch.float32), t([0, 0, 0, 0, 0, -3, 0], torch.int64),
        t([1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0], torch.float32), t([0.0] * 7, torch.float32),
        t([5] * 7, torch.int64), t([0] * 7, torch.int64))
    kinds = [STATUS_KINDS[s] for s in status.tolist()]
    assert kinds == [None, "nan_logits", "posinf_logits", "no_valid_token", "invalid_temperature", "invalid_top_k",
                     "invalid_temperature"]
    assert tok.tolist()[1:] == [-1] * 6 and 0 <= tok[0].item() < 3
    _, status, _, _ = fused_sample(logits[:2], t([1.0, 1.0], torch.float32), t([0, 0], torch.int64),
                                   t([1.5, nan], torch.float32), t([0.0, 2.0], torch.float32),
                                   t([5, 5], torch.int64), t([0, 0], torch.int64))
    assert [STATUS_KINDS[s] for s in status.tolist()] == ["invalid_top_p", "nan_logits"]


def random_batch(seed, B, vocab_choices, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    rng = random.Random(seed)
    V = rng.choice(vocab_choices)
    sigma = rng.choice([0.1, 1.0, 3.0, 8.0])
    logits = torch.randn(B, V, generator=g) * sigma
    if rng.random() < 0.3:
        logits = torch.round(logits * 2) / 2  # ties, including -0.0 against 0.0
    logits = logits.to(dtype)
    cols = {"T": [], "K": [], "P": [], "M": []}
    for _ in range(B):
        mix = rng.choice(["none", "k", "p", "kp", "m", "all", "greedy"])
        temp, k, p, m = rng.choice([0.5, 1.0, 1.7]), 0, 1.0, 0.0
        if mix in ("k", "kp", "all"):
            k = rng.choice([2, 5, 20, 50, 300, V, V + 3])
        if mix in ("p", "kp", "all"):
            p = rng.choice([0.3, 0.5, 0.9, 0.99, 0.9999999])
        if mix in ("m", "all"):
            m = rng.choice([0.01, 0.05, 0.3])
        if mix == "greedy":
            temp = 0.0
        for key, v in zip("TKPM", (temp, k, p, m)):
            cols[key].append(v)
    S = torch.tensor([rng.randrange(-2 ** 63, 2 ** 63) for _ in range(B)], dtype=torch.int64)
    O = torch.tensor([rng.randrange(0, 2 ** 63) for _ in range(B)], dtype=torch.int64)
    return (logits, torch.tensor(cols["T"]), torch.tensor(cols["K"]), torch.tensor(cols["P"]),
            torch.tensor(cols["M"]), S, O)


@pytest.mark.parametrize("seed", range(6))
def test_random_batches_match_the_reference(seed):
    logits, T, K, P, M, S, O = random_batch(seed, 16, [2, 7, 33, 257, 600])
    args = [a.to(DEV) for a in (logits, T, K, P, M, S, O)]
    tok, status, path, probs = fused_sample(*args, want_probs=True)
    want, dists = reference_rows(logits, T, K, P, M, S, O)
    assert status.tolist() == [0] * 16
    assert tok.tolist() == want
    for i in range(16):
        assert torch.allclose(probs[i].cpu(), dists[i], rtol=1e-5, atol=1e-7), (i, PATHS[int(path[i])])


def test_every_path_is_exercised():
    # early accept off: it would take the rows of the slow and boundary paths here (their winners are
    # certainly kept); on for the hand-checked rows of _early_rows; one rejected row
    seen = set()
    for seed in range(6):
        logits, T, K, P, M, S, O = random_batch(seed, 16, [2, 7, 33, 257, 600])
        _, _, path, _ = fused_sample(*(a.to(DEV) for a in (logits, T, K, P, M, S, O)), block=128, nb=128, kmax=128,
                                     early=False)
        seen |= {PATHS[p] for p in path.tolist()}
    _, _, path, _ = fused_sample(*(a.to(DEV) for a in _early_rows()))
    seen |= {PATHS[p] for p in path.tolist()}
    _, _, path, _ = fused_sample(t([[0.0, float("nan")]], torch.float32), *(t([v], dt) for v, dt in (
        (1.0, torch.float32), (0, torch.int64), (0.9, torch.float32), (0.0, torch.float32), (1, torch.int64),
        (0, torch.int64))))
    seen |= {PATHS[p] for p in path.tolist()}
    assert seen == set(PATHS.values()) == {"rejected", "greedy", "untruncated", "fast", "boundary", "slow",
                                           "accepted"}


@pytest.mark.parametrize("seed", range(2))
def test_one_program_per_row_fills_its_lists_without_atomics(seed):
    """``programs=1`` makes each row one program (``S = 1``), which owns its window and above-window lists and
    reserves slots from a running count (``local``); ``local=False`` reserves them with one atomic per tile, as
    rows split over several programs do. Same tokens and distributions both ways, equal to the reference; small
    blocks and workspaces send rows down the gather, overflow and min-p packing paths."""
    logits, T, K, P, M, S, O = random_batch(40 + seed, 12, [257, 600, 3000])
    args = [a.to(DEV) for a in (logits, T, K, P, M, S, O)]
    small = dict(block=128, nb=64, kmax=128, kbig=256, early=False, want_probs=True, programs=1)
    own = fused_sample(*args, **small)
    atom = fused_sample(*args, **dict(small, local=False))
    want, dists = reference_rows(logits, T, K, P, M, S, O)
    assert own[0].tolist() == atom[0].tolist() == want
    assert torch.equal(own[3], atom[3])
    for i in range(12):
        assert torch.allclose(own[3][i].cpu(), dists[i], rtol=1e-5, atol=1e-7)
    assert "fast" in {PATHS[p] for p in own[2].tolist()}
    # flat rows whose 0.9 nucleus exceeds the window: the boundary path and its above-window list
    g = torch.Generator().manual_seed(seed)
    flat = (torch.randn(4, 3000, generator=g), torch.tensor([1.0, 0.8, 1.2, 1.0]), torch.zeros(4, dtype=torch.int64),
            torch.tensor([0.9, 0.8, 0.95, 0.5]), torch.tensor([0.0, 0.0, 0.01, 0.0]), torch.tensor([3, 4, 5, 6]),
            torch.tensor([0, 1, 2, 3]))
    big = dict(block=512, nb=1024, kmax=256, early=False, programs=1)
    own = fused_sample(*(a.to(DEV) for a in flat), **big)
    atom = fused_sample(*(a.to(DEV) for a in flat), **dict(big, local=False))
    assert [PATHS[p] for p in own[2].tolist()] == ["boundary"] * 4
    assert own[0].tolist() == atom[0].tolist() == reference_rows(*flat)[0]


def test_unit_temperature_rows_skip_the_division_with_the_same_draws():
    """Rows at ``T == 1`` take the histogram and refine passes' masses from ``x - m`` (``unit_t``, on): the same
    values as the IEEE quotient by 1, so the same tokens, paths and distributions as with ``unit_t=False``, and the
    reference's. Small bins send rows through the refine pass; the rows at ``T = 0.7`` keep the division."""
    g = torch.Generator().manual_seed(5)
    B = 8
    logits = torch.randn(B, 3000, generator=g) * torch.tensor([0.5, 1, 2, 3, 1, 2, 3, 8])[:, None]
    T = torch.tensor([1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.7, 1.0])
    K = torch.tensor([0, 0, 0, 50, 0, 300, 0, 0])
    P = torch.tensor([0.9, 0.5, 0.95, 0.9, 0.99, 0.8, 0.9, 0.9])
    M = torch.tensor([0.0, 0.0, 0.0, 0.0, 0.01, 0.0, 0.0, 0.0])
    S, O = torch.arange(B) + 11, torch.arange(B) * 3
    args = [a.to(DEV) for a in (logits, T, K, P, M, S, O)]
    small = dict(block=128, nb=64, kmax=128, early=False, want_probs=True)
    on = fused_sample(*args, **small)
    off = fused_sample(*args, **dict(small, unit_t=False))
    want, dists = reference_rows(logits, T, K, P, M, S, O)
    assert on[0].tolist() == off[0].tolist() == want
    assert on[2].tolist() == off[2].tolist() and torch.equal(on[3], off[3])
    assert "boundary" in {PATHS[p] for p in on[2].tolist()}


def _row_ints(a: dict, cfg: dict, B: int, cols) -> list:
    """Each row's int32 record fields ``cols`` after a call (offsets from the record's start; the counters
    follow its ``LAYOUT["RI"]`` fields), read from ``allocate``'d buffers."""
    from impls.fused.kernel import LAYOUT
    ri = a["S"] * (LAYOUT["PI"] + cfg["nb"] + cfg["nbs"])
    per = ri + LAYOUT["RI"] + LAYOUT["CNT"]
    return [[int(a["wsi"][r * per + ri + j]) for j in cols] for r in range(B)]


def _row_counters(a: dict, cfg: dict, B: int, which) -> list:
    """Each row's counters ``which`` (2/3: the window or bracket list's length and the above list's) after a call."""
    from impls.fused.kernel import LAYOUT
    return _row_ints(a, cfg, B, [LAYOUT["RI"] + j for j in which])


def _row_modes(a: dict, cfg: dict, B: int) -> list:
    """Each row's window mode after a call (kernel record field ``_I_MODE``): 0 window gathered from the hist
    or refine pass, 1 streaming refine, 2 slow, 3 accepted, 4 bracket list (read from ``allocate``'d buffers)."""
    return [m for (m,) in _row_ints(a, cfg, B, (3,))]


def _bracket_rows(seed: int) -> tuple:
    """8 rows of 4000 logits, sigma 0.5 to 3, top-p 0.3 to 0.99 (rows 6 and 7 with top-k 1500 and 900, wider than a
    128-entry window), whose brackets outgrow a 128-entry window: ``(B, V, args on DEV, reference tokens, reference
    distributions)``."""
    g = torch.Generator().manual_seed(seed)
    B, V = 8, 4000
    logits = torch.randn(B, V, generator=g) * torch.tensor([3.0, 3.0, 2.0, 1.0, 3.0, 0.5, 3.0, 2.0])[:, None]
    T = torch.tensor([1.0, 1.0, 1.0, 1.0, 0.7, 1.0, 1.3, 1.0])
    K = torch.tensor([0, 0, 0, 0, 0, 0, 1500, 900])
    P = torch.tensor([0.9, 0.5, 0.95, 0.8, 0.9, 0.3, 1.0, 0.99])
    M = torch.tensor([0.0, 0.0, 0.0, 0.0, 0.0, 0.01, 0.0, 0.0])
    S, O = torch.arange(B) + 7, torch.arange(B)
    want, dists = reference_rows(logits, T, K, P, M, S, O)
    return B, V, [a.to(DEV) for a in (logits, T, K, P, M, S, O)], want, dists


@pytest.mark.parametrize("seed", range(2))
def test_bracket_list_refines_as_the_refine_pass(seed):
    """A top-k/top-p row whose bracket holds more survivors than the window list (``kmax``) but at most ``kbr``
    is refined from the bracket's list in the decide launch (mode 4) instead of by the refine pass over the row
    (mode 1, ``kbr=0``): the same tokens, paths and distributions both ways, equal to the reference's. Rows of
    4000 logits of sigma 0.5 to 3 with top-p 0.3 to 0.99 (some with top-k 900 or 1500, wider than the 128-entry
    window): with ``kbr=512`` at least rows 2 and 3 take the list, with ``kbr=0`` none does. (``nsub=128``: no
    window is refined again before its sort, which needs the bracket list's space.)"""
    from impls.fused.ops import DEFAULTS, INTERPRETED, INTERPRETER, apply_tuning
    from impls.fused.workspace import allocate
    B, V, args, want, dists = _bracket_rows(seed)
    runs = {}
    for kbr in (0, 512):
        opts = dict(block=128, nb=64, kmax=128, nbs=64, kbr=kbr, nsub=128, early=False, want_probs=True)
        tuned = {k: v for k, v in opts.items() if k != "want_probs"}
        cfg = apply_tuning(INTERPRETER if INTERPRETED else DEFAULTS, tuned)
        a = allocate(B, V, torch.device(DEV), cfg, want_probs=True)
        runs[kbr] = fused_sample(*args, buffers=a, **opts), _row_modes(a, cfg, B)
    (ref_out, ref_modes), (lst_out, lst_modes) = runs[0], runs[512]
    assert ref_out[0].tolist() == lst_out[0].tolist() == want
    assert ref_out[2].tolist() == lst_out[2].tolist() and torch.equal(ref_out[3], lst_out[3])
    for i in range(B):
        assert torch.allclose(lst_out[3][i].cpu(), dists[i], rtol=1e-5, atol=1e-7)
    assert 4 not in ref_modes and all(lst_modes[r] == 4 for r in (2, 3)), (ref_modes, lst_modes)


def test_wide_window_is_refined_before_its_sort():
    """A window of more than ``nsub`` entries is refined once more from its own list (the bracket list's
    space) to at most ``nsub`` entries, sorted ``nsub`` wide instead of ``kmax`` wide: same tokens and
    distributions as without (``nsub`` = ``kmax``: never), equal to the reference's. The rows with top-k 100
    and 90 have windows from the top of the row (path ``fast``) of more than 32 entries: the first (no top-p)
    is refined, its window no longer holds the maximum (path ``boundary``); the second, with top-p 0.99, is
    not (refined around the k-th, its window could lose the top-p boundary)."""
    g = torch.Generator().manual_seed(1)
    B, V = 8, 4000
    logits = torch.randn(B, V, generator=g) * torch.tensor([3.0, 3.0, 2.0, 1.0, 3.0, 0.5, 3.0, 2.0])[:, None]
    T = torch.tensor([1.0, 1.0, 1.0, 1.0, 0.7, 1.0, 1.3, 1.0])
    K = torch.tensor([0, 0, 0, 0, 0, 0, 100, 90])
    P = torch.tensor([0.9, 0.5, 0.95, 0.8, 0.9, 0.3, 1.0, 0.99])
    M = torch.zeros(B)
    S, O = torch.arange(B) + 7, torch.zeros(B, dtype=torch.int64)
    args = [a.to(DEV) for a in (logits, T, K, P, M, S, O)]
    want, dists = reference_rows(logits, T, K, P, M, S, O)
    opts = dict(block=128, nb=64, kmax=128, nbs=64, kbr=512, early=False, want_probs=True)
    sub = fused_sample(*args, nsub=32, **opts)
    whole = fused_sample(*args, nsub=128, **opts)
    assert sub[0].tolist() == whole[0].tolist() == want
    for i in range(B):
        assert torch.allclose(sub[3][i].cpu(), dists[i], rtol=1e-5, atol=1e-7)
    assert [PATHS[p] for p in whole[2].tolist()[6:]] == ["fast", "fast"]
    assert [PATHS[p] for p in sub[2].tolist()[6:]] == ["boundary", "fast"]


def test_bisected_window_decides_as_the_sorted_one():
    """``bisect`` (16: every window; 0: none): the decide launch finds a window's k-th largest key and top-p
    threshold by bisection instead of sorting it; the same tokens, statuses, paths and probabilities as the sort,
    equal to the reference's. Rows of
    4000 logits: top-p alone, top-k alone (with ties in the logits: values rounded to 1/8), both, min-p, and two
    at ``T = 1e5`` (e within 1e-4 of 1: groups of distinct logits with equal float32 probability inside the
    window, SEMANTICS §1.5). Rows 0-2, 5 and 7 take a window path (``fast``: from the top of the row, or
    ``boundary``); 3, 4 and 6 the slow path (their windows' edges: ties, or a top-k window too wide), both ways."""
    g = torch.Generator().manual_seed(3)
    B, V = 8, 4000
    logits = torch.randn(B, V, generator=g) * 3
    logits[2] = torch.round(logits[2] * 8) / 8
    logits[3] = torch.round(logits[3] * 8) / 8
    T = torch.tensor([1.0, 0.8, 1.0, 1.0, 1.0, 1.2, 1e5, 1e5])
    K = torch.tensor([0, 0, 40, 100, 700, 0, 0, 60])
    P = torch.tensor([0.9, 0.5, 1.0, 0.9, 0.95, 0.99, 0.9, 0.8])
    M = torch.tensor([0.0, 0.0, 0.0, 0.0, 0.0, 0.02, 0.0, 0.0])
    S, O = torch.arange(B) + 3, torch.arange(B)
    args = [a.to(DEV) for a in (logits, T, K, P, M, S, O)]
    want, dists = reference_rows(logits, T, K, P, M, S, O)
    opts = dict(block=128, nb=64, kmax=128, nbs=64, kbr=512, nsub=32, early=False, want_probs=True)
    bis = fused_sample(*args, bisect=16, **opts)
    srt = fused_sample(*args, bisect=0, **opts)
    assert bis[0].tolist() == srt[0].tolist() == want
    assert bis[1].tolist() == srt[1].tolist() == [0] * B
    assert bis[2].tolist() == srt[2].tolist() and torch.equal(bis[3], srt[3])
    for i in (0, 1, 2, 3, 4, 5, 7):
        assert torch.allclose(bis[3][i].cpu(), dists[i], rtol=1e-5, atol=1e-7), i
    # row 6 (top-p 0.9 at T = 1e5) keeps a token more than the reference, both ways: the kernel's own known
    # difference (SEMANTICS §1.5: its ties are its float32 e's, which join logits the float64 probabilities tell
    # apart); the reference's kept set is inside the kernel's
    assert bool(((dists[6] > 0) & (bis[3][6].cpu() == 0)).sum() == 0)
    paths = [PATHS[p] for p in bis[2].tolist()]
    assert paths[:3] == ["boundary", "fast", "boundary"] and paths[5] == "boundary" and paths[7] == "fast", paths


def test_bisected_window_groups_in_the_sorts_order():
    """Logits 0, a = -0.0031817015 and b, the float just below a, whose float32 ``exp`` (NumPy's, the interpreter's)
    is *larger* than a's: the kernel's ``e`` is not monotone to the ulp. The sort orders the window by key (0, a, b)
    and groups runs of equal ``e``, so with ``top_p`` between ``e(0)`` and ``e(0) + e(a)`` of the mass it keeps {0,
    a}: the reference's set (float64, monotone). The bisection keeps them too (it bisects on the key, not on ``e``,
    which kept {0, b}; found by a reviewer). Tokens, statuses and paths equal both ways, over 16 seeds; no token is
    b. (The probabilities launch reads the kept set as a threshold on ``e``, so it shows b with either decision.)"""
    import numpy as np
    xa, xb = np.float32(-0.0031817015), np.float32(-0.0031817018)
    B, V = 16, 256
    x = np.full((B, V), -30.0, np.float32)
    x[:, 0], x[:, 1], x[:, 2] = 0.0, xa, xb
    args = [a.to(DEV) for a in (torch.tensor(x), torch.ones(B), torch.zeros(B, dtype=torch.int64),
                                torch.full((B,), 0.5005305518904418, dtype=torch.float64), torch.zeros(B),
                                torch.arange(B, dtype=torch.int64), torch.zeros(B, dtype=torch.int64))]
    srt, bis = fused_sample(*args, bisect=0), fused_sample(*args, bisect=16)
    assert all(torch.equal(srt[i], bis[i]) for i in range(3))
    assert set(bis[0].tolist()) <= {0, 1}


def test_survivors_above_the_window_lifted_listed_or_drawn_in_the_gather_pass():
    """Where a top-k/top-p row's survivors above its window are drawn, three ways with the same tokens, paths and
    distributions, equal to the reference's. The decide launch draws a bracket list's (and a wide window's) entries
    above the refined window from the above-window list, appended after its own entries (*lifted*: a Philox per kept
    entry only; counter 4 of the row record), or in the list's loop where they would not fit its ``kbig`` entries;
    with ``draw_above`` at least the batch the survivors above the window are drawn in the gather pass instead
    (record field ``_I_ABOVE`` 2, not 1: listed). Rows of 4000 logits as in
    ``test_bracket_list_refines_as_the_refine_pass`` (``kbr=512``, ``nsub=32``): with ``kbig=4096`` entries are
    lifted in every row but row 1, whose window holds the row's top (row 7, top-k 900, then takes the slow path),
    with ``kbig=16`` in none; rows 0, 1 and 4 have their bracket or window from the row's top (field 0: nothing
    above it), the other five switch from 1 to 2 with ``draw_above=8``."""
    from impls.fused.ops import DEFAULTS, INTERPRETED, INTERPRETER, apply_tuning
    from impls.fused.workspace import allocate
    B, V, args, want, dists = _bracket_rows(0)
    runs = {}
    for name, more in (("in place", dict(kbig=16)), ("lifted", dict(kbig=4096)),
                       ("gather", dict(kbig=4096, draw_above=8))):
        opts = dict(block=128, nb=64, kmax=128, nbs=64, kbr=512, nsub=32, early=False, one_list=False, **more)
        cfg = apply_tuning(INTERPRETER if INTERPRETED else DEFAULTS, opts)
        a = allocate(B, V, torch.device(DEV), cfg, want_probs=True)
        out = fused_sample(*args, buffers=a, want_probs=True, **opts)
        runs[name] = out, [n for (n,) in _row_counters(a, cfg, B, (4,))], [f for (f,) in _row_ints(a, cfg, B, (12,))]
    for name, (out, _lifted, _above) in runs.items():
        assert out[0].tolist() == want, name
        assert out[2].tolist() == runs["lifted"][0][2].tolist(), name
        for i in range(B):
            assert torch.allclose(out[3][i].cpu(), dists[i], rtol=1e-5, atol=1e-7), (name, i)
    assert runs["in place"][1] == [0] * B
    assert runs["lifted"][1] == [59, 0, 234, 198, 41, 65, 121, 60]
    assert runs["lifted"][2] == [0, 0, 1, 1, 0, 1, 1, 1] and runs["gather"][2] == [0, 0, 2, 2, 0, 2, 2, 2]


def test_one_list_holds_the_bracket_and_the_survivors_above_it():
    """``one_list``: a mode-4 row whose survivors above its bracket fit the bracket list with it has them all in
    that one list (record field ``_I_ABOVE`` 0, none counted above it, ``_I_NABOVE`` 0); the decide launch lifts
    those above the bracket with those above its refined window. The rows of
    ``test_survivors_above_the_window_lifted_listed_or_drawn_in_the_gather_pass`` with ``kbr=2048``: rows 2, 3, 6
    and 7 take one list (their above lists held 1,241, 1,524, 1,375 and 837 entries), each lifting those entries
    more (234 + 1,241 = 1,475, 198 + 1,524 = 1,722, 121 + 1,375 = 1,496, 60 + 837 = 897); row 5 is not a bracket
    row (mode 0: its window fits) and keeps its above list. Same tokens, paths and distributions, the reference's."""
    from impls.fused.ops import DEFAULTS, INTERPRETED, INTERPRETER, apply_tuning
    from impls.fused.workspace import allocate
    B, V, args, want, dists = _bracket_rows(0)
    runs = {}
    for one in (False, True):
        opts = dict(block=128, nb=64, kmax=128, nbs=64, kbr=2048, nsub=32, early=False, kbig=4096, one_list=one)
        cfg = apply_tuning(INTERPRETER if INTERPRETED else DEFAULTS, opts)
        a = allocate(B, V, torch.device(DEV), cfg, want_probs=True)
        out = fused_sample(*args, buffers=a, want_probs=True, **opts)
        runs[one] = out, _row_counters(a, cfg, B, (3, 4)), _row_ints(a, cfg, B, (3, 7, 12))
    for one, (out, _c, _r) in runs.items():
        assert out[0].tolist() == want, one
        assert out[2].tolist() == runs[False][0][2].tolist(), one
        for i in range(B):
            assert torch.allclose(out[3][i].cpu(), dists[i], rtol=1e-5, atol=1e-7), (one, i)
    assert [c for c, _l in runs[False][1]] == [0, 0, 1241, 1524, 0, 552, 1375, 837]
    assert [lift for _c, lift in runs[False][1]] == [59, 0, 234, 198, 41, 65, 121, 60]
    assert [lift for _c, lift in runs[True][1]] == [59, 0, 1475, 1722, 41, 65, 1496, 897]
    assert [c for c, _l in runs[True][1]] == [0, 0, 0, 0, 0, 552, 0, 0]
    assert runs[True][2] == [[0, 0, 0], [0, 0, 0], [4, 0, 0], [4, 0, 0], [0, 0, 0], [0, 552, 1], [4, 0, 0],
                             [4, 0, 0]]
    assert [m for m, _n, _a in runs[False][2]] == [0, 0, 4, 4, 0, 0, 4, 4]


def _append_inputs() -> tuple:
    """``(n, x, sel)`` of the list-append tests: 100,003 int64 entries ``7 i + 5`` and an int32 selection of
    densities 0, 0.3 %, 40 % and 100 % in quarters (seeded)."""
    g = torch.Generator().manual_seed(11)
    n = 100_003
    x = torch.arange(n, dtype=torch.int64) * 7 + 5
    q = n // 4
    r = torch.rand(n, generator=g)
    sel = torch.cat([torch.zeros(q), (r[q:2 * q] < 0.003).float(), (r[2 * q:3 * q] < 0.4).float(),
                     torch.ones(n - 3 * q)]).to(torch.int32)
    return n, x, sel


@triton.jit
def _seg_selected(x_ptr, sel_ptr, out_ptr, cnt_ptr, n, segcap, BLOCK: tl.constexpr, SEG: tl.constexpr,
                  PTX: tl.constexpr):
    # one program appends the selected x of [0, n) to a segmented list with _seg_append, as the gather pass
    if PTX:
        used = tl.zeros([BLOCK], dtype=tl.int32)
    else:
        used = tl.zeros([SEG], dtype=tl.int32)
    for st in range(0, n, BLOCK):
        offs = st + tl.arange(0, BLOCK)
        m = offs < n
        x = tl.load(x_ptr + offs, mask=m, other=0)
        s = tl.load(sel_ptr + offs, mask=m, other=0) != 0
        used = _seg_append(out_ptr, segcap, s & m, x, used, SEG, PTX)
    _seg_end(cnt_ptr, used, SEG, PTX)


@triton.jit
def _coarse_and_fine(x_ptr, m_ptr, c_ptr, out_ptr, N: tl.constexpr, NBF: tl.constexpr):
    from impls.fused.kernel import _coarse, _fine
    i = tl.arange(0, N)
    x, m, C = tl.load(x_ptr + i), tl.load(m_ptr + i), tl.load(c_ptr + i)
    tl.store(out_ptr + 2 * i, _coarse(x, m, C * (1.0 / 256), NBF))
    tl.store(out_ptr + 2 * i + 1, _fine(x, m, C, NBF) >> 8)


def test_coarse_bin_is_the_fine_bin_shifted():
    """``_coarse`` (the histogram pass's level-1 bin from ``C / 256``) equals ``_fine(x) >> 8`` at every float
    within 3 of each level-1 edge ``m - 256 j / C`` (j = 1..63) and at the clamp, for 12 rows of ``m`` (0 to 1e4)
    and ``C`` (``NBF / R``, R from 1e-3 to 1e30): 12 x 63 x 7 logits."""
    import numpy as np
    NBF = 63 * 256
    xs, ms, cs = [], [], []
    for m, R in ((0.0, 40.0), (14.3, 40.0), (-5.2, 28.0), (3.0, 5.0), (0.02, 0.5), (1e4, 1e3), (7.0, 1e-3),
                 (1.0, 1e30), (-30.0, 3.0), (2.5, 40.0 * 1.3), (100.0, 80.0), (0.0, 1.0)):
        m32, C = np.float32(m), np.float32(NBF / np.float32(R))
        for j in range(1, 64):
            edge = np.float32(m32 - np.float32(256 * j) / C)
            x = edge
            for _ in range(3):
                x = np.nextafter(x, np.float32(np.inf))
            for _ in range(7):
                xs.append(x), ms.append(m32), cs.append(C)
                x = np.nextafter(x, np.float32(-np.inf))
    n = 1 << (len(xs) - 1).bit_length()
    pad = n - len(xs)
    x = torch.tensor(np.array(xs + [np.float32(-3.0e38)] * pad, dtype=np.float32))
    m = torch.tensor(np.array(ms + [np.float32(1.0)] * pad, dtype=np.float32))
    C = torch.tensor(np.array(cs + [np.float32(NBF / 40.0)] * pad, dtype=np.float32))
    out = torch.empty(2 * n, dtype=torch.int32)
    _coarse_and_fine[(1,)](x, m, C, out, n, NBF)
    out = out.view(-1, 2)
    assert torch.equal(out[:, 0], out[:, 1])
    assert int(out[:, 1].max()) == 62 and int(out[:, 1].min()) == 0


@triton.jit
def _fine_bounds_rows(m_ptr, c_ptr, xa_ptr, flo_ptr, fhi_ptr, out_ptr, NBF: tl.constexpr):
    from impls.fused.kernel import _fine_bounds
    i = tl.program_id(0)
    x_lo, x_hi = _fine_bounds(tl.load(m_ptr + i), tl.load(c_ptr + i), tl.load(xa_ptr + i), tl.load(flo_ptr + i),
                              tl.load(fhi_ptr + i), NBF)
    tl.store(out_ptr + 2 * i, x_lo)
    tl.store(out_ptr + 2 * i + 1, x_hi)


def test_fine_bounds_are_the_window_edges_of_fine():
    """``_fine_bounds`` (the gather pass's window as logit bounds): ``x_lo`` is the least float in fine bin
    ``<= f_hi`` (or ``x_A``) and ``x_hi`` the greatest in bin ``>= f_lo`` (``m`` at ``f_lo = 0``, -inf at
    ``f_lo = NBF``), checked against ``_fine``'s arithmetic (float32, no FMA) at each bound and the float next to
    it; rows from the suite's logits and edge cases (bounds near 0, where a bracket of 16 keys does not hold and
    the full bisection runs)."""
    import numpy as np
    NBF = 63 * 256
    rng = np.random.default_rng(5)
    rows = []
    for _ in range(60):
        m = np.float32(rng.choice([14.0, 3.0, 0.02, -5.0, 40.0]) + rng.random())
        C = np.float32(NBF / rng.choice([28.0, 40.0, 5.0, 0.5]))
        f_lo = int(rng.integers(0, NBF))
        f_hi = int(min(NBF - 1, f_lo + rng.integers(0, 600)))
        rows.append((m, C, np.float32(-np.inf if rng.random() < 0.7 else m - 3.0), f_lo, f_hi))
    rows += [(np.float32(0.5), np.float32(NBF / 1.0), np.float32(-3.4028235e38), 8000, 8064),   # edges near x = 0
             (np.float32(1.0), np.float32(NBF / 40.0), np.float32(-3.4028235e38), 0, NBF - 1),
             (np.float32(1.0), np.float32(NBF / 40.0), np.float32(-3.4028235e38), NBF, NBF - 1)]   # empty window
    m, C, xa, flo, fhi = (torch.tensor([r[j] for r in rows]) for j in range(5))
    out = torch.empty(2 * len(rows))
    _fine_bounds_rows[(len(rows),)](m, C, xa, flo.to(torch.int32), fhi.to(torch.int32), out, NBF)
    out = out.view(-1, 2).numpy()

    def fine(x, m, C):
        return int(np.minimum(np.float32(np.float32(m - x) * C), np.float32(NBF - 1)))

    for (m_, C_, xa_, f_lo, f_hi), (x_lo, x_hi) in zip(rows, out):
        x_lo, x_hi = np.float32(x_lo), np.float32(x_hi)
        below = np.nextafter(x_lo, np.float32(-np.inf))
        if x_lo > xa_:
            assert fine(x_lo, m_, C_) <= f_hi < fine(below, m_, C_), (m_, C_, f_lo, f_hi, x_lo)
        else:
            assert x_lo == max(xa_, np.float32(-3.4028235e38)) or x_lo == xa_
            assert fine(max(xa_, np.float32(-3.4028235e38)), m_, C_) <= f_hi
        if f_lo == 0:
            assert x_hi == m_
        elif f_lo >= NBF:
            assert x_hi == -np.inf
        else:
            above = np.nextafter(x_hi, np.float32(np.inf))
            assert fine(x_hi, m_, C_) >= f_lo > fine(above, m_, C_), (m_, C_, f_lo, f_hi, x_hi)


def test_seg_append_writes_each_warp_its_segment():
    """``_seg_append`` (one program, a segment a warp, no atomic): each segment holds its warp's selected entries, the
    ``w``-th run of ``BLOCK / SEG`` logits of every tile, in order; counter 2 their total, counters 8.. each
    segment's length, which keeps counting past the capacity while nothing more is stored. Compiled, the warp
    ballots of the inline PTX (``BLOCK`` 1024, 8 warps); under the interpreter the plain-Triton copy (``BLOCK`` 128,
    4 segments). Densities 0, 0.3 %, 40 % and 100 % in quarters of 100,003 entries, a ragged last tile."""
    from impls.fused.ops import INTERPRETED
    n, x, sel = _append_inputs()
    block, seg = (128, 4) if INTERPRETED else (1024, 8)
    run = block // seg
    owner = (torch.arange(n) % block) // run
    want = [x[sel.bool() & (owner == w)].tolist() for w in range(seg)]
    for cap in (n, 1000):
        out = torch.full((seg * cap,), -1, dtype=torch.int64, device=DEV)
        cnt = torch.zeros(24, dtype=torch.int32, device=DEV)
        _seg_selected[(1,)](x.to(DEV), sel.to(DEV), out, cnt, n, cap, BLOCK=block, SEG=seg, PTX=not INTERPRETED,
                            num_warps=seg)
        got, c = out.cpu(), cnt.cpu()
        assert c[8:8 + seg].tolist() == [len(w) for w in want] and int(c[2]) == int(sel.sum()), cap
        assert (c[:2] == 0).all() and (c[3:8] == 0).all() and (c[8 + seg:] == 0).all(), cap
        for w in range(seg):
            k = min(cap, len(want[w]))
            assert got[w * cap:w * cap + k].tolist() == want[w][:k], (cap, w)
            assert (got[w * cap + k:(w + 1) * cap] == -1).all(), (cap, w)


@pytest.mark.parametrize("kbig", [4096, 1024])
def test_segmented_bracket_lists_give_the_same_tokens(kbig):
    """``seg_lists``: a bracket list that a row's only program writes alone (one list, or its survivors above the
    bracket drawn in the gather pass) goes in a segment a warp (no block scan), which the decide launch reads through
    the segments' lengths: the same tokens, paths and distributions as the packed list, the reference's, in a
    workspace holding stale entries (every int64 set to a plausible packed entry first: the gaps between segments
    must never be read). The rows of ``test_one_list_holds_the_bracket_and_the_survivors_above_it`` in one part
    each (``max_splits=1``). With ``kbig=4096``: rows 2, 6 and 7 take one segmented list (lengths summing to 1,589,
    1,536 and 977), row 3 (1,863 entries) two lists, a segmented bracket list being given 7/8 of ``kbr`` (1,792);
    with ``kbig=1024`` rows 2, 3 and 6 have more survivors above the bracket than that (1,241, 1,524, 1,375: drawn
    in the gather pass, record field ``_I_ABOVE`` 2) and segmented brackets of 348, 339 and 161 entries. A ninth
    row whose survivors all lie in the first warp's run of each tile overflows that segment (``kbr / warps``
    entries): the slow path, with the reference's token."""
    from impls.fused.ops import DEFAULTS, INTERPRETED, INTERPRETER, apply_tuning
    from impls.fused.workspace import allocate
    B, V, args, want, dists = _bracket_rows(0)
    block, warps = (128, 4) if INTERPRETED else (1024, 8)
    g = torch.Generator().manual_seed(3)
    odd = torch.randn(V, generator=g) * 0.05 + 8.0 * ((torch.arange(V) % block) < block // warps).float()
    cols = [torch.cat([a.cpu(), b.reshape(1, *a.shape[1:])]) for a, b in zip(args, (
        odd, torch.tensor(1.0), torch.tensor(0), torch.tensor(0.9), torch.tensor(0.0), torch.tensor(99),
        torch.tensor(9)))]
    want9, dists9 = reference_rows(*cols)
    assert want9[:B] == want
    cols = [c.to(DEV) for c in cols]
    stale = (0x40A00000 << 32) | (4294967295 - 7)   # the packed entry of logit 5.0, token 7
    runs = {}
    for seg in (False, True):
        opts = dict(block=block, num_warps=warps, nb=64, kmax=128, nbs=64, kbr=2048, nsub=32, early=False, kbig=kbig,
                    one_list=True, seg_lists=seg, max_splits=1)
        cfg = apply_tuning(INTERPRETER if INTERPRETED else DEFAULTS, opts)
        a = allocate(B + 1, V, torch.device(DEV), cfg, want_probs=True)
        a["ws64"].fill_(stale)
        out = fused_sample(*cols, buffers=a, want_probs=True, **opts)
        runs[seg] = out, _row_counters(a, cfg, B + 1, [2, 3] + list(range(8, 8 + warps))), [
            f for (f,) in _row_ints(a, cfg, B + 1, (12,))]
    for seg, (out, _c, _a) in runs.items():
        assert out[0].tolist() == want9, seg
        for i in range(B + 1):
            assert torch.allclose(out[3][i].cpu(), dists9[i], rtol=1e-5, atol=1e-7), (seg, i)
    assert runs[False][0][2].tolist()[:B] == runs[True][0][2].tolist()[:B]
    assert PATHS[int(runs[True][0][2][B])] == "slow" and PATHS[int(runs[False][0][2][B])] != "slow"
    lens, above = runs[True][1], runs[True][2]
    if kbig == 4096:
        assert [sum(c[2:]) for c in lens[:B]] == [0, 0, 1589, 0, 0, 0, 1536, 977]
        assert [c[0] for c in lens[:B]] == [93, 26, 1589, 339, 57, 98, 1536, 977]
        assert above[:B] == [0, 0, 0, 1, 0, 1, 0, 0]
    else:
        assert [sum(c[2:]) for c in lens[:B]] == [0, 0, 348, 339, 0, 0, 161, 977]
        assert above[:B] == [0, 0, 2, 2, 0, 1, 2, 0]
    assert lens[B][2] > 2048 // warps and sum(lens[B][3:]) == 0


def test_boundary_path_large_nucleus():
    # A flat row (sigma 1, V 3000): the 0.9 nucleus holds ~2000 tokens, more than the
    # workspace (256), so only the boundary bins are gathered and the draw makes one
    # more pass over the row.
    B, V = 4, 3000
    logits = torch.randn(B, V, generator=torch.Generator().manual_seed(1))
    T = torch.tensor([1.0, 0.8, 1.2, 1.0])
    K = torch.zeros(B, dtype=torch.int64)
    P = torch.tensor([0.9, 0.8, 0.95, 0.5])
    M = torch.tensor([0.0, 0.0, 0.01, 0.0])
    S = torch.tensor([3, 4, 5, 6])
    O = torch.tensor([0, 1, 2, 3])
    tok, status, path, probs = fused_sample(*(a.to(DEV) for a in (logits, T, K, P, M, S, O)), want_probs=True,
                                            block=512, nb=1024, kmax=256)
    assert [PATHS[p] for p in path.tolist()] == ["boundary"] * B
    want, dists = reference_rows(logits, T, K, P, M, S, O)
    assert tok.tolist() == want
    for i in range(B):
        assert torch.equal(probs[i].cpu() > 0, dists[i] > 0)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_inputs_equal_their_float32_upcast(dtype):
    logits, T, K, P, M, S, O = random_batch(11, 8, [300], dtype=dtype)
    a = fused_sample(*(x.to(DEV) for x in (logits, T, K, P, M, S, O)), want_probs=True)
    b = fused_sample(*(x.to(DEV) for x in (logits.float(), T, K, P, M, S, O)), want_probs=True)
    assert torch.equal(a[0], b[0]) and torch.equal(a[3], b[3])


def test_custom_op_traces_under_torch_compile():
    from impls.fused.op import sample_tokens_and_probs

    def f(logits, T, K, P, M, S, O):
        tok, status, probs = sample_tokens_and_probs(logits, T, K, P, M, S, O)
        return tok + 0, probs.sum(-1)

    logits, T, K, P, M, S, O = random_batch(3, 4, [50])
    args = [a.to(DEV) for a in (logits, T, K, P, M, S, O)]
    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")
    tok, total = compiled(*args)
    want, _ = reference_rows(logits, T, K, P, M, S, O)
    assert tok.tolist() == want
    assert torch.allclose(total.cpu(), torch.ones(4), atol=1e-5)


def test_fused_implementation_runs_corpus_cases(tmp_path):
    from harness.run.runner import run
    out = run(["fused"], ["filters/min-p-before-top-p", "filters/top-p-dyadic-boundary", "bad_input/nan-logit-row-rejected",
                          "penalties/huge-values-clamped-to-finite"],
              tmp_path, device=DEV, progress=False)
    assert {r["case"]: r["status"] for r in out.doc["results"]} == {
        "filters/min-p-before-top-p": "pass", "filters/top-p-dyadic-boundary": "pass",
        "bad_input/nan-logit-row-rejected": "pass", "penalties/huge-values-clamped-to-finite": "pass"}
    # every stage these cases exercise (validation and modes included) is the fused package's own code
    assert [r["provenance"]["own_code"] for r in out.doc["results"]] == [True] * 4


def test_kept_buffers_are_written_in_place_and_checked():
    """With ``buffers`` the call allocates nothing: it writes the same tensors, with the same tokens as a fresh call."""
    from impls.fused.ops import DEFAULTS, INTERPRETER, allocate
    cfg = INTERPRETER if DEV == "cpu" else DEFAULTS
    B, V = 3, 300
    x = torch.randn(B, V, generator=torch.Generator().manual_seed(2)).to(DEV)
    args = (t([0.8] * 3, torch.float32), t([0, 5, 0], torch.int64), t([0.9, 1.0, 0.5], torch.float32),
            t([0.0] * 3, torch.float32), t([1, 2, 3], torch.int64), t([0] * 3, torch.int64))
    buf = allocate(B, V, torch.device(DEV), cfg)
    from impls.fused.workspace import layout_key
    assert buf["key"] == layout_key(B, V, x.device, cfg, False)   # the call's check is this comparison
    fresh = fused_sample(x, *args)[0]
    for _ in range(2):
        tok, status, _, _ = fused_sample(x, *args, buffers=buf)
        assert tok.data_ptr() == buf["tokens"].data_ptr() and status.data_ptr() == buf["status"].data_ptr()
        assert torch.equal(tok, fresh) and status.tolist() == [0, 0, 0]
    with pytest.raises(ValueError, match=r"buffers\['tokens'\] is \(3,\) torch.int64 .* needs \(2,\)"):
        fused_sample(x[:2], *(a[:2] for a in args), buffers=buf)
    with pytest.raises(ValueError, match=r"buffers\['probs'\]"):
        fused_sample(x, *args, buffers=buf, want_probs=True)


@pytest.mark.parametrize("rows", [None, 1])
@pytest.mark.parametrize("B, V, dtype", [(5, 300, torch.float32), (40, 700, torch.float32), (6, 2000, torch.bfloat16)])
def test_all_greedy_hint_takes_two_launches_and_the_greedy_rules(B, V, dtype, rows):
    """``greedy=True``: first argmax whatever the parameters; NaN and all--inf rows rejected as greedy rows are.

    Two launches below ``greedy_rows`` rows (the defaults' 256), one from it (``rows=1``: every batch here).
    """
    from impls.fused.kernel import launch_specs
    from impls.fused.ops import INTERPRETER, apply_tuning
    x = torch.randn(B, V, generator=torch.Generator().manual_seed(B))
    x[0, 5] = float("nan")
    x[1] = float("-inf")
    x[2, 9] = x[2, 7] = float("inf")                      # +inf is the largest: the first of them
    x[3, V - 2] = x[3, 3] = x[3].max() + 1                # a tie: the lowest id
    x = x.to(dtype).to(DEV)
    z = lambda v, dt: torch.full((B,), v, dtype=dt, device=DEV)
    sampling = (z(0.7, torch.float32), z(5, torch.int64), z(0.9, torch.float32), z(0.1, torch.float32),
                z(1, torch.int64), z(0, torch.int64))       # not read under the hint
    opts = {} if rows is None else {"greedy_rows": rows}
    tok, status, path, probs = fused_sample(x, *sampling, want_probs=True, greedy=True, **opts)
    want = torch.argmax(x.float(), dim=-1).tolist()
    assert tok.tolist() == [-1, -1, 7, 3] + want[4:]
    assert status.tolist() == [1, 3, 0, 0] + [0] * (B - 4) and path.tolist() == [-1, -1] + [0] * (B - 2)
    assert torch.equal(probs[2:], torch.nn.functional.one_hot(tok[2:], V).float()) and not probs[:2].any()
    cfg = apply_tuning(INTERPRETER, opts)
    names = ["stats", "greedy", "probs"] if rows is None else ["greedy_row", "probs"]
    assert [s[0] for s in launch_specs(B, V, V, 1, V, True, cfg, greedy=True)] == names
    assert [s[0] for s in launch_specs(256, V, V, 1, V, False, INTERPRETER, greedy=True)] == ["greedy_row"]


@pytest.mark.parametrize("nan_at,inf_at,parts", [(10, 20, 1), (10, 138, 2), (138, 10, 2), (5, 200, 2)])
def test_nan_and_posinf_in_different_parts_of_a_row_is_nan_logits(nan_at, inf_at, parts):
    # 300 logits in parts of 128 on the interpreter (CPU) or of 1024 on a GPU (one part: the same status).
    # Until 2026-12-06 the parts' flag bits (1 NaN, 2 +inf) were combined with max: NaN in one part and
    # +inf in another gave posinf_logits (2). The reference checks NaN first (impls/reference/sampler.py,
    # _prepare; SEMANTICS §5): nan_logits (1), token -1, path rejected.
    from impls.fused.ops import INTERPRETER
    from impls.fused.workspace import splits
    x = torch.randn(1, 300, generator=torch.Generator().manual_seed(0))
    x[0, nan_at], x[0, inf_at] = float("nan"), float("inf")
    assert DEV != "cpu" or ((nan_at // 128 != inf_at // 128) == (parts == 2) and splits(1, 300, INTERPRETER)[0] == 3)
    one = lambda v, dt=torch.float32: torch.full((1,), v, dtype=dt, device=DEV)
    for P, M in ((1.0, 0.0), (0.9, 0.0), (1.0, 0.1)):   # no filter, top-p, min-p
        tok, status, path, _ = fused_sample(x.to(DEV), one(1.0), one(0, torch.int64), one(P), one(M),
                                            one(1, torch.int64), one(0, torch.int64))
        assert (status.tolist(), tok.tolist(), path.tolist()) == ([1], [-1], [-1])


def test_parameters_of_the_right_dtype_are_passed_through_uncopied():
    from impls.fused.ops import check_call
    x = torch.zeros(2, 8, device=DEV)
    T, K = torch.ones(2, device=DEV), torch.zeros(2, dtype=torch.int32, device=DEV)
    P, M = torch.full((2,), 0.9, dtype=torch.float64, device=DEV), torch.zeros(4, device=DEV)[::2]
    S = O = torch.zeros(2, dtype=torch.int64, device=DEV)
    _, (t, k, p, m, s, o) = check_call(x, T, K, P, M, S, O)
    assert t is T and p is P and s is S and o is O           # right dtype, contiguous: the caller's tensor
    assert k.dtype == torch.int64 and k is not K              # converted
    assert m.is_contiguous() and m is not M and m.tolist() == [0.0, 0.0]   # strided: copied


def test_statistics_launch_takes_its_own_pipelining_stages():
    # stats_stages applies to the statistics launch only (general and all-greedy calls) and to the one-launch
    # greedy kernel; the other streaming launches keep `stages`
    from impls.fused.kernel import launch_specs
    from impls.fused.ops import DEFAULTS, apply_tuning
    cfg = apply_tuning(DEFAULTS, {"stages": 3, "stats_stages": 2})
    for B, greedy, names, want in ((1024, False, ["stats", "hist", "refine", "gather", "decide"], [2, 3, 3, 3, 3]),
                                   (128, True, ["stats", "greedy"], [2, None]), (1024, True, ["greedy_row"], [2])):
        specs = launch_specs(B, 128256, 128256, 1, 128256, False, cfg, greedy=greedy)
        assert [(s[0], s[4].get("NSTG")) for s in specs] == list(zip(names, want))
    assert DEFAULTS["stats_stages"] == 1 and DEFAULTS["stages"] == 4


@pytest.mark.gpu
def test_cuda_graph_capture_and_replay():
    from impls.fused.op import sample_tokens_and_probs
    logits, T, K, P, M, S, O = (a.cuda() for a in random_batch(5, 8, [4096]))
    sample_tokens_and_probs(logits, T, K, P, M, S, O)  # compile before capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        tok, status, probs = sample_tokens_and_probs(logits, T, K, P, M, S, O)
    for seed in (6, 7):
        new = random_batch(seed, 8, [4096])
        new = (torch.randn(8, 4096, generator=torch.Generator().manual_seed(seed)) * 3,) + new[1:]
        for dst, src in zip((logits, T, K, P, M, S, O), new):
            dst.copy_(src)
        graph.replay()
        torch.cuda.synchronize()
        want, _ = reference_rows(*(a.cpu() for a in (logits, T, K, P, M, S, O)))
        assert tok.tolist() == want


def test_launcher_mode_is_checked_and_constexpr_tail_follows_the_signature():
    from impls.fused import launch
    from impls.fused.kernel import _hist_kernel, launch_args
    x = torch.zeros(2, 300, device=DEV)
    with pytest.raises(ValueError, match="unknown launcher mode 'fast'"):
        fused_sample(x.cpu(), *random_batch(1, 2, [300])[1:], launcher="fast")
    # the hist kernel's constexprs after its 14 positional parameters, in signature order (EARLY, NSTG, LOCAL,
    # UNIT_T, KBR, LANE, WARP, PDL, ONE and KBRL: their defaults)
    tail = launch._tail(_hist_kernel, 14, {"RMAX": 40.0, "KAB": 0, "BLOCK": 128, "NB1": 64, "NBS": 64, "KMAX": 128,
                                          "KBIG": 256})
    assert tail == (128, 64, 64, 128, 256, 40.0, 0, False, 1, True, True, 0, False, False, False, False, 0)
    with pytest.raises(TypeError, match="no value for parameter RMAX"):
        launch._tail(_hist_kernel, 14, {"KAB": 0, "BLOCK": 128, "NB1": 64, "NBS": 64, "KMAX": 128, "KBIG": 256})
    with pytest.raises(TypeError, match="no value for parameter KAB"):
        launch._tail(_hist_kernel, 14, {"RMAX": 40.0, "BLOCK": 128, "NB1": 64, "NBS": 64, "KMAX": 128, "KBIG": 256})
    from impls.fused.ops import INTERPRETER
    names = [a[0] for a in launch_args(x, *([None] * 13), 1, 512, True, INTERPRETER)]
    assert names == ["stats", "hist", "refine", "gather", "decide", "probs"]


class _FakeCompiled:
    """Stands in for Triton's ``CompiledKernel``: records the direct launches it is given."""

    def __init__(self, log, name, refuse=False):
        self.log, self.name, self.refuse = log, name, refuse
        self.function, self.packed_metadata = f"fn-{name}", f"md-{name}"

    def launch_metadata(self, grid, stream, *args):
        return None

    def run(self, g0, g1, g2, stream, function, packed, lm, enter, exit_, *args):
        if self.refuse:
            raise TypeError("function takes exactly 9 arguments")
        self.log.append(("plan", self.name, (g0, g1, g2), stream, function, packed, args))


class _FakeKernel:
    """Stands in for a ``JITFunction``: ``kernel[grid](*args, **meta)`` records the launch."""

    def __init__(self, log, name, params, refuse=False):
        self.log, self.name, self.refuse = log, name, refuse
        self.fn = type("F", (), {"__name__": name})
        import inspect
        self.fn.__signature__ = inspect.Signature([inspect.Parameter(p, inspect.Parameter.POSITIONAL_OR_KEYWORD)
                                                   for p in params])

    def __getitem__(self, grid):
        def go(*args, **meta):
            self.log.append(("jit", self.name, grid, args, meta))
            return _FakeCompiled(self.log, self.name, self.refuse)
        return go


class _Tensor(str):
    """Stands in for a tensor of a call: a name whose ``data_ptr`` is ``"addr-" + name``."""

    def data_ptr(self):
        return "addr-" + self


def _fake_specs(log, refuse_second=False):
    a = _FakeKernel(log, "a", ["x", "n", "t", "BLOCK"])
    b = _FakeKernel(log, "b", ["x", "tokens", "n", "BLOCK", "KMAX"], refuse=refuse_second)
    return [("a", a, (3, 2), ("logits", 7, "temperature"), {"BLOCK": 16}, {"num_warps": 4}),
            ("b", b, (3,), ("logits", "tokens", 9), {"BLOCK": 16, "KMAX": 32}, {"num_warps": 8})]


def test_plan_launches_each_step_with_the_new_tensors_and_the_constexpr_tail():
    """A plan built from a first call's compiled kernels re-launches them with the next call's tensors, as
    addresses, in signature order (positional parameters, then constexprs), on the given stream and 3-D grid."""
    from impls.fused import launch
    from impls.fused.kernel import SLOTS
    log = []
    specs = _fake_specs(log)
    first = tuple(_Tensor(f"first-{s}") for s in SLOTS)
    plan = launch.Plan(specs, launch._jit(specs, first))
    assert [e[:2] for e in log] == [("jit", "a"), ("jit", "b")]
    assert log[0][3] == ("first-logits", 7, "first-temperature") and log[0][4] == {"BLOCK": 16, "num_warps": 4}
    log.clear()
    second = tuple(_Tensor(f"second-{s}") for s in SLOTS)
    plan.run(second, stream=1234)
    assert log == [("plan", "a", (3, 2, 1), 1234, "fn-a", "md-a",
                    ("addr-second-logits", 7, "addr-second-temperature", 16)),
                   ("plan", "b", (3, 1, 1), 1234, "fn-b", "md-b",
                    ("addr-second-logits", "addr-second-tokens", 9, 16, 32))]
    log.clear()
    plan.run(second, stream=5, first=1, last=2)
    assert [e[1] for e in log] == ["b"]


def test_refused_plan_step_runs_through_the_jit_launcher(monkeypatch):
    """A launcher that refuses the direct call at step 1 sends that step (and only it and later ones)
    through ``kernel[grid]``, and the process falls back for good, saying why."""
    from impls.fused import launch
    from impls.fused.kernel import SLOTS
    log = []
    specs = _fake_specs(log, refuse_second=True)
    vals = tuple(_Tensor(s) for s in SLOTS)
    plan = launch.Plan(specs, launch._jit(specs, vals))
    log.clear()
    with pytest.raises(launch.LaunchRefused) as e:
        plan.run(vals, stream=0)
    assert e.value.step == 1 and [x[:2] for x in log] == [("plan", "a")]
    monkeypatch.setattr(launch, "FALLBACK", None)
    monkeypatch.setattr(launch, "_PLANS", {})
    monkeypatch.setattr(launch, "plan_key", lambda *a: ("k",))
    monkeypatch.setattr(launch, "_stream", lambda i: 0)
    monkeypatch.setattr(launch, "launch_specs", lambda *a: specs)
    cuda_like = type("X", (), {"shape": (3, 9), "device": torch.device("cuda", 0), "stride": lambda self, d: 9,
                               "data_ptr": lambda self: 4096})()
    call = (cuda_like,) + vals[1:]
    log.clear()
    launch.run_call(call, 2, 16, False, {}, "cached")  # the first call of the shape: kernel[grid], then a plan
    assert [x[:2] for x in log] == [("jit", "a"), ("jit", "b")] and launch.FALLBACK is None
    log.clear()
    launch.run_call(call, 2, 16, False, {}, "cached")
    assert [x[:2] for x in log] == [("plan", "a"), ("jit", "b")]
    assert "direct launch refused by this Triton (step 1: TypeError: function takes exactly 9 arguments)" in \
        launch.FALLBACK
    log.clear()
    launch.run_call(call, 2, 16, False, {}, "cached")
    assert [x[:2] for x in log] == [("jit", "a"), ("jit", "b")]


def test_direct_launch_only_for_a_cuda_launcher_without_scratch_memory():
    """Triton 3.6's ``CudaLauncher``: its C ``launch`` with the flags and no scratch, when the kernel needs no
    scratch memory; otherwise (scratch, another launcher) the launcher's own ``__call__``."""
    from impls.fused import launch

    class CudaLauncher:
        def __init__(self, scratch):
            self.global_scratch_size, self.profile_scratch_size = scratch, 0
            self.launch_cooperative_grid, self.launch_pdl = False, True

        def launch(self, *args):
            return args

        def __call__(self, *args):
            return args

    for scratch in (0, 128):
        ck = type("CK", (), {"run": CudaLauncher(scratch)})()
        run, pre = launch._launcher(ck)
        if scratch:
            assert run == ck.run and pre == ()
        else:
            assert run == ck.run.launch and pre == (0, 1, None, None)
    other = type("CK", (), {"run": _FakeCompiled([], "c").run})()
    assert launch._launcher(other) == (other.run, ())


def test_allocate_carves_aligned_workspaces_that_do_not_overlap():
    from impls.fused.ops import DEFAULTS, allocate
    for B, V, cfg in ((1, 32000, DEFAULTS), (3, 5, DEFAULTS), (7, 128256, DEFAULTS), (1, 300, dict(DEFAULTS, kmax=129))):
        a = allocate(B, V, "cpu", cfg)
        regions = sorted((t.data_ptr(), t.data_ptr() + t.numel() * t.element_size()) for t in
                         (a["wsi"], a["wsf"], a["ws64"]))
        assert all(lo % 16 == 0 for lo, _ in regions)
        assert all(hi <= lo for (_, hi), (lo, _) in zip(regions, regions[1:]))
        S = a["S"]
        assert a["wsi"].numel() == B * (S * (8 + 64 + 128) + 16 + 24) and a["wsi"].dtype == torch.int32
        assert a["wsf"].numel() == B * (S * 8 + 8) and a["wsf"].dtype == torch.float32
        assert a["ws64"].numel() == B * (S * 4 + 4 + cfg["kmax"] + 16384 + 16384) and a["probs"] is a["wsf"]


def test_rows_with_nan_or_inf_temperature_warn_nothing():
    """A NaN or infinite temperature's row runs the kernels' arithmetic with NaN and inf before it is rejected (or,
    at T = inf, drawn): under Triton's interpreter NumPy must not warn about it (``launch.quiet_interpreter``), as
    compiled code does not."""
    import warnings
    B, V = 3, 300
    x = torch.randn(B, V, generator=torch.Generator().manual_seed(8)).to(DEV)
    args = [torch.tensor(v, device=DEV) for v in ([float("nan"), float("inf"), 1.0], [0, 0, 0], [0.9] * 3,
                                                  [0.0] * 3, [0, 1, 2], [0, 0, 0])]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tok, status, _path, _ = fused_sample(x, *args)
    assert [STATUS_KINDS[int(v)] for v in status] == ["invalid_temperature", None, None]


def test_plan_key_tells_true_from_one():
    """``early=True`` (every batch) and ``early=1`` (batches of one row) compare equal as values but choose other
    launches at two rows: their plans must not share a key (found 2026-12-07, fourteenth session)."""
    from impls.fused import launch
    vals = random_batch(3, 2, [64])
    assert launch.plan_key(vals, 1, 64, False, {"early": True}) != launch.plan_key(vals, 1, 64, False, {"early": 1})
    assert launch.plan_key(vals, 1, 64, False, {"early": 1}) == launch.plan_key(vals, 1, 64, False, {"early": 1})


@pytest.mark.gpu
def test_cached_launcher_gives_the_jit_launcher_tokens():
    from impls.fused import launch
    logits, T, K, P, M, S, O = (a.cuda() for a in random_batch(11, 64, [32000, 4096]))
    for _ in range(2):  # the second call launches the cached binaries
        a = fused_sample(logits, T, K, P, M, S, O, want_probs=True, launcher="cached")
    b = fused_sample(logits, T, K, P, M, S, O, want_probs=True, launcher="jit")
    assert launch.FALLBACK is None
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) and torch.equal(a[3], b[3])
    # parameters at addresses that are not 16-byte multiples: another plan (Triton specialises on alignment)
    T1, P1 = (torch.cat([t[:1], t])[1:] for t in (T, P))
    assert T1.data_ptr() % 16 and launch.plan_key((logits, T1, K, P1, M, S, O), 1, 1, True, {}) != \
        launch.plan_key((logits, T, K, P, M, S, O), 1, 1, True, {})
    for _ in range(2):
        c = fused_sample(logits, T1, K, P1, M, S, O, want_probs=True, launcher="cached")
    assert torch.equal(a[0], c[0]) and torch.equal(a[3], c[3])
    want, _ = reference_rows(*(t.cpu() for t in (logits, T, K, P, M, S, O)))
    assert a[0].tolist() == want


@pytest.mark.skipif(torch.cuda.is_available(), reason="on a GPU machine the GPU tests compile the kernels for real")
def test_kernels_compile_for_sm90_offline():
    """Every launch compiles for the H200 (sm_90; fp32 and bf16 logits) with Triton's offline compiler, so a kernel
    change that the interpreter accepts but the compiler rejects fails in CI, which has no GPU."""
    import os
    import subprocess
    import sys
    from pathlib import Path
    if not (Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas").is_file():
        pytest.skip("this triton wheel carries no ptxas (needed to compile for sm_90 without a GPU)")
    root = Path(__file__).resolve().parent.parent
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join([str(root)] + [p for p in [env.get("PYTHONPATH")] if p])
    r = subprocess.run([sys.executable, str(Path(__file__).with_name("_compile_sm90.py"))], cwd=root, env=env,
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout + r.stderr
    # 11 kernels: the histogram launch in 5 variants (EARLY x LANE, and with WARP), the statistics launch in 3
    # (ALL_GREEDY, without PDL), the gather launch in 3 (OFFS, WARP), the decide launch in 3 (with and without PDL,
    # every window bisected), the rewrite launch in 2 (HAS_MASK), the logprobs launch in 3 (MODES, and SPLIT), the
    # others once; each for fp32 and bf16
    assert r.stdout.count(" ok") == 48, r.stdout


@pytest.mark.parametrize("B,V,seed,row,path", [(64, 32000, 1, 10, 3), (8, 262144, 3, 0, 3)])
def test_top_p_rows_whose_bin_estimates_miss_the_boundary_take_no_slow_path(B, V, seed, row, path):
    """Rows of ``randn(B, V) * 3`` (CPU generator) with ``top_p = 0.9`` that kernel v3 sent to the slow
    path (one pass over the row per bit), with the GPU's constants on the interpreter.

    * ``(64, 32000)`` row 10: its top token alone holds 22% of the mass, so bin midpoints misplaced
      the boundary by two level-1 bins (bin 38 estimated, 36 true).
    * ``(8, 262144)`` row 0: a level-1 bin spans e^0.24 in probability, so bounds summed from the top
      alone (the first fix) never reached 0.9 of the mass: bounds from the exact total minus the rest
      are needed (5 of these 8 rows were slow without either fix, 60% of a batch of 1024 on the H200).

    With the bracket from bounds on each bin's mass the window holds the boundary: the expected path
    (3 boundary; the first row was 2, fast, with the 128 level-1 bins of the defaults before 2026-12-06: with
    64 the bracket ends further down than the window's capacity from the top) and the reference's token."""
    from impls.fused.ops import DEFAULTS
    x = (torch.randn(B, V, generator=torch.Generator().manual_seed(seed)) * 3)[row:row + 1].contiguous()
    T, P, M = torch.ones(1), torch.full((1,), 0.9), torch.zeros(1)
    K, seed_, off = torch.zeros(1, dtype=torch.int64), torch.tensor([5]), torch.tensor([0])
    cfg = {k: v for k, v in DEFAULTS.items() if k != "num_warps"}  # the GPU's constants, on the interpreter
    cfg["early"] = False  # the window's path, not early accept's (seed 5 draws a certainly kept token)
    tok, status, path_, _ = fused_sample(*(t.to(DEV) for t in (x, T, K, P, M, seed_, off)), **cfg)
    assert status.tolist() == [0] and path_.tolist() == [path]
    want, _ = reference_rows(x, T, K, P, M, seed_, off)
    assert tok.tolist() == want


def test_bad_arguments_get_located_errors_before_any_launch(monkeypatch):
    """Each bad argument is named in a TypeError/ValueError raised before Triton sees it."""
    from impls.fused import ops
    x, T, K, P, M, S, O = (t.to(DEV) for t in random_batch(3, 2, [300]))
    ok = dict(temperature=T, top_k=K, top_p=P, min_p=M, seed=S, offset=O)

    def call(**change):
        args = dict(ok, **{k: v for k, v in change.items() if k in ok})
        opts = {k: v for k, v in change.items() if k not in ok and k != "logits"}
        return fused_sample(change.get("logits", x), args["temperature"], args["top_k"], args["top_p"],
                            args["min_p"], args["seed"], args["offset"], **opts)

    cases = [
        (dict(temperature=1.0), TypeError, "temperature must be a \\(2,\\) tensor, got float"),
        (dict(top_k=K.float() + 0.7), TypeError, "top_k must have an integer dtype, got torch.float32"),
        (dict(top_p=P > 0), TypeError, "top_p must have a real dtype, got torch.bool"),
        (dict(seed=S[:1]), ValueError, "seed must have shape \\(2,\\), got \\(1,\\)"),
        (dict(block=100), ValueError, "block=100: must be a power of two >= 16"),
        (dict(kmax=8), ValueError, "kmax=8: must be a power of two >= 16"),
        (dict(kbr=0.0), ValueError, "kbr=0.0: must be a power of two >= 16 \\(or 0: off\\)"),
        (dict(block=32768), ValueError, "block=32768: at most 16384"),
        (dict(draw_above=-1), ValueError, "draw_above=-1: the largest batch"),
        (dict(decide_regs=16), ValueError, "decide_regs=16: 0 \\(the compiler's choice\\) or an int from 24 to 255"),
        (dict(hist_regs=True), ValueError, "hist_regs=True: 0 \\(the compiler's choice\\)"),
        (dict(kbr=64, kmax=128), ValueError, "kbr=64: must be larger than kmax=128 \\(or 0: off\\), else the bracket list "
                                            "would never be used"),
        (dict(warps=4), TypeError, "unknown fused_sample option 'warps'"),
        (dict(stages=0), ValueError, "stages=0: an int from 1 to 8"),
        (dict(stages=True), ValueError, "stages=True: an int from 1 to 8"),
        (dict(stats_stages=9), ValueError, "stats_stages=9: an int from 1 to 8"),
        (dict(local=1), ValueError, "local=1: True or False"),
        (dict(unit_t=0), ValueError, "unit_t=0: True or False"),
        (dict(num_warps=3), ValueError, "num_warps=3: a power of two from 1 to 32"),
        (dict(programs=0), ValueError, "programs=0: an int >= 1"),
        (dict(r=float("nan")), ValueError, "r=nan: a finite number > 0"),
        (dict(logits=x.to("meta")), ValueError, "logits on a meta device"),
        (dict(logits=x[:0], launcher="fast"), ValueError, "unknown launcher mode 'fast'"),
        (dict(logits=x.to(torch.int32)), ValueError, "logits dtype torch.int32 not supported"),
    ]
    for change, exc, msg in cases:
        with pytest.raises(exc, match=msg):
            call(**change)
    monkeypatch.setattr(ops, "INTERPRETED", False)
    with pytest.raises(ValueError, match="only under Triton's interpreter \\(TRITON_INTERPRET=1"):
        call(logits=x.cpu(), **{k: v.cpu() for k, v in ok.items()})


def test_ties_by_probability_at_a_huge_temperature():
    """``T = 1e30``: every probability is ``1 / V`` although the logits differ, so top-k keeps every
    token (ties at the k-th value are kept) and so does top-p (no token has mass strictly above it),
    as the reference does (SEMANTICS §1.5: ties by probability). Found by a fresh-user pass: the kernel
    grouped ties by logit and kept only its window (56 and 270 of 300 tokens). The window's edges are
    now checked for ties in probability (here they send both rows to the slow path, which bisects on
    probabilities)."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 300, generator=g) * 3
    T = torch.full((2,), 1e30)
    K, P = torch.tensor([50, 0]), torch.tensor([1.0, 0.9])
    M, seed, off = torch.zeros(2), torch.tensor([1, 2]), torch.tensor([0, 0])
    tok, status, path, probs = fused_sample(*(t.to(DEV) for t in (x, T, K, P, M, seed, off)), want_probs=True)
    want_tok, want_dist = reference_rows(x, T, K, P, M, seed, off)
    assert status.tolist() == [0, 0] and path.tolist() == [4, 4]
    assert torch.equal(probs.cpu(), torch.full((2, 300), 1.0 / 300))
    assert all(torch.allclose(d, torch.full((300,), 1.0 / 300)) for d in want_dist)
    assert tok.tolist() == want_tok


def test_min_p_membership_is_exact_just_below_the_threshold():
    """SEMANTICS §1.5, case filters/min-p-threshold-inclusive: float32(-ln 2) and float32(-2 ln 2) lie
    1.9e-9 and 3.8e-9 below ln 0.5 and ln 0.25, so exp of them is 0.4999999990 and 0.2499999990:
    min_p 0.25 keeps {0, 1}, min_p 0.5 keeps {0}. A float32 exp rounds both onto the threshold and keeps
    {0, 1, 2, 3} and {0, 1}, as the kernel did before its min-p bisection moved to float64."""
    x = t([[0.0, -0.6931471805599453, -1.3862943611198906, -1.3862943611198906]] * 2, torch.float32)
    tok, status, path, probs = fused_sample(x, t([1.0, 1.0], torch.float32), t([0, 0], torch.int64),
                                            t([1.0, 1.0], torch.float32), t([0.25, 0.5], torch.float32),
                                            t([13, 13], torch.int64), t([0, 0], torch.int64), want_probs=True)
    assert status.tolist() == [0, 0]
    assert (probs[0] > 0).nonzero().flatten().tolist() == [0, 1]
    assert (probs[1] > 0).nonzero().flatten().tolist() == [0]


@pytest.mark.parametrize("j", [599, 590, 450])
def test_top_p_membership_is_exact_for_a_float64_top_p(j):
    """SEMANTICS §1.5: top-p membership is exact arithmetic's for top_p as given. One row
    (V = 600, randn seed 21, T = 1); A_j = the float64 mass strictly above the j-th most likely
    token (A_599 = 1 - p_min). top_p = A_j + 1e-8 keeps the j + 1 most likely tokens and
    A_j - 1e-8 keeps j. 1e-8 is a sixth of float32's spacing below 1, so neither a float32
    top_p nor a float32 cumulative sum (the kernel before v3) can resolve it; the kernel's own
    float32 ``exp`` moves A_j (>= 0.95 here) by ~1e-11."""
    V = 600
    x = torch.randn(V, generator=torch.Generator().manual_seed(21))
    p = torch.softmax(x.double(), -1)
    s = torch.sort(p, descending=True).values
    A = float(s[:j].sum())
    assert A > 0.95 and float(s[j]) > 1e-6
    for top_p, n_kept in ((A + 1e-8, j + 1), (A - 1e-8, j)):
        P = torch.tensor([top_p], dtype=torch.float64)
        ref = kept_set(x, Resolved(SAMPLING, temperature=1.0, top_k=0, top_p=top_p, min_p=0.0), TRTLLM)
        assert int(ref.sum()) == n_kept
        args = (x[None].to(DEV), t([1.0], torch.float32), t([0], torch.int64), P.to(DEV), t([0.0], torch.float32),
                t([5], torch.int64), t([0], torch.int64))
        tok, status, path, probs = fused_sample(*args, want_probs=True)
        assert status.tolist() == [0]
        assert torch.equal(probs[0].cpu() > 0, ref), (top_p, PATHS[int(path[0])])


@pytest.mark.gpu
def test_top_p_near_one_has_no_float32_overshoot_on_the_gpu():
    """Issue 14's sweep on the kernel: numpy ``default_rng(seed).standard_normal(32000)`` rows,
    seeds 0-199, T = 1, top_p = 0.9999999 (float64): exact arithmetic keeps every token (the
    smallest probability is 1.139e-7, seed 152; tests/test_reference_filters.py), so must the
    kernel. (Under the interpreter each row takes the slow path: ~35 s; hence GPU only.)"""
    np = pytest.importorskip("numpy")
    rows = torch.stack([torch.from_numpy(np.random.default_rng(s).standard_normal(32000).astype(np.float32))
                        for s in range(200)]).to(DEV)
    B = rows.shape[0]
    full = lambda v, dt: torch.full((B,), v, dtype=dt, device=DEV)
    tok, status, path, probs = fused_sample(rows, full(1.0, torch.float32), full(0, torch.int64),
                                            full(0.9999999, torch.float64), full(0.0, torch.float32),
                                            torch.arange(B, device=DEV), full(0, torch.int64), want_probs=True)
    assert status.tolist() == [0] * B
    kept = (probs > 0).sum(1).tolist()
    assert kept == [32000] * B, [(i, n, PATHS[int(path[i])]) for i, n in enumerate(kept) if n != 32000]


def _early_rows():
    """One 10-token row under three filters and four seeds (12 rows), for the early-accept tests.

    ``x = [0, -0.5, -1, -6 x 7]``, ``T = 1``: ``e = [1, 0.6065, 0.3679, 0.00248 x 7]``, ``E = 1.9917``.
    The interpreter's fine bins span ``m - min = 6`` (``C = 16128 / 6``): tokens 0, 1, 2 lie in level-1
    bins 0, 5 and 10, the seven ``-6`` in the last bin (62, the clamped tail, whose mass has no lower
    bound). The full-row Gumbel-max winner (every finite token) of seed 0 is token 0, of seed 2 token 1,
    of seed 1 token 2, of seed 263 token 3 (a ``-6``; offset 0, the reference's draw).

    * ``top_p = 0.9``: kept {0, 1, 2} (mass above token 2: 1.6065 < 1.7925; above the ``-6`` group:
      1.9744). Certainly kept: bins 0 to 5 (upper bound through bin 5: 1.0001 + 0.621 < 0.9 E); bin 10
      is not (its tail's mass bound is ``[0, 0.019]``, so the bound through it reaches ``E``).
    * ``top_k = 2``: kept {0, 1}; ``top_k = 3, top_p = 0.9``: kept {0, 1, 2}. Rows with top-k draw no
      winner in the histogram pass (early accept is for top-p rows without top-k): never accepted.
    """
    x = torch.tensor([0.0, -0.5, -1.0] + [-6.0] * 7)
    seeds = [0, 2, 1, 263]
    filt = [(0, 0.9), (2, 1.0), (3, 0.9)]
    B = len(seeds) * len(filt)
    K = torch.tensor([k for k, _ in filt for _ in seeds])
    P = torch.tensor([p for _, p in filt for _ in seeds])
    S = torch.tensor(seeds * len(filt))
    return x.expand(B, 10).contiguous(), torch.ones(B), K, P, torch.zeros(B), S, torch.zeros(B, dtype=torch.int64)


def test_early_accept_takes_the_full_row_winner_only_where_it_is_certainly_kept():
    """Hand-checked rows (:func:`_early_rows`): under top-p alone, a winner that is the maximum or lies in a
    certainly kept bin is accepted in the histogram pass (path ``accepted``); a winner in the window (kept,
    but not certainly by the bounds) or below the threshold (dropped) takes the window path (``fast``
    here), and the draw over the kept set then gives the token (seed 263: token 1 for every filter; seed 1
    under ``top_k = 2``: token 0). Rows with top-k take the window path whatever their winner."""
    args = _early_rows()
    tok, status, path, _ = fused_sample(*(a.to(DEV) for a in args))
    assert status.tolist() == [0] * 12
    assert tok.tolist() == [0, 1, 2, 1,
                            0, 1, 0, 1,
                            0, 1, 2, 1]
    assert [PATHS[p] for p in path.tolist()] == ["accepted", "accepted", "fast", "fast",
                                                 "fast", "fast", "fast", "fast",
                                                 "fast", "fast", "fast", "fast"]
    want, _ = reference_rows(*args)
    assert tok.tolist() == want
    # off (a tuning option: False, or a largest batch below this one's 12 rows), and off whenever the
    # probabilities are asked for: same tokens, no accepted row; on again for batches up to 12
    for kw in (dict(early=False), dict(early=11), dict(want_probs=True)):
        tok2, _, path2, _ = fused_sample(*(a.to(DEV) for a in args), **kw)
        assert tok2.tolist() == want and 5 not in path2.tolist()
    assert fused_sample(*(a.to(DEV) for a in args), early=12)[2].tolist() == path.tolist()
    with pytest.raises(ValueError, match="early=-1: True, False, or the largest batch"):
        fused_sample(*(a.to(DEV) for a in args), early=-1)


@pytest.mark.parametrize("seed", range(3))
def test_random_batches_with_early_accept_match_the_reference(seed):
    """The random stress without probabilities (early accept on): tokens of the reference, and of the
    same call with early accept off; some rows accepted, with small and large workspaces."""
    logits, T, K, P, M, S, O = random_batch(100 + seed, 16, [33, 257, 600])
    args = [a.to(DEV) for a in (logits, T, K, P, M, S, O)]
    want, _ = reference_rows(logits, T, K, P, M, S, O)
    seen = set()
    for cfg in (dict(), dict(block=32, nb=16, kmax=16, kbig=16)):
        tok, status, path, _ = fused_sample(*args, **cfg)
        off, _, path_off, _ = fused_sample(*args, early=False, **cfg)
        assert status.tolist() == [0] * 16
        assert tok.tolist() == want and off.tolist() == want, cfg
        assert 5 not in path_off.tolist()
        seen |= {PATHS[p] for p in path.tolist()}
    assert "accepted" in seen


def test_tuning_from_the_environment_replaces_the_defaults():
    """``SAMPCHECK_FUSED_TUNING`` (a tuning run on a new GPU) replaces DEFAULTS for the process; a bad value
    stops the import with the variable named."""
    import os
    import subprocess
    import sys
    from pathlib import Path
    code = "from impls.fused.ops import DEFAULTS as D; print(D['stages'], D['kmax'], D['local'])"
    root = Path(__file__).resolve().parents[1]
    env = dict(os.environ, SAMPCHECK_FUSED_TUNING="stages=3, kmax=4096,local=False",
               PYTHONPATH=os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")])))
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=root)
    assert r.stdout.split() == ["3", "4096", "False"], r.stderr
    env["SAMPCHECK_FUSED_TUNING"] = "stages=9"
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=root)
    assert "ValueError: SAMPCHECK_FUSED_TUNING='stages=9': fused_sample option stages=9: an int from 1 to 8" in r.stderr
    # a signed int stays an int; the adapter says a bad value once, as why it cannot run (sampcheck list impls,
    # and a run's skip reason), instead of an error per case
    env["SAMPCHECK_FUSED_TUNING"] = "hist_regs=+64"
    r = subprocess.run([sys.executable, "-c", "from impls.fused.ops import DEFAULTS as D; print(repr(D['hist_regs']))"],
                       env=env, capture_output=True, text=True, cwd=root)
    assert r.stdout.split() == ["64"], r.stderr
    # the run records the constants a device's calls use, and says where the variable applies
    env.update(SAMPCHECK_FUSED_TUNING="hist_regs=96", TRITON_INTERPRET="1")
    code = "from impls.fused import FusedImpl; f = FusedImpl(); print(f.describe('cpu')); print(f.describe('cuda'))"
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=root)
    assert r.returncode == 0, r.stderr
    cpu, gpu = (eval(line) for line in r.stdout.splitlines())
    assert "block=128," in cpu["tuning"] and "hist_regs=0," in cpu["tuning"], r.stderr
    assert "block=1024," in gpu["tuning"] and "hist_regs=96," in gpu["tuning"]
    assert cpu["tuning_env"].endswith("checked but not applied on a CPU (it tunes GPU calls; the interpreter's "
                                      "constants are used)")
    assert gpu["tuning_env"] == "SAMPCHECK_FUSED_TUNING='hist_regs=96': applied"
    env.update(SAMPCHECK_FUSED_TUNING="hist_regs=16", TRITON_INTERPRET="1")
    code = "from impls.fused import FusedImpl; print(FusedImpl().available('cpu'))"
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=root)
    assert r.stdout.strip() == ("SAMPCHECK_FUSED_TUNING='hist_regs=16': fused_sample option hist_regs=16: 0 (the "
                                "compiler's choice) or an int from 24 to 255, registers per thread"), r.stderr


def test_workspace_bytes_per_row_at_the_gpu_defaults():
    """Hand-checked from the layout: one part per row at batch >= 512 gives 240 int32 (8 partials, 64 + 128
    histogram bins, 16 record, 24 counters) + 16 float32 + 34,824 int64 per row (the lists: kmax 2048 + kbig 16384
    + kbr 16384), 960 + 64 + 278,592 = 279,616 bytes; batch 1 splits its row into 126 parts of 1024 logits: 25,240
    int32 (100,960 bytes), 1,016 float32 (4,064 bytes, each region rounded up to 16), 35,324 int64 (282,592 bytes),
    387,616 bytes. The allocation is exactly that size."""
    from impls.fused.ops import DEFAULTS
    from impls.fused.workspace import allocate, workspace_bytes
    assert (DEFAULTS["nb"], DEFAULTS["nbs"], DEFAULTS["kmax"], DEFAULTS["kbig"], DEFAULTS["kbr"],
            DEFAULTS["block"]) == (64, 128, 2048, 16384, 16384, 1024)
    assert workspace_bytes(1024, 128256, DEFAULTS) == 1024 * 279616 == 286326784
    assert workspace_bytes(1, 128256, DEFAULTS) == 387616
    a = allocate(3, 128256, torch.device("cpu"), DEFAULTS)
    whole = a["ws64"]._base if a["ws64"]._base is not None else a["ws64"]
    assert whole.numel() * 8 == workspace_bytes(3, 128256, DEFAULTS)


@triton.jit
def _count_bins(b_ptr, out_ptr, n, BLOCK: tl.constexpr, LANE: tl.constexpr):
    # a 64-bin histogram of n bins in [0, 64), with the histogram pass's per-lane counters or tl.histogram
    h = tl.zeros([64], dtype=tl.int32)
    hc = tl.zeros([BLOCK], dtype=tl.int32)
    for st in range(0, n, BLOCK):
        offs = st + tl.arange(0, BLOCK)
        b = tl.load(b_ptr + offs, mask=offs < n, other=63)
        if LANE:
            hc = _lane_hist(b, hc)
        else:
            h += tl.histogram(b, 64)
    if LANE:
        h += _lane_hist_total(hc, 64)
    tl.store(out_ptr + tl.arange(0, 64), h)


def test_lane_histogram_only_where_it_applies():
    """``lane_hist`` (per-lane counters, inline PTX) is used for parts of at least its number of tiles, with 64
    level-1 bins and four logits a thread, and never under the interpreter; a negative value is refused."""
    from impls.fused.kernel import lane_hist
    from impls.fused.ops import DEFAULTS, INTERPRETED, apply_tuning
    compiled = not INTERPRETED
    assert DEFAULTS["lane_hist"] == 16 and (DEFAULTS["block"], DEFAULTS["num_warps"]) == (1024, 8)
    # 128256 logits in 1, 2 or 8 parts (16,032 logits: 15.7 tiles, under 16); 32000 in 8 parts (4,000 logits: 3.9
    # tiles); exactly 16 tiles. (The 8-part case said `compiled` until 2026-12-07: under the interpreter every entry
    # is False, so only a GPU run caught it)
    assert [lane_hist(ch, DEFAULTS) for ch in (128256, 64128, 16032, 4000, 16384, 16383)] == \
        [compiled, compiled, False, False, compiled, False]
    assert lane_hist(128256, dict(DEFAULTS, lane_hist=True)) is compiled
    assert not lane_hist(128256, dict(DEFAULTS, lane_hist=False))
    assert not lane_hist(128256, dict(DEFAULTS, nb=128)) and not lane_hist(128256, dict(DEFAULTS, block=2048))
    with pytest.raises(ValueError, match=r"lane_hist=-1: True, False, or the fewest tiles a part"):
        apply_tuning(DEFAULTS, {"lane_hist": -1})


@pytest.mark.gpu
def test_lane_histogram_counts_as_tl_histogram():
    """``lane_hist``'s per-lane counters (inline PTX ballots) give the exact counts of ``torch.bincount`` and of
    ``tl.histogram``: skewed bins (most in a few), every bin, a ragged last tile (padded with bin 63)."""
    g = torch.Generator().manual_seed(7)
    n = 100_003
    b = torch.cat([torch.randint(0, 64, (n // 2,), generator=g),
                   (torch.randn(n - n // 2, generator=g).abs() * 3).long().clamp(max=63)]).to(torch.int32).cuda()
    want = torch.bincount(b.long(), minlength=64)
    want[63] += (-n) % 1024
    for lane in (True, False):
        out = torch.zeros(64, dtype=torch.int32, device="cuda")
        _count_bins[(1,)](b, out, n, BLOCK=1024, LANE=lane, num_warps=8)
        assert out.tolist() == want.tolist(), lane


@pytest.mark.gpu
def test_lane_histogram_gives_the_same_tokens():
    """The histogram and refine passes with ``lane_hist=True`` choose the same windows, so the same tokens and
    paths as ``tl.histogram`` (early accept at batch 64, the plain pass at 300) and the reference's tokens."""
    for seed, B in ((3, 64), (4, 300)):
        args = [a.cuda() for a in random_batch(seed, B, [32000, 128256])]
        a = fused_sample(*args, lane_hist=True)
        b = fused_sample(*args, lane_hist=False)
        assert torch.equal(a[0], b[0]) and torch.equal(a[2], b[2]), seed
        want, _ = reference_rows(*(t.cpu() for t in args))
        assert a[0].tolist() == want


@triton.jit
def _append_selected(x_ptr, sel_ptr, out_ptr, cnt_ptr, n, chunk, cap, BLOCK: tl.constexpr):
    # program p appends the selected x of [p chunk, (p + 1) chunk) to one list with _warp_append, as the gather pass
    lo = tl.program_id(0) * chunk
    for st in range(lo, lo + chunk, BLOCK):
        offs = st + tl.arange(0, BLOCK)
        m = (offs < n) & (offs < lo + chunk)
        x = tl.load(x_ptr + offs, mask=m, other=0)
        s = tl.load(sel_ptr + offs, mask=m, other=0) != 0
        _warp_append(out_ptr, cnt_ptr, cap, s & m, x)


def test_warp_lists_only_where_they_apply():
    """``warp_lists`` (one atomic per warp, inline PTX; on by default) is used for split rows only, compiled and
    with four logits a thread, never under the interpreter; a gather launch of rows split in 2 to ``part_offsets``
    parts keeps the parts' offsets instead; a non-bool is refused."""
    from impls.fused.kernel import launch_specs, warp_lists
    from impls.fused.ops import DEFAULTS, INTERPRETED, apply_tuning
    compiled = not INTERPRETED
    assert DEFAULTS["warp_lists"] is True and warp_lists(2, DEFAULTS) is compiled and not warp_lists(1, DEFAULTS)
    assert not warp_lists(2, dict(DEFAULTS, block=2048)) and not warp_lists(2, dict(DEFAULTS, warp_lists=False))
    on = apply_tuning(DEFAULTS, {"part_offsets": 8})
    for S, offs in ((1, False), (8, True), (16, False)):
        specs = {sp[0]: sp[4] for sp in launch_specs(16, 128256, 128256, S, -(-128256 // S), False, on)}
        assert specs["hist"]["WARP"] is (compiled and S > 1) and specs["gather"]["OFFS"] is offs, S
        assert specs["gather"]["WARP"] is (compiled and S > 1 and not offs), S
    with pytest.raises(ValueError, match=r"warp_lists=1: True or False"):
        apply_tuning(DEFAULTS, {"warp_lists": 1})


def test_one_list_and_seg_lists_only_where_they_apply():
    """``one_list`` and ``seg_lists``: on in the GPU's defaults (swept on the H200 after the fix of 2026-12-07:
    ``benchmarks/results/h200-fused-v13-sweep-1e6.json``) and under the interpreter. Segments are a row's only program's (``S == 1``), one a warp,
    ``kbr / num_warps`` entries each, given at most 7/8 of ``kbr`` (the histogram launch's ``KBRL``); none at two
    parts or without a bracket list; a non-bool is refused."""
    from impls.fused.kernel import launch_specs, seg_lists
    from impls.fused.ops import DEFAULTS, INTERPRETER, apply_tuning
    assert (DEFAULTS["one_list"], DEFAULTS["seg_lists"]) == (True, True)
    assert (INTERPRETER["one_list"], INTERPRETER["seg_lists"]) == (True, True)
    on, off = DEFAULTS, apply_tuning(DEFAULTS, {"one_list": False, "seg_lists": False})
    assert seg_lists(1, on) == 8 and seg_lists(2, on) == 0 and seg_lists(1, off) == 0
    assert seg_lists(1, dict(on, kbr=0)) == 0 and seg_lists(1, dict(on, num_warps=32)) == 0
    specs = {sp[0]: sp[4] for sp in launch_specs(1024, 128256, 128256, 1, 128256, False, on)}
    assert (specs["gather"]["SEGL"], specs["gather"]["SEGC"], specs["decide"]["SEGL"], specs["decide"]["SEGC"]) == (
        8, 2048, 8, 2048)
    assert specs["hist"]["ONE"] is True and specs["hist"]["KBRL"] == 14336
    specs = {sp[0]: sp[4] for sp in launch_specs(256, 128256, 128256, 2, 64128, False, on)}
    assert specs["gather"]["SEGL"] == 0 and specs["hist"]["KBRL"] == 16384
    # packed_read (the decide launch reads a two-list row's bracket list packed): off on the GPU until run there,
    # on under the interpreter; only with segments
    assert (DEFAULTS["packed_read"], INTERPRETER["packed_read"]) == (False, True)
    pk = apply_tuning(DEFAULTS, {"packed_read": True})
    assert [launch_specs(B, 128256, 128256, S, 128256 // S, False, cfg)[-1][4]["PACKED"]
            for B, S, cfg in ((1024, 1, pk), (256, 2, pk), (1024, 1, DEFAULTS))] == [True, False, False]
    for name in ("one_list", "seg_lists", "packed_read"):
        with pytest.raises(ValueError, match=rf"{name}=1: True or False"):
            apply_tuning(DEFAULTS, {name: 1})


def test_pdl_only_where_it_applies(monkeypatch):
    """``pdl`` (programmatic dependent launch; on by default) gives every launch of a call, general or all-greedy
    (one launch or two), with or without probabilities, the constexpr that waits and the launch attribute; only
    compiled (never under the interpreter) and on Hopper or later (a device of capability 8.x launches without
    it); a non-bool is refused."""
    from impls.fused import kernel as K, launch as L
    from impls.fused.ops import DEFAULTS, INTERPRETED, apply_tuning
    off = apply_tuning(DEFAULTS, {"pdl": False})
    assert DEFAULTS["pdl"] is True and K.pdl(DEFAULTS) is (not INTERPRETED) and not K.pdl(off)
    monkeypatch.setattr(K, "INTERPRETED", False)
    for greedy, rows in ((False, 256), (True, 256), (True, 1)):
        for probs in (False, True):
            with_pdl = K.launch_specs(16, 128256, 128256, 32, 4008, probs, dict(DEFAULTS, greedy_rows=rows), greedy)
            without = K.launch_specs(16, 128256, 128256, 32, 4008, probs, dict(off, greedy_rows=rows), greedy)
            assert [sp[0] for sp in with_pdl] == [sp[0] for sp in without] and len(with_pdl) >= 1 + probs
            assert all(sp[4]["PDL"] is True and sp[5]["launch_pdl"] is True for sp in with_pdl)
            assert all("PDL" not in sp[4] and "launch_pdl" not in sp[5] for sp in without)
    with pytest.raises(ValueError, match=r"pdl=1: True or False"):
        apply_tuning(DEFAULTS, {"pdl": 1})
    # the device decides last: capability 8.0 (Ampere) has no griddepcontrol, 9.0 (Hopper) has; a CPU tensor and a
    # call that turned it off are left as they are
    caps = {0: (8, 0), 1: (9, 0)}
    monkeypatch.setattr(L, "_PDL_OK", {})
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda i: caps[i])
    assert L.device_cfg(DEFAULTS, torch.device("cuda", 0)) == off
    assert L.device_cfg(DEFAULTS, torch.device("cuda", 1)) is DEFAULTS
    assert L.device_cfg(DEFAULTS, torch.device("cpu")) is DEFAULTS and L.device_cfg(off, torch.device("cuda", 0)) is off
    assert L._PDL_OK == {0: False, 1: True}


def test_register_caps_go_to_their_launches(monkeypatch):
    """``hist_regs``, ``gather_regs`` and ``decide_regs`` become Triton's ``maxnreg`` launch option of that launch
    alone (64, 64 and 128 by default), 0 leaves it out; the interpreter gets none."""
    from impls.fused import kernel as K
    from impls.fused.ops import DEFAULTS, apply_tuning

    def caps(cfg):
        return {sp[0]: sp[5].get("maxnreg") for sp in K.launch_specs(256, 128256, 128256, 2, 64128, False, cfg)}
    none = {"stats": None, "hist": None, "refine": None, "gather": None, "decide": None}
    default = dict(none, hist=64, gather=64, decide=128)
    assert caps(DEFAULTS) == (none if K.INTERPRETED else default)
    monkeypatch.setattr(K, "INTERPRETED", False)
    assert caps(DEFAULTS) == default
    assert caps(apply_tuning(DEFAULTS, {"hist_regs": 0, "gather_regs": 0, "decide_regs": 0})) == none
    assert caps(apply_tuning(DEFAULTS, {"hist_regs": 96, "decide_regs": 0})) == dict(none, hist=96, gather=64)
    # the probabilities launch and the all-greedy launches (two, or one a row) are never capped
    specs = K.launch_specs(256, 128256, 128256, 2, 64128, True, DEFAULTS)
    assert [(sp[0], sp[5].get("maxnreg")) for sp in specs][-1] == ("probs", None)
    for rows in (1, 1 << 20):
        for sp in K.launch_specs(256, 128256, 128256, 2, 64128, True, dict(DEFAULTS, greedy_rows=rows), True):
            assert "maxnreg" not in sp[5], (rows, sp[0])


@pytest.mark.gpu
def test_pdl_gives_the_same_tokens():
    """With ``pdl=True`` each launch waits for the one before it at its start, so a call gives the same tokens,
    statuses and paths as without it and the reference's tokens: eager calls (batches 16, 64 and 300) and CUDA
    graph replays of a bound sampler on new logits (batch 64), where the launches overlap."""
    from impls.fused.bound import FusedSampler
    for seed, B in ((5, 16), (7, 64), (6, 300)):
        args = [a.cuda() for a in random_batch(seed, B, [32000, 128256])]
        on, off = fused_sample(*args, pdl=True), fused_sample(*args, pdl=False)
        assert all(torch.equal(on[i], off[i]) for i in range(3)), seed
        want, _ = reference_rows(*(t.cpu() for t in args))
        assert on[0].tolist() == want, seed
    logits, *params = [a.cuda() for a in random_batch(9, 64, [32000])]
    sample = FusedSampler(*params, pdl=True)
    x = logits.clone()
    sample(x)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = sample(x)
    for seed in (10, 11):
        new = random_batch(seed, 64, [32000])[0].cuda()
        x.copy_(new)
        g.replay()
        torch.cuda.synchronize()
        want = fused_sample(new, *params, pdl=False)
        assert all(torch.equal(out[i], want[i]) for i in range(3)), seed


@pytest.mark.gpu
def test_warp_append_lists_each_selected_entry_once():
    """``_warp_append`` from 8 programs into one list: the count is the number selected, the list holds exactly the
    selected entries (a set: the order is the atomics'), and past the capacity nothing is stored but the count
    still grows; densities 0, 0.3 %, 40 % and 100 % in quarters of 100,003 entries, a ragged last tile."""
    n, x, sel = _append_inputs()
    want = sorted(x[sel.bool()].tolist())
    for cap in (n, 1000):
        out = torch.full((n,), -1, dtype=torch.int64, device="cuda")
        cnt = torch.zeros(4, dtype=torch.int32, device="cuda")
        _append_selected[(8,)](x.cuda(), sel.cuda(), out, cnt[1:], n, -(-n // 8), cap, BLOCK=1024, num_warps=8)
        got = out.cpu()
        assert int(cnt[1]) == len(want) and int(cnt[0]) == 0 and int(cnt[2]) == 0, cap
        k = min(cap, len(want))
        head = got[:k].tolist()
        assert set(head) <= set(want) and len(set(head)) == k and (got[k:] == -1).all(), cap
        if cap == n:
            assert sorted(head) == want


@pytest.mark.gpu
def test_warp_lists_give_the_same_tokens():
    """The gather pass and min-p lists with ``warp_lists=True`` hold the same entries (the same list lengths per
    row), so the same tokens, statuses and paths as the block scan, and the reference's tokens: rows in 8 parts
    (batches 16 and 64) and in one (batch 300, where both keep the owner's running count)."""
    from impls.fused.ops import DEFAULTS, apply_tuning
    from impls.fused.workspace import allocate
    for seed, B in ((5, 16), (7, 64), (6, 300)):
        args = [a.cuda() for a in random_batch(seed, B, [32000, 128256])]
        out, lens = {}, {}
        for w in (True, False):
            cfg = apply_tuning(DEFAULTS, {"warp_lists": w})
            a = allocate(B, args[0].shape[1], torch.device("cuda"), cfg, want_probs=False)
            out[w] = fused_sample(*args, buffers=a, warp_lists=w)
            lens[w] = _row_counters(a, cfg, B, (2, 3))
        assert all(torch.equal(out[True][i], out[False][i]) for i in range(3)), seed
        assert lens[True] == lens[False], seed
        want, _ = reference_rows(*(t.cpu() for t in args))
        assert out[True][0].tolist() == want


@pytest.mark.parametrize("seed", range(2))
def test_split_rows_write_their_lists_from_the_parts_offsets(seed):
    """Rows split in 6 parts (the interpreter's 48 programs over 8 rows of 3,000 or 4,000 logits: parts of 512 or
    768) with ``part_offsets`` write each part's window, bracket and above-window entries from the count of the
    parts before it (no atomic per tile): the same tokens, statuses and paths as with an atomic per tile
    (``part_offsets=0``), and the reference's tokens; rows of top-k, top-p and both (fast and boundary paths, early
    accept off); the gather launch takes the offsets only with ``part_offsets`` >= the parts."""
    from impls.fused.kernel import launch_specs
    from impls.fused.ops import DEFAULTS, INTERPRETED, INTERPRETER, apply_tuning
    from impls.fused.workspace import splits
    logits, T, K, P, M, S_, O = random_batch(200 + seed, 8, [3000, 4000])
    K = torch.tensor([0, 0, 0, 50, 0, 0, 300, 20])
    P = torch.tensor([0.9, 0.5, 0.95, 0.8, 0.99, 0.3, 1.0, 0.7])
    args = [a.to(DEV) for a in (logits, T, K, P, torch.zeros(8), S_, O)]
    B, V = args[0].shape
    for po in (8, 0):
        cfg = apply_tuning(INTERPRETER if INTERPRETED else DEFAULTS, {"part_offsets": po})
        S, CH = splits(B, V, cfg)
        gather = [sp for sp in launch_specs(B, V, V, S, CH, False, cfg) if sp[0] == "gather"][0]
        assert gather[4]["OFFS"] is (po == 8 and 1 < S <= 8), (S, po)
    a = fused_sample(*args, part_offsets=8, early=False)
    b = fused_sample(*args, part_offsets=0, early=False)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) and torch.equal(a[2], b[2])
    want, _ = reference_rows(*(t.cpu() for t in args))
    assert a[0].tolist() == want
    assert {PATHS[int(p)] for p in a[2]} >= {"fast", "boundary"}
