"""Tests of the statistical engine (harness/judge/stats.py) with hand-checked values.

Every value asserted here is derived in the comment next to it (closed forms
for binomial tails, normal tails for one degree of freedom, counting
arguments for bins). Tests that draw random numbers use fixed seeds and state
the probability that they would fail by chance for a correct engine.
"""

import math
import re
import textwrap
from xml.etree import ElementTree

import numpy as np
import pytest
import torch
from scipy import stats as sps

from harness.judge import stats
from harness.report.charts import frequency_chart_svg
from harness.judge.judge import Judge
from harness.run.runner import run
from harness.judge.stats import (FAMILY_ALPHA, MAX_SINGLE_BINS, chisquare_power, check_draws, draw_grid,
                           exact_multinomial_pvalue, make_bins, per_check_alpha, plan_draws, power_against,
                           tv_interval)
from impls.base import Row
from impls.profiles import TRTLLM
from impls.reference import Reference


# ---------------------------------------------------------------- level

def test_per_check_level_is_bonferroni_over_the_declared_corpus():
    assert per_check_alpha(10) == pytest.approx(1e-5, rel=1e-15)
    assert per_check_alpha(0) == FAMILY_ALPHA == 1e-4
    assert per_check_alpha(4, 0.05) == 0.0125


# ---------------------------------------------------------------- bins

def test_bins_sort_by_probability_then_id():
    # p = [.25, .25, .5], n = 100: expected 25, 25, 50 -> token 2 first, then the tie 0 before 1
    assert [b.tolist() for b in make_bins(np.array([0.25, 0.25, 0.5]), 100)] == [[2], [0], [1]]


def test_bins_cap_individual_tokens_and_pool_the_rest():
    # 200 equally likely tokens, n = 100000: every expected count is 500 >= 5, but only
    # MAX_SINGLE_BINS = 64 get a bin of their own; the other 136 share one bin.
    bins = make_bins(np.full(200, 1 / 200), 100_000)
    assert MAX_SINGLE_BINS == 64
    assert len(bins) == 65
    assert [b.tolist() for b in bins[:3]] == [[0], [1], [2]]
    assert len(bins[-1]) == 136 and bins[-1][0] == 64


def test_bins_skip_zero_probability_tokens():
    # token 1 has p = 0: in no bin. n = 10: expected 5, 3, 2 -> token 0 alone; {2, 3} pooled
    # has 5 >= 5 so stays a bin.
    bins = make_bins(np.array([0.5, 0.0, 0.3, 0.2]), 10)
    assert [b.tolist() for b in bins] == [[0], [2, 3]]


# ---------------------------------------------------------------- exact test

def test_exact_two_cells_is_two_binomial_tails():
    # 7 heads in 10 fair tosses: X^2 = (2^2 + 2^2) / 5 = 1.6; P(|X - 5| >= 2) = 1 - (C(10,4) + C(10,5) + C(10,6)) / 2^10
    # = 1 - (210 + 252 + 210) / 1024 = 352 / 1024.
    stat, p = exact_multinomial_pvalue([7, 3], [0.5, 0.5])
    assert stat == pytest.approx(1.6, rel=1e-12)
    assert p == pytest.approx(352 / 1024, rel=1e-12)
    # 100 of 100: only the two extreme outcomes are as extreme -> 2 * 2^-100 = 2^-99.
    assert exact_multinomial_pvalue([100, 0], [0.5, 0.5])[1] == pytest.approx(2.0 ** -99, rel=1e-9)
    # the observed outcome at the mean: p = 1
    assert exact_multinomial_pvalue([5, 5], [0.5, 0.5])[1] == 1.0


def test_exact_three_cells_hand_value():
    # N = 3, p = 1/3 each: X^2 = sum (n_i - 1)^2. Outcomes: (1,1,1) X^2 = 0 with prob 6/27;
    # permutations of (2,1,0): X^2 = 2, prob 18/27; of (3,0,0): X^2 = 6, prob 3/27.
    # Observed (2,1,0): P(X^2 >= 2) = 21/27.
    stat, p = exact_multinomial_pvalue([2, 1, 0], [1 / 3, 1 / 3, 1 / 3])
    assert stat == pytest.approx(2.0, rel=1e-12)
    assert p == pytest.approx(21 / 27, rel=1e-12)
    assert exact_multinomial_pvalue([3, 0, 0], [1 / 3, 1 / 3, 1 / 3])[1] == pytest.approx(3 / 27, rel=1e-12)


