"""``sampcheck show CASE``: one case as a person reads it, with what each recorded engine did on it.

Pipeline of :func:`show`, in order:

1. find the case by id (:func:`harness.corpus.load.select`: an id, or a path; a typo gets the close ids);
2. its header: id, description, category, check, features, sources (seed section, or engine file,
   version and symbol), then its notes;
3. its inputs and expectations: per batch, each row's fields (long logits shortened) and ``expect``
   (single-step kinds), or the scenario's requests (scenarios);
4. the reference's prediction under the default profile, row by row (single-step kinds);
5. the run records under ``golden/engines/`` (:data:`harness.records.records.ENGINES_DIR`): per
   record, the engine and version, the status, whether its own code decided it, and the message;
6. the registered findings that name the case (``cases/findings.toml``).
"""

from __future__ import annotations

import fnmatch
import json
from pathlib import Path
from typing import Optional

__all__ = ["show", "describe_value"]

#: Values of a list longer than this are shortened (``[a, b, c, ... (N values)]``).
MAX_VALUES = 12


def describe_value(v) -> str:
    """A field value in one short line: lists past :data:`MAX_VALUES` entries shortened, floats in ``%g``."""
    if isinstance(v, float):
        return f"{v:g}"
    if isinstance(v, list):
        inner = [describe_value(x) for x in v[:MAX_VALUES]]
        more = f", ... ({len(v)} values)" if len(v) > MAX_VALUES else ""
        return "[" + ", ".join(inner) + more + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k} = {describe_value(x)}" for k, x in v.items()) + "}"
    return str(v)


def _source(s: dict) -> str:
    if "seed" in s:
        return f"seed document {s['seed']}, section {s.get('section', '?')}"
    parts = [f"{s.get('repo', '?')}:{s.get('path', '?')}"]
    if s.get("version"):
        parts.append(f"@{s['version']}")
    if s.get("symbol"):
        parts.append(f" ({s['symbol']})")
    return "".join(parts)


def _rows(case) -> list:
    lines = []
    for b in case.batches:
        lines.append(f"  batch {b.name!r}: {len(b.rows)} row(s)")
        for r in b.rows:
            fields = ", ".join(f"{k} = {describe_value(v)}" for k, v in r.fields.items())
            lines.append(f"    row {r.index}: {fields}")
            if r.expect:
                lines.append(f"      expect: {describe_value(r.expect)}")
            for prof, truth in (r.expect_by_profile or {}).items():
                lines.append(f"      expect ({prof}): {describe_value(truth)}")
    return lines


def _scenario(case) -> list:
    raw = case.raw.get("scenario", {})
    lines = [f"  {k} = {describe_value(v)}" for k, v in raw.items() if k not in ("requests", "expect")]
    for req in raw.get("requests", []):
        lines.append("  request " + ", ".join(f"{k} = {describe_value(v)}" for k, v in req.items()))
    expect = raw.get("expect") or case.raw.get("expect")
    if expect:
        lines.append("  expect: " + describe_value(expect))
    return lines


def _prediction(case) -> list:
    from harness.judge import Judge
    from impls.profiles import TRTLLM
    lines = []
    for b, preds in zip(case.batches, Judge([], 1).predict(case, TRTLLM)):
        for r, p in zip(b.rows, preds):
            if p.error:
                lines.append(f"  {b.name}:{r.index}: error {p.error} ({p.message})")
            else:
                lines.append(f"  {b.name}:{r.index}: token {p.token}, mode {p.mode}, finish {p.finish_reason}")
    return lines


def _records(case_id: str, engines_dir: Path) -> list:
    lines = []
    for path in sorted(Path(engines_dir).glob("*.json")):
        try:
            doc = json.loads(path.read_text())
            entry = doc["cases"].get(case_id)
            eng = doc["engine"]
        except (OSError, ValueError, KeyError, AttributeError):
            continue   # not a record (a diff, a broken file): sampcheck diff reports those
        if entry is None:
            lines.append(f"  {path.name}: not in this record ({len(doc['cases'])} cases)")
            continue
        own = ""
        if "own_code" in entry:
            own = ", own code" if entry["own_code"] else f", borrowed: {', '.join(entry.get('borrowed') or [])}"
        msg = (entry.get("message") or "").splitlines()[0][:160] if entry.get("message") else ""
        lines.append(f"  {eng.get('impl')} {eng.get('version')} ({path.name}): {entry['status']}{own}"
                     + (f" — {msg}" if msg else ""))
    return lines


def show(case_id: str, engines_dir: Optional[Path] = None, predict: bool = True) -> str:
    """The text of ``sampcheck show`` for one case (the module docstring's sections).

    Parameters
    ----------
    case_id : str
        A case id (``"filters/top-k-two-statistical"``) or a case file's path.
    engines_dir : Path, optional
        Where the run records are (default :data:`harness.records.records.ENGINES_DIR`).
    predict : bool
        Include the reference's prediction under the default profile (single-step kinds).

    Returns
    -------
    str
        Several lines, ending with a newline.

    Raises
    ------
    ValueError
        No case matches ``case_id`` (the message names close ids), it names several, or ``engines_dir``
        is not a folder.
    harness.corpus.load.CaseError
        The case file does not load (the message locates the problem).
    """
    from harness.corpus.findings import load_findings
    from harness.corpus.load import CASES_DIR, discover, load_case, select
    from harness.records.records import ENGINES_DIR

    if any(ch in case_id for ch in "*?[") or case_id.startswith("tag:"):
        raise ValueError(f"{case_id!r}: give one case id, not a pattern (sampcheck list cases lists them)")
    hits = select(discover(CASES_DIR), [case_id], CASES_DIR, label="case")
    if len(hits) != 1:
        raise ValueError(f"{case_id!r} names {len(hits)} cases (a category?): give one case id")
    case = load_case(hits[0], CASES_DIR)
    out = [f"{case.id} — {case.description}",
           f"  category {case.category}, check {case.check}, features: {', '.join(sorted(case.features))}",
           f"  file: {case.path}"]
    for s in case.sources:
        out.append(f"  source: {_source(s)}")
    if case.notes.strip():
        out += ["", "Notes:"] + ["  " + ln for ln in case.notes.strip().splitlines()]
    out += ["", "Inputs and expectations:"]
    out += _rows(case) if case.batches else _scenario(case)
    if predict and case.batches:
        out += ["", "The reference's prediction (default profile trtllm):"] + _prediction(case)
    elif predict:
        out += ["", f"The reference's prediction: a {case.check} case is decoded, not predicted row by row; "
                    f"'sampcheck run --cases {case.id}' shows the reference's decode in its report."]
    if engines_dir is not None and not Path(engines_dir).is_dir():
        raise ValueError(f"--records {engines_dir}: not a folder")
    recs = _records(case.id, engines_dir or ENGINES_DIR)
    out += ["", f"Run records ({Path(engines_dir or ENGINES_DIR)}):"] + (recs or ["  none"])
    found = [f for f in load_findings(CASES_DIR / "findings.toml")
             if any(fnmatch.fnmatchcase(case.id, c) for c in f.cases)]
    if found:
        out += ["", "Findings naming it:"] + [f"  {f.id} ({f.impl} {f.versions}): {f.title}" for f in found]
    return "\n".join(out) + "\n"
