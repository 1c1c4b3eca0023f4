"""Shards: one of N deterministic parts of a run's selected cases (``sampcheck run --shard I/N``).

The selected case files, in the run's order (sorted paths), are dealt round-robin:
shard ``I`` of ``N`` takes the ones at positions ``I-1, I-1+N, I-1+2N, ...``. Every
machine that selects the same cases computes the same parts, so a CI matrix or a batch
scheduler runs shard ``I`` on machine ``I`` and ``sampcheck merge`` puts the results
back together (:mod:`harness.run.merge`) in the unsharded order. Dealing round-robin
spreads each category (the paths are sorted by category) over every shard.

The statistical budget does not change: the per-check level is computed over the
declared corpus, never the selection (DESIGN.md decision 3), so a shard judges each
case exactly as the unsharded run does.
"""

from __future__ import annotations

import hashlib
import re

__all__ = ["parse_shard", "shard_of", "selection_digest", "merged_positions"]

_SHARD = re.compile(r"^\s*(\d+)\s*/\s*(\d+)\s*$")


def parse_shard(text: str) -> tuple[int, int]:
    """``"2/3"`` -> ``(2, 3)``.

    Raises
    ------
    ValueError
        Not ``I/N`` with ``1 <= I <= N`` (the message says why).

    Examples
    --------
    >>> parse_shard("2/3")
    (2, 3)
    >>> parse_shard("0/3")
    Traceback (most recent call last):
    ...
    ValueError: --shard 0/3: I must lie in 1..3 (shards are numbered from 1)
    """
    m = _SHARD.match(text or "")
    if not m:
        raise ValueError(f"--shard {text}: want I/N, e.g. 1/3 (the first of three shards)")
    i, n = int(m.group(1)), int(m.group(2))
    if n < 1:
        raise ValueError(f"--shard {text}: N must be at least 1")
    if not 1 <= i <= n:
        raise ValueError(f"--shard {text}: I must lie in 1..{n} (shards are numbered from 1)")
    return i, n


def shard_of(items: list, index: int, count: int) -> list:
    """The items of shard ``index`` of ``count`` (1-based): positions ``index-1, index-1+count, ...``.

    >>> shard_of(list("abcdefg"), 1, 3), shard_of(list("abcdefg"), 3, 3)
    (['a', 'd', 'g'], ['c', 'f'])
    """
    return list(items[index - 1::count])


def selection_digest(case_ids: list) -> str:
    """A fingerprint of the whole selection (sha256 of the ids, one a line): shards of one run agree on it.

    >>> selection_digest(["a/x", "b/y"])[:12]
    '125d506340e2'
    """
    return hashlib.sha256("".join(f"{c}\n" for c in case_ids).encode("utf-8")).hexdigest()


def merged_positions(index: int, count: int, n_items: int) -> list:
    """Where shard ``index``'s items lie in the unsharded order.

    >>> merged_positions(2, 3, 3)
    [1, 4, 7]
    """
    return [index - 1 + k * count for k in range(n_items)]
