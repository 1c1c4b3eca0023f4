"""Inline SVG charts for the report, drawn with matplotlib.

:func:`frequency_chart_svg` draws, for one statistical check, the expected
and observed frequencies of the most likely tokens plus an "other" bucket
(and "outside support" when the support check failed), as an ``<svg>``
element to paste into the HTML page: no external reference, no script, ids
unique per chart (``svg.hashsalt``), text kept as text (``svg.fonttype =
"none"``), no date (reproducible output).
"""

from __future__ import annotations

import hashlib
import io
import re

import matplotlib

matplotlib.use("Agg")  # never opens a window, whatever the environment says

from matplotlib.figure import Figure  # noqa: E402

__all__ = ["frequency_chart_svg"]

_EXPECTED = "#8c959f"
_OBSERVED = "#0969da"
_OUTSIDE = "#cf222e"


def _clean(svg: str, salt: str) -> str:
    """Strip the XML prologue, comments, metadata and namespace URLs (inline HTML needs
    none), and prefix every element id (and reference to it) so ids are unique in the page."""
    svg = svg[svg.index("<svg"):]
    svg = re.sub(r"<!--.*?-->", "", svg, flags=re.S)
    svg = re.sub(r"<metadata>.*?</metadata>", "", svg, flags=re.S)
    svg = re.sub(r'\s+xmlns(:\w+)?="[^"]*"', "", svg)
    svg = svg.replace("xlink:href", "href")
    pre = "c" + hashlib.sha1(salt.encode()).hexdigest()[:10] + "-"
    svg = re.sub(r'\bid="([^"]+)"', lambda m: f'id="{pre}{m.group(1)}"', svg)
    svg = re.sub(r"url\(#([^)]+)\)", lambda m: f"url(#{pre}{m.group(1)})", svg)
    svg = re.sub(r'href="#([^"]+)"', lambda m: f'href="#{pre}{m.group(1)}"', svg)
    return svg.strip()


def frequency_chart_svg(labels: list, expected: list, observed: list, n: int, salt: str,
                        title: str = "") -> str:
    """Grouped bars of expected vs observed frequencies, as an inline ``<svg>`` string.

    Parameters
    ----------
    labels : list of str
        One label per bar group (token ids, ``"other (K)"``, ``"outside
        support"``).
    expected, observed : list of float
        Frequencies in ``[0, 1]``, same length as ``labels``.
    n : int
        Number of draws (drawn as the 99.9% binomial band around each
        expected frequency: ``+- 3.29 sqrt(p (1 - p) / n)``, the normal
        approximation).
    salt : str
        Makes the element ids of this chart unique in the page (matplotlib's
        ``svg.hashsalt``); use the case, implementation and row.
    title : str
        Optional title above the plot.

    Returns
    -------
    str
        An ``<svg ...>...</svg>`` element with ``width`` and ``height`` in pt
        and a ``viewBox``; no XML prologue, namespaces or metadata.

    Raises
    ------
    ValueError
        If the three lists differ in length.
    """
    if not len(labels) == len(expected) == len(observed):
        raise ValueError("labels, expected and observed differ in length")
    k = len(labels)
    width = max(3.4, min(9.0, 1.6 + 0.42 * max(k, 1)))  # the two-column legend needs 3.4 in
    with matplotlib.rc_context({"svg.hashsalt": salt, "svg.fonttype": "none", "font.size": 8,
                                "font.family": "sans-serif"}):
        fig = Figure(figsize=(width, 2.3))
        ax = fig.add_subplot()
        xs = list(range(k))
        band = [3.29 * (p * (1 - p) / max(n, 1)) ** 0.5 for p in expected]
        ax.bar([x - 0.2 for x in xs], expected, width=0.4, color=_EXPECTED, label="expected",
               yerr=band, error_kw={"elinewidth": 0.8, "capsize": 2, "ecolor": "#57606a"})
        colors = [_OUTSIDE if lab == "outside support" else _OBSERVED for lab in labels]
        ax.bar([x + 0.2 for x in xs], observed, width=0.4, color=colors, label=f"observed (N = {n:,})")
        ax.set_xticks(xs)
        ax.set_xticklabels(labels, rotation=45 if k > 8 else 0, ha="right" if k > 8 else "center")
        ax.set_ylabel("frequency")
        ax.set_xlabel("token (most likely first)")
        ax.spines[["top", "right"]].set_visible(False)
        ax.legend(frameon=False, loc="lower right", bbox_to_anchor=(1.0, 1.0), ncol=2, borderaxespad=0.2)
        if title:
            ax.set_title(title, fontsize=8, loc="left")
        fig.tight_layout()
        buf = io.StringIO()
        fig.savefig(buf, format="svg", metadata={"Date": None})
    return _clean(buf.getvalue(), salt)
