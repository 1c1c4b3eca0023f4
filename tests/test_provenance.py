"""Stage provenance (harness/judge/provenance.py): which stages a case exercises, whose code decided a verdict."""

import pytest

from harness.corpus.load import load_case
from harness.judge import Judge
from harness.judge.compare import EXPECT_KEYS
from harness.judge.provenance import ERROR_STAGES, FEATURE_STAGES, OUTPUT_STAGES, exercised, provenance
from harness.kinds.scenario import EXPECT_KEYS as SCENARIO_KEYS
from impls.base import STAGES
from impls.params import ERRORS, FEATURES
from impls.profiles import TRTLLM
from impls.reference import Reference

import _doubles


def test_every_feature_output_and_error_has_a_stage():
    assert set(FEATURE_STAGES) == set(FEATURES)
    assert set(ERROR_STAGES) == set(ERRORS)
    assert set(EXPECT_KEYS) - {"error"} <= set(OUTPUT_STAGES)
    assert set(SCENARIO_KEYS) - {"error"} <= set(OUTPUT_STAGES)
    assert set(FEATURE_STAGES.values()) | set(OUTPUT_STAGES.values()) | set(ERROR_STAGES.values()) <= set(STAGES)


# A repetition penalty (stage penalties) on a greedy row whose RAW logprob is checked
# (stage logprobs); the token is always compared (stage draw). Features: repetition_penalty.
PENALTY = """
[[rows]]
logits = [1.0, 3.0, 2.0]
temperature = 0.0
repetition_penalty = 3.0
generated = [1]
[rows.expect]
token = 2
"""


def _case(tmp_path, body, features):
    p = _doubles.write_case(tmp_path, "penalties/x", _doubles.CASE_HEADER, body, features=features, check="exact",
                            source=_doubles.ONE_SOURCE)
    return load_case(p, tmp_path)


class Hybrid(Reference):
    """The reference, declaring the fused sampler's stages: its own filters and draw only."""

    stages = {"validation": "reference", "logit_bias": "reference", "penalties": "reference", "bans": "reference",
              "filters": "own", "draw": "own", "seeds": "reference", "logprobs": "reference", "finish": "reference"}

    def __init__(self):
        super().__init__(TRTLLM, name="hybrid")


def test_a_case_exercises_its_features_outputs_and_the_draw(tmp_path):
    case = _case(tmp_path, PENALTY, '["temperature", "repetition_penalty"]')
    # temperature -> filters; repetition_penalty -> penalties; the token -> draw
    assert exercised(case) == ["penalties", "filters", "draw"]
    # 3 / 3 = 1 < 2: token 2 under the penalty, as the case says
    res = Judge([], 1).evaluate(case, Hybrid(), "1")
    assert res.status == "pass"
    assert res.provenance == {"stages": {"penalties": "reference", "filters": "own", "draw": "own"},
                              "own_code": False, "borrowed": ["penalties"]}
    assert res.to_json()["provenance"]["borrowed"] == ["penalties"]
    mine = Judge([], 1).evaluate(case, Reference(TRTLLM), "2")
    assert mine.provenance["own_code"] is True


def test_checked_logprobs_and_errors_add_their_stages(tmp_path):
    body = PENALTY + "logprob = -0.5514447139320511\n"   # log(e^2 / (e + e + e^2)) = 1 - ln(2 + e), x = [1, 1, 2]
    body += """
[[rows]]
logits = [1.0, 2.0]
temperature = 1.0
top_p = 1.5
[rows.expect]
error = "invalid_top_p"
"""
    case = _case(tmp_path, body, '["temperature", "top_p", "repetition_penalty", "logprobs"]')
    assert exercised(case) == ["validation", "penalties", "filters", "draw", "logprobs"]


def test_only_verdicts_get_a_provenance(tmp_path):
    case = _case(tmp_path, PENALTY, '["temperature", "repetition_penalty"]')
    assert provenance(case, Hybrid(), "n/a") is None and provenance(case, Hybrid(), "error") is None
    assert provenance(case, Hybrid(), "fail")["own_code"] is False


def test_the_checked_logprob_holds_on_the_reference(tmp_path):
    body = PENALTY + "logprob = -0.5514447139320511\n"
    case = _case(tmp_path, body, '["temperature", "repetition_penalty", "logprobs"]')
    res = Judge([], 1).evaluate(case, Hybrid(), "1")
    assert res.status == "pass", res.details["message"]
    assert res.provenance["borrowed"] == ["penalties", "logprobs"]


class Noting(Reference):
    """The reference, whose sessions report that their results took ``penalties`` from the adapter."""

    def open_session(self, device="cpu"):
        s = super().open_session(device)
        s.stages_used = {"penalties": "adapter"}
        return s


def test_a_session_s_stages_used_override_the_declaration_for_that_case(tmp_path):
    case = _case(tmp_path, PENALTY, '["temperature", "repetition_penalty"]')
    judge = Judge([], 1)
    res = judge.evaluate(case, Noting(TRTLLM, name="noting"), "1")
    assert res.status == "pass"
    assert res.provenance == {"stages": {"penalties": "adapter", "filters": "own", "draw": "own"},
                              "own_code": False, "borrowed": ["penalties"]}
    # the note belongs to that case only: the next case on the same judge reads the declaration again
    assert judge.evaluate(case, Reference(TRTLLM), "1").provenance["own_code"] is True
