"""Scripted models: the logits of a multi-step scenario, defined in the case file.

A scenario (``cases/README.md``, ``check = "scenario"``) does not run a real
language model; its logits come from a **scripted model**, which is input
data shared by every implementation (the harness never asks an
implementation to compute logits). Three kinds, each a pure function of the
token history ``prompt + generated`` of one sequence (one request, one beam,
or one verification position of a speculative step):

``table``
    ``steps[i]`` is the logits row of the token at generated position ``i``
    (``i = len(generated)``); past the last row the last one repeats
    (``after_last = "repeat"``, default) or the step is an error
    (``"error"``).
``context``
    ``rules = [{after = [t...], logits = [...]}]``: the rule whose ``after``
    is the **longest** suffix of ``prompt + generated`` wins; ``default``
    applies when none matches. Beams that diverge see different logits.
``toy``
    A deterministic seeded function of the last ``n`` tokens:
    ``logits = sigma * standard_normal(V) + mean`` drawn with
    ``numpy.random.default_rng([seed, len(ctx), *ctx])`` where ``ctx`` is the
    last ``n`` tokens of ``prompt + generated`` (fewer at the start), then
    ``set = [[id, value], ...]`` overwrites single entries. NumPy's
    ``SeedSequence`` and ``PCG64`` are stable across versions, so any
    implementation can recompute these logits.

Every kind hands out float32 logits of shape ``(V,)``, computed in float64
first (as generated single-step logits are, ``harness.corpus.load.make_logits``).
"""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np
import torch

__all__ = ["ScriptedModel", "TableModel", "ContextModel", "ToyModel", "make_model", "ModelError"]


class ModelError(ValueError):
    """A scripted model that cannot produce logits (bad definition, or past its table).

    ``field`` names the offending part of the definition (e.g.
    ``"steps[2]"``) so the loader can locate it in the case file.
    """

    def __init__(self, field: str, reason: str):
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


class ScriptedModel:
    """Base class: ``vocab`` and :meth:`logits`.

    Attributes
    ----------
    vocab : int
        Vocabulary size ``V`` of every row it returns.
    kind : str
        ``"table"``, ``"context"`` or ``"toy"``.
    """

    vocab: int
    kind: str

    def logits(self, prompt: Sequence[int], generated: Sequence[int]) -> torch.Tensor:
        """The logits row for the next token after ``prompt + generated``.

        Parameters
        ----------
        prompt, generated : sequence of int
            Token history of one sequence; ``len(generated)`` is the position
            of the token being produced.

        Returns
        -------
        torch.Tensor
            ``(V,)`` float32, a fresh tensor (callers may modify it).

        Raises
        ------
        ModelError
            When the model has no row for this history (a ``table`` past its
            end with ``after_last = "error"``).
        """
        raise NotImplementedError


def _row(values, field: str, vocab: Optional[int] = None) -> np.ndarray:
    try:
        arr = np.asarray([float(v) for v in values], dtype=np.float64)
    except (TypeError, ValueError):
        raise ModelError(field, "must be an array of numbers") from None
    if arr.ndim != 1 or arr.size == 0:
        raise ModelError(field, "must be a non-empty array of numbers")
    if vocab is not None and arr.size != vocab:
        raise ModelError(field, f"has {arr.size} values, the model's vocab is {vocab}")
    return arr


