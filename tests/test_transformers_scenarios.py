"""transformers' ``generate()`` on multi-step scenarios (issue #15 item 2; impls/transformers/scenario.py).

Each request is one ``generate()`` call on the scripted model; the expected tokens below are
derived by hand from the rules of transformers 5.24.0 (each test says which), and the
deterministic ones are checked against the reference under the ``hf`` profile as well.
"""

from __future__ import annotations

import math

import pytest
import torch

pytest.importorskip("transformers")

from impls.profiles import HF  # noqa: E402
from impls.reference import Reference  # noqa: E402
from impls.reference.scenario_types import RequestSpec, ScenarioSpec, ScenarioUnsupported  # noqa: E402
from impls.reference.scripted import TableModel  # noqa: E402
from impls.transformers import TransformersImpl  # noqa: E402
from impls.transformers.scenario import TransformersBeamImpl  # noqa: E402
from impls.transformers.scenario import REPORTED, scheduled_steps  # noqa: E402
from impls.transformers.translate import SCENARIO_FEATURES  # noqa: E402

NAN = float("nan")
# cases/greedy/scenario-eos-set-min-length-across-steps: V = 5, argmax 2, 0 (with 2, 3 banned: 1), 3.
EOS_TABLE = [[0, 1, 3, 2.5, 0], [2, 0, 3, 2.5, 0], [0, 0, 2.5, 3, 0]]


def req(rid, slot=0, **fields):
    extra = {k: fields.pop(k) for k in ("arrive", "pause", "beam_width", "draft_len", "drafts") if k in fields}
    if "pause" in extra:
        extra["pause"] = frozenset(extra["pause"])
    return RequestSpec(id=rid, slot=slot, fields=fields, **extra)


def run(*requests, steps=EOS_TABLE, **spec_kw):
    spec = ScenarioSpec(model=TableModel(steps), requests=list(requests), **spec_kw)
    return TransformersImpl().run_scenario(spec), spec


def outcome(rr):
    return (rr.error, rr.error_step, rr.tokens, rr.finish_reason, rr.finish_step)


def test_declared_features_and_keys():
    impl = TransformersImpl()
    assert impl.scenario_features == SCENARIO_FEATURES == frozenset({
        "temperature", "top_k", "top_p", "min_p", "typical_p", "repetition_penalty", "prompt_ignore_length",
        "logit_bias", "min_length", "bad_words", "no_repeat_ngram", "end_id", "end_id_set", "ignore_eos",
        "stop_words", "max_new_tokens", "max_seq_len", "seed", "finish_reason", "beam_search", "logits_processors",
        "stop_strings", "n"})
    assert REPORTED == frozenset({"error", "error_step", "tokens", "finish_reason", "finish_step", "text", "beams",
                                  "cum_logprobs", "scores", "beam_finish_reasons"})
    assert impl.stages["decode"] == "own" and impl.stages["seeds"] == "own"   # transformers.set_seed


def test_scheduled_steps_follow_arrive_pause_schedule_and_max_steps():
    a = req("a", arrive=1, pause=[2, 4])
    assert scheduled_steps(ScenarioSpec(model=TableModel(EOS_TABLE), requests=[a], max_steps=6), a) == [1, 3, 5]
    b, c = req("b"), req("c", slot=1)
    spec = ScenarioSpec(model=TableModel(EOS_TABLE), requests=[b, c], schedule=[["b"], ["c"], ["b", "c"], []])
    assert [scheduled_steps(spec, r) for r in (b, c)] == [[0, 2], [1, 2]]
    assert scheduled_steps(ScenarioSpec(model=TableModel(EOS_TABLE), requests=[b], max_steps=3), b) == [0, 1, 2]


def test_eos_set_and_min_new_tokens_across_steps():
    # eos_token_id = [2, 3], min_new_tokens = 2: MinNewTokensLengthLogitsProcessor bans both ids for two
    # steps (best left: 1, then 0), then 3 (the set's second id) wins and EosTokenCriteria stops.
    res, spec = run(req("a", prompt=[4], end_id=[2, 3], min_length=2, max_new_tokens=6))
    assert outcome(res.requests["a"]) == (None, None, [1, 0, 3], "end_id", 2)
    assert res.keys == REPORTED and res.steps_run == 3
    ref = Reference(HF).run_scenario(spec).requests["a"]
    assert outcome(ref) == outcome(res.requests["a"])


