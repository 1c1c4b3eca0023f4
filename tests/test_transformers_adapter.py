"""Tests of the Hugging Face transformers adapter (impls/transformers) and of the ``hf`` profile.

(a) every citation of the ``hf`` profile names a file of the installed
transformers, a class/function that exists in it, and the installed version;
every field that differs from ``trtllm`` is cited.
(b) the adapter on tiny logits, with expected values derived by hand from the
rules of transformers 5.24.0 (each test says which rule).
"""

from __future__ import annotations

import ast
import importlib.util
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from impls.base import FEATURES, Row
from impls.profiles import HF, TRTLLM, profile_diff

ROOT = Path(__file__).resolve().parent.parent
INF = float("inf")
HAVE_TRANSFORMERS = importlib.util.find_spec("transformers") is not None
needs_transformers = pytest.mark.skipif(not HAVE_TRANSFORMERS, reason="transformers is not installed")

# "huggingface/transformers:src/transformers/<path>@v<version> <Name>[.<member>]"
CITE = re.compile(r"huggingface/transformers:src/transformers/(?P<path>[\w/]+\.py)@v(?P<version>[\w.]+) "
                  r"(?P<name>[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)?)")


# --------------------------------------------------------------------------- (a) citations
def test_every_hf_difference_is_cited():
    missing = [f for f in profile_diff(TRTLLM, HF) if not HF.citations.get(f, "").strip()]
    assert not missing, f"hf fields differing from trtllm without a citation: {missing}"


def test_citations_name_profile_fields():
    fields = set(HF.semantic_fields())
    assert set(HF.citations) <= fields, set(HF.citations) - fields


