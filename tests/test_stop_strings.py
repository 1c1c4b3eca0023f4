"""Stop strings on a toy tokenizer (SEMANTICS §1.8a): the case format, the reference's rule, its profile fields.

Every expected value is derived by hand in its comment from the rule
(impls/reference/stop_strings.py module docstring), never from the reference's output.
"""

from __future__ import annotations

import pytest

from harness.corpus.load import CaseError, load_case
from impls.profiles import HF, SGLANG, TRTLLM, VLLM
from impls.reference import Reference
from impls.reference.scenario_types import RequestSpec, ScenarioSpec
from impls.reference.scripted import TableModel
from impls.reference.stop_strings import StopMatch, find_stop, output_text
from impls.reference.toy_tokenizer import PROBE_CHARS, TokenizerError, make_tokenizer

import _doubles

# 0 "<eos>" (special), 1 "x", 2 "ab", 3 "cd", 4 "ef", 5 "yS", 6 "TOP"
TOK = make_tokenizer({"vocab": ["<eos>", "x", "ab", "cd", "ef", "yS", "TOP"], "special": [0]}, 7)


def test_the_text_of_a_special_token_is_empty():
    assert TOK.text([1, 2, 0, 3]) == "xabcd" and TOK.piece(0) == "" and TOK.size == 7
    with pytest.raises(IndexError):
        TOK.piece(7)


@pytest.mark.parametrize("spec,field,reason", [
    ({"vocab": ["a", "b"]}, "vocab", "has 2 entries, the model's vocabulary is 3"),
    ({"vocab": ["a", "", "c"]}, "vocab[1]", "empty"),
    ({"vocab": ["a", "b", "a"]}, "vocab[2]", "repeats vocab[0]"),
    ({"vocab": ["a", 2, "c"]}, "vocab[1]", "not a string"),
    ({"vocab": ["a", "b", "c"], "special": [3]}, "special[0]", "not a token id in [0, 3)"),
    ({"vocab": ["a", "b", "c"], "special": [1, 1]}, "special", "twice"),
    ({"vocab": ["a", "b", "c"], "eos": 1}, "eos", "unknown key"),
])
def test_make_tokenizer_names_the_bad_field(spec, field, reason):
    with pytest.raises(TokenizerError) as e:
        make_tokenizer(spec, 3)
    assert e.value.field == field and reason in e.value.reason


def test_find_stop_spans_tokens_and_must_end_in_the_new_text():
    # "abcdef" after tokens [2, 3, 4]: "bcde" at [1, 5) ends at 5, inside "ef" (positions 4..5) -> match.
    assert find_stop(TOK, ["bcde"], [1], [2, 3, 4], TRTLLM) == StopMatch("bcde", 1, 5)
    # "abc" ends at 3, inside "cd" (2..3): at [2, 3] it matches; after [2, 3, 4] it ended earlier -> none.
    assert find_stop(TOK, ["abc"], [1], [2, 3], TRTLLM) == StopMatch("abc", 0, 3)
    assert find_stop(TOK, ["abc"], [1], [2, 3, 4], TRTLLM) is None
    # A special token adds no text, so it completes nothing.
    assert find_stop(TOK, ["d"], [1], [2, 3, 0], TRTLLM) is None


def test_find_stop_picks_the_earliest_end_or_the_list_order():
    # "abcdef" after [2, 3, 4]; new text 4..5: "ef" ends at 6, "e" at 5 -> earliest end "e" (listed second).
    assert find_stop(TOK, ["ef", "e"], [1], [2, 3, 4], TRTLLM) == StopMatch("e", 4, 5)
    # equal ends (6): list order -> "f"
    assert find_stop(TOK, ["f", "def"], [1], [2, 3, 4], TRTLLM) == StopMatch("f", 5, 6)
    # SGLang: the first of the list that matches -> "ef"
    assert find_stop(TOK, ["ef", "e"], [1], [2, 3, 4], SGLANG) == StopMatch("ef", 4, 6)


def test_find_stop_over_the_prompt_only_where_the_profile_sees_it():
    # prompt [5] "yS", token 6 "TOP": "ySTOP", "STOP" at [1, 5) -> [-1, 3) in the generated text.
    assert find_stop(TOK, ["STOP"], [5], [6], TRTLLM) == StopMatch("STOP", -1, 3)
    assert find_stop(TOK, ["STOP"], [5], [6], HF) == StopMatch("STOP", -1, 3)
    assert find_stop(TOK, ["STOP"], [5], [6], VLLM) is None      # stop_words_see_prompt False


