"""Logprobs, finish reasons and per-row errors of the reference, profile ``trtllm``.

SEMANTICS §1.7 (seed 000 § 概率输出的两种口径), §1.8 (seed 000 § 结束判定:
"Order matches handle_stop_criteria: END_ID, then LENGTH, then STOP_WORDS"),
§5 and DESIGN.md "Per-row errors". Float expectations are float64 ``math``
values compared with a 1e-6 relative tolerance (the reference works in float32).
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from _hand import NEG_INF, POS_INF, gumbel_by_hand, log_softmax64, row, softmax64, step
from impls.base import Row, RowError
from impls.profiles import TRTLLM, VLLM
from impls.reference import Reference
from impls.reference.finish import finish_reason
from impls.reference.logprobs import rank

approx = lambda v: pytest.approx(v, rel=1e-6, abs=1e-7)


def _hand(logits, keep, t, seed, offset=0):
    token, margin = gumbel_by_hand(logits, keep, t, seed, offset)
    assert margin > 1e-3
    return token


# ---- §1.7 RAW and PROCESSED logprobs ----------------------------------------------

def test_raw_logprob_is_taken_after_the_rewrites():
    """§1.7 (trtllm): RAW = log_softmax at T=1 of the logits after bias, penalties, bans.
    [1, 2, 0] + bias 1 on token 0 -> [2, 2, 0]; greedy picks 0 (tie, lowest id);
    RAW = 2 - log(2e^2 + 1)."""
    (r,) = step(row([1.0, 2.0, 0.0], logit_bias=[(0, 1.0)]))
    assert r.token == 0
    assert r.rewritten_logits.tolist() == [2.0, 2.0, 0.0]
    assert r.logprob == approx(2.0 - math.log(2 * math.exp(2.0) + 1.0))


def test_raw_logprob_before_processing_profile_variant():
    """§1.7 (vllm-style ``raw_logprobs_stage = "before_processing"``): the unrewritten
    logits: 1 - log(e + e^2 + 1)."""
    p = dataclasses.replace(TRTLLM, raw_logprobs_stage="before_processing")
    (r,) = step(row([1.0, 2.0, 0.0], logit_bias=[(0, 1.0)]), profile=p)
    assert r.token == 0
    assert r.logprob == approx(1.0 - math.log(math.e + math.exp(2.0) + 1.0))


def test_raw_logprob_excludes_banned_tokens():
    """§1.7: a banned token has RAW logprob -inf, so the others renormalise without it:
    [0, 1, 5] with bad word 2 -> RAW of token 1 is 1 - log(1 + e)."""
    (r,) = step(row([0.0, 1.0, 5.0], bad_words=[[2]], logprobs=2))
    assert r.token == 1
    assert r.logprob == approx(1.0 - math.log(1.0 + math.e))
    assert r.top_logprobs[0][0] == 1 and r.top_logprobs[1][0] == 0


def test_raw_is_at_temperature_one_and_processed_at_the_row_temperature():
    """§1.7: RAW ignores temperature; PROCESSED is log softmax(x / T) on the support.
    Logits [1, 0.9, 0.8, 0.7], T 0.5, seed 1 (by hand: token 2)."""
    z = [1.0, 0.9, 0.8, 0.7]
    tok = _hand(z, {0, 1, 2, 3}, 0.5, 1)
    assert tok == 2
    (r,) = step(row(z, temperature=0.5, seed=1))
    assert r.token == tok
    assert r.logprob == approx(log_softmax64(z)[tok])
    assert r.processed_logprob == approx(log_softmax64(z, 0.5)[tok])


def test_processed_logits_are_at_the_dynamic_temperature_the_draw_used():
    """§1.7 with §1.5a: a row with a dynamic temperature draws at T' (logits [2, 1, 0.5, -1], T 1, range 0.5:
    H / ln 4 = 0.7317369268, T' = 0.5 + 0.7317369268 = 1.231736927), so its processed logits are x / T', as its
    processed logprobs are log softmax(x / T')."""
    z = [2.0, 1.0, 0.5, -1.0]
    t = 1.231736927
    (r,) = step(row(z, temperature=1.0, dynatemp_range=0.5, seed=1, logprobs=-1, logprobs_mode="processed_logits"))
    assert r.vocab_logprobs.tolist() == approx([v / t for v in z])
    (r,) = step(row(z, temperature=1.0, dynatemp_range=0.5, seed=1, logprobs=-1, logprobs_mode="processed_logprobs"))
    assert r.vocab_logprobs.tolist() == approx(log_softmax64(z, t))


def test_processed_logprob_is_over_the_filtered_renormalised_distribution():
    """§1.7: PROCESSED = log of the distribution actually sampled from. The SEMANTICS
    example keeps {0, 1}: log(1/(1+e^-0.5)) or log(e^-0.5/(1+e^-0.5))."""
    xs = [2.0, 1.5, 1.0, 0.0, -1.0]
    for seed in range(4):
        (r,) = step(row(xs, min_p=0.3, top_p=0.8, seed=seed))
        assert r.token in (0, 1)
        expected = [-math.log(1 + math.exp(-0.5)), -0.5 - math.log(1 + math.exp(-0.5))][r.token]
        assert r.processed_logprob == approx(expected)
        assert r.logprob == approx(log_softmax64(xs)[r.token])


def test_greedy_processed_logprob_is_zero():
    """§1.7: greedy -> PROCESSED logprob 0 for the chosen token; RAW is still log softmax."""
    (r,) = step(row([0.0, 1.0, 3.0]))
    assert r.mode == "greedy" and r.token == 2
    assert r.processed_logprob == 0.0
    assert r.logprob == approx(3.0 - math.log(1.0 + math.e + math.exp(3.0)))


def test_top_logprobs_always_include_the_sampled_token():
    """§1.7: top-k logprobs always include the sampled token. [1, 1, 0, 0], seed 1 draws
    token 2 (by hand); top-1 is [(0, ..)] plus (2, ..); top-2 lists the tie 0, 1 by id."""
    w = [1.0, 1.0, 0.0, 0.0]
    assert _hand(w, {0, 1, 2, 3}, 1.0, 1) == 2
    lse = math.log(2 * math.e + 2)
    hi, lo = 1.0 - lse, -lse
    for k, ids in [(0, [2]), (1, [0, 2]), (2, [0, 1, 2]), (3, [0, 1, 2]), (4, [0, 1, 2, 3])]:
        (r,) = step(row(w, temperature=1.0, seed=1, logprobs=k))
        assert r.token == 2
        assert [t for t, _ in r.top_logprobs] == ids
        assert [lp for _, lp in r.top_logprobs] == approx([hi if t < 2 else lo for t in ids])


def test_no_top_logprobs_when_not_requested():
    (r,) = step(row([1.0, 0.0]))
    assert r.top_logprobs is None


def test_rank_strict_plus_one_with_ties():
    """§1.7: trtllm rank = 1 + number of tokens with a strictly greater logprob. Token 2
    of [1, 1, 0, 0] has rank 3 (its tie with token 3 does not count); vLLM's ">=" rule
    gives 4; a top token tied with another has rank 1."""
    (r,) = step(row([1.0, 1.0, 0.0, 0.0], temperature=1.0, seed=1))
    assert r.token == 2 and r.rank == 3
    p = dataclasses.replace(TRTLLM, rank_rule="greater_equal")
    (r,) = step(row([1.0, 1.0, 0.0, 0.0], temperature=1.0, seed=1), profile=p)
    assert r.token == 2 and r.rank == 4
    (r,) = step(row([1.0, 1.0, 0.0, 0.0]))
    assert r.token == 0 and r.rank == 1
    lp = torch.tensor([-1.0, -1.0, -2.0, -2.0, -3.0])
    assert [rank(lp, t, "strict_plus_one") for t in range(5)] == [1, 1, 3, 3, 5]
    assert [rank(lp, t, "greater_equal") for t in range(5)] == [2, 2, 4, 4, 5]


# ---- §1.8 finish reasons -----------------------------------------------------------

F = [0.0, 1.0, 2.0, 3.0]  # greedy -> token 3


@pytest.mark.parametrize("kw,expected", [
    (dict(end_id=3), "end_id"),
    (dict(end_id=1), "none"),
    (dict(), "none"),
    # EOS exactly at the length limit is END_ID
    (dict(end_id=3, generated=[0, 0], max_new_tokens=3), "end_id"),
    (dict(end_id=3, prompt=[0, 0], max_seq_len=3), "end_id"),
    # LENGTH: len(generated) after appending >= max_new_tokens
    (dict(end_id=1, generated=[0, 0], max_new_tokens=3), "length"),
    (dict(end_id=1, generated=[0], max_new_tokens=3), "none"),
    (dict(max_new_tokens=1), "length"),
    # END_ID > STOP_WORDS, LENGTH > STOP_WORDS
    (dict(end_id=3, stop_words=[[3]]), "end_id"),
    (dict(stop_words=[[3]], max_new_tokens=1), "length"),
    (dict(stop_words=[[3]]), "stop_words"),
    (dict(stop_words=[[2], [0, 3]]), "none"),
])
def test_finish_reason_precedence(kw, expected):
    """§1.8: END_ID if token == end_id; else LENGTH; else STOP_WORDS."""
    (r,) = step(row(F, **kw))
    assert r.token == 3
    assert r.finish_reason == expected


@pytest.mark.parametrize("prompt,generated,max_seq_len,expected", [
    ([0, 0, 0], [], 4, "length"),     # 3 prompt + 1 new = 4
    ([0, 0, 0], [], 5, "none"),
    ([0, 0, 0], [1], 5, "length"),
    ([], [1, 1, 1], 4, "length"),
])
def test_max_seq_len_counts_the_prompt(prompt, generated, max_seq_len, expected):
    """§1.8: LENGTH if len(prompt) + len(generated) >= max_seq_len."""
    (r,) = step(row(F, prompt=prompt, generated=generated, max_seq_len=max_seq_len))
    assert r.finish_reason == expected


@pytest.mark.parametrize("prompt,generated,stop,expected", [
    ([0, 2], [], [[2, 3]], "stop_words"),        # [2, 3] straddles the prompt boundary
    ([0], [2], [[2, 3]], "stop_words"),          # matched across steps
    ([1], [2], [[1, 2, 3]], "stop_words"),       # prefix [1, 2] split over prompt/generated
    ([2, 0], [], [[2, 3]], "none"),              # 2 occurs, but not right before the token
    ([0, 2], [], [[1, 2, 3], [3, 0]], "none"),   # no word is a suffix of [0, 2, 3]
])
def test_multi_token_stop_word_matches_over_prompt_and_generated(prompt, generated, stop, expected):
    """§1.8 (trtllm): stop words match over prompt + generated, so a match can straddle
    the prompt boundary; multi-token words match across steps."""
    (r,) = step(row(F, prompt=prompt, generated=generated, stop_words=stop))
    assert r.token == 3
    assert r.finish_reason == expected


def test_stop_word_not_straddling_when_profile_excludes_prompt():
    """§1.8 profile field ``stop_words_see_prompt = False``: only generated tokens."""
    p = dataclasses.replace(TRTLLM, stop_words_see_prompt=False)
    (r,) = step(row(F, prompt=[0, 2], stop_words=[[2, 3]]), profile=p)
    assert r.finish_reason == "none"
    (r,) = step(row(F, prompt=[0], generated=[2], stop_words=[[2, 3]]), profile=p)
    assert r.finish_reason == "stop_words"


def test_ignore_eos_never_finishes_with_end_id():
    """§1.8: END_ID only when not ignore_eos; the length limit still applies."""
    (r,) = step(row(F, end_id=3, ignore_eos=True))
    assert r.token == 3 and r.finish_reason == "none"
    (r,) = step(row(F, end_id=3, ignore_eos=True, max_new_tokens=1))
    assert r.finish_reason == "length"


def test_end_id_minus_one_never_matches_token_v_minus_1():
    (r,) = step(row(F, end_id=-1))
    assert r.token == 3 and r.finish_reason == "none"


@pytest.mark.parametrize("kw,expected", [
    (dict(end_id=(3,)), "end_id"),                         # a set of one is the single id
    (dict(end_id=(1, 3)), "end_id"),                       # any id of the set, not only the first
    (dict(end_id=(3, 1)), "end_id"),
    (dict(end_id=(-1, 3)), "end_id"),                      # -1 names no token
    (dict(end_id=(0, 1, 2)), "none"),
    (dict(end_id=(-1,)), "none"),
    (dict(end_id=(1, 3), ignore_eos=True), "none"),        # ignore_eos: no id of the set finishes
    (dict(end_id=(1, 3), ignore_eos=True, max_new_tokens=1), "length"),
    (dict(end_id=(1, 3), max_new_tokens=1), "end_id"),     # END_ID > LENGTH for every id
    (dict(end_id=(1, 3), stop_words=[[3]]), "end_id"),     # END_ID > STOP_WORDS
])
def test_eos_set_any_id_finishes(kw, expected):
    """§1.8: with an EOS set, sampling any id of it finishes the request as END_ID (default)."""
    (r,) = step(row(F, **kw))
    assert r.token == 3
    assert r.finish_reason == expected


@pytest.mark.parametrize("kw,expected", [
    (dict(end_id=(3, 1)), "end_id"),                       # the first id: vLLM's eos_token_id
    (dict(end_id=(1, 3)), "stop_words"),                   # a later id: one of vLLM's stop_token_ids
    (dict(end_id=(-1, 3)), "end_id"),                      # -1 dropped, 3 is the first id
    (dict(end_id=(1, 3), max_new_tokens=1), "stop_words"),  # vllm finish_order: stop words before length
    (dict(end_id=(1, 3), ignore_eos=True), "none"),        # ignore_eos: not added to stop_token_ids
    (dict(end_id=(1, 3), ignore_eos=True, max_new_tokens=1), "length"),
])
def test_eos_set_later_ids_finish_as_stop_words_under_vllm(kw, expected):
    """§1.8, profile field end_id_set_others_reason = "stop_words" (vLLM 0.32.0:
    update_from_generation_config moves the ids after eos_token_id into stop_token_ids, and
    check_stop reports them with stop_reason = the id). vLLM samples the row (temperature
    unset), so it is made greedy with temperature 0; finish_order is end_id, stop_words, length."""
    (r,) = step(row(F, temperature=0.0, **kw), profile=VLLM)
    assert r.token == 3
    assert r.finish_reason == expected


def test_finish_reason_reads_an_eos_set_from_the_row():
    """finish_reason itself (no session): the set (2, 4) under each profile rule, token by token."""
    r = Row(logits=torch.zeros(6), end_id=(2, 4))
    assert [finish_reason(r, t, TRTLLM) for t in range(6)] == ["none", "none", "end_id", "none", "end_id", "none"]
    assert [finish_reason(r, t, VLLM) for t in range(6)] == ["none", "none", "end_id", "none", "stop_words", "none"]


@pytest.mark.parametrize("end_id,bad,vllm_reason", [
    ((2, 4), 4, "none"),           # 3 is not in the set
    ((-2, 3), -2, "stop_words"),   # -2 (not -1) is kept as the first id, so 3 is a later id
    ((3, 2, 9), 9, "end_id"),      # 3 is the first id
])
def test_each_id_of_an_eos_set_is_validated(end_id, bad, vllm_reason):
    """§5: every id of an EOS set must be -1 or in [0, V) (V = 4), under the default profile;
    a profile that skips end_id_range (vllm) accepts the row, whose out-of-range ids name no
    token: greedy token 3 finishes only where 3 is in the set."""
    (r,) = step(row(F, end_id=end_id))
    assert r.error == "invalid_end_id"
    assert r.message == f"end_id={list(end_id)}: id {bad}: must be -1 (none) or in [0, 4)"
    (r,) = step(row(F, end_id=end_id, temperature=0.0), profile=VLLM)
    assert r.error is None and r.token == 3
    assert r.finish_reason == vllm_reason
    (r,) = step(row(F, end_id=(-1, 2, 3)))
    assert r.error is None and r.finish_reason == "end_id"


def test_finish_over_a_multi_step_decode():
    """§1.8 across steps: a greedy decode that appends its tokens stops on the stop word
    [2, 1] at step 3 (tokens 2, 2, 1 via a logit bias schedule)."""
    s = Reference().open_session()
    gen, reasons = [], []
    for bias_target in (2, 2, 1):
        (r,) = s.step([row([0.0, 0.0, 0.0], logit_bias=[(bias_target, 1.0)], generated=gen[:],
                           stop_words=[[2, 1]], max_new_tokens=10)])
        gen.append(r.token)
        reasons.append(r.finish_reason)
    assert gen == [2, 2, 1]
    assert reasons == ["none", "none", "stop_words"]


# ---- per-row errors never fail the batch (DESIGN.md, SEMANTICS §5) ------------------

def test_nan_logits_row_beside_a_good_row():
    rs = step(row([0.0, float("nan"), 1.0], temperature=1.0), row([0.0, 1.0, 3.0], slot=1))
    assert rs[0].error == "nan_logits" and rs[0].token is None and rs[0].finish_reason is None
    assert rs[1].error is None and rs[1].token == 2


def test_duplicate_slot_rejects_the_later_row_only():
    """A slot used twice in one step: the later row is rejected and takes no offset."""
    rs = step(row(F, temperature=1.0, slot=0), row(F, temperature=1.0, slot=0), row(F, temperature=1.0, slot=1))
    assert [r.error for r in rs] == [None, "duplicate_slot", None]
    assert rs[0].extra["offset"] == 1 << 62
    assert rs[2].extra["offset"] == (1 << 62) + 1


@pytest.mark.parametrize("bad,kind", [
    (row([0.0, POS_INF, 1.0], temperature=1.0), "posinf_logits"),
    (row([NEG_INF, NEG_INF], temperature=1.0), "no_valid_token"),
    (row([NEG_INF, NEG_INF]), "no_valid_token"),
    (row([0.0, 1.0], bad_words=[[0], [1]]), "no_valid_token"),
    (row([[0.0, 1.0]], temperature=1.0), "bad_logits"),
])
def test_bad_input_rows_are_per_row_errors(bad, kind):
    """§5: a clear per-request error, never a crash of the batch."""
    rs = step(bad, row([0.0, 1.0, 3.0], temperature=1.0, slot=1))
    assert rs[0].error == kind
    assert rs[1].error is None and rs[1].token in (0, 1, 2)


def test_greedy_row_with_plus_inf_takes_it():
    """A greedy row has a well-defined argmax even with +inf."""
    (r,) = step(row([0.0, POS_INF, 1.0]))
    assert r.token == 1


# ---- profile field posinf_logits (SEMANTICS §5) ------------------------------------

POSINF_ARGMAX = dataclasses.replace(TRTLLM, name="posinf-argmax", posinf_logits="argmax")


def test_default_profile_rejects_posinf_in_sampling_rows_with_or_without_filters():
    """trtllm: posinf_logits = "error"; the check is on the rewritten logits, so a +inf
    logit bias on a finite logit is rejected too ([0, 1, 2] + inf on id 2)."""
    assert TRTLLM.posinf_logits == "error"
    rs = step(row([0.0, POS_INF, 1.0], temperature=1.0, seed=1),
              row([0.0, POS_INF, 1.0], temperature=1.0, top_k=2, seed=2, slot=1),
              row([0.0, 1.0, 2.0], temperature=1.0, logit_bias=[(2, POS_INF)], slot=2))
    assert [r.error for r in rs] == ["posinf_logits"] * 3
    with pytest.raises(RowError, match="posinf_logits"):
        Reference().open_session().sample_many(row([0.0, POS_INF, 1.0], temperature=1.0), range(4))


@pytest.mark.parametrize("kw", [dict(temperature=1.0), dict(temperature=1.0, top_k=2), dict(temperature=0.5, top_p=0.3),
                                dict(temperature=1.7, min_p=0.9)])
def test_posinf_argmax_draws_the_posinf_token_with_probability_1_and_logprob_0(kw):
    """posinf_logits = "argmax": [0, +inf, 1] is the point mass on id 1, whatever the
    temperature and filters. RAW = PROCESSED = log 1 = 0 for id 1, -inf for ids 0 and 2;
    top-2 logprobs [(1, 0), (0, -inf)] (ties at -inf: lowest id first); rank 1 + 0 = 1.
    The seeded row is still a sampling row: it takes its slot's offset 0."""
    (r,) = step(row([0.0, POS_INF, 1.0], seed=9, logprobs=2, **kw), profile=POSINF_ARGMAX)
    assert (r.error, r.mode, r.token) == (None, "sampling", 1)
    assert r.probs.tolist() == [0.0, 1.0, 0.0]
    assert r.raw_logprobs.tolist() == [NEG_INF, 0.0, NEG_INF]
    assert (r.logprob, r.processed_logprob, r.rank) == (0.0, 0.0, 1)
    assert r.top_logprobs == [(1, 0.0), (0, NEG_INF)]
    assert (r.extra["seed"], r.extra["offset"]) == (9, 0)


def test_posinf_argmax_takes_the_lowest_of_several_posinf_ids_on_every_seed():
    """[+inf, 0, +inf]: id 0, the first +inf, holds all the mass; id 2 gets probability 0 and
    logprob -inf (not log 1/2), so the rank is 1. 64 draws from seeds 0..63: all id 0."""
    (r,) = step(row([POS_INF, 0.0, POS_INF], temperature=1.0, seed=5, logprobs=1), profile=POSINF_ARGMAX)
    assert (r.token, r.logprob, r.processed_logprob, r.rank) == (0, 0.0, 0.0, 1)
    assert r.probs.tolist() == [1.0, 0.0, 0.0]
    assert r.top_logprobs == [(0, 0.0)]
    counts = Reference(POSINF_ARGMAX).open_session().sample_many(row([POS_INF, 0.0, POS_INF], temperature=1.0),
                                                                 range(64))
    assert counts.tolist() == [64, 0, 0]


def test_posinf_argmax_applies_to_a_posinf_made_by_a_rewrite_and_leaves_the_batch_alone():
    """[0, 1, 2] + bias +inf on id 2 -> [0, 1, +inf]: token 2, logprob 0 (RAW after the
    rewrites under trtllm's stage). The neighbour row [0, 1, 3] with seed 7 in the same
    batch draws what it draws alone under the default profile (the +inf row does not
    disturb the batched draw)."""
    a, b = step(row([0.0, 1.0, 2.0], temperature=1.0, logit_bias=[(2, POS_INF)], seed=3),
                row([0.0, 1.0, 3.0], temperature=1.0, seed=7, slot=1), profile=POSINF_ARGMAX)
    assert (a.token, a.logprob, a.processed_logprob) == (2, 0.0, 0.0)
    assert a.rewritten_logits.tolist() == [0.0, 1.0, POS_INF]
    (alone,) = step(row([0.0, 1.0, 3.0], temperature=1.0, seed=7, slot=1))
    assert (b.token, b.probs.tolist()) == (alone.token, alone.probs.tolist())
    assert b.token == _hand([0.0, 1.0, 3.0], [0, 1, 2], 1.0, 7)


def test_vllm_profile_takes_posinf_with_raw_logprobs_before_processing():
    """vllm: posinf_logits = "argmax", RAW before processing. Sampling [0, +inf, 1] -> token 1,
    logprob 0, rank 1 (greater_equal: one token has logprob >= 0). Greedy (T = 0) [0, +inf, 1]:
    argmax 1, and its RAW logprob is the same point mass: 0, not NaN (under trtllm a greedy
    row keeps plain log_softmax, NaN)."""
    from impls.profiles import VLLM
    assert VLLM.posinf_logits == "argmax"
    s, g = step(row([0.0, POS_INF, 1.0], temperature=1.0, seed=1, logprobs=0),
                row([0.0, POS_INF, 1.0], temperature=0.0, logprobs=2, slot=1), profile=VLLM)
    assert (s.mode, s.token, s.logprob, s.processed_logprob, s.rank) == ("sampling", 1, 0.0, 0.0, 1)
    assert s.top_logprobs == [(1, 0.0)]
    assert (g.mode, g.token, g.logprob, g.rank) == ("greedy", 1, 0.0, 1)
    assert g.top_logprobs == [(1, 0.0), (0, NEG_INF)]
    (t,) = step(row([0.0, POS_INF, 1.0], top_k=1, logprobs=0))
    assert t.token == 1 and math.isnan(t.logprob)


def test_raw_logprobs_point_mass_rule():
    """raw_logprobs: "argmax" -> 0 at the first +inf, -inf elsewhere; "error" -> log_softmax
    (all NaN with +inf; [0, log 3] -> [-log 4, log 3 - log 4] without); unknown rule rejected."""
    from impls.reference.logprobs import posinf_point_mass, raw_logprobs
    x = torch.tensor([1.0, POS_INF, 2.0, POS_INF])
    assert raw_logprobs(x, "argmax").tolist() == [NEG_INF, 0.0, NEG_INF, NEG_INF]
    assert all(math.isnan(v) for v in raw_logprobs(x, "error").tolist())
    assert posinf_point_mass(x).tolist() == [False, True, False, False]
    y = torch.tensor([0.0, math.log(3.0)], dtype=torch.float64)
    for rule in ("error", "argmax"):
        assert raw_logprobs(y, rule).tolist() == approx([-math.log(4.0), math.log(3.0) - math.log(4.0)])
    with pytest.raises(ValueError, match="unknown posinf_logits"):
        raw_logprobs(x, "first")
    with pytest.raises(ValueError, match="no \\+inf"):
        posinf_point_mass(y)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_logits_are_upcast_to_float32_first(dtype):
    """SEMANTICS §1: bf16/fp16 logits are upcast to float32 before any rule; values
    exact in both dtypes give the float32 row's results."""
    vals = [1.0, 3.0, 2.0, -0.5]
    (lo,) = step(Row(logits=torch.tensor(vals, dtype=dtype), temperature=0.7, seed=1230, repetition_penalty=2.0,
                     prompt=[1]))
    (hi,) = step(row(vals, temperature=0.7, seed=1230, repetition_penalty=2.0, prompt=[1]))
    assert lo.rewritten_logits.dtype == torch.float32
    assert lo.rewritten_logits.tolist() == [1.0, 1.5, 2.0, -0.5]
    assert lo.token == hi.token and torch.equal(lo.probs, hi.probs)
