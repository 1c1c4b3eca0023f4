"""False-alarm rate and power of the corpus's statistical checks, simulated (not a test; writes JSON).

``python -m benchmarks.stat_calibration [--tables 100000000] [--power-tables 20000] [--seed 20261205]
[--out benchmarks/results/stat-calibration.json]``

1. **The checks.** Every statistical row of the declared corpus (and every statistical
   scenario), predicted in float64 under every registered profile (the judge's own
   predictions, :meth:`harness.judge.Judge.predict`), planned as the judge plans it
   (:func:`harness.judge.stats.plan_draws` at the corpus's per-check level ``alpha``, the
   case's ``epsilon`` and ``draws``); a scenario's ``N`` is its fixed ``draws``. Checks
   whose test sees the same cells (probabilities equal to 1e-12) at the same ``N`` are
   one *shape*; the distinct shapes are what is simulated.
2. **False alarms.** ``--tables`` count vectors in all, split evenly over the shapes, each
   ``Multinomial(N, cell probabilities)`` on the test's own cells (the counts of a bin
   are multinomial with the bin's mass: the same law as binning token counts), drawn
   in blocks with NumPy's seeded PCG64; each judged by the test as the judge runs it:
   Williams' corrected G against ``chi2.isf(test_level, k - 1)``, or the exact test's
   rejection region ``X^2 >= s*`` (``s*`` found by bisection on
   :func:`harness.judge.stats.exact_tail`; statistics within 1e-7 of it are judged by
   :func:`harness.judge.stats.exact_multinomial_pvalue` itself). The rate over all
   tables is the per-check false-alarm rate of a check drawn uniformly from the shapes;
   its 95 % interval is Clopper-Pearson's (``scipy.stats.binomtest``). Bonferroni over
   the corpus's checks holds at ``FAMILY_ALPHA`` when that rate is at most ``alpha``.
3. **Power.** Per shape and per named alternative of the plan (``plan.alternatives``:
   top-two shift, temperature lower and higher, filter boundary; at the case's
   ``epsilon``), ``--power-tables`` count vectors from the alternative, judged the same
   way: the empirical power beside the power the plan states (noncentral chi-square).

Timing: about 50 CPU seconds per 10**8 tables on the 2-core machine (198 CPU s for 4 * 10**8
and the power tables; load-independent figure in the JSON: ``cpu_seconds``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import resource
import subprocess
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import torch
from scipy import stats as sps

__all__ = ["corpus_checks", "shapes_of", "simulate_null", "simulate_power", "main"]

#: Count vectors per block (times cells: about 32 MB of int64 at most).
_BLOCK_CELLS = 1 << 22


def corpus_checks() -> tuple:
    """Every statistical check of the declared corpus under every registered profile.

    Returns
    -------
    (list of dict, float, int)
        Checks ``{"case", "row", "profile", "probs", "n", "plan", "epsilon"}`` (``plan`` None
        for a scenario, whose ``n`` is fixed), the per-check level and the number of checks
        the budget counts.
    """
    from harness.corpus.load import CASES_DIR, discover, load_case
    from harness.judge.judge import Judge
    from harness.judge.stats import DEFAULT_EPSILON, per_check_alpha, plan_draws
    from harness.run.runner import count_statistical_checks
    from impls.profiles import PROFILES
    paths = discover(CASES_DIR)
    n_checks = count_statistical_checks(paths)
    alpha = per_check_alpha(n_checks)
    judge = Judge([], n_checks)
    out = []
    for path in paths:
        case = load_case(path)
        if case.check == "statistical":
            eps = float(case.raw.get("epsilon", DEFAULT_EPSILON))
            for profile in PROFILES.values():
                pred = case.kind.predict(judge, case, profile, torch.float64)
                for b, preds in zip(case.batches, pred):
                    for r, p in zip(b.rows, preds):
                        if p.error or p.probs is None:
                            continue
                        probs = p.probs.to(torch.float64).numpy()
                        plan = plan_draws(probs, alpha, eps, case.draws)
                        out.append({"case": case.id, "row": f"{b.name}:{r.index}", "profile": profile.name,
                                    "probs": probs, "n": plan.n, "plan": plan, "epsilon": eps})
        elif case.check == "scenario" and case.scenario is not None and case.scenario.statistical is not None:
            from impls.reference.speculative import target_distribution
            st = case.scenario.statistical
            for profile in PROFILES.values():
                try:
                    p = target_distribution(case.scenario.spec, st["request"], profile, torch.float64)
                except Exception:  # a profile the scenario cannot run under: no check
                    continue
                out.append({"case": case.id, "row": f"{st['request']} (scenario)", "profile": profile.name,
                            "probs": p.numpy(), "n": int(st["draws"]), "plan": None,
                            "epsilon": DEFAULT_EPSILON})
    return out, alpha, n_checks


def _cells(probs: np.ndarray, n: int) -> tuple:
    """The test's cells: ``(test, cell probabilities)`` as :func:`harness.judge.stats.check_draws` forms them."""
    from harness.judge.stats import EXACT_MAX_SUPPORT, bin_probs, make_bins
    p = probs / probs.sum()
    k = int((p > 0).sum())
    if k <= 1:
        return "support", np.array([1.0])
    if k <= EXACT_MAX_SUPPORT:
        cells = p[p > 0]
        return "exact multinomial", np.sort(cells)[::-1] / cells.sum()
    return "G-test", bin_probs(p, make_bins(p, n))


