"""A case's custom logits processors as one SGLang ``CustomLogitProcessor`` (SEMANTICS §1.4b).

Imported lazily (it imports SGLang). Paths are relative to ``python/sglang/srt/`` of
sgl-project/sglang@v0.5.23.

SGLang takes user code per request: ``custom_logit_processor`` (a ``CustomLogitProcessor``
subclass serialised by ``sampling/custom_logit_processor.py CustomLogitProcessor.to_str``) and
``SamplingParams.custom_params`` (JSON values), on a server launched with
``--enable-custom-logit-processor``. ``Req.__init__`` adds ``custom_params["__req__"]``, a weak
proxy of the request; ``SamplingBatchInfo.from_schedule_batch`` groups the rows by processor
string (``ProcessorEntry``); ``layers/sampler.py apply_custom_logit_processor`` (from
``Sampler._preprocess_logits``, after ``ModelRunner._preprocess_logits`` rewrote the logits and
before the temperature, on greedy rows too) calls the processor once per entry with those rows
and their ``custom_params``, and writes the result back with ``index_copy_``.

:class:`CaseLogitProcessor` is that user code: for each row it applies the kinds of
:mod:`impls.processors` named in ``custom_params[KEY]`` (a JSON string, a value the msgpack IPC
carries), with the request's steps ``n = len(req.output_ids)`` read from the request itself
(``__req__``), never from its batch position.
"""

from __future__ import annotations

import json
from typing import Any, Dict, List, Optional

import torch
from sglang.srt.sampling.custom_logit_processor import CustomLogitProcessor

from .. import processors as kinds

__all__ = ["KEY", "CaseLogitProcessor", "custom_params"]

#: The ``custom_params`` key that carries a row's processors.
KEY = "sampcheck_logits_processors"


def custom_params(procs) -> dict:
    """``SamplingParams.custom_params`` for a row's processors: ``{KEY: json string}``."""
    return {KEY: json.dumps(kinds.to_dicts(procs))}


class CaseLogitProcessor(CustomLogitProcessor):
    """Apply each row's case processors (:func:`impls.processors.apply_all`) in list order.

    Parameters
    ----------
    logits : torch.Tensor
        ``(rows, V)``: the rows of the batch that carry this processor (SGLang's selection).
    custom_param_list : list of dict
        Each row's ``custom_params`` with SGLang's ``"__req__"``.

    Returns
    -------
    torch.Tensor
        ``logits``, rewritten in place row by row.
    """

    def __call__(self, logits: torch.Tensor,
                 custom_param_list: Optional[List[Dict[str, Any]]] = None) -> torch.Tensor:
        for i, params in enumerate(custom_param_list or ()):
            if not params or KEY not in params:
                continue
            n = len(params["__req__"].output_ids)   # the request's own steps so far
            logits[i] = kinds.apply_all(logits[i], kinds.from_dicts(json.loads(params[KEY])), n)
        return logits
