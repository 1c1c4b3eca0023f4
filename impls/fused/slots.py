"""Per-slot Philox ``(seed, offset)`` kept on the device: the fused sampler's own seed bookkeeping.

The rule (SEMANTICS §1.6, "seed isolation"; seed 000 § 三套计数器): a seeded request draws with
its own seed at a per-slot offset that starts at 0 when a new request takes the slot (a new
request id, or a new seed in the slot) and grows by 1 per draw; every unseeded draw uses the
global seed 42 at the next value of one counter shared by the session, which starts at
``2**62`` and is handed out in batch order. Only drawing (sampling) rows take an offset.

The offsets live in device tensors and advance there, as TensorRT-LLM keeps its per-slot
``(seed, offset)`` pairs in tensors (``tensorrt_llm/_torch/pyexecutor/sampler/seed_manager.py``
@770709ac, ``_SeedManager``): :meth:`SlotStreams.take` reads nothing back to the host, so a step
needs no synchronisation for its seeds. The host keeps only who holds each slot (admission is
host work in every engine).
"""

from __future__ import annotations

from typing import Optional, Sequence

import torch

__all__ = ["SlotStreams", "GLOBAL_SEED", "UNSEEDED_BASE"]

#: The seed of every unseeded draw (SEMANTICS §1.6).
GLOBAL_SEED = 42
#: The first offset of the unseeded counter (SEMANTICS §1.6: above any seeded stream's reach).
UNSEEDED_BASE = 1 << 62


class SlotStreams:
    """The seeds and offsets of one session's slots, on ``device``.

    Parameters
    ----------
    device : torch.device or str

    Attributes
    ----------
    seeds, offsets : torch.Tensor
        ``(slots,)`` int64: each slot's seed (signed int64 view) and next offset; the table grows
        to the largest slot seen.
    unseeded : torch.Tensor
        ``(1,)`` int64: the next unseeded offset.
    """

    def __init__(self, device="cpu"):
        self.device = torch.device(device)
        self.seeds = torch.zeros((0,), dtype=torch.int64, device=self.device)
        self.offsets = torch.zeros((0,), dtype=torch.int64, device=self.device)
        self.unseeded = torch.full((1,), UNSEEDED_BASE, dtype=torch.int64, device=self.device)
        self._holder: dict = {}   # slot -> (request id, seed) of the request holding it

    def _grow(self, n: int) -> None:
        if n > self.seeds.numel():
            pad = n - self.seeds.numel()
            z = torch.zeros((pad,), dtype=torch.int64, device=self.device)
            self.seeds, self.offsets = torch.cat([self.seeds, z]), torch.cat([self.offsets, z])

    def take(self, slots: Sequence[int], owners: Sequence, seeds: Sequence[Optional[int]],
             draws: Sequence[bool]) -> tuple:
        """The ``(seed, offset)`` of each row of one step, and advance the counters.

        Parameters
        ----------
        slots : sequence of int
            Each row's slot (``>= 0``, distinct within the step).
        owners : sequence
            Each row's request id (a new one in a slot restarts its offset at 0).
        seeds : sequence of int or None
            Each row's seed (signed int64 view), None unseeded.
        draws : sequence of bool
            Whether the row draws (sampling mode); the others take no offset.

        Returns
        -------
        (torch.Tensor, torch.Tensor)
            ``(B,)`` int64 seeds and offsets on the device, in row order (0 and 0 for a row that
            does not draw).

        Raises
        ------
        ValueError
            A negative slot, or a slot given twice.
        """
        if any(s < 0 for s in slots) or len(set(slots)) != len(slots):
            raise ValueError(f"slots must be distinct and >= 0, got {list(slots)}")
        B = len(slots)
        if not B:
            z = torch.zeros((0,), dtype=torch.int64, device=self.device)
            return z, z.clone()
        self._grow(max(slots) + 1)
        fresh = [i for i in range(B) if self._holder.get(slots[i]) != (owners[i], seeds[i])]
        for i in fresh:
            self._holder[slots[i]] = (owners[i], seeds[i])
        dev = self.device
        slot_t = torch.tensor(list(slots), dtype=torch.int64).to(dev, non_blocking=True)
        if fresh:
            idx = torch.tensor([slots[i] for i in fresh], dtype=torch.int64).to(dev, non_blocking=True)
            self.seeds[idx] = torch.tensor([seeds[i] or 0 for i in fresh], dtype=torch.int64).to(dev)
            self.offsets[idx] = 0
        flags = torch.tensor([[bool(d), bool(d) and s is not None] for d, s in zip(draws, seeds)], dtype=torch.bool)
        draw_t, seeded_t = flags.to(dev, non_blocking=True).unbind(1)
        unseeded_t = draw_t & ~seeded_t
        # unseeded draws: the shared counter's next values, in row order
        rank = torch.cumsum(unseeded_t.to(torch.int64), 0) - 1
        off = torch.where(seeded_t, self.offsets[slot_t], self.unseeded + rank)
        seed = torch.where(seeded_t, self.seeds[slot_t], torch.full_like(slot_t, GLOBAL_SEED))
        off = torch.where(draw_t, off, torch.zeros_like(off))
        seed = torch.where(draw_t, seed, torch.zeros_like(seed))
        self.offsets.index_add_(0, slot_t, seeded_t.to(torch.int64))
        self.unseeded += unseeded_t.sum()
        return seed, off