def test_arrival_and_pause_map_tokens_to_scheduled_steps():
    # the same decode, scheduled at steps 1, 3, 4: the third token is the one of step 4.
    res, spec = run(req("a", prompt=[4], end_id=[2, 3], min_length=2, max_new_tokens=6, arrive=1, pause=[2]))
    assert outcome(res.requests["a"]) == (None, None, [1, 0, 3], "end_id", 4)
    assert [s.step for s in res.requests["a"].steps] == [1, 3, 4]
    assert outcome(Reference(HF).run_scenario(spec).requests["a"]) == outcome(res.requests["a"])


def test_scenario_end_cuts_the_request_with_reason_none():
    # max_steps 2: the adapter's budget criterion stops generate() after two tokens; no HF criterion fires.
    res, spec = run(req("a", prompt=[4], end_id=[2, 3], min_length=2, max_new_tokens=6), max_steps=2)
    assert outcome(res.requests["a"]) == (None, None, [1, 0], "none", None)
    assert outcome(Reference(HF).run_scenario(spec).requests["a"]) == outcome(res.requests["a"])


def test_stop_word_criterion_sits_next_to_the_eos_criterion():
    # Greedy: argmax 2 (3.0) at position 0. 'sw': stop word 2, end id 3 -> stop_words at step 0 (the
    # custom EosTokenCriteria subclass did not replace the EOS one). 'both': 2 is the end id and a stop
    # word -> end_id (finish_order END_ID > LENGTH > STOP_WORDS). 'eos': end id 3, stop word 4, greedy
    # [2, 0, 3]: the EOS criterion still fires at step 2.
    res, spec = run(req("sw", prompt=[4], end_id=3, stop_words=[[2]], max_new_tokens=5),
                    req("both", slot=1, prompt=[4], end_id=2, stop_words=[[2]], max_new_tokens=5),
                    req("eos", slot=2, prompt=[4], end_id=3, stop_words=[[4]], max_new_tokens=5),
                    steps=[[0, 1, 3, 2.5, 0], [2, 0, 1, 1, 0], [0, 0, 2.5, 3, 0]])
    got = {k: outcome(v) for k, v in res.requests.items()}
    assert got == {"sw": (None, None, [2], "stop_words", 0), "both": (None, None, [2], "end_id", 0),
                   "eos": (None, None, [2, 0, 3], "end_id", 2)}
    ref = Reference(HF).run_scenario(spec)
    assert {k: outcome(v) for k, v in ref.requests.items()} == got


def test_stop_strings_run_through_stop_string_criteria_and_the_text_is_not_trimmed():
    # Toy tokenizer 0 "<eos>" (special), 1 "x", 2 "ab", 3 "cd", 4 "ef"; greedy argmax 2, 3, 4, then 4.
    # 'span' stop "bcde": "abcdef" after token 4, the match ends in the final token "ef" -> StopStringCriteria
    # stops there: [2, 3, 4], stop_words at step 2; transformers keeps the whole text "abcdef" (no
    # include_stop_str_in_output). 'late' stop "fx": never in "abcdefefef..." -> max_new_tokens 4: length.
    # 'prompt' (prompt [1, 2] = "xab", stop "bc"): "xabcd" after token 3 ("b" of the prompt's "ab" and "c" of
    # "cd"; the criterion reads input_ids, prompt included) -> stop_words at step 0 with tokens [3].
    # Table rows are by generated position, so 'prompt' gets argmax 2 ("ab") first: redo with its own model.
    from impls.reference.toy_tokenizer import make_tokenizer
    tok = make_tokenizer({"vocab": ["<eos>", "x", "ab", "cd", "ef"], "special": [0]}, 5)
    steps = [[0, 0, 5, 0, 0], [0, 0, 0, 5, 0], [0, 0, 0, 0, 5]]
    g = dict(temperature=0.0, end_id=0, max_new_tokens=4)
    span = RequestSpec(id="span", slot=0, fields=dict(prompt=[1], **g), stop=("bcde",))
    late = RequestSpec(id="late", slot=1, fields=dict(prompt=[1], **g), stop=("fx",), include_stop_str_in_output=True)
    pr = RequestSpec(id="prompt", slot=2, fields=dict(prompt=[1, 2], **g), stop=("bc",),
                     model=TableModel([[0, 0, 0, 5, 0]]))
    res, spec = run(span, late, pr, steps=steps, tokenizer=tok)
    got = {k: (outcome(v), v.text) for k, v in res.requests.items()}
    assert got == {"span": ((None, None, [2, 3, 4], "stop_words", 2), "abcdef"),
                   "late": ((None, None, [2, 3, 4, 4], "length", 3), "abcdefef"),
                   "prompt": ((None, None, [3], "stop_words", 0), "cd")}
    ref = Reference(HF).run_scenario(spec)
    assert {k: (outcome(v), v.text) for k, v in ref.requests.items()} == got
    assert ref.requests["span"].stop_reason == "bcde" and res.requests["span"].stop_reason is None  # not reported


