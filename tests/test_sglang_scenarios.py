"""Multi-step scenarios on SGLang's own Req (impls/sglang/scenario.py) against hand-checked values.

Skipped without SGLang (tox -e sglang). Every expected value is derived in its comment from
SGLang 0.5.23's rules (srt/managers/schedule_batch.py Req.update_finish_state, Req.tail_str;
srt/managers/detokenizer_manager.py DetokenizerManager.trim_matched_stop; srt/sampling/penaltylib),
never from the adapter's output.
"""

from __future__ import annotations

import pytest

from impls.base import stage_provenance
from impls.processors import parse
from impls.reference.scenario_types import RequestSpec, ScenarioSpec, ScenarioUnsupported
from impls.reference.scripted import TableModel
from impls.reference.toy_tokenizer import make_tokenizer

sglang = pytest.importorskip("sglang", reason="SGLang is not installed (tox -e sglang)")

from impls.sglang import SglangImpl  # noqa: E402

# 0 "<eos>" (special), 1 "Hel", 2 "lo", 3 " wo", 4 "rld", 5 "!"
TOK = make_tokenizer({"vocab": ["<eos>", "Hel", "lo", " wo", "rld", "!"], "special": [0]}, 6)
# greedy argmax 2, 3, 4, 5, then 5: text "lo", "lo wo", "lo world", "lo world!"
HELLO = TableModel([[0, 0, 5, 0, 0, 0], [0, 0, 0, 5, 0, 0], [0, 0, 0, 0, 5, 0], [0, 0, 0, 0, 0, 5]])


@pytest.fixture(scope="module")
def impl(sglang_impl):
    return sglang_impl


def _req(rid, slot, stop=(), include=False, **fields):
    return RequestSpec(rid, slot, {"prompt": [1], "temperature": 0.0, "end_id": 0, **fields}, stop=tuple(stop),
                       include_stop_str_in_output=include)


def _run(impl, *reqs, model=HELLO, tokenizer=TOK, **kw):
    return impl.run_scenario(ScenarioSpec(model=model, requests=list(reqs), tokenizer=tokenizer, **kw)).requests


def _out(r):
    return r.error, r.tokens, r.finish_reason, r.finish_step, r.text, r.stop_reason


def test_a_stop_string_spanning_two_tokens_and_the_trim(impl):
    # stop "lo wo" (tokens 2 and 3), max_new_tokens 6. Step 0: tail_str "lo" (normalize: "lo wo" encodes to
    # ["lo", " wo"], stop_str_max_len 2, so the last 3 ids) holds no "lo wo". Step 1: tail_str "lo wo" holds it ->
    # FINISH_MATCHED_STR("lo wo") at step 1, tokens [2, 3] (none dropped). trim_matched_stop("lo wo"): find = 0
    # -> "" ; under no_stop_trim -> "lo wo"[:0 + 5] = "lo wo".
    res = _run(impl, _req("a", 0, ["lo wo"], max_new_tokens=6), _req("b", 1, ["lo wo"], True, max_new_tokens=6))
    assert _out(res["a"]) == (None, [2, 3], "stop_words", 1, "", "lo wo")
    assert _out(res["b"]) == (None, [2, 3], "stop_words", 1, "lo wo", "lo wo")


def test_the_trim_cuts_what_the_finishing_token_adds_after_the_stop_string(impl):
    # stop "o w": at step 1 the text "lo wo" holds it at [1, 4) -> stop_words at step 1. trim_matched_stop:
    # "lo wo".find("o w") = 1 -> "l"; no_stop_trim -> "lo wo"[:4] = "lo w" (the token's last "o" is cut).
    res = _run(impl, _req("a", 0, ["o w"], max_new_tokens=6), _req("b", 1, ["o w"], True, max_new_tokens=6))
    assert _out(res["a"]) == (None, [2, 3], "stop_words", 1, "l", "o w")
    assert _out(res["b"]) == (None, [2, 3], "stop_words", 1, "lo w", "o w")


def test_stop_strings_go_in_list_order_and_before_the_length(impl):
    # stop ["rld", "wo"], max_new_tokens 2: step 1 text "lo wo" holds "wo" (not "rld") -> the first of the list
    # found, "wo"; the request also reaches max_new_tokens at step 1, but _check_str_based_finish comes first ->
    # stop_words, text "lo " (find("wo") = 3).
    res = _run(impl, _req("a", 0, ["rld", "wo"], max_new_tokens=2))
    assert _out(res["a"]) == (None, [2, 3], "stop_words", 1, "lo ", "wo")


