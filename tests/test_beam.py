"""Beam search with re-parenting (SEMANTICS §3): hand-computed counts, the mutation test, profiles.

The numbers below are derived by hand from the rule text (the same derivations
as the cases' ``notes``), never taken from the reference's output.
"""

from collections import Counter
from pathlib import Path

import pytest
import torch

import impls.reference.beam as beam_mod
from harness.corpus.load import CASES_DIR, load_case
from harness.judge.judge import Judge
from impls import registry
from impls.profiles import HF, TRTLLM
from impls.reference import Reference
from impls.reference.beam import BeamSearch
from impls.reference.scenario import RequestSpec
from impls.reference.scripted import TableModel

#: Cases whose hand-written expectations depend on penalty counts following the predecessor beam.
REPARENT_CASES = ("beam/reparent-repetition-follows-predecessor", "beam/reparent-frequency-after-swap")


def _case(cid):
    return load_case(CASES_DIR / f"{cid}.toml")


def _reparent_search():
    model = TableModel([[3.0, 2.9, 2.8, -20.0], [4.0, 0.0, 0.0, -20.0], [0.0, 3.0, 3.2, -20.0]])
    req = RequestSpec("a", 0, {"prompt": [3], "use_beam_search": True, "repetition_penalty": 2.0,
                               "max_new_tokens": 3}, beam_width=3)
    return BeamSearch(req, model, TRTLLM, torch.float32)


def test_penalty_counts_after_reorder_match_hand_computation():
    bs = _reparent_search()
    r0 = bs.step(0)
    assert r0.predecessors == [0, 0, 0] and r0.tokens == [0, 1, 2]
    assert [b.counts for b in bs.beams] == [Counter({0: 1}), Counter({1: 1}), Counter({2: 1})]
    r1 = bs.step(1)
    # by hand: (1,0) -1.137919, (2,0) -1.237919, (0,0) -1.241488 -> beam 2 continues beam 0
    assert r1.predecessors == [1, 2, 0] and r1.tokens == [0, 0, 0]
    assert [b.counts for b in bs.beams] == [Counter({1: 1, 0: 1}), Counter({2: 1, 0: 1}), Counter({0: 2})]
    assert [b.tokens for b in bs.beams] == [[1, 0], [2, 0], [0, 0]]
    assert r1.cum_logprobs == pytest.approx([-1.137919, -1.237919, -1.241488], abs=1e-5)
    # the step-2 logprobs of beam 2 use its own counts {0: 2}: [0, 3, 3.2] stays unpenalised
    lp = bs.logprobs(bs.beams[2])
    assert float(lp[2]) == pytest.approx(3.2 - 3.820304, abs=1e-5)
    lp0 = bs.logprobs(bs.beams[0])  # counts {1, 0}: token 1 halved
    assert float(lp0[2]) == pytest.approx(3.2 - 3.401671, abs=1e-5)


def test_inherit_counts_returns_a_copy():
    bs = _reparent_search()
    bs.step(0)
    c = beam_mod.inherit_counts(bs.beams, 1, 0)
    c[3] += 5
    assert bs.beams[1].counts == Counter({1: 1})


def _same_index_counts(beams, predecessor, index):
    # The planted bug: counts from the beam that held the same slot, not from the predecessor.
    return Counter(beams[index].counts if index < len(beams) else beams[predecessor].counts)


def test_mutation_reparenting_bug_makes_named_cases_fail(monkeypatch):
    ref = registry.create("reference")
    before = {cid: Judge([], 1).evaluate(_case(cid), ref, "x").status for cid in REPARENT_CASES}
    assert before == {cid: "pass" for cid in REPARENT_CASES}
    monkeypatch.setattr(beam_mod, "inherit_counts", _same_index_counts)
    for cid in REPARENT_CASES:
        res = Judge([], 1).evaluate(_case(cid), ref, "x")
        # the mutated reference contradicts the case's hand-written truth: a broken case for everyone
        assert res.status == "error", (cid, res.details.get("message"))
        assert res.details["message"].startswith("case disagrees with the reference: ")
    # the mutation is specific: a beam case without penalties still passes
    assert Judge([], 1).evaluate(_case("beam/no-repeat-ngram-per-beam"), ref, "x").status == "pass"


def test_golden_record_keeps_predecessor_map_per_step():
    case = _case("beam/reparent-repetition-follows-predecessor")
    rec = case.kind.golden_record(Judge([], 1), case, "trtllm")
    assert rec["scenario"]["a"]["predecessors"] == [[0, 0, 0], [1, 2, 0], [0, 1, 2]]
    assert rec["scenario"]["a"]["beam_tokens"] == [[0, 1, 2], [0, 0, 0], [2, 1, 2]]


def test_frozen_slot_vs_finished_pool():
    # TensorRT-LLM (early_stopping=True): the EOS beam stays in its slot, frozen; Hugging Face moves it to its
    # pool of finished hypotheses and keeps two running beams.
    case = _case("beam/eos-frozen-slot-evicted")
    req, model = case.scenario.spec.requests[0], case.scenario.spec.model
    trt, hf = BeamSearch(req, model, TRTLLM, torch.float32), BeamSearch(req, model, HF, torch.float32)
    trt.step(0)
    hf.step(0)
    assert [b.tokens for b in trt.beams] == [[0], [3]] and trt.beams[1].finish == "end_id" and not trt.pool
    assert [b.tokens for b in hf.beams] == [[0], [1]] and [h.tokens for h in hf.pool] == [[3]]
    # by hand: ln-softmax of [2, -10, -10, 0] at position 0; Hugging Face scores cum / 1 ** 1
    assert hf.pool[0].score == pytest.approx(-2.126939, abs=1e-5)


def test_hf_profile_ignores_temperature_in_beam_search():
    spec = _case("beam/temperature-before-log-softmax").scenario.spec
    trt = Reference().run_scenario(spec).requests["a"]
    hf = Reference(HF).run_scenario(spec).requests["a"]
    assert trt.beams == [[0, 0], [0, 1]]
    # temperature ignored: the T = 1 answer of the case's notes, (0,0) then (1,0)
    assert hf.beams == [[0, 0], [1, 0]]
    assert hf.cum_logprobs == pytest.approx([-0.531174, -2.155558], abs=1e-5)


def test_beam_failure_fails_that_request_only():
    model = TableModel([[0.0, float("nan"), 0.0], [1.0, 0.0, 0.0]])
    from impls.reference.scenario import ScenarioSpec
    spec = ScenarioSpec(model, [
        RequestSpec("b", 0, {"prompt": [0], "use_beam_search": True, "max_new_tokens": 2}, beam_width=2),
        RequestSpec("g", 1, {"prompt": [0], "max_new_tokens": 1}, model=TableModel([[0.0, 1.0, 0.0]])),
    ])
    out = Reference().run_scenario(spec).requests
    assert out["b"].error == "nan_logits" and out["b"].error_step == 0
    assert out["g"].tokens == [1]
