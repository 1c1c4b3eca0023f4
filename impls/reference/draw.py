"""The canonical draw: Gumbel-max over the kept tokens (DESIGN.md decision 1).

For a sampling row with rewritten logits ``x`` (``(V,)``), temperature ``T``,
kept set ``K`` and canonical uniforms ``u`` (:mod:`.philox`)::

    token = argmax_{j in K} (x_j - max_{i in K} x_i) / T - log(-log(u_j))

ties → lowest id. Removed tokens score ``-inf``. A uniform of exactly 0 gives
``-inf`` (never chosen). The scores are computed in the working dtype
(float32 by default), in that order of operations, so the fused kernel can
reproduce them bit for bit up to the accuracy of ``log``.
"""

from __future__ import annotations

import torch

from .philox import uniforms

__all__ = ["gumbel_scores", "gumbel_argmax"]


def gumbel_scores(x: torch.Tensor, keep: torch.Tensor, temperature: torch.Tensor,
                  u: torch.Tensor) -> torch.Tensor:
    """Perturbed scores of a batch of rows.

    Parameters
    ----------
    x : torch.Tensor
        ``(rows, V)`` rewritten logits, float32 or float64.
    keep : torch.Tensor
        ``(rows, V)`` bool kept sets (each row keeps at least one token).
    temperature : torch.Tensor
        ``(rows,)`` temperatures ``> 0``, same dtype as ``x``.
    u : torch.Tensor
        ``(rows, V)`` float32 uniforms in ``[0, 1)``.

    Returns
    -------
    torch.Tensor
        ``(rows, V)`` scores in ``x``'s dtype, ``-inf`` outside ``keep``.
    """
    neg = torch.full_like(x, float("-inf"))
    xm = torch.where(keep, x, neg)
    top = xm.max(dim=-1, keepdim=True).values
    g = -torch.log(-torch.log(u.to(x.dtype)))
    s = (xm - top) / temperature.reshape(-1, 1) + g
    return torch.where(keep, s, neg)


def gumbel_argmax(x: torch.Tensor, keep: torch.Tensor, temperature: torch.Tensor,
                  seeds: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    """Draw one token per row with the canonical RNG.

    Parameters
    ----------
    x, keep, temperature
        As in :func:`gumbel_scores`.
    seeds, offsets : torch.Tensor
        ``(rows,)`` int64: each row's signed 64-bit seed and Philox offset.

    Returns
    -------
    torch.Tensor
        ``(rows,)`` int64 token ids (first maximum, i.e. lowest id on ties).
    """
    u = uniforms(seeds.to(x.device), offsets.to(x.device), x.shape[-1])
    return torch.argmax(gumbel_scores(x, keep, temperature, u), dim=-1)