def test_the_special_eos_text_is_searched_but_not_output(impl):
    # EOS 0 is argmax at once; stop ["<eos>"]. Req.tail_str decodes with skip_special_tokens=False -> "<eos>"
    # holds the stop string, checked before the EOS -> stop_words at step 0, stop_reason "<eos>"; the
    # detokenizer skips the special token: "" (find("<eos>") = -1, nothing cut).
    eos = TableModel([[5, 0, 0, 0, 0, 0]])
    res = _run(impl, _req("a", 0, ["<eos>"], max_new_tokens=4), _req("b", 1, max_new_tokens=4), model=eos)
    assert _out(res["a"]) == (None, [0], "stop_words", 0, "", "<eos>")
    # without a stop string: FINISH_MATCHED_TOKEN of the EOS -> end_id, text "" (the EOS is dropped anyway)
    assert _out(res["b"]) == (None, [0], "end_id", 0, "", None)


def test_finish_reasons_eos_length_stop_token_and_none(impl):
    # 'eos': end_id 3 -> token 3 at step 1 is the EOS -> end_id at step 1; trim_matched_stop drops the matched
    # token from the ids before decoding -> text "lo". 'stop': stop_words [[3]] (stop_token_ids {3}) -> the same
    # token is FINISH_MATCHED_TOKEN(3), not an EOS id -> stop_words, text "lo", no stop_reason (not a string).
    # 'len': max_new_tokens 3 -> length at step 2, text "lo world". 'run': max_new_tokens 9 with max_steps 3 ->
    # still running when the scenario ends: finish_reason "none", aborted, its whole text "lo world".
    res = _run(impl, _req("eos", 0, end_id=3, max_new_tokens=9), _req("stop", 1, stop_words=[[3]], max_new_tokens=9),
               _req("len", 2, max_new_tokens=3), _req("run", 3, max_new_tokens=9), max_steps=3)
    assert _out(res["eos"]) == (None, [2, 3], "end_id", 1, "lo", None)
    assert _out(res["stop"]) == (None, [2, 3], "stop_words", 1, "lo", None)
    assert _out(res["len"]) == (None, [2, 3, 4], "length", 2, "lo world", None)
    assert _out(res["run"]) == (None, [2, 3, 4], "none", None, "lo world", None)


def test_an_eos_at_the_length_limit_is_end_id(impl):
    # end_id 3, max_new_tokens 2: step 1 gives the EOS and reaches the length; _check_token_based_finish comes
    # before the length test -> end_id at step 1
    res = _run(impl, _req("a", 0, end_id=3, max_new_tokens=2))
    assert _out(res["a"])[:4] == (None, [2, 3], "end_id", 1)


def test_min_new_tokens_bans_the_eos_until_reached(impl):
    # every step: logits [5, 0, 1] (EOS 0 first, then 2); min_length 2 -> min_new_tokens 2: the
    # BatchedMinNewTokensPenalizer sets the EOS to -inf while len(output_ids) < 2 -> tokens 2, 2, then the EOS
    # at step 2 -> end_id at step 2 (max_new_tokens 5)
    model = TableModel([[5.0, 0.0, 1.0]])
    res = _run(impl, _req("a", 0, min_length=2, max_new_tokens=5), model=model, tokenizer=None)
    assert _out(res["a"])[:4] == (None, [2, 2, 0], "end_id", 2)
    assert res["a"].text is None                         # no tokenizer, no text


def test_penalties_follow_the_history_built_step_by_step(impl):
    # logits [-10, 3, 2.5] each step, frequency_penalty 1 on output tokens only (the prompt [1] never counts):
    # step 0: 3 > 2.5 -> 1; step 1: 3 - 1 = 2 < 2.5 -> 2; step 2: 2 vs 2.5 - 1 = 1.5 -> 1. max_new_tokens 3.
    model = TableModel([[-10.0, 3.0, 2.5]])
    res = _run(impl, _req("a", 0, frequency_penalty=1.0, max_new_tokens=3), model=model, tokenizer=None)
    assert _out(res["a"])[:4] == (None, [1, 2, 1], "length", 2)


def test_custom_processor_state_is_each_requests_own(impl):
    # "cycle" bans all but tokens[n % 3], n = len(req.output_ids) of the request itself. 'a' arrives at step 0,
    # 'b' at step 1 and shares the batch with 'a' from then: each follows its own count -> [1, 2, 3] for both.
    model = TableModel([[0.0] * 6])
    procs = parse([{"kind": "cycle", "tokens": [1, 2, 3]}])
    a = _req("a", 0, logits_processors=procs, max_new_tokens=3)
    b = RequestSpec("b", 1, dict(a.fields), arrive=1)
    res = _run(impl, a, b, model=model, tokenizer=None)
    assert _out(res["a"])[:4] == (None, [1, 2, 3], "length", 2)
    assert _out(res["b"])[:4] == (None, [1, 2, 3], "length", 3)
    assert [s.step for s in res["b"].steps] == [1, 2, 3]


