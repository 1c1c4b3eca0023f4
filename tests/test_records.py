"""Run records (harness/records/records.py): condensing results.json, the file format, and corrupt files."""

import json

import pytest

from harness.records import records
from harness.records.records import RecordError


def _doc():
    """A hand-made results.json with one case of each check kind."""
    return {
        "schema": 1,
        "run": {"finished": "2026-11-29T12:00:00+00:00", "platform": "Linux", "cases_selected": 3,
                "cases_declared": 3, "alpha_per_check": 1.25e-05, "statistical_checks_in_corpus": 1,
                "impls": {"reference": {"version": "9", "device": "cpu", "profile": "trtllm"}}},
        "results": [
            {"case": "z/stat", "impl": "reference", "status": "pass", "check": "statistical", "details": {
                "message": "ok", "rows": [{"row": "main:0", "verdict": "pass", "n": 30, "p_value": 0.5123456789,
                                          "tv": {"estimate": 0.01}, "outside_support": 0,
                                          "bins": [{"tokens": [2], "observed": 20, "expected": 19.5},
                                                   {"tokens": [0, 1], "observed": 10, "expected": 10.5}]}]}},
            {"case": "a/exact", "impl": "reference", "status": "fail", "check": "exact",
             "provenance": {"stages": {"filters": "own", "logprobs": "reference"}, "own_code": False,
                            "borrowed": ["logprobs"]}, "details": {
                "message": "token differs", "rows": [{"row": "main:0", "expected": {"token": 1},
                                                      "actual": {"token": 2, "error": None, "logprob": -0.12345678,
                                                                 "probs": [0.5, float("inf")], "extra": 1}}]}},
            {"case": "m/inv", "impl": "reference", "status": "pass", "check": "invariant",
             "provenance": {"stages": {"draw": "own"}, "own_code": True, "borrowed": []}, "details": {
                "message": "1 invariant(s) hold", "invariants": [
                    {"kind": "same_token", "a": "x:0", "b": "y:0", "a_out": {"token": 3, "error": None},
                     "b_out": {"token": 3, "error": None}, "holds": True, "why": []}]}},
        ],
    }


def test_from_results_condenses_each_check_kind():
    rec = records.from_results(_doc(), "reference")
    assert rec["format"] == "sampcheck-record" and rec["schema"] == 2
    assert rec["engine"]["impl"] == "reference" and rec["engine"]["version"] == "9"
    assert rec["environment"]["created"] == "2026-11-29T12:00:00+00:00"
    assert rec["run"] == {"cases_selected": 3, "cases_declared": 3, "alpha_per_check": 1.25e-05,
                          "statistical_checks_in_corpus": 1}
    assert list(rec["cases"]) == ["a/exact", "m/inv", "z/stat"]  # sorted by id
    # exact: the kept outputs, floats to 7 significant digits, inf as a string, unknown keys dropped
    # provenance: own_code on every verdict that has it, the borrowed stages when not own
    assert rec["cases"]["a/exact"] == {"status": "fail", "check": "exact", "message": "token differs", "rows": [
        {"row": "main:0", "actual": {"token": 2, "error": None, "logprob": -0.1234568, "probs": [0.5, "inf"]}}],
        "own_code": False, "borrowed": ["logprobs"]}
    assert rec["cases"]["m/inv"]["own_code"] is True and "borrowed" not in rec["cases"]["m/inv"]
    assert "own_code" not in rec["cases"]["z/stat"]   # a results.json entry without provenance
    # statistical: draws as counts per bin, never as lists
    assert rec["cases"]["z/stat"]["rows"] == [{"row": "main:0", "verdict": "pass", "n": 30, "p_value": 0.5123457,
                                               "tv": 0.01, "outside_support": 0, "counts": [[[2], 20], [[0, 1], 10]]}]
    assert rec["cases"]["m/inv"]["invariants"] == [
        {"kind": "same_token", "a": "x:0", "b": "y:0", "a_out": {"token": 3, "error": None},
         "b_out": {"token": 3, "error": None}, "holds": True}]


def test_write_then_load_round_trips_stably(tmp_path):
    rec = records.from_results(_doc(), "reference")
    p = records.write(rec, tmp_path / "r.json")
    text = p.read_text()
    assert text == records.dumps(rec) and text.endswith("}\n")
    assert records.load(p) == json.loads(text)
    assert records.dumps(records.load(p)) == text  # byte-stable


@pytest.mark.parametrize("content, problem", [
    (None, "no such file"),
    ("", "the file is empty"),
    ("  \n", "the file is empty"),
    ('{"format": "sampcheck-record", "sch', "truncated: Unterminated string starting at line 1 column 32"),
    ('{"format": "sampcheck-record", "schema": 1', "truncated: Expecting ',' delimiter at line 1 column 43"),
    ("{'a': 1}", "not valid JSON: Expecting property name enclosed in double quotes at line 1 column 2"),
    ("[1, 2]", "not a run record: the top level is a JSON list, not an object"),
    ('{"format": "other"}', "not a run record: 'format' is 'other', want 'sampcheck-record' (files written by "
                            "'sampcheck record')"),
    ('{"run": {}, "results": []}', "this is the results file of a run (sampcheck run), not a run record: make "
                                   "records with 'sampcheck record --impl NAME --out FILE' and diff those"),
    ('{"format": "sampcheck-record", "schema": 3}', "unsupported record schema 3 (this sampcheck reads schemas 1, 2)"),
    ('{"format": "sampcheck-record", "schema": 1, "engine": {"impl": "x"}, "environment": {}, "run": {}}',
     "field 'cases' is missing or not a JSON object"),
    ('{"format": "sampcheck-record", "schema": 1, "engine": {"impl": "x"}, "environment": {}, "run": {}, '
     '"cases": {"a/b": {"status": "ok"}}}',
     "case 'a/b': status 'ok' is not one of error, fail, known-bug, known-diff, n/a, pass, skip"),
    ('{"format": "sampcheck-record", "schema": 1, "engine": {"impl": "x"}, "environment": {}, "run": {}, '
     '"cases": {"a/b": {"status": "pass", "rows": [{"counts": [[[1], -3]]}]}}}',
     "case 'a/b': rows[0].counts[0] is not [[token ids], count >= 0]"),
])
def test_corrupt_records_name_the_file_and_the_problem(tmp_path, content, problem):
    p = tmp_path / "bad.json"
    if content is not None:
        p.write_text(content)
    with pytest.raises(RecordError) as ei:
        records.load(p)
    assert ei.value.problem == problem
    assert str(ei.value) == f"{p}: {problem}"


def test_truncated_committed_record_is_reported(tmp_path):
    src = records.ENGINES_DIR / "transformers-5.24.0.json"
    text = src.read_text()
    p = tmp_path / "cut.json"
    p.write_text(text[: len(text) // 2])
    with pytest.raises(RecordError) as ei:
        records.load(p)
    assert str(ei.value).startswith(f"{p}: truncated: ")


def test_diff_cli_exit_2_on_a_corrupt_record(tmp_path, capsys):
    from harness.cli import main
    bad = tmp_path / "bad.json"
    bad.write_text("")
    good = records.ENGINES_DIR / "transformers-5.24.0.json"
    assert main(["diff", str(good), str(bad)]) == 2
    assert capsys.readouterr().err == f"sampcheck diff: {bad}: the file is empty\n"
