"""Adding a case: 'sampcheck case new' (a template refused until its TODOs are replaced, the cases sharing its
features), 'sampcheck golden add', 'sampcheck golden update' (refuses without --accept), golden rewritten_logits."""

import json
import re
from pathlib import Path

import pytest

from harness.records import golden
from harness.corpus.authoring import new_case, similar_cases, template
from harness.corpus.load import CaseError, load_case
from harness.cli import main
from harness.judge.judge import Judge

FILLED = "https://github.com/huggingface/transformers/issues/1"
HOWTO = "replace each (cases/README.md, 'Turn a bug report into a case in five minutes')"
#: The worked example of the exact template, written in place of its TODO values (cases/README.md, step 2).
EXACT_FILLED = {
    "description": 'description = "logit_bias applies to token id 0 like to any other id"',
    "features": 'features = ["top_k", "logit_bias", "processed_logits"]',
    "source": f'source = [{{ url = "{FILLED}" }}]',
    "logits": "logits = [1.0, 2.0, 3.0]\nlogit_bias = [[0, 5.0]]\ntop_k = 1",
    "expect": "expect = { token = 0, rewritten_logits = [6.0, 2.0, 3.0] }",
}
STATISTICAL_FILLED = {
    "description": 'description = "top_k = 2 keeps the two most likely tokens, in proportion"',
    "features": 'features = ["temperature", "top_k", "seed"]',
    "source": f'source = [{{ url = "{FILLED}" }}]',
    "logits": "logits = [0.0, 0.6931471805599453, 1.0986122886681098]\ntemperature = 1.0\ntop_k = 2\nseed = 0",
    "expect": "expect = { support = [1, 2], probs = [0.0, 0.4, 0.6] }",
}


def _fill(text: str, values: dict, keep=()) -> str:
    """``text`` with the one-line TODO value of each key of ``values`` (but ``keep``) replaced, and the notes."""
    for key, line in values.items():
        if key not in keep:
            text, n = re.subn(rf'^{key} = (\["TODO[^"]*"\]|"TODO[^"]*")$', lambda m: line, text, flags=re.M)
            assert n == 1, key
    if "notes" not in keep:
        text, n = re.subn(r"^TODO: the (derivation by hand|predicted distribution)", "by hand: see the row", text,
                          flags=re.M)
        assert n == 1
    return text


def _unfinished(p, root):
    with pytest.raises(CaseError) as ei:
        load_case(p, root=root)
    assert ei.value.field == "<unfinished>"
    return ei.value


def test_template_refuses_to_load_and_names_every_todo_at_once(tmp_path):
    p = new_case("penalties", "logit-bias-token-zero", root=tmp_path)
    assert p == tmp_path / "penalties" / "logit-bias-token-zero.toml"
    e = _unfinished(p, tmp_path)
    assert e.reason == ("6 value(s) still start with 'TODO' (the template's placeholders): description, features[0], "
                        f"source[0], notes, rows[0].logits, rows[0].expect; {HOWTO}")
    assert e.args[0] == f"{p}: <unfinished>: {e.reason}"
    # fill some: the rest is still listed, all of it
    text = p.read_text()
    p.write_text(_fill(text, EXACT_FILLED, keep=("source", "expect", "notes")))
    assert _unfinished(p, tmp_path).reason == ("3 value(s) still start with 'TODO' (the template's placeholders): "
                                               f"source[0], notes, rows[0].expect; {HOWTO}")
    p.write_text(_fill(text, EXACT_FILLED, keep=("expect",)))
    assert _unfinished(p, tmp_path).reason == ("1 value(s) still start with 'TODO' (the template's placeholders): "
                                               f"rows[0].expect; {HOWTO}")
    p.write_text(_fill(text, EXACT_FILLED))
    case = load_case(p, root=tmp_path)
    assert (case.id, case.category, case.check) == ("penalties/logit-bias-token-zero", "penalties", "exact")
    assert case.features == {"top_k", "logit_bias", "processed_logits"}
    assert case.description == "logit_bias applies to token id 0 like to any other id"
    assert case.sources == [{"url": FILLED}]
    assert case.batches[0].rows[0].fields == {"logits": [1.0, 2.0, 3.0], "logit_bias": [[0, 5.0]], "top_k": 1}
    assert case.batches[0].rows[0].expect == {"token": 0, "rewritten_logits": [6.0, 2.0, 3.0]}


