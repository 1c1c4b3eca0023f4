"""The FlashInfer adapter: its plumbing on the CPU with a recording stand-in, the real library on a GPU.

The stand-in (``_FakeSampling``) is not a model of FlashInfer's kernels: it
records which function each group of rows reached, with which per-row
tensors, and answers fixed tokens, so that grouping, seeds, offsets, greedy
normalisation and the per-row errors of ``return_valid`` are checked exactly.
The GPU test at the end runs the installed FlashInfer.
"""

from __future__ import annotations

import math
import sys
import types

import pytest
import torch

from impls import registry
from impls.base import Row
from impls.flashinfer import FUNCTIONS, FlashInferSession, row_function, scenario_unsupported
from impls.profiles import FLASHINFER, FLASHINFER_JOINT
from impls.reference.scenario import RequestSpec, ScenarioSpec
from impls.reference.scripted import TableModel


class _FakeSampling(types.ModuleType):
    """Records calls; answers the argmax of each row and ``valid = all finite``."""

    def __init__(self):
        super().__init__("flashinfer.sampling")
        self.calls = []

    def softmax(self, x, temperature):
        self.calls.append(("softmax", x.shape[0], temperature.tolist()))
        return torch.softmax(x / temperature.unsqueeze(1), -1)

    def _sample(self, name, probs, seed, offset, **params):
        self.calls.append((name, probs.shape[0], seed.tolist(), offset.tolist(),
                           {k: v.tolist() for k, v in params.items()}))
        valid = torch.isfinite(probs).all(-1)
        return torch.nan_to_num(probs, nan=-1.0).argmax(-1).to(torch.int32), valid

    def sampling_from_probs(self, probs, deterministic, seed, offset, return_valid):
        return self._sample("sampling_from_probs", probs, seed, offset)

    def top_k_sampling_from_probs(self, probs, K, deterministic, seed, offset, return_valid):
        return self._sample("top_k_sampling_from_probs", probs, seed, offset, top_k=K)

    def top_p_sampling_from_probs(self, probs, P, deterministic, seed, offset, return_valid):
        return self._sample("top_p_sampling_from_probs", probs, seed, offset, top_p=P)

    def top_k_top_p_sampling_from_probs(self, probs, K, P, filter_apply_order, deterministic, seed, offset,
                                        return_valid):
        self.order = filter_apply_order
        return self._sample("top_k_top_p_sampling_from_probs", probs, seed, offset, top_k=K, top_p=P)

    def min_p_sampling_from_probs(self, probs, M, deterministic, seed, offset, return_valid):
        return self._sample("min_p_sampling_from_probs", probs, seed, offset, min_p=M)

    def top_k_renorm_probs(self, probs, K):
        return probs

    def top_p_renorm_probs(self, probs, P):
        return probs

    #: The fixed uniform of the stand-in's acceptance test.
    chain_u = 0.5

    def chain_speculative_sampling(self, draft_probs, draft_token_ids, target_probs,
                                   maybe_output_accepted_token_num=None, maybe_output_emitted_draft_token_num=None,
                                   deterministic=True, generator=None, seed=None, offset=None):
        """The rule of ``ChainSpeculativeSampling`` with a fixed ``u`` and an argmax for the draw.

        Accept draft ``i`` while ``u * q_i(d) < p_i(d)``; at the first rejection ``pos`` (or ``K``)
        emit ``argmax relu(p_pos - q_pos)`` (``q_K = 0``); pad with -1. Returns the tokens, the
        independent acceptance count and ``emitted_draft_token_num``.
        """
        self.calls.append({"name": "chain_speculative_sampling", "draft_probs": draft_probs.clone(),
                           "draft_token_ids": draft_token_ids.clone(), "target_probs": target_probs.clone(),
                           "seed": seed.tolist(), "offset": offset.tolist(), "deterministic": deterministic,
                           "generator": generator})
        B, K, V = draft_probs.shape
        out = torch.full((B, K + 1), -1, dtype=torch.int32)
        independent = torch.zeros(B, dtype=torch.int32)
        emitted = torch.zeros(B, dtype=torch.int32)
        u = self.chain_u
        for b in range(B):
            ok = [bool(u * draft_probs[b, i, d] < target_probs[b, i, d])
                  for i, d in enumerate(draft_token_ids[b].tolist())]
            pos = ok.index(False) if False in ok else K
            out[b, :pos] = draft_token_ids[b, :pos]
            q = draft_probs[b, pos] if pos < K else torch.zeros(V)
            out[b, pos] = int(torch.clamp(target_probs[b, pos] - q, min=0).argmax())
            independent[b], emitted[b] = pos + sum(ok[pos + 1:]), pos
        return out, independent, emitted


