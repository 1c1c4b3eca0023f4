"""Golden files: the reference's predictions per profile, reviewed and guarding against drift.

``golden/<profile>/<case-id>.json`` records, for every row of every batch of a
case, what the reference predicts under that profile: token, error, mode,
finish reason, RAW/PROCESSED logprobs (rounded to 1e-6), rank and the
support (listed up to 64 ids, otherwise its size and a CRC-32 of the ids).
Each file names the case, the profile and :data:`REFERENCE_VERSION`.
Scenario cases record, per request, the observations of
:func:`harness.judge.scenarios.golden_record` (for beam search the predecessor
map of every step) instead of rows.

``sampcheck golden update`` shows a unified diff of every file it would
change and writes them only with ``--accept``; ``sampcheck golden add ID``
does the same for the files of one new case; ``sampcheck golden check``
fails on any difference (drift).
"""

from __future__ import annotations

import json
import math
import zlib
from pathlib import Path

from impls.profiles import PROFILES
from impls.reference import REFERENCE_VERSION

from harness.corpus.load import Case, project_dir

__all__ = ["GOLDEN_DIR", "golden_record", "golden_path", "plan", "unified_diff", "write", "update", "check"]

GOLDEN_DIR = project_dir("golden")


def _r(v):
    if v is None:
        return None
    v = float(v)
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    if math.isnan(v):
        return "nan"
    return round(v, 6)


def golden_record(case: Case, profile_name: str, predictions: list) -> dict:
    """The golden content for one case under one profile.

    Parameters
    ----------
    case : Case
    profile_name : str
    predictions : list of list of RowResult
        From :meth:`harness.judge.Judge.predict`.

    Returns
    -------
    dict
        JSON-ready; deterministic for identical predictions.
    """
    batches = []
    for b, preds in zip(case.batches, predictions):
        rows = []
        for p in preds:
            row = {"token": p.token, "error": p.error, "mode": p.mode, "finish_reason": p.finish_reason,
                   "logprob": _r(p.logprob), "processed_logprob": _r(p.processed_logprob), "rank": p.rank}
            if p.probs is not None:
                support = [int(i) for i in (p.probs > 0).nonzero().flatten().tolist()]
                if len(support) <= 64:
                    row["support"] = support
                else:
                    row["support_size"] = len(support)
                    row["support_crc32"] = zlib.crc32(json.dumps(support).encode())
            rows.append({k: v for k, v in row.items() if v is not None})
        batches.append({"name": b.name, "rows": rows})
    return {"case": case.id, "profile": profile_name, "reference_version": REFERENCE_VERSION, "batches": batches}


def golden_path(case_id: str, profile_name: str, root: Path = GOLDEN_DIR) -> Path:
    """``golden/<profile>/<case-id>.json``."""
    return Path(root) / profile_name / f"{case_id}.json"


def _dump(rec: dict) -> str:
    return json.dumps(rec, indent=1, sort_keys=True) + "\n"


def _compute(cases: list, judge, profiles) -> dict:
    """``{path relative to the golden folder: text}`` of every case under every profile."""
    import sys

    from tqdm import tqdm
    out = {}
    # progress on a terminal only (tqdm turns itself off when stderr is not one: CI logs stay clean)
    for case in tqdm(cases, desc="golden", unit="case", file=sys.stderr, disable=None, leave=False):
        for name in profiles:
            if case.check == "scenario":
                from harness.judge.scenarios import golden_record as scenario_record
                out[golden_path(case.id, name, Path())] = _dump(scenario_record(case, name, judge))
                continue
            out[golden_path(case.id, name, Path())] = _dump(golden_record(case, name, judge.predict(case, PROFILES[name])))
    return out


