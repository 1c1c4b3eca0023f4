"""Token bans: min_length end id, bad words, no-repeat-ngram (SEMANTICS §1.4), token masks (§1.4a).

Each function returns the list of token ids to set to ``-inf`` for one row;
:func:`apply_bans` writes them. Histories are ``prompt + generated``.
"""

from __future__ import annotations

import torch

from ..base import Row, RowError
from ..params import bitmask_allows, bitmask_word_count, end_id_set
from ..profiles import Profile

__all__ = ["min_length_bans", "bad_word_bans", "no_repeat_ngram_bans", "apply_bans", "bitmask_bans",
           "apply_allowed_token_ids"]


def min_length_bans(row: Row, profile: Profile) -> list:
    """Ban the end id (every id of an EOS set) while fewer than ``min_length`` tokens exist.

    The count is ``len(generated) + draft_position`` (plus ``len(prompt)``
    when ``profile.min_length_counts_prompt``): a speculative verification
    row counts the drafts ahead of it in its chain, row ``i`` of a
    verification ``i`` of them (``row.draft_position``, 0 for every other
    row; SEMANTICS §4). vLLM masks draft position ``i`` iff ``current_len +
    i < min_tokens`` (``MinTokensLogitsProcessor.apply_with_spec_decode``,
    v1/sample/logits_processor/builtin.py@v0.32.0; not modelled: it leaves
    the stop ids unmasked where masking would make a row all ``-inf``, and
    it masks the bonus row by ``current_len`` alone through ``apply``);
    TensorRT-LLM bans the end id at step ``s`` of a request's rows iff
    ``generated + s < min_length`` (``TokenBanHandler._add_min_length_bans``,
    token_ban.py@0a1f13c0). The penalties and the other bans of a
    verification row still read the finalised history only.

    With ``ignore_eos`` the original end ids are still banned; an end id of
    ``None``/``-1`` bans nothing (a bug once banned token ``V-1``), and so
    do ids outside ``[0, V)`` (a profile may accept them). With
    ``profile.min_length_bans_stop_words`` (vLLM) every one-token stop word
    is banned too.

    Returns
    -------
    list of int
        The ids of :func:`impls.params.end_id_set` in ``[0, V)``, in order
        (and stop words), or ``[]``.

    Source: SEMANTICS §1.4; seed 000 § token_ban (min_length bans EOS from a
    length count, never from token values). An EOS set is banned whole in
    every engine that takes one: transformers ``MinNewTokensLengthLogitsProcessor``
    (``torch.isin`` of the vocabulary against every ``eos_token_id``,
    logits_process.py@v5.24.0) and vLLM ``MinTokensLogitsProcessor``
    (``SamplingParams.all_stop_token_ids``, which holds every id of the set
    whether or not ``ignore_eos``, v1/sample/logits_processor/builtin.py and
    sampling_params.py@v0.32.0).
    """
    if not row.min_length:
        return []
    n = len(row.generated) + int(row.draft_position or 0) + (len(row.prompt) if profile.min_length_counts_prompt else 0)
    if n >= row.min_length:
        return []
    V = row.vocab
    # no end id, or one outside the vocabulary (a profile may accept it): nothing
    out = [t for t in end_id_set(row.end_id) if 0 <= t < V]
    if getattr(profile, "min_length_bans_stop_words", False):
        out += [int(w[0]) for w in row.stop_words if len(w) == 1 and 0 <= w[0] < V]
    return out


def bad_word_bans(row: Row, profile: Profile = None) -> list:
    """Bad words: a one-token word is always banned; a word ``[t0..tk-1]``
    bans ``tk-1`` when ``prompt + generated`` ends with ``[t0..tk-2]`` (the
    prefix may lie in the prompt, unless ``profile.bad_words_see_prompt`` is
    False: then only ``generated`` is matched). With
    ``profile.bad_words_skip_end_id`` a one-token word equal to the end id
    (any id of an EOS set; transformers ``NoBadWordsLogitsProcessor`` filters
    against every ``eos_token_id``) is dropped unless ``ignore_eos``.

    Returns
    -------
    list of int

    Source: SEMANTICS §1.4; seed 000 § token_ban.
    """
    see_prompt = profile is None or profile.bad_words_see_prompt
    hist = (list(row.prompt) if see_prompt else []) + list(row.generated)
    eos = () if row.ignore_eos else end_id_set(row.end_id)
    skip_eos = profile is not None and profile.bad_words_skip_end_id
    out = []
    for w in row.bad_words:
        w = list(w)
        if not w:
            continue  # rejected by validation unless the profile ignores empty words
        if skip_eos and len(w) == 1 and w[0] in eos:
            continue  # Hugging Face drops a one-token bad word equal to the EOS id
        prefix = w[:-1]
        if not prefix or (len(hist) >= len(prefix) and hist[len(hist) - len(prefix):] == prefix):
            out.append(w[-1])
    return out


