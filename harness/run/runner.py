"""The main job: run cases on implementations and write results.json and index.html.

:func:`run` performs, in order:

1. select case files (``--cases``: ids, globs, paths; default all of ``cases/``), and of
   those one shard (``--shard I/N``, :mod:`harness.run.shard`);
2. count the statistical checks of the **declared** corpus (all files, not
   the selection), plus those of files selected by path from outside it, for
   the per-check level (DESIGN.md decision 3; :mod:`harness.corpus.budget`: a
   file that cannot be counted counts 0 and is listed in ``results.json``,
   ``run.uncounted_files``);
3. load registered findings (``cases/findings.toml``);
4. lock the output folder (:mod:`harness.run.outlock`: a second run into it is refused,
   naming the first); with ``resume``, read the journal an interrupted run left there;
5. start one worker process per implementation (:mod:`harness.run.isolation`,
   DESIGN.md decision 5) — one per implementation and visible GPU on a multi-GPU host
   (:mod:`harness.run.lanes`); each builds its implementation, which, when not
   available here, gets ``skip`` on every case, with the reason;
6. for each case file (with a progress bar on a terminal, a line every few seconds
   otherwise: :class:`Progress`): load and validate it — a
   malformed file is an ``error`` result for every implementation, naming
   file, field and reason, and the run goes on — then have each worker
   judge it (:class:`harness.judge.Judge`) under a time limit: a crash or a
   timeout is an ``error`` for that case and the worker is restarted. Each
   result is appended at once to the journal ``results.partial.jsonl``
   (:mod:`harness.run.journal`), so an interrupted run loses nothing and ``resume=True``
   continues it;
7. write ``results.json`` (schema 1, DESIGN.md) and ``index.html``, each atomically, and
   only then remove the journal.

A file that cannot be written (a full disk) stops the run with :class:`RunStopped`,
which names the file and how many results the journal keeps.
"""

from __future__ import annotations

import datetime as _dt
import errno
import json
import os
import platform
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from tqdm import tqdm

from impls import registry
from impls.profiles import version_verified

from harness.corpus.budget import count_statistical_checks, statistical_budget
from harness.corpus.ids import case_id
from harness.corpus.load import CASES_DIR, CaseError, discover, load_case, select
from harness.corpus.findings import load_findings
from .isolation import DEFAULT_STARTUP_TIMEOUT, DEFAULT_TIMEOUT, Worker, label_of, make_runner, prestart
from .journal import Journal, atomic_write
from .lanes import lane_envs
from .outlock import OutLock
from .shard import selection_digest, shard_of
from harness.judge.result import Result
from harness.judge.stats import FAMILY_ALPHA

__all__ = ["run", "RunOutcome", "RunStopped", "count_statistical_checks", "Progress", "RESULTS_SCHEMA"]

RESULTS_SCHEMA = 1


@dataclass
class RunOutcome:
    """What :func:`run` produced: the results document and where it was written."""

    doc: dict
    results_path: Path
    html_path: Path
    cases: dict

    @property
    def exit_code(self) -> int:
        """0 when nothing failed or errored, else 1 (DESIGN.md CLI contract)."""
        return 1 if any(r["status"] in ("fail", "error") for r in self.doc["results"]) else 0


