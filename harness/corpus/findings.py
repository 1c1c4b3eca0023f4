"""Registered findings: known engine bugs that explain a mismatch (status ``known-bug``).

Findings live in ``cases/findings.toml`` (format in cases/README.md): each
names an implementation (or a list of them: one engine behind two adapters,
e.g. ``["flashinfer", "flashinfer-joint"]``), a PEP 440 version range, the case ids (or globs) it
covers, a title, a public link and a minimal reproducer; optionally the rows it explains
(``rows``, labels such as ``"main:3"``: the case is ``known-bug`` only when no other row
differs from the profile's prediction; exact cases).
"""

from __future__ import annotations

import fnmatch
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

__all__ = ["Finding", "load_findings", "match_finding"]


@dataclass(frozen=True)
class Finding:
    """One registered engine bug."""

    id: str
    impl: str
    versions: str
    cases: tuple
    title: str
    link: str
    reproducer: str = ""
    #: Row labels (``"<batch>:<index>"``) this finding explains; empty: the whole case.
    rows: tuple = ()

    @property
    def impls(self) -> tuple:
        """The implementation names this finding applies to (``impl`` is one, or several joined by ", ")."""
        return tuple(x.strip() for x in self.impl.split(","))

    def covers(self, impl: str, version: str, case_id: str) -> bool:
        """True if this finding explains ``case_id`` on ``impl`` at ``version``."""
        if impl not in self.impls or not any(fnmatch.fnmatchcase(case_id, c) for c in self.cases):
            return False
        try:
            return Version(version.split()[0]) in SpecifierSet(self.versions)
        except (InvalidVersion, InvalidSpecifier):
            return False


def load_findings(path: Path) -> list:
    """Read ``findings.toml``; a missing file means no findings.

    Raises
    ------
    ValueError
        If the file is malformed (names the file, the entry and the field).
    """
    path = Path(path)
    if not path.exists():
        return []
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    out = []
    for i, f in enumerate(data.get("finding", [])):
        for key in ("id", "impl", "versions", "cases", "title", "link"):
            if key not in f:
                raise ValueError(f"{path}: finding[{i}]: missing field {key!r}")
        try:
            SpecifierSet(f["versions"])
        except InvalidSpecifier:
            raise ValueError(f"{path}: finding[{i}].versions: not a PEP 440 specifier: {f['versions']!r}") from None
        impl = f["impl"]
        if isinstance(impl, list) and impl and all(isinstance(x, str) for x in impl):
            impl = ", ".join(impl)
        elif not isinstance(impl, str) or not impl:
            raise ValueError(f"{path}: finding[{i}].impl: an implementation name or a list of names, got {impl!r}")
        rows = f.get("rows", [])
        if not isinstance(rows, list) or not all(isinstance(r, str) and ":" in r for r in rows):
            raise ValueError(f"{path}: finding[{i}].rows: a list of row labels such as \"main:3\", got {rows!r}")
        out.append(Finding(f["id"], impl, f["versions"], tuple(f["cases"]), f["title"], f["link"],
                           f.get("reproducer", ""), tuple(rows)))
    return out


def match_finding(findings: list, impl: str, version: str, case_id: str) -> Optional[Finding]:
    """The first finding covering this case, or None.

    Parameters
    ----------
    findings : list of Finding
        From :func:`load_findings`.
    impl : str
        Implementation name.
    version : str
        Its version string (first word read as PEP 440).
    case_id : str

    Returns
    -------
    Finding or None
    """
    for f in findings:
        if f.covers(impl, version, case_id):
            return f
    return None