def _brute_force_pvalue(obs, p):
    n = int(sum(obs))
    p = np.asarray(p, dtype=np.float64) / np.sum(p)
    e = n * p
    x2 = lambda o: float((((np.asarray(o) - e) ** 2) / e).sum())  # noqa: E731
    c = x2(obs)
    return sum(sps.multinomial.pmf((a, b, n - a - b), n, p)
               for a in range(n + 1) for b in range(n - a + 1) if x2((a, b, n - a - b)) >= c - 1e-9 * max(1, c))


def test_exact_three_cells_equals_enumeration():
    rng = np.random.default_rng(12)
    for _ in range(12):
        p = rng.dirichlet([1.0, 1.0, 1.0])
        n = int(rng.integers(3, 40))
        obs = rng.multinomial(n, p)
        assert exact_multinomial_pvalue(obs, p)[1] == pytest.approx(_brute_force_pvalue(obs, p), rel=1e-9, abs=1e-14)


def test_exact_test_agrees_with_chi_square_at_large_n():
    # At N = 200000 the asymptotic chi-square p-value approximates the exact one.
    obs = np.array([114_400, 57_000, 28_600])
    p = np.array([4 / 7, 2 / 7, 1 / 7])
    exact = exact_multinomial_pvalue(obs, p)[1]
    asym = sps.chisquare(obs, p * obs.sum()).pvalue
    assert exact == pytest.approx(asym, rel=0.02)


def test_exact_test_rejects_bad_shapes():
    with pytest.raises(ValueError):
        exact_multinomial_pvalue([1, 2, 3, 4], [0.25] * 4)
    with pytest.raises(ValueError):
        exact_multinomial_pvalue([1, 2], [1.0, 0.0])


# ---------------------------------------------------------------- power

def test_g_power_uses_the_kullback_leibler_noncentrality():
    # lam = 2 n KL(q || p) / w: p = (.5, .5), q = (.55, .45), n = 1000:
    # KL = .55 ln 1.1 + .45 ln .9 = 0.0524206 - 0.0474122 = 0.0050084, w = 1 + (2 + 2 - 1) / 6000 = 1.0005,
    # lam = 2000 * 0.0050084 / 1.0005 = 10.0117.
    kl = 0.55 * math.log(1.1) + 0.45 * math.log(0.9)
    lam = 2 * 1000 * kl / 1.0005
    assert lam == pytest.approx(10.0117, abs=1e-4)
    z = sps.norm.isf(0.025)
    want = sps.norm.cdf(math.sqrt(lam) - z) + sps.norm.cdf(-math.sqrt(lam) - z)
    got = chisquare_power(np.array([0.5, 0.5]), np.array([0.55, 0.45]), 1000, 0.05, statistic="g")
    assert got == pytest.approx(want, rel=1e-9)


def test_power_with_one_degree_of_freedom_is_two_normal_tails():
    # df = 1: X^2 = Z^2 with Z ~ N(sqrt(lam), 1), so power = Phi(sqrt(lam) - z) + Phi(-sqrt(lam) - z),
    # z = Phi^-1(1 - alpha / 2). p = (.5, .5), q = (.55, .45), n = 1000: lam = 1000 * 2 * .05^2 / .5 = 10.
    lam, z = 10.0, sps.norm.isf(0.025)
    want = sps.norm.cdf(math.sqrt(lam) - z) + sps.norm.cdf(-math.sqrt(lam) - z)
    assert chisquare_power(np.array([0.5, 0.5]), np.array([0.55, 0.45]), 1000, 0.05) == pytest.approx(want, rel=1e-9)
    # no effect: the power is the level
    assert chisquare_power(np.array([0.5, 0.5]), np.array([0.5, 0.5]), 1000, 0.05) == pytest.approx(0.05)