def test_vllm_waits_for_more_than_min_length_tokens():
    # min_length 2: with 2 tokens [2, 3] ("abcd") vLLM looks for nothing; the default finds "cd" at [2, 4).
    # With 3 tokens ("abcdef") vLLM looks: "e" at [4, 5) ends in the new text "ef".
    assert find_stop(TOK, ["cd"], [1], [2, 3], VLLM, min_length=2) is None
    assert find_stop(TOK, ["cd"], [1], [2, 3], TRTLLM, min_length=2) == StopMatch("cd", 2, 4)
    assert find_stop(TOK, ["e"], [1], [2, 3, 4], VLLM, min_length=2) == StopMatch("e", 4, 5)


def test_an_empty_stop_string_matches_at_once():
    assert find_stop(TOK, [""], [1], [0], HF) == StopMatch("", 0, 0)


def test_output_text_cuts_at_the_match_or_keeps_everything():
    m = StopMatch("bcde", 1, 5)
    assert output_text(TOK, [2, 3, 4], m, False, TRTLLM) == "a"
    assert output_text(TOK, [2, 3, 4], m, True, TRTLLM) == "abcde"      # the "f" after the match is cut
    assert output_text(TOK, [2, 3, 4], m, False, HF) == "abcdef"       # stop_string_trim none
    assert output_text(TOK, [6], StopMatch("STOP", -1, 3), False, TRTLLM) == ""   # never before the start
    assert output_text(TOK, [2, 3], None, False, TRTLLM) == "abcd"


def _run(profile, *reqs, steps=((0, 0, 5, 0, 0, 0, 0), (0, 0, 0, 5, 0, 0, 0), (0, 0, 0, 0, 5, 0, 0))):
    spec = ScenarioSpec(model=TableModel([list(r) for r in steps]), requests=list(reqs), tokenizer=TOK)
    return Reference(profile).run_scenario(spec).requests


def _req(rid, slot, stop, **fields):
    inc = fields.pop("include", False)
    return RequestSpec(rid, slot, {"prompt": [1], "temperature": 0.0, "end_id": 0, **fields}, stop=tuple(stop),
                       include_stop_str_in_output=inc)


def test_the_runner_finishes_trims_and_orders_with_length():
    # greedy argmax 2, 3, 4: text "ab", "abcd", "abcdef".
    # 's': stop "cde" ends at 5 in "ef" (step 2) -> stop_words at step 2, text "ab", stop_reason "cde".
    # 'inc': the same with include -> "abcde". 'len': stop "d" ends at 4 at step 1 = max_new_tokens 2:
    # default LENGTH > STOP_WORDS -> length, text "abcd", no stop_reason; vLLM (stop words before length) ->
    # stop_words, text "abc".
    out = _run(TRTLLM, _req("s", 0, ["cde"], max_new_tokens=5), _req("inc", 1, ["cde"], max_new_tokens=5, include=True),
               _req("len", 2, ["d"], max_new_tokens=2))
    got = {k: (v.tokens, v.finish_reason, v.finish_step, v.text, v.stop_reason) for k, v in out.items()}
    assert got == {"s": ([2, 3, 4], "stop_words", 2, "ab", "cde"), "inc": ([2, 3, 4], "stop_words", 2, "abcde", "cde"),
                   "len": ([2, 3], "length", 1, "abcd", None)}
    v = _run(VLLM, _req("len", 0, ["d"], max_new_tokens=2))["len"]
    assert (v.finish_reason, v.text, v.stop_reason) == ("stop_words", "abc", "d")


def test_an_empty_stop_string_is_rejected_unless_the_profile_skips_the_check():
    out = _run(TRTLLM, _req("e", 0, ["", "q"], max_new_tokens=3), _req("ok", 1, ["b"], max_new_tokens=3))
    assert (out["e"].error, out["e"].error_step, out["e"].text) == ("invalid_stop_words", 0, None)
    assert (out["ok"].tokens, out["ok"].text, out["ok"].stop_reason) == ([2], "a", "b")
    h = _run(HF, _req("e", 0, [""], max_new_tokens=3))["e"]
    assert (h.tokens, h.finish_reason, h.text) == ([2], "stop_words", "ab")


HEAD = """
[scenario.model]
kind = "table"
steps = [[0.0, 3.0, 0.0]]
{tok}
[[scenario.requests]]
id = "a"
slot = 0
prompt = [0]
max_new_tokens = 2
{extra}
[scenario.requests.expect]
tokens = [1, 1]
"""