class Progress:
    """Progress of a run on stderr: a tqdm bar on a terminal, else one line every ``interval`` seconds.

    In a log (stderr a pipe or a file) a bar would be one line of ``\\r``-joined updates;
    there, a line ``sampcheck: 40/187 cases, 12 s`` is written when ``interval`` seconds have
    passed since the last one, and a last line when the run ends.

    Parameters
    ----------
    total : int
        The cases to run.
    enabled : bool
        False: nothing is written.
    stream : file, optional
        Where to write (default ``sys.stderr``).
    interval : float
        Seconds between two lines in a log (default 5).
    clock : callable
        ``clock() -> float`` seconds (default :func:`time.monotonic`).
    tty : bool, optional
        Whether ``stream`` is a terminal (default ``stream.isatty()``).

    Examples
    --------
    >>> import io
    >>> t = iter([0.0, 1.0, 6.0, 7.0, 9.0, 10.0])
    >>> out = io.StringIO()
    >>> p = Progress(4, stream=out, clock=lambda: next(t), tty=False)
    >>> for case in ["a", "b", "c", "d"]:
    ...     p.update(case)
    >>> p.close()
    >>> print(out.getvalue(), end="")
    sampcheck: 2/4 cases, 6 s
    sampcheck: 4/4 cases, 10 s
    """

    def __init__(self, total: int, enabled: bool = True, stream=None, interval: float = 5.0,
                 clock=time.monotonic, tty: Optional[bool] = None):
        self.total, self.done, self.enabled = total, 0, enabled
        self.stream = sys.stderr if stream is None else stream
        self.interval, self.clock = interval, clock
        if tty is None:
            try:
                tty = bool(self.stream.isatty())
            except (AttributeError, ValueError):
                tty = False
        self.bar = tqdm(total=total, desc="sampcheck", unit="case", file=self.stream) if enabled and tty else None
        self.start = clock() if enabled and not tty else 0.0
        self.last, self.written = self.start, None
        self.closed = False

    def _line(self, now: float) -> None:
        self.stream.write(f"sampcheck: {self.done}/{self.total} cases, {now - self.start:.0f} s\n")
        self.stream.flush()
        self.last, self.written = now, self.done

    def update(self, case_id: str) -> None:
        """One case is done (``case_id``: shown beside a terminal's bar)."""
        if not self.enabled:
            return
        self.done += 1
        if self.bar is not None:
            self.bar.set_postfix_str(case_id if len(case_id) <= 48 else case_id[:47] + "…", refresh=False)
            self.bar.update(1)
            return
        now = self.clock()
        if now - self.last >= self.interval:
            self._line(now)

    def close(self) -> None:
        """The end of the run: the bar closes; in a log, the last count (unless that line is already written)."""
        if not self.enabled or self.closed:
            return
        self.closed = True
        if self.bar is not None:
            self.bar.close()
        elif self.written != self.done:
            self._line(self.clock())


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def _case_id_of(path: Path, root: Path) -> str:
    return case_id(path, root)  # harness.corpus.ids: from the corpus root only


class RunStopped(Exception):
    """The run stopped before it finished: a file could not be written (a full disk, a read-only folder).

    What the run had obtained stays in its journal; ``sampcheck run --resume`` continues
    once the cause is fixed.

    Attributes
    ----------
    path : str or None
        The file being written (None when the run was not writing one: ``reason`` then names the file
        the failing call named, if any).
    reason : str
        The system's message (``No space left on device``).
    disk_full : bool
        The disk or the quota is full (``ENOSPC``, ``EDQUOT``).
    kept : int
        Results in the journal.
    journal : Path
    """

    def __init__(self, path, reason: str, disk_full: bool, kept: int, journal: Path):
        self.path, self.reason, self.disk_full, self.kept, self.journal = path, reason, disk_full, kept, Path(journal)
        where = f"writing {path} failed" if path else "a system call failed"
        head = f"the disk is full: {where} ({reason})" if disk_full else f"{where}: {reason}"
        tail = (f"the {kept} result(s) obtained so far are kept in {journal}: "
                + ("free some space" if disk_full else "fix the cause") + ", then re-run the same command with --resume"
                if kept else "no result had been obtained yet")
        super().__init__(f"{head}. The run stopped; {tail}")

    @classmethod
    def from_error(cls, err: OSError, path, journal: "Journal") -> "RunStopped":
        """The :class:`RunStopped` for ``err`` raised while writing ``path``."""
        try:
            kept = len({(r["case"], r["impl"]) for r in journal.scan().results})
        except OSError:
            kept = 0
        reason = err.strerror or str(err)
        if path is None and err.filename:
            reason += f" ({err.filename})"
        return cls(path, reason, err.errno in (errno.ENOSPC, errno.EDQUOT), kept, journal.path)


def _note(line: str) -> None:
    print(f"sampcheck run: {line}", file=sys.stderr, flush=True)


def _first_line(text, limit: int = 160) -> str:
    line = str(text).strip().splitlines()[0] if str(text).strip() else ""
    return line if len(line) <= limit else line[:limit - 1] + "…"


def _worker_died(r: dict) -> bool:
    """A journal result that is the crash of its worker, not yet retried (``--resume`` runs it again, once)."""
    d = r.get("details") or {}
    return r.get("status") == "error" and d.get("isolation") == "crash" and "retried_after_crash" not in d


def _shard_text(shard) -> str:
    return f"shard {shard[0]}/{shard[1]}" if shard else "not a shard"


