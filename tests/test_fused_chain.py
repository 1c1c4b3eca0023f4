"""llama.cpp's extra filters in the fused step: min_keep, top-n-sigma, typical-p, XTC (:mod:`impls.fused.chain`).

Kept sets and probabilities worked out by hand below; then rows of the chain beside plain rows in one
step, against the reference's pipeline. On a machine without CUDA the step runs under Triton's
interpreter (``conftest.py``).
"""

import math

import pytest
import torch

pytest.importorskip("triton", reason="triton is not installed (the tox env installs it)")

from impls.base import Row  # noqa: E402
from impls.fused import FusedImpl, FusedSession  # noqa: E402
from impls.fused.admit import admit  # noqa: E402
from impls.fused.chain import apply_chain, chain_keep, chain_params, needs_chain  # noqa: E402
from impls.reference.sampler import ReferenceSession  # noqa: E402

DEV = "cuda" if torch.cuda.is_available() else "cpu"
NEG = float("-inf")


def row(x, **kw):
    return Row(logits=torch.tensor(x, dtype=torch.float32), **kw)


def keep_of(x, **kw):
    """The chain's kept set (ids) and its mixture flag for one row of logits ``x`` and parameters ``kw``."""
    r = row(x, **kw)
    adm = admit(r)
    prm = chain_params([adm], torch.tensor([adm.temperature], dtype=torch.float64))
    keep, cut, mix = chain_keep(torch.tensor([x], dtype=torch.float32), prm)
    return torch.nonzero(keep[0]).flatten().tolist(), torch.nonzero(cut[0]).flatten().tolist(), bool(mix[0])


def test_min_keep_unions_the_most_likely_into_min_p_and_top_p():
    # x = [2, 1, 0, -1], T = 1: min-p 0.5 keeps e^(x - 2) >= 0.5, token 0 alone (e^-1 = 0.368); min_keep 3 adds
    # tokens 1, 2. Top-p 0.5: p = [0.6439, 0.2369, 0.0871, 0.0321]: token 0 alone; min_keep 2 adds token 1.
    # Top-k ignores min_keep: top_k 1 with min_keep 3 keeps token 0 (a greedy row: top_k 1 resolves greedy, so
    # top_k 2 with min_keep 3 keeps {0, 1}).
    x = [2.0, 1.0, 0.0, -1.0]
    assert keep_of(x, temperature=1.0, min_p=0.5)[0] == [0]
    assert keep_of(x, temperature=1.0, min_p=0.5, min_keep=3)[0] == [0, 1, 2]
    assert keep_of(x, temperature=1.0, top_p=0.5, min_keep=2)[0] == [0, 1]
    assert keep_of(x, temperature=1.0, top_k=2, min_keep=3)[0] == [0, 1]
    # ties in min_keep's order go to the lowest id: [1, 3, 3, 0] min-p 0.9 keeps {1, 2}; min_keep 2 adds nothing
    assert keep_of([1.0, 3.0, 3.0, 0.0], temperature=1.0, min_p=0.9, min_keep=2)[0] == [1, 2]
    assert keep_of([1.0, 3.0, 3.0, 0.0], temperature=1.0, min_p=0.9, min_keep=3)[0] == [0, 1, 2]


def test_top_n_sigma_population_std_of_the_survivors():
    # x = [3, 1, 0, -inf]: finite z = x - 3 = [0, -2, -3], mean -5/3, population variance (25 + 1 + 16) / 27 =
    # 14/9, sigma = 1.247219129. n = 1: z >= -1.2472 keeps {0}; n = 2: z >= -2.4944 keeps {0, 1}; n = 3 keeps all
    # three. After top-k 2 the survivors are {0, 1}: z = [0, -2], sigma 1, n = 1.5 keeps z >= -1.5: {0}.
    x = [3.0, 1.0, 0.0, NEG]
    assert keep_of(x, temperature=1.0, top_n_sigma=1.0)[0] == [0]
    assert keep_of(x, temperature=1.0, top_n_sigma=2.0)[0] == [0, 1]
    assert keep_of(x, temperature=0.5, top_n_sigma=2.0)[0] == [0, 1]   # scale-invariant
    assert keep_of(x, temperature=1.0, top_n_sigma=3.0)[0] == [0, 1, 2]
    assert keep_of(x, temperature=1.0, top_k=2, top_n_sigma=1.5)[0] == [0]
    assert keep_of(x, temperature=1.0, top_k=2, top_n_sigma=2.5)[0] == [0, 1]