def no_repeat_ngram_bans(row: Row, vocab: int) -> list:
    """No-repeat-ngram of size ``n``: with prefix = the last ``n-1`` tokens of
    ``prompt + generated``, ban the last token of every earlier n-gram that
    starts with that prefix. ``n = 1`` bans every seen token; None/0 disables.
    Ids outside ``[0, V)`` are never banned.

    Returns
    -------
    list of int

    Source: SEMANTICS §1.4; transformers ``_get_ngrams``/``_calc_banned_ngram_tokens``.
    """
    n = row.no_repeat_ngram_size
    if not n:
        return []
    hist = list(row.prompt) + list(row.generated)
    if len(hist) < n:
        return []
    prefix = hist[len(hist) - (n - 1):] if n > 1 else []
    out = set()
    for i in range(len(hist) - n + 1):
        if hist[i:i + n - 1] == prefix:
            t = hist[i + n - 1]
            if 0 <= t < vocab:
                out.add(t)
    return sorted(out)


def apply_bans(x: torch.Tensor, banned: list) -> torch.Tensor:
    """Return a copy of ``x`` (``(V,)``) with ``banned`` ids set to ``-inf``."""
    if not banned:
        return x
    y = x.clone()
    y[torch.tensor(sorted(set(banned)), dtype=torch.long, device=x.device)] = float("-inf")
    return y


def bitmask_bans(row: Row) -> list:
    """The ids a row's grammar bitmask bans: every id in ``[0, V)`` whose bit is 0 (§1.4a).

    Returns
    -------
    list of int
        Ascending; ``[]`` without a bitmask.

    Raises
    ------
    RowError
        ``invalid_token_bitmask``: fewer than ``ceil(V / 32)`` words.

    Source: xgrammar 0.2.8 ``apply_token_bitmask_inplace`` (a 0 bit sets the logit to -inf), as
    vLLM 0.32.0 ``apply_grammar_bitmask`` and SGLang 0.5.23 ``XGrammarGrammar.apply_vocab_mask``
    call it; :func:`impls.params.bitmask_allows` reads the bits.
    """
    if row.token_bitmask is None:
        return []
    V = row.vocab
    if len(row.token_bitmask) < bitmask_word_count(V):
        # the case schema refuses such a mask; a row given through the API gets its row's error
        raise RowError("invalid_token_bitmask", f"token_bitmask has {len(row.token_bitmask)} words; a vocabulary "
                                                f"of {V} needs {bitmask_word_count(V)}")
    allowed = set(bitmask_allows(row.token_bitmask, V))
    return [j for j in range(V) if j not in allowed]


def apply_allowed_token_ids(x: torch.Tensor, row: Row, profile: Profile) -> torch.Tensor:
    """Ban every id ``allowed_token_ids`` does not list (§1.4a).

    Parameters
    ----------
    x : torch.Tensor
        ``(V,)`` logits at the ``"allowed_token_ids"`` step of ``profile.rewrite_order``.
    row : Row
        ``allowed_token_ids`` None: ``x`` unchanged. Ids outside ``[0, V)`` are left out
        (validation rejects them first: ``invalid_allowed_token_ids``).
    profile : Profile
        Reads ``allowed_token_ids_force``: when every allowed id is already ``-inf``
        (banned before this step), the allowed ids get logit 0, a uniform choice among
        them, instead of an empty row (Hugging Face ``PrefixConstrainedLogitsProcessor``:
        "force them with a score of 0 so the constraint holds").

    Returns
    -------
    torch.Tensor
        ``(V,)``: a copy with the unlisted ids at ``-inf`` (vLLM's ``masked_fill_``, so a NaN
        or ``+inf`` outside the list is banned too).

    Source: vllm-project/vllm:vllm/v1/sample/sampler.py@v0.32.0 ``Sampler.apply_logits_processors``
    (``allowed_token_ids_mask``); huggingface/transformers:src/transformers/generation/
    logits_process.py@v5.24.0 ``PrefixConstrainedLogitsProcessor.__call__``.
    """
    if row.allowed_token_ids is None:
        return x
    V = x.shape[-1]
    allowed = torch.zeros(V, dtype=torch.bool, device=x.device)
    ids = sorted({int(t) for t in row.allowed_token_ids if 0 <= int(t) < V})
    if ids:
        allowed[torch.tensor(ids, dtype=torch.long, device=x.device)] = True
    y = torch.where(allowed, x, torch.full_like(x, float("-inf")))
    if profile.allowed_token_ids_force and ids and not (y[allowed] > float("-inf")).any():
        y = torch.where(allowed, torch.zeros_like(x), y)
    return y