@dataclass
class _Resumed:
    kept: dict
    retry: dict
    started: Optional[str] = None
    info: Optional[dict] = None


def _resume_from(journal: Journal, labels: list, selected: list, shard, say) -> _Resumed:
    """What an interrupted run left in ``journal`` that this one reuses, and what it runs again.

    Raises
    ------
    ValueError
        The journal is of another run: other implementations, another shard, other cases.
    """
    scan = journal.scan()
    if scan.header is None:
        if scan.results or scan.skipped:
            say(f"--resume: {journal.path} has no header line, so it cannot say which run it belongs to: "
                "running afresh")
        return _Resumed({}, {})
    h = scan.header
    if h.get("impls") != labels:
        raise ValueError(f"{journal.path}: the interrupted run was for {h.get('impls')}, not {labels}")
    if h.get("shard") != (list(shard) if shard else None):
        raise ValueError(f"{journal.path}: the interrupted run was {_shard_text(h.get('shard'))}, this one "
                         f"{_shard_text(shard)}: resume with the same --shard, or run afresh without --resume")
    if "cases" in h and h["cases"] != selected:
        raise ValueError(f"{journal.path}: the interrupted run selected {len(h['cases'])} case(s), this "
                         f"one {len(selected)}: resume with the same --cases, or run afresh without --resume")
    for n, why in scan.skipped:
        what = "is truncated (the run died while writing it)" if why == "truncated" else f"is not a result ({why})"
        say(f"--resume: warning: {journal.path} line {n} {what}: ignored, its case runs again")
    chosen = set(selected)
    kept = {(r["case"], r["impl"]): r for r in scan.results if r["case"] in chosen}
    retry = {k: r for k, r in kept.items() if _worker_died(r)}
    for k in retry:
        del kept[k]
    say(f"--resume: reused {len(kept)} result(s) of the run started {h.get('started')} ({journal.path})")
    if retry:
        listed = "; ".join(f"{c} on {i}" for c, i in list(retry)[:10]) + (" ..." if len(retry) > 10 else "")
        say(f"--resume: {len(retry)} result(s) whose worker died are run again, once: {listed}")
    info = {"reused": len(kept), "retried": sorted([c, i] for c, i in retry),
            "skipped_lines": [[n, why] for n, why in scan.skipped]}
    return _Resumed(kept, retry, h.get("started"), info)


@dataclass
class _Lane:
    """One set of runners (one per implementation) and what they reported when started."""

    runners: list
    infos: list = None

    def start(self) -> "_Lane":
        self.infos = [r.start() for r in self.runners]
        return self

    def close(self) -> None:
        for r in self.runners:
            r.close()


def _in_lanes(paths: list, lanes: list, do_case, bar: Progress) -> list:
    """``do_case(path, lane)`` for every path, in the lanes (one thread each when several), in ``paths``' order."""
    out = [None] * len(paths)
    if len(lanes) == 1:
        for k, path in enumerate(paths):
            out[k] = do_case(path, lanes[0])
            bar.update(out[k][0])
        return out
    import queue
    import threading
    todo = queue.SimpleQueue()
    for k in range(len(paths)):
        todo.put(k)
    errors, lock = [], threading.Lock()

    def work(lane):
        while not errors:
            try:
                k = todo.get_nowait()
            except queue.Empty:
                return
            try:
                out[k] = do_case(paths[k], lane)
            except BaseException as e:  # noqa: BLE001 - re-raised in the main thread
                errors.append(e)
                return
            with lock:
                bar.update(out[k][0])

    threads = [threading.Thread(target=work, args=(lane,), daemon=True, name=f"sampcheck-lane-{n}")
               for n, lane in enumerate(lanes)]
    for t in threads:
        t.start()
    try:
        for t in threads:
            while t.is_alive():
                t.join(0.5)
    except BaseException:
        errors.append(None)  # stop the other lanes (a Ctrl-C)
        raise
    if errors:
        raise errors[0]
    return out


