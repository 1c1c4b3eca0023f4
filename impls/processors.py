"""Custom logits processors a case can name: the registry of declarative kinds (SEMANTICS §1.4b).

Every engine but llama.cpp's C chain takes user code that rewrites a request's logits: vLLM's
``LogitsProcessor`` classes (``LLM(logits_processors=[...])``, configured per request through
``SamplingParams.extra_args``), transformers' ``generate(logits_processor=...)``, SGLang's
``custom_logit_processor``, TensorRT-LLM's ``SamplingParams.logits_processor``. A case cannot
carry code, so it names processors from this registry, with their arguments::

    logits_processors = [{kind = "step_bias", token = 3, per_step = 0.5}, {kind = "margin", margin = 1.0}]

The list is applied in its order. The reference (:mod:`impls.reference`) and every adapter apply
a kind through :meth:`Processor.apply`, so the rule of a kind lives here alone; what a case
checks is what the engine decides: *where* its processors run against the built-in rewrites and
filters (the profile fields ``rewrite_order`` and ``filter_order``, entry ``"custom"``), on which
rows, and whether each request's state follows it when the engine reorders its batch.

**State.** A stateful kind reads one number of per-request state, ``n``: the steps the request
has been processed before this one, i.e. the tokens it has generated before the token being
sampled (:func:`steps`; a request that joins with tokens already generated has been processed
for them). It belongs to the request, never to a batch position: an engine keeps it per request
(vLLM: per batch row, moved with the row by ``BatchUpdate``; TensorRT-LLM: per request id;
transformers: rows are never reordered inside ``generate()``); the reference reads it from the
row's own history.

**Argmax invariance.** A kind that only bans tokens below the best one (``margin``) never changes
the argmax: vLLM runs such processors (``is_argmax_invariant() == True``) after the temperature
and only for sampling rows. Kinds that add to logits or force tokens are not argmax-invariant.

This module imports nothing of the project (:mod:`impls.params` reads its schema and checks).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Optional

__all__ = ["Kind", "Processor", "KINDS", "SCHEMA", "parse", "vocab_check", "steps", "apply_all", "filter_keep",
           "to_dicts", "from_dicts", "kind_table"]


@dataclass(frozen=True)
class Kind:
    """One processor kind.

    Attributes
    ----------
    name : str
        The ``kind`` a case writes.
    doc : str
        Its rule in one or two sentences.
    fields : dict
        Argument name -> ``(JSON schema, doc)``.
    required : tuple of str
        Arguments a case must give.
    argmax_invariant : bool
        Whether it never changes the argmax (it only bans tokens below the best one).
    stateful : bool
        Whether it reads the request's steps ``n`` (:func:`steps`).
    rule : callable
        ``rule(x, args, n) -> y``: ``x`` a ``(V,)`` float tensor (not modified), ``args`` the
        argument dict, ``n`` the request's steps; ``y`` in ``x``'s dtype.
    ids : callable
        ``ids(args) -> list of int``: the token ids it names (checked against the vocabulary).
    check : callable
        ``check(args) -> str or None``: a reason its values are refused (what the schema cannot say).
    """

    name: str
    doc: str
    fields: dict
    required: tuple
    argmax_invariant: bool
    stateful: bool
    rule: Callable
    ids: Callable
    check: Callable


def _bias(x, args, n):
    y = x.clone()
    for t, v in args["bias"]:
        y[int(t)] += float(v)   # a token listed twice gets both values
    return y


def _step_bias(x, args, n):
    y = x.clone()
    y[int(args["token"])] += float(args["per_step"]) * n
    return y


def _cycle(x, args, n):
    toks = args["tokens"]
    keep = int(toks[n % len(toks)])
    y = x.clone().fill_(float("-inf"))
    y[keep] = x[keep]
    return y


def _margin(x, args, n):
    top = x.max()
    return x.masked_fill(x < top - float(args["margin"]), float("-inf"))


def _finite(name: str, v) -> Optional[str]:
    return None if math.isfinite(float(v)) else f"{name}: {v} is not a finite number"


def _bias_check(args) -> Optional[str]:
    for j, (_, v) in enumerate(args["bias"]):
        if math.isnan(float(v)) or float(v) == math.inf:
            return f"bias[{j}]: {v} (NaN and +inf are refused; -inf bans the token)"
    return None


_INT = {"type": "integer"}
_NUM = {"type": "number"}
_PAIRS = {"type": "array", "minItems": 1,
          "items": {"type": "array", "minItems": 2, "items": [_INT, _NUM], "additionalItems": False}}

#: The kinds, by name.
KINDS = {k.name: k for k in (
    Kind("bias", "adds each value to its token's logit (a stateless additive bias; a token listed twice gets "
                 "both values; -inf bans it)",
         {"bias": (_PAIRS, "array of `[id, value]` pairs")}, ("bias",), argmax_invariant=False, stateful=False,
         rule=_bias, ids=lambda a: [int(t) for t, _ in a["bias"]], check=_bias_check),
    Kind("step_bias", "adds per_step * n to the logit of token, n the request's steps so far (a bias that grows "
                      "with each token the request generated)",
         {"token": (_INT, "int"), "per_step": (_NUM, "float")}, ("token", "per_step"), argmax_invariant=False,
         stateful=True, rule=_step_bias, ids=lambda a: [int(a["token"])],
         check=lambda a: _finite("per_step", a["per_step"])),
    Kind("cycle", "bans every token but tokens[n % len(tokens)], n the request's steps so far (forces a cycle of "
                  "tokens by the request's own step count)",
         {"tokens": ({"type": "array", "minItems": 1, "items": _INT}, "array of int")}, ("tokens",),
         argmax_invariant=False, stateful=True, rule=_cycle, ids=lambda a: [int(t) for t in a["tokens"]],
         check=lambda a: None),
    Kind("margin", "bans every token whose logit is below the row's largest minus margin (argmax-invariant: "
                   "the best token always stays)",
         {"margin": ({"type": "number", "minimum": 0}, "float >= 0")}, ("margin",), argmax_invariant=True,
         stateful=False, rule=_margin, ids=lambda a: [], check=lambda a: _finite("margin", a["margin"])),
)}


def _kind_schema(k: Kind) -> dict:
    return {"if": {"required": ["kind"], "properties": {"kind": {"const": k.name}}},
            "then": {"required": ["kind", *k.required], "additionalProperties": False,
                     "properties": {"kind": {}, **{f: s for f, (s, _) in k.fields.items()}}}}


#: JSON schema of a ``logits_processors`` value: an array of tables, each checked by its kind.
SCHEMA = {"type": "array", "items": {"type": "object", "required": ["kind"],
                                     "properties": {"kind": {"enum": sorted(KINDS)}},
                                     "allOf": [_kind_schema(k) for k in KINDS.values()]}}


@dataclass(frozen=True)
class Processor:
    """One configured processor: a kind and its arguments.

    Attributes
    ----------
    kind : str
        A name of :data:`KINDS`.
    args : tuple of (str, object)
        The arguments, sorted by name (lists as tuples, so the record is hashable).
    """

    kind: str
    args: tuple = field(default=())

    @property
    def spec(self) -> Kind:
        """The :class:`Kind`."""
        return KINDS[self.kind]

    @property
    def argmax_invariant(self) -> bool:
        """Whether the kind never changes the argmax (:attr:`Kind.argmax_invariant`)."""
        return self.spec.argmax_invariant

    def arguments(self) -> dict:
        """The arguments as a dict (tuples back to lists)."""
        return {k: _plain(v) for k, v in self.args}

    def to_dict(self) -> dict:
        """The case's table: ``{"kind": ..., **arguments}`` (plain JSON values)."""
        return {"kind": self.kind, **self.arguments()}

    def apply(self, x, n: int):
        """This processor's rule on one row.

        Parameters
        ----------
        x : torch.Tensor
            ``(V,)`` logits; not modified.
        n : int
            The request's steps (:func:`steps`).

        Returns
        -------
        torch.Tensor
            ``(V,)``, ``x``'s dtype.
        """
        return self.spec.rule(x, self.arguments(), int(n))


