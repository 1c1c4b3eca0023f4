"""Where the project's data folders are: the corpus (``cases/``) and the golden store (``golden/``)."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["project_dir", "packaged", "CASES_DIR", "PACKAGE_DATA"]

#: Where a built package (a wheel) carries ``cases/`` and ``golden/`` (setup.py copies them there).
PACKAGE_DATA = Path(__file__).resolve().parents[1] / "_data"


def project_dir(name: str) -> Path:
    """Where the project folder ``name`` (``cases``, ``golden``) is.

    In this order: ``$SAMPCHECK_<NAME>`` if set; else ``./<name>`` when the working
    directory holds it (the project root, as tox runs commands); else the folder beside
    the source tree (a checkout, used as it is or installed editable); else the copy an
    installed package carries (:data:`PACKAGE_DATA`, a wheel install: ``pip install .``).
    When none exists, the checkout's path (whose absence the commands report).
    """
    env = os.environ.get(f"SAMPCHECK_{name.upper()}")
    if env:
        return Path(env).resolve()
    here = Path.cwd() / name
    if here.is_dir():
        return here.resolve()
    checkout = Path(__file__).resolve().parents[2] / name
    if not checkout.is_dir() and (PACKAGE_DATA / name).is_dir():
        return PACKAGE_DATA / name
    return checkout


def packaged(path: Path) -> bool:
    """Whether ``path`` lies in the installed package's copy of the data (:data:`PACKAGE_DATA`), which
    commands must not write: a checkout or ``$SAMPCHECK_CASES`` is where cases are written."""
    try:
        Path(path).resolve().relative_to(PACKAGE_DATA)
        return True
    except ValueError:
        return False


CASES_DIR = project_dir("cases")
