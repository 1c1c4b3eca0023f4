"""Translation of a :class:`~impls.base.Row` into SGLang ``SamplingParams`` arguments.

Pure Python: nothing here imports SGLang, so :mod:`impls.sglang` imports (and reports ``n/a`` /
``skip``) where SGLang is missing. Paths are relative to ``python/sglang/srt/`` of
sgl-project/sglang@v0.5.23 (the wheel ``sglang-0.5.23``):

==========================  ==============================================================
Row field                   SGLang spelling
==========================  ==============================================================
``temperature``             ``temperature`` (unset: the class default 1.0;
                            ``0 <= T < 1e-6`` becomes ``T = 1, top_k = 1`` in
                            ``sampling/sampling_params.py SamplingParams.__post_init__``)
``top_k``                   ``top_k`` (unset: ``TOP_K_ALL``; ``-1`` also means all; ``0`` is
                            rejected by ``SamplingParams.verify``)
``top_p``, ``min_p``        ``top_p`` (unset 1.0), ``min_p`` (unset 0.0)
``repetition_penalty``,     ``repetition_penalty``, ``presence_penalty``,
``presence_penalty``,       ``frequency_penalty`` (``sampling/penaltylib/``: they count
``frequency_penalty``       output tokens only, fed one step at a time)
``logit_bias``              ``logit_bias``, a ``dict[str, float]`` (a token listed twice keeps
                            its last value)
``min_length``              ``min_new_tokens`` (``penaltylib/min_new_tokens.py``: bans the
                            stop ids, EOS ids and the tokenizer's EOS while fewer outputs)
``end_id``                  the request's ``eos_token_ids`` and the tokenizer's
                            ``eos_token_id`` (an EOS set: every id in ``eos_token_ids``, its
                            first as the tokenizer's)
``ignore_eos``              ``ignore_eos``
``stop_words`` (1 token)    ``stop_token_ids`` (multi-token stop words are strings matched on
                            the decoded text: ``n/a``)
``max_new_tokens``          ``max_new_tokens`` (unset: the class default 128)
``seed``                    ``sampling_seed`` (validated by ``SamplingParams.verify``; read
                            only under deterministic inference, which the default server
                            arguments leave off)
``logprobs``                ``top_logprobs_num`` of the batch (``return_logprob`` is always
                            on, so the sampled token's logprob is reported); the adapter asks
                            the vocabulary size, so ``-1`` (every token's logprob) is that
                            list laid out by id (``layers/logprob_processor.py
                            get_top_logprobs_raw``: ``logprobs.topk(max_k)``, no cap)
``logprob_token_ids``       the request's ``token_ids_logprob`` (``Req(token_ids_logprob=)``;
                            ids outside ``[0, V)`` rejected by
                            ``managers/tokenizer_manager.py
                            TokenizerManager._validate_token_ids_logprob``), read by
                            ``layers/logprob_processor.py get_token_ids_logprobs`` from the
                            same logprobs as the top logprobs (after the rewrites, the custom
                            processors and the temperature; clamped to the dtype's ``min``),
                            in the order given; any ``logprobs`` count is accepted beside it
``token_bitmask``           the request's grammar (``Req.grammar``): SGLang's
                            ``constrained/xgrammar_backend.py XGrammarGrammar`` with the
                            matcher stood in by the case's words (``engine.py``); the batch
                            gets ``grammars`` as ``ForwardBatch.init_new`` sets them, and
                            ``SamplingBatchInfo.update_regex_vocab_mask`` / ``apply_logits_bias``
                            apply the mask after the penalties, before the logit bias
                            (xgrammar's ``apply_token_bitmask_inplace``, CPU backend)
``logits_processors``       ``custom_logit_processor`` = :class:`.processors.CaseLogitProcessor`
                            (``CustomLogitProcessor.to_str``; the server argument
                            ``enable_custom_logit_processor`` is on) and ``custom_params``
                            carrying the row's kinds; ``layers/sampler.py
                            apply_custom_logit_processor`` runs it from
                            ``Sampler._preprocess_logits``, after the penalties, the grammar
                            mask and the logit bias, before the temperature, greedy rows
                            included; its state ``n`` is ``len(req.output_ids)``
==========================  ==============================================================

Not expressed: ``allowed_token_ids`` (``SamplingParams`` has no such field; SGLang's only
whitelist-like tool is a grammar). Multi-step scenarios add ``stop`` and ``no_stop_trim``
(``include_stop_str_in_output``) to these arguments (:mod:`.scenario`).

Fields SGLang cannot express make :func:`unsupported_reason` return a reason (the harness
reports ``n/a``).
"""

from __future__ import annotations

from typing import Optional

from ..base import Row, active, error_kind
from ..params import end_id_set

__all__ = ["SUPPORTED_FEATURES", "sampling_kwargs", "unsupported_reason", "classify_validation_error",
           "eos_ids"]

#: Features (names from :data:`impls.base.FEATURES`) the adapter can express.
SUPPORTED_FEATURES = frozenset({
    "temperature", "top_k", "top_p", "min_p", "repetition_penalty", "presence_penalty", "frequency_penalty",
    "logit_bias", "min_length", "end_id", "end_id_set", "ignore_eos", "stop_words", "max_new_tokens", "seed",
    "logprobs", "processed_logits", "low_precision_logits", "finish_reason", "logprob_token_ids",
    "token_bitmask", "logits_processors",
})


