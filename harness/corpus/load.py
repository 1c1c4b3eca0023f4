"""Case files: loading, validation and conversion to implementation rows.

A case file (TOML, schema 1, normative description in ``cases/README.md``)
is read within the limits of :mod:`.limits` and parsed with :mod:`tomllib`
(:mod:`.tomlfile`: size, nesting, 64-bit integers, TOML floats never taken for
integers), checked against a JSON schema with
:mod:`fastjsonschema` (the common fields, plus every registered check kind's
fields: :mod:`.kinds`), then checked for the rules a schema cannot state (id
equals path, category equals its first component; :mod:`.ids`), and handed to
its check kind (``check``), which loads its own part
(:meth:`.kinds.CheckKind.load`; the single-step kinds share
:func:`load_batches`). The features the fields need must be declared. Every
problem raises :class:`CaseError` naming the file, the field and the reason;
:func:`load_case` raises nothing else, whatever the file holds.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import math
import os
import zlib
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any, Optional

import fastjsonschema
import numpy as np
import torch

from impls import params
from impls.base import FEATURES, Row

from . import kinds, outputs, truths
from .errors import CaseError
from .ids import case_id, corpus_id
from .limits import MAX_CASE_LOGITS
from .paths import CASES_DIR
from .schemacache import compile_validator
from .tomlfile import plain, read_case_toml

__all__ = ["CaseError", "Case", "Batch", "CaseRow", "load_case", "load_batches", "discover", "select", "CASES_DIR",
           "make_logits", "case_schema", "schema_error", "vocab_of", "check_generator"]

SCHEMA_VERSION = 1
CATEGORIES = ("greedy", "seeds", "penalties", "finish", "beam", "filters", "bans", "logprobs",
              "speculative", "invariants", "bad_input")
#: Every per-row error kind (:data:`impls.params.ERRORS`).
ERROR_KINDS = tuple(params.ERRORS)


_NUM = {"type": "number"}
_INT = {"type": "integer"}
_INTS = {"type": "array", "items": _INT}
_PAIRS = {"type": "array", "items": {"type": "array", "minItems": 2, "items": [_INT, _NUM], "additionalItems": False}}
_EXPECT_OUTPUTS = {**outputs.SCHEMAS, "error": {"enum": list(ERROR_KINDS)}}
_EXPECT = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        **_EXPECT_OUTPUTS,
        # assertions (harness.judge.compare.ASSERTION_KEYS)
        "any_of": {"type": "array", "minItems": 2, "items": {
            "type": "object", "minProperties": 1, "additionalProperties": False, "properties": _EXPECT_OUTPUTS}},
        "finite_logprobs": {"type": "boolean", "const": True},
    },
}
#: A single-step row's fields: the parameter registry's (:func:`impls.params.row_schema`), ``expect``
#: (the default profile's truth) and ``expect_by_profile`` (other profiles' truths: :mod:`.truths`).
ROW_PROPS = {**params.row_schema(), "expect": _EXPECT, "expect_by_profile": truths.by_profile_schema(_EXPECT)}
#: Row keys that are expectations, not inputs.
TRUTH_FIELDS = ("expect", "expect_by_profile")
_ROW = {"type": "object", "additionalProperties": False, "properties": ROW_PROPS}
_DEFAULTS = {"type": "object", "additionalProperties": False,
             "properties": {k: v for k, v in ROW_PROPS.items() if k not in TRUTH_FIELDS}}
_SOURCE = {
    "anyOf": [
        {"type": "object", "required": ["seed", "section"], "additionalProperties": False,
         "properties": {"seed": {"type": "string", "pattern": r"^[0-9]{3}_[0-9a-f]{16}\.txt$"},
                        "section": {"type": "string", "minLength": 1}}},
        {"type": "object", "required": ["repo", "path", "version"], "additionalProperties": False,
         "properties": {"repo": {"type": "string", "pattern": r"^[\w.-]+/[\w.-]+$"},
                        "path": {"type": "string", "minLength": 1},
                        "version": {"type": "string", "minLength": 1},
                        "lines": {"type": "string"}, "symbol": {"type": "string"}}},
        {"type": "object", "required": ["url"], "additionalProperties": False,
         "properties": {"url": {"type": "string", "pattern": r"^https://github\.com/[\w.-]+/[\w.-]+/(issues|pull)/[0-9]+"},
                        "title": {"type": "string"}}},
    ]
}
#: The fields every case takes (cases/README.md, "Top-level fields"); each check kind adds its own
#: (:attr:`.kinds.CheckKind.case_fields`), and ``check`` is one of the registered kinds.
COMMON_FIELDS = {
    "schema": {"type": "integer", "const": SCHEMA_VERSION},
    "id": {"type": "string", "pattern": r"^[a-z_]+/[a-z0-9][a-z0-9_.-]*(/[a-z0-9][a-z0-9_.-]*)*$"},
    "description": {"type": "string", "minLength": 1},
    "category": {"enum": list(CATEGORIES)},
    "features": {"type": "array", "items": {"enum": list(FEATURES)}, "uniqueItems": True},
    "source": {"anyOf": [_SOURCE, {"type": "array", "minItems": 1, "items": _SOURCE}]},
    "atol": {"type": "number", "minimum": 0}, "rtol": {"type": "number", "minimum": 0},
    "draw_seed": _INT,
    "notes": {"type": "string"},
    "tags": {"type": "array", "items": {"type": "string"}},
}
#: Fields every case must give.
REQUIRED = ["schema", "id", "description", "category", "features", "source", "check"]
#: The single-step kinds' fields (exact, statistical, invariant): one batch of ``rows``, or named
#: ``batches``, and ``defaults`` merged into every row.
BATCH_FIELDS = {
    "defaults": _DEFAULTS,
    "rows": {"type": "array", "minItems": 1, "items": _ROW},
    "batches": {"type": "array", "minItems": 1, "items": {
        "type": "object", "required": ["name", "rows"], "additionalProperties": False,
        "properties": {"name": {"type": "string", "pattern": r"^[\w-]+$"},
                       "rows": {"type": "array", "minItems": 1, "items": _ROW}}}},
}
_SCHEMA_CACHE: dict = {}


def case_schema() -> dict:
    """The JSON schema of a case file: :data:`COMMON_FIELDS`, every registered kind's fields, ``check`` a kind name."""
    props = dict(COMMON_FIELDS)
    props["check"] = {"enum": kinds.names()}
    for k in kinds.all_kinds():
        props.update(k.case_fields)
    return {"type": "object", "required": REQUIRED, "additionalProperties": False, "properties": props}


