"""Tests of llama.cpp's samplers: the reference's model of them and the adapter (impls/llamacpp).

(a) ``impls.reference.mt19937`` against the values the C++ standard and libstdc++ fix
(no llama.cpp needed);
(b) the reference's new filters (typical-p, top-n-sigma, XTC, dynamic temperature,
min_keep) on hand-derived rows;
(c) with llama-cpp-python installed (``tox -e llamacpp``): the adapter's draws equal the
reference's under the ``llamacpp`` profile token for token on 12,000 seeded draws across
twelve chains, and the ``llamacpp`` profile's citations name symbols of the bundled source;
(d) mirostat v1/v2 (SEMANTICS §1.5a): by hand, and with llama-cpp-python token for token with the
reference over 9,600 rows (six chains, 200 seeds, eight steps each) plus first draws per seed, and
the adapter's ``run_scenario`` (the reference's driver, llama.cpp's chain per step).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from impls.base import Row
from impls.profiles import LLAMACPP, TRTLLM
from impls.reference import mt19937
from impls.reference.sampler import ReferenceSession

try:
    import llama_cpp  # noqa: F401
    _LLAMA = None
except Exception as e:  # ImportError, or a library that does not load
    _LLAMA = f"llama_cpp not importable: {type(e).__name__}: {e}"

needs_llama = pytest.mark.skipif(_LLAMA is not None, reason=_LLAMA or "")

X = torch.tensor([2.0, 1.0, 0.5, 0.0, -1.0])


# -- (a) the generator ------------------------------------------------------------------------

def test_mt19937_matches_the_standard():
    # [rand.predef]: the 10000th output of a default-constructed std::mt19937 (seed 5489) is 4123659995
    assert int(mt19937.outputs(5489, 9999, 1)[0]) == 4123659995
    # the vectorised seeding gives the same first outputs as the one-seed path
    both = mt19937.first_outputs([0, 1, 5489, 2 ** 32 - 2], 3)
    for j, s in enumerate([0, 1, 5489, 2 ** 32 - 2]):
        assert both[j].tolist() == mt19937.outputs(s, 0, 3).tolist()


def test_canonical_uniforms():
    # generate_canonical<double, 53>: (g1 + g2 * 2**32) / 2**64
    assert mt19937.uniform_double(0, 0) == 0.0
    assert mt19937.uniform_double(0, 1 << 31) == 0.5
    assert mt19937.uniform_double(2 ** 32 - 1, 2 ** 32 - 1) == math.nextafter(1.0, 0.0)   # rounds to 1: below it
    # generate_canonical<float, 24>: float(g) / 2**32, float(2**32 - 1) rounds to 2**32 -> below 1
    assert mt19937.uniform_float(1 << 31) == 0.5
    assert mt19937.uniform_float(2 ** 32 - 1) == float(np.nextafter(np.float32(1), np.float32(0)))


def test_engine_seed():
    assert mt19937.engine_seed(None) is None
    assert mt19937.engine_seed(0xFFFFFFFF) is None        # LLAMA_DEFAULT_SEED: random
    assert mt19937.engine_seed(-1) is None                # the same 32 low bits
    assert mt19937.engine_seed(7) == 7
    assert mt19937.engine_seed(2 ** 32 + 7) == 7          # uint32_t: the high bits are lost


def test_dist_walk():
    # weights expf(l - 2) of [2, 1, 0] in id order: 1, e^-1, e^-2 (sum 1.503214724); u = 0.7 -> target
    # 1.052250307: running sums 1, 1.367879441 -> the second candidate (token 1)
    order = torch.tensor([0, 1, 2])
    x = torch.tensor([2.0, 1.0, 0.0])
    assert mt19937.dist_pick(x, order, 1.0, 0.7) == 1
    assert mt19937.dist_pick(x, order, 1.0, 0.6) == 0      # target 0.9019288344 <= 1
    # descending order [2, 0, 1]-> walks 0 first whatever the ids
    assert mt19937.dist_pick(torch.tensor([0.0, 2.0, 1.0]), torch.tensor([1, 2, 0]), 1.0, 0.6) == 1


# -- (b) the new filters, by hand -------------------------------------------------------------

def _probs(profile, **kw):
    r = ReferenceSession(profile).step([Row(logits=X, seed=3, **kw)])[0]
    assert r.error is None, r.message
    return [round(float(v), 4) for v in r.probs]


def test_typical_top_n_sigma_xtc_min_keep_by_hand():
    # p = softmax([2, 1, .5, 0, -1]) = [.5630, .2071, .1256, .0762, .0280]
    # typical 0.5: H = 1.2064; |-ln p - H| = [.632, .368, .868, 1.368, 2.368]: token 1 (.2071), then
    # token 0 (cum .7701 >= .5) -> {0, 1}: [e, 1] / (e + 1)
    assert _probs(TRTLLM, temperature=1.0, typical_p=0.5) == [0.7311, 0.2689, 0.0, 0.0, 0.0]
    # top-n-sigma 1: mean 0.5, population std 1 -> logits >= 1 -> {0, 1}
    assert _probs(TRTLLM, temperature=1.0, top_n_sigma=1.0) == [0.7311, 0.2689, 0.0, 0.0, 0.0]
    # XTC 0.5 / 0.1: tokens 0, 1, 2 reach 0.1, so 0 and 1 are cut half the time:
    # 0.5 * p + 0.5 * softmax over {2, 3, 4} ([1.6487, 1, .3679] / 3.0166 = [.5465, .3315, .1220])
    assert _probs(TRTLLM, temperature=1.0, xtc_probability=0.5, xtc_threshold=0.1) == [
        0.2815, 0.1036, 0.3361, 0.2038, 0.075]
    # top_p 0.8 keeps {0, 1, 2} (mass above token 2 = .7701 < .8); min_keep 4 adds token 3:
    # [e^2, e, e^.5, 1] / 12.75605903
    assert _probs(TRTLLM, top_p=0.8, min_keep=4) == [0.5793, 0.2131, 0.1293, 0.0784, 0.0]
    # dynamic temperature, range 0.5 around 1: H / ln 5 = 1.2064 / 1.6094 = .7496 -> T' = 1.2496
    assert _probs(TRTLLM, temperature=1.0, dynatemp_range=0.5) == [0.4895, 0.2199, 0.1474, 0.0988, 0.0444]


def test_llamacpp_profile_applies_temperature_last():
    # min_p 0.3 at T = 2: the default profile sees softmax(x / 2) (ratios [1, .607, .472, .368, .223]:
    # {0, 1, 2, 3}); llama.cpp's chain sees softmax(x) (ratios [1, .368, .223, .135, .050]: {0, 1}), then
    # divides by 2: [e^1, e^.5] / (e^1 + e^.5) = [.6225, .3775]
    assert _probs(LLAMACPP, temperature=2.0, min_p=0.3) == [0.6225, 0.3775, 0.0, 0.0, 0.0]
    assert _probs(TRTLLM, temperature=2.0, min_p=0.3)[4] == 0.0
    assert _probs(TRTLLM, temperature=2.0, min_p=0.3)[3] > 0


def test_validation_of_the_new_parameters():
    def err(profile, **kw):
        return ReferenceSession(profile).step([Row(logits=X, temperature=1.0, seed=1, **kw)])[0].error
    assert err(TRTLLM, typical_p=0.0) == "invalid_sampler_param"
    assert err(TRTLLM, min_keep=-1) == "invalid_sampler_param"
    assert err(TRTLLM, xtc_probability=1.5) == "invalid_sampler_param"
    assert err(TRTLLM, top_n_sigma=float("nan")) == "invalid_sampler_param"
    assert err(LLAMACPP, typical_p=1.5) is None            # llama.cpp checks nothing
    assert err(LLAMACPP, typical_p=float("nan")) is None   # NaN compares false: every token kept
    assert err(LLAMACPP, min_keep=-1) is None               # a size_t: 2**64 - 1, every token kept
    assert _probs(LLAMACPP, temperature=1.0, top_p=0.5, min_keep=-1) == _probs(LLAMACPP, temperature=1.0)


def test_adapter_refuses_what_the_reference_does_not_model():
    from impls.llamacpp import LlamaCppImpl
    impl = LlamaCppImpl()
    assert impl.unsupported(Row(logits=X, temperature=1.0)) is None
    assert "NaN" in impl.unsupported(Row(logits=X, temperature=1.0, dynatemp_range=0.5,
                                         dynatemp_exponent=float("nan")))
    assert impl.unsupported(Row(logits=X, temperature=1.0, dynatemp_range=float("nan"))) is None
    assert "negative" in impl.unsupported(Row(logits=X, temperature=-1.0))


# -- (c) the adapter ---------------------------------------------------------------------------

CHAINS = [
    dict(temperature=0.7), dict(temperature=1.0, typical_p=0.5), dict(temperature=1.3, top_n_sigma=1.0),
    dict(temperature=1.0, xtc_probability=0.5, xtc_threshold=0.1), dict(temperature=1.0, dynatemp_range=0.5),
    dict(top_p=0.8, min_keep=3), dict(top_k=3, temperature=0.9), dict(min_p=0.2),
    dict(top_p=0.9, temperature=2.0), dict(repetition_penalty=1.3, presence_penalty=0.5, prompt=[0, 1, 1],
                                           temperature=1.0),
    dict(logit_bias=[[4, 3.0]], temperature=0.5), dict(typical_p=0.9, top_p=0.95, min_p=0.05, temperature=0.8),
]


@needs_llama
def test_seeded_draws_equal_the_reference_token_for_token():
    from impls.llamacpp import LlamaCppImpl
    impl = LlamaCppImpl()
    x = torch.tensor([2.0, 1.0, 0.5, 0.0, -1.0, 0.25, 1.5])
    total = 0
    for kw in CHAINS:
        row = Row(logits=x, **kw)
        seeds = list(range(1000))
        ref = ReferenceSession(LLAMACPP).first_draws(row, seeds)
        got = [o.token for o in impl.open_session("cpu").step([row.replace(seed=s, slot=j)
                                                                for j, s in enumerate(seeds)])]
        assert got == ref, (kw, [(s, a, b) for s, a, b in zip(seeds, got, ref) if a != b][:5])
        total += len(seeds)
        assert len(set(got)) > 1          # the draws are random, not one token
    assert total == 12_000


@needs_llama
def test_a_slot_keeps_its_stream_across_steps():
    # one request, three steps: dist's generator continues (outputs 2, 3 of mt19937(11) at step 2, ...)
    from impls.llamacpp import LlamaCppImpl
    row = Row(logits=torch.tensor([0.5, 0.4, 0.3, 0.2, 0.1, 0.0]), temperature=1.0, seed=11, request_id="a")
    s, ref = LlamaCppImpl().open_session("cpu"), ReferenceSession(LLAMACPP)
    got = [s.step([row])[0].token for _ in range(6)]
    want = [ref.step([row])[0].token for _ in range(6)]
    assert got == want
    g = mt19937.outputs(11, 0, 12)
    ids, cum = mt19937.walk(row.logits, torch.arange(6), 1.0)
    hand = [int(ids[np.searchsorted(cum, cum[-1] * mt19937.uniform_double(int(g[2 * k]), int(g[2 * k + 1])))])
            for k in range(6)]
    assert got == hand


@needs_llama
def test_profile_citations_name_functions_of_the_bindings():
    import re
    import llama_cpp
    cited = set()
    for text in LLAMACPP.citations.values():
        cited |= set(re.findall(r"\b(llama_sampler_init_\w+)", text))
    assert {"llama_sampler_init_typical", "llama_sampler_init_xtc", "llama_sampler_init_temp_ext"} <= cited
    for sym in sorted(cited):
        assert callable(getattr(llama_cpp, sym, None)), sym


def test_dry_by_hand():
    # history [0, 1, 2, 0, 1], allowed 2, multiplier 1, base 2: the end [0, 1] occurred before, followed
    # by token 2 (shift 3: W[4] = W[1] = 1, W[3] = W[0] = 0, n = 2 >= 2) -> token 2 loses 1 * 2 ** 0 = 1;
    # shifts 1, 2, 4 match nothing (W[4] = 1 against W[3] = 0, W[2] = 2, W[0] = 0)
    row = Row(logits=torch.zeros(4), temperature=0.0, prompt=[0, 1, 2], generated=[0, 1], dry_multiplier=1.0,
              dry_base=2.0, dry_allowed_length=2)
    r = ReferenceSession(TRTLLM).step([row])[0]
    assert r.rewritten_logits.tolist() == [0.0, 0.0, -1.0, 0.0]
    # allowed 1: shift 3 gives n = 2 -> 2 ** 1 = 2 for token 2; shift 1 (W[4] = 1 vs W[3] = 0) nothing;
    # the one-token suffix [1] also occurred at position 1 (shift 3 covers it): still token 2 alone
    assert ReferenceSession(TRTLLM).step([row.replace(dry_allowed_length=1)])[0].rewritten_logits.tolist() == [
        0.0, 0.0, -2.0, 0.0]
    # a one-token breaker 0 at the window's second-to-last position limits n to 1 < 2: no penalty
    assert ReferenceSession(TRTLLM).step([row.replace(dry_sequence_breakers=[[0]])])[0].rewritten_logits.tolist() == [
        0.0, 0.0, 0.0, 0.0]


@needs_llama
def test_dry_equals_llamacpp_on_random_histories():
    import random
    from impls.llamacpp import LlamaCppImpl
    rnd = random.Random(0)
    impl = LlamaCppImpl()
    for trial in range(200):
        hist = [rnd.randrange(6) for _ in range(rnd.randrange(0, 14))]
        kw = dict(dry_multiplier=rnd.choice([0.8, 1.0, 2.0]), dry_base=rnd.choice([1.0, 1.75, 3.0]),
                  dry_allowed_length=rnd.choice([0, 1, 2, 3]))
        if rnd.random() < 0.5:
            kw["dry_penalty_last_n"] = rnd.randrange(0, 10)
        row = Row(logits=torch.tensor([rnd.uniform(-2, 2) for _ in range(6)]), temperature=1.0, seed=trial,
                  prompt=hist[:3], generated=hist[3:], **kw)
        ref = ReferenceSession(LLAMACPP).step([row])[0]
        got = impl.open_session("cpu").step([row])[0]
        assert got.token == ref.token and torch.allclose(got.probs, ref.probs.double(), atol=1e-5), (kw, hist)


def test_adapter_refuses_minus_inf_candidates_where_llamacpp_counts_them():
    # found by a fresh-user run: llama.cpp keeps -inf candidates in its array, where typical-p's entropy
    # turns NaN and dynamic temperature's log(size) and XTC's min_keep count them
    from impls.llamacpp import LlamaCppImpl
    impl = LlamaCppImpl()
    y = torch.tensor([2.0, 1.1, float("-inf"), 0.2])
    assert "-inf candidates" in impl.unsupported(Row(logits=y, temperature=1.0, typical_p=0.9))
    assert "-inf candidates" in impl.unsupported(Row(logits=y, temperature=1.0, dynatemp_range=0.5))
    assert "-inf candidates" in impl.unsupported(Row(logits=X, temperature=1.0, top_n_sigma=1.0,
                                                     xtc_probability=1.0, min_keep=3))
    assert impl.unsupported(Row(logits=y, temperature=1.0, top_p=0.9)) is None
    assert "wrap" in impl.unsupported(Row(logits=X, temperature=1.0, top_k=2 ** 32 + 1))
    assert "dynamic temperature" in impl.unsupported(Row(logits=X, temperature=0.0, dynatemp_range=0.5))


# -- mirostat v1 / v2 (SEMANTICS §1.5a) ---------------------------------------------------------

def test_mirostat_by_hand():
    from impls.reference import mirostat as mr
    # v2, mu = 2 * 1.5: surprises -log2 softmax(X) = 0.8287, 2.2714, 2.9928, 3.7141, 5.1568 -> the first three
    st = mr.mirostat_step(X, 1.0, 2, 1.5, 0.1)
    assert st.ids.tolist() == [0, 1, 2] and st.mu == 3.0
    assert np.allclose(st.p, [0.6285317192, 0.2312238976, 0.1402443832], atol=1e-7)
    # v1 on Zipf(2) probabilities: s_hat = 2, k = sqrt(1.25 * 2**mu); mu = 4 -> k = 4.47 -> 4 tokens
    z = torch.tensor([-2 * math.log(i + 1) for i in range(5)])
    st = mr.mirostat_step(z, 1.0, 1, 2.0, 0.1)
    assert abs(st.s_hat - 2.0) < 1e-5 and abs(st.k - math.sqrt(20)) < 1e-4 and st.ids.tolist() == [0, 1, 2, 3]
    # the update: mu - eta * (-log2 p - tau), float32
    assert mr.update(3.0, 1.5, 0.5, 0.25) == 3.0 - 0.5 * (2.0 - 1.5)
    # x86's conversion of a NaN or huge k
    assert mr.int_of_float(float("nan")) == mr.int_of_float(float("inf")) == -(1 << 31)
    # std::discrete_distribution: one weight reads no random number; lower_bound of u in the table
    assert mr.pick(np.array([1.0], np.float32), None) == 0
    assert mr.pick(np.array([0.5, 0.5], np.float32), 0.5) == 0 and mr.pick(np.array([0.5, 0.5], np.float32), 0.51) == 1


def test_mirostat_validation():
    ref = ReferenceSession(TRTLLM)
    for kw in (dict(mirostat=3), dict(mirostat=2, mirostat_tau=float("nan")), dict(mirostat=1, mirostat_eta=float("nan"))):
        assert ref.step([Row(logits=X, temperature=1.0, **kw)])[0].error == "invalid_sampler_param", kw
    # llama.cpp takes any tau and eta: NaN tau under the llamacpp profile cuts nothing (v2)
    r = ReferenceSession(LLAMACPP).step([Row(logits=X, temperature=1.0, mirostat=2, mirostat_tau=float("nan"))])[0]
    assert r.error is None and int((r.probs > 0).sum()) == 5


def test_mirostat_mu_is_per_slot_state():
    # mu moves after each token and a new request in the slot starts from 2 * tau again
    ref = ReferenceSession(LLAMACPP)
    row = Row(logits=torch.tensor([0.0, -3.0]), temperature=1.0, mirostat=2, mirostat_tau=0.75, mirostat_eta=-0.25,
              seed=5, request_id="a")
    for _ in range(2):
        ref.step([row])
    from impls.reference.modes import resolve
    key = ref._mirostat_key(row, resolve(row, LLAMACPP))
    assert ref.mu.current(0, key, 0.75) == 1.125           # 1.5 - 0.1875 twice
    probe = row.replace(logits=torch.tensor([0.0, -0.5]))
    assert int((ref.step([probe])[0].probs > 0).sum()) == 1   # mu 1.125 < 1.4053: token 1 cut
    fresh = probe.replace(request_id="b")
    assert int((ref.step([fresh])[0].probs > 0).sum()) == 2   # a new request: mu 1.5 keeps both


MIROSTAT_CHAINS = [
    dict(mirostat=1), dict(mirostat=2), dict(mirostat=1, mirostat_tau=3.0, mirostat_eta=0.5, temperature=0.7),
    dict(mirostat=2, mirostat_tau=2.0, mirostat_eta=1.0, temperature=1.3),
    dict(mirostat=2, mirostat_tau=1.0, logit_bias=[[3, 2.0]], temperature=1.0),
    dict(mirostat=1, mirostat_tau=0.0, mirostat_eta=0.0, temperature=1.0),
]


@needs_llama
def test_mirostat_token_for_token_over_seeds_and_steps():
    # 6 chains x 200 seeds x 8 steps (random logits per step, V = 300: above llama.cpp's 128-element sort
    # threshold) on one session per chain: llama.cpp's mirostat samplers and the reference agree token for token
    from impls.llamacpp import LlamaCppImpl
    impl = LlamaCppImpl()
    total = moved = 0
    for c, kw in enumerate(MIROSTAT_CHAINS):
        g = torch.Generator().manual_seed(c)
        steps = [torch.randn(300, generator=g) * 2.5 for _ in range(8)]
        seeds = list(range(200))
        eng, ref = impl.open_session("cpu"), ReferenceSession(LLAMACPP)
        sizes = set()
        for x in steps:
            rows = [Row(logits=x, seed=s, slot=j, request_id=("r", j), **kw) for j, s in enumerate(seeds)]
            got, want = eng.step(rows), ref.step(rows)
            assert [o.token for o in got] == [o.token for o in want], (kw, [
                (s, a.token, b.token) for s, a, b in zip(seeds, got, want) if a.token != b.token][:5])
            for a, b in zip(got, want):
                assert torch.equal(a.probs > 0, b.probs > 0)
                sizes.add(int((a.probs > 0).sum()))
            total += len(rows)
        moved += len(sizes) > 1      # mu moved the kept set between steps or seeds
    assert total == 9_600 and moved >= 4


@needs_llama
def test_mirostat_first_draws_equal_the_engine():
    from impls.llamacpp import LlamaCppImpl
    for kw in MIROSTAT_CHAINS[:4]:
        row = Row(logits=torch.tensor([2.0, 1.0, 0.5, 0.0, -1.0, 0.25, 1.5]), **kw)
        seeds = list(range(2000))
        assert LlamaCppImpl().open_session("cpu").draw_tokens(row, seeds) == \
            ReferenceSession(LLAMACPP).first_draws(row, seeds), kw


@needs_llama
def test_run_scenario_on_llamacpp_samplers():
    # the reference's driver, llama.cpp's chain per step: a request's slot state lives as long as the request
    from pathlib import Path
    from harness.corpus.load import load_case
    from impls.llamacpp import LlamaCppImpl
    from impls.reference import Reference
    from impls.reference.scenario_types import ScenarioUnsupported
    spec = load_case(Path(__file__).parents[1] / "cases/filters/mirostat-mu-across-steps.toml").scenario.spec
    got, want = LlamaCppImpl().run_scenario(spec), Reference(LLAMACPP).run_scenario(spec)
    for rid, r in want.requests.items():
        a = got.requests[rid]
        assert (a.error, a.tokens, a.finish_reason, a.finish_step) == (r.error, r.tokens, r.finish_reason,
                                                                       r.finish_step), rid
        assert [s.support for s in a.steps] == [s.support for s in r.steps], rid
    assert got.requests["em01"].steps[2].support == [0] and got.requests["e0"].steps[2].support == [0, 1]
    import dataclasses
    r0 = spec.requests[0]
    beam = dataclasses.replace(spec, requests=[dataclasses.replace(r0, beam_width=2,
                                                                   fields={**r0.fields, "use_beam_search": True})])
    with pytest.raises(ScenarioUnsupported):
        LlamaCppImpl().run_scenario(beam)