def test_typical_p_keeps_a_band_around_the_entropy():
    # cases/filters/typical-p-drops-most-likely: x = [2, 1, 0.5, 0, -1], typical order 1, 0, 2, 3, 4 with
    # inclusive masses 0.2071, 0.7701, 0.8958, 0.9720, 1: typical_p 0.15 -> {1}, 0.5 -> {0, 1}, 0.95 ->
    # {0, 1, 2, 3}; min_keep 3 with 0.15 -> the three most typical {0, 1, 2}.
    x = [2.0, 1.0, 0.5, 0.0, -1.0]
    assert keep_of(x, temperature=1.0, typical_p=0.15)[0] == [1]
    assert keep_of(x, temperature=1.0, typical_p=0.5)[0] == [0, 1]
    assert keep_of(x, temperature=1.0, typical_p=0.95)[0] == [0, 1, 2, 3]
    assert keep_of(x, temperature=1.0, typical_p=0.15, min_keep=3)[0] == [0, 1, 2]
    # two tokens tie in typicality (equal logits): both kept at the boundary ("mass_above")
    assert keep_of([1.0, 1.0], temperature=1.0, typical_p=0.3)[0] == [0, 1]


def test_xtc_cut_and_mixture_flags():
    # x = [2, 1, 0, -1, -2], threshold 0.1: p = [0.636, 0.234, 0.086, ...]: the leading run is {0, 1}, cut
    # removes token 0. probability 1: the cut is the outcome; 0.5: a mixture of {1..4} and all five; a run of one
    # token ([3, 1, 0, -1] at 0.2) cuts nothing; min_keep 5 (4 would remain) cuts nothing.
    x = [2.0, 1.0, 0.0, -1.0, -2.0]
    assert keep_of(x, temperature=1.0, xtc_probability=1.0, xtc_threshold=0.1) == ([1, 2, 3, 4], [1, 2, 3, 4], False)
    assert keep_of(x, temperature=1.0, xtc_probability=0.5, xtc_threshold=0.1) == ([0, 1, 2, 3, 4], [1, 2, 3, 4], True)
    assert keep_of([3.0, 1.0, 0.0, -1.0], temperature=1.0, xtc_probability=0.5, xtc_threshold=0.2)[2] is False
    assert keep_of(x, temperature=1.0, xtc_probability=1.0, xtc_threshold=0.1, min_keep=5)[0] == [0, 1, 2, 3, 4]
    assert keep_of(x, temperature=1.0, xtc_probability=1.0, xtc_threshold=0.51)[0] == [0, 1, 2, 3, 4]  # inactive


def test_apply_chain_hands_the_kernel_masked_logits_or_mixture_logprobs():
    # row 0: XTC probability 1 at threshold 0.1 on [2, 1, 0, -1, -2]: token 0 becomes -inf, T stays 0.7.
    # row 1: probability 0.5: log of 0.5 * softmax([1, 0, -1, -2]) on 1..4 + 0.5 * softmax(x), at T = 1:
    # [0.3182043233, 0.4390179586, 0.1615056813, 0.0594146198, 0.0218574171] (T = 1 there).
    x = [2.0, 1.0, 0.0, -1.0, -2.0]
    adms = [admit(row(x, temperature=0.7, xtc_probability=1.0, xtc_threshold=0.1)),
            admit(row(x, temperature=1.0, xtc_probability=0.5, xtc_threshold=0.1))]
    y = torch.tensor([x, x, x], dtype=torch.float32)
    prm = chain_params(adms, torch.tensor([0.7, 1.0], dtype=torch.float64))
    out, temp = apply_chain(y, torch.tensor([0, 2]), prm)
    assert out[0].tolist() == [NEG, 1.0, 0.0, -1.0, -2.0]
    assert out[1].tolist() == x   # not a chain row: untouched
    mix = [0.3182043233, 0.4390179586, 0.1615056813, 0.0594146198, 0.0218574171]
    assert out[2].tolist() == pytest.approx([math.log(v) for v in mix], abs=1e-6)
    assert temp.tolist() == pytest.approx([0.7, 1.0])
    assert y[0].tolist() == x   # the rewritten logits are not modified


