"""The fused sampler bound to a batch (:class:`impls.fused.bound.FusedSampler`) and its launches.

On a machine without CUDA the sampler runs under Triton's interpreter (``conftest.py``), where every call
goes through ``kernel[grid]``; the bound launches (:class:`impls.fused.launch.Bound`) are checked with stand-in
compiled kernels, as ``test_fused.py`` checks the launch plans.
"""

import pytest
import torch

pytest.importorskip("triton", reason="triton is not installed (the tox env installs it)")

from impls.fused import launch  # noqa: E402
from impls.fused.bound import FusedSampler  # noqa: E402
from impls.fused.ops import fused_sample  # noqa: E402

DEV = "cuda" if torch.cuda.is_available() else "cpu"


def _params(B):
    g = torch.Generator().manual_seed(B)
    T = torch.tensor([1.0, 0.7, 1.3, 1.0, 0.0, 1.0][:B])
    K = torch.tensor([0, 5, 0, 40, 0, 1][:B], dtype=torch.int64)
    P = torch.tensor([0.9, 1.0, 0.5, 0.95, 1.0, 1.0][:B])
    M = torch.tensor([0.0, 0.0, 0.1, 0.0, 0.0, 0.0][:B])
    seed = torch.randint(-2 ** 62, 2 ** 62, (B,), generator=g)
    off = torch.arange(B, dtype=torch.int64) * 3
    return [t.to(DEV) for t in (T, K, P, M, seed, off)]


def test_bound_sampler_gives_fused_sample_tokens_and_reads_parameters_in_place():
    """Two calls on new logits give :func:`fused_sample`'s tokens; a temperature written in place between
    calls is read by the next one (row 0 becomes greedy: its argmax, path 0)."""
    B, V = 6, 700
    params = _params(B)
    sampler = FusedSampler(*params)
    for step in range(2):
        if step == 1:
            params[0][0] = 0.0
        x = (torch.randn(B, V, generator=torch.Generator().manual_seed(10 + step)) * 3).to(DEV)
        tok, status, path, probs = sampler(x)
        want = fused_sample(x, *params)
        assert torch.equal(tok, want[0]) and torch.equal(status, want[1]) and torch.equal(path, want[2])
        assert probs is None and status.tolist() == [0] * B
    assert int(tok[0]) == int(torch.argmax(x[0])) and int(path[0]) == 0
    assert tok.data_ptr() == sampler(x)[0].data_ptr()   # the same output tensors every call


def test_bound_sampler_with_probabilities_and_the_greedy_hint():
    B, V = 5, 300
    T, K, P, M, seed, off = _params(B)
    x = torch.randn(B, V, generator=torch.Generator().manual_seed(3)).to(DEV)
    tok, status, path, probs = FusedSampler(T, K, P, M, seed, off, want_probs=True)(x)
    want = fused_sample(x, T, K, P, M, seed, off, want_probs=True)
    assert torch.equal(tok, want[0]) and torch.equal(probs, want[3])
    for rows in (1, 256):   # one launch from greedy_rows rows, two below
        tok, status, path, _ = FusedSampler(T, K, P, M, seed, off, greedy=True, greedy_rows=rows)(x)
        assert tok.tolist() == torch.argmax(x, dim=-1).tolist() and path.tolist() == [0] * B


def test_bound_sampler_of_no_rows_launches_nothing():
    z = lambda dt: torch.zeros(0, dtype=dt, device=DEV)
    sampler = FusedSampler(z(torch.float32), z(torch.int64), z(torch.float32), z(torch.float32), z(torch.int64),
                           z(torch.int64), want_probs=True)
    tok, status, path, probs = sampler(torch.zeros(0, 50, device=DEV))
    assert tok.shape == status.shape == path.shape == (0,) and probs.shape == (0, 50) and sampler._bound is None


def test_bound_sampler_checks_tuning_for_the_device_it_binds():
    """``kbr`` must exceed ``kmax``: 256 is valid with the interpreter's ``kmax`` (128), not the GPU's (2,048). The
    constructor accepts what some device's set takes; the first call applies the device's own set."""
    B, V = 3, 200
    params = _params(B)
    sampler = FusedSampler(*params, kbr=256)
    x = torch.randn(B, V, generator=torch.Generator().manual_seed(4)).to(DEV)
    if DEV == "cpu":
        assert torch.equal(sampler(x)[0], fused_sample(x, *params, kbr=256)[0])
    else:
        with pytest.raises(ValueError, match=r"kbr=256: must be larger than kmax=2048"):
            sampler(x)
    with pytest.raises(ValueError, match=r"kbr=100: must be a power of two"):
        FusedSampler(*params, kbr=100)
    with pytest.raises(ValueError, match=r"kbr=512.0: must be a power of two >= 16 \(or 0: off\), a Python int "
                                         r"\(got float\)"):
        FusedSampler(*params, kbr=512.0)
    # None is the default, as fused_sample takes it
    assert FusedSampler(*params, kbr=None, one_list=None).tuning == {}


