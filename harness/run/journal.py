"""The journal of a run (``DIR/results.partial.jsonl``) and the durable writes of its output files.

The journal holds every result as soon as it exists, so that a run killed at any
moment (``kill -9``, a power cut, a full disk) loses nothing it had obtained and
``sampcheck run --resume`` continues it. Every order of crash leaves a usable state:

* the journal is (re)started by writing a complete new file beside it and renaming it
  over the old one (:meth:`Journal.open`): a crash before the rename leaves the old
  journal whole, one after it the new one;
* each result is one line, flushed and fsynced as it is written (:meth:`Journal.append`);
  a crash in the middle of a line leaves a torn last line, which :meth:`Journal.scan`
  reports and skips (its case runs again);
* ``results.json`` and ``index.html`` are written the same way (:func:`atomic_write`),
  and the journal is removed only after both (the runner's last step): a crash before
  that leaves the journal, and ``--resume`` reuses all of it.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

__all__ = ["Journal", "JournalScan", "atomic_write", "valid_result"]

#: The statuses a result may have (:data:`harness.judge.result.STATUSES`, repeated here so that reading a
#: journal imports no judge).
_STATUSES = ("pass", "known-diff", "known-bug", "fail", "n/a", "skip", "error")


def _fsync_dir(path: Path) -> None:
    """Make a rename or a new file in the folder ``path`` durable (a no-op where folders cannot be opened)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write(path: Path, text: str) -> Path:
    """Write ``text`` to ``path`` so that a crash leaves either the old file or the new one, whole.

    The text goes to ``<path>.tmp`` (flushed and fsynced), which is then renamed over ``path``.

    Parameters
    ----------
    path : Path
    text : str
        Written as UTF-8.

    Returns
    -------
    Path
        ``path``.

    Raises
    ------
    OSError
        The folder cannot be written (a full disk: ``errno.ENOSPC``); ``<path>.tmp`` is removed
        and ``path`` is left as it was.
    """
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError:
        try:
            tmp.unlink()
        except OSError:
            pass
        raise
    _fsync_dir(path.parent)
    return path


def valid_result(obj) -> str:
    """'' when ``obj`` is a result in the results.json form (docs/results.md), else what is wrong (one phrase).

    >>> valid_result({"case": "a/b", "impl": "x", "status": "pass", "check": "exact", "details": {"message": ""}})
    ''
    >>> valid_result({"case": "a/b", "impl": "x", "status": "pass", "check": "exact"})
    "no 'details' object"
    """
    if not isinstance(obj, dict):
        return "not a JSON object"
    for key in ("case", "impl", "check"):
        if not isinstance(obj.get(key), str):
            return f"no '{key}' string"
    if obj.get("status") not in _STATUSES:
        return f"status {obj.get('status')!r} is not one of {', '.join(_STATUSES)}"
    if not isinstance(obj.get("details"), dict):
        return "no 'details' object"
    if not isinstance(obj.get("provenance", {}), (dict, type(None))):
        return "'provenance' is not an object"
    return ""


@dataclass
class JournalScan:
    """What :meth:`Journal.scan` read.

    Attributes
    ----------
    header : dict or None
        The first line's ``{"journal": 1, "impls": [...], "cases": [...], "started": ...}``; None when
        there is no journal or no readable header.
    results : list of dict
        The results, in the order written (a later line for the same case and implementation wins).
    skipped : list of (int, str)
        ``(line number, why)`` of each line that was not used: ``"truncated"`` (the writer died in the
        middle of it: only ever the last line), or why it is not a result.
    """

    header: Optional[dict] = None
    results: list = field(default_factory=list)
    skipped: list = field(default_factory=list)


class Journal:
    """Append-only record of a run's results: ``DIR/results.partial.jsonl``.

    The first line is ``{"journal": 1, "impls": [...], "cases": [...], "started": ...}`` (and
    ``"shard": [I, N]`` for a shard); each further line is one result in the results.json form.
    Lines are flushed and fsynced as they are written. A torn last line (the process
    died mid-write) or a line that is not a result is skipped when reading.

    Parameters
    ----------
    path : Path
    """

    NAME = "results.partial.jsonl"

    def __init__(self, path: Path):
        self.path = Path(path)
        self._fh = None
        #: results written by this process since :meth:`open` (kept ones included)
        self.written = 0

    def scan(self) -> JournalScan:
        """Read an existing journal (an empty :class:`JournalScan` when there is none).

        Raises
        ------
        OSError
            The file exists but cannot be read.
        """
        out = JournalScan()
        if not self.path.exists():
            return out
        raw = self.path.read_bytes()
        lines = raw.split(b"\n")
        for n, line in enumerate(lines, 1):
            if not line.strip():
                continue
            # a piece after the last newline: the writer died in the middle of it (or just before the newline)
            unfinished = n == len(lines)
            try:
                obj = json.loads(line.decode("utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError):
                out.skipped.append((n, "truncated" if unfinished else "not JSON"))
                continue
            if isinstance(obj, dict) and "journal" in obj and out.header is None and not out.results:
                out.header = obj
                continue
            why = valid_result(obj)
            if why:
                out.skipped.append((n, why))
            else:
                out.results.append(obj)
        return out

    def read(self) -> tuple[Optional[dict], list]:
        """Return ``(header, results)`` of an existing journal, or ``(None, [])`` (:meth:`scan` without
        the skipped lines)."""
        s = self.scan()
        return s.header, s.results

    def open(self, header: dict, keep: list) -> None:
        """Start the journal afresh with ``header`` and the results ``keep``.

        The new journal is written beside the old one and renamed over it, so a crash
        here leaves one of the two whole.
        """
        self.path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(self.path, "".join(json.dumps(obj) + "\n" for obj in [header, *keep]))
        self._fh = open(self.path, "a", encoding="utf-8")
        self.written = len(keep)

    def append(self, result: dict) -> None:
        """Write one result (results.json form) and make it durable.

        Raises
        ------
        OSError
            The line could not be written (a full disk); what was written before stays.
        """
        self._fh.write(json.dumps(result) + "\n")
        self._fh.flush()
        os.fsync(self._fh.fileno())
        self.written += 1

    def close(self, remove: bool = False) -> None:
        """Close; with ``remove``, delete the file (the run completed)."""
        if self._fh is not None:
            try:
                self._fh.close()
            except OSError:
                pass  # a full disk: what could not be flushed was never reported as written
            self._fh = None
        if remove and self.path.exists():
            self.path.unlink()
            _fsync_dir(self.path.parent)
