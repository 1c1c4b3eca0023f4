"""The output registry: every key a single-step row's ``expect`` table can name, declared once.

Each :class:`Output` says the key's JSON schema (the case loader's), the feature a case
checking it must declare (if any), the pipeline stage that produces it (stage provenance,
:mod:`harness.judge.provenance`), how two values are compared (:func:`harness.judge.compare.mismatches`)
and whether it follows from the drawn token. From :data:`OUTPUTS` come the loader's schema of
an expectation (:data:`SCHEMAS`), the features the outputs need (:data:`FEATURES`), the keys the
judge observes (:data:`KEYS`), the keys a run record keeps (:data:`RECORD_KEYS`) and the stages
(:data:`STAGES`). Scenario outputs are the scenario kind's (``harness/kinds/scenario.py``).

This module imports nothing of the project (the lowest layer of :mod:`harness.corpus`, beside
the parameter registry it mirrors).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

__all__ = ["Output", "OUTPUTS", "KEYS", "SCHEMAS", "FEATURES", "STAGES", "RECORD_KEYS", "LOGPROB_KEYS", "output"]

_NUM = {"type": "number"}
_INT = {"type": "integer"}
_INTS = {"type": "array", "items": _INT}
_NUMS = {"type": "array", "items": _NUM}
#: ``[id, value]`` pairs: an integer id, then a number (no third item)
_PAIRS = {"type": "array", "items": {"type": "array", "minItems": 2, "items": [_INT, _NUM], "additionalItems": False}}


@dataclass(frozen=True)
class Output:
    """One output key of a single-step row (cases/README.md, "Row fields (expectations)").

    Attributes
    ----------
    name : str
        The ``expect`` key, and the :func:`harness.judge.compare.observe` key.
    schema : dict
        JSON schema of the expected value (``error``'s enum is filled in by the loader).
    compare : {"exact", "float", "vector", "pairs", "set"}
        ``exact``: ``==``; ``float``: within the case's tolerances; ``vector``: one float per
        token, each within the tolerances (length ``V``); ``pairs``: ``[id, value]`` pairs, ids
        equal in order and values within the tolerances; ``set``: the same ids in any order.
    stage : str or None
        The pipeline stage that produces it (:data:`impls.base.STAGES`); None for ``error``,
        whose stage is its error kind's (:data:`harness.judge.provenance.ERROR_STAGES`).
    feature : str or None
        The feature a case that checks it must declare.
    draw : bool
        Whether it follows from the drawn token (compared one for one only when the same
        token was drawn: :data:`harness.judge.compare.DRAW_KEYS`).
    logprob : bool
        A logprob value that ``finite_logprobs`` asserts finite (scalars) or free of NaN and
        ``+inf`` (pairs and vectors).
    vocab : bool
        One value per token: its length must be the row's vocabulary (checked at load).
    """

    name: str
    schema: dict
    compare: str
    stage: Optional[str]
    feature: Optional[str] = None
    draw: bool = False
    logprob: bool = False
    vocab: bool = False


#: Every output key, in report order.
OUTPUTS = (
    Output("token", _INT, "exact", "draw", draw=True),
    Output("support", _INTS, "set", "filters"),
    Output("mode", {"enum": ["greedy", "sampling", "beam"]}, "exact", "validation"),
    Output("error", {"type": "string"}, "exact", None),
    Output("finish_reason", {"enum": ["end_id", "length", "stop_words", "none"]}, "exact", "finish",
           feature="finish_reason", draw=True),
    Output("logprob", _NUM, "float", "logprobs", feature="logprobs", draw=True, logprob=True),
    Output("processed_logprob", _NUM, "float", "logprobs", feature="logprobs", draw=True, logprob=True),
    Output("top_logprobs", _PAIRS, "pairs", "logprobs", feature="logprobs", draw=True, logprob=True),
    Output("rank", _INT, "exact", "logprobs", feature="logprobs", draw=True),
    Output("vocab_logprobs", _NUMS, "vector", "logprobs", feature="logprobs", logprob=True, vocab=True),
    Output("token_logprobs", _PAIRS, "pairs", "logprobs", feature="logprob_token_ids", logprob=True),
    Output("rewritten_logits", _NUMS, "vector", "logit_bias", feature="processed_logits", vocab=True),
    Output("probs", _NUMS, "vector", "filters", vocab=True),
)

KEYS = tuple(o.name for o in OUTPUTS)
SCHEMAS = {o.name: o.schema for o in OUTPUTS}
FEATURES = {o.name: o.feature for o in OUTPUTS if o.feature}
STAGES = {o.name: o.stage for o in OUTPUTS if o.stage}
LOGPROB_KEYS = tuple(o.name for o in OUTPUTS if o.logprob)
#: What run records keep of a row's ``actual`` (``message`` is kept, never compared).
RECORD_KEYS = ("error", "token", "mode", "finish_reason", "logprob", "processed_logprob", "rank", "top_logprobs",
               "support", "probs", "rewritten_logits", "token_logprobs", "vocab_logprobs", "message")

_BY_NAME = {o.name: o for o in OUTPUTS}


def output(name: str) -> Output:
    """The :class:`Output` called ``name``.

    Raises
    ------
    KeyError
        No such output key.
    """
    return _BY_NAME[name]
