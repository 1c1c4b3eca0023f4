"""The generated tables of docs/ (harness/corpus/tables.py) and the mutation cache behind docs/coverage.md."""

import json
import subprocess
import sys
from pathlib import Path

from harness.corpus import tables
from harness.corpus.paths import CASES_DIR
from harness.judge import mutation
from impls.profiles import TRTLLM

ROOT = Path(__file__).resolve().parent.parent
SEMANTICS = ROOT / "docs" / "SEMANTICS.md"


# ---------------------------------------------------------------------------------------- rules and fields

def test_refs_name_sections_ranges_and_never_a_seed_section():
    text = "rule (§1.1 rule 3, §1.5; llama.cpp), SEMANTICS 1.4a, §2-§4, § 采样参数, SEMANTICS.md §5, §1.1 again"
    assert tables.refs(text) == ["1.1", "1.5", "1.4a", "2", "3", "4", "5"]


def test_the_rules_are_the_numbered_sections_of_semantics():
    sections = tables.rules(SEMANTICS)
    assert list(sections) == ["1", "1.1", "1.2", "1.3", "1.4", "1.4a", "1.4b", "1.5", "1.5a", "1.6", "1.7", "1.8",
                              "1.8a", "2", "2a", "3", "4", "5", "6"]
    assert sections["1.4a"][0] == "Token masks"          # "(added 2026-12-05, issue 17)" left out
    assert sections["2"][0] == "Across steps"
    assert sections["1"][1].startswith("\nInputs of a row:")


def test_fields_name_the_rules_their_docs_cite():
    by = tables.field_rules(tables.rules(SEMANTICS))
    assert list(by) == list(TRTLLM.semantic_fields())
    assert by["explicit_greedy"] == ["1.1"]              # docstring "(§1.1 rule 2)"
    assert by["rewrite_order"] == ["1.2", "1.4a", "1.4b"]  # docstring §1.2 and §1.4b, citation "SEMANTICS §1.4a"
    assert by["token_bitmask_stage"] == ["1.4a"]         # docstring, and `token_bitmask_stage` in §1.4a
    assert by["beam_score_length"] == ["3"]              # named in §3 only
    assert by["temperature_zero"] == []


# ---------------------------------------------------------------------------------------- docs/features.md

def test_engines_come_from_the_registry_without_importing_an_engine():
    code = ("import sys\nfrom harness.corpus import tables\nprint([n for n, _ in tables.engines()])\n"
            "print([m for m in ('vllm', 'sglang', 'llama_cpp', 'transformers', 'tensorrt_llm', 'flashinfer', 'triton') "
            "if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.splitlines() == [
        "['transformers', 'transformers-beam', 'fused', 'flashinfer', 'flashinfer-joint', 'vllm', 'vllm-triton', "
        "'vllm-flashinfer', 'vllm-rejection', 'trtllm', 'llamacpp', 'sglang', 'sglang-flashinfer']", "[]"]


def test_cells_read_each_adapters_declarations():
    impls = dict(tables.engines())
    got = {(n, f): tables.cell(impls[n], f) for n, f in [
        ("transformers-beam", "beam_search"), ("transformers", "beam_search"), ("vllm", "logprobs"),
        ("fused", "top_p_decay"), ("sglang", "beam_search"), ("vllm-rejection", "temperature"),
        ("flashinfer", "end_id"), ("trtllm", "seed")]}
    assert list(got.values()) == ["scenario", "scenario", "step", "✓", "–", "scenario", "scenario", "✓"]


def _case(root: Path, cid: str, features: list, extra: str = "") -> None:
    p = root / f"{cid}.toml"
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(f'schema = 1\nid = "{cid}"\ndescription = "x"\ncategory = "{cid.split("/")[0]}"\n'
                 f"features = {json.dumps(features)}\n{extra}", encoding="utf-8")


class _Steps:
    features = frozenset({"top_k", "seed"})


class _Both:
    features = frozenset({"top_k"})
    scenario_features = frozenset({"top_k", "beam_search"})

    def run_scenario(self, spec, device="cpu"):
        raise NotImplementedError


