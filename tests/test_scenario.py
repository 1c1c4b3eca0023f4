"""Scenarios: the case format, the stateful reference across steps, judging, bad input, speed.

Case files are written to a temporary corpus; expected values are derived by
hand from the rules (SEMANTICS §2-§4), never from the reference's output.
"""

from pathlib import Path

import numpy as np
import pytest
import torch

from harness.corpus.load import CASES_DIR, CaseError, discover, load_case
from harness.judge.judge import Judge
from harness.run.runner import run
from impls import registry
from impls.profiles import TRTLLM
from impls.reference import Reference
from impls.reference.scenario import RequestSpec, ScenarioSpec, SlotState
from impls.reference.scripted import ContextModel, ModelError, TableModel, ToyModel, make_model

import _doubles

HEADER = """schema = 1
id = "{id}"
description = "d"
category = "{cat}"
features = {features}
source = {{ url = "https://github.com/NVIDIA/TensorRT-LLM/issues/1" }}
check = "scenario"
"""

GOOD = """
[scenario.model]
kind = "table"
steps = [[0.0, 3.0, 0.0], [0.0, 0.0, 3.0]]

[[scenario.requests]]
id = "a"
slot = 0
prompt = [0]
max_new_tokens = 2

[scenario.requests.expect]
tokens = [1, 2]
finish_reason = "length"
"""

def write_case(root: Path, cid: str, body: str, features='["max_new_tokens", "finish_reason"]') -> Path:
    return _doubles.write_case(root, cid, HEADER, body, features=features)

# ------------------------------------------------------------------ scripted models

def test_toy_model_is_the_documented_numpy_function():
    m = ToyModel(vocab=5, seed=7, n=2, sigma=2.0, mean=0.5, set=[[4, 9.0]])
    got = m.logits([1, 2, 3], [4])
    want = np.random.default_rng([7, 2, 3, 4]).standard_normal(5) * 2.0 + 0.5
    want[4] = 9.0
    assert torch.equal(got, torch.from_numpy(want.astype(np.float32)))
    assert torch.equal(m.logits([9, 3], [4]), got)  # only the last n tokens matter
    short = np.random.default_rng([7, 1, 2]).standard_normal(5) * 2.0 + 0.5
    assert torch.allclose(m.logits([2], []), torch.from_numpy(short.astype(np.float32)).masked_fill(
        torch.arange(5) == 4, 9.0))

def test_context_model_longest_suffix_and_table_end():
    m = ContextModel([0.0, 0.0], [{"after": [1], "logits": [1.0, 0.0]}, {"after": [2, 1], "logits": [2.0, 0.0]}])
    assert m.logits([2, 1], [])[0] == 2.0 and m.logits([3, 1], [])[0] == 1.0 and m.logits([1, 3], [])[0] == 0.0
    t = TableModel([[1.0, 0.0]], after_last="error")
    with pytest.raises(ModelError, match="no row for generated position 1"):
        t.logits([0], [1])
    with pytest.raises(ModelError) as e:
        make_model({"kind": "table", "steps": [[1.0, 2.0], [1.0]]})
    assert e.value.field == "steps[1]"

# ------------------------------------------------------------------ loader

@pytest.mark.parametrize("body,field,reason", [
    (GOOD + '\n[scenario.model]\n', "<toml>", "syntax"),
    (GOOD.replace('slot = 0', 'slot = -1'), "scenario.requests[0].slot", "bigger than or equal to 0"),
    (GOOD + '\n[[scenario.requests]]\nid = "a"\nslot = 1\n', "scenario.requests[1].id", "also the id"),
    (GOOD.replace('tokens = [1, 2]', 'tokens = [1, 3]'), "scenario.requests[0].expect.tokens", "outside [0, 3)"),
    (GOOD.replace('steps = [[0.0, 3.0, 0.0], [0.0, 0.0, 3.0]]', 'steps = [[0.0, 3.0, 0.0], [0.0]]'),
     "scenario.model.steps[1]", "steps[0] has 3"),
    (GOOD.replace('max_new_tokens = 2', 'max_new_tokens = 2\ndraft_len = 2'), "scenario.requests[0].draft_len",
     "draft_model"),
    (GOOD.replace('max_new_tokens = 2', 'max_new_tokens = 2\nlogits = [1.0]'), "scenario.requests[0]", "logits"),
])
def test_loader_locates_scenario_errors(tmp_path, body, field, reason):
    p = write_case(tmp_path, "finish/x", body)
    with pytest.raises(CaseError) as e:
        load_case(p, tmp_path)
    if field != "<toml>":
        assert e.value.field == field and reason in e.value.reason, (e.value.field, e.value.reason)