def test_repetition_penalty_over_history_and_prompt_ignore_length():
    # penalty 2: a seen id's positive logit halves. 'all' (prompt [1]): [1, 1.5, 2, 0] -> 2, then
    # [1, 1.5, 1.25, 0] -> 1. 'skip' (prompt_ignore_length 1: the prompt's 1 is not seen): [1, 3, 2, 0]
    # -> 1, then (1 seen now) [1, 1.5, 2.5, 0] -> 2.
    table = [[1, 3, 2, 0], [1, 3, 2.5, 0]]
    res, spec = run(req("all", prompt=[1], repetition_penalty=2.0, max_new_tokens=2),
                    req("skip", slot=1, prompt=[1], repetition_penalty=2.0, prompt_ignore_length=1,
                        max_new_tokens=2), steps=table)
    assert outcome(res.requests["all"]) == (None, None, [2, 1], "length", 1)
    assert outcome(res.requests["skip"]) == (None, None, [1, 2], "length", 1)
    ref = Reference(HF).run_scenario(spec)
    assert [outcome(ref.requests[k]) for k in ("all", "skip")] == [outcome(res.requests[k]) for k in ("all", "skip")]


def test_seeded_sampling_is_generate_on_a_forked_global_generator():
    # Temperature 1, top_k 50 (HF's default, >= V: TopKLogitsWarper keeps all), so _sample draws
    # torch.multinomial(softmax(logits), 1) from torch's global generator, here seeded by
    # transformers.set_seed(7) inside hf.isolated_rng: the same draws as that loop written out from a
    # generator seeded 7 (set_seed's torch.manual_seed), and the caller's generator state is untouched.
    table = [[0.5, 0.0, 1.0, -1.0], [0.0, 0.3, 0.2, 0.1], [1.0, 1.0, 0.0, 0.0]]
    state = torch.get_rng_state()
    res, _ = run(req("s", prompt=[0], temperature=1.0, seed=7, max_new_tokens=3), steps=table)
    assert torch.equal(torch.get_rng_state(), state)
    g = torch.Generator().manual_seed(7)
    want = [int(torch.multinomial(torch.softmax(torch.tensor(r), -1).reshape(1, -1), 1, generator=g)[0, 0])
            for r in table]
    assert outcome(res.requests["s"]) == (None, None, want, "length", 2)
    again, _ = run(req("s", prompt=[0], temperature=1.0, seed=7, max_new_tokens=3), steps=table)
    assert again.requests["s"].tokens == want


def test_admission_errors_are_transformers_own_and_per_request():
    # top_p -0.5 (do_sample from the set parameter): TopPLogitsWarper.__init__ raises; do_sample=True with
    # temperature 0: TemperatureLogitsWarper raises; seed 2**64: transformers.set_seed refuses it
    # (numpy.random.seed). Each at its first scheduled step; the last request decodes (greedy: 2, then 2 again).
    res, _ = run(req("p", prompt=[4], top_p=-0.5, max_new_tokens=2),
                 req("t", slot=1, prompt=[4], temperature=0.0, do_sample=True, max_new_tokens=2, arrive=1),
                 req("s", slot=2, prompt=[4], temperature=1.0, seed=2 ** 64, max_new_tokens=2, arrive=2),
                 req("ok", slot=3, prompt=[4], max_new_tokens=2))
    got = {k: outcome(v)[:2] for k, v in res.requests.items()}
    assert got == {"p": ("invalid_top_p", 0), "t": ("invalid_temperature", 1), "s": ("invalid_seed", 2),
                   "ok": (None, None)}
    assert res.requests["ok"].tokens == [2, 2]
    assert res.requests["s"].message == ("seed 18446744073709551616: transformers.set_seed refused it: "
                                         "Seed must be between 0 and 2**32 - 1")


