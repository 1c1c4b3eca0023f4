"""The statistical budget: how many statistical checks the declared corpus holds (DESIGN.md decision 3).

The per-check level of a statistical verdict is ``FAMILY_ALPHA`` divided by the number of
statistical checks in the **declared** corpus (every case file, not only those run), so
every file is read here, hostile ones included: a file that cannot be read within the
limits (:func:`harness.corpus.tomlfile.read_case_toml`), or whose kind cannot count it,
counts 0 and is reported (:attr:`Budget.uncounted`), never an abort. A file that parses
but fails validation still counts as written (the level does not depend on which files are
broken).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from . import kinds
from .errors import CaseError
from .tomlfile import read_case_toml

__all__ = ["Budget", "statistical_budget", "count_statistical_checks"]


@dataclass
class Budget:
    """What :func:`statistical_budget` found.

    Attributes
    ----------
    checks : int
        Statistical checks counted.
    uncounted : list of CaseError
        The files counted 0 because they could not be read or counted, each located.
    """

    checks: int = 0
    uncounted: list = field(default_factory=list)


def statistical_budget(paths: list) -> Budget:
    """Count the statistical checks of ``paths`` as each case's check kind counts them from its TOML.

    Parameters
    ----------
    paths : list of Path
        Case files (the declared corpus, plus any file a run names from outside it).

    Returns
    -------
    Budget
        ``checks`` summed over the files (:meth:`harness.corpus.kinds.CheckKind.statistical_checks`;
        unknown kinds count 0); ``uncounted``, the files that could not be read within the
        limits or whose kind's count raised, each a :class:`~.errors.CaseError` naming the
        file, the field and the reason. Never raises for a file's content.
    """
    out = Budget()
    for p in paths:
        shown = str(p)
        try:
            data = read_case_toml(Path(p), shown)
        except CaseError as e:
            out.uncounted.append(e)
            continue
        check = data.get("check")
        try:
            kind = kinds.get(check) if isinstance(check, str) else None
        except KeyError:
            kind = None
        if kind is None:
            continue
        try:
            n = kind.statistical_checks(data)
            if isinstance(n, bool) or not isinstance(n, int) or n < 0:
                raise TypeError(f"counted {n!r}, not an integer >= 0")
        except Exception as e:  # a kind's count (maybe a plug-in's) failed on this file: count it 0, say so
            out.uncounted.append(CaseError(shown, "<budget>", f"check kind {check!r} could not count its "
                                                              f"statistical checks ({type(e).__name__}: {e})"))
            continue
        out.checks += n
    return out


def count_statistical_checks(paths: list) -> int:
    """:attr:`Budget.checks` of :func:`statistical_budget` (files that cannot be counted count 0)."""
    return statistical_budget(paths).checks
