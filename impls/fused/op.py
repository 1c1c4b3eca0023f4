"""The fused sampler as ``torch.library`` custom ops (traceable by ``torch.compile``).

Three entry points, all from one launch of the same kernel, so the tokens and
the probabilities always come from the **same** filtering (the property
speculative decoding's acceptance test needs):

* :func:`sample_tokens` — tokens and per-row status;
* :func:`sample_probs` — the filtered, renormalised distribution;
* :func:`sample_tokens_and_probs` — both.

Each is registered as ``sampcheck::<name>`` with a fake (meta) implementation,
so ``torch.compile(fullgraph=True)`` traces through it; outputs are freshly
allocated, so a call can be captured in a CUDA graph and replayed after new
logits and parameters are written into the captured input buffers.
"""

from __future__ import annotations

import torch

from .ops import fused_sample

__all__ = ["sample_tokens", "sample_probs", "sample_tokens_and_probs"]


def _args_doc(f):
    f.__doc__ = (f.__doc__ or "") + """
    Parameters
    ----------
    logits : torch.Tensor
        ``(batch, vocab)`` float32, bfloat16 or float16.
    temperature, top_p, min_p : torch.Tensor
        ``(batch,)`` float32, ``top_p`` float32 or float64 (0 temperature / 0 top_p / 1 min_p: greedy;
        ``top_p >= 1`` and ``min_p <= 0``: off).
    top_k : torch.Tensor
        ``(batch,)`` int64 (1: greedy; 0 or ``>= vocab``: off).
    seed, offset : torch.Tensor
        ``(batch,)`` int64 Philox key and offset (DESIGN.md decision 1).
    """
    return f


@torch.library.custom_op("sampcheck::sample_tokens", mutates_args=())
def _sample_tokens(logits: torch.Tensor, temperature: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor,
                   min_p: torch.Tensor, seed: torch.Tensor, offset: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    tokens, status, _path, _ = fused_sample(logits, temperature, top_k, top_p, min_p, seed, offset, want_probs=False)
    return tokens, status


@_sample_tokens.register_fake
def _(logits, temperature, top_k, top_p, min_p, seed, offset):
    B = logits.shape[0]
    return logits.new_empty((B,), dtype=torch.int64), logits.new_empty((B,), dtype=torch.int32)


@torch.library.custom_op("sampcheck::sample_tokens_and_probs", mutates_args=())
def _sample_tokens_and_probs(logits: torch.Tensor, temperature: torch.Tensor, top_k: torch.Tensor,
                             top_p: torch.Tensor, min_p: torch.Tensor, seed: torch.Tensor,
                             offset: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    tokens, status, _path, probs = fused_sample(logits, temperature, top_k, top_p, min_p, seed, offset,
                                                want_probs=True)
    return tokens, status, probs


@_sample_tokens_and_probs.register_fake
def _(logits, temperature, top_k, top_p, min_p, seed, offset):
    B, V = logits.shape
    return (logits.new_empty((B,), dtype=torch.int64), logits.new_empty((B,), dtype=torch.int32),
            logits.new_empty((B, V), dtype=torch.float32))


@_args_doc
def sample_tokens(logits, temperature, top_k, top_p, min_p, seed, offset):
    """Sample one token per row (op ``sampcheck::sample_tokens``).

    Returns
    -------
    tokens : torch.Tensor
        ``(batch,)`` int64, -1 for a rejected row.
    status : torch.Tensor
        ``(batch,)`` int32 outcome codes (:data:`impls.fused.kernel.STATUS_KINDS`).
    """
    return torch.ops.sampcheck.sample_tokens(logits, temperature, top_k, top_p, min_p, seed, offset)


@_args_doc
def sample_probs(logits, temperature, top_k, top_p, min_p, seed, offset):
    """The distribution each row samples from (op ``sampcheck::sample_tokens_and_probs``).

    Returns
    -------
    torch.Tensor
        ``(batch, vocab)`` float32, zeros outside the kept set, one-hot for
        greedy rows, zeros for rejected rows.
    """
    return torch.ops.sampcheck.sample_tokens_and_probs(logits, temperature, top_k, top_p, min_p, seed, offset)[2]


@_args_doc
def sample_tokens_and_probs(logits, temperature, top_k, top_p, min_p, seed, offset):
    """Tokens and the distribution they were drawn from, from one filtering.

    Returns
    -------
    tokens, status, probs : torch.Tensor
        As in :func:`sample_tokens` and :func:`sample_probs`.
    """
    return torch.ops.sampcheck.sample_tokens_and_probs(logits, temperature, top_k, top_p, min_p, seed, offset)