def _install(monkeypatch, mod):
    """Put ``mod`` where ``import flashinfer.sampling`` finds it, for one test."""
    pkg = types.ModuleType("flashinfer")
    pkg.sampling = mod
    monkeypatch.setitem(sys.modules, "flashinfer", pkg)
    monkeypatch.setitem(sys.modules, "flashinfer.sampling", mod)


@pytest.fixture
def fake(monkeypatch):
    mod = _FakeSampling()
    _install(monkeypatch, mod)
    return mod


X = torch.tensor([0.0, 2.0, 1.0, -1.0])


def _res(top_k, top_p, min_p):
    from impls.reference.modes import SAMPLING, Resolved
    return Resolved(SAMPLING, top_k=top_k, top_p=top_p, min_p=min_p)


def test_row_function_picks_one_function_per_filter_mix():
    assert row_function(_res(0, 1.0, 0.0), 4) == "plain"
    assert row_function(_res(4, 1.0, 0.0), 4) == "plain"      # top_k >= V is neutral
    assert row_function(_res(2, 1.0, 0.0), 4) == "top_k"
    assert row_function(_res(0, 0.9, 0.0), 4) == "top_p"
    assert row_function(_res(2, 0.9, 0.0), 4) == "top_k_top_p"
    assert row_function(_res(0, 1.0, 0.1), 4) == "min_p"
    with pytest.raises(ValueError, match="min_p with top_k or top_p"):
        row_function(_res(2, 1.0, 0.1), 4)


def test_whole_batch_calls_seeds_offsets_and_greedy_normalisation(fake):
    s = FlashInferSession(FLASHINFER, "top_k_first", "cpu")
    rows = [Row(X, temperature=0.5, top_k=2, top_p=0.9, seed=11, slot=0),
            Row(X, temperature=0.0, slot=1),                       # greedy: T = 1, top_k = 1
            Row(X, temperature=1.0, top_k=2, top_p=0.8, seed=-3, slot=2),
            Row(X, temperature=1.0, min_p=0.2, seed=5, slot=3),
            Row(X, temperature=2.0, seed=7, slot=4)]
    out = s.step(rows)
    assert [o.token for o in out] == [1, 1, 1, 1, 1]
    assert [o.extra["function"] for o in out] == [FUNCTIONS[k] for k in
                                                    ("top_k_top_p", "top_k_top_p", "top_k_top_p", "min_p",
                                                     "top_k_top_p")]
    assert [o.extra["batch_row"] for o in out] == [0, 1, 2, 3, 4]
    assert [c[0] for c in fake.calls] == ["softmax", "top_k_top_p_sampling_from_probs", "min_p_sampling_from_probs"]
    # one softmax over the batch with each row's temperature (the greedy row at 1)
    assert fake.calls[0][2] == pytest.approx([0.5, 1.0, 1.0, 1.0, 2.0])
    # both calls see all five rows in batch order with their own seeds and offsets: the greedy row is
    # unseeded (the profile's global seed 42, offset from 2**62); neutral top_k = V = 4 and top_p = 1
    # for the rows the call does not decide, min_p = 0 likewise
    name, n, seeds, offs, params = fake.calls[1]
    assert (n, seeds, offs, params["top_k"]) == (5, [11, 42, -3, 5, 7], [0, 1 << 62, 0, 0, 0], [2, 1, 2, 4, 4])
    assert params["top_p"] == pytest.approx([0.9, 1.0, 0.8, 1.0, 1.0])
    assert fake.order == "top_k_first"
    name, n, seeds, offs, params = fake.calls[2]
    assert (n, seeds, params["min_p"]) == (5, [11, 42, -3, 5, 7], pytest.approx([0, 0, 0, 0.2, 0]))
    # a second step advances each seeded slot's offset by one
    s.step([Row(X, temperature=0.5, top_k=2, top_p=0.9, seed=11, slot=0)])
    assert fake.calls[-1][3] == [1]


