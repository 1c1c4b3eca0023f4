"""``check = "statistical"``: each row's draws against the float64 prediction of its profile (DESIGN.md decision 3).

Per row (:mod:`harness.judge.stats`, ``docs/statistics.md``): the float64 prediction under
the implementation's profile, a sample size from the power analysis
(:func:`harness.judge.stats.plan_draws`, capped at the case's ``draws``), draws with seeds
``draw_seed + i`` (:meth:`harness.judge.Judge.draw_counts`; under an RNG the reference models
that is not the canonical one, llama.cpp's, each draw is also compared with the reference's
token for that seed: :func:`token_for_token`), then
:func:`harness.judge.stats.check_draws` at the per-check level: the support first (a draw
outside it is a failure, never a statistic), then an exact multinomial test or a binned
G-test with Williams' correction. A row whose prediction is an error, or that the test
refuses to judge, makes the case an ``error``; any failed row a ``fail`` (or
``known-bug``). A row planning more draws than the implementation allows on the judge's
device (its optional ``draw_limits``: the fused kernel under Triton's interpreter draws about
4 tokens a second) makes the case ``n/a`` with that reason, before any draw.
"""

from __future__ import annotations

import numpy as np
import torch

from harness.corpus.load import CaseError
from harness.judge.compare import mismatches, observe
from harness.judge.result import Result
from harness.judge.stats import DEFAULT_EPSILON, FAMILY_ALPHA, TARGET_POWER, check_draws, plan_draws
from harness.judge.verdict import Evidence, verdict
from impls.base import RowError
from impls.profiles import TRTLLM

from .rows import RowsKind, expect_keys, where

__all__ = ["StatisticalKind", "draw_limit"]

#: What the result's ``test`` says.
TEST = ("support check, then an exact multinomial test (support of 2-3 tokens) or the G-test with Williams' "
        "correction on bins with expected count >= 5; N from a power analysis")


def token_for_token(profile) -> bool:
    """Whether a statistical row's draws are also compared one by one: a modelled RNG that is not the canonical one.

    The canonical draw (DESIGN.md decision 1) is checked token for token by exact cases; under
    ``rng == "mt19937"`` (llama.cpp) each seed of the draw is a fresh request whose token the
    reference predicts (:mod:`impls.reference.mt19937`).
    """
    return profile.rng == "mt19937"


def draw_limit(impl, device: str):
    """``(most draws per row, why)`` that ``impl`` declares for ``device`` (``"cuda:0"`` reads ``"cuda"``), or None.

    From the implementation's optional ``draw_limits`` (``impls/base.py`` Implementation).
    """
    return (getattr(impl, "draw_limits", None) or {}).get(str(device).split(":")[0])


def _same_tokens(judge, profile, row, seeds, toks) -> dict:
    """Compare an implementation's first draw per seed with the reference's model of its RNG.

    Returns
    -------
    dict
        ``compared`` (seeds whose draw is modelled), ``mismatches`` and ``first`` (the first
        differing seed as ``"seed S: engine A, reference B"``, or None).
    """
    from impls.reference.sampler import ReferenceSession
    ref = ReferenceSession(profile, judge.device).first_draws(row, list(seeds))
    compared, bad, first = 0, 0, None
    for s, a, b in zip(seeds, toks.tolist(), ref):
        if b is None:
            continue
        compared += 1
        if a != b:
            bad += 1
            first = first or f"seed {s}: engine {a}, reference {b}"
    return {"compared": compared, "mismatches": bad, "first": first}


