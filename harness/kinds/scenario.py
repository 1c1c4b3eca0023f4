"""``check = "scenario"``: a whole decode over several steps (cases/README.md, "Scenarios").

Requests arrive, finish and reuse slots; logits come from a scripted model; beam search,
top-p decay and speculative decoding live here. This kind

1. validates the ``[scenario]`` table and builds an
   :class:`~impls.reference.scenario.ScenarioSpec` (:func:`load_scenario`; every problem
   is a :class:`~harness.corpus.load.CaseError` naming the field, e.g.
   ``scenario.requests[2].slot``);
2. reduces a :class:`~impls.reference.scenario.RequestResult` to the expectation keys
   (:func:`observe`) and compares (:func:`mismatches`);
3. judges a case on an implementation (:meth:`ScenarioKind.evaluate`): the reference under
   the default profile against the hand-written expectations and relations, then the
   implementation against the reference under its own profile, ending in the verdict
   ladder (:func:`harness.judge.verdict.verdict`);
4. writes golden records (:meth:`ScenarioKind.golden_record`), which keep the predecessor
   map of every beam step.

An implementation runs scenarios through ``run_scenario(spec, device)``; one without it,
or raising :class:`~impls.reference.scenario.ScenarioUnsupported`, is ``n/a``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import fastjsonschema
import numpy as np
import torch

from impls.base import RowError
from impls.profiles import TRTLLM, Profile, profile_diff
from impls.reference import Reference
from impls.reference.scenario import RequestSpec, ScenarioSpec, ScenarioUnsupported, alone, replicate
from impls.reference.scenario_types import child_id, parent_of
from impls.reference.scripted import ModelError, make_model
from impls.reference.toy_tokenizer import TokenizerError, make_tokenizer

from harness.corpus import truths
from harness.corpus.kinds import RECORD_KEYS, CheckKind
from harness.corpus.limits import MAX_SCENARIO_LOGITS
from harness.corpus.load import ERROR_KINDS, CaseError, schema_error
from harness.corpus.schemacache import compile_validator
from harness.judge.blame import blame, field_entries, suspects
from harness.judge.compare import close, golden_round
from harness.judge.result import Result
from harness.judge.stats import FAMILY_ALPHA, check_draws
from harness.judge.verdict import Evidence, verdict
from impls import params

__all__ = ["ScenarioKind", "ScenarioCase", "load_scenario", "observe", "mismatches", "EXPECT_KEYS"]

_INT = {"type": "integer"}
_NUM = {"type": "number"}
_INTS = {"type": "array", "items": _INT}
_NUMS = {"type": "array", "items": _NUM}
_INTSS = {"type": "array", "items": _INTS}
_REASON = {"enum": ["end_id", "length", "stop_words", "none"]}
#: A scripted model (:data:`impls.params.MODEL`: each kind's fields, typed).
_MODEL = params.MODEL
#: Request-level expectation keys and their types.
_EXPECT_PROPS = {
    "error": {"enum": list(ERROR_KINDS)}, "error_step": _INT, "tokens": _INTS, "finish_reason": _REASON,
    "finish_step": _INT, "scheduled": _INTS, "offsets": _INTS, "top_p": _NUMS, "support": _INTSS,
    "emitted": _INTSS, "drafts": _INTSS, "accepted": _INTS, "rewind": _INTS,
    "beam_tokens": _INTSS, "predecessors": _INTSS, "beams": _INTSS, "cum_logprobs": _NUMS, "scores": _NUMS,
    "beam_finish_reasons": {"type": "array", "items": _REASON}, "probs": _NUMS,
    "text": {"type": "string"}, "stop_reason": {"type": "string"},
}
EXPECT_KEYS = tuple(_EXPECT_PROPS)
_FLOAT_KEYS = {"top_p", "cum_logprobs", "scores", "probs"}
#: A request's fields: the parameter registry's (:func:`impls.params.request_schema`) and ``expect``.
_EXPECT_SCHEMA = {"type": "object", "additionalProperties": False, "properties": _EXPECT_PROPS}
#: The truths of one child of a request with ``n > 1`` (cases/README.md, "Parallel sampling").
_CHILD = {"type": "object", "additionalProperties": False,
          "properties": {"expect": _EXPECT_SCHEMA, "expect_by_profile": truths.by_profile_schema(_EXPECT_SCHEMA)}}
_REQUEST = {"type": "object", "required": ["id", "slot"], "additionalProperties": False,
            "properties": {**params.request_schema(), "expect": _EXPECT_SCHEMA,
                           "expect_by_profile": truths.by_profile_schema(_EXPECT_SCHEMA),
                           "children": {"type": "array", "minItems": 1, "maxItems": params.MAX_N, "items": _CHILD}}}
#: Request keys that are expectations, not inputs.
_TRUTH_FIELDS = ("expect", "expect_by_profile", "children")
#: What a request with ``n > 1`` may expect of itself: the target distribution of a statistical check over
#: its children; everything else is its children's (``children``).
_PARENT_EXPECT = ("probs", "support")
SCENARIO_SCHEMA = {
    "type": "object", "required": ["model", "requests"], "additionalProperties": False,
    "properties": {
        "model": _MODEL, "draft_model": _MODEL,
        "tokenizer": {"type": "object"},  # validated by impls.reference.toy_tokenizer.make_tokenizer
        "defaults": {"type": "object", "additionalProperties": False, "properties": {
            k: v for k, v in params.request_schema().items() if k not in ("id", "slot", "model")}},
        "requests": {"type": "array", "minItems": 1, "items": _REQUEST},
        "max_beam_width": {"type": "integer", "minimum": 1, "maximum": 64},
        "max_steps": {"type": "integer", "minimum": 1, "maximum": 1000},
        "max_seq_len": {"type": "integer", "minimum": 1},
        "schedule": {"type": "array", "items": {"type": "array", "items": {"type": "string"}}},
        "relations": {"type": "array", "minItems": 1, "items": {
            "type": "object", "required": ["kind", "a", "b"], "additionalProperties": False,
            "properties": {"kind": {"enum": ["same_tokens", "different_tokens", "same_result"]},
                           "a": {"type": "string"}, "b": {"type": "string"}}}},
        "statistical": {"type": "object", "required": ["request", "draws"], "additionalProperties": False,
                        "properties": {"request": {"type": "string"},
                                       "draws": {"type": "integer", "minimum": 1000, "maximum": 1_000_000},
                                       "position": {"type": "integer", "minimum": 0}}},
    },
}
_validate = compile_validator(SCENARIO_SCHEMA)


@dataclass
class ScenarioCase:
    """A validated ``[scenario]`` table.

    Attributes
    ----------
    spec : ScenarioSpec
        What implementations decode.
    expect : dict
        Request id -> hand-written expectations under the default profile (cases/README.md).
    expect_by_profile : dict
        Request id -> profile name -> that profile's truth (:mod:`harness.corpus.truths`).
    relations : list of dict
        ``{kind, a, b}`` between requests, checked on every implementation.
    statistical : dict or None
        ``{request, draws, position}`` for a statistical scenario check.
    """

    spec: ScenarioSpec
    expect: dict = field(default_factory=dict)
    relations: list = field(default_factory=list)
    statistical: Optional[dict] = None
    expect_by_profile: dict = field(default_factory=dict)

    def truth(self, rid: str, profile_name: str) -> Optional[dict]:
        """The hand-written truth of request ``rid`` for a profile, or None."""
        return truths.truth_of(self.expect.get(rid, {}), self.expect_by_profile.get(rid, {}), profile_name)


def _model(spec: dict, shown: str, where: str):
    try:
        return make_model(spec)
    except ModelError as e:
        raise CaseError(shown, f"{where}.{e.field}", e.reason) from None
    except TypeError as e:
        raise CaseError(shown, where, f"invalid model definition: {e}") from None


def load_scenario(data: dict, shown: str) -> tuple:
    """Validate the ``[scenario]`` table of a case file.

    Parameters
    ----------
    data : dict
        The parsed case file (``data["scenario"]`` is read).
    shown : str
        The file name used in error messages.

    Returns
    -------
    (ScenarioCase, set of (feature, where))
        The scenario, and the features its fields need (the loader checks
        that the case declares them).

    Raises
    ------
    CaseError
        Schema violation, bad model, duplicate request ids, a schedule or
        relation naming an unknown request, an expectation outside the
        vocabulary, ``d2t`` of the wrong length, literal drafts longer than
        ``draft_len``, a draft request without a way to get drafts, a toy
        tokenizer that is not one (``scenario.tokenizer.vocab[3]``) or whose size is
        not a request model's vocabulary, stop strings without a tokenizer or on a
        beam or draft request, a ``text`` or ``stop_reason`` expectation without a
        tokenizer; for parallel sampling (cases/README.md, "Parallel sampling"):
        ``n > 1`` with beam search, ``children`` without ``n > 1`` or with more
        than ``n`` entries, a request with ``n > 1`` expecting more of itself than
        ``probs`` and ``support``, slots that meet a request's children's, a
        schedule naming a child, a relation naming a request with ``n > 1`` or a
        child it does not have, a statistical check over children whose ``draws``
        is not ``n``.
    """
    sc = data["scenario"]
    try:
        _validate(sc)
    except fastjsonschema.JsonSchemaValueException as e:
        raise schema_error(shown, e, root="scenario") from None
    model = _model(sc["model"], shown, "scenario.model")
    draft = _model(sc["draft_model"], shown, "scenario.draft_model") if "draft_model" in sc else None
    tok = None
    if "tokenizer" in sc:
        try:
            tok = make_tokenizer(sc["tokenizer"], model.vocab)
        except TokenizerError as e:
            raise CaseError(shown, "scenario.tokenizer" + (f".{e.field}" if e.field else ""), e.reason) from None
    defaults = sc.get("defaults", {})
    used, reqs, expect, seen, by_profile = set(), [], {}, {}, {}
    for i, raw in enumerate(sc["requests"]):
        where = f"scenario.requests[{i}]"
        r = {**defaults, **raw}
        rid = r["id"]
        if rid in seen:
            raise CaseError(shown, f"{where}.id", f"{rid!r} is also the id of scenario.requests[{seen[rid]}]")
        seen[rid] = i
        rmodel = _model(r["model"], shown, f"{where}.model") if "model" in r else None
        V = (rmodel or model).vocab
        fields = {}
        for k, v in r.items():
            prm = params.param(k) if k not in _TRUTH_FIELDS else None
            if prm is None or not prm.row_field:
                continue
            try:
                fields[k] = prm.convert(v) if prm.convert is not None else v
            except ValueError as e:
                raise CaseError(shown, f"{where}.{k}", str(e)) from None
            if prm.vocab_check is not None:
                reason = prm.vocab_check(v, V)
                if reason is not None:
                    raise CaseError(shown, f"{where}.{k}", reason)
        fields.pop("slot", None)
        K = r.get("draft_len", 0)
        drafts = r.get("drafts")
        if drafts is not None:
            if not K:
                raise CaseError(shown, f"{where}.drafts", "needs draft_len > 0")
            for j, d in enumerate(drafts):
                if len(d) > K:
                    raise CaseError(shown, f"{where}.drafts[{j}]", f"{len(d)} tokens, draft_len is {K}")
        elif K and draft is None:
            raise CaseError(shown, f"{where}.draft_len", "needs scenario.draft_model or literal drafts")
        if tok is not None and V != tok.size:
            raise CaseError(shown, f"{where}.model", f"vocabulary {V}, the scenario's tokenizer has {tok.size} tokens")
        for key in ("stop", "include_stop_str_in_output"):
            if key not in r:
                continue
            if tok is None:
                raise CaseError(shown, f"{where}.{key}", "needs [scenario.tokenizer] (stop strings are matched on its "
                                "text)")
            if r.get("use_beam_search") or K:
                raise CaseError(shown, f"{where}.{key}", "stop strings are checked on plain requests only (one "
                                "token a step): not with beam search or draft tokens")
        if "d2t" in r and draft is not None and len(r["d2t"]) != draft.vocab:
            raise CaseError(shown, f"{where}.d2t", f"has {len(r['d2t'])} entries, the draft vocab is {draft.vocab}")
        n = r.get("n", 1)
        if n > 1 and fields.get("use_beam_search"):
            raise CaseError(shown, f"{where}.n", f"n = {n} with use_beam_search: a beam request returns its beams "
                            "(beam_width), it has no children")
        if "children" in raw and n == 1:
            raise CaseError(shown, f"{where}.children", "needs n > 1 (a request with n = 1 is its own sequence: "
                            "its truths go in expect)")
        if len(raw.get("children", [])) > n:
            raise CaseError(shown, f"{where}.children", f"has {len(raw['children'])} entries, the request has "
                            f"n = {n} children")
        reqs.append(RequestSpec(id=rid, slot=r["slot"], fields=fields, arrive=r.get("arrive", 0),
                                pause=frozenset(r.get("pause", [])), beam_width=r.get("beam_width", 1),
                                length_penalty=r.get("length_penalty"), early_stopping=r.get("early_stopping"),
                                diversity_rate=r.get("diversity_rate"), draft_len=K, drafts=drafts,
                                d2t=r.get("d2t"), model=rmodel, stop=tuple(r.get("stop", ())),
                                include_stop_str_in_output=bool(r.get("include_stop_str_in_output", False)), n=n))
        for k, v in r.items():
            feat = params.field_feature(k, v) if k not in _TRUTH_FIELDS else None
            if feat is not None:
                used.add((feat, f"{where}.{k}"))
        if n > 1:
            extra = sorted(set(raw.get("expect", {})) - set(_PARENT_EXPECT))
            if extra:
                raise CaseError(shown, f"{where}.expect.{extra[0]}", f"a request with n = {n} has no output of its "
                                f"own: its children's truths go in {where}.children (entry i: child "
                                f"{child_id(rid, 0)[:-1]}i); its expect may hold only {', '.join(_PARENT_EXPECT)} "
                                "(a statistical check over its children)")
            if "expect_by_profile" in raw:
                raise CaseError(shown, f"{where}.expect_by_profile", f"a request with n = {n} has no output of its "
                                f"own: give each child's in {where}.children[i].expect_by_profile")
        truth_of = [(rid, where, raw)] + [(child_id(rid, j), f"{where}.children[{j}]", c)
                                          for j, c in enumerate(raw.get("children", []))]
        for oid, at, holder in truth_of:
            e = holder.get("expect", {})
            try:
                mine = truths.resolve(holder.get("expect_by_profile", {}), e, at)
            except truths.TruthError as err:
                raise CaseError(shown, err.field, err.reason) from None
            for label, t in [("expect", e)] + [(f"expect_by_profile.{p}", t) for p, t in mine.items()]:
                _check_expect(t, V, shown, f"{at}.{label}")
                for key in ("text", "stop_reason"):
                    if key in t and tok is None:
                        raise CaseError(shown, f"{at}.{label}.{key}", "needs [scenario.tokenizer]")
                if "finish_reason" in t:
                    used.add(("finish_reason", f"{at}.{label}.finish_reason"))
            expect[oid] = e
            if mine:
                by_profile[oid] = mine
    _check_slots(reqs, shown)
    observed = {r.id: r for q in reqs for r in q.children()}
    for s, ids in enumerate(sc.get("schedule", [])):
        for rid in ids:
            if rid not in seen:
                raise CaseError(shown, f"scenario.schedule[{s}]", f"names unknown request {rid!r}"
                                + _child_hint(rid, reqs, "a schedule names the request: its children are scheduled "
                                              "together"))
        if len(set(ids)) != len(ids):
            raise CaseError(shown, f"scenario.schedule[{s}]", f"lists a request twice: {ids}")
    for j, rel in enumerate(sc.get("relations", [])):
        for side in ("a", "b"):
            name = rel[side]
            if name in seen and reqs[seen[name]].n > 1:
                q = reqs[seen[name]]
                raise CaseError(shown, f"scenario.relations[{j}].{side}", f"request {name!r} has n = {q.n} "
                                f"children: name one of them, {child_id(name, 0)} ... {child_id(name, q.n - 1)}")
            if name not in observed:
                raise CaseError(shown, f"scenario.relations[{j}].{side}", f"names unknown request {name!r}"
                                + _child_hint(name, reqs, ""))
    stat = sc.get("statistical")
    if stat is not None and stat["request"] not in seen:
        raise CaseError(shown, "scenario.statistical.request", f"names unknown request {stat['request']!r}"
                        + _child_hint(stat["request"], reqs, "a statistical check over children names their "
                                      "request"))
    if stat is not None and reqs[seen[stat["request"]]].n > 1:
        q = reqs[seen[stat["request"]]]
        if stat["draws"] != q.n:
            raise CaseError(shown, "scenario.statistical.draws", f"is {stat['draws']}; the draws of a check over "
                            f"the children of request {q.id!r} are its n = {q.n} children: draws must equal n")
    spec = ScenarioSpec(model=model, requests=reqs, draft_model=draft, max_beam_width=sc.get("max_beam_width", 4),
                        max_steps=sc.get("max_steps", 32), max_seq_len=sc.get("max_seq_len"),
                        schedule=sc.get("schedule"), tokenizer=tok)
    _check_budget(spec, stat, shown)
    return ScenarioCase(spec, expect, sc.get("relations", []), stat, by_profile), used


def _check_slots(reqs: list, shown: str) -> None:
    """The slots of a request with ``n > 1`` (``slot`` to ``slot + n - 1``) are its own.

    Raises
    ------
    CaseError
        At ``scenario.requests[j].slot`` of the later request whose slot range meets
        that of a request with ``n > 1`` (cases/README.md, "Parallel sampling").
    """
    spans = [(q.slot, q.slot + q.n - 1, q) for q in reqs]
    for j, (lo, hi, q) in enumerate(spans):
        for lo2, hi2, other in spans[:j]:
            if (q.n > 1 or other.n > 1) and lo <= hi2 and lo2 <= hi:
                big = q if q.n > 1 else other
                raise CaseError(shown, f"scenario.requests[{j}].slot", f"slots {lo}..{hi} of request {q.id!r} meet "
                                f"slots {lo2}..{hi2} of request {other.id!r}: child i of request {big.id!r} "
                                f"(n = {big.n}) takes slot {big.slot} + i, which no other request may name")


def _child_hint(name: str, reqs: list, why: str) -> str:
    """``" (...)"`` when ``name`` looks like a child id: what names it may take, else ``""``."""
    named = parent_of(name)
    if named is None:
        return ""
    q = next((r for r in reqs if r.id == named[0]), None)
    if q is None:
        return ""
    if q.n == 1:
        return f" (request {q.id!r} has n = 1: it is named {q.id!r})"
    if named[1] >= q.n:
        return f" (request {q.id!r} has n = {q.n}: its children are {child_id(q.id, 0)} ... {child_id(q.id, q.n - 1)})"
    return f" ({why})" if why else ""


def _check_budget(spec: ScenarioSpec, stat: Optional[dict], shown: str) -> None:
    """The model logits a scenario may ask for (:data:`harness.corpus.limits.MAX_SCENARIO_LOGITS`).

    A decode asks for at most, per request, vocab x ``max_steps`` x beams x (1 + drafts)
    rows of logits (beams counted up to ``max_beam_width``: a wider request is rejected);
    a statistical scenario runs ``draws`` copies of its request for one step.

    Raises
    ------
    CaseError
        At ``scenario`` (the decode) or ``scenario.statistical.draws``.
    """
    draft_v = spec.draft_model.vocab if spec.draft_model is not None else 0
    total = 0
    for req in spec.requests:
        v = max((req.model or spec.model).vocab, draft_v)
        total += (v * spec.max_steps * max(1, min(req.beam_width, spec.max_beam_width)) * (1 + (req.draft_len or 0))
                  * req.n)
    if total > MAX_SCENARIO_LOGITS:
        raise CaseError(shown, "scenario", f"may ask its models for {total} logits (vocab x max_steps x beams x "
                        f"(1 + draft_len) x n, summed over requests); a scenario may ask for at most "
                        f"{MAX_SCENARIO_LOGITS} (2**24; cases/README.md, 'Limits')")
    if stat is not None:
        req = next(r for r in spec.requests if r.id == stat["request"])
        n = stat["draws"] * max((req.model or spec.model).vocab, draft_v) * (1 + (req.draft_len or 0))
        if n > MAX_SCENARIO_LOGITS:
            raise CaseError(shown, "scenario.statistical.draws", f"{stat['draws']} draws of a request over vocab "
                            f"{(req.model or spec.model).vocab} ask for {n} logits in one step; at most "
                            f"{MAX_SCENARIO_LOGITS} (2**24; cases/README.md, 'Limits')")


def _check_expect(e: dict, V: int, shown: str, where: str) -> None:
    """Token ids in ``[0, V)`` (``-1`` allowed in ``beam_tokens``) and ``probs`` of length ``V``.

    Raises
    ------
    CaseError
        At ``<where>.<key>``.
    """
    for key in ("tokens", "support", "beams", "emitted", "drafts", "beam_tokens"):
        vals = e.get(key, [])
        flat = [t for v in vals for t in (v if isinstance(v, list) else [v])]
        bad = [t for t in flat if not (0 <= t < V or (key == "beam_tokens" and t == -1))]
        if bad:
            raise CaseError(shown, f"{where}.{key}", f"ids {bad[:5]} outside [0, {V})")
    if "probs" in e and len(e["probs"]) != V:
        raise CaseError(shown, f"{where}.probs", f"has {len(e['probs'])} values, vocab is {V}")


# -- observations and comparison -------------------------------------------------
def observe(rr, keys=EXPECT_KEYS) -> dict:
    """Reduce a :class:`~impls.reference.scenario.RequestResult` to expectation keys.

    Per-step keys list one entry per scheduled step that has the value
    (``offsets`` is flattened over steps; ``top_p``/``support`` skip steps
    without them; ``emitted``/``drafts``/``accepted``/``rewind`` only
    speculative steps; ``beam_tokens``/``predecessors`` only beam steps).

    Returns
    -------
    dict
    """
    steps = rr.steps
    spec = [s for s in steps if s.accepted is not None]
    beam = [s for s in steps if s.predecessors is not None]
    table = {
        "error": lambda: rr.error, "error_step": lambda: rr.error_step,
        "tokens": lambda: None if rr.error else list(rr.tokens),
        "finish_reason": lambda: rr.finish_reason, "finish_step": lambda: rr.finish_step,
        "scheduled": lambda: [s.step for s in steps],
        "offsets": lambda: [o for s in steps for o in s.offsets],
        "top_p": lambda: [s.top_p for s in steps if s.top_p is not None],
        "support": lambda: [s.support for s in steps if s.support is not None],
        "emitted": lambda: [s.tokens for s in spec], "drafts": lambda: [s.drafts for s in spec],
        "accepted": lambda: [s.accepted for s in spec], "rewind": lambda: [s.rewind for s in spec],
        "beam_tokens": lambda: [s.tokens for s in beam], "predecessors": lambda: [s.predecessors for s in beam],
        "beams": lambda: rr.beams, "cum_logprobs": lambda: rr.cum_logprobs, "scores": lambda: rr.scores,
        "beam_finish_reasons": lambda: rr.beam_finish_reasons,
        "probs": lambda: None,
        "text": lambda: rr.text, "stop_reason": lambda: rr.stop_reason,
    }
    out = {k: table[k]() for k in keys}
    if rr.error is not None:
        out["message"] = rr.message
    return out


def mismatches(got: dict, want: dict, atol: float = 1e-6, rtol: float = 1e-6) -> list:
    """Compare an observed request with wanted values (keys present and not None in ``want``).

    An expected or observed error compares the error kind only (and
    ``error_step`` when wanted). Float keys (``top_p``, ``cum_logprobs``,
    ``scores``, ``probs``) compare element-wise within ``atol + rtol * |b|``;
    everything else exactly.

    Returns
    -------
    list of str
        One line per mismatch.
    """
    out = []
    if want.get("error") is not None or got.get("error") is not None:
        if want.get("error") != got.get("error"):
            out.append(f"error: got {got.get('error')!r} ({got.get('message', '')}), want {want.get('error')!r}")
        elif want.get("error_step") is not None and want["error_step"] != got.get("error_step"):
            out.append(f"error_step: got {got.get('error_step')!r}, want {want['error_step']!r}")
        return out
    for k, w in want.items():
        if w is None or k in ("message", "error", "error_step"):
            continue
        g = got.get(k)
        if g is None:
            out.append(f"{k}: not returned, want {w!r}")
        elif k in _FLOAT_KEYS:
            if len(g) != len(w) or not all(close(a, b, atol, rtol) for a, b in zip(g, w)):
                out.append(f"{k}: got {[round(float(v), 7) for v in g]}, want {list(w)}")
        elif g != w:
            out.append(f"{k}: got {g!r}, want {w!r}")
    return out


def _relations(sc: ScenarioCase, res) -> list:
    checks = []
    for rel in sc.relations:
        a, b = res.requests[rel["a"]], res.requests[rel["b"]]
        keys = ["error", "tokens", "finish_reason"] if rel["kind"] == "same_result" else ["error", "tokens"]
        oa, ob = observe(a, keys), observe(b, keys)
        if rel["kind"] == "different_tokens":
            ok = oa["error"] is None and ob["error"] is None and oa["tokens"] != ob["tokens"]
            why = [] if ok else [f"both gave tokens {oa['tokens']!r} (errors {oa['error']!r}, {ob['error']!r})"]
        else:
            why = mismatches(oa, ob)
            ok = not why
        checks.append({"kind": rel["kind"], "a": rel["a"], "b": rel["b"], "a_out": oa, "b_out": ob, "holds": ok,
                       "why": why})
    return checks


def _read_seed(spec: ScenarioSpec, rid: str, profile: Profile) -> Optional[tuple]:
    """The seed a profile draws request ``rid``'s tokens from: ``(seed, stream)``, or None when unseeded.

    A child's is its profile's child seed (:func:`impls.reference.seeds.child_seed`; ``stream``: the
    generator its siblings share); a seed the profile does not read (``seeds_honoured = false``, vLLM's
    ``-1``) is None (:func:`impls.reference.modes.effective_seed`).
    """
    from impls.base import Row
    from impls.reference.modes import effective_seed
    from impls.reference.seeds import child_seed
    req = spec.request(rid)
    seed, stream = req.fields.get("seed"), None
    if seed is None:
        return None
    if req.parent is not None:
        cs = child_seed(seed, req.index, spec.request(req.parent).n, profile)
        if cs.seed is None:
            return None
        seed, stream = cs.seed, cs.stream
    try:
        seed = effective_seed(Row(logits=torch.zeros(1), seed=seed), profile)
    except (TypeError, ValueError):
        return (seed, stream)  # an invalid seed is the request's error, not chance
    return None if seed is None else (seed, stream)


def _by_chance(spec: ScenarioSpec, pred, rel: dict, profile: Profile) -> bool:
    """Whether a relation's outcome is chance under the profile's RNG (not the canonical one).

    The scenario form of :func:`harness.kinds.invariant.by_chance`: true when a side's predicted
    decode drew random numbers and the two sides do not draw from the same seed the profile reads
    (two seeded sides of a ``different_tokens`` relation are always judged: a collision of two
    seeded streams is evidence). Under SGLang's default server (``seeds_honoured = false``) every
    request draws from the process's one stream, so "same seed, same tokens" is not promised.
    """
    sides = (rel["a"], rel["b"])
    if not any(any(st.offsets for st in pred.requests[r].steps) for r in sides):
        return False
    seeds = [_read_seed(spec, r, profile) for r in sides]
    both = all(x is not None for x in seeds)
    if rel["kind"] == "different_tokens":
        return not both
    return not (both and seeds[0] == seeds[1])


#: The case fields a scenario may not use: they live in its ``[scenario]`` table.
_FORBIDDEN = ("rows", "batches", "defaults", "invariants", "draws")


def _runner(impl):
    run = getattr(impl, "run_scenario", None)
    if run is None:
        raise ScenarioUnsupported(f"{impl.name} has no run_scenario: it cannot run multi-step scenarios")
    return run


def _keys(e: dict) -> list:
    return sorted(set(e) - {"probs"} | {"error", "tokens", "finish_reason"})


def _outside_support(spec, req, got, profile) -> list:
    """Tokens of a request drawn under another RNG that its profile's target distribution forbids.

    Each emitted token is checked against the target's filtered distribution
    at its position (:func:`impls.reference.speculative.target_distribution`
    with the step's finalised history for the rewrites and the tokens emitted
    before it for the model), so a stochastic request is compared in support
    even where its tokens cannot be compared one for one. Beam requests and
    failed requests are not checked here (their error is compared).
    """
    from impls.reference.speculative import target_distribution
    if got.error or req.use_beam_search:
        return []
    out, base = [], []
    for step in got.steps:
        for i, t in enumerate(step.tokens):
            try:
                p = target_distribution(spec, req.id, profile, torch.float32,  # the dtype runs use
                                        history=tuple(base + list(step.tokens[:i])), base=tuple(base))
            except (RowError, ModelError):
                return out  # the request's own error is compared instead
            if not 0 <= t < p.shape[-1] or not float(p[t]) > 0:
                out.append(f"token {t} at generated position {len(base) + i} (step {step.step}) is outside the "
                           f"{profile.name} target's support")
        base += list(step.tokens)
    return out


class ScenarioKind(CheckKind):
    """A multi-step decode, judged request by request (and by its relations)."""

    name = "scenario"
    runs_scenarios = True
    # validated with the whole file (so that a TOML float is never taken for an integer:
    # harness.corpus.tomlfile), then by load_scenario
    case_fields = {"scenario": SCENARIO_SCHEMA}
    exclusive_fields = ("scenario",)
    #: What run records keep of a request (schema 1 of the records: its error, finish reason and
    #: supports; the request's tokens are not kept).
    record_keys = RECORD_KEYS

    # -- corpus --------------------------------------------------------------------------
    def load(self, data: dict, shown: str) -> tuple:
        """The ``[scenario]`` table (:func:`load_scenario`); the single-step fields are not allowed."""
        if "scenario" not in data:
            raise CaseError(shown, "scenario", "required when check = 'scenario'")
        for key in _FORBIDDEN:
            if key in data:
                raise CaseError(shown, key, "not allowed when check = 'scenario' (requests, defaults, relations and "
                                "draws live in the [scenario] table)")
        sc, used = load_scenario(data, shown)
        return {"scenario": sc}, used

    def statistical_checks(self, data: dict) -> int:
        """One check for a ``[scenario.statistical]`` table."""
        sc = data.get("scenario")
        return 1 if isinstance(sc, dict) and isinstance(sc.get("statistical"), dict) else 0

    def is_statistical(self, case) -> bool:
        """Whether the case has a ``[scenario.statistical]`` table."""
        return case.scenario is not None and case.scenario.statistical is not None

    def feature_set(self, impl) -> frozenset:
        """What ``run_scenario`` can express (``scenario_features``), when more than single steps."""
        return getattr(impl, "scenario_features", impl.features)

    # -- predictions ---------------------------------------------------------------------
    def predict(self, judge, case, profile: Profile, dtype: torch.dtype = torch.float32, cache: bool = True):
        """The reference's decode under ``profile``: a :class:`~impls.reference.scenario.ScenarioResult`.

        Cached by the judge under ``("scenario", case id, profile, dtype)``; reused for a profile that
        agrees with an earlier one on every field the decode read (:mod:`harness.judge.readset`).
        """
        def run():
            return judge.readsets.get(("scenario", case.id, dtype), profile,
                                      lambda p: Reference(p, dtype=dtype).run_scenario(case.scenario.spec))
        return judge.cached(("scenario", case.id, profile, dtype), run, cache)

    def _explain(self, judge, case, profile: Profile, keys: dict) -> list:
        """The profile fields behind a difference in requests' observations (``keys``: request id -> compared keys)."""
        default = self.predict(judge, case, TRTLLM)

        def changes(probe_profile) -> bool:
            pred = self.predict(judge, case, probe_profile, cache=False)
            return any(mismatches(observe(pred.requests[r], k), observe(default.requests[r], k), case.atol,
                                  case.rtol) for r, k in keys.items())
        found, _ = blame(profile, changes)
        return field_entries(profile, found) if found else field_entries(profile)

    def _explain_relations(self, judge, case, profile: Profile, idx: list) -> list:
        """The profile fields that break relation(s) ``idx`` of a scenario: alone, else in pairs."""
        def breaks(probe_profile) -> bool:
            rel = _relations(case.scenario, self.predict(judge, case, probe_profile, cache=False))
            return any(not rel[i]["holds"] for i in idx)
        found, together = blame(profile, breaks, pairs=True)
        return field_entries(profile, found, together) if found else field_entries(profile)

    def _hand(self, case, pred, profile_name: str = TRTLLM.name) -> list:
        """Where ``pred`` contradicts the truths written for ``profile_name`` (``"<rid>: <mismatches>"``).

        Under the default profile the relations count too (they hold for every profile
        that the case does not say otherwise of, and are judged on implementations anyway).
        """
        sc = case.scenario
        bad = []
        for req in sc.spec.observed():
            e = sc.truth(req.id, profile_name)
            want = {k: v for k, v in (e or {}).items() if k != "probs"}
            if want:
                m = mismatches(observe(pred.requests[req.id], _keys(e)), want, case.atol, case.rtol)
                if m:
                    bad.append(f"{req.id}: {'; '.join(m)}")
        if profile_name == TRTLLM.name:
            for c in _relations(sc, pred):
                if not c["holds"]:
                    bad.append(f"{c['kind']}({c['a']}, {c['b']}): {'; '.join(c['why'])}")
        return bad

    def exercised_stages(self, case, output_stages: dict, error_stages: dict) -> set:
        """``decode``, ``draw``; ``beam`` for a beam request, ``speculative`` for drafts; and the stages
        of the outputs and error kinds its truths check (a statistical scenario: ``filters`` too)."""
        sc = case.scenario
        out = {"decode", "draw", "finish"}  # tokens, error and finish reason are compared for every request
        for req in sc.spec.observed():
            if req.beam_width > 1:
                out.add("beam")
            if req.draft_len or req.drafts:
                out.add("speculative")
            for truth in [sc.expect.get(req.id, {}), *sc.expect_by_profile.get(req.id, {}).values()]:
                out |= {output_stages[k] for k in truth if k not in ("error",)}
                if truth.get("error"):
                    out.add(error_stages[truth["error"]])
        if sc.statistical is not None:
            out.add("filters")
        return out

    def truth_profiles(self, case) -> set:
        """The profiles the case's requests give a truth for (the default's name where any has ``expect``)."""
        sc = case.scenario
        out = {TRTLLM.name} if any(sc.expect.values()) or sc.relations else set()
        for by in sc.expect_by_profile.values():
            out |= set(by)
        return out

    def truth_mismatches(self, judge, case, profile: Profile, truth_name: str) -> list:
        """Where the reference under ``profile`` contradicts the truths written for ``truth_name``
        (a statistical scenario: none are read here)."""
        if case.scenario.statistical is not None:
            return []
        return self._hand(case, self.predict(judge, case, profile, cache=False), truth_name)

    def _keys_of(self, case, rid: str) -> list:
        """The keys compared for request ``rid``: what its truths (every profile's) read."""
        sc = case.scenario
        keys = set(_keys(sc.expect.get(rid, {})))
        for t in sc.expect_by_profile.get(rid, {}).values():
            keys |= set(_keys(t))
        return sorted(keys)

    # -- judging -------------------------------------------------------------------------
    def evaluate(self, judge, case, impl, version: str):
        """Judge a scenario case on ``impl`` (the module docstring).

        Returns
        -------
        harness.judge.result.Result
            ``n/a`` when the implementation cannot run the scenario; otherwise the
            verdict ladder's status. Exceptions propagate to
            :meth:`harness.judge.Judge.evaluate`, which makes them ``error`` results.
        """
        try:
            run = _runner(impl)
        except ScenarioUnsupported as e:
            return Result(case.id, impl.name, "n/a", case.check, details={"message": str(e)})
        if case.scenario.statistical is not None:
            try:
                return self._statistical(judge, case, impl, version, run)
            except ScenarioUnsupported as e:
                return Result(case.id, impl.name, "n/a", case.check, details={"message": str(e)})
        default = self.predict(judge, case, TRTLLM)
        hand = self._hand(case, default)
        try:
            actual = run(case.scenario.spec, judge.device)
            judge.note_stages(actual)
        except ScenarioUnsupported as e:
            return Result(case.id, impl.name, "n/a", case.check, details={"message": str(e)})
        pred = self.predict(judge, case, impl.profile)
        canonical = impl.profile.rng == "canonical"
        rows, own, vs_default, keys = [], [], [], {}
        for req in case.scenario.spec.observed():
            rid = req.id
            k = self._keys_of(case, rid)
            p = pred.requests[rid]
            stochastic = not canonical and any(s.offsets for s in p.steps)
            if stochastic:
                k = ["error"]  # drew random numbers: comparable in support and distribution only
            if actual.keys is not None:
                k = [x for x in k if x in actual.keys]  # what this implementation reports
            keys[rid] = k
            want, got, d = observe(p, k), observe(actual.requests[rid], k), observe(default.requests[rid], k)
            bad = mismatches(got, want, case.atol, case.rtol)
            if stochastic:
                bad += _outside_support(case.scenario.spec, req, actual.requests[rid], impl.profile)
            diff = mismatches(want, d, case.atol, case.rtol)
            truth = case.scenario.truth(rid, impl.profile.name)
            rows.append({"row": rid, "expected": truth if truth is not None else case.scenario.expect.get(rid, {}),
                         "expected_for": impl.profile.name if truth is not None else TRTLLM.name,
                         "predicted": want, "actual": got,
                         "default": d, "mismatches": bad, "profile_differences": diff})
            if bad:
                own.append(rid)
            if diff:
                vs_default.append(rid)
        rel = _relations(case.scenario, actual)
        name = impl.profile.name
        judged = [True] * len(rel)
        if not canonical:
            # as for single-step invariants: a relation whose outcome is chance under this RNG is reported,
            # not judged
            judged = [not _by_chance(case.scenario.spec, pred, c, impl.profile) for c in rel]
            for c, j in zip(rel, judged):
                c["judged"] = j
        ev = Evidence(details={"rows": rows, "profile": name, "invariants": rel})
        if actual.path is not None:
            ev.details["path"] = actual.path
        if hand:
            ev.details["hand_mismatches"] = hand
            ev.broken_case = " | ".join(hand)
        if name != TRTLLM.name and any(case.scenario.truth(r.id, name) for r in case.scenario.spec.observed()):
            mine = self._hand(case, pred, name)
            if mine:
                ev.details["profile_truth_mismatches"] = mine
                ev.profile_truth = " | ".join(mine)
                ev.suspects = lambda: suspects(impl.profile, lambda probe_profile: not self._hand(
                    case, self.predict(judge, case, probe_profile, cache=False), name))
        broken = [f"{c['kind']}({c['a']}, {c['b']})" for c, j in zip(rel, judged) if j and not c["holds"]]
        idx = [i for i, (c, j) in enumerate(zip(rel, judged)) if j and not c["holds"]]
        # a chance relation that breaks where the default profile keeps it (same seed, same stream: certain
        # there) still shows the engine differs from the default: a known difference, not a fault
        default_rel = _relations(case.scenario, default)
        chance_idx = [i for i, (c, j) in enumerate(zip(rel, judged))
                      if not j and not c["holds"] and default_rel[i]["holds"]]
        if not all(judged):
            ev.details["not_judged"] = (f"{judged.count(False)} relation(s) between requests the {name!r} profile "
                                        "makes stochastic, without a seed both read: their outcome under another "
                                        "RNG is chance")
        # The profile itself predicts the broken relations (e.g. a stream keyed by batch
        # position): a design difference, as for single-step invariants.
        predicted_broken = bool(broken) and not own and all(
            not _relations(case.scenario, pred)[i]["holds"] for i in idx)
        if own or (broken and not predicted_broken):
            msg = f"{len(own)} request(s) differ from the {name} prediction: {', '.join(own)}" if own else ""
            if broken:
                msg = "; ".join(x for x in (msg, "relation(s) broken: " + ", ".join(broken)) if x)
            ev.own = msg
        if predicted_broken:
            ev.differs = True
            ev.explain = lambda: self._explain_relations(judge, case, impl.profile, idx)
            ev.diff_message = lambda fields: (f"relation(s) broken as its profile {name!r} predicts: "
                                              + ", ".join(broken) + " — because of: "
                                              + ", ".join(f["field"] for f in fields))
        elif vs_default:
            ev.differs = True
            ev.explain = lambda: self._explain(judge, case, impl.profile, keys)
            ev.diff_message = lambda fields: (f"matches its profile {name!r}, which differs from the default on "
                                              f"{', '.join(vs_default)} because of: "
                                              f"{', '.join(f['field'] for f in fields)}")
        elif chance_idx:
            gone = [f"{rel[i]['kind']}({rel[i]['a']}, {rel[i]['b']})" for i in chance_idx]
            ev.differs = True
            ev.explain = lambda: self._explain_relations(judge, case, impl.profile, chance_idx)
            ev.diff_message = lambda fields: (f"relation(s) broken that the default profile keeps (under the {name!r} "
                                              f"profile's RNG their outcome is not predicted): {', '.join(gone)} — because of: "
                                              + ", ".join(f["field"] for f in fields))
        return verdict(judge, case, impl, version, ev)

    def _statistical(self, judge, case, impl, version, run):
        """A ``[scenario.statistical]`` check: the first token at ``position`` over ``draws`` seeded copies."""
        from impls.reference.speculative import target_distribution
        st = case.scenario.statistical
        rid, pos = st["request"], st.get("position", 0)
        spec = case.scenario.spec
        p64 = target_distribution(spec, rid, impl.profile, torch.float64)
        d64 = target_distribution(spec, rid, TRTLLM, torch.float64)
        hand = []
        e = case.scenario.expect.get(rid, {})
        if "probs" in e and not all(close(a, b, case.atol, case.rtol) for a, b in zip(d64.tolist(), e["probs"])):
            hand.append(f"{rid}: probs: predicted {[round(v, 7) for v in d64.tolist()]}, hand-written {e['probs']}")
        if "support" in e and e["support"] and sorted(e["support"][0]) != torch.nonzero(d64 > 0).flatten().tolist():
            hand.append(f"{rid}: support: predicted {torch.nonzero(d64 > 0).flatten().tolist()}, "
                        f"hand-written {e['support'][0]}")
        seeds = [case.draw_seed + i for i in range(st["draws"])]
        parent = spec.request(rid)
        # copies of the request (copy i: "<rid>#i", seed draw_seed + i), or, for a request with n > 1, the
        # request alone: its n children are the draws (cases/README.md, "Statistical scenarios")
        res = run(replicate(spec, rid, seeds) if parent.n == 1 else alone(spec, rid), judge.device)
        judge.note_stages(res)
        counts = np.zeros(p64.shape[-1], dtype=np.int64)
        errors = []
        for i in range(len(seeds)):
            rr = res.requests[child_id(rid, i)]
            if rr.error or len(rr.tokens) <= pos:
                errors.append(f"{rid}#{i}: {rr.error or 'fewer than ' + str(pos + 1) + ' tokens'} {rr.message}")
                continue
            counts[rr.tokens[pos]] += 1
        # the judge's per-check level counts every statistical check of the declared corpus,
        # statistical scenarios included (statistical_checks)
        alpha = judge.alpha
        # The same test as single-step statistical cases (harness/judge/stats.py check_draws: support,
        # then an exact multinomial test or Williams' G-test); N is the case's fixed ``draws``.
        gof = check_draws(counts, p64.numpy(), alpha, FAMILY_ALPHA)
        diff = not torch.allclose(p64, d64, atol=1e-12, rtol=1e-9)
        name = impl.profile.name
        ev = Evidence(details={
            **({"path": res.path} if res.path is not None else {}),
            "profile": name, "alpha": alpha,
            "test": f"support check, then {gof.test} (N = {len(seeds)} fixed by the case"
                    + (f": the {len(seeds)} children of one request)" if parent.n > 1 else ")"),
            "rows": [{"row": f"{rid} (token {pos}, {len(seeds)} draws)", "verdict": gof.verdict,
                      "actual": {"counts": counts.tolist()}, "predicted": {"probs": p64.tolist()},
                      "mismatches": [] if gof.verdict == "pass" else [gof.reason], "reason": gof.reason,
                      "n": gof.n, "p_value": gof.p_value, "p_adjusted": gof.p_adjusted, "tv": gof.tv,
                      "bins": gof.bins[:40], "outside_support": gof.outside_support}]})
        if hand:
            ev.broken_case = " | ".join(hand)
        if errors:
            ev.own = f"{len(errors)} draw(s) failed: {errors[0]}"
        elif gof.verdict == "fail":
            ev.own = gof.reason
        if gof.verdict == "error":
            ev.undecided = gof.reason
        ev.differs = diff
        ev.explain = lambda: field_entries(impl.profile, profile_diff(TRTLLM, impl.profile))
        ev.diff_message = lambda fields: f"draws fit its profile {name!r}, whose distribution differs from the default"
        ev.pass_message = gof.reason
        return verdict(judge, case, impl, version, ev)

    # -- golden records ------------------------------------------------------------------
    def golden_record(self, judge, case, profile_name) -> dict:
        """Per request: every observation of :func:`observe` that is set, floats rounded to 1e-6.

        ``profile_name``: a registered profile's name, or a :class:`Profile` (a probe; not cached).

        For beam requests this includes ``predecessors``, the predecessor map of every
        step, and ``beam_tokens``. A statistical case records the predicted distribution
        of the observed token instead of draws.
        """
        from impls.profiles import PROFILES
        from impls.reference import REFERENCE_VERSION
        registered = isinstance(profile_name, str)
        profile = PROFILES[profile_name] if registered else profile_name
        profile_name = profile.name
        rec = {"case": case.id, "profile": profile_name, "reference_version": REFERENCE_VERSION}
        st = case.scenario.statistical
        if st is not None:
            from impls.reference.speculative import target_distribution
            p = target_distribution(case.scenario.spec, st["request"], profile, torch.float64)
            rec["scenario"] = {st["request"]: {"probs": golden_round([float(v) for v in p.tolist()])}}
            return rec
        res = self.predict(judge, case, profile, cache=registered)
        out = {}
        for rid, rr in res.requests.items():
            o = {k: v for k, v in observe(rr).items() if v not in (None, [], "") and k != "message"}
            out[rid] = {k: golden_round(v) for k, v in o.items()}
        rec["scenario"] = out
        return rec

    def golden_diff(self, old: dict, new: dict) -> list:
        """Lines naming each request key whose golden value changed."""
        diffs = []
        a, b = old.get("scenario", {}), new.get("scenario", {})
        for rid in sorted(set(a) | set(b)):
            ra, rb = a.get(rid, {}), b.get(rid, {})
            for k in sorted(set(ra) | set(rb)):
                if ra.get(k) != rb.get(k):
                    diffs.append(f"{rid}.{k}: golden {ra.get(k)!r}, now {rb.get(k)!r}")
        return diffs

    # -- the report ----------------------------------------------------------------------
    def report_inputs(self, case) -> list:
        """One entry per request (``where`` = its id); per-profile truths as the loader resolved them."""
        scen = (case.raw or {}).get("scenario")
        if not isinstance(scen, dict):
            return []
        by_profile = case.scenario.expect_by_profile if case.scenario is not None else {}
        out = []
        for req in scen.get("requests", []):
            rid = str(req.get("id", ""))
            out.append({"where": rid, "fields": {k: v for k, v in req.items() if k != "id" and k not in _TRUTH_FIELDS},
                        "expect": dict(req.get("expect") or {}), "expect_by_profile": by_profile.get(rid, {})})
            for j, c in enumerate(req.get("children") or []):
                cid = child_id(rid, j)
                out.append({"where": cid, "fields": {}, "expect": dict((c or {}).get("expect") or {}),
                            "expect_by_profile": by_profile.get(cid, {})})
        return out

    def report_setup(self, case) -> dict:
        """The scenario's shared set-up (model, defaults, limits, relations)."""
        scen = (case.raw or {}).get("scenario")
        return {k: v for k, v in scen.items() if k != "requests"} if isinstance(scen, dict) else {}