def test_loader_impossible_schedule_and_relations(tmp_path):
    p = write_case(tmp_path, "finish/x", '[scenario]\nschedule = [["a"], ["a", "ghost"]]\n' + GOOD)
    with pytest.raises(CaseError) as e:
        load_case(p, tmp_path)
    assert e.value.field == "scenario.schedule[1]" and "unknown request 'ghost'" in e.value.reason
    p = write_case(tmp_path, "finish/y", GOOD + '\n[[scenario.relations]]\nkind = "same_tokens"\na = "a"\nb = "z"\n')
    with pytest.raises(CaseError) as e:
        load_case(p, tmp_path)
    assert e.value.field == "scenario.relations[0].b"

def test_loader_derives_features_and_rejects_rows(tmp_path):
    p = write_case(tmp_path, "beam/x", GOOD.replace("max_new_tokens = 2", "max_new_tokens = 2\nbeam_width = 2"))
    with pytest.raises(CaseError, match="needs feature 'beam_search'"):
        load_case(p, tmp_path)
    p = write_case(tmp_path, "finish/z", "[[rows]]\nlogits = [1.0]\n" + GOOD)
    with pytest.raises(CaseError) as e:
        load_case(p, tmp_path)
    assert e.value.field == "rows"

# ------------------------------------------------------------------ the stateful reference

def _spec(requests, model=None, **kw):
    return ScenarioSpec(model or TableModel([[0.0, 3.0, 0.0], [0.0, 0.0, 3.0]]), requests, **kw)

def test_bad_input_is_per_request_and_the_run_completes():
    spec = _spec([
        RequestSpec("a", 0, {"prompt": [0], "max_new_tokens": 2}),
        RequestSpec("clash", 0, {"prompt": [0], "max_new_tokens": 2}, arrive=1),
        RequestSpec("wide", 1, {"prompt": [0], "use_beam_search": True, "max_new_tokens": 1}, beam_width=9),
        RequestSpec("d2t", 2, {"prompt": [0], "temperature": 1.0, "max_new_tokens": 1}, draft_len=1,
                    drafts=[[1]], d2t=[0, 0, 0]),
        RequestSpec("after", 0, {"prompt": [0], "max_new_tokens": 2}, arrive=2),
    ], max_beam_width=4)
    out = Reference().run_scenario(spec).requests
    assert (out["clash"].error, out["clash"].error_step) == ("duplicate_slot", 1)
    assert "slot 0 is still held by request 'a'" in out["clash"].message
    assert out["wide"].error == "invalid_beam_width" and "max_beam_width=4" in out["wide"].message
    assert out["d2t"].error == "invalid_d2t"
    assert out["a"].tokens == [1, 2] and out["after"].tokens == [1, 2]
    assert [s.step for s in out["after"].steps] == [2, 3]

def test_seed_offsets_restart_on_slot_reuse_and_skip_paused_steps():
    toy = ToyModel(vocab=8, seed=3, n=2)
    f = {"prompt": [1], "temperature": 1.0, "seed": 99, "max_new_tokens": 2}
    spec = _spec([RequestSpec("a", 0, f), RequestSpec("b", 0, f, arrive=2), RequestSpec("c", 1, f, pause={0, 1})],
                 model=toy)
    out = Reference().run_scenario(spec).requests
    for rid in "abc":
        assert [o for s in out[rid].steps for o in s.offsets] == [0, 1]
    assert out["a"].tokens == out["b"].tokens == out["c"].tokens
    assert [s.step for s in out["c"].steps] == [2, 3]

def test_slot_state_folds_finalised_tokens_and_decays_top_p():
    st = SlotState(RequestSpec("a", 0, {"top_p": 0.8, "top_p_decay": 0.5, "top_p_min": 0.3,
                                        "top_p_reset_ids": [7]}))
    st.top_p = 0.8
    st.fold([1, 1])
    assert st.counts == {1: 2} and st.generated == [1, 1]
    assert st.top_p == pytest.approx(0.3)  # 0.8 -> 0.4 -> max(0.2, 0.3)
    st.fold([7])
    assert st.top_p == 0.8

def test_explicit_schedule_is_the_batch_order():
    spec = _spec([RequestSpec("u", 0, {"prompt": [0], "temperature": 1.0, "max_new_tokens": 2}),
                  RequestSpec("v", 1, {"prompt": [0], "temperature": 1.0, "max_new_tokens": 2})],
                 schedule=[["v", "u"], ["u", "v"]])
    out = Reference().run_scenario(spec).requests
    base = 1 << 62
    assert [s.offsets[0] for s in out["u"].steps] == [base + 1, base + 2]
    assert [s.offsets[0] for s in out["v"].steps] == [base, base + 3]

# ------------------------------------------------------------------ judging

class NoScenarios:
    name = "plain"
    features = registry.create("reference").features
    profile = TRTLLM
    devices = frozenset({"cpu"})
    slow = False
    stages = {"decode": "own"}

    def version(self):
        return "1"

    def available(self, device):
        return None

    def unsupported(self, row):
        return None

