"""Adding a case: 'sampcheck case new', 'sampcheck golden add', 'sampcheck golden update' (refuses without --accept)."""

import json
from pathlib import Path

import pytest

from harness.records import golden
from harness.corpus.authoring import new_case, template
from harness.corpus.load import CaseError, load_case
from harness.cli import main
from harness.judge.judge import Judge

SOURCE = "https://github.com/OWNER/REPO/issues/NUMBER"
FILLED = "https://github.com/huggingface/transformers/issues/1"


def test_template_fails_until_its_source_is_filled_then_loads(tmp_path):
    p = new_case("penalties", "logit-bias-token-zero", root=tmp_path)
    assert p == tmp_path / "penalties" / "logit-bias-token-zero.toml"
    with pytest.raises(CaseError) as ei:
        load_case(p, root=tmp_path)
    assert ei.value.args[0].startswith(f"{p}: source: each source must be")
    p.write_text(p.read_text().replace(SOURCE, FILLED))
    case = load_case(p, root=tmp_path)
    assert (case.id, case.category, case.check) == ("penalties/logit-bias-token-zero", "penalties", "exact")
    assert case.features == {"top_k", "logit_bias", "processed_logits"}
    assert case.batches[0].rows[0].expect == {"token": 0, "rewritten_logits": [6.0, 2.0, 3.0]}


def test_statistical_template_loads_once_filled(tmp_path):
    p = new_case("filters", "top-k-two", check="statistical", root=tmp_path)
    p.write_text(p.read_text().replace(SOURCE, FILLED))
    case = load_case(p, root=tmp_path)
    assert case.check == "statistical" and case.draws == 100000
    assert case.batches[0].rows[0].expect == {"support": [1, 2], "probs": [0.0, 0.4, 0.6]}


@pytest.mark.parametrize("category, name, check, message", [
    ("nope", "x", "exact", "unknown category 'nope'; one of: greedy, seeds, penalties, finish, beam, filters, bans, "
                           "logprobs, speculative, invariants, bad_input"),
    ("bans", "Bad Name", "exact", "name 'Bad Name': use lowercase letters, digits and '-' (e.g. 'logit-bias-token-zero')"),
    ("bans", "x", "scenario", "check 'scenario': 'exact' or 'statistical' (see cases/README.md for the others)"),
])
def test_template_rejects_bad_arguments(category, name, check, message):
    with pytest.raises(ValueError) as ei:
        template(category, name, check)
    assert str(ei.value) == message


def test_case_new_does_not_overwrite(tmp_path):
    new_case("bans", "x", root=tmp_path)
    with pytest.raises(FileExistsError):
        new_case("bans", "x", root=tmp_path)
    new_case("bans", "x", root=tmp_path, force=True)


def _filled_case(tmp_path):
    p = new_case("penalties", "logit-bias-token-zero", root=tmp_path / "cases")
    p.write_text(p.read_text().replace(SOURCE, FILLED))
    return load_case(p, root=tmp_path / "cases")


def test_golden_plan_shows_then_writes_only_when_accepted(tmp_path):
    case = _filled_case(tmp_path)
    root = tmp_path / "golden"
    judge = Judge([], 1)
    changes = golden.plan([case], judge, profiles=("trtllm",), root=root)
    assert [(p.relative_to(root).as_posix(), old) for p, old, _ in changes] == [
        ("trtllm/penalties/logit-bias-token-zero.json", None)]
    rec = json.loads(changes[0][2])
    # hand-checked: logits [1, 2, 3] + bias 5 on token 0 -> [6, 2, 3]; top_k = 1 -> greedy, token 0,
    # kept set {0}, processed logprob 0; trtllm's RAW logprob is taken after the bias:
    # log_softmax([6, 2, 3])[0] = -ln(1 + e^-4 + e^-3) = -ln(1.0681027) = -0.065884, rank 1
    assert rec["case"] == "penalties/logit-bias-token-zero" and rec["profile"] == "trtllm"
    assert rec["batches"][0]["rows"] == [{"token": 0, "mode": "greedy", "finish_reason": "none",
                                          "logprob": -0.065884, "processed_logprob": 0.0, "rank": 1,
                                          "support": [0]}]
    # update without accept writes nothing and reports what would change
    assert golden.update([case], judge, profiles=("trtllm",), root=root) == [
        (root / "trtllm/penalties/logit-bias-token-zero.json", "added")]
    assert not root.exists()
    diff = golden.unified_diff(changes[0][0], None, changes[0][2], base=tmp_path)
    assert diff.startswith("--- /dev/null\n+++ b/golden/trtllm/penalties/logit-bias-token-zero.json\n@@ -0,0 +1,")
    assert golden.update([case], judge, profiles=("trtllm",), root=root, accept=True) == [
        (root / "trtllm/penalties/logit-bias-token-zero.json", "added")]
    assert golden.plan([case], judge, profiles=("trtllm",), root=root) == []
    # a changed file is shown as a diff of the old text
    path = root / "trtllm/penalties/logit-bias-token-zero.json"
    old = path.read_text()
    path.write_text(old.replace('"token": 0', '"token": 2'))
    ((p, was, now),) = golden.plan([case], judge, profiles=("trtllm",), root=root)
    assert p == path and now == old
    d = golden.unified_diff(p, was, now, base=tmp_path)
    assert '-     "token": 2\n' in d and '+     "token": 0\n' in d


