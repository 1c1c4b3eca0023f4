"""llama-cpp-python's completion loop as the llamacpp adapter drives it (impls/llamacpp/completion.py).

(a) without llama-cpp-python: the reference's ``stop_string_trim = "start"`` rule, the routing
between the C chain and the completion loop, the stage provenance of each path, and the
scenarios the completion loop refuses;
(b) with llama-cpp-python 0.3.36 and ``gguf``: the tiny GGUF vocabulary detokenizes as the toy
tokenizer; stop strings, EOS, ``max_new_tokens``, the run's end, custom processors and
``min_length`` give the hand-derived tokens, finish reasons, steps and texts; seeded draws
equal the reference's under the ``llamacpp`` profile token for token; and the
``logit_bias`` + ``logits_processor`` behaviour of ``_create_completion`` that keeps
``logit_bias`` requests ``n/a`` on this path.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from impls.base import stage_provenance
from impls.processors import parse
from impls.profiles import LLAMACPP, TRTLLM
from impls.reference.scenario_types import RequestSpec, ScenarioSpec, ScenarioUnsupported
from impls.reference.scripted import TableModel
from impls.reference.stop_strings import find_stop, output_text
from impls.reference.toy_tokenizer import ToyTokenizer

try:
    import gguf  # noqa: F401
    import llama_cpp  # noqa: F401
    _MISSING = None
except Exception as e:  # ImportError, or a library that does not load
    _MISSING = f"llama_cpp or gguf not importable: {type(e).__name__}: {e}"

needs_llama = pytest.mark.skipif(_MISSING is not None, reason=_MISSING or "")

TOK = ToyTokenizer(("<eos>", "Hel", "lo", " wo", "rld", "!"), frozenset({0}))
# greedy rows by generated position: argmax 2 ("lo"), 3 (" wo"), 4 ("rld"), then 5 ("!")
ROWS = [[0.0, 0.0, 5.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 5.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0, 5.0, 0.0],
        [0.0, 0.0, 0.0, 0.0, 0.0, 5.0]]


def _req(rid, slot, stop=(), include=False, model=None, arrive=0, **fields):
    f = {"prompt": [1], "temperature": 0.0, "end_id": 0, "max_new_tokens": 6}
    f.update(fields)
    return RequestSpec(id=rid, slot=slot, fields={k: v for k, v in f.items() if v is not None}, stop=tuple(stop),
                       include_stop_str_in_output=include, model=model, arrive=arrive)


def _spec(*reqs, max_steps=32, tokenizer=TOK, rows=ROWS):
    return ScenarioSpec(model=TableModel(rows), requests=list(reqs), max_steps=max_steps, tokenizer=tokenizer)


def _outcome(rr):
    return (rr.error, rr.tokens, rr.finish_reason, rr.finish_step, rr.text)


# -- (a) no llama-cpp-python needed ------------------------------------------------------------

def test_stop_string_trim_start_ignores_include():
    # "lo wo" over the text of [2, 3] = "lo wo": [0, 5); 'start' cuts at 0 with or without the flag
    m = find_stop(TOK, ["lo wo"], [1], [2, 3], LLAMACPP)
    assert (m.start, m.end) == (0, 5)
    assert output_text(TOK, [2, 3], m, True, TRTLLM) == "lo wo"
    assert output_text(TOK, [2, 3], m, True, LLAMACPP) == ""
    assert output_text(TOK, [2, 3, 4], m, False, LLAMACPP) == ""


def test_llamacpp_stop_string_fields():
    # llama-cpp-python: list order among the strings found, generated text only, stop before length
    m = find_stop(TOK, ["lo wo", "o w"], [1], [2, 3], LLAMACPP)
    assert m.string == "lo wo"
    assert find_stop(TOK, ["lo wo", "o w"], [1], [2, 3], TRTLLM).string == "o w"
    assert find_stop(TOK, ["Hello"], [1], [2], LLAMACPP) is None          # begins in the prompt's "Hel"
    assert find_stop(TOK, ["Hello"], [1], [2], TRTLLM).string == "Hello"
    assert LLAMACPP.finish_order == ("end_id", "stop_words", "length")
    assert "empty_stop_string" in LLAMACPP.validation_skips
    for f in ("finish_order", "stop_words_see_prompt", "stop_string_pick", "stop_string_trim"):
        assert "llama_cpp/llama.py@v0.3.36 Llama._create_completion" in LLAMACPP.citations[f], f


def test_routing_and_provenance():
    from impls.llamacpp import LlamaCppImpl
    from impls.llamacpp.completion import needs_completion
    impl = LlamaCppImpl()
    plain = _spec(_req("a", 0))
    stops = _spec(_req("a", 0, stop=["lo"]))
    procs = _spec(_req("a", 0, logits_processors=parse([{"kind": "margin", "margin": 1.0}])), tokenizer=None)
    minlen = _spec(_req("a", 0, min_length=2), tokenizer=None)
    assert [needs_completion(s) for s in (plain, stops, procs, minlen)] == [False, True, True, True]
    chain = stage_provenance(impl, scenario=True)
    # the completion path's result says where its stages differ (stages_used; test below), as a session does
    loop = {**chain, **impl.completion_stages}
    assert (chain["finish"], chain["decode"], chain["draw"]) == ("reference", "reference", "own")
    assert (loop["finish"], loop["decode"], loop["bans"], loop["draw"], loop["validation"]) == (
        "own", "adapter", "own", "own", "reference")
    assert {"stop_strings", "logits_processors", "min_length"} <= impl.scenario_features


@needs_llama
def test_the_completion_path_reports_its_stages_with_its_result():
    from impls.llamacpp import LlamaCppImpl
    impl = LlamaCppImpl()
    assert impl.run_scenario(_spec(_req("a", 0, stop=["lo"]))).stages_used == impl.completion_stages
    assert impl.run_scenario(_spec(_req("a", 0))).stages_used == {}   # the C chain: scenario_stages as declared


@pytest.mark.parametrize("change, needle", [
    (dict(fields={"logit_bias": [[1, 1.0]]}), "LogitsProcessorList.extend"),
    (dict(fields={"repetition_penalty": 1.2}), "only shown the sampled tokens"),
    (dict(n=2), "has no n"),
    (dict(pause=frozenset({1})), "a pause"),
    (dict(fields={"prompt": []}), "an empty prompt"),
    (dict(fields={"end_id": [0, 5]}), "an EOS set"),
    (dict(fields={"max_new_tokens": 0}), "max_tokens <= 0"),
    (dict(fields={"stop_words": [[3]]}), "no token-id stop words"),
])
def test_completion_loop_refuses(change, needle):
    from impls.llamacpp.completion import unsupported_reason
    r = _req("a", 0, stop=["lo"])
    fields = dict(r.fields, **change.pop("fields", {}))
    spec = _spec(dataclasses.replace(r, fields=fields, **change))
    assert needle in unsupported_reason(spec)


def test_completion_loop_refuses_a_shared_slot_and_odd_texts():
    from impls.llamacpp.completion import unsupported_reason
    assert "share slot 0" in unsupported_reason(_spec(_req("a", 0, stop=["x"]), _req("b", 0, arrive=5)))
    tok = ToyTokenizer(("<eos>", "a\u2581b", "lo", " wo", "rld", "!"), frozenset({0}))
    assert "detokenizes as a space" in unsupported_reason(_spec(_req("a", 0, stop=["x"]), tokenizer=tok))


# -- (b) with llama-cpp-python ------------------------------------------------------------------

@needs_llama
def test_gguf_vocabulary_detokenizes_as_the_toy_tokenizer():
    import llama_cpp
    from impls.llamacpp.tiny_gguf import model_path
    path = model_path(TOK.vocab, TOK.special, 0)
    assert model_path(TOK.vocab, TOK.special, 0) == path        # cached
    llm = llama_cpp.Llama(path, n_ctx=64, verbose=False)
    assert llm.n_vocab() == 8 and llm.token_eos() == 0 and llm.token_bos() == 6
    assert [llm.detokenize([i]).decode() for i in range(6)] == ["", "Hel", "lo", " wo", "rld", "!"]
    assert llm.detokenize([1, 2, 0, 3]).decode() == TOK.text([1, 2, 0, 3]) == "Hello wo"


@needs_llama
def test_stop_strings_eos_and_length_by_hand():
    from impls.llamacpp.completion import PATH, REPORTED, run_scenario
    eos_model = TableModel([ROWS[0], ROWS[1], [5.0, 0.0, 0.0, 0.0, 0.0, 0.0]])
    spec = _spec(
        _req("a", 0, stop=["lo wo"]),                   # "lo wo" completed by " wo" at step 1
        _req("b", 1, stop=["lo wo"], include=True),     # no include_stop_str_in_output: cut at the start too
        _req("c", 2, stop=["rld"], max_new_tokens=3),   # completed by the last allowed token: stop, not length
        _req("d", 3, model=eos_model),                  # EOS at step 2: end_id, its token kept, no text
        _req("f", 4, stop=["lo wo", "o w"]),            # both end in " wo": the first listed wins -> cut at 0
        _req("g", 5, max_new_tokens=2))                 # length
    got = run_scenario(spec, LLAMACPP)
    assert got.keys == REPORTED and got.path == PATH
    r = got.requests
    assert _outcome(r["a"]) == (None, [2, 3], "stop_words", 1, "")
    assert _outcome(r["b"]) == (None, [2, 3], "stop_words", 1, "")
    assert _outcome(r["c"]) == (None, [2, 3, 4], "stop_words", 2, "lo wo")
    assert _outcome(r["d"]) == (None, [2, 3, 0], "end_id", 2, "lo wo")
    assert _outcome(r["f"]) == (None, [2, 3], "stop_words", 1, "")
    assert _outcome(r["g"]) == (None, [2, 3], "length", 1, "lo wo")
    assert r["a"].stop_reason is None                   # create_completion does not say which string


@needs_llama
def test_run_end_arrival_and_admission():
    from impls.llamacpp.completion import run_scenario
    spec = _spec(_req("e", 0, arrive=1, max_new_tokens=None, stop=["zz"]),
                 _req("x", 1, stop=[""]), max_steps=3)
    r = run_scenario(spec, LLAMACPP).requests
    # arrives at step 1, two steps left: cut by the run's end, "none", no finish step
    assert _outcome(r["e"]) == (None, [2, 3], "none", None, "lo wo")
    assert [s.step for s in r["e"].steps] == [1, 2]
    # an empty stop string is admitted (llama-cpp-python does not check it) and is in every text
    assert _outcome(r["x"]) == (None, [2], "stop_words", 0, "")
    # a top_p the reference rejects and llama.cpp takes as a no-op: n/a, as on the C chain
    with pytest.raises(ScenarioUnsupported, match="top_p=1.5"):
        run_scenario(_spec(_req("y", 0, stop=["zz"], top_p=1.5)), LLAMACPP)


@needs_llama
def test_custom_processors_and_min_length_by_hand():
    from impls.llamacpp.completion import run_scenario
    row = [[0.0, 0.0, 0.0, 1.0, 0.5, 1.8]]
    step_bias = parse([{"kind": "step_bias", "token": 4, "per_step": 0.3}])
    cycle = parse([{"kind": "cycle", "tokens": [4, 3]}])
    eos_first = TableModel([[5.0, 0.0, 1.0, 0.0, 0.0, 0.0]])
    spec = _spec(
        # token 4 holds 0.5 + 0.3 n: below 1.8 (token 5) for n <= 4, 2.0 at n = 5
        _req("s", 0, end_id=None, logits_processors=step_bias),
        # bans all but tokens[n % 2]
        _req("c", 1, end_id=None, max_new_tokens=3, logits_processors=cycle),
        # MinTokensLogitsProcessor bans the EOS for two tokens, then the EOS wins
        _req("m", 2, min_length=2, model=eos_first),
        tokenizer=None, rows=row)
    r = run_scenario(spec, LLAMACPP).requests
    assert _outcome(r["s"]) == (None, [5, 5, 5, 5, 5, 4], "length", 5, None)
    assert _outcome(r["c"]) == (None, [4, 3, 4], "length", 2, None)
    assert _outcome(r["m"]) == (None, [2, 2, 0], "end_id", 2, None)


@needs_llama
def test_seeded_draws_equal_the_reference():
    # temperature 1: llama-cpp-python's chain (top-k 0, typical 1, top-p 1, min-p 0: no-ops), then dist
    # seeded with the request's seed; the reference's mt19937 model under the llamacpp profile
    from impls.llamacpp.completion import run_scenario
    from impls.reference import Reference
    rows = [[0.3, -0.2, 0.9, 0.1, 0.0, -1.0], [1.0, 0.2, 0.0, 0.4, -0.5, 0.7], [0.0, 0.0, 0.6, 0.6, 0.1, 0.2]]
    reqs = [_req(f"r{s}", s, stop=["!!"], temperature=1.0, seed=1000 + s, max_new_tokens=3) for s in range(40)]
    spec = _spec(*reqs, rows=rows)
    got, want = run_scenario(spec, LLAMACPP), Reference(LLAMACPP).run_scenario(spec)
    pairs = [(got.requests[r.id].tokens, want.requests[r.id].tokens) for r in reqs]
    assert all(a == b for a, b in pairs), pairs
    assert len({tuple(a) for a, _ in pairs}) > 5                 # the seeds matter
    assert all(_outcome(got.requests[r.id])[2:] == (want.requests[r.id].finish_reason,
                                                    want.requests[r.id].finish_step, want.requests[r.id].text)
               for r in reqs)


@needs_llama
def test_logit_bias_drops_the_logits_processors_in_0_3_36():
    # why logit_bias is n/a on the completion path: _create_completion's
    # logits_processor = logits_processor.extend(...) leaves None (list.extend returns None)
    import numpy as np
    import llama_cpp
    from impls.llamacpp.tiny_gguf import model_path
    llm = llama_cpp.Llama(model_path(("a", "b", "c")), n_ctx=64, verbose=False)
    calls = []

    def force_c(ids, scores):
        calls.append(len(ids))
        out = np.full_like(scores, -np.inf)
        out[2] = 0.0
        return out

    procs = llama_cpp.LogitsProcessorList([force_c])
    llm.create_completion([0], max_tokens=2, temperature=0.0, logits_processor=procs, logit_bias={1: 0.5})
    assert calls == []
    out = llm.create_completion([0], max_tokens=2, temperature=0.0, logits_processor=procs)
    assert calls == [1, 2] and out["choices"][0]["text"] == "cc"


@needs_llama
def test_adapter_routes_and_names_the_path():
    from impls.llamacpp import CHAIN_PATH, LlamaCppImpl
    from impls.llamacpp.completion import PATH
    impl = LlamaCppImpl()
    assert impl.run_scenario(_spec(_req("a", 0, stop=["lo wo"]))).path == PATH
    assert impl.run_scenario(_spec(_req("a", 0))).path == CHAIN_PATH
    with pytest.raises(ScenarioUnsupported, match="LogitsProcessorList.extend"):
        impl.run_scenario(_spec(_req("a", 0, stop=["x"], logit_bias=[[1, 1.0]])))
    # a row the chain cannot take, found during the run
    nan = _spec(_req("a", 0, stop=["x"], temperature=1.0, seed=1),
                rows=[[0.0, float("nan"), 1.0, 0.0, 0.0, 0.0]])
    with pytest.raises(ScenarioUnsupported, match="NaN"):
        impl.run_scenario(nan)
    assert torch.get_default_dtype() == torch.float32


@needs_llama
def test_judge_on_corpus_cases_records_the_path_and_provenance():
    # the corpus's cases through the judge: verdict, which path ran, whose code decided each stage
    from harness.corpus.load import CASES_DIR, load_case
    from harness.judge.judge import Judge
    from impls.llamacpp import CHAIN_PATH, LlamaCppImpl
    from impls.llamacpp.completion import PATH
    impl = LlamaCppImpl()
    judge = Judge([], 1)
    res = judge.evaluate(load_case(CASES_DIR / "finish/stop-strings-earliest-match-wins.toml"), impl, "0.3.36")
    assert res.status == "known-diff" and res.details["path"] == PATH
    assert "stop_string_pick" in res.details["message"]
    assert res.provenance["stages"]["finish"] == "own"
    res = judge.evaluate(load_case(CASES_DIR / "penalties/custom-step-bias-across-steps.toml"), impl, "0.3.36")
    assert res.status == "pass" and res.details["path"] == PATH
    res = judge.evaluate(load_case(CASES_DIR / "finish/mixed-finish-reasons-in-one-batch.toml"), impl, "0.3.36")
    assert res.details["path"] == CHAIN_PATH and res.provenance["stages"]["finish"] == "reference"