class StatisticalKind(RowsKind):
    """The distribution each row samples from, judged by draws at a stated false-alarm rate."""

    name = "statistical"
    case_fields = {**RowsKind.case_fields,
                   "draws": {"type": "integer", "minimum": 1000, "maximum": 10_000_000},
                   "epsilon": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1}}
    draws_view = True

    def load(self, data: dict, shown: str) -> tuple:
        """The batches, and ``draws`` (required)."""
        attrs, used = super().load(data, shown)
        if "draws" not in data:
            raise CaseError(shown, "draws", "required when check = 'statistical'")
        attrs["draws"] = data["draws"]
        return attrs, used

    def statistical_checks(self, data: dict) -> int:
        """One check per row (of ``rows``, or of every batch)."""
        if isinstance(data.get("rows"), list):
            return len(data["rows"])
        if isinstance(data.get("batches"), list):
            return sum(len(b["rows"]) for b in data["batches"] if isinstance(b, dict) and isinstance(b.get("rows"), list))
        return 0

    def is_statistical(self, case) -> bool:
        """Always."""
        return True

    def exercised_stages(self, case, output_stages: dict, error_stages: dict) -> set:
        """The rows' stages, and ``filters`` and ``draw``: the draws test the distribution sampled from."""
        return super().exercised_stages(case, output_stages, error_stages) | {"filters", "draw"}

    def evaluate(self, judge, case, impl, version: str):
        """Judge a statistical case (the module docstring)."""
        default32 = self.predict(judge, case, TRTLLM)
        default64 = self.predict(judge, case, TRTLLM, torch.float64)
        pred64 = self.predict(judge, case, impl.profile, torch.float64)
        epsilon = float(case.raw.get("epsilon", DEFAULT_EPSILON))
        rows, worst, errors, diffs, hand = [], [], [], [], []
        # each drawable row's probabilities and sample size, planned once (before any draw: the draw limit)
        plans = {}
        for b, p64b in zip(case.batches, pred64):
            for r, p64 in zip(b.rows, p64b):
                if not p64.error:
                    probs = p64.probs.to(torch.float64).cpu().numpy()
                    plans[id(r)] = (probs, plan_draws(probs, judge.alpha, epsilon, case.draws))
        limit = draw_limit(impl, judge.device)
        if limit is not None and plans:
            label, n = max(((where(b, r), plans[id(r)][1].n) for b in case.batches for r in b.rows if id(r) in plans),
                           key=lambda x: x[1])
            if n > limit[0]:
                return Result(case.id, impl.name, "n/a", case.check, details={"message": (
                    f"{label}: the check plans {n} draws; {impl.name} allows at most {limit[0]} per row on "
                    f"{judge.device}: {limit[1]}")})
        for b, d32b, d64b, p64b in zip(case.batches, default32, default64, pred64):
            for r, d32, d64, p64 in zip(b.rows, d32b, d64b, p64b):
                label = where(b, r)
                if r.expect:
                    bad = mismatches(observe(d32, expect_keys(r.expect)), r.expect, case.atol, case.rtol)
                    if bad:
                        hand.append(f"{label}: {', '.join(bad)}")
                if p64.error:
                    errors.append(f"{label}: the prediction is an error ({p64.error}); nothing to draw")
                    continue
                probs, plan = plans[id(r)]
                seeds = range(case.draw_seed, case.draw_seed + plan.n)
                tokenwise = token_for_token(impl.profile)
                try:
                    if tokenwise:
                        toks = judge.draw_tokens(impl, r.to_row(), seeds)
                        counts = np.bincount(toks, minlength=r.to_row().vocab)
                    else:
                        counts = judge.draw_counts(impl, r.to_row(), seeds)
                except RowError as e:
                    worst.append(f"{label}: rejected the row ({e.kind}: {e.message})")
                    continue
                if tokenwise:
                    same = _same_tokens(judge, impl.profile, r.to_row(), seeds, toks)
                    if same["mismatches"]:
                        worst.append(f"{label}: {same['mismatches']} of {same['compared']} seeded draws differ from "
                                     f"the reference's model of the engine's RNG (first: {same['first']})")
                res = check_draws(counts, probs, judge.alpha, FAMILY_ALPHA, plan)
                diff = mismatches(observe(p64, ["support", "probs"]), observe(d64, ["support", "probs"]), 1e-9, 1e-9)
                if diff:
                    diffs.append(label)
                rows.append({"row": label, **res.to_json(), "profile_differences": diff, "expected": r.expect,
                             **({"token_for_token": same} if tokenwise else {})})
                if res.verdict == "fail":
                    worst.append(f"{label}: {res.reason}")
                elif res.verdict == "error":
                    errors.append(f"{label}: {res.reason}")
        name = impl.profile.name
        ev = Evidence(details={"rows": rows, "profile": name, "alpha": judge.alpha, "family_alpha": FAMILY_ALPHA,
                               "epsilon": epsilon, "target_power": TARGET_POWER, "test": TEST})
        if hand:
            ev.broken_case = "; ".join(hand)
        ev.own = " | ".join(worst) or None
        ev.undecided = " | ".join(errors) or None
        ev.differs = bool(diffs)
        keys = [[["support", "probs"] for _ in b.rows] for b in case.batches]
        ev.explain = lambda: self.explain(judge, case, impl.profile, keys)
        ev.diff_message = lambda fields: (f"draws fit its profile {name!r}, whose distribution differs from the "
                                          f"default on {', '.join(diffs)}")
        ev.pass_message = "; ".join(f"{r['row']}: {r['reason']}" for r in rows)
        return verdict(judge, case, impl, version, ev)
