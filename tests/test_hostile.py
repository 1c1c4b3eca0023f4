"""Hostile inputs (issue #19 items 1, 4, 5, 10): every bad case file or record is a located error, nothing else is lost.

The hostile case files are :data:`_hostile.HOSTILE` (the reports of the issue first, then the
project's own), written into ``tmp_path`` by each test; never into ``cases/``.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
from pathlib import Path

import pytest

import _hostile
from _hostile import GOOD, HOSTILE, Hostile, text
from harness.cli import main
from harness.corpus.budget import statistical_budget
from harness.corpus.ids import case_id, external_id
from harness.corpus.load import CaseError, discover, load_case, select
from harness.records import golden, records
from harness.run.runner import run
from impls.profiles import TRTLLM
from impls.reference import Reference

ENGINES = records.ENGINES_DIR


def _corpus(root: Path, *extra: Hostile) -> list:
    for cid, body in GOOD.items():
        p = root / f"{cid}.toml"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(body, encoding="utf-8")
    return [h.make(root) for h in extra]


def _status(outcome) -> dict:
    return {r["case"]: r for r in outcome.doc["results"]}


# ------------------------------------------------------------------ every hostile file, one by one

def test_the_hostile_set_has_the_issue_reports_and_30_more():
    assert len(HOSTILE) >= 8 + 30
    assert len({h.cid for h in HOSTILE}) == len(HOSTILE)


@pytest.mark.parametrize("h", HOSTILE, ids=[h.cid for h in HOSTILE])
def test_each_hostile_file_is_one_located_error(tmp_path, h):
    root = tmp_path / "cases"
    (p,) = _corpus(root, h)
    with pytest.raises(CaseError) as ei:
        load_case(p, root)
    e = ei.value
    assert (e.path, e.field) == (str(p), h.field)
    assert h.reason in e.reason
    assert str(e).startswith(f"{p}: {h.field}: ")
    # the good cases beside it load as before
    assert [load_case(root / f"{cid}.toml", root).id for cid in GOOD] == list(GOOD)


def test_a_toml_float_where_an_integer_is_wanted_is_named():
    # 0.7 used to be read as token id 0 (issue #19 item 4): refused, the float shown
    h = next(x for x in HOSTILE if x.cid == "penalties/logit-bias-id-0-7")
    assert h.field == "rows[0].logit_bias[0][0]"


@pytest.mark.parametrize("value, shown", [("0.7", "0.7"), ("2.0", "2.0"), ("nan", "nan"), ("-inf", "-inf")])
def test_the_refused_float_is_shown(tmp_path, value, shown):
    p = tmp_path / "cases" / "filters" / "k.toml"
    p.parent.mkdir(parents=True)
    p.write_text(text("filters/k", f"[[rows]]\nlogits = [1.0, 2.0]\ntop_k = {value}\n", features='["top_k"]'))
    with pytest.raises(CaseError) as ei:
        load_case(p, tmp_path / "cases")
    assert (ei.value.field, ei.value.reason) == ("rows[0].top_k", f"must be integer, not the TOML float {shown}")


# ------------------------------------------------------------------ runs go on

def test_a_deep_file_no_longer_aborts_runs_that_do_not_select_it(tmp_path):
    # issue #19 item 1: arrays nested 5000 deep made every run fail (RecursionError, nothing written)
    root = tmp_path / "cases"
    deep = next(h for h in HOSTILE if h.cid == "filters/deep-5000")
    (p,) = _corpus(root, deep)
    out = run(["reference"], ["filters/good"], tmp_path / "r", progress=False, root=root, isolate=False)
    assert [(r["case"], r["status"]) for r in out.doc["results"]] == [("filters/good", "pass")]
    assert out.doc["run"]["uncounted_files"] == [
        {"file": str(p), "field": "<toml>", "reason": "line 14: brackets nested deeper than 32 levels "
                                                      "(cases/README.md, 'Limits')"}]
    assert (tmp_path / "r" / "results.json").is_file()


def test_a_mixed_folder_judges_the_good_cases_and_loses_nothing(tmp_path):
    root = tmp_path / "cases"
    made = _hostile.write_corpus(root)
    out = run(["reference"], None, tmp_path / "r", progress=False, root=root, isolate=False)
    res = _status(out)
    assert {cid: res[cid]["status"] for cid in GOOD} == {"filters/good": "pass", "greedy/also-good": "pass"}
    for h in made:
        d = res[h.cid]["details"]
        assert (res[h.cid]["status"], res[h.cid]["check"], d["file"], d["field"]) == (
            "error", "load", str(h.path(root)), h.field), h.cid
        assert h.reason in d["reason"], h.cid
    assert len(out.doc["results"]) == len(made) + len(GOOD)  # one result per file: nothing lost, nothing twice
    assert out.doc["run"]["cases_selected"] == out.doc["run"]["cases_declared"] == len(made) + len(GOOD)


def test_the_whole_hostile_set_end_to_end_through_the_cli(tmp_path):
    """``sampcheck run --impl reference --cases <dir>`` in a fresh process: 100% located errors, no abort."""
    res = _hostile.run_end_to_end(tmp_path / "cases", tmp_path / "out")
    assert res["doc"] is not None, res["stderr"][-2000:]
    assert (res["located"], res["unlocated"]) == (res["hostile"], [])
    assert res["good_pass"] == len(GOOD)
    assert res["rc"] == 1 and "Traceback" not in res["stderr"]
    # a run that selects only a good case still runs, and names each hostile file it could not count
    import subprocess
    import sys
    env = {**os.environ, "SAMPCHECK_CASES": str(tmp_path / "cases")}
    proc = subprocess.run([sys.executable, "-m", "harness", "run", "--impl", "reference", "--cases", "filters/good",
                           "--out", str(tmp_path / "one"), "--no-progress"], cwd=_hostile.ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    deep = tmp_path / "cases" / "filters" / "deep-5000.toml"
    assert (f"sampcheck run: note: {deep}: <toml>: line 14: brackets nested deeper than 32 levels (cases/README.md, "
            "'Limits') (a case file this run did not select; counted 0 in the statistical budget)") in proc.stderr


def test_the_statistical_budget_counts_what_it_can_and_names_the_rest(tmp_path):
    root = tmp_path / "cases"
    _hostile.write_corpus(root)
    b = statistical_budget(discover(root))
    # statistical and readable: draws-too-few (1 row), epsilon-one (1 row), the statistical scenario (1)
    assert b.checks == 3
    unreadable = {"filters/deep-5000", "filters/arrays-33-deep", "filters/inline-tables-40-deep",
                  "filters/dotted-key-40-parts", "filters/header-40-parts", "filters/header-and-brackets-add-up",
                  "filters/huge-file", "filters/integer-2-70", "filters/draw-seed-2-64", "filters/duplicate-key",
                  "filters/dangling-link", "filters/link-loop", "filters/fifo", "filters/empty", "filters/blank",
                  "filters/binary", "filters/nul-byte", "filters/bom"}
    assert {case_id(e.path, root) for e in b.uncounted} == unreadable
    assert all(e.field and e.reason for e in b.uncounted)


def test_select_by_tag_skips_a_hostile_file(tmp_path):
    root = tmp_path / "cases"
    _hostile.write_corpus(root)
    tagged = root / "filters" / "tagged.toml"
    tagged.write_text(text("filters/tagged", 'tags = ["smoke"]\n' + _hostile.ROW))
    assert select(discover(root), ["tag:smoke"], root) == [tagged]


# ------------------------------------------------------------------ ids come from the corpus root only

def _external(tmp_path: Path, name: str, body: str, cid: str = "filters/good", **kw) -> Path:
    p = tmp_path / "elsewhere" / f"{name}.toml"
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text(cid, body, **kw))
    return p


def test_an_external_case_cannot_take_a_corpus_id_or_poison_the_cache(tmp_path):
    # issue #19 item 10: a file outside the corpus claiming 'filters/good' shared its cached predictions,
    # so a correct case failed
    root = tmp_path / "cases"
    _corpus(root)
    ext = _external(tmp_path, "claims-good", "[[rows]]\nlogits = [3.0, 1.0, 2.0]\ntemperature = 0.0\n"
                                            "[rows.expect]\ntoken = 0\n")
    want = "ext/" + hashlib.sha256(os.path.realpath(ext).encode()).hexdigest()[:10] + "/claims-good"
    assert external_id(ext) == want and load_case(ext, root).id == want
    for order in (["filters/good", str(ext)], [str(ext), "filters/good"]):
        out = run(["reference"], order, tmp_path / "r", progress=False, root=root, isolate=False)
        assert {c: r["status"] for c, r in _status(out).items()} == {"filters/good": "pass", want: "pass"}


def test_an_external_case_counts_in_its_own_runs_budget(tmp_path):
    class Absent(Reference):
        def __init__(self):
            super().__init__(TRTLLM, name="absent")

        def available(self, device):
            return "not here"

    root = tmp_path / "cases"
    _corpus(root)
    ext = _external(tmp_path, "stat", "draws = 1000\n[[rows]]\nlogits = [1.0, 2.0]\ntemperature = 1.0\n"
                                      "[[rows]]\nlogits = [2.0, 1.0]\ntemperature = 1.0\n", check="statistical")
    out = run([Absent()], [str(ext)], tmp_path / "r", progress=False, root=root, isolate=False)
    assert out.doc["run"]["statistical_checks_in_corpus"] == 2
    assert out.doc["run"]["alpha_per_check"] == 1e-4 / 2
    out = run([Absent()], ["filters/good"], tmp_path / "r", progress=False, root=root, isolate=False)
    assert out.doc["run"]["statistical_checks_in_corpus"] == 0  # not in the corpus's budget otherwise


def test_one_file_named_twice_is_one_case(tmp_path):
    root = tmp_path / "cases"
    _corpus(root)
    ext = _external(tmp_path, "twice", "[[rows]]\nlogits = [1.0]\n", features="[]")
    again = ext.parent / ".." / "elsewhere" / "twice.toml"
    assert select(discover(root), [str(ext), str(again), "filters/good"], root) == [
        Path(os.path.realpath(ext)), root / "filters" / "good.toml"]


def test_golden_never_writes_for_an_external_case_or_outside_golden(tmp_path, monkeypatch, capsys):
    import harness.corpus.load as hc
    import harness.records.golden as hg
    root, gold = tmp_path / "cases", tmp_path / "golden"
    _corpus(root)
    monkeypatch.setattr(hc, "CASES_DIR", root)
    monkeypatch.setattr(hg, "GOLDEN_DIR", gold)
    ext = _external(tmp_path, "claims-good", "[[rows]]\nlogits = [3.0, 1.0, 2.0]\ntemperature = 0.0\n")
    # 'golden add' with a path: ids only
    for arg in ["../elsewhere/claims-good", str(ext), "/etc/passwd"]:
        assert main(["golden", "add", arg]) == 2
        assert "is not a case id" in capsys.readouterr().err
    # a selection that names an external file: refused whole, nothing written
    assert main(["golden", "update", "--cases", str(ext), "--cases", "filters/good", "--accept"]) == 2
    err = capsys.readouterr().err
    assert f"sampcheck golden update: {ext}: lies outside the corpus {root} (id {external_id(ext)})" in err
    assert not gold.exists()
    assert main(["golden", "add", "filters/good", "--accept"]) == 0
    assert sorted(p.relative_to(gold).as_posix() for p in gold.rglob("*.json"))[0] == "flashinfer-joint/filters/good.json"
    with pytest.raises(ValueError, match="from outside the corpus"):
        golden.golden_path(external_id(ext), "trtllm", gold)
    with pytest.raises(ValueError, match="would lie outside"):
        golden.golden_path("filters/../../../x", "trtllm", gold)
    outside = tmp_path / "victim.json"
    with pytest.raises(ValueError, match="outside the golden folder"):
        golden.write([(gold / "trtllm" / "filters" / "good.json", None, "{}"), (outside, None, "{}")], gold)
    assert not outside.exists() and json.loads((gold / "trtllm" / "filters" / "good.json").read_text()) != {}


# ------------------------------------------------------------------ sampcheck diff on malformed records

EX, ST, INV = ("bad_input/all-neg-inf-sampling-row", "filters/min-p-temperature-statistical",
               "invariants/batch-permutation-greedy-seeded-reverse")


def _set(*path_value):
    *path, value = path_value

    def f(rec):
        node = rec
        for k in path[:-1]:
            node = node[k]
        if value is _DROP:
            del node[path[-1]]
        else:
            node[path[-1]] = value
    return f


_DROP = object()
C = "cases"

#: (mutation of transformers-5.24.0.json, where, reason): hand-checked against record_schema.py.
BAD_ROWS = [
    (_set(C, EX, "rows", 1, "actual", "token", "0"), f"case '{EX}': rows[1].actual.token", "must be integer or null"),
    (_set(C, EX, "rows", 1, "actual", [0]), f"case '{EX}': rows[1].actual", "must be object"),
    (_set(C, EX, "rows", 1, "actual", _DROP), f"case '{EX}': rows[1]",
     "has neither 'actual' (an exact row) nor 'counts' (a statistical row)"),
    (_set(C, EX, "rows", 2, "row", "main:1"), f"case '{EX}': rows", "the label(s) 'main:1' appear more than once"),
    (_set(C, EX, "rows", 2, "stochastic", 1), f"case '{EX}': rows[2].stochastic", "must be boolean"),
    (_set(C, EX, "rows", 1, "actual", "support", ["a"]), f"case '{EX}': rows[1].actual.support",
     "must be null, a list of token ids, a list of such lists (per step), or {head, length}"),
    (_set(C, EX, "rows", 1, "actual", "top_logprobs", [[[1], 0.5]]), f"case '{EX}': rows[1].actual.top_logprobs",
     "must be null or a list of [token id, logprob]"),
    (_set(C, EX, "rows", 1, "actual", "logprob", True), f"case '{EX}': rows[1].actual.logprob",
     "must be a number, 'inf', '-inf', 'nan' or null"),
    (_set(C, ST, "rows", 0, "outside_support", "many"), f"case '{ST}': rows[0].outside_support",
     "must be null, a count >= 0, or {token: count >= 0}"),
    (_set(C, ST, "rows", 0, "counts", 0, 0, [28.5]), f"case '{ST}': rows[0].counts[0][0][0]", "must be integer"),
    (_set(C, ST, "rows", 0, "p_value", [0.5]), f"case '{ST}': rows[0].p_value",
     "must be a number, 'inf', '-inf', 'nan' or null"),
    (_set(C, INV, "invariants", 0, "a_out", [1]), f"case '{INV}': invariants[0].a_out",
     "must be null or an object of outputs"),
    (_set(C, INV, "invariants", 0, "stochastic", "ab"), f"case '{INV}': invariants[0].stochastic", "must be array"),
    (_set(C, INV, "invariants", 0, "holds", _DROP), f"case '{INV}': invariants[0]", "must contain ['holds'] properties"),
    (_set(C, EX, "fields", [1]), f"case '{EX}': fields[0]", "must be string"),
    (_set(C, EX, "borrowed", "seeds"), f"case '{EX}': borrowed", "must be array"),
    (_set(C, EX, "colour", "red"), f"case '{EX}': <entry>", "unknown field(s) {'colour'}"),
    (_set(C, EX, "check", _DROP), f"case '{EX}': <entry>", "must contain ['check'] properties"),
    (_set("environment", "packages", ["torch"]), "environment.packages", "must be object"),
    (_set("run", "cases_declared", "214"), "run.cases_declared", "must be integer or null"),
]


@pytest.mark.parametrize("mutate, where, reason", BAD_ROWS, ids=[f"{w}: {r}"[:60] for _, w, r in BAD_ROWS])
def test_diff_exits_2_naming_file_case_and_field(tmp_path, capsys, mutate, where, reason):
    good = ENGINES / "transformers-5.24.0.json"
    rec = json.loads(good.read_text())
    mutate(rec)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(rec))
    assert main(["diff", str(good), str(bad)]) == 2
    assert capsys.readouterr().err == f"sampcheck diff: {bad}: record schema 2: {where}: {reason}\n"


def test_every_committed_record_loads_and_schema_1_stays_readable(tmp_path, capsys):
    for p in sorted(ENGINES.glob("*.json")):
        assert records.load(p)["schema"] == 2, p
    # a schema-1 record: the same without own_code/borrowed (written before stage provenance)
    rec = json.loads((ENGINES / "transformers-5.24.0.json").read_text())
    old = copy.deepcopy(rec)
    old["schema"] = 1
    for e in old["cases"].values():
        e.pop("own_code", None)
        e.pop("borrowed", None)
    p1 = tmp_path / "one.json"
    p1.write_text(json.dumps(old))
    assert records.load(p1)["schema"] == 1
    assert main(["diff", str(p1), str(ENGINES / "transformers-5.24.0.json")]) == 0
    assert "record schema 1, before stage provenance" in capsys.readouterr().out
    # own_code is a field of schema 2 only
    old["cases"][EX]["own_code"] = True
    p1.write_text(json.dumps(old))
    assert main(["diff", str(p1), str(ENGINES / "transformers-5.24.0.json")]) == 2
    assert capsys.readouterr().err == (f"sampcheck diff: {p1}: record schema 1: case '{EX}': <entry>: unknown field(s) "
                                       "{'own_code'} (own_code and borrowed are fields of record schema 2; this record "
                                       "says schema 1)\n")


def test_a_record_with_draws_outside_the_support_diffs_with_itself(capsys):
    # outside_support is kept by token ({"3": <count>}: llama.cpp keeps the tied token 3 that the reference
    # drops); the two-sample test took it for a number (TypeError). The count follows the record's draws.
    p = ENGINES / "llamacpp-0.3.36.json"
    outside = json.loads(p.read_text())["cases"]["filters/top-p-ties-statistical"]["rows"][0]["outside_support"]
    assert list(outside) == ["3"] and isinstance(outside["3"], int) and outside["3"] > 0
    assert main(["diff", str(p), str(p)]) == 0
    assert capsys.readouterr().out.endswith("result: no change\n")


def test_a_record_nested_too_deeply_is_exit_2(tmp_path, capsys):
    bad = tmp_path / "deep.json"
    bad.write_text("[" * 100000 + "]" * 100000)
    assert main(["diff", str(bad), str(bad)]) == 2
    assert capsys.readouterr().err == f"sampcheck diff: {bad}: not a run record: nested too deeply for the JSON parser\n"


def test_a_pattern_that_matches_nothing_names_the_close_ids(tmp_path):
    root = tmp_path / "cases"
    _hostile.write_corpus(root)
    (root / "filters" / "tagged.toml").write_text(text("filters/tagged", _hostile.ROW))
    with pytest.raises(ValueError, match=r"--cases 'filters/taged' matches no case \(did you mean 'filters/tagged', "):
        select(discover(root), ["filters/taged"], root)
    with pytest.raises(ValueError, match=r"--cases 'filter' matches no case \(did you mean 'filters'\?"):
        select(discover(root), ["filter"], root)
    with pytest.raises(ValueError, match=r"--cases 'zzz' matches no case \(ids look like"):
        select(discover(root), ["zzz"], root)
    # letter case is ignored in the suggestion; a mistyped tag names the corpus's tags; a missing file says so
    with pytest.raises(ValueError, match=r"--cases 'FILTERS/TAGGED' matches no case \(did you mean 'filters/tagged'"):
        select(discover(root), ["FILTERS/TAGGED"], root)
    (root / "filters" / "tagged.toml").write_text(text("filters/tagged", 'tags = ["smoke"]\n' + _hostile.ROW))
    with pytest.raises(ValueError, match=r"--cases 'tag:smok': no case has that tag \(did you mean 'tag:smoke'\? "
                                         r"tags in the corpus: smoke\)"):
        select(discover(root), ["tag:smok"], root)
    with pytest.raises(ValueError, match=r"--cases '.*nope\.toml': no such file"):
        select(discover(root), [str(tmp_path / "nope.toml")], root)
