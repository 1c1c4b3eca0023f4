"""The fused sampler's whole step on the device: bias, penalties, bans, logprobs (issue 18 item 1).

Each stage has rows whose rewritten logits, tokens and logprobs are worked out
by hand below (float32 arithmetic where it matters), then a seeded random
sweep against the reference's PyTorch pipeline (:mod:`impls.reference`). On
a machine without CUDA these run under Triton's interpreter (``conftest.py``)
with small vocabularies; vocabularies of several blocks split rows into parts.
"""

import math

import pytest
import torch

triton = pytest.importorskip("triton", reason="triton is not installed (the tox env installs it)")

from impls.base import Row  # noqa: E402
from impls.fused import FUSED_VERSION, FusedImpl, FusedSession  # noqa: E402
from impls.fused.step import allocate_step, fused_step, host_bans, pack_rows  # noqa: E402
from impls.fused.ops import INTERPRETER, DEFAULTS  # noqa: E402
from impls.profiles import TRTLLM  # noqa: E402
from impls.reference.sampler import ReferenceSession, rewrite_logits  # noqa: E402

DEV = "cuda" if torch.cuda.is_available() else "cpu"
NEG = float("-inf")


def greedy_step(rows):
    """One fused step of greedy rows (temperature 0 resolves them greedy); the session's results."""
    return FusedSession(DEV).step([r.replace(temperature=0.0, slot=i) for i, r in enumerate(rows)])


def row(x, **kw):
    return Row(logits=torch.tensor(x, dtype=torch.float32), **kw)


def test_logit_bias_adds_in_request_order_and_bans_with_neg_inf():
    # id 1: (1 + 1e8) - 1e8 in float32 is 0 (1e8 + 1 rounds to 1e8): the values are added one by one, in order,
    # as the reference's out[t] + v; id 3: -inf bans; id 6: 0.5 + 1.5 = 2.0.
    r = row([0.0, 1.0, 0.25, 9.0, 0.5, 0.75, 0.5, 1.0],
            logit_bias=[(1, 1e8), (6, 1.5), (1, -1e8), (3, NEG)])
    out = greedy_step([r])[0]
    assert out.error is None
    assert out.rewritten_logits.cpu().tolist() == [0.0, 0.0, 0.25, NEG, 0.5, 0.75, 2.0, 1.0]
    assert out.token == 6


def test_logit_bias_errors_and_nan_from_neg_inf_plus_inf():
    bad = row([0.0, 1.0, 2.0], logit_bias=[(3, 1.0)])
    nan = row([NEG, 1.0, 2.0], logit_bias=[(0, float("inf"))])
    ok = row([0.0, 1.0, 2.0], logit_bias=[(0, 5.0)])
    out = greedy_step([bad, nan, ok])
    assert out[0].error == "invalid_logit_bias"
    assert out[1].error == "nan_logits"   # -inf + inf is NaN, reported by the filters (as the reference)
    assert out[2].token == 0


def test_repetition_penalty_once_per_seen_token_by_sign():
    # r = 2 over prompt [0, 1, 1] + generated [2, 99]: 2.0 / 2 = 1.0, -1.0 * 2 = -2.0 (once, though 1 is seen
    # twice), 0.0 / 2 = 0.0; id 99 is outside the vocabulary (ignored); 3.0 unseen stays.
    r = row([2.0, -1.0, 0.0, 3.0, 1.0], repetition_penalty=2.0, prompt=[0, 1, 1], generated=[2, 99])
    out = greedy_step([r])[0]
    assert out.rewritten_logits.cpu().tolist() == [1.0, -2.0, 0.0, 3.0, 1.0]
    assert out.token == 3


def test_presence_frequency_count_after_prompt_ignore_length():
    # a = 0.5, f = 0.25; prompt [0, 0, 5] with prompt_ignore_length 1, generated [5, 3]: counted [0, 5, 5, 3]
    # -> x0 -= 0.75, x5 -= 1.0, x3 -= 0.75.
    x = [4.0, 1.0, 1.0, 2.0, 1.0, 3.0]
    r = row(x, presence_penalty=0.5, frequency_penalty=0.25, prompt=[0, 0, 5], generated=[5, 3],
            prompt_ignore_length=1)
    # prompt_ignore_length 3 (the whole prompt): counted [5, 3]; 7 is clamped to the prompt (the same)
    r3 = r.replace(prompt_ignore_length=3)
    r7 = r.replace(prompt_ignore_length=7)
    # negative: no effect, every prompt token counts: x0 -= 0.5 + 0.5
    rn = r.replace(prompt_ignore_length=-2)
    out = greedy_step([r, r3, r7, rn])
    assert out[0].rewritten_logits.cpu().tolist() == [3.25, 1.0, 1.0, 1.25, 1.0, 2.0]
    assert out[1].rewritten_logits.cpu().tolist() == [4.0, 1.0, 1.0, 1.25, 1.0, 2.25]
    assert out[2].rewritten_logits.cpu().tolist() == [4.0, 1.0, 1.0, 1.25, 1.0, 2.25]
    assert out[3].rewritten_logits.cpu().tolist() == [3.0, 1.0, 1.0, 1.25, 1.0, 2.0]