def _defined_names(tree: ast.Module) -> dict:
    """Top-level classes/functions -> set of member names defined in their body."""
    out = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            out[node.name] = {n.name for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out[node.name] = set()
    return out


def test_hf_citations_point_at_installed_transformers():
    transformers = pytest.importorskip("transformers", reason="transformers is not installed: cannot check citations")
    pkg = Path(transformers.__file__).resolve().parent
    checked = 0
    for field_name, text in HF.citations.items():
        refs = list(CITE.finditer(text))
        if "huggingface/transformers" in text:
            assert len(refs) == text.count("huggingface/transformers"), (
                f"{field_name}: a transformers citation does not follow 'repo:path@vX Name': {text!r}")
        for m in refs:
            assert m.group("version") == transformers.__version__, (
                f"{field_name}: cites v{m.group('version')}, installed transformers is {transformers.__version__}")
            src = pkg / m.group("path")
            assert src.is_file(), f"{field_name}: {m.group('path')} is not in the installed transformers ({pkg})"
            names = _defined_names(ast.parse(src.read_text(encoding="utf-8")))
            cls, _, member = m.group("name").partition(".")
            assert cls in names, f"{field_name}: {cls} is not defined in {m.group('path')}"
            if member:
                assert member in names[cls], f"{field_name}: {cls}.{member} is not defined in {m.group('path')}"
            checked += 1
    assert checked >= len(profile_diff(TRTLLM, HF)), "fewer transformers citations than differing fields"


# --------------------------------------------------------------------------- (b) the adapter
from impls.transformers import TransformersImpl  # noqa: E402  (importable without transformers)


def step(*rows, session=None):
    rows = [r if r.slot or i == 0 else r.replace(slot=i) for i, r in enumerate(rows)]
    s = session or TransformersImpl().open_session("cpu")
    return s.step(rows)


def T(*v):
    return torch.tensor(v, dtype=torch.float32)


def support(res):
    return [i for i, p in enumerate(res.probs.tolist()) if p > 0]


@needs_transformers
def test_identity():
    impl = TransformersImpl()
    assert impl.name == "transformers" and impl.profile is HF
    assert impl.features <= frozenset(FEATURES)
    assert not ({"presence_penalty", "frequency_penalty", "top_p_decay", "beam_search", "canonical_rng"} & impl.features)
    import transformers
    assert impl.version() == transformers.__version__
    assert impl.available("cpu") is None


@needs_transformers
def test_greedy_tie_goes_to_lowest_id():
    # Nothing set -> do_sample False -> torch.argmax (first maximum) of the scores.
    r = step(Row(logits=T(1.0, 3.0, 3.0, 0.0)))[0]
    assert (r.token, r.mode, r.error) == (1, "greedy", None)
    assert r.probs.tolist() == [0.0, 1.0, 0.0, 0.0]
    assert r.processed_logprob == 0.0
    # RAW logprob: log_softmax of the raw logits: 3 - ln(e^1 + 2 e^3 + e^0).
    assert r.logprob == pytest.approx(3.0 - math.log(math.e + 2 * math.e ** 3 + 1.0), abs=1e-6)
    assert r.rank == 1  # token 2 ties, none is strictly greater
    assert r.finish_reason == "none"


@needs_transformers
def test_top_k_keeps_ties():
    # TopKLogitsWarper removes scores < the 2nd largest (2.0): tokens 0, 1, 2 stay.
    # probs over {0,1,2} are e^3 : e^2 : e^2 = e : 1 : 1.
    r = step(Row(logits=T(3.0, 2.0, 2.0, 1.0), top_k=2, seed=1))[0]
    assert r.mode == "sampling" and support(r) == [0, 1, 2] and r.token in (0, 1, 2)
    e = math.e
    assert r.probs.tolist() == pytest.approx([e / (e + 2), 1 / (e + 2), 1 / (e + 2), 0.0], abs=1e-6)


@needs_transformers
def test_top_p_ascending_cumsum_rule_on_exact_ties():
    # Four equal logits: probs exactly 1/4. TopPLogitsWarper sorts ascending (stable for
    # 4 elements on CPU: 0,1,2,3), cumsum [0.25, 0.5, 0.75, 1]; removes cumsum <= 1 - 0.5:
    # tokens 0 and 1. The tie group is cut: {2, 3} survive with 1/2 each.
    r = step(Row(logits=T(0.0, 0.0, 0.0, 0.0), top_p=0.5, seed=3))[0]
    assert support(r) == [2, 3]
    assert r.probs.tolist() == pytest.approx([0.0, 0.0, 0.5, 0.5], abs=1e-7)


@needs_transformers
def test_top_p_boundary_inside_a_tie():
    # probs [1/2, 1/4, 1/8, 1/8] (logits ln4, ln2, 0, 0); top_p = 0.8 -> remove ascending
    # cumsum <= 0.2: order 2, 3, 1, 0 with cumsum 0.125, 0.25, ... -> only token 2 goes.
    # Survivors {0, 1, 3} renormalised: 4/7, 2/7, 0, 1/7.
    r = step(Row(logits=T(math.log(4.0), math.log(2.0), 0.0, 0.0), top_p=0.8, seed=3))[0]
    assert support(r) == [0, 1, 3]
    assert r.probs.tolist() == pytest.approx([4 / 7, 2 / 7, 0.0, 1 / 7], abs=1e-6)


@needs_transformers
def test_repetition_penalty_sign_handling():
    # RepetitionPenaltyLogitsProcessor: seen = prompt + generated = {0, 1, 3};
    # x < 0 -> x * 2, else x / 2: 2 -> 1, -2 -> -4, 0 -> 0; token 2 (1.0) and 4 (0.5) unseen.
    # Greedy: 1.0 at tokens 0 and 2 -> argmax takes token 0.
    r = step(Row(logits=T(2.0, -2.0, 1.0, 0.0, 0.5), repetition_penalty=2.0, prompt=[0, 1, 0], generated=[3]))[0]
    assert r.rewritten_logits.tolist() == [1.0, -4.0, 1.0, 0.0, 0.5]
    assert r.token == 0 and r.mode == "greedy"
    # RAW logprob is taken before any processor (profile raw_logprobs_stage = before_processing):
    raw = torch.log_softmax(T(2.0, -2.0, 1.0, 0.0, 0.5), dim=-1)
    assert r.logprob == pytest.approx(float(raw[0]), abs=1e-6)


@needs_transformers
def test_min_new_tokens_ban_counts_generated_only():
    # min_length -> min_new_tokens = 2: 1 generated token (the 10 prompt tokens do not count)
    # -> MinNewTokensLengthLogitsProcessor bans end id 1 -> greedy picks token 2.
    base = Row(logits=T(0.0, 5.0, 1.0), end_id=1, min_length=2, prompt=[0] * 10)
    r = step(base.replace(generated=[2]))[0]
    assert r.rewritten_logits.tolist() == [0.0, -INF, 1.0]
    assert (r.token, r.finish_reason) == (2, "none")
    r = step(base.replace(generated=[2, 2]))[0]
    assert r.rewritten_logits.tolist() == [0.0, 5.0, 1.0]
    assert (r.token, r.finish_reason) == (1, "end_id")


@pytest.mark.parametrize("bad, kind", [
    (dict(temperature=0.0, do_sample=True), "invalid_temperature"),  # TemperatureLogitsWarper: float > 0
    (dict(temperature=-1.0), "invalid_temperature"),
    (dict(top_p=-0.5), "invalid_top_p"),              # TopPLogitsWarper: top_p < 0 rejected
    (dict(top_k=-1), "invalid_top_k"),                # TopKLogitsWarper: top_k <= 0 rejected
    (dict(min_p=1.5), "invalid_min_p"),               # MinPLogitsWarper: [0, 1]
    (dict(repetition_penalty=0.0, prompt=[0]), "invalid_penalty"),
    (dict(max_new_tokens=0), "invalid_length"),       # GenerationConfig.validate
    (dict(logit_bias=[(7, 1.0)]), "invalid_logit_bias"),  # SequenceBias: id >= V
    (dict(bad_words=[[7]]), "invalid_bad_words"),
])
@needs_transformers
def test_invalid_parameter_is_a_row_error(bad, kind):
    rows = [Row(logits=T(0.0, 1.0, 2.0), slot=0, **bad),
            Row(logits=T(1.0, 2.0, 3.0), temperature=1.0, seed=3, slot=1)]
    a, b = TransformersImpl().open_session().step(rows)
    assert (a.error, a.token) == (kind, None)
    assert b.error is None and b.mode == "sampling" and b.token in (0, 1, 2)
    z = math.e + math.e ** 2 + math.e ** 3
    assert b.probs.tolist() == pytest.approx([math.e / z, math.e ** 2 / z, math.e ** 3 / z], abs=1e-6)


@needs_transformers
def test_sample_many_counts():
    row = Row(logits=T(3.0, 2.0, 2.0, 1.0, -INF), top_k=2)
    s = TransformersImpl().open_session()
    n = 5000
    c = s.sample_many(row, list(range(100, 100 + n)))
    assert c.shape == (5,) and c.dtype == torch.int64
    assert int(c.sum()) == n
    assert int(c[3]) == 0 and int(c[4]) == 0  # outside the top-k support {0, 1, 2}
    assert torch.equal(c, s.sample_many(row, list(range(100, 100 + n))))  # reproducible
    g = s.sample_many(Row(logits=T(0.0, 2.0, 1.0)), [1, 2, 3])  # greedy: all on the argmax
    assert g.tolist() == [0, 3, 0]


@needs_transformers
def test_raw_and_processed_logprobs_and_top_logprobs():
    # logit_bias +10 on token 0 and T = 0.5: RAW is log_softmax of the raw logits (HF's
    # output_logits), PROCESSED is log_softmax of (bias, /T) scores (HF's output_scores).
    r = step(Row(logits=T(1.0, 2.0, 3.0), temperature=0.5, logit_bias=[(0, 10.0)], seed=9, logprobs=1))[0]
    raw = torch.log_softmax(T(1.0, 2.0, 3.0), dim=-1)
    proc = torch.log_softmax(T(11.0, 2.0, 3.0) / 0.5, dim=-1)
    assert torch.allclose(r.raw_logprobs, raw, atol=1e-6)
    t = r.token
    assert r.logprob == pytest.approx(float(raw[t]), abs=1e-6)
    assert r.processed_logprob == pytest.approx(float(proc[t]), abs=1e-5)
    assert r.rewritten_logits.tolist() == [11.0, 2.0, 3.0]
    assert r.rank == 3 - t  # raw order 2 > 1 > 0
    expect = [(2, float(raw[2]))] + ([] if t == 2 else [(t, float(raw[t]))])
    assert [i for i, _ in r.top_logprobs] == [i for i, _ in expect]
    assert [v for _, v in r.top_logprobs] == pytest.approx([v for _, v in expect], abs=1e-6)


@needs_transformers
def test_unset_top_k_is_fifty():
    # generate() fills an unset top_k with GenerationConfig._get_default_generation_params()'s 50:
    # on logits 0..59 only the 50 largest (ids 10..59) survive.
    r = step(Row(logits=torch.arange(60, dtype=torch.float32) / 10, temperature=1.0, seed=2))[0]
    assert support(r) == list(range(10, 60))
    r = step(Row(logits=torch.arange(60, dtype=torch.float32) / 10, temperature=1.0, top_k=0, seed=2))[0]
    assert support(r) == list(range(60))  # top_k = 0 disables it


@needs_transformers
def test_length_defaults_and_precedence():
    L = T(0.0, 1.0, 0.5)
    # No limit given: max_length = 20 + prompt length (_prepare_generated_length).
    assert step(Row(logits=L, prompt=[0, 0], generated=[0] * 19))[0].finish_reason == "length"
    assert step(Row(logits=L, prompt=[0, 0], generated=[0] * 18))[0].finish_reason == "none"
    # max_new_tokens takes precedence over max_length (= our max_seq_len).
    r = step(Row(logits=L, prompt=[0, 0], max_new_tokens=5, max_seq_len=3))[0]
    assert r.finish_reason == "none"
    assert step(Row(logits=L, prompt=[0, 0], max_seq_len=3))[0].finish_reason == "length"
    # A prompt as long as max_length is rejected (_validate_generated_length).
    assert step(Row(logits=L, prompt=[0, 0], max_seq_len=2))[0].error == "invalid_length"
    # EOS at the length limit: both criteria fire; END_ID is reported first.
    assert step(Row(logits=L, end_id=1, max_new_tokens=1))[0].finish_reason == "end_id"
    # A single-token stop word: its own EosTokenCriteria.
    assert step(Row(logits=L, stop_words=[[1]]))[0].finish_reason == "stop_words"


@needs_transformers
def test_bias_and_bad_word_quirks():
    L = T(1.0, 2.0, 0.5)
    # SequenceBiasLogitsProcessor keeps the last value of a repeated id (dict of tuples).
    assert step(Row(logits=L, logit_bias=[(0, 1.0), (0, 3.0)]))[0].rewritten_logits.tolist() == [4.0, 2.0, 0.5]
    # NoBadWordsLogitsProcessor drops a one-token bad word equal to the EOS id...
    r = step(Row(logits=L, bad_words=[[1]], end_id=1))[0]
    assert r.rewritten_logits.tolist() == [1.0, 2.0, 0.5] and r.token == 1
    # ...but bans it when there is no EOS (ignore_eos -> eos_token_id=None).
    r = step(Row(logits=L, bad_words=[[1]], end_id=1, ignore_eos=True))[0]
    assert r.rewritten_logits.tolist() == [1.0, -INF, 0.5] and r.token == 0 and r.finish_reason == "none"


@needs_transformers
def test_prompt_ignore_length_applies_to_repetition():
    # RepetitionPenaltyLogitsProcessor(prompt_ignore_length=1) drops prompt[0] (token 1) from
    # the seen set: only token 0 is penalised (1.0 / 2).
    r = step(Row(logits=T(1.0, 2.0, 0.5), repetition_penalty=2.0, prompt=[1, 0], prompt_ignore_length=1))[0]
    assert r.rewritten_logits.tolist() == [0.5, 2.0, 0.5]


@needs_transformers
def test_nan_logits():
    # Greedy: torch.argmax counts NaN as the maximum (what _sample does); sampling: torch.multinomial
    # refuses NaN probabilities -> that row's error, the neighbour is still sampled.
    g = step(Row(logits=T(1.0, float("nan"), 2.0)))[0]
    assert (g.token, g.error) == (1, None)
    a, b = step(Row(logits=T(1.0, float("nan"), 2.0), temperature=1.0),
                Row(logits=T(1.0, 2.0), temperature=1.0, slot=1))
    assert a.error == "nan_logits" and b.error is None and b.token in (0, 1)
    c = step(Row(logits=T(-INF, -INF), temperature=1.0))[0]
    assert c.error == "no_valid_token"


@needs_transformers
def test_seeded_rows_reproducible_and_stream_continues():
    # Step 1: transformers.set_seed(1234), then torch.multinomial from torch's global generator, as
    # generate()'s _sample draws (seeds: transformers' own). Step 2, same request in the same slot: the
    # adapter restores the state the slot's first draw left (HF keeps no stream between calls), so the
    # second draw of that stream, and the session says this seeding was the adapter's.
    row = Row(logits=torch.zeros(1000), temperature=1.0, seed=1234, request_id="a")
    s = TransformersImpl().open_session()
    r1 = s.step([row])[0]
    assert (r1.token, r1.extra["seed_path"], "stages" in r1.extra, s.stages_used) == (
        702, "transformers.set_seed", False, {})
    r2 = s.step([row.replace(generated=[r1.token])])[0]
    assert (r2.token, r2.extra["stages"], s.stages_used) == (159, {"seeds": "adapter"}, {"seeds": "adapter"})
    g = torch.Generator().manual_seed(1234)
    p = torch.full((1, 1000), 1e-3)
    assert [int(torch.multinomial(p, 1, generator=g)), int(torch.multinomial(p, 1, generator=g))] == [702, 159]
    # A new request in the slot starts a fresh stream: set_seed again.
    r3 = s.step([row.replace(request_id="b")])[0]
    assert (r3.token, r3.extra["seed_path"]) == (702, "transformers.set_seed")
    assert TransformersImpl().open_session().step([row])[0].token == 702


@needs_transformers
def test_seeded_row_is_set_seed_then_generate(tiny_generate):
    # What an HF user writes: transformers.set_seed(seed); generate(...). On TINY at temperature 1 (top_k 50
    # >= V keeps all) _sample draws torch.multinomial(softmax(TINY), 1): on the CPU one sample is
    # argmax(p / E), E ~ Exp(1) from the generator (aten multinomial's one-sample path). By hand from
    # those E: seed 42 -> p/E = [0.618, 2.552, 1.257, ...] -> token 1; seed 7 -> 3.800 at id 10; seed 0 ->
    # 1.390 at id 6; seed 2**32 - 1 (the largest set_seed takes) -> 0.536 at id 10.
    import transformers
    from impls.transformers import hf
    p = torch.softmax(TINY, -1)
    for seed, want in ((42, 1), (7, 10), (0, 6), (2 ** 32 - 1, 10)):
        row = Row(logits=TINY, temperature=1.0, seed=seed, prompt=[3, 4])
        s = TransformersImpl().open_session()
        r = s.step([row])[0]
        assert (r.token, r.extra["seed_path"], s.stages_used) == (want, "transformers.set_seed", {}), seed
        assert tiny_generate(row)[0] == [want], seed            # set_seed(seed) + a real generate()
        with hf.isolated_rng():
            transformers.set_seed(seed)
            assert int(torch.argmax(p / torch.empty(12).exponential_(1))) == want, seed


@needs_transformers
def test_a_seed_set_seed_refuses_is_invalid_seed():
    # transformers.set_seed: random.seed, then numpy.random.seed, which takes only [0, 2**32) (trainer_utils.py
    # @v5.24.0 and @v4.57.6; numpy 2.4's message). Every seeded row goes through it, a greedy one too; the
    # process's generators are as they were (random.seed ran before numpy refused: restored).
    import random

    import numpy as np
    import transformers
    from impls.transformers import hf
    before = (random.getstate(), np.random.get_state()[1].copy(), torch.get_rng_state())
    out = TransformersImpl().open_session().step([
        Row(logits=TINY, temperature=1.0, seed=2 ** 32, slot=0), Row(logits=TINY, temperature=1.0, seed=-1, slot=1),
        Row(logits=TINY, temperature=0.0, seed=2 ** 64 - 1, slot=2), Row(logits=TINY, temperature=1.0, seed=7, slot=3)])
    assert [(r.error, r.token) for r in out] == [("invalid_seed", None)] * 3 + [(None, 10)]
    assert [r.message for r in out[:3]] == [
        f"seed {v}: transformers.set_seed refused it: Seed must be between 0 and 2**32 - 1"
        for v in (4294967296, -1, 18446744073709551615)]
    assert random.getstate() == before[0] and np.array_equal(np.random.get_state()[1], before[1])
    assert torch.equal(torch.get_rng_state(), before[2])
    with hf.isolated_rng(), pytest.raises(ValueError, match=r"^Seed must be between 0 and 2\*\*32 - 1$"):
        transformers.set_seed(2 ** 32)
    # the hf profile says the same (validation_extras "seed_uint32"), the default profile takes any 64 bits
    from impls.reference import Reference
    rows = [Row(logits=TINY, temperature=1.0, seed=v, slot=i) for i, v in enumerate((2 ** 32, -1, 2 ** 32 - 1, 0))]
    assert [r.error for r in Reference(HF).open_session().step(rows)] == ["invalid_seed", "invalid_seed", None, None]
    assert [r.error for r in Reference(TRTLLM).open_session().step(rows)] == [None] * 4


@needs_transformers
def test_sample_many_is_one_set_seed_stream_and_says_so():
    # 1000 draws of TINY from one stream seeded set_seed(5): the adapter's stand-in for 1000 seeded draws.
    s = TransformersImpl().open_session()
    counts = s.sample_many(Row(logits=TINY, temperature=1.0), list(range(5, 1005)))
    assert counts.tolist() == [37, 151, 170, 30, 4, 16, 264, 5, 34, 23, 247, 19]
    assert s.stages_used == {"seeds": "adapter"}
    g = torch.Generator().manual_seed(5)
    want = torch.multinomial(torch.softmax(TINY, -1).reshape(1, -1), 1000, replacement=True, generator=g)[0]
    assert torch.equal(counts, torch.bincount(want, minlength=12))


@needs_transformers
@pytest.mark.parametrize("case_id, stages", [
    # a single-step invariant: each batch on a fresh session, each seeded row's first draw after set_seed
    ("seeds/same-seed-rows-same-token", {"filters": "own", "draw": "own", "seeds": "own"}),
    # a statistical case: sample_many's one stream for many seeds is the adapter's
    ("filters/temperature-distribution-statistical",
     {"validation": "own", "filters": "own", "draw": "own", "seeds": "adapter"}),
])
def test_provenance_of_seeded_cases(case_id, stages):
    from harness.corpus.load import load_case
    from harness.judge import Judge
    res = Judge([], 1).evaluate(load_case(ROOT / "cases" / f"{case_id}.toml"), TransformersImpl(), "5.24.0")
    assert res.provenance["stages"] == stages
    assert res.provenance["own_code"] is (stages["seeds"] == "own")


@needs_transformers
def test_unsupported_reasons():
    impl = TransformersImpl()
    L = T(0.0, 1.0)
    assert impl.unsupported(Row(logits=L, temperature=0.7, top_k=5, repetition_penalty=1.1)) is None
    for bad in (dict(use_beam_search=True), dict(presence_penalty=0.5), dict(frequency_penalty=0.1),
                dict(top_p_decay=0.9), dict(stop_words=[[0, 1]]),
                dict(end_id=1, ignore_eos=True, min_length=2)):
        assert impl.unsupported(Row(logits=L, **bad)), bad


@needs_transformers
def test_agrees_with_reference_under_hf_profile():
    # Rows whose rules the reference already reads from the hf profile.
    from impls.reference import Reference
    rows = [
        Row(logits=T(2.0, 1.5, 1.0, 0.0, -1.0), temperature=1.0, min_p=0.3, top_p=0.8, top_k=0, seed=1),
        Row(logits=T(2.0, -2.0, 1.0, 0.0, 0.5), repetition_penalty=1.5, prompt=[0, 1], no_repeat_ngram_size=2,
            generated=[2, 0], bad_words=[[0, 4]], end_id=3, min_length=5, max_new_tokens=4),
        Row(logits=T(1.0, 3.0, 3.0, 0.0), top_k=1),
        Row(logits=T(0.0, 0.0, 0.0, 0.0), top_p=0.5, temperature=0.7, seed=4),
        Row(logits=T(1.0, 2.0, 3.0), temperature=0.0),                  # greedy (do_sample unset)
        Row(logits=T(1.0, 2.0, 3.0), temperature=0.0, do_sample=True),  # invalid_temperature
        Row(logits=T(1.0, 2.0, 3.0), temperature=0.0, top_p=2.0),       # greedy: no TopP warper built
    ]
    rows = [r.replace(slot=i) for i, r in enumerate(rows)]
    A = TransformersImpl().open_session().step(rows)
    B = Reference(HF).open_session().step(rows)
    assert [(a.error, a.mode) for a in A[-3:]] == [(None, "greedy"), ("invalid_temperature", None), (None, "greedy")]
    for a, b in zip(A, B):
        assert (a.error, a.mode) == (b.error, b.mode)
        if a.error:
            continue
        assert support(a) == support(b)
        assert torch.allclose(a.probs.double(), b.probs.double(), atol=1e-6)
        assert torch.equal(a.rewritten_logits, b.rewritten_logits.to(torch.float32))
        assert a.finish_reason == b.finish_reason
        if a.mode == "greedy":
            assert a.token == b.token and a.logprob == pytest.approx(b.logprob, abs=1e-6)


@pytest.fixture(scope="module")
def tiny_generate():
    """``generate(row, steps)``: a real ``GenerationMixin.generate`` on a tiny random GPT-2 whose
    last-position logits are replaced by ``row.logits`` (so only HF's own processing decides)."""
    import warnings
    from transformers import GPT2Config, GPT2LMHeadModel
    from impls.transformers.translate import generate_kwargs
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=12, n_positions=64, n_embd=8, n_layer=1, n_head=2)).eval()
    fixed = {}
    inner = model.forward

    def forward(*a, **k):
        out = inner(*a, **k)
        lg = out.logits.clone()
        lg[:, -1, :] = fixed["logits"]
        out.logits = lg
        return out

    model.forward = forward

    def run(row, steps=1, kw=None):
        # kw: the generate() arguments as given (default: the adapter's generate_kwargs(row)).
        fixed["logits"] = row.logits.float()
        kw = dict(generate_kwargs(row) if kw is None else kw)
        kw.pop("max_new_tokens", None)
        if kw.get("eos_token_id") is None:
            kw["pad_token_id"] = 0
        ids = torch.tensor([list(row.prompt)], dtype=torch.long)
        if row.seed is not None:
            import transformers
            transformers.set_seed(row.seed)   # what an HF user calls before generate()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=steps, output_scores=True,
                                 output_logits=True, return_dict_in_generate=True, **kw)
        return out.sequences[0, ids.shape[1]:].tolist(), out.scores, out.logits

    return run