def _f32(arr: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(arr.astype(np.float32))


class TableModel(ScriptedModel):
    """Logits by generated position (``kind = "table"``).

    Parameters
    ----------
    steps : list of list of float
        ``steps[i]``: the ``(V,)`` logits of the token at generated position
        ``i``; every row has the same length ``V``. ``inf``/``nan`` allowed.
    after_last : {"repeat", "error"}
        What a position past the table gives.

    Raises
    ------
    ModelError
        Rows of different lengths, empty table, unknown ``after_last``.
    """

    kind = "table"

    def __init__(self, steps: list, after_last: str = "repeat"):
        if not steps:
            raise ModelError("steps", "must hold at least one row")
        rows = [_row(r, f"steps[{i}]") for i, r in enumerate(steps)]
        self.vocab = rows[0].size
        for i, r in enumerate(rows):
            if r.size != self.vocab:
                raise ModelError(f"steps[{i}]", f"has {r.size} values, steps[0] has {self.vocab}")
        if after_last not in ("repeat", "error"):
            raise ModelError("after_last", f"must be 'repeat' or 'error', got {after_last!r}")
        self.rows = rows
        self.after_last = after_last

    def logits(self, prompt, generated) -> torch.Tensor:
        """Row ``len(generated)`` of the table (see the class docstring)."""
        i = len(generated)
        if i >= len(self.rows):
            if self.after_last == "error":
                raise ModelError("steps", f"no row for generated position {i} (the table has {len(self.rows)})")
            i = len(self.rows) - 1
        return _f32(self.rows[i])


class ContextModel(ScriptedModel):
    """Logits by the longest matching suffix of the history (``kind = "context"``).

    Parameters
    ----------
    default : list of float
        ``(V,)`` logits when no rule matches.
    rules : list of dict
        ``{"after": [t...], "logits": [...]}``; ``after`` may be empty (it
        then matches everything, like ``default``, but loses to any longer
        match).

    Raises
    ------
    ModelError
        A row of the wrong length, or two rules with the same ``after``.
    """

    kind = "context"

    def __init__(self, default: list, rules: list = ()):
        d = _row(default, "default")
        self.vocab = d.size
        self.default = d
        self.rules = {}
        for i, rule in enumerate(rules):
            if not isinstance(rule, dict) or set(rule) != {"after", "logits"}:
                raise ModelError(f"rules[{i}]", "must be a table {after = [...], logits = [...]}")
            key = tuple(int(t) for t in rule["after"])
            if key in self.rules:
                raise ModelError(f"rules[{i}].after", f"{list(key)} is already the 'after' of an earlier rule")
            self.rules[key] = _row(rule["logits"], f"rules[{i}].logits", self.vocab)
        self.max_after = max((len(k) for k in self.rules), default=0)

    def logits(self, prompt, generated) -> torch.Tensor:
        """The row of the longest rule whose ``after`` ends the history, else ``default``."""
        hist = list(prompt) + list(generated)
        for n in range(min(self.max_after, len(hist)), -1, -1):
            key = tuple(hist[len(hist) - n:]) if n else ()
            if key in self.rules:
                return _f32(self.rules[key])
        return _f32(self.default)


class ToyModel(ScriptedModel):
    """A deterministic seeded function of the last ``n`` tokens (``kind = "toy"``).

    Parameters
    ----------
    vocab : int
        ``V >= 1``.
    seed : int
        ``>= 0`` (NumPy ``SeedSequence`` entropy).
    n : int
        Context length ``>= 0`` (0: the same row everywhere).
    sigma, mean : float
        Scale and shift of the standard normal draws.
    set : list of [int, float]
        Entries overwritten after the draw (e.g. a large logit for an end
        id), applied to every row.

    Raises
    ------
    ModelError
        ``vocab < 1``, ``seed < 0``, ``n < 0``, or a ``set`` id outside
        ``[0, V)``.
    """

    kind = "toy"

    def __init__(self, vocab: int, seed: int, n: int = 2, sigma: float = 1.0, mean: float = 0.0, set: list = ()):
        if vocab < 1:
            raise ModelError("vocab", "must be >= 1")
        if seed < 0:
            raise ModelError("seed", "must be >= 0 (NumPy SeedSequence entropy)")
        if n < 0:
            raise ModelError("n", "must be >= 0")
        for i, pair in enumerate(set):
            if not 0 <= int(pair[0]) < vocab:
                raise ModelError(f"set[{i}]", f"id {pair[0]} outside [0, {vocab})")
        self.vocab, self.seed, self.n = int(vocab), int(seed), int(n)
        self.sigma, self.mean = float(sigma), float(mean)
        self.overrides = [(int(t), float(v)) for t, v in set]
        self._cache: dict = {}

    def logits(self, prompt, generated) -> torch.Tensor:
        """``sigma * N(0, 1) + mean`` keyed by ``[seed, len(ctx), *ctx]`` (see the module docstring)."""
        hist = list(prompt) + list(generated)
        ctx = tuple(hist[len(hist) - self.n:]) if self.n else ()
        row = self._cache.get(ctx)
        if row is None:
            if any(t < 0 for t in ctx):
                raise ModelError("history", f"negative token id in the context {list(ctx)}")
            rng = np.random.default_rng([self.seed, len(ctx), *ctx])
            row = rng.standard_normal(self.vocab) * self.sigma + self.mean
            for t, v in self.overrides:
                row[t] = v
            self._cache[ctx] = row
        return _f32(row)


def make_model(spec: dict) -> ScriptedModel:
    """Build a scripted model from its case-file table.

    Parameters
    ----------
    spec : dict
        ``{kind = "table", steps = [...], after_last = ...}``,
        ``{kind = "context", default = [...], rules = [...]}`` or
        ``{kind = "toy", vocab, seed, n, sigma, mean, set}``.

    Returns
    -------
    ScriptedModel

    Raises
    ------
    ModelError
        Unknown kind, unknown or missing keys, or an invalid definition.
    """
    if not isinstance(spec, dict) or "kind" not in spec:
        raise ModelError("kind", "a model table needs kind = 'table' | 'context' | 'toy'")
    kind = spec["kind"]
    rest = {k: v for k, v in spec.items() if k != "kind"}
    allowed = {"table": ({"steps"}, {"after_last"}), "context": ({"default"}, {"rules"}),
               "toy": ({"vocab", "seed"}, {"n", "sigma", "mean", "set"})}
    if kind not in allowed:
        raise ModelError("kind", f"unknown model kind {kind!r} (table, context, toy)")
    required, optional = allowed[kind]
    missing = required - set(rest)
    if missing:
        raise ModelError(sorted(missing)[0], f"required for kind = {kind!r}")
    unknown = set(rest) - required - optional
    if unknown:
        raise ModelError(sorted(unknown)[0], f"not a field of kind = {kind!r} (allowed: {', '.join(sorted(required | optional))})")
    if kind == "table":
        return TableModel(**rest)
    if kind == "context":
        return ContextModel(**rest)
    return ToyModel(**rest)
