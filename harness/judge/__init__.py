"""Judging: one case on one implementation becomes one status (DESIGN.md).

Owns: the judge (:mod:`.judge`), row comparison (:mod:`.compare`), the
profile fields behind a ``known-diff`` (:mod:`.blame`), the statistical tests
and their error budget (:mod:`.stats`), and scenario cases
(:mod:`.scenarios`).

May import: :mod:`harness.corpus` and :mod:`impls`.
"""

from .judge import STATUSES, Judge, Result

__all__ = ["Judge", "Result", "STATUSES"]