def test_sample_many_calls_the_function_of_the_rows_filters(fake):
    s = FlashInferSession(FLASHINFER, "top_k_first", "cpu")
    for row, name in [(Row(X, temperature=1.0), "sampling_from_probs"),
                      (Row(X, temperature=1.0, top_k=2), "top_k_sampling_from_probs"),
                      (Row(X, temperature=1.0, top_p=0.5), "top_p_sampling_from_probs"),
                      (Row(X, temperature=1.0, top_k=2, top_p=0.5), "top_k_top_p_sampling_from_probs"),
                      (Row(X, temperature=1.0, min_p=0.3), "min_p_sampling_from_probs")]:
        counts = s.sample_many(row, range(10))
        assert fake.calls[-1][0] == name and fake.calls[-1][2] == list(range(10))
        assert counts.tolist() == [0, 10, 0, 0]      # the stand-in answers the argmax


def test_invalid_rows_become_per_row_errors_and_neighbours_keep_their_tokens(fake):
    s = FlashInferSession(FLASHINFER, "top_k_first", "cpu")
    nan = torch.tensor([0.0, float("nan"), 1.0, 0.0])
    ninf = torch.full((4,), float("-inf"))
    out = s.step([Row(X, temperature=1.0, slot=0), Row(nan, temperature=1.0, slot=1),
                  Row(ninf, temperature=1.0, slot=2), Row(X, temperature=1.0, slot=1)])
    assert out[0].token == 1 and out[0].error is None
    assert (out[1].error, out[2].error, out[3].error) == ("nan_logits", "no_valid_token", "duplicate_slot")


def test_joint_order_and_profile(fake):
    impl = registry.create("flashinfer-joint")
    assert impl.profile is FLASHINFER_JOINT and impl.name == "flashinfer-joint"
    s = FlashInferSession(impl.profile, impl.order, "cpu")
    s.step([Row(X, temperature=1.0, top_k=2, top_p=0.9, seed=1)])
    assert fake.order == "joint"


def test_unsupported_and_availability():
    impl = registry.create("flashinfer")
    assert "no logits processors" in impl.unsupported(Row(X, repetition_penalty=1.2))
    assert "no logits processors" in impl.unsupported(Row(X, logit_bias=[(1, 2.0)]))
    assert "no logprobs" in impl.unsupported(Row(X, logprobs=0))
    assert "min_p with top_k or top_p" in impl.unsupported(Row(X, temperature=1.0, top_k=2, min_p=0.1))
    assert impl.unsupported(Row(X, temperature=1.0, top_k=2, top_p=0.5)) is None
    assert impl.unsupported(Row(X, top_p=2.0)) is None          # invalid: the step reports it
    assert "only on CUDA" in impl.available("cpu")


def test_reference_under_the_flashinfer_profile_keeps_greedy_ties():
    """What makes greedy ties a known difference: top_k = 1 keeps every token at the maximum."""
    from impls.reference import Reference
    tie = torch.tensor([1.0, 3.0, 3.0, 0.0])
    out = Reference(FLASHINFER, name="reference-flashinfer").open_session("cpu").step([Row(tie, temperature=0.0)])
    assert out[0].mode == "sampling"
    assert out[0].probs.tolist() == [0.0, 0.5, 0.5, 0.0]
    base = Reference().open_session("cpu").step([Row(tie, temperature=0.0)])
    assert (base[0].mode, base[0].token) == ("greedy", 1)


# ------------------------------------------------------------------ speculative scenarios

def _ln(ps):
    return [math.log(p) for p in ps]


P0, P1, P2 = [0.1, 0.6, 0.2, 0.1], [0.5, 0.1, 0.3, 0.1], [0.25, 0.25, 0.4, 0.1]
Q = [0.1, 0.3, 0.2, 0.4]


def _chain_calls(fake):
    return [c for c in fake.calls if isinstance(c, dict)]