def test_the_feature_table_has_a_row_per_feature_and_a_column_per_engine(tmp_path):
    root = tmp_path / "cases"
    _case(root, "filters/a", ["top_k"])
    for i in range(4):
        _case(root, f"seeds/s{i}", ["seed", "temperature"])
    text = tables.features_md(root, impls=[("steps", _Steps()), ("both", _Both())])
    lines = text.splitlines()
    assert "| feature | parameters | `steps` | `both` | cases |" in lines
    assert "| `top_k`: top-k filtering | `top_k` | ✓ | ✓ | [filters/a] |" in lines
    assert "| `seed`: per-request seeds (§1.6) | `seed` | ✓ | – | [4 cases](#cases-seed) |" in lines
    assert ("| `beam_search`: beam search (§3) | `use_beam_search`, `beam_width`, `length_penalty`, `early_stopping`, "
            "`diversity_rate` | – | scenario | – |") in lines
    assert ("| `end_id_set`: an EOS set: end_id given as an array of ids, any of which ends the request (§1.4, §1.8) "
            "| `end_id (an array)` | – | – | – |") in lines
    at = lines.index("### `seed` (4)")
    assert lines[at - 2] == '<a id="cases-seed"></a>'
    assert lines[at + 2] == ", ".join(f"[seeds/s{i}]" for i in range(4))
    # each case linked once, at the end
    assert lines[-5:] == ["[filters/a]: ../cases/filters/a.toml"] + [f"[seeds/s{i}]: ../cases/seeds/s{i}.toml"
                                                                      for i in range(4)]
    assert ("Multi-step scenarios run on `both` (`both` with a feature set of their own for scenarios, none with "
            "their single-step one)") in text


# ---------------------------------------------------------------------------------------- docs/coverage.md

def test_the_coverage_table_joins_citations_inputs_and_profile_dependence(tmp_path):
    root = tmp_path / "cases"
    _case(root, "penalties/x", ["repetition_penalty"], 'notes = "the counts of SEMANTICS §2"\n')
    _case(root, "speculative/y", [], '[[scenario.requests]]\nid = "a"\ndrafts = [[1]]\n')
    sha = tables.scan_cases(root)[0]["sha256"]
    key = "trtllm@0 presence_counts_prompt = False"
    cache = {"flips": [key], "cases": {"penalties/x": {"sha256": sha, "fields": {"presence_counts_prompt": key}}}}
    lines = tables.coverage_md(root, SEMANTICS, cache).splitlines()
    x, y = "[penalties/x]", "[speculative/y]"
    assert f"2 cases; 1 measured, **1 not measured since their file changed** (`sampcheck docs --refresh`): {y}." \
        in lines
    assert f'| §1.3 Penalties ("penalty sign handling") | {x} | 0 | 1 | 1 |' in lines   # feature, and the field
    assert f"| §2 Across steps | {x} | 1 | 0 | 0 |" in lines                           # cited in the notes
    assert f"| §4 Speculative decoding | {y} | 0 | 1 | 0 |" in lines                    # drafts: rule §4
    assert "| §1.5 Filters and the draw (profile `trtllm`, the fused production path) | – | 0 | 0 | 0 |" in lines
    assert f"| `presence_counts_prompt` | §1.3 | `True`; `False` | {x} |" in lines
    assert "| `beam_score_length` | §3 | `'generated'`; `'sequence_less_final_end'` | – |" in lines
    rules_line = next(s for s in lines if s.startswith("Rules no case exercises: "))
    assert rules_line.startswith("Rules no case exercises: §1 One row of one step, §1.1 ")
    assert "§2 " not in rules_line and "§4 " not in rules_line and "§1.3 " not in rules_line
    fields_line = next(s for s in lines if s.startswith("Profile fields no case's prediction depends on: "))
    assert "`mode_source` (never flipped)" in fields_line and "`presence_counts_prompt`" not in fields_line
    assert lines[-2:] == ["[penalties/x]: ../cases/penalties/x.toml", "[speculative/y]: ../cases/speculative/y.toml"]


# ---------------------------------------------------------------------------------------- the mutation cache

def test_dependence_finds_what_flipping_every_field_finds():
    """The flips of the fields a case does not read are skipped (fields_read): on this case they change nothing."""
    from harness.corpus.load import load_case
    case = load_case(CASES_DIR / "bans" / "bad-word-prefix-in-prompt.toml", CASES_DIR)
    got = mutation.dependence([case], [TRTLLM])[case.id]
    assert sorted(got) == ["bad_words_see_prompt", "explicit_greedy", "greedy_as_top_k_1", "raw_logprobs_stage",
                           "rewrite_order"]
    assert got["bad_words_see_prompt"] == mutation.flip_key(TRTLLM, "bad_words_see_prompt", False)
    base = mutation._record(mutation._Memo([], 1), case, TRTLLM, True)
    changed = set()
    for f, v in mutation.flips(TRTLLM) + mutation.extra_flips(TRTLLM):
        probe = mutation.flipped(TRTLLM, f, v)
        canonical = probe.rng == "canonical"
        other = base if canonical else mutation._record(mutation._Memo([], 1), case, TRTLLM, False)
        if mutation._record(mutation._Memo([], 1), case, probe, canonical) != other:
            changed.add(f)
    assert changed == set(got)


