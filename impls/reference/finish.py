"""Finish reasons after a token is appended (SEMANTICS §1.8, "finish-reason ordering")."""

from __future__ import annotations

from ..base import Row
from ..params import end_id_set
from ..profiles import Profile

__all__ = ["finish_reason", "END_ID", "LENGTH", "STOP_WORDS", "NOT_FINISHED"]

END_ID, LENGTH, STOP_WORDS, NOT_FINISHED = "end_id", "length", "stop_words", "none"


def _ends_with(hist: list, word: list) -> bool:
    return len(word) <= len(hist) and hist[len(hist) - len(word):] == list(word)


def finish_reason(row: Row, token: int, profile: Profile, stop_string: bool = False) -> str:
    """Finish reason of ``row`` once ``token`` is appended to ``generated``.

    Conditions: END_ID if ``token`` is an id of the EOS set
    (:func:`impls.params.end_id_set`: the one ``end_id``, or any id of an
    array) and not ``ignore_eos``; under
    ``profile.end_id_set_others_reason == "stop_words"`` only the set's first
    id is END_ID and the others count as one-token stop words (vLLM: the
    generation config's EOS ids join ``stop_token_ids``); LENGTH if
    ``len(generated) >= max_new_tokens`` or
    ``len(prompt) + len(generated) >= max_seq_len``; STOP_WORDS if the
    history ends with a stop word (``prompt + generated`` when
    ``profile.stop_words_see_prompt``, so a match may straddle the prompt
    boundary; multi-token words match across steps), or ``stop_string``
    says a stop string matched at this step (:func:`.stop_strings.find_stop`,
    SEMANTICS §1.8a: stop strings take the same place). With neither length
    set, ``profile.unset_max_new_tokens`` applies (Hugging Face: 20); with
    ``profile.max_new_tokens_overrides_max_seq_len`` a set
    ``max_new_tokens`` drops the ``max_seq_len`` test. Under
    ``profile.ignore_eos_scope == "stop_tokens"`` ``ignore_eos`` also keeps
    one-token stop words from finishing. The first condition in
    ``profile.finish_order`` that holds wins (trtllm: END_ID > LENGTH >
    STOP_WORDS, so an EOS exactly at the length limit is END_ID); under
    ``profile.stop_strings_first`` a matched stop string wins before it is
    consulted (SGLang 0.5.23 ``srt/managers/schedule_batch.py``
    ``Req.update_finish_state``).

    Returns
    -------
    str
        ``"end_id"``, ``"length"``, ``"stop_words"`` or ``"none"``.

    Source: seed 000 § 结束判定 ("Order matches handle_stop_criteria: END_ID,
    then LENGTH, then STOP_WORDS"); an EOS set: SEMANTICS §1.8.
    """
    if stop_string and profile.stop_strings_first:
        return STOP_WORDS
    gen = list(row.generated) + [int(token)]
    max_new, max_seq = row.max_new_tokens, row.max_seq_len
    if max_new is None and max_seq is None:
        max_new = profile.unset_max_new_tokens
    if max_new is not None and profile.max_new_tokens_overrides_max_seq_len:
        max_seq = None
    hist = list(row.prompt) + gen if profile.stop_words_see_prompt else gen
    eos = () if row.ignore_eos else end_id_set(row.end_id)
    ends, stops = (eos, ()) if profile.end_id_set_others_reason == END_ID else (eos[:1], eos[1:])
    token = int(token)
    checks = {
        END_ID: token in ends,
        LENGTH: (max_new is not None and len(gen) >= max_new)
        or (max_seq is not None and len(row.prompt) + len(gen) >= max_seq),
        STOP_WORDS: stop_string or token in stops or any(_ends_with(hist, w) for w in row.stop_words
                                          if not (row.ignore_eos and profile.ignore_eos_scope == "stop_tokens"
                                                  and len(w) == 1)),
    }
    for reason in profile.finish_order:
        if checks[reason]:
            return reason
    return NOT_FINISHED