def plan(cases: list, judge, profiles=tuple(PROFILES), root: Path = None) -> list:
    """The golden files that differ from what the reference computes now.

    Parameters
    ----------
    cases : list of Case
    judge : harness.judge.Judge
        Its :meth:`~harness.judge.Judge.predict` gives the predictions.
    profiles : sequence of str
        Profile names (default: every profile of :data:`impls.profiles.PROFILES`).
    root : Path, optional
        The golden directory (default :data:`GOLDEN_DIR`, ``golden/``).

    Returns
    -------
    list of (Path, str or None, str)
        ``(path, old text or None when the file does not exist, new text)``
        for every file that would change, in case then profile order.
        Nothing is written.
    """
    out = []
    for path, text in _compute(cases, judge, profiles).items():
        path = Path(root if root is not None else GOLDEN_DIR) / path
        old = path.read_text() if path.exists() else None
        if old != text:
            out.append((path, old, text))
    return out


def unified_diff(path: Path, old, new: str, base: Path = None) -> str:
    """A unified diff (``git diff`` style) of one golden file, ``old`` -> ``new``.

    Parameters
    ----------
    path : Path
    old : str or None
        The current text; ``None`` for a file that does not exist yet
        (shown against ``/dev/null``).
    new : str
    base : Path, optional
        Paths are shown relative to it (default: the project root).

    Returns
    -------
    str
        Ends with a newline; empty when ``old == new``.
    """
    import difflib
    base = Path(base) if base else Path(GOLDEN_DIR).parent
    try:
        shown = Path(path).resolve().relative_to(base.resolve()).as_posix()
    except ValueError:
        shown = str(path)
    lines = difflib.unified_diff((old or "").splitlines(keepends=True), new.splitlines(keepends=True),
                                 fromfile="/dev/null" if old is None else f"a/{shown}", tofile=f"b/{shown}")
    return "".join(lines)


def write(changes: list) -> list:
    """Write the files of :func:`plan`; return ``[(path, "added"|"changed")]``."""
    done = []
    for path, old, text in changes:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        done.append((path, "added" if old is None else "changed"))
    return done


def update(cases: list, judge, profiles=tuple(PROFILES), root: Path = None, accept: bool = False) -> list:
    """Golden files that change: written only when ``accept`` is true.

    Returns
    -------
    list of (Path, str)
        ``(path, "added"|"changed")`` for every file that differs from the
        reference's output now (written when ``accept``, else untouched).
    """
    changes = plan(cases, judge, profiles, root)
    if accept:
        return write(changes)
    return [(path, "added" if old is None else "changed") for path, old, _ in changes]


def check(cases: list, judge, profiles=tuple(PROFILES), root: Path = None) -> list:
    """Compare predictions with golden files; return ``[(path, problem)]`` (empty when clean)."""
    problems = []
    for path, text in _compute(cases, judge, profiles).items():
        path = Path(root if root is not None else GOLDEN_DIR) / path
        if not path.exists():
            problems.append((path, "missing (run 'sampcheck golden add <id>', review, then add --accept)"))
            continue
        try:
            old = path.read_text(encoding="utf-8")
            a = json.loads(old) if old != text else None
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            where = f" (line {e.lineno}, column {e.colno})" if isinstance(e, json.JSONDecodeError) else ""
            problems.append((path, f"unreadable golden file{where}: {e.msg if isinstance(e, json.JSONDecodeError) else e}; "
                                   "rewrite it with 'sampcheck golden update --accept' after review"))
            continue
        if old != text:
            b = json.loads(text)
            diffs = []
            for bo, bn in zip(a.get("batches", []), b.get("batches", [])):
                for i, (ro, rn) in enumerate(zip(bo["rows"], bn["rows"])):
                    for k in sorted(set(ro) | set(rn)):
                        if ro.get(k) != rn.get(k):
                            diffs.append(f"{bn['name']}:{i}.{k}: golden {ro.get(k)!r}, now {rn.get(k)!r}")
            if "scenario" in b:
                from harness.judge.scenarios import golden_diff
                diffs.extend(golden_diff(a, b))
            if a.get("reference_version") != b["reference_version"]:
                diffs.append(f"reference_version: golden {a.get('reference_version')!r}, now {b['reference_version']!r}")
            problems.append((path, "; ".join(diffs) or "content differs (row count or layout)"))
    return problems