def test_power_against_combines_support_and_fit():
    # q puts 0.01 outside the support: P_support = 1 - 0.99^n; the rest (renormalised) equals p,
    # so P_fit is the level the test rejects at, SIZE_MARGIN * alpha = 7e-4, and the combination is
    # 1 - (1 - P_support)(1 - 7e-4).
    p = np.array([0.5, 0.5, 0.0])
    q = np.array([0.495, 0.495, 0.01])
    r = power_against(p, q, 300, 1e-3)
    assert stats.SIZE_MARGIN == 0.7 and stats.test_level(1e-3) == pytest.approx(7e-4, rel=1e-12)
    assert r["support"] == pytest.approx(1 - 0.99 ** 300, rel=1e-12)
    assert r["fit"] == pytest.approx(7e-4, rel=1e-6)
    assert r["power"] == pytest.approx(1 - (0.99 ** 300) * (1 - 7e-4), rel=1e-9)


def test_draw_grid():
    g = draw_grid(10**6)
    assert g[0] == 1000 and g[-1] == 10**6
    assert (np.diff(g) > 0).all() and (g % 100 == 0).all()
    assert (g[1:] / g[:-1]).max() <= 1.02 + 100 / 1000 + 1e-12
    assert draw_grid(500).tolist() == [500]


def test_plan_for_a_fair_coin_matches_the_closed_form():
    # p = (.5, .5): the top-two shift of eps moves (.5, .5) to (.49, .51): lam = N eps^2 (1/.5 + 1/.5) = 4 N eps^2.
    # With df = 1, power = Phi(sqrt(lam) - z_{l/2}) (+ a far tail of ~1e-23), l the level the test rejects at,
    # SIZE_MARGIN * alpha = 7e-5 at alpha = 1e-4. The plan asks for TARGET_POWER + POWER_MARGIN = 0.993:
    # sqrt(lam) = z_{3.5e-5} + z_{.993} = 3.9784 + 2.4573 = 6.4357, lam = 41.418, N = 41.418 / 4e-4 = 103,476.
    # The grid: 1000 * 1.02^234 = 102,911 -> 103,000 (too few); 1000 * 1.02^235 = 104,969 -> 105,000.
    # The filter-boundary alternative (token 2's mass cut, renormalised) is the same shift here; a uniform
    # distribution has no temperature alternative; the support is the whole vocabulary (no extra token).
    assert stats.TARGET_POWER + stats.POWER_MARGIN == pytest.approx(0.993)
    plan = plan_draws(np.array([0.5, 0.5]), 1e-4)
    assert plan.test == "exact multinomial" and plan.test_level == pytest.approx(7e-5, rel=1e-12)
    assert plan.n == plan.n_needed == 105_000 and not plan.cap_binds
    assert [a.name for a in plan.alternatives] == ["top-two-shift", "filter-boundary"]
    assert all(a.power >= 0.993 for a in plan.alternatives)
    assert plan.alternatives[0].power == pytest.approx(plan.alternatives[1].power, rel=1e-9)
    n_closed = ((sps.norm.isf(0.35e-4) + sps.norm.isf(0.007)) / (2 * 0.01)) ** 2
    assert 103_000 < n_closed <= 105_000
    assert n_closed == pytest.approx(103_476, abs=5)


def test_plan_cap_reports_the_achieved_epsilon():
    # Capped at 4000: sqrt(4 * 4000) * eps = 6.4357 -> eps = 6.4357 / 126.49 = 0.050862 (level 7e-5, as above).
    plan = plan_draws(np.array([0.5, 0.5]), 1e-4, cap=4000)
    assert plan.n == 4000 and plan.cap_binds and plan.n_needed == 105_000
    want = (sps.norm.isf(0.35e-4) + sps.norm.isf(0.007)) / (2 * math.sqrt(4000))
    assert want == pytest.approx(0.050862, abs=1e-6)
    assert plan.achieved_epsilon == pytest.approx(want, rel=1e-6)