def test_needs_chain_only_for_the_extra_filters():
    assert not needs_chain(admit(row([0.0, 1.0], temperature=1.0, top_p=0.9, min_p=0.1)))
    assert needs_chain(admit(row([0.0, 1.0], temperature=1.0, min_keep=1)))
    assert not needs_chain(admit(row([0.0, 1.0], temperature=1.0, xtc_probability=0.5, xtc_threshold=0.6)))


@pytest.mark.parametrize("field,value", [("typical_p", 0.0), ("typical_p", 1.5), ("min_keep", -1),
                                         ("top_n_sigma", float("nan")), ("xtc_probability", 1.5),
                                         ("xtc_threshold", float("nan")), ("mirostat", 3)])
def test_admission_rejects_out_of_domain_extra_filter_values(field, value):
    out = FusedSession(DEV).step([row([0.0, 1.0], temperature=1.0, **{field: value})])[0]
    assert out.error == "invalid_sampler_param"


def test_step_matches_the_reference_beside_plain_rows():
    # a batch of plain and chain rows, seeded: tokens, probabilities, RAW and PROCESSED logprobs, rank and the top
    # list against the reference's step (which decides each filter by its own code, impls/reference/filters.py)
    g = torch.Generator().manual_seed(7)
    V = 40
    xs = [torch.randn(V, generator=g) * 2 for _ in range(6)]
    kws = [dict(temperature=0.8, top_p=0.9),
           dict(temperature=0.8, typical_p=0.6, min_keep=2),
           dict(temperature=1.2, top_k=20, top_n_sigma=1.0),
           dict(temperature=1.0, xtc_probability=0.5, xtc_threshold=0.05, top_p=0.95),
           dict(temperature=0.9, min_p=0.2, min_keep=6),
           dict(temperature=1.0, xtc_probability=1.0, xtc_threshold=0.05, logprobs_mode="processed_logprobs")]
    rows = [Row(logits=x, seed=100 + i, slot=i, logprobs=3, **kw) for i, (x, kw) in enumerate(zip(xs, kws))]
    got = FusedSession(DEV).step(rows)
    ref = ReferenceSession().step(rows)
    for i, (a, b) in enumerate(zip(got, ref)):
        assert a.error is None and b.error is None, i
        assert a.token == b.token, i
        assert a.probs.cpu().tolist() == pytest.approx(b.probs.tolist(), abs=1e-6), i
        assert a.logprob == pytest.approx(b.logprob, abs=1e-5), i
        assert a.processed_logprob == pytest.approx(b.processed_logprob, abs=1e-5), i
        assert a.rank == b.rank, i
        assert [t for t, _ in a.top_logprobs] == [t for t, _ in b.top_logprobs], i
    # the cut tokens of the XTC row (row 5) are still in its RAW top list, and its processed vector is -inf there
    assert got[5].probs[int(torch.argmax(xs[5]))] == 0.0


def test_unsupported_names_the_mixture_with_processed_logits():
    f = FusedImpl()
    assert f.unsupported(row([0.0, 1.0], xtc_probability=0.5, logprobs_mode="processed_logits")) is not None
    assert f.unsupported(row([0.0, 1.0], xtc_probability=1.0, logprobs_mode="processed_logits")) is None
    assert f.unsupported(row([0.0, 1.0], typical_p=0.5, min_keep=2, top_n_sigma=1.0)) is None
    assert f.unsupported(row([0.0, 1.0], mirostat=2)) is None


ZIPF = [0.0, -1.3862943611198906, -2.1972245773362196, -2.772588722239781, -3.2188758248682006]


