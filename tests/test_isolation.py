"""Tests of process isolation and the incremental journal (harness/run/isolation.py, DESIGN.md decision 5).

Each test builds a tiny corpus of greedy cases. The implementations below
misbehave on the case whose first logit is a marker value (a kill from
outside, a fatal signal, a hang); every other case must come out right, and
results.json must be complete.
"""

from __future__ import annotations

import json
import os
import signal
import textwrap
import threading
import time
from pathlib import Path

import pytest
import torch

from harness.run.isolation import Journal
from harness.run.runner import run
from impls.profiles import TRTLLM
from impls.reference import Reference

pytestmark = pytest.mark.skipif(not hasattr(os, "fork") or not os.path.isdir("/proc/self/task"),
                                reason="these tests use fork-based start methods and /proc")

CASE = """schema = 1
id = "greedy/{name}"
description = "d"
category = "greedy"
features = ["temperature"]
source = {{ url = "https://github.com/NVIDIA/TensorRT-LLM/issues/1" }}
check = "exact"

[[rows]]
logits = [{first}, 1.0, 3.0]
temperature = 0.0
[rows.expect]
token = {token}
"""

MARK = 7.5  # first logit of the case the misbehaving implementations pick on


def corpus(tmp_path: Path) -> Path:
    root = tmp_path / "cases"
    (root / "greedy").mkdir(parents=True)
    for name, first, token in (("a", 0.0, 2), ("b", MARK, 0), ("c", 2.0, 2)):
        (root / "greedy" / f"{name}.toml").write_text(textwrap.dedent(CASE.format(name=name, first=first,
                                                                                  token=token)))
    return root


class Misbehaves(Reference):
    """The reference, except on the marked case: ``how`` is "pidfile" (write the pid, then
    sleep until killed), "segv" (fatal signal), "hang", "cuda" (raise a CUDA error) or "hog"
    (hold 256 MiB for a second, create ``pidfile`` as a marker, then die of SIGKILL as the
    out-of-memory killer ends a process)."""

    def __init__(self, how: str, pidfile: Path = None):
        super().__init__(TRTLLM, name=f"bad-{how}")
        self.how, self.pidfile = how, pidfile

    def open_session(self, device="cpu"):
        inner = super().open_session(device)
        how, pidfile = self.how, self.pidfile

        class S:
            def step(self, rows):
                if any(float(r.logits[0]) == MARK for r in rows):
                    if how == "pidfile":
                        pidfile.write_text(str(os.getpid()))
                        time.sleep(120)
                    elif how == "segv":
                        os.kill(os.getpid(), signal.SIGSEGV)
                    elif how == "hang":
                        time.sleep(120)
                    elif how == "cuda":
                        raise RuntimeError("CUDA error: device-side assert triggered")
                    elif how == "hog":
                        hog = torch.ones(64 << 20, dtype=torch.float32)  # 256 MiB, touched
                        time.sleep(1.0)
                        pidfile.write_text(str(float(hog[-1])))
                        os.kill(os.getpid(), signal.SIGKILL)
                return inner.step(rows)
        return S()


def by_pair(doc):
    return {(r["case"], r["impl"]): r for r in doc["results"]}


def test_killing_a_worker_mid_run(tmp_path):
    root = corpus(tmp_path)
    out = tmp_path / "r"
    pidfile = tmp_path / "victim.pid"
    seen = {}

    def killer():
        deadline = time.monotonic() + 60
        while not pidfile.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        # Results obtained before the kill are already on disk.
        seen["journal"] = Journal(out / Journal.NAME).read()[1]
        os.kill(int(pidfile.read_text()), signal.SIGKILL)

    t = threading.Thread(target=killer)
    t.start()
    outcome = run(["reference", Misbehaves("pidfile", pidfile)], None, out, progress=False, root=root, timeout=90)
    t.join()
    st = by_pair(outcome.doc)
    assert st[("greedy/b", "bad-pidfile")]["status"] == "error"
    assert "SIGKILL" in st[("greedy/b", "bad-pidfile")]["details"]["message"]
    for cid in ("greedy/a", "greedy/c"):
        assert st[(cid, "bad-pidfile")]["status"] == "pass"
    assert all(st[(c, "reference")]["status"] == "pass" for c in ("greedy/a", "greedy/b", "greedy/c"))
    assert {(r["case"], r["impl"]) for r in seen["journal"]} >= {("greedy/a", "reference"), ("greedy/a", "bad-pidfile")}
    doc = json.loads((out / "results.json").read_text())
    assert len(doc["results"]) == 6 and doc["run"]["finished"]
    assert doc["run"]["impls"]["bad-pidfile"]["worker_restarts"] == 1
    assert doc["run"]["impls"]["reference"]["isolation"] == "process"
    assert not (out / Journal.NAME).exists()  # the run completed: the journal is gone
    assert outcome.exit_code == 1


