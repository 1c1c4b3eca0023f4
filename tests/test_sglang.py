"""The SGLang adapter (impls/sglang) against hand-checked values; skipped without SGLang (tox -e sglang).

Every expected number below is worked out in the comment beside it from SGLang 0.5.23's rules
(impls/profiles.py SGLANG, with the file each rule was read in).
"""

from __future__ import annotations

import math

import pytest
import torch

from impls.base import Row
from impls.processors import parse

sglang = pytest.importorskip("sglang", reason="SGLang is not installed (tox -e sglang)")


@pytest.fixture(scope="module")
def impl(sglang_impl):
    return sglang_impl


def _row(logits, slot=0, **kw):
    return Row(logits=torch.tensor(logits, dtype=torch.float32), slot=slot, request_id=f"r{slot}", **kw)


def test_penalties_count_output_tokens_only_additive_then_scaling(impl):
    # logits [1, 2, 0.5, -1, 0]; output [1, 1, 2]; prompt [0, 4] (SGLang's penalizers never see it).
    # additive first: t1 = 2 - (0.25 + 0.5 * 2) = 0.75, t2 = 0.5 - (0.25 + 0.5 * 1) = -0.25;
    # then repetition 1.25 on the output tokens: t1 0.75 / 1.25 = 0.6, t2 -0.25 * 1.25 = -0.3125.
    row = _row([1.0, 2.0, 0.5, -1.0, 0.0], prompt=[0, 4], generated=[1, 1, 2], temperature=0.7, top_k=3,
               frequency_penalty=0.5, presence_penalty=0.25, repetition_penalty=1.25)
    (r,) = impl.open_session().step([row])
    assert r.error is None
    assert torch.allclose(r.rewritten_logits, torch.tensor([1.0, 0.6, -0.3125, -1.0, 0.0]), atol=1e-6)
    # top_k 3 keeps t0, t1 and t4 (0.0 > -0.3125): ranks by the temperature-scaled softmax
    assert sorted(torch.nonzero(r.probs).flatten().tolist()) == [0, 1, 4]


def test_logprobs_are_taken_after_temperature(impl):
    # logits [0, -ln(3)/2] at T = 0.5: x / T = [0, -ln 3], softmax [3/4, 1/4]:
    # logprobs ln 0.75 = -0.2876820725, ln 0.25 = -1.3862943611 (at T = 1 they would be
    # log_softmax([0, -0.5493061443]) = [-0.4566, -1.0059]).
    row = _row([0.0, -math.log(3) / 2], temperature=0.5, logprobs=2)
    (r,) = impl.open_session().step([row])
    assert r.raw_logprobs.tolist() == pytest.approx([-0.2876820725, -1.3862943611], abs=1e-6)
    assert r.logprob == pytest.approx(r.raw_logprobs[r.token].item(), abs=1e-6)
    assert [t for t, _ in r.top_logprobs] == [0, 1]


def test_logprobs_minus_one_returns_every_tokens_logprob_by_id(impl):
    # logits [ln 8, ln 4, ln 2, 0], T = 0 (greedy), logprobs = -1: the request asks top_logprobs_num = V,
    # laid out by id: log_softmax = [ln 8/15, ln 4/15, ln 2/15, ln 1/15] = [-0.628608659, -1.321755840,
    # -2.014903021, -2.708050201]; no top_logprobs list (the whole vector is the answer).
    row = _row([math.log(8), math.log(4), math.log(2), 0.0], temperature=0.0, logprobs=-1)
    (r,) = impl.open_session().step([row])
    assert r.token == 0 and r.top_logprobs is None
    assert r.vocab_logprobs.tolist() == pytest.approx([-0.628608659, -1.321755840, -2.014903021, -2.708050201],
                                                      abs=1e-6)


def test_top_k_and_top_p_judged_on_one_distribution(impl):
    # probs [0.5, 0.3, 0.2], top_k 2, top_p 0.6. SGLang's torch path: one sort; top-k zeroes rank 2;
    # top-p zeroes a token whose mass sorted before it exceeds 0.6: exclusive sums 0, 0.5, 0.8 ->
    # t0, t1 stay. Kept {0, 1}, renormalised [0.625, 0.375]. (Top-p on the top-k survivors
    # [0.625, 0.375] would drop t1: 0.625 > 0.6.)
    row = _row([math.log(0.5), math.log(0.3), math.log(0.2)], temperature=1.0, top_k=2, top_p=0.6)
    (r,) = impl.open_session().step([row])
    assert r.mode == "sampling"
    assert r.probs.tolist() == pytest.approx([0.625, 0.375, 0.0], abs=1e-6)
    assert r.processed_logprob == pytest.approx(math.log(r.probs[r.token].item()), abs=1e-6)