def test_set_seed_decides_which_seeds_a_request_may_have():
    # transformers.set_seed (trainer_utils.py @v5.24.0): numpy.random.seed takes [0, 2**32). 2**32 - 1 runs
    # (the draws of a generator seeded 2**32 - 1, written out and checked by hand); 2**32 and -1 are
    # invalid_seed at admission, a beam request's seed too (beam search draws nothing, but the user's
    # set_seed call comes first).
    table = [[0.5, 0.0, 1.0, -1.0], [0.0, 0.3, 0.2, 0.1]]
    res, _ = run(req("top", prompt=[0], temperature=1.0, seed=2 ** 32 - 1, max_new_tokens=2),
                 req("over", slot=1, prompt=[0], temperature=1.0, seed=2 ** 32, max_new_tokens=2),
                 req("neg", slot=2, prompt=[0], temperature=1.0, seed=-1, max_new_tokens=2, arrive=1),
                 req("beam", slot=3, prompt=[0], use_beam_search=True, beam_width=2, seed=2 ** 32, max_new_tokens=1),
                 steps=table)
    g = torch.Generator().manual_seed(2 ** 32 - 1)
    want = [int(torch.multinomial(torch.softmax(torch.tensor(r), -1).reshape(1, -1), 1, generator=g)[0, 0])
            for r in table]
    # by hand: one sample is argmax(p / E), E ~ Exp(1) from the generator:
    # p/E = [0.096, 0.212, 0.164, 0.108] -> 1, then [0.159, 0.363, 0.151, 0.829] -> 3
    assert want == [1, 3]
    assert outcome(res.requests["top"]) == (None, None, [1, 3], "length", 1)
    assert {k: outcome(res.requests[k])[:2] for k in ("over", "neg", "beam")} == {
        "over": ("invalid_seed", 0), "neg": ("invalid_seed", 1), "beam": ("invalid_seed", 0)}


def test_a_failing_later_step_is_classified_like_a_single_step_row():
    # Position 1 holds a NaN. Sampling: torch.multinomial raises on the NaN probabilities at step 1 ->
    # nan_logits (session.sampling_failure). Greedy: torch.argmax takes the NaN (id 1) as the maximum,
    # as _sample does (greedy_degenerate = "argmax"): [2, 1]. A table with after_last = "error" and one
    # row: the scripted model fails at position 1 -> bad_logits at step 1.
    table = [[0, 1, 3, 2.5, 0], [0, NAN, 0, 0, 0]]
    res, _ = run(req("s", prompt=[4], temperature=1.0, seed=3, max_new_tokens=3),
                 req("g", slot=1, prompt=[4], max_new_tokens=2), steps=table)
    assert outcome(res.requests["s"])[:2] == ("nan_logits", 1)
    assert outcome(res.requests["g"]) == (None, None, [2, 1], "length", 1)
    spec = ScenarioSpec(model=TableModel([[0, 1, 3, 2.5, 0]], after_last="error"),
                        requests=[req("m", prompt=[4], max_new_tokens=3)])
    assert outcome(TransformersImpl().run_scenario(spec).requests["m"])[:2] == ("bad_logits", 1)


def test_slots_are_the_adapters_problem():
    # 'b' arrives at step 1 in slot 0 while 'a' (greedy [2, 2, 3], steps 0-2) holds it: the reference says
    # duplicate_slot; transformers has no slots -> n/a. Arriving at step 3, after 'a' released it: runs.
    a = req("a", prompt=[4], max_new_tokens=3)
    with pytest.raises(ScenarioUnsupported, match="slot 0, which request 'a' still holds"):
        run(a, req("b", prompt=[4], max_new_tokens=1, arrive=1))
    res, _ = run(a, req("b", prompt=[4], max_new_tokens=1, arrive=3))
    assert outcome(res.requests["b"]) == (None, None, [2], "length", 3)


@pytest.mark.parametrize("request_, reason", [
    (req("d", prompt=[4], draft_len=1, drafts=[[1]]), "has draft tokens"),
    (req("w", prompt=[4], beam_width=2), "beam_width 2 without use_beam_search"),
    (req("f", prompt=[4], presence_penalty=0.5), "presence/frequency penalty"),
    (req("m", prompt=[4], stop_words=[[1, 2]]), "multi-token stop words"),
    (req("x", prompt=[4], top_p_decay=0.9), "top-p decay"),
    (req("e", max_new_tokens=1), "empty prompt"),
])
def test_what_generate_cannot_express_is_na_with_the_reason(request_, reason):
    with pytest.raises(ScenarioUnsupported, match=reason):
        run(request_)


def test_transformers_beam_keeps_to_beam_scenarios():
    spec = ScenarioSpec(model=TableModel(EOS_TABLE), requests=[req("a", prompt=[4], max_new_tokens=1)])
    with pytest.raises(ScenarioUnsupported, match="does not use beam search"):
        TransformersBeamImpl().run_scenario(spec)
    # a beam request: both implementations run the same driver; generate() reports no finish step for it
    beam = req("b", prompt=[4], use_beam_search=True, beam_width=2, max_new_tokens=1)
    spec = ScenarioSpec(model=TableModel(EOS_TABLE), requests=[beam])
    x, y = TransformersImpl().run_scenario(spec), TransformersBeamImpl().run_scenario(spec)
    assert x.requests["b"].beams == y.requests["b"].beams == [[2], [3]]
    assert x.keys == y.keys == REPORTED - {"finish_step"}
    # log-softmax of [0, 1, 3, 2.5, 0]: 3 - ln(2 + e + e^3 + e^2.5) and 2.5 - the same
    z = math.log(2 + math.e + math.e ** 3 + math.e ** 2.5)
    assert x.requests["b"].cum_logprobs == pytest.approx([3 - z, 2.5 - z], abs=1e-6)


