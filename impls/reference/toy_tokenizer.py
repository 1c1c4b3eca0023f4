"""A toy tokenizer defined in a case: each token id's text, so stop strings can be matched with no download.

A scenario's ``[scenario.tokenizer]`` (cases/README.md, "Toy tokenizers") gives the text of
every token id of its model's vocabulary and which ids are special. :class:`ToyTokenizer` is
that table; :meth:`ToyTokenizer.text` is the rule the reference decodes by (SEMANTICS §1.8a):
the concatenation of the tokens' texts, a special token's text left out (the
``skip_special_tokens = True`` of vLLM's ``SamplingParams`` and of ``decode``).

:func:`fast_tokenizer` builds, for the adapters, the same table as a real Hugging Face
tokenizer (``tokenizers`` BPE with no merges, a ``Fuse`` decoder, the special ids as special
added tokens), which vLLM's detokenizer and transformers' ``StopStringCriteria`` read; the
reference never calls it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Optional, Sequence

__all__ = ["ToyTokenizer", "TokenizerError", "make_tokenizer", "fast_tokenizer", "save_fast_tokenizer",
           "PROBE_CHARS"]

#: Characters the adapters' tokenizer gets as extra tokens (ids from ``V`` on) when the case's
#: vocabulary lacks them as one-character tokens: transformers 5.24.0's
#: ``StopStringCriteria.clean_tokenizer_vocab`` (generation/stopping_criteria.py) encodes its
#: ``static_prefix = "abcdef"`` and looks that text up again in each decoded token, so the
#: tokenizer must be able to spell it. The model never emits an id ``>= V``.
PROBE_CHARS = "abcdef"


class TokenizerError(ValueError):
    """A ``[scenario.tokenizer]`` table that is not a toy tokenizer.

    Attributes
    ----------
    field : str
        Where, relative to the table (``"vocab[3]"``, ``"special"``).
    reason : str
    """

    def __init__(self, field: str, reason: str):
        super().__init__(f"{field}: {reason}")
        self.field, self.reason = field, reason


@dataclass(frozen=True)
class ToyTokenizer:
    """Token id -> text, and the special ids.

    Attributes
    ----------
    vocab : tuple of str
        ``vocab[i]`` is the text of token ``i``; ``len(vocab)`` is the vocabulary ``V``.
        Non-empty and pairwise distinct (a tokenizer maps each text to one id).
    special : frozenset of int
        Special token ids (an EOS, typically): their text is left out of decoded text.
    """

    vocab: tuple
    special: frozenset = frozenset()

    @property
    def size(self) -> int:
        """``V``: the number of token ids."""
        return len(self.vocab)

    def piece(self, token: int) -> str:
        """The text ``token`` adds to decoded text: ``""`` for a special id, else its vocabulary entry.

        Raises
        ------
        IndexError
            ``token`` outside ``[0, V)``.
        """
        t = int(token)
        if not 0 <= t < len(self.vocab):
            raise IndexError(f"token {t} outside [0, {len(self.vocab)})")
        return "" if t in self.special else self.vocab[t]

    def text(self, ids: Sequence[int]) -> str:
        """The decoded text of ``ids``: the concatenation of :meth:`piece` of each.

        Source: vLLM 0.32.0 ``SamplingParams.skip_special_tokens = True`` (sampling_params.py), the
        text its ``FastIncrementalDetokenizer`` (v1/engine/detokenizer.py) builds token by token.
        """
        return "".join(self.piece(t) for t in ids)

    def key(self) -> tuple:
        """A hashable identity (engines are cached per tokenizer)."""
        return (self.vocab, tuple(sorted(self.special)))


def make_tokenizer(spec: dict, vocab_size: Optional[int] = None) -> ToyTokenizer:
    """Validate a ``[scenario.tokenizer]`` table and build the :class:`ToyTokenizer`.

    Parameters
    ----------
    spec : dict
        ``{"vocab": [str, ...], "special": [int, ...]}`` (``special`` optional).
    vocab_size : int, optional
        The model's vocabulary; ``vocab`` must have exactly that many entries.

    Raises
    ------
    TokenizerError
        ``vocab`` not a list of strings, of the wrong length, with an empty or a repeated
        entry; ``special`` not a list of distinct ids in ``[0, V)``; an unknown key.
    """
    if not isinstance(spec, dict):
        raise TokenizerError("", "must be a table with vocab (and special)")
    extra = sorted(set(spec) - {"vocab", "special"})
    if extra:
        raise TokenizerError(extra[0], "unknown key (a toy tokenizer has vocab and special)")
    vocab = spec.get("vocab")
    if not isinstance(vocab, list) or not vocab:
        raise TokenizerError("vocab", "required: an array of strings, the text of token id i at index i")
    seen: dict = {}
    for i, t in enumerate(vocab):
        if not isinstance(t, str):
            raise TokenizerError(f"vocab[{i}]", f"{t!r} is not a string")
        if t == "":
            raise TokenizerError(f"vocab[{i}]", "empty: every token has a text")
        if t in seen:
            raise TokenizerError(f"vocab[{i}]", f"{t!r} repeats vocab[{seen[t]}] (a tokenizer maps a text to one id)")
        seen[t] = i
    if vocab_size is not None and len(vocab) != vocab_size:
        raise TokenizerError("vocab", f"has {len(vocab)} entries, the model's vocabulary is {vocab_size}")
    special = spec.get("special", [])
    if not isinstance(special, list):
        raise TokenizerError("special", "an array of token ids")
    for j, s in enumerate(special):
        if isinstance(s, bool) or not isinstance(s, int) or not 0 <= s < len(vocab):
            raise TokenizerError(f"special[{j}]", f"{s!r} is not a token id in [0, {len(vocab)})")
    if len(set(special)) != len(special):
        raise TokenizerError("special", f"lists an id twice: {special}")
    return ToyTokenizer(tuple(vocab), frozenset(int(s) for s in special))


def fast_tokenizer(tok: ToyTokenizer, eos: Optional[int] = None):
    """``tok`` as a Hugging Face fast tokenizer (``transformers.PreTrainedTokenizerFast``).

    A ``tokenizers`` BPE model whose vocabulary is ``tok.vocab`` (text -> id) with no merges,
    decoded by ``decoders.Fuse`` (the tokens' texts concatenated, nothing inserted), the special
    ids registered as special added tokens, and one extra token per character of
    :data:`PROBE_CHARS` the vocabulary lacks, at ids ``V, V + 1, ...``. Decoding ids below ``V``
    with ``skip_special_tokens=True`` gives :meth:`ToyTokenizer.text`. Encoding is not the
    case's business (no merges: text splits into single characters).

    Parameters
    ----------
    tok : ToyTokenizer
    eos : int, optional
        An id whose text becomes the tokenizer's ``eos_token``.

    Returns
    -------
    transformers.PreTrainedTokenizerFast

    Notes
    -----
    Imports ``tokenizers`` and ``transformers`` (the adapters' dependencies).
    """
    from tokenizers import AddedToken, Tokenizer, decoders, models
    from transformers import PreTrainedTokenizerFast

    table = {t: i for i, t in enumerate(tok.vocab)}
    for c in PROBE_CHARS:
        if c not in table:
            table[c] = len(table)
    core = Tokenizer(models.BPE(vocab=table, merges=[]))
    core.decoder = decoders.Fuse()
    core.add_special_tokens([AddedToken(tok.vocab[i], special=True, normalized=False) for i in sorted(tok.special)])
    kw = {}
    if eos is not None and 0 <= int(eos) < tok.size:
        kw["eos_token"] = tok.vocab[int(eos)]
    return PreTrainedTokenizerFast(tokenizer_object=core, clean_up_tokenization_spaces=False, **kw)


def save_fast_tokenizer(tok: ToyTokenizer, directory: str) -> str:
    """Write :func:`fast_tokenizer` of ``tok`` (``tokenizer.json``, ``tokenizer_config.json``) into ``directory``.

    Returns
    -------
    str
        ``directory``.
    """
    fast_tokenizer(tok).save_pretrained(os.fspath(directory))
    return directory
