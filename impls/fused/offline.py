"""Offline compiles of the fused kernels for sm_90 (the H100/H200) on a machine without a GPU, and their SASS.

Triton compiles a ``@triton.jit`` kernel for any target given its signature: here, every kernel of
:mod:`impls.fused.kernel` and :mod:`impls.fused.step_kernel` with the constants of a tuning set
(:data:`impls.fused.ops.DEFAULTS` by default) as :func:`impls.fused.kernel.launch_specs` passes them, and the
specialisation a GPU call gets for the latency suite's shapes (pointers, the row stride, the vocabulary and
the part length divisible by 16; ``S`` never specialised). Used by ``tests/_compile_sm90.py`` (every kernel
must compile, with 16-byte row loads) and ``python -m benchmarks.sass_loops`` (instructions per iteration of
each loop, from ``cuobjdump -sass`` of the cubin: how the passes were costed on 2026-12-06 without device
time, ``benchmarks/README.md`` "The statistics pass and the histograms"). The instruction mix depends on the
Triton version: the GPU machine's is 3.6.0 (``tl.histogram`` lowers to warp ballots there, to shared-memory
atomics in 3.9), so put that version first on ``sys.path`` to cost what the device runs.
"""

from __future__ import annotations

import collections
import inspect
import os
import re
import subprocess
import tempfile
from typing import Optional

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from . import kernel as K
from . import step_kernel as SK
from .ops import DEFAULTS

__all__ = ["KERNELS", "VARIANTS", "STREAMING", "POINTERS", "DIV16", "constants", "compile_kernel", "launch_constexprs",
           "launch_options", "resources", "narrow_loads", "sass", "loops"]

#: Every kernel of a fused call or step.
KERNELS = ("_stats_kernel", "_hist_kernel", "_refine_kernel", "_gather_kernel", "_decide_kernel", "_probs_kernel",
           "_greedy_kernel", "_greedy_row_kernel", "_rewrite_kernel", "_kth_kernel", "_logprobs_kernel")
#: Kernels compiled once per set of constexpr flags (the histogram launch with and without early accept, each
#: with ``tl.histogram`` and with the per-lane counters of ``lane_hist``, and once with ``warp_lists``' appends;
#: the statistics launch of a general and of an all-greedy call; the gather launch with and without its lists
#: written from the parts' offsets, and with lists appended per warp; the first and the last launch of a call
#: without programmatic dependent launch, ``pdl``, which the defaults turn on and whose wait is the same in every
#: kernel; the decide launch with every window bisected (``bisect``, off in the defaults); the step's rewrite
#: launch without and with the allowed-ids mask, its logprobs launch without and with the logprobs modes, and with
#: them reading a second buffer, impls.fused.chain's outcome). Others: once, as given.
VARIANTS = {"_hist_kernel": ({"EARLY": True}, {"EARLY": False}, {"EARLY": True, "LANE": True},
                             {"EARLY": False, "LANE": True}, {"EARLY": True, "LANE": True, "WARP": True}),
            "_stats_kernel": ({"ALL_GREEDY": False}, {"ALL_GREEDY": True}, {"PDL": False}),
            "_decide_kernel": ({}, {"PDL": False}, {"BISECT": 64}),
            "_gather_kernel": ({"OFFS": False}, {"OFFS": True}, {"WARP": True}),
            "_rewrite_kernel": ({}, {"HAS_MASK": True}),
            "_logprobs_kernel": ({}, {"MODES": True}, {"MODES": True, "SPLIT": True})}
#: Kernels that stream rows of logits (or of rewritten logits): their loads of a row must be 16 bytes wide.
STREAMING = ("_stats_kernel", "_greedy_row_kernel", "_hist_kernel", "_refine_kernel", "_gather_kernel",
             "_probs_kernel", "_rewrite_kernel", "_logprobs_kernel")
#: Pointer arguments and their element types (the logits' is chosen per compile).
POINTERS = {"temp_ptr": "*fp32", "top_k_ptr": "*i64", "top_p_ptr": "*fp32", "min_p_ptr": "*fp32", "seed_ptr": "*i64",
            "offset_ptr": "*i64", "wsi": "*i32", "wsf": "*fp32", "ws64": "*i64", "token_ptr": "*i64",
            "status_ptr": "*i32", "path_ptr": "*i32", "probs_ptr": "*fp32",
            # the step's rewrite and logprobs launches (impls/fused/step_kernel.py)
            "y_ptr": "*fp32", "yp_ptr": "*fp32", "sp_ids": "*i32", "sp_val": "*fp32", "sp_tag": "*i32", "meta_i": "*i32",
            "meta_f": "*fp32", "lpw": "*fp32", "lpc": "*i32", "ntop_ptr": "*i32", "topw": "*i64",
            "lp_tok_ptr": "*fp32", "rank_ptr": "*i32", "plp_ptr": "*fp64", "top_id_ptr": "*i32",
            "top_lp_ptr": "*fp32", "vec_ptr": "*fp32", "mask_ptr": "*i32", "xk_ptr": "*fp32"}