def _validator():
    v = kinds.version()
    if _SCHEMA_CACHE.get("version") != v:
        _SCHEMA_CACHE.update(version=v, validate=compile_validator(case_schema()))
    return _SCHEMA_CACHE["validate"]


_ANYOF_HINTS = {
    "seed": "must be an integer, or a string of at most 64 characters holding a decimal or 0x-prefixed hexadecimal "
            "integer (for seeds >= 2**63)",
    "logits": "must be a non-empty array of numbers, or a generator table {dist = 'normal'|'uniform'|'constant', "
              "vocab = N (1 to 2**20), seed = S (optional, >= 0), sigma/mean/low/high/value, set = [[id, value], "
              "...]} with no other keys",
    "end_id": "must be an integer, or a non-empty array of integers (an EOS set)",
    "early_stopping": "must be true, false or the string 'never'",
}
#: The reason for an ``expect_by_profile`` entry that is neither an expectation table nor ``"expect"``.
_BY_PROFILE_HINT = ("must be a table of the keys 'expect' takes (cases/README.md, 'Truths for other profiles'), or "
                    "the string 'expect'")


def schema_error(shown: str, e: fastjsonschema.JsonSchemaValueException, root: str = "<top>") -> CaseError:
    """A schema violation as a :class:`CaseError` at the violating field, with a reason a person can act on.

    Parameters
    ----------
    shown : str
        The file name.
    e : fastjsonschema.JsonSchemaValueException
        ``e.name`` is ``data`` then the path (``data.rows[0].top_p``).
    root : str
        What ``data`` itself is called (``<top>`` for the whole file).

    Returns
    -------
    CaseError
        Field: the dotted path (``rows[0].top_p``; under ``root`` when it is not ``<top>``).
        Reason: fastjsonschema's, with the hints of a field that takes several shapes
        (``seed``, ``logits``, ``end_id``, ``early_stopping``, an ``expect_by_profile``
        entry), unknown fields named, and a refused TOML float shown.
    """
    name = e.name or "data"
    field_ = root if name == "data" else (name.replace("data.", "", 1) if root == "<top>"
                                          else root + name[len("data"):])
    reason = e.message.replace(e.name or "data", "value")
    if reason.startswith("value must be same as const definition: "):
        reason = "must be " + reason.split(": ", 1)[1]
    if " must not contain " in reason and reason.endswith(" properties"):
        extra = reason.split(" must not contain ", 1)[1][: -len(" properties")]
        reason = f"unknown field(s) {extra}; see cases/README.md for the fields this table takes"
    if reason.startswith("value "):
        reason = reason[len("value "):]
    if e.rule == "type" and reason.startswith("must be integer") and isinstance(e.value, (float, Decimal)):
        reason += f", not the TOML float {float(e.value)!r}"  # 0.7, nan, inf, or 2.0 (TOML tells them apart)
    leaf = field_.rsplit(".", 1)[-1]
    parent = field_.rsplit(".", 2)[-2] if field_.count(".") >= 1 else ""
    if (("cannot be validated by any definition" in reason or (leaf == "logits" and e.rule == "type"))
            and leaf in _ANYOF_HINTS):
        reason = _ANYOF_HINTS[leaf]
    elif "cannot be validated by any definition" in reason and parent == "expect_by_profile":
        reason = _BY_PROFILE_HINT
    return CaseError(shown, field_, reason)

