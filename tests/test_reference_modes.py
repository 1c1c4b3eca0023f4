"""Mode resolution and validation of the reference, profile ``trtllm``.

Every row of SEMANTICS §1.1 ("greedy inference rules"; seed 000 § 采样参数,
``params_imply_greedy_decoding`` / ``resolve_row_params``), top-p decay
(SEMANTICS §2, seed 000 § Top-P Decay), and every error kind that
``impls/reference/modes.py`` ``validate()`` raises.

Default logits ``[1, 3, 2, 0]``: argmax is token 1.
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from _hand import row, step, support
from impls.base import Row
from impls.profiles import HF, TRTLLM
from impls.reference.modes import BEAM, GREEDY, SAMPLING, Resolved, resolve

NAN = float("nan")
L = [1.0, 3.0, 2.0, 0.0]
ARGMAX = 1


def _resolve(**kw) -> Resolved:
    return resolve(row(L, **kw), TRTLLM)


# ---- §1.1 rule 1: beam is never greedy --------------------------------------

def test_rule1_beam_search_is_never_greedy_even_with_top_k_1():
    """§1.1 rule 1: use_beam_search -> BEAM, checked before the explicit greedy spellings."""
    assert _resolve(use_beam_search=True, top_k=1).mode == BEAM
    assert _resolve(use_beam_search=True, temperature=0.0).mode == BEAM
    (r,) = step(row(L, use_beam_search=True, top_k=1))
    assert r.mode == "beam" and r.token == ARGMAX


# ---- §1.1 rule 2: explicit greedy spellings ----------------------------------

EXPLICIT = {
    "top_k_1": dict(top_k=1, temperature=5.0, top_p=0.9, min_p=0.2),
    "top_p_0": dict(top_p=0.0, temperature=5.0, top_k=3),
    "min_p_1": dict(min_p=1.0, temperature=5.0, top_k=3, top_p=0.9),
    "temperature_0": dict(temperature=0.0, top_k=4, top_p=0.5, min_p=0.2),
    "temperature_0_int": dict(temperature=0, top_p=0.7),
    "min_p_1_alone": dict(min_p=1.0),   # not the min_p > 0 trap of rule 3
}


@pytest.mark.parametrize("name", sorted(EXPLICIT))
def test_rule2_explicit_greedy_spelling_wins_whatever_else_is_set(name):
    """§1.1 rule 2: top_k == 1, top_p == 0.0, min_p == 1.0 or temperature == 0 -> GREEDY."""
    kw = EXPLICIT[name]
    # Greedy rows carry the neutral values (seed 000: RowSamplingParams(GREEDY, 1.0, 0, 1.0, 0.0)).
    assert _resolve(**kw) == Resolved(GREEDY, 1.0, 0, 1.0, 0.0)
    (r,) = step(row(L, seed=3, **kw))
    assert r.error is None and r.mode == "greedy" and r.token == ARGMAX
    assert r.probs.tolist() == [0.0, 1.0, 0.0, 0.0]
    assert r.processed_logprob == 0.0


def test_rule2_greedy_rows_draw_nothing():
    """§1.1 rule 2 + §1.6: an explicit greedy row takes no Philox offset, so the
    unseeded row after it gets the first unseeded offset 2**62."""
    rs = step(row(L, top_k=1), row(L, temperature=1.0, slot=1))
    assert rs[0].mode == "greedy" and "offset" not in rs[0].extra
    assert rs[1].extra == {"seed": 42, "offset": 1 << 62}


@pytest.mark.parametrize("logits,expected", [
    ([1.0, 3.0, 3.0, 0.0], 1),
    ([float("-inf"), 2.0, 2.0], 1),
    ([5.0, 5.0, 5.0], 0),
])
def test_greedy_argmax_ties_go_to_the_lowest_id(logits, expected):
    """§1.2 step 4: GREEDY is argmax, ties -> lowest token id."""
    (r,) = step(row(logits))
    assert r.mode == "greedy" and r.token == expected


# ---- §1.1 rule 3: implicit greedy and its traps -------------------------------

@pytest.mark.parametrize("kw", [
    {},
    dict(min_p=0.0),               # min_p set but not > 0
    dict(top_p_decay=1.0),         # decay == 1.0 is a no-op, not active
    dict(top_p_decay=1.0, min_p=0.0),
    dict(seed=5, repetition_penalty=1.3, prompt=[0]),  # non-sampling fields do not matter
])
def test_rule3_implicit_greedy_when_temperature_top_p_top_k_unset(kw):
    """§1.1 rule 3: temperature, top_p, top_k all None -> GREEDY (TensorRT-LLM's default)."""
    assert _resolve(**kw).mode == GREEDY
    (r,) = step(row(L, **kw))
    assert r.mode == "greedy"


def test_rule3_min_p_trap_forces_sampling():
    """§1.1 rule 3: min_p > 0 overturns implicit greedy; rule 4 fills T=1, k=0, p=1.

    Kept set: softmax([1,3,2,0]) keeps ``p >= 0.3 * max p``, i.e.
    ``x >= 3 + ln 0.3 = 1.796``: tokens {1, 2}.
    """
    assert _resolve(min_p=0.3) == Resolved(SAMPLING, 1.0, 0, 1.0, 0.3)
    (r,) = step(row(L, min_p=0.3, seed=1))
    assert r.mode == "sampling" and support(r) == {1, 2}


def test_rule3_top_p_decay_trap_forces_sampling():
    """§1.1 rule 3: an active top-p decay (set and < 1) overturns implicit greedy;
    the initial top-p is 1.0 (§2: p0 is the resolved top_p)."""
    assert _resolve(top_p_decay=0.9) == Resolved(SAMPLING, 1.0, 0, 1.0, 0.0)
    (r,) = step(row(L, top_p_decay=0.9, seed=1))
    assert r.mode == "sampling" and support(r) == {0, 1, 2, 3}


def test_top_p_decay_first_token_uses_p0_exactly():
    """§2: "the first token uses p0, the request's resolved top_p"."""
    assert _resolve(top_p=0.9, top_p_decay=0.5) == Resolved(SAMPLING, 1.0, 0, 0.9, 0.0)


def test_rule3_top_p_decay_one_is_noop():
    """§1.1 rule 3: top_p_decay == 1.0 does not count as active."""
    assert _resolve(top_p_decay=1.0).mode == GREEDY
    assert _resolve(top_p_decay=0.999999).mode == SAMPLING


def test_rule3_top_k_zero_is_set_not_unset():
    """§1.1 rule 3 tests ``is None``: top_k=0 alone is a sampling request with no top-k."""
    assert _resolve(top_k=0) == Resolved(SAMPLING, 1.0, 0, 1.0, 0.0)


@pytest.mark.parametrize("kw,expected", [
    (dict(temperature=0.5), Resolved(SAMPLING, 0.5, 0, 1.0, 0.0)),
    (dict(top_p=0.9), Resolved(SAMPLING, 1.0, 0, 0.9, 0.0)),
    (dict(top_k=7), Resolved(SAMPLING, 1.0, 7, 1.0, 0.0)),
    (dict(top_k=7, min_p=0.0, top_p=1.0), Resolved(SAMPLING, 1.0, 7, 1.0, 0.0)),
    (dict(temperature=2.0, top_k=3, top_p=0.5, min_p=0.25), Resolved(SAMPLING, 2.0, 3, 0.5, 0.25)),
])
def test_rule4_sampling_values(kw, expected):
    """§1.1 rule 4: SAMPLING with ``temperature or 1.0``, ``top_k or 0``, ``top_p or 1.0``,
    ``min_p if min_p > 0 else 0.0``."""
    assert _resolve(**kw) == expected


# ---- §1.1 rule 5: validation, per request, before rules 1-4 -----------------------

V4 = 4  # vocabulary of L

ERRORS = [
    ("invalid_temperature", dict(temperature=-0.1)),
    ("invalid_temperature", dict(temperature=NAN)),
    ("invalid_top_p", dict(top_p=1.5)),
    ("invalid_top_p", dict(top_p=-0.1)),
    ("invalid_top_p", dict(top_p=NAN)),
    ("invalid_top_k", dict(top_k=-1)),
    ("invalid_top_k", dict(top_k=2.0)),
    ("invalid_min_p", dict(min_p=-0.1)),
    ("invalid_min_p", dict(min_p=1.1)),
    ("invalid_min_p", dict(min_p=NAN)),
    ("invalid_penalty", dict(repetition_penalty=0.0)),
    ("invalid_penalty", dict(repetition_penalty=-1.0)),
    ("invalid_penalty", dict(repetition_penalty=NAN)),
    ("invalid_penalty", dict(presence_penalty=NAN)),
    ("invalid_penalty", dict(frequency_penalty=NAN)),
    ("invalid_top_p_decay", dict(top_p_decay=0.0)),
    ("invalid_top_p_decay", dict(top_p_decay=1.5)),
    ("invalid_top_p_decay", dict(top_p_decay=NAN)),
    ("invalid_top_p_min", dict(top_p_decay=0.5, top_p_min=0.0)),
    ("invalid_top_p_min", dict(top_p_decay=0.5, top_p_min=1.5)),
    ("invalid_seed", dict(seed=1 << 64)),
    ("invalid_seed", dict(seed=-(1 << 63) - 1)),
    ("invalid_seed", dict(seed=float("inf"))),  # once an OverflowError that failed the batch
    ("invalid_seed", dict(seed=1.5)),           # once silently seed 1
    ("invalid_length", dict(min_length=-1)),
    ("invalid_length", dict(max_new_tokens=-1)),
    ("invalid_length", dict(max_seq_len=-1)),
    ("invalid_length", dict(no_repeat_ngram_size=-1)),
    ("invalid_end_id", dict(end_id=V4)),
    ("invalid_end_id", dict(end_id=-2)),
    ("invalid_bad_words", dict(bad_words=[[]])),
    ("invalid_bad_words", dict(bad_words=[[0, V4]])),
    ("invalid_bad_words", dict(bad_words=[[-1]])),
    ("invalid_stop_words", dict(stop_words=[[]])),
    ("invalid_stop_words", dict(stop_words=[[9]])),
    ("invalid_logit_bias", dict(logit_bias=[(V4, 1.0)])),
    ("invalid_logit_bias", dict(logit_bias=[(-1, 1.0)])),
    ("invalid_logit_bias", dict(logit_bias=[(0, NAN)])),
]


@pytest.mark.parametrize("kind,kw", ERRORS, ids=[f"{k}-{sorted(kw)[0]}-{i}" for i, (k, kw) in enumerate(ERRORS)])
def test_rule5_invalid_value_rejects_only_that_request(kind, kw):
    """§1.1 rule 5 / §5: a clear per-request error; the rest of the batch is sampled."""
    rs = step(row(L, **kw), row(L, slot=1))
    assert rs[0].error == kind and rs[0].token is None and rs[0].message
    assert rs[1].error is None and rs[1].token == ARGMAX


def test_rule5_top_p_decay_with_beam_search_is_rejected():
    """§2: top-p decay is rejected per request with beam search."""
    rs = step(row(L, use_beam_search=True, top_p_decay=0.5), row(L, slot=1))
    assert rs[0].error == "invalid_top_p_decay"
    assert rs[1].token == ARGMAX
    # decay == 1.0 is not active: nothing to reject
    (r,) = step(row(L, use_beam_search=True, top_p_decay=1.0))
    assert r.error is None and r.mode == "beam"


def test_rule5_history_out_of_range_error_under_a_strict_profile():
    """validate(): ``invalid_token_id`` when the profile says history_out_of_range = "error"
    (the trtllm default ignores such ids, §1.3)."""
    strict = dataclasses.replace(TRTLLM, history_out_of_range="error")
    rs = step(row(L, prompt=[0, 4]), row(L, generated=[-1], slot=1), row(L, prompt=[3], slot=2), profile=strict)
    assert [r.error for r in rs] == ["invalid_token_id", "invalid_token_id", None]
    (r,) = step(row(L, prompt=[0, 4]))
    assert r.error is None


def test_rule5_top_p_zero_invalid_when_profile_says_so():
    """validate(): ``top_p`` must be in ``(0, 1]`` under ``top_p_zero_valid = False``."""
    p = dataclasses.replace(TRTLLM, top_p_zero_valid=False)
    (r,) = step(row(L, top_p=0.0), profile=p)
    assert r.error == "invalid_top_p"
    (r,) = step(row(L, top_p=0.0))
    assert r.error is None and r.mode == "greedy"


def test_hf_temperature_zero_with_sampling_is_an_error():
    """resolve(): ``temperature_zero = "error"`` (hf) rejects T=0 on a sampling row,
    while do_sample=False stays greedy."""
    (r,) = step(row(L, do_sample=True, temperature=0.0), profile=HF)
    assert r.error == "invalid_temperature"
    (r,) = step(row(L, do_sample=False, temperature=0.0), profile=HF)
    assert r.mode == "greedy" and r.token == ARGMAX


@pytest.mark.parametrize("kind,kw", [
    ("invalid_top_p", dict(top_k=1, top_p=NAN)),
    ("invalid_top_p", dict(temperature=0.0, top_p=2.0)),
    ("invalid_temperature", dict(top_k=1, temperature=-1.0)),
    ("invalid_min_p", dict(temperature=0.0, min_p=NAN)),
    ("invalid_top_k", dict(top_p=0.0, top_k=-3)),
    ("invalid_top_p", dict(use_beam_search=True, top_p=NAN)),
    ("invalid_min_p", dict(min_p=1.5)),  # would otherwise be implicit greedy / min_p trap
])
def test_rule5_validation_comes_before_rules(kind, kw):
    """§1.1 rule 5: "a NaN top_p is an error even when top_k == 1"."""
    (r,) = step(row(L, **kw))
    assert r.error == kind


# ---- §1.1 rule 6: neutral sentinels --------------------------------------------

@pytest.mark.parametrize("kw", [
    dict(top_k=0), dict(top_k=V4), dict(top_k=V4 + 100), dict(top_p=1.0), dict(min_p=0.0),
    dict(top_k=0, top_p=1.0, min_p=0.0),
])
def test_rule6_neutral_sentinels_keep_all(kw):
    """§1.1 rule 6: top_k not in (0, V), top_p >= 1, min_p <= 0 keep every token; the
    distribution and the draw equal those of the unfiltered row."""
    logits = [0.5, -1.0, 2.0, 1.0]
    (plain,) = step(row(logits, temperature=0.8, seed=11))
    (r,) = step(row(logits, temperature=0.8, seed=11, **kw))
    assert support(r) == {0, 1, 2, 3}
    assert torch.equal(r.probs, plain.probs)
    assert r.token == plain.token


def test_rule6_top_k_just_below_vocab_filters():
    """§1.1 rule 6: top_k = V-1 is inside (0, V), so it does filter: {0, 1, 2} of [1,3,2,0]."""
    (r,) = step(row(L, top_k=V4 - 1, seed=2))
    assert support(r) == {0, 1, 2}


# ---- §2: top-p decay across steps -----------------------------------------------

# softmax([2, 1.5, 1, 0, -1]) = [0.46306, 0.28086, 0.17035, 0.06267, 0.02305];
# mass strictly above tokens 0..4: 0, 0.46306, 0.74393, 0.91428, 0.97695.
DECAY_LOGITS = [2.0, 1.5, 1.0, 0.0, -1.0]


@pytest.mark.parametrize("kw,generated,expected", [
    # p0 = 0.9 -> {0,1,2} (0.74393 < 0.9 <= 0.91428)
    (dict(top_p=0.9, top_p_decay=0.9), [], {0, 1, 2}),
    # one token: 0.81 -> {0,1,2}; two tokens: 0.729 -> {0,1} (0.46306 < 0.729 <= 0.74393)
    (dict(top_p=0.9, top_p_decay=0.9), [3], {0, 1, 2}),
    (dict(top_p=0.9, top_p_decay=0.9), [3, 3], {0, 1}),
    # reset id brings p back to p0 = 0.9
    (dict(top_p=0.9, top_p_decay=0.9, top_p_reset_ids=[4]), [3, 4], {0, 1, 2}),
    # reset then one more decay: 0.81
    (dict(top_p=0.9, top_p_decay=0.9, top_p_reset_ids=[4]), [3, 3, 4, 0], {0, 1, 2}),
    # floor: max(0.9 * 0.5, 0.7) = 0.7 -> {0,1}; without the floor 0.45 -> {0}
    (dict(top_p=0.9, top_p_decay=0.5, top_p_min=0.7), [3], {0, 1}),
    (dict(top_p=0.9, top_p_decay=0.5), [3], {0}),
    # unset top_p: p0 = 1.0, then 0.5 -> {0,1}
    (dict(top_p_decay=0.5), [], {0, 1, 2, 3, 4}),
    (dict(top_p_decay=0.5), [0], {0, 1}),
])
def test_top_p_decay_runtime_top_p(kw, generated, expected):
    """§2: ``p = p0 if token in reset_ids else max(p * decay, top_p_min)`` after each
    sampled token; the first token uses p0; top_p_min defaults to 1e-6."""
    (r,) = step(row(DECAY_LOGITS, seed=9, generated=generated, **kw))
    assert r.mode == "sampling"
    assert support(r) == expected


def test_api_values_the_case_schema_refuses_are_errors_of_their_row():
    """A row given through the API, not a case: a fractional ``penalty_last_n`` (``invalid_penalty``; it crashed
    the step with a TypeError), a ``logprobs`` count below -1 (``invalid_logprobs``; it was taken as 0) and an
    unknown ``logprobs_mode`` (``invalid_logprobs``; it raised for the whole batch) reject their row alone."""
    out = step(row([0.0, 1.0], repetition_penalty=1.5, penalty_last_n=2.5, generated=[1], slot=0),
               row([0.0, 1.0], logprobs=-2, slot=1), row([0.0, 1.0], logprobs_mode="bogus", slot=2),
               row([0.0, 1.0], temperature=0.0, slot=3))
    assert [o.error for o in out] == ["invalid_penalty", "invalid_logprobs", "invalid_logprobs", None]
    assert out[3].token == 1
