"""Parallel sampling (``n``): child seeds, the reference's fan-out, the case format (SEMANTICS §2a).

Expected values are derived by hand from the rules (vLLM 0.32.0 ``ParentRequest``, TensorRT-LLM
``LlmRequest::createChildRequest``, transformers' one generator for ``num_return_sequences`` rows),
never read from the reference's output. Tokens are compared between a child and a plain request,
so no token value needs to be pinned here (the corpus cases pin them, derived in their notes).
"""

from pathlib import Path

import pytest

from harness.corpus.load import CaseError, load_case
from impls.profiles import HF, SGLANG, TRTLLM, VLLM
from impls.reference import Reference
from impls.reference.scenario import RequestSpec, ScenarioSpec, fan_out
from impls.reference.scenario_types import child_id, parent_of
from impls.reference.scripted import TableModel
from impls.reference.seeds import child_seed

import _doubles

U64 = 1 << 64
UNIFORM = TableModel([[0.0] * 16])

# ------------------------------------------------------------------ child seeds


@pytest.mark.parametrize("profile,seed,index,n,want", [
    (TRTLLM, 1000, 2, 3, 1002),                 # seed + i
    (VLLM, 1000, 2, 3, 1002),
    (TRTLLM, U64 - 1, 1, 2, 0),                 # uint64: 2**64 - 1 + 1 wraps to 0
    (TRTLLM, -1, 1, 2, 0),                      # -1 is the pattern 2**64 - 1
    (TRTLLM, -2, 1, 2, U64 - 1),                # -2 + 1 = -1, kept as its uint64 pattern (a seed, not "none")
    (SGLANG, 1000, 2, 3, 1000),                 # same_seed
    (HF, 1000, 2, 3, 1000),                     # shared_stream: the request's seed
    (TRTLLM, None, 2, 3, 2),                    # unseeded: 0 + i
    (VLLM, None, 2, 3, None),                   # unseeded children
])
def test_child_seed_rules(profile, seed, index, n, want):
    cs = child_seed(seed, index, n, profile)
    assert (cs.seed, cs.error) == (want, None)


def test_child_seed_overflow_and_stream():
    assert child_seed(U64 - 1, 0, 2, VLLM).error == "invalid_seed"   # the request fails: child 0 too
    assert child_seed(U64 - 2, 1, 2, VLLM).error is None             # 2**64 - 1 is still a seed
    assert child_seed(U64 - 2, 0, 3, VLLM).error == "invalid_seed"
    assert child_seed(1000, 1, 3, HF).stream == (1, 3)
    assert child_seed(1000, 1, 3, TRTLLM).stream is None
    assert child_seed(U64, 1, 2, TRTLLM).seed == U64                  # out of range: left to invalid_seed


def test_child_ids():
    assert child_id("a", 3) == "a#3"
    assert parent_of("a#3") == ("a", 3) and parent_of("a.b#10") == ("a.b", 10)
    assert parent_of("a") is None and parent_of("a#") is None and parent_of("a#01") is None


# ------------------------------------------------------------------ the reference's fan-out

def _req(rid, slot, n=1, **fields):
    f = {"prompt": [1], "temperature": 1.0, "max_new_tokens": 3, **fields}
    return RequestSpec(rid, slot, f, n=n)


def _run(profile, *reqs, model=UNIFORM):
    return Reference(profile).run_scenario(ScenarioSpec(model, list(reqs), max_steps=8)).requests


def test_fan_out_names_slots_and_seeds():
    kids = fan_out(_req("a", 4, n=3, seed=10), TRTLLM)
    assert [(c.id, c.slot, c.index, c.parent, c.fields["seed"]) for c, _ in kids] == [
        ("a#0", 4, 0, "a", 10), ("a#1", 5, 1, "a", 11), ("a#2", 6, 2, "a", 12)]
    # vLLM's SamplingParams.__post_init__ turns seed -1 into None before the children are made
    kids = fan_out(_req("a", 0, n=2, seed=-1), VLLM)
    assert [c.fields.get("seed") for c, _ in kids] == [None, None]
    assert fan_out(_req("a", 0, seed=3), VLLM)[0][0].id == "a"        # n = 1: the request itself


@pytest.mark.parametrize("profile", [TRTLLM, VLLM])
def test_seeded_children_draw_as_plain_requests_seeded_seed_plus_index(profile):
    res = _run(profile, _req("a", 0, n=3, seed=1000), *[_req(f"b{i}", 3 + i, seed=1000 + i) for i in range(3)])
    for i in range(3):
        a, b = res[f"a#{i}"], res[f"b{i}"]
        assert a.tokens == b.tokens and len(a.tokens) == 3
        assert [o for s in a.steps for o in s.offsets] == [0, 1, 2]
    assert len({tuple(res[f"a#{i}"].tokens) for i in range(3)}) == 3


