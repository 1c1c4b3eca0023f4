"""TensorRT-LLM's finish reasons: its ``FinishReasonsHandler`` driven over a session's steps.

``finish_reasons.py`` (loaded from the checkout, :mod:`.loader`) decides,
for each new token, END_ID, LENGTH, STOP_WORDS or NOT_FINISHED: it writes
stop words, then the length test, then the end id, each overwriting the one
before (``_write_finish_reasons``), so END_ID beats LENGTH beats STOP_WORDS.
:class:`EngineFinish` drives it the way ``TorchSampler`` does
(``sampler.py``: ``setup_sampler_step`` admits the step's new requests with
``setup_new_request_handling`` / ``prepare_for_new_request`` /
``update_for_new_request``; ``sample_async`` calls ``write_finish_reasons``
with each request's token count before the new token, as
``request.max_beam_num_tokens``), on the CPU under
:func:`.loader.cuda_on_cpu`.

What the adapter supplies, as ``LlmRequest`` would (a stand-in request,
:class:`FinishRequest`): the prompt length, ``max_new_tokens`` (unset: no
limit, the profile's ``unset_max_new_tokens`` is None), the end id (-1 under
``ignore_eos`` or when the row has none, as for the token bans), the stop
words as token-id lists and ``get_tokens()`` (prompt + generated). The
handler's ``max_seq_len`` is an engine setting in TensorRT-LLM; a row's
``max_seq_len`` selects a handler made with that value (unset: no limit).

Not driven: the greedy single-step path of newer ``sampler.py`` commits,
which skips the handler and tests END_ID then LENGTH on the host (no stop
words); speculative steps (``max_tokens > 1``); beam search (the
candidate-beams path keeps the adapter's stand-in, :mod:`.cba`).
"""

from __future__ import annotations

from typing import Optional, Sequence

import torch

from ..base import Row
from ..reference.finish import END_ID, LENGTH, NOT_FINISHED, STOP_WORDS
from .loader import FinishReason, cuda_on_cpu

__all__ = ["EngineFinish", "FinishRequest", "NO_LIMIT"]

#: What stands for "no limit" in the handler's int32 length buffers.
NO_LIMIT = 2 ** 31 - 1

_NAMES = {FinishReason.NOT_FINISHED: NOT_FINISHED, FinishReason.END_ID: END_ID, FinishReason.LENGTH: LENGTH,
          FinishReason.STOP_WORDS: STOP_WORDS}


class FinishRequest:
    """The ``LlmRequest`` fields ``FinishReasonsHandler`` reads, for one row.

    ``py_orig_prompt_len``, ``py_max_new_tokens``, ``py_end_id``,
    ``py_stop_words_list`` (None without stop words), ``py_seq_slot``,
    ``py_beam_width`` (1), ``is_context_only_request`` (False) and
    ``get_tokens()`` (one beam: prompt + generated, list of list of int).
    """

    def __init__(self, row: Row):
        self.py_orig_prompt_len = len(row.prompt)
        self.py_max_new_tokens = NO_LIMIT if row.max_new_tokens is None else int(row.max_new_tokens)
        end = row.end_id if row.end_id is not None else -1
        self.py_end_id = -1 if row.ignore_eos else int(end)
        self.py_stop_words_list = [list(map(int, w)) for w in row.stop_words] or None
        self.py_seq_slot = int(row.slot)
        self.py_beam_width = 1
        self.is_context_only_request = False
        self.tokens = [int(t) for t in list(row.prompt) + list(row.generated)]
        #: What makes two rows one request: the same id and the same finish settings.
        self.key = (row.request_id, self.py_orig_prompt_len, self.py_max_new_tokens, self.py_end_id,
                    self.py_stop_words_list)

    def get_tokens(self):
        """Prompt + generated ids of the one beam."""
        return [list(self.tokens)]