def eos_ids(row: Row) -> list:
    """The request's EOS ids (:func:`impls.params.end_id_set`: ``-1``/None give none), first id first."""
    return list(end_id_set(row.end_id))


def sampling_kwargs(row: Row) -> dict:
    """The ``SamplingParams(**kwargs)`` arguments for ``row``.

    Returns
    -------
    dict
        Keys among ``temperature, top_k, top_p, min_p, repetition_penalty, presence_penalty,
        frequency_penalty, logit_bias, min_new_tokens, ignore_eos, stop_token_ids,
        max_new_tokens, sampling_seed``. Unset row fields are left out so that the class
        defaults apply. Floats are coerced with ``float``, ints with ``int``; the seed is passed
        as given (``SamplingParams.verify`` checks its type and range).
    """
    kw: dict = {}
    for name in ("temperature", "top_p", "min_p", "repetition_penalty", "presence_penalty", "frequency_penalty"):
        v = getattr(row, name)
        if v is not None:
            kw[name] = float(v)
    if row.top_k is not None:
        kw["top_k"] = int(row.top_k)
    if row.logit_bias:
        kw["logit_bias"] = {str(int(t)): float(v) for t, v in row.logit_bias}
    if row.min_length is not None:
        kw["min_new_tokens"] = int(row.min_length)
    if row.ignore_eos:
        kw["ignore_eos"] = True
    if row.stop_words:
        kw["stop_token_ids"] = {int(w[0]) for w in row.stop_words if len(w) == 1}
    if row.max_new_tokens is not None:
        kw["max_new_tokens"] = int(row.max_new_tokens)
    if row.seed is not None:
        kw["sampling_seed"] = row.seed
    return kw


def unsupported_reason(row: Row) -> Optional[str]:
    """Why SGLang's sampler cannot express ``row``, or None.

    Returns
    -------
    str or None
        A reason for: beam search (SGLang's ``beam_width`` runs a separate coordinator, not
        driven here); top-p decay, ``prompt_ignore_length``, ``penalty_last_n``, bad words,
        no-repeat-ngram and llama.cpp's samplers (no such ``SamplingParams`` field); an output
        token outside the vocabulary (SGLang's own sampler produced every output token);
        ``max_seq_len`` (the model's context length, a server setting); a stop word of other
        than one token (stop strings are matched on decoded text); an empty stop word.
    """
    if row.use_beam_search:
        return "beam search: SGLang's beam_width requests run in its beam-search coordinator, not the Sampler"
    if row.top_p_decay is not None or row.top_p_min is not None or row.top_p_reset_ids:
        return "top-p decay: SamplingParams has no such parameter"
    if row.prompt_ignore_length is not None:
        return "prompt_ignore_length: SamplingParams has no such parameter"
    if row.penalty_last_n is not None:
        return "penalty_last_n: SGLang's penalizers count every output token (no window)"
    if row.bad_words:
        return "bad words: SamplingParams has no such parameter"
    if active(row.no_repeat_ngram_size):
        return "no-repeat-ngram: SamplingParams has no such parameter"
    for name in ("min_keep", "typical_p", "top_n_sigma", "xtc_probability", "xtc_threshold", "dynatemp_range",
                 "dynatemp_exponent", "dry_multiplier", "dry_base", "dry_allowed_length", "dry_penalty_last_n"):
        if getattr(row, name) is not None:
            return f"{name}: SamplingParams has no such parameter (llama.cpp's sampler)"
    if row.dry_sequence_breakers:
        return "dry_sequence_breakers: SamplingParams has no such parameter (llama.cpp's sampler)"
    if any(not 0 <= int(t) < row.vocab for t in row.generated):
        return ("an output token outside the vocabulary: SGLang's output tokens come from its own sampler (an "
                "id outside [0, V) would crash the penalizers' scatter, and the server never feeds one)")
    if row.max_seq_len is not None:
        return "max_seq_len: the context length is the model's (a server setting), not a request parameter"
    if any(len(w) != 1 for w in row.stop_words):
        return ("stop words of other than one token: SGLang matches stop strings on the decoded text; only single "
                "tokens are stop_token_ids")
    return None


# ValueError messages of SamplingParams.verify / normalize (sampling_params.py@v0.5.23) -> our error
# kinds (first match wins).
_MESSAGE_KINDS = (
    ("token_ids_logprob", "invalid_logprobs"),   # TokenizerManager._validate_token_ids_logprob
    ("temperature", "invalid_temperature"),
    ("top_p", "invalid_top_p"),
    ("top_k", "invalid_top_k"),
    ("min_p", "invalid_min_p"),
    ("frequency_penalty", "invalid_penalty"),
    ("presence_penalty", "invalid_penalty"),
    ("repetition_penalty", "invalid_penalty"),
    ("min_new_tokens", "invalid_length"),
    ("max_new_tokens", "invalid_length"),
    ("logit_bias", "invalid_logit_bias"),
    ("sampling_seed", "invalid_seed"),
)


def classify_validation_error(e: Exception) -> str:
    """Map an SGLang validation error to an error kind of ``cases/README.md``.

    Every message of ``SamplingParams.verify``@v0.5.23 and of
    ``TokenizerManager._validate_token_ids_logprob`` names its parameter; a message naming none
    is ``invalid_request``.
    """
    return error_kind(str(e), _MESSAGE_KINDS, "invalid_request")