def test_plan_extra_token_alternative_needs_459_draws():
    # Support {0, 1} of 3 tokens, with very unequal p so the fit alternative is easy:
    # the extra-token alternative alone needs 1 - 0.99^N >= 0.99, i.e. N >= ln(.01)/ln(.99) = 458.2.
    # The grid starts at 1000, so N = 1000 only if the top-two shift is detected there too;
    # with a cap of 459 the achieved epsilon of the extra token is 1 - 0.01^(1/459) = 0.009984.
    plan = plan_draws(np.array([0.5, 0.5, 0.0]), 1e-4, cap=459)
    extra = [a for a in plan.alternatives if a.name == "extra-token"][0]
    assert extra.power == pytest.approx(1 - 0.99 ** 459, rel=1e-12) and extra.power >= 0.99
    assert extra.detected_by == "support check"


def test_alternative_shapes_hand_values():
    # p = (.5, .3, .2) on a vocabulary of 4 (token 3 outside the support), eps = 0.05.
    p = np.array([0.5, 0.3, 0.2, 0.0])
    alts = stats.alternatives(p, 0.05, 1000, 1e-4)
    assert [a.name for a in alts] == list(stats.SHAPES)
    assert all(a.tv == pytest.approx(0.05, abs=1e-9) for a in alts)
    order = np.array([0, 1, 2])
    ps = p[order]
    sh = {x.name: x for x in stats._shapes(order, ps, 4, 0.05)}
    # filter boundary: cut c from token 2 and renormalise: TV = 0.8 c / (1 - c) = 0.05 -> c = 0.05 / 0.85,
    # q = (.5, .3, .2 - c) / (1 - c) = (0.53125, 0.31875, 0.15).
    assert sh["filter-boundary"].q_sorted == pytest.approx([0.53125, 0.31875, 0.15], abs=1e-9)
    # temperature: q = p ** gamma renormalised, so log(q_i / q_j) = gamma log(p_i / p_j) for every pair;
    # lower temperature is sharper (gamma > 1, q_1 > p_1), higher is flatter.
    for name, sharper in (("temperature-lower", True), ("temperature-higher", False)):
        q = sh[name].q_sorted
        g01 = math.log(q[0] / q[1]) / math.log(0.5 / 0.3)
        g12 = math.log(q[1] / q[2]) / math.log(0.3 / 0.2)
        assert g01 == pytest.approx(g12, rel=1e-9) and (g01 > 1) == sharper and (q[0] > 0.5) == sharper
    # top-two shift: (.45, .35, .2); extra token: power 1 - (1 - eps)^n.
    assert sh["top-two-shift"].q_sorted == pytest.approx([0.45, 0.35, 0.2], abs=1e-12)
    assert alts[-1].power == pytest.approx(1 - 0.95 ** 1000, rel=1e-12)
    # A uniform support has no temperature alternative; a single token has no goodness-of-fit alternative.
    assert [a.name for a in stats.alternatives(np.full(4, 0.25), 0.01, 1000, 1e-4)] == [
        "top-two-shift", "filter-boundary"]
    assert [a.name for a in stats.alternatives(np.array([1.0, 0.0]), 0.01, 1000, 1e-4)] == ["extra-token"]


def test_the_test_rejects_at_the_margin_under_alpha():
    # Fair coin, 60 heads of 100: the exact p-value is P(|X - 50| >= 10) = 2 P(X <= 40).
    p = float(2 * sps.binom.cdf(40, 100, 0.5))
    r = check_draws(np.array([60, 40]), np.array([0.5, 0.5]), p / 0.85)   # p = 0.85 alpha >= 0.7 alpha
    assert r.p_value == pytest.approx(p, rel=1e-9)
    assert r.verdict == "pass" and r.p_adjusted >= stats.FAMILY_ALPHA
    r = check_draws(np.array([60, 40]), np.array([0.5, 0.5]), p / 0.65)   # p = 0.65 alpha < 0.7 alpha
    assert r.verdict == "fail" and r.p_adjusted < stats.FAMILY_ALPHA
    assert r.p_adjusted == pytest.approx(p * stats.FAMILY_ALPHA / (p / 0.65) / 0.7, rel=1e-9)


def test_plan_epsilon_must_be_a_distance():
    with pytest.raises(ValueError):
        plan_draws(np.array([0.5, 0.5]), 1e-4, epsilon=0.0)
    with pytest.raises(ValueError):
        plan_draws(np.zeros(3), 1e-4)


# ---------------------------------------------------------------- TV distance

