"""Finish reasons on the device: the fused sampler's own stop criteria (profile ``trtllm``).

After a row's token is drawn (SEMANTICS §1.8; seed 000 § 结束判定), in this order of precedence:

1. ``end_id``: the token is an id of the row's EOS set and ``ignore_eos`` is off;
2. ``length``: ``len(generated) + 1 >= max_new_tokens`` or
   ``len(prompt) + len(generated) + 1 >= max_seq_len`` (an unset limit never ends a row);
3. ``stop_words``: ``prompt + generated + [token]`` ends with one of the row's stop words (a
   word may straddle the prompt boundary and span earlier steps);
4. else ``none``.

As TensorRT-LLM evaluates its stop criteria on the device each step from per-row end ids,
length limits, padded stop words and a window of past tokens
(``tensorrt_llm/_torch/pyexecutor/sampler/finish_reasons.py``@770709ac,
``FinishReasonsHandler``), :func:`finish_codes` is a handful of tensor operations on the
tokens' device with no host synchronisation; :func:`pack_finish` is the host's part (each row's
limits, EOS set, stop words and the last ``L - 1`` history tokens as fixed-shape tensors).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from ..base import Row
from ..params import end_id_set

__all__ = ["FinishInputs", "pack_finish", "finish_codes", "REASONS"]

#: Finish reasons by code (:func:`finish_codes`), as a row's ``finish_reason`` output names them.
REASONS = ("none", "end_id", "length", "stop_words")
_PAD = -2   # never a token id, nor the -1 of a rejected row


@dataclass
class FinishInputs:
    """Each row's stop criteria as fixed-shape int64 tensors (:func:`pack_finish`).

    Attributes
    ----------
    end_ids : torch.Tensor
        ``(B, E)``: the EOS set (empty under ``ignore_eos``), padded with -2.
    lengths : torch.Tensor
        ``(B, 4)``: ``len(generated)``, ``len(prompt)``, ``max_new_tokens`` and ``max_seq_len``
        (-1 unset).
    words : torch.Tensor
        ``(B, W, L)``: stop words right-aligned, padded on the left with -2.
    word_lens : torch.Tensor
        ``(B, W)``: each word's length (0: a padding word).
    tail : torch.Tensor
        ``(B, L - 1)``: the last ``L - 1`` tokens of ``prompt + generated``, right-aligned, -2
        where the history is shorter.
    """

    end_ids: torch.Tensor
    lengths: torch.Tensor
    words: torch.Tensor
    word_lens: torch.Tensor
    tail: torch.Tensor


def pack_finish(rows: Sequence[Row], device) -> FinishInputs:
    """The host's part: :class:`FinishInputs` of ``rows`` (validated by admission) on ``device``.

    Parameters
    ----------
    rows : sequence of Row
        Their end ids, ``ignore_eos``, stop words, lengths and histories.
    device : torch.device or str

    Returns
    -------
    FinishInputs
        ``E``, ``W`` and ``L`` are the most end ids, stop words and the longest stop word of any
        row (at least 1 each).
    """
    B = len(rows)
    eos = [() if r.ignore_eos else end_id_set(r.end_id) for r in rows]
    words = [[list(map(int, w)) for w in r.stop_words or ()] for r in rows]
    E = max([len(e) for e in eos] + [1])
    W = max([len(w) for w in words] + [1])
    L = max([len(x) for w in words for x in w] + [1])
    end_ids = torch.full((B, E), _PAD, dtype=torch.int64)
    wt = torch.full((B, W, L), _PAD, dtype=torch.int64)
    wl = torch.zeros((B, W), dtype=torch.int64)
    tail = torch.full((B, L - 1), _PAD, dtype=torch.int64)
    lengths = torch.empty((B, 4), dtype=torch.int64)
    for i, r in enumerate(rows):
        if eos[i]:
            end_ids[i, :len(eos[i])] = torch.tensor(eos[i])
        for j, w in enumerate(words[i]):
            wt[i, j, L - len(w):] = torch.tensor(w)
            wl[i, j] = len(w)
        hist = (list(r.prompt) + list(r.generated))[-(L - 1):] if L > 1 else []
        if hist:
            tail[i, L - 1 - len(hist):] = torch.tensor(hist)
        unset = lambda v: -1 if v is None else int(v)
        lengths[i] = torch.tensor([len(r.generated), len(r.prompt), unset(r.max_new_tokens), unset(r.max_seq_len)])
    dev = torch.device(device)
    return FinishInputs(end_ids.to(dev), lengths.to(dev), wt.to(dev), wl.to(dev), tail.to(dev))


def finish_codes(tokens: torch.Tensor, inp: FinishInputs) -> torch.Tensor:
    """Each row's finish reason once ``tokens`` are appended: ``(B,)`` int64 codes of :data:`REASONS`.

    Parameters
    ----------
    tokens : torch.Tensor
        ``(B,)`` int64 drawn tokens (a rejected row's -1 matches nothing; its code is meaningless).
    inp : FinishInputs
        On the tokens' device.

    Returns
    -------
    torch.Tensor
        ``(B,)`` int64 on the tokens' device: 1 ``end_id``, 2 ``length``, 3 ``stop_words``, 0 ``none``.
    """
    tok = tokens.to(torch.int64)[:, None]
    end = (inp.end_ids == tok).any(-1)
    gen, prompt, max_new, max_seq = (inp.lengths[:, j] for j in range(4))
    length = ((max_new >= 0) & (gen + 1 >= max_new)) | ((max_seq >= 0) & (prompt + gen + 1 >= max_seq))
    seq = torch.cat([inp.tail, tok], 1)[:, None, :]                    # (B, 1, L)
    L = seq.shape[-1]
    inside = torch.arange(L, device=tok.device) >= (L - inp.word_lens)[..., None]   # (B, W, L)
    stop = (((seq == inp.words) | ~inside).all(-1) & (inp.word_lens > 0)).any(-1)
    none = torch.zeros_like(gen)
    return torch.where(end, 1, torch.where(length, 2, torch.where(stop, 3, none)))
