"""Instructions per loop iteration of the fused kernels, from an offline sm_90 compile (no GPU needed).

``python -m benchmarks.sass_loops [KERNEL ...] [--options k=v,...] [--set NAME=VALUE ...] [--logits fp32|bf16]``
compiles each kernel (default: the streaming ones) as :func:`impls.fused.offline.compile_kernel` does, with the
tuning set ``--options`` applied to :data:`impls.fused.ops.DEFAULTS` and constexpr overrides ``--set`` (e.g.
``EARLY=False``, ``NSTG=1``), disassembles it (Triton's bundled ``cuobjdump``) and prints its registers a thread,
stack and spill instructions (:func:`impls.fused.offline.resources`: what sets how many programs an SM holds), then
every loop: its instructions per iteration and the most frequent opcodes. A streaming loop handles
``BLOCK / (32 num_warps)`` logits per thread per iteration (4 at the defaults), times its unroll: count its 16-byte
loads (``LDG``, or ``LDGSTS`` with pipelining) to see which. Cost what the GPU runs: its Triton is 3.6.0, so install that version
somewhere (``pip install --target DIR triton==3.6.0``) and pass ``--triton DIR``.

Used on 2026-12-06 to cost the statistics pass and the histograms (``benchmarks/README.md``, "The statistics
pass and the histograms"): e.g. the histogram pass's top-p loop, 324 instructions per 4 logits with 128 bins.
"""

from __future__ import annotations

import argparse
import sys

__all__ = ["main"]

DEFAULT_KERNELS = ("_stats_kernel", "_hist_kernel", "_refine_kernel", "_gather_kernel")


def main(argv=None) -> int:
    """Print the loops of each kernel; 1 when a kernel does not compile (its error is printed), else 0."""
    ap = argparse.ArgumentParser(prog="python -m benchmarks.sass_loops", description=__doc__.split("\n\n")[0])
    ap.add_argument("kernels", nargs="*", default=list(DEFAULT_KERNELS), help="kernel names (impls.fused.offline)")
    ap.add_argument("--options", default="", help="tuning options over the GPU defaults, e.g. nb=64,stages=1")
    ap.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                    help="a constexpr of the kernel (EARLY=False, NSTG=1, ...); repeatable")
    ap.add_argument("--logits", default="fp32", choices=("fp32", "bf16", "fp16"))
    ap.add_argument("--triton", default=None, help="a folder holding another triton package, put first on sys.path")
    ap.add_argument("--top", type=int, default=12, help="opcodes shown per loop")
    args = ap.parse_args(argv)
    if args.triton:
        sys.path.insert(0, args.triton)
    import triton
    from impls.fused import offline
    from impls.fused.ops import DEFAULTS, apply_tuning, parse_tuning
    try:
        cfg = apply_tuning(DEFAULTS, parse_tuning(args.options))
        flags = parse_tuning(",".join(args.set))   # the same NAME=VALUE syntax as the tuning options
    except (TypeError, ValueError) as e:
        ap.error(str(e))
    print(f"triton {triton.__version__}, sm_90, {args.logits} logits, options: {args.options or 'defaults'}"
          + (f", {flags}" if flags else ""))
    failed = 0
    for name in args.kernels:
        try:
            ck = offline.compile_kernel(name, "*" + args.logits, cfg, **flags)
            listing = offline.sass(ck)
            found = offline.loops(listing)
            res = offline.resources(ck, listing)
        except Exception as e:  # reported, the other kernels go on
            failed = 1
            print(f"{name}: {type(e).__name__}: {e}")
            continue
        print(f"{name}: {len(found)} loop(s); {res['registers']} registers a thread, {res['stack']} bytes of stack, "
              f"{res['spill_stores']} spill stores, {res['spill_loads']} spill loads")
        for lo, hi, ops in found:
            top = ", ".join(f"{op} {n}" for op, n in ops.most_common(args.top))
            print(f"  0x{lo:04x}-0x{hi:04x}: {sum(ops.values())} instructions ({top})")
    return failed


if __name__ == "__main__":
    sys.exit(main())
