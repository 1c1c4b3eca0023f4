"""SGLang's FlashInfer sampling path (impls/sglang_gpu): the bundle, the loader, the batch-dependent min-p switch.

Layers:

* the bundle and its manifest, on fake installations of ``sglang`` and ``sglang-kernel`` built
  here (runs everywhere);
* the loader on the real SGLang 0.5.23 / sglang-kernel 0.4.10 files: the bundle at
  ``.whl/sglang-src`` (or ``$SAMPCHECK_SGLANG_SRC``), skipped without one (``python -m
  impls.sglang_gpu.bundle --out .whl/sglang-src --from <sglang wheel> --from <sglang-kernel wheel>``).
  On a CPU: the loaded ``sampler.py`` for a CPU server (pytorch backend) against the reference under
  the ``sglang`` profile, and for a CUDA server with FlashInfer replaced by a double that keeps
  FlashInfer's rules (the profile's citations) in PyTorch, which shows SGLang's own code choosing
  the branch per batch;
* ``@pytest.mark.gpu``: the same batches through the real FlashInfer on CUDA.

Every expected value is worked out in the test by hand (the comments), never read back from a run.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import sys
import types
import zipfile
from pathlib import Path

import pytest
import torch

from impls import registry
from impls.base import Row, stage_provenance
from impls.profiles import SGLANG, SGLANG_FLASHINFER, TRTLLM, profile_diff
from impls.reference.filters import min_p_mask, top_k_mask, top_p_mask
from impls.reference.sampler import ReferenceSession
from impls.sglang_gpu import FEATURES, SglangFlashInferImpl, bundle, loader, row_unsupported
from impls.sglang_gpu.session import SglangFlashInferSession, branch, request

# logits ln([8, 6, 3, 2, 1]): p = [8, 6, 3, 2, 1] / 20 = [0.40, 0.30, 0.15, 0.10, 0.05]
LOGITS = torch.tensor([math.log(v) for v in (8.0, 6.0, 3.0, 2.0, 1.0)], dtype=torch.float32)
JOINT = "flashinfer: top_k_top_p_sampling_from_probs(joint)"
SEQUENTIAL = "flashinfer: top_k_renorm_prob, top_p_renorm_prob, min_p_sampling_from_probs"


def _frac(*w, n=5):
    s = sum(w)
    return [v / s for v in w] + [0.0] * (n - len(w))


# -- the bundle (no SGLang needed) ------------------------------------------------------------
def _fake_install(site: Path, spec, dist: str, version: str, edit: str = None) -> None:
    rows = []
    for rel in spec.files:
        text = f"# fake {spec.package}/{rel}\n"
        data = text.encode()
        p = site / spec.package / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
        b64 = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        rows.append(f"{spec.package}/{rel},sha256={b64},{len(data)}")
    (site / spec.package / "__init__.py").write_text("")
    info = site / f"{dist.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    (info / "RECORD").write_text("\n".join(rows) + "\n")
    if edit:
        (site / spec.package / edit).write_text("# edited after installation\n")


def _fake_site(root: Path, edit: str = None) -> Path:
    site = root / "site"
    _fake_install(site, bundle.SGLANG, "sglang", "9.9.9", edit)
    _fake_install(site, bundle.SGL_KERNEL, "sglang-kernel", "8.8.8")
    return site


def _wheel(site: Path, package: str, dist_info: str, out: Path) -> Path:
    """A wheel holding ``package/`` and ``dist_info/`` of the fake installation."""
    with zipfile.ZipFile(out, "w") as z:
        for p in site.rglob("*"):
            rel = p.relative_to(site)
            if p.is_file() and rel.parts[0] in (package, dist_info):
                z.write(p, str(rel))
    return out


def test_bundle_copies_only_the_listed_files_of_both_distributions(tmp_path):
    site = _fake_site(tmp_path)
    m = bundle.make_bundle(tmp_path / "b", [site])
    assert (m["distribution"], m["version"], m["schema"], m["record_verified"]) == ("sglang", "9.9.9", 1, True)
    assert bundle.versions(m) == {"sglang": "9.9.9", "sglang-kernel": "8.8.8"}
    assert sorted(m["files"]) == sorted(bundle.FILES)
    assert len(bundle.FILES) == 16   # 12 + 2 sglang files, 2 sgl_kernel files
    for key, entry in m["files"].items():
        data = (site / key).read_bytes()
        assert entry["sha256"] == hashlib.sha256(data).hexdigest() and entry["bytes"] == len(data)
    assert m["files"]["sglang/srt/layers/sampler.py"]["use"] == "loaded"
    assert m["files"]["sglang/srt/sampling/sampling_params.py"]["use"] == "read"
    assert m["files"]["sgl_kernel/sampling.py"]["distribution"] == "sglang-kernel"
    on_disk = sorted(str(p.relative_to(tmp_path / "b")) for p in (tmp_path / "b").rglob("*") if p.is_file())
    assert on_disk == sorted([bundle.MANIFEST, *bundle.FILES])   # nothing else copied
    assert json.loads((tmp_path / "b" / bundle.MANIFEST).read_text()) == m
    assert bundle.verify(tmp_path / "b") == m


def test_bundle_from_two_wheel_files(tmp_path):
    site = _fake_site(tmp_path)
    w1 = _wheel(site, "sglang", "sglang-9.9.9.dist-info", tmp_path / "sglang-9.9.9-py3-none-any.whl")
    w2 = _wheel(site, "sgl_kernel", "sglang_kernel-8.8.8.dist-info", tmp_path / "sglang_kernel-8.8.8-py3-none-any.whl")
    m = bundle.make_bundle(tmp_path / "b", [w2, w1])   # each package from the wheel that holds it
    assert [d["dist_info"] for d in m["distributions"]] == ["sglang-9.9.9.dist-info",
                                                              "sglang_kernel-8.8.8.dist-info"]
    assert m["files"] == bundle.make_bundle(tmp_path / "b2", [site])["files"]
    with pytest.raises(bundle.BundleError, match=r"holds the sgl_kernel package"):
        bundle.make_bundle(tmp_path / "b3", [w1, tmp_path / "site" / "nothing"])


def test_an_edited_installation_is_refused_at_copy_time(tmp_path):
    site = _fake_site(tmp_path, edit="srt/layers/sampler.py")
    with pytest.raises(bundle.BundleError, match=r"sglang/srt/layers/sampler\.py has sha256 [0-9a-f]{64}, but "
                                                 r"sglang-9\.9\.9\.dist-info/RECORD says [0-9a-f]{64}"):
        bundle.make_bundle(tmp_path / "b", [site])


def test_a_modified_bundle_file_is_refused_by_the_loader(tmp_path):
    m = bundle.make_bundle(tmp_path / "b", [_fake_site(tmp_path)])
    target = tmp_path / "b" / "sgl_kernel" / "sampling.py"
    target.write_text("# a patched wrapper\n")
    got = hashlib.sha256(target.read_bytes()).hexdigest()
    want = m["files"]["sgl_kernel/sampling.py"]["sha256"]
    with pytest.raises(bundle.BundleError) as e:
        loader.load(tmp_path / "b", kind="cpu")
    msg = str(e.value)
    assert f"sgl_kernel/sampling.py was modified: sha256 {got}, manifest {want}" in msg
    assert "sglang 9.9.9" in msg and "python -m impls.sglang_gpu.bundle" in msg
    target.unlink()
    with pytest.raises(bundle.BundleError, match=r"sgl_kernel/sampling\.py is missing"):
        bundle.verify(tmp_path / "b")


def test_a_missing_bundle_says_how_to_build_one(tmp_path):
    with pytest.raises(bundle.BundleError, match=r"no such bundle folder \(build it with: python -m "
                                                 r"impls\.sglang_gpu\.bundle --out"):
        loader.load(tmp_path / "nowhere", kind="cpu")
    assert bundle.main(["--out", str(tmp_path / "b")]) == 1   # no --from: an error, nothing written


def test_constants_are_read_without_executing_the_file(tmp_path):
    f = tmp_path / "sp.py"
    f.write_text("import msgspec\n_SAMPLING_EPS = 1e-6\nTOP_K_ALL = 1 << 30\nX = f(1)\n")
    assert loader.read_constants(f, ("TOP_K_ALL", "_SAMPLING_EPS")) == {"TOP_K_ALL": 1073741824,
                                                                         "_SAMPLING_EPS": 1e-6}
    with pytest.raises(bundle.BundleError, match="defines no X as a constant"):
        loader.read_constants(f, ("X",))


# -- declarations and the profile --------------------------------------------------------------
def test_declarations():
    impl = registry.create("sglang-flashinfer")
    assert isinstance(impl, SglangFlashInferImpl) and impl.devices == frozenset({"cuda"})
    assert impl.features == FEATURES == frozenset({"temperature", "top_k", "top_p", "min_p", "seed"})
    assert [o.flag for o in impl.cli_options] == ["--sglang-src"]
    assert stage_provenance(impl) == {"validation": "reference", "filters": "own", "draw": "own", "seeds": "own"}
    assert "CUDA" in impl.available("cpu") or "cuda" in impl.available("cpu")
    # the profile differs from SGLang's CPU profile exactly where the FlashInfer backend does
    assert profile_diff(SGLANG, SGLANG_FLASHINFER) == ["top_k_ties", "top_p_rule", "batch_min_p_filters"]
    assert SGLANG_FLASHINFER.batch_min_p_filters == ("top_k", "top_p", "min_p")
    for f in profile_diff(TRTLLM, SGLANG_FLASHINFER):
        assert SGLANG_FLASHINFER.citations[f].startswith("sgl-project/sglang:python/sglang/srt/"), f
        assert "@v0.5.23 " in SGLANG_FLASHINFER.citations[f], f
    assert row_unsupported(Row(logits=LOGITS, repetition_penalty=1.2)).startswith("repetition_penalty")
    assert row_unsupported(Row(logits=LOGITS, logprobs=2)).startswith("logprobs")
    assert row_unsupported(Row(logits=LOGITS, top_k=3, top_p=0.8, min_p=0.1, seed=3)) is None


def test_request_values_are_those_sampling_params_post_init_leaves():
    c = {"TOP_K_ALL": 1 << 30, "_SAMPLING_EPS": 1e-6}
    sp = request(Row(logits=LOGITS), c).sampling_params
    assert (sp.temperature, sp.top_k, sp.top_p, sp.min_p) == (1.0, 1 << 30, 1.0, 0.0)   # class defaults
    sp = request(Row(logits=LOGITS, temperature=0.0, top_p=0.5, min_p=0.3), c).sampling_params
    assert (sp.temperature, sp.top_k, sp.top_p, sp.min_p) == (1.0, 1, 0.5, 0.3)   # T < 1e-6: T 1, top_k 1
    sp = request(Row(logits=LOGITS, top_k=-1, temperature=5e-7, seed=9), c).sampling_params
    assert (sp.temperature, sp.top_k, sp.sampling_seed) == (1.0, 1, 9)
    assert request(Row(logits=LOGITS, top_k=-1), c).sampling_params.top_k == 1 << 30


# -- the reference's batch rule (no SGLang needed) -------------------------------------------
def _support(r):
    return torch.nonzero(r.probs > 0).flatten().tolist()


def test_reference_switches_a_batch_with_a_min_p_row_to_sequential_filters():
    # probe: top_k 3, top_p 0.8. Joint on p: top-k {0,1,2}; top-p: mass above t2 = .70 < .8 kept,
    # above t3 = .85 dropped -> {0,1,2}. Sequential: top-k renormalised [8,6,3]/17; mass above t2 =
    # 14/17 = .8235 >= .8 -> {0,1}.
    probe = Row(logits=LOGITS, temperature=1.0, top_k=3, top_p=0.8, slot=0)
    ref = ReferenceSession(SGLANG_FLASHINFER)
    alone = ref.step([probe, Row(logits=LOGITS, top_k=2, slot=1)])
    assert _support(alone[0]) == [0, 1, 2]
    assert alone[0].probs.tolist() == pytest.approx(_frac(8, 6, 3), abs=1e-6)
    mixed = ReferenceSession(SGLANG_FLASHINFER).step([probe, Row(logits=LOGITS, min_p=0.2, slot=1)])
    assert _support(mixed[0]) == [0, 1] and mixed[0].probs.tolist() == pytest.approx(_frac(8, 6), abs=1e-6)
    # the min-p row itself: top-k/top-p off, min-p 0.2 of max .40 = .08 keeps {0,1,2,3}: [8,6,3,2]/19
    assert mixed[1].probs.tolist() == pytest.approx(_frac(8, 6, 3, 2), abs=1e-6)
    # a greedy neighbour's min_p counts too (SGLang keeps it: T = 0 only sets top_k = 1)
    greedy = ReferenceSession(SGLANG_FLASHINFER).step([probe, Row(logits=LOGITS, temperature=0.0, min_p=0.5,
                                                                  slot=1)])
    assert _support(greedy[0]) == [0, 1] and greedy[1].token == 0
    # neighbours outside the batch do not: another vocabulary, or a row rejected by validation
    other_v = Row(logits=torch.zeros(3), min_p=0.5, slot=1)
    assert _support(ReferenceSession(SGLANG_FLASHINFER).step([probe, other_v])[0]) == [0, 1, 2]
    rejected = Row(logits=LOGITS, min_p=0.5, top_p=0.0, slot=1)   # top_p 0 is invalid under SGLang
    got = ReferenceSession(SGLANG_FLASHINFER).step([probe, rejected])
    assert got[1].error == "invalid_top_p" and _support(got[0]) == [0, 1, 2]
    # batch-independent profiles: the default keeps {0,1} either way, sglang (pytorch) {0,1,2}
    for prof, want in ((TRTLLM, [0, 1]), (SGLANG, [0, 1, 2])):
        for nb in (Row(logits=LOGITS, top_k=2, slot=1), Row(logits=LOGITS, min_p=0.2, slot=1)):
            assert _support(ReferenceSession(prof).step([probe, nb])[0]) == want, prof.name


def test_reference_sample_many_is_its_own_batch():
    # 4000 draws of the probe with min_p 0.05 (threshold .0235 after renormalisation: no cut):
    # the row's own min_p switches it to sequential: support {0,1}; without min_p: {0,1,2}.
    ref = ReferenceSession(SGLANG_FLASHINFER)
    seeds = list(range(4000))
    with_min_p = ref.sample_many(Row(logits=LOGITS, top_k=3, top_p=0.8, min_p=0.05), seeds)
    assert with_min_p[2:].sum() == 0 and with_min_p.sum() == 4000
    plain = ref.sample_many(Row(logits=LOGITS, top_k=3, top_p=0.8), seeds)
    assert plain[2] > 0 and plain[3:].sum() == 0


# -- the loader on the real files ---------------------------------------------------------------
def _real_bundle():
    root = loader.find_bundle()
    if not (root / bundle.MANIFEST).is_file():
        pytest.skip(f"no SGLang source bundle at {root} (python -m impls.sglang_gpu.bundle --out .whl/sglang-src "
                    "--from <sglang 0.5.23 wheel> --from <sglang-kernel 0.4.10 wheel>)")
    return root


def test_loader_runs_the_bundled_files_and_leaves_sys_modules_as_it_was():
    root = _real_bundle()
    before = sorted(k for k in sys.modules if k.startswith(("sglang", "sgl_kernel")))
    eng = loader.load(root, kind="cpu")
    assert sorted(k for k in sys.modules if k.startswith(("sglang", "sgl_kernel"))) == before
    assert bundle.versions(eng.manifest) == {"sglang": "0.5.23", "sglang-kernel": "0.4.10"}
    assert eng.constants == {"TOP_K_ALL": 1 << 30, "_SAMPLING_EPS": 1e-6}
    # every decision-making module is the bundle's file, not a stand-in
    for name in ("sglang.srt.layers.sampler", "sglang.srt.sampling.sampling_batch_info",
                 "sglang.srt.sampling.penaltylib.orchestrator", "sgl_kernel.sampling", "sglang.kernels.ops.sampling"):
        mod = eng[name]
        assert not getattr(mod, "__sampcheck_stub__", False)
        assert Path(mod.__file__).resolve().is_relative_to(Path(root).resolve()), name
    assert eng.sampler.SamplingBatchInfo is eng.batch_info.SamplingBatchInfo
    assert eng.sampler.TOP_K_ALL == 1 << 30
    # the server configuration the stand-in publishes, and what the files registered
    assert eng.config.kernel.sampling_backend == "pytorch"
    assert loader.server_config("cuda").kernel.sampling_backend == "flashinfer"
    assert [k.op for k in eng.kernels] == ["sampling.softmax", "sampling.murmur_hash32",
                                           "sampling.denoiser_statistics", "sampling.softcap_row_argmax"]
    with pytest.raises(AttributeError, match="holding only sampling_backend"):
        eng.config.kernel.attention_backend
    # the CUDA kind binds sgl_kernel's wrappers into sampler.py, as sgl_kernel/__init__ re-exports them
    cu = loader.load(root, kind="cuda")
    assert cu.sampler.top_k_renorm_prob is cu["sgl_kernel.sampling"].top_k_renorm_probs
    assert cu.sampler.top_p_renorm_prob is cu["sgl_kernel.sampling"].top_p_renorm_probs


def _rows(neighbour: Row):
    return [Row(logits=LOGITS, temperature=1.0, top_k=3, top_p=0.8, slot=0), neighbour.replace(slot=1)]


def test_cpu_server_path_of_the_loaded_sampler_matches_the_reference_sglang_profile():
    """The loaded sampler.py for a CPU server (pytorch backend): top_k_top_p_min_p_sampling_from_probs_torch."""
    _real_bundle()
    s = SglangFlashInferSession(SGLANG, "cpu", kind="cpu")
    batch = [*_rows(Row(logits=LOGITS, min_p=0.2)), Row(logits=LOGITS, temperature=0.0, slot=2)]
    got = s.step(batch)
    # probe: exactly 3 ranks, then top-p on the unrenormalised sorted p (mass before t2 .70 <= .8 kept,
    # before t3 .85 dropped) -> [8,6,3]/17 whatever the neighbour's min_p; min-p row [8,6,3,2]/19;
    # the greedy row (T = 0 -> top_k 1) is token 0 with a one-token mask.
    assert got[0].probs.tolist() == pytest.approx(_frac(8, 6, 3), abs=1e-6)
    assert got[1].probs.tolist() == pytest.approx(_frac(8, 6, 3, 2), abs=1e-6)
    assert (got[2].token, got[2].mode, got[2].probs.tolist()) == (0, "greedy", [1.0, 0.0, 0.0, 0.0, 0.0])
    assert {r.extra["sglang_path"] for r in got} == {"top_k_top_p_min_p_sampling_from_probs_torch"}
    ref = ReferenceSession(SGLANG).step(batch)
    for g, r in zip(got, ref):
        assert g.probs.tolist() == pytest.approx(r.probs.tolist(), abs=1e-6)
        assert g.token in _support(r)
    # all greedy: argmax (SamplingBatchInfo.is_all_greedy), the first maximum of a tie
    tie = torch.tensor([0.0, 2.0, 2.0, 1.0, -1.0])
    out = s.step([Row(logits=tie, top_k=1, slot=0), Row(logits=LOGITS, temperature=0.0, slot=1)])
    assert [(r.token, r.extra["sglang_path"]) for r in out] == [(1, "argmax"), (0, "argmax")]
    # 3000 draws of the probe: only ids 0..2
    counts = s.sample_many(batch[0], list(range(3000)))
    assert counts.sum() == 3000 and counts[3:].sum() == 0 and bool((counts[:3] > 0).all())


class _FlashInferDouble(types.ModuleType):
    """``flashinfer.sampling`` on a CPU: the rules the profile cites, in PyTorch (float64 decisions), calls recorded.

    ``top_k_renorm_probs``: probs >= the k-th largest kept (RadixTopKRenormProbKernel_MultiCTA, k >= V
    keeps all); ``top_p_renorm_probs``: a token stays iff the mass strictly above it is < top_p;
    ``min_p_sampling_from_probs``: probs >= max * min_p; the joint sampler: both of the first two
    on the same probabilities. Draws: ``torch.multinomial`` on torch's generator.
    """

    def __init__(self):
        super().__init__("flashinfer.sampling")
        self.calls = []

    @staticmethod
    def _per_row(v, n):
        return v.tolist() if isinstance(v, torch.Tensor) else [v] * n

    def _mask(self, probs, fn):
        out = torch.zeros_like(probs)
        for i in range(probs.shape[0]):
            q = probs[i].to(torch.float64)
            keep = fn(i, q, torch.ones_like(q, dtype=torch.bool))
            out[i] = torch.where(keep, probs[i], torch.zeros_like(probs[i]))
        return out

    def top_k_renorm_probs(self, probs, top_k):
        self.calls.append("top_k_renorm_probs")
        ks = self._per_row(top_k, probs.shape[0])
        m = self._mask(probs, lambda i, q, k: top_k_mask(q, k, int(ks[i]), "keep_all"))
        return m / m.sum(-1, keepdim=True)

    def top_p_renorm_probs(self, probs, top_p):
        self.calls.append("top_p_renorm_probs")
        ps = self._per_row(top_p, probs.shape[0])
        m = self._mask(probs, lambda i, q, k: top_p_mask(q, k, float(ps[i]), "mass_above"))
        return m / m.sum(-1, keepdim=True)

    def min_p_sampling_from_probs(self, probs, min_p):
        self.calls.append("min_p_sampling_from_probs")
        ms = self._per_row(min_p, probs.shape[0])
        m = self._mask(probs, lambda i, q, k: min_p_mask(q, k, float(ms[i])))
        return torch.multinomial(m, 1).view(-1).to(torch.int32)

    def top_k_top_p_sampling_from_probs(self, probs, top_k, top_p, filter_apply_order="top_k_first"):
        self.calls.append(f"top_k_top_p_sampling_from_probs({filter_apply_order})")
        assert filter_apply_order == "joint"
        ks, ps = self._per_row(top_k, probs.shape[0]), self._per_row(top_p, probs.shape[0])
        m = self._mask(probs, lambda i, q, k: top_k_mask(q, k, int(ks[i]), "keep_all")
                       & top_p_mask(q, k, float(ps[i]), "mass_above"))
        return torch.multinomial(m, 1).view(-1).to(torch.int32)


@pytest.fixture
def flashinfer_double(monkeypatch):
    fi = _FlashInferDouble()
    pkg = types.ModuleType("flashinfer")
    pkg.sampling = fi
    monkeypatch.setitem(sys.modules, "flashinfer", pkg)
    monkeypatch.setitem(sys.modules, "flashinfer.sampling", fi)
    return fi


def test_cuda_server_branch_is_chosen_per_batch_by_sglang_code(flashinfer_double):
    """The loaded sampler.py for a CUDA server, FlashInfer doubled on the CPU: the min-p switch is SGLang's."""
    root = _real_bundle()
    eng = loader.load(root, kind="cuda", fresh=True)   # sgl_kernel/sampling.py binds the double at load
    assert eng["sgl_kernel.sampling"]._has_flashinfer is True
    s = SglangFlashInferSession(SGLANG_FLASHINFER, "cpu", kind="cuda", engine=eng)
    # batch without min_p: one joint call; probe support {0,1,2} (joint, hand-checked above)
    got = s.step(_rows(Row(logits=LOGITS, top_k=2)))
    assert flashinfer_double.calls[0] == "top_k_top_p_sampling_from_probs(joint)"
    assert got[0].extra["sglang_path"] == JOINT
    assert got[0].probs.tolist() == pytest.approx(_frac(8, 6, 3), abs=1e-6)
    # neighbour top_k 2 (keep_all: no tie at .30): [8,6]/14
    assert got[1].probs.tolist() == pytest.approx(_frac(8, 6), abs=1e-6)
    # batch with a min_p row: renorm, renorm, min-p for every row; probe support {0,1}
    flashinfer_double.calls.clear()
    got = s.step(_rows(Row(logits=LOGITS, min_p=0.2)))
    assert flashinfer_double.calls[:3] == ["top_k_renorm_probs", "top_p_renorm_probs", "min_p_sampling_from_probs"]
    assert got[0].extra["sglang_path"] == SEQUENTIAL
    assert got[0].probs.tolist() == pytest.approx(_frac(8, 6), abs=1e-6)
    assert got[1].probs.tolist() == pytest.approx(_frac(8, 6, 3, 2), abs=1e-6)
    # the reference under the profile predicts both batches
    for nb in (Row(logits=LOGITS, top_k=2), Row(logits=LOGITS, min_p=0.2)):
        mine = s.step(_rows(nb))
        pred = ReferenceSession(SGLANG_FLASHINFER).step(_rows(nb))
        for g, r in zip(mine, pred):
            assert _support(g) == _support(r) and g.token in _support(r)
            assert g.probs.tolist() == pytest.approx(r.probs.tolist(), abs=1e-6)
    # sample_many: the production path (no mask) on copies of the row: its own min_p switches it
    counts = s.sample_many(Row(logits=LOGITS, top_k=3, top_p=0.8, min_p=0.05), list(range(2000)))
    assert counts.sum() == 2000 and counts[2:].sum() == 0


