"""What the report template needs for statistical results (``templates/_statistics.html.j2``).

:func:`template_globals` returns the functions and constants the partial
uses: :func:`stat_chart` (an inline SVG per checked row, from the row's
``chart`` data in results.json), :func:`stat_summary` (per implementation,
the statuses of its statistical cases, including ``n/a`` and refused-to-judge
``error`` verdicts, so hard cases cannot hide), and the error budget of
:mod:`harness.judge.stats`.
"""

from __future__ import annotations

from collections import Counter

from markupsafe import Markup

from harness.judge import stats
from .charts import frequency_chart_svg

__all__ = ["template_globals", "stat_chart", "stat_summary"]


def stat_chart(row: dict, case_id: str, impl: str) -> Markup:
    """Inline SVG of expected vs observed frequencies for one statistical row.

    Parameters
    ----------
    row : dict
        One entry of a statistical result's ``details["rows"]`` (keys
        ``chart`` = ``{"labels", "expected", "observed"}``, ``n``, ``row``).
    case_id, impl : str
        Make the chart's element ids unique in the page.

    Returns
    -------
    markupsafe.Markup
        The ``<svg>`` element, or an empty string when the row has no chart
        data.
    """
    chart = row.get("chart") or {}
    if not chart.get("labels"):
        return Markup("")
    svg = frequency_chart_svg(chart["labels"], [float(v) for v in chart["expected"]],
                              [float(v) for v in chart["observed"]], int(row.get("n") or 0),
                              salt=f"{case_id}|{impl}|{row.get('row', '')}")
    return Markup(svg)


def stat_summary(cases: list, impls: list) -> list:
    """Per implementation, the verdicts of the statistical cases of the run.

    Parameters
    ----------
    cases : list of dict
        The report's case list (``check``, ``statistical`` — a statistical
        case or a statistical scenario — and ``results``, one result or
        ``None`` per implementation, in ``impls`` order).
    impls : list of str
        Implementation names.

    Returns
    -------
    list of dict
        One per implementation: ``{"impl", "counts": Counter of statuses,
        "rows": rows judged, "refused": rows the test refused to judge (too
        few draws), "capped": rows whose draws cap bound (achieved epsilon
        reported), "fail_rows": rows that failed}``.
    """
    out = []
    for i, name in enumerate(impls):
        counts, rows, refused, capped, failed = Counter(), 0, 0, 0, 0
        for c in cases:
            if not c.get("statistical", c["check"] == "statistical"):
                continue
            r = c["results"][i]
            if not r:
                continue
            counts[r["status"]] += 1
            for row in r["details"].get("rows", []):
                rows += 1
                refused += row.get("verdict") == "error"
                failed += row.get("verdict") == "fail"
                capped += bool((row.get("plan") or {}).get("cap_binds"))
        out.append({"impl": name, "counts": counts, "rows": rows, "refused": refused, "capped": capped,
                    "fail_rows": failed})
    return out


def template_globals() -> dict:
    """Globals for the Jinja2 environment of :mod:`harness.report.html`.

    Returns
    -------
    dict
        ``stat_chart``, ``stat_summary`` and ``stat_budget`` (the constants
        of :mod:`harness.judge.stats`: ``family_alpha``, ``epsilon``, ``power``,
        ``max_draws``, ``min_expected``, ``max_single_bins``,
        ``exact_max_support``, ``tv_confidence``).
    """
    return {
        "stat_chart": stat_chart,
        "stat_summary": stat_summary,
        "stat_budget": {
            "family_alpha": stats.FAMILY_ALPHA, "epsilon": stats.DEFAULT_EPSILON, "power": stats.TARGET_POWER,
            "max_draws": stats.MAX_DRAWS, "min_expected": stats.MIN_EXPECTED,
            "max_single_bins": stats.MAX_SINGLE_BINS, "exact_max_support": stats.EXACT_MAX_SUPPORT,
            "tv_confidence": stats.TV_CONFIDENCE,
        },
    }
