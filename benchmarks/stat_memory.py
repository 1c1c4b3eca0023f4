"""Peak resident memory of one huge statistical case run through the judge (not a test; writes JSON).

``python -m benchmarks.stat_memory [--vocab 1048576] [--draws 1000] [--sigma 3] [--top-p P]
[--impl reference] [--no-isolation] [--timeout 1800] [--out benchmarks/results/stat-memory-2-20.json]``

Writes one statistical case into an empty corpus folder (``SAMPCHECK_CASES``): one row of
``vocab`` logits ``standard_normal * sigma`` (seed 1), ``T = 1``, no filter unless ``--top-p``
(every token kept: the reference draws over the whole vocabulary), ``draws`` the case's budget.
Then runs ``sampcheck run --impl IMPL`` on it as a child process, the way a user does: plan
(the cap binds, so the achieved epsilon is reported), ``N`` canonical draws through
``ReferenceSession.sample_many`` (kept-token blocks of at most 2^18 scores), support check and
test. The figures come from polling ``/proc`` every 0.1 s for the run's process tree (the
workers are children of multiprocessing's fork server, which ``RUSAGE_CHILDREN`` does not
see): the peak resident memory (``VmHWM``) of each process, the largest of them, and the
largest sum of ``VmRSS`` over the tree at one poll. Also records the status, verdict, ``N``,
wall and CPU time (CPU from the processes' ``/proc/PID/stat`` at their last poll), and the
load average (the machine is shared).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

__all__ = ["case_text", "measure", "run_tree", "main"]

ROOT = Path(__file__).resolve().parent.parent


def case_text(vocab: int, draws: int, sigma: float, top_p) -> str:
    """The case file: one statistical row over ``vocab`` generated logits."""
    cid = f"filters/vocab-{vocab}-statistical"
    lines = [
        "schema = 1", f'id = "{cid}"',
        f'description = "{draws} draws of one row of {vocab} generated logits (memory benchmark)"',
        'category = "filters"', 'features = ["temperature", "seed"' + (', "top_p"' if top_p is not None else "") + "]",
        'source = { url = "https://github.com/NVIDIA/TensorRT-LLM/issues/1" }',
        'check = "statistical"', f"draws = {draws}", "",
        "[[rows]]", f'logits = {{ dist = "normal", vocab = {vocab}, seed = 1, sigma = {sigma} }}',
        "temperature = 1.0", "seed = 1",
    ]
    if top_p is not None:
        lines.append(f"top_p = {top_p}")
    return "\n".join(lines) + "\n"


def _tree(root: int) -> list:
    """``root`` and its descendants (pids), from ``/proc/*/stat``."""
    kids: dict = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as fh:
                st = fh.read()
        except OSError:
            continue
        ppid = int(st[st.rindex(")") + 2:].split()[1])
        kids.setdefault(ppid, []).append(int(d))
    out, todo = [], [root]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(kids.get(p, []))
    return out


def _status(pid: int) -> dict:
    """``VmHWM``, ``VmRSS`` (bytes), CPU seconds and command line of ``pid`` (empty if it is gone)."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            kv = dict(line.split(":", 1) for line in fh if ":" in line)
        with open(f"/proc/{pid}/stat") as fh:
            st = fh.read()
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            cmd = fh.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return {}
    f = st[st.rindex(")") + 2:].split()
    tick = os.sysconf("SC_CLK_TCK")
    kb = lambda k: int(kv.get(k, "0 kB").split()[0]) * 1024  # noqa: E731
    return {"hwm": kb("VmHWM"), "rss": kb("VmRSS"), "cpu": (int(f[11]) + int(f[12])) / tick, "cmd": cmd}


class _Poller(threading.Thread):
    """Polls the process tree of ``root`` until stopped: peak VmHWM per pid, largest summed VmRSS."""

    def __init__(self, root: int, every: float = 0.1):
        super().__init__(daemon=True)
        self.root, self.every, self.stop = root, every, threading.Event()
        self.procs: dict = {}
        self.max_sum_rss = 0

    def run(self) -> None:
        while not self.stop.is_set():
            total = 0
            for pid in _tree(self.root):
                st = _status(pid)
                if not st:
                    continue
                total += st["rss"]
                old = self.procs.get(pid, {})
                self.procs[pid] = {"hwm": max(st["hwm"], old.get("hwm", 0)), "cpu": st["cpu"],
                                   "cmd": old.get("cmd") or st["cmd"][:160]}
            self.max_sum_rss = max(self.max_sum_rss, total)
            self.stop.wait(self.every)


def run_tree(cmd: list, env: dict, cwd) -> dict:
    """Run ``cmd`` to its end while a :class:`_Poller` reads its process tree from ``/proc``.

    Returns
    -------
    dict
        ``proc`` (the finished ``Popen``), ``stderr`` (str), ``wall`` (seconds), ``poll`` (the
        poller: ``procs`` per pid with ``hwm`` bytes and ``cpu`` seconds, ``max_sum_rss`` bytes),
        ``rusage_children_cpu`` (user + system seconds ``RUSAGE_CHILDREN`` saw: the direct child only,
        not multiprocessing's workers), ``load_before`` and ``load_after`` (``os.getloadavg()``).
    """
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    load0 = os.getloadavg()
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    poll = _Poller(proc.pid)
    poll.start()
    _, stderr = proc.communicate()
    wall = time.perf_counter() - t0
    poll.stop.set()
    poll.join()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {"proc": proc, "stderr": stderr, "wall": wall, "poll": poll, "load_before": load0,
            "load_after": os.getloadavg(),
            "rusage_children_cpu": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)}


def _role(cmd: str) -> str:
    if "forkserver" in cmd:
        return "fork server or a worker forked from it"
    if "resource_tracker" in cmd:
        return "resource tracker"
    return "sampcheck run (parent)" if "harness" in cmd else cmd[:40]


def measure(vocab: int = 1 << 20, draws: int = 1000, sigma: float = 3.0, top_p=None, impl: str = "reference",
            isolation: bool = True, timeout: int = 1800) -> dict:
    """Run the case once in a child ``sampcheck run`` and return the figures (module docstring)."""
    with tempfile.TemporaryDirectory(prefix="sampcheck-mem-") as tmp:
        corpus = Path(tmp) / "cases"
        (corpus / "filters").mkdir(parents=True)
        (corpus / "filters" / f"vocab-{vocab}-statistical.toml").write_text(case_text(vocab, draws, sigma, top_p))
        out = Path(tmp) / "out"
        cmd = [sys.executable, "-m", "harness", "run", "--impl", impl, "--out", str(out), "--no-progress",
               "--timeout", str(timeout)] + ([] if isolation else ["--no-isolation"])
        env = dict(os.environ, SAMPCHECK_CASES=str(corpus),
                   PYTHONPATH=os.pathsep.join([str(ROOT)] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
        t = run_tree(cmd, env, tmp)
        proc, stderr, wall, poll, load0 = t["proc"], t["stderr"], t["wall"], t["poll"], t["load_before"]
        res = json.loads((out / "results.json").read_text()) if (out / "results.json").exists() else None
    row = {}
    entry = None
    if res:
        entry = next((r for r in res["results"] if r["impl"] == impl), None)
        rows = ((entry or {}).get("details") or {}).get("rows") or []
        if rows:
            r = rows[0]
            row = {"verdict": r.get("verdict"), "reason": r.get("reason"), "n": r.get("n"),
                   "achieved_epsilon": (r.get("plan") or {}).get("achieved_epsilon")}
    return {
        "vocab": vocab, "draws_budget": draws, "sigma": sigma, "top_p": top_p, "impl": impl,
        "isolation": isolation, "exit_code": proc.returncode,
        "status": entry["status"] if entry else None, "row": row,
        "peak_rss_mib_largest_process": round(max((p["hwm"] for p in poll.procs.values()), default=0) / 2**20, 1),
        "peak_rss_mib_tree_sum": round(poll.max_sum_rss / 2**20, 1),
        "processes": sorted(({"role": _role(p["cmd"]), "peak_rss_mib": round(p["hwm"] / 2**20, 1),
                              "cpu_seconds": round(p["cpu"], 1)} for p in poll.procs.values()),
                            key=lambda x: -x["peak_rss_mib"]),
        "peak_rss_note": "VmHWM of each process of the run's tree, polled every 0.1 s from /proc",
        "wall_seconds": round(wall, 1),
        "cpu_seconds": round(sum(p["cpu"] for p in poll.procs.values()), 1),
        "cpu_seconds_rusage_children": round(t["rusage_children_cpu"], 1),
        "loadavg_before": [round(x, 2) for x in load0], "loadavg_after": [round(x, 2) for x in t["load_after"]],
        "stderr_tail": stderr[-2000:] if proc.returncode not in (0, 1) else "",
    }


def main(argv=None) -> int:
    """Measure and write the JSON (the module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vocab", type=int, default=1 << 20)
    ap.add_argument("--draws", type=int, default=1000)
    ap.add_argument("--sigma", type=float, default=3.0)
    ap.add_argument("--top-p", type=float, default=None)
    ap.add_argument("--impl", default="reference")
    ap.add_argument("--no-isolation", action="store_true")
    ap.add_argument("--timeout", type=int, default=1800)
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/stat-memory-2-20.json"))
    args = ap.parse_args(argv)
    import torch
    m = measure(args.vocab, args.draws, args.sigma, args.top_p, args.impl, not args.no_isolation, args.timeout)
    doc = {"what": "peak RSS of one statistical case run through the judge (benchmarks/stat_memory.py)",
           "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
           "machine": f"{platform.machine()}, {os.cpu_count()} cores", "python": platform.python_version(),
           "torch": torch.__version__,
           "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                    cwd=ROOT).stdout.strip(), **m}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"vocab {m['vocab']}, budget {m['draws_budget']}: {m['status']} ({m['row'].get('verdict')}, "
          f"N = {m['row'].get('n')}); peak RSS {m['peak_rss_mib_largest_process']} MiB (largest process), "
          f"{m['peak_rss_mib_tree_sum']} MiB (whole tree at once), "
          f"{m['wall_seconds']} s wall, {m['cpu_seconds']} CPU s, load {m['loadavg_before']} -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
