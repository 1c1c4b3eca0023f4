"""The fused sampler's tuning runs on a GPU: compile a set, pick the fastest, call once for a profiler.

Subcommands (``python -m benchmarks.tuning ...``; ``gpu_ci.sh`` stages ``tune``, ``ab`` and ``profile`` run them):

``warm SET [--dtype bf16]``
    Compile every launch of the fused sampler for one tuning set (Triton's disk cache), on a
    128 x 128256 batch: more rows than early accept's 64, so the same binaries as batches 256 and
    1024. Sets compile in parallel processes before :mod:`benchmarks.kernel_times` times them.
``pick FILE``
    Of the sets in a :mod:`benchmarks.kernel_times` file, the one with the least GPU time summed over
    its points and mixes (sets without every point are left out); prints the set (``name=value,...``
    or ``default``) on stdout and the ranking on stderr (:func:`pick`).
``compare BASE NEW``
    Two :mod:`benchmarks.kernel_times` files of one set (``gpu_ci.sh`` stage ``ab``: a base commit and
    this tree): per point and mix both totals and the change (:func:`compare`).
``call MIX SET [--point B:V] [--dtype bf16]``
    Two ``fused_sample`` calls on the latency suite's inputs: for Nsight Compute, which then profiles
    the second (``-s 5 -c 5``: the first call's five launches skipped).

Sets are ``name=value`` lists (:func:`impls.fused.ops.parse_tuning`). ``warm`` and ``call`` need CUDA.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys

__all__ = ["pick", "compare", "main"]


def pick(doc: dict) -> tuple:
    """The fastest tuning set of a :mod:`benchmarks.kernel_times` document.

    Parameters
    ----------
    doc : dict
        ``points``: rows with ``options`` (dict), ``batch``, ``vocab``, ``mix`` and ``total_us`` (µs of GPU time).

    Returns
    -------
    (str, list of (str, float, int))
        The set with the least summed ``total_us`` (``"default"`` for ``{}``), and every set as
        ``(set, sum_us, points)`` sorted by sum; only sets with as many points as the most complete
        one are ranked.

    Raises
    ------
    ValueError
        A document without points.
    """
    sums, counts = collections.defaultdict(float), collections.Counter()
    for r in doc.get("points") or ():
        key = ",".join(f"{k}={v}" for k, v in (r.get("options") or {}).items()) or "default"
        sums[key] += r["total_us"]
        counts[key] += 1
    if not sums:
        raise ValueError("no points: not a kernel_times results file with timed sets")
    full = max(counts.values())
    ranked = sorted(((k, round(v, 1), counts[k]) for k, v in sums.items() if counts[k] == full), key=lambda t: t[1])
    return ranked[0][0], ranked


def compare(base: dict, new: dict) -> list:
    """Per grid point and mix, the GPU time of two :mod:`benchmarks.kernel_times` documents.

    Parameters
    ----------
    base, new : dict
        ``points``: rows with ``batch``, ``vocab``, ``mix`` and ``total_us`` (µs of GPU time per call).

    Returns
    -------
    list of (int, int, str, float, float, float)
        ``(batch, vocab, mix, base_us, new_us, change)`` for the points both hold, sorted;
        ``change`` is ``new / base - 1``.

    Raises
    ------
    ValueError
        A document without points, or no point in common.
    """
    tabs = []
    for doc in (base, new):
        rows = doc.get("points") or ()
        if not rows:
            raise ValueError("no points: not a kernel_times results file")
        tabs.append({(r["batch"], r["vocab"], r["mix"]): r["total_us"] for r in rows})
    common = sorted(tabs[0].keys() & tabs[1].keys())
    if not common:
        raise ValueError("the two files have no point and mix in common")
    return [(*k, tabs[0][k], tabs[1][k], tabs[1][k] / tabs[0][k] - 1) for k in common]


def _batch(B: int, V: int, mix: str, dtype: str):
    import torch

    from benchmarks.latency import make_inputs, mix_tensors
    dev = torch.device("cuda")
    x = make_inputs(B, V, dev, dtype=dtype)[0]
    T, K, P, M = mix_tensors(mix, B, dev)
    return x, T, K, P, M, torch.arange(B, device=dev), torch.zeros(B, dtype=torch.int64, device=dev)


def main(argv=None) -> int:
    """Run a subcommand (module docstring); returns the exit status (2: usage, or no CUDA for warm/call)."""
    from benchmarks.kernel_times import parse_point
    from benchmarks.latency import LOGITS_DTYPES
    from impls.fused.ops import DEFAULTS, apply_tuning, parse_tuning
    ap = argparse.ArgumentParser(prog="python -m benchmarks.tuning", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("warm", help="compile one tuning set")
    w.add_argument("set")
    w.add_argument("--dtype", default="fp32", choices=tuple(LOGITS_DTYPES))
    p = sub.add_parser("pick", help="the fastest set of a kernel_times file")
    p.add_argument("file")
    cm = sub.add_parser("compare", help="two kernel_times files, point by point")
    cm.add_argument("base")
    cm.add_argument("new")
    c = sub.add_parser("call", help="two fused calls for a profiler")
    c.add_argument("mix")
    c.add_argument("set")
    c.add_argument("--point", default="1024:128256", help="batch:vocab")
    c.add_argument("--dtype", default="fp32", choices=tuple(LOGITS_DTYPES))
    args = ap.parse_args(argv)
    if args.cmd == "pick":
        try:
            with open(args.file, encoding="utf-8") as f:
                best, ranked = pick(json.load(f))
        except (OSError, ValueError, KeyError, TypeError) as e:
            print(f"{args.file}: {type(e).__name__}: {e}", file=sys.stderr)
            return 2
        for k, v, n in ranked:
            print(f"{k:<36} {v:10.1f} us over {n} points", file=sys.stderr)
        print(best)
        return 0
    if args.cmd == "compare":
        try:
            docs = []
            for path in (args.base, args.new):
                with open(path, encoding="utf-8") as f:
                    docs.append(json.load(f))
            rows = compare(*docs)
        except (OSError, ValueError, KeyError, TypeError) as e:
            print(f"benchmarks.tuning compare: {type(e).__name__}: {e}", file=sys.stderr)
            return 2
        for B, V, mix, b, n, ch in rows:
            print(f"{B:>5} x {V:<7} {mix:<8} base {b:9.1f} us  new {n:9.1f} us  {ch:+6.1%}")
        return 0
    try:
        opts = parse_tuning(args.set)
        apply_tuning(DEFAULTS, opts)
    except (TypeError, ValueError) as e:
        ap.error(f"set {args.set!r}: {e}")
    try:
        point = parse_point(args.point, "--point") if args.cmd == "call" else None
    except ValueError as e:
        ap.error(str(e))
    import torch
    if not torch.cuda.is_available():
        print(f"benchmarks.tuning {args.cmd}: needs a CUDA device", file=sys.stderr)
        return 2
    from impls.fused.ops import fused_sample
    if args.cmd == "warm":
        fused_sample(*_batch(128, 128256, "k50_p09", args.dtype), **opts)
    else:
        inputs = _batch(*point, args.mix, args.dtype)
        for _ in range(2):
            fused_sample(*inputs, **opts)
    torch.cuda.synchronize()
    print(f"{args.cmd} {args.set} ok")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
