"""The HTML conformance report: one self-contained page rendered with Jinja2.

Sections, in order: the run (when, where, implementations and versions); the
summary (counts by status per implementation, and by category); the
statistical checks; the case × implementation matrix (each cell links to that
implementation's result in the case); one section per case with its
description, sources, inputs, and per implementation the status, message and
the expected / predicted / actual values row by row; the profile table (every
semantic field of each profile in the run, differences from the default
highlighted, with citations).

Each result that is not a plain pass (``fail``, ``error``, ``known-bug``,
``known-diff``) is shown open: the inputs, expected vs predicted vs actual row
by row, the rule's source and a one-line command that reproduces it
(``sampcheck run --cases ID --impl NAME``). Every case and every result has a
permalink (``#case-<category>--<name>`` and ``#case-<category>--<name>.<impl>``).

The page needs no network: styles and one small script are inline. The script
only adds the filters (status, category, implementation); without it every
case is shown.
"""

from __future__ import annotations

import json
import shlex
from collections import Counter, defaultdict
from pathlib import Path

import jinja2

from impls.profiles import TRTLLM

from harness.judge.blame import show_value
from harness.judge.result import STATUSES
from .statreport import template_globals

__all__ = ["write_html", "render_html", "repro_command", "OPEN_STATUSES"]

#: Statuses whose result is shown open with inputs, expected vs actual, the
#: rule's source and the command that reproduces it.
OPEN_STATUSES = ("fail", "error", "known-bug", "known-diff")

_ENV = jinja2.Environment(
    loader=jinja2.FileSystemLoader(str(Path(__file__).with_name("templates"))),
    autoescape=jinja2.select_autoescape(["html", "j2"]),
    trim_blocks=True, lstrip_blocks=True, undefined=jinja2.StrictUndefined,
)
_ENV.globals.update(template_globals())  # statistical charts and budget (harness.report.statreport)


def _anchor(case_id: str) -> str:
    return "case-" + case_id.replace("/", "--")


def _result_anchor(case_id: str, impl: str) -> str:
    return f"{_anchor(case_id)}.{impl}"


def repro_command(case_id: str, impl: str, device: str = "cpu") -> str:
    """The one-line command that reruns one case on one implementation.

    It writes to ``reports/repro`` so that it never overwrites the report the
    user is reading (``reports/latest`` by default).

    >>> repro_command("filters/top-k-two", "transformers")
    'sampcheck run --cases filters/top-k-two --impl transformers --out reports/repro'
    >>> repro_command("filters/top-k-two", "fused", "cuda")
    'sampcheck run --cases filters/top-k-two --impl fused --device cuda --out reports/repro'
    """
    cmd = f"sampcheck run --cases {shlex.quote(case_id)} --impl {shlex.quote(impl)}"
    return cmd + (" --device cuda" if device == "cuda" else "") + " --out reports/repro"


def _short(v, limit: int = 12) -> str:
    if isinstance(v, list) and len(v) > limit:
        return json.dumps(v[:limit])[:-1] + f", … ({len(v)} values)]"
    if isinstance(v, dict) and "dist" in v:
        return ", ".join(f"{k}={v[k]}" for k in v)
    return json.dumps(v) if not isinstance(v, str) else v


#: The project's two seed documents (cases/README.md, field ``source``): what each one is.
SEED_DOCS = {"000_fabad194daba9a8c.txt": "TensorRT-LLM sampler walk-through (Chinese)",
             "004_6514eaee5e7b4fde.txt": "vLLM sampler walk-through (French, vLLM v0.25.1)"}


def _source_link(src: dict) -> tuple:
    if "url" in src:
        return src["url"], src.get("title", src["url"])
    if "repo" in src:
        href = f"https://github.com/{src['repo']}/blob/{src['version']}/{src['path']}"
        return href, f"{src['repo']}: {src['path']} @ {src['version']}" + (f" ({src['symbol']})" if src.get("symbol") else "")
    what = SEED_DOCS.get(src["seed"], "seed document")
    return None, (f"{what} {src['seed']} § {src['section']} (a seed document of the project, kept outside this "
                  f"repository: cases/README.md, field source)")


def _inputs(case) -> list:
    """One entry per row or request, as the case's check kind lists them (values shortened for the page)."""
    return [{"where": e["where"], "fields": {k: _short(v) for k, v in e["fields"].items()},
             "expect": {k: _short(v) for k, v in e["expect"].items()}} for e in case.kind.report_inputs(case)]


def _setup(case) -> dict:
    """What a case's inputs share (a scenario's model, defaults, ...), as its check kind says."""
    return {k: _short(v) for k, v in case.kind.report_setup(case).items()}


def _draws_view(check: str) -> bool:
    """Whether results of the check kind ``check`` show as draws (``"load"`` and unknown kinds: no)."""
    from harness.corpus import kinds
    try:
        return kinds.get(check).draws_view
    except KeyError:
        return False


def _bad_keys(lines) -> set:
    """Output keys named by mismatch lines (``"token: got 3, want 1"`` -> ``token``)."""
    return {str(m).split(":", 1)[0].strip() for m in lines or []}


