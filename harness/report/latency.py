"""The latency report: one self-contained HTML page from a results file of the latency suite.

Pipeline of :func:`write_report`, in order:

1. :func:`load_bench` reads and validates the results file (schema of
   :mod:`benchmarks.latency`; also the older files under
   ``benchmarks/results/``), naming the file and the problem on any error;
2. :func:`summarise` derives, per point, the ratio to the HBM floor and to
   FlashInfer at the same point, and checks the fused sampler's targets
   (:data:`TARGETS`, issue #18): what must hold (top-p alone ``<=``
   FlashInfer everywhere and ``<= 4x`` the floor at batch ``>= 256``;
   top-k + top-p and min-p ``<=`` FlashInfer; greedy ``<= 1.2x``
   ``torch.argmax``) and the aim beyond it (``<= 0.5x`` the faster of
   FlashInfer and vLLM's Triton kernel at batch ``>= 64``, ``<= 3x`` the
   floor at batch ``>= 256``, batch 1 x 128256 ``<= 20 us``);
3. :func:`latency_chart_svg` draws, per vocabulary, latency against batch
   per implementation (log-log, one panel per parameter mix, the floor
   dashed) with matplotlib as inline SVG;
4. ``templates/latency.html.j2`` renders the environment, the targets,
   the charts and the tables (jinja2, autoescaped; no script, no external
   reference: the page works offline).
"""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

__all__ = ["LatencyError", "load_bench", "summarise", "latency_chart_svg", "render_html", "write_report",
           "TARGETS", "Target", "RATIO_PEER"]

@dataclass(frozen=True)
class Target:
    """One latency target, as data: which implementation is judged against what, where, and the limit.

    Attributes
    ----------
    name, text : str
        Identifier and the sentence the report shows.
    subject : str
        The implementation judged (a latency peer of the registry).
    against : str or tuple of str
        ``"floor"`` (the HBM floor of the point), ``"us"`` (an absolute limit in µs), the
        name of the peer whose time at the same point is the unit, or several peers: the
        fastest of those that have the point.
    limit : float
        The largest ratio (or µs for ``"us"``) that meets the target.
    mix : str or tuple of str, optional
        Only the points of that mix (of those mixes).
    batch, vocab, min_batch : optional
        Only the points with that batch / vocabulary / at least that batch.
    level : {"must", "aim"}
        A target that must hold, or the aim beyond it.
    """

    name: str
    text: str
    subject: str
    against: object
    limit: float
    mix: object = None
    batch: Optional[int] = None
    vocab: Optional[int] = None
    min_batch: Optional[int] = None
    level: str = "must"

    def applies(self, r: dict) -> bool:
        """Whether results row ``r`` is one of the points this target judges."""
        mixes = (self.mix,) if isinstance(self.mix, str) else self.mix
        return (r["impl"] == self.subject and (mixes is None or r["mix"] in mixes)
                and (self.batch is None or r["batch"] == self.batch) and (self.vocab is None or r["vocab"] == self.vocab)
                and (self.min_batch is None or r["batch"] >= self.min_batch))


#: The fused sampler's targets (issue #18, "Large-batch speed"): what must hold, then the aim beyond it.
TARGETS = (
    Target("p_vs_flashinfer", "top_p=0.9 alone: <= FlashInfer at every point", "fused", "flashinfer", 1.0,
           mix="p09"),
    Target("p_vs_floor", "top_p=0.9 alone: <= 4x the HBM floor at batch >= 256", "fused", "floor", 4.0, mix="p09",
           min_batch=256),
    Target("kp_minp_vs_flashinfer", "top_k=50 + top_p=0.9, and min_p=0.05: <= FlashInfer at every point", "fused",
           "flashinfer", 1.0, mix=("k50_p09", "minp005")),
    Target("greedy_vs_argmax", "all-greedy batches: <= 1.2x torch.argmax", "fused", "argmax", 1.2, mix="greedy"),
    Target("vs_faster_peer", "every mix at batch >= 64: <= 0.5x the faster of FlashInfer and vLLM's Triton kernel",
           "fused", ("flashinfer", "vllm-triton"), 0.5, min_batch=64, level="aim"),
    Target("vs_floor", "every mix at batch >= 256: <= 3x the HBM floor", "fused", "floor", 3.0, min_batch=256,
           level="aim"),
    Target("batch1", "batch 1, vocab 128256, every mix: <= 20 us", "fused", "us", 20.0, batch=1, vocab=128256,
           level="aim"),
)
#: The peer of the tables' ratio column (``×FI``): every point's time over its time at the same point.
RATIO_PEER = "flashinfer"

