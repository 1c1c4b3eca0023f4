"""Translation of a :class:`~impls.base.Row` into Hugging Face ``generate`` arguments.

Pure Python: nothing here imports transformers, so :mod:`impls.transformers`
imports (and can report ``n/a`` / ``skip``) where transformers is missing.

Every mapping below names the transformers 5.24.0 code that consumes the
argument (paths are relative to ``src/transformers/generation/`` in
huggingface/transformers@v5.24.0):

==========================  ==========================================================
Row field                   Hugging Face spelling
==========================  ==========================================================
``do_sample``               ``do_sample`` when the row sets it; unset: False when
                            ``temperature == 0`` (how a transformers user asks for
                            greedy: ``generate`` defaults to ``do_sample=False``,
                            GREEDY_SEARCH, and only warns about the temperature),
                            else True iff any of temperature, top_k, top_p, min_p is
                            set (the harness convention of ``Profile.mode_source ==
                            "do_sample"``): see :func:`resolve_do_sample`
``temperature``             ``temperature`` -> ``TemperatureLogitsWarper`` (built iff
                            ``!= 1.0``, utils.py ``_get_logits_processor``)
``top_k``                   ``top_k`` -> ``TopKLogitsWarper`` (built iff ``!= 0``;
                            unset: 50 from ``GenerationConfig._get_default_generation_params``)
``top_p``                   ``top_p`` -> ``TopPLogitsWarper`` (built iff ``< 1.0``)
``min_p``                   ``min_p`` -> ``MinPLogitsWarper`` (built iff not None)
``typical_p``               ``typical_p`` -> ``TypicalLogitsWarper`` (built iff ``< 1.0``)
``repetition_penalty``      ``repetition_penalty`` -> ``RepetitionPenaltyLogitsProcessor``
``prompt_ignore_length``    a custom ``RepetitionPenaltyLogitsProcessor(penalty,
                            prompt_ignore_length=n)`` passed as ``logits_processor``;
                            ``_merge_criteria_processor_list`` puts it in the slot of
                            the default one (the route of that class's docstring)
``logit_bias``              ``sequence_bias`` with one-token sequences
                            -> ``SequenceBiasLogitsProcessor``
``bad_words``               ``bad_words_ids`` -> ``NoBadWordsLogitsProcessor``
``allowed_token_ids``       ``prefix_allowed_tokens_fn`` returning the list at every step ->
                            ``PrefixConstrainedLogitsProcessor`` (single steps only)
``no_repeat_ngram_size``    ``no_repeat_ngram_size`` -> ``NoRepeatNGramLogitsProcessor``
``min_length``              ``min_new_tokens`` (generated tokens only)
                            -> ``MinNewTokensLengthLogitsProcessor`` (and the
                            ``MinLengthLogitsProcessor`` that ``_prepare_generated_length``
                            derives from it)
``end_id``                  ``eos_token_id`` (``-1``/None: none) -> ``EosTokenCriteria``;
                            an EOS set (an array) is passed as the list of its ids
                            (``eos_token_id: int | list[int]``): ``EosTokenCriteria``
                            stops on any, ``MinNewTokensLengthLogitsProcessor`` bans
                            all, ``NoBadWordsLogitsProcessor`` drops any one-token word
                            equal to one
``ignore_eos``              ``eos_token_id=None`` (transformers has no ignore-EOS flag)
``max_new_tokens``          ``max_new_tokens`` -> ``MaxLengthCriteria``
``max_seq_len``             ``max_length`` (prompt + generated) -> ``MaxLengthCriteria``
``stop_words`` (1 token)    a separate ``EosTokenCriteria`` (stopping_criteria.py)
``seed``                    ``transformers.set_seed(seed)`` before the draw from torch's
                            global generator (trainer_utils.py; refuses seeds outside
                            ``[0, 2**32)``: ``invalid_seed``)
``logits_processors``       one :class:`impls.transformers.hf.CaseProcessors` passed as
                            ``logits_processor``: ``_merge_criteria_processor_list``
                            appends it after HF's processors, before the warpers
==========================  ==========================================================

Fields transformers cannot express make :func:`unsupported_reason` return a
reason (the harness reports ``n/a``).
"""

from __future__ import annotations

from typing import Optional, Union

from ..base import Row, active
from ..params import end_id_set

