"""vLLM 0.32.0's beam-search rules as the ``vllm`` profile encodes them (impls/reference/beam.py).

Every expected value is computed by hand in the comments: vLLM's score is
``cum / max(len(prompt + generated) - [last id is EOS], 1) ** length_penalty``
(entrypoints/generate/beam_search/utils.py@v0.32.0 ``get_beam_search_score``),
``length_penalty`` unset is 1.0 (``BeamSearchParams``), the search runs
``max_tokens`` steps and ranks the finished list with the running beams
(offline.py ``beam_search``), and every EOS among a beam's ``2W`` logprobs
joins the finished list (``_beam_search_step``).
"""

import dataclasses
import math

import pytest
import torch

from harness.corpus.load import CASES_DIR, load_case
from impls.profiles import TRTLLM, VLLM
from impls.reference import Reference
from impls.reference.beam import BeamSearch
from impls.reference.scenario import RequestSpec, ScenarioSpec
from impls.reference.scripted import TableModel


def _spec(cid):
    return load_case(CASES_DIR / f"{cid}.toml").scenario.spec


def test_score_counts_the_prompt_and_drops_a_final_eos():
    req = RequestSpec("a", 0, {"prompt": [2], "use_beam_search": True, "end_id": 3, "max_new_tokens": 4},
                      beam_width=2)
    bs = BeamSearch(req, TableModel([[0.0, 0.0, 0.0, 0.0]]), VLLM, torch.float32)
    assert bs.lp == 1.0  # length_penalty unset -> BeamSearchParams' 1.0
    assert bs.score([0, 3], -1.0) == pytest.approx(-1.0 / 2)  # [2, 0, 3]: 3 ids, final EOS dropped
    assert bs.score([0, 1], -1.0) == pytest.approx(-1.0 / 3)  # [2, 0, 1]: 3 ids
    assert bs.score([3], -1.0) == pytest.approx(-1.0)  # [2, 3]: 2 - 1 = 1
    assert bs.score([], -0.5) == pytest.approx(-0.5)  # [2]: 1 id
    trt = BeamSearch(req, TableModel([[0.0, 0.0, 0.0, 0.0]]), TRTLLM, torch.float32)
    assert trt.lp == 0.0 and trt.score([0, 3], -1.0) == -1.0  # trtllm: unset disables the normalisation
    eos_prompt = RequestSpec("b", 0, {"prompt": [3], "use_beam_search": True, "end_id": 3, "ignore_eos": True,
                                      "max_new_tokens": 4}, beam_width=2, length_penalty=2.0)
    bs2 = BeamSearch(eos_prompt, TableModel([[0.0, 0.0, 0.0, 0.0]]), VLLM, torch.float32)
    assert bs2.score([], -2.0) == pytest.approx(-2.0)  # [3]: max(1 - 1, 1) = 1
    assert bs2.score([0, 3], -9.0) == pytest.approx(-9.0 / 2 ** 2)  # ignore_eos: the final EOS still dropped


def test_length_penalty_case_scores_divide_by_the_whole_sequence():
    # prompt [2] * 5, W = 2, length_penalty 1, end_id 3. Step 0: ln Z0 = ln(e^2 + 2 e^-10 + e^1.5) = 2.474077,
    # [0] -0.474077; [3] (EOS) -0.974077 joins the finished list, score -0.974077 / (6 - 1) = -0.194815.
    # Step 1 (the last of max_tokens 2): ln Z1 = ln(e^0.5 + e^0.4 + 2 e^-10) = 1.144426: [0, 0] -1.118503,
    # [0, 1] -1.218503, both / 7: -0.159786, -0.174072, above the EOS beam's -0.194815 (float32 values below).
    res = Reference(VLLM).run_scenario(_spec("beam/length-penalty-frozen-slots-generated-only")).requests["a"]
    assert res.beams == [[0, 0], [0, 1]]
    assert res.cum_logprobs == pytest.approx([-1.118510, -1.218510], abs=1e-5)
    assert res.scores == pytest.approx([-1.118510 / 7, -1.218510 / 7], abs=1e-6)
    assert res.beam_finish_reasons == ["length", "length"]


def test_all_finished_case_runs_max_tokens_steps_and_ranks_the_finished_list():
    # prompt [2], W = 2, end_id 3, max_new_tokens 4, length_penalty unset (1.0). Finished: [3] -0.974083 / 1,
    # [0, 3] -0.474088 / 2 = -0.237044, [1, 3] -12.474088 / 2; the running beams (cum <= -13.47, 5 ids at the
    # end) and the later EOS beams score below -0.974083: output [[0, 3], [3]]. No early stop: 4 steps.
    res = Reference(VLLM).run_scenario(_spec("beam/eos-frozen-slots-all-finished")).requests["a"]
    assert res.beams == [[0, 3], [3]]
    assert res.cum_logprobs == pytest.approx([-0.474088, -0.974083], abs=1e-5)
    assert res.scores == pytest.approx([-0.237044, -0.974083], abs=1e-5)
    assert res.beam_finish_reasons == ["end_id", "end_id"]
    assert len(res.steps) == 4 and res.finish_step == 3


def _second_rank_eos_spec():
    # W = 1, V = 3, end_id 2, prompt [1], length_penalty 0 (score = cum), max_new_tokens 2.
    model = TableModel([[2.0, 0.0, 1.0], [0.0, 0.05, -0.05]])
    req = RequestSpec("a", 0, {"prompt": [1], "use_beam_search": True, "end_id": 2, "max_new_tokens": 2},
                      beam_width=1, length_penalty=0.0)
    return ScenarioSpec(model=model, requests=[req], max_beam_width=1)


def test_eos_outside_the_first_w_still_joins_vllms_finished_list():
    # Step 0: ln Z = ln(e^2 + 1 + e) = 2.407606: [0] -0.407606, [2] (EOS) -1.407606, [1] -2.407606. The EOS
    # ranks 1 >= W = 1, but it is among the beam's 2W = 2 logprobs: vLLM keeps it. Step 1: ln Z =
    # ln(1 + e^0.05 + e^-0.05) = 1.099446: [0, 1] -1.457052, [0, 0] -1.507052, [0, 2] -1.557052 (not in the
    # beam's top 2). Final ranking: [2] -1.407606 beats the running [0, 1] -1.457052.
    res = Reference(VLLM).run_scenario(_second_rank_eos_spec()).requests["a"]
    assert res.beams == [[2]]
    assert res.cum_logprobs == pytest.approx([-1.407606], abs=1e-5)
    assert res.scores == pytest.approx([-1.407606], abs=1e-5)
    assert res.beam_finish_reasons == ["end_id"]
    first_w = dataclasses.replace(VLLM, beam_pool_candidates="first_w")
    other = Reference(first_w).run_scenario(_second_rank_eos_spec()).requests["a"]
    assert other.beams == [[0, 1]] and other.cum_logprobs == pytest.approx([-1.457052], abs=1e-5)


def test_raw_logits_stage_ignores_temperature_and_rewrites():
    req = RequestSpec("a", 0, {"prompt": [1], "use_beam_search": True, "temperature": 2.0,
                               "repetition_penalty": 2.0, "max_new_tokens": 2}, beam_width=2)
    bs = BeamSearch(req, TableModel([[1.0, 2.0, 0.0]]), VLLM, torch.float32)
    lp = bs.logprobs(bs.beams[0])
    z = math.log(math.e + math.e ** 2 + 1.0)  # 2.407606: no temperature, token 1 not penalised
    assert lp.tolist() == pytest.approx([1.0 - z, 2.0 - z, -z], abs=1e-6)