def _impl_order() -> tuple:
    """The latency peers in registry order (:func:`impls.registry.names`, role ``latency``); others follow, sorted."""
    from impls import registry
    return tuple(registry.names("latency"))

_MIX_ORDER = ("greedy", "k50_p09", "p09", "minp005", "mixed")
_MIX_LABEL = {"greedy": "all greedy", "k50_p09": "top_k=50, top_p=0.9", "p09": "top_p=0.9", "minp005": "min_p=0.05",
              "mixed": "mixed batch"}
#: Line colours, given to the implementations of a page in :func:`_impl_order` order (a name the
#: registry does not know takes the next one; past the palette, grey).
_PALETTE = ("#0969da", "#cf222e", "#bc4c00", "#8250df", "#1a7f37", "#9a6700", "#6e7781")


def _colors(impls) -> dict:
    """``{impl: colour}``: registered peers by their place in the registry, then the others in order."""
    order = _impl_order()
    out, spare = {}, [c for i, c in enumerate(_PALETTE) if i >= len(order)]
    for impl in impls:
        if impl in order and order.index(impl) < len(_PALETTE):
            out[impl] = _PALETTE[order.index(impl)]
        else:
            out[impl] = spare.pop(0) if spare else "#57606a"
    return out


class LatencyError(ValueError):
    """A results file that cannot be read: the message names the file and the problem."""


def _num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def load_bench(path) -> dict:
    """Read and validate a latency results file.

    Parameters
    ----------
    path : str or Path
        JSON written by the latency suite (``--latency-out``) or
        ``benchmarks/sampling.py`` (schema 1).

    Returns
    -------
    dict
        The document; every row has ``impl`` (str), ``batch``, ``vocab``
        (int > 0), ``mix`` (str), ``median_us`` (float > 0) and ``floor_us``
        (float or None); an optional ``provenance`` (text: where and how the
        file was measured, added when a results file is committed) is shown.

    Raises
    ------
    LatencyError
        Missing file, invalid JSON (with line and column), wrong schema, or
        a malformed row (with its index and field).
    """
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as e:
        raise LatencyError(f"{p}: cannot read: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise LatencyError(f"{p}: not UTF-8 text (byte {e.start}): not a results file of the latency suite") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise LatencyError(f"{p}: not valid JSON (line {e.lineno}, column {e.colno}: {e.msg}); "
                           "is the file truncated?") from None
    if not isinstance(doc, dict):
        raise LatencyError(f"{p}: expected a JSON object at the top level, got {type(doc).__name__}")
    # what the file is, before its schema: a run record or a conformance results file has its own
    if doc.get("format") == "sampcheck-record":
        raise LatencyError(f"{p}: this is a run record (sampcheck record), not a results file of the latency suite "
                           "(docs/latency.md); compare two records with 'sampcheck diff A B'")
    if "run" in doc and "results" in doc:
        raise LatencyError(f"{p}: this is a conformance results file (sampcheck run), not a results file of the "
                           "latency suite (docs/latency.md); its report is the index.html beside it")
    if doc.get("schema") != 1:
        what = "no 'schema' key" if "schema" not in doc else f"schema {doc.get('schema')!r} is not supported"
        raise LatencyError(f"{p}: {what} (expected a latency results file, schema 1: see docs/latency.md)")
    rows = doc.get("rows")
    if not isinstance(rows, list) or not rows:
        raise LatencyError(f"{p}: 'rows' must be a non-empty list of timed points (a latency-suite results file; "
                           "the sweep and diagnostic files in benchmarks/results/ are not)")
    if doc.get("dtype", "fp32") not in ("fp32", "bf16"):
        raise LatencyError(f"{p}: 'dtype' must be 'fp32' or 'bf16' (the logits' dtype), got {doc.get('dtype')!r}")
    if "provenance" in doc and not isinstance(doc["provenance"], str):
        raise LatencyError(f"{p}: 'provenance' must be text (where and how the file was measured), got "
                           f"{type(doc['provenance']).__name__}")
    if "versions" in doc and not isinstance(doc["versions"], dict):
        raise LatencyError(f"{p}: 'versions' must be an object (name -> version), got {type(doc['versions']).__name__}")
    for i, r in enumerate(rows):
        where = f"{p}: rows[{i}]"
        _check_point(r, where)
        if not _num(r.get("median_us")) or r["median_us"] <= 0:
            raise LatencyError(f"{where}.median_us: expected a positive number, got {r.get('median_us')!r}")
        if "dtype" in r and r["dtype"] != doc.get("dtype", "fp32"):
            raise LatencyError(f"{where}.dtype: {r['dtype']!r}, but the file's dtype is {doc.get('dtype', 'fp32')!r} "
                               "(one file holds one dtype)")
        if r.get("floor_us") is not None and not _num(r["floor_us"]):
            raise LatencyError(f"{where}.floor_us: expected a number or null, got {r.get('floor_us')!r}")
    skipped = doc.get("skipped", [])
    if not isinstance(skipped, list):
        raise LatencyError(f"{p}: 'skipped' must be a list of the points not run, got {type(skipped).__name__}")
    for i, r in enumerate(skipped):
        _check_point(r, f"{p}: skipped[{i}]", ("impl", "mix", "reason"))
    return doc