def _frozen(v):
    return tuple(_frozen(e) for e in v) if isinstance(v, (list, tuple)) else v


def _plain(v):
    return [_plain(e) for e in v] if isinstance(v, (list, tuple)) else v


def parse(value) -> tuple:
    """A case's ``logits_processors`` array as :class:`Processor` records (the parameter's ``convert``).

    Parameters
    ----------
    value : list of dict
        Already checked against :data:`SCHEMA` by the case loader (kinds, required and
        typed arguments).

    Returns
    -------
    tuple of Processor

    Raises
    ------
    ValueError
        ``[i].<argument>: <reason>`` for a value the schema cannot refuse (a NaN or +inf bias,
        a non-finite ``per_step`` or ``margin``), or ``[i].kind`` for an unknown kind.
    """
    out = []
    for i, table in enumerate(value):
        kind = table.get("kind")
        if kind not in KINDS:
            raise ValueError(f"[{i}].kind: unknown processor kind {kind!r} (known: {', '.join(sorted(KINDS))})")
        args = {k: v for k, v in table.items() if k != "kind"}
        missing = [f for f in KINDS[kind].required if f not in args]
        if missing:
            raise ValueError(f"[{i}].{missing[0]}: required by kind {kind!r}")
        unknown = sorted(set(args) - set(KINDS[kind].fields))
        if unknown:
            raise ValueError(f"[{i}].{unknown[0]}: not an argument of kind {kind!r} "
                             f"(it takes {', '.join(KINDS[kind].fields)})")
        why = KINDS[kind].check(args)
        if why is not None:
            raise ValueError(f"[{i}].{why}")
        out.append(Processor(kind, tuple(sorted((k, _frozen(v)) for k, v in args.items()))))
    return tuple(out)