def test_speculative_scenario_verifies_with_chain_speculative_sampling(fake):
    # Target p by generated position: P0, P1, then P2 (repeated); draft q = Q everywhere; u = 0.5.
    # step 0, drafts [1, 3]: 0.5 * q(1) = 0.15 < p0(1) = 0.6 accepted; 0.5 * q(3) = 0.2 >= p1(3) = 0.1 rejected;
    #   relu(P1 - Q) = [0.4, 0, 0.1, 0] -> 0. Emits [1, 0], accepted 1, rewind 1, offsets 0..2.
    # step 1, drafts [2, 2] at positions 2, 3: 0.5 * 0.2 = 0.1 < 0.4 twice: accepted 2; the second accepted draft
    #   is the 4th token = max_new_tokens: LENGTH, no bonus token. Emits [2, 2], rewind 0, offsets 3..5.
    spec = ScenarioSpec(TableModel([_ln(P0), _ln(P1), _ln(P2)]),
                        [RequestSpec("a", 0, {"prompt": [0], "temperature": 1.0, "seed": 7, "max_new_tokens": 4},
                                     draft_len=2, drafts=[[1, 3], [2, 2]])],
                        draft_model=TableModel([_ln(Q)]))
    r = registry.create("flashinfer").run_scenario(spec, "cpu").requests["a"]
    assert r.error is None
    assert [s.tokens for s in r.steps] == [[1, 0], [2, 2]]
    assert [s.accepted for s in r.steps] == [1, 2] and [s.rewind for s in r.steps] == [1, 0]
    assert [s.drafts for s in r.steps] == [[1, 3], [2, 2]]
    assert [s.offsets for s in r.steps] == [[0, 1, 2], [3, 4, 5]] and r.steps[0].seed == 7
    assert (r.tokens, r.finish_reason, r.finish_step) == ([1, 0, 2, 2], "length", 1)
    calls = _chain_calls(fake)
    assert len(calls) == 2
    c0, c1 = calls
    assert c0["draft_probs"].shape == (1, 2, 4) and c0["draft_probs"].dtype == torch.float32
    assert c0["draft_token_ids"].tolist() == [[1, 3]] and c0["draft_token_ids"].dtype == torch.int32
    assert c0["target_probs"].shape == (1, 3, 4) and c0["target_probs"].dtype == torch.float32
    assert torch.allclose(c0["draft_probs"][0], torch.tensor([Q, Q]), atol=1e-6)
    assert torch.allclose(c0["target_probs"][0], torch.tensor([P0, P1, P2]), atol=1e-6)
    assert (c0["seed"], c0["offset"], c0["deterministic"], c0["generator"]) == ([7], [0], True, None)
    assert c1["draft_token_ids"].tolist() == [[2, 2]]
    assert torch.allclose(c1["target_probs"][0], torch.tensor([P2, P2, P2]), atol=1e-6)
    assert (c1["seed"], c1["offset"]) == ([7], [3])
    assert not [c for c in fake.calls if not isinstance(c, dict)]  # nothing else reached the stand-in


def test_bonus_token_and_a_step_without_drafts(fake):
    # step 0, drafts [1, 2]: 0.15 < 0.6 and 0.5 * 0.2 = 0.1 < p1(2) = 0.3: both accepted; bonus argmax(P2) = 2.
    # step 1 has no literal drafts (K = 0): sampling_from_probs on the target row (the stand-in answers its argmax).
    spec = ScenarioSpec(TableModel([_ln(P0), _ln(P1), _ln(P2), _ln(P0)]),
                        [RequestSpec("a", 0, {"prompt": [0], "temperature": 1.0, "max_new_tokens": 9},
                                     draft_len=2, drafts=[[1, 2], []])],
                        draft_model=TableModel([_ln(Q)]), max_steps=2)
    r = registry.create("flashinfer").run_scenario(spec, "cpu").requests["a"]
    assert [s.tokens for s in r.steps] == [[1, 2, 2], [1]]
    assert [s.accepted for s in r.steps] == [2, 0] and [s.rewind for s in r.steps] == [0, 2]
    chain = _chain_calls(fake)
    assert len(chain) == 1 and chain[0]["seed"] == [42]          # unseeded: the global seed
    plain = [c for c in fake.calls if not isinstance(c, dict)]
    assert [c[0] for c in plain] == ["sampling_from_probs"]
    assert chain[0]["offset"] == [1 << 62] and plain[0][3] == [(1 << 62) + 3]