def shapes_of(checks: list) -> list:
    """The distinct shapes (test, cells, ``N``) of ``checks``, each with the checks it stands for."""
    shapes: dict = {}
    for c in checks:
        test, pc = _cells(c["probs"], c["n"])
        if test == "support":
            continue
        key = (test, c["n"], tuple(np.round(pc, 12)))
        sh = shapes.setdefault(key, {"test": test, "n": c["n"], "cells": pc, "checks": []})
        sh["checks"].append(c)
    return list(shapes.values())


class _Judge:
    """The goodness-of-fit test of one shape, vectorised over count vectors."""

    def __init__(self, test: str, n: int, cells: np.ndarray, level: float):
        from harness.judge.stats import exact_tail
        self.test, self.n, self.p, self.level = test, n, cells, level
        self.e = n * cells
        k = len(cells)
        if test == "G-test":
            self.w = 1.0 + (float((1.0 / cells).sum()) - 1.0) / (6.0 * n * (k - 1))
            self.crit = float(sps.chi2.isf(level, k - 1))
        else:
            # p-value of statistic s: exact_tail(s - 1e-9 max(1, s)); non-increasing in s
            pv = lambda s: exact_tail(s - 1e-9 * max(1.0, s), n, cells)  # noqa: E731
            lo, hi = 0.0, float(sps.chi2.isf(level, k - 1))
            while pv(hi) >= level:
                lo, hi = hi, 2 * hi
            for _ in range(200):
                if hi - lo <= 1e-7 * max(1.0, hi):
                    break
                mid = 0.5 * (lo + hi)
                if pv(mid) >= level:
                    lo = mid
                else:
                    hi = mid
            self.s_lo, self.s_hi = lo, hi

    def rejects(self, counts: np.ndarray) -> int:
        """How many rows of ``counts`` (``(m, k)``) the test rejects at its level."""
        o = counts.astype(np.float64)
        if self.test == "G-test":
            with np.errstate(divide="ignore", invalid="ignore"):
                g = 2.0 * np.where(o > 0, o * np.log(o / self.e), 0.0).sum(axis=1)
            return int((np.maximum(g, 0.0) / self.w > self.crit).sum())
        from harness.judge.stats import exact_multinomial_pvalue
        x2 = (((o - self.e) ** 2) / self.e).sum(axis=1)
        hits = int((x2 >= self.s_hi).sum())
        for row in counts[(x2 > self.s_lo) & (x2 < self.s_hi)]:
            hits += exact_multinomial_pvalue(row, self.p)[1] < self.level
        return hits


