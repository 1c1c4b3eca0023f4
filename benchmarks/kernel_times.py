"""GPU time of each launch of a fused call, from the CUDA profiler: which pass bounds a grid point.

For each ``(batch, vocab, mix)`` point, on the latency suite's inputs (``randn * 3``,
:func:`benchmarks.latency.make_inputs`) and parameters (:func:`benchmarks.latency.mix_params`), runs
``fused_sample`` a few times under ``torch.profiler`` (CUDA activity) and reports, per kernel, the
mean device time per call in µs, with the rows' path counts (:data:`impls.fused.kernel.PATHS`) and the
HBM floor of the point (one read of the logits at the copy bandwidth measured here).

Usage: ``python -m benchmarks.kernel_times --out FILE.json [--points B:V ...] [--calls N] [--mixes m ...]
[--dtype bf16] [--configs stages=3,block=1024 ...]``. Each ``--configs`` entry is a set of tuning options of
``fused_sample`` (:data:`impls.fused.ops.DEFAULTS`; ``default`` for none), timed at every point and mix: the
tuning sweeps of issue #18 (each result row names its options). Programmatic dependent launch (``pdl``) is off
unless a set turns it on: with it each launch starts early and waits for the one before, so its profiled time
would include that wait. Needs CUDA.
"""

from __future__ import annotations

import argparse
import collections
import json
import platform

import torch

from benchmarks.latency import LOGITS_DTYPES, MIXES

__all__ = ["DEFAULT_POINTS", "parse_point", "call_options", "main"]

DEFAULT_POINTS = ("256:128256", "1024:128256", "1024:262144")


def parse_point(spec: str, option: str = "--points") -> tuple:
    """``"256:128256"`` -> ``(256, 128256)``: a grid point as ``batch:vocab``.

    Raises
    ------
    ValueError
        Not two positive integers separated by ``:`` (the message names ``option`` and the entry).
    """
    try:
        B, V = (int(v) for v in spec.split(":"))
    except ValueError:
        B = V = 0
    if B < 1 or V < 1:
        raise ValueError(f"{option} entry {spec!r}: expected batch:vocab, two positive integers")
    return B, V


def call_options(opts: dict, mix: str) -> dict:
    """The ``fused_sample`` options of a timed call: the set ``opts``, ``pdl`` off unless it says otherwise (with
    programmatic dependent launch a launch's profiled time includes its wait for the one before), and the caller's
    all-greedy hint for the ``greedy`` mix, as the latency suite's fused peer passes it."""
    return {"pdl": False, **opts, "greedy": mix == "greedy"}


def main(argv=None) -> int:
    """Measure and write the JSON; returns the exit status (2 without CUDA)."""
    ap = argparse.ArgumentParser(prog="python -m benchmarks.kernel_times", description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="benchmarks/results/kernel-times.json", help="results file (JSON)")
    ap.add_argument("--points", nargs="*", default=list(DEFAULT_POINTS), help="batch:vocab")
    ap.add_argument("--calls", type=int, default=5, help="profiled calls per point (mean)")
    ap.add_argument("--mixes", nargs="*", default=list(MIXES), choices=MIXES)
    ap.add_argument("--dtype", default="fp32", choices=tuple(LOGITS_DTYPES), help="logits dtype (the floor is in it)")
    ap.add_argument("--configs", nargs="*", default=["default"],
                    help="tuning option sets, e.g. stages=3,block=1024 ('default': none)")
    args = ap.parse_args(argv)
    from impls.fused.ops import DEFAULTS, apply_tuning, parse_tuning
    try:
        configs = [parse_tuning(c) for c in args.configs]
        for c in configs:
            apply_tuning(DEFAULTS, c)   # every set checked before the first is timed
        points = [parse_point(spec) for spec in args.points]
    except (TypeError, ValueError) as e:
        ap.error(str(e))
    if not torch.cuda.is_available():
        print("kernel_times: needs a CUDA device")
        return 2
    import triton
    from torch.profiler import ProfilerActivity, profile

    from benchmarks.latency import hbm_bandwidth, make_inputs, mix_tensors
    from impls.fused.kernel import PATHS
    from impls.fused.ops import fused_sample

    dev = torch.device("cuda")
    gbps = hbm_bandwidth(dev)
    width = LOGITS_DTYPES[args.dtype][1]
    res = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
           "python": platform.python_version(), "hbm_bandwidth_gbps": round(gbps, 1), "calls": args.calls,
           "dtype": args.dtype, "fused_config": dict(DEFAULTS),
           "unit": "µs of GPU time per call (mean over calls); each point's options replace fused_config's",
           "pdl": "off unless a point's options turn it on (a launch's profiled time would include its wait)",
           "points": []}
    for (B, V), opts in ((p, o) for o in configs for p in points):
        x = make_inputs(B, V, dev, dtype=args.dtype)[0]
        for mix in args.mixes:
            T, K, P, M = mix_tensors(mix, B, dev)
            seed = torch.arange(B, device=dev)
            off = torch.zeros(B, dtype=torch.int64, device=dev)
            hint = call_options(opts, mix)
            out = fused_sample(x, T, K, P, M, seed, off, **hint)  # compile and build the plan outside the profile
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(args.calls):
                    fused_sample(x, T, K, P, M, seed, off, **hint)
                torch.cuda.synchronize()
            per = collections.defaultdict(float)
            for ev in prof.events():
                if ev.device_type == torch.autograd.DeviceType.CUDA:
                    per[ev.name] += ev.time_range.elapsed_us() / args.calls
            paths = collections.Counter(PATHS[int(c)] for c in out[2].tolist())
            row = {"options": opts, "greedy_hint": hint["greedy"], "batch": B, "vocab": V, "mix": mix,
                   "floor_us": round(B * V * width / (gbps * 1e3), 2),
                   "kernels_us": {k: round(v, 2) for k, v in sorted(per.items(), key=lambda kv: -kv[1])},
                   "total_us": round(sum(per.values()), 2), "paths": dict(paths)}
            res["points"].append(row)
            print(f"{opts or 'default'} B={B:<5} V={V:<7} {mix:<8} total {row['total_us']:9.1f} us  "
                  f"floor {row['floor_us']:7.1f}  "
                  f"paths {dict(paths)}  " + "  ".join(f"{k.split('_kernel')[0].lstrip('_')} {v:.1f}"
                                                        for k, v in row["kernels_us"].items()))
    with open(args.out, "w") as f:
        json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
