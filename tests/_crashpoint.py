"""Run ``sampcheck`` and kill this very process (SIGKILL, as ``kill -9``) at a chosen point.

Used by tests/test_run_robustness.py to crash a run where it is most fragile::

    python tests/_crashpoint.py POINT -- run --out DIR ...

or, to start each run in well under a second, as a fork server that has imported the harness
once (``--serve``): it reads one JSON request a line on stdin, ``{"point", "argv", "cwd", "stdout",
"stderr"}``, forks a child that runs it (its output to the files named), and answers ``{"rc": N}``
(``-9`` for a child killed by SIGKILL). The server's environment (``SAMPCHECK_CASES``) holds for
every run.

POINT is one of:

``none``
    no crash.
``line:N``
    in the middle of writing the N-th result this process appends to the journal: half the
    line is on disk (flushed and fsynced), then the kill.
``replace:NAME:before`` / ``replace:NAME:after``
    just before or just after the rename of a finished temporary file onto NAME
    (``results.partial.jsonl``, ``results.json``, ``index.html``).
``unlink:before`` / ``unlink:after``
    just before or just after the journal is removed.
``timer:SECONDS``
    SECONDS after the start, wherever the run is (imports included).
``pause:N:FILE``
    after the N-th result appended, wait until FILE exists (no kill): a run that holds its
    output folder while another one tries it.
``enospc:N``
    a full disk from the N-th result appended to the journal on (no kill).
``enospc:results.json``
    a full disk when the temporary file of ``results.json`` is opened.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this checkout's harness, not an installed one


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def install(point: str) -> None:
    """Arm the crash (or pause) ``point`` in this process."""
    kind, _, arg = point.partition(":")
    if kind == "none":
        return
    if kind == "timer":
        t = threading.Timer(float(arg), _die)
        t.daemon = True
        t.start()
        return
    from harness.run.journal import Journal
    if kind in ("line", "pause"):
        n_s, _, flag = arg.partition(":")
        target, real_append, count = int(n_s), Journal.append, [0]

        def append(self, result):
            count[0] += 1
            if count[0] == target and kind == "line":
                import json
                text = json.dumps(result) + "\n"
                self._fh.write(text[:len(text) // 2])
                self._fh.flush()
                os.fsync(self._fh.fileno())
                _die()
            real_append(self, result)
            if count[0] == target and kind == "pause":
                while not os.path.exists(flag):
                    time.sleep(0.05)
        Journal.append = append
        return
    if kind == "enospc":
        import errno

        def full(*_a, **_kw):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        if arg.isdigit():
            real_append, count = Journal.append, [0]

            def append(self, result):
                count[0] += 1
                if count[0] >= int(arg):
                    full()
                real_append(self, result)
            Journal.append = append
        else:
            import builtins
            real_open = builtins.open

            def open_(file, *a, **kw):
                if Path(str(file)).name == arg + ".tmp":
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(file))
                return real_open(file, *a, **kw)
            builtins.open = open_
        return
    if kind == "replace":
        name, _, when = arg.partition(":")
        real_replace = os.replace

        def replace(src, dst, *a, **kw):
            hit = Path(dst).name == name
            if hit and when == "before":
                _die()
            real_replace(src, dst, *a, **kw)
            if hit and when == "after":
                _die()
        os.replace = replace
        return
    if kind == "unlink":
        real_unlink = os.unlink

        def unlink(path, *a, **kw):
            hit = Path(path).name == Journal.NAME
            if hit and arg == "before":
                _die()
            real_unlink(path, *a, **kw)
            if hit and arg == "after":
                _die()
        os.unlink = unlink
        return
    raise SystemExit(f"_crashpoint: unknown point {point!r}")


def serve() -> None:
    """The fork server (``--serve``): imports the harness, then forks one child per request."""
    import json
    import importlib
    from harness.cli import build_parser, main  # imported once, before any fork; nothing here runs torch ops
    build_parser()  # imports the registry's adapters
    for mod in ("harness.run.runner", "harness.run.merge", "harness.report.html", "harness.report.charts",
                "harness.kinds", "harness.judge.judge", "harness.corpus.findings", "impls.reference",
                "matplotlib.pyplot", "scipy.stats"):
        importlib.import_module(mod)
    # The imports leave a few idle threads (torch's and OpenBLAS's pools, which register fork handlers),
    # as in the harness's own fork server (harness.run.isolation.FORKSERVER_PRELOAD); no torch op has run.
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        req = json.loads(line)
        pid = os.fork()
        if pid == 0:
            code = 70
            try:
                os.chdir(req["cwd"])
                for fd, name in ((1, req["stdout"]), (2, req["stderr"])):
                    out = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                    os.dup2(out, fd)
                    os.close(out)
                install(req["point"])
                code = main(req["argv"])
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else 1
            except BaseException:
                import traceback
                traceback.print_exc()
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        rc = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
        print(json.dumps({"rc": rc}), flush=True)


if __name__ == "__main__":
    if sys.argv[1:] == ["--serve"]:
        serve()
        sys.exit(0)
    point, sep, *argv = sys.argv[1:]
    assert sep == "--", "usage: _crashpoint.py POINT -- ARGS..."
    install(point)
    from harness.cli import main
    sys.exit(main(argv))
