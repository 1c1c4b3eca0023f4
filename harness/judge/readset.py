"""Reuse of a batch's prediction across profiles that agree on every field it read.

The blame search (:mod:`harness.judge.blame`) predicts a case under dozens to hundreds of
probe profiles that each differ from the default in one or two fields; most of those
fields are never read for the case's rows (a beam-search rule for a sampling row), so
most probes compute exactly the default's prediction again. :class:`ReadSetMemo`
records which profile fields a batch's prediction read, and the values it read; a later
profile whose values agree on every one of those fields follows the same computation
(the reference is a function of its inputs and of the profile fields it reads, no other
state: a fresh session per batch), so its prediction is the recorded one. A profile that
differs on any field read is predicted afresh: a flipped field that matters
(:mod:`harness.judge.mutation`) is always re-predicted.

Fields are recorded when read as attributes of the profile (``profile.field``, ``getattr``),
including reads made while hashing or copying it (``dataclasses.replace`` reads every
field), so a computation that reads everything is simply never reused. The recording
profile is an instance of a subclass of the profile's class, equal in every field.
"""

from __future__ import annotations

import dataclasses
import threading
from typing import Callable

__all__ = ["ReadSetMemo", "recording"]

_local = threading.local()
_classes: dict = {}


def _recording_class(base: type) -> type:
    if base in _classes:
        return _classes[base]
    names = frozenset(f.name for f in dataclasses.fields(base))

    def __getattribute__(self, name):
        value = object.__getattribute__(self, name)
        if name in names:
            log = getattr(_local, "log", None)
            if log is not None and name not in log:
                log[name] = value
        return value

    cls = type(f"Recording{base.__name__}", (base,), {"__getattribute__": __getattribute__,
                                                       "__module__": __name__})
    _classes[base] = cls
    return cls


def recording(profile):
    """A copy of ``profile`` (a dataclass instance) whose field reads are logged while a :class:`ReadSetMemo` computes."""
    cls = _recording_class(type(profile))
    rec = object.__new__(cls)
    for f in dataclasses.fields(profile):
        object.__setattr__(rec, f.name, getattr(profile, f.name))
    return rec


class ReadSetMemo:
    """Predictions keyed by the profile fields they read (the module docstring).

    Parameters
    ----------
    max_keys : int
        Most keys (e.g. one per batch of a case) kept; the oldest go first. The blame
        search runs within one case, so a few cases' worth is enough.
    """

    def __init__(self, max_keys: int = 64):
        self.max_keys = max_keys
        self._entries: dict = {}
        self.hits = 0
        self.misses = 0

    def get(self, key, profile, compute: Callable[[object], object]):
        """``compute(profile)``, or the result of an earlier call under ``key`` whose read fields ``profile`` matches.

        Parameters
        ----------
        key : hashable
            What, besides the profile, the computation depends on (case, batch, dtype).
        profile : dataclass instance
            The profile; ``compute`` receives a recording copy of it.
        compute : callable
            ``compute(profile) -> result``; must depend on nothing else that varies under ``key``.
        """
        for reads, out in self._entries.get(key, ()):
            if all(_same(getattr(profile, f), v) for f, v in reads.items()):
                self.hits += 1
                return out
        self.misses += 1
        outer = getattr(_local, "log", None)
        _local.log = {}
        try:
            out = compute(recording(profile))
            reads = _local.log
        finally:
            _local.log = outer
        if outer is not None:   # a memoised computation inside another: the outer one read these too
            for f, v in reads.items():
                outer.setdefault(f, v)
        if key not in self._entries and len(self._entries) >= self.max_keys:
            self._entries.pop(next(iter(self._entries)))
        self._entries.setdefault(key, []).append((reads, out))
        return out


def _same(a, b) -> bool:
    return type(a) is type(b) and a == b