def test_shared_stream_children_take_interleaved_offsets():
    # hf: one generator for the three rows; child i's k-th draw is offset 3k + i of the request's seed
    res = _run(HF, _req("a", 0, n=3, seed=1000))
    assert [[o for s in res[f"a#{i}"].steps for o in s.offsets] for i in range(3)] == [[0, 3, 6], [1, 4, 7],
                                                                                         [2, 5, 8]]
    assert {s.seed for i in range(3) for s in res[f"a#{i}"].steps} == {1000}


def test_unseeded_children_are_seeded_by_index_under_the_default():
    res = _run(TRTLLM, _req("a", 0, n=2), _req("b", 2, seed=0), _req("c", 3, seed=1))
    assert res["a#0"].tokens == res["b"].tokens and res["a#1"].tokens == res["c"].tokens
    res = _run(VLLM, _req("a", 0, n=2))
    assert [s.seed for s in res["a#0"].steps] == [TRTLLM.global_seed] * 3   # the unseeded stream


def test_greedy_n_is_identical_or_invalid_n():
    model = TableModel([[0.0, 3.0, 1.0, 0.0], [2.0, 0.0, 0.0, 1.0], [0.0, 0.0, 0.0, 4.0]])
    res = _run(TRTLLM, _req("a", 0, n=3, temperature=0.0), model=model)
    assert [res[f"a#{i}"].tokens for i in range(3)] == [[1, 0, 3]] * 3
    for profile in (VLLM, HF):
        res = _run(profile, _req("a", 0, n=3, temperature=0.0), model=model)
        assert [(res[f"a#{i}"].error, res[f"a#{i}"].error_step) for i in range(3)] == [("invalid_n", 0)] * 3


def test_seed_overflow_wraps_or_refuses_the_whole_request():
    res = _run(TRTLLM, _req("a", 0, n=2, seed=U64 - 1), _req("c", 2, seed=0))
    assert res["a#1"].tokens == res["c"].tokens
    res = _run(VLLM, _req("a", 0, n=2, seed=U64 - 1), _req("c", 2, seed=0))
    assert [(res[f"a#{i}"].error, res[f"a#{i}"].error_step) for i in range(2)] == [("invalid_seed", 0)] * 2
    assert res["c"].error is None and len(res["c"].tokens) == 3


def test_children_count_their_own_history_and_finish_alone():
    # x = [2, 2, 2, 2, -30]: repetition 10 takes a seen token to 0.2 (probability ratio e**-1.8 < min_p 0.5):
    # each child's kept set is {0, 1, 2, 3} less its own tokens, so every child draws a permutation
    model = TableModel([[2.0, 2.0, 2.0, 2.0, -30.0]])
    res = _run(TRTLLM, _req("a", 0, n=3, seed=21, prompt=[4], min_p=0.5, repetition_penalty=10.0,
                            max_new_tokens=4), model=model)
    for i in range(3):
        r = res[f"a#{i}"]
        assert sorted(r.tokens) == [0, 1, 2, 3]
        assert [len(s.support) for s in r.steps] == [4, 3, 2, 1]
    # EOS (3) possible at position 0 only: a child that takes it finishes at step 0, the others run on
    model = TableModel([[0.0, 0.0, float("-inf"), 0.0], [0.0, 0.0, float("-inf"), float("-inf")]])
    res = _run(TRTLLM, _req("a", 0, n=3, seed=100, end_id=3, max_new_tokens=8), model=model)
    got = [(res[f"a#{i}"].finish_reason, res[f"a#{i}"].finish_step) for i in range(3)]
    assert got == [("length", 7), ("end_id", 0), ("length", 7)]   # seeds 100, 101, 102 (the case's notes)


# ------------------------------------------------------------------ the case format

HEADER = """schema = 1
id = "{id}"
description = "d"
category = "{cat}"
features = {features}
source = {{ url = "https://github.com/vllm-project/vllm/pull/11898" }}
check = "scenario"
"""

BODY = """
[scenario.model]
kind = "table"
steps = [[0.0, 1.0, 2.0]]

[[scenario.requests]]
id = "a"
slot = 0
prompt = [0]
seed = 1
temperature = 1.0
max_new_tokens = 2
n = 2
"""
FEATURES = '["n", "seed", "temperature", "max_new_tokens"]'


def _load(tmp_path: Path, body: str, features: str = FEATURES):
    return load_case(_doubles.write_case(tmp_path, "seeds/x", HEADER, body, features=features), tmp_path)


def test_children_truths_are_keyed_by_child_id(tmp_path):
    case = _load(tmp_path, BODY + """
[[scenario.requests.children]]
[scenario.requests.children.expect]
tokens = [2, 2]

[[scenario.requests.children]]
[scenario.requests.children.expect_by_profile]
vllm = { error = "invalid_seed" }

[[scenario.relations]]
kind = "different_tokens"
a = "a#0"
b = "a#1"
""")
    sc = case.scenario
    assert sc.expect == {"a": {}, "a#0": {"tokens": [2, 2]}, "a#1": {}}
    assert sc.expect_by_profile == {"a#1": {"vllm": {"error": "invalid_seed"}}}
    assert [r.id for r in sc.spec.observed()] == ["a#0", "a#1"]
    assert sc.spec.request("a#1").slot == 1


