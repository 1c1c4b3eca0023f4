"""Custom logits processors: the kinds (impls/processors.py), their validation, and where the reference runs them.

Values are derived by hand (SEMANTICS §1.4b); each profile's placement is its ``"custom"`` entry in
``rewrite_order`` / ``filter_order`` (impls/profiles.py, cited there).
"""

import math

import pytest
import torch

import _doubles
from harness.corpus.load import CaseError, load_case
from impls import processors as P
from impls.base import Row
from impls.profiles import get_profile
from impls.reference.sampler import ReferenceSession, rewrite_logits
from impls.reference.scenario import RequestSpec, ScenarioSpec, run_scenario
from impls.reference.scripted import TableModel

X = torch.tensor([3.0, 2.0, 1.0, 0.0])
INF = float("-inf")


def _one(table):
    return P.parse([table])


# -- the kinds -------------------------------------------------------------------------------
def test_bias_adds_each_value_and_sums_a_repeated_token():
    (p,) = _one({"kind": "bias", "bias": [[1, 0.5], [3, -1.0], [1, 0.25]]})
    assert p.apply(X, 7).tolist() == [3.0, 2.75, 1.0, -1.0]        # stateless: n is not read
    assert X.tolist() == [3.0, 2.0, 1.0, 0.0]                       # the input is not modified
    assert not p.argmax_invariant and not p.spec.stateful


def test_step_bias_grows_with_the_steps():
    (p,) = _one({"kind": "step_bias", "token": 3, "per_step": 0.5})
    assert [p.apply(X, n)[3].item() for n in range(4)] == [0.0, 0.5, 1.0, 1.5]
    assert p.apply(X, 2)[:3].tolist() == [3.0, 2.0, 1.0]


def test_cycle_keeps_one_token_by_the_steps():
    (p,) = _one({"kind": "cycle", "tokens": [3, 1, 2]})
    assert p.apply(X, 0).tolist() == [INF, INF, INF, 0.0]
    assert p.apply(X, 1).tolist() == [INF, 2.0, INF, INF]
    assert p.apply(X, 5).tolist() == [INF, INF, 1.0, INF]           # 5 % 3 = 2 -> token 2


def test_margin_bans_below_the_largest_and_is_argmax_invariant():
    (p,) = _one({"kind": "margin", "margin": 1.5})
    assert p.apply(X, 0).tolist() == [3.0, 2.0, INF, INF]           # 1 < 3 - 1.5; 2 >= 1.5
    assert p.apply(torch.full((3,), INF), 0).tolist() == [INF] * 3  # nothing finite: unchanged
    assert p.argmax_invariant


def test_apply_all_keeps_list_order_and_can_select_by_invariance():
    procs = P.parse([{"kind": "bias", "bias": [[3, 2.5]]}, {"kind": "margin", "margin": 1.0}])
    # bias first: [3, 2, 1, 2.5]; margin 1 from 3: bans < 2 -> [3, 2, -inf, 2.5]
    assert P.apply_all(X, procs, 0).tolist() == [3.0, 2.0, INF, 2.5]
    assert P.apply_all(X, procs, 0, argmax_invariant=False).tolist() == [3.0, 2.0, 1.0, 2.5]
    assert P.apply_all(X, procs, 0, argmax_invariant=True).tolist() == [3.0, 2.0, INF, INF]
    keep = torch.tensor([True, True, True, False])
    assert P.filter_keep(X, keep, procs, 0).tolist() == [True, True, False, False]


def test_steps_is_the_rows_own_history():
    assert P.steps(Row(X, generated=[0, 0, 1])) == 3
    assert P.steps(Row(X, generated=[0], draft_position=2)) == 3


def test_round_trip_through_plain_tables():
    tables = [{"kind": "bias", "bias": [[1, -math.inf]]}, {"kind": "cycle", "tokens": [2, 0]}]
    procs = P.parse(tables)
    assert P.to_dicts(procs) == [{"kind": "bias", "bias": [[1, -math.inf]]}, {"kind": "cycle", "tokens": [2, 0]}]
    assert P.from_dicts(P.to_dicts(procs)) == procs
    hash(procs)   # a Row field value: hashable records


@pytest.mark.parametrize("tables, where", [
    ([{"kind": "nope"}], "[0].kind: unknown processor kind 'nope'"),
    ([{"kind": "bias", "bias": [[0, 1.0]]}, {"kind": "step_bias", "token": 1}], "[1].per_step: required"),
    ([{"kind": "margin", "margin": 1.0, "tokens": [1]}], "[0].tokens: not an argument of kind 'margin'"),
    ([{"kind": "bias", "bias": [[0, 1.0], [2, math.nan]]}], "[0].bias[1]: nan"),
    ([{"kind": "bias", "bias": [[0, math.inf]]}], "[0].bias[0]: inf"),
    ([{"kind": "step_bias", "token": 0, "per_step": math.inf}], "[0].per_step: inf is not a finite number"),
])
def test_parse_names_the_entry_and_argument(tables, where):
    with pytest.raises(ValueError) as ei:
        P.parse(tables)
    assert str(ei.value).startswith(where), str(ei.value)


def test_vocab_check_names_the_entry():
    assert P.vocab_check([{"kind": "cycle", "tokens": [0, 3]}], 4) is None
    assert P.vocab_check([{"kind": "margin", "margin": 1.0}, {"kind": "cycle", "tokens": [0, 4]}], 4) == \
        "[1] (kind 'cycle') names token ids [4] outside [0, 4)"