#: Output key -> the feature a case checking it must declare (:data:`harness.corpus.outputs.FEATURES`).
EXPECT_FEATURES = outputs.FEATURES
_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def make_logits(spec) -> torch.Tensor:
    """Build a row's logits from a literal list or a generator table.

    Parameters
    ----------
    spec : list of float or dict
        A literal list, or ``{dist, vocab, seed, ...}`` (cases/README.md).

    Returns
    -------
    torch.Tensor
        ``(V,)`` float32.
    """
    if isinstance(spec, list):
        return torch.tensor([float(v) for v in spec], dtype=torch.float32)
    rng = np.random.default_rng(spec.get("seed", 0))
    V = spec["vocab"]
    if spec["dist"] == "normal":
        x = rng.standard_normal(V) * spec.get("sigma", 1.0) + spec.get("mean", 0.0)
    elif spec["dist"] == "uniform":
        x = rng.uniform(spec.get("low", 0.0), spec.get("high", 1.0), V)
    else:
        x = np.full(V, float(spec.get("value", 0.0)))
    for tok, val in spec.get("set", []):
        x[int(tok)] = float(val)
    return torch.from_numpy(x.astype(np.float32))


@dataclass
class CaseRow:
    """One row of a case: the raw table (inputs) and its expectations."""

    fields: dict
    expect: dict
    index: int
    expect_by_profile: dict = field(default_factory=dict)
    _logits: Optional[torch.Tensor] = field(default=None, init=False, repr=False, compare=False)

    def truth(self, profile_name: str) -> Optional[dict]:
        """The hand-written truth for a profile (:func:`harness.corpus.truths.truth_of`), or None."""
        return truths.truth_of(self.expect, self.expect_by_profile, profile_name)

    def to_row(self) -> Row:
        """Build the implementation-facing :class:`~impls.base.Row` (values converted as each
        :class:`impls.params.Param` says; the slot defaults to the row's index).

        The logits are generated once per row and copied for each call (an implementation may
        write into its row's logits)."""
        f = dict(self.fields)
        spec, dtype = f.pop("logits"), f.pop("logits_dtype", "float32")
        if self._logits is None:
            self._logits = make_logits(spec).to(_DTYPES[dtype])
        logits = self._logits.clone()
        for name, value in f.items():
            conv = params.param(name).convert
            if conv is not None:
                f[name] = conv(value)
        f.setdefault("slot", self.index)
        return Row(logits=logits, **f)


@dataclass
class Batch:
    """A named batch of rows, run on a fresh session."""

    name: str
    rows: list


