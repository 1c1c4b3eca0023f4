"""Stop strings on a toy tokenizer's text (SEMANTICS §1.8a).

A request's ``stop`` strings are looked for in text, not in token ids: the text of a
sequence is :meth:`.toy_tokenizer.ToyTokenizer.text` of its tokens (special tokens add
nothing), so a stop string may span two or more tokens, or lie inside one token with text
after it. After each generated token, :func:`find_stop` says whether a stop string ends in
the text that token added; :func:`output_text` is the request's output text, cut at the
match when the stop string finished it.

The rule and the profile fields it reads:

1. The searched text is the generated tokens' text, preceded by the prompt's text where
   ``profile.stop_words_see_prompt`` (so a match may start in the prompt); under
   ``profile.stop_strings_see_special`` a special token's text is part of it (the output
   text still leaves it out).
2. A stop string matches at a step when an occurrence of it ends inside the text the new
   token added (``end`` in ``(len(H) - len(piece), len(H)]``, ``H`` the searched text):
   an occurrence that ended earlier was judged at its own step; a token with no text
   (special) completes nothing. An empty stop string (accepted only under a profile
   whose ``validation_skips`` has ``empty_stop_string``) is in every text: it matches at
   once.
3. Under ``profile.stop_strings_after_min_length`` nothing matches while at most
   ``min_length`` tokens are generated.
4. Several matches: ``profile.stop_string_pick`` ``"earliest_end"`` takes the occurrence
   that ends first (its earliest one), ties by list order; ``"list_order"`` the first
   stop string of the list that matches.
5. Whether the match finishes the request is :func:`.finish.finish_reason`'s
   ``"stop_words"`` place in ``profile.finish_order``. Only then is the output text cut
   (``profile.stop_string_trim == "text"``): at the match's start, or at its end with
   ``include_stop_str_in_output`` — what the last token adds after the match is cut
   either way — never before the generated text's start; ``"start"``: at the match's
   start whatever ``include_stop_str_in_output`` says; ``"first_occurrence"``: at the
   first occurrence of the matched string in the output text (its end with
   ``include_stop_str_in_output``), not at all when the output text lacks it. The tokens
   are never cut.

Sources: vLLM 0.32.0 ``v1/engine/detokenizer.py`` (``check_stop_strings``,
``BaseIncrementalDetokenizer.update``); transformers 5.24.0
``generation/stopping_criteria.py`` ``StopStringCriteria`` (a match must overlap the final
token; input_ids include the prompt); llama-cpp-python 0.3.36 ``llama_cpp/llama.py``
``Llama._create_completion`` (``"start"``: the text cut before the stop string); SGLang
0.5.23 ``srt/managers/schedule_batch.py`` ``Req.tail_str`` (special tokens' text searched) and
``srt/managers/detokenizer_manager.py`` ``DetokenizerManager.trim_matched_stop``
(``"first_occurrence"``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

from ..profiles import Profile
from .toy_tokenizer import ToyTokenizer

__all__ = ["StopMatch", "find_stop", "output_text"]


@dataclass(frozen=True)
class StopMatch:
    """A stop string found at one step.

    Attributes
    ----------
    string : str
        The stop string (vLLM's ``stop_reason``).
    start, end : int
        Its occurrence in the generated text: ``[start, end)``; ``start`` is negative
        when the occurrence begins in the prompt's text.
    """

    string: str
    start: int
    end: int


def find_stop(tok: ToyTokenizer, stop: Sequence[str], prompt: Sequence[int], generated: Sequence[int],
              profile: Profile, min_length: Optional[int] = None) -> Optional[StopMatch]:
    """The stop string that matches once the last token of ``generated`` is appended, or None.

    Parameters
    ----------
    tok : ToyTokenizer
    stop : sequence of str
        The request's stop strings, in its order.
    prompt : sequence of int
    generated : sequence of int
        The generated tokens, the new one last (at least one).
    profile : Profile
        Reads ``stop_words_see_prompt``, ``stop_string_pick``,
        ``stop_strings_after_min_length``, ``stop_strings_see_special``.
    min_length : int, optional
        The request's ``min_length`` (None: 0).

    Returns
    -------
    StopMatch or None
        Positions relative to the generated text (module docstring, rules 1-4).
    """
    if not stop or not generated:
        return None
    if profile.stop_strings_after_min_length and len(generated) <= (min_length or 0):
        return None
    if profile.stop_strings_see_special:
        text, piece = (lambda ids: "".join(tok.vocab[int(t)] for t in ids)), (lambda t: tok.vocab[int(t)])
    else:
        text, piece = tok.text, tok.piece
    gen_text = text(generated)
    lead = text(prompt) if profile.stop_words_see_prompt else ""
    hist = lead + gen_text
    new = len(piece(generated[-1]))
    found = []
    for order, s in enumerate(stop):
        if s == "":
            found.append((len(hist) - new, order, StopMatch(s, len(gen_text) - new, len(gen_text) - new)))
            continue
        if new == 0:
            continue
        i = hist.find(s, max(0, len(hist) - new - len(s) + 1))
        if i == -1:
            continue
        end = i + len(s)
        found.append((end, order, StopMatch(s, i - len(lead), end - len(lead))))
    if not found:
        return None
    if profile.stop_string_pick == "list_order":
        return min(found, key=lambda f: f[1])[2]
    return min(found, key=lambda f: (f[0], f[1]))[2]


def output_text(tok: ToyTokenizer, generated: Sequence[int], match: Optional[StopMatch], include: bool,
                profile: Profile) -> str:
    """The output text of a request: its tokens' text, cut at ``match`` (module docstring, rule 5).

    Parameters
    ----------
    tok : ToyTokenizer
    generated : sequence of int
        Every generated token (none is ever dropped).
    match : StopMatch or None
        The stop string that finished the request (None: it finished otherwise, or not).
    include : bool
        ``include_stop_str_in_output`` (not read under ``stop_string_trim = "start"``).
    profile : Profile
        Reads ``stop_string_trim``.

    Returns
    -------
    str
    """
    text = tok.text(generated)
    if match is None or profile.stop_string_trim == "none":
        return text
    if profile.stop_string_trim == "first_occurrence":
        pos = text.find(match.string)
        return text if pos == -1 else text[:pos + len(match.string) if include else pos]
    if profile.stop_string_trim == "start":
        include = False
    return text[:max(0, match.end if include else match.start)]