def test_the_loader_reports_located_errors(tmp_path):
    def load(field):
        body = f"[[rows]]\nlogits = [0.0, 1.0, 3.0]\nlogits_processors = {field}\n[rows.expect]\ntoken = 2\n"
        p = _doubles.write_case(tmp_path, "bans/x", _doubles.CASE_HEADER, body, features='["logits_processors"]',
                                check="exact", source=_doubles.ONE_SOURCE)
        return load_case(p, tmp_path)

    with pytest.raises(CaseError) as ei:
        load('[{ kind = "cycle", tokens = [1, 5] }]')
    assert ei.value.field == "rows[0].logits_processors" and "outside [0, 3)" in ei.value.reason
    with pytest.raises(CaseError) as ei:
        load('[{ kind = "bias", bias = [[0, nan]] }]')
    assert ei.value.field == "rows[0].logits_processors" and ei.value.reason.startswith("[0].bias[0]")
    with pytest.raises(CaseError) as ei:
        load('[{ kind = "step_bias", token = 1 }]')      # the schema: a required argument
    assert "logits_processors" in f"{ei.value.field} {ei.value.reason}"
    with pytest.raises(CaseError) as ei:
        load('[{ kind = "cycle", tokens = [1.0] }]')     # a TOML float where a token id is wanted
    assert "logits_processors" in f"{ei.value.field} {ei.value.reason}"
    case = load('[{ kind = "cycle", tokens = [1] }, { kind = "margin", margin = 0.5 }]')
    assert case.features == frozenset({"logits_processors"})
    row = case.batches[0].rows[0].to_row()
    assert [p.kind for p in row.logits_processors] == ["cycle", "margin"]


# -- where the reference runs them (the profiles' "custom" entries) ------------------------
def test_custom_position_against_the_repetition_penalty_per_profile():
    # [1, 3, 2.2, 0.5], token 1 generated, repetition 2, bias +1 on token 1:
    # before the penalty (trtllm, vllm): (3 + 1) / 2 = 2; after it (hf, sglang): 3 / 2 + 1 = 2.5
    row = Row(torch.tensor([1.0, 3.0, 2.2, 0.5]), generated=[1], repetition_penalty=2.0,
              logits_processors=_one({"kind": "bias", "bias": [[1, 1.0]]}))
    got = {name: rewrite_logits(row.logits, row, get_profile(name))[1].item() for name in
           ("trtllm", "vllm", "hf", "sglang", "llamacpp")}
    assert got == {"trtllm": 2.0, "vllm": 2.0, "hf": 2.5, "sglang": 2.5, "llamacpp": 2.0}


def test_vllm_runs_argmax_invariant_kinds_after_the_temperature_and_not_on_greedy_rows():
    margin = _one({"kind": "margin", "margin": 1.2})
    row = Row(torch.tensor([2.0, 1.0, 0.0, -1.0]), temperature=2.0, logits_processors=margin)
    supports = {}
    for name in ("trtllm", "vllm", "hf"):
        r = ReferenceSession(get_profile(name)).step([row])[0]
        supports[name] = torch.nonzero(r.probs > 0).flatten().tolist()
    # before the temperature: bans < 0.8; vLLM after it: [1, 0.5, 0, -0.5] bans < -0.2
    assert supports == {"trtllm": [0, 1], "vllm": [0, 1, 2], "hf": [0, 1]}
    greedy = row.replace(temperature=0.0)
    assert rewrite_logits(greedy.logits, greedy, get_profile("vllm")).tolist() == [2.0, 1.0, 0.0, -1.0]
    assert rewrite_logits(greedy.logits, greedy, get_profile("trtllm")).tolist() == [2.0, 1.0, INF, INF]


def test_a_row_without_processors_is_untouched_by_its_neighbours():
    cyc = _one({"kind": "cycle", "tokens": [3]})
    rows = [Row(X, temperature=0.0, logits_processors=cyc, slot=0), Row(X, temperature=0.0, slot=1)]
    out = ReferenceSession(get_profile("trtllm")).step(rows)
    assert [r.token for r in out] == [3, 0]


def test_scenario_steps_are_each_requests_own():
    # one row repeated [0, 1, 1.4, 0.5]; 'r' step_bias on 3 (+0.5 n), 's' on 1 (+0.3 n) arriving at step 1
    model = TableModel([[0.0, 1.0, 1.4, 0.5]])
    reqs = [RequestSpec("r", 0, {"prompt": [1], "temperature": 0.0, "max_new_tokens": 5,
                                 "logits_processors": _one({"kind": "step_bias", "token": 3, "per_step": 0.5})}),
            RequestSpec("s", 1, {"prompt": [2], "temperature": 0.0, "max_new_tokens": 4,
                                 "logits_processors": _one({"kind": "step_bias", "token": 1, "per_step": 0.3})},
                        arrive=1)]
    res = run_scenario(ScenarioSpec(model=model, requests=reqs), get_profile("trtllm"),
                       ReferenceSession(get_profile("trtllm")))
    assert res.requests["r"].tokens == [2, 2, 3, 3, 3]
    assert res.requests["s"].tokens == [2, 2, 1, 1]


def test_kind_table_lists_every_kind():
    table = P.kind_table()
    assert all(f"| `{k}` |" in table for k in P.KINDS)
