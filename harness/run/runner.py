"""The main job: run cases on implementations and write results.json and index.html.

:func:`run` performs, in order:

1. select case files (``--cases``: ids, globs, paths; default all of ``cases/``);
2. count the statistical checks of the **declared** corpus (all files, not
   the selection), plus those of files selected by path from outside it, for
   the per-check level (DESIGN.md decision 3; :mod:`harness.corpus.budget`: a
   file that cannot be counted counts 0 and is listed in ``results.json``,
   ``run.uncounted_files``);
3. load registered findings (``cases/findings.toml``);
4. start one worker process per implementation (:mod:`harness.run.isolation`,
   DESIGN.md decision 5); each builds its implementation, which, when not
   available here, gets ``skip`` on every case, with the reason;
5. for each case file (with a progress bar on a terminal, a line every few seconds
   otherwise: :class:`Progress`): load and validate it — a
   malformed file is an ``error`` result for every implementation, naming
   file, field and reason, and the run goes on — then have each worker
   judge it (:class:`harness.judge.Judge`) under a time limit: a crash or a
   timeout is an ``error`` for that case and the worker is restarted. Each
   result is appended at once to the journal ``results.partial.jsonl``, so
   an interrupted run loses nothing and ``resume=True`` continues it;
6. write ``results.json`` (schema 1, DESIGN.md; atomically) and
   ``index.html``, and remove the journal.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from tqdm import tqdm

from impls import registry
from impls.profiles import version_verified

from harness.corpus.budget import count_statistical_checks, statistical_budget
from harness.corpus.ids import case_id
from harness.corpus.load import CASES_DIR, CaseError, discover, load_case, select
from harness.corpus.findings import load_findings
from .isolation import DEFAULT_STARTUP_TIMEOUT, DEFAULT_TIMEOUT, Journal, Worker, label_of, make_runner
from harness.judge.result import Result
from harness.judge.stats import FAMILY_ALPHA

__all__ = ["run", "RunOutcome", "count_statistical_checks", "Progress", "RESULTS_SCHEMA"]

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


def run(impl_names: list, patterns: Optional[list] = None, out_dir: Path = Path("reports/latest"),
        device: str = "cpu", progress: bool = True, root: Path = CASES_DIR, *, isolate: bool = True,
        timeout: float = DEFAULT_TIMEOUT, startup_timeout: float = DEFAULT_STARTUP_TIMEOUT,
        resume: bool = False) -> RunOutcome:
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
        the run lasts.
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
        run with the same implementations; run only the missing pairs.

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
        a malformed ``findings.toml``, or a journal to resume that names other
        implementations or cases.
    """
    from harness.report.html import write_html

    started = _now()
    all_paths = discover(root)
    paths = select(all_paths, patterns, root)
    declared = {_case_id_of(p, root) for p in all_paths}
    # files named by path from outside the corpus count in this run's budget (harness.corpus.ids)
    budget = statistical_budget(all_paths + [p for p in paths if _case_id_of(p, root) not in declared])
    n_stat = budget.checks
    load_findings(Path(root) / "findings.toml")  # a malformed file is a usage error, before any worker starts
    for n in impl_names:
        if isinstance(n, str):
            try:
                registry.create(n)  # unknown names and broken plug-ins fail here, before any worker starts
            except registry.ImplLoadError as e:
                raise ValueError(str(e)) from None
    out_dir = Path(out_dir)
    journal = Journal(out_dir / Journal.NAME)
    labels = [label_of(n) for n in impl_names]
    selected = sorted(_case_id_of(p, root) for p in paths)
    kept: dict = {}
    if resume:
        header, old = journal.read()
        if header is not None:
            if header.get("impls") != labels:
                raise ValueError(f"{journal.path}: the interrupted run was for {header.get('impls')}, not {labels}")
            if "cases" in header and header["cases"] != selected:
                raise ValueError(f"{journal.path}: the interrupted run selected {len(header['cases'])} case(s), this "
                                 f"one {len(selected)}: resume with the same --cases, or run afresh without --resume")
            started = header.get("started", started)
            kept = {(r["case"], r["impl"]): r for r in old}
    runners = [make_runner(n, device, root, n_stat, isolate, timeout=timeout, startup_timeout=startup_timeout,
                           log_dir=out_dir / "workers") for n in impl_names]
    try:
        infos = [r.start() for r in runners]
        meta, skip_reason = {}, {}
        for spec, r, info in zip(impl_names, runners, infos):
            name = info["name"]
            skip_reason[name] = info["skip_reason"]
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
        journal.open({"journal": 1, "impls": labels, "cases": selected, "started": started}, list(kept.values()))
        results: list = []
        cases = {}
        bar = Progress(len(paths), enabled=progress)
        for path in paths:
            cid = _case_id_of(path, root)
            try:
                case = load_case(path, root)
            except CaseError as e:
                for info in infos:
                    res = Result(cid, info["name"], "error", "load",
                                 details={"message": str(e), "file": e.path, "field": e.field, "reason": e.reason})
                    results.append(res.to_json())
                cases[cid] = {"id": cid, "error": str(e), "path": str(path)}
                bar.update(cid)
                continue
            cases[case.id] = case
            for runner, info in zip(runners, infos):
                name = info["name"]
                if (case.id, name) in kept:
                    results.append(kept[(case.id, name)])
                    continue
                if skip_reason[name]:
                    res = Result(case.id, name, "skip", case.check, details={"message": skip_reason[name]})
                else:
                    res = runner.evaluate(path, case.id, case.check)
                doc_r = res.to_json()
                journal.append(doc_r)
                results.append(doc_r)
            bar.update(cid)
        bar.close()
        for r, info in zip(runners, infos):
            if getattr(r, "restarts", 0):
                meta[info["name"]]["worker_restarts"] = r.restarts
    finally:
        for r in runners:
            r.close()
        journal.close()
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
    out_dir.mkdir(parents=True, exist_ok=True)
    results_path = out_dir / "results.json"
    tmp = results_path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    os.replace(tmp, results_path)
    journal.close(remove=True)
    html_path = out_dir / "index.html"
    write_html(doc, cases, [i["profile"] for i in infos], html_path)
    return RunOutcome(doc, results_path, html_path, cases)
