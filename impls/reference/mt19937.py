"""llama.cpp's random numbers and its ``dist`` draw, modelled token for token (profile ``rng == "mt19937"``).

llama.cpp (``src/llama-sampler.cpp`` as bundled in llama-cpp-python 0.3.36) seeds one
``std::mt19937`` per sampler with the request's 32-bit seed (``get_rng_seed``:
``LLAMA_DEFAULT_SEED = 0xFFFFFFFF`` means "random", which no model can follow):

* ``dist`` (``llama_sampler_dist_apply``) takes one ``uniform_real_distribution<double>``
  per step, two 32-bit outputs ``g1, g2``: ``u = (g1 + g2 * 2**32) / 2**64`` (libstdc++'s
  ``generate_canonical``; 1.0 becomes the double below it), even with one candidate, none
  with zero. It computes ``p_i = expf(l_i - l_max)`` in float32 over its array in the
  array's order, their double sum ``S``, and picks the first ``i`` whose double running
  sum is ``>= S * u``.
* XTC (``llama_sample_xtc_apply``) has its own ``std::mt19937`` with the same seed and
  takes one ``uniform_real_distribution<float>`` (one output ``g``:
  ``float(g) / 2**32`` in float32) each time it is active on two candidates or more.

:class:`Streams` keeps both counters per slot, as the reference's Philox offsets are kept
(:mod:`.seeds`). The generator is numpy's ``MT19937`` set to the state
``std::mt19937(seed)`` starts from (the recurrence of the C++ standard, [rand.eng.mers]).
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import torch

__all__ = ["DEFAULT_SEED", "engine_seed", "outputs", "first_outputs", "walk", "uniform_double", "uniform_float", "dist_pick", "Streams"]

#: llama.cpp's "pick a random seed" value (``include/llama.h`` LLAMA_DEFAULT_SEED).
DEFAULT_SEED = 0xFFFFFFFF


def engine_seed(seed: Optional[int]) -> Optional[int]:
    """The 32-bit seed llama.cpp's samplers get for a row's seed, or None when its draws are random.

    The low 32 bits of the seed's 64-bit pattern (``llama_sampler_init_dist(uint32_t)``);
    None (unseeded) and ``0xFFFFFFFF`` (``LLAMA_DEFAULT_SEED``) are random seeds.
    """
    if seed is None:
        return None
    s = int(seed) & 0xFFFFFFFF
    return None if s == DEFAULT_SEED else s


def _state(seed: int) -> np.random.MT19937:
    key = np.empty(624, dtype=np.uint64)
    key[0] = seed & 0xFFFFFFFF
    for i in range(1, 624):
        prev = int(key[i - 1])
        key[i] = (1812433253 * (prev ^ (prev >> 30)) + i) & 0xFFFFFFFF
    bg = np.random.MT19937()
    bg.state = {"bit_generator": "MT19937", "state": {"key": key.astype(np.uint32), "pos": 624}}
    return bg


def first_outputs(seeds, n: int) -> np.ndarray:
    """The first ``n`` (at most 227) outputs of ``std::mt19937(s)`` for each seed: ``(len(seeds), n)`` uint64.

    Vectorised over the seeds: the seeding recurrence, then the first ``n`` words of the first
    twist (word ``i < 227`` reads only words ``i``, ``i + 1`` and ``i + 397`` of the seeded
    state) and the tempering of [rand.eng.mers].
    """
    if not 0 <= n <= 227:
        raise ValueError(f"first_outputs reads at most 227 outputs, not {n}")
    m32 = np.uint64(0xFFFFFFFF)
    seeds = np.asarray([int(s) & 0xFFFFFFFF for s in seeds], dtype=np.uint64)
    mt = np.empty((len(seeds), 624), dtype=np.uint64)
    mt[:, 0] = seeds
    for i in range(1, 624):
        prev = mt[:, i - 1]
        mt[:, i] = (np.uint64(1812433253) * (prev ^ (prev >> np.uint64(30))) + np.uint64(i)) & m32
    i = np.arange(n)
    y = (mt[:, i] & np.uint64(0x80000000)) | (mt[:, i + 1] & np.uint64(0x7FFFFFFF))
    w = mt[:, i + 397] ^ (y >> np.uint64(1)) ^ np.where(y & np.uint64(1), np.uint64(0x9908B0DF), np.uint64(0))
    w ^= w >> np.uint64(11)
    w ^= (w << np.uint64(7)) & np.uint64(0x9D2C5680)
    w ^= (w << np.uint64(15)) & np.uint64(0xEFC60000)
    w ^= w >> np.uint64(18)
    return w & m32


def walk(logits: torch.Tensor, order: torch.Tensor, temperature: float):
    """``dist``'s array as ids and the double running sums of its float32 weights.

    Returns
    -------
    (numpy.ndarray, numpy.ndarray)
        The ids in array order and the running sums (the last is the total ``S``): the pick
        for a uniform ``u`` is the first position whose sum is ``>= S * u``.
    """
    ids = order.cpu().numpy()
    lg = logits.detach().to(torch.float32).cpu().numpy()[ids]
    if temperature != 1.0:
        lg = (lg / np.float32(temperature)).astype(np.float32)
    p = np.exp((lg - lg.max()).astype(np.float32)).astype(np.float32)
    return ids, np.cumsum(p.astype(np.float64))


def outputs(seed: int, start: int, n: int) -> np.ndarray:
    """Outputs ``start .. start + n - 1`` of ``std::mt19937(seed)`` as uint64 values below ``2**32``."""
    bg = _state(seed)
    if start:
        bg.random_raw(start)
    return np.asarray(bg.random_raw(n), dtype=np.uint64)


def uniform_double(g1: int, g2: int) -> float:
    """``uniform_real_distribution<double>(0, 1)`` from two outputs (libstdc++ ``generate_canonical``)."""
    u = (float(g1) + float(g2) * 4294967296.0) / 18446744073709551616.0
    return float(np.nextafter(1.0, 0.0)) if u >= 1.0 else u


def uniform_float(g: int) -> float:
    """``uniform_real_distribution<float>(0, 1)`` from one output, in float32."""
    u = np.float32(np.float32(g) / np.float32(4294967296.0))
    return float(np.nextafter(np.float32(1.0), np.float32(0.0))) if u >= 1.0 else float(u)


def dist_pick(logits: torch.Tensor, order: torch.Tensor, temperature: float, u: float) -> int:
    """The token ``dist`` picks from its array.

    Parameters
    ----------
    logits : torch.Tensor
        ``(V,)`` float32 logits before the temperature (after bias and penalties).
    order : torch.Tensor
        int64 ids of the array's candidates, in the array's order.
    temperature : float
        The temperature stage's value (> 0): each logit becomes ``float32(l / T)``.
    u : float
        The step's uniform double.

    Returns
    -------
    int
        The token id.
    """
    ids, cum = walk(logits, order, temperature)
    i = int(np.searchsorted(cum, cum[-1] * u, side="left"))
    return int(ids[min(i, len(ids) - 1)])


class Streams:
    """Per-slot ``dist`` and XTC counters of llama.cpp's generators (one request per slot)."""

    def __init__(self):
        self._owner: dict = {}
        self._dist: dict[int, int] = {}
        self._xtc: dict[int, int] = {}

    def observe(self, slot: int, owner: object, seed: Optional[int]) -> None:
        """A new owner or seed in ``slot`` restarts both generators (a new request, a new chain)."""
        if self._owner.get(slot, object()) != (owner, seed):
            self._owner[slot] = (owner, seed)
            self._dist[slot] = 0
            self._xtc[slot] = 0

    def take_dist(self, slot: int, seed: int) -> float:
        """The next ``dist`` uniform of the slot (two outputs)."""
        k = self._dist.get(slot, 0)
        self._dist[slot] = k + 1
        g = outputs(seed, 2 * k, 2)
        return uniform_double(int(g[0]), int(g[1]))

    def take_xtc(self, slot: int, seed: int) -> float:
        """The next XTC coin of the slot (one output of XTC's own generator)."""
        k = self._xtc.get(slot, 0)
        self._xtc[slot] = k + 1
        return uniform_float(int(outputs(seed, k, 1)[0]))