@pytest.mark.parametrize("extra,field,reason", [
    ("\n[scenario.requests.expect]\ntokens = [1, 1]\n", "scenario.requests[0].expect.tokens", "no output of its own"),
    ('\n[scenario.requests.expect_by_profile]\nvllm = { error = "invalid_n" }\n',
     "scenario.requests[0].expect_by_profile", "no output of its own"),
    ("\n[[scenario.requests.children]]\n[[scenario.requests.children]]\n[[scenario.requests.children]]\n",
     "scenario.requests[0].children", "3 entries, the request has n = 2"),
    ('\n[[scenario.requests]]\nid = "b"\nslot = 1\n', "scenario.requests[1].slot", "child i of request 'a'"),
    ('\n[[scenario.relations]]\nkind = "same_tokens"\na = "a"\nb = "a#1"\n', "scenario.relations[0].a",
     "name one of them, a#0 ... a#1"),
    ('\n[[scenario.relations]]\nkind = "same_tokens"\na = "a#0"\nb = "a#2"\n', "scenario.relations[0].b",
     "its children are a#0 ... a#1"),
    ("\n[[scenario.requests.children]]\n[scenario.requests.children.expect]\ntokens = [3]\n",
     "scenario.requests[0].children[0].expect.tokens", "outside [0, 3)"),
    ('\n[scenario.statistical]\nrequest = "a"\ndraws = 1000\n', "scenario.statistical.draws", "must equal n"),
    ('\n[scenario.statistical]\nrequest = "a#0"\ndraws = 1000\n', "scenario.statistical.request",
     "names their request"),
])
def test_loader_locates_parallel_sampling_errors(tmp_path, extra, field, reason):
    with pytest.raises(CaseError) as e:
        _load(tmp_path, BODY + extra)
    assert e.value.field == field and reason in e.value.reason, (e.value.field, e.value.reason)


def test_loader_refuses_children_without_n_schedules_naming_children_and_beams(tmp_path):
    with pytest.raises(CaseError) as e:
        _load(tmp_path, BODY.replace("n = 2", "n = 1") + "\n[[scenario.requests.children]]\n")
    assert e.value.field == "scenario.requests[0].children" and "needs n > 1" in e.value.reason
    with pytest.raises(CaseError) as e:
        _load(tmp_path, '[scenario]\nschedule = [["a#0"]]\n' + BODY)
    assert e.value.field == "scenario.schedule[0]" and "children are scheduled together" in e.value.reason
    with pytest.raises(CaseError) as e:
        _load(tmp_path, BODY.replace("n = 2", "n = 2\nuse_beam_search = true"),
              '["n", "seed", "temperature", "max_new_tokens", "beam_search"]')
    assert e.value.field == "scenario.requests[0].n" and "with use_beam_search" in e.value.reason
    with pytest.raises(CaseError, match="needs feature 'n'"):
        _load(tmp_path, BODY, '["seed", "temperature", "max_new_tokens"]')


# ------------------------------------------------------------------ who can express n

N_CASES = sorted(p.relative_to(Path("cases")).with_suffix("").as_posix() for p in Path("cases").rglob("n-*.toml"))


def test_the_ten_n_cases_need_feature_n():
    assert len(N_CASES) == 10
    for cid in N_CASES:
        assert "n" in load_case(Path("cases") / f"{cid}.toml").features, cid


def test_engines_without_a_request_layer_report_the_n_cases_na_naming_the_feature():
    # Only the reference (every profile), vLLM's engine loop (LLMEngine.add_request fans n out), transformers
    # (generate(num_return_sequences=n)) and SGLang's scenarios (GenerateReqInput's parallel_sample_num copies)
    # declare n. TensorRT-LLM's children are made by the C++ batch manager (LlmRequest::createChildRequest), outside
    # the checkout's PyTorch sampler functions; llama.cpp's chain, FlashInfer's kernels and vLLM's GPU sampling paths
    # have no requests; a beam request has no children (transformers-beam).
    from harness.judge.judge import Judge
    from impls import registry

    case = load_case(Path("cases/seeds/n-children-seed-plus-index.toml"))
    can = set()
    for e in registry.entries():
        if e.problem or e.origin.startswith("entry point"):
            continue
        impl = e.create()
        if "conformance" not in registry.roles_of(impl):
            continue
        if "n" in case.kind.feature_set(impl):
            can.add(e.name)
        else:
            why = Judge._na(case, impl)
            head = f"{e.name} cannot express feature(s): "
            assert why.startswith(head) and "n" in why[len(head):].split(", "), why
            if getattr(impl, "run_scenario", None) is not None and "finish_reason" in case.kind.feature_set(impl):
                assert why == head + "n", why   # a scenario engine: n is all it lacks here
    assert can == {"reference", "reference-hf", "reference-vllm", "reference-flashinfer", "reference-flashinfer-joint",
                   "reference-llamacpp", "reference-sglang", "reference-sglang-flashinfer", "transformers", "vllm",
                   "sglang"}
