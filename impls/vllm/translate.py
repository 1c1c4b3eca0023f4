"""Translation of a :class:`~impls.base.Row` into vLLM ``SamplingParams`` arguments.

Pure Python: nothing here imports vLLM, so :mod:`impls.vllm` imports (and can
report ``n/a`` / ``skip``) where vLLM is missing.

Every mapping names the vLLM 0.32.0 code that consumes the argument (paths
are relative to the ``vllm/`` package of vllm-project/vllm@v0.32.0):

==========================  ==========================================================
Row field                   vLLM spelling
==========================  ==========================================================
``temperature``             ``SamplingParams.temperature`` (unset: the class default
                            1.0, so "nothing set" samples; ``0 < T < 0.01`` is raised
                            to 0.01 by ``SamplingParams.__post_init__``)
``top_k``                   ``top_k`` (unset: 0, "off"; -1 also means off)
``top_p``, ``min_p``        ``top_p`` (unset 1.0), ``min_p`` (unset 0.0)
``repetition_penalty``,     ``repetition_penalty``, ``presence_penalty``,
``presence_penalty``,       ``frequency_penalty`` (unset: 1.0, 0.0, 0.0)
``frequency_penalty``
``logit_bias``              ``logit_bias``, a ``dict[int, float]``: a token listed
                            twice keeps its last value (Python dict semantics, as a
                            JSON object with a repeated key)
``min_length``              ``min_tokens`` (``MinTokensLogitsProcessor``)
``end_id``                  the model's EOS id, passed as
                            ``SamplingParams.update_from_generation_config({}, eos)``
                            as ``InputProcessor.process_inputs`` does (``-1``/None:
                            no EOS). An EOS set (an array) is the model's
                            generation config ``{"eos_token_id": [ids]}`` with its
                            first id as the tokenizer's EOS (:func:`generation_config`):
                            the others join ``stop_token_ids`` (unless ``ignore_eos``)
                            and ``all_stop_token_ids`` (the min_tokens ban)
``ignore_eos``              ``ignore_eos``
``bad_words``               ``bad_words`` (strings in vLLM): each word is given as a
                            placeholder string that a stand-in tokenizer encodes to
                            the word's ids, so ``SamplingParams.update_from_tokenizer``
                            validates them and fills ``bad_words_token_ids``
``allowed_token_ids``       ``allowed_token_ids`` (``SamplingParams._validate_allowed_token_ids``;
                            the mask ``InputBatch.add_request`` builds: True at every
                            id not listed)
``token_bitmask``           the output of a structured-output grammar: the request gets
                            ``structured_outputs`` (a stand-in constraint, never
                            compiled: no grammar backend runs) and the case's bitmask
                            is applied by vLLM's ``apply_grammar_bitmask``
                            (v1/structured_output/utils.py, xgrammar's kernel) to the
                            logits before the ``Sampler``, as ``GPUModelRunner``
                            applies the scheduler's ``GrammarOutput``
``stop_words`` (1 token)    ``stop_token_ids`` (multi-token stop words are strings in
                            vLLM, matched by the detokenizer: ``n/a``)
``max_new_tokens``          ``max_tokens``; unset with ``max_seq_len`` unset: the class
                            default 16; unset with ``max_seq_len`` set: ``None``, which
                            ``InputProcessor.process_inputs`` turns into "up to
                            ``max_model_len``"
``max_seq_len``             ``max_model_len`` of ``check_stop`` (prompt + output)
``seed``                    ``seed`` (-1 means unseeded: ``SamplingParams.__post_init__``)
``logprob_token_ids``       ``logprob_token_ids`` (``Sampler.gather_specific_token_logprobs``)
``logprobs_mode``           the engine's ``logprobs_mode`` (a ``ModelConfig`` field, one per
                            engine): rows of different modes are sampled in separate
                            batches, each by a ``Sampler(logprobs_mode=...)``
``logits_processors``       ``extra_args = {PROCESSORS_KEY: [table, ...]}``, read by the two
                            ``LogitsProcessor`` classes of :mod:`impls.vllm.processors` that
                            every engine of a case with processors is built with
                            (``LLM(logits_processors=[...])``; the single-step adapter
                            instantiates them next to the built-ins)
``logprobs``                ``logprobs`` (-1: every token, which ``InputBatch`` turns into
                            ``vocab_size`` top logprobs; the adapter always asks for at least 0, i.e.
                            the sampled token's logprob; sampling does not depend on it)
==========================  ==========================================================

Fields vLLM cannot express make :func:`unsupported_reason` return a reason
(the harness reports ``n/a``).
"""

from __future__ import annotations

from typing import Optional

from .. import processors
from ..base import Row, active, error_kind
from ..params import end_id_set