def test_fatal_signal_is_an_error_with_the_stack(tmp_path):
    root = corpus(tmp_path)
    outcome = run([Misbehaves("segv")], None, tmp_path / "r", progress=False, root=root)
    st = by_pair(outcome.doc)
    msg = st[("greedy/b", "bad-segv")]["details"]["message"]
    assert st[("greedy/b", "bad-segv")]["status"] == "error" and "SIGSEGV" in msg
    assert "worker log" in msg
    # faulthandler's report from the worker's log (an engine's own handler, such as the one an
    # imported vLLM leaves behind, may report instead: then its stack is quoted).
    assert "Fatal Python error" in msg or "Segfault encountered" in msg
    assert st[("greedy/a", "bad-segv")]["status"] == st[("greedy/c", "bad-segv")]["status"] == "pass"


def test_hang_times_out_and_the_worker_restarts(tmp_path):
    root = corpus(tmp_path)
    t0 = time.monotonic()
    outcome = run([Misbehaves("hang")], None, tmp_path / "r", progress=False, root=root, timeout=3)
    assert time.monotonic() - t0 < 60
    st = by_pair(outcome.doc)
    assert st[("greedy/b", "bad-hang")]["status"] == "error"
    assert "timed out after 3 s" in st[("greedy/b", "bad-hang")]["details"]["message"]
    assert st[("greedy/c", "bad-hang")]["status"] == "pass"


def test_out_of_memory_kill_is_named_with_the_peak_memory(tmp_path, monkeypatch):
    # The kernel's OOM killer cannot be provoked safely on a shared machine: the worker dies of
    # SIGKILL itself, and the kernel's count of OOM kills is faked to rise meanwhile.
    from harness.run import isolation
    marker = tmp_path / "killed"
    monkeypatch.setattr(isolation, "_oom_kills", lambda events=None: {"system": 3 + marker.exists()})
    root = corpus(tmp_path)
    outcome = run([Misbehaves("hog", marker)], None, tmp_path / "r", progress=False, root=root)
    st = by_pair(outcome.doc)
    d = st[("greedy/b", "bad-hog")]["details"]
    assert st[("greedy/b", "bad-hog")]["status"] == "error" and d["isolation"] == "crash"
    assert d["oom_killed"] is True and "out-of-memory killer" in d["message"]
    assert d["peak_rss_bytes"] >= 256 << 20 and "peak resident memory seen" in d["message"]
    assert st[("greedy/a", "bad-hog")]["status"] == st[("greedy/c", "bad-hog")]["status"] == "pass"  # the run goes on


def test_sigkill_without_an_oom_kill_is_not_called_one(monkeypatch):
    from harness.run.isolation import _oom_rose
    assert _oom_rose({"system": 3}, {"system": 4}) and not _oom_rose({"system": 3}, {"system": 3})
    assert not _oom_rose({}, {"system": 4})  # unknown before: no claim
    assert _oom_rose({"system": 3, "cgroup": 0}, {"system": 3, "cgroup": 1})


