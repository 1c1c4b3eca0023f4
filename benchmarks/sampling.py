"""Latency of samplers on one GPU, against the HBM floor measured in the same run.

Implementations (all in this process, same inputs): the fused kernel
(:mod:`impls.fused`), FlashInfer's ``top_k_top_p_sampling_from_logits`` with
per-row tensors (and ``softmax`` + ``min_p_sampling_from_probs`` for the min-p
mix), a PyTorch sort-based path (temperature, sort, top-k and top-p masks,
softmax, exponential race — the shape of vLLM's native sampler), and
``torch.argmax``. Grid: batch × vocab × parameter mix. Each point: warm-up,
then the median of CUDA-event timings of single calls, the input rotating
among copies that together exceed the 60 MB L2 (so HBM, not the cache, is
measured). The floor is ``batch * vocab * 4 bytes`` over the device-to-device
copy bandwidth (bytes read plus written) measured at the start.

Superseded by the pytest-benchmark suite ``benchmarks/test_latency.py``
(``tox -e gpu``, docs/latency.md), which also times the reference and uses
CUDA graphs at small batches; kept because the committed
``results/h200-latency*.json`` files came from it.

Usage: ``python -m benchmarks.sampling --out benchmarks/results/h200.json``
(``--quick`` for a smaller grid). Writes the schema of DESIGN.md
("Benchmark results") and prints a table.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import time

import torch

from benchmarks.latency import MIXES, hbm_bandwidth, make_inputs, mix_params, time_point  # noqa: F401
from impls.peers import sort_based
# (shared with the pytest-benchmark suite; MIXES is re-exported for benchmarks/fused_diag.py)

def params(mix: str, B: int, dev):
    """Per-row tensors ``(temperature, top_k, top_p, min_p)`` of a mix (:func:`benchmarks.latency.mix_params`).

    Returns
    -------
    tuple of torch.Tensor
        ``(B,)`` float32, int64, float32, float32 on ``dev``.
    """
    T, K, P, M = zip(*mix_params(mix, B))
    return (torch.tensor(T, device=dev), torch.tensor(K, dtype=torch.int64, device=dev),
            torch.tensor(P, device=dev), torch.tensor(M, device=dev))


def point_setup(B: int, V: int, dev, bandwidth_gbps: float) -> tuple:
    """What every implementation of one grid point shares.

    Returns
    -------
    (list of torch.Tensor, float, torch.Tensor, torch.Tensor)
        The rotated ``(B, V)`` float32 inputs (:func:`benchmarks.latency.make_inputs`), the HBM floor in
        µs (``B * V * 4`` bytes at ``bandwidth_gbps`` GB/s), and the ``(B,)`` int64 seeds ``7..B+6`` and
        zero offsets of the fused kernel's rows.
    """
    inputs = make_inputs(B, V, dev)  # copies beyond L2, as the latency suite
    floor_us = B * V * 4 / (bandwidth_gbps * 1e9) * 1e6
    seed = torch.arange(B, dtype=torch.int64, device=dev) + 7
    off = torch.zeros(B, dtype=torch.int64, device=dev)
    return inputs, floor_us, seed, off


def time_call(fn, inputs, reps: int) -> float:
    """Median microseconds of single eager calls (:func:`benchmarks.latency.time_point` on the GPU)."""
    return time_point(fn, inputs, reps, graph=False, on_gpu=True)["median_us"]


def main(argv=None) -> int:
    """Run the grid and write the results file; returns the exit status."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="benchmarks/results/latency.json")
    ap.add_argument("--quick", action="store_true", help="a small grid (smoke test)")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--no-flashinfer", action="store_true")
    ap.add_argument("--fused-config", default="", help="override impls.fused.ops.DEFAULTS, e.g. block=4096,nb=2048")
    args = ap.parse_args(argv)
    from impls.fused import ops as fused_ops
    for item in filter(None, args.fused_config.split(",")):
        key, val = item.split("=")
        fused_ops.DEFAULTS[key] = type(fused_ops.DEFAULTS[key])(val)
    dev = torch.device("cuda")
    from impls.fused.ops import fused_sample
    batches = (1, 16, 64, 256, 1024) if not args.quick else (1, 256)
    vocabs = (32000, 128256, 151936, 262144) if not args.quick else (32000, 128256)
    fi = None
    versions = {"fused_config": dict(fused_ops.DEFAULTS), "torch": torch.__version__,
                "triton": __import__("triton").__version__,
                "python": platform.python_version(), "cuda": torch.version.cuda}
    if not args.no_flashinfer:
        try:
            import flashinfer
            fi = flashinfer.sampling
            versions["flashinfer"] = flashinfer.__version__
        except Exception as e:  # reported, not fatal
            versions["flashinfer"] = f"unavailable: {type(e).__name__}: {e}"
    try:
        versions["driver"] = subprocess.run(["nvidia-smi", "--query-gpu=driver_version,clocks.max.sm,clocks.max.mem",
                                             "--format=csv,noheader"], capture_output=True, text=True).stdout.strip()
    except OSError:
        versions["driver"] = "unknown"
    bw = hbm_bandwidth(dev)
    print(f"HBM copy bandwidth: {bw:.0f} GB/s", flush=True)
    rows = []
    for V in vocabs:
        for B in batches:
            inputs, floor_us, seed, off = point_setup(B, V, dev, bw)
            for mix in MIXES:
                T, K, P, M = params(mix, B, dev)
                impls = {
                    "fused": lambda x: fused_sample(x, T, K, P, M, seed, off),
                    "torch-sort": lambda x: sort_based(x, T, K, P, M),
                }
                if mix == "greedy":
                    impls["argmax"] = lambda x: x.argmax(-1)
                if fi is not None and mix in ("k50_p09", "p09"):
                    Ki = torch.where(K > 0, K, V).to(torch.int32)
                    impls["flashinfer"] = lambda x: fi.top_k_top_p_sampling_from_logits(x, Ki, P, deterministic=True)
                if fi is not None and mix == "minp005":
                    impls["flashinfer"] = lambda x: fi.min_p_sampling_from_probs(torch.softmax(x, -1), M,
                                                                                 deterministic=True)
                for name, fn in impls.items():
                    try:
                        us = time_call(fn, inputs, args.reps)
                    except Exception as e:  # one failing implementation never stops the grid
                        print(f"{name} B={B} V={V} {mix}: {type(e).__name__}: {e}", flush=True)
                        continue
                    rows.append({"impl": name, "batch": B, "vocab": V, "mix": mix, "median_us": round(us, 2),
                                 "floor_us": round(floor_us, 3)})
                    print(f"{name:>11} B={B:<5} V={V:<7} {mix:<8} {us:9.1f} us  floor {floor_us:7.2f} us", flush=True)
            del inputs
            torch.cuda.empty_cache()
    doc = {"schema": 1, "device": torch.cuda.get_device_name(), "versions": versions,
           "hbm_bandwidth_gbps": round(bw, 1), "timer": "CUDA events around single calls, median", "rows": rows,
           "date": time.strftime("%Y-%m-%d")}
    with open(args.out, "w") as f:
        json.dump(doc, f, indent=1)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