def test_features_given_are_written_into_the_template(tmp_path):
    p = new_case("penalties", "x", root=tmp_path, features=["logit_bias", "top_k", "logit_bias"])
    assert '\nfeatures = ["logit_bias", "top_k"]\n' in p.read_text()
    assert _unfinished(p, tmp_path).reason == ("5 value(s) still start with 'TODO' (the template's placeholders): "
                                               f"description, source[0], notes, rows[0].logits, rows[0].expect; {HOWTO}")
    with pytest.raises(ValueError) as ei:
        template("penalties", "x", features=["top_k", "topk"])
    assert str(ei.value) == ("unknown feature 'topk' (did you mean 'top_k', 'top_p'?); the features are listed in "
                             "cases/features.txt")


def test_statistical_template_refuses_then_loads_once_filled(tmp_path):
    p = new_case("filters", "top-k-two", check="statistical", root=tmp_path)
    assert _unfinished(p, tmp_path).reason == (
        "6 value(s) still start with 'TODO' (the template's placeholders): description, features[0], source[0], "
        f"notes, rows[0].logits, rows[0].expect; {HOWTO}")
    p.write_text(_fill(p.read_text(), STATISTICAL_FILLED))
    case = load_case(p, root=tmp_path)
    assert case.check == "statistical" and case.draws == 100000
    assert case.features == {"temperature", "top_k", "seed"}
    assert case.batches[0].rows[0].expect == {"support": [1, 2], "probs": [0.0, 0.4, 0.6]}


TODO_CASE = '''schema = 1
id = "filters/t"
category = "filters"
description = "  TODO later"
features = ["top_k"]
source = [{ url = "https://github.com/a/b/issues/1" }, { repo = "a/b", path = "TODO", version = "v1" }]
check = "exact"
notes = "the TODO list of the report" # TODO: a comment
[defaults]
logits = "TODO: x"
[[batches]]
name = "a"
[[batches.rows]]
top_k = 1
expect = { token = 0 }
[[batches.rows]]
top_k = 1
expect = { any_of = [{ token = 0 }, { error = "TODO: which error" }] }
'''


def test_todo_locations_in_defaults_batches_and_alternatives(tmp_path):
    """Any string value starting with TODO (after blanks) anywhere, named as the loader names fields; a TODO
    inside a text, or in a comment, is no placeholder."""
    p = tmp_path / "filters" / "t.toml"
    p.parent.mkdir()
    p.write_text(TODO_CASE)
    assert _unfinished(p, tmp_path).reason == (
        "4 value(s) still start with 'TODO' (the template's placeholders): description, source[1].path, "
        f"defaults.logits, batches[0].rows[1].expect.any_of[1].error; {HOWTO}")
    text = TODO_CASE.replace("  TODO later", "d").replace('"TODO"', '"p"').replace('"TODO: x"', "[1.0, 2.0]")
    p.write_text(text.replace('"TODO: which error"', '"invalid_top_k"'))
    case = load_case(p, root=tmp_path)
    assert case.notes == "the TODO list of the report"
    assert case.batches[0].rows[1].expect == {"any_of": [{"token": 0}, {"error": "invalid_top_k"}]}


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


#: A small corpus for similar_cases: id -> features (declared by: top_k 5 cases, processed_logits 4,
#: logit_bias 3, seed 2, min_p 2, temperature 2 with c/sub/deep).
SMALL = {"c/delta": ["top_k", "logit_bias", "processed_logits", "seed"], "c/alpha": ["top_k", "logit_bias"],
         "c/aardvark": ["top_k", "logit_bias", "seed", "min_p"], "c/abc": ["top_k", "processed_logits"],
         "c/eps": ["processed_logits", "min_p"], "c/eta": ["temperature", "processed_logits"], "c/zeta": ["top_k"]}


def _small_corpus(root: Path) -> Path:
    for cid, feats in SMALL.items():
        f = root / f"{cid}.toml"
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(f'description = "{cid[2:]}"\nfeatures = {json.dumps(feats)}\n')
    (root / "c" / "broken.toml").write_text('features = ["top_k"\n')           # does not parse: left out
    (root / "c" / "nofeat.toml").write_text('features = "top_k"\n')            # not a list: left out
    (root / "c" / "sub").mkdir()
    (root / "c" / "sub" / "deep.toml").write_text('features = ["temperature"]\n')  # shares nothing
    return root


