"""Case ids: from the corpus root only.

A case file under the corpus root has the id of its path there (``filters/top-p.toml`` ->
``filters/top-p``), which the file's ``id`` field must repeat (:func:`harness.corpus.load.load_case`).
A file given by a path outside the root (``sampcheck run --cases /tmp/x.toml``) gets an
**external id**, ``ext/<hash>/<name>``: ``<hash>`` the first 10 hex digits of the SHA-256 of
its resolved path, ``<name>`` its file name without ``.toml``, lower-cased, every run of
characters outside ``[a-z0-9_.-]`` replaced by ``-``. ``ext`` is not a category, so an
external id never equals the id of a corpus case (whatever the file's own ``id`` field
claims), two external files never share one, and ``sampcheck golden`` never writes one.

Where a file lies is decided on its folder's resolved path and its own name: a symbolic
link inside the corpus is a corpus file named by the link (its target must then declare
the link's id), a link outside it is external.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path
from typing import Optional

__all__ = ["EXTERNAL", "case_id", "corpus_id", "external_id", "is_external"]

#: The first component of every external id.
EXTERNAL = "ext"


def _real(path) -> str:
    """``os.path.realpath`` (never raises: a link loop resolves as far as it goes)."""
    return os.path.realpath(os.fspath(path))


def corpus_id(path, root) -> Optional[str]:
    """The id of ``path`` below the corpus ``root``, or None when it lies outside.

    Parameters
    ----------
    path, root : str or Path
        A case file (need not exist) and the corpus root.

    Returns
    -------
    str or None
        The path below ``root`` (its folder resolved, a final link not) with a final
        ``.toml`` (lower case only) removed: a file ``x.TOML`` has the id ``.../x.TOML``,
        which no valid case declares, so it is reported rather than taken for ``x.toml``.
        None when ``path`` does not lie below ``root``. Never raises for a link loop.
    """
    path = Path(path)
    where = Path(_real(path.parent)) / path.name
    try:
        rel = where.relative_to(_real(root)).as_posix()
    except ValueError:
        return None
    return rel[: -len(".toml")] if rel.endswith(".toml") else rel


def external_id(path) -> str:
    """The external id of a case file (the module docstring).

    Returns
    -------
    str
        ``ext/<10 hex digits of the SHA-256 of the resolved path>/<name>``, ``<name>`` matching
        ``[a-z0-9_.-]+`` (``case`` when nothing of the file name is left).
    """
    digest = hashlib.sha256(_real(path).encode("utf-8", "surrogateescape")).hexdigest()[:10]
    name = Path(path).name
    if name.lower().endswith(".toml"):
        name = name[: -len(".toml")]
    name = re.sub(r"[^a-z0-9_.-]+", "-", name.lower()).strip("-.") or "case"
    return f"{EXTERNAL}/{digest}/{name}"


def case_id(path, root) -> str:
    """The id of the case file ``path``.

    Returns
    -------
    str
        :func:`corpus_id` under ``root``, else :func:`external_id`.
    """
    cid = corpus_id(path, root)
    return cid if cid is not None else external_id(path)


def is_external(case_id_: str) -> bool:
    """Whether an id is an external one (``ext/...``), never a corpus case's."""
    return case_id_.split("/", 1)[0] == EXTERNAL
