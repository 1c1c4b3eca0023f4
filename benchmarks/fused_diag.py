"""Which part of the fused kernel costs what: time variants of its constants on one GPU.

Each variant changes one constant of :data:`impls.fused.ops.DEFAULTS` (histogram
bins ``nb``, workspace ``kmax``, ``block``, ``num_warps``) for a few grid points
and mixes; the differences place the time (METHOD: "time variants that leave
one stage out"). Usage: ``python -m benchmarks.fused_diag --out FILE.json``.
"""

from __future__ import annotations

import argparse
import json

import torch

from benchmarks.sampling import params, time_call
from impls.fused import ops


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="benchmarks/results/fused-diag.json")
    args = ap.parse_args(argv)
    dev = torch.device("cuda")
    base = dict(ops.DEFAULTS)
    variants = [("default", {}), ("nb=256", {"nb": 256}), ("kmax=256", {"kmax": 256}),
                ("nb=256,kmax=256", {"nb": 256, "kmax": 256}), ("block=1024", {"block": 1024}),
                ("num_warps=4", {"num_warps": 4})]
    rows = []
    for B, V in ((1024, 128256), (1, 128256)):
        x = torch.randn(B, V, device=dev) * 3
        inputs = [x, x.clone()]
        seed = torch.arange(B, dtype=torch.int64, device=dev)
        off = torch.zeros(B, dtype=torch.int64, device=dev)
        for mix in ("greedy", "k50_p09", "p09", "minp005"):
            T, K, P, M = params(mix, B, dev)
            _, _, path, _ = ops.fused_sample(x, T, K, P, M, seed, off)
            paths = sorted(set(path.tolist()))
            for name, change in variants:
                ops.DEFAULTS.clear()
                ops.DEFAULTS.update(base, **change)
                us = time_call(lambda y: ops.fused_sample(y, T, K, P, M, seed, off), inputs, 10)
                rows.append({"batch": B, "vocab": V, "mix": mix, "variant": name, "median_us": round(us, 1),
                             "paths": paths})
                print(f"B={B:<5} V={V} {mix:<8} {name:<18} {us:10.1f} us  paths {paths}", flush=True)
    ops.DEFAULTS.clear()
    ops.DEFAULTS.update(base)
    with open(args.out, "w") as f:
        json.dump({"schema": 1, "device": torch.cuda.get_device_name(), "defaults": base, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
