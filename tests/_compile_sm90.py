"""Compile every launch of the fused sampler and its step for sm_90 (the H200) without a GPU (offline compiler).

Run by ``tests/test_fused.py::test_kernels_compile_for_sm90_offline`` in a subprocess without
``TRITON_INTERPRET`` (under the interpreter the kernels are not compiled at all). Each kernel is
compiled with fp32 and bf16 logits and the constants of :data:`impls.fused.ops.DEFAULTS`, as
:func:`impls.fused.kernel.launch_args` passes them, the histogram kernel with and without early
accept (``EARLY``), the statistics kernel with and without the all-greedy hint (``ALL_GREEDY``); ``UNIT_T`` on, which compiles both of its loops (the row's temperature picks one on the
device). Arguments get the specialisation Triton gives them on a GPU for the suite's shapes: pointers, the
row stride, the vocabulary and the logits per program divisible by 16 (only ``S`` is never specialised). With
fp32 logits, every streaming load of a row must then be 16 bytes wide (``cp.async`` of 16 bytes, or a
``v4`` load): 4-byte loads, which an unspecialised vocabulary or part length gave every streaming kernel
until 2026-12-06 (``benchmarks/README.md``, "Fused v6 on the H200"), fail the compile here. Prints
``<kernel> <logits type> ok`` per compile; exits 1 when one fails (with the compiler's message).
"""

import inspect
import re
import sys

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

import impls.fused.kernel as K
import impls.fused.step_kernel as SK
from impls.fused.ops import DEFAULTS

CONSTS = dict(BLOCK=DEFAULTS["block"], NB1=DEFAULTS["nb"], NBS=DEFAULTS["nbs"], KMAX=DEFAULTS["kmax"],
              KBIG=DEFAULTS["kbig"], RMAX=DEFAULTS["r"], NSTG=DEFAULTS["stages"], LOCAL=DEFAULTS["local"],
              UNIT_T=True, NU=256, WANT_LP=True, KL=32, WANT_VEC=True)
POINTERS = {"temp_ptr": "*fp32", "top_k_ptr": "*i64", "top_p_ptr": "*fp32", "min_p_ptr": "*fp32", "seed_ptr": "*i64",
            "offset_ptr": "*i64", "wsi": "*i32", "wsf": "*fp32", "ws64": "*i64", "token_ptr": "*i64",
            "status_ptr": "*i32", "path_ptr": "*i32", "probs_ptr": "*fp32",
            # the step's rewrite and logprobs launches (impls/fused/step_kernel.py)
            "y_ptr": "*fp32", "sp_ids": "*i32", "sp_val": "*fp32", "sp_tag": "*i32", "meta_i": "*i32",
            "meta_f": "*fp32", "lpw": "*fp32", "lpc": "*i32", "ntop_ptr": "*i32", "topw": "*i64",
            "lp_tok_ptr": "*fp32", "rank_ptr": "*i32", "plp_ptr": "*fp64", "top_id_ptr": "*i32",
            "top_lp_ptr": "*fp32", "vec_ptr": "*fp32"}
KERNELS = ("_stats_kernel", "_hist_kernel", "_refine_kernel", "_gather_kernel", "_decide_kernel", "_probs_kernel",
           "_greedy_kernel", "_rewrite_kernel", "_logprobs_kernel")
#: Kernels compiled once per value of a constexpr flag (the histogram launch with and without early accept; the
#: statistics launch of a general and of an all-greedy call).
VARIANTS = {"_hist_kernel": ("EARLY", (True, False)), "_stats_kernel": ("ALL_GREEDY", (False, True))}
#: Integer arguments a GPU call specialises as multiples of 16 (Triton's default for ints, as every vocabulary
#: of the latency suite and every part length, a multiple of the block, are).
DIV16 = ("stride_row", "V", "CH")
#: Kernels that stream rows of logits (or of rewritten logits): their loads of a row must be 16 bytes wide.
STREAMING = ("_stats_kernel", "_hist_kernel", "_refine_kernel", "_gather_kernel", "_probs_kernel", "_rewrite_kernel",
             "_logprobs_kernel")


def narrow_loads(ptx: str) -> int:
    """Asynchronous copies narrower than 16 bytes in ``ptx`` (``cp.async ... , 0x4``: one float per copy)."""
    return sum(1 for w in re.findall(r"cp\.async\.\w+\.shared\.global[^;]*,\s*(0x[0-9a-f]+)", ptx) if int(w, 16) < 16)


def main() -> int:
    """Compile each kernel for fp32 and bf16 logits; 0 when all compile."""
    failed = 0
    for name in KERNELS:
        fn = getattr(K, name) if hasattr(K, name) else getattr(SK, name)
        params = list(inspect.signature(fn.fn).parameters)
        flag, values = VARIANTS.get(name, (None, (None,)))
        for value in values:
            cst = dict(CONSTS, **({flag: value} if flag else {}))
            if name == "_stats_kernel":
                cst["NSTG"] = DEFAULTS["stats_stages"]   # its own option (kernel.launch_specs)
            tag = f" {flag}={value}" if flag else ""
            for logits in ("*fp32", "*bf16"):
                sig = {p: "constexpr" if p in cst else POINTERS.get(p, logits if p == "logits_ptr" else "i32")
                       for p in params}
                consts = {(params.index(p),): cst[p] for p in params if p in cst}
                # what the decorator lets Triton specialise (``do_not_specialize`` keeps an int unspecialised)
                free = {q.name for q in fn.params if not q.do_not_specialize}
                attrs = {(params.index(p),): [["tt.divisibility", 16]] for p in params
                         if p not in cst and p in free and (sig[p].startswith("*") or p in DIV16)}
                try:
                    ck = triton.compile(ASTSource(fn=fn, signature=sig, constexprs=consts, attrs=attrs),
                                        target=GPUTarget("cuda", 90, 32),
                                        options={"num_warps": DEFAULTS["num_warps"], "enable_fp_fusion": False})
                    narrow = narrow_loads(ck.asm["ptx"]) if name in STREAMING and logits == "*fp32" else 0
                    if narrow:
                        failed += 1
                        print(name + tag, logits, "FAILED", f"{narrow} loads narrower than 16 bytes", flush=True)
                        continue
                    print(name + tag, logits, "ok", flush=True)
                except Exception as e:  # reported with the compiler's message
                    failed += 1
                    print(name + tag, logits, "FAILED", f"{type(e).__name__}: {e}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
