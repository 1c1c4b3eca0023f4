"""The JSON schemas of run records, one per record schema (:mod:`harness.records.records`), and their check.

``sampcheck diff`` reads every field named here; a record whose rows have another shape
would crash it or be misreported ("changed output" for a token written as a string,
"unchanged" for a row without outputs), so :func:`check_record` refuses it first, naming
the case and the field. What each schema holds:

* **1**: per case ``status``, ``check``, ``message``, ``rows``, ``invariants``, ``fields``.
* **2**: schema 1, plus ``own_code`` (bool) and ``borrowed`` (stage names) on a verdict.

A result row is an exact row (``row``, ``actual``, ``stochastic``) when it has ``actual``,
otherwise a statistical row (``row``, ``verdict``, ``n``, ``p_value``, ``tv``,
``outside_support``, ``counts``). Inside ``actual`` (and an invariant's ``a_out``/``b_out``)
the outputs :data:`harness.corpus.kinds.RECORD_KEYS` names are typed and other keys (a kind's
own, e.g. ``probs_at``) are free. Floats may be the strings ``"inf"``, ``"-inf"``, ``"nan"``
(how records write non-finite values). Row labels are unique within a case. Every committed
record under ``golden/engines/``, and each of the 265 versions of them in the history up
to 2026-12-03 (115 of schema 1, 150 of schema 2), passes.
"""

from __future__ import annotations

import re
from collections import Counter

import fastjsonschema

__all__ = ["STATUSES", "check_record", "entry_schema", "TOP_SCHEMA"]

STATUSES = ("pass", "known-diff", "known-bug", "fail", "n/a", "skip", "error")

_INT = {"type": "integer"}
_STR = {"type": "string"}
_NULL = {"type": "null"}
_FLOAT = {"anyOf": [{"type": "number"}, {"enum": ["inf", "-inf", "nan"]}]}
_FLOAT_OR_NULL = {"anyOf": [{"type": "number"}, {"enum": ["inf", "-inf", "nan"]}, _NULL]}
_INTS = {"type": "array", "items": _INT}
_COUNT = {"type": "integer", "minimum": 0}
#: The outputs a record keeps of a row (harness.corpus.kinds.RECORD_KEYS), by type.
_OUTPUTS = {
    "token": {"type": ["integer", "null"]},
    "error": {"type": ["string", "null"]},
    "mode": {"type": ["string", "null"]},
    "finish_reason": {"type": ["string", "null"]},
    "message": {"type": ["string", "null"]},
    "logprob": _FLOAT_OR_NULL, "processed_logprob": _FLOAT_OR_NULL,
    "rank": {"type": ["integer", "null"]},
    "top_logprobs": {"anyOf": [_NULL, {"type": "array", "items": {
        "type": "array", "minItems": 2, "items": [_INT, _FLOAT], "additionalItems": False}}]},
    # a list of ids; per step, for a scenario request; or the head and size of a long one
    "support": {"anyOf": [_NULL, _INTS, {"type": "array", "items": _INTS},
                          {"type": "object", "required": ["head", "length"], "additionalProperties": False,
                           "properties": {"head": _INTS, "length": _COUNT}}]},
    "probs": {"anyOf": [_NULL, {"type": "array", "items": _FLOAT}]},
    "rewritten_logits": {"anyOf": [_NULL, {"type": "array", "items": _FLOAT}]},
    "tokens": {"anyOf": [_NULL, _INTS]},
}
_ACTUAL = {"type": "object", "properties": _OUTPUTS}
_EXACT_ROW = {"type": "object", "required": ["row", "actual"], "additionalProperties": False,
              "properties": {"row": _STR, "actual": _ACTUAL, "stochastic": {"type": "boolean"}}}
_STAT_ROW = {"type": "object", "required": ["row", "counts"], "additionalProperties": False, "properties": {
    "row": _STR, "verdict": {"type": ["string", "null"]}, "n": {"type": ["integer", "null"], "minimum": 0},
    "p_value": _FLOAT_OR_NULL, "tv": _FLOAT_OR_NULL,
    # draws outside the support: by token (records since 2026-11), or their number
    "outside_support": {"anyOf": [_NULL, _COUNT, {"type": "object", "additionalProperties": _COUNT}]},
    "counts": {"type": "array", "items": {"type": "array", "minItems": 2, "items": [_INTS, _COUNT],
                                          "additionalItems": False}}}}
_INVARIANT = {"type": "object", "required": ["kind", "a", "b", "holds"], "additionalProperties": False,
              "properties": {"kind": _STR, "a": _STR, "b": _STR, "holds": {"type": ["boolean", "null"]},
                             "a_out": {"anyOf": [_NULL, _ACTUAL]}, "b_out": {"anyOf": [_NULL, _ACTUAL]},
                             "stochastic": {"type": "array", "uniqueItems": True, "items": {"enum": ["a", "b"]}}}}


