"""Where the project's data folders are: the corpus (``cases/``) and the golden store (``golden/``)."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["project_dir", "CASES_DIR"]


def project_dir(name: str) -> Path:
    """Where the project folder ``name`` (``cases``, ``golden``) is.

    ``$SAMPCHECK_<NAME>`` if set; else ``./<name>`` when the working
    directory holds it (the project root, as tox runs commands); else the
    folder beside the source tree (a checkout used without installing).
    """
    env = os.environ.get(f"SAMPCHECK_{name.upper()}")
    if env:
        return Path(env).resolve()
    here = Path.cwd() / name
    if here.is_dir():
        return here.resolve()
    return Path(__file__).resolve().parents[2] / name


CASES_DIR = project_dir("cases")