def _draw_and_judge(rng, judge: _Judge, q: np.ndarray, tables: int) -> int:
    block = max(1, _BLOCK_CELLS // len(q))
    hits, done = 0, 0
    while done < tables:
        m = min(block, tables - done)
        hits += judge.rejects(rng.multinomial(judge.n, q, size=m))
        done += m
    return hits


def simulate_null(shapes: list, tables: int, level: float, rng) -> list:
    """False alarms per shape (``tables`` split evenly); adds ``tables``, ``false_alarms`` to each shape."""
    per = math.ceil(tables / len(shapes))
    for sh in shapes:
        judge = _Judge(sh["test"], sh["n"], sh["cells"], level)
        sh["tables"] = per
        sh["false_alarms"] = _draw_and_judge(rng, judge, sh["cells"], per)
    return shapes


def simulate_power(shapes: list, tables: int, level: float, rng) -> list:
    """Empirical power per shape and named alternative of its plan (goodness-of-fit shapes only)."""
    from harness.judge.stats import _cell_starts, _shapes, _sorted_support
    for sh in shapes:
        c = sh["checks"][0]
        sh["power"] = []
        if c["plan"] is None:
            continue
        probs = c["probs"] / c["probs"].sum()
        order = _sorted_support(probs)
        ps = probs[order]
        starts = _cell_starts(ps, sh["n"])
        judge = _Judge(sh["test"], sh["n"], sh["cells"], level)
        stated = {a.name: a.power for a in c["plan"].alternatives}
        for alt in _shapes(order, ps, len(probs), c["epsilon"]):
            if alt.q_sorted is None:
                continue  # the extra token: the support check, exact
            qc = np.add.reduceat(alt.q_sorted, starts)
            hits = _draw_and_judge(rng, judge, qc / qc.sum(), tables)
            ci = sps.binomtest(hits, tables).proportion_ci(0.95, method="exact")
            sh["power"].append({"alternative": alt.name, "tv": alt.tv, "stated": stated.get(alt.name),
                                "empirical": hits / tables, "ci95": [ci.low, ci.high], "tables": tables})
    return shapes


def _git_commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main(argv=None) -> int:
    """Run the simulation and write its JSON (the module docstring)."""
    from harness.judge.stats import FAMILY_ALPHA, SIZE_MARGIN, test_level
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tables", type=int, default=100_000_000, help="null count vectors in all (default 10**8)")
    ap.add_argument("--power-tables", type=int, default=20_000, help="count vectors per shape and alternative")
    ap.add_argument("--seed", type=int, default=20261205)
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/stat-calibration.json"))
    args = ap.parse_args(argv)
    t0, c0 = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
    load0 = os.getloadavg()
    checks, alpha, n_checks = corpus_checks()
    shapes = shapes_of(checks)
    level = test_level(alpha)
    rng = np.random.default_rng(args.seed)
    simulate_null(shapes, args.tables, level, rng)
    simulate_power(shapes, args.power_tables, level, rng)
    total = sum(sh["tables"] for sh in shapes)
    hits = sum(sh["false_alarms"] for sh in shapes)
    ci = sps.binomtest(hits, total).proportion_ci(0.95, method="exact")
    c1 = resource.getrusage(resource.RUSAGE_SELF)
    g_tables = sum(sh["tables"] for sh in shapes if sh["test"] == "G-test")
    g_hits = sum(sh["false_alarms"] for sh in shapes if sh["test"] == "G-test")
    g_ci = sps.binomtest(g_hits, g_tables).proportion_ci(0.95, method="exact") if g_tables else None
    doc = {
        "what": "simulated false-alarm rate and power of the corpus's statistical checks (benchmarks/stat_calibration.py)",
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "commit": _git_commit(), "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "loadavg_before": [round(x, 2) for x in load0], "loadavg_after": [round(x, 2) for x in os.getloadavg()],
        "wall_seconds": round(time.perf_counter() - t0, 1),
        "cpu_seconds": round((c1.ru_utime - c0.ru_utime) + (c1.ru_stime - c0.ru_stime), 1),
        "seed": args.seed, "family_alpha": FAMILY_ALPHA, "checks_in_corpus": n_checks, "alpha_per_check": alpha,
        "size_margin": SIZE_MARGIN, "test_level": level,
        "checks_simulated": len(checks), "shapes": len(shapes),
        "null": {"tables": total, "false_alarms": hits, "rate": hits / total, "ci95": [ci.low, ci.high],
                 "ci95_upper_at_most_alpha": bool(ci.high <= alpha), "rate_over_alpha": hits / total / alpha,
                 "g_test": {"tables": g_tables, "false_alarms": g_hits,
                            "rate": g_hits / g_tables if g_tables else None,
                            "ci95": [g_ci.low, g_ci.high] if g_ci else None}},
        "per_shape": [{"test": sh["test"], "n": sh["n"], "cells": len(sh["cells"]),
                       "smallest_expected": round(float(sh["n"] * sh["cells"].min()), 1),
                       "tables": sh["tables"], "false_alarms": sh["false_alarms"],
                       "rate_over_test_level": sh["false_alarms"] / sh["tables"] / level,
                       "checks": [f"{c['case']} {c['row']} [{c['profile']}]" for c in sh["checks"]],
                       "power": sh["power"]} for sh in shapes],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"{len(checks)} checks, {len(shapes)} shapes, {total} tables: {hits} false alarms, rate {hits / total:.3g} "
          f"[{ci.low:.3g}, {ci.high:.3g}] vs alpha {alpha:.3g} (test level {level:.3g}); "
          f"{doc['cpu_seconds']} CPU s -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