def _check_point(r, where: str, texts: tuple = ("impl", "mix")) -> None:
    # a point of the grid (a timed row or a skipped one): an object, ``texts`` non-empty strings, batch and vocab
    # positive ints; LatencyError at ``where`` otherwise
    if not isinstance(r, dict):
        raise LatencyError(f"{where}: expected an object")
    for k in texts:
        if not isinstance(r.get(k), str) or not r.get(k):
            raise LatencyError(f"{where}.{k}: expected a non-empty string, got {r.get(k)!r}")
    for k in ("batch", "vocab"):
        if not isinstance(r.get(k), int) or isinstance(r.get(k), bool) or r[k] <= 0:
            raise LatencyError(f"{where}.{k}: expected a positive integer, got {r.get(k)!r}")


def _order(values, preferred) -> list:
    return [v for v in preferred if v in values] + sorted(v for v in values if v not in preferred)


def summarise(doc: dict) -> dict:
    """Ratios per point and the fused sampler's targets.

    Parameters
    ----------
    doc : dict
        A document from :func:`load_bench`.

    Returns
    -------
    dict
        ``impls``, ``mixes``, ``vocabs``, ``batches`` (sorted), ``table``:
        ``{vocab: [ {mix, batch, floor_us, cells: {impl: {us, x_floor,
        x_flashinfer, graph, cpu}}} ]}`` (``floor_us``, ``x_floor`` and
        ``x_flashinfer`` None where the file has no floor or no FlashInfer
        point), ``has_floor`` and ``has_flashinfer`` (bool: whether any point
        has them; a file written on a CPU has neither), ``cpu_impls``
        (implementations with a point timed on the CPU), ``missing``
        (``{impl: n}``, the points of this file's grid an implementation lacks:
        its mixes x every vocabulary x every batch in the file; a run cut short
        shows here; points the file lists as ``skipped`` are not missing), ``skipped`` (``{impl: {reason: n}}``,
        those of the grid the suite skipped with its reason), ``expected`` (the grid's size, summed so), and
        ``targets``:
        ``[{name, text, checked, met, worst}]`` (``checked`` 0 when the file
        has no point the target applies to).
    """
    rows = doc["rows"]
    at = {(r["impl"], r["mix"], r["batch"], r["vocab"]): r for r in rows}
    impls = _order({r["impl"] for r in rows}, _impl_order())
    mixes = _order({r["mix"] for r in rows}, _MIX_ORDER)
    vocabs = sorted({r["vocab"] for r in rows})
    batches = sorted({r["batch"] for r in rows})
    table = {}
    for V in vocabs:
        lines = []
        for m in mixes:
            for B in batches:
                cells = {}
                floor = None
                fi = at.get((RATIO_PEER, m, B, V))
                for impl in impls:
                    r = at.get((impl, m, B, V))
                    if r is None:
                        continue
                    if r.get("floor_us") and r.get("device", "cuda") == "cuda":
                        floor = r["floor_us"]
                    cells[impl] = {"us": r["median_us"], "graph": bool(r.get("graph")), "cpu": r.get("device") == "cpu",
                                   # FlashInfer runs on the GPU: no ratio for a CPU implementation either
                                   "x_flashinfer": (r["median_us"] / fi["median_us"])
                                   if fi and r.get("device") != "cpu" else None}
                if not cells:
                    continue
                for c in cells.values():
                    # the floor is the GPU's HBM read: no ratio for a CPU implementation
                    c["x_floor"] = c["us"] / floor if floor and not c["cpu"] else None
                lines.append({"mix": m, "batch": B, "floor_us": floor, "cells": cells})
        table[V] = lines
    targets = []

    def where(r):
        return f"{_MIX_LABEL.get(r['mix'], r['mix'])}, batch {r['batch']}, vocab {r['vocab']}"
    for tg in TARGETS:
        pts = [r for r in rows if tg.applies(r)]
        if tg.against == "us":
            ratios = [(r["median_us"], where(r)) for r in pts]
            fmt = "{:.1f} us"
        else:
            peers = (tg.against,) if isinstance(tg.against, str) else tuple(tg.against)

            def unit(r, peers=peers):
                if peers == ("floor",):
                    return r.get("floor_us")
                times = [(at.get((p, r["mix"], r["batch"], r["vocab"])) or {}).get("median_us") for p in peers]
                return min((t for t in times if t), default=None)
            ratios = [(r["median_us"] / unit(r), where(r)) for r in pts if unit(r)]
            fmt = "{:.2f}x"
        worst = max(ratios, default=None)
        shown = None if worst is None else f"{fmt.format(worst[0])} at {worst[1]}"
        targets.append({"name": tg.name, "text": tg.text, "level": tg.level, "checked": len(ratios),
                        "met": None if not ratios else all(x <= tg.limit for x, _ in ratios), "worst": shown})
    # the file's grid, per implementation: its mixes at every vocabulary and batch of the file
    impl_mixes = {i: {r["mix"] for r in rows if r["impl"] == i} for i in impls}
    expected = {i: len(ms) * len(vocabs) * len(batches) for i, ms in impl_mixes.items()}
    have = {i: len({(r["mix"], r["batch"], r["vocab"]) for r in rows if r["impl"] == i}) for i in impls}
    # points of this grid the suite skipped on purpose (with a reason) are not missing
    grid = {(i, m, B, V) for i in impls for m in impl_mixes[i] for V in vocabs for B in batches}
    skipped = {}
    for r in doc.get("skipped", []):
        key = (r["impl"], r["mix"], r["batch"], r["vocab"])
        if key in grid and key not in at:
            grid.discard(key)   # once, should a point be listed twice
            skipped.setdefault(r["impl"], Counter())[r["reason"]] += 1
    n_skipped = {i: sum(c.values()) for i, c in skipped.items()}
    missing = {i: expected[i] - have[i] - n_skipped.get(i, 0) for i in impls
               if expected[i] > have[i] + n_skipped.get(i, 0)}
    has_floor = any(ln["floor_us"] for lines in table.values() for ln in lines)
    cpu_impls = [i for i in impls if any(r["impl"] == i and r.get("device") == "cpu" for r in rows)]
    return {"impls": impls, "mixes": mixes, "vocabs": vocabs, "batches": batches, "table": table,
            "targets": targets, "has_floor": has_floor, "has_flashinfer": RATIO_PEER in impls,
            "cpu_impls": cpu_impls, "missing": missing, "expected": sum(expected.values()),
            "skipped": {i: dict(c) for i, c in skipped.items()}}