def _result_view(case_id: str, r: dict, inputs: dict, device: str) -> dict:
    """What the template shows of one result: anchors, the command, rows with their inputs."""
    details = r.get("details") or {}
    rows = []
    draws = _draws_view(r.get("check"))
    if not draws:
        for row in details.get("rows") or []:
            if not isinstance(row, dict) or "actual" not in row:
                continue
            rows.append({**row, "inputs": inputs.get(row.get("row"), {}),
                         "bad": _bad_keys(row.get("mismatches")),
                         "kd": _bad_keys(row.get("profile_differences"))})
    named = []
    for inv in details.get("invariants") or []:
        named += [w for w in (inv.get("a"), inv.get("b")) if w in inputs and w not in named]
    if draws:
        named += [row.get("row") for row in details.get("rows") or []
                  if isinstance(row, dict) and row.get("row") in inputs and row.get("row") not in named]
    return {"r": r, "anchor": _result_anchor(case_id, r["impl"]), "problem": r["status"] in OPEN_STATUSES,
            "repro": repro_command(case_id, r["impl"], device), "rows": rows, "draws": draws,
            "named_inputs": [(w, inputs[w]) for w in named]}


def _attention(case_list: list) -> list:
    """*Needs attention*: one entry per case and problem, its implementations on one line.

    Entries: ``{"case", "status", "impls", "anchor", "reason", "broken"}``. A broken case
    (``details.broken_case``: the reference contradicts the case's truth) is one entry for
    every implementation; otherwise results of one status and one message are grouped. Broken
    cases come first, then ``fail``, ``error``, ``known-bug``.
    """
    order = {"fail": 1, "error": 2, "known-bug": 3}
    out = []
    for c in case_list:
        groups: dict = {}
        for v in c["views"]:
            if not v or v["r"]["status"] not in order:
                continue
            det = v["r"].get("details") or {}
            broken = bool(det.get("broken_case"))
            key = ("broken",) if broken else (v["r"]["status"], str(det.get("message", "")))
            g = groups.setdefault(key, {"case": c["id"], "status": v["r"]["status"], "impls": [], "anchor": v["anchor"],
                                        "reason": str(det.get("message", "")), "broken": broken})
            g["impls"].append(v["r"]["impl"])
        out += groups.values()
    return sorted(out, key=lambda e: (not e["broken"], order[e["status"]]))


def render_html(doc: dict, cases: dict, profiles: list) -> str:
    """Render the report page.

    Parameters
    ----------
    doc : dict
        The results.json document (schema 1).
    cases : dict
        Case id → :class:`harness.corpus.load.Case` (or ``{"error": ...}`` for a
        malformed file).
    profiles : list of Profile
        The profiles of the implementations in the run.

    Returns
    -------
    str
        The HTML page.
    """
    impls = list(doc["run"]["impls"])
    by_case = defaultdict(dict)
    for r in doc["results"]:
        by_case[r["case"]][r["impl"]] = r
    per_impl = {i: Counter() for i in impls}
    per_cat = defaultdict(Counter)
    for r in doc["results"]:
        per_impl[r["impl"]][r["status"]] += 1
        per_cat[r["case"].split("/")[0]][r["status"]] += 1
    devices = {i: (doc["run"]["impls"].get(i) or {}).get("device", "cpu") for i in impls}
    case_list = []
    for cid in sorted(by_case):
        c = cases.get(cid)
        broken = c is None or isinstance(c, dict)
        inputs = [] if broken else _inputs(c)
        by_where = {row["where"]: row["fields"] for row in inputs}
        results = [by_case[cid].get(i) for i in impls]
        case_list.append({
            "id": cid, "anchor": _anchor(cid), "category": cid.split("/")[0],
            "broken": broken,
            "description": (c.get("error", "") if isinstance(c, dict) else "") if broken else c.description,
            "check": "load" if broken else c.check,
            # a statistical case, or a scenario with a [scenario.statistical] check (both count in the budget)
            "statistical": (not broken) and c.kind.is_statistical(c),
            "sources": [] if broken else [_source_link(s) for s in c.sources],
            "notes": "" if broken else c.notes,
            "inputs": inputs,
            "setup": {} if broken else _setup(c),
            "invariants": [] if broken else c.kind.relations(c),
            "results": results,
            "views": [_result_view(cid, r, by_where, devices[i]) if r else None for i, r in zip(impls, results)],
            "problem": any(r and r["status"] in OPEN_STATUSES for r in results),
        })
    n_cases_per_cat = Counter(c["category"] for c in case_list)
    # the status chips count cases (as the filter shows them): a case with that status on any implementation
    n_cases_per_status = Counter(st for c in case_list for st in {r["status"] for r in c["results"] if r})
    attention = _attention(case_list)
    seen, plist = set(), []
    for p in [TRTLLM] + list(profiles):
        if p.name not in seen:
            seen.add(p.name)
            plist.append(p)
    fields = list(TRTLLM.semantic_fields())
    prof_rows = [{"field": f, "values": [show_value(getattr(p, f)) for p in plist],
                  "differs": [getattr(p, f) != getattr(TRTLLM, f) for p in plist],
                  "citations": [p.citations.get(f, "") for p in plist]} for f in fields]
    for row in prof_rows:
        row["any_differs"] = any(row["differs"])
    total = Counter(r["status"] for r in doc["results"])
    return _ENV.get_template("report.html.j2").render(
        run=doc["run"], impls=impls, statuses=STATUSES, per_impl=per_impl, per_cat=dict(sorted(per_cat.items())),
        cases=case_list, profiles=plist, prof_rows=prof_rows, total=total, n_results=len(doc["results"]),
        fmt=_short, n_cases_per_cat=n_cases_per_cat, n_cases_per_status=n_cases_per_status, attention=attention, open_statuses=OPEN_STATUSES,
    )


def write_html(doc: dict, cases: dict, profiles: list, path: Path) -> Path:
    """Render the report and write it to ``path``; returns ``path``."""
    path = Path(path)
    path.write_text(render_html(doc, cases, profiles), encoding="utf-8")
    return path