def test_branch_names_follow_sglang_flags():
    f = types.SimpleNamespace
    assert branch(f(is_all_greedy=True), "flashinfer") == "argmax"
    none = f(is_all_greedy=False, need_top_p_sampling=False, need_top_k_sampling=False, need_min_p_sampling=False)
    assert branch(none, "flashinfer") == "sampling_from_probs_torch"
    mp = f(is_all_greedy=False, need_top_p_sampling=False, need_top_k_sampling=False, need_min_p_sampling=True)
    assert branch(mp, "flashinfer") == SEQUENTIAL and branch(mp, "pytorch").endswith("_torch")


# -- on a GPU: the real FlashInfer ------------------------------------------------------------
@pytest.mark.gpu
def test_gpu_flashinfer_min_p_switch():
    """The invariant case's batches on CUDA with FlashInfer 0.7.2: joint {0,1,2}, then sequential {0,1}."""
    _real_bundle()
    impl = SglangFlashInferImpl()
    assert impl.available("cuda") is None, impl.available("cuda")
    assert impl.version().startswith("0.5.23 (sglang-kernel 0.4.10, flashinfer ")
    s = impl.open_session("cuda")
    got = s.step(_rows(Row(logits=LOGITS, top_k=2)))
    assert got[0].extra["sglang_path"] == JOINT
    assert _support(got[0]) == [0, 1, 2] and got[0].probs.tolist() == pytest.approx(_frac(8, 6, 3), abs=1e-5)
    got = s.step(_rows(Row(logits=LOGITS, min_p=0.2)))
    assert got[0].extra["sglang_path"] == SEQUENTIAL
    assert _support(got[0]) == [0, 1] and got[0].probs.tolist() == pytest.approx(_frac(8, 6), abs=1e-5)
    assert _support(got[1]) == [0, 1, 2, 3]
    # all greedy: argmax, ties to the first maximum
    out = s.step([Row(logits=torch.tensor([0.0, 2.0, 2.0, 1.0, -1.0]), top_k=1, slot=0)])
    assert (out[0].token, out[0].extra["sglang_path"]) == (1, "argmax")
    d = impl.describe("cuda")
    assert d["versions"] == {"sglang": "0.5.23", "sglang-kernel": "0.4.10"} and d["sampling_backend"] == "flashinfer"
    assert sorted(d["files"]) == sorted(bundle.FILES)


