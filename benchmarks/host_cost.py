"""Host cost of one fused-sampler call on a GPU: where the time goes before the GPU has any work.

At small batches the fused sampler's eager latency is the host time of its launches (the GPU work
is a few µs per launch). This script measures, with ``time.perf_counter`` and no synchronisation
inside the timed loop (the GPU work of a batch-1 call is far shorter than its host time, so the
launch queue never fills):

* one whole ``fused_sample`` call;
* each of its launches through Triton's ``JITFunction`` (``kernel[grid](...)``, which binds the
  arguments, computes the specialisation key and looks the compiled kernel up at every call);
* the same launches as steps of the call's launch plan (:mod:`impls.fused.launch`: the compiled
  kernels, grids and constant arguments resolved once per call shape);
* the allocations of the outputs and workspaces (:func:`impls.fused.ops.allocate`), and the whole call
  with kept buffers (``buffers=``, no allocation);
* an all-greedy batch (temperature 0) without and with the caller's all-greedy hint (``greedy=True``:
  two launches instead of five), both with kept buffers;
* a :class:`impls.fused.bound.FusedSampler` call (parameters and buffers bound; the latency suite's
  call), general and all-greedy with the hint;
* the statistics launch of the call's plan three ways, to price each saving of
  :meth:`impls.fused.launch.Plan.run`: with tensor arguments and the launch metadata through the launcher's
  Python ``__call__`` (the plans until 2026-12-06), with addresses (``int``) instead of tensors, and with
  addresses through the C ``launch`` directly (the plans now);
* a ``cProfile`` listing of whole calls under each launcher (the 25 most expensive functions by own time;
  file names without their directories).

Usage: ``python -m benchmarks.host_cost --out FILE.json``. Needs CUDA.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import platform
import pstats
import time

import torch


def _per_call_us(fn, n: int) -> float:
    """Median over 5 rounds of the mean host time of ``n`` back-to-back calls, in µs."""
    rounds = []
    for _ in range(5):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        rounds.append((time.perf_counter() - t0) / n * 1e6)
        torch.cuda.synchronize()
    rounds.sort()
    return round(rounds[2], 2)


def _launch_variants(launch, x, T, K, P, M, seed, off, buf: dict, cfg: dict, n: int) -> dict:
    """Host µs of the plan's first launch (statistics) with tensors, with addresses, and with the direct C launch.

    ``buf`` holds the kept buffers a call of this shape already used (so its plan exists); no launch hook set.
    """
    from impls.fused.workspace import call_tensors
    vals = call_tensors(x, (T, K, P, M, seed, off), buf)
    plan = launch._PLANS[launch.plan_key(vals, buf["S"], buf["CH"], False, cfg)]
    ck, run, g, function, pre, get, _name = plan.steps[0]
    stream = launch._stream(x.device.index if x.device.index is not None else torch.cuda.current_device())
    full_t = get(vals + plan.consts)
    full_i = get(tuple(v.data_ptr() for v in vals) + plan.consts)
    variants = {
        "tensors_metadata_wrapper": lambda: ck.run(*g, stream, function, ck.packed_metadata,
                                                   ck.launch_metadata(g, stream, *full_t), None, None, *full_t),
        "addresses_wrapper": lambda: ck.run(*g, stream, function, ck.packed_metadata, None, None, None, *full_i),
        "addresses_direct": lambda: run(*g, stream, function, *pre, None, None, None, *full_i),
    }
    out = {"direct_launch": run is not ck.run}
    for name, fn in variants.items():
        out[name] = _per_call_us(fn, n)
    return out


def main(argv=None) -> int:
    """Measure and write the JSON; returns the exit status (2 without CUDA)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="benchmarks/results/host-cost.json")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--calls", type=int, default=50)
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("host_cost: needs a CUDA device")
        return 2
    import triton

    from impls.fused import launch, ops

    dev = torch.device("cuda")
    B, V, n = args.batch, args.vocab, args.calls
    x = torch.randn(B, V, device=dev) * 3
    T = torch.ones(B, device=dev)
    K = torch.full((B,), 50, dtype=torch.int64, device=dev)
    P = torch.full((B,), 0.9, device=dev)
    M = torch.zeros(B, device=dev)
    seed = torch.arange(B, dtype=torch.int64, device=dev)
    off = torch.zeros(B, dtype=torch.int64, device=dev)
    res: dict = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
                 "python": platform.python_version(), "cpu": platform.processor() or platform.machine(),
                 "batch": B, "vocab": V, "calls": n, "unit": "µs of host time per call"}

    def call(mode):
        return lambda: ops.fused_sample(x, T, K, P, M, seed, off, launcher=mode)

    for mode in ("jit", "cached"):
        call(mode)()
        torch.cuda.synchronize()
    a = ops.fused_sample(x, T, K, P, M, seed, off, launcher="jit")
    b = ops.fused_sample(x, T, K, P, M, seed, off, launcher="cached")
    res["same_tokens"] = bool(torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]))
    res["cached_fallback"] = launch.FALLBACK
    res["fused_sample_jit"] = _per_call_us(call("jit"), n)
    res["fused_sample_cached"] = _per_call_us(call("cached"), n)

    cfg = dict(ops.DEFAULTS)

    def alloc():
        ops.allocate(B, V, dev, cfg)

    res["allocations"] = _per_call_us(alloc, n)
    buf = ops.allocate(B, V, dev, cfg)
    res["fused_sample_cached_buffers"] = _per_call_us(
        lambda: ops.fused_sample(x, T, K, P, M, seed, off, buffers=buf), n)
    T0 = torch.zeros(B, device=dev)
    plain, hinted = (ops.fused_sample(x, T0, K, P, M, seed, off, greedy=g)[0] for g in (False, True))
    res["greedy_hint_same_tokens"] = bool(torch.equal(plain, hinted))
    for name, g in (("greedy_cached_buffers", False), ("greedy_hint_cached_buffers", True)):
        res[name] = _per_call_us(lambda g=g: ops.fused_sample(x, T0, K, P, M, seed, off, buffers=buf, greedy=g), n)
    res["per_launch"] = {}
    for mode in ("jit", "cached"):
        for name, fn in launch.single_launches(x, T, K, P, M, seed, off, cfg, mode):
            res["per_launch"][f"{name}_{mode}"] = _per_call_us(fn, n)

    res["launch_variants"] = _launch_variants(launch, x, T, K, P, M, seed, off, buf, cfg, n)
    from impls.fused.bound import FusedSampler
    for name, sampler in (("bound_sampler", FusedSampler(T, K, P, M, seed, off)),
                          ("bound_sampler_greedy_hint", FusedSampler(T0, K, P, M, seed, off, greedy=True))):
        sampler(x)
        res[name] = _per_call_us(lambda s=sampler: s(x), n)

    for mode in ("jit", "cached"):
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(n):
            ops.fused_sample(x, T, K, P, M, seed, off, launcher=mode)
        prof.disable()
        torch.cuda.synchronize()
        s = io.StringIO()
        pstats.Stats(prof, stream=s).strip_dirs().sort_stats("tottime").print_stats(25)  # file names only
        res[f"profile_{mode}"] = s.getvalue().splitlines()
    print(json.dumps({k: v for k, v in res.items() if not k.startswith("profile_")}, indent=1))
    with open(args.out, "w") as f:
        json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