#: Integer arguments a GPU call specialises as multiples of 16 (Triton's default for ints, as every vocabulary
#: of the latency suite and every part length, a multiple of the block, are).
DIV16 = ("stride_row", "V", "CH")


def constants(cfg: Optional[dict] = None) -> dict:
    """The constexpr values of every kernel for the tuning set ``cfg`` (default :data:`DEFAULTS`).

    A sampling launch's own values (its ``NSTG``, block, flags) replace these in :func:`compile_kernel`, as
    :func:`impls.fused.kernel.launch_specs` gives them; ``UNIT_T`` on (both of its loops compile); the step's
    ``NU``, ``WANT_LP``, ``KL``, ``WANT_VEC`` as the fused step passes them.
    """
    c = dict(DEFAULTS if cfg is None else cfg)
    return dict(BLOCK=c["block"], NB1=c["nb"], NBS=c["nbs"], KMAX=c["kmax"], KBIG=c["kbig"], KBR=c["kbr"],
                NSUB=c["nsub"], RMAX=c["r"], NSTG=c["stages"], LOCAL=c["local"], UNIT_T=True, NU=256, WANT_LP=True,
                KL=32, WANT_VEC=True)


def compile_kernel(name: str, logits: str = "*fp32", cfg: Optional[dict] = None, **flags):
    """``triton.compile`` of kernel ``name`` for sm_90 with the constants of ``cfg``.

    Parameters
    ----------
    name : str
        One of :data:`KERNELS`.
    logits : str
        The logits' pointer type, ``"*fp32"`` or ``"*bf16"`` (``"*fp16"``).
    cfg : dict, optional
        A tuning set (:data:`DEFAULTS`' keys); a sampling launch gets the constexprs and warps that
        :func:`impls.fused.kernel.launch_specs` gives it for that set (with its register cap, ``maxnreg``).
    **flags
        Constexpr overrides (``EARLY=False``, ``ALL_GREEDY=True``, ``NSTG=1``, ...).

    Returns
    -------
    triton.compiler.CompiledKernel
        ``.asm`` holds ``"ptx"`` and ``"cubin"``.

    Raises
    ------
    ValueError
        A name not in :data:`KERNELS`.
    Exception
        Whatever Triton's compiler raises (the caller reports it).
    """
    if name not in KERNELS:
        raise ValueError(f"unknown kernel {name!r}; known: {', '.join(KERNELS)}")
    fn = getattr(K, name) if hasattr(K, name) else getattr(SK, name)
    c = DEFAULTS if cfg is None else cfg
    signature = inspect.signature(fn.fn).parameters
    params = list(signature)
    cst = constants(c)
    meta, options = _launch_meta(name, c)
    cst.update(meta)
    cst.update(flags)
    # a constexpr the launch leaves at its default (``PDL`` off) is that constant, as in a launch
    for q in signature.values():
        if q.name not in cst and q.default is not inspect.Parameter.empty and "constexpr" in str(q.annotation):
            cst[q.name] = q.default
    sig = {p: "constexpr" if p in cst else POINTERS.get(p, logits if p == "logits_ptr" else "i32") for p in params}
    consts = {(params.index(p),): cst[p] for p in params if p in cst}
    # what the decorator lets Triton specialise (``do_not_specialize`` keeps an int unspecialised)
    free = {q.name for q in fn.params if not q.do_not_specialize}
    attrs = {(params.index(p),): [["tt.divisibility", 16]] for p in params
             if p not in cst and p in free and (sig[p].startswith("*") or p in DIV16)}
    return triton.compile(ASTSource(fn=fn, signature=sig, constexprs=consts, attrs=attrs),
                          target=GPUTarget("cuda", 90, 32),
                          options={"num_warps": options.get("num_warps", c["num_warps"]), "enable_fp_fusion": False,
                                   **({"maxnreg": options["maxnreg"]} if "maxnreg" in options else {})})


def launch_constexprs(name: str, cfg: Optional[dict] = None) -> dict:
    """The constexprs :func:`impls.fused.kernel.launch_specs` gives sampling kernel ``name`` for the tuning set
    ``cfg`` (default :data:`DEFAULTS`), as :func:`compile_kernel` compiles it; ``{}`` for the step's kernels."""
    return dict(_launch_meta(name, DEFAULTS if cfg is None else cfg)[0])


