"""The main job: run cases on implementations and write results.json and index.html.

:func:`run` performs, in order:

1. select case files (``--cases``: ids, globs, paths; default all of ``cases/``);
2. count the statistical checks of the **declared** corpus (all files, not
   the selection) for the per-check level (DESIGN.md decision 3);
3. load registered findings (``cases/findings.toml``);
4. build the implementations; one not available here gets ``skip`` on every
   case, with the reason;
5. for each case file (with a progress bar): load and validate it — a
   malformed file is an ``error`` result for every implementation, naming
   file, field and reason, and the run goes on — then judge it on each
   implementation (:class:`harness.judge.Judge`);
6. write ``results.json`` (schema 1, DESIGN.md) and ``index.html``.
"""

from __future__ import annotations

import datetime as _dt
import json
import platform
import socket
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from tqdm import tqdm

from impls import get_impl

from .cases import CASES_DIR, CaseError, discover, load_case, select
from .findings import load_findings
from .judge import Judge, Result

__all__ = ["run", "RunOutcome", "count_statistical_checks", "RESULTS_SCHEMA"]

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


def count_statistical_checks(paths: list) -> int:
    """Rows of statistical cases among ``paths`` (unparseable files count 0)."""
    n = 0
    for p in paths:
        try:
            data = tomllib.loads(Path(p).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
            continue
        if data.get("check") != "statistical":
            continue
        if isinstance(data.get("rows"), list):
            n += len(data["rows"])
        elif isinstance(data.get("batches"), list):
            n += sum(len(b.get("rows", [])) for b in data["batches"] if isinstance(b, dict))
    return n


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def _case_id_of(path: Path, root: Path) -> str:
    try:
        return Path(path).resolve().relative_to(Path(root).resolve()).with_suffix("").as_posix()
    except ValueError:
        return Path(path).stem


def run(impl_names: list, patterns: Optional[list] = None, out_dir: Path = Path("reports/latest"),
        device: str = "cpu", progress: bool = True, root: Path = CASES_DIR) -> RunOutcome:
    """Run the selected cases on the named implementations.

    Parameters
    ----------
    impl_names : list of str
        Implementation names (``sampcheck list impls``).
    patterns : list of str, optional
        Case ids, id globs or paths; all cases when empty.
    out_dir : Path
        Where ``results.json`` and ``index.html`` go (created).
    device : str
        ``"cpu"`` or ``"cuda"``.
    progress : bool
        Show a progress bar on stderr.
    root : Path
        The corpus root.

    Returns
    -------
    RunOutcome

    Raises
    ------
    KeyError
        Unknown implementation name.
    ValueError
        A pattern that matches no case, or a malformed ``findings.toml``.
    """
    from .report import write_html

    started = _now()
    all_paths = discover(root)
    paths = select(all_paths, patterns, root)
    n_stat = count_statistical_checks(all_paths)
    findings = load_findings(Path(root) / "findings.toml")
    impls = [get_impl(n) if isinstance(n, str) else n for n in impl_names]
    judge = Judge(findings, n_stat, device)
    meta, skip_reason, versions = {}, {}, {}
    for impl in impls:
        reason = impl.available(device)
        try:
            versions[impl.name] = impl.version() if reason is None else "unavailable"
        except Exception as e:  # a broken install is a skip with its reason, not a crash
            reason, versions[impl.name] = f"version() raised {type(e).__name__}: {e}", "unknown"
        skip_reason[impl.name] = reason
        meta[impl.name] = {"version": versions[impl.name], "device": device, "profile": impl.profile.name,
                           **({"skip_reason": reason} if reason else {})}
    results: list[Result] = []
    cases = {}
    bar = tqdm(paths, desc="sampcheck", unit="case", disable=not progress, file=sys.stderr)
    for path in bar:
        cid = _case_id_of(path, root)
        bar.set_postfix_str(cid[-40:], refresh=False)
        try:
            case = load_case(path, root)
        except CaseError as e:
            for impl in impls:
                results.append(Result(cid, impl.name, "error", "load",
                                      details={"message": str(e), "file": e.path, "field": e.field, "reason": e.reason}))
            cases[cid] = {"id": cid, "error": str(e), "path": str(path)}
            continue
        cases[case.id] = case
        for impl in impls:
            if skip_reason[impl.name]:
                results.append(Result(case.id, impl.name, "skip", case.check,
                                      details={"message": skip_reason[impl.name]}))
                continue
            results.append(judge.evaluate(case, impl, versions[impl.name]))
    bar.close()
    doc = {
        "schema": RESULTS_SCHEMA,
        "run": {"started": started, "finished": _now(), "host": socket.gethostname(),
                "platform": platform.platform(), "python": platform.python_version(),
                "impls": meta, "alpha_per_check": judge.alpha, "statistical_checks_in_corpus": n_stat,
                "cases_selected": len(paths), "cases_declared": len(all_paths)},
        "results": [r.to_json() for r in results],
    }
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    results_path = out_dir / "results.json"
    results_path.write_text(json.dumps(doc, indent=1) + "\n")
    html_path = out_dir / "index.html"
    write_html(doc, cases, [i.profile for i in impls], html_path)
    return RunOutcome(doc, results_path, html_path, cases)