@dataclass
class Case:
    """A validated case.

    Attributes
    ----------
    id, description, category, check : str
    kind : harness.corpus.kinds.CheckKind
        The kind of its check (what judges, records and reports it).
    features : frozenset of str
    sources : list of dict
    batches : list of Batch
        The single-step kinds' batches (a case with top-level ``rows`` has one batch
        named ``"main"``); empty for a scenario.
    invariants : list of dict
    draws : int or None
    draw_seed : int
    atol, rtol : float
    path : Path
    raw : dict
        The parsed TOML, for the report.
    scenario : harness.kinds.scenario.ScenarioCase or None
        The decode of a ``check = "scenario"`` case.
    payload : dict
        Whatever else a kind's :meth:`~.kinds.CheckKind.load` returned.
    """

    id: str
    description: str
    category: str
    check: str
    features: frozenset
    sources: list
    batches: list = field(default_factory=list)
    invariants: list = field(default_factory=list)
    draws: Optional[int] = None
    draw_seed: int = 0
    atol: float = 1e-6
    rtol: float = 1e-6
    notes: str = ""
    path: Optional[Path] = None
    raw: dict = field(default_factory=dict)
    scenario: Optional[Any] = None
    kind: Any = field(default=None, repr=False, compare=False)
    payload: dict = field(default_factory=dict)

    def batch(self, name: str) -> Batch:
        """Return the batch called ``name`` (KeyError if absent)."""
        for b in self.batches:
            if b.name == name:
                return b
        raise KeyError(name)


def vocab_of(spec) -> int:
    """The vocabulary of a row's ``logits``: a literal list's length, or a generator's ``vocab``."""
    return len(spec) if isinstance(spec, list) else int(spec["vocab"])


def _find_todo(data) -> list:
    """Where string values start with ``TODO``, in document order (``rows[0].logits``), without recursion."""
    todo, stack = [], [(data, "")]
    while stack:
        value, at = stack.pop()
        if isinstance(value, str) and value.lstrip().startswith("TODO"):
            todo.append(at or "<top>")
        elif isinstance(value, dict):
            stack.extend(reversed([(v, f"{at}.{k}" if at else str(k)) for k, v in value.items()]))
        elif isinstance(value, list):
            stack.extend(reversed([(v, f"{at}[{i}]") for i, v in enumerate(value)]))
    return todo


def load_case(path: Path, root: Path = CASES_DIR) -> Case:
    """Load and validate one case file.

    Parameters
    ----------
    path : Path
        A ``.toml`` file: under ``root`` (its id is its path there, which its ``id`` field
        must repeat), or anywhere else (an external case: its id is
        :func:`harness.corpus.ids.external_id`, whatever its ``id`` field says).
    root : Path
        The corpus root (``cases/``).

    Returns
    -------
    Case
        ``id`` as above; ``draw_seed`` defaults to the CRC-32 of the file's own ``id``
        field, so a case copied out of the corpus draws as it did there.

    Raises
    ------
    CaseError
        The only exception, whatever the file holds, naming file, field and reason: a file
        that cannot be read or is over a limit of :mod:`harness.corpus.limits`
        (:func:`harness.corpus.tomlfile.read_case_toml`), a TOML syntax error, values
        still starting with ``TODO`` (field ``<unfinished>``; the reason lists every one,
        in document order, as ``description, source[0], rows[0].logits``: the placeholders
        of :func:`harness.corpus.authoring.template`), a schema violation (a TOML float
        where an integer is wanted included), or a rule of ``cases/README.md`` broken. A
        failure of the loader itself (a bug) is field ``<load>``, never an abort.
    """
    path = Path(path)
    shown = str(path)
    try:
        return _load(path, root, shown)
    except CaseError:
        raise
    except RecursionError:
        raise CaseError(shown, "<load>", "nested too deeply for the loader (a bug: the limits of cases/README.md "
                                         "should have refused it; please report it)") from None
    except Exception as e:  # a kind's loader (maybe a plug-in's) failed: this file's error, never the run's
        raise CaseError(shown, "<load>", f"the loader failed ({type(e).__name__}: {e}); this is a bug of the "
                                         "check kind's loader, please report it") from None