class _Handler:
    """One ``FinishReasonsHandler`` (one engine ``max_seq_len``) and the requests it holds, by slot."""

    def __init__(self, cls, max_seq_len: int, slots: int):
        self.cls, self.max_seq_len = cls, max_seq_len
        self.live: dict = {}
        self._make(slots)

    def _make(self, slots: int) -> None:
        # Sizes as TorchSampler starts them: one token per step, one beam, stop-word buffers grown on admission.
        with cuda_on_cpu():
            self.h = self.cls(max_stop_word_length=1, max_num_stop_words=1, max_num_sequences=slots,
                              max_beam_width=1, max_tokens=1, max_seq_len=self.max_seq_len)
        self.slots = slots

    def admit(self, reqs: list) -> None:
        """``setup_sampler_step``'s admission of ``reqs`` (each replaces what its slot held)."""
        for r in reqs:
            self.live[r.py_seq_slot] = r
        h = self.h
        with cuda_on_cpu():
            h.setup_new_request_handling()
            for r in reqs:
                h.prepare_for_new_request(r)
            host = torch.tensor([[r.py_seq_slot for r in reqs], h.new_max_lens, h.new_end_ids], dtype=torch.int32)
            h.update_for_new_request(seq_slots_cuda_long=host[0].long(), max_lengths_cuda=host[1],
                                     end_ids_cuda=host[2], seq_slots_host=host[0],
                                     all_sampling_requests=list(self.live.values()))

    def grow(self, slots: int) -> None:
        """A larger handler holding the same requests (re-admitted with their tokens so far)."""
        held = list(self.live.values())
        self.live = {}
        self._make(slots)
        if held:
            self.admit(held)

    def write(self, reqs: list, tokens: list) -> list:
        """``write_finish_reasons`` for one step of ``reqs`` (admitted) sampling ``tokens``; the reason names."""
        slots = [r.py_seq_slot for r in reqs]
        with cuda_on_cpu():
            new_tokens = torch.zeros((1, self.slots, 1), dtype=torch.int32)
            new_tokens[0, slots, 0] = torch.tensor(tokens, dtype=torch.int32)
            slots_t = torch.tensor(slots, dtype=torch.int64)
            lens = torch.tensor([len(r.tokens) for r in reqs], dtype=torch.int32)
            out = self.h.write_finish_reasons(seq_slots_host=slots_t, is_draft_batch=False, seq_slots_cuda=slots_t,
                                              seq_lens_cuda=lens, new_tokens_cuda=new_tokens)
            got = out[0, slots_t, 0].tolist()
        for r, t in zip(reqs, tokens):
            r.tokens.append(int(t))
        return [_NAMES[FinishReason(v)] for v in got]


class EngineFinish:
    """Finish reasons of a session's steps from TensorRT-LLM's ``FinishReasonsHandler``.

    Parameters
    ----------
    module : module
        The loaded ``finish_reasons.py`` (:attr:`.loader.Engine.finish_reasons`).

    A row continues the request its slot holds when its ``request_id`` and
    finish settings are the same and its prompt + generated ids are what the
    handler has seen (the earlier tokens plus the one it sampled); otherwise
    it is admitted anew, as ``setup_sampler_step`` admits a context request
    (its past-token window filled from ``get_tokens()``).
    """

    def __init__(self, module):
        self._cls = module.FinishReasonsHandler
        self._handlers: dict = {}

    def reasons(self, rows: Sequence[Row], tokens: Sequence[Optional[int]]) -> list:
        """One step: the finish reason of each row once its token is appended (None where the token is None).

        Parameters
        ----------
        rows : sequence of Row
            The step's rows (distinct slots).
        tokens : sequence of int or None
            The token each row sampled (None: the row failed; no reason).

        Returns
        -------
        list of str or None
            ``"end_id"``, ``"length"``, ``"stop_words"`` or ``"none"`` per row.
        """
        out: list = [None] * len(rows)
        groups: dict = {}
        for i, (row, t) in enumerate(zip(rows, tokens)):
            if t is not None:
                msl = NO_LIMIT if row.max_seq_len is None else int(row.max_seq_len)
                groups.setdefault(msl, []).append(i)
        for msl, idx in groups.items():
            need = max(int(rows[i].slot) for i in idx) + 1
            hd = self._handlers.get(msl)
            if hd is None:
                hd = self._handlers[msl] = _Handler(self._cls, msl, need)
            elif need > hd.slots:
                hd.grow(need)
            reqs, new = [], []
            for i in idx:
                row = rows[i]
                held, fresh = hd.live.get(int(row.slot)), FinishRequest(row)
                if held is None or held.key != fresh.key or held.tokens != fresh.tokens:
                    held = fresh
                    new.append(held)
                reqs.append(held)
            if new:
                hd.admit(new)
            for i, name in zip(idx, hd.write(reqs, [int(tokens[i]) for i in idx])):
                out[i] = name
        return out
