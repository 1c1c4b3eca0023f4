"""Per-slot Philox ``(seed, offset)`` kept on the device: the fused sampler's own seed bookkeeping.

The rule (SEMANTICS §1.6, "seed isolation"; seed 000 § 三套计数器): a seeded request draws with
its own seed at a per-slot offset that starts at 0 when a new request takes the slot (a new
request id, or a new seed in the slot) and grows by 1 per draw; every unseeded draw uses the
global seed 42 at the next value of one counter shared by the session, which starts at
``2**62`` and is handed out in batch order. Only rows that draw take an offset: not greedy or
beam rows, and not rows the step rejects — a row whose rewritten logits hold a NaN does not even
take its slot (``nan_logits`` comes before admission), one with a ``+inf`` or no finite logit
takes its slot but draws nothing (SEMANTICS §5; the reference's order, ``impls/reference/sampler.py``).

The counters, the seeds and who holds each slot live in device tensors and change there:
:meth:`SlotStreams.take` reads nothing back to the host, so the step needs no synchronisation for
its seeds, and whether a row draws can come from its rewritten logits on the device
(:func:`row_flags`). The design is this project's; TensorRT-LLM keeps its per-slot pairs in host
tensors copied to the device each step, with other strides
(``tensorrt_llm/_torch/pyexecutor/sampler/seed_manager.py``@2341856e ``_SeedManager``; SEMANTICS
§1.6 says how they differ).
"""

from __future__ import annotations

from typing import Optional, Sequence

import torch

__all__ = ["SlotStreams", "row_flags", "GLOBAL_SEED", "UNSEEDED_BASE"]

#: The seed of every unseeded draw (SEMANTICS §1.6).
GLOBAL_SEED = 42
#: The first offset of the unseeded counter (SEMANTICS §1.6: above any seeded stream's reach).
UNSEEDED_BASE = 1 << 62


def row_flags(y: torch.Tensor) -> tuple:
    """Whether each row takes its slot and whether it can draw, from its rewritten logits.

    Parameters
    ----------
    y : torch.Tensor
        ``(B, V)`` float32 rewritten logits (bias, penalties and bans applied).

    Returns
    -------
    (torch.Tensor, torch.Tensor)
        ``(B,)`` bool on ``y``'s device: ``observed`` (no NaN: the row is not ``nan_logits``) and
        ``drawable`` (observed, no ``+inf`` and at least one finite logit: a sampling row is not
        ``posinf_logits`` or ``no_valid_token``), the statuses :mod:`impls.fused.kernel` gives.
    """
    observed = ~torch.isnan(y).any(-1)
    drawable = observed & ~(y == float("inf")).any(-1) & torch.isfinite(y).any(-1)
    return observed, drawable


class SlotStreams:
    """The seeds and offsets of one session's slots, on ``device``.

    Parameters
    ----------
    device : torch.device or str

    Attributes
    ----------
    seeds, offsets, holders : torch.Tensor
        ``(n,)`` int64, one entry per slot seen (in the order first seen; a slot number is any
        integer ``>= 0``): the slot's seed (signed int64 view; unseeded holders keep 0), its next
        offset, and the id of the (request id, seed) pair holding it (-1: none yet).
    unseeded : torch.Tensor
        ``(1,)`` int64: the next unseeded offset.
    """

    def __init__(self, device="cpu"):
        self.device = torch.device(device)
        z = torch.zeros((0,), dtype=torch.int64, device=self.device)
        self.seeds, self.offsets, self.holders = z, z.clone(), z.clone()
        self.unseeded = torch.full((1,), UNSEEDED_BASE, dtype=torch.int64, device=self.device)
        self._entry: dict = {}    # slot number -> its index in the tables
        self._holder_ids: dict = {}   # (request id, seed) -> holder id

    def _index(self, slots: Sequence[int]) -> list:
        new = [s for s in dict.fromkeys(slots) if s not in self._entry]
        if new:
            for s in new:
                self._entry[s] = len(self._entry)
            z = torch.zeros((len(new),), dtype=torch.int64, device=self.device)
            self.seeds, self.offsets = torch.cat([self.seeds, z]), torch.cat([self.offsets, z])
            self.holders = torch.cat([self.holders, z - 1])
        return [self._entry[s] for s in slots]

    def _holder_id(self, owner, seed) -> int:
        try:
            key = (owner, seed)
            hash(key)
        except TypeError:
            key = (repr(owner), seed)
        return self._holder_ids.setdefault(key, len(self._holder_ids))

    def take(self, slots: Sequence[int], owners: Sequence, seeds: Sequence[Optional[int]],
             sampling: Sequence[bool], observed: Optional[torch.Tensor] = None,
             drawable: Optional[torch.Tensor] = None) -> tuple:
        """The ``(seed, offset)`` of each row of one step, and advance the counters.

        Parameters
        ----------
        slots : sequence of int
            Each row's slot (``>= 0``, distinct within the step).
        owners : sequence
            Each row's request id (a new one in a slot restarts its offset at 0).
        seeds : sequence of int or None
            Each row's seed (signed int64 view), None unseeded.
        sampling : sequence of bool
            Whether the row samples (the others take no offset).
        observed, drawable : torch.Tensor, optional
            ``(B,)`` bool on the device (:func:`row_flags`): rows that take their slot, and rows that
            can draw; default every row.

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
        dev = self.device
        if not B:
            z = torch.zeros((0,), dtype=torch.int64, device=dev)
            return z, z.clone()
        host = torch.tensor([[e, self._holder_id(o, s), s or 0, s is not None, bool(d)]
                             for e, o, s, d in zip(self._index(slots), owners, seeds, sampling)], dtype=torch.int64)
        idx, hid, seed_in, has_seed, samp = host.to(dev, non_blocking=True).unbind(1)
        has_seed, samp = has_seed.bool(), samp.bool()
        ones = torch.ones((B,), dtype=torch.bool, device=dev)
        observed = ones if observed is None else observed.to(dev)
        draws = samp & (ones if drawable is None else drawable.to(dev))
        # a row that takes its slot from another holder restarts the slot's stream
        cur = self.holders[idx]
        fresh = observed & (cur != hid)
        self.holders[idx] = torch.where(observed, hid, cur)
        self.seeds[idx] = torch.where(fresh, seed_in, self.seeds[idx])
        self.offsets[idx] = torch.where(fresh, torch.zeros_like(hid), self.offsets[idx])
        seeded, unseeded = draws & has_seed, draws & ~has_seed
        # unseeded draws: the shared counter's next values, in row order
        rank = torch.cumsum(unseeded.to(torch.int64), 0) - 1
        off = torch.where(seeded, self.offsets[idx], self.unseeded + rank)
        seed = torch.where(seeded, self.seeds[idx], torch.full_like(hid, GLOBAL_SEED))
        off = torch.where(draws, off, torch.zeros_like(off))
        seed = torch.where(draws, seed, torch.zeros_like(seed))
        self.offsets.index_add_(0, idx, seeded.to(torch.int64))
        self.unseeded += unseeded.sum()
        return seed, off
