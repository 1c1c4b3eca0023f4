"""Host entry points of the fused sampler (tokens; probabilities; both from one filtering).

The kernels are in :mod:`impls.fused.kernel` (five launches per call, six with
probabilities, two for a call its caller says is all greedy, one when that batch is
large; with early accept, a top-p row whose full-row winner is certainly kept is drawn
in the second, and the later ones return at once for it). These wrappers allocate the outputs and the per-row workspaces
(a window of ``KMAX``, an above-window list of ``KBIG`` and a bracket list of ``KBR`` int64
entries, small records and per-part histograms: independent of the vocabulary), or take the
caller's kept ones, and choose how many programs share a row (``S``): enough that a small
batch fills the GPU, one per row for a large batch.
"""

from __future__ import annotations

import os

from typing import Optional

import torch

from .kernel import INTERPRETED, REG_OPTIONS
from .launch import MODES, run_call
from .options import BOOL_OPTIONS, POW2_OPTIONS
from .workspace import allocate, call_tensors, layout_key, splits


__all__ = ["fused_sample", "allocate", "DEFAULTS", "INTERPRETER", "INTERPRETED", "POW2_OPTIONS", "splits",
           "parse_tuning", "apply_tuning", "TUNING_ENV"]

#: Tuning constants: block of logits per loop step, level-1 histogram bins, largest
#: range of the bins in units of (x - max) / T, window and above-window workspace
#: entries per row, refine bins, warps of the streaming and of the decide launches, and
#: the number of programs a batch should spread over (rows are split into parts until
#: batch * parts reaches it), and whether a top-p row (without top-k) whose full-row Gumbel-max winner is
#: certainly kept is accepted in the histogram launch (``early``: True, False, or the largest batch it
#: is on for; off in calls that want the probabilities or the step's PROCESSED logprobs, which need the
#: kept set). On a GPU, batches of at most 64 rows: on an H100 (2026-12-05, benchmarks/README.md "Fused
#: kernel v5") top-p 0.9 alone took 0.35-0.39x kernel v4's time at batch 1 and 1.13-1.23x at batch 256,
#: where the draw's arithmetic in the histogram pass costs more than the launches it saves. ``stages``:
#: loads in flight per streaming loop (Triton's software pipelining; 1 = none). ``local``: a row that is
#: one program fills its workspace lists from a running count instead of an atomic per block. ``unit_t``: rows
#: at ``T == 1`` skip the division in the histogram and refine passes' masses (the same values; on an H200,
#: 2026-12-06, 4.7 % less GPU time summed over 10 points, top-p 0.9 at 1024 x 128256 2726 -> 2563 us:
#: benchmarks/README.md "Fused v6 on the H200"). ``stats_stages``: ``stages`` of the statistics launch alone, 1 by
#: default: its loop is two updates per logit, and without software pipelining Triton unrolls it four times
#: (offline sm_90 compile, Triton 3.9: 6.7 instructions per logit against 13.3 with 4 stages, whose barriers and
#: shared-memory round trip then cost more than the work; benchmarks/README.md "The statistics pass and the
#: histograms"). ``block``
#: 1024 with ``stages`` 4: the least GPU time summed over 256 and 1024 x 128256 and four mixes of 12 sets
#: tried on an H100 (2026-12-06, benchmarks/README.md "Tuning the streaming passes"). ``nb`` 64 and ``nbs`` 128:
#: Triton 3.6 (the GPU machine's) lowers ``tl.histogram`` to a warp ballot per bit of the bin and a count per bin
#: a thread owns, so half the bins is about half that work; with 16-byte loads, the least GPU time of 7 sets
#: (4,607 against 5,106 us summed over the same 8 points, H100, 2026-12-06, "The statistics pass and the
#: histograms"). ``greedy_rows``: the smallest batch whose all-greedy calls (the caller's hint) take one launch,
#: a program per whole row, instead of the statistics launch over split rows and the combining launch: at batch
#: 256 an eager call's latency was mostly its host time (benchmarks/README.md "Host time and one launch for a
#: large all-greedy batch"); ``greedy_warps``, its warps per program: with 8, a program's loads in flight did not
#: keep the memory busy at 256 x 128256 (64.8 us against 48.7 for the two launches over split rows, H100).
#: ``kbr``: entries of the per-row bracket list: a top-k/top-p bracket wider than the window list but of at most
#: ``kbr`` survivors is refined from that list in the decide launch instead of by the refine pass over the row
#: (0: always the pass; 16384 holds the brackets of ``randn * 3`` rows up to vocab 262144 at top-p 0.9,
#: benchmarks/README.md "The bracket list"). ``nsub``: a window of more entries is refined once more from its own
#: list (in the bracket list's space: off when ``kbr < nsub``) to at most ``nsub`` entries before the decide
#: launch sorts it (``nsub`` wide instead of ``kmax``; not rows with both top-k and top-p, whose top-p boundary could
#: fall above the sub-window; benchmarks/README.md "A window sorted 512 wide"). ``lane_hist``: the histogram pass
#: keeps its level-1 counts in registers, each lane counting its own two bins from warp ballots (inline PTX,
#: :func:`impls.fused.kernel._lane_hist`), and combines the warps once per program instead of through shared
#: memory with barriers after every tile as ``tl.histogram`` does (offline, Triton 3.6: the top-p loop 290 -> 214
#: instructions per 4 logits, the top-k loop 239 -> 162). True, False, or the fewest tiles (``block`` logits) a part
#: must stream; used only where it can run (compiled, 64 bins, four logits a thread: :func:`impls.fused.kernel.lane_hist`): 16 on the GPU,
#: where the pass took 0.75-0.88x its time at parts of 31-256 tiles and 1.35x at 4 (H100, 2026-12-06,
#: benchmarks/README.md "Per-lane histogram counters").
#: ``part_offsets``: a call whose rows are split in 2 to this many parts has each part of the gather pass write its
#: window (or bracket) and above-window entries from its exact offset in the row's lists, the entries of the parts
#: before it (counted from their level-1 histograms, :func:`impls.fused.kernel._parts_before`), instead of
#: reserving slots with an atomic per tile; windows the refine pass chose (not on level-1 bounds) keep the atomics.
#: 0 (never) on the GPU until measured there (8 would take batch >= 64: benchmarks/README.md "The gather pass of
#: split rows from the parts' offsets"); 8 under the interpreter (every split row), so the CPU tests take it.
#: ``warp_lists``: the gather pass (and a min-p row's list in the histogram pass) appends each tile's entries with
#: one atomic per warp, ranks from warp ballots (inline PTX, :func:`impls.fused.kernel._warp_append`), instead of
#: a block scan with its barriers (and, for a row's only program, instead of its running count); a gather launch
#: that takes ``part_offsets``' offsets (rows split in 2 to that many parts) keeps them. Used only where its PTX applies (compiled, four logits a thread:
#: :func:`impls.fused.kernel.warp_lists`), for split rows only. Offline (Triton 3.6, sm_90) the gather loop with
#: both lists goes from 391 to 244 instructions per 4 logits, with one list 240 -> 167, the min-p list 218 -> 134;
#: on an H100 (2026-12-07) calls of split rows took 0.72-0.95x their time (256 x 128256 top-p 0.9 460 -> 416 µs,
#: min-p 180 -> 130; 64 x 32000 top-p 0.9 61 -> 55), a row's only program did better with its running count
#: (benchmarks/README.md "Lists appended per warp"). On the GPU; the interpreter cannot run the PTX.
#: ``pdl``: programmatic dependent launch (Hopper): each launch of a call starts its programs while the one before it
#: runs and waits for it at its start (:func:`impls.fused.kernel.pdl`), instead of the gap between launches (in
#: graph replays on an H100, 2026-12-06, 7-19 µs a call over the sum of its five launches' GPU time at batch 64).
#: On the H200 (2026-12-07) every one of 40 latency points was faster with it, 0.83-0.99x (0.4-9.1 µs at
#: graph-replayed batches, 0.7-12.1 at batch 256: benchmarks/README.md "Programmatic dependent launch"). On by
#: default since 2026-12-07 (the ninth session; its 10^6 sweep on an H100 in the tenth: 0 mismatches; there too it
#: was faster at 19 of 20 graph-replayed points, benchmarks/README.md "The tenth session"); a
#: GPU older than Hopper launches without it (:func:`impls.fused.launch.device_cfg`); the interpreter runs no PTX.
#: ``draw_above``: the largest batch whose top-k/top-p rows have the survivors above their window drawn in the
#: gather pass, where a row's parts share the work (a Philox per 4 logits of the part), instead of listed and
#: drawn by the row's one decide program (a Philox per entry); 0: never (an A/B candidate for small batches, where
#: one boundary row's decide is the call's latency: benchmarks/README.md "The ninth session"); measured on an H100
#: (the tenth session) 0.97-1.07x the default's time at batches 16-64: off.
#: ``hist_regs``, ``gather_regs``, ``decide_regs``: the most registers a thread of that launch may use (Triton's
#: ``maxnreg`` launch option, PTX ``.maxnreg``; 0: ptxas's choice), which sets how many programs of 8 warps an SM
#: holds: 64 for the histogram launch (95 by choice: 4 programs instead of 2), 64 for the gather launch (74: 4
#: instead of 3), 128 for the decide launch (226 after the lifted draws: 2 instead of 1); offline (Triton 3.6,
#: sm_90) their streaming loops keep their instruction counts (the histogram pass's top-p loop 202 -> 203 per 4
#: logits). On an H100 (2026-12-07) top-p 0.9 at 1024 x 128256 took 1,321 µs of GPU time without the caps and
#: 1,175 with them (decide 379 -> 260, histogram 351 -> 334, gather 418 -> 409), at 256 x 128256 462 -> 372; the
#: least summed time of five sets (benchmarks/README.md "The tenth session"). ``hist_regs`` 80 -> 64 in the
#: eleventh session (H100): the histogram launch 1-6 µs faster at 1024 x 128256 (min-p 228 -> 214), 13 at
#: 256 x 128256 min-p (78 -> 64), summed time of 8 points 3,329 -> 3,289 µs; its 2 x 10^5 sweep 0 mismatches,
#: compute-sanitizer 0 errors (benchmarks/README.md "The eleventh session"). Compiled launches only.
#: ``one_list``: a bracket-list row (mode 4) whose survivors above the bracket fit the bracket list with it has them
#: all in that one list, which the decide launch refines as before, lifting those above its refined window to the
#: above-window list (:func:`impls.fused.kernel._select_window`): the gather pass appends to one list instead of two
#: (offline, Triton 3.6, sm_90: its loop 342 -> 246 instructions per 4 logits at a row's only program), the decide
#: launch reads and lifts those entries once more. ``seg_lists``: a row's only program (``S == 1``: batch >= 512 at
#: the defaults) writes a bracket list that it writes alone (a one-list row's, or one whose survivors above the
#: bracket it draws) in segments, one a warp (none at ``kbr = 0``, more than 16 warps or split rows:
#: :func:`impls.fused.kernel.seg_lists`), each from the warp's own running count (:func:`impls.fused.kernel._seg_append`:
#: warp ballots, no atomic, no block scan), which the decide launch reads through the segments' lengths: offline the
#: gather loop 246 -> 155 instructions per 4 logits; a segmented bracket list is given at most 7/8 of ``kbr``
#: entries, and a row whose segment overflows takes the slow path (:func:`impls.fused.kernel.seg_lists`).
#: Measured on an H100 (2026-12-07, benchmarks/README.md "The thirteenth session"): 1024 x 128256 top-p 0.9
#: 1,175 -> 1,138 µs of GPU time with ``one_list``, 1,085 with both (gather 403 -> 244, decide 264 -> 333); the
#: 10^6 sweep of that run found a bug since fixed (a drawn-above row's segments read as a packed list). On the H200
#: (2026-12-07, the fourteenth session) the fix swept 10^6 draws with 0 mismatches, compute-sanitizer 0 errors over
#: calls of 512 rows, and 1024 x 128256 top-p 0.9 took 1,113 -> 1,021 µs (256 x 128256: 358 -> 332; 1024 x 262144:
#: 2,217 -> 2,275, where the longer lists cost the decide launch more than the gather pass saves): on.
#: Results do not depend on them (only the path a row takes does).
#: ``packed_read`` (with segments): the decide launch reads a bracket list that is not segmented (a row with two
#: lists) as packed, without the segments' positions (seven compares an entry): offline (Triton 3.6, sm_90) its two
#: loops 533 + 365 -> 456 + 291 instructions per 1,024 entries, still 128 registers; predicted 1024 x 262144 top-p
#: 0.9's decide launch 571 -> 530-540 µs (H200, where most rows have two lists). Not yet run on a GPU (the
#: fourteenth session got no second machine): off there, on under the interpreter.
#: ``bisect``: the decide launch decides a window at least this wide (its sort's width: 64, ``nsub`` or ``kmax``;
#: 0: never) by bisection over its entries in registers, one block reduction a step
#: (:func:`impls.fused.kernel._decide_bisect`), instead of sorting it (``tl.sort`` of up to ``kmax`` int64 and two
#: scans: 11,000-19,000 instructions a thread in straight-line code, offline Triton 3.6, sm_90); a narrow window's
#: sort may be cheaper than the bisection's 40-50 dependent reductions. Not yet run on a GPU (2026-12-07, fifteenth
#: session): 0 there, 64 (every window) under the interpreter.
DEFAULTS = {"block": 1024, "nb": 64, "r": 40.0, "kmax": 2048, "kbig": 16384, "nbs": 128, "num_warps": 8,
            "decide_warps": 8, "programs": 512, "max_splits": 128, "early": 64, "stages": 4, "stats_stages": 1,
            "local": True, "unit_t": True, "greedy_rows": 256, "greedy_warps": 16, "kbr": 16384,
            "nsub": 512, "lane_hist": 16, "part_offsets": 0, "warp_lists": True, "pdl": True, "draw_above": 0,
            "hist_regs": 64, "gather_regs": 64, "decide_regs": 128, "one_list": True,
            "seg_lists": True, "packed_read": False, "bisect": 0}