def test_temperature_zero_is_greedy_and_overrides_top_k_zero(impl):
    # SamplingParams.__post_init__: 0 <= T < 1e-6 becomes T = 1, top_k = 1, so top_k 0 (rejected
    # otherwise) is valid here; argmax of [0, 3, 1, 3] is the first maximum, id 1.
    rows = [_row([0.0, 3.0, 1.0, 3.0], slot=0, temperature=0.0),
            _row([0.0, 3.0, 1.0, 3.0], slot=1, temperature=0.0, top_k=0)]
    a, b = impl.open_session().step(rows)
    assert (a.mode, a.token, b.mode, b.token) == ("greedy", 1, "greedy", 1)
    assert a.probs.tolist() == [0.0, 1.0, 0.0, 0.0]


@pytest.mark.parametrize("fields, kind", [
    ({"top_k": 0}, "invalid_top_k"),                      # top_k must be -1 or >= 1
    ({"top_p": 0.0}, "invalid_top_p"),                    # top_p in (0, 1]
    ({"repetition_penalty": 2.5}, "invalid_penalty"),     # repetition_penalty in (0, 2]
    ({"presence_penalty": -2.5}, "invalid_penalty"),      # presence_penalty in [-2, 2]
    ({"temperature": float("inf")}, "invalid_temperature"),  # finite and >= 0
    ({"seed": 1 << 63}, "invalid_seed"),                  # sampling_seed in [-2**63, 2**63 - 1]
    ({"min_length": 129}, "invalid_length"),              # min_new_tokens <= max_new_tokens (default 128)
    ({"logit_bias": [(7, 1.0)]}, "invalid_logit_bias"),   # keys in [0, V)
])
def test_validation_is_sglangs(impl, fields, kind):
    good = _row([0.0, 1.0, 2.0], slot=1, temperature=1.0)
    bad, ok = impl.open_session().step([_row([0.0, 1.0, 2.0], slot=0, **fields), good])
    assert bad.error == kind, bad.message
    assert ok.error is None   # one bad request never fails its neighbours


def test_min_length_bans_eos_and_stop_tokens(impl):
    # min_new_tokens 2 with one output token: the EOS id 1 and the stop token 2 are -inf.
    row = _row([0.0, 5.0, 4.0, 1.0], generated=[3], end_id=1, stop_words=[[2]], min_length=2, temperature=0.0)
    (r,) = impl.open_session().step([row])
    assert r.rewritten_logits.tolist() == [0.0, float("-inf"), float("-inf"), 1.0]
    assert r.token == 3


def test_finish_reasons_of_update_finish_state(impl):
    s = impl.open_session()
    end, stop, ign, length = s.step([
        _row([0.0, 5.0, 1.0], slot=0, end_id=1, temperature=0.0),                     # argmax 1 = EOS
        _row([0.0, 5.0, 1.0], slot=1, stop_words=[[1]], temperature=0.0),             # a stop token id
        _row([0.0, 5.0, 1.0], slot=2, stop_words=[[1]], ignore_eos=True, temperature=0.0),  # ignore_eos: none
        _row([0.0, 5.0, 1.0], slot=3, generated=[2, 2], max_new_tokens=3, temperature=0.0),  # 3rd output token
    ])
    assert [r.finish_reason for r in (end, stop, ign, length)] == ["end_id", "stop_words", "none", "length"]


def test_sessions_reproduce_and_seeds_are_not_read(impl):
    # No deterministic inference: sampling_seed is validated, never read. A session seeds torch's
    # generator as a server does at launch, so two sessions draw the same tokens, and changing the
    # seeds changes nothing.
    rows = [_row([0.0] * 64, slot=i, temperature=1.0, seed=i) for i in range(8)]
    a = [r.token for r in impl.open_session().step(rows)]
    b = [r.token for r in impl.open_session().step([r.replace(seed=1000 + r.slot) for r in rows])]
    assert a == b


def test_sample_many_counts_stay_in_the_kept_set(impl):
    row = _row([2.0, 1.0, 0.0, -1.0], temperature=1.0, top_k=2)
    counts = impl.open_session().sample_many(row, list(range(5000)), chunk=2048)
    assert int(counts.sum()) == 5000 and counts[2:].tolist() == [0, 0]
    # p(t0) = e / (e + 1) = 0.7310585786; 5000 draws: sd 31.3, so within 5 sd
    assert abs(int(counts[0]) - 5000 * 0.7310585786) < 5 * 31.4


def test_nan_row_fails_its_filtered_batch(impl):
    # finding sglang-non-finite-logits-fail-batch: torch.multinomial raises for the whole batch
    rows = [_row([float("nan"), 0.0, 1.0], slot=0, temperature=1.0),
            _row([0.0, 2.0, 1.0], slot=1, temperature=0.0)]
    a, b = impl.open_session().step(rows)
    assert a.error == b.error == "engine_error"
    assert "probability tensor" in b.message


