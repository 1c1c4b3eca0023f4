"""Admission of one row: the fused sampler's own validation and mode resolution (profile ``trtllm``).

What a serving engine does on the host when a request arrives, written for the fused sampler
alone so that its verdicts on validation and modes come from its code, never from the
reference's (:mod:`impls.reference.modes` states the same rules for every profile; this module
states them for ``trtllm`` only, for the features :class:`impls.fused.FusedImpl` declares).

Validation (SEMANTICS §1.1 rule 5, §5), in this order; the first failure rejects the row:

* a numeric field whose value is not a number (:func:`impls.params.not_a_number`: its first error kind;
  the case schema refuses it, a row given through the API gets it);
* ``temperature`` NaN or ``< 0``: ``invalid_temperature``; ``top_p`` outside ``[0, 1]`` or NaN:
  ``invalid_top_p`` (0 is greedy, seed 000 § 采样参数); ``top_k`` not an integer or ``< 0``:
  ``invalid_top_k``; ``min_p`` outside ``[0, 1]`` or NaN: ``invalid_min_p``;
* a NaN repetition, presence or frequency penalty, a repetition penalty ``<= 0`` or a
  ``penalty_last_n`` that is not an integer ``>= 0``: ``invalid_penalty``;
* a ``mirostat`` version other than 0, 1, 2, an empty DRY sequence breaker, a ``min_keep`` that is not an
  integer ``>= 0``, a ``typical_p`` outside ``(0, 1]``, a NaN ``top_n_sigma``, an ``xtc_probability``
  outside ``[0, 1]``, a NaN ``xtc_threshold``, ``dynatemp_range``, ``dynatemp_exponent``, ``dry_multiplier``
  or ``dry_base``, a negative or NaN ``dry_penalty_last_n``, a NaN ``mirostat_tau`` or ``mirostat_eta``:
  ``invalid_sampler_param`` (llama.cpp's parameters, SEMANTICS §1.5a: NaN and out-of-domain values are
  rejected under the default profile; the reference's ``_validate_chain_params`` order);
* ``top_p_decay`` outside ``(0, 1]``, or below 1 on a beam row (SEMANTICS §2: rejected per
  request with beam search): ``invalid_top_p_decay``; ``top_p_min`` outside ``(0, 1]``:
  ``invalid_top_p_min``;
* a seed that is not an integer in ``[-2**63, 2**64)``: ``invalid_seed``;
* a negative ``min_length``, ``max_new_tokens``, ``max_seq_len`` or ``no_repeat_ngram_size``:
  ``invalid_length``;
* an end id (or an id of an EOS set) outside ``[-1, V)``: ``invalid_end_id``; an empty bad or
  stop word, or one with an id outside ``[0, V)``: ``invalid_bad_words`` /
  ``invalid_stop_words``; a ``logprobs`` below -1 or not an integer, a ``logprobs_mode`` that is not one
  of :data:`impls.params.LOGPROBS_MODES` or a ``logprob_token_ids`` id outside ``[0, V)``:
  ``invalid_logprobs`` (the case schema refuses the first two; a row given through the API gets this
  error, as from the reference); an
  empty ``allowed_token_ids`` or one with an id outside ``[0, V)``: ``invalid_allowed_token_ids``
  (vLLM 0.32.0 ``SamplingParams._validate_allowed_token_ids``, the reference's order).

Before them all, a ``token_bitmask`` of fewer than ``ceil(V / 32)`` words: ``invalid_token_bitmask``
(:func:`check_bitmask`; the mask applies to the model's logits, before the sampler).

Mode (SEMANTICS §1.1 rules 1-4, seed 000 § 采样参数): a beam row is BEAM (at its temperature,
1 when unset or 0); ``top_k == 1``,
``top_p == 0``, ``min_p == 1`` or ``temperature == 0`` is GREEDY, and so is a row with
temperature, top-k and top-p all unset unless ``min_p > 0`` or an active top-p decay makes it
sample; every other row samples with ``temperature`` (1 unset), ``top_k`` (0: off), ``top_p``
(1: off; with an active decay the decayed value, SEMANTICS §2) and ``min_p`` (0: off).
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Optional

import numpy as np

from ..base import Row, RowError
from ..params import LOGPROBS_MODES, bitmask_word_count, end_id_set, not_a_number

__all__ = ["Admitted", "admit", "check_bitmask", "signed_seed", "decayed_top_p", "GREEDY", "SAMPLING", "BEAM", "TOP_P_MIN"]

#: The modes, as a row's ``mode`` output names them (``harness/corpus/outputs.py``).
GREEDY, SAMPLING, BEAM = "greedy", "sampling", "beam"
#: The floor of a decayed top-p when ``top_p_min`` is unset (SEMANTICS §2).
TOP_P_MIN = 1e-6
_SEED_LO, _SEED_HI = -(1 << 63), 1 << 64


@dataclass(frozen=True)
class Admitted:
    """An admitted row: its mode, the kernel's per-row arguments and its seed.

    Attributes
    ----------
    mode : str
        :data:`GREEDY`, :data:`SAMPLING` or :data:`BEAM`.
    temperature, top_k, top_p, min_p : float, int, float, float
        The filter arguments of :func:`impls.fused.ops.fused_sample` for a sampling row
        (``temperature > 0``; ``top_k`` 0, ``top_p`` 1 and ``min_p`` 0 are off); a greedy or
        beam row's are ``0, 0, 1, 0`` (the kernel's greedy spelling: ``temperature == 0``).
    seed : int or None
        The row's seed as the signed int64 view of its 64-bit pattern; None unseeded.
    beam_temperature : float
        A beam row's temperature (1 unset; the ``beam_temperature`` of
        :func:`impls.fused.step.fused_step`); -1 on other rows.
    min_keep, top_n_sigma, typical_p, xtc_probability, xtc_threshold : int, float, float, float, float
        A sampling row's parameters of llama.cpp's extra filters (:mod:`impls.fused.chain`): ``0, 0, 1, 0``
        are off, ``xtc_threshold`` 0.1 unset. ``top_k`` and ``min_keep`` are capped at ``2**62`` (past any
        vocabulary: all).
    mirostat, mirostat_tau, mirostat_eta : int, float, float
        A sampling row's mirostat version (0 off, 1, 2; :mod:`impls.fused.mirostat`), ``tau`` (5 unset) and
        ``eta`` (0.1 unset).
    """

    mode: str
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0
    seed: Optional[int] = None
    beam_temperature: float = -1.0
    min_keep: int = 0
    top_n_sigma: float = 0.0
    typical_p: float = 1.0
    xtc_probability: float = 0.0
    xtc_threshold: float = 0.1
    mirostat: int = 0
    mirostat_tau: float = 5.0
    mirostat_eta: float = 0.1


def _bad(kind: str, name: str, value, rule: str) -> RowError:
    return RowError(kind, f"{name}={value!r}: must be {rule}")


def _check_scalars(row: Row) -> None:
    # (field, error kind, accepts, rule): NaN fails every comparison, so it is rejected with them
    table = (("temperature", "invalid_temperature", lambda v: v >= 0, ">= 0"),
             ("top_p", "invalid_top_p", lambda v: 0 <= v <= 1, "in [0, 1]"),
             ("top_k", "invalid_top_k", lambda v: isinstance(v, int) and v >= 0, "an integer >= 0"),
             ("min_p", "invalid_min_p", lambda v: 0 <= v <= 1, "in [0, 1]"),
             ("repetition_penalty", "invalid_penalty", lambda v: v > 0, "> 0"),
             ("presence_penalty", "invalid_penalty", lambda v: v == v, "a number"),
             ("frequency_penalty", "invalid_penalty", lambda v: v == v, "a number"),
             ("penalty_last_n", "invalid_penalty", lambda v: isinstance(v, int) and v >= 0, "an integer >= 0"),
             ("mirostat", "invalid_sampler_param", lambda v: v in (0, 1, 2), "0, 1 or 2"),
             ("dry_sequence_breakers", "invalid_sampler_param", lambda v: all(len(b) for b in v),
              "sequences that are not empty"),
             ("min_keep", "invalid_sampler_param", lambda v: isinstance(v, int) and v >= 0, "an integer >= 0"),
             ("typical_p", "invalid_sampler_param", lambda v: 0 < v <= 1, "in (0, 1]"),
             ("top_n_sigma", "invalid_sampler_param", lambda v: v == v, "a number"),
             ("xtc_probability", "invalid_sampler_param", lambda v: 0 <= v <= 1, "in [0, 1]"),
             ("xtc_threshold", "invalid_sampler_param", lambda v: v == v, "a number"),
             ("dynatemp_range", "invalid_sampler_param", lambda v: v == v, "a number"),
             ("dynatemp_exponent", "invalid_sampler_param", lambda v: v == v, "a number"),
             ("dry_multiplier", "invalid_sampler_param", lambda v: v == v, "a number"),
             ("dry_base", "invalid_sampler_param", lambda v: v == v, "a number"),
             ("dry_penalty_last_n", "invalid_sampler_param", lambda v: v >= 0, ">= 0"),
             ("mirostat_tau", "invalid_sampler_param", lambda v: v == v, "a number"),
             ("mirostat_eta", "invalid_sampler_param", lambda v: v == v, "a number"),
             ("top_p_decay", "invalid_top_p_decay", lambda v: 0 < v <= 1, "in (0, 1]"),
             ("top_p_min", "invalid_top_p_min", lambda v: 0 < v <= 1, "in (0, 1]"))
    for name, kind, ok, rule in table:
        v = getattr(row, name)
        if v is not None and not ok(v):
            raise _bad(kind, name, v, rule)
    if row.use_beam_search and _decay_on(row):
        raise _bad("invalid_top_p_decay", "top_p_decay", row.top_p_decay, "1 (off) with beam search")


def signed_seed(seed) -> Optional[int]:
    """A seed as the signed int64 view of its 64-bit pattern (SEMANTICS §1.6); None stays None.

    Parameters
    ----------
    seed : int or None
        A row's seed, in ``[-2**63, 2**64)``.

    Returns
    -------
    int or None
        ``seed - 2**64`` for a seed ``>= 2**63``, else the seed.

    Raises
    ------
    RowError
        ``invalid_seed``: not an integer, or outside ``[-2**63, 2**64)``.
    """
    if seed is None:
        return None
    try:
        s = operator.index(seed)
    except TypeError:
        raise _bad("invalid_seed", "seed", seed, "an integer") from None
    if not _SEED_LO <= s < _SEED_HI:
        raise _bad("invalid_seed", "seed", seed, "in [-2**63, 2**64)")
    return s - _SEED_HI if s >= 1 << 63 else s


def _check_ids(row: Row, V: int) -> None:
    for name in ("min_length", "max_new_tokens", "max_seq_len", "no_repeat_ngram_size"):
        v = getattr(row, name)
        if v is not None and v < 0:
            raise _bad("invalid_length", name, v, ">= 0")
    for t in end_id_set(row.end_id) if row.end_id is not None else ():
        if not -1 <= t < V:
            raise _bad("invalid_end_id", "end_id", row.end_id, f"-1 (none) or ids in [0, {V})")
    for name in ("bad_words", "stop_words"):
        for w in getattr(row, name) or ():
            if not len(w) or not all(0 <= t < V for t in w):
                raise _bad(f"invalid_{name}", f"{name} entry", list(w), f"non-empty with ids in [0, {V})")
    if row.logprobs is not None and not (isinstance(row.logprobs, int) and row.logprobs >= -1):
        raise _bad("invalid_logprobs", "logprobs", row.logprobs, "an integer >= -1 (-1: the whole vector)")
    if row.logprobs_mode is not None and row.logprobs_mode not in LOGPROBS_MODES:
        raise _bad("invalid_logprobs", "logprobs_mode", row.logprobs_mode, f"one of {', '.join(LOGPROBS_MODES)}")
    ids = row.logprob_token_ids
    if ids is not None and not all(0 <= t < V for t in ids):
        raise _bad("invalid_logprobs", "logprob_token_ids", list(ids)[:8], f"ids in [0, {V})")
    ids = row.allowed_token_ids
    if ids is not None and (not len(ids) or not all(0 <= t < V for t in ids)):
        raise _bad("invalid_allowed_token_ids", "allowed_token_ids", list(ids)[:8], f"non-empty with ids in [0, {V})")


def check_bitmask(row: Row) -> None:
    """``invalid_token_bitmask`` for a ``token_bitmask`` of fewer than ``ceil(V / 32)`` words.

    The first check of a row, before its NaN logits and its parameters: the mask applies to the model's logits
    (profile ``trtllm``: ``token_bitmask_stage = "logits"``), before the sampler sees them, as in the reference.
    The case schema refuses such a mask; a row given through the API gets this error.

    Raises
    ------
    RowError
        ``invalid_token_bitmask``.
    """
    n = bitmask_word_count(row.vocab)
    if row.token_bitmask is not None and len(row.token_bitmask) < n:
        raise _bad("invalid_token_bitmask", "token_bitmask", f"{len(row.token_bitmask)} words",
                   f"at least ceil({row.vocab} / 32) = {n} words")


def _count(v) -> int:
    # a token count (top_k, min_keep; unset 0): one past any vocabulary keeps all, so it is capped at 2**62 for the
    # device's int64 tensors (a min_keep of 2**64 - 1 is valid, llama.cpp's size_t)
    return min(int(v or 0), 1 << 62)


def _decay_on(row: Row) -> bool:
    # a decay of exactly 1 changes nothing (SEMANTICS §1.1 rule 3)
    return row.top_p_decay is not None and row.top_p_decay < 1


def decayed_top_p(row: Row, p0: float) -> float:
    """The top-p of a row whose decay is active, after its ``generated`` tokens (SEMANTICS §2).

    From ``p0``, each generated token sets ``p = p0`` when it is one of ``top_p_reset_ids``, else
    ``p = max(p * top_p_decay, top_p_min)`` (``top_p_min`` default :data:`TOP_P_MIN`), the product
    and the floor taken in float32 as TensorRT-LLM keeps its per-slot runtime top-p (seed 000 §
    Top-P Decay); ``p0`` itself (before the first decay, and after a reset) is kept as given.

    Parameters
    ----------
    row : Row
        Its ``top_p_decay`` (set), ``top_p_min``, ``top_p_reset_ids`` and ``generated``.
    p0 : float
        The request's top-p (1 when unset).

    Returns
    -------
    float
    """
    f32 = np.float32
    decay = f32(row.top_p_decay)
    floor = f32(row.top_p_min if row.top_p_min is not None else TOP_P_MIN)
    reset = set(row.top_p_reset_ids or ())
    p = p0
    for tok in row.generated:
        p = p0 if tok in reset else float(max(f32(f32(p) * decay), floor))
    return p


def admit(row: Row) -> Admitted:
    """Validate ``row`` and resolve its mode and kernel arguments (the module docstring's rules).

    Parameters
    ----------
    row : Row
        ``row.vocab`` bounds the id checks.

    Returns
    -------
    Admitted

    Raises
    ------
    RowError
        The first failed check of the module docstring's list.
    """
    check_bitmask(row)
    bad = not_a_number(row)
    if bad is not None:
        raise RowError(*bad)
    _check_scalars(row)
    seed = signed_seed(row.seed)
    _check_ids(row, row.vocab)
    t, k, p, m = row.temperature, row.top_k, row.top_p, row.min_p
    if row.use_beam_search:
        return Admitted(BEAM, seed=seed, beam_temperature=float(t) if t else 1.0)
    if k == 1 or p == 0 or m == 1 or t == 0:
        return Admitted(GREEDY, seed=seed)
    if t is None and k is None and p is None and not (m is not None and m > 0) and not _decay_on(row):
        return Admitted(GREEDY, seed=seed)
    top_p = 1.0 if p is None else float(p)
    if _decay_on(row):
        top_p = decayed_top_p(row, top_p)
    sigma = row.top_n_sigma
    return Admitted(SAMPLING, temperature=float(t) if t is not None else 1.0, top_k=_count(k), top_p=top_p,
                    min_p=float(m) if m is not None and m > 0 else 0.0, seed=seed, min_keep=_count(row.min_keep),
                    top_n_sigma=float(sigma) if sigma is not None and sigma > 0 else 0.0,
                    typical_p=float(row.typical_p) if row.typical_p is not None else 1.0,
                    xtc_probability=float(row.xtc_probability or 0.0),
                    xtc_threshold=float(row.xtc_threshold) if row.xtc_threshold is not None else 0.1,
                    mirostat=int(row.mirostat or 0),
                    mirostat_tau=float(row.mirostat_tau) if row.mirostat_tau is not None else 5.0,
                    mirostat_eta=float(row.mirostat_eta) if row.mirostat_eta is not None else 0.1)