#: Under Triton's interpreter (CPU) every program runs in NumPy: small blocks,
#: bins and workspaces keep it fast, and send more rows down the refine,
#: boundary and slow paths, which is what a CPU test wants to exercise.
INTERPRETER = {"block": 128, "nb": 64, "r": 40.0, "kmax": 128, "kbig": 256, "nbs": 64, "num_warps": 4,
               "decide_warps": 4, "programs": 48, "max_splits": 8, "early": True, "stages": 1, "stats_stages": 1,
               "local": True, "unit_t": True, "greedy_rows": 256, "greedy_warps": 4, "kbr": 512,
               "nsub": 32, "lane_hist": False, "part_offsets": 8, "warp_lists": False, "pdl": False, "draw_above": 0,
               "hist_regs": 0, "gather_regs": 0, "decide_regs": 0, "one_list": True,
               "seg_lists": True, "packed_read": True, "bisect": 64}


_INTEGER = (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8)


def _check(t, name: str, dtype: torch.dtype, B: int, device) -> torch.Tensor:
    """``t`` as a contiguous ``(B,)`` tensor of ``dtype`` on ``device`` (converted), or a located error."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a ({B},) tensor, got {type(t).__name__}")
    if t.dtype == torch.bool or t.dtype.is_complex or (dtype == torch.int64 and t.dtype not in _INTEGER):
        want = "an integer" if dtype == torch.int64 else "a real"
        raise TypeError(f"{name} must have {want} dtype, got {t.dtype}")
    if t.shape != (B,):
        raise ValueError(f"{name} must have shape ({B},), got {tuple(t.shape)}")
    if t.device != device:
        raise ValueError(f"{name} is on {t.device}, logits on {device}")
    if t.dtype == dtype and t.is_contiguous():
        return t   # the common case, without .to()'s dispatch (benchmarks/README.md "The statistics pass and ...")
    return t.to(dtype).contiguous()


def apply_tuning(cfg: dict, given: dict) -> dict:
    """A copy of ``cfg`` (:data:`DEFAULTS` or :data:`INTERPRETER`) with the tuning options ``given`` put in.

    Raises
    ------
    TypeError
        An option ``cfg`` does not have.
    ValueError
        A value out of its option's range (powers of two for block sizes, 1-8 stages, booleans for
        ``local``, ``unit_t``, ``warp_lists`` and ``pdl``, ...), or a ``kbr`` not above ``kmax`` (but 0): the message names the option
        and what it takes.
    """
    cfg = dict(cfg)
    for name, v in given.items():
        if name not in cfg:
            raise TypeError(f"unknown fused_sample option {name!r}; known: {', '.join(cfg)}")
        if name == "kbr" and isinstance(v, int) and not isinstance(v, bool) and v == 0:
            pass   # no bracket list: every bracket wider than the window is refined by the refine pass
        elif name in POW2_OPTIONS and not (isinstance(v, int) and v >= 16 and v & (v - 1) == 0):
            raise ValueError(f"fused_sample option {name}={v!r}: must be a power of two >= 16"
                             + (" (or 0: off)" if name == "kbr" else "")
                             + ("" if isinstance(v, int) else f", a Python int (got {type(v).__name__})"))
        if name == "block" and isinstance(v, int) and v > 16384:
            raise ValueError(f"fused_sample option block={v!r}: at most 16384 (the gather pass counts a tile's "
                             "entries of two lists in the halves of one int32, the upper one signed)")
        if name in BOOL_OPTIONS and not isinstance(v, bool):
            raise ValueError(f"fused_sample option {name}={v!r}: True or False")
        if name in ("stages", "stats_stages") and not (isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= 8):
            raise ValueError(f"fused_sample option {name}={v!r}: an int from 1 to 8")
        if name == "lane_hist" and not (isinstance(v, int) and v >= 0):
            raise ValueError(f"fused_sample option lane_hist={v!r}: True, False, or the fewest tiles a part (an int "
                             ">= 0)")
        if name == "early" and not (isinstance(v, int) and v >= 0):
            raise ValueError(f"fused_sample option early={v!r}: True, False, or the largest batch (an int >= 0)")
        if name in ("num_warps", "decide_warps", "greedy_warps") and not (
                isinstance(v, int) and not isinstance(v, bool) and v in (1, 2, 4, 8, 16, 32)):
            raise ValueError(f"fused_sample option {name}={v!r}: a power of two from 1 to 32")
        if name == "bisect" and not (isinstance(v, int) and not isinstance(v, bool) and v >= 0):
            raise ValueError(f"fused_sample option bisect={v!r}: the least window width bisected (an int >= 0; 0: "
                             "never)")
        if name == "draw_above" and not (isinstance(v, int) and not isinstance(v, bool) and v >= 0):
            raise ValueError(f"fused_sample option draw_above={v!r}: the largest batch (an int >= 0; 0: never)")
        if name in REG_OPTIONS and not (isinstance(v, int) and not isinstance(v, bool) and (v == 0 or 24 <= v <= 255)):
            raise ValueError(f"fused_sample option {name}={v!r}: 0 (the compiler's choice) or an int from 24 to 255, "
                             "registers per thread")
        if name in ("programs", "max_splits", "greedy_rows") and not (
                isinstance(v, int) and not isinstance(v, bool) and v >= 1):
            raise ValueError(f"fused_sample option {name}={v!r}: an int >= 1")
        if name == "part_offsets" and not (isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= 128):
            raise ValueError(f"fused_sample option part_offsets={v!r}: an int from 0 (never) to 128, the most parts "
                             "a row")
        if name == "r" and not (isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v < float("inf")):
            raise ValueError(f"fused_sample option r={v!r}: a finite number > 0")
        cfg[name] = v
    if 0 < cfg.get("kbr", 0) <= cfg["kmax"]:
        raise ValueError(f"fused_sample option kbr={cfg['kbr']}: must be larger than kmax={cfg['kmax']} (or 0: off), "
                         "else the bracket list would never be used (a bracket that fits the window list is gathered "
                         "as the window); the defaults' kbr applies when not given")
    return cfg


def parse_tuning(text: str) -> dict:
    """Tuning options from text: ``"stages=3,kmax=4096"`` -> ``{"stages": 3, "kmax": 4096}``.

    Values are ints, floats or ``True``/``False``; ``""`` and ``"default"`` give ``{}``. Names and
    value ranges are checked where the options are applied (:func:`fused_sample`, :func:`apply_tuning`).

    Raises
    ------
    ValueError
        An entry without ``=``, a value that is not a number or True/False, a name given twice.
    """
    if text.strip() in ("", "default"):
        return {}
    out = {}
    for item in text.split(","):
        name, eq, val = item.partition("=")
        name, val = name.strip(), val.strip()
        if not eq or not name:
            raise ValueError(f"tuning entry {item!r}: expected name=value")
        if name in out:
            raise ValueError(f"tuning entry {item!r}: {name} is given twice")
        low = val.lower()
        if low in ("true", "false"):
            out[name] = low == "true"
            continue
        try:
            out[name] = int(val) if val.lstrip("+-").isdigit() else float(val)
        except ValueError:
            raise ValueError(f"tuning entry {item!r}: the value is not a number or True/False") from None
    return out


#: Environment variable whose tuning options replace :data:`DEFAULTS`' (the GPU's constants) for the whole
#: process: in a tuning run on a new GPU every call on that GPU, the latency suite's included, then uses them,
#: and the suite records them. Calls under Triton's interpreter keep :data:`INTERPRETER`.
TUNING_ENV = "SAMPCHECK_FUSED_TUNING"
if os.environ.get(TUNING_ENV):
    try:
        DEFAULTS = apply_tuning(DEFAULTS, parse_tuning(os.environ[TUNING_ENV]))
    except (TypeError, ValueError) as e:
        raise ValueError(f"{TUNING_ENV}={os.environ[TUNING_ENV]!r}: {e}") from None


def check_call(logits, temperature, top_k, top_p, min_p, seed, offset) -> tuple:
    """The argument checks of :func:`fused_sample` and :func:`impls.fused.step.fused_step`.

    Returns
    -------
    tuple
        ``(logits, (temperature, top_k, top_p, min_p, seed, offset))``: the logits contiguous in
        their last dimension, each parameter a ``(B,)`` tensor of its dtype on the logits' device
        (``top_p`` float64 when given so, else float32).

    Raises
    ------
    TypeError
        ``logits`` is not a tensor.
    ValueError
        Logits that are not 2-D or not float32/bfloat16/float16, on a CPU without Triton's
        interpreter or on another device type, a vocabulary of ``2**23`` or more (the kernel's
        fixed-point sums), a parameter of another shape or device.
    """
    if not isinstance(logits, torch.Tensor):
        raise TypeError(f"logits must be a (batch, vocab) tensor, got {type(logits).__name__}")
    if logits.dim() != 2:
        raise ValueError(f"logits must be (batch, vocab), got shape {tuple(logits.shape)}")
    if logits.dtype not in (torch.float32, torch.bfloat16, torch.float16):
        raise ValueError(f"logits dtype {logits.dtype} not supported (float32, bfloat16, float16)")
    if logits.stride(-1) != 1:
        logits = logits.contiguous()
    B, V = logits.shape
    dev = logits.device
    if dev.type != "cuda":
        if dev.type != "cpu":
            raise ValueError(f"logits on a {dev.type} device: the fused sampler runs on CUDA (or on the CPU under "
                             "Triton's interpreter)")
        if not INTERPRETED:
            raise ValueError("logits on the CPU: the fused sampler runs there only under Triton's interpreter "
                             "(TRITON_INTERPRET=1 in the environment before triton is imported); use a CUDA device")
    if V >= 1 << 23:
        raise ValueError(f"vocab {V} too large for the fused kernel's fixed-point sums (< 2**23)")
    p_dtype = torch.float64 if getattr(top_p, "dtype", None) == torch.float64 else torch.float32
    return logits, (_check(temperature, "temperature", torch.float32, B, dev), _check(top_k, "top_k", torch.int64, B, dev),
                    _check(top_p, "top_p", p_dtype, B, dev), _check(min_p, "min_p", torch.float32, B, dev),
                    _check(seed, "seed", torch.int64, B, dev), _check(offset, "offset", torch.int64, B, dev))


def fused_sample(logits: torch.Tensor, temperature: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor,
                 min_p: torch.Tensor, seed: torch.Tensor, offset: torch.Tensor, want_probs: bool = False,
                 block: Optional[int] = None, nb: Optional[int] = None, r: Optional[float] = None,
                 kmax: Optional[int] = None, num_warps: Optional[int] = None, launcher: str = "cached",
                 buffers: Optional[dict] = None, greedy: bool = False, **more):
    """Sample one token per row with min-p, top-k, top-p, temperature and the canonical draw.

    Parameters
    ----------
    logits : torch.Tensor
        ``(batch, vocab)`` float32, bfloat16 or float16 (upcast to float32
        inside the kernel); rows contiguous in the last dimension.
    temperature, top_p, min_p : torch.Tensor
        ``(batch,)`` float32; ``top_p`` float32 or float64 (a float64 value is
        compared as given: 0.9999999 is not rounded to float32's 1 - 2**-23,
        SEMANTICS §1.5). ``temperature == 0``, ``top_p == 0`` or
        ``min_p == 1`` make the row greedy; ``top_p == 1`` and ``min_p == 0``
        are neutral; values outside ``[0, 1]`` reject the row (status
        ``invalid_top_p``, ``invalid_min_p``; SEMANTICS §1.1).
    top_k : torch.Tensor
        ``(batch,)`` int32/int64; 1 is greedy; 0 or ``>= vocab`` is neutral.
    seed, offset : torch.Tensor
        ``(batch,)`` int64: each row's Philox key (the signed view of its
        64-bit seed) and offset (DESIGN.md decision 1).
    want_probs : bool
        Also return the distribution sampled from (same filtering as the
        draw): ``(batch, vocab)`` float32, zeros outside the kept set.
    block, nb, r, kmax, num_warps, **more
        Tuning constants (:data:`DEFAULTS`, e.g. ``early=False``); results do not depend on them. ``None``: the
        default (as :class:`impls.fused.bound.FusedSampler` takes it).
    launcher : str
        ``"cached"`` (after the first call of a shape, launch its compiled
        kernels directly from a plan, :mod:`impls.fused.launch`) or ``"jit"``
        (Triton's ``kernel[grid]`` at every launch). Same kernels, same results.
    buffers : dict, optional
        :func:`allocate` of this call's shape, tuning and ``want_probs``, kept by the caller:
        the call then allocates nothing and writes its outputs into them (each call overwrites
        the last one's; :func:`impls.fused.workspace.workspace_bytes` states the size). Default:
        a fresh allocation per call.
    greedy : bool
        The caller's all-greedy hint (as vLLM's ``SamplingMetadata.all_greedy``): every row is
        decoded greedily, whatever its parameters (still checked as ``(batch,)`` tensors, then
        ignored): first argmax, ``+inf``
        included; ``nan_logits`` for a row holding a NaN, ``no_valid_token`` for a row of ``-inf``.
        The same tokens as greedy rows of a general call, in two launches instead of five (one from
        ``greedy_rows`` rows, :data:`DEFAULTS`).

    Returns
    -------
    tokens : torch.Tensor
        ``(batch,)`` int64; -1 for a rejected row.
    status : torch.Tensor
        ``(batch,)`` int32 outcome codes (:data:`impls.fused.kernel.STATUS_KINDS`).
    path : torch.Tensor
        ``(batch,)`` int32 path codes (:data:`impls.fused.kernel.PATHS`).
    probs : torch.Tensor or None

    Raises
    ------
    TypeError
        A parameter that is not a tensor, a boolean or complex parameter, a
        ``top_k``/``seed``/``offset`` that is not of an integer dtype (the others
        are converted to float32, ``top_p`` kept float64 when it is, these to int64); an unknown
        tuning option.
    ValueError
        Logits that are not 2-D or not float32/bfloat16/float16, a parameter
        whose shape is not ``(batch,)`` or that is on another device than the
        logits, logits on a CPU without Triton's interpreter
        (``TRITON_INTERPRET=1`` when Triton was imported) or on another device
        type, a vocabulary of ``2**23`` or more, a tuning option out of its range
        (:func:`apply_tuning`: powers of two where one is needed, :data:`POW2_OPTIONS`; 0 or
        24-255 registers for the register caps; ...), an unknown
        ``launcher``, ``buffers`` of another shape, device, tuning or ``want_probs``.
    """
    if launcher not in MODES:
        raise ValueError(f"unknown launcher mode {launcher!r}; known: {', '.join(MODES)}")
    logits, (temperature, top_k, top_p, min_p, seed, offset) = check_call(
        logits, temperature, top_k, top_p, min_p, seed, offset)
    B, V = logits.shape
    dev = logits.device
    cfg = INTERPRETER if dev.type == "cpu" else DEFAULTS
    given = {k: v for k, v in dict(more, block=block, nb=nb, r=r, kmax=kmax, num_warps=num_warps).items()
             if v is not None}
    if given:
        cfg = apply_tuning(cfg, given)
    if not B:
        tokens = torch.empty((0,), dtype=torch.int64, device=dev)
        status, path = (torch.empty((0,), dtype=torch.int32, device=dev) for _ in range(2))
        return tokens, status, path, (torch.empty((0, V), dtype=torch.float32, device=dev) if want_probs else None)
    a = allocate(B, V, dev, cfg, want_probs) if buffers is None else _checked_buffers(buffers, B, V, dev, cfg,
                                                                                      want_probs)
    tokens, status, path, probs = a["tokens"], a["status"], a["path"], a["probs"]
    run_call(call_tensors(logits, (temperature, top_k, top_p, min_p, seed, offset), a), a["S"], a["CH"], want_probs,
             cfg, launcher, bool(greedy))
    return tokens, status, path, (probs if want_probs else None)


def _checked_buffers(a: dict, B: int, V: int, dev, cfg: dict, want_probs: bool) -> dict:
    # the common case in a tuple comparison (this path exists to save host time); the tensors one by one
    # only when the key differs or is missing, to name what does not fit
    if a.get("key") == layout_key(B, V, dev, cfg, want_probs):
        return a
    want = allocate(B, V, "meta", cfg, want_probs)
    for name in ("tokens", "status", "path", "probs", "wsi", "wsf", "ws64"):
        t = a.get(name)
        if not isinstance(t, torch.Tensor) or t.shape != want[name].shape or t.dtype != want[name].dtype \
                or t.device != dev:
            got = "missing" if t is None else f"{tuple(t.shape)} {t.dtype} on {t.device}"
            raise ValueError(f"buffers[{name!r}] is {got}; this call ({B} x {V}, want_probs={want_probs}, its "
                             f"tuning) needs {tuple(want[name].shape)} {want[name].dtype} on {dev}: allocate them "
                             "with impls.fused.ops.allocate for this shape")
    if (a.get("S"), a.get("CH")) != (want["S"], want["CH"]):
        raise ValueError(f"buffers split rows as (S, CH) = {(a.get('S'), a.get('CH'))}, this call as "
                         f"{(want['S'], want['CH'])}: allocate them with this call's tuning")
    return a