def _load(path: Path, root: Path, shown: str) -> Case:
    data = read_case_toml(path, shown)
    # the values 'sampcheck case new' leaves to the author start with "TODO": name every one left at once
    todo = _find_todo(data)
    if todo:
        raise CaseError(shown, "<unfinished>", f"{len(todo)} value(s) still start with 'TODO' (the template's "
                        f"placeholders): {', '.join(todo)}; replace each (cases/README.md, 'Turn a bug report "
                        "into a case in five minutes')")
    missing = [k for k in REQUIRED if k not in data]
    if missing:
        raise CaseError(shown, "<top>", f"missing required field(s): {', '.join(missing)} (cases/README.md, "
                                        "'Top-level fields'; 'sampcheck case new CATEGORY NAME' writes a template)")
    try:
        _validator()(data)
    except fastjsonschema.JsonSchemaValueException as e:
        if (e.name or "").startswith("data.source"):
            raise CaseError(shown, "source", "each source must be {seed = '<NNN_hex16>.txt', section = '...'}, "
                            "{repo = 'owner/name', path = '...', version = '...'} or "
                            "{url = 'https://github.com/<owner>/<repo>/issues/<N>' (or /pull/<N>)}") from None
        raise schema_error(shown, e) from None
    plain(data)  # integral TOML floats were Decimals for the schema (harness.corpus.tomlfile): floats again
    rel = corpus_id(path, root)
    if rel is not None and data["id"] != rel:
        hint = " (the extension must be '.toml', in lower case)" if rel.lower().endswith(".toml") else ""
        raise CaseError(shown, "id", f"is {data['id']!r} but the file's path says {rel!r}{hint}")
    if data["category"] != data["id"].split("/")[0]:
        raise CaseError(shown, "category", f"is {data['category']!r} but the id starts with {data['id'].split('/')[0]!r}")
    kind = kinds.get(data["check"])
    for other in kinds.all_kinds():
        for f in other.exclusive_fields:
            if other is not kind and f in data:
                raise CaseError(shown, f, f"only allowed when check = {other.name!r} (check is {kind.name!r})")
    attrs, used = kind.load(data, shown)
    declared = set(data["features"])
    for feat, where in sorted(used):
        if feat not in declared:
            raise CaseError(shown, "features", f"{where} needs feature {feat!r}, which is not declared")
    known = {f.name for f in dataclasses.fields(Case)}
    payload = {k: v for k, v in attrs.items() if k not in known}
    src = data["source"]
    return Case(
        id=rel if rel is not None else case_id(path, root), description=data["description"],
        category=data["category"], check=kind.name,
        features=frozenset(declared), sources=src if isinstance(src, list) else [src],
        draw_seed=data.get("draw_seed", zlib.crc32(data["id"].encode())),
        atol=float(data.get("atol", 1e-6)), rtol=float(data.get("rtol", 1e-6)), notes=data.get("notes", ""),
        path=path, raw=data, kind=kind, payload=payload, **{k: v for k, v in attrs.items() if k in known},
    )


def load_batches(data: dict, shown: str) -> tuple:
    """The ``rows``/``batches``/``defaults`` of a single-step case (the exact, statistical and invariant kinds).

    Returns
    -------
    (list of Batch, set of (feature, where))

    Raises
    ------
    CaseError
        Neither or both of ``rows`` and ``batches``, duplicate batch names, a row without
        logits, an expectation or generator id outside the vocabulary, a uniform
        generator whose ``low``/``high`` NumPy cannot draw from (:func:`check_generator`),
        more logits in all than :data:`~.limits.MAX_CASE_LOGITS`, an expected vector of
        the wrong length, a field value that does not convert (a seed that is not an
        integer).
    """
    if ("rows" in data) == ("batches" in data):
        raise CaseError(shown, "rows", "give exactly one of 'rows' and 'batches'")
    defaults = data.get("defaults", {})
    raw_batches = [{"name": "main", "rows": data["rows"]}] if "rows" in data else data["batches"]
    names = [b["name"] for b in raw_batches]
    if len(set(names)) != len(names):
        raise CaseError(shown, "batches", f"duplicate batch names {names}")
    used = set()
    batches = []
    total = 0
    for b_i, b in enumerate(raw_batches):
        rows = []
        for r_i, r in enumerate(b["rows"]):
            where = f"rows[{r_i}]" if "rows" in data else f"batches[{b_i}].rows[{r_i}]"
            merged = {**defaults, **{k: v for k, v in r.items() if k not in TRUTH_FIELDS}}
            if "logits" not in merged:
                raise CaseError(shown, f"{where}.logits", "missing (and no defaults.logits)")
            expect = r.get("expect", {})
            V = vocab_of(merged["logits"])
            total += V
            if total > MAX_CASE_LOGITS:
                raise CaseError(shown, f"{where}.logits", f"the rows up to this one hold {total} logits; a case holds "
                                f"at most {MAX_CASE_LOGITS} (2**22) in all (cases/README.md, 'Limits')")
            if isinstance(merged["logits"], dict):
                check_generator(merged["logits"], shown, f"{where}.logits")
            try:
                by_profile = truths.resolve(r.get("expect_by_profile", {}), expect, where)
            except truths.TruthError as e:
                raise CaseError(shown, e.field, e.reason) from None
            _check_expect(expect, V, shown, f"{where}.expect")
            for name, truth in by_profile.items():
                _check_expect(truth, V, shown, f"{where}.expect_by_profile.{name}")
            for k, v in merged.items():
                prm = params.param(k)
                if prm.convert is not None:
                    try:
                        prm.convert(v)
                    except ValueError as e:
                        raise CaseError(shown, f"{where}.{k}", str(e)) from None
                if prm.vocab_check is not None:
                    reason = prm.vocab_check(v, V)
                    if reason is not None:
                        raise CaseError(shown, f"{where}.{k}", reason)
                feat = params.field_feature(k, v)
                if feat is not None:
                    used.add((feat, f"{where}.{k}"))
            for label, truth in [("expect", expect)] + [(f"expect_by_profile.{n}", t) for n, t in by_profile.items()]:
                for k in truths.output_keys(truth):
                    if k in EXPECT_FEATURES:
                        used.add((EXPECT_FEATURES[k], f"{where}.{label}.{k}"))
            rows.append(CaseRow(fields=merged, expect=expect, index=r_i, expect_by_profile=by_profile))
        batches.append(Batch(b["name"], rows))
    return batches, used