def test_repetition_before_presence_clamp_and_non_finite_pass_through():
    # row r: id 0: 3.0 / 2 = 1.5, then - (0.5 + 0.25 * 1) = 0.75; id 1 unseen keeps float32(3e38); id 2: -inf
    # (a bias ban), seen, stays -inf. Row big: id 1: 3e38 / 2 = 1.5e38, minus (-3e38) = 4.5e38 overflows and is
    # clamped to float32's max 3.4028235e38; id 0 unseen stays 3.0.
    fmax = torch.finfo(torch.float32).max
    r = row([3.0, 3e38, 0.0], repetition_penalty=2.0, presence_penalty=0.5, frequency_penalty=0.25, prompt=[0],
            generated=[2], logit_bias=[(2, NEG)])
    big = row([3.0, 3e38, 0.0], repetition_penalty=2.0, presence_penalty=-3e38, prompt=[1], generated=[2],
              logit_bias=[(2, NEG)])
    out = greedy_step([r, big])
    assert out[0].rewritten_logits.cpu().tolist() == [0.75, float(torch.tensor(3e38)), NEG]
    got = out[1].rewritten_logits.cpu().tolist()
    assert got[1] == fmax and got[2] == NEG and got[0] == 3.0


def test_bans_single_multi_token_min_length_and_no_repeat_ngram():
    x = [5.0, 4.0, 3.0, 2.0, 1.0, 0.5, 0.25, 0.125]
    # bad words: [4] always; [6, 7] bans 7 (history ends with 6); [2, 5] does not match; end id 1 banned while
    # generated (1) < min_length (3); no_repeat_ngram 2 over [0, 6] + [1, 0]: prefix [0] -> ban 6.
    r = row(x, bad_words=[[4], [6, 7], [2, 5]], prompt=[0, 6], generated=[1, 6], end_id=1, min_length=3)
    # min_length reached (3 generated): end id 1 not banned
    done = r.replace(generated=[1, 2, 6])
    ng = row(x, no_repeat_ngram_size=2, prompt=[0, 6], generated=[1, 0])
    assert host_bans(r, 8) == [7]
    assert host_bans(ng, 8) == [6]
    out = greedy_step([r, done, ng])
    got = out[0].rewritten_logits.cpu().tolist()
    assert [i for i, v in enumerate(got) if v == NEG] == [1, 4, 7]
    assert [i for i, v in enumerate(out[1].rewritten_logits.cpu().tolist()) if v == NEG] == [4, 7]
    assert [i for i, v in enumerate(out[2].rewritten_logits.cpu().tolist()) if v == NEG] == [6]
    assert out[0].token == 0


def test_min_length_bans_the_end_id_even_with_ignore_eos_and_nothing_without_one():
    x = [1.0, 9.0, 2.0]
    a = row(x, end_id=1, min_length=2, ignore_eos=True, generated=[0])
    b = row(x, end_id=-1, min_length=2, generated=[0])
    out = greedy_step([a, b])
    assert out[0].token == 2 and out[0].rewritten_logits.cpu().tolist() == [1.0, NEG, 2.0]
    assert out[1].token == 1


def test_penalty_last_n_penalises_the_last_positions_only():
    # history [1, 2, 2] + [3, 1]; a window of 3 is [2, 3, 1]: frequency 1 subtracts 1 from ids 1, 2, 3 (the whole
    # history would subtract 2 from 1 and 2); prompt_ignore_length 3 leaves [3, 1] counted; a window of 0: no
    # penalty. Repetition 2 over the window [3, 1] of 2: 2 / 2 = 1 at ids 1 and 3.
    h = dict(prompt=[1, 2, 2], generated=[3, 1])
    out = greedy_step([row([0.0] * 5, frequency_penalty=1.0, penalty_last_n=3, **h),
                       row([0.0] * 5, frequency_penalty=1.0, penalty_last_n=3, prompt_ignore_length=3, **h),
                       row([0.0] * 5, frequency_penalty=1.0, penalty_last_n=0, **h),
                       row([0.0] * 5, frequency_penalty=1.0, **h),
                       row([2.0] * 5, repetition_penalty=2.0, penalty_last_n=2, **h)])
    assert [o.rewritten_logits.cpu().tolist() for o in out] == [
        [0.0, -1.0, -1.0, -1.0, 0.0], [0.0, -1.0, 0.0, -1.0, 0.0], [0.0] * 5, [0.0, -2.0, -2.0, -1.0, 0.0],
        [2.0, 1.0, 2.0, 1.0, 2.0]]
    bad = greedy_step([row([0.0] * 5, frequency_penalty=1.0, penalty_last_n=-1, **h)])[0]
    assert bad.error == "invalid_penalty"


def test_api_values_the_case_schema_refuses_are_errors_of_their_row():
    # a row given through the API, not a case: a fractional window, a logprobs count below -1 and an unknown
    # logprobs_mode reject that row alone, as in the reference (impls/reference/modes.py validate)
    out = greedy_step([row([0.0, 1.0], repetition_penalty=1.5, penalty_last_n=2.5, generated=[1]),
                       row([0.0, 1.0], logprobs=-2), row([0.0, 1.0], logprobs_mode="bogus"), row([0.0, 1.0])])
    assert [o.error for o in out] == ["invalid_penalty", "invalid_logprobs", "invalid_logprobs", None]
    assert out[3].token == 1


