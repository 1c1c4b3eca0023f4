"""The canonical counter-based RNG (DESIGN.md decision 1), in PyTorch.

For a row keyed by a 64-bit seed and a 64-bit offset ``o``, token ``j`` gets
the uniform::

    k0, k1 = seed & 0xFFFFFFFF, (seed >> 32) & 0xFFFFFFFF   # seed as uint64 bits
    (w0, w1, w2, w3) = Philox4x32-10(counter=(j // 4, 0, o & 0xFFFFFFFF, o >> 32),
                                     key=(k0, k1))          # Triton's constants
    x = int32 bit pattern of w[j % 4]
    u = float32(~x if x < 0 else x) * float32(4.6566127342e-10)

which is exactly ``tl.philox(seed, j // 4, 0, o_lo, o_hi)`` followed by
``tl.uint_to_uniform_float`` in a Triton kernel (triton/language/random.py,
triton 3.6 and 3.9). The rounds are those of ``philox_impl``::

    c0' = umulhi(B, c2) ^ c1 ^ k0;  c2' = umulhi(A, c0) ^ c3 ^ k1
    c1' = B * c2 (mod 2**32);       c3' = A * c0 (mod 2**32)
    k0 += 0x9E3779B9;               k1 += 0xBB67AE85

with ``A = 0xD2511F53`` and ``B = 0xCD9E8D57``. All arithmetic here is on
int64 tensors holding uint32 values, so it runs on any torch device.
"""

from __future__ import annotations

import torch

__all__ = ["philox4x32", "uniforms", "uniforms_at", "seed_bits", "SCALE"]

_M32 = 0xFFFFFFFF
_KEY_A = 0x9E3779B9
_KEY_B = 0xBB67AE85
_ROUND_A = 0xD2511F53
_ROUND_B = 0xCD9E8D57
#: Triton's 32-bit int → uniform scale (largest such that INT32_MAX * scale < 1 in fp32).
SCALE = 4.6566127342e-10


def seed_bits(seed: int) -> int:
    """Return the uint64 bit pattern of a seed in ``[-2**63, 2**64)``.

    SEMANTICS §1.6: a seed in ``[2**63, 2**64)`` and its signed
    reinterpretation ``seed - 2**64`` are the same stream.

    Raises
    ------
    ValueError
        If ``seed`` is outside ``[-2**63, 2**64)``.
    """
    if not -(1 << 63) <= seed < (1 << 64):
        raise ValueError(f"seed {seed} outside [-2**63, 2**64)")
    return seed & ((1 << 64) - 1)


def _mulhilo(a: int, b: torch.Tensor) -> tuple:
    # High and low 32 bits of a * b for uint32 a (constant) and b (int64 tensor of uint32):
    # the product is below 2**64, so its int64 value wraps to the same 64 bits (two's
    # complement); bits 32..63 are the high word whatever the sign the wrap gives.
    prod = b * a
    return (prod >> 32) & _M32, prod & _M32


def philox4x32(c0: torch.Tensor, c1: torch.Tensor, c2: torch.Tensor, c3: torch.Tensor,
               k0: torch.Tensor, k1: torch.Tensor, rounds: int = 10):
    """Philox4x32 with Triton's constants on int64 tensors holding uint32 values.

    Parameters
    ----------
    c0, c1, c2, c3 : torch.Tensor
        Counter words, int64, values in ``[0, 2**32)``, broadcastable.
    k0, k1 : torch.Tensor
        Key words (low and high 32 bits of the seed), int64 in ``[0, 2**32)``.
    rounds : int
        Number of rounds (10 for Philox4x32-10).

    Returns
    -------
    tuple of torch.Tensor
        The four output words, int64 in ``[0, 2**32)``.
    """
    for _ in range(rounds):
        hi_b, lo_b = _mulhilo(_ROUND_B, c2)
        hi_a, lo_a = _mulhilo(_ROUND_A, c0)
        c0 = hi_b ^ c1 ^ k0
        c2 = hi_a ^ c3 ^ k1
        c1 = lo_b
        c3 = lo_a
        k0 = (k0 + _KEY_A) & _M32
        k1 = (k1 + _KEY_B) & _M32
    return c0, c1, c2, c3


def _words_to_uniform(w: torch.Tensor) -> torch.Tensor:
    # int32 reinterpretation, ~x for negatives, then fp32 multiply (Triton's rule): for
    # w >= 2**31 the int32 view is w - 2**32 < 0 and ~(w - 2**32) = 2**32 - 1 - w = w ^ 0xFFFFFFFF.
    x = torch.where(w >= (1 << 31), w ^ _M32, w)
    return x.to(torch.float32) * torch.tensor(SCALE, dtype=torch.float32)


def uniforms(seeds: torch.Tensor, offsets: torch.Tensor, vocab: int) -> torch.Tensor:
    """Canonical uniforms for ``rows`` rows and ``vocab`` tokens.

    Parameters
    ----------
    seeds : torch.Tensor
        ``(rows,)`` int64, each the signed view of the row's 64-bit seed.
    offsets : torch.Tensor
        ``(rows,)`` int64 Philox offsets, non-negative.
    vocab : int
        Number of tokens ``V``.

    Returns
    -------
    torch.Tensor
        ``(rows, vocab)`` float32 in ``[0, 1)``, on the device of ``seeds``.
    """
    device = seeds.device
    seeds = seeds.to(torch.int64).reshape(-1, 1)
    offsets = offsets.to(torch.int64).reshape(-1, 1)
    k0 = seeds & _M32
    k1 = (seeds >> 32) & _M32
    o_lo = offsets & _M32
    o_hi = (offsets >> 32) & _M32
    groups = (vocab + 3) // 4
    g = torch.arange(groups, dtype=torch.int64, device=device).reshape(1, -1)
    zero = torch.zeros_like(g)
    w = philox4x32(g, zero, o_lo.expand(-1, groups), o_hi.expand(-1, groups), k0, k1)
    words = torch.stack(w, dim=-1).reshape(seeds.shape[0], groups * 4)[:, :vocab]
    return _words_to_uniform(words)


def uniforms_at(seeds: torch.Tensor, offsets: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
    """Canonical uniforms of some token ids only: ``uniforms(seeds, offsets, V)[:, cols]``.

    Philox runs only on the counter groups ``cols // 4`` holds, so a draw over a kept set
    of ``k`` tokens costs ``O(k)`` per row, not ``O(V)`` (:meth:`.sampler.ReferenceSession.sample_many`).

    Parameters
    ----------
    seeds, offsets : torch.Tensor
        As in :func:`uniforms`.
    cols : torch.Tensor
        ``(k,)`` int64 token ids, each in ``[0, V)``.

    Returns
    -------
    torch.Tensor
        ``(rows, k)`` float32, bit-identical to the same columns of :func:`uniforms`.
    """
    device = seeds.device
    seeds = seeds.to(torch.int64).reshape(-1, 1)
    offsets = offsets.to(torch.int64).reshape(-1, 1)
    cols = cols.to(device=device, dtype=torch.int64).reshape(-1)
    groups, pos = torch.unique(cols // 4, return_inverse=True)
    g = groups.reshape(1, -1)
    zero = torch.zeros_like(g)
    n_g = g.shape[1]
    w = philox4x32(g, zero, (offsets & _M32).expand(-1, n_g), ((offsets >> 32) & _M32).expand(-1, n_g),
                   seeds & _M32, (seeds >> 32) & _M32)
    words = torch.stack(w, dim=-1)                      # (rows, groups, 4)
    picked = words[:, pos, cols % 4]                    # (rows, k)
    return _words_to_uniform(picked)
