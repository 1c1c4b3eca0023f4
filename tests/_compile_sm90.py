"""Compile every launch of the fused sampler and its step for sm_90 (the H200) without a GPU (offline compiler).

Run by ``tests/test_fused.py::test_kernels_compile_for_sm90_offline`` in a subprocess without
``TRITON_INTERPRET`` (under the interpreter the kernels are not compiled at all). Each kernel is
compiled with fp32 and bf16 logits and the constants of :data:`impls.fused.ops.DEFAULTS`, as
:func:`impls.fused.kernel.launch_args` passes them, the histogram kernel with and without early
accept (``EARLY``) and with ``lane_hist``'s counters (``LANE``), the statistics kernel with and without the all-greedy hint (``ALL_GREEDY``),
every sampling kernel with programmatic dependent launch (``PDL``, the defaults' ``pdl``: then, and only then, the PTX
waits for the previous launch and lets the next one start, ``griddepcontrol`` once each), the statistics and decide
kernels without it as well; a launch with a register cap (the defaults' ``hist_regs``, ``gather_regs``,
``decide_regs``) has ``.maxnreg`` of that value in its PTX, and only such a launch; the decide kernel also with
every window bisected (``BISECT``); ``UNIT_T`` on, which compiles both of its loops (the row's temperature picks one on the
device). Arguments get the specialisation Triton gives them on a GPU for the suite's shapes: pointers, the
row stride, the vocabulary and the logits per program divisible by 16 (only ``S`` is never specialised). With
fp32 logits, every streaming load of a row must then be 16 bytes wide (``cp.async`` of 16 bytes, or a
``v4`` load): 4-byte loads, which an unspecialised vocabulary or part length gave every streaming kernel
until 2026-12-06 (``benchmarks/README.md``, "Fused v6 on the H200"), fail the compile here. Prints
``<kernel> <logits type> ok`` per compile; exits 1 when one fails (with the compiler's message).
"""

import re
import sys

from impls.fused.offline import (KERNELS, STREAMING, VARIANTS, compile_kernel, launch_constexprs, launch_options,
                                 narrow_loads)


def main() -> int:
    """Compile each kernel for fp32 and bf16 logits; 0 when all compile."""
    failed = 0
    for name in KERNELS:
        for flags in VARIANTS.get(name, ({},)):
            tag = "".join(f" {k}={v}" for k, v in flags.items())
            for logits in ("*fp32", "*bf16"):
                try:
                    ck = compile_kernel(name, logits, **flags)
                    narrow = narrow_loads(ck.asm["ptx"]) if name in STREAMING and logits == "*fp32" else 0
                    if narrow:
                        failed += 1
                        print(name + tag, logits, "FAILED", f"{narrow} loads narrower than 16 bytes", flush=True)
                        continue
                    gdc = [ck.asm["ptx"].count(f"griddepcontrol.{i}") for i in ("wait", "launch_dependents")]
                    if gdc != ([1, 1] if flags.get("PDL", launch_constexprs(name).get("PDL", False)) else [0, 0]):
                        failed += 1
                        print(name + tag, logits, "FAILED", f"griddepcontrol wait, launch_dependents: {gdc}", flush=True)
                        continue
                    cap = launch_options(name).get("maxnreg")
                    regs = [int(n) for n in re.findall(r"\.maxnreg (\d+)", ck.asm["ptx"])]
                    if regs != ([cap] if cap else []):
                        failed += 1
                        print(name + tag, logits, "FAILED", f".maxnreg {regs}, the launch's cap {cap}", flush=True)
                        continue
                    print(name + tag, logits, "ok", flush=True)
                except Exception as e:  # reported with the compiler's message
                    failed += 1
                    print(name + tag, logits, "FAILED", f"{type(e).__name__}: {e}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
