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
from typing import Optional

from markupsafe import Markup

from harness.judge import stats
from .charts import frequency_chart_svg

__all__ = ["template_globals", "stat_chart", "draw_ahead", "stat_summary"]

#: Charts drawn before the page (:func:`draw_ahead`), each taken once by :func:`stat_chart`: arguments -> svg.
_AHEAD: dict = {}


def _chart_args(row: dict, case_id: str, impl: str) -> Optional[tuple]:
    """The arguments of :func:`frequency_chart_svg` for one row, as a hashable tuple (None: no chart)."""
    chart = row.get("chart") or {}
    if not chart.get("labels"):
        return None
    return (tuple(chart["labels"]), tuple(float(v) for v in chart["expected"]),
            tuple(float(v) for v in chart["observed"]), int(row.get("n") or 0),
            f"{case_id}|{impl}|{row.get('row', '')}")


def _draw(args: tuple) -> str:
    labels, expected, observed, n, salt = args
    return frequency_chart_svg(list(labels), list(expected), list(observed), n, salt=salt)


def draw_ahead(row: dict, case_id: str, impl: str) -> None:
    """Draw the chart :func:`stat_chart` will show for this row now, and keep it for that call.

    The run draws the charts of its statistical results while a worker judges the next case
    (:mod:`harness.run.runner`), instead of all of them when it writes the report; the page is
    the same. A chart kept is used once; one that is never asked for stays until this
    process ends.

    Parameters
    ----------
    row : dict
        One entry of a statistical result's ``details["rows"]``.
    case_id, impl : str
        As :func:`stat_chart` gets them.
    """
    args = _chart_args(row, case_id, impl)
    if args is not None and args not in _AHEAD:
        _AHEAD[args] = _draw(args)


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
    args = _chart_args(row, case_id, impl)
    if args is None:
        return Markup("")
    svg = _AHEAD.pop(args, None)
    return Markup(_draw(args) if svg is None else svg)


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
