"""The HTML conformance report: one self-contained page rendered with Jinja2.

Sections, in order: the run (when, where, implementations and versions); the
summary (counts by status per implementation, and by category); the case ×
implementation matrix (each cell links to the case); the profile table (every
semantic field of each profile in the run, differences from the default
highlighted, with citations); one section per case with its description,
sources, inputs, and per implementation the status, message and the
expected / predicted / actual values row by row.

The page needs no network: styles are inline, there is no script.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from pathlib import Path

import jinja2

from impls.profiles import TRTLLM

from .judge import STATUSES
from .statreport import template_globals

__all__ = ["write_html", "render_html"]

_ENV = jinja2.Environment(
    loader=jinja2.FileSystemLoader(str(Path(__file__).with_name("templates"))),
    autoescape=jinja2.select_autoescape(["html", "j2"]),
    trim_blocks=True, lstrip_blocks=True, undefined=jinja2.StrictUndefined,
)
_ENV.globals.update(template_globals())  # statistical charts and budget (harness.statreport)


def _anchor(case_id: str) -> str:
    return "case-" + case_id.replace("/", "--")


def _short(v, limit: int = 12) -> str:
    if isinstance(v, list) and len(v) > limit:
        return json.dumps(v[:limit])[:-1] + f", … ({len(v)} values)]"
    if isinstance(v, dict) and "dist" in v:
        return ", ".join(f"{k}={v[k]}" for k in v)
    return json.dumps(v) if not isinstance(v, str) else v


def _source_link(src: dict) -> tuple:
    if "url" in src:
        return src["url"], src.get("title", src["url"])
    if "repo" in src:
        return None, f"{src['repo']}: {src['path']} @ {src['version']}" + (f" ({src['symbol']})" if src.get("symbol") else "")
    return None, f"seed {src['seed']} § {src['section']}"


def _inputs(case) -> list:
    rows = []
    for b in case.batches:
        for r in b.rows:
            fields = {k: _short(v) for k, v in r.fields.items()}
            rows.append({"where": f"{b.name}:{r.index}", "fields": fields,
                         "expect": {k: _short(v) for k, v in r.expect.items()}})
    return rows


def render_html(doc: dict, cases: dict, profiles: list) -> str:
    """Render the report page.

    Parameters
    ----------
    doc : dict
        The results.json document (schema 1).
    cases : dict
        Case id → :class:`harness.cases.Case` (or ``{"error": ...}`` for a
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
    case_list = []
    for cid in sorted(by_case):
        c = cases.get(cid)
        broken = c is None or isinstance(c, dict)
        case_list.append({
            "id": cid, "anchor": _anchor(cid), "category": cid.split("/")[0],
            "broken": broken,
            "description": (c.get("error", "") if isinstance(c, dict) else "") if broken else c.description,
            "check": "load" if broken else c.check,
            "sources": [] if broken else [_source_link(s) for s in c.sources],
            "notes": "" if broken else c.notes,
            "inputs": [] if broken else _inputs(c),
            "invariants": [] if broken else c.invariants,
            "results": [by_case[cid].get(i) for i in impls],
        })
    seen, plist = set(), []
    for p in [TRTLLM] + list(profiles):
        if p.name not in seen:
            seen.add(p.name)
            plist.append(p)
    fields = list(TRTLLM.semantic_fields())
    prof_rows = [{"field": f, "values": [repr(getattr(p, f)) for p in plist],
                  "differs": [getattr(p, f) != getattr(TRTLLM, f) for p in plist],
                  "citations": [p.citations.get(f, "") for p in plist]} for f in fields]
    total = Counter(r["status"] for r in doc["results"])
    return _ENV.get_template("report.html.j2").render(
        run=doc["run"], impls=impls, statuses=STATUSES, per_impl=per_impl, per_cat=dict(sorted(per_cat.items())),
        cases=case_list, profiles=plist, prof_rows=prof_rows, total=total, n_results=len(doc["results"]),
        fmt=_short,
    )


def write_html(doc: dict, cases: dict, profiles: list, path: Path) -> Path:
    """Render the report and write it to ``path``; returns ``path``."""
    path = Path(path)
    path.write_text(render_html(doc, cases, profiles), encoding="utf-8")
    return path