def test_bitmask_and_allowed_ids_are_one_mask_before_the_bias():
    # V = 40 (two words): word 0 allows ids 5 and 31 (bit 31: a uint32 word above 2**31), word 1 id 35 (bit 3)
    x = [float(i) for i in range(40)]
    words = [(1 << 5) | (1 << 31), 1 << 3]
    allowed = lambda o: [i for i, v in enumerate(o.rewritten_logits.cpu().tolist()) if v != NEG]
    out = greedy_step([row(x, token_bitmask=words), row(x, token_bitmask=words, allowed_token_ids=[5, 6, 5]),
                       row(x, allowed_token_ids=[2, 7], logit_bias=[(7, -6.0), (9, 100.0)])])
    assert allowed(out[0]) == [5, 31, 35] and out[0].token == 35
    assert allowed(out[1]) == [5] and out[1].token == 5
    # the bias moves an allowed id (7 - 6 = 1 < 2) and cannot bring back a banned one (9)
    assert out[2].rewritten_logits.cpu().tolist()[:10] == [NEG, NEG, 2.0, NEG, NEG, NEG, NEG, 1.0, NEG, NEG]
    assert out[2].token == 2
    # a NaN under a 0 bit is banned with it (the bitmask applies to the model's logits); outside allowed_token_ids
    # it is nan_logits (the list is a rewrite, after the check); an empty list or an id past V is rejected
    y = list(x)
    y[7] = float("nan")
    out = greedy_step([row(y, token_bitmask=words), row(y, allowed_token_ids=[5]), row(x, allowed_token_ids=[]),
                       row(x, allowed_token_ids=[40])])
    assert out[0].token == 35
    assert [o.error for o in out[1:]] == ["nan_logits", "invalid_allowed_token_ids", "invalid_allowed_token_ids"]


def test_custom_processors_run_first_on_the_bitmasked_logits():
    from impls.processors import parse
    # x = [0, 1, 2, 3], the bitmask bans 3 (word 0b0111). step_bias on id 0, 1.0 a step, after 3 generated
    # tokens: 0 + 3 = 3; then the bias -0.5 on id 0: 2.5, still the best. cycle over [3, 1] at step 2 keeps id 3,
    # which the bitmask banned: no token left. A greedy row gets its processors too.
    x = [0.0, 1.0, 2.0, 3.0]
    sb = parse([{"kind": "step_bias", "token": 0, "per_step": 1.0}])
    cyc = parse([{"kind": "cycle", "tokens": [3, 1]}])
    out = greedy_step([row(x, token_bitmask=[7], logits_processors=sb, generated=[1, 1, 1], logit_bias=[(0, -0.5)]),
                       row(x, token_bitmask=[7], logits_processors=cyc, generated=[2, 2]),
                       row(x, logits_processors=cyc, generated=[2, 2])])
    assert out[0].rewritten_logits.cpu().tolist() == [2.5, 1.0, 2.0, NEG] and out[0].token == 0
    assert out[1].error == "no_valid_token"
    assert out[2].rewritten_logits.cpu().tolist() == [NEG, NEG, NEG, 3.0] and out[2].token == 3


def test_logprobs_modes_read_the_token_rank_and_vector_from_their_vector():
    # x = [0, -200, 5, 1]. T = 2, top_k 3 keeps {0, 2, 3}: processed_logits = [0, -inf, 2.5, 0.5]. T = 1 without
    # a filter keeps every token, id 1 included although its probability exp(-205) / E is 0 in float32: its
    # processed logit is -200, its processed logprob log 0 = -inf; the others log(exp(x - 5) / E), E = 1 + e^-4 +
    # e^-5. A greedy row: processed_logits = x, processed_logprobs = log_softmax(x). raw_logits: x.
    x = [0.0, -200.0, 5.0, 1.0]
    E = 1 + math.exp(-4) + math.exp(-5)
    sess = FusedSession(DEV)
    rows = [row(x, temperature=2.0, top_k=3, seed=1, slot=0, logprobs=-1, logprobs_mode="processed_logits"),
            row(x, temperature=1.0, seed=2, slot=1, logprobs=-1, logprobs_mode="processed_logits"),
            row(x, temperature=1.0, seed=3, slot=2, logprobs=-1, logprobs_mode="processed_logprobs"),
            row(x, temperature=0.0, slot=3, logprobs=2, logprobs_mode="processed_logprobs"),
            row(x, temperature=0.0, slot=4, logprobs=2, logprobs_mode="raw_logits", logprob_token_ids=[1, 0])]
    out = sess.step(rows)
    assert out[0].vocab_logprobs.cpu().tolist() == [0.0, NEG, 2.5, 0.5]
    assert out[1].vocab_logprobs.cpu().tolist() == x
    got = out[2].vocab_logprobs.cpu().tolist()
    assert got[1] == NEG and got[0] == pytest.approx(-5 - math.log(E), abs=1e-6)
    assert got[2] == pytest.approx(-math.log(E), abs=1e-6) and got[3] == pytest.approx(-4 - math.log(E), abs=1e-6)
    for o in out[:3]:   # the token's logprob and rank are read from the same vector
        v = o.vocab_logprobs.cpu().tolist()
        assert o.logprob == v[o.token] and o.rank == 1 + sum(u > v[o.token] for u in v)
    lse = 5 + math.log(E)
    assert out[3].token == 2 and out[3].logprob == pytest.approx(5 - lse, abs=1e-6) and out[3].rank == 1
    assert [i for i, _ in out[3].top_logprobs] == [2, 3]
    assert out[3].top_logprobs[1][1] == pytest.approx(1 - lse, abs=1e-6)
    assert out[4].logprob == 5.0 and out[4].top_logprobs == [(2, 5.0), (3, 1.0)]
    assert out[4].token_logprobs == [(1, -200.0), (0, 0.0)]


