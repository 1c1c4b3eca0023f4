"""An exclusive lock on a run's output folder, so that two runs never write one ``--out``.

Two runs into one folder would interleave their journals and the first to finish would
remove the journal the other is writing. :class:`OutLock` takes ``fcntl.flock`` on
``DIR/.sampcheck.lock`` for the whole run and writes who holds it there (pid, host,
start time, command); a second run finds the lock taken and raises :class:`OutLocked`,
whose message names the holder. The kernel releases the lock when the holder's process
ends, however it ends (``kill -9`` included), so a lock is never left stale. The file
itself stays (removing it while another run may have it open would let two runs lock
two different files).

``flock`` is advisory and per machine: on a network file system it holds across machines
only where the file system supports it (Linux's NFS client maps it to byte-range locks).
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import socket
import sys
from pathlib import Path
from typing import Optional

try:
    import fcntl
except ImportError:  # not POSIX: no lock (the run goes on, as before the lock existed)
    fcntl = None

__all__ = ["OutLock", "OutLocked", "LOCK_NAME"]

LOCK_NAME = ".sampcheck.lock"


class OutLocked(ValueError):
    """The output folder is in use by another run.

    Attributes
    ----------
    out_dir : Path
    holder : dict
        What the holder wrote (``pid``, ``host``, ``started``, ``command``); empty when it had
        not written it yet.
    """

    def __init__(self, out_dir: Path, holder: dict):
        self.out_dir, self.holder = Path(out_dir), holder
        if holder.get("pid"):
            who = f"pid {holder['pid']} on {holder.get('host', '?')}, started {holder.get('started', '?')}"
            if holder.get("command"):
                who += f": {holder['command']}"
        else:
            who = "a process that has not written its name yet"
        super().__init__(f"--out {out_dir} is in use by another sampcheck run ({who}); wait for it to finish, "
                         "or give another --out")


class OutLock:
    """``fcntl.flock`` on ``DIR/.sampcheck.lock`` (:data:`LOCK_NAME`), held from :meth:`acquire` to :meth:`release`.

    Parameters
    ----------
    out_dir : Path
        The run's output folder (created when missing).
    command : str, optional
        What the holder is doing, shown to a run that finds the folder locked (default: this
        process's command line).

    Examples
    --------
    >>> import tempfile
    >>> d = tempfile.mkdtemp()
    >>> with OutLock(d):
    ...     try:
    ...         OutLock(d).acquire()
    ...     except OutLocked as e:
    ...         print("refused:", e.holder["pid"] == os.getpid())
    refused: True
    """

    def __init__(self, out_dir: Path, command: Optional[str] = None):
        self.out_dir = Path(out_dir)
        self.path = self.out_dir / LOCK_NAME
        self.command = command if command is not None else " ".join([Path(sys.argv[0]).name, *sys.argv[1:]])
        self._fd: Optional[int] = None

    def acquire(self) -> "OutLock":
        """Take the lock, or raise :class:`OutLocked` at once (never waits).

        Raises
        ------
        OutLocked
            Another process holds it; the message names that process.
        OSError
            The folder cannot be created or the lock file cannot be opened.
        """
        if fcntl is None or self._fd is not None:
            return self
        self.out_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # BlockingIOError: held by another open file (another process, or this one twice)
            try:
                holder = json.loads(os.pread(fd, 4096, 0).decode("utf-8") or "{}")
            except (OSError, UnicodeDecodeError, json.JSONDecodeError):
                holder = {}
            os.close(fd)
            raise OutLocked(self.out_dir, holder if isinstance(holder, dict) else {}) from None
        me = {"pid": os.getpid(), "host": socket.gethostname(),
              "started": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"), "command": self.command}
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, (json.dumps(me) + "\n").encode("utf-8"), 0)
        except OSError:
            pass  # a full disk: the lock holds all the same, only its holder's name is missing
        self._fd = fd
        return self

    def release(self) -> None:
        """Release the lock (emptying the holder's name first); a no-op when not held."""
        if self._fd is None:
            return
        try:
            os.ftruncate(self._fd, 0)
        except OSError:
            pass
        os.close(self._fd)  # closing the last descriptor of the open file releases the flock
        self._fd = None

    def __enter__(self) -> "OutLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()