def test_torch_thread_policy(monkeypatch):
    from harness.run.isolation import CPU_TORCH_THREADS, torch_threads
    monkeypatch.delenv("SAMPCHECK_TORCH_THREADS", raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert torch_threads("cpu") == CPU_TORCH_THREADS == 1 and torch_threads("cuda") is None
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    assert torch_threads("cpu") is None  # the user's OpenMP setting is left to torch
    monkeypatch.setenv("SAMPCHECK_TORCH_THREADS", "3")
    assert torch_threads("cpu") == 3 and torch_threads("cuda") == 3
    monkeypatch.setenv("SAMPCHECK_TORCH_THREADS", "0")
    assert torch_threads("cpu") is None
    monkeypatch.setenv("SAMPCHECK_TORCH_THREADS", "two")
    with pytest.raises(ValueError, match="SAMPCHECK_TORCH_THREADS"):
        torch_threads("cpu")


def test_in_process_run_restores_torch_threads(tmp_path):
    # In a fresh interpreter: a process that has run vLLM's CPU engine (tox -e vllm-cpu runs this file after
    # the vLLM tests) has torch.set_num_threads replaced by a no-op ("CPU backend doesn't allow to use
    # torch.set_num_threads after the thread binding"), so the policy could not be observed there.
    import subprocess
    import sys
    corpus(tmp_path)
    code = textwrap.dedent(f"""
        import torch
        from harness.run.runner import run
        from impls.profiles import TRTLLM
        from impls.reference import Reference
        from pathlib import Path
        torch.set_num_threads(2)
        before = torch.get_num_threads()
        seen = []
        class Watch(Reference):
            def open_session(self, device="cpu"):
                seen.append(torch.get_num_threads())
                return super().open_session(device)
        run(["reference", Watch(TRTLLM, name="watch")], None, Path({str(tmp_path / "r")!r}), progress=False,
            root=Path({str(tmp_path / "cases")!r}), isolate=False)
        print(sorted(set(seen)), before, torch.get_num_threads())
    """)
    env = {k: v for k, v in os.environ.items() if k not in ("SAMPCHECK_TORCH_THREADS", "OMP_NUM_THREADS")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300,
                         cwd=Path(__file__).resolve().parent.parent)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split("\n")[-2] == "[1] 2 2"   # one thread while it ran, the caller's 2 restored


def test_device_error_replaces_the_worker(tmp_path):
    root = corpus(tmp_path)
    outcome = run([Misbehaves("cuda")], None, tmp_path / "r", progress=False, root=root)
    st = by_pair(outcome.doc)
    assert st[("greedy/b", "bad-cuda")]["status"] == "error"
    assert "device-side assert" in st[("greedy/b", "bad-cuda")]["details"]["message"]
    assert st[("greedy/c", "bad-cuda")]["status"] == "pass"
    assert outcome.doc["run"]["impls"]["bad-cuda"]["worker_restarts"] == 1


def test_resume_reuses_the_journal(tmp_path):
    root = corpus(tmp_path)
    out = tmp_path / "r"
    # An interrupted run left a journal holding one result (marked so that reuse is visible).
    kept = {"case": "greedy/a", "impl": "reference", "status": "pass", "check": "exact", "seconds": 0.0,
            "details": {"message": "from the journal"}}
    j = Journal(out / Journal.NAME)
    j.open({"journal": 1, "impls": ["reference"], "started": "2026-01-01T00:00:00+00:00"}, [kept])
    j.close()
    with open(out / Journal.NAME, "a") as fh:
        fh.write('{"case": "greedy/b", "impl": "refer')  # a torn last line is ignored
    outcome = run(["reference"], None, out, progress=False, root=root, resume=True)
    st = by_pair(outcome.doc)
    assert st[("greedy/a", "reference")]["details"]["message"] == "from the journal"
    assert st[("greedy/b", "reference")]["status"] == "pass" and st[("greedy/c", "reference")]["status"] == "pass"
    assert outcome.doc["run"]["started"] == "2026-01-01T00:00:00+00:00"
    # A journal of other implementations is refused.
    j.open({"journal": 1, "impls": ["transformers"], "started": "x"}, [])
    j.close()
    with pytest.raises(ValueError, match="interrupted run was for"):
        run(["reference"], None, out, progress=False, root=root, resume=True)


def test_in_process_mode_gives_the_same_results(tmp_path):
    root = corpus(tmp_path)
    a = run(["reference"], None, tmp_path / "a", progress=False, root=root)
    b = run(["reference"], None, tmp_path / "b", progress=False, root=root, isolate=False)
    key = lambda d: sorted((r["case"], r["impl"], r["status"]) for r in d["results"])  # noqa: E731
    assert key(a.doc) == key(b.doc)
    assert b.doc["run"]["impls"]["reference"]["isolation"] == "none"


def test_start_method_policy(tmp_path):
    from harness.run.isolation import start_method
    assert start_method("reference") == "forkserver"
    assert start_method(Misbehaves("hang")) == "forkserver"  # a module-level class pickles

    class Local(Reference):  # defined in a function: cannot be pickled
        def __init__(self):
            super().__init__(TRTLLM, name="local")

    # This process has run torch ops, so it has several threads: forking it could deadlock,
    # and the object runs in-process, which the run records.
    torch.randn(256, 256) @ torch.randn(256, 256)
    if len(os.listdir("/proc/self/task")) > 1:
        assert start_method(Local()) is None
        outcome = run([Local()], None, tmp_path / "r", progress=False, root=corpus(tmp_path))
        meta = outcome.doc["run"]["impls"]["local"]
        assert meta["isolation"] == "none" and "threads" in meta["not_isolated_because"]
        assert all(r["status"] == "pass" for r in outcome.doc["results"])


def _descendants(pid: int) -> set:
    """Live (not zombie) descendants of ``pid``, from /proc."""
    parent = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                fields = Path(f"/proc/{d}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[0] != "Z":
                parent[int(d)] = int(fields[1])
    out, todo = set(), [pid]
    while todo:
        p = todo.pop()
        kids = [c for c, pp in parent.items() if pp == p]
        out.update(kids)
        todo.extend(kids)
    return out


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_sigterm_stops_the_run_and_its_workers(tmp_path):
    import subprocess
    import sys
    root = Path(__file__).resolve().parents[1]
    p = subprocess.Popen([sys.executable, "-m", "harness", "run", "--impl", "reference", "--out", str(tmp_path / "r"),
                          "--no-progress"], cwd=root, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline, kids = time.time() + 120, set()
    while time.time() < deadline and p.poll() is None:
        kids |= _descendants(p.pid)
        if len(kids) >= 3:   # the resource tracker, the forkserver and a worker: cases are running
            break
        time.sleep(0.2)
    assert p.poll() is None and len(kids) >= 3, "the run ended or started no worker within 120 s"
    time.sleep(1)
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=120)
    assert p.returncode == 143
    assert "sampcheck run: terminated (SIGTERM); the results obtained so far are kept in" in err
    time.sleep(1)
    assert [k for k in kids if _alive(k)] == []   # before the handler the workers ran on, orphaned


def test_a_worker_whose_fork_server_died_is_a_skip_not_a_crash(tmp_path, monkeypatch):
    from harness.run import isolation

    class DeadServerContext:
        """A start-method context whose processes cannot start: what a fork server that died at its
        preload (a module it imports raising) gives Process.start (EOFError from forkserver.read_signed)."""

        def __init__(self, ctx):
            self.ctx = ctx

        def Pipe(self):
            return self.ctx.Pipe()

        def Process(self, **kw):
            p = self.ctx.Process(**kw)
            def start():
                raise EOFError("unexpected EOF")
            p.start = start
            return p

    real = isolation._context
    monkeypatch.setattr(isolation, "_context", lambda method: DeadServerContext(real(method)))
    root = corpus(tmp_path)
    outcome = run([Reference(TRTLLM)], None, tmp_path / "r", progress=False, root=root)
    info = outcome.doc["run"]["impls"]["reference"]
    assert info["skip_reason"] == ("worker failed to start: could not start a worker process (EOFError: unexpected "
                                   "EOF); the fork server's error, if any, is on this process's stderr")
    assert {r["status"] for r in outcome.doc["results"] if r["impl"] == "reference"} == {"skip"}