def vocab_check(value, vocab: int) -> Optional[str]:
    """A reason a ``logits_processors`` array cannot belong to a row of ``vocab`` tokens, or None.

    Every token id a processor names (:attr:`Kind.ids`) must lie in ``[0, vocab)``.
    """
    for i, table in enumerate(value):
        k = KINDS.get(table.get("kind"))
        if k is None:
            continue
        bad = [t for t in k.ids(table) if not 0 <= int(t) < vocab]
        if bad:
            return f"[{i}] (kind {k.name!r}) names token ids {bad[:5]} outside [0, {vocab})"
    return None


def steps(row) -> int:
    """The request's steps ``n`` at this row: tokens generated before the one being sampled.

    ``len(row.generated)`` plus ``row.draft_position`` (a speculative verification row ``i``
    samples the position after ``i`` drafts). Read from the row's own history, so it belongs to
    the request whatever its position in the batch.
    """
    return len(row.generated) + int(getattr(row, "draft_position", 0) or 0)


def apply_all(x, procs, n: int, argmax_invariant: Optional[bool] = None):
    """Apply ``procs`` in their order to one row.

    Parameters
    ----------
    x : torch.Tensor
        ``(V,)`` logits; not modified.
    procs : sequence of Processor
    n : int
        The request's steps (:func:`steps`).
    argmax_invariant : bool, optional
        Apply only the kinds whose :attr:`Kind.argmax_invariant` is this (None: every kind).

    Returns
    -------
    torch.Tensor
        ``x`` itself when nothing applies.
    """
    for p in procs or ():
        if argmax_invariant is None or p.argmax_invariant == argmax_invariant:
            x = p.apply(x, n)
    return x


def filter_keep(z, keep, procs, n: int):
    """The tokens the argmax-invariant processors of ``procs`` leave among ``keep``.

    The stage where a profile runs them among its filters (``"custom"`` in ``filter_order``:
    vLLM, after the temperature). ``z`` are the logits that stage sees (divided by the
    temperature); the kinds only ban, so the kept set is what stays above ``-inf``.

    Parameters
    ----------
    z : torch.Tensor
        ``(V,)`` logits on the stage's scale.
    keep : torch.Tensor
        ``(V,)`` bool, the tokens still alive.
    procs : sequence of Processor
    n : int

    Returns
    -------
    torch.Tensor
        ``(V,)`` bool, a subset of ``keep``.
    """
    inv = [p for p in procs or () if p.argmax_invariant]
    if not inv:
        return keep
    y = apply_all(z.masked_fill(~keep, float("-inf")), inv, n)
    return keep & (y > float("-inf"))


def to_dicts(procs) -> list:
    """``[p.to_dict() for p in procs]``: the form an engine's per-request arguments carry (JSON values)."""
    return [p.to_dict() for p in procs or ()]


def from_dicts(value) -> tuple:
    """Inverse of :func:`to_dicts` (:func:`parse`)."""
    return parse(value)


def kind_table() -> str:
    """The table of kinds for ``cases/README.md`` (``sampcheck docs``): kind, arguments, state, rule."""
    lines = ["| kind | arguments | argmax-invariant | state | rule |", "| --- | --- | --- | --- | --- |"]
    for k in KINDS.values():
        args = ", ".join(f"`{f}` ({doc})" for f, (_, doc) in k.fields.items())
        lines.append(f"| `{k.name}` | {args} | {'yes' if k.argmax_invariant else 'no'} | "
                     f"{'n (steps so far)' if k.stateful else '–'} | {k.doc[0].upper() + k.doc[1:]} |")
    return "\n".join(lines) + "\n"