def test_similar_cases_rank_by_shared_then_rarity_then_jaccard(tmp_path):
    root = _small_corpus(tmp_path)
    want = ["top_k", "logit_bias", "processed_logits"]
    got = similar_cases(want, root=root)
    # by hand: delta shares 3; alpha, aardvark, abc share 2: rarity 1/5 + 1/3 = 0.533 for alpha and aardvark,
    # 1/5 + 1/4 = 0.45 for abc; Jaccard alpha 2/3 > aardvark 2/5 (union tk, lb, pl, seed, min_p); then
    # eps and eta share 1 (processed_logits: 1/4, Jaccard 1/4 both: by id), zeta 1 (top_k: 1/5): sixth, cut
    assert [c["id"] for c in got] == ["c/delta", "c/alpha", "c/aardvark", "c/abc", "c/eps"]
    assert got[0] == {"id": "c/delta", "description": "delta", "shared": ["top_k", "logit_bias", "processed_logits"],
                      "features": ["top_k", "logit_bias", "processed_logits", "seed"]}
    assert [c["shared"] for c in got[1:]] == [["top_k", "logit_bias"], ["top_k", "logit_bias"],
                                              ["top_k", "processed_logits"], ["processed_logits"]]
    assert [c["id"] for c in similar_cases(want, root=root, limit=10)] == [
        "c/delta", "c/alpha", "c/aardvark", "c/abc", "c/eps", "c/eta", "c/zeta"]
    # an excluded id leaves the counts too: top_k 4, logit_bias 2, processed_logits 3 -> alpha and aardvark
    # 1/4 + 1/2, abc 1/4 + 1/3; eps and eta 1/3 > zeta 1/4
    assert [c["id"] for c in similar_cases(want, root=root, exclude=["c/delta"])] == [
        "c/alpha", "c/aardvark", "c/abc", "c/eps", "c/eta"]
    assert similar_cases(["bad_words"], root=root) == []


