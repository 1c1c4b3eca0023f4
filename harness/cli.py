"""Command-line interface: ``sampcheck`` (also ``python -m harness``).

Commands:

* ``sampcheck run [--impl NAME]... [--cases PATTERN]... [--out DIR] [--device cpu|cuda]
  [--timeout SECONDS] [--resume] [--no-isolation]``
  — run cases (each implementation in its own worker process, with a time
  limit per case), write ``DIR/results.json`` and ``DIR/index.html``; exit 0
  when nothing failed or errored, 1 otherwise, 2 for bad usage.
* ``sampcheck list impls|cases`` — what can be run (cases are validated;
  a malformed file is listed with its error).
* ``sampcheck golden update|check [--cases PATTERN]...`` — write the
  reference's predictions to ``golden/`` and print what changed, or fail
  (exit 1) on drift.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

__all__ = ["main", "build_parser"]


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``sampcheck``."""
    p = argparse.ArgumentParser(prog="sampcheck", description="Conformance harness for LLM samplers.")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    r = sub.add_parser("run", help="run cases on implementations and write results.json + index.html")
    r.add_argument("--impl", action="append", metavar="NAME",
                   help="implementation to run (repeatable; default: reference). See 'sampcheck list impls'.")
    r.add_argument("--cases", action="append", metavar="PATTERN",
                   help="case id, id glob (e.g. 'filters/*'), category, or path (repeatable; default: all)")
    r.add_argument("--out", default="reports/latest", metavar="DIR", help="output directory (default: reports/latest)")
    r.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="device to run on (default: cpu)")
    r.add_argument("--no-progress", action="store_true", help="no progress bar")
    r.add_argument("--timeout", type=float, default=None, metavar="SECONDS",
                   help="time limit of one case on one implementation (default: 600); past it the worker is "
                        "killed, the case is an error and the worker restarts")
    r.add_argument("--resume", action="store_true",
                   help="continue an interrupted run: reuse the results in DIR/results.partial.jsonl")
    r.add_argument("--no-isolation", action="store_true",
                   help="run the implementations in this process instead of one worker process each")
    ls = sub.add_parser("list", help="list implementations or cases")
    ls.add_argument("what", choices=["impls", "cases"])
    g = sub.add_parser("golden", help="write or check the golden predictions in golden/")
    g.add_argument("action", choices=["update", "check"])
    g.add_argument("--cases", action="append", metavar="PATTERN", help="restrict to these cases")
    return p


def _usage_problem(args) -> str:
    """A problem with ``run``'s arguments found before any case runs ('' if none)."""
    from .cases import CASES_DIR, discover
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        return f"--out {args.out}: exists and is not a directory"
    for parent in out.parents:
        if parent.exists() and not parent.is_dir():
            return f"--out {args.out}: {parent} is not a directory"
    if args.device == "cuda":
        import torch
        if not torch.cuda.is_available():
            return "--device cuda: no CUDA device is visible to this process"
    if not discover(CASES_DIR):
        return (f"no case files under {CASES_DIR}: run from the project root, or set SAMPCHECK_CASES "
                "to the corpus folder")
    if any(p == "" for p in (args.cases or [])):
        return "--cases '': an empty pattern; give an id, a glob, a category or a path"
    return ""


def _cmd_run(args) -> int:
    from .runner import run
    impls = list(dict.fromkeys(args.impl or ["reference"]))  # a name given twice runs once
    problem = _usage_problem(args)
    if problem:
        print(f"sampcheck run: {problem}", file=sys.stderr)
        return 2
    try:
        from .isolation import DEFAULT_TIMEOUT
        outcome = run(impls, args.cases, Path(args.out), args.device, progress=not args.no_progress,
                      isolate=not args.no_isolation, resume=args.resume,
                      timeout=args.timeout if args.timeout else DEFAULT_TIMEOUT)
    except (KeyError, ValueError) as e:
        print(f"sampcheck run: {e.args[0] if e.args else e}", file=sys.stderr)
        return 2
    from collections import Counter
    for name in outcome.doc["run"]["impls"]:
        c = Counter(r["status"] for r in outcome.doc["results"] if r["impl"] == name)
        print(f"{name:>16}: " + ", ".join(f"{c[s]} {s}" for s in
                                          ("pass", "known-diff", "known-bug", "fail", "n/a", "skip", "error") if c[s]))
    bad = [r for r in outcome.doc["results"] if r["status"] in ("fail", "error")]
    for r in bad[:20]:
        print(f"  {r['status'].upper():5} {r['impl']} {r['case']}: {str(r['details'].get('message', ''))[:300]}")
    if len(bad) > 20:
        print(f"  ... and {len(bad) - 20} more (see the report)")
    print(f"wrote {outcome.results_path} and {outcome.html_path}")
    return outcome.exit_code


def _cmd_list(args) -> int:
    if args.what == "impls":
        from impls import IMPL_NAMES, get_impl
        for name in IMPL_NAMES:
            impl = get_impl(name)
            why = impl.available("cpu")
            try:
                ver = impl.version() if why is None else "-"
            except Exception as e:
                ver, why = "-", f"{type(e).__name__}: {e}"
            print(f"{name:<16} profile={impl.profile.name:<8} version={ver:<28} {'available' if why is None else 'unavailable: ' + why}")
        return 0
    from .cases import CaseError, discover, load_case
    status = 0
    for p in discover():
        try:
            c = load_case(p)
            print(f"{c.id:<55} {c.check:<12} {c.description}")
        except CaseError as e:
            print(f"ERROR {e}")
            status = 1
    return status


def _cmd_golden(args) -> int:
    from . import golden
    from .cases import CaseError, discover, load_case, select
    from .judge import Judge
    try:
        paths = select(discover(), args.cases)
    except ValueError as e:
        print(f"sampcheck golden: {e}", file=sys.stderr)
        return 2
    cases, broken = [], 0
    for p in paths:
        try:
            cases.append(load_case(p))
        except CaseError as e:
            print(f"ERROR {e}", file=sys.stderr)
            broken += 1
    judge = Judge([], 1)
    if args.action == "update":
        changed = golden.update(cases, judge)
        for path, what in changed:
            print(f"{what:>7} {path}")
        print(f"{len(changed)} golden file(s) written; review them with 'git diff golden/' before committing")
        return 1 if broken else 0
    problems = golden.check(cases, judge)
    for path, why in problems:
        print(f"DRIFT {path}: {why}")
    print(f"golden check: {len(cases)} case(s), {len(problems)} problem(s)")
    return 1 if problems or broken else 0


def main(argv=None) -> int:
    """Entry point of the ``sampcheck`` console script; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    handlers = {"run": _cmd_run, "list": _cmd_list, "golden": _cmd_golden}
    return handlers[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