TINY = T(1.0, 2.5, 2.5, 0.3, -1.0, 0.0, 3.0, -2.0, 1.0, 0.5, 2.9, -0.1)


@needs_transformers
@pytest.mark.parametrize("fields", [
    dict(prompt=[1, 2, 3]),
    dict(prompt=[6, 6, 1], repetition_penalty=1.7),
    dict(prompt=[6, 2, 6], no_repeat_ngram_size=2),
    dict(prompt=[3, 4], bad_words=[[4, 6], [10]], logit_bias=[(2, 0.75), (0, -5.0)]),
    dict(prompt=[3, 4], temperature=0.7, top_k=4, top_p=0.9, min_p=0.1),
    dict(prompt=[3, 4], temperature=3.0),
    dict(prompt=[6, 1], temperature=2.0, top_p=0.6, repetition_penalty=1.3),
    dict(prompt=[3, 4], min_p=0.05, temperature=4.0),
])
def test_matches_real_generate(tiny_generate, fields):
    # The model-free path must be generate() itself: same scores, same raw logits and, after
    # transformers.set_seed(row.seed) as the session seeds, the same sampled token.
    for seed in (1, 2, 3, 4, 5):
        row = Row(logits=TINY, seed=seed, **fields)
        toks, scores, logits = tiny_generate(row)
        a = TransformersImpl().open_session().step([row])[0]
        assert a.token == toks[0], (fields, seed)
        assert torch.equal(logits[0][0], TINY)  # output_logits: the raw logits (raw_logprobs_stage)
        if a.mode == "sampling":
            assert torch.allclose(torch.softmax(scores[0][0], -1), a.probs, atol=1e-7)
        else:
            assert torch.equal(scores[0][0], a.rewritten_logits)


