"""A case's custom logits processors as real vLLM V1 ``LogitsProcessor`` classes.

Imported lazily (it imports vLLM). vLLM 0.32.0 takes custom processors as classes
(``LLM(logits_processors=[cls, ...])``, ``ModelConfig.logits_processors``): the model runner
builds one instance of each next to the built-ins (v1/sample/logits_processor/__init__.py
``build_logitsprocs``: ``MinTokens``, ``LogitBias``, ``MinP``, then the custom classes) and a
request configures them through ``SamplingParams.extra_args``. Two classes carry a case's
processors (:mod:`impls.processors`), split as vLLM splits them
(v1/sample/logits_processor/state.py ``LogitsProcessors``):

* :class:`CaseRewriteProcessor`, ``is_argmax_invariant() == False``: the kinds that can change
  the argmax, run by ``Sampler.apply_logits_processors`` after the allowed-token mask, bad
  words, ``MinTokens`` and ``LogitBias`` and before the penalties, on every row;
* :class:`CaseFilterProcessor`, ``is_argmax_invariant() == True``: the argmax-invariant kinds,
  run by ``Sampler.sample`` after the temperature and ``MinP``, before top-k/top-p, and only
  when the batch is not all greedy (a greedy row takes the argmax before them).

Each keeps one entry per batch row of a request that has such processors: its processors and
its steps ``n`` (:func:`impls.processors.steps`). The bookkeeping follows the contract of
``LogitsProcessor.update_state`` and ``BatchUpdate`` (v1/sample/logits_processor/interface.py):
``update_state`` is called once before every forward pass (``InputBatch.refresh_metadata``,
v1/worker/gpu_input_batch.py), with a ``BatchUpdate`` when the persistent batch changed;
its operations are processed in the documented order — removed, added, moved — and an added
or moved request replaces whatever held its index. So the state of a request follows it when
vLLM condenses the batch after a request finishes (``InputBatch.condense``: a one-way move of
the last row into the hole) or swaps rows (``swap_states``: a two-way move), and a request that
lands on a freed index never sees its predecessor's state.

The steps counter is the processor's own: an added request starts at ``len(output_tok_ids)``
(the tokens it has generated: none for a new request, all of them for one resumed after
preemption), and every row present at the previous call was processed once since, so each
call but the first adds one to every row it already held, before the update is applied
(under synchronous scheduling each step samples one token per scheduled request, and a
request not scheduled in a step is removed from the persistent batch:
``GPUModelRunner._update_states``). :meth:`apply` records every row whose counter differs from
the length of its live ``output_tok_ids`` list (the reference ``BatchUpdate`` hands over), in
:data:`MISMATCHES`: the adapter's own check that the counter and vLLM's bookkeeping agree.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch
from vllm import SamplingParams
from vllm.v1.sample.logits_processor import LogitsProcessor
from vllm.v1.sample.logits_processor.interface import BatchUpdate, MoveDirectionality

from .. import processors as _procs
from .translate import PROCESSORS_KEY

__all__ = ["CaseRewriteProcessor", "CaseFilterProcessor", "CLASSES", "MISMATCHES"]

#: ``(class name, batch index, counter, len(output_tok_ids))`` of every row :meth:`_CaseProcessor.apply`
#: found out of step; the engine loop raises when it is not empty after a step.
MISMATCHES: list = []


def _processors_of(params: Optional[SamplingParams]) -> tuple:
    # the tables .translate.sampling_kwargs put in SamplingParams.extra_args
    args = getattr(params, "extra_args", None) or {}
    return _procs.from_dicts(args.get(PROCESSORS_KEY) or [])


@dataclass
class _RowState:
    """One request's entry: its processors of this class's kind and its steps counter."""

    processors: tuple
    steps: int
    output: list


class _CaseProcessor(LogitsProcessor):
    """The common bookkeeping of :class:`CaseRewriteProcessor` and :class:`CaseFilterProcessor`."""

    #: Which kinds the class runs (:attr:`impls.processors.Kind.argmax_invariant`).
    ARGMAX_INVARIANT = False

    @classmethod
    def validate_params(cls, sampling_params: SamplingParams):
        """Refuse a request whose processor tables do not parse (vLLM calls it per request,
        ``validate_logits_processors_parameters``); a ``ValueError`` becomes a validation error."""
        _processors_of(sampling_params)

    def __init__(self, vllm_config, device: torch.device, is_pin_memory: bool):
        self.rows: dict = {}
        self._called = False

    def is_argmax_invariant(self) -> bool:
        """:attr:`ARGMAX_INVARIANT`: which of vLLM's two lists the instance joins."""
        return self.ARGMAX_INVARIANT

    def update_state(self, batch_update: Optional[BatchUpdate]) -> None:
        """Advance every row held since the last call by one step, then apply ``batch_update``.

        ``batch_update``'s operations in the order the interface documents: removed, added,
        moved (one-way ``i -> j``: ``j`` takes ``i``'s entry or loses its own; a swap exchanges
        them, entries or their absence).
        """
        if self._called:
            for st in self.rows.values():
                st.steps += 1
        self._called = True
        if batch_update is None:
            return
        for i in batch_update.removed:
            self.rows.pop(i, None)
        for i, params, _prompt, output in batch_update.added:
            mine = tuple(p for p in _processors_of(params) if p.argmax_invariant == self.ARGMAX_INVARIANT)
            if mine:
                self.rows[i] = _RowState(mine, len(output), output)
            else:
                self.rows.pop(i, None)
        for a, b, direction in batch_update.moved:
            ea, eb = self.rows.pop(a, None), self.rows.pop(b, None)
            if ea is not None:
                self.rows[b] = ea
            if direction == MoveDirectionality.SWAP and eb is not None:
                self.rows[a] = eb

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        """Each held row's processors on its row of ``logits``, in place (the method returns ``logits``)."""
        for i, st in self.rows.items():
            if st.steps != len(st.output):
                MISMATCHES.append((type(self).__name__, i, st.steps, len(st.output)))
            logits[i] = _procs.apply_all(logits[i], st.processors, st.steps)
        return logits


class CaseRewriteProcessor(_CaseProcessor):
    """A case's processors that can change the argmax (``is_argmax_invariant() == False``)."""

    ARGMAX_INVARIANT = False


class CaseFilterProcessor(_CaseProcessor):
    """A case's argmax-invariant processors (``is_argmax_invariant() == True``)."""

    ARGMAX_INVARIANT = True


#: The classes an engine is built with, in ``LLM(logits_processors=...)`` order.
CLASSES = (CaseRewriteProcessor, CaseFilterProcessor)
