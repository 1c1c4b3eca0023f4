"""A run's output folder under stress (issue #19 item 3): two runs at once, kill -9 anywhere, a full disk.

* two runs on one ``--out``: the second is refused and names the first (harness/run/outlock.py);
* ``kill -9`` at random points of a run — in the middle of a journal line, around every rename,
  around the journal's removal, at random moments — each followed by ``--resume``: the run ends
  with the statuses and outputs of a clean run (harness/run/journal.py);
* ``--resume`` reports what it reused, warns about a truncated or malformed journal line, and
  runs a case whose worker died once more, saying so;
* a full disk stops the run with the file and the journal named, and ``--resume`` finishes it.

The crash tests run ``sampcheck`` in a child process armed by tests/_crashpoint.py.
"""

from __future__ import annotations

import doctest
import errno
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.cli import main
from harness.run import journal as journal_mod
from harness.run import lanes, outlock, shard
from harness.run.journal import Journal
from harness.run.outlock import OutLock
from harness.run.runner import run

ROOT = Path(__file__).resolve().parent.parent
CRASHPOINT = ROOT / "tests" / "_crashpoint.py"
#: Quick real cases of several kinds (exact, a seeded scenario, bad input, a known-diff under hf), copied into a
#: small corpus.
CASES = ["greedy/argmax-ties-lowest-id", "filters/min-p-before-top-p", "seeds/batch-order-independent",
         "bad_input/top-p-out-of-range", "finish/ignore-eos"]
IMPLS = ["reference", "reference-hf"]
N_PAIRS = (len(CASES) + 1) * len(IMPLS)  # the cases, and a broken file, on each implementation
BROKEN = 'schema = 1\nid = "greedy/broken"\n'


def small_corpus(tmp_path: Path) -> Path:
    root = tmp_path / "cases"
    for cid in CASES:
        (root / cid).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / "cases" / f"{cid}.toml", root / f"{cid}.toml")
    (root / "greedy" / "broken.toml").write_text(BROKEN)
    return root


def outcome_of(doc: dict) -> dict:
    """(case, impl) -> (status, details): what must not depend on crashes (times and retries aside)."""
    out = {}
    for r in doc["results"]:
        d = {k: v for k, v in r["details"].items() if k != "retried_after_crash"}
        out[(r["case"], r["impl"])] = (r["status"], json.dumps(d, sort_keys=True))
    return out


def _argv(out: Path, extra, resume: bool) -> list:
    return ["run", *[a for i in IMPLS for a in ("--impl", i)], "--out", str(out), "--no-progress", "--no-isolation",
            *extra, *(["--resume"] if resume else [])]


def _env(corpus: Path) -> dict:
    return {**os.environ, "SAMPCHECK_CASES": str(corpus), "PYTHONDONTWRITEBYTECODE": "1"}