@needs_transformers
def test_multi_step_matches_real_generate(tiny_generate):
    # Greedy with end id 6 (the argmax) and min_new_tokens 2: generate() bans 6 for two steps,
    # then emits it. The adapter, fed the same history step by step, must agree.
    row = Row(logits=TINY, prompt=[3, 4], end_id=6, min_length=2, max_new_tokens=5)
    toks, _, _ = tiny_generate(row, steps=5)
    assert toks == [10, 10, 6]  # 2.9 is the best non-banned logit; generation stops at EOS
    s = TransformersImpl().open_session()
    got, gen = [], []
    for _ in range(3):
        r = s.step([row.replace(generated=list(gen))])[0]
        got.append((r.token, r.finish_reason))
        gen.append(r.token)
    assert got == [(10, "none"), (10, "none"), (6, "end_id")]


@needs_transformers
def test_eos_set_multi_step_matches_real_generate(tiny_generate):
    # EOS set (10, 6) as eos_token_id=[10, 6], min_new_tokens 2: MinNewTokensLengthLogitsProcessor
    # bans both for two steps, so the best left is 2.5, tied at ids 1 and 2: argmax takes 1; the
    # third step may end on 6 (3.0, the argmax), the set's second id: EosTokenCriteria stops on it.
    row = Row(logits=TINY, prompt=[3, 4], end_id=(10, 6), min_length=2, max_new_tokens=5)
    toks, scores, _ = tiny_generate(row, steps=5)
    assert toks == [1, 1, 6]
    assert scores[0][0, 6].item() == -INF and scores[0][0, 10].item() == -INF
    s = TransformersImpl().open_session()
    got, gen = [], []
    for _ in range(3):
        r = s.step([row.replace(generated=list(gen))])[0]
        got.append((r.token, r.finish_reason))
        gen.append(r.token)
    assert got == [(1, "none"), (1, "none"), (6, "end_id")]