__all__ = ["SUPPORTED_FEATURES", "sampling_kwargs", "stop_kwargs", "unsupported_reason", "classify_validation_error",
           "bad_word_text", "eos_id", "generation_config", "bad_word_index", "PROCESSORS_KEY"]

#: The ``SamplingParams.extra_args`` key that carries a request's custom logits processors (the
#: case's tables, :func:`impls.processors.to_dicts`: plain values the engine client's msgpack
#: encoder carries).
PROCESSORS_KEY = "sampcheck_logits_processors"

#: Features (names from :data:`impls.base.FEATURES`) the adapter can express.
SUPPORTED_FEATURES = frozenset({
    "temperature", "top_k", "top_p", "min_p", "repetition_penalty", "presence_penalty", "frequency_penalty",
    "logit_bias", "min_length", "bad_words", "end_id", "end_id_set", "ignore_eos", "stop_words", "max_new_tokens",
    "max_seq_len", "seed", "logprobs", "processed_logits", "low_precision_logits", "finish_reason",
    "allowed_token_ids", "token_bitmask", "logprobs_mode", "logprob_token_ids", "logits_processors",
})

_BAD_WORD_PREFIX = "<sampcheck-bad-word-"


def bad_word_text(index: int) -> str:
    """The placeholder string standing for the row's ``index``-th bad word.

    The stand-in tokenizer of :mod:`impls.vllm.engine` encodes it back to the
    word's token ids (with or without the leading space that
    ``SamplingParams.update_from_tokenizer`` tries).
    """
    return f"{_BAD_WORD_PREFIX}{index}>"


def bad_word_index(text: str) -> Optional[int]:
    """Inverse of :func:`bad_word_text` (leading spaces ignored); None for other text."""
    t = text.lstrip()
    if t.startswith(_BAD_WORD_PREFIX) and t.endswith(">"):
        return int(t[len(_BAD_WORD_PREFIX):-1])
    return None


def eos_id(row: Row) -> Optional[int]:
    """The EOS id the engine is told about (the tokenizer's ``eos_token_id``), or None.

    ``end_id`` unless None or ``-1``; for an EOS set, its first id
    (:func:`impls.params.end_id_set`, which drops ``-1``).
    """
    ids = end_id_set(row.end_id)
    return ids[0] if ids else None


def generation_config(row: Row) -> dict:
    """The generation-config fields the engine is told about: ``{"eos_token_id": [ids]}`` or ``{}``.

    Only for an EOS set (``end_id`` given as an array): every id of
    :func:`impls.params.end_id_set`, as a model's ``generation_config.json``
    lists them. ``SamplingParams.update_from_generation_config``
    (sampling_params.py@v0.32.0) drops the :func:`eos_id` from the list, adds
    the rest to ``all_stop_token_ids`` and, unless ``ignore_eos``, to
    ``stop_token_ids``. A single ``end_id`` gives ``{}``, as before.
    """
    if not isinstance(row.end_id, (list, tuple)):
        return {}
    ids = end_id_set(row.end_id)
    return {"eos_token_id": list(ids)} if ids else {}


def sampling_kwargs(row: Row):
    """The ``SamplingParams(**kwargs)`` arguments for ``row``.

    Parameters
    ----------
    row : Row

    Returns
    -------
    dict
        Keys among ``temperature, top_k, top_p, min_p, repetition_penalty,
        presence_penalty, frequency_penalty, logit_bias, min_tokens,
        ignore_eos, bad_words, stop_token_ids, allowed_token_ids, max_tokens,
        seed, logprobs, extra_args`` (``token_bitmask`` is not a ``SamplingParams`` argument:
        :func:`impls.vllm.engine.make_params` marks the request structured).
        Unset row fields are left out so that the ``SamplingParams`` class
        defaults apply (``max_tokens``: see the module docstring). Floats
        are coerced with ``float`` and ints with ``int``.
    """
    kw: dict = {}
    for name in ("temperature", "top_p", "min_p", "repetition_penalty", "presence_penalty", "frequency_penalty"):
        v = getattr(row, name)
        if v is not None:
            kw[name] = float(v)
    if row.top_k is not None:
        kw["top_k"] = int(row.top_k)
    if row.logit_bias:
        kw["logit_bias"] = {int(t): float(v) for t, v in row.logit_bias}
    if row.min_length is not None:
        kw["min_tokens"] = int(row.min_length)
    if row.ignore_eos:
        kw["ignore_eos"] = True
    if row.bad_words:
        kw["bad_words"] = [bad_word_text(i) for i in range(len(row.bad_words))]
    if row.stop_words:
        kw["stop_token_ids"] = [int(w[0]) for w in row.stop_words if len(w) == 1]
    if row.allowed_token_ids is not None:
        kw["allowed_token_ids"] = [int(t) for t in row.allowed_token_ids]
    if row.max_new_tokens is not None:
        kw["max_tokens"] = int(row.max_new_tokens)
    elif row.max_seq_len is not None:
        kw["max_tokens"] = None
    if row.seed is not None:
        kw["seed"] = int(row.seed)
    if row.logits_processors:
        kw["extra_args"] = {PROCESSORS_KEY: processors.to_dicts(row.logits_processors)}
    kw["logprobs"] = int(row.logprobs) if row.logprobs is not None else 0
    if row.logprob_token_ids is not None:
        kw["logprob_token_ids"] = [int(t) for t in row.logprob_token_ids]
        if row.logprobs is None:   # SamplingParams.get_num_logprobs: the count the ids imply
            kw["logprobs"] = len(row.logprob_token_ids)
    return kw