def run(impl_names: list, patterns: Optional[list] = None, out_dir: Path = Path("reports/latest"),
        device: str = "cpu", progress: bool = True, root: Path = CASES_DIR, *, isolate: bool = True,
        timeout: float = DEFAULT_TIMEOUT, startup_timeout: float = DEFAULT_STARTUP_TIMEOUT,
        resume: bool = False, shard: Optional[tuple] = None, gpus: Optional[list] = None,
        log=None) -> RunOutcome:
    """Run the selected cases on the named implementations.

    Parameters
    ----------
    impl_names : list of str or implementation objects
        Implementation names (``sampcheck list impls``), ``package.module:Class``
        specs (:func:`impls.registry.create`) or objects speaking the
        :mod:`impls.base` protocol.
    patterns : list of str, optional
        Case ids, id globs or paths; all cases when empty.
    out_dir : Path
        Where ``results.json`` and ``index.html`` go (created), and the
        journal ``results.partial.jsonl`` and worker logs ``workers/`` while
        the run lasts. The run holds a lock on it (:mod:`harness.run.outlock`).
    device : str
        ``"cpu"`` or ``"cuda"``.
    progress : bool
        Show the progress on stderr (:class:`Progress`: a bar on a terminal, a line every few
        seconds in a log).
    root : Path
        The corpus root.
    isolate : bool
        Run each implementation in its own worker process
        (:mod:`harness.run.isolation`); False runs everything in this process.
    timeout : float
        Seconds one case may take on one implementation (isolated runs).
    startup_timeout : float
        Seconds a worker may take to build its implementation.
    resume : bool
        Reuse the results in ``out_dir``'s journal left by an interrupted
        run with the same implementations, cases and shard; run only the missing pairs, and
        once more those whose worker died.
    shard : (int, int), optional
        ``(I, N)``: run only shard ``I`` of ``N`` of the selected cases (:mod:`harness.run.shard`).
    gpus : list of str, optional
        ``CUDA_VISIBLE_DEVICES`` entries, one lane of workers each (:mod:`harness.run.lanes`);
        fewer than two, or ``isolate=False``: one lane in the inherited environment.
    log : callable, optional
        ``log(line)`` receives what ``--resume`` reused, retried and skipped (default: stderr,
        prefixed ``sampcheck run: ``).

    Returns
    -------
    RunOutcome

    Raises
    ------
    KeyError
        Unknown implementation name.
    ValueError
        An implementation that does not load or build (the message of
        :class:`impls.registry.ImplLoadError`), a pattern that matches no case,
        a malformed ``findings.toml``, a journal to resume that names other
        implementations, cases or shard, or ``out_dir`` in use by another run
        (:class:`harness.run.outlock.OutLocked`, naming it).
    RunStopped
        A file of the run could not be written (a full disk); the journal keeps what was obtained.
    """
    say = log or _note
    started = _now()
    if isolate:
        prestart(impl_names)  # the workers' fork server imports torch while this process reads the corpus
    all_paths = discover(root)
    chosen = select(all_paths, patterns, root)
    paths = shard_of(chosen, *shard) if shard else chosen
    declared = {_case_id_of(p, root) for p in all_paths}
    # files named by path from outside the corpus count in this run's budget (harness.corpus.ids); a shard
    # counts those of the whole selection, so every shard judges at one level
    budget = statistical_budget(all_paths + [p for p in chosen if _case_id_of(p, root) not in declared])
    load_findings(Path(root) / "findings.toml")  # a malformed file is a usage error, before any worker starts
    for n in impl_names:
        if isinstance(n, str):
            try:
                impl = registry.create(n)  # unknown names and broken plug-ins fail here, before any worker starts
            except registry.ImplLoadError as e:
                raise ValueError(str(e)) from None
            if "conformance" not in registry.roles_of(impl):
                runnable = registry.names("conformance")
                raise ValueError(f"--impl {n}: a latency-only peer (benchmarks/test_latency.py times it); it has no "
                                 f"semantic profile to judge cases against. Implementations that run cases: "
                                 f"{', '.join(runnable)}")
    out_dir = Path(out_dir)
    journal = Journal(out_dir / Journal.NAME)
    writing: list = [None]  # the file being written, for the message of a failed write
    try:
        with OutLock(out_dir):
            return _run_locked(impl_names, chosen, paths, all_paths, budget, out_dir, journal, writing, device,
                               progress, root, isolate, timeout, startup_timeout, resume, shard, gpus, say, started)
    except OSError as e:
        raise RunStopped.from_error(e, writing[0], journal) from e