def test_resolve_do_sample_maps_temperature_zero_to_greedy():
    # Issue #20 item 5: as a transformers user writes it. An explicit do_sample wins; unset,
    # temperature 0 is generate()'s default do_sample=False (greedy) whatever else is set;
    # otherwise any sampling parameter set means do_sample=True.
    from impls.transformers.translate import generate_kwargs, resolve_do_sample
    L = T(0.0, 1.0, 2.0)
    cases = [
        (dict(), False),
        (dict(temperature=0.0), False),
        (dict(temperature=0), False),
        (dict(temperature=-0.0), False),
        (dict(temperature=0.0, top_k=3, top_p=0.5, min_p=0.3, seed=1), False),
        (dict(temperature=0.0, do_sample=True), True),
        (dict(temperature=0.7, do_sample=False), False),
        (dict(temperature=0.7), True),
        (dict(temperature=-1.0), True),
        (dict(top_k=1), True),
        (dict(min_p=0.1), True),
    ]
    assert [resolve_do_sample(Row(logits=L, **kw)) for kw, _ in cases] == [want for _, want in cases]
    assert generate_kwargs(Row(logits=L, temperature=0.0, top_k=3)) == {
        "do_sample": False, "temperature": 0.0, "top_k": 3, "eos_token_id": None}