def stop_kwargs(req) -> dict:
    """The ``SamplingParams`` stop-string arguments of a scenario request (SEMANTICS §1.8a).

    Parameters
    ----------
    req : impls.reference.scenario_types.RequestSpec

    Returns
    -------
    dict
        ``stop`` (the request's strings, in order) and ``include_stop_str_in_output``
        when the request sets them; empty otherwise (the ``SamplingParams`` defaults:
        no stop strings, the stop string left out of the text).
    """
    kw: dict = {}
    if req.stop:
        kw["stop"] = list(req.stop)
    if req.include_stop_str_in_output:
        kw["include_stop_str_in_output"] = True
    return kw


def unsupported_reason(row: Row) -> Optional[str]:
    """Why vLLM's sampler cannot express ``row``, or None.

    Returns
    -------
    str or None
        A reason for: beam search (``LLM.beam_search`` is a separate
        search loop over ``logprobs``, not the ``Sampler``); top-p decay (no
        such parameter in ``SamplingParams``); ``prompt_ignore_length`` and
        no-repeat-ngram (no such parameters); a multi-token stop word given as
        token ids (``SamplingParams.stop`` holds strings matched by the
        detokenizer; only single tokens are ``stop_token_ids``); an empty stop
        word (no spelling: ``stop_token_ids`` are single ids).
    """
    if row.use_beam_search:
        return "beam search: vLLM's beam search (LLM.beam_search) is a loop outside the Sampler"
    if row.top_p_decay is not None or row.top_p_min is not None or row.top_p_reset_ids:
        return "top-p decay: SamplingParams has no such parameter"
    if row.prompt_ignore_length is not None:
        return "prompt_ignore_length: SamplingParams has no such parameter"
    if active(row.no_repeat_ngram_size):
        return "no-repeat-ngram: SamplingParams has no such parameter"
    if any(len(w) != 1 for w in row.stop_words):
        return ("stop words of other than one token: vLLM matches stop strings in the detokenizer; only single "
                "tokens are stop_token_ids")
    return None


# VLLMValidationError messages of vLLM 0.32.0 (sampling_params.py, renderers/base.py)
# -> our error kinds (first match wins).
_MESSAGE_KINDS = (
    ("when using greedy sampling", "invalid_n"),  # SamplingParams._verify_greedy_sampling: n > 1 with T = 0
    ("stop cannot contain", "invalid_stop_words"),
    ("allowed_token_ids", "invalid_allowed_token_ids"),
    ("logprob_token_ids", "invalid_logprobs"),
    ("temperature", "invalid_temperature"),
    ("top_p", "invalid_top_p"),
    ("top_k", "invalid_top_k"),
    ("min_p", "invalid_min_p"),
    ("presence_penalty", "invalid_penalty"),
    ("frequency_penalty", "invalid_penalty"),
    ("repetition_penalty", "invalid_penalty"),
    ("min_tokens", "invalid_length"),
    ("max_tokens", "invalid_length"),
    ("logit_bias", "invalid_logit_bias"),
    ("stop_token_ids", "invalid_stop_words"),
    ("bad_words", "invalid_bad_words"),
    ("bad", "invalid_bad_words"),
    ("Token id", "invalid_token_id"),
    ("logprobs", "invalid_logprobs"),
)


def classify_validation_error(e: Exception) -> str:
    """Map a vLLM validation error (``VLLMValidationError`` / ``ValueError``) to an error kind.

    Uses the error's ``parameter`` attribute when vLLM sets it, else the
    message (the parameter's name is in every message of
    ``SamplingParams._verify_args``@v0.32.0).

    Returns
    -------
    str
        One of the kinds of ``cases/README.md``, or ``"invalid_request"``.
    """
    param = getattr(e, "parameter", None)
    return error_kind(f"{param or ''} {e}", _MESSAGE_KINDS, "invalid_request")