@pytest.mark.parametrize("tok,extra,field,reason", [
    ("", 'stop = ["b"]', "scenario.requests[0].stop", "needs [scenario.tokenizer]"),
    ("", "include_stop_str_in_output = true", "scenario.requests[0].include_stop_str_in_output", "needs"),
    ('[scenario.tokenizer]\nvocab = ["a", "b"]\n', "", "scenario.tokenizer.vocab", "the model's vocabulary is 3"),
    ('[scenario.tokenizer]\nvocab = ["a", "b", "b"]\n', "", "scenario.tokenizer.vocab[2]", "repeats vocab[1]"),
    ('[scenario.tokenizer]\nvocab = ["a", "b", "c"]\n', 'stop = ["b"]\nuse_beam_search = true',
     "scenario.requests[0].stop", "plain requests only"),
])
def test_the_loader_locates_tokenizer_and_stop_errors(tmp_path, tok, extra, field, reason):
    feats = '["max_new_tokens", "stop_strings", "beam_search"]'
    p = _doubles.write_case(tmp_path, "finish/x", _doubles.CASE_HEADER, HEAD.format(tok=tok, extra=extra),
                            features=feats, check="scenario", source=_doubles.ONE_SOURCE)
    with pytest.raises(CaseError) as e:
        load_case(p, tmp_path)
    assert e.value.field == field and reason in e.value.reason, (e.value.field, e.value.reason)


def test_a_text_expectation_needs_a_tokenizer_and_stop_needs_its_feature(tmp_path):
    body = HEAD.format(tok="", extra="") + 'text = "bb"\n'
    p = _doubles.write_case(tmp_path, "finish/y", _doubles.CASE_HEADER, body, features='["max_new_tokens"]',
                            check="scenario", source=_doubles.ONE_SOURCE)
    with pytest.raises(CaseError) as e:
        load_case(p, tmp_path)
    assert e.value.field == "scenario.requests[0].expect.text"
    body = HEAD.format(tok='[scenario.tokenizer]\nvocab = ["a", "b", "c"]\n', extra='stop = ["b"]')
    p = _doubles.write_case(tmp_path, "finish/z", _doubles.CASE_HEADER, body, features='["max_new_tokens"]',
                            check="scenario", source=_doubles.ONE_SOURCE)
    with pytest.raises(CaseError, match="needs feature 'stop_strings'"):
        load_case(p, tmp_path)


def test_the_adapters_tokenizer_decodes_like_the_toy_one():
    pytest.importorskip("tokenizers")
    pytest.importorskip("transformers")
    from impls.reference.toy_tokenizer import fast_tokenizer
    fast = fast_tokenizer(TOK)
    ids = [1, 2, 0, 3, 6]
    assert fast.decode(ids, skip_special_tokens=True) == TOK.text(ids) == "xabcdTOP"
    # the probe characters StopStringCriteria encodes get ids from V on: "a".."f" are not one-token here
    assert len(fast) == TOK.size + len(PROBE_CHARS)
    assert fast.decode(fast("abcdef", add_special_tokens=False)["input_ids"]) == "abcdef"


# ---------------------------------------------------------------- SGLang's rules (profile sglang)

def test_sglang_trim_cuts_at_the_first_occurrence_in_the_output_text():
    # stop_string_trim = "first_occurrence" (DetokenizerManager.trim_matched_stop@v0.5.23): "abcdef".find("cd") = 2
    assert output_text(TOK, [2, 3, 4], StopMatch("cd", 2, 4), False, SGLANG) == "ab"
    assert output_text(TOK, [2, 3, 4], StopMatch("cd", 2, 4), True, SGLANG) == "abcd"     # no_stop_trim: through it
    # the output text "ab" skips the special <eos>: "<eos>" is not in it, nothing is cut
    assert output_text(TOK, [2, 0], StopMatch("<eos>", 2, 7), False, SGLANG) == "ab"
    assert output_text(TOK, [2], StopMatch("", 2, 2), False, SGLANG) == ""                # "ab".find("") = 0


def test_sglang_stop_strings_see_special_tokens_text():
    # stop_strings_see_special (Req.tail_str decodes with skip_special_tokens=False): "ab" + "<eos>" holds
    # "b<e" ending inside the new token's text "<eos>" at [1, 4); the default's text "ab" holds none
    assert find_stop(TOK, ["b<e"], [1], [2, 0], SGLANG) == StopMatch("b<e", 1, 4)
    assert find_stop(TOK, ["b<e"], [1], [2, 0], TRTLLM) is None


def test_sglang_stop_string_beats_the_eos_at_the_same_step():
    # stop_strings_first (Req.update_finish_state checks stop strings before EOS and length): the EOS <eos>
    # spells the stop string "<eos>" -> stop_words; the default (special text empty, END_ID first) -> end_id
    eos = _run(SGLANG, _req("a", 0, ["<eos>"], max_new_tokens=3), steps=((5, 0, 0, 0, 0, 0, 0),))["a"]
    assert (eos.tokens, eos.finish_reason, eos.stop_reason, eos.text) == ([0], "stop_words", "<eos>", "")
    eos = _run(TRTLLM, _req("a", 0, ["<eos>"], max_new_tokens=3), steps=((5, 0, 0, 0, 0, 0, 0),))["a"]
    assert (eos.tokens, eos.finish_reason, eos.stop_reason, eos.text) == ([0], "end_id", None, "")
