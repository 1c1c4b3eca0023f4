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

from .philox import uniforms, uniforms_at

__all__ = ["gumbel_scores", "gumbel_argmax", "gumbel_argmax_kept", "DRAW_BLOCK_ELEMENTS"]

#: Scores computed at once by :func:`gumbel_argmax_kept` (rows x kept tokens of one block): about
#: 80 bytes each at the peak (Philox's int64 words and temporaries), so about 21 MiB, whatever the
#: vocabulary; also the fastest block size measured on the 2-core CPU machine (2**18: 80-100 ns per
#: score; 2**22: 120-175 ns, page faults of the larger temporaries).
DRAW_BLOCK_ELEMENTS = 1 << 18


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


def gumbel_argmax_kept(x_kept: torch.Tensor, cols: torch.Tensor, temperature: float, seeds: torch.Tensor,
                       offsets: torch.Tensor, block: int = DRAW_BLOCK_ELEMENTS) -> torch.Tensor:
    """:func:`gumbel_argmax` of many draws of one row, over its kept tokens only, in bounded blocks.

    The same tokens as ``gumbel_argmax(x.expand(n, V), keep.expand(n, V), T, seeds, offsets)``:
    each kept token's score ``(x_j - max_K x) / T - log(-log(u_j))`` is computed with the same
    operations in the same dtype, on the uniforms of the kept ids alone (:func:`.philox.uniforms_at`),
    and the first maximum is kept across blocks of at most ``block`` scores (rows x kept ids,
    in increasing id order), so ties still go to the lowest id. A row whose every score is
    ``-inf`` (every kept uniform exactly 0) gets token 0, as ``torch.argmax`` of an all-``-inf``
    row does. Memory: ``O(block)`` beyond the row, whatever ``V`` and ``n``
    (:data:`DRAW_BLOCK_ELEMENTS`).

    Parameters
    ----------
    x_kept : torch.Tensor
        ``(k,)`` the draw's logits at the kept ids; their maximum must be finite.
    cols : torch.Tensor
        ``(k,)`` int64 kept ids, increasing.
    temperature : float
        Finite and ``> 0``.
    seeds, offsets : torch.Tensor
        ``(n,)`` int64 (as in :func:`gumbel_argmax`).
    block : int
        Most scores per block.

    Returns
    -------
    torch.Tensor
        ``(n,)`` int64 token ids.
    """
    dtype = x_kept.dtype
    k = int(cols.numel())
    n = int(seeds.shape[0])
    top = x_kept.max()
    t = torch.tensor([temperature], dtype=dtype, device=x_kept.device).reshape(-1, 1)
    a = (x_kept.reshape(1, -1) - top) / t                       # as gumbel_scores: (x - top) / T
    rows = max(1, block // max(k, 1))
    width = k if rows > 1 else max(1, min(k, block))
    out = torch.empty(n, dtype=torch.int64)
    cols = cols.to(torch.int64)
    for r0 in range(0, n, rows):
        # the uniforms on the row's device (uniforms_at computes where the seeds are)
        sd, of = seeds[r0:r0 + rows].to(x_kept.device), offsets[r0:r0 + rows].to(x_kept.device)
        best = torch.full((sd.shape[0],), float("-inf"), dtype=dtype, device=x_kept.device)
        arg = torch.zeros(sd.shape[0], dtype=torch.int64, device=x_kept.device)
        for c0 in range(0, k, width):
            cc = cols[c0:c0 + width]
            u = uniforms_at(sd, of, cc)
            s = a[:, c0:c0 + width] + (-torch.log(-torch.log(u.to(dtype))))
            idx = torch.argmax(s, dim=-1)
            m = s.gather(1, idx.reshape(-1, 1)).reshape(-1)
            better = m > best
            best = torch.where(better, m, best)
            arg = torch.where(better, cc.to(arg.device)[idx], arg)
        out[r0:r0 + rows] = arg.cpu()
    return out