def check_generator(spec: dict, shown: str, where: str) -> None:
    """What the schema of a generator table cannot say: ``set`` ids in ``[0, vocab)``, and a
    uniform draw NumPy can make (``low``, ``high`` and ``high - low`` finite, ``low <= high``).

    Raises
    ------
    CaseError
        At ``<where>.set[j][0]``, ``<where>.low`` or ``<where>.high``.
    """
    V = spec["vocab"]
    for j, (tok, _) in enumerate(spec.get("set", [])):
        if not 0 <= tok < V:
            raise CaseError(shown, f"{where}.set[{j}][0]", f"token id {tok} outside [0, {V})")
    if spec["dist"] == "uniform":
        low, high = float(spec.get("low", 0.0)), float(spec.get("high", 1.0))
        for name, v in (("low", low), ("high", high)):
            if not math.isfinite(v):
                raise CaseError(shown, f"{where}.{name}", f"{v} is not a finite number (a uniform draw needs finite "
                                                          "bounds)")
        if low > high:
            raise CaseError(shown, f"{where}.high", f"{high} is below low = {low}")
        if not math.isfinite(high - low):
            raise CaseError(shown, f"{where}.high", f"high - low = {high} - {low} overflows a float64")


def _check_expect(expect: dict, V: int, shown: str, where: str) -> None:
    """Token ids in ``[0, V)`` and vectors of length ``V``, in an expectation and its ``any_of`` alternatives.

    Raises
    ------
    CaseError
        At ``<where>.<key>`` (``<where>.any_of[i].<key>`` in an alternative).
    """
    tables = [(where, expect)] + [(f"{where}.any_of[{i}]", alt) for i, alt in enumerate(expect.get("any_of") or [])]
    for at, e in tables:
        if "token" in e and not 0 <= e["token"] < V:
            raise CaseError(shown, f"{at}.token", f"{e['token']} outside [0, {V})")
        if "support" in e and any(not 0 <= t < V for t in e["support"]):
            raise CaseError(shown, f"{at}.support", f"ids outside [0, {V})")
        for key in (o.name for o in outputs.OUTPUTS if o.vocab):
            if key in e and len(e[key]) != V:
                raise CaseError(shown, f"{at}.{key}", f"has {len(e[key])} values, vocab is {V}")


def discover(root: Path = CASES_DIR) -> list:
    """All case files under ``root`` (sorted), excluding ``findings.toml``.

    Any entry but a directory whose name ends in ``.toml`` in any letter case
    counts, and so does one lying directly in ``root``: a misplaced file, a
    dangling or looping symbolic link, a FIFO is then reported by
    :func:`load_case` (its id or category cannot match; it cannot be read)
    instead of being silently ignored. Symbolic links to folders are not
    followed.
    """
    root = Path(root)
    return sorted(p for p in root.rglob("*") if p.suffix.lower() == ".toml" and not p.is_dir()
                  and not (p.name == "findings.toml" and p.parent == root))