@needs_transformers
def test_temperature_zero_row_is_greedy_and_do_sample_true_rejects_it():
    # cases/greedy/temperature-zero-forces-greedy row 0: logits [-1, 0.25, 0.2, 0.24, -0.5],
    # temperature 0 with top_p 0.5, top_k 3, min_p 0.3, seed 123. do_sample unset -> False: no
    # warper is built (_get_logits_processor adds them only under do_sample), torch.argmax -> id 1.
    L = T(-1.0, 0.25, 0.2, 0.24, -0.5)
    row = Row(logits=L, temperature=0.0, top_p=0.5, top_k=3, min_p=0.3, seed=123)
    (r,) = step(row)
    assert (r.token, r.mode, r.error) == (1, "greedy", None)
    assert r.extra["hf_processors"] == []
    assert r.probs.tolist() == [0.0, 1.0, 0.0, 0.0, 0.0]
    assert r.rewritten_logits.tolist() == L.tolist() and r.processed_logprob == 0.0
    z = sum(math.exp(v) for v in (-1.0, 0.25, 0.2, 0.24, -0.5))
    assert r.logprob == pytest.approx(0.25 - math.log(z), abs=1e-6)
    # do_sample = True: TemperatureLogitsWarper(0.0) raises ("has to be a strictly positive float").
    (e,) = step(row.replace(do_sample=True))
    assert (e.error, e.token, e.mode) == ("invalid_temperature", None, None)