# ------------------------------------------------------------------ parallel sampling (n)

def test_n_is_one_generate_with_num_return_sequences_on_one_generator():
    # n = 3 is generate(num_return_sequences=3): _expand_inputs_for_generation repeats input_ids 3 times and
    # _sample draws torch.multinomial over the 3 rows at each step from the one generator seeded 7 (fork_rng):
    # the same draws as that loop written out over a (3, V) batch, row i being child a#i.
    table = [[0.5, 0.0, 1.0, -1.0], [0.0, 0.3, 0.2, 0.1], [1.0, 1.0, 0.0, 0.0]]
    res, _ = run(req("a", prompt=[0], temperature=1.0, seed=7, max_new_tokens=3), steps=table)
    spec = ScenarioSpec(model=TableModel(table), requests=[RequestSpec("a", 0, {"prompt": [0], "temperature": 1.0,
                                                                           "seed": 7, "max_new_tokens": 3}, n=3)])
    got = TransformersImpl().run_scenario(spec)
    g = torch.Generator().manual_seed(7)
    rows = [torch.multinomial(torch.softmax(torch.tensor(r), -1).repeat(3, 1), 1, generator=g)[:, 0].tolist()
            for r in table]
    for i in range(3):
        assert outcome(got.requests[f"a#{i}"]) == (None, None, [rows[k][i] for k in range(3)], "length", 2)
    # n = 1 is the plain request
    spec1 = ScenarioSpec(model=TableModel(table), requests=[RequestSpec("a", 0, {"prompt": [0], "temperature": 1.0,
                                                                            "seed": 7, "max_new_tokens": 3}, n=1)])
    assert outcome(TransformersImpl().run_scenario(spec1).requests["a"]) == outcome(res.requests["a"])


def test_n_rows_end_where_their_own_criteria_fire():
    # EOS 3 has probability 1/3 at position 0 and 0 later: generate pads a finished row with pad_token_id (the
    # EOS id) until every row is done; each child's tokens end at its own EOS (finish at step 0) or run to
    # max_new_tokens (length at step 4).
    inf = float("inf")
    table = [[0.0, 0.0, -inf, 0.0], [0.0, 0.0, -inf, -inf]]
    spec = ScenarioSpec(model=TableModel(table), requests=[RequestSpec(
        "a", 0, {"prompt": [0], "temperature": 1.0, "seed": 3, "end_id": 3, "max_new_tokens": 5}, n=6)])
    res = TransformersImpl().run_scenario(spec).requests
    kids = [res[f"a#{i}"] for i in range(6)]
    # _sample draws all 6 rows at every step (finished ones too, then overwritten with the pad): one
    # torch.multinomial over a (6, V) batch per step from the generator seeded 3, as written out here
    g = torch.Generator().manual_seed(3)
    draws = [torch.multinomial(torch.softmax(torch.tensor(table[min(k, 1)]), -1).repeat(6, 1), 1,
                               generator=g)[:, 0].tolist() for k in range(5)]
    want = []
    for i in range(6):
        row = [draws[k][i] for k in range(5)]
        want.append(([3], "end_id", 0) if row[0] == 3 else (row, "length", 4))
    assert [(k.tokens, k.finish_reason, k.finish_step) for k in kids] == want
    ended = [w for w in want if w[1] == "end_id"]
    assert ended and len(ended) < 6  # seed 3: some children take the EOS at step 0, some do not


def test_n_with_greedy_decoding_is_invalid_n():
    # GenerationConfig.validate: greedy (do_sample False, temperature 0) with num_return_sequences 2 raises
    # "Greedy methods ... do not support `num_return_sequences` different than 1" -> invalid_n, every child.
    spec = ScenarioSpec(model=TableModel(EOS_TABLE), requests=[RequestSpec(
        "g", 0, {"prompt": [0], "temperature": 0.0, "max_new_tokens": 2}, n=2)])
    res = TransformersImpl().run_scenario(spec).requests
    assert [(res[f"g#{i}"].error, res[f"g#{i}"].error_step) for i in range(2)] == [("invalid_n", 0)] * 2
