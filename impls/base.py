"""The one protocol every implementation (reference, fused, engine adapter) speaks.

A batch is a list of :class:`Row` (one request's row of logits plus its
parameters, histories and slot). An implementation opens a :class:`Session`
(fresh per-slot state: seed offsets, counters) and calls
:meth:`Session.step` once per decoding step; the result is one
:class:`RowResult` per row, carrying either a token or an error kind, so one
bad row never fails the batch (DESIGN.md, "Per-row errors").

Multi-step scenarios reuse the same session across steps; process isolation
wraps a session in a worker process without changing this interface.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Optional, Protocol, Sequence

import torch

from .profiles import Profile

__all__ = ["Row", "RowResult", "Session", "Implementation", "RowError", "FEATURES", "claim_slot", "active"]

#: The fixed feature list (mirrors ``cases/features.txt``). A case declares the
#: features it needs; an implementation lacking one reports ``n/a``.
FEATURES = (
    "temperature", "top_k", "top_p", "min_p", "top_p_decay", "beam_search",
    "repetition_penalty", "presence_penalty", "frequency_penalty",
    "prompt_ignore_length", "logit_bias", "min_length", "bad_words",
    "no_repeat_ngram", "end_id", "ignore_eos", "stop_words", "max_new_tokens",
    "max_seq_len", "seed", "logprobs", "processed_logits", "canonical_rng",
    "low_precision_logits", "finish_reason",
)


class RowError(Exception):
    """A per-request rejection: ``kind`` is a stable identifier, ``message`` prose.

    Raised inside an implementation for one row and turned into that row's
    :class:`RowResult` error; never allowed to fail the batch.
    """

    def __init__(self, kind: str, message: str):
        super().__init__(f"{kind}: {message}")
        self.kind = kind
        self.message = message


@dataclass
class Row:
    """One request's row in one sampling step.

    Attributes
    ----------
    logits : torch.Tensor
        ``(vocab,)``, float32, bfloat16 or float16; upcast to float32 (or
        float64 in oracle mode) before any rule (SEMANTICS §1).
    temperature, top_p, min_p : float or None
        ``None`` means unset (§1.1 rule 3 depends on it).
    top_k : int or None
    top_p_decay, top_p_min : float or None
        Top-p decay (§2); in one step only its effect on mode resolution and
        validation is visible.
    top_p_reset_ids : list of int or None
    use_beam_search : bool
    do_sample : bool or None
        Hugging Face's switch; read only by profiles with
        ``mode_source == "do_sample"``.
    repetition_penalty, presence_penalty, frequency_penalty : float or None
    prompt_ignore_length : int or None
    logit_bias : list of (int, float)
        Sparse additive bias (TensorRT-LLM's embedding bias); may be ``-inf``.
    min_length : int or None
        Ban the end id while fewer tokens were generated.
    end_id : int or None
        ``None`` or ``-1``: no end id.
    ignore_eos : bool
    bad_words, stop_words : list of list of int
    no_repeat_ngram_size : int or None
    max_new_tokens, max_seq_len : int or None
    prompt, generated : list of int
        Token history before this step.
    seed : int or None
        Python int in ``[-2**63, 2**64)``; ``None`` is unseeded (§1.6).
    slot : int
        Sequence slot (seed offsets are per slot).
    request_id : hashable or None
        Owner of the slot; a new owner resets the slot's seed offset (§2).
        ``None``: the slot's occupant is the same request at every step.
    logprobs : int or None
        Number of top logprobs to return (0: only the sampled token's);
        ``None``: none requested.
    """

    logits: torch.Tensor
    temperature: Optional[float] = None
    top_k: Optional[int] = None
    top_p: Optional[float] = None
    min_p: Optional[float] = None
    top_p_decay: Optional[float] = None
    top_p_min: Optional[float] = None
    top_p_reset_ids: Optional[list] = None
    use_beam_search: bool = False
    do_sample: Optional[bool] = None
    repetition_penalty: Optional[float] = None
    presence_penalty: Optional[float] = None
    frequency_penalty: Optional[float] = None
    prompt_ignore_length: Optional[int] = None
    logit_bias: list = field(default_factory=list)
    min_length: Optional[int] = None
    end_id: Optional[int] = None
    ignore_eos: bool = False
    bad_words: list = field(default_factory=list)
    stop_words: list = field(default_factory=list)
    no_repeat_ngram_size: Optional[int] = None
    max_new_tokens: Optional[int] = None
    max_seq_len: Optional[int] = None
    prompt: list = field(default_factory=list)
    generated: list = field(default_factory=list)
    seed: Optional[int] = None
    slot: int = 0
    request_id: Optional[Any] = None
    logprobs: Optional[int] = None

    @property
    def vocab(self) -> int:
        """Vocabulary size ``V`` (the length of ``logits``)."""
        return int(self.logits.shape[-1])

    def replace(self, **changes: Any) -> "Row":
        """Return a copy with ``changes`` applied (``dataclasses.replace``)."""
        return dataclasses.replace(self, **changes)


@dataclass
class RowResult:
    """What an implementation returns for one row.

    Exactly one of ``token`` and ``error`` is set.

    Attributes
    ----------
    token : int or None
        The sampled token id.
    error : str or None
        Stable error kind (e.g. ``"invalid_top_p"``, ``"nan_logits"``).
    message : str
        Human-readable detail of ``error``.
    mode : str or None
        ``"greedy"``, ``"sampling"`` or ``"beam"``, when the implementation
        can tell.
    finish_reason : str or None
        ``"end_id"``, ``"length"``, ``"stop_words"`` or ``"none"``; ``None``
        when not evaluated.
    logprob, processed_logprob : float or None
        RAW and PROCESSED logprob of the sampled token (§1.7).
    top_logprobs : list of (int, float) or None
        The requested top-k RAW logprobs, plus the sampled token if absent.
    rank : int or None
        Rank of the sampled token under the profile's rank rule.
    rewritten_logits : torch.Tensor or None
        ``(vocab,)`` float, the logits after bias, penalties and bans.
    probs : torch.Tensor or None
        ``(vocab,)`` float, the distribution actually sampled from (after
        temperature and filters; zeros outside the support; one-hot for
        greedy rows).
    raw_logprobs : torch.Tensor or None
        ``(vocab,)`` float, the RAW logprobs of every token (§1.7).
    extra : dict
        Implementation-specific facts for the report (e.g. the Philox
        ``seed`` and ``offset`` a row drew with).
    """

    token: Optional[int] = None
    error: Optional[str] = None
    message: str = ""
    mode: Optional[str] = None
    finish_reason: Optional[str] = None
    logprob: Optional[float] = None
    processed_logprob: Optional[float] = None
    top_logprobs: Optional[list] = None
    rank: Optional[int] = None
    rewritten_logits: Optional[torch.Tensor] = None
    probs: Optional[torch.Tensor] = None
    raw_logprobs: Optional[torch.Tensor] = None
    extra: dict = field(default_factory=dict)

    @classmethod
    def failed(cls, err: RowError, mode: Optional[str] = None) -> "RowResult":
        """Build the result of a rejected row from a :class:`RowError`."""
        return cls(error=err.kind, message=err.message, mode=mode)


class Session(Protocol):
    """Per-slot state of one implementation across the steps of one decode."""

    def step(self, rows: Sequence[Row]) -> list[RowResult]:
        """Sample one step for ``rows``; one result per row, in order."""
        ...


class Implementation(Protocol):
    """An implementation under test, as the harness sees it.

    Attributes
    ----------
    name : str
    profile : Profile
        The semantic profile whose reference run predicts this implementation.
    features : frozenset of str
        Features (from :data:`FEATURES`) it can express.

    Optional attributes and methods, read with ``getattr`` by the harness:
    ``scenario_features`` (frozenset: what its ``run_scenario`` can express,
    when more than its single steps; read by the judge's feature check),
    ``is_prediction`` (bool: the reference under a profile, not an engine
    release), ``describe(device) -> dict`` (facts recorded with the run),
    ``run_scenario(spec, device)`` (multi-step scenarios; without it they are
    ``n/a``) and ``Session.sample_many(row, seeds)`` (batched draws for
    statistical checks).
    """

    name: str
    profile: Profile
    features: frozenset

    def version(self) -> str:
        """Version string of the code under test (engine version for adapters)."""
        ...

    def available(self, device: str) -> Optional[str]:
        """Return ``None`` if runnable on ``device``, else the reason it is not."""
        ...

    def unsupported(self, row: Row) -> Optional[str]:
        """Return why this implementation cannot express ``row`` (``n/a``), or ``None``."""
        ...

    def open_session(self, device: str) -> Session:
        """Return a fresh session (all slot counters at their initial values)."""
        ...


def claim_slot(row: Row, used: set, one_d: bool = True) -> None:
    """Admission checks every session makes per row: one row per slot per step, 1-D logits.

    Parameters
    ----------
    row : Row
    used : set of int
        The slots of the earlier rows of this step; ``row.slot`` is added.
    one_d : bool
        Also require ``row.logits`` to be 1-D.

    Raises
    ------
    RowError
        ``duplicate_slot`` when an earlier row of the step holds the slot;
        ``bad_logits`` for logits that are not 1-D.
    """
    if row.slot in used:
        raise RowError("duplicate_slot", f"slot {row.slot} is used by an earlier row of this step")
    used.add(row.slot)
    if one_d and row.logits.dim() != 1:
        raise RowError("bad_logits", f"logits must be 1-D, got shape {tuple(row.logits.shape)}")


def active(value) -> bool:
    """Whether an optional penalty/decay parameter asks for its rule: set and not 0 (NaN counts as set).

    Adapters use it to decide which rows their engine cannot express
    (``unsupported``); the reference validates the values themselves.
    """
    return value is not None and (value != value or value != 0)