def test_cli_case_new_lists_the_cases_sharing_its_features(tmp_path, monkeypatch, capsys):
    root = _small_corpus(tmp_path / "cases")
    monkeypatch.setattr("harness.corpus.authoring.CASES_DIR", root)
    assert main(["case", "new", "penalties", "x", "--features", "top_k,logit_bias", "--features", "processed_logits"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[:7] == [
        f"wrote {root / 'penalties' / 'x.toml'}",
        "existing cases sharing the most of these features (read them first: extend one rather than add a duplicate):",
        "  c/delta     3/3 shared (top_k, logit_bias, processed_logits): delta",
        "  c/alpha     2/3 shared (top_k, logit_bias): alpha",
        "  c/aardvark  2/3 shared (top_k, logit_bias): aardvark",
        "  c/abc       2/3 shared (top_k, processed_logits): abc",
        "  c/eps       1/3 shared (processed_logits): eps"]
    assert out[7].startswith("next: replace every value that starts with TODO") and len(out) == 8
    assert '\nfeatures = ["top_k", "logit_bias", "processed_logits"]\n' in (root / "penalties" / "x.toml").read_text()
    # the new case does not list itself (its file declares bad_words now)
    assert main(["case", "new", "penalties", "x", "--force", "--features", "bad_words"]) == 0
    assert capsys.readouterr().out.splitlines()[1] == "no existing case declares any of these features"
    assert main(["case", "new", "penalties", "y", "--features", "top-k"]) == 2
    assert capsys.readouterr().err == ("sampcheck case new: unknown feature 'top-k' (did you mean 'top_k', 'top_p'?); "
                                       "the features are listed in cases/features.txt\n")
    assert not (root / "penalties" / "y.toml").exists()


def _filled_case(tmp_path):
    p = new_case("penalties", "logit-bias-token-zero", root=tmp_path / "cases")
    p.write_text(_fill(p.read_text(), EXACT_FILLED))
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
    # log_softmax([6, 2, 3])[0] = -ln(1 + e^-4 + e^-3) = -ln(1.0681027) = -0.065884, rank 1; the row
    # expects rewritten_logits, so they are recorded: [6, 2, 3]
    assert rec["case"] == "penalties/logit-bias-token-zero" and rec["profile"] == "trtllm"
    assert rec["batches"][0]["rows"] == [{"token": 0, "mode": "greedy", "finish_reason": "none",
                                          "logprob": -0.065884, "processed_logprob": 0.0, "rank": 1,
                                          "support": [0], "rewritten_logits": [6.0, 2.0, 3.0]}]
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
    assert ("<unfinished>: 6 value(s) still start with 'TODO' (the template's placeholders): description, "
            "features[0], source[0], notes, rows[0].logits, rows[0].expect;") in capsys.readouterr().err
    p = cases / "penalties" / "logit-bias-token-zero.toml"
    p.write_text(_fill(p.read_text(), EXACT_FILLED))
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
                       for p in ("flashinfer-joint", "flashinfer", "hf", "llamacpp", "sglang-flashinfer", "sglang",
                                 "trtllm", "vllm")]  # sorted paths
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
    # a case file that does not parse: its ERROR, the others checked, and the summary counts it (exit 1)
    (cases / "penalties" / "zz-broken.toml").write_text('features = ["top_k"\n')
    capsys.readouterr()
    assert main(["golden", "check"]) == 1
    cap = capsys.readouterr()
    assert "zz-broken.toml" in cap.err and cap.err.startswith("ERROR ")
    assert cap.out == "golden check: 1 case(s), 0 problem(s), 1 case file(s) not read (the ERROR lines)\n"
    assert main(["golden", "update"]) == 1
    assert capsys.readouterr().out.endswith(
        "every golden file is up to date; 1 case file(s) not read (the ERROR lines)\n")


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


GOLDEN_CASE = '''schema = 1
id = "penalties/r"
category = "penalties"
description = "d"
features = ["top_k", "logit_bias", "processed_logits"]
source = { url = "https://github.com/a/b/issues/1" }
check = "exact"
[[rows]]
logits = [1.0, 2.0, 3.0]
top_k = 1
expect = { token = 2 }
[[rows]]
logits = [1.0, 2.0, 3.0]
logit_bias = [[0, -inf], [1, 0.1234567]]
top_k = 1
expect = { token = 2 }
expect_by_profile.hf = { token = 2, rewritten_logits = [-inf, 2.1234567, 3.0] }
'''


def test_golden_record_keeps_rewritten_logits_of_rows_that_check_them(tmp_path):
    """Row 0 checks no rewritten_logits: none recorded. Row 1 checks them only in expect_by_profile.hf: recorded
    under every profile (so two profiles' files compare alike), rounded as the other floats."""
    p = tmp_path / "penalties" / "r.toml"
    p.parent.mkdir()
    p.write_text(GOLDEN_CASE)
    case = load_case(p, root=tmp_path)
    judge = Judge([], 1)
    for name in ("trtllm", "hf", "vllm"):
        rows = case.kind.golden_record(judge, case, name)["batches"][0]["rows"]
        assert "rewritten_logits" not in rows[0], name
        # by hand: [1 - inf, 2 + 0.1234567, 3] = [-inf, 2.1234567, 3]; 2.1234567 rounds to 2.123457 at 1e-6
        assert rows[1]["rewritten_logits"] == ["-inf", 2.123457, 3.0], name
        assert rows[1]["token"] == 2, name


def test_golden_diff_shows_rewritten_logits_by_token():
    kind = load_case(Path(__file__).resolve().parent.parent / "cases" / "greedy" / "argmax-ties-lowest-id.toml").kind

    def rec(**row):
        return {"batches": [{"name": "main", "rows": [{"token": 0, **row}]}]}
    assert kind.golden_diff(rec(rewritten_logits=[6.0, 2.0, 3.0]), rec(rewritten_logits=[5.0, 2.0, 3.0])) == [
        "main:0.rewritten_logits: 1 of 3 values differ: token 0: golden 6.0, now 5.0"]
    assert kind.golden_diff(rec(rewritten_logits=[0.0] * 5), rec(rewritten_logits=[0.0, 1.0, "-inf", 1.0, 1.0])) == [
        "main:0.rewritten_logits: 4 of 5 values differ: token 1: golden 0.0, now 1.0; token 2: golden 0.0, "
        "now '-inf'; token 3: golden 0.0, now 1.0; ..."]
    assert kind.golden_diff(rec(), rec(rewritten_logits=[6.0, 2.0, 3.0])) == [
        "main:0.rewritten_logits: golden None, now [6.0, 2.0, 3.0]"]
    assert kind.golden_diff(rec(rewritten_logits=[1.0] * 9, support=[0, 1]), rec(token=1, support=[0])) == [
        "main:0.rewritten_logits: golden [9 values], now None", "main:0.support: golden [0, 1], now [0]",
        "main:0.token: golden 0, now 1"]
