"""Judging: one case on one implementation becomes one status (DESIGN.md).

Owns: the judge (:mod:`.judge`: the feature check, the dispatch to the case's check kind,
the services kinds share), the verdict ladder (:mod:`.verdict`, once), results and
statuses (:mod:`.result`), row comparison (:mod:`.compare`), the profile fields behind a
``known-diff`` (:mod:`.blame`) and the statistical tests with their error budget
(:mod:`.stats`). The check kinds themselves are :mod:`harness.kinds`.

May import: :mod:`harness.corpus` and :mod:`impls`.
"""

from .judge import Judge
from .result import STATUSES, Result

__all__ = ["Judge", "Result", "STATUSES"]