@pytest.mark.gpu
def test_gpu_sample_many_stays_in_the_predicted_support():
    """20000 draws per branch on CUDA: no token outside the support the reference predicts."""
    _real_bundle()
    s = SglangFlashInferImpl().open_session("cuda")
    for row, support in ((Row(logits=LOGITS, top_k=3, top_p=0.8), [0, 1, 2]),
                         (Row(logits=LOGITS, top_k=3, top_p=0.8, min_p=0.05), [0, 1])):
        counts = s.sample_many(row, list(range(20000)))
        assert counts.sum() == 20000 and torch.nonzero(counts).flatten().tolist() == support
        # the expected frequencies ([8,6,3]/17 or [8,6]/14) within 5 sigma of a binomial
        p = torch.tensor(_frac(*[8, 6, 3][:len(support)], n=5), dtype=torch.float64)
        sigma = torch.sqrt(p * (1 - p) / 20000)
        assert bool(((counts.double() / 20000 - p).abs() <= 5 * sigma + 1e-12).all()), counts.tolist()


@pytest.mark.gpu
def test_gpu_corpus_invariant_case_is_a_known_diff():
    """The invariant case through the harness on CUDA: broken as the profile predicts (known-diff)."""
    _real_bundle()
    from harness.corpus.load import load_case
    from harness.judge import Judge
    case = load_case(Path(__file__).resolve().parents[1] / "cases/invariants/row-filters-ignore-neighbour-min-p.toml")
    res = Judge([], 1, device="cuda").evaluate(case, SglangFlashInferImpl(), SglangFlashInferImpl().version())
    assert res.status == "known-diff", res.details.get("message")
