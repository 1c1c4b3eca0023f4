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
``torch_threads``, ``vllm_sampler``), ``hbm_bandwidth_gbps``, ``timer``,
``date``, ``duration_s``, ``cpu_load`` (load averages at the start and the
end) and ``rows`` of ``{impl, batch, vocab, mix, median_us, floor_us}`` plus
optional ``graph``, ``reps``, ``p10_us``, ``p90_us``, ``device``. A file
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

__all__ = ["MIXES", "BATCHES", "VOCABS", "QUICK", "CPU_GRID", "CPU_MAX_ELEMENTS", "IMPLS", "DEVICE", "SLOW",
           "GRAPH_MAX_BATCH", "Point", "mix_params", "mix_tensors", "default_grid", "hbm_bandwidth", "make_inputs",
           "build", "vllm_unavailable", "time_point", "environment", "sort_based"]

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
#: Implementations, in the report's order. ``vllm-cpu`` is vLLM's own V1
#: ``Sampler`` from its CPU build (``vllm-cpu``, tox env ``vllm-cpu``): vLLM
#: cannot be brought to the project's GPU machine (docs/latency.md), so it is
#: timed on a CPU only, next to the CPU runs of ``torch-sort``, ``argmax`` and
#: ``reference-cpu``.
IMPLS = ("fused", "flashinfer", "vllm-cpu", "torch-sort", "argmax", "reference-cuda", "reference-cpu")
#: Where each implementation runs: the CPU ones are timed on the CPU even on a GPU machine.
DEVICE = {"fused": "cuda", "flashinfer": "cuda", "vllm-cpu": "cpu", "reference-cuda": "cuda", "reference-cpu": "cpu",
          "torch-sort": "any", "argmax": "any"}