def test_extra_flips_give_the_fields_no_profile_varies_a_value():
    assert mutation.extra_flips(TRTLLM) == [("global_seed", 43), ("unseeded_offset_base", (1 << 62) + 1),
                                            ("beam_done_running_reason", "length")]


class _C:
    def __init__(self, cid, path):
        self.id, self.path = cid, path


def test_refresh_measures_only_what_the_cache_lacks(tmp_path, monkeypatch):
    a, b = tmp_path / "a.toml", tmp_path / "b.toml"
    a.write_text("a")
    b.write_text("b")
    keys = mutation.all_flip_keys()
    new = keys[0]                                                   # a flip the cache never tried
    gone_field = "top_k_ties"                                       # its recorded flip no longer exists
    kept = next(k for k in keys if k.split(" ")[1] == "rng")
    cache = {"flips": [k for k in keys if k != new],
             "cases": {"a": {"sha256": tables.case_fingerprint(a),
                             "fields": {"rng": kept, gone_field: "trtllm@0 top_k_ties = 'gone'"}},
                       "b": {"sha256": "stale", "fields": {"rng": kept}}}}
    seen = {}

    def fake(cases, todo=None, found=None, progress=None):
        for c in cases:
            seen[c.id] = ({k for k in keys if todo(c.id, k)}, dict(found[c.id]))
            found[c.id]["filter_order"] = "x"
        return found
    monkeypatch.setattr(mutation, "dependence", fake)
    out = mutation.refresh([_C("a", a), _C("b", b)], cache)
    tried_a, known_a = seen["a"]
    assert tried_a == {new} | {k for k in keys if k.split(" ")[1] == gone_field}
    assert known_a == {"rng": kept}
    assert seen["b"] == (set(keys), {})
    assert out["flips"] == sorted(keys)
    assert out["cases"]["a"] == {"sha256": tables.case_fingerprint(a), "fields": {"filter_order": "x", "rng": kept}}
    assert mutation.cache_gaps(out, [{"id": "a", "sha256": tables.case_fingerprint(a)}]) == (["b"], [])
    assert mutation.cache_gaps(cache, [{"id": "a", "sha256": "changed"}]) == (["a", "b"], [new])


def test_the_cache_file_is_one_line_per_flip_and_case_and_reads_back(tmp_path):
    cache = {"schema": 1, "flips": ["b f = 1", "a f = 2"],
             "cases": {"z/c": {"sha256": "1", "fields": {}}, "a/c": {"sha256": "2", "fields": {"g": "a f = 2", "f": "x"}}}}
    path = tmp_path / "coverage.json"
    assert tables.write_cache(path, cache) is True
    assert tables.write_cache(path, cache) is False
    assert path.read_text().splitlines() == [
        "{", '"schema": 1,', '"flips": [', ' "a f = 2",', ' "b f = 1"', "],", '"cases": {',
        ' "a/c": {"sha256": "2", "fields": {"f": "x", "g": "a f = 2"}},', ' "z/c": {"sha256": "1", "fields": {}}',
        "}", "}"]
    assert tables.read_cache(path)["cases"]["a/c"]["fields"] == {"f": "x", "g": "a f = 2"}
    assert tables.read_cache(tmp_path / "none.json") == {"schema": 1, "flips": [], "cases": {}}


def test_the_committed_cache_covers_the_corpus_and_the_profiles():
    """A new or edited case, or a new flip, needs 'sampcheck docs --refresh' (and its docs/coverage.json committed)."""
    cache = tables.read_cache(ROOT / "docs" / tables.CACHE_NAME)
    assert mutation.cache_gaps(cache, tables.scan_cases(CASES_DIR)) == ([], [])


def test_docs_check_passes_on_the_checkout(capsys):
    from harness.cli import main
    assert main(["docs", "--check"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "docs check: 0 stale file(s)"