def test_dry_penalises_the_token_that_extends_a_repetition():
    from impls.fused.step import dry_penalties
    # window [1, 2, 3, 1, 2]: its end "1 2" occurred before, followed by 3: n = 2 = allowed length, penalty
    # 1.5 * 2 ** 0 = 1.5 on id 3. A one-token breaker 2 at the end stops every repetition (limit 0); breaker 3 is
    # never penalised itself; a window of the last 2 tokens is too short (2 <= allowed).
    h = dict(prompt=[1, 2, 3], generated=[1, 2], dry_multiplier=1.5, dry_base=2.0, dry_allowed_length=2)
    assert dry_penalties(row([0.0] * 5, **h), 5) == [(3, 1.5)]
    assert dry_penalties(row([0.0] * 5, dry_sequence_breakers=[[2]], **h), 5) == []
    assert dry_penalties(row([0.0] * 5, dry_sequence_breakers=[[3]], **h), 5) == []
    assert dry_penalties(row([0.0] * 5, dry_penalty_last_n=2, **h), 5) == []
    # "1 2 1 2 1 2" + allowed 1: the occurrence ending k = 2 tokens before the end repeats the last n = 4 tokens
    # (1 2 1 2 = positions 0-3 against 2-5), the one at k = 4 the last 2; both were followed by 1: id 1 gets
    # base ** (4 - 1) = 8; breaker [9, 1] never occurs; k odd: no match
    r = row([0.0] * 10, prompt=[1, 2, 1, 2], generated=[1, 2], dry_multiplier=1.0, dry_base=2.0, dry_allowed_length=1,
            dry_sequence_breakers=[[9, 1]])
    assert dry_penalties(r, 10) == [(1, 8.0)]
    out = greedy_step([row([3.0, 0.0, 0.0, 2.5, 0.0], **h), r.replace(logits=torch.full((10,), 1.0))])
    assert out[0].rewritten_logits.cpu().tolist() == [3.0, 0.0, 0.0, 1.0, 0.0]
    assert out[1].rewritten_logits.cpu().tolist()[:3] == [1.0, -7.0, 1.0]
    assert [o.error for o in greedy_step([row([0.0] * 5, dry_sequence_breakers=[[]], **h),
                                          row([0.0] * 5, **dict(h, dry_base=float("nan")))])] == \
        ["invalid_sampler_param"] * 2