def _tags(path: Path) -> list:
    """The ``tags`` of a case file ([] when it cannot be read within the limits, does not parse or has none:
    :func:`load_case` reports such a file when it is run)."""
    try:
        tags = read_case_toml(Path(path)).get("tags", [])
    except CaseError:
        return []
    return tags if isinstance(tags, list) else []


def _near_ids(pattern: str, ids: list) -> list:
    """Up to three case ids close to a ``pattern`` that matched none (a typo, letter case ignored), best first;
    categories too."""
    import difflib
    names = sorted(ids) + sorted({i.split("/")[0] for i in ids if "/" in i})
    by_lower = {}
    for n in names:
        by_lower.setdefault(n.lower(), n)
    return [by_lower[n] for n in difflib.get_close_matches(pattern.rstrip("/").lower(), list(by_lower), n=3,
                                                           cutoff=0.75)]


def select(paths: list, patterns: Optional[list], root: Path = CASES_DIR, label: str = "--cases") -> list:
    """Filter case files by ``patterns``: ids, id globs, file/directory paths, or ``tag:NAME``.

    ``tag:smoke`` selects the files whose ``tags`` list holds ``smoke`` (the smoke corpus
    of ``sampcheck check-impl``).

    Returns
    -------
    list of Path
        Files matching any pattern (all of ``paths`` when ``patterns`` is empty), each file
        once (by its id: two patterns naming one file, even by different paths, give it once). A file
        outside ``root`` named by its path is an external case (:mod:`harness.corpus.ids`).

    label : str
        How the caller's user gave the patterns, for the error message (``--cases``).

    Raises
    ------
    ValueError
        If a pattern matches nothing (close ids named).
    """
    if not patterns:
        return paths
    def place(q) -> Path:  # where an entry lies (its folder resolved, not the entry: a link is where it is)
        return Path(os.path.realpath(Path(q).parent)) / Path(q).name

    where = {q: place(q) for q in paths}
    chosen, seen = [], set()
    for pat in patterns:
        p = Path(pat)
        hits = []
        if pat.startswith("tag:"):
            hits = [q for q in paths if pat[4:] in _tags(q)]
        elif p.exists():
            if p.is_dir():
                d = Path(os.path.realpath(p))
                hits = [q for q in paths if d in where[q].parents]
            elif p.suffix.lower() == ".toml" or p.is_file():
                hits = [q for q in paths if where[q] == place(p)]
                if not hits and p.is_file():
                    hits = [Path(os.path.realpath(p))]  # outside the corpus: an external case
        else:
            ids = {corpus_id(q, root) or q.stem: q for q in paths}
            hits = [q for i, q in ids.items() if fnmatch.fnmatchcase(i, pat) or fnmatch.fnmatchcase(i, pat.rstrip("/") + "/*")]
        if not hits and pat.startswith("tag:"):
            import difflib
            known = sorted({t for q in paths for t in _tags(q) if isinstance(t, str)})
            near = difflib.get_close_matches(pat[4:], known, n=3, cutoff=0.6)
            hint = f"did you mean {', '.join(repr('tag:' + t) for t in near)}? " if near else ""
            raise ValueError(f"{label} {pat!r}: no case has that tag ({hint}tags in the corpus: "
                             f"{', '.join(known) or 'none'})")
        if not hits and p.suffix.lower() == ".toml" and not p.exists():
            raise ValueError(f"{label} {pat!r}: no such file")
        if not hits:
            near = _near_ids(pat, [corpus_id(q, root) or q.stem for q in paths])
            hint = f"did you mean {', '.join(repr(n) for n in near)}? " if near else ""
            tags = "; 'tag:NAME' selects by tag" if label == "--cases" else ""
            raise ValueError(f"{label} {pat!r} matches no case ({hint}ids look like 'filters/top-p-dyadic-boundary'"
                             f"{tags})")
        for h in hits:
            key = case_id(h, root)  # one file given twice, by two paths, is one case
            if key not in seen:
                seen.add(key)
                chosen.append(h)
    return chosen
