"""Tests of the source-loaded TensorRT-LLM adapter (impls/trtllm).

The loader's error handling and the adapter's ``skip`` need no checkout. The
rest needs a TensorRT-LLM source checkout named by ``SAMPCHECK_TRTLLM_SRC``
(the files listed in golden/engines/README.md, section TensorRT-LLM) and is
skipped without one. Expected values are derived by hand in the comments.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest
import torch

from impls.base import Row
from impls.trtllm import TrtllmImpl, loader

SRC = os.environ.get(loader.ENV_VAR)
needs_checkout = pytest.mark.skipif(
    not SRC or not Path(SRC).is_dir(),
    reason=(f"no TensorRT-LLM source checkout: {loader.ENV_VAR} is unset" if not SRC else
            f"no TensorRT-LLM source checkout: {loader.ENV_VAR}={SRC} does not exist")
    + " (see golden/engines/README.md, section TensorRT-LLM)")


# -- without a checkout -------------------------------------------------------------
def test_skip_reason_without_checkout(monkeypatch):
    monkeypatch.delenv(loader.ENV_VAR, raising=False)
    why = TrtllmImpl().available("cpu")
    assert why is not None and "--trtllm-src" in why and loader.ENV_VAR in why


def test_missing_path_is_a_clear_error(tmp_path):
    with pytest.raises(loader.CheckoutError, match="no such directory"):
        loader.load(tmp_path / "nowhere")
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(loader.CheckoutError, match="not a directory"):
        loader.load(f)
    assert "no such directory" in TrtllmImpl(str(tmp_path / "nowhere")).available("cpu")


def test_checkout_without_the_files_names_the_missing_one(tmp_path):
    with pytest.raises(loader.CheckoutError) as e:
        loader.load(tmp_path)
    for rel in loader.REQUIRED:
        assert f"{loader.SAMPLER_DIR}/{rel}" in str(e.value)
    d = tmp_path / loader.SAMPLER_DIR
    (d / "ops").mkdir(parents=True)
    (d / "ops" / "vanilla.py").write_text("")
    (d / "token_ban.py").write_text("")
    with pytest.raises(loader.CheckoutError) as e:
        loader.load(tmp_path)
    msg = str(e.value)
    assert f"missing {loader.SAMPLER_DIR}/seed_manager.py" in msg and "token_ban.py (" not in msg.split("missing")[1]


def _checkout(root: Path, vanilla: str, token_ban: str = "", seed_manager: str = "", beam_search: str = None) -> Path:
    """A checkout layout holding the given file contents (written by the tests, not TensorRT-LLM's code)."""
    d = root / loader.SAMPLER_DIR
    (d / "ops").mkdir(parents=True)
    (d / "ops" / "vanilla.py").write_text(vanilla)
    (d / "token_ban.py").write_text(token_ban)
    (d / "seed_manager.py").write_text(seed_manager)
    if beam_search is not None:
        (d / "beam_search.py").write_text(beam_search)
    return root


def test_file_lacking_a_function_or_importing_the_unknown_is_named(tmp_path):
    _checkout(tmp_path, "def greedy_search_sampling_batch(x):\n    return x\n")
    with pytest.raises(loader.CheckoutError, match=r"ops/vanilla.py defines no occurrence_penalized_logits"):
        loader.load(tmp_path)
    other = _checkout(tmp_path / "other", "from tensorrt_llm.bindings.internal import runtime\n")
    with pytest.raises(loader.CheckoutError, match=r"ops/vanilla.py failed: it imports 'tensorrt_llm.bindings.internal'"):
        loader.load(other)


def _fake_checkout(root: Path, beam_search: str = None) -> Path:
    """The smallest files that define every name the loader checks (not TensorRT-LLM's code)."""
    return _checkout(root,
                     "def occurrence_penalized_logits(*a): pass\n"
                     "def top_k_top_p_sampling_batch(*a): pass\n"
                     "def greedy_search_sampling_batch(*a): pass\n"
                     "class Fusions:\n"
                     "    def update_occurrence_workspace(*a): pass\n"
                     "    def apply_batched_occurrence_penalties(*a): pass\n"
                     "    def _apply_occurrence_penalties_impl(*a): pass\n"
                     "    def _top_p_decay_update_impl(*a): pass\n",
                     "class SynchronousTokenBanHandler: pass\n", "class _SeedManager: pass\n", beam_search)


def test_finish_falls_back_to_the_reference_and_a_broken_file_says_so(tmp_path):
    # no finish_reasons.py: finish is the reference's, quietly (an older checkout)
    root = _fake_checkout(tmp_path / "a")
    impl = TrtllmImpl(str(root))
    assert impl.stages["finish"] == "reference" and TrtllmImpl.STAGES["finish"] == "own"
    facts = impl.describe()
    assert [p["from"] for p in facts["pipeline"] if p["stage"] == "finish reasons"] == ["reference"]
    assert "warnings" not in facts and any(u.startswith("finish_reasons.py (") for u in facts["unverified"])
    # a finish_reasons.py that does not load: the same fallback, and a warning naming the file and line
    root = _fake_checkout(tmp_path / "b")
    (root / loader.SAMPLER_DIR / "finish_reasons.py").write_text("class FinishReasonsHandler:\n    x = (\n")
    impl = TrtllmImpl(str(root))
    assert impl.stages["finish"] == "reference"
    (warning,) = impl.describe()["warnings"]
    assert warning.startswith(f"loading {loader.SAMPLER_DIR}/finish_reasons.py failed: SyntaxError: ")
    assert "line 2" in warning and warning.endswith("finish reasons: the reference's)")


def test_beam_search_file_is_optional(tmp_path):
    eng = loader.load(_fake_checkout(tmp_path / "a"))
    assert eng.beam_search is None and eng.sampler_strategy is None and eng.beam_path is None
    assert eng.optional_missing == {
        "beam_search.py": f"{loader.SAMPLER_DIR}/beam_search.py is not in the checkout",
        "sampler_strategy.py": f"{loader.SAMPLER_DIR}/sampler_strategy.py is not in the checkout",
        "finish_reasons.py": f"{loader.SAMPLER_DIR}/finish_reasons.py is not in the checkout"}
    impl = TrtllmImpl(str(tmp_path / "a"))
    assert impl.unsupported(Row(torch.zeros(3), use_beam_search=True)) == (
        f"beam search: {loader.SAMPLER_DIR}/beam_search.py is not in the checkout")
    eng = loader.load(_fake_checkout(tmp_path / "b", "import sampcheck_no_such_module\n"))
    assert eng.beam_search is None
    assert "imports 'sampcheck_no_such_module'" in eng.optional_missing["beam_search.py"]
    # the stand-ins beam_search.py imports resolve (names from the engine's import lines)
    eng = loader.load(_fake_checkout(tmp_path / "c", (
        "from tensorrt_llm._utils import nvtx_range, prefer_pinned\n"
        "from tensorrt_llm.bindings.executor import FinishReason\n"
        "from ..llm_request import LlmRequest, LlmRequestState\n"
        "from .logprobs import LogProbsStore, convert_logprobs_tensor_to_list, get_logprobs_from_request\n"
        "from .ops.flashinfer import radix_topk_op\n"
        "from .sampler_common import _get_beam_width_in, _unwrap_singleton, int_tensor\n"
        "BEAM_SEARCH_PAD_TOKEN = -1\n"
        "class BeamSearchMetadata: pass\n"
        "def beam_candidate_topk(*a): pass\n"
        "def beam_search_sampling_batch(*a): return FinishReason.NOT_FINISHED.value\n")))
    assert eng.beam_search is not None and "beam_search.py" not in eng.optional_missing
    assert eng.beam_path == "regular"  # it has the regular step; no sampler_strategy.py is needed for it
    assert eng.beam_search.beam_search_sampling_batch() == 0
    assert TrtllmImpl(str(tmp_path / "c")).unsupported(Row(torch.zeros(3), use_beam_search=True)) == (
        "beam search runs in scenarios only (beam_search.py drives whole beam requests)")
    with pytest.raises(NotImplementedError, match="rows wider than 10000 tokens"):
        eng.beam_search.radix_topk_op(torch.zeros(1, 20000), 2)


_CBA_ONLY_BEAM_SEARCH = (  # the names the candidate-beams path needs, no regular step (written here, not TRT-LLM's)
    "from tensorrt_llm._torch.flashinfer_utils import IS_FLASHINFER_AVAILABLE\n"
    "from tensorrt_llm.executor.result import Logprob\n"
    "from .sampler_features import _SideStreamCopier\n"
    "from .sampler_common import _get_beam_width_in, int_tensor\n"
    "BEAM_SEARCH_PAD_TOKEN = {pad}\n"
    "class BeamSearchMetadata: pass\n"
    "class BeamSearchEarlyStop: pass\n"
    "class CBAState: pass\n"
    "class CBAGroupHost: pass\n"
    "def beam_candidate_topk(*a): pass\n"
    "def beam_search_sampling_batch_cba(*a): pass\n"
    "def _prepare_beam_history_cba(*a): pass\n"
    "def finalize_beam(*a): pass\n")
_SAMPLER_STRATEGY = (  # its import lines are those of sampler_strategy.py@029e223d (absolute ones included)
    "from tensorrt_llm._torch.pyexecutor.sampler.beam_search import BEAM_SEARCH_PAD_TOKEN\n"
    "from tensorrt_llm._torch.pyexecutor.sampler.ops.flashinfer import sanitize_top_k, softmax_op\n"
    "from tensorrt_llm._torch.pyexecutor.sampler.ops.vanilla import greedy_search_sampling_batch\n"
    "from tensorrt_llm._utils import maybe_pin_memory, prefer_pinned\n"
    "from tensorrt_llm.sampling_params import LogprobMode, SamplingParams\n"
    "from ..llm_request import LlmRequest\n"
    "from .sampler_common import RequestSeeds, UtilsSamplingParams, _get_max_beam_width, top_p_decay_active\n"
    "from .top_p_decay import TopPDecayMetadata\n"
    "PAD = BEAM_SEARCH_PAD_TOKEN\n"
    "def sample(*a): pass\n"
    "class BeamSearch: pass\n")


def test_beam_path_is_read_from_the_files(tmp_path):
    import sys
    # the regular step gone and no sampler_strategy.py: nothing selects the candidate-beams step -> n/a, saying why
    eng = loader.load(_fake_checkout(tmp_path / "e", _CBA_ONLY_BEAM_SEARCH.format(pad=-1)))
    assert eng.beam_search is not None and eng.beam_path is None
    assert "no regular beam step" in eng.beam_unavailable() and "sampler_strategy.py is not in the checkout" in (
        eng.beam_unavailable())
    assert TrtllmImpl(str(tmp_path / "e")).unsupported(Row(torch.zeros(3), use_beam_search=True)).startswith(
        "beam search: ")
    # with sampler_strategy.py: the candidate-beams path; its absolute imports resolve to its own checkout's
    # files (two checkouts in one process, pad tokens -1 and -7), and the aliases are gone afterwards
    engines = []
    for name, pad in (("f", -1), ("g", -7)):
        root = _fake_checkout(tmp_path / name, _CBA_ONLY_BEAM_SEARCH.format(pad=pad))
        (root / loader.SAMPLER_DIR / "sampler_strategy.py").write_text(_SAMPLER_STRATEGY)
        engines.append(loader.load(root))
    assert [e.beam_path for e in engines] == ["candidate_beams", "candidate_beams"]
    assert [e.sampler_strategy.PAD for e in engines] == [-1, -7]
    assert engines[1].sampler_strategy.greedy_search_sampling_batch is engines[1].vanilla.greedy_search_sampling_batch
    assert "tensorrt_llm._torch.pyexecutor.sampler.beam_search" not in sys.modules
    with pytest.raises(NotImplementedError, match="ops.flashinfer.softmax_op is a stand-in"):
        engines[0].sampler_strategy.softmax_op(torch.zeros(1, 2), None)
    with pytest.raises(NotImplementedError, match="SamplingParams.params_imply_greedy_decoding is a stand-in"):
        engines[0].sampler_strategy.SamplingParams.params_imply_greedy_decoding(temperature=0.0)
    # sampler_strategy.py without beam_search.py is not tried (it imports it)
    root = _fake_checkout(tmp_path / "h")
    (root / loader.SAMPLER_DIR / "sampler_strategy.py").write_text(_SAMPLER_STRATEGY)
    eng = loader.load(root)
    assert eng.sampler_strategy is None and "it imports beam_search.py" in eng.optional_missing["sampler_strategy.py"]
    # a beam_search.py with neither step is not loaded
    eng = loader.load(_fake_checkout(tmp_path / "i", "BEAM_SEARCH_PAD_TOKEN = -1\nclass BeamSearchMetadata: pass\n"
                                                     "def beam_candidate_topk(*a): pass\n"))
    assert eng.beam_search is None and "defines no beam step" in eng.optional_missing["beam_search.py"]


def test_profile_is_chosen_by_the_checkouts_beam_path(tmp_path, monkeypatch):
    """trtllm-cba where every beam mode runs on the candidate-beams array, trtllm otherwise (fake checkouts)."""
    from harness.run.isolation import _describe
    from impls.base import declaration_problems
    from impls.profiles import PROFILES, TRTLLM, TRTLLM_CBA, profile_diff
    monkeypatch.delenv(loader.ENV_VAR, raising=False)
    cba = _fake_checkout(tmp_path / "cba", _CBA_ONLY_BEAM_SEARCH.format(pad=-1))
    (cba / loader.SAMPLER_DIR / "sampler_strategy.py").write_text(_SAMPLER_STRATEGY)
    regular = _fake_checkout(tmp_path / "regular", (
        "from tensorrt_llm.bindings.executor import FinishReason\n"
        "BEAM_SEARCH_PAD_TOKEN = -1\nclass BeamSearchMetadata: pass\n"
        "def beam_candidate_topk(*a): pass\ndef beam_search_sampling_batch(*a): pass\n"))
    impl = TrtllmImpl(str(cba))
    assert impl._engine is None                      # nothing is loaded until the profile or the engine is asked for
    assert impl.profile is TRTLLM_CBA and impl.engine().beam_path == "candidate_beams"
    assert TrtllmImpl(str(regular)).profile is TRTLLM and loader.load(regular).beam_path == "regular"
    assert TrtllmImpl(str(_fake_checkout(tmp_path / "none"))).profile is TRTLLM  # no beam_search.py: no beam path
    assert TrtllmImpl(str(cba), profile=TRTLLM).profile is TRTLLM                 # a profile given wins
    # the two profiles differ in the beam rules of beam_search.py@50aec1cb only, each cited; trtllm-cba has no
    # golden files (not registered)
    assert profile_diff(TRTLLM, TRTLLM_CBA) == ["beam_early_stopping_true", "beam_done_running_reason"]
    assert "@50aec1cb" in TRTLLM_CBA.citations["beam_done_running_reason"] and "trtllm-cba" not in PROFILES
    assert declaration_problems(impl) == []
    # no checkout, or one that does not load: profile trtllm, and the harness's skip names the reason
    for src in (None, str(tmp_path / "nowhere"), str(tmp_path)):
        info = _describe(TrtllmImpl(src), "cpu")
        assert info["profile"] is TRTLLM and info["skip_reason"], src
    assert "no such directory" in _describe(TrtllmImpl(str(tmp_path / "nowhere")), "cpu")["skip_reason"]
    assert "missing" in _describe(TrtllmImpl(str(tmp_path)), "cpu")["skip_reason"]


def test_cli_option_sets_the_environment(monkeypatch, tmp_path, capsys):
    from harness.cli import build_parser, main
    monkeypatch.setenv(loader.ENV_VAR, "restored-after-the-test")
    for cmd in (["run", "--impl", "trtllm"], ["record", "--impl", "trtllm"], ["list", "impls"]):
        assert build_parser().parse_args(cmd + ["--trtllm-src", "x"]).impl_opt_trtllm_src == "x"
    main(["list", "cases", "--trtllm-src", str(tmp_path)])
    assert os.environ[loader.ENV_VAR] == str(tmp_path.resolve())


def test_registered_with_its_own_option_and_stages():
    from impls import registry
    impl = registry.create("trtllm")
    # the profile follows the checkout $SAMPCHECK_TRTLLM_SRC names (test_profile_is_chosen_by_the_checkouts_beam_path)
    cba = bool(SRC) and Path(SRC).is_dir() and loader.load(SRC).beam_path == "candidate_beams"
    assert impl.profile.name == ("trtllm-cba" if cba else "trtllm")
    assert registry.entry("trtllm").origin == "impls.trtllm"
    # the option is the adapter's declaration, not the harness's: the CLI adds what implementations declare
    # (other adapters declare theirs: only this one's is checked)
    flags = [o.flag for o in registry.cli_options()]
    assert flags.count("--trtllm-src") == 1 and [o.flag for o in TrtllmImpl.cli_options] == ["--trtllm-src"]
    # the draw, logprobs and finish reasons are borrowed from the reference (PIPELINE); penalties are the engine's
    assert (impl.stages["draw"], impl.stages["penalties"], impl.stages["logit_bias"]) == ("reference", "own", "adapter")


# -- with a checkout ----------------------------------------------------------------
@pytest.fixture(scope="module")
def engine():
    return loader.load(SRC)


@pytest.fixture()
def session(engine):
    return TrtllmImpl(SRC).open_session("cpu")


@needs_checkout
def test_penalty_formula_on_a_three_token_row(engine):
    # x = [2, -1, 0.5]; token 0 seen once, token 1 twice; r = 2, presence 0.5, frequency 0.25:
    # t0: 2 / 2 - (0.5 + 0.25 * 1) = 0.25; t1: -1 * 2 - (0.5 + 0.25 * 2) = -3; t2 unseen: 0.5.
    f = engine.vanilla.occurrence_penalized_logits
    x = torch.tensor([[2.0, -1.0, 0.5]])
    count = torch.tensor([[1, 2, 0]], dtype=torch.int32)
    out = f(x, count=count, seen_for_repetition=count > 0, seen_for_presence=count > 0,
            repetition=torch.tensor([[2.0]]), presence=torch.tensor([[0.5]]), frequency=torch.tensor([[0.25]]))
    assert out.tolist() == [[0.25, -3.0, 0.5]]
    # a -inf (a ban written by the bias) stays -inf; a finite overflow is clamped to finfo.max
    x = torch.tensor([[float("-inf"), 3e38, 1.0]])
    out = f(x, count=torch.ones(1, 3, dtype=torch.int32), seen_for_repetition=torch.ones(1, 3, dtype=torch.bool),
            seen_for_presence=torch.zeros(1, 3, dtype=torch.bool), repetition=torch.tensor([[0.5]]),
            presence=torch.tensor([[0.0]]), frequency=torch.tensor([[0.0]]))
    assert out[0, 0] == float("-inf") and out[0, 1] == torch.finfo(torch.float32).max and out[0, 2] == 2.0


@needs_checkout
def test_penalty_stage_counts_prompt_and_ignores_its_prefix_for_presence(session):
    # prompt [0], generated [1, 1]: as above -> [0.25, -3, 0.5]. With prompt_ignore_length = 1 token 0 is
    # seen for repetition only: 2 / 2 = 1.0.
    row = Row(logits=torch.tensor([2.0, -1.0, 0.5]), prompt=[0], generated=[1, 1], repetition_penalty=2.0,
              presence_penalty=0.5, frequency_penalty=0.25)
    assert session._engine_penalties(row.logits, row).tolist() == [0.25, -3.0, 0.5]
    assert session._engine_penalties(row.logits, row.replace(prompt_ignore_length=1)).tolist() == [1.0, -3.0, 0.5]


@needs_checkout
def test_bans(session):
    # V = 8, prompt [5, 1, 2], generated [1]; min_length 3 with ignore_eos still bans the original end id 6;
    # bad words [3] (always), [1, 4] (history ends with 1: ban 4), [2, 0] (does not end with 2: no ban);
    # no_repeat_ngram 2: prefix [1], earlier bigram (1, 2): ban 2.
    row = Row(logits=torch.zeros(8), prompt=[5, 1, 2], generated=[1], min_length=3, end_id=6, ignore_eos=True,
              bad_words=[[3], [1, 4], [2, 0]], no_repeat_ngram_size=2)
    out = session._engine_bans(row.logits, row)
    assert [i for i in range(8) if out[i] == float("-inf")] == [2, 3, 4, 6]
    done = row.replace(generated=[7, 7, 7], bad_words=[], no_repeat_ngram_size=None)
    assert torch.equal(session._engine_bans(done.logits, done), torch.zeros(8))


@needs_checkout
def test_vanilla_op_applies_min_p_first(engine):
    # logits [2, 1.5, 1, 0, -1], T = 1: p = [0.4631, 0.2809, 0.1704, 0.0627, 0.0231]. min_p = 0.3 keeps
    # p >= 0.1389: {0, 1, 2}; renormalised [0.5065, 0.3072, 0.1863]; top_p = 0.8 stops at token 1
    # (cumsum 0.8137): {0, 1}, probs 1 / (1 + e^-0.5) = 0.6224593 and 0.3775407. (Min-p last would
    # keep {0, 1, 2}.)
    _, p = engine.vanilla.top_k_top_p_sampling_batch(torch.tensor([[2.0, 1.5, 1.0, 0.0, -1.0]]), temperature=1.0,
                                                     top_p=0.8, min_p=0.3, generator=torch.Generator().manual_seed(0))
    a = 1 / (1 + math.exp(-0.5))
    assert p[0].tolist() == pytest.approx([a, 1 - a, 0, 0, 0], abs=1e-6)


@needs_checkout
def test_top_p_decay_update(session):
    # p0 0.9, decay 0.5, floor 0.2, reset id 7: after 1 -> 0.45; after 2 -> max(0.225, 0.2) = 0.225;
    # after 7 -> 0.9 (reset); after 3 -> 0.45. And [1, 2, 3]: 0.225 -> max(0.1125, 0.2) = 0.2.
    row = Row(logits=torch.zeros(8), top_p=0.9, top_p_decay=0.5, top_p_min=0.2, top_p_reset_ids=[7])
    f32 = lambda v: float(torch.tensor(v, dtype=torch.float32))  # noqa: E731
    assert session._engine_decayed_top_p(row.replace(generated=[1, 2, 7, 3]), 0.9) == f32(0.45)
    assert session._engine_decayed_top_p(row.replace(generated=[1, 2, 3]), 0.9) == f32(0.2)


@needs_checkout
def test_seed_manager_strides_and_unseeded_slots(engine):
    # seed_manager.py: offsets advance by OFFSET_STRIDE = 32 per row and call; unseeded rows take the global
    # seed and their own slot's offset (not a shared counter); a seeded request logs the FlashInfer warning.
    from impls.trtllm.session import FakeRequest
    sm = engine.seed_manager._SeedManager(max_num_sequences=3, global_seed=42)
    reqs = [FakeRequest(Row(logits=torch.zeros(2), slot=s, request_id=f"r{s}"), seed) for s, seed in
            ((0, 7), (1, None), (2, None))]
    sm.observe(reqs)
    first = sm.make_row_seeds([0, 1, 2], device=torch.device("cpu"))
    sm.advance([0, 1, 2])
    second = sm.make_row_seeds([0, 1, 2, 0], device=torch.device("cpu"))
    assert first.seed.tolist() == [7, 42, 42] and first.offset.tolist() == [0, 0, 0]
    assert second.offset.tolist() == [32, 32, 32, 64]
    assert any("only the first row's seed applies" in w for w in engine.warnings())


@needs_checkout
def test_describe_and_version(engine):
    from packaging.version import Version
    impl = TrtllmImpl(SRC)
    assert impl.available("cpu") is None
    Version(impl.version().split()[0])  # findings.toml ranges must be able to match it
    facts = impl.describe()
    optional = {r for r, m in (("beam_search.py", engine.beam_search), ("sampler_strategy.py", engine.sampler_strategy),
                               ("finish_reasons.py", engine.finish_reasons))
                if m is not None}
    assert set(facts["files"]) == {f"{loader.SAMPLER_DIR}/{r}" for r in (*loader.REQUIRED, *optional)}
    whose = {p["stage"]: p["from"] for p in facts["pipeline"]}
    assert whose["occurrence penalties"] == "engine" and whose["the draw"] == "reference"
    assert whose["finish reasons"] == ("engine" if engine.finish_reasons is not None else "reference")
    assert facts["beam_path"] == engine.beam_path
    if engine.beam_path == "candidate_beams":
        assert whose["beam search dispatch (every early_stopping mode)"] == "engine"
        assert not any(s.startswith("beam search (early_stopping") for s in whose)
    elif engine.beam_path == "regular":
        assert whose["beam search (early_stopping False / never: candidate-beams array)"] == "n/a"
    assert any("TorchSampler" in u for u in facts["unverified"])


@needs_checkout
def test_step_and_statuses_on_a_few_cases(tmp_path):
    from harness.corpus.load import CASES_DIR
    from harness.run.runner import run
    cases = ["penalties/repetition-sign-branches-with-zero", "bans/bad-word-multi-token-needs-prefix",
             "filters/top-p-boundary-ties-kept", "beam/length-penalty-at-one",
             "beam/length-penalty-frozen-slots-generated-only"]
    missing = [c for c in cases if not (CASES_DIR / f"{c}.toml").is_file()]
    assert not missing, f"cases this test names are gone from the corpus: {missing}"
    out = run([TrtllmImpl(SRC)], cases, tmp_path, progress=False, isolate=False)
    status = {r["case"]: r["status"] for r in out.doc["results"]}
    path = loader.load(SRC).beam_path
    for c, s in status.items():
        if path is None and c.startswith("beam/"):
            assert s == "n/a", (c, s)
        elif c == "beam/length-penalty-at-one":
            # early_stopping = false: the candidate-beams array, driven only where every mode goes there
            assert s == ("pass" if path == "candidate_beams" else "n/a"), (c, s)
        elif c == "beam/length-penalty-frozen-slots-generated-only":
            # early_stopping unset (TRUE): the regular path's frozen slots; on the candidate-beams path the EOS
            # candidate [3] goes to the pool and slot 1 continues with [1] instead (beam_tokens [[0, 1], ...]),
            # which profile trtllm-cba (beam_early_stopping_true = "pool") predicts, unlike the default
            assert s == ("pass" if path == "regular" else "known-diff"), (c, s)
        elif c == "filters/top-p-boundary-ties-kept":
            assert s == "known-bug"  # findings.toml: trtllm-vanilla-top-p-cuts-ties
        else:
            assert s == "pass", (c, s)


@needs_checkout
def test_beam_select_by_hand(session):
    """Two beams, vocab 3: beam 0 live (cum -1, logits ln 1, ln 3, ln 4: logprobs ln 1/8, ln 3/8, ln 1/2),
    beam 1 finished (cum -1.5, one candidate with logprob 0, emitted as the pad token -1)."""
    if session.engine.beam_path != "regular":
        pytest.skip(f"the checkout's beam path is {session.engine.beam_path!r}: no regular (frozen-slots) step")
    logits = torch.tensor([[0.0, math.log(3), math.log(4)], [0.0, 0.0, 0.0]])
    cum = torch.tensor([-1.0, -1.5])
    # No length penalty: candidates -1.5 (beam 1), -1 + ln 1/2 = -1.6931 (beam 0, token 2), -1.9808, -3.0794.
    out = session.beam_select(logits, cum, [False, True], [2, 1], 2, None, 0.0, 0.0)
    assert [(b, t) for _, b, t in out] == [(1, -1), (0, 2)]
    assert [c for c, _, _ in out] == pytest.approx([-1.5, -1 + math.log(0.5)], abs=1e-6)
    # Length penalty 1: keys are cum / generated length (beam 0's candidates 3, the frozen beam 1): beam 1
    # -1.5 / 1 falls behind -1.6931 / 3 and -1.9808 / 3; the stored cums stay raw.
    out = session.beam_select(logits, cum, [False, True], [2, 1], 2, None, 1.0, 0.0)
    assert [(b, t) for _, b, t in out] == [(0, 2), (0, 1)]
    assert [c for c, _, _ in out] == pytest.approx([-1 + math.log(0.5), -1 + math.log(3 / 8)], abs=1e-6)
    # Temperature 2 divides the logits first: logprobs of beam 0 become ln(1/(1+sqrt3+2)) ... token 2 best.
    out = session.beam_select(logits, cum, [False, True], [2, 1], 1, 2.0, 0.0, 0.0)
    z = 1 + math.sqrt(3) + 2
    assert out == [(pytest.approx(-1.5, abs=1e-6), 1, -1)]
    out = session.beam_select(logits[:1], cum[:1], [False], [2], 1, 2.0, 0.0, 0.0)
    assert out[0][1:] == (0, 2) and out[0][0] == pytest.approx(-1 + math.log(2 / z), abs=1e-6)


@needs_checkout
def test_beam_cases_judge_the_engines_selection(tmp_path, monkeypatch):
    """Mutation: an engine whose candidate ranking ignores the length penalty fails the frozen-slots case."""
    from harness.run.runner import run
    eng = loader.load(SRC)
    if eng.beam_path != "regular":
        pytest.skip(f"the checkout's beam path is {eng.beam_path!r}: no regular (frozen-slots) step")
    real = eng.beam_search.beam_candidate_topk

    def no_length_penalty(logprobs, **kw):
        kw["length_penalty"] = None
        return real(logprobs, **kw)

    monkeypatch.setattr(eng.beam_search, "beam_candidate_topk", no_length_penalty)
    out = run([TrtllmImpl(SRC)], ["beam/length-penalty-frozen-slots-generated-only"], tmp_path, progress=False,
              isolate=False)
    assert [r["status"] for r in out.doc["results"]] == ["fail"]


# -- the candidate-beams-array path (a checkout whose sampler_strategy.py sends every mode there) -------------
def _cba_engine():
    eng = loader.load(SRC)
    if eng.beam_path != "candidate_beams":
        pytest.skip(f"the checkout's beam path is {eng.beam_path!r}, not the candidate-beams array for every mode")
    return eng


def _two_beam_spec(early_stopping):
    """W = 2, V = 4, end id 3, prompt [2], max_new_tokens 4; logits ln p by position, the last row repeated:
    p0 = [0.5, 0.3, 0.15, 0.05], then p1 = [0.1, 0.2, 0.09, 0.61]."""
    from impls.reference.scenario_types import RequestSpec, ScenarioSpec
    from impls.reference.scripted import TableModel
    ln = lambda ps: [math.log(p) for p in ps]  # noqa: E731
    model = TableModel([ln([0.5, 0.3, 0.15, 0.05]), ln([0.1, 0.2, 0.09, 0.61])])
    req = RequestSpec(id="a", slot=0, fields={"prompt": [2], "use_beam_search": True, "end_id": 3,
                                              "max_new_tokens": 4}, beam_width=2, early_stopping=early_stopping)
    return ScenarioSpec(model=model, requests=[req])


@needs_checkout
@pytest.mark.parametrize("early_stopping", [True, None])
def test_candidate_beams_true_stops_once_the_pool_is_full(monkeypatch, early_stopping):
    """early_stopping True (or unset: from_raw(None) = TRUE) on the candidate-beams array, by hand.

    Step 0 (one beam in, W + max(W, 1) = 4 candidates): [0] ln .5 = -0.693147, [1] ln .3 = -1.203973,
    [2] ln .15 = -1.897120, [3] ln .05 = -2.995732 (end id, ranked 3 >= W: not pooled). Slots [0], [1].
    Step 1: (0,3) -0.693147 + ln .61 = -1.187443 and (1,3) -1.203973 - 0.494296 = -1.698269 are end-id candidates
    ranked 0 and 1: both pooled (length penalty 0: score = cum). The slots continue with the first two others,
    (0,1) -0.693147 + ln .2 = -2.302585 and (1,1) -2.813411. Pool full: TRUE is done at step 1.
    Output: [pool | running] by score: [0,3], [1,3], both end_id.
    """
    eng = _cba_engine()
    calls = []
    real = eng.sampler_strategy.sample

    def spy(strategy, logits, **kw):
        calls.append((strategy.beam_width_in, strategy.beam_width_out, int(strategy.early_stopping),
                      strategy.temperature, strategy.length_penalty))
        return real(strategy, logits, **kw)

    monkeypatch.setattr(eng.sampler_strategy, "sample", spy)
    out = TrtllmImpl(SRC).run_scenario(_two_beam_spec(early_stopping)).requests["a"]
    # the engine's dispatch ran each step: BeamSearchEarlyStop.TRUE = 1, temperature unset -> 1.0, no penalty
    assert calls == [(1, 2, 1, 1.0, 0.0), (2, 2, 1, 1.0, 0.0)]
    assert [s.tokens for s in out.steps] == [[0, 1], [1, 1]]
    assert [s.predecessors for s in out.steps] == [[0, 0], [0, 1]]
    assert [s.cum_logprobs for s in out.steps] == [pytest.approx([-0.693147, -1.203973], abs=1e-6),
                                                   pytest.approx([-2.302585, -2.813411], abs=1e-6)]
    assert out.beams == [[0, 3], [1, 3]]
    assert out.cum_logprobs == pytest.approx([-1.187443, -1.698269], abs=1e-6)
    assert out.scores == pytest.approx([-1.187443, -1.698269], abs=1e-6)
    assert out.beam_finish_reasons == ["end_id", "end_id"] and out.finish_reason == "end_id"
    assert out.finish_step == 1


@needs_checkout
def test_candidate_beams_false_weighs_what_is_attainable():
    """The same request with early_stopping False: at step 1 the pool is full, but its worst score -1.698269 is
    below the best candidate's -1.187443 (bound: the current length, ** 0): not done. Step 2 (p1 again):
    (0,3) -2.302585 - 0.494296 = -2.796881, (1,3) -3.307707 are pooled candidates that do not enter the best two;
    (0,1) -3.912023, (1,1) -4.422849 continue. Now -1.698269 >= -2.796881: done at step 2. Same two beams."""
    _cba_engine()
    out = TrtllmImpl(SRC).run_scenario(_two_beam_spec(False)).requests["a"]
    assert out.finish_step == 2 and out.beams == [[0, 3], [1, 3]]
    assert [s.tokens for s in out.steps] == [[0, 1], [1, 1], [1, 1]]
    assert out.steps[2].cum_logprobs == pytest.approx([-3.912023, -4.422849], abs=1e-6)
    assert out.beam_finish_reasons == ["end_id", "end_id"]


@needs_checkout
def test_candidate_beams_running_beams_report_the_slot_reason():
    """A request the scenario stops before the engine does (max_steps 1) reports its running beams as 'none';
    the length limit reports them 'length' (the finish handler's reason in their slots). With max_new_tokens 1:
    step 0 as above, slots [0] -0.693147 and [1] -1.203973, LENGTH on both; the output is those two."""
    from impls.reference.scenario_types import ScenarioSpec
    _cba_engine()
    spec = _two_beam_spec(True)
    cut = ScenarioSpec(model=spec.model, requests=spec.requests, max_steps=1)
    out = TrtllmImpl(SRC).run_scenario(cut).requests["a"]
    assert out.beams == [[0], [1]] and out.beam_finish_reasons == ["none", "none"] and out.finish_reason == "none"
    spec.requests[0].fields["max_new_tokens"] = 1
    out = TrtllmImpl(SRC).run_scenario(spec).requests["a"]
    assert out.beams == [[0], [1]] and out.beam_finish_reasons == ["length", "length"] and out.finish_step == 0
    assert out.cum_logprobs == pytest.approx([-0.693147, -1.203973], abs=1e-6)


@needs_checkout
def test_candidate_beams_cases_judge_the_engines_verdict(tmp_path, monkeypatch):
    """Mutation: an engine whose done verdict ignores attainability (every mode treated as TRUE) stops
    beam/early-stopping-false-done-verdict at step 1, when its pool fills, instead of step 2: the case fails."""
    from harness.run.runner import run
    eng = _cba_engine()
    real = eng.beam_search._cba_step_math

    def as_true(*a, **kw):
        kw["early_stopping"] = int(eng.beam_search.BeamSearchEarlyStop.TRUE)
        return real(*a, **kw)

    case = ["beam/early-stopping-false-done-verdict"]
    assert [r["status"] for r in run([TrtllmImpl(SRC)], case, tmp_path / "a", progress=False,
                                     isolate=False).doc["results"]] == ["pass"]
    monkeypatch.setattr(eng.beam_search, "_cba_step_math", as_true)
    assert [r["status"] for r in run([TrtllmImpl(SRC)], case, tmp_path / "b", progress=False,
                                     isolate=False).doc["results"]] == ["fail"]


@needs_checkout
def test_candidate_beams_true_reports_a_running_beam_ahead_of_the_pool_as_length():
    """TRUE stops as soon as the pool is full, so a running beam can outrank a pooled one; the verdict marks
    the slots LENGTH (beam_search.py@50aec1cb: "Beams with no reason of their own ... report that as LENGTH").

    W = 2, V = 4, end id 3, prompt [2], max_new_tokens 4; logits ln p0 = ln [0.6, 0.1, 0.05, 0.25], then
    ln p1 = ln [0.7, 0.06, 0.04, 0.2]. Step 0: [0] -0.510826, [3] -1.386294 (end id, rank 1: pooled),
    [1] -2.302585, [2] -2.995732; slots [0], [1]. Step 1: (0,0) -0.510826 + ln .7 = -0.867501,
    (0,3) -0.510826 + ln .2 = -2.120264 (end id, rank 1: pooled -> pool full, done), (1,0) -2.302585 + ln .7
    = -2.659260, (0,1) -3.324237; slots (0,0), (1,0). Output by score: running [0,0] -0.867501 (its slot's
    reason: length), then [3] -1.386294 (end_id); the request's reason is the first beam's. (The regular
    path of beam_search.py@095443e5 freezes [3] in slot 1 and runs to step 3: [3], [0,0,0,0].)
    """
    from impls.reference.scenario_types import RequestSpec, ScenarioSpec
    from impls.reference.scripted import TableModel
    _cba_engine()
    ln = lambda ps: [math.log(p) for p in ps]  # noqa: E731
    model = TableModel([ln([0.6, 0.1, 0.05, 0.25]), ln([0.7, 0.06, 0.04, 0.2])])
    req = RequestSpec(id="a", slot=0, fields={"prompt": [2], "use_beam_search": True, "end_id": 3,
                                              "max_new_tokens": 4}, beam_width=2, early_stopping=True)
    out = TrtllmImpl(SRC).run_scenario(ScenarioSpec(model=model, requests=[req])).requests["a"]
    assert [s.tokens for s in out.steps] == [[0, 1], [0, 0]]
    assert [s.predecessors for s in out.steps] == [[0, 0], [0, 1]]
    assert out.steps[1].cum_logprobs == pytest.approx([-0.867501, -2.659260], abs=1e-6)
    assert out.beams == [[0, 0], [3]] and out.cum_logprobs == pytest.approx([-0.867501, -1.386294], abs=1e-6)
    assert out.beam_finish_reasons == ["length", "end_id"] and out.finish_reason == "length"
    assert out.finish_step == 1


# -- profile trtllm-cba (no golden files: its truths for the pool cases are checked here) --------------------
_POOL_CASES = ("beam/eos-evicted-hypothesis-lost", "beam/eos-frozen-slots-all-finished",
               "beam/early-stopping-true-running-beam-outranks-pool")


def test_trtllm_cba_truths_of_the_early_stopping_true_cases():
    """The reference under trtllm-cba gives the truths the cases' notes derive for beam_search.py@50aec1cb.

    eos-evicted-hypothesis-lost: [5] -2.126943 pooled at step 0 and never evicted; slots [0], [1] (the best
    filler, -10 > -10.3 > ...), then (0,0), (0,1), then (a,4), (a,3) and the length limit: output [5] (end_id),
    [0,0,4] -2.360910 (length). eos-frozen-slots-all-finished: [3] -0.974083 pooled at step 0, [0,3] -0.474088
    at step 1: the pool is full, TRUE is done; slots (0,0), (0,1). early-stopping-true-running-beam-outranks-pool:
    pool [3] -1.460773, [0,3] -2.278979 full at step 1; the running [0,0] -0.778979 ranks first and reports
    length (beam_done_running_reason), the request too.
    """
    from harness.corpus.load import CASES_DIR, load_case
    from impls.profiles import TRTLLM_CBA
    from impls.reference import Reference
    want = {  # beams, cum_logprobs, beam_finish_reasons, finish_reason, finish_step, beam tokens, predecessors
        _POOL_CASES[0]: ([[5], [0, 0, 4]], [-2.126943, -2.360910], ["end_id", "length"], "end_id", 2,
                         [[0, 1], [0, 1], [4, 3]], [[0, 0], [0, 0], [0, 0]]),
        _POOL_CASES[1]: ([[0, 3], [3]], [-0.474088, -0.974083], ["end_id", "end_id"], "end_id", 1,
                         [[0, 1], [0, 1]], [[0, 0], [0, 0]]),
        _POOL_CASES[2]: ([[0, 0], [3]], [-0.778979, -1.460773], ["length", "end_id"], "length", 1,
                         [[0, 1], [0, 0]], [[0, 0], [0, 1]]),
    }
    for cid, (beams, cums, reasons, reason, step, toks, preds) in want.items():
        case = load_case(CASES_DIR / f"{cid}.toml", CASES_DIR)
        out = Reference(TRTLLM_CBA).run_scenario(case.scenario.spec).requests["a"]
        assert out.beams == beams and out.cum_logprobs == pytest.approx(cums, abs=1e-5), cid
        assert (out.beam_finish_reasons, out.finish_reason, out.finish_step) == (reasons, reason, step), cid
        assert [s.tokens for s in out.steps] == toks and [s.predecessors for s in out.steps] == preds, cid
    # with 095443e5's END_ID verdict the running beam would report end_id
    import dataclasses
    case = load_case(CASES_DIR / f"{_POOL_CASES[2]}.toml", CASES_DIR)
    end_id = dataclasses.replace(TRTLLM_CBA, beam_done_running_reason="end_id")
    out = Reference(end_id).run_scenario(case.scenario.spec).requests["a"]
    assert out.beam_finish_reasons == ["end_id", "end_id"] and out.finish_reason == "end_id"


@needs_checkout
def test_candidate_beams_early_stopping_true_cases_under_trtllm_cba(tmp_path):
    """On the candidate-beams checkout the three cases match trtllm-cba (known-diff: they differ from the default's
    frozen slots); the profile without its running-beam rule (end_id, as at 095443e5) fails the third case, whose
    running beam the engine reports as length."""
    import dataclasses
    from harness.run.runner import run
    from impls.profiles import TRTLLM_CBA
    _cba_engine()
    out = run([TrtllmImpl(SRC)], list(_POOL_CASES), tmp_path / "a", progress=False, isolate=False)
    assert {r["case"]: r["status"] for r in out.doc["results"]} == {c: "known-diff" for c in _POOL_CASES}
    wrong = dataclasses.replace(TRTLLM_CBA, beam_done_running_reason="end_id")
    out = run([TrtllmImpl(SRC, profile=wrong)], [_POOL_CASES[2]], tmp_path / "b", progress=False, isolate=False)
    assert [r["status"] for r in out.doc["results"]] == ["fail"]
