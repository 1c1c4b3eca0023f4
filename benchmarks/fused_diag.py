"""Latency of the fused kernel on one GPU: the grid of benchmarks/sampling.py for the fused kernel,
``torch.argmax`` and the HBM floor (no FlashInfer, no sort-based path: their committed numbers are
in ``results/h200-latency.json``), plus variants of its constants at two points, to place the cost.

Usage: ``python -m benchmarks.fused_diag --out FILE.json [--quick] [--variants]``.
Writes the schema of DESIGN.md ("Benchmark results"), with ``paths`` per row.
"""

from __future__ import annotations

import argparse
import json
import platform
import time

import torch

from benchmarks.sampling import MIXES, hbm_bandwidth, params, point_setup, time_call
from impls.fused import ops

VARIANTS = [("block=1024", {"block": 1024}), ("programs=1024", {"programs": 1024}),
            ("programs=256", {"programs": 256})]


def main(argv=None) -> int:
    """Run the fused kernel's grid (and variants) and write the results file; returns the exit status."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="benchmarks/results/fused-diag.json")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--variants", action="store_true")
    ap.add_argument("--reps", type=int, default=20)
    args = ap.parse_args(argv)
    dev = torch.device("cuda")
    base = dict(ops.DEFAULTS)
    bw = hbm_bandwidth(dev)
    print(f"HBM copy bandwidth: {bw:.0f} GB/s", flush=True)
    batches = (1, 16, 64, 256, 1024) if not args.quick else (1, 1024)
    vocabs = (32000, 128256, 151936, 262144) if not args.quick else (128256,)
    rows = []
    for V in vocabs:
        for B in batches:
            inputs, floor_us, seed, off = point_setup(B, V, dev, bw)
            variants = [("default", {})]
            if args.variants and (B, V) in ((1, 128256), (1024, 128256)):
                variants += VARIANTS
            for mix in MIXES:
                T, K, P, M = params(mix, B, dev)
                impls = {}
                for name, change in variants:
                    impls["fused" if name == "default" else f"fused[{name}]"] = (change, lambda x: ops.fused_sample(
                        x, T, K, P, M, seed, off))
                if mix == "greedy":
                    impls["argmax"] = ({}, lambda x: x.argmax(-1))
                for name, (change, fn) in impls.items():
                    ops.DEFAULTS.clear()
                    ops.DEFAULTS.update(base, **change)
                    try:
                        us = time_call(fn, inputs, args.reps)
                        paths = sorted(set(fn(inputs[0])[2].tolist())) if name.startswith("fused") else None
                    except Exception as e:  # one failing variant never stops the grid
                        print(f"{name} B={B} V={V} {mix}: {type(e).__name__}: {e}", flush=True)
                        continue
                    rows.append({"impl": name, "batch": B, "vocab": V, "mix": mix, "median_us": round(us, 2),
                                 "floor_us": round(floor_us, 3), "paths": paths})
                    print(f"{name:>22} B={B:<5} V={V:<7} {mix:<8} {us:9.1f} us  floor {floor_us:7.2f}  paths {paths}",
                          flush=True)
            ops.DEFAULTS.clear()
            ops.DEFAULTS.update(base)
            del inputs
            torch.cuda.empty_cache()
    doc = {"schema": 1, "device": torch.cuda.get_device_name(), "versions": {
        "fused_config": base, "torch": torch.__version__, "triton": __import__("triton").__version__,
        "python": platform.python_version(), "cuda": torch.version.cuda},
        "hbm_bandwidth_gbps": round(bw, 1), "timer": "CUDA events around single calls, median", "rows": rows,
        "date": time.strftime("%Y-%m-%d")}
    with open(args.out, "w") as f:
        json.dump(doc, f, indent=1)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