class WrongScenario(NoScenarios):
    name = "wrong"

    def run_scenario(self, spec, device="cpu"):
        res = Reference().run_scenario(spec)
        for r in res.requests.values():
            r.tokens = list(reversed(r.tokens))
        return res

def test_statuses_for_scenarios(tmp_path):
    root = tmp_path / "cases"
    write_case(root, "finish/good", GOOD)
    write_case(root, "finish/broken", GOOD.replace("kind = \"table\"", "kind = \"bogus\""))
    write_case(root, "finish/handwrong", GOOD.replace("tokens = [1, 2]", "tokens = [2, 1]"))
    out = run(["reference", NoScenarios(), WrongScenario()], None, tmp_path / "r", progress=False, root=root)
    st = {(r["case"], r["impl"]): r for r in out.doc["results"]}
    assert st[("finish/good", "reference")]["status"] == "pass"
    assert st[("finish/good", "plain")]["status"] == "n/a"
    assert st[("finish/good", "wrong")]["status"] == "fail"
    broken = st[("finish/broken", "reference")]
    assert broken["status"] == "error" and broken["details"]["field"] == "scenario.model.kind"
    hw = st[("finish/handwrong", "reference")]
    assert hw["status"] == "error" and hw["details"]["message"] == (
        "case disagrees with the reference: a: tokens: got [1, 2], want [2, 1] (got: the reference under the default "
        "profile; want: the case)")
    # a broken case is an error for every implementation, never the engine's fail
    assert st[("finish/handwrong", "wrong")]["status"] == "error"
    assert out.exit_code == 1

def test_known_diff_names_beam_profile_fields():
    case = load_case(CASES_DIR / "beam/diversity-rate-boosts-later-beams.toml")
    res = Judge([], 1).evaluate(case, registry.create("reference-hf"), "x")
    assert res.status == "known-diff"
    assert "beam_diversity" in [f["field"] for f in res.details["fields"]]

def _scenario_paths():
    out = []
    for p in discover():
        if 'check = "scenario"' in p.read_text(encoding="utf-8"):
            out.append(p)
    return out

def test_corpus_has_enough_scenarios_and_all_pass():
    paths = _scenario_paths()
    assert len(paths) >= 40
    judge = Judge([], 1)
    ref = registry.create("reference")
    bad = []
    for p in paths:
        res = judge.evaluate(load_case(p), ref, "x")
        if res.status != "pass":
            bad.append((p.name, res.status, res.details.get("message")))
    assert not bad


def test_relations_the_profile_itself_breaks_are_known_diff():
    """seeds/batch-order-independent on the reference under the flashinfer profile: its stream is keyed
    by batch position, so the scenario's same_tokens relation breaks as the profile predicts."""
    case = load_case(CASES_DIR / "seeds/batch-order-independent.toml")
    res = case.kind.evaluate(Judge([], 1), case, registry.create("reference-flashinfer"), "2")
    assert res.status == "known-diff", res.details.get("message")
    assert [f["field"] for f in res.details["fields"]] == ["seed_keyed_by_batch_row"]
    base = case.kind.evaluate(Judge([], 1), case, registry.create("reference"), "2")
    assert base.status == "pass"


def test_a_relation_between_requests_whose_seeds_the_profile_ignores_is_not_judged():
    # seeds/slot-reuse-restarts-stream: three requests with seed 1234 on a toy model, temperature 1. Under
    # vLLM's profile (another RNG, seeds honoured) "same seed, same tokens" is promised: judged. Under SGLang's
    # (seeds_honoured = false) every request draws from one process-wide stream: chance, not judged. A
    # different_tokens relation between two seeded requests is judged under any RNG.
    from harness.kinds.scenario import _by_chance
    from impls.profiles import SGLANG, VLLM
    case = load_case(CASES_DIR / "seeds" / "slot-reuse-restarts-stream.toml")
    spec = case.scenario.spec
    for profile, chance in ((VLLM, False), (SGLANG, True)):
        pred = Reference(profile).run_scenario(spec)
        for rel in case.scenario.relations:
            assert _by_chance(spec, pred, rel, profile) is chance, (profile.name, rel)
    pred = Reference(VLLM).run_scenario(spec)
    assert _by_chance(spec, pred, {"kind": "different_tokens", "a": "a", "b": "c"}, VLLM) is False
    # a greedy decode draws nothing: never chance
    greedy = _with_temperature(spec, 0.0)
    assert _by_chance(greedy, Reference(SGLANG).run_scenario(greedy), case.scenario.relations[0], SGLANG) is False


def _with_temperature(spec, t):
    import dataclasses
    return dataclasses.replace(spec, requests=[dataclasses.replace(r, fields=dict(r.fields, temperature=t))
                                              for r in spec.requests])
