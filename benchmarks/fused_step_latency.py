"""Latency of the fused sampler's whole step against its filters and draw alone, on one GPU.

At each ``(batch, vocab)`` point, with the same logits and ``k50_p09`` parameters
(``temperature 1, top_k 50, top_p 0.9``): ``fused_sample`` (the five filter
and draw launches), ``fused_step`` with rewrites only (a request's bias,
penalties over a 256-token history and bans, no logprobs), and ``fused_step``
with rewrites and logprobs (top 20). Each is timed eagerly and as a CUDA-graph
replay (workspace kept: :func:`impls.fused.step.allocate_step`), with CUDA
events after warm-up, median of ``--reps`` calls, inputs rotated among copies
beyond the 60 MB L2 (as :mod:`benchmarks.latency`). The step's extra cost is
the rewrite launch (one more read and write of the row) and the logprobs
launch (one more read, and the ``(B, V)`` float32 copy it reads).

Usage: ``python -m benchmarks.fused_step_latency --out FILE.json`` (CUDA only).
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from benchmarks.latency import hbm_bandwidth, make_inputs


def _step_args(B: int, V: int, dev, n_top: int):
    """:class:`impls.fused.step.StepInputs` of ``B`` requests: 8 bias entries, penalties over a 256-token
    history (prompt 200, generated 56), one bad word, the end id under ``min_length``, ``n_top`` top logprobs."""
    from impls.base import Row
    from impls.fused.step import pack_rows
    g = torch.Generator().manual_seed(B * 7 + V)
    rows = []
    for i in range(B):
        hist = torch.randint(0, V, (256,), generator=g).tolist()
        rows.append(Row(logits=torch.zeros(1), prompt=hist[:200], generated=hist[200:], repetition_penalty=1.1,
                        presence_penalty=0.2, frequency_penalty=0.1, prompt_ignore_length=16,
                        logit_bias=[(int(t), 1.0) for t in torch.randint(0, V, (8,), generator=g)],
                        bad_words=[[int(torch.randint(0, V, (1,), generator=g))]], end_id=2, min_length=100,
                        logprobs=n_top))
    inputs, errs = pack_rows([r.replace(logits=torch.zeros(V)) for r in rows], V, dev)
    assert errs == [None] * B
    return inputs


def time_fn(fn, inputs, reps: int, graph: bool) -> float:
    """Median µs of ``fn(x)`` over rotated inputs, eager or as a graph replay per input (CUDA events).

    Parameters
    ----------
    fn : callable
        Takes one ``(B, V)`` logits tensor.
    inputs : list of torch.Tensor
        The rotated copies (:func:`benchmarks.latency.make_inputs`).
    reps : int
        Timed calls (after 3 warm-up calls).
    graph : bool
        Capture one CUDA graph per input and time its replays.

    Returns
    -------
    float
        Median microseconds of one call.
    """
    for x in inputs[:3]:
        fn(x)
    torch.cuda.synchronize()
    calls = []
    if graph:
        for x in inputs:
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                fn(x)
            calls.append(g.replay)
    else:
        calls = [lambda x=x: fn(x) for x in inputs]
    times = []
    for i in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        calls[i % len(calls)]()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1000.0)
    times.sort()
    return times[len(times) // 2]


def main(argv=None) -> int:
    """Time the grid, print a table and write the JSON; 0 unless a call failed."""
    from impls.fused.ops import DEFAULTS, fused_sample
    from impls.fused.step import allocate_step, fused_step

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="benchmarks/results/fused-step-latency.json")
    ap.add_argument("--points", nargs="*", default=["1:32000", "1:128256", "64:128256", "256:128256"])
    ap.add_argument("--reps", type=int, default=30)
    args = ap.parse_args(argv)
    dev = torch.device("cuda")
    bw = hbm_bandwidth(dev)
    rows = []
    for pt in args.points:
        B, V = (int(v) for v in pt.split(":"))
        xs = make_inputs(B, V, dev)
        T = torch.full((B,), 1.0, device=dev)
        K = torch.full((B,), 50, dtype=torch.int64, device=dev)
        P = torch.full((B,), 0.9, device=dev)
        M = torch.zeros(B, device=dev)
        S = torch.arange(B, dtype=torch.int64, device=dev) + 7
        O = torch.zeros(B, dtype=torch.int64, device=dev)
        inp = _step_args(B, V, dev, 20)
        buf = allocate_step(B, V, dev, DEFAULTS, KL=32)
        variants = {
            "sample": lambda x: fused_sample(x, T, K, P, M, S, O),
            "step_rewrites": lambda x: fused_step(x, T, K, P, M, S, O, inputs=inp, want_probs=False,
                                                  want_logprobs=False, buffers=buf),
            "step_rewrites_logprobs": lambda x: fused_step(x, T, K, P, M, S, O, inputs=inp, want_probs=False,
                                                           want_logprobs=True, buffers=buf),
        }
        row = {"batch": B, "vocab": V, "floor_us": B * V * 4 / (bw * 1e9) * 1e6}
        for name, fn in variants.items():
            row[name + "_us"] = time_fn(fn, xs, args.reps, graph=False)
            row[name + "_graph_us"] = time_fn(fn, xs, args.reps, graph=True) if B <= 64 else None
        rows.append(row)
        print(json.dumps(row), flush=True)
    doc = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
           "triton": __import__("triton").__version__, "hbm_gbps": bw, "points": rows, "time": time.time()}
    with open(args.out, "w") as f:
        json.dump(doc, f, indent=1)
    cols = ["sample", "step_rewrites", "step_rewrites_logprobs"]
    print(f"{'batch':>6} {'vocab':>7} {'floor':>7} " + " ".join(f"{c + ' (graph)':>30}" for c in cols))
    for r in rows:
        cells = [f"{r[c + '_us']:10.1f} ({r[c + '_graph_us']:.1f})" if r[c + "_graph_us"] is not None
                 else f"{r[c + '_us']:10.1f} (-)" for c in cols]
        print(f"{r['batch']:>6} {r['vocab']:>7} {r['floor_us']:7.1f} " + " ".join(f"{c:>30}" for c in cells))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
