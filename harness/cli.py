"""Command-line interface: ``sampcheck`` (also ``python -m harness``).

Commands:

* ``sampcheck run [--impl NAME]... [--cases PATTERN]... [--smoke] [--out DIR] [--device cpu|cuda]
  [--timeout SECONDS] [--resume] [--shard I/N] [--junit-xml FILE] [--no-isolation] [--no-progress]``
  — run cases (each implementation in its own worker process, with a time
  limit per case; with ``--device cuda``, one worker per implementation and visible GPU), write
  ``DIR/results.json`` and ``DIR/index.html`` (default
  ``reports/latest``; with ``--cases``, ``reports/latest-subset``, which leaves
  the full run's report alone; with ``--shard I/N``, ``reports/shard-I-of-N``), print per
  implementation its cases of each
  status and how many verdicts its own code decided (:func:`run_summary`);
  exit 0 when nothing failed or errored, 1 otherwise, 2 for bad usage (``DIR`` in use by
  another run included), 3 when a file could not be written (a full disk: the results so far
  stay in the journal, ``--resume`` continues).
* ``sampcheck merge SHARD... [--out DIR] [--junit-xml FILE] [--record FILE [--impl NAME]]`` — the
  results of the shards of one run as one ``results.json`` and report (:mod:`harness.run.merge`);
  exit 0/1 as ``run``, 2 for shards that do not belong together.
* ``sampcheck list impls [-v]|cases`` — what can be run: the implementation
  registry (with ``-v`` each one's features and stage provenance), or the
  cases (validated; a malformed file is listed with its error).
* ``sampcheck golden update|check [--cases PATTERN]... [--accept]`` —
  ``update`` shows a unified diff of every golden file that would change and
  writes them only with ``--accept`` (exit 1 when changes were refused);
  ``check`` fails (exit 1) on drift.
* ``sampcheck golden add ID... [--accept]`` — the golden files of new cases,
  shown, written only with ``--accept``.
* ``sampcheck case new CATEGORY NAME [--check exact|statistical] [--features A,B]``
  — a commented template at ``cases/CATEGORY/NAME.toml`` (refused by the loader
  until its ``TODO`` values are replaced), then the existing cases that share
  the most of the features.
* ``sampcheck record --impl NAME [--out FILE] [--no-progress]`` — a run record
  (:mod:`harness.records.records`).
* ``sampcheck diff A B [--html FILE] [--text FILE]`` — compare two run
  records (:mod:`harness.report.diff`); exit 0 when nothing changed, 1 when
  something did, 2 for bad usage or an unreadable or malformed record (file, case and field named).
* ``sampcheck report --bench FILE [--out DIR]`` — the latency report.
* ``sampcheck check-impl NAME [--device] [--no-smoke]`` — the adapter
  conformance kit (:mod:`harness.conformance`).
* ``sampcheck docs [--check] [--refresh [--all] [--jobs N]]`` — the files generated from the
  registries and the corpus (:mod:`harness.corpus.docs`): the field tables, the feature
  table ``docs/features.md`` and the coverage table ``docs/coverage.md``; ``--refresh``
  first brings the mutation cache ``docs/coverage.json`` up to date
  (:func:`harness.judge.mutation.refresh`; ``--all``: measured again from scratch).

Options an implementation declares (``impls.base.CliOption``, e.g.
``--trtllm-src``) are added to ``run``, ``list``, ``record`` and ``check-impl``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import signal
import sys
import threading
from pathlib import Path

__all__ = ["main", "build_parser", "FULL_OUT", "SUBSET_OUT", "run_summary"]

#: Where ``sampcheck run`` writes by default; a run of a subset (``--cases``) writes to ``SUBSET_OUT``.
FULL_OUT = "reports/latest"
SUBSET_OUT = "reports/latest-subset"


def _impl_options():
    """The options implementations declare (:func:`impls.registry.cli_options`), e.g. ``--trtllm-src``."""
    from impls import registry
    return registry.cli_options()


class _Once(argparse.Action):
    """An option that may be given once: a second one is a usage error naming both values."""

    def __call__(self, parser, namespace, values, option_string=None):
        if getattr(namespace, self.dest, None) is not None:
            parser.error(f"{option_string} given twice ({getattr(namespace, self.dest)} and {values}): "
                         f"give it once")
        setattr(namespace, self.dest, values)


def _add_impl_options(p: argparse.ArgumentParser) -> None:
    for opt in _impl_options():
        p.add_argument(opt.flag, metavar=opt.metavar, dest=_dest(opt), help=opt.help)


def _dest(opt) -> str:
    return "impl_opt_" + opt.flag.lstrip("-").replace("-", "_")


def _export_impl_options(args) -> None:
    """Set the environment variable of each implementation option given (worker processes inherit it)."""
    for opt in _impl_options():
        value = getattr(args, _dest(opt), None)
        if value:
            os.environ[opt.env] = str(Path(value).expanduser().resolve()) if opt.path else str(value)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``sampcheck``."""
    from . import __version__
    p = argparse.ArgumentParser(prog="sampcheck", description="Conformance harness for LLM samplers.")
    p.add_argument("--version", action="version", version=f"sampcheck {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    r = sub.add_parser("run", help="run cases on implementations and write results.json + index.html")
    r.add_argument("--impl", action="append", metavar="NAME",
                   help="implementation to run (repeatable; default: reference). See 'sampcheck list impls'.")
    r.add_argument("--cases", action="append", metavar="PATTERN",
                   help="case id, id glob (e.g. 'filters/*'), category, or path (repeatable; default: all)")
    r.add_argument("--out", default=None, metavar="DIR",
                   help=f"output directory (default: {FULL_OUT}; with --cases, {SUBSET_OUT}, so that a subset does not "
                        f"replace the full run's report)")
    r.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="device to run on (default: cpu)")
    r.add_argument("--no-progress", action="store_true", help="no progress bar")
    r.add_argument("--timeout", type=float, default=None, metavar="SECONDS",
                   help="time limit of one case on one implementation (default: 600); past it the worker is "
                        "killed, the case is an error and the worker restarts")
    r.add_argument("--resume", action="store_true",
                   help="continue an interrupted run: reuse the results in DIR/results.partial.jsonl")
    r.add_argument("--no-isolation", action="store_true",
                   help="run the implementations in this process instead of one worker process each")
    r.add_argument("--shard", metavar="I/N",
                   help="run only shard I of N of the selected cases (dealt round-robin; the statistical level is "
                        "unchanged); 'sampcheck merge' joins the shards' results (default --out: "
                        "reports/shard-I-of-N)")
    r.add_argument("--smoke", action="store_true",
                   help="the smoke tier: the cases tagged 'smoke' (the same as --cases tag:smoke; with --cases, "
                        "added to them)")
    r.add_argument("--junit-xml", metavar="FILE",
                   help="also write the results as JUnit XML (one test case per case and implementation) for CI "
                        "dashboards")
    _add_impl_options(r)
    m = sub.add_parser("merge", help="merge the results of the shards of one run (run --shard I/N) into one "
                                     "results.json and report")
    m.add_argument("shards", nargs="+", metavar="SHARD",
                   help="a shard's results.json, or the folder holding it (every shard 1..N once)")
    m.add_argument("--out", metavar="DIR",
                   help=f"output directory (default: {FULL_OUT} when the shards ran the whole corpus, else "
                        f"{SUBSET_OUT})")
    m.add_argument("--junit-xml", metavar="FILE", help="also write the merged results as JUnit XML")
    m.add_argument("--record", metavar="FILE", help="also write the run record of one implementation "
                                                    "(as 'sampcheck record' does)")
    m.add_argument("--impl", metavar="NAME", help="--record: the implementation (needed when the results hold "
                                                  "several)")
    ls = sub.add_parser("list", help="list implementations or cases")
    ls.add_argument("what", choices=["impls", "cases"])
    ls.add_argument("patterns", nargs="*", metavar="PATTERN",
                    help="'cases': only these (ids, id globs, paths, tag:NAME, as run's --cases)")
    ls.add_argument("-v", "--verbose", action="store_true",
                    help="'impls': also each one's features and whose code performs each pipeline stage")
    _add_impl_options(ls)
    sh = sub.add_parser("show", help="one case as a person reads it: inputs, expectations, sources, notes, the "
                                     "reference's prediction and what each run record in golden/engines/ says")
    sh.add_argument("case", help="a case id (e.g. filters/top-k-two-statistical) or a case file's path")
    sh.add_argument("--records", metavar="DIR", help="the run records' folder (default: golden/engines/)")
    sh.add_argument("--no-predict", action="store_true", help="leave out the reference's prediction")
    g = sub.add_parser("golden", help="write or check the golden predictions in golden/")
    g.add_argument("action", choices=["update", "check", "add"])
    g.add_argument("--cases", action="append", metavar="PATTERN", help="restrict to these cases")
    g.add_argument("ids", nargs="*", metavar="ID",
                   help="'add': the case id(s) whose golden files to compute")
    g.add_argument("--accept", action="store_true",
                   help="'add'/'update': write the files shown (without it nothing is written)")
    c = sub.add_parser("case", help="author cases: 'case new CATEGORY NAME' writes a commented template")
    c.add_argument("action", choices=["new"])
    c.add_argument("category", help="the case's category (first path component under cases/)")
    c.add_argument("name", help="the file name without .toml (lowercase words joined by '-')")
    c.add_argument("--check", default="exact", choices=["exact", "statistical"],
                   help="the template's check (default: exact)")
    c.add_argument("--force", action="store_true", help="overwrite an existing file")
    c.add_argument("--features", action="append", metavar="A,B",
                   help="the case's features (cases/features.txt; comma-separated, repeatable): written into the "
                        "template, and the existing cases declaring the most of them are listed")
    ck = sub.add_parser("check-impl", help="the adapter conformance kit: protocol checks, then the smoke corpus "
                                           "(docs/adapters.md)")
    ck.add_argument("impl", metavar="NAME", help="a registered implementation or package.module:Class")
    ck.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ck.add_argument("--no-smoke", action="store_true", help="the protocol checks only")
    ck.add_argument("--out", metavar="DIR", help="where the smoke run's results.json and index.html go "
                                                 "(default: a temporary folder)")
    _add_impl_options(ck)
    dc = sub.add_parser("docs", help="write the files generated from the registries and the corpus (cases/features.txt, "
                                      "the field tables of cases/README.md, docs/features.md, docs/coverage.md)")
    dc.add_argument("--check", action="store_true", help="write nothing; exit 1 when a generated file is stale or the "
                                                         "mutation cache docs/coverage.json lacks a case or a flip")
    dc.add_argument("--refresh", action="store_true", help="first measure what the mutation cache docs/coverage.json "
                                                           "lacks (new or edited cases, new flips: minutes per case)")
    dc.add_argument("--all", action="store_true", help="with --refresh: measure every case again (after a change of "
                                                       "the reference's code; 22 minutes with --jobs 2 on 2 cores)")
    dc.add_argument("--jobs", type=int, default=1, metavar="N", help="with --refresh: N worker processes (default 1)")
    rec = sub.add_parser("record", help="run the corpus on one implementation and write its run record "
                                        "(golden/engines/<impl>-<version>.json)")
    rec.add_argument("--impl", required=True, metavar="NAME", action=_Once,
                     help="the implementation (see 'sampcheck list impls'); one: a record is of one implementation")
    rec.add_argument("--out", metavar="FILE", help="where to write (default: golden/engines/<impl>-<version>.json)")
    rec.add_argument("--cases", action="append", metavar="PATTERN", help="restrict to these cases")
    rec.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    rec.add_argument("--no-isolation", action="store_true", help="run in this process")
    rec.add_argument("--no-progress", action="store_true", help="no progress bar")
    _add_impl_options(rec)
    d = sub.add_parser("diff", help="compare two run records: per case unchanged / newly passing / newly failing / "
                                    "changed output / added / removed; exit 1 when anything changed")
    d.add_argument("a", metavar="A", help="the old run record (JSON)")
    d.add_argument("b", metavar="B", help="the new run record (JSON)")
    d.add_argument("--html", metavar="FILE", help="also write the report as one self-contained HTML file")
    d.add_argument("--text", metavar="FILE", help="also write the printed report to FILE")
    d.add_argument("--false-alarm", type=float, default=None, metavar="RATE",
                   help="family-wise false-alarm rate of the two-sample tests (default: 1e-3)")
    lat = sub.add_parser("report", help="render a report from results already on disk: '--bench FILE' (the latency "
                                        "suite's results) writes DIR/latency.html")
    lat.add_argument("--bench", required=True, metavar="FILE",
                     help="results file of the latency suite (benchmarks/test_latency.py --latency-out, or "
                          "benchmarks/results/*.json)")
    lat.add_argument("--out", default="reports/latency", metavar="DIR", help="output directory (default: reports/latency)")
    return p