@needs_transformers
def test_temperature_zero_matches_real_generate(tiny_generate):
    # generate(temperature=0.0) with no do_sample (its default False) decodes greedily: argmax of
    # TINY is id 6 (3.0), with top_k 4 too; the adapter gives the same token. generate(do_sample=True,
    # temperature=0.0) raises the ValueError the adapter reports as invalid_temperature.
    for extra in ({}, {"top_k": 4}):
        row = Row(logits=TINY, prompt=[3, 4], temperature=0.0, **extra)
        toks, scores, _ = tiny_generate(row, kw={"temperature": 0.0, "eos_token_id": None, **extra})
        (a,) = step(row)
        assert toks == [6] and (a.token, a.mode) == (6, "greedy")
        assert torch.equal(scores[0][0], TINY) and torch.equal(a.rewritten_logits, TINY)
    with pytest.raises(ValueError, match="temperature"):
        tiny_generate(Row(logits=TINY, prompt=[3, 4]), kw={"do_sample": True, "temperature": 0.0,
                                                            "eos_token_id": None})


def test_eos_set_translation():
    # an EOS set is a list (-1 dropped, first occurrence first); one end id stays an int; with
    # ignore_eos none is given; ignore_eos with min_length and a set is n/a (no way to ban it).
    from impls.transformers.translate import end_ids, unsupported_reason
    L = T(0.0, 1.0, 2.0)
    assert end_ids(Row(logits=L, end_id=(2, -1, 0, 2))) == [2, 0]
    assert end_ids(Row(logits=L, end_id=2)) == 2 and end_ids(Row(logits=L, end_id=-1)) is None
    assert end_ids(Row(logits=L, end_id=(-1,))) is None
    assert end_ids(Row(logits=L, end_id=(2, 0), ignore_eos=True)) is None
    assert unsupported_reason(Row(logits=L, end_id=(2, 0), ignore_eos=True, min_length=2))
    assert unsupported_reason(Row(logits=L, end_id=(-1,), ignore_eos=True, min_length=2)) is None
    assert unsupported_reason(Row(logits=L, end_id=(2, 0), ignore_eos=True)) is None