def _sizes(x, T, version, mus):
    from impls.fused.mirostat import mirostat_keep
    R = len(mus)
    keep = mirostat_keep(torch.tensor([x] * R, dtype=torch.float32), torch.full((R,), T),
                         torch.full((R,), version, dtype=torch.int64), torch.tensor(mus, dtype=torch.float32))
    return keep.sum(-1).tolist(), keep


def test_mirostat_v1_keeps_int_k_of_the_zipf_estimate():
    # cases/filters/mirostat-v1-zipf-k: p ~ 1 / (i + 1)^2, s = 2, eps = 1, k = sqrt(1.25 * 2^mu): mu 1 -> 1.58 -> 1,
    # mu 2 -> 2.24 -> 2, mu 4 -> 4.47 -> 4, mu 6 -> 8.94 -> min(8, 5) = 5, mu -2 -> 0.56 -> max(0, 1) = 1; at T = 0.5
    # s = 4, eps = 3, mu 2: k = (12 / (1 - 5^-3))^(1/4) = 1.86 -> 1. The kept sets are prefixes by logit.
    sizes, keep = _sizes(ZIPF, 1.0, 1, [1.0, 2.0, 4.0, 6.0, -2.0])
    assert sizes == [1, 2, 4, 5, 1]
    assert keep[2].tolist() == [True, True, True, True, False]
    assert _sizes(ZIPF, 0.5, 1, [2.0])[0] == [1]
    # a zero probability among the first m pairs makes k NaN: INT_MIN, so one token
    assert _sizes([0.0, 0.0, NEG, NEG], 1.0, 1, [10.0])[0] == [1]


def test_mirostat_v2_keeps_the_prefix_below_mu():
    # cases/filters/mirostat-v2-cut-by-tau: surprise -log2 softmax([2, 1, 0.5, 0, -1]) = [0.829, 2.271, 2.993,
    # 3.714, 5.157]: mu 0.8 -> 1 (an empty prefix keeps the first), 2 -> 1, 3 -> 3, 4 -> 4, 6 -> 5, -2 -> 1; at
    # T = 2 the surprises are [1.417, 2.138, 2.499, 2.859, 3.581]: mu 3 -> 4.
    x = [2.0, 1.0, 0.5, 0.0, -1.0]
    assert _sizes(x, 1.0, 2, [0.8, 2.0, 3.0, 4.0, 6.0, -2.0])[0] == [1, 1, 3, 4, 5, 1]
    assert _sizes(x, 2.0, 2, [3.0])[0] == [4]
    # the order among equal logits is the lowest id first: [1, 3, 3, 0] at mu 1.5 (surprises 1, 1, 3.8..) keeps {1, 2}
    assert torch.nonzero(_sizes([1.0, 3.0, 3.0, 0.0], 1.0, 2, [1.5])[1][0]).flatten().tolist() == [1, 2]


def test_mirostat_rows_skip_penalties_and_filters_but_not_the_bias():
    # cases/filters/mirostat-ignores-filters: v2, tau 1.5 on [2, 1, 0.5, 0, -1]: {0, 1, 2} whatever top_k, min_p and
    # the repetition penalty say; a bias of 2.5 on id 4 makes it [2, 1, 0.5, 0, 1.5]: {0, 4, 1}.
    x = [2.0, 1.0, 0.5, 0.0, -1.0]
    base = dict(temperature=1.0, mirostat=2, mirostat_tau=1.5, seed=24)
    out = FusedSession(DEV).step([row(x, top_k=2, min_p=0.5, repetition_penalty=2.0, prompt=[0], slot=0, **base),
                                  row(x, logit_bias=[(4, 2.5)], slot=1, **base)])
    assert out[0].rewritten_logits.cpu().tolist() == x
    assert out[0].probs.cpu().tolist() == pytest.approx([0.6285317192, 0.2312238976, 0.1402443832, 0, 0], abs=1e-6)
    assert torch.nonzero(out[1].probs.cpu()).flatten().tolist() == [0, 1, 4]


