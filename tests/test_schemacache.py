"""The on-disk cache of compiled schema validators (harness.corpus.schemacache)."""

import fastjsonschema
import pytest

from harness.corpus import schemacache

SCHEMA = {"type": "object", "required": ["id"], "additionalProperties": False,
          "properties": {"id": {"type": "string", "pattern": r"^[a-z]+/[a-z0-9-]+$"},
                         "n": {"type": "integer", "minimum": 1},
                         "x": {"anyOf": [{"type": "number"}, {"type": "array", "items": {"type": "number"}}]}}}
GOOD = [{"id": "a/b"}, {"id": "filters/x-1", "n": 3, "x": [1.5, 2]}]
BAD = [{}, {"id": "A"}, {"id": "a/b", "n": 0}, {"id": "a/b", "x": "s"}, {"id": "a/b", "zz": 1}, {"id": "a/b", "n": 2.5}]


def _outcome(validate, data):
    try:
        return ("ok", validate(data))
    except fastjsonschema.JsonSchemaValueException as e:
        return ("error", e.message, e.name, e.rule, e.value)


@pytest.mark.parametrize("data", GOOD + BAD)
def test_cached_validator_behaves_as_fastjsonschema_compile(tmp_path, monkeypatch, data):
    monkeypatch.setenv("SAMPCHECK_CACHE_DIR", str(tmp_path))
    fresh = schemacache.compile_validator(SCHEMA)   # compiled, then written
    assert len(list(tmp_path.glob("validator-*.marshal"))) == 1
    cached = schemacache.compile_validator(SCHEMA)  # read back
    expected = _outcome(fastjsonschema.compile(SCHEMA), data)
    assert _outcome(fresh, data) == expected
    assert _outcome(cached, data) == expected


def test_a_broken_cache_file_is_compiled_again(tmp_path, monkeypatch):
    monkeypatch.setenv("SAMPCHECK_CACHE_DIR", str(tmp_path))
    schemacache.compile_validator(SCHEMA)
    (f,) = tmp_path.glob("validator-*.marshal")
    f.write_bytes(b"not marshal data")
    validate = schemacache.compile_validator(SCHEMA)
    assert validate({"id": "a/b"}) == {"id": "a/b"}
    with pytest.raises(fastjsonschema.JsonSchemaValueException):
        validate({"id": "A"})


def test_other_schemas_have_other_files_and_an_empty_setting_turns_it_off(tmp_path, monkeypatch):
    monkeypatch.setenv("SAMPCHECK_CACHE_DIR", str(tmp_path))
    schemacache.compile_validator(SCHEMA)
    schemacache.compile_validator({**SCHEMA, "required": []})
    assert len(list(tmp_path.glob("validator-*.marshal"))) == 2
    monkeypatch.setenv("SAMPCHECK_CACHE_DIR", "")
    assert schemacache.cache_dir() is None
    assert schemacache.compile_validator(SCHEMA)({"id": "a/b"}) == {"id": "a/b"}
