"""The parameter registry (impls/params.py) and what is derived from it: Row, the schema, the docs, the template."""

import dataclasses

import fastjsonschema
import pytest
import torch

from harness.corpus import docs
from harness.corpus.authoring import template
from harness.corpus.load import ERROR_KINDS, ROW_PROPS
from impls import params
from impls.base import FEATURES, Row


def test_generated_files_are_current():
    stale = docs.stale()
    assert not stale, f"stale generated file(s) {[str(p) for p in stale]}: run 'sampcheck docs' and commit them"


def test_every_param_names_declared_features_errors_and_scopes():
    names = [p.name for p in params.PARAMS]
    assert len(names) == len(set(names))
    for p in params.PARAMS:
        assert p.feature is None or p.feature in params.FEATURES, p.name
        assert set(p.errors) <= set(params.ERRORS), p.name
        assert p.scope in params.SCOPES and p.doc and p.type, p.name
        fastjsonschema.compile(p.schema)        # a schema a validator accepts
    # the error kinds no field raises are outcomes of the pipeline
    raised = {e for p in params.PARAMS for e in p.errors}
    assert set(params.ERRORS) - raised == {"no_valid_token"}
    # features no field needs are named by expectations or declared by hand (cases/README.md)
    needed = {p.feature for p in params.PARAMS} | {f for p in params.PARAMS for f, _, _ in p.value_features}
    assert set(params.FEATURES) - needed == {"processed_logits", "canonical_rng", "finish_reason"}
    assert all(f in params.FEATURES for p in params.PARAMS for f, _, _ in p.value_features)


def test_row_is_built_from_the_registry():
    fields = [f.name for f in dataclasses.fields(Row)]
    assert fields == [p.name for p in params.PARAMS if p.row_field]
    assert "logits_dtype" not in fields and "beam_width" not in fields   # a dtype, a request field
    r = Row(torch.zeros(4))
    assert (r.temperature, r.use_beam_search, r.bad_words, r.slot, r.vocab) == (None, False, [], 0, 4)
    assert r.bad_words is not Row(torch.zeros(1)).bad_words            # mutable defaults are not shared
    assert Row.__module__ == "impls.base" and "top_p : float" in Row.__doc__
    assert FEATURES == tuple(params.FEATURES) and ERROR_KINDS == tuple(params.ERRORS)


def test_loader_schema_and_features_come_from_the_registry():
    assert set(ROW_PROPS) == {p.name for p in params.step_fields()} | {"expect", "expect_by_profile"}
    assert ROW_PROPS["top_p"] is params.param("top_p").schema
    assert params.field_feature("no_repeat_ngram_size", 2) == "no_repeat_ngram"
    assert params.field_feature("logits_dtype", "float32") is None
    assert params.field_feature("logits_dtype", "bfloat16") == "low_precision_logits"
    assert params.field_feature("beam_width", 2) == "beam_search"
    assert params.field_feature("prompt", [1]) is None
    # an end id is feature end_id; an array (an EOS set, even of one id) is end_id_set
    assert params.field_feature("end_id", 2) == "end_id" and params.field_feature("end_id", -1) == "end_id"
    assert params.field_feature("end_id", [2, 5]) == "end_id_set" and params.field_feature("end_id", [2]) == "end_id_set"
    validate = fastjsonschema.compile(params.param("end_id").schema)
    assert validate(3) == 3 and validate([2, 5]) == [2, 5]
    for bad in ([], [1.5], 1.5, "2"):
        with pytest.raises(fastjsonschema.JsonSchemaException):
            validate(bad)


def test_conversions():
    assert params.parse_seed("0xFFFFFFFFFFFFFFFF") == 2 ** 64 - 1 and params.parse_seed("-3") == -3
    with pytest.raises(ValueError, match=r"not an integer: 'x1'"):
        params.parse_seed("x1")
    assert params.param("logit_bias").convert([[0, 5.0], [2, -1]]) == [(0, 5.0), (2, -1.0)]
    # end_id: an int stays an int, an array becomes a tuple in the order given
    conv = params.param("end_id").convert
    assert conv(7) == 7 and conv(-1) == -1 and conv([4, 2, 4]) == (4, 2, 4)


@pytest.mark.parametrize("value,ids", [
    (None, ()), (-1, ()), (3, (3,)), (0, (0,)),
    ([2, 4], (2, 4)), ((4, 2), (4, 2)),       # the order given: the first id is first
    ([4, -1, 2, 4], (4, 2)),                  # -1 names no token; repeats dropped
    ([-1], ()), ([-2, 9], (-2, 9)),           # other out-of-range ids are kept (they match nothing)
])
def test_end_id_set(value, ids):
    assert params.end_id_set(value) == ids


def test_the_template_lists_every_row_field():
    text = template("filters", "x")
    for p in params.step_fields():
        assert f"#   {p.name} " in text, p.name
    assert "[feature no_repeat_ngram]" in text
    assert "[feature end_id; an array: end_id_set]" in text


def test_a_stale_table_is_found_and_rewritten(tmp_path):
    readme = tmp_path / "README.md"
    (tmp_path / "features.txt").write_text("temperature\n")
    blocks = "".join(f"<!-- sampcheck docs: {n} -->\nold\n<!-- /sampcheck docs -->\n" for n in docs.BLOCKS)
    readme.write_text("# title\n" + blocks + "tail\n")
    assert sorted(p.name for p in docs.stale(tmp_path)) == ["README.md", "features.txt"]
    docs.write(tmp_path)
    assert docs.stale(tmp_path) == []
    text = readme.read_text()
    assert text.startswith("# title\n") and text.endswith("tail\n") and "| `top_k` | int | `top_k` |" in text
    assert (tmp_path / "features.txt").read_text().splitlines()[1:] == list(params.FEATURES)
    readme.write_text("no markers\n")
    with pytest.raises(ValueError, match=r"no generated block row-fields"):
        docs.stale(tmp_path)


def test_a_case_with_an_eos_set_must_declare_end_id_set(tmp_path):
    """The loader derives end_id_set from an array end_id (params.field_feature) and the row
    gets the set as a tuple; declaring only end_id is rejected at the field."""
    from harness.corpus.load import CaseError, load_case
    import _doubles
    body = "[[rows]]\nlogits = [0.0, 1.0, 3.0]\nend_id = [2, 1]\n[rows.expect]\ntoken = 2\n"
    p = _doubles.write_case(tmp_path, "finish/x", _doubles.CASE_HEADER, body, features='["end_id"]',
                            check="exact", source=_doubles.ONE_SOURCE)
    with pytest.raises(CaseError) as ei:
        load_case(p, tmp_path)
    assert "needs feature 'end_id_set'" in ei.value.reason
    p = _doubles.write_case(tmp_path, "finish/x", _doubles.CASE_HEADER, body, features='["end_id_set"]',
                            check="exact", source=_doubles.ONE_SOURCE)
    case = load_case(p, tmp_path)
    assert case.features == frozenset({"end_id_set"})
    assert case.batches[0].rows[0].to_row().end_id == (2, 1)