def test_logprob_token_ids_are_token_ids_logprob_after_temperature(impl):
    # logits [ln 8, ln 4, ln 2, 0] at T = 0.5: x / T = ln [64, 16, 4, 1], sum 85. The request's
    # token_ids_logprob [3, 1] reads SGLang's logprobs (get_token_ids_logprobs) in the order asked:
    # [[3, ln 1/85], [1, ln 16/85]] = [[3, -4.442651256], [1, -1.670062534]]. Slot 1 asks an id
    # outside [0, 4): TokenizerManager._validate_token_ids_logprob rejects it (invalid_logprobs);
    # slot 2 asks nothing and gets no token_logprobs.
    x = [math.log(8), math.log(4), math.log(2), 0.0]
    a, b, c = impl.open_session().step([_row(x, slot=0, temperature=0.5, logprob_token_ids=[3, 1]),
                                        _row(x, slot=1, temperature=0.5, logprob_token_ids=[2, 4]),
                                        _row(x, slot=2, temperature=0.5, logprobs=1)])
    assert a.error is None and [t for t, _ in a.token_logprobs] == [3, 1]
    assert [v for _, v in a.token_logprobs] == pytest.approx([-4.442651256, -1.670062534], abs=1e-6)
    assert b.error == "invalid_logprobs", b.message
    assert c.error is None and c.token_logprobs is None
    assert c.top_logprobs[0] == (0, pytest.approx(-0.283768173, abs=1e-6))


def test_token_bitmask_between_penalties_and_logit_bias(impl):
    # V = 5, logits [0, 1, 2, 3, 4], one output token 3, presence 0.5, bitmask word 11 = 0b01011
    # (allowed {0, 1, 3}), logit_bias {1: +2, 2: +10}. SamplingBatchInfo.apply_logits_bias: penalties
    # (t3: 3 - 0.5 = 2.5), the grammar mask (t2, t4 -> -inf), then the bias (t1: 1 + 2 = 3; t2 stays
    # -inf): rewritten [0, 3, -inf, 2.5, -inf], greedy token 1. Slot 1, no grammar, in the same batch:
    # its row of the bitmask stays -1 (all allowed): token 4, logits unchanged.
    x = [0.0, 1.0, 2.0, 3.0, 4.0]
    a, b = impl.open_session().step([
        _row(x, slot=0, generated=[3], presence_penalty=0.5, token_bitmask=(11,), logit_bias=[(1, 2.0), (2, 10.0)],
             temperature=0.0),
        _row(x, slot=1, temperature=0.0)])
    assert a.error is None and a.token == 1
    assert a.rewritten_logits.tolist() == [0.0, 3.0, float("-inf"), 2.5, float("-inf")]
    assert (b.token, b.rewritten_logits.tolist()) == (4, x)
    # RAW logprobs are SGLang's, after the mask: log_softmax([0, 3, -inf, 2.5, -inf]);
    # sum e^0 + e^3 + e^2.5 = 1 + 20.0855369 + 12.1824940 = 33.2680309: t1 ln(20.0855369 / 33.2680309)
    assert a.logprob == pytest.approx(3.0 - math.log(1 + math.exp(3.0) + math.exp(2.5)), abs=1e-6)


def test_token_bitmask_word_order_and_sign_bit(impl):
    # V = 40, logits rising with the id: the greedy token is the largest allowed id. Word 0 =
    # -2**31 (0x80000000, bit 31: token 31 alone); [0, 255]: word 1 bits 0..7, tokens 32..39.
    x = [j / 10 for j in range(40)]
    a, b = impl.open_session().step([_row(x, slot=0, token_bitmask=(0x80000000, 0), temperature=0.0),
                                     _row(x, slot=1, token_bitmask=(0, 255), temperature=0.0)])
    assert (a.token, b.token) == (31, 39)
    assert torch.isfinite(a.rewritten_logits).nonzero().flatten().tolist() == [31]


def test_custom_processor_runs_after_penalties_with_the_requests_steps(impl):
    # Slot 0: logits [1, 3, 2.2, 0.5], output [1], repetition 2, processor bias {1: +1}, greedy. SGLang's
    # apply_custom_logit_processor runs after apply_logits_bias: 3 / 2 = 1.5, then + 1 = 2.5 > 2.2:
    # rewritten [1, 2.5, 2.2, 0.5], token 1. Slot 1: step_bias on token 0, 0.75 per step, output [2, 2]
    # (n = 2 read from the request's own output_ids): [0, 1, 1.2, -1] -> [1.5, 1, 1.2, -1], token 0.
    a, b = impl.open_session().step([
        _row([1.0, 3.0, 2.2, 0.5], slot=0, generated=[1], repetition_penalty=2.0, temperature=0.0,
             logits_processors=parse([{"kind": "bias", "bias": [[1, 1.0]]}])),
        _row([0.0, 1.0, 1.2, -1.0], slot=1, generated=[2, 2], temperature=0.0,
             logits_processors=parse([{"kind": "step_bias", "token": 0, "per_step": 0.75}]))])
    assert a.error is None and b.error is None, (a.message, b.message)
    assert (a.token, a.rewritten_logits.tolist()) == (1, pytest.approx([1.0, 2.5, 2.2, 0.5], abs=1e-6))
    assert (b.token, b.rewritten_logits.tolist()) == (0, pytest.approx([1.5, 1.0, 1.2, -1.0], abs=1e-6))