def spawn(point: str, out: Path, corpus: Path, *extra: str, resume: bool = False) -> subprocess.Popen:
    """``sampcheck run`` on the small corpus in a new child process armed with ``point``."""
    return subprocess.Popen([sys.executable, str(CRASHPOINT), point, "--", *_argv(out, extra, resume)],
                            env=_env(corpus), cwd=corpus.parent, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


class Forks:
    """tests/_crashpoint.py --serve: each run is a fork of a process that imported the harness once."""

    def __init__(self, corpus: Path):
        self.corpus = corpus
        self.proc = subprocess.Popen([sys.executable, str(CRASHPOINT), "--serve"], env=_env(corpus), cwd=corpus.parent,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert json.loads(self.proc.stdout.readline()) == {"ready": True}
        self.n = 0

    def __call__(self, point: str, out: Path, *extra: str, resume: bool = False) -> subprocess.CompletedProcess:
        """Run ``sampcheck run`` armed with ``point``; its exit status (-9: killed) and output."""
        self.n += 1
        stdout, stderr = self.corpus.parent / f"out{self.n}.txt", self.corpus.parent / f"err{self.n}.txt"
        self.proc.stdin.write(json.dumps({"point": point, "argv": _argv(out, extra, resume),
                                          "cwd": str(self.corpus.parent), "stdout": str(stdout),
                                          "stderr": str(stderr)}) + "\n")
        self.proc.stdin.flush()
        rc = json.loads(self.proc.stdout.readline())["rc"]
        return subprocess.CompletedProcess([point], rc, stdout.read_text(), stderr.read_text())

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(60)


@pytest.fixture(scope="module")
def clean(tmp_path_factory):
    """The small corpus and its uninterrupted run."""
    tmp = tmp_path_factory.mktemp("clean")
    corpus = small_corpus(tmp)
    doc = run(IMPLS, None, tmp / "r", progress=False, root=corpus, isolate=False).doc
    assert len(doc["results"]) == N_PAIRS
    return corpus, outcome_of(doc)


@pytest.fixture(scope="module")
def cli(clean):
    forks = Forks(clean[0])
    yield forks
    forks.close()


def test_module_examples():
    for mod in (journal_mod, outlock, shard, lanes):
        res = doctest.testmod(mod)
        assert res.failed == 0 and res.attempted > 0, mod.__name__


# ------------------------------------------------------------------ the lock

def test_a_second_run_on_one_out_is_refused_and_names_the_first(clean, tmp_path, capsys):
    corpus, want = clean
    out, go = tmp_path / "r", tmp_path / "go"
    first = spawn(f"pause:2:{go}", out, corpus)
    try:
        deadline = time.monotonic() + 120
        while len(Journal(out / Journal.NAME).read()[1]) < 2:
            assert first.poll() is None, first.communicate()
            assert time.monotonic() < deadline
            time.sleep(0.1)
        before = (out / Journal.NAME).read_bytes()
        for extra in ([], ["--resume"]):
            assert main(["run", "--out", str(out), "--no-progress", "--no-isolation", *extra]) == 2
            err = capsys.readouterr().err
            assert (f"sampcheck run: --out {out} is in use by another sampcheck run (pid {first.pid} on "
                    f"{socket.gethostname()}, started ") in err
            assert "wait for it to finish, or give another --out" in err and "Traceback" not in err
        assert (out / Journal.NAME).read_bytes() == before  # the refused runs touched nothing
        go.touch()
        _, err = first.communicate(timeout=300)
    finally:
        go.touch()
        if first.poll() is None:
            first.kill()
    assert first.returncode == 1, err  # the broken case file is an error
    assert outcome_of(json.loads((out / "results.json").read_text())) == want
    assert not (out / Journal.NAME).exists()
    # the lock went with its holder: the folder is free again
    with OutLock(out):
        pass


def test_the_lock_is_released_when_its_holder_is_killed(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", "import sys, time; sys.path.insert(0, sys.argv[1]); "
                             "from harness.run.outlock import OutLock; OutLock(sys.argv[2], command='holder').acquire(); "
                             "print('locked', flush=True); time.sleep(120)", str(ROOT), str(tmp_path)],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline() == "locked\n"
        with pytest.raises(outlock.OutLocked) as ei:
            OutLock(tmp_path).acquire()
        assert ei.value.holder["pid"] == proc.pid and ei.value.holder["command"] == "holder"
        assert str(ei.value).endswith(": holder); wait for it to finish, or give another --out")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    with OutLock(tmp_path) as lock:
        assert json.loads((tmp_path / outlock.LOCK_NAME).read_text())["pid"] == os.getpid()
    assert (tmp_path / outlock.LOCK_NAME).read_text() == ""  # released: the holder's name is gone
    assert lock._fd is None


# ------------------------------------------------------------------ kill -9 anywhere, then --resume

FINISH_POINTS = ["replace:results.partial.jsonl:before", "replace:results.partial.jsonl:after",
                 "replace:results.json:before", "replace:results.json:after", "replace:index.html:before",
                 "replace:index.html:after", "unlink:before", "unlink:after"]


@pytest.mark.slow
def test_kill_9_at_random_points_then_resume_gives_the_clean_statuses(clean, cli, tmp_path):
    """At least 20 kills: each step crashes the run (or the resumed run) at a point drawn from those it
    will reach — mid-line of the journal, around each rename, around the journal's removal, or a timer —
    then the next step resumes it; whenever a run completes, its results must equal the clean run's."""
    corpus, want = clean
    rng = random.Random(19)
    kills, completed, steps, log = 0, 0, 0, []
    out, resume = tmp_path / "r0", False

    def check_complete(where: Path) -> None:
        assert outcome_of(json.loads((where / "results.json").read_text())) == want, log
        assert (where / "index.html").is_file() and not (where / Journal.NAME).exists(), log

    while kills < 22 and steps < 40:
        steps += 1
        journaled = {(r["case"], r["impl"]) for r in Journal(out / Journal.NAME).read()[1]}
        to_run = N_PAIRS - len(IMPLS) - len(journaled)  # the broken file's errors are never journaled
        roll = rng.random()
        if to_run > 0 and roll < 0.6:
            point = f"line:{rng.randint(1, min(to_run, 3))}"  # small steps: many kills mid-journal
        elif roll < 0.8:
            point = rng.choice(FINISH_POINTS)
        else:
            point = f"timer:{rng.uniform(0.05, 1.5):.2f}"
        cp = cli(point, out, resume=resume)
        log.append((point, resume, cp.returncode))
        assert "Traceback" not in cp.stderr, (log, cp.stderr)
        if cp.returncode == -signal.SIGKILL:
            kills += 1
            if (out / "results.json").is_file() and not (out / Journal.NAME).exists():
                check_complete(out)  # killed after the last step: the run is whole
                completed += 1
                out, resume = tmp_path / f"r{steps}", False
            else:
                resume = True
            continue
        assert cp.returncode == 1, (log, cp.stderr)  # finished: the broken case file is an error
        check_complete(out)
        completed += 1
        out, resume = tmp_path / f"r{steps}", False
    if resume:
        cp = cli("none", out, resume=True)
        assert cp.returncode == 1, (log, cp.stderr)
        check_complete(out)
        completed += 1
    kinds = {p.split(":")[0] for p, _r, code in log if code == -signal.SIGKILL}
    assert kills >= 20 and completed >= 2, log
    assert {"line", "replace", "unlink"} <= kinds and sum(p.startswith("line") for p, _r, _c in log) >= 5, log


def test_resume_reports_reuse_and_skips_a_torn_or_malformed_line(clean, cli, tmp_path):
    corpus, want = clean
    out = tmp_path / "r"
    cp = cli("line:4", out)  # killed writing its 4th result: 3 whole lines, then half of one
    assert cp.returncode == -signal.SIGKILL
    text = (out / Journal.NAME).read_text()
    lines = text.split("\n")
    assert len(lines) == 5 and lines[-1] and not text.endswith("\n")  # header, 3 results, a torn line
    # a line that parses but is no result (the "journal line without details")
    bad = json.loads(lines[1])
    del bad["details"]
    lines[1] = json.dumps(bad)
    (out / Journal.NAME).write_text("\n".join(lines))
    cp = cli("none", out, resume=True)
    assert cp.returncode == 1, cp.stderr
    journal = out / Journal.NAME
    started = json.loads(lines[0])["started"]
    assert cp.stderr.splitlines()[:3] == [
        f"sampcheck run: --resume: warning: {journal} line 2 is not a result (no 'details' object): ignored, its "
        "case runs again",
        f"sampcheck run: --resume: warning: {journal} line 5 is truncated (the run died while writing it): ignored, "
        "its case runs again",
        f"sampcheck run: --resume: reused 2 result(s) of the run started {started} ({journal})"]
    doc = json.loads((out / "results.json").read_text())
    assert doc["run"]["resume"] == {"reused": 2, "retried": [], "skipped_lines": [[2, "no 'details' object"],
                                                                                  [5, "truncated"]]}
    assert outcome_of(doc) == want


# ------------------------------------------------------------------ a worker that died is retried once

def _journal_of(out: Path, doc: dict, impls: list, cases: list) -> None:
    """Leave in ``out`` the journal an interrupted run with these results would have left."""
    j = Journal(out / Journal.NAME)
    j.open({"journal": 1, "impls": impls, "cases": sorted(cases), "started": doc["run"]["started"]},
           [r for r in doc["results"] if r["check"] != "load"])
    j.close()


def test_resume_runs_a_case_whose_worker_died_once_more(tmp_path):
    from test_isolation import corpus as iso_corpus
    from _doubles import KillsItsWorker
    root = iso_corpus(tmp_path)
    out = tmp_path / "r"
    flag = tmp_path / "died-once"
    impl = KillsItsWorker(flag, times=1)
    first = run([impl], None, out, progress=False, root=root, timeout=60)
    crashed = {(r["case"]): r for r in first.doc["results"]}["greedy/b"]
    assert crashed["status"] == "error" and crashed["details"]["isolation"] == "crash"
    assert "killed by signal SIGKILL" in crashed["details"]["message"]
    _journal_of(out, first.doc, [impl.name], ["greedy/a", "greedy/b", "greedy/c"])
    lines = []
    again = run([impl], None, out, progress=False, root=root, resume=True, log=lines.append, timeout=60)
    assert lines == [
        f"--resume: reused 2 result(s) of the run started {first.doc['run']['started']} ({out / Journal.NAME})",
        f"--resume: 1 result(s) whose worker died are run again, once: greedy/b on {impl.name}"]
    st = {r["case"]: r for r in again.doc["results"]}
    assert st["greedy/b"]["status"] == "pass"
    assert st["greedy/b"]["details"]["retried_after_crash"] == crashed["details"]["message"].splitlines()[0][:159] + (
        "…" if len(crashed["details"]["message"].splitlines()[0]) > 160 else "")
    assert again.doc["run"]["resume"] == {"reused": 2, "retried": [["greedy/b", impl.name]], "skipped_lines": []}


def test_a_worker_that_dies_again_is_not_retried_a_third_time(tmp_path):
    from test_isolation import corpus as iso_corpus
    from _doubles import KillsItsWorker
    root = iso_corpus(tmp_path)
    out = tmp_path / "r"
    impl = KillsItsWorker(tmp_path / "flag", times=2)
    first = run([impl], None, out, progress=False, root=root, timeout=60)
    _journal_of(out, first.doc, [impl.name], ["greedy/a", "greedy/b", "greedy/c"])
    second = run([impl], None, out, progress=False, root=root, resume=True, log=lambda _l: None, timeout=60)
    b = {r["case"]: r for r in second.doc["results"]}["greedy/b"]
    assert b["status"] == "error" and "retried_after_crash" in b["details"]
    _journal_of(out, second.doc, [impl.name], ["greedy/a", "greedy/b", "greedy/c"])
    lines = []
    third = run([impl], None, out, progress=False, root=root, resume=True, log=lines.append, timeout=60)
    assert lines == [f"--resume: reused 3 result(s) of the run started {first.doc['run']['started']} "
                     f"({out / Journal.NAME})"]
    assert {r["case"]: r for r in third.doc["results"]}["greedy/b"] == b  # kept as it was, not run a third time


# ------------------------------------------------------------------ a full disk

def test_a_full_disk_stops_the_run_with_a_message_and_resume_finishes_it(clean, cli, tmp_path):
    corpus, want = clean
    out = tmp_path / "r"
    journal = out / Journal.NAME
    cp = cli("enospc:4", out)  # the 4th result cannot be written
    assert cp.returncode == 3
    assert cp.stderr == (f"sampcheck run: the disk is full: writing {journal} failed (No space left on device). The "
                         f"run stopped; the 3 result(s) obtained so far are kept in {journal}: free some space, then "
                         "re-run the same command with --resume\n")
    assert len(Journal(journal).read()[1]) == 3 and not (out / "results.json").exists()
    # full again when results.json is written: by then every result is in the journal
    cp = cli("enospc:results.json", out, resume=True)
    assert cp.returncode == 3
    n = N_PAIRS - len(IMPLS)
    assert cp.stderr.endswith(f"sampcheck run: the disk is full: writing {out / 'results.json'} failed (No space "
                              f"left on device). The run stopped; the {n} result(s) obtained so far are kept in "
                              f"{journal}: free some space, then re-run the same command with --resume\n")
    assert "--resume: reused 3 result(s)" in cp.stderr
    assert not (out / "results.json").exists() and not (out / "results.json.tmp").exists()
    cp = cli("none", out, resume=True)
    assert cp.returncode == 1, cp.stderr
    assert f"--resume: reused {n} result(s)" in cp.stderr
    assert outcome_of(json.loads((out / "results.json").read_text())) == want


def test_run_stopped_names_what_failed(tmp_path):
    from harness.run.runner import RunStopped
    j = Journal(tmp_path / Journal.NAME)
    j.open({"journal": 1, "impls": ["x"], "cases": [], "started": "s"},
           [{"case": "a/b", "impl": "x", "status": "pass", "check": "exact", "details": {"message": ""}}])
    j.close()
    full = RunStopped.from_error(OSError(errno.EDQUOT, os.strerror(errno.EDQUOT)), tmp_path / "index.html", j)
    assert full.disk_full and full.kept == 1
    assert str(full) == (f"the disk is full: writing {tmp_path / 'index.html'} failed (Disk quota exceeded). The run "
                         f"stopped; the 1 result(s) obtained so far are kept in {j.path}: free some space, then re-run "
                         "the same command with --resume")
    other = RunStopped.from_error(OSError(errno.EMFILE, os.strerror(errno.EMFILE), "/x/y"), None,
                                  Journal(tmp_path / "none" / Journal.NAME))
    assert not other.disk_full
    assert str(other) == "a system call failed: Too many open files (/x/y). The run stopped; no result had been " \
                         "obtained yet"
