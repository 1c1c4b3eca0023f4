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


def test_beam_search_file_is_optional(tmp_path):
    eng = loader.load(_fake_checkout(tmp_path / "a"))
    assert eng.beam_search is None
    assert eng.optional_missing == {"beam_search.py": f"{loader.SAMPLER_DIR}/beam_search.py is not in the checkout"}
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
    assert eng.beam_search is not None and eng.optional_missing == {}
    assert eng.beam_search.beam_search_sampling_batch() == 0
    assert TrtllmImpl(str(tmp_path / "c")).unsupported(Row(torch.zeros(3), use_beam_search=True)) == (
        "beam search runs in scenarios only (beam_search.py drives whole beam requests)")
    with pytest.raises(NotImplementedError, match="rows wider than 10000 tokens"):
        eng.beam_search.radix_topk_op(torch.zeros(1, 20000), 2)


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
    assert impl.profile.name == "trtllm" and registry.entry("trtllm").origin == "impls.trtllm"
    # the option is the adapter's declaration, not the harness's: the CLI adds what implementations declare
    assert [o.flag for o in registry.cli_options()] == ["--trtllm-src"]
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
    optional = {r for r in loader.OPTIONAL if engine.beam_search is not None}
    assert set(facts["files"]) == {f"{loader.SAMPLER_DIR}/{r}" for r in (*loader.REQUIRED, *optional)}
    whose = {p["stage"]: p["from"] for p in facts["pipeline"]}
    assert whose["occurrence penalties"] == "engine" and whose["the draw"] == "reference"
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
    beam_loaded = loader.load(SRC).beam_search is not None
    for c, s in status.items():
        if c == "beam/length-penalty-at-one":
            assert s == "n/a"  # early_stopping = false: the candidate-beams-array path, not driven
        elif c.startswith("beam/"):
            assert s == ("pass" if beam_loaded else "n/a"), (c, s)
        elif c == "filters/top-p-boundary-ties-kept":
            assert s == "known-bug"  # findings.toml: trtllm-vanilla-top-p-cuts-ties
        else:
            assert s == "pass", (c, s)


@needs_checkout
def test_beam_select_by_hand(session):
    """Two beams, vocab 3: beam 0 live (cum -1, logits ln 1, ln 3, ln 4: logprobs ln 1/8, ln 3/8, ln 1/2),
    beam 1 finished (cum -1.5, one candidate with logprob 0, emitted as the pad token -1)."""
    if session.engine.beam_search is None:
        pytest.skip("the checkout has no beam_search.py")
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
    if eng.beam_search is None:
        pytest.skip("the checkout has no beam_search.py")
    real = eng.beam_search.beam_candidate_topk

    def no_length_penalty(logprobs, **kw):
        kw["length_penalty"] = None
        return real(logprobs, **kw)

    monkeypatch.setattr(eng.beam_search, "beam_candidate_topk", no_length_penalty)
    out = run([TrtllmImpl(SRC)], ["beam/length-penalty-frozen-slots-generated-only"], tmp_path, progress=False,
              isolate=False)
    assert [r["status"] for r in out.doc["results"]] == ["fail"]
