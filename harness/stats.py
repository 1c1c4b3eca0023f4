"""Statistical comparison of observed draws with a predicted distribution (first version).

The check (cases/README.md, DESIGN.md decision 3):

1. **Support** — any draw of a token with predicted probability 0 is an exact
   failure, never a statistic.
2. **Bins** — tokens sorted by predicted probability (descending, then id);
   the most likely tokens get a bin each while their expected count is at
   least 5; the rest are pooled into one bin, which must itself reach 5
   (otherwise it is merged into the last individual bin).
3. **Chi-square** goodness-of-fit (``scipy.stats.chisquare``) on the bins at
   the per-check level ``alpha = FAMILY_ALPHA / n_checks``, where
   ``n_checks`` counts the statistical checks of the declared corpus, so a
   verdict does not depend on which cases run. Fewer than two bins: the
   case cannot be judged (an ``error``).

The family-wise false-alarm rate :data:`FAMILY_ALPHA` is set here and only
here. A later issue replaces the fixed sample sizes of the case files with a
power analysis.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from scipy import stats as sps

__all__ = ["FAMILY_ALPHA", "GofResult", "goodness_of_fit", "make_bins"]

#: Family-wise false-alarm rate over all statistical checks of the corpus.
FAMILY_ALPHA = 1e-4
MIN_EXPECTED = 5.0


@dataclass
class GofResult:
    """Outcome of :func:`goodness_of_fit`.

    Attributes
    ----------
    verdict : {"pass", "fail", "error"}
    reason : str
    n : int
        Number of draws.
    alpha : float
        The per-check level used.
    statistic, p_value : float or None
    bins : list of dict
        ``{"tokens": [...] or "rest", "observed", "expected"}``.
    outside_support : dict
        ``{token: count}`` of draws outside the predicted support.
    """

    verdict: str
    reason: str
    n: int
    alpha: float
    statistic: float | None = None
    p_value: float | None = None
    bins: list = field(default_factory=list)
    outside_support: dict = field(default_factory=dict)


def make_bins(probs: np.ndarray, n: int) -> list:
    """Bin a distribution for ``n`` draws so every expected count is >= 5.

    Parameters
    ----------
    probs : numpy.ndarray
        ``(V,)`` float64, summing to 1.
    n : int
        Number of draws.

    Returns
    -------
    list of numpy.ndarray
        Token-id arrays, one per bin (the last may pool many tokens).
    """
    support = np.nonzero(probs > 0)[0]
    order = support[np.lexsort((support, -probs[support]))]
    bins = []
    i = 0
    while i < len(order) and probs[order[i]] * n >= MIN_EXPECTED:
        bins.append(order[i:i + 1])
        i += 1
    rest = order[i:]
    if len(rest):
        if probs[rest].sum() * n >= MIN_EXPECTED or not bins:
            bins.append(rest)
        else:
            bins[-1] = np.concatenate([bins[-1], rest])
    return bins


def goodness_of_fit(counts: np.ndarray, probs: np.ndarray, alpha: float) -> GofResult:
    """Support check, then a binned chi-square test of ``counts`` against ``probs``.

    Parameters
    ----------
    counts : numpy.ndarray
        ``(V,)`` int64 observed counts.
    probs : numpy.ndarray
        ``(V,)`` float64 predicted distribution (zeros outside the support).
    alpha : float
        Per-check false-alarm rate.

    Returns
    -------
    GofResult
    """
    counts = np.asarray(counts, dtype=np.int64)
    probs = np.asarray(probs, dtype=np.float64)
    probs = probs / probs.sum()
    n = int(counts.sum())
    outside = {int(t): int(counts[t]) for t in np.nonzero((probs <= 0) & (counts > 0))[0]}
    if outside:
        return GofResult("fail", f"{sum(outside.values())} draws outside the predicted support "
                                 f"(tokens {sorted(outside)[:10]})", n, alpha, outside_support=outside)
    bins = make_bins(probs, n)
    obs = np.array([counts[b].sum() for b in bins], dtype=np.float64)
    exp = np.array([probs[b].sum() * n for b in bins], dtype=np.float64)
    info = [{"tokens": (b.tolist() if len(b) <= 8 else f"{len(b)} tokens"), "observed": int(o), "expected": float(e)}
            for b, o, e in zip(bins, obs, exp)]
    if len(bins) < 2:
        if len(np.nonzero(probs > 0)[0]) == 1:
            return GofResult("pass", "single-token support: every draw is that token", n, alpha, bins=info)
        return GofResult("error", f"too few draws: {n} draws give fewer than two bins with expected count >= 5",
                         n, alpha, bins=info)
    exp = exp * (obs.sum() / exp.sum())
    res = sps.chisquare(obs, exp)
    stat, p = float(res.statistic), float(res.pvalue)
    verdict = "pass" if p >= alpha else "fail"
    reason = (f"chi-square {stat:.4g} on {len(bins) - 1} d.o.f., p = {p:.3g} "
              f"{'>=' if p >= alpha else '<'} alpha = {alpha:.3g} (N = {n})")
    return GofResult(verdict, reason, n, alpha, stat, p, info)
