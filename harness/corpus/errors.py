"""The one error of the corpus layer: a case file that cannot be used, located by file, field and reason."""

from __future__ import annotations

__all__ = ["CaseError"]


class CaseError(Exception):
    """A malformed case: ``path``, ``field`` (dotted, e.g. ``rows[2].top_p``) and ``reason``.

    ``field`` is a dotted path into the case (``rows[2].top_p``), or one of the markers
    ``<file>`` (the file cannot be read: missing, not a regular file, too large, not
    UTF-8, empty), ``<toml>`` (TOML syntax, nesting deeper than the limit), ``<top>``
    (the top-level table), ``<unfinished>`` (``TODO`` placeholders left) and ``<load>``
    (the loader itself failed: a bug to report, never silence).

    ``str(error)`` is ``"<path>: <field>: <reason>"``.
    """

    def __init__(self, path: str, field_: str, reason: str):
        super().__init__(f"{path}: {field_}: {reason}")
        self.path = str(path)
        self.field = field_
        self.reason = reason
