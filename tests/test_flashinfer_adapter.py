"""The FlashInfer adapter: its plumbing on the CPU with a recording stand-in, the real library on a GPU.

The stand-in (``_FakeSampling``) is not a model of FlashInfer's kernels: it
records which function each group of rows reached, with which per-row
tensors, and answers fixed tokens, so that grouping, seeds, offsets, greedy
normalisation and the per-row errors of ``return_valid`` are checked exactly.
The GPU test at the end runs the installed FlashInfer.
"""

from __future__ import annotations

import sys
import types

import pytest
import torch

from impls import get_impl
from impls.base import Row
from impls.flashinfer import FUNCTIONS, FlashInferSession, row_function
from impls.profiles import FLASHINFER, FLASHINFER_JOINT


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


@pytest.fixture
def fake(monkeypatch):
    mod = _FakeSampling()
    pkg = types.ModuleType("flashinfer")
    pkg.sampling = mod
    monkeypatch.setitem(sys.modules, "flashinfer", pkg)
    monkeypatch.setitem(sys.modules, "flashinfer.sampling", mod)
    return mod


X = torch.tensor([0.0, 2.0, 1.0, -1.0])


def test_row_function_picks_one_function_per_filter_mix():
    assert row_function(0, 1.0, 0.0, 4) == "plain"
    assert row_function(4, 1.0, 0.0, 4) == "plain"      # top_k >= V is neutral
    assert row_function(2, 1.0, 0.0, 4) == "top_k"
    assert row_function(0, 0.9, 0.0, 4) == "top_p"
    assert row_function(2, 0.9, 0.0, 4) == "top_k_top_p"
    assert row_function(0, 1.0, 0.1, 4) == "min_p"
    with pytest.raises(ValueError, match="min_p with top_k or top_p"):
        row_function(2, 1.0, 0.1, 4)


def test_groups_seeds_offsets_and_greedy_normalisation(fake):
    s = FlashInferSession(FLASHINFER, "top_k_first", "cpu")
    rows = [Row(X, temperature=0.5, top_k=2, top_p=0.9, seed=11, slot=0),
            Row(X, temperature=0.0, slot=1),                       # greedy: T = 1, top_k = 1
            Row(X, temperature=1.0, top_k=2, top_p=0.8, seed=-3, slot=2),
            Row(X, temperature=1.0, min_p=0.2, seed=5, slot=3),
            Row(X, temperature=2.0, seed=7, slot=4)]
    out = s.step(rows)
    assert [o.token for o in out] == [1, 1, 1, 1, 1]
    assert [o.extra["function"] for o in out] == [FUNCTIONS[k] for k in
                                                    ("top_k_top_p", "top_k", "top_k_top_p", "min_p", "plain")]
    calls = {c[0]: c for c in fake.calls if c[0] != "softmax"}
    # rows 0 and 2 in one call, in batch order, with their own seeds and offset 0
    name, n, seeds, offs, params = calls["top_k_top_p_sampling_from_probs"]
    assert (n, seeds, offs, params["top_k"]) == (2, [11, -3], [0, 0], [2, 2])
    assert params["top_p"] == pytest.approx([0.9, 0.8])
    assert fake.order == "top_k_first"
    # the greedy row: unseeded (the profile's global seed 42, offset from 2**62), top_k = 1
    name, n, seeds, offs, params = calls["top_k_sampling_from_probs"]
    assert (n, seeds, offs, params["top_k"]) == (1, [42], [1 << 62], [1])
    assert calls["min_p_sampling_from_probs"][4]["min_p"] == pytest.approx([0.2])
    temps = sorted(t for c in fake.calls if c[0] == "softmax" for t in c[2])
    assert temps == pytest.approx([0.5, 1.0, 1.0, 1.0, 2.0])
    # a second step advances each seeded slot's offset by one
    s.step([Row(X, temperature=0.5, top_k=2, top_p=0.9, seed=11, slot=0)])
    assert fake.calls[-1][3] == [1]


def test_invalid_rows_become_per_row_errors_and_neighbours_keep_their_tokens(fake):
    s = FlashInferSession(FLASHINFER, "top_k_first", "cpu")
    nan = torch.tensor([0.0, float("nan"), 1.0, 0.0])
    ninf = torch.full((4,), float("-inf"))
    out = s.step([Row(X, temperature=1.0, slot=0), Row(nan, temperature=1.0, slot=1),
                  Row(ninf, temperature=1.0, slot=2), Row(X, temperature=1.0, slot=1)])
    assert out[0].token == 1 and out[0].error is None
    assert (out[1].error, out[2].error, out[3].error) == ("nan_logits", "no_valid_token", "duplicate_slot")


def test_joint_order_and_profile(fake):
    impl = get_impl("flashinfer-joint")
    assert impl.profile is FLASHINFER_JOINT and impl.name == "flashinfer-joint"
    s = FlashInferSession(impl.profile, impl.order, "cpu")
    s.step([Row(X, temperature=1.0, top_k=2, top_p=0.9, seed=1)])
    assert fake.order == "joint"


def test_unsupported_and_availability():
    impl = get_impl("flashinfer")
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


@pytest.mark.gpu
def test_real_flashinfer_on_the_gpu():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    pytest.importorskip("flashinfer")
    impl = get_impl("flashinfer")
    assert impl.available("cuda") is None
    s = impl.open_session("cuda")
    x = torch.tensor([0.0, 5.0, 1.0, -30.0] + [-30.0] * 60)
    out = s.step([Row(x, temperature=0.0, slot=0), Row(x, temperature=1.0, top_k=2, seed=3, slot=1),
                  Row(x, temperature=1.0, top_p=0.5, seed=3, slot=2)])
    assert out[0].token == 1                 # a single maximum: top_k = 1 is argmax
    assert out[1].token in (1, 2)            # top-2 support
    assert out[2].token == 1                 # the 0.5 nucleus is token 1 alone (p = 0.98)
    assert out[1].extra["function"] == "top_k_sampling_from_probs"