def _run_locked(impl_names, chosen, paths, all_paths, budget, out_dir, journal, writing, device, progress, root,
                isolate, timeout, startup_timeout, resume, shard, gpus, say, started) -> RunOutcome:
    """The body of :func:`run`, with the output folder locked (``budget``: :func:`statistical_budget`'s)."""
    n_stat = budget.checks
    labels = [label_of(n) for n in impl_names]
    selected = sorted(_case_id_of(p, root) for p in paths)
    if resume and not journal.path.is_file():
        say(f"note: nothing to resume in {out_dir} (no {Journal.NAME}): running afresh")
    if not resume and journal.path.is_file():
        scan = journal.scan()
        say(f"note: {journal.path} holds {len(scan.results) + len(scan.skipped)} result(s) of an interrupted run; "
            "this run starts afresh and replaces them (re-run with --resume to continue that run instead)")
    resumed = _resume_from(journal, labels, selected, shard, say) if resume else _Resumed({}, {})
    started = resumed.started or started
    envs = lane_envs(gpus) if isolate else [None]
    lanes = []
    for k, env in enumerate(envs):
        lanes.append(_Lane([make_runner(n, device, root, n_stat, isolate, timeout=timeout,
                                        startup_timeout=startup_timeout, log_dir=out_dir / "workers", env=env,
                                        log_name=f"{label_of(n)}-lane{k}" if env else None)
                            for n in impl_names]))
    try:
        if len(lanes) == 1:
            lanes[0].start()
        else:
            from concurrent.futures import ThreadPoolExecutor
            with ThreadPoolExecutor(len(lanes)) as pool:
                list(pool.map(_Lane.start, lanes))
        infos = lanes[0].infos
        meta = _impl_meta(impl_names, lanes[0], device)
        for name, m in meta.items():   # what an implementation says is wrong with its setup (facts.warnings)
            for w in (m.get("facts") or {}).get("warnings") or ():
                _note(f"{name}: {w}")
        header = {"journal": 1, "impls": labels, "cases": selected, "started": started,
                  **({"shard": list(shard)} if shard else {})}
        writing[0] = journal.path
        journal.open(header, list(resumed.kept.values()))
        import threading
        journal_lock = threading.Lock()

        # One lane: while the worker judges a case, this process loads the next one and, while the worker
        # is still busy, draws the report's charts of the results so far (the two overlap on two cores);
        # several lanes load each case in their own thread, and the page draws every chart.
        # The report's module (matplotlib, Jinja2: about 0.6 s) is imported there too, not before the workers start.
        ahead = len(lanes) == 1
        after = dict(zip(paths, paths[1:])) if ahead else {}
        loaded: dict = {}
        recorded: list = []  # results whose charts are not queued yet
        charts: list = []

        def record(doc_r: dict) -> None:
            with journal_lock:
                journal.append(doc_r)
            if ahead:
                recorded.append(doc_r)

        def do_case(path: Path, lane: _Lane):
            nxt = after.get(path)

            def meanwhile(busy) -> None:
                if nxt is not None:
                    loaded[nxt] = _load_or_error(nxt, root)
                while (charts or recorded) and busy():
                    if charts:
                        charts.pop(0)()
                    else:
                        from harness.report.html import chart_jobs
                        charts.extend(chart_jobs(recorded.pop(0)))

            return _judge_case(path, root, lane, resumed, record, loaded.pop(path, None), meanwhile)

        bar = Progress(len(paths), enabled=progress)
        done = _in_lanes(paths, lanes, do_case, bar)
        bar.close()
        for i, info in enumerate(infos):
            restarts = sum(getattr(lane.runners[i], "restarts", 0) for lane in lanes)
            if restarts:
                meta[info["name"]]["worker_restarts"] = restarts
            if len(lanes) > 1:
                meta[info["name"]]["gpus"] = [env["CUDA_VISIBLE_DEVICES"] for env in envs]
    finally:
        for lane in lanes:
            lane.close()
        journal.close()
    results = [r for _cid, _case, rs in done for r in rs]
    cases = {cid: case for cid, case, _rs in done}
    doc = {
        "schema": RESULTS_SCHEMA,
        "run": {"started": started, "finished": _now(), "host": socket.gethostname(),
                "platform": platform.platform(), "python": platform.python_version(),
                "impls": meta, "alpha_per_check": FAMILY_ALPHA / max(n_stat, 1),
                "statistical_checks_in_corpus": n_stat,
                **({"uncounted_files": [{"file": e.path, "field": e.field, "reason": e.reason}
                                        for e in budget.uncounted]} if budget.uncounted else {}),
                "cases_selected": len(paths), "cases_declared": len(all_paths)},
        "results": results,
    }
    if shard:
        ids = [_case_id_of(p, root) for p in chosen]
        doc["run"]["shard"] = {"index": shard[0], "count": shard[1], "cases": [cid for cid, _c, _r in done],
                               "selected": len(chosen), "selection_sha256": selection_digest(ids)}
    if resumed.info is not None:
        doc["run"]["resume"] = resumed.info
    out_dir.mkdir(parents=True, exist_ok=True)
    results_path = out_dir / "results.json"
    writing[0] = results_path
    atomic_write(results_path, json.dumps(doc, indent=1) + "\n")
    html_path = out_dir / "index.html"
    writing[0] = html_path
    tmp = html_path.with_name(html_path.name + ".tmp")
    from harness.report.html import write_html
    write_html(doc, cases, [i["profile"] for i in infos], tmp)
    os.replace(tmp, html_path)
    writing[0] = journal.path
    journal.close(remove=True)  # last: a crash before this leaves the journal, and --resume reuses all of it
    return RunOutcome(doc, results_path, html_path, cases)