def test_bound_sampler_errors_are_located():
    B, V = 3, 200
    T, K, P, M, seed, off = _params(B)
    x = torch.zeros(B, V, device=DEV)
    with pytest.raises(TypeError, match="unknown fused_sample option 'blocks'"):
        FusedSampler(T, K, P, M, seed, off, blocks=4)
    with pytest.raises(ValueError, match="unknown launcher mode 'fast'"):
        FusedSampler(T, K, P, M, seed, off, launcher="fast")
    # the logits given to the constructor, as to fused_sample: the seventh argument lands in want_probs
    with pytest.raises(TypeError, match=r"FusedSampler want_probs must be True or False, got Tensor: FusedSampler "
                                        r"takes the six parameter tensors"):
        FusedSampler(x, T, K, P, M, seed, off)
    with pytest.raises(TypeError, match="FusedSampler want_probs must be True or False, got str$"):
        FusedSampler(T, K, P, M, seed, off, want_probs="no")
    with pytest.raises(TypeError, match="FusedSampler greedy must be True or False, got int$"):
        FusedSampler(T, K, P, M, seed, off, greedy=1)
    with pytest.raises(ValueError, match=r"top_k: bound parameters must already be contiguous torch.int64 tensors "
                                         r"\(got torch.int32\)"):
        FusedSampler(T, K.to(torch.int32), P, M, seed, off)(x)
    with pytest.raises(ValueError, match=r"min_p: .*float32 tensors \(got torch.float32, not contiguous\)"):
        FusedSampler(T, K, P, torch.zeros(2 * B, device=DEV)[::2], seed, off)(x)
    with pytest.raises(ValueError, match=r"top_p must have shape \(3,\), got \(4,\)"):
        FusedSampler(T, K, torch.ones(4, device=DEV), M, seed, off)(x)
    sampler = FusedSampler(T, K, P, M, seed, off)
    with pytest.raises(TypeError, match="logits must be a \\(batch, vocab\\) tensor, got list"):
        sampler([[0.0] * V] * B)
    sampler(x)
    with pytest.raises(ValueError, match=r"bound to \(3, 200\) torch.float32 logits .* got \(3, 100\) "
                                         r"torch.float32 .*: bind a new FusedSampler"):
        sampler(x[:, :100])
    with pytest.raises(ValueError, match=r"got \(3, 200\) torch.bfloat16"):
        sampler(x.bfloat16())
    if DEV == "cuda":   # kernels specialised on 16-byte alignment: both sides of the message say it
        shifted = torch.zeros(B * V + 1, device=DEV)[1:].view(B, V)
        with pytest.raises(ValueError, match=r"strides \(200, 1\), 16-byte aligned; got .* strides \(200, 1\), "
                                             r"not 16-byte aligned"):
            sampler(shifted)
    with pytest.raises(ValueError, match=r"top_p: .*contiguous torch.float32 or torch.float64 tensors \(got "
                                         r"torch.float16\)"):
        FusedSampler(T, K, P.half(), M, seed, off)(x)


def test_bound_sampler_copies_logits_whose_rows_are_not_contiguous():
    """As fused_sample: a transposed view is copied (first and later calls), the same tokens."""
    B, V = 3, 200
    params = _params(B)
    xt = torch.randn(V, B, generator=torch.Generator().manual_seed(5)).to(DEV).t()
    sampler = FusedSampler(*params)
    for _ in range(2):
        tok = sampler(xt)[0]
        assert torch.equal(tok, fused_sample(xt, *params)[0])


class _Tensor(str):
    """Stands in for a CUDA tensor: a name whose address is ``"addr-" + name``."""

    device = torch.device("cuda", 1)

    def data_ptr(self):
        return "addr-" + self


class _Plan:
    """Stands in for :class:`impls.fused.launch.Plan`: records the addresses it launches with."""

    specs = ["spec-a", "spec-b"]

    def __init__(self, refuse_at=None):
        self.log, self.refuse_at = [], refuse_at

    def run_addresses(self, ptrs, stream, first=0, last=None):
        if self.refuse_at is not None:
            raise launch.LaunchRefused(self.refuse_at, TypeError("takes 9 arguments"))
        self.log.append((ptrs, stream))


def test_bound_launches_take_new_logits_and_the_addresses_read_once(monkeypatch):
    from impls.fused.kernel import SLOTS
    monkeypatch.setattr(launch, "_stream", lambda index: f"stream-{index}")
    vals = tuple(_Tensor(s) for s in SLOTS)
    plan = _Plan()
    bound = launch.Bound(plan, vals)
    assert bound.rest == vals[1:] and bound.index == 1   # the first call's logits are not kept
    bound.run(_Tensor("new-logits"))
    bound.run(_Tensor("other"), address=4096)
    rest = tuple("addr-" + s for s in SLOTS[1:])
    assert plan.log == [(("addr-new-logits",) + rest, "stream-1"), ((4096,) + rest, "stream-1")]


def test_bound_launch_refused_falls_back_to_the_jit_launcher(monkeypatch):
    from impls.fused.kernel import SLOTS
    jitted = []
    monkeypatch.setattr(launch, "FALLBACK", None)
    monkeypatch.setattr(launch, "_stream", lambda index: 0)
    monkeypatch.setattr(launch, "_jit", lambda specs, vals, first=0: jitted.append((specs, vals, first)))
    vals = tuple(_Tensor(s) for s in SLOTS)
    launch.Bound(_Plan(refuse_at=1), vals).run(_Tensor("x"))
    assert jitted == [(["spec-a", "spec-b"], (_Tensor("x"),) + vals[1:], 1)]
    assert launch.FALLBACK == "direct launch refused by this Triton (step 1: TypeError: takes 9 arguments); " \
                              "using kernel[grid]"
    assert launch.bind(vals, 1, 128, False, {}) is None   # no plans while the fallback holds
    jitted.clear()
    launch.Bound(_Plan(), vals).run(_Tensor("y"))          # a bound call made before: kernel[grid] for every step
    assert jitted == [(["spec-a", "spec-b"], (_Tensor("y"),) + vals[1:], 0)]
