"""Measure the harness's own work for one statistical check (not a timed test).

``python -m benchmarks.statbench [--vocab 128256] [--draws 1000000] [--repeat 3]``
times, for one generated row (logits ``standard_normal * 3``, ``T = 1``;
once with no filter, the whole vocabulary in the support, and once with
``top_p = 0.9``):

1. ``predict`` — the float64 expected distribution: the reference in oracle
   mode, ``Reference(profile, dtype=torch.float64).open_session().step``;
2. ``plan`` — the power analysis (:func:`harness.judge.stats.plan_draws`);
3. ``check`` — support check, binning, test, adjusted p-value and the
   bootstrap TV interval (:func:`harness.judge.stats.check_draws`) on ``N``
   counts;
4. ``chart`` — the report's SVG chart for the row (report time, listed apart).

The counts are a multinomial sample from the prediction (drawing them is the
implementation's work, not the harness's; its time is printed apart as
``synthetic draws``). Prints one line per configuration; the best of
``--repeat`` runs per stage, in seconds. ``docs/statistics.md`` records the
figures of a 2-core CPU machine.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

__all__ = ["measure", "main"]


def _best(fn, repeat: int):
    best, out = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def measure(vocab: int = 128256, draws: int = 1_000_000, top_p: float = 1.0, repeat: int = 3,
            n_checks: int = 10, seed: int = 0) -> dict:
    """Time the harness's stages of one statistical check.

    Parameters
    ----------
    vocab : int
        Vocabulary size ``V``.
    draws : int
        ``N``, the number of draws judged (also the cap of the power analysis).
    top_p : float
        Nucleus of the row (1.0: no filter).
    repeat : int
        Runs per stage; the best is kept.
    n_checks : int
        Statistical checks assumed in the corpus (sets the per-check level).
    seed : int
        Seed of the logits and of the synthetic counts.

    Returns
    -------
    dict
        Seconds per stage (``predict``, ``plan``, ``check``, ``chart``,
        ``harness`` = predict + plan + check, ``synthetic_draws``), and
        ``support`` (tokens), ``n``, ``test``, ``bins``, ``verdict``.
    """
    from impls.base import Row
    from impls.profiles import TRTLLM
    from impls.reference import Reference

    from harness.report.charts import frequency_chart_svg
    from harness.judge.stats import check_draws, per_check_alpha, plan_draws

    rng = np.random.default_rng(seed)
    logits = torch.from_numpy((rng.standard_normal(vocab) * 3.0).astype(np.float32))
    row = Row(logits=logits, temperature=1.0, top_p=top_p if top_p < 1 else None, seed=1)
    alpha = per_check_alpha(n_checks)
    oracle = Reference(TRTLLM, dtype=torch.float64)
    t_pred, res = _best(lambda: oracle.open_session().step([row])[0], repeat)
    probs = res.probs.numpy()
    t_plan, plan = _best(lambda: plan_draws(probs, alpha, cap=draws), repeat)
    t_draw, counts = _best(lambda: rng.multinomial(draws, probs / probs.sum()), 1)
    t_check, out = _best(lambda: check_draws(counts, probs, alpha, plan=plan), repeat)
    c = out.chart
    t_chart, _ = _best(lambda: frequency_chart_svg(c["labels"], c["expected"], c["observed"], draws, "bench"), repeat)
    return {"vocab": vocab, "top_p": top_p, "n": draws, "support": int((probs > 0).sum()), "test": out.test,
            "bins": len(out.bins), "verdict": out.verdict, "predict": t_pred, "plan": t_plan, "check": t_check,
            "harness": t_pred + t_plan + t_check, "chart": t_chart, "synthetic_draws": t_draw,
            "n_needed": plan.n_needed}


def main(argv=None) -> int:
    """Command-line entry point; prints one line per configuration. Returns 0."""
    ap = argparse.ArgumentParser(prog="python -m benchmarks.statbench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--vocab", type=int, default=128256)
    ap.add_argument("--draws", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    torch.set_num_threads(max(1, torch.get_num_threads()))
    for top_p in (1.0, 0.9):
        m = measure(args.vocab, args.draws, top_p, args.repeat)
        print(f"V={m['vocab']} N={m['n']:,} top_p={top_p}: support {m['support']} tokens, {m['test']} on "
              f"{m['bins']} cells ({m['verdict']}); harness {m['harness']:.3f} s = predict {m['predict']:.3f} + "
              f"plan {m['plan']:.3f} + check {m['check']:.3f}; chart {m['chart']:.3f} s; "
              f"(synthetic draws {m['synthetic_draws']:.3f} s, power analysis asks N = {m['n_needed']})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