def _impl_meta(impl_names: list, lane: _Lane, device: str) -> dict:
    """``run.impls`` of results.json (docs/results.md), from what the workers of one lane reported."""
    meta = {}
    for spec, r, info in zip(impl_names, lane.runners, lane.infos):
        name = info["name"]
        meta[name] = {"version": info["version"], "device": device, "profile": info["profile"].name,
                      "profile_versions": info["profile"].versions,
                      "profile_verified": (None if info.get("is_prediction")
                                           else version_verified(info["profile"], info["version"] or "")),
                      "is_prediction": bool(info.get("is_prediction")),
                      # a package.module:Class spec runs under its object's name: how to ask for it again
                      **({"spec": spec} if isinstance(spec, str) and spec != name else {}),
                      "stages": info.get("stages", {}), "rng": info["profile"].rng,
                      **({"skip_reason": info["skip_reason"]} if info["skip_reason"] else {}),
                      **({"facts": info["facts"]} if info.get("facts") else {}),
                      "isolation": "process" if isinstance(r, Worker) else "none",
                      **({"not_isolated_because": r.why_not_isolated}
                         if getattr(r, "why_not_isolated", None) else {})}
    return meta


def _idle() -> bool:
    return False


def _load_or_error(path: Path, root: Path):
    """:func:`harness.corpus.load.load_case`'s case, or the :class:`CaseError` it raised."""
    try:
        return load_case(path, root)
    except CaseError as e:
        return e


def _judge_case(path: Path, root: Path, lane: _Lane, resumed: _Resumed, record, loaded=None,
                meanwhile: Optional[Callable] = None) -> tuple:
    """``(case id, case, results)`` of one case file on every implementation of ``lane``.

    A file that does not load is an ``error`` for every implementation (not journaled: it is
    loaded again on resume); a result the journal kept is reused; any other is judged and
    ``record``-ed at once. ``loaded``: the file's :func:`_load_or_error`, when already loaded
    (None: loaded here). ``meanwhile(busy)`` is called once: while the first worker judges the
    case (:meth:`harness.run.isolation.Worker.evaluate`), or at the end, with a ``busy`` that
    is always False, when none does.
    """
    cid = _case_id_of(path, root)
    case = _load_or_error(path, root) if loaded is None else loaded
    if isinstance(case, CaseError):
        e = case
        if meanwhile is not None:
            meanwhile(_idle)
        results = [Result(cid, info["name"], "error", "load",
                          details={"message": str(e), "file": e.path, "field": e.field, "reason": e.reason}).to_json()
                   for info in lane.infos]
        return cid, {"id": cid, "error": str(e), "path": str(path)}, results
    results = []
    for runner, info in zip(lane.runners, lane.infos):
        key = (case.id, info["name"])
        if key in resumed.kept:
            results.append(resumed.kept[key])
            continue
        if info["skip_reason"]:
            res = Result(case.id, info["name"], "skip", case.check, details={"message": info["skip_reason"]})
        else:
            res = runner.evaluate(path, case.id, case.check, meanwhile, case=case)
            meanwhile = None
        doc_r = res.to_json()
        if key in resumed.retry:
            doc_r["details"]["retried_after_crash"] = _first_line(resumed.retry[key]["details"].get("message", ""))
        record(doc_r)
        results.append(doc_r)
    if meanwhile is not None:
        meanwhile(_idle)
    return case.id, case, results
