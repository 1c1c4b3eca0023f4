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

__all__ = ["SeedManager", "draw_modelled", "child_seed", "ChildSeed"]

#: Seeds are 64-bit patterns (SEMANTICS §1.6).
_SEED_SPACE = 1 << 64


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
        self._stride: dict[int, int] = {}

    def observe(self, slot: int, owner: object, seed: Optional[int], stream: Optional[tuple] = None) -> None:
        """Record that ``owner`` (a request id) holds ``slot`` with ``seed``
        (signed int64 view, or None); a new owner resets the slot's offset to 0.

        A different seed in the slot also counts as a new occupant (a request's
        seed never changes): otherwise a row with ``request_id=None`` would draw
        from the previous occupant's seed instead of its own (SEMANTICS §1.6:
        "seeded row: seed = user seed; offset ... reset to 0 when a new request
        takes the slot").

        ``stream = (i, n)`` (a row's ``child_stream``): the slot holds child ``i`` of
        ``n`` children that share one generator (``child_seed_rule = "shared_stream"``,
        SEMANTICS §2a): its offsets are ``i, i + n, i + 2n, ...``.
        """
        if slot not in self._owner or self._owner[slot] != owner or self._seed[slot] != seed:
            self._owner[slot] = owner
            self._seed[slot] = seed
            start, stride = (int(stream[0]), int(stream[1])) if stream is not None else (0, 1)
            self._offset[slot] = start
            self._stride[slot] = stride

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
        self._offset[slot] = off + self._stride.get(slot, 1)
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


class ChildSeed:
    """What a profile gives child ``i`` of a request with ``n`` children (:func:`child_seed`).

    Attributes
    ----------
    seed : int or None
        The child's seed as a uint64 pattern in ``[0, 2**64)`` (None: unseeded). Kept
        unsigned so that a child seed equal to ``-1``'s pattern is a seed, never the
        "no seed" of ``seed_minus_one_unseeded``, which reads the user's value only.
    stream : tuple of int or None
        ``(i, n)`` for a child drawing from the generator its ``n`` children share
        (:meth:`SeedManager.observe`).
    error : str or None
        ``invalid_seed`` when the profile rejects the whole request (a child seed past
        ``2**64 - 1`` under ``child_seed_overflow = "error"``).
    """

    def __init__(self, seed: Optional[int], stream: Optional[tuple] = None, error: Optional[str] = None):
        self.seed, self.stream, self.error = seed, stream, error


def child_seed(seed: Optional[int], index: int, n: int, profile: Profile) -> ChildSeed:
    """The seed of child ``index`` of a request with ``n`` children and seed ``seed`` (SEMANTICS §2a).

    Parameters
    ----------
    seed : int or None
        The request's seed as the case gives it (an integer in ``[-2**63, 2**64)``, read
        as its uint64 pattern), or None.
    index, n : int
        ``0 <= index < n``.
    profile : Profile
        ``child_seed_rule``, ``child_unseeded``, ``child_seed_overflow``.

    Returns
    -------
    ChildSeed

    Notes
    -----
    ``seed_plus_index``: ``s + index``, with ``s`` the uint64 pattern of the seed (vLLM
    0.32.0 ``ParentRequest._get_child_sampling_params``: ``seed + index`` on the Python
    int; TensorRT-LLM ``LlmRequest::createChildRequest``: ``uint64`` addition). Past
    ``2**64 - 1`` it wraps (``"wrap"``) or the request fails with ``invalid_seed`` when its
    last child would (``"error"``: vLLM's engine client refuses the request). A seed
    outside ``[-2**63, 2**64)`` is left as given, for the row's own validation to
    reject. ``same_seed``: ``s``. ``shared_stream``: ``s`` with ``stream = (index, n)``.
    An unseeded request's child is unseeded (``child_unseeded = "unseeded"``) or seeded
    ``index`` (``"index"``: TensorRT-LLM's default seed 0 plus the index). The rule never
    reads ``seeds_honoured`` or ``seed_minus_one_unseeded``: those apply to the request's
    seed as the user gave it (a seed of -1 under vLLM makes the request unseeded before
    its children are made).
    """
    if seed is None:
        return ChildSeed(index if profile.child_unseeded == "index" else None)
    if not -(1 << 63) <= seed < _SEED_SPACE:
        return ChildSeed(seed)  # rejected by the row's own seed validation (invalid_seed)
    bits = seed % _SEED_SPACE
    rule = profile.child_seed_rule
    if rule == "same_seed":
        return ChildSeed(bits)
    if rule == "shared_stream":
        return ChildSeed(bits, stream=(index, n))
    if bits + (n - 1) >= _SEED_SPACE and profile.child_seed_overflow == "error":
        return ChildSeed(bits + index, error="invalid_seed")
    return ChildSeed((bits + index) % _SEED_SPACE)
