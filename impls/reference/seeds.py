"""Per-slot Philox ``(seed, offset)`` bookkeeping (SEMANTICS §1.6, "seed isolation").

Mirrors the three counters of TensorRT-LLM's ``_SeedManager`` (seed 000 §
三套计数器): a seeded request uses its own seed and a per-slot offset that
starts at 0 when a new request takes the slot and grows by 1 per draw; every
unseeded row uses the global seed (42) and the next value of one shared
counter that starts at ``2**62``, so a user seed of 42 never meets an
unseeded stream. Only rows that draw (SAMPLING mode) take an offset; greedy,
beam and rejected rows take none, and neither do padding or draft rows.
Unseeded offsets are handed out in batch order.
"""

from __future__ import annotations

from typing import Optional

from ..profiles import Profile

__all__ = ["SeedManager", "draw_modelled"]


class SeedManager:
    """Per-slot seeds and offsets of one session.

    Parameters
    ----------
    profile : Profile
        Supplies ``global_seed`` and ``unseeded_offset_base``.
    """

    def __init__(self, profile: Profile):
        self.global_seed = profile.global_seed
        self.unseeded_offset = profile.unseeded_offset_base
        self._owner: dict[int, object] = {}
        self._seed: dict[int, Optional[int]] = {}
        self._offset: dict[int, int] = {}

    def observe(self, slot: int, owner: object, seed: Optional[int]) -> None:
        """Record that ``owner`` (a request id) holds ``slot`` with ``seed``
        (signed int64 view, or None); a new owner resets the slot's offset to 0.

        A different seed in the slot also counts as a new occupant (a request's
        seed never changes): otherwise a row with ``request_id=None`` would draw
        from the previous occupant's seed instead of its own (SEMANTICS §1.6:
        "seeded row: seed = user seed; offset ... reset to 0 when a new request
        takes the slot").
        """
        if slot not in self._owner or self._owner[slot] != owner or self._seed[slot] != seed:
            self._owner[slot] = owner
            self._seed[slot] = seed
            self._offset[slot] = 0

    def take_unseeded(self) -> tuple[int, int]:
        """Return ``(global_seed, offset)`` for a row that owns no slot stream, and advance.

        Used for draft-batch rows: they are treated as unseeded and never
        read, reset or advance a slot's counter (SEMANTICS §1.6; seed 000 §
        槽位换主与草稿批: the drafter's slot numbers collide with target slots).
        """
        off = self.unseeded_offset
        self.unseeded_offset += 1
        return self.global_seed, off

    def take(self, slot: int) -> tuple[int, int]:
        """Return ``(seed, offset)`` for one drawing row in ``slot`` and advance.

        Returns
        -------
        tuple of int
            The signed 64-bit seed and the Philox offset (``>= 0``).
        """
        seed = self._seed.get(slot)
        if seed is None:
            off = self.unseeded_offset
            self.unseeded_offset += 1
            return self.global_seed, off
        off = self._offset[slot]
        self._offset[slot] = off + 1
        return seed, off


def draw_modelled(profile: Profile, row) -> bool:
    """Whether the reference predicts the token an engine of ``profile`` draws for ``row``, token for token.

    ``profile.rng == "canonical"``: always. ``"mt19937"`` (llama.cpp): when the row's seed
    gives llama.cpp a fixed generator seed (:func:`impls.reference.mt19937.engine_seed`: not
    unseeded, not ``0xFFFFFFFF``). ``"other"``: never (support and distribution only).
    """
    if profile.rng == "canonical":
        return True
    if profile.rng == "mt19937":
        from .modes import effective_seed
        from .mt19937 import engine_seed
        return engine_seed(effective_seed(row, profile)) is not None
    return False
