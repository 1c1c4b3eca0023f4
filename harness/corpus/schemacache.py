"""JSON-schema validators compiled once per schema, their code kept on disk between processes.

``fastjsonschema.compile`` generates Python source for a schema and compiles it. For the case
schema (:func:`harness.corpus.load.case_schema`: every kind's fields, about 2.2 MB of source)
that takes about 0.9 s of CPU, in every process that loads a case: ``sampcheck run`` paid it
before its first case. :func:`compile_validator` keeps the compiled code object
(:mod:`marshal`) in :func:`cache_dir` under a key of the schema, fastjsonschema's version and
Python's, so a later process loads it in a few milliseconds; the validator is the one
``fastjsonschema.compile`` builds (the same generated code, executed in a fresh namespace).

The cache is only a shortcut, like ``__pycache__``: a file that cannot be read, unmarshalled
or written is ignored, and the schema is compiled as before. Folder:
``$SAMPCHECK_CACHE_DIR``, else ``$XDG_CACHE_HOME/sampcheck``, else ``~/.cache/sampcheck``;
``SAMPCHECK_CACHE_DIR=`` (empty) turns the cache off.
"""

from __future__ import annotations

import hashlib
import json
import marshal
import os
import sys
import tempfile
from pathlib import Path
from typing import Callable, Optional

import fastjsonschema

__all__ = ["compile_validator", "cache_dir"]


def cache_dir() -> Optional[Path]:
    """The folder of the cache (the module docstring), or None when ``SAMPCHECK_CACHE_DIR`` is set empty."""
    own = os.environ.get("SAMPCHECK_CACHE_DIR")
    if own is not None:
        return Path(own).expanduser() if own.strip() else None
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "sampcheck"


def _key(schema: dict) -> str:
    text = json.dumps([schema, fastjsonschema.VERSION, sys.version, sys.implementation.cache_tag],
                      sort_keys=True, default=repr)
    return hashlib.sha256(text.encode()).hexdigest()[:40]


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def compile_validator(schema: dict) -> Callable:
    """``fastjsonschema.compile(schema)``, its compiled code read from (or written to) the cache.

    Parameters
    ----------
    schema : dict
        A JSON schema (JSON values only).

    Returns
    -------
    callable
        ``validate(data)``: returns the data, raises
        ``fastjsonschema.JsonSchemaValueException`` on a violation, as the validator
        ``fastjsonschema.compile`` returns.
    """
    folder = cache_dir()
    path = folder / f"validator-{_key(schema)}.marshal" if folder is not None else None
    code = None
    if path is not None:
        try:
            code = marshal.loads(path.read_bytes())
        except (OSError, ValueError, EOFError, TypeError):
            code = None
    if code is None or not hasattr(code, "co_code"):
        code = compile(fastjsonschema.compile_to_code(schema), "<fastjsonschema>", "exec")
        if path is not None:
            try:
                _write(path, marshal.dumps(code))
            except OSError:
                pass
    namespace: dict = {}
    exec(code, namespace)  # noqa: S102 - fastjsonschema's own generated code, as fastjsonschema.compile runs it
    return namespace["validate"]