def test_tv_estimate_and_interval():
    # obs (60, 40) vs (.5, .5): TV = (|.6 - .5| + |.4 - .5|) / 2 = 0.1
    tv = tv_interval(np.array([60, 40]), np.array([0.5, 0.5]))
    assert tv["estimate"] == pytest.approx(0.1, abs=1e-12)
    assert tv["low"] < 0.1 < tv["high"] and tv["confidence"] == 0.95
    # a perfect fit: estimate 0, interval starting at 0
    tv = tv_interval(np.array([5000, 5000]), np.array([0.5, 0.5]))
    assert tv["estimate"] == 0 and tv["low"] == 0 and 0 < tv["high"] < 0.02
    # the bootstrap is seeded: the same interval every time
    assert tv_interval(np.array([60, 40]), np.array([0.5, 0.5])) == tv_interval(np.array([60, 40]), np.array([0.5, 0.5]))


# ---------------------------------------------------------------- the check

def test_support_violation_is_an_exact_failure():
    r = check_draws(np.array([10, 0, 1]), np.array([0.5, 0.5, 0.0]), 1e-6)
    assert r.verdict == "fail" and r.outside_support == {2: 1} and r.p_value is None
    assert r.chart["labels"][-1] == "outside support" and r.chart["observed"][-1] == pytest.approx(1 / 11)


def test_single_token_support_passes_on_the_support_check_alone():
    r = check_draws(np.array([0, 1000, 0]), np.array([0.0, 1.0, 0.0]), 1e-6)
    assert r.verdict == "pass" and r.test == "support"


def test_too_few_draws_is_refused():
    # 5 tokens of p = .2 each and N = 5: no expected count reaches 5, so one pooled bin -> no test.
    r = check_draws(np.array([3, 1, 1, 0, 0]), np.full(5, 0.2), 1e-4)
    assert r.verdict == "error" and "too few draws" in r.reason and "refused" in r.reason


def test_g_test_path_values_and_adjusted_p():
    # 4 equally likely tokens, N = 400, obs (120, 100, 90, 90), e = 100 each:
    # G = 2 (120 ln 1.2 + 100 ln 1 + 2 * 90 ln 0.9) = 2 (21.878587 - 18.964893) = 5.827388; Williams' q = 1 + (4 * 4 - 1) / (6 * 400 * 3)
    # = 1.0020833; statistic G / q on 3 d.o.f. For 3 d.o.f. the chi-square tail is
    # erfc(sqrt(x / 2)) + sqrt(2x / pi) e^(-x/2).
    tail3 = lambda x: math.erfc(math.sqrt(x / 2)) + math.sqrt(2 * x / math.pi) * math.exp(-x / 2)  # noqa: E731
    g = 2 * (120 * math.log(1.2) + 2 * 90 * math.log(0.9))
    q = 1 + 15 / 7200
    assert g == pytest.approx(5.827388, rel=1e-6)
    r = check_draws(np.array([120, 100, 90, 90]), np.full(4, 0.25), 1e-5)
    assert r.test == "G-test" and r.df == 3
    assert r.statistic == pytest.approx(g / q, rel=1e-12)
    assert r.p_value == pytest.approx(tail3(g / q), rel=1e-10)
    # alpha = 1e-5 means 10 checks: adjusted p = min(1, 10 p / 0.7) = 1
    assert r.p_adjusted == 1.0 and r.verdict == "pass"
    # obs (130, 100, 90, 80): G = 2 (130 ln 1.3 + 90 ln .9 + 80 ln .8) = 13.9015, p < alpha = 0.01;
    # alpha = 0.01 means 1e-4 / 0.01 = 0.01 checks, so the adjusted p is 0.01 p.
    g = 2 * (130 * math.log(1.3) + 90 * math.log(0.9) + 80 * math.log(0.8))
    r = check_draws(np.array([130, 100, 90, 80]), np.full(4, 0.25), 0.01)
    assert r.statistic == pytest.approx(g / q) and r.p_value == pytest.approx(tail3(g / q), rel=1e-10)
    # The adjustment also divides by SIZE_MARGIN (the test rejects at 0.7 alpha): fail iff adjusted p < 1e-4.
    assert r.verdict == "fail" and r.p_adjusted == pytest.approx(r.p_value * 0.01 / 0.7)
    assert r.test_level == pytest.approx(0.007) and "0.007 (0.7 x alpha = 0.01" in r.reason