__all__ = ["resolve_do_sample", "end_ids", "generate_kwargs", "unsupported_reason", "SUPPORTED_FEATURES",
           "SCENARIO_FEATURES"]

#: Features (names from :data:`impls.base.FEATURES`) the adapter can express.
SUPPORTED_FEATURES = frozenset({
    "temperature", "top_k", "top_p", "min_p", "typical_p", "repetition_penalty", "prompt_ignore_length",
    "logit_bias", "min_length", "bad_words", "no_repeat_ngram", "end_id", "end_id_set", "ignore_eos",
    "stop_words", "max_new_tokens", "max_seq_len", "seed", "logprobs", "processed_logits",
    "low_precision_logits", "finish_reason", "allowed_token_ids", "logprobs_mode", "logprob_token_ids",
    "logits_processors",
})

#: Features a scenario (:mod:`.scenario`, ``generate()`` per request) may need: the single-step
#: mapping's less what only a single-step row has (logprobs, processed logits, low-precision
#: logits: a scenario's scripted model gives float32 rows and its truths hold no logprobs),
#: plus beam search (:mod:`.beam`); ``allowed_token_ids`` (``prefix_allowed_tokens_fn``) is wired
#: into the single-step processors only; stop strings go through generate(stop_strings=..., tokenizer=...);
#: parallel sampling (``n``) through generate(num_return_sequences=n).
SCENARIO_FEATURES = ((SUPPORTED_FEATURES - {"logprobs", "processed_logits", "low_precision_logits",
                                           "allowed_token_ids", "logprobs_mode", "logprob_token_ids"})
                     | {"beam_search", "stop_strings", "n"})


def resolve_do_sample(row: Row) -> bool:
    """Hugging Face's ``do_sample`` for ``row``, as a transformers user would write the row.

    1. ``row.do_sample`` when the row sets it (so ``do_sample = True`` with
       ``temperature = 0`` reaches ``TemperatureLogitsWarper``, which
       rejects it: ``invalid_temperature``);
    2. else False when ``temperature == 0`` (``-0.0`` included): greedy;
    3. else True iff any of ``temperature``, ``top_k``, ``top_p``,
       ``min_p`` is set (not None).

    Returns
    -------
    bool

    Notes
    -----
    ``GenerationConfig._get_default_generation_params`` (configuration_utils.py
    @v5.24.0) defaults ``do_sample`` to False, and
    ``GenerationConfig.get_generation_mode`` makes ``do_sample is not True``
    with one beam GREEDY_SEARCH; ``GenerationConfig.validate`` only records a
    "minor issue" (a logged warning unless ``strict``) for a temperature set
    without ``do_sample``. So ``generate(temperature=0.0)`` decodes greedily,
    and no transformers user who wants that token sets ``do_sample=True``
    (that raises): rule 2 maps the engine-neutral "temperature 0 is greedy"
    to that call, whatever top_k/top_p/min_p say (``_get_logits_processor``
    builds no warper without ``do_sample``, so they are neither applied nor
    validated). Rule 3 is this harness's convention so that engine-neutral
    cases (which never set ``do_sample``) sample when they give sampling
    parameters. The ``hf`` profile says the same
    (``explicit_greedy = {"temperature_0"}`` under ``mode_source =
    "do_sample"``).
    """
    if row.do_sample is not None:
        return bool(row.do_sample)
    if row.temperature is not None and row.temperature == 0:
        return False
    return any(v is not None for v in (row.temperature, row.top_k, row.top_p, row.min_p))


def end_ids(row: Row) -> Union[int, list, None]:
    """The ``eos_token_id`` given to transformers: an int, a list of ints (an EOS set), or None.

    None when ``end_id`` is None or ``-1`` (no end id), an EOS set holds no
    id but ``-1``, or ``ignore_eos`` is set: transformers has no ignore-EOS
    switch, and an EOS id always builds ``EosTokenCriteria`` (utils.py
    ``_get_stopping_criteria``@v5.24.0), so not giving one is the way to
    generate past it. An EOS set is the list of
    :func:`impls.params.end_id_set` (``eos_token_id`` takes ``int |
    list[int]``; ``_prepare_special_tokens`` makes either a 1-D tensor).
    """
    ids = end_id_set(row.end_id)
    if not ids or row.ignore_eos:
        return None
    return list(ids) if isinstance(row.end_id, (list, tuple)) else ids[0]