def launch_options(name: str, cfg: Optional[dict] = None) -> dict:
    """The launch options (warps, ``maxnreg``, ``launch_pdl``) :func:`impls.fused.kernel.launch_specs` gives
    sampling kernel ``name`` for the tuning set ``cfg`` (default :data:`DEFAULTS`); ``{}`` for the step's kernels."""
    return dict(_launch_meta(name, DEFAULTS if cfg is None else cfg)[1])


def _launch_meta(name: str, cfg: dict) -> tuple:
    """``(constexprs, launch options)`` that :func:`impls.fused.kernel.launch_specs` gives sampling kernel ``name``
    for tuning set ``cfg`` (a batch of 1024 x 128256, probabilities asked, general and all-greedy calls, the latter
    with one and two launches); ``({}, {})`` for the step's kernels, which :mod:`impls.fused.step` launches."""
    for greedy, rows in ((False, None), (True, 1 << 30), (True, 1)):
        c = cfg if rows is None else dict(cfg, greedy_rows=rows)
        for _n, kernel, _grid, _args, meta, options in K.launch_specs(1024, 128256, 128256, 1, 128256, True, c,
                                                                      greedy):
            if kernel.fn.__name__ == name:
                return meta, options
    return {}, {}


def narrow_loads(ptx: str) -> int:
    """Asynchronous copies narrower than 16 bytes in ``ptx`` (``cp.async ... , 0x4``: one float per copy)."""
    return sum(1 for w in re.findall(r"cp\.async\.\w+\.shared\.global[^;]*,\s*(0x[0-9a-f]+)", ptx) if int(w, 16) < 16)


def _cuobjdump(ck, flag: str) -> str:
    # Triton's bundled cuobjdump on the kernel's cubin
    tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
    if not os.path.exists(tool):
        raise FileNotFoundError(f"no cuobjdump in this Triton wheel ({tool})")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(ck.asm["cubin"])
        f.flush()
        return subprocess.run([tool, flag, f.name], capture_output=True, text=True, check=True).stdout


def sass(ck) -> str:
    """The SASS listing of a compiled kernel: ``cuobjdump -sass`` (the one bundled with Triton) of its cubin.

    Raises
    ------
    FileNotFoundError
        This Triton wheel carries no ``cuobjdump``.
    subprocess.CalledProcessError
        ``cuobjdump`` failed.
    """
    return _cuobjdump(ck, "-sass")


def resources(ck, listing: Optional[str] = None) -> dict:
    """Registers a thread, stack bytes and spill instructions of a compiled kernel (its cubin, offline).

    ``registers`` and ``stack`` from ``cuobjdump --dump-resource-usage``; ``spill_stores`` and ``spill_loads``
    count the ``STL`` and ``LDL`` instructions of its SASS (``listing``, else :func:`sass`). With 8 warps, an SM
    holds ``65536 // (256 * registers)`` programs by registers (the decide launch's 226 -> 1 program was the tenth
    session's miss: ``benchmarks/README.md`` "The tenth session").

    Raises
    ------
    FileNotFoundError, subprocess.CalledProcessError
        As :func:`sass`.
    ValueError
        ``cuobjdump`` printed no resource line.
    """
    usage = _cuobjdump(ck, "--dump-resource-usage")
    m = re.search(r"REG:(\d+)\s+STACK:(\d+)", usage)
    if m is None:
        raise ValueError(f"no REG/STACK line in cuobjdump --dump-resource-usage: {usage[:200]!r}")
    listing = sass(ck) if listing is None else listing
    return {"registers": int(m.group(1)), "stack": int(m.group(2)),
            "spill_stores": len(re.findall(r"\bSTL(?:\.\w+)*\s", listing)),
            "spill_loads": len(re.findall(r"\bLDL(?:\.\w+)*\s", listing))}


def loops(listing: str) -> list:
    """The loops of a SASS listing: each backward branch and the instructions from its target to it.

    Returns
    -------
    list of (int, int, collections.Counter)
        ``(first address, branch address, opcode counts)`` in listing order; opcodes without their
        modifiers (``FSETP.GE.AND`` counts as ``FSETP``), predicates stripped. A loop holding an inner
        loop counts the inner one's instructions once.
    """
    ins = []
    for m in re.finditer(r"/\*([0-9a-f]{4,})\*/\s+([^;]*);", listing):
        body = re.sub(r"^@!?U?P\w+\s+", "", m.group(2).strip())
        ins.append((int(m.group(1), 16), body.split()[0] if body else "", body))
    out = []
    for addr, op, body in ins:
        target = re.search(r"0x([0-9a-f]+)", body) if op.startswith("BRA") else None
        if target and int(target.group(1), 16) <= addr:
            lo = int(target.group(1), 16)
            out.append((lo, addr, collections.Counter(o.split(".")[0] for a, o, _ in ins if lo <= a <= addr)))
    return out
