"""Speculative decoding (SEMANTICS §4): acceptance, residual draw, accounting, d2t.

Distributions are computed by hand from the rejection-sampling identity;
random draws use many seeds with a fixed first seed.
"""

import math

import numpy as np
import pytest
import torch
from scipy import stats

from impls.profiles import TRTLLM
from impls.reference import Reference
from impls.reference.scenario import RequestSpec, ScenarioSpec, replicate
from impls.reference.scripted import TableModel
from impls.reference.speculative import target_distribution

P = [0.4, 0.3, 0.2, 0.1]
Q = [0.1, 0.2, 0.3, 0.4]


def _ln(ps):
    return [[math.log(p) for p in ps]]


def _spec(fields, **kw):
    return ScenarioSpec(TableModel(_ln(P)), [RequestSpec("a", 0, fields, draft_len=2, **kw)],
                        draft_model=TableModel(_ln(Q)))


def test_emitted_first_token_follows_the_target_not_the_draft():
    spec = replicate(_spec({"prompt": [0], "temperature": 1.0, "max_new_tokens": 4}), "a", range(1000, 4000))
    out = Reference().run_scenario(spec).requests
    counts = np.bincount([out[f"a#{i}"].tokens[0] for i in range(3000)], minlength=4)
    # chi-square against p at 1e-4; against q the same counts must be rejected outright
    assert stats.chisquare(counts, np.array(P) * 3000).pvalue > 1e-4
    assert stats.chisquare(counts, np.array(Q) * 3000).pvalue < 1e-12
    # acceptance rate: P(accept d_1) = sum_t min(p, q) = 0.6
    acc = np.mean([out[f"a#{i}"].steps[0].accepted >= 1 for i in range(3000)])
    assert abs(acc - 0.6) < 4 * math.sqrt(0.24 / 3000)


def test_residual_support_excludes_tokens_where_q_exceeds_p():
    # On rejection of the first draft the token comes from max(0, p - q) = [0.3, 0.1, 0, 0] (normalised).
    spec = replicate(_spec({"prompt": [0], "temperature": 1.0, "max_new_tokens": 4}), "a", range(500))
    out = Reference().run_scenario(spec).requests
    rejected = [r for r in out.values() if r.steps[0].accepted == 0]
    assert rejected and all(r.tokens[0] in (0, 1) for r in rejected)
    assert all(len(r.steps[0].tokens) == 1 and r.steps[0].rewind == 2 for r in rejected)


def test_greedy_acceptance_and_accounting():
    model = TableModel([[0, 0, 3, 0], [3, 0, 0, 0], [0, 0, 0, 3], [0, 3, 0, 0]])
    spec = ScenarioSpec(model, [RequestSpec("a", 0, {"prompt": [1], "max_new_tokens": 10}, draft_len=3,
                                            drafts=[[2, 0, 1]])], max_steps=1)
    r = Reference().run_scenario(spec).requests["a"]
    s = r.steps[0]
    # argmax per position: 2, 0, 3; draft 1 at position 2 is rejected -> emits 2, 0 then the target's 3
    assert (s.accepted, s.rewind, s.tokens, s.offsets) == (2, 1, [2, 0, 3], [])
    assert r.tokens == [2, 0, 3] and r.finish_reason == "none"


def test_rejected_drafts_never_reach_the_counts():
    model = TableModel([[0, 1, 3, 0], [0, 2.5, 0, 2]])
    spec = ScenarioSpec(model, [RequestSpec("a", 0, {"prompt": [0], "repetition_penalty": 2.0, "max_new_tokens": 2},
                                            draft_len=2, drafts=[[1, 1], []])])
    r = Reference().run_scenario(spec).requests["a"]
    assert r.tokens == [2, 1]


def test_d2t_translates_greedy_drafts_and_is_rejected_with_sampling():
    target = TableModel([[0, 0, 3, 0, 0], [0, 0, 0, 3, 0], [0, 3, 0, 0, 0]])
    draft = TableModel([[3, 0, 0], [0, 3, 0]])
    spec = ScenarioSpec(target, [
        RequestSpec("g", 0, {"prompt": [4], "max_new_tokens": 3}, draft_len=2, d2t=[2, 2, -1]),
        RequestSpec("s", 1, {"prompt": [4], "temperature": 0.5, "max_new_tokens": 3}, draft_len=2, d2t=[2, 2, -1]),
    ], draft_model=draft)
    out = Reference().run_scenario(spec).requests
    assert out["g"].steps[0].drafts == [2, 3] and out["g"].tokens == [2, 3, 1]
    assert out["s"].error == "invalid_d2t" and "greedy" in out["s"].message


def test_target_distribution_is_the_processed_target_row():
    p = target_distribution(_spec({"prompt": [0], "temperature": 1.0}), "a", TRTLLM)
    assert p.dtype == torch.float64 and torch.allclose(p, torch.tensor(P, dtype=torch.float64), atol=1e-12)
    g = target_distribution(_spec({"prompt": [0]}), "a", TRTLLM)
    assert g.tolist() == [1.0, 0.0, 0.0, 0.0]
