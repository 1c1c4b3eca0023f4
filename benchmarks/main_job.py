"""The main job's own speed on CPU, measured (not a timed test; writes JSON).

``python -m benchmarks.main_job [--jobs reference,report] [--repeat 1] [--out benchmarks/results/main-job.json]``

Issue #19 item 9 sets two figures for the 2-core CPU machine at a load average of at most 1:

* ``reference``: ``sampcheck run --impl reference`` over the whole corpus, at most 15 s;
* ``report``: the corpus run of ``tox -e report``, ``sampcheck run --impl reference --impl
  transformers --impl transformers-beam``, at most 60 s.

Each job runs as a child process from the project root (workers and all, the way a user runs
it; the output goes to a temporary folder), ``--repeat`` times. Recorded per run: wall time,
CPU time of the run's processes (polled from ``/proc`` every 0.1 s over the run's process tree,
workers included: :class:`benchmarks.stat_memory._Poller`; load-independent to first order),
the load average before and after, the statuses, the sum of the cases' own ``seconds`` per
implementation, and the five slowest cases. A run *meets* its figure when its wall time is
at most the figure **and** the load average before and after it is at most 1; a run at a
higher load only says ``load_too_high`` (its wall time is an upper bound of the figure's).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

__all__ = ["JOBS", "run_job", "main"]

ROOT = Path(__file__).resolve().parent.parent

#: name -> (implementations, figure in seconds at load <= 1)
JOBS = {
    "reference": (["reference"], 15.0),
    "report": (["reference", "transformers", "transformers-beam"], 60.0),
}
#: The highest load average at which a run is judged against its figure.
MAX_LOAD = 1.0


def run_job(name: str) -> dict:
    """One run of job ``name`` (:data:`JOBS`) in a child process; its figures."""
    impls, figure = JOBS[name]
    with tempfile.TemporaryDirectory(prefix="sampcheck-mainjob-") as tmp:
        out = Path(tmp) / "out"
        cmd = [sys.executable, "-m", "harness", "run", "--out", str(out), "--no-progress"]
        for i in impls:
            cmd += ["--impl", i]
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT)] + [p for p in [os.environ.get("PYTHONPATH")]
                                                                          if p]))
        from benchmarks.stat_memory import _role, run_tree
        t = run_tree(cmd, env, ROOT)
        proc, stderr, wall, poll = t["proc"], t["stderr"], t["wall"], t["poll"]
        load0, load1 = t["load_before"], t["load_after"]
        res = json.loads((out / "results.json").read_text()) if (out / "results.json").exists() else None
    per_impl, statuses, slow = {}, Counter(), []
    for r in (res or {}).get("results", []):
        statuses[r["status"]] += 1
        s = float(r.get("seconds") or 0.0)
        per_impl[r["impl"]] = per_impl.get(r["impl"], 0.0) + s
        slow.append((s, r["impl"], r["case"]))
    slow.sort(reverse=True)
    load_ok = max(load0[0], load1[0]) <= MAX_LOAD
    return {
        "job": name, "impls": impls, "figure_seconds": figure, "exit_code": proc.returncode,
        "wall_seconds": round(wall, 2),
        "cpu_seconds": round(sum(p["cpu"] for p in poll.procs.values()), 2),
        "cpu_seconds_parent_only": round(t["rusage_children_cpu"], 2),
        "peak_rss_mib_largest_process": round(max((p["hwm"] for p in poll.procs.values()), default=0) / 2**20, 1),
        "processes": sorted(({"role": _role(p["cmd"]), "cpu_seconds": round(p["cpu"], 2),
                              "peak_rss_mib": round(p["hwm"] / 2**20, 1)} for p in poll.procs.values()),
                            key=lambda x: -x["cpu_seconds"]),
        "loadavg_before": [round(x, 2) for x in load0], "loadavg_after": [round(x, 2) for x in load1],
        "load_ok": load_ok, "within_figure": wall <= figure,
        "meets": (wall <= figure) if load_ok else "load_too_high",
        "results": sum(statuses.values()), "statuses": dict(statuses),
        "case_seconds_per_impl": {k: round(v, 2) for k, v in per_impl.items()},
        "slowest_cases": [{"seconds": round(s, 2), "impl": i, "case": c} for s, i, c in slow[:5]],
        "stderr_tail": stderr[-1500:] if proc.returncode not in (0, 1) else "",
    }


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            return next((ln.split(":", 1)[1].strip() for ln in fh if ln.startswith("model name")), "cpu")
    except OSError:
        return platform.processor() or "cpu"


def main(argv=None) -> int:
    """Run the jobs and write the JSON (the module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", default="reference,report", help="comma-separated: " + ", ".join(JOBS))
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/main-job.json"))
    args = ap.parse_args(argv)
    import torch
    runs = []
    for _ in range(args.repeat):
        for name in args.jobs.split(","):
            r = run_job(name.strip())
            runs.append(r)
            print(f"{r['job']}: {r['wall_seconds']} s wall, {r['cpu_seconds']} CPU s, load {r['loadavg_before'][0]} -> "
                  f"{r['loadavg_after'][0]}, figure {r['figure_seconds']} s: meets = {r['meets']}; "
                  f"{r['results']} results {r['statuses']}", flush=True)
    doc = {"what": "the main job's own speed on CPU (benchmarks/main_job.py, issue #19 item 9)",
           "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
           "machine": f"{platform.machine()}, {os.cpu_count()} cores, {_cpu_model()}",
           "python": platform.python_version(), "torch": torch.__version__,
           "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                    cwd=ROOT).stdout.strip(),
           "max_load": MAX_LOAD, "runs": runs}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