def test_g_test_matches_scipy_power_divergence():
    obs, p = np.array([30, 50, 20, 0, 7]), np.array([0.3, 0.4, 0.2, 0.05, 0.05])
    g = sps.power_divergence(obs, p * obs.sum(), lambda_="log-likelihood").statistic
    w = 1 + ((1 / p).sum() - 1) / (6 * obs.sum() * 4)
    assert stats.g_test(obs, p)[0] == pytest.approx(g / w, rel=1e-12)


def test_exact_path_in_check_draws():
    r = check_draws(np.array([7, 0, 3]), np.array([0.5, 0.0, 0.5]), 0.01)
    assert r.test == "exact multinomial" and r.p_value == pytest.approx(352 / 1024) and r.verdict == "pass"
    assert [b["tokens"] for b in r.bins] == [[0], [2]]


# ---------------------------------------------------------------- draws through the judge

class StepOnly(Reference):
    """The reference without ``sample_many``: the judge must batch copies of the row through ``step``."""

    def __init__(self):
        super().__init__(TRTLLM, name="step-only")
        self.calls = 0

    def open_session(self, device="cpu"):
        inner, outer = super().open_session(device), self

        class S:
            def step(self, rows):
                outer.calls += 1
                return inner.step(rows)
        return S()


def test_draw_counts_batches_step_calls_and_equals_sample_many():
    # The canonical RNG makes the two paths draw the same tokens: the counts are equal exactly.
    row = Row(logits=torch.tensor([1.0, 0.25, 2.0, -1.0, 0.5, 0.0]), temperature=0.8, top_k=4, seed=3)
    seeds = range(100, 2100)
    judge = Judge([], 1)
    impl = StepOnly()
    a = judge.draw_counts(impl, row, seeds)
    b = judge.draw_counts(Reference(), row, seeds)
    assert a.sum() == 2000 and (a == b).all()
    assert impl.calls == 1  # 2000 copies of a 6-token row fit one call (at most 8192 rows per call)


def test_epsilon_field_changes_the_plan(tmp_path):
    root = tmp_path / "cases"
    body = """schema = 1
        id = "filters/{name}"
        description = "d"
        category = "filters"
        features = ["temperature", "seed"]
        source = {{ url = "https://github.com/NVIDIA/TensorRT-LLM/issues/1" }}
        check = "statistical"
        draws = 1000000
        {extra}
        [[rows]]
        logits = [0.0, 0.0]
        temperature = 1.0
        """
    for name, extra in (("loose", "epsilon = 0.05"), ("default", "")):
        p = root / "filters" / f"{name}.toml"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(body.format(name=name, extra=extra)))
    # Run only the loose case: the level still counts both checks of the declared corpus (alpha = 5e-5).
    out = run(["reference"], ["filters/loose"], tmp_path / "r", progress=False, root=root)
    (res,) = out.doc["results"]
    row = res["details"]["rows"][0]
    assert res["status"] == "pass" and row["alpha"] == pytest.approx(5e-5)
    assert row["plan"]["epsilon"] == 0.05
    assert row["n"] == plan_draws(np.array([0.5, 0.5]), 5e-5, epsilon=0.05).n
    # A fair coin needs N = (z_{alpha/2} + z_{.99})^2 / (4 eps^2): 1 / eps^2 scaling, 25x fewer draws
    # at eps = .05 than at eps = .01 (up to the 2% grid).
    default = plan_draws(np.array([0.5, 0.5]), 5e-5).n
    assert 24 * row["n"] < default < 26 * row["n"]


# ---------------------------------------------------------------- report

def test_chart_is_inline_svg_without_network_references():
    svg = frequency_chart_svg(["3", "1", "other (4)"], [0.5, 0.3, 0.2], [0.52, 0.29, 0.19], 1000, salt="x")
    assert svg.startswith("<svg") and svg.endswith("</svg>")
    assert "http" not in svg and "<script" not in svg
    ElementTree.fromstring(svg)  # well-formed XML
    other = frequency_chart_svg(["3"], [1.0], [1.0], 10, salt="y")
    ids = lambda s: set(re.findall(r'id="([^"]+)"', s))  # noqa: E731
    assert ids(svg) and not ids(svg) & ids(other)  # unique ids across charts of one page