def test_mirostat_mu_follows_the_slot_across_steps_as_the_reference():
    # one request in slot 0 for five steps (v2, tau 2, eta 0.5: mu moves by several tenths a step) and a new request
    # in slot 1 at step 3 (its mu restarts at 2 tau): tokens and kept sets equal the reference's step for step
    g = torch.Generator().manual_seed(3)
    x = (torch.randn(30, generator=g) * 1.5).tolist()
    fused, ref = FusedSession(DEV), ReferenceSession()
    for step in range(5):
        rows = [row(x, temperature=1.0, mirostat=2, mirostat_tau=2.0, mirostat_eta=0.5, seed=5, slot=0, request_id="a"),
                row(x, temperature=1.0, mirostat=1, mirostat_tau=3.0, mirostat_eta=0.3, seed=6, slot=1,
                    request_id="b" if step < 3 else "c")]
        a, b = fused.step(rows), ref.step(rows)
        for i in range(2):
            assert a[i].token == b[i].token, (step, i)
            assert (a[i].probs.cpu() > 0).tolist() == (b[i].probs > 0).tolist(), (step, i)
    mu = fused.mu.current([0], [fused.mu._slots[0][0]], [2.0])
    assert float(mu[0]) != pytest.approx(4.0)   # it moved from 2 tau


def test_typical_ties_are_equal_keys_kept_together_at_the_boundary():
    # q = [1/2, 1/4, 1/8, 1/8] (x = ln of it): -log q = [0.6931, 1.3863, 2.0794, 2.0794], H = 1.2130 (1.75 bits);
    # keys |-log q - H| = [0.5199, 0.1733, 0.8664, 0.8664]: typical order 1, 0, {2, 3}. Mass 0.7: token 1 (0 before),
    # token 0 (0.25 before) kept; the tie group {2, 3} has 0.75 before: dropped -> {0, 1}. Mass 0.8: {2, 3} both.
    # (keys that tie across H with unequal q are not exactly representable in small examples: the groups are equal
    # keys either way, impls/fused/chain._mass_above's key)
    x = [math.log(0.5), math.log(0.25), math.log(0.125), math.log(0.125)]
    assert keep_of(x, temperature=1.0, typical_p=0.7)[0] == [0, 1]
    assert keep_of(x, temperature=1.0, typical_p=0.8)[0] == [0, 1, 2, 3]


def test_apply_chain_copies_a_row_whose_dynamic_temperature_reached_zero():
    x = [2.0, 1.0, 0.0]
    adms = [admit(row(x, temperature=1.0, typical_p=0.2))]
    prm = chain_params(adms, torch.tensor([0.0], dtype=torch.float64))
    out, temp = apply_chain(torch.tensor([x]), torch.tensor([0]), prm)
    assert out[0].tolist() == x and temp.tolist() == [0.0]