def latency_chart_svg(doc: dict, vocab: int, summary: Optional[dict] = None) -> str:
    """Latency (µs) against batch for one vocabulary: one log-log panel per mix, one line per implementation.

    The HBM floor of each batch is drawn dashed.

    Parameters
    ----------
    doc : dict
        From :func:`load_bench`.
    vocab : int
        A vocabulary of the file.
    summary : dict, optional
        :func:`summarise` of ``doc`` (computed when not given).

    Returns
    -------
    str
        An inline ``<svg>`` element (no external reference; ids unique per chart).

    Raises
    ------
    KeyError
        For a vocabulary the file has no point for.
    """
    from matplotlib.figure import Figure

    from .charts import _clean
    s = summary or summarise(doc)
    mixes = s["mixes"]
    fig = Figure(figsize=(2.6 * len(mixes) + 0.6, 3.0))
    axes = fig.subplots(1, len(mixes), sharey=True, squeeze=False)[0]
    colors = _colors(s["impls"])
    for ax, m in zip(axes, mixes):
        lines = [ln for ln in s["table"][vocab] if ln["mix"] == m]
        for impl in s["impls"]:
            pts = [(ln["batch"], ln["cells"][impl]["us"]) for ln in lines if impl in ln["cells"]]
            if pts:
                cpu = impl in s.get("cpu_impls", ()) and s.get("has_floor")  # CPU points among GPU ones
                ax.plot(*zip(*pts), marker="o", ms=3, lw=1.4, ls=":" if cpu else "-",
                        label=f"{impl} (CPU)" if cpu else impl, color=colors[impl])
        fl = [(ln["batch"], ln["floor_us"]) for ln in lines if ln["floor_us"]]
        if fl:
            ax.plot(*zip(*fl), ls="--", lw=1.0, color="#000000", label="HBM floor")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_title(_MIX_LABEL.get(m, m), fontsize=9)
        ax.set_xlabel("batch", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(True, which="major", lw=0.3, color="#d0d7de")
    axes[0].set_ylabel("median latency (µs)", fontsize=8)
    handles, labels = [], []
    for ax in axes:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if lab not in labels:
                handles.append(h)
                labels.append(lab)
    fig.legend(handles, labels, loc="lower center", ncol=len(labels), fontsize=7, frameon=False)
    fig.suptitle(f"vocab {vocab}", fontsize=10)
    fig.subplots_adjust(left=0.06, right=0.99, top=0.84, bottom=0.3, wspace=0.08)
    import io
    buf = io.StringIO()
    import matplotlib
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": f"latency-{vocab}"}):
        fig.savefig(buf, format="svg", metadata={"Date": None})
    return _clean(buf.getvalue(), f"latency-{vocab}")


def render_html(doc: dict, source: str) -> str:
    """The latency report for ``doc`` as one self-contained HTML string.

    Parameters
    ----------
    doc : dict
        From :func:`load_bench`.
    source : str
        The results file's name, shown on the page.

    Returns
    -------
    str
        The page (``templates/latency.html.j2``).
    """
    import jinja2
    s = summarise(doc)
    charts = {V: latency_chart_svg(doc, V, s) for V in s["vocabs"]}
    env = jinja2.Environment(loader=jinja2.PackageLoader("harness.report", "templates"), autoescape=True,
                             trim_blocks=True, lstrip_blocks=True)
    versions = doc.get("versions", {})
    return env.get_template("latency.html.j2").render(
        doc=doc, s=s, charts=charts, source=source, versions=versions, mix_label=_MIX_LABEL,
        bandwidth=doc.get("hbm_bandwidth_gbps"))


def write_report(bench: str, out_dir: str) -> Path:
    """Write ``OUT_DIR/latency.html`` from the results file ``bench``; returns the path.

    Raises
    ------
    LatencyError
        From :func:`load_bench`.
    OSError
        When ``out_dir`` cannot be created or written.
    """
    doc = load_bench(bench)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "latency.html"
    path.write_text(render_html(doc, Path(bench).name), encoding="utf-8")
    return path