def test_report_shows_statistical_verdicts(tmp_path):
    root = tmp_path / "cases"
    p = root / "filters" / "stat.toml"
    p.parent.mkdir(parents=True)
    p.write_text(textwrap.dedent("""\
        schema = 1
        id = "filters/stat"
        description = "d"
        category = "filters"
        features = ["temperature", "seed"]
        source = { url = "https://github.com/NVIDIA/TensorRT-LLM/issues/1" }
        check = "statistical"
        draws = 3000
        [[rows]]
        logits = [0.0, -0.5, -1.0, -1.5, -2.0]
        temperature = 1.0
        """))
    run(["reference"], None, tmp_path / "r", progress=False, root=root)
    html = (tmp_path / "r" / "index.html").read_text()
    assert '<h2 id="statistics">Statistical checks</h2>' in html
    assert "Family-wise false-alarm rate 0.0001" in html
    assert html.count("<svg") == 1
    for word in ("p-value", "adjusted", "TV distance", "power vs top-two-shift", "cap binds: achieved ε"):
        assert word in html, word
    assert "<script src" not in html and "http://" not in html


def test_docstring_examples():
    import doctest
    res = doctest.testmod(stats, optionflags=doctest.ELLIPSIS)
    assert res.failed == 0 and res.attempted >= 10


def test_statbench_runs_at_a_small_size():
    # Not a timed test: the measurement script of docs/statistics.md keeps working.
    from benchmarks.statbench import measure
    m = measure(vocab=1000, draws=20_000, top_p=0.9, repeat=1)
    assert m["n"] == 20_000 and m["test"] == "G-test" and m["verdict"] in ("pass", "fail")
    assert m["harness"] == pytest.approx(m["predict"] + m["plan"] + m["check"])


def test_stat_calibration_runs_at_a_small_size(tmp_path):
    # Not a measurement: the calibration script of docs/statistics.md keeps working and judges as the
    # judge does. Its exact-test rejection region agrees with check_draws on the region's edge, and
    # the G-test threshold with g_test's p-value.
    import json
    from benchmarks import stat_calibration as sc
    out = tmp_path / "cal.json"
    assert sc.main(["--tables", "20000", "--power-tables", "200", "--out", str(out)]) == 0
    d = json.loads(out.read_text())
    assert d["test_level"] == pytest.approx(stats.SIZE_MARGIN * d["alpha_per_check"])
    assert d["null"]["tables"] >= 20000 and d["null"]["rate"] == d["null"]["false_alarms"] / d["null"]["tables"]
    assert d["null"]["ci95"][0] <= d["null"]["rate"] <= d["null"]["ci95"][1]
    assert all(p["alternative"] in stats.SHAPES for s in d["per_shape"] for p in s["power"])
    level = 1e-3
    j = sc._Judge("exact multinomial", 1000, np.array([0.7, 0.3]), level)
    hits = [j.rejects(np.array([[k, 1000 - k]])) for k in range(600, 800)]
    assert hits == [int(exact_multinomial_pvalue([k, 1000 - k], [0.7, 0.3])[1] < level) for k in range(600, 800)]
    assert 0 in hits and 1 in hits
    j = sc._Judge("G-test", 400, np.full(4, 0.25), level)
    got = []
    for o in ([120, 100, 90, 90], [130, 100, 90, 80], [135, 100, 85, 80], [140, 100, 80, 80]):
        got.append(j.rejects(np.array([o])))
        assert got[-1] == (stats.g_test(o, np.full(4, 0.25))[1] < level)
    assert 0 in got and 1 in got   # both sides of the threshold


def test_stat_memory_case_is_a_valid_statistical_case(tmp_path):
    from benchmarks.stat_memory import case_text
    from harness.corpus.load import load_case
    p = tmp_path / "filters" / "vocab-4096-statistical.toml"
    p.parent.mkdir()
    p.write_text(case_text(4096, 1000, 3.0, None))
    case = load_case(p, tmp_path)
    assert case.check == "statistical" and case.draws == 1000 and case.id == "filters/vocab-4096-statistical"