def entry_schema(schema: int) -> dict:
    """The JSON schema of one case's entry in a record of ``schema`` (1 or 2)."""
    props = {"status": {"enum": list(STATUSES)}, "check": _STR, "message": _STR,
             "rows": {"type": "array", "items": {"if": {"required": ["actual"]}, "then": _EXACT_ROW,
                                                 "else": _STAT_ROW}},
             "invariants": {"type": "array", "items": _INVARIANT},
             "fields": {"type": "array", "items": _STR}}
    if schema >= 2:
        props.update(own_code={"type": "boolean"}, borrowed={"type": "array", "items": _STR})
    return {"type": "object", "required": ["status", "check"], "additionalProperties": False, "properties": props}


#: ``engine``, ``environment`` and ``run`` (the same in schemas 1 and 2); other keys are kept, unread.
TOP_SCHEMA = {"type": "object", "properties": {
    "engine": {"type": "object", "required": ["impl"], "properties": {
        "impl": _STR, "version": {"type": ["string", "null"]}, "profile": {"type": ["string", "null"]},
        "device": {"type": ["string", "null"]}, "facts": {"type": ["object", "null"]},
        "skip_reason": {"type": ["string", "null"]}}},
    "environment": {"type": "object", "properties": {
        "packages": {"type": "object", "additionalProperties": {"type": ["string", "null"]}},
        "reference_version": {"type": ["string", "null"]}, "created": {"type": ["string", "null"]},
        "python": {"type": ["string", "null"]}, "platform": {"type": ["string", "null"]},
        "sampcheck": {"type": ["string", "null"]}}},
    "run": {"type": "object", "properties": {
        "cases_selected": {"type": ["integer", "null"]}, "cases_declared": {"type": ["integer", "null"]},
        "alpha_per_check": _FLOAT_OR_NULL, "statistical_checks_in_corpus": {"type": ["integer", "null"]}}}}}

_VALIDATORS: dict = {}


def _validator(key):
    if key not in _VALIDATORS:
        _VALIDATORS[key] = fastjsonschema.compile(TOP_SCHEMA if key == "top" else entry_schema(key))
    return _VALIDATORS[key]


#: What a field of several shapes must be, by its name (the reason of an ``anyOf`` violation).
_SHAPES = {
    "support": "must be null, a list of token ids, a list of such lists (per step), or {head, length}",
    "top_logprobs": "must be null or a list of [token id, logprob]",
    "probs": "must be null or a list of numbers ('inf', '-inf', 'nan' allowed)",
    "rewritten_logits": "must be null or a list of numbers ('inf', '-inf', 'nan' allowed)",
    "tokens": "must be null or a list of token ids",
    "outside_support": "must be null, a count >= 0, or {token: count >= 0}",
    "a_out": "must be null or an object of outputs", "b_out": "must be null or an object of outputs",
}
_FLOATS = "must be a number, 'inf', '-inf', 'nan' or null"


def _where(e: fastjsonschema.JsonSchemaValueException, schema: int = 2) -> tuple:
    """``(field, reason)`` of a violation: ``data.rows[0].actual.token`` -> ``rows[0].actual.token``."""
    name = e.name or "data"
    field_ = name[len("data."):] if name.startswith("data.") else "<entry>"
    reason = e.message[len(name):].strip() if e.message.startswith(name) else e.message
    leaf = re.sub(r"\[\d+\]$", "", field_.rsplit(".", 1)[-1])
    if "cannot be validated by any definition" in reason:
        reason = _SHAPES.get(leaf, _FLOATS if leaf in ("logprob", "processed_logprob", "p_value", "tv",
                                                      "alpha_per_check") else "has the wrong type or shape")
    elif reason.startswith("must not contain ") and reason.endswith(" properties"):
        reason = f"unknown field(s) {reason[len('must not contain '):-len(' properties')]}"
        if schema < 2 and ("'own_code'" in reason or "'borrowed'" in reason):
            reason += f" (own_code and borrowed are fields of record schema 2; this record says schema {schema})"
    elif reason == "must contain ['counts'] properties" and re.fullmatch(r"rows\[\d+\]", field_):
        reason = "has neither 'actual' (an exact row) nor 'counts' (a statistical row)"
    return field_, reason


def check_record(rec: dict) -> list:
    """Problems of a record whose ``schema`` is readable, against that schema.

    Parameters
    ----------
    rec : dict
        A parsed record whose ``format`` and ``schema`` are already known good and whose
        ``engine``, ``environment``, ``run`` and ``cases`` are objects.

    Returns
    -------
    list of str
        ``"<section>.<field>: <reason>"`` for the top sections, ``"case '<id>': <field>:
        <reason>"`` for a case entry (a duplicate row label included); at most one per case
        and one for the top, in case order. Empty when the record is good.
    """
    out = []
    try:
        _validator("top")(rec)
    except fastjsonschema.JsonSchemaValueException as e:
        out.append("%s: %s" % _where(e))
    check = _validator(rec["schema"])
    for cid, entry in rec["cases"].items():
        try:
            check(entry)
        except fastjsonschema.JsonSchemaValueException as e:
            field_, reason = _where(e, rec["schema"])
            out.append(f"case {cid!r}: {field_}: {reason}")
            continue
        seen = Counter(r["row"] for r in entry.get("rows", []))
        twice = sorted(x for x, n in seen.items() if n > 1)
        if twice:
            out.append(f"case {cid!r}: rows: the label(s) {', '.join(map(repr, twice))} appear more than once")
    return out