def test_greedy_request_is_verified_as_one_hot_distributions(fake):
    # Greedy becomes top_k = 1 under the profile: p and q are one-hot, so the chain rule is greedy verification
    # (d == argmax p accepted, otherwise the argmax follows). Same tokens as the default profile's greedy path.
    target = TableModel([[0, 0, 3, 0], [3, 0, 0, 0], [0, 0, 0, 3], [0, 3, 0, 0]])
    draft = TableModel([[0, 0, 3, 0], [3, 0, 0, 0], [0, 3, 0, 0]])   # proposes 2, 0, then 1 (wrong: 3)
    spec = ScenarioSpec(target, [RequestSpec("a", 0, {"prompt": [1], "max_new_tokens": 5}, draft_len=3)],
                        draft_model=draft, max_steps=1)
    r = registry.create("flashinfer").run_scenario(spec, "cpu").requests["a"]
    c = _chain_calls(fake)[0]
    assert c["draft_token_ids"].tolist() == [[2, 0, 1]]
    assert c["target_probs"][0].tolist() == [[0, 0, 1, 0], [1, 0, 0, 0], [0, 0, 0, 1], [0, 1, 0, 0]]
    assert c["draft_probs"][0].tolist() == [[0, 0, 1, 0], [1, 0, 0, 0], [0, 1, 0, 0]]
    assert (r.steps[0].tokens, r.steps[0].accepted) == ([2, 0, 3], 2)
    from impls.reference import Reference
    ref = Reference().run_scenario(spec).requests["a"]
    assert (ref.steps[0].tokens, ref.steps[0].accepted) == ([2, 0, 3], 2)


def test_scenarios_without_a_flashinfer_verification_are_na(fake):
    from harness.corpus.load import CASES_DIR, load_case
    from impls.reference.scenario import ScenarioUnsupported
    impl = registry.create("flashinfer")
    expect = {
        "beam/diversity-rate-boosts-later-beams": ["request a: FlashInfer has no beam search", "no speculative request"],
        "finish/slot-freed-after-eos": ["no speculative request: chain_speculative_sampling is FlashInfer's only"],
        "penalties/frequency-accumulates-across-steps": ["no logits processors (frequency_penalty)",
                                                         "no speculative request"],
        "filters/top-p-decay-sequence": ["no logits processors (top_p_decay)"],
        "speculative/greedy-verification-accept-and-bonus": ["request a: literal drafts without a draft_model",
                                                             "request b: literal drafts without a draft_model"],
        "speculative/d2t-greedy-translation": ["request a: d2t is admitted for greedy requests only"],
    }
    for cid, parts in expect.items():
        spec = load_case(CASES_DIR / f"{cid}.toml").scenario.spec
        with pytest.raises(ScenarioUnsupported) as e:
            impl.run_scenario(spec, "cpu")
        for part in parts:
            assert part in str(e.value), (cid, str(e.value))
    assert not fake.calls
    assert scenario_unsupported(load_case(CASES_DIR / "speculative/sampling-draft-outside-target-support.toml")
                                .scenario.spec) is None


class _RandomChain(_FakeSampling):
    """The kernel's rule with real draws (a CPU generator keyed by seed and offset); ``honest=False``
    accepts every draft, so the first token follows the draft distribution."""

    def __init__(self, honest):
        super().__init__()
        self.honest = honest

    def chain_speculative_sampling(self, draft_probs, draft_token_ids, target_probs, deterministic=True,
                                   seed=None, offset=None, **_):
        g = torch.Generator().manual_seed((int(seed[0]) * 1_000_003 + int(offset[0])) % (1 << 62))
        _, K, V = draft_probs.shape
        out = torch.full((1, K + 1), -1, dtype=torch.int32)
        pos = K
        for i, d in enumerate(draft_token_ids[0].tolist()):
            u = 1.0 - float(torch.rand((), generator=g))                       # (0, 1], as curand_uniform
            if self.honest and not u * draft_probs[0, i, d] < target_probs[0, i, d]:
                pos = i
                break
            out[0, i] = d
        q = draft_probs[0, pos] if pos < K else torch.zeros(V)
        out[0, pos] = int(torch.multinomial(torch.clamp(target_probs[0, pos] - q, min=0), 1, generator=g))
        n = torch.tensor([pos], dtype=torch.int32)
        return out, n.clone(), n


@pytest.mark.parametrize("honest, status", [(True, "pass"), (False, "fail")])
def test_statistical_scenario_is_judged_on_the_flashinfer_draws(monkeypatch, honest, status):
    """The judge's statistical path sees the tokens ``verify_chain`` emits (4000 copies, about 2 s)."""
    from harness.corpus.load import CASES_DIR, load_case
    from harness.judge.judge import Judge
    mod = _RandomChain(honest)
    _install(monkeypatch, mod)
    case = load_case(CASES_DIR / "speculative/rejection-sampling-emits-target-distribution.toml")
    res = case.kind.evaluate(Judge([], 1, device="cpu"), case, registry.create("flashinfer"), "x")
    assert res.status == status, res.details.get("message")