def _float(v):
    # Row fields are floats; a TOML integer (``temperature = 2``) would make
    # TemperatureLogitsWarper / RepetitionPenaltyLogitsProcessor raise
    # "has to be a strictly positive float" (isinstance(x, float) checks).
    return None if v is None else float(v)


def generate_kwargs(row: Row) -> dict:
    """The ``generate(**kwargs)`` generation arguments for ``row``.

    Parameters
    ----------
    row : Row

    Returns
    -------
    dict
        Keys among ``do_sample, temperature, top_k, top_p, min_p, typical_p,
        repetition_penalty, no_repeat_ngram_size, sequence_bias,
        bad_words_ids, eos_token_id, min_new_tokens, max_new_tokens,
        max_length``; unset row fields are left out so that transformers'
        own defaults apply. Floats are coerced with ``float`` and ints with
        ``int`` (see the module docstring). ``prompt_ignore_length`` and
        ``stop_words`` are not generation-config fields: see
        :mod:`impls.transformers.hf`.
    """
    kw: dict = {"do_sample": resolve_do_sample(row)}
    for name in ("temperature", "top_p", "min_p", "typical_p", "repetition_penalty"):
        v = getattr(row, name)
        if v is not None:
            kw[name] = _float(v)
    if row.top_k is not None:
        kw["top_k"] = int(row.top_k)
    if row.no_repeat_ngram_size is not None:
        kw["no_repeat_ngram_size"] = int(row.no_repeat_ngram_size)
    if row.logit_bias:
        kw["sequence_bias"] = [[[int(t)], float(v)] for t, v in row.logit_bias]
    if row.bad_words:
        kw["bad_words_ids"] = [[int(t) for t in w] for w in row.bad_words]
    kw["eos_token_id"] = end_ids(row)
    if row.min_length is not None:
        kw["min_new_tokens"] = int(row.min_length)
    if row.max_new_tokens is not None:
        kw["max_new_tokens"] = int(row.max_new_tokens)
    if row.max_seq_len is not None:
        kw["max_length"] = int(row.max_seq_len)
    return kw



def unsupported_reason(row: Row) -> Optional[str]:
    """Why transformers cannot express ``row``, or None.

    Returns
    -------
    str or None
        A reason for: beam search (``_beam_search`` keeps beams across steps;
        one step of our width-1 beam has no ``generate`` spelling); presence
        or frequency penalty (no such processor in logits_process.py@v5.24.0);
        top-p decay (no such warper); a multi-token stop word given as token
        ids (``StopStringCriteria`` matches strings through a tokenizer);
        ``ignore_eos`` together with a ``min_length`` ban of the end id or
        an EOS set (the only way not to stop at EOS is ``eos_token_id=None``,
        which also removes the ids ``MinNewTokensLengthLogitsProcessor``
        bans).
    """
    if row.use_beam_search:
        return "beam search: transformers runs beams across steps (_beam_search); one step has no generate() spelling"
    if active(row.presence_penalty) or active(row.frequency_penalty):
        return "presence/frequency penalty: transformers 5.24 has no such logits processor"
    if row.top_p_decay is not None or row.top_p_min is not None or row.top_p_reset_ids:
        return "top-p decay: transformers has no such warper"
    if any(len(w) > 1 for w in row.stop_words):
        return "multi-token stop words as token ids: transformers matches stop strings through a tokenizer"
    if row.logprob_token_ids is not None and any(not 0 <= int(t) < row.vocab for t in row.logprob_token_ids):
        return ("logprob_token_ids outside the vocabulary: transformers has no such parameter (the adapter reads "
                "the ids from output_logits / output_scores, which validates nothing)")
    if row.allowed_token_ids is not None and any(int(t) < 0 for t in row.allowed_token_ids):
        return ("a negative id in allowed_token_ids: PrefixConstrainedLogitsProcessor writes mask[..., ids] = 0, "
                "so -1 silently allows the last token of the vocabulary (no rule modelled)")
    if row.ignore_eos and row.min_length and end_id_set(row.end_id):
        return ("ignore_eos with min_length: transformers has no ignore-EOS flag; eos_token_id=None also "
                "drops the id MinNewTokensLengthLogitsProcessor would ban")
    return None