def test_review_findings_agree_with_the_reference():
    # a reviewer's fuzz (2026-12-07): (1) XTC at a threshold <= -1 counted removed tokens (sorted last at -1) in its
    # run: over the survivors [2, 1, 0.5, 0] (id 3 is -inf) every token is likely, the run is all four, the cut
    # keeps the last, id 4 (logit 0); with top_k 3, id 2. (2) a greedy or beam mirostat row kept its penalties
    # (common's mirostat chain has none, whatever the mode): token 0 at logits [3, 2, 3, 1], not 2. (3) a min_keep
    # of 2**64 - 1 (valid: keep all) overflowed int64 and lost the batch. (4) top_n_sigma = inf on tied logits: the
    # bound max - inf * 0 is NaN, llama.cpp's "< bound" removes none (the reference crashed, the step found none).
    neg = float("-inf")
    x = [2.0, 1.0, 0.5, neg, 0.0]
    rows = [row(x, temperature=1.0, xtc_probability=1.0, xtc_threshold=-1.0, seed=7, slot=0),
            row(x, temperature=1.0, xtc_probability=1.0, xtc_threshold=-2.0, top_k=3, seed=7, slot=1),
            row([3.0, 2.0, 3.0, 1.0], temperature=0.0, mirostat=2, repetition_penalty=2.0, prompt=[0], slot=2),
            row([3.0, 2.0, 3.0, 1.0], use_beam_search=True, mirostat=2, repetition_penalty=2.0, prompt=[0], slot=3),
            row([1.0, 0.0, -1.0, -2.0], temperature=1.0, top_p=0.5, min_keep=(1 << 64) - 1, seed=1, slot=4),
            row([1.0, 1.0, 1.0], temperature=1.0, top_n_sigma=float("inf"), seed=2, slot=5)]
    got = FusedSession(DEV).step(rows)
    ref = ReferenceSession().step(rows)
    assert [r.token for r in got] == [4, 2, 0, 0, got[4].token, got[5].token]
    for i, (a, b) in enumerate(zip(got, ref)):
        assert a.error is None and b.error is None, i
        assert a.token == b.token, i
        assert a.probs.cpu().tolist() == pytest.approx(b.probs.tolist(), abs=1e-6), i
    assert got[2].rewritten_logits.cpu().tolist() == [3.0, 2.0, 3.0, 1.0]
    assert got[4].probs.cpu().tolist() == pytest.approx([0.6439142599, 0.2368828181, 0.0871443187, 0.0320586033])
    # sample_many takes the same rewrites as the step: no penalty on a mirostat row
    m = row([2.0, 1.9, 1.0, 0.5, 0.0], temperature=1.0, mirostat=2, mirostat_tau=3.0, repetition_penalty=3.0,
            prompt=[0, 1])
    assert FusedSession(DEV).sample_many(m, range(40)).tolist() == ReferenceSession().sample_many(m, range(40)).tolist()


def test_a_dynamic_temperature_of_zero_keeps_the_argmax_alone_as_a_sampling_row():
    # x = [30, 0, 0, -5], T = 0.5, range 1 (lo 0, hi 1.5), exponent 400: H / ln 4 is about 1e-11, its 400th power 0,
    # so T' = 0: the reference's outcome is token 0 alone at T = 1 (SEMANTICS §1.5a), so its processed logits are
    # [30, -inf, -inf, -inf] and its processed logprobs [0, -inf, -inf, -inf] (a greedy row's would be every logit)
    x = [30.0, 0.0, 0.0, -5.0]
    base = dict(temperature=0.5, dynatemp_range=1.0, dynatemp_exponent=400.0, seed=3, logprobs=-1)
    rows = [row(x, logprobs_mode="processed_logits", slot=0, **base),
            row(x, logprobs_mode="processed_logprobs", slot=1, **base),
            row(x, logprobs_mode="processed_logits", typical_p=0.9, slot=2, **base)]
    out = FusedSession(DEV).step(rows)
    assert [o.token for o in out] == [0, 0, 0]
    assert out[0].vocab_logprobs.cpu().tolist() == [30.0, NEG, NEG, NEG]
    assert out[1].vocab_logprobs.cpu().tolist() == [0.0, NEG, NEG, NEG]
    assert out[2].vocab_logprobs.cpu().tolist() == [30.0, NEG, NEG, NEG]
    assert out[0].processed_logprob == 0.0


@pytest.mark.parametrize("field,value", [("min_keep", 2.0), ("typical_p", "0.5"), ("xtc_threshold", "x"),
                                         ("temperature", "1")])
def test_values_that_are_no_numbers_are_their_rows_error_in_both(field, value):
    # a fresh user's API probes (2026-12-07): min_keep = 2.0 crashed the reference's slicing, a text value both
    # comparisons, for the whole batch; now the row's error (the case schema refuses them), the plain rows sample
    rows = [row([0.0, 1.0, 2.0], temperature=1.0, seed=1, slot=0),
            row([0.0, 1.0, 2.0], temperature=1.0, seed=1, slot=1).replace(**{field: value}),
            row([0.0, 1.0, 2.0], temperature=0.0, slot=2)]
    kind = "invalid_temperature" if field == "temperature" else "invalid_sampler_param"
    for out in (FusedSession(DEV).step(rows), ReferenceSession().step(rows)):
        assert out[1].error == kind
        assert out[0].error is None and out[2].token == 2
