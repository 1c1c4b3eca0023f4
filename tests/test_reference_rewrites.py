"""Logits rewrites of the reference, profile ``trtllm``: bias, penalties, bans.

SEMANTICS §1.2 (order), §1.3 (penalty sign handling), §1.4 (bans); seed 000
§ 三处 logits 改写,顺序不能错 and § 罚项 (``occurrence_penalized_logits``).

Every expected value is exact float32 arithmetic chosen to be representable
(``-2 * 2 = -4``, ``3 / 2 = 1.5``) or computed independently with NumPy
float32 scalars.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from _hand import NEG_INF, POS_INF, row, step
from impls.base import RowError
from impls.profiles import HF, TRTLLM, VLLM
from impls.reference import bans, rewrites
from impls.reference import rewrite_logits

F32_MAX = float(np.finfo(np.float32).max)


def rewritten(logits, **kw) -> list:
    """The rewritten logits of one row (module-level :func:`rewrite_logits`)."""
    r = row(logits, **kw)
    return rewrite_logits(r.logits, r, TRTLLM).tolist()


# ---- §1.2 step 1: logit (embedding) bias ---------------------------------------

def test_logit_bias_adds_and_repeated_ids_add_up():
    """§1.2.1: sparse additive bias; a repeated id adds twice."""
    assert rewritten([1.0, 2.0, 3.0, 4.0], logit_bias=[(0, 0.5), (2, -1.0), (0, 0.25)]) == [1.75, 2.0, 2.0, 4.0]


def test_logit_bias_minus_inf_bans_the_token():
    """§1.2.1: the bias may write -inf; greedy then takes the next best."""
    assert rewritten([1.0, 2.0, 3.0, 4.0], logit_bias=[(3, NEG_INF)]) == [1.0, 2.0, 3.0, NEG_INF]
    (r,) = step(row([1.0, 2.0, 3.0, 4.0], logit_bias=[(3, NEG_INF)]))
    assert r.token == 2


def test_penalties_leave_a_bias_minus_inf_at_minus_inf():
    """§1.2: "penalties must see a -inf written by the bias and leave it -inf"."""
    out = rewritten([1.0, 2.0, 3.0, 4.0], logit_bias=[(3, NEG_INF)], prompt=[3, 3, 1],
                    repetition_penalty=0.5, presence_penalty=-5.0, frequency_penalty=-1.0)
    # token 1: 2 / 0.5 = 4, then - (-5 + -1 * 1) = 10
    assert out == [1.0, 10.0, 3.0, NEG_INF]


def test_plus_inf_bias_on_minus_inf_logit_is_a_nan_row_error():
    """§5: -inf + inf = NaN is a per-request error, never a silent token."""
    rs = step(row([NEG_INF, 1.0], logit_bias=[(0, POS_INF)]), row([0.0, 1.0], slot=1))
    assert rs[0].error == "nan_logits"
    assert rs[1].token == 1


# ---- §1.3: repetition penalty, sign rule ------------------------------------------

def test_repetition_sign_rule_r_greater_than_one_lowers_every_seen_logit():
    """§1.3: ``x < 0 ? x * r : x / r``: negative -2 -> -4 (not -1), zero stays 0, 3 -> 1.5;
    the unseen token 3 is untouched."""
    assert rewritten([-2.0, 0.0, 3.0, 1.0], prompt=[0, 1, 2], repetition_penalty=2.0) == [-4.0, 0.0, 1.5, 1.0]


def test_repetition_sign_rule_r_below_one_raises_every_seen_logit():
    """§1.3: with r = 0.5, -2 -> -1 and 3 -> 6."""
    assert rewritten([-2.0, 0.0, 3.0, 1.0], generated=[0, 1, 2], repetition_penalty=0.5) == [-1.0, 0.0, 6.0, 1.0]


def test_repetition_applies_once_per_distinct_token_over_prompt_and_generated():
    """§1.3: repetition is membership (seen), not a count: [2,2,2] divides once."""
    assert rewritten([4.0, 4.0, 4.0], prompt=[2, 2], generated=[2, 0], repetition_penalty=2.0) == [2.0, 4.0, 2.0]


def test_repetition_passes_infinities_through():
    """§1.3: a non-finite input logit (-inf from a ban or bias, +inf) passes unchanged."""
    assert rewritten([NEG_INF, POS_INF, 1.0], prompt=[0, 1, 2], repetition_penalty=2.0) == [NEG_INF, POS_INF, 0.5]
    assert rewritten([NEG_INF, POS_INF, 1.0], prompt=[0, 1, 2], repetition_penalty=0.5) == [NEG_INF, POS_INF, 2.0]


def test_presence_frequency_pass_infinities_through():
    """§1.3: -inf - a stays -inf, +inf - a stays +inf (no clamp to ±max)."""
    out = rewritten([NEG_INF, POS_INF, 1.0], prompt=[0, 1, 2], presence_penalty=1.0, frequency_penalty=1.0)
    assert out == [NEG_INF, POS_INF, -1.0]
    out = rewritten([NEG_INF, POS_INF, 1.0], prompt=[0, 1, 2], presence_penalty=-1.0)
    assert out == [NEG_INF, POS_INF, 2.0]


def test_repetition_result_is_clamped_to_float32_max():
    """§1.3: the penalised result is clamped to ±finfo(float32).max (x / 0.5 of 3e38
    overflows to inf; -3e38 * 2 overflows to -inf)."""
    big = float(np.float32(3e38))
    assert rewritten([big, -big, 0.0], prompt=[0, 1, 2], repetition_penalty=0.5) == [
        F32_MAX, float(np.float32(-big) * np.float32(0.5)), 0.0]
    assert rewritten([big, -big, 0.0], prompt=[0, 1, 2], repetition_penalty=2.0) == [
        float(np.float32(big) / np.float32(2.0)), -F32_MAX, 0.0]


def test_presence_result_is_clamped_to_float32_max():
    """§1.3: ``x - a`` overflowing float32 is clamped, not ±inf."""
    big = float(np.float32(3e38))
    a = float(np.float32(1e38))
    assert rewritten([big, -big], prompt=[0, 1], presence_penalty=-a) == [F32_MAX, float(np.float32(-big) + np.float32(a))]
    assert rewritten([big, -big], prompt=[0, 1], presence_penalty=a) == [float(np.float32(big) - np.float32(a)), -F32_MAX]


# ---- §1.3: presence / frequency counts ------------------------------------------

def test_presence_frequency_counts_include_prompt_tokens():
    """§1.3 (trtllm): ``x -= a + f * count`` over prompt + generated, where count > 0.
    counts: 1 -> 2 (prompt), 2 -> 2 (prompt + generated), 3 -> 1 (generated)."""
    out = rewritten([0.0] * 5, prompt=[1, 1, 2], generated=[2, 3], presence_penalty=0.5, frequency_penalty=0.25)
    assert out == [0.0, -1.0, -1.0, -0.75, 0.0]


def test_prompt_ignore_length_excludes_prefix_from_presence_but_not_from_repetition():
    """§1.3: counted = prompt[prompt_ignore_length:] + generated; the ignored prefix is
    still *seen* for repetition.

    prompt [1, 2, 3], ignore 2, generated [3]: repetition divides 1, 2, 3 by 2 (4 -> 2);
    presence/frequency only on 3 (count 2): 2 - (1 + 0.5 * 2) = 0.
    """
    out = rewritten([4.0] * 5, prompt=[1, 2, 3], generated=[3], prompt_ignore_length=2,
                    repetition_penalty=2.0, presence_penalty=1.0, frequency_penalty=0.5)
    assert out == [4.0, 2.0, 2.0, 0.0, 4.0]


@pytest.mark.parametrize("ignore", [None, 0, -1, -5])
def test_prompt_ignore_length_zero_negative_or_unset_has_no_effect(ignore):
    """§1.3: ``prompt_ignore_length <= 0`` has no effect (a negative value is not an error)."""
    out = rewritten([0.0] * 3, prompt=[1, 2], generated=[2], prompt_ignore_length=ignore,
                    presence_penalty=1.0, frequency_penalty=1.0)
    assert out == [0.0, -2.0, -3.0]


def test_prompt_ignore_length_longer_than_prompt_counts_only_generated():
    out = rewritten([0.0] * 3, prompt=[1, 2], generated=[2], prompt_ignore_length=10, presence_penalty=1.0)
    assert out == [0.0, 0.0, -1.0]


def test_out_of_range_history_ids_are_ignored():
    """§1.3: token ids outside [0, V) in the history are ignored (V = 4 here: 4 and 7
    and -1 touch nothing, and the row is not rejected)."""
    kw = dict(prompt=[-1, 4, 7, 1], generated=[4], repetition_penalty=2.0, presence_penalty=1.0)
    assert rewritten([2.0, 2.0, 2.0, 2.0], **kw) == [2.0, 0.0, 2.0, 2.0]
    (r,) = step(row([2.0, 2.0, 2.0, 3.0], **kw))
    assert r.error is None and r.token == 3


def test_repetition_comes_before_presence_frequency():
    """§1.3: repetition first, then presence/frequency.
    [-1, 2] with r=2, a=1: repetition gives [-2, 1], then [-3, 0]. (The other order
    would give [-4, 0.5].)"""
    assert rewritten([-1.0, 2.0], prompt=[0, 1], repetition_penalty=2.0, presence_penalty=1.0) == [-3.0, 0.0]


def test_neutral_penalties_change_nothing():
    """§1.3: a penalty is active iff r != 1 or a != 0 or f != 0."""
    x = [-1.5, 0.0, 2.25]
    assert rewritten(x, prompt=[0, 1, 2], repetition_penalty=1.0, presence_penalty=0.0, frequency_penalty=0.0) == x


# ---- §1.4: bans --------------------------------------------------------------------

def test_min_length_bans_end_id_counting_generated_tokens_only():
    """§1.4: ban the end id while len(generated) < min_length; a long prompt does not count."""
    logits = [0.0, 1.0, 2.0]  # end id 2 is the argmax
    kw = dict(end_id=2, min_length=2, prompt=[0] * 10)
    assert rewritten(logits, generated=[1], **kw) == [0.0, 1.0, NEG_INF]
    assert rewritten(logits, generated=[1, 1], **kw) == logits
    (r,) = step(row(logits, generated=[1], **kw))
    assert r.token == 1


def test_min_length_with_ignore_eos_still_bans_the_original_end_id():
    """§1.4: with ignore_eos the original end id is still banned."""
    assert rewritten([0.0, 1.0, 2.0], end_id=2, min_length=1, ignore_eos=True) == [0.0, 1.0, NEG_INF]


@pytest.mark.parametrize("end_id", [-1, None])
def test_end_id_none_or_minus_one_bans_nothing(end_id):
    """§1.4: an end id of -1/None bans nothing (a bug once banned token V-1)."""
    logits = [0.0, 1.0, 2.0]
    assert rewritten(logits, end_id=end_id, min_length=5) == logits
    (r,) = step(row(logits, end_id=end_id, min_length=5))
    assert r.token == 2


def test_min_length_bans_every_id_of_an_eos_set():
    """§1.4: an EOS set is banned whole while len(generated) < min_length, in any order; -1
    and ids outside [0, V) name no token and ban nothing. logits [0, 1, 3, 2, 2.5]: with 2 and
    4 banned the argmax is 3 (2.0); once 3 tokens exist nothing is banned and 2 (3.0) wins."""
    logits = [0.0, 1.0, 3.0, 2.0, 2.5]
    both = [0.0, 1.0, NEG_INF, 2.0, NEG_INF]
    assert rewritten(logits, end_id=(2, 4), min_length=3, generated=[1]) == both
    assert rewritten(logits, end_id=(4, -1, 2), min_length=3, generated=[1]) == both
    assert rewritten(logits, end_id=(2, 4), min_length=3, generated=[1, 1, 1]) == logits
    # ids 5 and 7 lie outside V = 5 (possible only where the profile skips end_id_range)
    assert rewritten(logits, end_id=(5, 4, 7), min_length=3, generated=[]) == [0.0, 1.0, 3.0, 2.0, NEG_INF]
    (r,) = step(row(logits, end_id=(2, 4), min_length=3, generated=[1]))
    assert r.token == 3 and r.finish_reason == "none"


def test_min_length_with_ignore_eos_still_bans_every_id_of_the_set():
    """§1.4: with ignore_eos the whole EOS set is still banned (vLLM: all_stop_token_ids
    holds every generation-config EOS id whether or not ignore_eos)."""
    logits = [0.0, 1.0, 3.0, 2.0, 2.5]
    assert rewritten(logits, end_id=(2, 4), min_length=1, ignore_eos=True) == [0.0, 1.0, NEG_INF, 2.0, NEG_INF]
    for p in (TRTLLM, VLLM, HF):
        r = row(logits, end_id=(2, 4), min_length=1, ignore_eos=True)
        assert bans.min_length_bans(r, p) == [2, 4], p.name


def test_min_length_ban_of_a_set_under_vllm_adds_one_token_stop_words():
    """vLLM's MinTokens bans all_stop_token_ids: the EOS set and the one-token stop words
    (profile field min_length_bans_stop_words); the set keeps its order, stop words follow."""
    r = row([0.0] * 6, end_id=(4, 2), min_length=2, stop_words=[[5], [0, 1]])
    assert bans.min_length_bans(r, VLLM) == [4, 2, 5]
    assert bans.min_length_bans(r, TRTLLM) == [4, 2]


def test_hf_drops_a_one_token_bad_word_equal_to_any_id_of_the_eos_set():
    """§1.4, profile field bad_words_skip_end_id (transformers NoBadWordsLogitsProcessor filters
    one-token words against every eos_token_id): [4] and [2] are dropped, [3] and the
    two-token [1, 4] (prefix 1 not at the end of the empty history) are not one-token EOS words:
    [3] is banned, [1, 4] bans nothing. With ignore_eos nothing is dropped; trtllm drops nothing."""
    words = [[4], [2], [3], [1, 4]]
    r = row([0.0] * 5, end_id=(2, 4), bad_words=words)
    assert bans.bad_word_bans(r, HF) == [3]
    assert bans.bad_word_bans(r.replace(ignore_eos=True), HF) == [4, 2, 3]
    assert bans.bad_word_bans(r, TRTLLM) == [4, 2, 3]


def test_bad_word_single_token_is_always_banned():
    assert rewritten([0.0, 1.0, 2.0, 3.0], bad_words=[[3], [1]]) == [0.0, NEG_INF, 2.0, NEG_INF]


@pytest.mark.parametrize("prompt,generated,banned", [
    ([0, 1], [2], True),     # history ends with [1, 2]
    ([0, 1, 2], [], True),   # the whole prefix lies in the prompt
    ([1], [2], True),        # the prefix straddles prompt and generated
    ([1, 2, 0], [], False),  # [1, 2] occurs, but not at the end
    ([2], [1], False),       # wrong order
    ([2], [], False),        # only part of the prefix
])
def test_bad_word_multi_token_bans_last_token_after_prefix(prompt, generated, banned):
    """§1.4: a word [t0..tk-1] bans tk-1 when prompt+generated ends with [t0..tk-2]."""
    logits = [0.0, 1.0, 2.0, 3.0]
    expected = [0.0, 1.0, 2.0, NEG_INF] if banned else logits
    assert rewritten(logits, bad_words=[[1, 2, 3]], prompt=prompt, generated=generated) == expected


@pytest.mark.parametrize("n,hist,banned", [
    (1, [0, 2, 2], {0, 2}),                   # n = 1 bans every seen token
    (2, [1, 2, 3, 1], {2}),                   # prefix [1]: bigram (1, 2)
    (2, [1, 2, 1, 3, 1], {2, 3}),             # prefix [1]: (1, 2), (1, 3)
    (2, [1, 2, 3], set()),                    # prefix [3] never started a bigram
    (3, [1, 2, 3, 1, 2], {3}),                # prefix [1, 2]: trigram (1, 2, 3)
    (3, [1, 2, 3, 1, 2, 0, 1, 2], {0, 3}),
    (3, [1, 2], set()),                       # fewer tokens than n
    (0, [1, 1, 1], set()),                    # 0 disables
    (None, [1, 1, 1], set()),                 # None disables
])
def test_no_repeat_ngram(n, hist, banned):
    """§1.4: prefix = last n-1 tokens; ban the last token of every earlier n-gram
    starting with it. The history is prompt + generated (split here at 1)."""
    logits = [0.0, 1.0, 2.0, 3.0]
    expected = [NEG_INF if t in banned else v for t, v in enumerate(logits)]
    assert rewritten(logits, no_repeat_ngram_size=n, prompt=hist[:1], generated=hist[1:]) == expected


def test_bans_come_after_penalties():
    """§1.2: bans write -inf after the penalties (a banned token is -inf whatever
    the penalty did to it); the greedy row takes the best unbanned token."""
    kw = dict(prompt=[0], repetition_penalty=0.5, bad_words=[[0]])
    assert rewritten([2.0, 3.0, 1.0], **kw) == [NEG_INF, 3.0, 1.0]
    (r,) = step(row([2.0, 3.0, 1.0], **kw))
    assert r.token == 1


def test_penalty_last_n_windows_the_history_for_every_penalty():
    """llama.cpp's penalty_last_n (src/llama-sampling.cpp@0344068c): the last n positions of prompt + generated."""
    x = torch.tensor([3.0, 2.5, 1.0, 0.0])
    # repetition 2 over prompt [0, 1] + generated [2]: last 1 -> token 2 only (1.0 / 2); last 2 -> 1 and 2
    r = row(x.tolist(), prompt=[0, 1], generated=[2], repetition_penalty=2.0, penalty_last_n=1)
    assert rewrites.apply_repetition(x, r, TRTLLM).tolist() == [3.0, 2.5, 0.5, 0.0]
    r = r.replace(penalty_last_n=2)
    assert rewrites.apply_repetition(x, r, TRTLLM).tolist() == [3.0, 1.25, 0.5, 0.0]
    # 0 turns the penalties off; a window past the history is the whole history
    assert rewrites.apply_repetition(x, r.replace(penalty_last_n=0), TRTLLM).tolist() == x.tolist()
    assert rewrites.apply_repetition(x, r.replace(penalty_last_n=9), TRTLLM).tolist() == [1.5, 1.25, 0.5, 0.0]
    # presence 1 + frequency 0.5 over prompt [0] + generated [3, 3], last 3: token 0 once, token 3 twice
    p = row(x.tolist(), prompt=[0], generated=[3, 3], presence_penalty=1.0, frequency_penalty=0.5, penalty_last_n=3)
    assert rewrites.apply_presence_frequency(x, p, TRTLLM).tolist() == [1.5, 2.5, 1.0, -2.0]
    # the window comes first, then the profile's scope: vLLM counts generated tokens only
    assert rewrites.apply_presence_frequency(x, p, VLLM).tolist() == [3.0, 2.5, 1.0, -2.0]
    # ... and prompt_ignore_length: the first prompt token is ignored whatever the window
    p2 = row(x.tolist(), prompt=[0, 1], generated=[3], presence_penalty=1.0, penalty_last_n=3, prompt_ignore_length=1)
    assert rewrites.apply_presence_frequency(x, p2, TRTLLM).tolist() == [3.0, 1.5, 1.0, -1.0]
    # a prompt_ignore_length beyond the prompt never eats generated tokens
    p3 = row(x.tolist(), prompt=[0], generated=[3], presence_penalty=1.0, prompt_ignore_length=5)
    assert rewrites.apply_presence_frequency(x, p3, TRTLLM).tolist() == [3.0, 2.5, 1.0, -1.0]


def test_a_negative_penalty_last_n_is_invalid():
    from impls.reference.modes import resolve
    with pytest.raises(RowError, match=r"invalid_penalty: penalty_last_n=-1: must be an integer >= 0"):
        resolve(row([1.0, 2.0], penalty_last_n=-1), TRTLLM)