def test_the_adapter_schedules_pauses_and_slot_reuse(impl):
    # 'a' paused at step 1: scheduled at 0, 2 (max_new_tokens 2) -> length at step 2. 'c' takes slot 0 after 'a'
    # finished (arrive 3): SGLang keys requests by rid, a freed slot means nothing to it.
    a = RequestSpec("a", 0, _req("a", 0, max_new_tokens=2).fields, pause=frozenset({1}))
    c = RequestSpec("c", 0, _req("c", 0, max_new_tokens=1).fields, arrive=3)
    res = _run(impl, a, c, tokenizer=None)
    assert [s.step for s in res["a"].steps] == [0, 2] and res["a"].finish_reason == "length"
    assert [s.step for s in res["c"].steps] == [3] and res["c"].tokens == [2]


def test_validation_is_sglangs_at_the_first_scheduled_step(impl):
    # top_k 0: SamplingParams.verify rejects it -> invalid_top_k at its arrival step 1; the other request runs
    res = _run(impl, RequestSpec("bad", 0, _req("bad", 0, top_k=0, temperature=1.0).fields, arrive=1),
               _req("ok", 1, max_new_tokens=1), tokenizer=None)
    assert (res["bad"].error, res["bad"].error_step) == ("invalid_top_k", 1)
    assert _out(res["ok"])[:4] == (None, [2], "length", 0)


def test_n_copies_the_request_with_its_own_parameters(impl):
    # n = 3 (GenerateReqInput: parallel_sample_num 3): children "a#0".."a#2", each a Req with the request's
    # parameters. Greedy over HELLO with max_new_tokens 2: each copy [2, 3], length at step 1; the copies keep
    # the request's seed (no seed + i), which the default server does not read anyway
    res = _run(impl, RequestSpec("a", 0, _req("a", 0, max_new_tokens=2, seed=7).fields, n=3), tokenizer=None)
    assert sorted(res) == ["a#0", "a#1", "a#2"]
    assert {k: _out(r)[:4] for k, r in res.items()} == {k: (None, [2, 3], "length", 1) for k in res}
    # an empty prompt is fanned out the same way (the count does not read it)
    empty = RequestSpec("e", 0, {**_req("e", 0, max_new_tokens=1).fields, "prompt": []}, n=2)
    assert sorted(_run(impl, empty, tokenizer=None)) == ["e#0", "e#1"]
    from impls.sglang import engine
    assert engine.parallel_sample_num([1], {"n": 3}) == 3
    assert engine.parallel_sample_num([1], {"n": 3, "beam_width": 2}) == 1   # a beam request is not fanned out


def test_each_copy_of_n_is_validated_as_the_request(impl):
    # top_k 0 fails SamplingParams.verify: every copy fails at its first step, as the one request would
    res = _run(impl, RequestSpec("a", 0, _req("a", 0, top_k=0, temperature=1.0).fields, n=2), tokenizer=None)
    assert {k: r.error for k, r in res.items()} == {"a#0": "invalid_top_k", "a#1": "invalid_top_k"}


@pytest.mark.parametrize("extra,change,missing", [
    ({"use_beam_search": True}, dict(beam_width=2), "beam search"),
    ({}, dict(draft_len=1, drafts=[[2]]), "draft tokens"),
])
def test_what_sglang_cannot_run_is_na_naming_the_missing_feature(impl, extra, change, missing):
    req = RequestSpec("a", 0, {"prompt": [1], "temperature": 0.0, **extra}, **change)
    with pytest.raises(ScenarioUnsupported, match=missing):
        impl.run_scenario(ScenarioSpec(model=HELLO, requests=[req]))


def test_two_requests_in_one_slot_at_once_are_na(impl):
    with pytest.raises(ScenarioUnsupported, match="no sequence slots"):
        _run(impl, _req("a", 0, max_new_tokens=3), RequestSpec("b", 0, _req("b", 0).fields, arrive=1))


def test_the_decode_stage_is_the_adapters():
    # the adapter schedules: a scenario verdict never claims SGLang's own code for "decode"
    prov = stage_provenance(SglangImpl(), scenario=True)
    assert prov["decode"] == "adapter" and prov["finish"] == "own" and prov["draw"] == "own"