def test_cli_case_new_golden_add_and_update(tmp_path, monkeypatch, capsys):
    """The walkthrough of cases/README.md, on a copy of nothing but the new case."""
    import harness.corpus.load as hc
    import harness.records.golden as hg
    cases, gold = tmp_path / "cases", tmp_path / "golden"
    monkeypatch.setattr(hc, "CASES_DIR", cases)
    monkeypatch.setattr(hg, "GOLDEN_DIR", gold)
    monkeypatch.setattr("harness.corpus.authoring.CASES_DIR", cases)
    monkeypatch.setattr(hc, "discover", lambda root=None: sorted(cases.rglob("*.toml")))
    assert main(["case", "new", "penalties", "logit-bias-token-zero"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"wrote {cases / 'penalties' / 'logit-bias-token-zero.toml'}\n")
    assert main(["case", "new", "penalties", "logit-bias-token-zero"]) == 2  # exists
    assert "exists (pass --force to overwrite)" in capsys.readouterr().err
    # unfilled: golden add refuses with the loader's message
    assert main(["golden", "add", "penalties/logit-bias-token-zero"]) == 2
    assert "source: each source must be" in capsys.readouterr().err
    p = cases / "penalties" / "logit-bias-token-zero.toml"
    p.write_text(p.read_text().replace(SOURCE, FILLED))
    assert main(["golden", "add", "penalties/nothing-here"]) == 2
    assert "no case file" in capsys.readouterr().err
    # shown, not written
    assert main(["golden", "add", "penalties/logit-bias-token-zero"]) == 1
    out = capsys.readouterr().out
    assert "+++ b/golden/hf/penalties/logit-bias-token-zero.json" in out
    assert out.rstrip().endswith("nothing written. Review, then re-run with --accept to write them.")
    assert not gold.exists()
    assert main(["golden", "add", "penalties/logit-bias-token-zero", "--accept"]) == 0
    written = sorted(q.relative_to(gold).as_posix() for q in gold.rglob("*.json"))
    assert written == [f"{p}/penalties/logit-bias-token-zero.json"
                       for p in ("flashinfer-joint", "flashinfer", "hf", "trtllm", "vllm")]  # sorted paths
    capsys.readouterr()
    assert main(["golden", "check"]) == 0
    assert main(["golden", "update"]) == 0
    assert capsys.readouterr().out.endswith("every golden file is up to date\n")
    # drift: update shows it and refuses without --accept
    f = gold / "hf/penalties/logit-bias-token-zero.json"
    f.write_text(f.read_text().replace('"token": 0', '"token": 1'))
    assert main(["golden", "update"]) == 1
    out = capsys.readouterr().out
    assert '-     "token": 1\n+     "token": 0\n' in out and "1 golden file(s) would change" in out
    assert '"token": 1' in f.read_text()
    assert main(["golden", "update", "--accept"]) == 0
    assert '"token": 0' in f.read_text()


def test_golden_check_names_an_unreadable_golden_file(tmp_path):
    case = _filled_case(tmp_path)
    root = tmp_path / "golden"
    judge = Judge([], 1)
    golden.update([case], judge, profiles=("trtllm",), root=root, accept=True)
    path = root / "trtllm/penalties/logit-bias-token-zero.json"
    path.write_text(path.read_text()[:40])          # truncated
    ((where, why),) = golden.check([case], judge, profiles=("trtllm",), root=root)
    assert where == path and why.startswith("unreadable golden file (line ")


def test_golden_floats_compare_within_the_rounding_of_a_golden_file(tmp_path):
    """float32 differs in its last bits between CPUs (up to 5e-6 measured on a 32000-token logprob):
    such a difference is no drift, a token, an error kind or a real change of a logprob is."""
    from harness.records.golden import same
    a = {"batches": [{"name": "main", "rows": [{"token": 3, "logprob": -0.795803, "error": None}]}]}
    assert same(a, {"batches": [{"name": "main", "rows": [{"token": 3, "logprob": -0.795798, "error": None}]}]})
    assert not same(a, {"batches": [{"name": "main", "rows": [{"token": 3, "logprob": -0.7957, "error": None}]}]})
    assert not same(a, {"batches": [{"name": "main", "rows": [{"token": 4, "logprob": -0.795803, "error": None}]}]})
    assert not same({"x": "inf"}, {"x": "-inf"}) and not same({"x": 1.0}, {"x": True}) and same([1, 2.0], [1, 2.0])
    # plan() proposes no rewrite for such a file, check() reports nothing
    root = tmp_path / "golden"
    case = load_case(Path(__file__).resolve().parent.parent / "cases" / "greedy" / "argmax-ties-lowest-id.toml")
    judge = Judge([], 1)
    golden.update([case], judge, profiles=("trtllm",), root=root, accept=True)
    (path,) = list(root.rglob("*.json"))
    rec = json.loads(path.read_text())
    rec["batches"][0]["rows"][0]["logprob"] += 3e-6
    path.write_text(json.dumps(rec, indent=1, sort_keys=True) + "\n")
    assert golden.plan([case], judge, profiles=("trtllm",), root=root) == []
    assert golden.check([case], judge, profiles=("trtllm",), root=root) == []
    rec["batches"][0]["rows"][0]["logprob"] += 1e-3
    path.write_text(json.dumps(rec, indent=1, sort_keys=True) + "\n")
    ((_, why),) = golden.check([case], judge, profiles=("trtllm",), root=root)
    assert why.startswith("main:0.logprob: golden ")