@pytest.mark.parametrize("honest, status", [(True, "pass"), (False, "fail")])
def test_emitted_tokens_are_checked_against_the_target_support(monkeypatch, honest, status):
    """Under another RNG a scenario's tokens are not compared one for one, but each must lie in the
    target's support at its position: accepting the draft 3, which the target forbids, fails."""
    from harness.corpus.load import CASES_DIR, load_case
    from harness.judge.judge import Judge
    mod = _RandomChain(honest)
    _install(monkeypatch, mod)
    case = load_case(CASES_DIR / "speculative/sampling-draft-outside-target-support.toml")
    res = case.kind.evaluate(Judge([], 1, device="cpu"), case, registry.create("flashinfer"), "x")
    assert res.status == status, res.details.get("message")
    bad = res.details["rows"][0]["mismatches"]
    if honest:
        assert bad == []
    else:
        assert bad[0] == "token 3 at generated position 0 (step 0) is outside the flashinfer target's support"


def test_reference_session_has_no_hook():
    from impls.reference import Reference
    assert not hasattr(Reference().open_session("cpu"), "verify_chain")


@pytest.mark.gpu
def test_real_flashinfer_speculative_scenarios_on_the_gpu():
    """The statistical case through the real ``chain_speculative_sampling``, and two deterministic facts.

    Called through the scenario kind's evaluate (:class:`harness.kinds.scenario.ScenarioKind`) (the judge's scenario path, after its feature gate).
    """
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    pytest.importorskip("flashinfer")
    from harness.corpus.load import CASES_DIR, load_case
    from harness.judge.judge import Judge
    impl = registry.create("flashinfer")
    assert impl.available("cuda") is None
    case = load_case(CASES_DIR / "speculative/rejection-sampling-emits-target-distribution.toml")
    res = case.kind.evaluate(Judge([], 1, device="cuda"), case, impl, impl.version())
    assert res.status == "pass", res.details
    # q == p exactly: u * q(d) < p(d) for every u < 1, all drafts accepted at both steps
    spec = load_case(CASES_DIR / "speculative/sampling-draft-equals-target-accepts-all.toml").scenario.spec
    r = impl.run_scenario(spec, "cuda").requests["a"]
    assert [s.accepted for s in r.steps] == [3, 3] and [len(s.tokens) for s in r.steps] == [4, 4]
    # p(3) = 0: the draft 3 is always rejected and the residual never gives 3
    spec = load_case(CASES_DIR / "speculative/sampling-draft-outside-target-support.toml").scenario.spec
    r = impl.run_scenario(spec, "cuda").requests["a"]
    assert [s.accepted for s in r.steps] == [0, 0, 0] and all(t in (0, 1, 2) for t in r.tokens)
    assert [s.offsets for s in r.steps] == [[0, 1, 2], [3, 4, 5], [6, 7, 8]]


@pytest.mark.gpu
def test_real_flashinfer_on_the_gpu():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    pytest.importorskip("flashinfer")
    impl = registry.create("flashinfer")
    assert impl.available("cuda") is None
    s = impl.open_session("cuda")
    x = torch.tensor([0.0, 5.0, 1.0, -30.0] + [-30.0] * 60)
    out = s.step([Row(x, temperature=0.0, slot=0), Row(x, temperature=1.0, top_k=2, seed=3, slot=1),
                  Row(x, temperature=1.0, top_p=0.5, seed=3, slot=2)])
    assert out[0].token == 1                 # a single maximum: top_k = 1 is argmax
    assert out[1].token in (1, 2)            # top-2 support
    assert out[2].token == 1                 # the 0.5 nucleus is token 1 alone (p = 0.98)
    assert out[1].extra["function"] == "top_k_top_p_sampling_from_probs"  # one call for the batch


def test_unsupported_reads_each_processor_at_its_own_neutral_value():
    impl = registry.create("flashinfer")
    assert impl.unsupported(Row(X, temperature=1.0, repetition_penalty=1.0, presence_penalty=0.0,
                                frequency_penalty=0.0, min_length=0)) is None
    assert "presence_penalty" in impl.unsupported(Row(X, temperature=1.0, presence_penalty=1.0))
    assert "frequency_penalty" in impl.unsupported(Row(X, temperature=1.0, frequency_penalty=1.0))
    assert "repetition_penalty" in impl.unsupported(Row(X, temperature=1.0, repetition_penalty=0.0))