@needs_transformers
def test_eos_set_bad_word_and_finish():
    # NoBadWordsLogitsProcessor drops a one-token bad word equal to any id of eos_token_id:
    # [4] is the set's second id, so it stays (token 4, 3.0, the argmax) and EosTokenCriteria
    # stops on it; with ignore_eos (eos_token_id=None) the word bans 4 and 2 (2.5) is drawn.
    L = T(0.5, 1.0, 2.5, 2.0, 3.0)
    (a,) = step(Row(logits=L, end_id=(2, 4), bad_words=[[4]]))
    assert (a.token, a.finish_reason) == (4, "end_id") and a.rewritten_logits.tolist() == L.tolist()
    (b,) = step(Row(logits=L, end_id=(2, 4), bad_words=[[4]], ignore_eos=True))
    assert (b.token, b.finish_reason) == (2, "none") and b.rewritten_logits[4].item() == -INF


def test_import_without_transformers():
    code = ("import sys; sys.modules['transformers'] = None\n"
            "import impls.transformers as m\n"
            "impl = m.TransformersImpl()\n"
            "r = impl.available('cpu')\n"
            "assert r and 'transformers' in r, r\n"
            "print('ok')\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0 and "ok" in out.stdout, out.stderr


# --------------------------------------------------------------------------- custom logits processors
def _procs(*tables):
    from impls import processors
    return processors.parse(list(tables))


@needs_transformers
def test_custom_processors_land_after_hf_processors_and_before_the_warpers():
    # _merge_criteria_processor_list (utils.py@v5.24.0) appends a custom processor of a new type after
    # _get_logits_processor's own; the warpers are appended after the merge, under do_sample only.
    from impls.transformers import hf
    row = Row(logits=torch.zeros(4), prompt=[1], repetition_penalty=1.5, temperature=0.7, top_p=0.9,
              logits_processors=_procs({"kind": "bias", "bias": [[0, 1.0]]}))
    prep = hf.prepare(row, hf.ModelFree())
    assert prep.names() == ["RepetitionPenaltyLogitsProcessor", "CaseProcessors", "TemperatureLogitsWarper",
                            "TopKLogitsWarper", "TopPLogitsWarper"]


@needs_transformers
def test_custom_processor_after_the_repetition_penalty_and_by_the_rows_steps():
    # [1, 3, 2.2, 0.5], token 1 generated, repetition 2 then bias +1: 3 / 2 + 1 = 2.5 beats 2.2 -> token 1.
    # cycle [3, 1, 2] at n = len(generated) = 2: only token 2 is left.
    a, b = step(Row(logits=T(1.0, 3.0, 2.2, 0.5), generated=[1], temperature=0.0, repetition_penalty=2.0,
                    logits_processors=_procs({"kind": "bias", "bias": [[1, 1.0]]})),
                Row(logits=T(3.0, 2.0, 1.0, 0.0), generated=[0, 0], temperature=0.0,
                    logits_processors=_procs({"kind": "cycle", "tokens": [3, 1, 2]})))
    assert (a.token, a.rewritten_logits[1].item()) == (1, 2.5)
    assert b.token == 2 and b.rewritten_logits.tolist() == [-INF, -INF, 1.0, -INF]


@needs_transformers
def test_generate_counts_each_requests_steps():
    # generate() with one row: n = input_ids length - prompt length. Row [0, 1, 1.4, 0.5] repeated,
    # step_bias +0.5 n on token 3: 0.5, 1.0 (token 2), then 1.5, 2.0 (token 3).
    from impls.profiles import HF
    from impls.reference.scenario_types import RequestSpec, ScenarioSpec
    from impls.reference.scripted import TableModel
    from impls.transformers.scenario import run_scenario
    req = RequestSpec("r", 0, {"prompt": [1, 2], "temperature": 0.0, "max_new_tokens": 4,
                               "logits_processors": _procs({"kind": "step_bias", "token": 3, "per_step": 0.5})})
    res = run_scenario(ScenarioSpec(model=TableModel([[0.0, 1.0, 1.4, 0.5]]), requests=[req]), HF)
    assert res.requests["r"].tokens == [2, 2, 3, 3]