def _cmd_report(args) -> int:
    from harness.report.latency import LatencyError, write_report
    if args.out is not None and not str(args.out).strip():
        print("sampcheck report: --out '': an empty folder name (it would write into the current folder); give a "
              "folder", file=sys.stderr)
        return 2
    try:
        path = write_report(args.bench, args.out)
    except LatencyError as e:
        print(f"sampcheck report: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"sampcheck report: --out {args.out}: {e.strerror or e}", file=sys.stderr)
        return 2
    print(f"wrote {path}")
    return 0


#: Why a command does not write into the data an installed package carries (harness/corpus/paths.py).
_READ_ONLY = ("the {what} in use ({path}) is the copy installed with the sampcheck package, which is not written to: "
              "work in a checkout of the project, or set {env} to a folder of your own")


def _no_cases_problem() -> str:
    """'' when the corpus folder holds case files, else the one-line problem (run, list, golden)."""
    from harness.corpus.load import CASES_DIR, discover
    if discover(CASES_DIR):
        return ""
    return f"no case files under {CASES_DIR}: run from the project root, or set SAMPCHECK_CASES to the corpus folder"


def _writable_dir(path: Path) -> str:
    """'' when a file can be created in the folder ``path`` (which exists), else why not."""
    import tempfile
    try:
        with tempfile.NamedTemporaryFile(dir=path, prefix=".sampcheck-write-test-"):
            pass
    except OSError as e:
        return f"cannot write in {path} ({e.strerror or e})"
    return ""


def _output_file_problem(opt: str, target, out=None) -> str:
    """'' when the file ``target`` of option ``opt`` can be written (or is None), else the one-line problem.

    ``out``: the command's output folder, which it creates itself: a file inside it is not refused for
    the folder not existing yet."""
    if not target:
        return ""
    path = Path(target)
    parent = path.parent if str(path.parent) else Path(".")
    if path.is_dir():
        return f"{opt} {target}: is a directory (give a file name)"
    if out is not None and str(out).strip() and not parent.exists() and \
            os.path.abspath(parent) == os.path.abspath(out):
        return ""
    if not parent.is_dir():
        return f"{opt} {target}: " + (f"folder {parent} does not exist" if not parent.exists()
                                      else f"{parent} is not a directory")
    why = _writable_dir(parent)
    return f"{opt} {target}: {why}" if why else ""


def _usage_problem(args) -> str:
    """A problem with ``run``'s arguments found before any case runs ('' if none); the output folder is
    created only once the other arguments are found good."""
    if any(p == "" for p in (args.cases or [])):
        return "--cases '': an empty pattern; give an id, a glob, a category or a path"
    if not str(args.out).strip():
        return "--out '': an empty folder name (it would write into the current folder); give a folder"
    if args.timeout is not None and not args.timeout > 0:
        return f"--timeout {args.timeout:g}: must be a positive number of seconds"
    why = _output_file_problem("--junit-xml", args.junit_xml, args.out)
    if why:
        return why
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        return f"--out {args.out}: exists and is not a directory"
    for parent in out.parents:
        if parent.exists() and not parent.is_dir():
            return f"--out {args.out}: {parent} is not a directory"
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        return f"--out {args.out}: cannot create it ({e.strerror})"
    why = _writable_dir(out)
    if why:
        return f"--out {args.out}: {why}"
    if args.device == "cuda":
        import torch
        if not torch.cuda.is_available():
            return "--device cuda: no CUDA device is visible to this process"
    no_cases = _no_cases_problem()
    if no_cases:
        return no_cases
    return ""


def run_summary(doc: dict) -> list:
    """The lines ``sampcheck run`` prints at the end: per implementation its cases of each status, then the problems.

    A verdict count that its own code did not wholly decide says how many it did
    (``80 pass (own code 52)``), and each implementation's line ends with ``decided by own
    code: N of M verdicts`` (:mod:`harness.judge.provenance`). Then one line per case and
    problem (``fail`` or ``error``), its implementations together when they say the same (20
    at most); a case file that does not load is one line with the whole error.

    Parameters
    ----------
    doc : dict
        The results.json document.

    Returns
    -------
    list of str

    Examples
    --------
    >>> doc = {"run": {"impls": {"fused": {}}}, "results": [
    ...     {"case": "a/x", "impl": "fused", "status": "pass", "details": {"message": "ok"},
    ...      "provenance": {"own_code": True}},
    ...     {"case": "a/y", "impl": "fused", "status": "pass", "details": {"message": "ok"},
    ...      "provenance": {"own_code": False}},
    ...     {"case": "a/z", "impl": "fused", "status": "fail", "details": {"message": "1 row(s) differ"},
    ...      "provenance": {"own_code": True}}]}
    >>> for line in run_summary(doc):
    ...     print(line)
               fused: 2 pass (own code 1), 1 fail; decided by own code: 2 of 3 verdicts
      FAIL  a/z on fused: 1 row(s) differ
    """
    from collections import Counter
    order = ("pass", "known-diff", "known-bug", "fail", "n/a", "skip", "error")
    names = list(doc["run"]["impls"])
    width = max([16] + [len(n) for n in names])
    lines = []
    for name in names:
        mine = [r for r in doc["results"] if r["impl"] == name]
        c = Counter(r["status"] for r in mine)
        own = Counter(r["status"] for r in mine if (r.get("provenance") or {}).get("own_code"))
        judged = [r for r in mine if r.get("provenance") is not None]
        parts = []
        for s in order:
            if c[s]:
                split = any(r.get("provenance") is not None for r in mine if r["status"] == s) and own[s] < c[s]
                parts.append(f"{c[s]} {s}" + (f" (own code {own[s]})" if split else ""))
        tail = f"; decided by own code: {sum(own.values())} of {len(judged)} verdict{'s' if len(judged) != 1 else ''}" \
            if judged else ""
        lines.append(f"{name:>{width}}: " + (", ".join(parts) or "no results") + tail)
    groups: dict = {}
    for r in doc["results"]:
        if r["status"] not in ("fail", "error"):
            continue
        msg = str((r.get("details") or {}).get("message", ""))
        groups.setdefault((r["case"], r["status"], msg, r.get("check") == "load"), []).append(r["impl"])
    for (case, status, msg, load), who in list(groups.items())[:20]:
        if load:
            lines.append(f"  {status.upper():5} {case}: the case file does not load (on every implementation): {msg}")
        else:
            lines.append(f"  {status.upper():5} {case} on {', '.join(who)}: {msg[:300]}")
    if len(groups) > 20:
        lines.append(f"  ... and {len(groups) - 20} more (see the report's Needs attention)")
    return lines


def _cmd_run(args) -> int:
    from harness.run.runner import RunStopped, run
    from harness.run.shard import parse_shard
    impls = list(dict.fromkeys(args.impl or ["reference"]))  # a name given twice runs once
    if args.smoke:
        args.cases = list(dict.fromkeys([*(args.cases or []), "tag:smoke"]))
    shard = None
    if args.shard is not None:
        try:
            shard = parse_shard(args.shard)
        except ValueError as e:
            print(f"sampcheck run: {e}", file=sys.stderr)
            return 2
    subset_default = args.out is None and bool(args.cases) and shard is None
    if args.out is None:
        args.out = f"reports/shard-{shard[0]}-of-{shard[1]}" if shard else SUBSET_OUT if args.cases else FULL_OUT
    made = [d for d in (Path(args.out), *Path(args.out).parents) if not d.exists()]  # deepest first
    problem = _usage_problem(args)
    if problem:
        print(f"sampcheck run: {problem}", file=sys.stderr)
        return 2
    journal = Path(args.out) / "results.partial.jsonl"
    gpus = None
    if args.device == "cuda" and not args.no_isolation:
        from harness.run.lanes import visible_gpus
        gpus = visible_gpus()
    try:
        from harness.run.isolation import DEFAULT_TIMEOUT
        outcome = run(impls, args.cases, Path(args.out), args.device, progress=not args.no_progress,
                      isolate=not args.no_isolation, resume=args.resume, shard=shard, gpus=gpus,
                      timeout=args.timeout if args.timeout else DEFAULT_TIMEOUT)
    except (KeyError, ValueError) as e:
        print(f"sampcheck run: {e.args[0] if e.args else e}", file=sys.stderr)
        for d in made:  # a rejected run leaves behind no folder it made (each only while still empty)
            with contextlib.suppress(OSError):
                d.rmdir()
        return 2
    except RunStopped as e:
        print(f"sampcheck run: {e}", file=sys.stderr)
        return 3
    except KeyboardInterrupt as e:
        how = "terminated (SIGTERM)" if isinstance(e, Terminated) else "interrupted"
        print(f"\nsampcheck run: {how}; the results obtained so far are kept in {journal}: re-run the same "
              "command with --resume to continue", file=sys.stderr)
        return 143 if isinstance(e, Terminated) else 130
    for line in run_summary(outcome.doc):
        print(line)
    run_files = {str((r.get("details") or {}).get("file")) for r in outcome.doc["results"] if r.get("check") == "load"}
    for u in outcome.doc["run"].get("uncounted_files", []):
        if u["file"] not in run_files:  # a declared file this run did not select: its error is shown nowhere else
            print(f"sampcheck run: note: {u['file']}: {u['field']}: {u['reason']} (a case file this run did not "
                  "select; counted 0 in the statistical budget)", file=sys.stderr)
    print(f"wrote {outcome.results_path} and {outcome.html_path}"
          + (f" (a subset, --cases: {FULL_OUT}, the report of the last full run, is left as it was; --out {FULL_OUT} "
             "replaces it)" if subset_default else ""))
    if shard and not outcome.doc["results"]:
        print(f"sampcheck run: note: shard {shard[0]}/{shard[1]} holds no case ({outcome.doc['run']['shard']['selected']} "
              "selected)", file=sys.stderr)
    if args.junit_xml and _write_junit(outcome.doc, args.junit_xml, "run"):
        return 3
    skipped = {name: m.get("skip_reason") for name, m in outcome.doc["run"]["impls"].items() if m.get("skip_reason")}
    for name, why in skipped.items():
        print(f"sampcheck run: nothing ran on {name}: {why}", file=sys.stderr)
    if skipped and len(skipped) == len(outcome.doc["run"]["impls"]):
        return max(outcome.exit_code, 1)  # a run that tested nothing is not a success
    return outcome.exit_code


def _write_junit(doc: dict, target: str, command: str) -> bool:
    """Write ``doc`` as JUnit XML to ``target``; True (after saying why) when it could not be written."""
    from harness.report.html import command_prefix
    from harness.report.junit import junit_xml
    from harness.run.journal import atomic_write
    try:
        atomic_write(Path(target), junit_xml(doc, command_prefix()))
    except OSError as e:
        print(f"sampcheck {command}: cannot write --junit-xml {target}: {e.strerror or e}", file=sys.stderr)
        return True
    print(f"wrote {target}")
    return False


def _cmd_merge(args) -> int:
    from harness.run import merge as mergemod
    from harness.run.outlock import OutLock
    problem = (_output_file_problem("--junit-xml", args.junit_xml, args.out)
               or _output_file_problem("--record", args.record, args.out))
    if problem:
        print(f"sampcheck merge: {problem}", file=sys.stderr)
        return 2
    if args.impl and not args.record:
        print("sampcheck merge: --impl chooses the implementation of --record; give --record FILE too", file=sys.stderr)
        return 2
    try:
        doc = mergemod.merge(args.shards)
    except mergemod.MergeError as e:
        print(f"sampcheck merge: {e}", file=sys.stderr)
        return 2
    impls = list(doc["run"]["impls"])
    rec_impl = args.impl or (impls[0] if len(impls) == 1 else None)
    if args.record and rec_impl not in impls:
        print(f"sampcheck merge: --record: " + (f"--impl {args.impl} did not run in these shards (they ran "
              f"{', '.join(impls)})" if args.impl else f"the shards ran {len(impls)} implementations "
              f"({', '.join(impls)}): choose one with --impl NAME"), file=sys.stderr)
        return 2
    run = doc["run"]
    out = args.out or (FULL_OUT if run["cases_selected"] == run["cases_declared"] else SUBSET_OUT)
    try:
        with OutLock(Path(out), command="sampcheck merge"):
            results_path, html_path = mergemod.write(doc, Path(out))
    except ValueError as e:  # OutLocked
        print(f"sampcheck merge: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"sampcheck merge: cannot write in --out {out}: {e.strerror or e}", file=sys.stderr)
        return 3
    for line in run_summary(doc):
        print(line)
    print(f"wrote {results_path} and {html_path} ({len(run['merged_from'])} shards, {run['cases_selected']} cases)")
    if args.junit_xml and _write_junit(doc, args.junit_xml, "merge"):
        return 3
    if args.record:
        from harness.records import records
        try:
            path = records.write(records.from_results(doc, rec_impl), Path(args.record))
        except OSError as e:
            print(f"sampcheck merge: cannot write --record {args.record}: {e.strerror or e}", file=sys.stderr)
            return 3
        print(f"wrote {path} (the run record of {rec_impl})")
    return 1 if any(r["status"] in ("fail", "error") for r in doc["results"]) else 0


def _list_impls(verbose: bool) -> int:
    """``sampcheck list impls``: one line per registry entry (name, roles, profile, version, devices, availability);
    versions spelled as the report spells them (:func:`harness.report.html.show_version`)."""
    from impls import registry
    from impls.base import stage_provenance
    from harness.report.html import show_version
    from harness.corpus.truths import default_profile_name
    default_profile = default_profile_name()   # whose predictions are the cases' own truths
    rows, details = [], []
    for e in registry.entries():
        try:
            impl = e.create()
        except registry.ImplLoadError as err:
            rows.append((e.name, "-", "profile=-", "version=-", "-", f"unavailable: {err}"))
            details.append([])
            continue
        why = impl.available("cpu")
        try:
            ver = impl.version() if why is None else "-"
        except Exception as err:
            ver, why = "-", f"{type(err).__name__}: {err}"
        roles = ",".join(r for r in ("conformance", "latency") if r in registry.roles_of(impl))
        profile = getattr(impl, "profile", None)
        devices = ",".join(sorted(getattr(impl, "devices", ()) or ())) or "-"
        origin = "" if e.origin.startswith("impls.") else f" ({e.origin})"
        pname = "-" if not profile else profile.name + (" (default)" if profile.name == default_profile else "")
        rows.append((e.name, roles, f"profile={pname}", f"version={show_version(ver)}", devices,
                     ("available" if why is None else "unavailable: " + why) + origin))
        extra = []
        if verbose:
            feats = sorted(getattr(impl, "features", ()) or ())
            extra.append("    features: " + (", ".join(feats) or "-"))
            scen = getattr(impl, "scenario_features", None)
            if scen is not None:   # what its run_scenario expresses, where it differs (impls/base.py)
                extra.append("    scenario features: " + (", ".join(sorted(scen)) or "-"))
            try:
                stages = stage_provenance(impl)
            except ValueError as err:
                stages = {"(invalid)": str(err)}
            extra.append("    stages: " + (", ".join(f"{s}={p}" for s, p in stages.items()) or "-"))
        details.append(extra)
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    for r, extra in zip(rows, details):
        print("  ".join(f"{c:<{w}}" for c, w in zip(r, widths)) + "  " + r[5])
        for line in extra:
            print(line)
    return 0


def _cmd_list(args) -> int:
    if args.what == "impls":
        if args.patterns:
            print("sampcheck list impls: takes no patterns (they select cases: sampcheck list cases PATTERN)",
                  file=sys.stderr)
            return 2
        return _list_impls(args.verbose)
    from harness.corpus.load import CASES_DIR, CaseError, discover, load_case, select
    no_cases = _no_cases_problem()
    if no_cases:
        print(f"sampcheck list cases: {no_cases}", file=sys.stderr)
        return 2
    try:
        paths = select(discover(CASES_DIR), args.patterns, CASES_DIR, label="a pattern")
    except ValueError as e:
        print(f"sampcheck list cases: {e}", file=sys.stderr)
        return 2
    status, broken = 0, 0
    for p in paths:
        try:
            c = load_case(p, CASES_DIR)
            print(f"{c.id:<55} {c.check:<12} {c.description}")
        except CaseError as e:
            print(f"ERROR {e}", file=sys.stderr)
            status, broken = 1, broken + 1
    if broken:
        print(f"sampcheck list cases: {broken} case file(s) do not load (ERROR lines above, on stderr)",
              file=sys.stderr)
    return status


def _cmd_show(args) -> int:
    from harness.corpus.load import CaseError
    from harness.show import show
    no_cases = _no_cases_problem()
    if no_cases:
        print(f"sampcheck show: {no_cases}", file=sys.stderr)
        return 2
    try:
        print(show(args.case, Path(args.records) if args.records else None, predict=not args.no_predict), end="")
    except (ValueError, CaseError) as e:
        print(f"sampcheck show: {e}", file=sys.stderr)
        return 2
    return 0


def _cmd_golden(args) -> int:
    from harness.records import golden
    from harness.corpus.ids import is_external
    from harness.corpus.load import CASES_DIR, COMMON_FIELDS, CaseError, discover, load_case, select
    from harness.judge.judge import Judge
    if args.action == "add" and not args.ids:
        print("sampcheck golden add: give the id of the case, e.g. 'sampcheck golden add filters/my-case'",
              file=sys.stderr)
        return 2
    if args.action != "add" and args.ids:
        print(f"sampcheck golden {args.action}: unexpected argument(s) {' '.join(args.ids)} "
              "(select cases with --cases PATTERN)", file=sys.stderr)
        return 2
    try:
        if args.action == "add":
            paths = []
            for cid in args.ids:
                cid = cid.removesuffix(".toml")
                if not re.fullmatch(COMMON_FIELDS["id"]["pattern"].strip("^$"), cid):  # no '..', no absolute path
                    print(f"sampcheck golden add: {cid!r} is not a case id (an id is the path under cases/ without "
                          ".toml, e.g. 'filters/my-case')", file=sys.stderr)
                    return 2
                p = CASES_DIR / f"{cid}.toml"
                if not p.is_file():
                    print(f"sampcheck golden add: no case file {p} for id {cid!r} "
                          "(an id is the path under cases/ without .toml)", file=sys.stderr)
                    return 2
                paths.append(p)
        else:
            no_cases = _no_cases_problem()
            if no_cases:
                print(f"sampcheck golden {args.action}: {no_cases}", file=sys.stderr)
                return 2
            paths = select(discover(CASES_DIR), args.cases, CASES_DIR)
    except ValueError as e:
        print(f"sampcheck golden: {e}", file=sys.stderr)
        return 2
    cases, broken = [], 0
    for p in paths:
        try:
            cases.append(load_case(p, CASES_DIR))
        except CaseError as e:
            print(f"ERROR {e}", file=sys.stderr)
            broken += 1
    if args.action == "add" and broken:
        print("sampcheck golden add: fix the case file first ('sampcheck list cases' validates every case)",
              file=sys.stderr)
        return 2
    external = [c for c in cases if is_external(c.id)]
    if external:
        # golden files belong to corpus cases only: an external file's id is no corpus id (harness.corpus.ids)
        for c in external:
            print(f"sampcheck golden {args.action}: {c.path}: lies outside the corpus {CASES_DIR} (id {c.id}): golden "
                  "files are written for corpus cases only; move the file into the corpus first", file=sys.stderr)
        return 2
    judge = Judge([], 1)
    from harness.corpus.paths import packaged
    if args.action in ("update", "add") and args.accept and packaged(golden.GOLDEN_DIR):
        print(f"sampcheck golden {args.action}: "
              f"{_READ_ONLY.format(what='golden files', path=golden.GOLDEN_DIR, env='SAMPCHECK_GOLDEN')}",
              file=sys.stderr)
        return 2
    if args.action in ("update", "add"):
        changes = golden.plan(cases, judge)
        for path, old, new in changes:
            sys.stdout.write(golden.unified_diff(path, old, new))
        if not changes:
            unread = f"; {broken} case file(s) not read (the ERROR lines)" if broken else ""
            print(f"golden {args.action}: {len(cases)} case(s), every golden file is up to date{unread}")
            return 1 if broken else 0
        if not args.accept:
            print(f"golden {args.action}: {len(changes)} golden file(s) would change (shown above); nothing "
                  f"written. Review, then re-run with --accept to write them.")
            return 1
        for path, what in golden.write(changes):
            print(f"{what:>7} {path}")
        print(f"{len(changes)} golden file(s) written; review them before committing ('git status golden/' "
              "lists new files, 'git diff golden/' shows changed ones)")
        return 1 if broken else 0
    problems = golden.check(cases, judge)
    for path, why in problems:
        print(f"DRIFT {path}: {why}")
    unread = f", {broken} case file(s) not read (the ERROR lines)" if broken else ""
    print(f"golden check: {len(cases)} case(s), {len(problems)} problem(s){unread}")
    return 1 if problems or broken else 0


def _cmd_record(args) -> int:
    from harness.records import records
    if args.cases and not args.out:
        print("sampcheck record: --cases without --out would replace the committed record of the whole corpus "
              "with a partial one; pass --out FILE", file=sys.stderr)
        return 2
    no_cases = _no_cases_problem()
    if no_cases:
        print(f"sampcheck record: {no_cases}", file=sys.stderr)
        return 2
    if args.out:
        out = Path(args.out)
        parent = out.parent if str(out.parent) else Path(".")
        why = ""
        if out.is_dir():
            why = "is a directory (give a file name)"
        elif not parent.is_dir():
            why = f"folder {parent} does not exist" if not parent.exists() else f"{parent} is not a directory"
        else:
            why = _writable_dir(parent)
        if why:
            print(f"sampcheck record: --out {args.out}: {why}", file=sys.stderr)
            return 2
    try:
        rec = records.record(args.impl, args.cases, args.device, isolate=not args.no_isolation,
                             progress=not args.no_progress)
    except (KeyError, ValueError) as e:
        print(f"sampcheck record: {e.args[0] if e.args else e}", file=sys.stderr)
        return 2
    if rec["engine"].get("skip_reason"):
        print(f"sampcheck record: {args.impl} is not available here: {rec['engine']['skip_reason']}", file=sys.stderr)
        return 1
    path = records.write(rec, Path(args.out) if args.out else None)
    from collections import Counter
    c = Counter(e["status"] for e in rec["cases"].values())
    print(f"{args.impl} {rec['engine']['version']}: {len(rec['cases'])} case(s): "
          + ", ".join(f"{c[s]} {s}" for s in ("pass", "known-diff", "known-bug", "fail", "n/a", "skip", "error") if c[s]))
    print(f"wrote {path} ({path.stat().st_size} bytes)")
    return 0


def _cmd_diff(args) -> int:
    from harness.report import diff as diffmod
    from harness.records.records import RecordError, load
    try:
        a, b = load(args.a), load(args.b)
    except RecordError as e:
        print(f"sampcheck diff: {e}", file=sys.stderr)
        return 2
    kw = {} if args.false_alarm is None else {"false_alarm": args.false_alarm}
    if args.false_alarm is not None and not 0 < args.false_alarm < 1:
        print("sampcheck diff: --false-alarm must lie in (0, 1)", file=sys.stderr)
        return 2
    for opt, target in (("--text", args.text), ("--html", args.html)):
        if target and (Path(target).is_dir() or not Path(target).parent.is_dir()):
            print(f"sampcheck diff: {opt} {target}: " + ("is a directory" if Path(target).is_dir() else
                  f"folder {Path(target).parent} does not exist"), file=sys.stderr)
            return 2
    result = diffmod.diff(a, b, name_a=Path(args.a).name, name_b=Path(args.b).name, **kw)
    text = diffmod.render_text(result)
    sys.stdout.write(text)
    try:
        if args.text:
            Path(args.text).write_text(text, encoding="utf-8")
        if args.html:
            Path(args.html).write_text(diffmod.render_html(result), encoding="utf-8")
    except OSError as e:
        print(f"sampcheck diff: cannot write {e.filename}: {e.strerror}", file=sys.stderr)
        return 2
    return 1 if result["changed"] else 0


def _cmd_check_impl(args) -> int:
    from collections import Counter

    from impls import registry

    from .conformance import protocol_checks, smoke
    try:
        impl = registry.create(args.impl)
    except KeyError as e:
        print(f"sampcheck check-impl: {e.args[0]}", file=sys.stderr)
        return 2
    except registry.ImplLoadError as e:
        print(f"sampcheck check-impl: {e}", file=sys.stderr)
        return 2
    problems = protocol_checks(impl, args.device)
    for p in problems:
        print(p)
    print(f"{impl.name}: protocol checks: {len(problems)} problem(s)")
    if problems or args.no_smoke:
        return 1 if problems else 0
    if "conformance" not in registry.roles_of(impl):
        print(f"{impl.name}: a latency-only peer: no smoke corpus")
        return 0
    out = smoke(args.impl, args.device, Path(args.out) if args.out else None, progress=False)
    c = Counter(r["status"] for r in out.doc["results"])
    print(f"{impl.name}: smoke corpus ({len(out.doc['results'])} cases): "
          + ", ".join(f"{c[s]} {s}" for s in ("pass", "known-diff", "known-bug", "fail", "n/a", "skip", "error") if c[s]))
    bad = [r for r in out.doc["results"] if r["status"] in ("fail", "error")]
    for r in bad:
        print(f"  {r['status'].upper():5} {r['case']}: {str(r['details'].get('message', ''))[:300]}")
    for r in out.doc["results"]:
        if r["status"] == "n/a":
            print(f"  N/A   {r['case']}: {str(r['details'].get('message', ''))[:300]}")
    if c["n/a"]:
        print(f"  {c['n/a']} of {len(out.doc['results'])} smoke cases are n/a (each with its reason above): the smoke "
              f"corpus is a start; run the whole corpus next: sampcheck run --impl {args.impl}")
    print(f"wrote {out.results_path} and {out.html_path}")
    return 1 if bad else 0


def _cmd_docs(args) -> int:
    import time
    from harness.corpus import docs, tables
    from harness.corpus.load import CASES_DIR, CaseError, discover, load_case
    from harness.judge import mutation
    if (args.all or args.jobs != 1) and not args.refresh or args.refresh and args.check or args.jobs < 1:
        print("sampcheck docs: --all and --jobs go with --refresh, --refresh not with --check; --jobs >= 1",
              file=sys.stderr)
        return 2
    where = docs.docs_dir(CASES_DIR)
    try:
        if args.refresh:
            if where is None:
                print(f"sampcheck docs: no docs/ beside the corpus {CASES_DIR}: --refresh writes "
                      "docs/coverage.json of a checkout", file=sys.stderr)
                return 2
            t0 = time.perf_counter()
            cases = [load_case(p, CASES_DIR) for p in discover(CASES_DIR)]
            path = where / tables.CACHE_NAME
            # what is measured is kept at once (an interrupted refresh resumes), outside the committed files
            journal = where.parent / "reports" / "coverage-refresh.jsonl"
            new = mutation.refresh(cases, tables.read_cache(path), everything=args.all, jobs=args.jobs,
                                   journal=journal, root=CASES_DIR,
                                   progress=lambda line: print(f"  {line}", file=sys.stderr, flush=True))
            changed = tables.write_cache(path, new)
            journal.unlink(missing_ok=True)
            print(f"{'wrote' if changed else 'unchanged:'} {path} ({len(new['cases'])} cases, {len(new['flips'])} "
                  f"flips, {time.perf_counter() - t0:.0f} s)")
        paths = docs.stale() if args.check else docs.write()
        gaps = ([], [])
        if args.check and where is not None:
            gaps = mutation.cache_gaps(tables.read_cache(where / tables.CACHE_NAME), tables.scan_cases(CASES_DIR))
    except (ValueError, CaseError) as e:
        print(f"sampcheck docs: {e}", file=sys.stderr)
        return 2
    if args.check:
        for p in paths:
            print(f"STALE {p} (run 'sampcheck docs' to rewrite it)")
        if any(gaps):
            print(f"STALE {where / tables.CACHE_NAME}: {len(gaps[0])} case(s) and {len(gaps[1])} flip(s) not measured "
                  f"(run 'sampcheck docs --refresh'): " + ", ".join((gaps[0] + gaps[1])[:5])
                  + (", ..." if len(gaps[0]) + len(gaps[1]) > 5 else ""))
        n = len(paths) + bool(any(gaps))
        print(f"docs check: {n} stale file(s)")
        return 1 if n else 0
    for p in paths:
        print(f"wrote {p}")
    print(f"{len(paths)} generated file(s) rewritten" if paths else "every generated file is up to date")
    return 0


def _cmd_case(args) -> int:
    """``sampcheck case new``: the template (:func:`harness.corpus.authoring.new_case`), then the existing cases
    that share the most of ``--features`` (:func:`harness.corpus.authoring.similar_cases`)."""
    from harness.corpus.authoring import new_case, similar_cases
    from harness.corpus.load import CASES_DIR
    from harness.corpus.paths import packaged
    if packaged(CASES_DIR):
        print(f"sampcheck case new: {_READ_ONLY.format(what='corpus', path=CASES_DIR, env='SAMPCHECK_CASES')}",
              file=sys.stderr)
        return 2
    features = list(dict.fromkeys(f.strip() for opt in args.features or [] for f in opt.split(",") if f.strip()))
    try:
        path = new_case(args.category, args.name, check=args.check, force=args.force, features=features)
    except (ValueError, FileExistsError) as e:
        print(f"sampcheck case new: {e}", file=sys.stderr)
        return 2
    case_id = f"{path.parent.name}/{path.stem}"
    print(f"wrote {path}")
    if features:
        similar = similar_cases(features, root=path.parent.parent, exclude=[case_id])
        if similar:
            print("existing cases sharing the most of these features (read them first: extend one rather than "
                  "add a duplicate):")
            width = max(len(s["id"]) for s in similar)
            for s in similar:
                print(f"  {s['id']:<{width}}  {len(s['shared'])}/{len(features)} shared ({', '.join(s['shared'])}): "
                      f"{s['description']}")
        else:
            print("no existing case declares any of these features")
    else:
        print("(with --features A,B the template lists them, and the existing cases that declare the most of "
              "them are shown)")
    print("next: replace every value that starts with TODO (until then the loader refuses the file and names "
          f"each one left), then 'sampcheck list cases' (validates it), 'sampcheck run --cases {case_id}', and "
          f"'sampcheck golden add {case_id} --accept'")
    return 0


def _start_workers_early(argv: list) -> None:
    """For ``sampcheck run`` with workers (no ``--no-isolation``), start their fork server now.

    It imports torch and the harness (about 3 s of one core) while this process does the same
    to build its parser and reads the corpus (:func:`harness.run.isolation.prestart`); the
    workers still get this process's environment as it is when they start
    (:class:`harness.run.isolation.Worker`), implementation options included.
    """
    if argv[:1] == ["run"] and not {"--no-isolation", "-h", "--help"} & set(argv):
        from harness.run.isolation import prestart
        prestart(["reference"])  # every implementation named on the command line starts from it


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread where Ctrl-C raises KeyboardInterrupt, so that a terminated run
    takes the same way out: its workers stopped (:class:`harness.run.isolation.Worker`), its journal kept
    for ``--resume``. Exit status 143 (128 + 15), as a process killed by SIGTERM reports."""

    signum = signal.SIGTERM


def _on_sigterm(signum, frame):
    raise Terminated()


def main(argv=None) -> int:
    """Entry point of the ``sampcheck`` console script; returns the exit status.

    While a command runs, SIGTERM raises :class:`Terminated` (where no other handler was installed and
    this is the main thread): without it a terminated ``sampcheck run`` left its workers running.
    """
    previous = None
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        previous = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        _start_workers_early(list(sys.argv[1:] if argv is None else argv))
        parser = build_parser()
        args = parser.parse_args(argv)
        _export_impl_options(args)
        return _dispatch(args)
    except KeyboardInterrupt as e:  # before the command started (while torch imports for the parser)
        terminated = isinstance(e, Terminated)
        print(f"\nsampcheck: {'terminated (SIGTERM)' if terminated else 'interrupted'}", file=sys.stderr)
        return 143 if terminated else 130
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _dispatch(args) -> int:
    handlers = {"run": _cmd_run, "list": _cmd_list, "golden": _cmd_golden, "record": _cmd_record,
                "diff": _cmd_diff, "case": _cmd_case, "report": _cmd_report, "docs": _cmd_docs,
                "check-impl": _cmd_check_impl, "merge": _cmd_merge, "show": _cmd_show}
    try:
        return handlers[args.command](args)
    except BrokenPipeError:
        # the reader went away (``sampcheck list cases | head``): stop quietly, with the status of a
        # command killed by SIGPIPE (128 + 13), as Unix tools do; the command did not finish
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except OSError:
            pass
        return 141
    except Terminated:
        print(f"\nsampcheck {args.command}: terminated (SIGTERM)", file=sys.stderr)
        return 143
    except KeyboardInterrupt:
        print(f"\nsampcheck {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