@pytest.mark.parametrize("seed", range(3))
def test_dry_penalties_match_the_reference_rewrite(seed):
    """The Z-array matching against the reference's direct comparison (impls.reference.rewrites.apply_dry)."""
    from impls.fused.step import dry_penalties
    from impls.reference.rewrites import apply_dry
    gen = torch.Generator().manual_seed(seed)
    for _ in range(60):
        V = 6
        n = int(torch.randint(0, 40, (1,), generator=gen))
        hist = torch.randint(0, V + 1, (n,), generator=gen).tolist()   # id V: outside the vocabulary
        r = row([0.0] * V, prompt=hist[:n // 2], generated=hist[n // 2:], dry_multiplier=0.8,
                dry_base=float(torch.rand(1, generator=gen)) * 2 + 0.9,
                dry_allowed_length=int(torch.randint(-1, 4, (1,), generator=gen)),
                dry_penalty_last_n=(None, 0, 5, 17)[int(torch.randint(0, 4, (1,), generator=gen))],
                dry_sequence_breakers=[torch.randint(0, V, (int(torch.randint(1, 3, (1,), generator=gen)),),
                                                     generator=gen).tolist() for _ in range(2)])
        want = apply_dry(torch.zeros(V), r, TRTLLM)
        got = torch.zeros(V)
        for t, v in dry_penalties(r, V):
            got[t] -= v
        assert torch.equal(got, want), r


def test_processed_logits_keep_the_top_k_when_its_probability_rounds_to_zero():
    # x = [200, 0, 0, -1, -3], top_k 2 at T = 1: the second largest (0, tied twice) has e = exp(-200) = 0 in
    # float32, as has every token below it; the filters keep all of them (tied at e = 0, never drawn) but the
    # processed logits are exact arithmetic's top-k: 200 and both 0s (ties kept), -inf below. At T = 0.3 and
    # top_k 50 over linspace(0, -800, 1100), the 50th logit is 35.7 (119 T) below the largest: 50 finite
    # entries. A row with e_thr > 0 keeps its set as before (processed logits [2, 1, -inf, -inf] at T = 2).
    sess = FusedSession(DEV)
    rows = [row([200.0, 0.0, 0.0, -1.0, -3.0], temperature=1.0, top_k=2, seed=1, slot=0, logprobs=-1,
                logprobs_mode="processed_logits"),
            Row(logits=torch.linspace(0.0, -800.0, 1100), temperature=0.3, top_k=50, seed=3, slot=1, logprobs=-1,
                logprobs_mode="processed_logits"),
            row([4.0, 2.0, 0.0, -2.0], temperature=2.0, top_k=2, seed=2, slot=2, logprobs=-1,
                logprobs_mode="processed_logits")]
    out = sess.step(rows)
    assert out[0].token == 0 and out[0].vocab_logprobs.cpu().tolist() == [200.0, 0.0, 0.0, NEG, NEG]
    assert out[0].rank == 1
    v = out[1].vocab_logprobs.cpu()
    assert int(torch.isfinite(v).sum()) == 50 and bool(torch.isfinite(v[:50]).all())
    assert out[2].vocab_logprobs.cpu().tolist() == [2.0, 1.0, NEG, NEG]


def test_dynamic_temperature_from_the_entropy_of_every_finite_logit(monkeypatch):
    from impls.fused import ops
    from impls.fused.temperature import dynamic_temperature
    # x = [2, 1, 0.5, -1], T = 1, range 0.5 (lo 0.5, hi 1.5), exponent 1: H / ln 4 = 0.7317369268, T' =
    # 1.231736927 (cases/filters/dynatemp-entropy-before-filters); top_k 2 keeps {0, 1}: probs [1, e^(-1/T')] /
    # (1 + e^(-1/T')) = [0.6925060732, 0.3074939268]. A -inf logit is not counted (n = 4 of 5); range <= 0
    # and greedy rows keep their temperature; exponent -1: 0.5 + 1 / 0.7317369268 = 1.866611364.
    x = [2.0, 1.0, 0.5, -1.0]
    y = torch.tensor([x + [NEG]] * 4)
    f64 = lambda v: torch.tensor(v, dtype=torch.float64)
    t = dynamic_temperature(y, torch.tensor([1.0, 1.0, 0.0, 1.0]), f64([0.5, -0.5, 0.5, 0.5]), f64([1.0, 1.0, 1.0, -1.0]))
    assert t.tolist() == pytest.approx([1.231736927, 1.0, 0.0, 1.866611364], abs=1e-7)
    out = FusedSession(DEV).step([row(x, temperature=1.0, dynatemp_range=0.5, top_k=2, seed=111, slot=0),
                                  row(x, temperature=1.0, dynatemp_range=float("nan"), seed=1, slot=1)])
    assert out[0].probs.cpu().tolist() == pytest.approx([0.6925060732, 0.3074939268, 0.0, 0.0], abs=1e-6)
    assert out[1].error == "invalid_sampler_param"
    # sample_many draws at T' too
    seen = []
    real = ops.fused_sample
    monkeypatch.setattr(ops, "fused_sample", lambda x, **kw: seen.append(kw["temperature"]) or real(x, **kw))
    FusedSession(DEV).sample_many(row(x, temperature=1.0, dynatemp_range=0.5), seeds=range(4))
    assert seen[0].cpu().tolist() == pytest.approx([1.231736927] * 4, abs=1e-7)


def test_logprobs_of_a_greedy_row_with_ties_rank_and_top_list():
    # log_softmax([1, 2, 2, 0]): logsumexp = log(e + 2 e^2 + 1) = 2.9175797; token 1 (lowest id of the tie),
    # logprob 2 - 2.9175797 = -0.9175797, rank 1 (no logprob strictly greater), top 2: (1, ...), (2, ...);
    # PROCESSED logprob of a greedy row: log 1 = 0.
    lse = math.log(math.e + 2 * math.e ** 2 + 1)
    out = greedy_step([row([1.0, 2.0, 2.0, 0.0], logprobs=2)])[0]
    assert out.token == 1 and out.rank == 1
    assert out.logprob == pytest.approx(2 - lse, abs=1e-6)
    assert out.processed_logprob == 0.0
    assert [i for i, _ in out.top_logprobs] == [1, 2]
    assert out.top_logprobs[1][1] == pytest.approx(2 - lse, abs=1e-6)
    # token 0 (banned id 1 and 2 by bias) with top 1: the sampled token is appended; its rank is 2 (3: -inf below)
    out = greedy_step([row([1.0, 2.0, 2.0, 0.0], logprobs=1, logit_bias=[(1, NEG), (2, NEG), (3, 1.5)])])[0]
    assert out.token == 3 and out.rank == 1
    out = greedy_step([row([1.0, 2.0, 2.0, 0.0], logprobs=1, logit_bias=[(1, NEG), (2, NEG), (0, -0.5)])])[0]
    # [0.5, -inf, -inf, 0.0]: token 0, logprob 0.5 - log(e^0.5 + 1) = -0.4740770
    assert out.token == 0 and out.logprob == pytest.approx(0.5 - math.log(math.exp(0.5) + 1), abs=1e-6)
    assert out.top_logprobs[0][0] == 0 and len(out.top_logprobs) == 1
    # more top logprobs asked than the vocabulary holds: every token once, no pads (the kernel's list has id -1
    # past V). log_softmax([1, 2, 2, 0]) as above: ids 1, 2 (tie, lowest id first), 0, 3
    out = greedy_step([row([1.0, 2.0, 2.0, 0.0], logprobs=6)])[0]
    assert [i for i, _ in out.top_logprobs] == [1, 2, 0, 3]
    assert [lp for _, lp in out.top_logprobs] == pytest.approx([2 - lse, 2 - lse, 1 - lse, -lse], abs=1e-6)


def test_processed_logprob_and_rank_of_a_sampled_row():
    # x = [0, 2 ln 2, 4 ln 2, -1] at T = 2 and top_k 2: e = [1, 2, 4] -> kept {1, 2} with p = 1/3, 2/3.
    # RAW: x - log(1 + 4 + 16 + e^-1). Seeded: whichever token is drawn, its values are these.
    x = [0.0, 2 * math.log(2), 4 * math.log(2), -1.0]
    lse = math.log(1 + 4 + 16 + math.exp(-1))
    sess = FusedSession(DEV)
    for seed in range(6):
        out = sess.step([row(x, temperature=2.0, top_k=2, seed=seed, slot=0, request_id=f"r{seed}", logprobs=0)])[0]
        t = out.token
        assert t in (1, 2)
        assert out.processed_logprob == pytest.approx(math.log({1: 1 / 3, 2: 2 / 3}[t]), abs=1e-6)
        assert out.logprob == pytest.approx(x[t] - lse, abs=1e-6)
        assert out.rank == {1: 2, 2: 1}[t]
        assert out.top_logprobs == [(t, out.logprob)]


def _random_rows(gen, n, V):
    rows = []
    for i in range(n):
        x = torch.randn(V, generator=gen) * 3
        hist = torch.randint(-2, V + 3, (int(torch.randint(0, 40, (1,), generator=gen)),), generator=gen).tolist()
        cut = len(hist) // 2
        kw = dict(prompt=hist[:cut], generated=hist[cut:], slot=i, seed=1000 + i, logprobs=int(i % 4) * 2)
        if i % 2 == 0:
            kw.update(repetition_penalty=1.3, presence_penalty=0.4, frequency_penalty=0.2, prompt_ignore_length=i % 5)
        if i % 3 == 0:
            kw.update(logit_bias=[(int(t), float(v)) for t, v in zip(torch.randint(0, V, (5,), generator=gen),
                                                                      torch.randn(5, generator=gen) * 4)])
        if i % 3 == 1:
            kw.update(bad_words=[[int(hist[-1]) % V if hist else 1], [3, 4]], end_id=0, min_length=cut + 1,
                      no_repeat_ngram_size=2)
        if i % 4 == 2:
            kw.update(penalty_last_n=(5, 0)[i // 4 % 2])
        if i % 5 == 1:
            kw.update(allowed_token_ids=torch.randperm(V, generator=gen)[:V // 3].tolist())
        if i % 5 == 3:
            kw.update(token_bitmask=torch.randint(0, 1 << 32, ((V + 31) // 32,), generator=gen).tolist())
        if i % 3 == 2:
            from impls.processors import parse
            kw.update(logits_processors=parse([{"kind": "step_bias", "token": int(i * 5 % V), "per_step": 0.75},
                                               {"kind": "margin", "margin": 6.0}]))
        if i % 5 == 2:
            kw.update(dynatemp_range=0.4, dynatemp_exponent=1.3)
        if i % 3 == 0:
            kw.update(dry_multiplier=0.9, dry_base=1.5, dry_allowed_length=1, dry_sequence_breakers=[[5]])
        if i % 2 == 1:
            kw.update(logprobs_mode=("processed_logits", "processed_logprobs", "raw_logits")[i // 2 % 3])
        if i % 4 == 3:
            kw.update(logprobs=-1)
        if i % 4 == 0:
            kw.update(temperature=0.0)
        else:
            kw.update(temperature=0.7 + 0.2 * (i % 3), top_k=int(i % 5) * 7, top_p=0.9)
        rows.append(Row(logits=x, **kw))
    return rows


@pytest.mark.parametrize("V", [37, 700])
def test_random_rows_match_the_reference_step(V):
    """Tokens, rewritten logits (exactly), logprobs, ranks and top lists of the reference, on random rows."""
    gen = torch.Generator().manual_seed(V)
    rows = [r for r in _random_rows(gen, 8, V) if FusedImpl().unsupported(r) is None]
    got = FusedSession(DEV).step(rows)
    # the reference on the CPU: its IEEE division is the kernel's (PyTorch's CUDA division by a Python scalar
    # multiplies by the reciprocal)
    want = ReferenceSession(TRTLLM, "cpu").step(rows)
    for g, w, r in zip(got, want, rows):
        assert g.error == w.error
        if w.error:
            continue
        assert torch.equal(g.rewritten_logits.cpu(), w.rewritten_logits.cpu())
        assert g.token == w.token
        assert g.logprob == pytest.approx(w.logprob, abs=1e-6, rel=1e-6)
        assert g.processed_logprob == pytest.approx(w.processed_logprob, abs=1e-6, rel=1e-6)
        assert g.rank == w.rank
        assert g.finish_reason == w.finish_reason
        if r.logprobs is not None and r.logprobs >= 0:
            assert [i for i, _ in g.top_logprobs] == [i for i, _ in w.top_logprobs]
            assert [v for _, v in g.top_logprobs] == pytest.approx([v for _, v in w.top_logprobs], abs=1e-6)
        if r.logprobs == -1:   # the whole vector of the row's mode (infinities where the reference has them)
            assert torch.allclose(g.vocab_logprobs.cpu(), w.vocab_logprobs.cpu(), rtol=1e-6, atol=1e-6)


def test_whole_vector_and_bf16_input():
    gen = torch.Generator().manual_seed(5)
    x = (torch.randn(300, generator=gen) * 2).to(torch.bfloat16)
    r = Row(logits=x, logprobs=-1, temperature=0.0, logit_bias=[(7, 3.0)], repetition_penalty=1.5, prompt=[1, 2])
    out = greedy_step([r])[0]
    ref = rewrite_logits(x.float(), r, TRTLLM)
    assert torch.equal(out.rewritten_logits.cpu(), ref)
    assert torch.allclose(out.vocab_logprobs.cpu(), torch.log_softmax(ref, -1), atol=1e-6, rtol=1e-6)


def test_buffers_are_reused_and_the_step_has_fixed_shapes():
    """With a kept workspace the call allocates no outputs: it writes the same tensors (CUDA-graph friendly)."""
    gen = torch.Generator().manual_seed(3)
    B, V = 3, 200
    rows = [Row(logits=torch.randn(V, generator=gen), logprobs=3, logit_bias=[(5, 2.0)], presence_penalty=0.5,
                prompt=[5, 6]) for _ in range(B)]
    inputs, errs = pack_rows(rows, V, DEV, NU=64)
    assert errs == [None] * B and inputs.NU == 64
    cfg = INTERPRETER if DEV == "cpu" else DEFAULTS
    buf = allocate_step(B, V, torch.device(DEV), cfg, KL=8)
    x = torch.stack([r.logits for r in rows]).to(DEV)
    z = lambda v, dt: torch.full((B,), v, dtype=dt, device=DEV)
    args = (z(0.0, torch.float32), z(0, torch.int64), z(1.0, torch.float32), z(0.0, torch.float32),
            z(0, torch.int64), z(0, torch.int64))
    o1 = fused_step(x, *args, inputs=inputs, buffers=buf)
    t1 = o1["tokens"].clone()
    o2 = fused_step(x * 2, *args, inputs=inputs, buffers=buf)
    for k in ("tokens", "rewritten", "logprob", "top_ids", "probs"):
        assert o2[k].data_ptr() == buf[{"rewritten": "y", "logprob": "lp", "top_ids": "top_id"}.get(k, k)].data_ptr()
    assert torch.equal(o2["tokens"], t1)  # doubling the logits keeps every argmax


def test_a_prepared_rewrite_is_not_run_again():
    """``prepare_step`` then ``fused_step(..., rewritten=True)`` is the whole step with its rewrite launch run once:
    the same tokens, logprobs and rewritten logits as one ``fused_step`` call; buffers that do not fit the call
    (prepared without logprobs, or already used by a step) are refused, not silently re-prepared."""
    from impls.fused.step import prepare_step
    gen = torch.Generator().manual_seed(5)
    B, V = 3, 300
    rows = [Row(logits=torch.randn(V, generator=gen) * 2, logprobs=2, logit_bias=[(7, 3.0)], repetition_penalty=1.3,
                prompt=[7, 8, 9], bad_words=[[1]]) for _ in range(B)]
    inputs, errs = pack_rows(rows, V, DEV)
    assert errs == [None] * B
    x = torch.stack([r.logits for r in rows]).to(DEV)
    z = lambda v, dt: torch.full((B,), v, dtype=dt, device=DEV)
    args = (z(1.0, torch.float32), z(20, torch.int64), z(0.9, torch.float32), z(0.0, torch.float32),
            torch.arange(B, dtype=torch.int64, device=DEV), z(0, torch.int64))
    whole = fused_step(x, *args, inputs=inputs)
    buf = prepare_step(x, inputs)
    assert float(buf["y"][0, 1]) == float("-inf") and float(buf["y"][0, 7]) == float(whole["rewritten"][0, 7])
    split = fused_step(x * 0, *args, inputs=inputs, buffers=buf, rewritten=True)   # x * 0: the logits are not read
    for k in ("tokens", "rewritten", "logprob", "rank", "top_ids", "top_logprobs"):
        assert torch.equal(split[k], whole[k]), k
    for stale in (prepare_step(x, inputs, want_logprobs=False), buf):   # without logprobs; already used once
        with pytest.raises(ValueError, match="rewritten=True needs the buffers prepare_step made"):
            fused_step(x, *args, inputs=inputs, buffers=stale, rewritten=True)


def test_declared_stages_and_version():
    st = FusedImpl.stages
    assert st == dict.fromkeys(("validation", "logit_bias", "penalties", "bans", "filters", "draw", "seeds",
                                "logprobs", "finish", "decode", "beam"), "own")
    assert FUSED_VERSION == "8"
    assert FusedImpl().unsupported(row([0.0], mirostat=2)) is None
    assert FusedImpl().unsupported(row([0.0], typical_p=0.5)) is None
    assert FusedImpl().unsupported(row([0.0], logprobs_mode="processed_logprobs", dry_multiplier=0.5)) is None


def test_one_beam_step_is_the_argmax_of_log_softmax_at_its_temperature():
    """At T = 1e30 every log-softmax value rounds to -log(4) in float32: the tie goes to id 0 (SEMANTICS §3)."""
    x = [1.0, 3.0, 2.0, 0.5]
    rows = [row(x, use_beam_search=True, slot=0), row(x, use_beam_search=True, temperature=1e30, slot=1),
            row(x, use_beam_search=True, temperature=1e30, logit_bias=[(1, float("-inf"))], slot=2,
                end_id=0, logprobs=1)]
    got = FusedSession(DEV).step(rows)
    assert [g.token for g in got] == [1, 0, 0] and [g.mode for g in got] == ["beam"] * 3
    # the logprobs launch reads the beam's token: its RAW logprob (after the bias, profile trtllm) is
    # 1 - log(e + e**2 + e**0.5) = 1 - log(11.756056) = -1.464369
    assert got[2].logprob == pytest.approx(-1.464369, abs=1e-6) and got[2].finish_reason == "end_id"


def test_rows_the_step_rejects_take_no_offset():
    """NaN, +inf and all--inf sampling rows draw nothing, so the next unseeded row gets the counter's first value."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(16, generator=gen)
    bad = [x.clone(), x.clone(), torch.full((16,), NEG)]
    bad[0][3], bad[1][4] = float("nan"), float("inf")
    rows = [Row(logits=b, temperature=1.0, slot=i, request_id=str(i)) for i, b in enumerate(bad)]
    rows.append(Row(logits=x, temperature=1.0, slot=3, request_id="3"))
    got = FusedSession(DEV).step(rows)
    want = ReferenceSession(TRTLLM, "cpu").step(rows)
    assert [g.error for g in got] == ["nan_logits", "posinf_logits", "no_valid_token", None]
    assert got[3].extra["offset"] == 1 << 62 and got[3].token == want[3].token


def test_nan_logits_come_before_parameter_errors_and_huge_history_ids_are_ignored():
    got = FusedSession(DEV).step([row([0.1, float("nan"), 0.3], temperature=-1.0),
                                  row([0.1, 0.2, 0.3], temperature=0.0, repetition_penalty=2.0, prompt=[1 << 40, 2],
                                      slot=1)])
    assert got[0].error == "nan_logits"
    # only id 2 is penalised: 0.3 / 2 = 0.15 (the id 2**40 is outside the vocabulary, so it counts for nothing)
    assert got[1].rewritten_logits.tolist() == pytest.approx([0.1, 0.2, 0.15]) and got[1].token == 1


@pytest.mark.gpu
def test_cuda_graph_capture_and_replay_of_the_whole_step():
    gen = torch.Generator().manual_seed(11)
    B, V = 6, 4096
    rows = [Row(logits=torch.randn(V, generator=gen), logprobs=4, logit_bias=[(5, 2.0)], repetition_penalty=1.2,
                prompt=[5, 6, 7], generated=[8], slot=i, temperature=0.8, top_p=0.9, seed=i) for i in range(B)]
    inputs, _ = pack_rows(rows, V, "cuda", NU=64)
    buf = allocate_step(B, V, torch.device("cuda"), DEFAULTS, KL=8)
    x = torch.stack([r.logits for r in rows]).cuda()
    T = torch.full((B,), 0.8, device="cuda")
    K = torch.zeros(B, dtype=torch.int64, device="cuda")
    P = torch.full((B,), 0.9, device="cuda")
    M = torch.zeros(B, device="cuda")
    S = torch.arange(B, dtype=torch.int64, device="cuda")
    O = torch.zeros(B, dtype=torch.int64, device="cuda")
    fused_step(x, T, K, P, M, S, O, inputs=inputs, buffers=buf)  # compile before capture
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = fused_step(x, T, K, P, M, S, O, inputs=inputs, buffers=buf)
    for seed in (1, 2):
        x.copy_(torch.randn(B, V, generator=torch.Generator().manual_seed(seed)).cuda())
        g.replay()
        torch.cuda.synchronize()
        want = ReferenceSession(TRTLLM, "cpu").step([r.replace(logits=x[i].cpu()) for i, r in enumerate(rows)])
        assert out["tokens"].tolist() == [w.token for w in want]
        assert out["rank"].tolist() == [w.rank for w in want]


def test_early_accept_is_off_when_the_step_takes_logprobs():
    """The PROCESSED logprob divides by the mass of the kept set, which a row accepted in the histogram
    pass has not summed: with logprobs the filters run without early accept. Row ``[0, -0.5, -1, -6 x 7]``,
    ``T = 1``, ``top_p = 0.9`` keeps {0, 1, 2} (``tests/test_fused.py::_early_rows``); seeds 0 and 2 draw
    tokens 0 and 1, whose PROCESSED logprobs are ``x_t - log(1 + e^-0.5 + e^-1)``. Without logprobs and
    probabilities both rows are accepted (path 5), with the same tokens."""
    V, B = 10, 2
    x = torch.tensor([0.0, -0.5, -1.0] + [-6.0] * 7).expand(B, V).contiguous().to(DEV)
    rows = [Row(logits=x[i].cpu(), logprobs=0) for i in range(B)]
    inputs, _ = pack_rows(rows, V, DEV)
    z = lambda v, dt: torch.full((B,), v, dtype=dt, device=DEV)
    args = (z(1.0, torch.float32), z(0, torch.int64), z(0.9, torch.float32), z(0.0, torch.float32),
            torch.tensor([0, 2], device=DEV), z(0, torch.int64))
    lse = math.log(1 + math.exp(-0.5) + math.exp(-1.0))
    o = fused_step(x, *args, inputs=inputs, want_probs=False, want_logprobs=True)
    assert o["tokens"].tolist() == [0, 1] and 5 not in o["path"].tolist()
    assert o["processed_logprob"].tolist() == pytest.approx([-lse, -0.5 - lse], abs=1e-6)
    o = fused_step(x, *args, inputs=inputs, want_probs=False, want_logprobs=False)
    assert o["tokens"].tolist() == [0, 1] and o["path"].tolist() == [5, 5]