#: Per-row Python pipelines: few timed calls (seconds per call at batch 16) and one warm-up.
SLOW = frozenset({"reference-cuda", "reference-cpu"})
#: Largest batch timed as a CUDA-graph replay.
GRAPH_MAX_BATCH = 64
#: The reference is a per-row Python pipeline: timed only at these batches and vocabularies.
REFERENCE_GRID = {"batches": (1, 16), "vocabs": (32000, 128256)}

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
        (:func:`mix_params`).

    Raises
    ------
    KeyError
        For an unknown mix.
    """
    rows = mix_params(mix, batch)
    dtypes = (torch.float32, torch.int64, torch.float32, torch.float32)
    return tuple(torch.tensor([r[i] for r in rows], dtype=dt, device=dev) for i, dt in enumerate(dtypes))


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


def make_inputs(batch: int, vocab: int, dev, seed: int = 0) -> list:
    """Copies of ``randn(batch, vocab) * 3``: enough to exceed 256 MB together, but at most 8.

    Below 32 MB per copy (``batch * vocab < 8388608``) the 8 copies hold
    less than 256 MB and may stay in a cache between uses.

    Parameters
    ----------
    batch, vocab : int
    dev : torch.device
    seed : int
        Seed of the generator on ``dev`` (inputs repeat from run to run).

    Returns
    -------
    list of torch.Tensor
        Each ``(batch, vocab)`` float32 on ``dev``.
    """
    nbytes = batch * vocab * 4
    copies = max(1, min(8, (256 << 20) // nbytes + 1))
    g = torch.Generator(device=dev).manual_seed(seed)
    return [torch.randn(batch, vocab, device=dev, generator=g) * 3 for _ in range(copies)]


def sort_based(logits, T, K, P, M):
    """PyTorch sort-based sampling (the shape of vLLM's native path): temperature, min-p, top-k, top-p, race.

    Parameters
    ----------
    logits : torch.Tensor
        ``(B, V)`` float32.
    T, P, M : torch.Tensor
        ``(B,)`` float32 temperature (0: greedy), top-p, min-p.
    K : torch.Tensor
        ``(B,)`` int64 top-k (0: off).

    Returns
    -------
    torch.Tensor
        ``(B,)`` int64 tokens.
    """
    x = logits.float() / torch.where(T > 0, T, 1.0).unsqueeze(1)
    probs = torch.softmax(x, -1)
    keep_minp = probs >= (M.unsqueeze(1) * probs.max(-1, keepdim=True).values)
    x = x.masked_fill(~keep_minp, float("-inf"))
    xs, order = x.sort(-1, descending=True)
    V = x.shape[1]
    k = torch.where((K > 0) & (K < V), K, V)
    kth = xs.gather(1, (k - 1).unsqueeze(1))
    xs = xs.masked_fill(xs < kth, float("-inf"))
    ps = torch.softmax(xs, -1)
    cum = ps.cumsum(-1) - ps
    xs = xs.masked_fill(cum >= P.unsqueeze(1), float("-inf"))
    ps = torch.softmax(xs, -1)
    q = torch.empty_like(ps).exponential_()
    pick = (ps / q).argmax(-1)
    tok = order.gather(1, pick.unsqueeze(1)).squeeze(1)
    return torch.where(T > 0, tok, logits.argmax(-1))


def _flashinfer_call(mix: str, batch: int, vocab: int, dev) -> Callable:
    """FlashInfer for a mix, with per-row tensors (greedy rows as top_k = 1, SGLang's convention).

    ``minp005`` is ``softmax`` + ``min_p_sampling_from_probs``; ``mixed``
    splits the batch into a ``top_k_top_p_sampling_from_logits`` call and a
    min-p call (no FlashInfer function applies min-p with top-k/top-p).
    """
    import flashinfer.sampling as fs
    rows = mix_params(mix, batch)
    seed = torch.arange(batch, dtype=torch.int64, device=dev) + 7
    off = torch.zeros(batch, dtype=torch.int64, device=dev)
    kp = [i for i, r in enumerate(rows) if r[3] == 0.0]
    mp = [i for i, r in enumerate(rows) if r[3] > 0.0]
    K = torch.tensor([(1 if r[0] == 0 else (r[1] or vocab)) for r in rows], dtype=torch.int32, device=dev)
    P = torch.tensor([r[2] for r in rows], dtype=torch.float32, device=dev)
    M = torch.tensor([r[3] for r in rows], dtype=torch.float32, device=dev)
    if not mp:
        return lambda x: fs.top_k_top_p_sampling_from_logits(x, K, P, deterministic=True, seed=seed, offset=off)
    if not kp:
        return lambda x: fs.min_p_sampling_from_probs(torch.softmax(x, -1), M, deterministic=True, seed=seed,
                                                      offset=off)
    ikp = torch.tensor(kp, device=dev)
    imp = torch.tensor(mp, device=dev)
    Kk, Pk, Mm = K[ikp], P[ikp], M[imp]
    sk, ok, sm, om = seed[ikp], off[ikp], seed[imp], off[imp]

    def call(x):
        out = torch.empty(batch, dtype=torch.int32, device=dev)
        out[ikp] = fs.top_k_top_p_sampling_from_logits(x[ikp], Kk, Pk, deterministic=True, seed=sk, offset=ok)
        out[imp] = fs.min_p_sampling_from_probs(torch.softmax(x[imp], -1), Mm, deterministic=True, seed=sm,
                                                offset=om)
        return out
    return call


def _reference_call(mix: str, batch: int, device: str) -> Callable:
    from impls.base import Row
    from impls.reference import Reference
    impl = Reference()
    rows = mix_params(mix, batch)

    def call(x):
        xs = x.to(device)
        batch_rows = [Row(xs[i], temperature=t, top_k=k, top_p=p, min_p=m, seed=7 + i, slot=i)
                      for i, (t, k, p, m) in enumerate(rows)]
        return impl.open_session(device).step(batch_rows)
    return call


def vllm_unavailable() -> Optional[str]:
    """Why vLLM's sampler cannot be timed here, or None.

    The import check is the vLLM adapter's (:meth:`impls.vllm.VllmImpl.available`).
    The suite times vLLM's CPU build only: on any other build
    ``TopKTopPSampler.__init__`` (vllm/v1/sample/ops/topk_topp_sampler.py,
    vLLM 0.32.0) binds another ``forward`` (``forward_cuda``, ...) and the
    adapter's metadata (:func:`impls.vllm.engine.make_metadata`) is built on
    the CPU.

    Returns
    -------
    str or None
        ``"vllm is not importable: <exception>"``, a sentence naming the
        platform of a non-CPU build, or None when the CPU build imports.
    """
    from impls.vllm import VllmImpl
    why = VllmImpl().available("cpu")
    if why is not None:
        return why
    from vllm.platforms import current_platform
    if not current_platform.is_cpu():
        return (f"the installed vLLM targets {current_platform.device_type!r}, not the CPU: the suite times "
                f"vLLM's CPU build (vllm-cpu) only")
    return None


def _vllm_call(mix: str, batch: int, vocab: int) -> Callable:
    """vLLM's ``Sampler.forward(logits, sampling_metadata)`` for a mix, metadata built once.

    Each row becomes ``SamplingParams`` through the adapter's validation
    (:func:`impls.vllm.engine.make_params`), and the batch a
    ``SamplingMetadata`` as ``InputBatch`` builds it
    (:func:`impls.vllm.engine.make_metadata`; no logprobs, no penalties,
    unseeded rows: the noise of ``forward_cpu`` comes from torch's global
    generator). The sampler is ``Sampler(logprobs_mode="raw_logprobs")`` as
    the model runner builds it (:class:`impls.vllm.engine.Samplers`).

    ``Sampler.forward`` writes into its logits (vllm/v1/sample/sampler.py,
    vLLM 0.32.0: ``apply_temperature`` divides in place; the min-p processor
    of vllm/v1/sample/logits_processor/builtin.py and
    ``apply_top_k_top_p_pytorch`` of vllm/v1/sample/ops/topk_topp_sampler.py
    mask in place), so the callable is marked ``writes_input``:
    :func:`time_point` gives each input back its values after each call,
    untimed (in the engine the logits are fresh from the model at every step).

    Parameters
    ----------
    mix : str
        One of :data:`MIXES`.
    batch, vocab : int

    Returns
    -------
    callable
        ``call(logits)``: ``logits`` ``(batch, vocab)`` float32 on the CPU
        (overwritten unless every row is greedy) -> ``(batch, 1)`` int32
        token ids (``SamplerOutput.sampled_token_ids``); attribute
        ``writes_input`` True.

    Raises
    ------
    ImportError
        When vLLM is not importable (check :func:`vllm_unavailable` first).
    """
    from impls.base import Row
    from impls.vllm import engine
    rows = [Row(torch.zeros(vocab), temperature=t, top_k=k, top_p=p, min_p=m, slot=i)
            for i, (t, k, p, m) in enumerate(mix_params(mix, batch))]
    params = [engine.make_params(r) for r in rows]
    md = engine.make_metadata(params, rows, {}, with_logprobs=False)
    sampler = engine.Samplers().raw

    def call(x):
        return sampler(x, md).sampled_token_ids
    call.writes_input = True
    return call


def build(point: Point, dev) -> tuple:
    """The callable for a grid point and whether it may be graph-captured.

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
        cannot run here, ``reason`` says why (for ``vllm-cpu``:
        :func:`vllm_unavailable`). ``fn`` may be marked ``writes_input``
        (:func:`time_point`).
    """
    impl, mix, B, V = point.impl, point.mix, point.batch, point.vocab
    if impl == "vllm-cpu":
        why = vllm_unavailable()
        if why is not None:
            return None, False, why
        if torch.device(dev).type != "cpu":
            return None, False, "vllm-cpu is timed on CPU inputs only"
        return _vllm_call(mix, B, V), False, ""
    T, K, P, M = mix_tensors(mix, B, dev)
    seed = torch.arange(B, dtype=torch.int64, device=dev) + 7
    off = torch.zeros(B, dtype=torch.int64, device=dev)
    if impl == "fused":
        from impls.fused.ops import fused_sample
        return (lambda x: fused_sample(x, T, K, P, M, seed, off)), True, ""
    if impl == "torch-sort":
        return (lambda x: sort_based(x, T, K, P, M)), False, ""
    if impl == "argmax":
        if mix != "greedy":
            return None, False, "argmax is timed on all-greedy batches only"
        return (lambda x: x.argmax(-1)), True, ""
    if impl == "flashinfer":
        try:
            import flashinfer.sampling  # noqa: F401
        except Exception as e:  # reported as the skip reason
            return None, False, f"flashinfer is not importable: {type(e).__name__}: {e}"
        return _flashinfer_call(mix, B, V, dev), mix != "mixed", ""
    if impl in ("reference-cuda", "reference-cpu"):
        if B not in REFERENCE_GRID["batches"] or V not in REFERENCE_GRID["vocabs"]:
            return None, False, (f"the reference (a per-row Python pipeline) is timed at batch "
                                 f"{REFERENCE_GRID['batches']} and vocab {REFERENCE_GRID['vocabs']} only")
        return _reference_call(mix, B, "cuda" if impl == "reference-cuda" else "cpu"), False, ""
    raise KeyError(f"unknown implementation {impl!r}; known: {', '.join(IMPLS)}")


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
        ``fused_config``, ``driver`` and ``clocks`` (nvidia-smi at the call).
    """
    versions = {"torch": torch.__version__, "python": platform.python_version(), "cuda": torch.version.cuda}
    for mod in ("triton", "flashinfer", "vllm"):
        try:
            versions[mod] = __import__(mod).__version__
        except Exception as e:
            versions[mod] = f"unavailable ({type(e).__name__})"
    if vllm_unavailable() is None:
        try:
            from impls.vllm import engine
            versions["vllm_sampler"] = engine.path_description()
        except Exception as e:  # recorded, not fatal: the points say whether vLLM ran
            versions["vllm_sampler"] = f"unknown ({type(e).__name__}: {e})"
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
