"""Process isolation of implementations (DESIGN.md decision 5) and the incremental journal.

Each implementation runs in its own **worker process**, which builds it
and judges each case it is sent (:class:`harness.judge.Judge`: the
reference predictions run there too, so the main process never touches an
engine). The main process (:class:`Worker`) sends one case at a time (the
case it loaded, pickled, or the file's path when that does not pickle: the
worker then loads it), does its own work meanwhile (the runner loads the
next case and draws the report's charts), and waits at most ``timeout``
seconds:

* a result comes back: done;
* the worker dies (a segfault, an abort, ``os._exit``, a kill from outside):
  the case in flight is an ``error`` whose message names the exit code or
  signal and ends with the tail of the worker's log (``faulthandler`` writes
  the Python stack of a fatal signal there); the worker is restarted for the
  next case. A ``SIGKILL`` while the kernel's out-of-memory kill count rose
  (``/proc/vmstat``, or the cgroup's ``memory.events``) is reported as an
  out-of-memory kill (``details["oom_killed"]``), and the worker's peak resident
  memory, read every :data:`MEMORY_POLL_S` seconds while it works, is given
  (``details["peak_rss_bytes"]``);
* the time limit passes: the worker is killed, the case is an ``error``
  ("timed out after N s"), and the worker is restarted;
* the case raised a CUDA error (an ``error`` whose message has one of
  :data:`DEVICE_ERROR_MARKERS`): the result is kept and the worker is
  replaced, since its device context may be unusable.

A worker is started from a fork server (``forkserver``; ``spawn`` where
that does not exist) when the implementation is given by name or as an
object that pickles: a clean process that imports the engine itself, never
a copy of a process that ran one. An object that does not pickle (tests
define classes inside test functions) is forked while this process has a
single thread, and otherwise runs in-process (:func:`start_method`).

:class:`harness.run.journal.Journal` (importable from here too) appends every result to
``results.partial.jsonl`` as soon as it exists, so an interrupted run loses
nothing; ``sampcheck run --resume`` reads it back and runs only the (case,
implementation) pairs it lacks.

A worker may start with environment variables of its own (``env``): the runner gives
each lane of a multi-GPU run its ``CUDA_VISIBLE_DEVICES`` (:mod:`harness.run.lanes`).

On a CPU run each worker (and an in-process run while it lasts) uses one torch intra-op
thread (:func:`torch_threads`): the harness's tensors are small (a row of a few thousand
logits), and on the 2-core CI machine, whose lanes share the cores, torch's default of one
thread per core spent about three times the CPU time of one thread in OpenMP's waits
(the reference's corpus: 38.7 against 13.5 CPU seconds at a load average of 10,
identical results). ``SAMPCHECK_TORCH_THREADS=N`` chooses another count (``0``: torch's
default); an ``OMP_NUM_THREADS`` in the environment is left to torch.
"""

from __future__ import annotations

import faulthandler
import io
import multiprocessing as mp
import os
import pickle
import signal
import sys
import time
import traceback
from pathlib import Path
from typing import Callable, Optional

from .journal import Journal

__all__ = ["Worker", "InProcess", "Journal", "WorkerInfo", "DEFAULT_TIMEOUT", "DEFAULT_STARTUP_TIMEOUT",
           "make_runner", "label_of", "prestart", "torch_threads", "CPU_TORCH_THREADS"]

#: Seconds one case may take on one implementation (``sampcheck run --timeout``).
DEFAULT_TIMEOUT = 600.0
#: Seconds a worker may take to import and build its implementation.
DEFAULT_STARTUP_TIMEOUT = 300.0
#: How much of the worker's log an error message quotes.
LOG_TAIL = 2000
#: torch intra-op threads of a CPU run (the module docstring says why).
CPU_TORCH_THREADS = 1


def torch_threads(device: str) -> Optional[int]:
    """The torch intra-op thread count a run on ``device`` sets, or None to leave torch's.

    ``SAMPCHECK_TORCH_THREADS`` when set (``0``: None); else None on a GPU run or when
    ``OMP_NUM_THREADS`` is set; else :data:`CPU_TORCH_THREADS`.

    Raises
    ------
    ValueError
        ``SAMPCHECK_TORCH_THREADS`` is not a non-negative integer.
    """
    raw = os.environ.get("SAMPCHECK_TORCH_THREADS", "").strip()
    if raw:
        if not raw.isdigit():
            raise ValueError(f"SAMPCHECK_TORCH_THREADS={raw!r}: a non-negative integer (0: torch's default)")
        return int(raw) or None
    if device != "cpu" or os.environ.get("OMP_NUM_THREADS"):
        return None
    return CPU_TORCH_THREADS


def _apply_threads(device: str) -> Optional[int]:
    """Set torch's intra-op threads as :func:`torch_threads` says; return the count before (None: unchanged)."""
    n = torch_threads(device)
    if n is None:
        return None
    import torch
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    return before


#: In-process runners holding torch's thread count, and the count before the first of them.
_held = {"count": 0, "before": None}


def _hold_threads(device: str) -> bool:
    """:func:`_apply_threads` for an in-process runner; the last :func:`_release_threads` restores torch's count."""
    before = _apply_threads(device)
    if before is None:
        return False
    if _held["count"] == 0:
        _held["before"] = before
    _held["count"] += 1
    return True


def _release_threads() -> None:
    _held["count"] -= 1
    if _held["count"] == 0 and _held["before"] is not None:
        import torch
        torch.set_num_threads(_held["before"])
        _held["before"] = None


class WorkerInfo(dict):
    """What a worker reports once its implementation is built.

    Keys: ``name``, ``version``, ``profile`` (a :class:`impls.profiles.Profile`),
    ``skip_reason`` (None when available), ``is_prediction`` (the
    implementation's attribute of that name: the reference under a profile),
    ``stages`` (whose code performs each stage it declares:
    :func:`impls.base.stage_provenance`), ``facts`` (what the
    implementation's optional ``describe(device)`` says about itself, e.g.
    the code path an engine chose; recorded in results.json).
    """


def _build(spec):
    from impls import registry
    return registry.create(spec) if isinstance(spec, str) else spec


def label_of(spec) -> str:
    """The name an implementation spec runs under: a registered name as is, the built object's ``name``
    for ``package.module:Class`` (:func:`impls.registry.load_spec`) or an object."""
    if isinstance(spec, str):
        if ":" in spec:
            from impls import registry
            return registry.load_spec(spec).name
        return spec
    return getattr(spec, "name", type(spec).__name__)


def _describe(impl, device: str) -> WorkerInfo:
    from impls.base import declaration_problems, read_declared
    problems = declaration_problems(impl)
    if problems:  # an adapter whose declaration is wrong is not judged (sampcheck check-impl shows the same)
        from impls.profiles import TRTLLM, Profile
        name, profile = read_declared(impl, "name")[0], read_declared(impl, "profile")[0]
        return WorkerInfo(name=name if isinstance(name, str) and name else "?", version="unknown",
                          profile=profile if isinstance(profile, Profile) else TRTLLM,
                          skip_reason="its declaration is invalid: " + "; ".join(m for _, m in problems), facts={},
                          is_prediction=False, stages={})
    reason = impl.available(device)
    try:
        version = impl.version() if reason is None else "unavailable"
    except Exception as e:  # a broken install is a skip with its reason, not a crash
        reason, version = f"version() raised {type(e).__name__}: {e}", "unknown"
    facts = {}
    if reason is None and hasattr(impl, "describe"):
        try:
            facts = dict(impl.describe(device))
        except Exception as e:
            facts = {"describe_error": f"{type(e).__name__}: {e}"}
    from impls.base import stage_provenance
    return WorkerInfo(name=impl.name, version=version, profile=impl.profile, skip_reason=reason, facts=facts,
                      is_prediction=bool(getattr(impl, "is_prediction", False)), stages=stage_provenance(impl))


def _serve(conn, spec, device: str, root: str, findings_path: str, n_stat: int, log_path: Optional[str],
           sys_path: tuple = (), check_kinds: tuple = (), env: Optional[dict] = None) -> None:
    """Body of a worker process: build, report, then judge cases until told to stop.

    ``env`` is set first, before anything can initialise a device (e.g. ``CUDA_VISIBLE_DEVICES``
    of a lane: :mod:`harness.run.lanes`).

    ``sys_path`` is the parent's import path at launch: its entries the worker lacks are put
    first, so a ``package.module:Class`` spec the parent can import, the worker can too (a fork
    server keeps the path it started with). ``check_kinds`` are the check kinds the parent
    registered at run time (:func:`harness.corpus.kinds.runtime_kinds`), registered here too.
    """
    os.environ.update(env or {})
    _apply_threads(device)
    sys.path[:0] = [p for p in sys_path if p not in sys.path]
    from harness.corpus import kinds
    for kind in check_kinds:
        kinds.register(kind)
    if log_path:
        log = open(log_path, "a", buffering=1)
        os.dup2(log.fileno(), 2)
        sys.stderr = log
        faulthandler.enable(file=log, all_threads=True)
    from harness.corpus.load import load_case
    from harness.corpus.findings import load_findings
    from harness.judge.judge import Judge
    try:
        impl = _build(spec)
        info = _describe(impl, device)
    except Exception as e:
        conn.send(("startup_error", f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=6)}"))
        return
    conn.send(("ready", info))
    if info["skip_reason"]:
        return
    judge = Judge(load_findings(Path(findings_path)), n_stat, device)
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            return
        if msg[0] == "stop":
            return
        path, case = msg[1], _unpack_case(msg[2]) if len(msg) > 2 else None
        if log_path:
            # Engines install fatal-signal handlers of their own (lazily, e.g. on the first
            # torch.compile); re-registering puts faulthandler's Python stack first again,
            # and it chains to theirs.
            faulthandler.enable(file=log, all_threads=True)
        if case is None:
            case = load_case(Path(path), Path(root))
        res = judge.evaluate(case, impl, info["version"])
        poisoned = res.status == "error" and _is_device_error(str(res.details.get("message", "")))
        conn.send(("result", res.to_json(), poisoned))
        if poisoned:
            return  # the main process starts a fresh worker for the next case


class _CasePickler(pickle.Pickler):
    """Pickles a loaded case with its registered check kinds by name (the worker's own instances)."""

    def persistent_id(self, obj):
        from harness.corpus.kinds import CheckKind, get
        if isinstance(obj, CheckKind):
            try:
                if get(obj.name) is obj:
                    return ("check-kind", obj.name)
            except KeyError:
                pass
        return None


class _CaseUnpickler(pickle.Unpickler):
    def persistent_load(self, pid):
        from harness.corpus.kinds import get
        return get(pid[1])


def _pack_case(case) -> Optional[bytes]:
    """The case the main process loaded, pickled for its worker (None: it does not pickle).

    The worker then judges this case instead of reading and validating the file again (about
    9 ms a case: the TOML parse, the schema, the kind's loader). Check kinds travel by name,
    so the case's ``kind`` is the worker's registered one, as when the worker loads the file.
    """
    buf = io.BytesIO()
    try:
        _CasePickler(buf, protocol=pickle.HIGHEST_PROTOCOL).dump(case)
    except Exception:  # noqa: BLE001 - the worker loads the file instead
        return None
    return buf.getvalue()


def _unpack_case(blob: Optional[bytes]):
    """:func:`_pack_case`'s case, or None (the worker then loads the file) when it does not unpickle here."""
    if blob is None:
        return None
    try:
        return _CaseUnpickler(io.BytesIO(blob)).load()
    except Exception:  # noqa: BLE001 - e.g. a class this process cannot import: load the file instead
        return None


#: Modules the fork server imports once, so that each worker starts in well under a second
#: (``scipy.stats``: :mod:`harness.judge.stats` imports it only when a statistical test runs).
FORKSERVER_PRELOAD = ["harness.run.isolation", "harness.judge", "harness.corpus.load", "harness.kinds",
                      "impls.reference", "scipy.stats"]


def _thread_count() -> int:
    """Threads of this process, native ones included (torch's OpenMP pool, Triton's compilers)."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        import threading
        return threading.active_count()


def _picklable(obj) -> bool:
    try:
        pickle.dumps(obj)
        return True
    except Exception:
        return False


def _context(method: str):
    """The multiprocessing context for a start ``method`` (``forkserver`` preloads the harness)."""
    ctx = mp.get_context(method)
    if method == "forkserver":
        ctx.set_forkserver_preload(FORKSERVER_PRELOAD)
    return ctx


def prestart(specs) -> bool:
    """Start the fork server now, without waiting for it, when the workers of ``specs`` will come from it.

    The fork server is a fresh interpreter that imports :data:`FORKSERVER_PRELOAD` (torch,
    the harness, ``scipy.stats``: about 3 s of one core). Started before this process does
    its own imports and reads the corpus, the two overlap on a machine with two cores;
    started later, :meth:`Worker.start` waits for it. Starting it is idempotent, and a server
    that is never used ends with this process.

    Parameters
    ----------
    specs : list
        Implementation names, specs or objects (as :func:`harness.run.runner.run` takes them).

    Returns
    -------
    bool
        True when a fork server was started (or was already running).
    """
    if not any(start_method(s) == "forkserver" for s in specs):
        return False
    from multiprocessing import forkserver
    _context("forkserver")
    forkserver.ensure_running()
    return True


def start_method(spec) -> Optional[str]:
    """How a worker for ``spec`` is started, or None when it must run in this process.

    A name, or an object that pickles: ``forkserver`` (a clean, single-threaded
    server process that has imported torch and the harness once and forks each
    worker, which then imports the engine itself; ``spawn`` where forkserver
    does not exist); check kinds registered at run time go with it, so they must
    pickle too. An object that does not pickle (e.g. an instance of a
    class defined inside a test function): ``fork``, but only while this
    process has a single thread; forking a multi-threaded process can leave
    the child waiting forever on a lock another thread held (seen with
    torch's and Triton's threads), so such an object runs in-process.
    """
    from harness.corpus import kinds
    methods = mp.get_all_start_methods()
    clean = "forkserver" if "forkserver" in methods else "spawn"
    if (isinstance(spec, str) or _picklable(spec)) and _picklable(kinds.runtime_kinds()):
        return clean
    if "fork" in methods and _thread_count() == 1:
        return "fork"
    return None


#: Messages of errors after which a process's accelerator context cannot be trusted.
DEVICE_ERROR_MARKERS = ("CUDA error", "device-side assert", "cudaError", "CUBLAS_STATUS", "illegal memory access")


def _is_device_error(message: str) -> bool:
    return any(m in message for m in DEVICE_ERROR_MARKERS)


#: Seconds between two reads of a worker's memory while it judges a case.
MEMORY_POLL_S = 0.25


def _peak_rss(pid: int) -> Optional[int]:
    """The peak resident memory of process ``pid`` so far (``VmHWM`` of ``/proc/PID/status``), in bytes."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _memory_events(pid: int) -> Optional[str]:
    """The ``memory.events`` file of process ``pid``'s cgroup (v2), or None where there is none."""
    try:
        with open(f"/proc/{pid}/cgroup") as fh:
            rel = next((ln.strip()[3:] for ln in fh if ln.startswith("0::")), None)
    except OSError:
        return None
    path = f"/sys/fs/cgroup{rel}/memory.events" if rel is not None else None
    return path if path and os.path.exists(path) else None


def _oom_kills(events: Optional[str] = None) -> dict:
    """Counts of processes the kernel's out-of-memory killer has killed: ``{"system": n}`` from
    ``/proc/vmstat`` and ``{"cgroup": n}`` from a cgroup's ``memory.events`` file, where readable."""
    out = {}
    for key, path in (("system", "/proc/vmstat"), ("cgroup", events)):
        if not path:
            continue
        try:
            with open(path) as fh:
                for line in fh:
                    if line.startswith("oom_kill "):
                        out[key] = int(line.split()[1])
        except (OSError, ValueError, IndexError):
            pass
    return out


def _oom_rose(before: dict, after: dict) -> bool:
    """Whether any out-of-memory kill count read both times went up."""
    return any(k in before and after[k] > before[k] for k in after)


def _signal_name(code: Optional[int]) -> str:
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with status {code}"


class Worker:
    """One implementation behind a process boundary, with a time limit per case.

    Parameters
    ----------
    spec : str or object
        An implementation name or ``package.module:Class`` (:func:`impls.registry.create`), or an
        implementation object.
    device : str
        ``"cpu"`` or ``"cuda"``.
    root : Path
        The corpus root (cases are sent as paths).
    n_stat : int
        Statistical checks in the declared corpus (the judge's level).
    timeout : float
        Seconds per case.
    startup_timeout : float
        Seconds to import and build the implementation.
    log_dir : Path or None
        Where the worker's stderr goes (``<log_name>.log``); None: inherited.
    env : dict, optional
        Environment variables the worker sets before it builds the implementation (a lane's
        ``CUDA_VISIBLE_DEVICES``), over this process's environment at launch (which it sets
        too: the fork server may have started before, e.g. before ``sampcheck run`` exported
        an implementation's option such as ``--trtllm-src``).
    log_name : str, optional
        The log's name without ``.log`` (default: the label).

    Attributes
    ----------
    info : WorkerInfo
        Set by :meth:`start`.
    restarts : int
        How many times the worker was started again after a crash or a
        timeout.
    """

    def __init__(self, spec, device: str, root: Path, n_stat: int, timeout: float = DEFAULT_TIMEOUT,
                 startup_timeout: float = DEFAULT_STARTUP_TIMEOUT, log_dir: Optional[Path] = None,
                 env: Optional[dict] = None, log_name: Optional[str] = None):
        self.spec = spec
        self.env = dict(env or {})
        self.device = device
        self.root = Path(root)
        self.n_stat = n_stat
        self.timeout = timeout
        self.startup_timeout = startup_timeout
        self.label = label_of(spec)
        self.log_path = None
        if log_dir is not None:
            Path(log_dir).mkdir(parents=True, exist_ok=True)
            self.log_path = Path(log_dir) / f"{log_name or self.label}.log"
        self.method = start_method(spec) or "fork"
        self.ctx = _context(self.method)
        self.proc = None
        self.conn = None
        self.info: Optional[WorkerInfo] = None
        self.restarts = 0
        self.startup_error: Optional[str] = None

    # -- lifecycle ------------------------------------------------------------
    def _launch(self) -> None:
        parent, child = self.ctx.Pipe()
        from harness.corpus import kinds
        args = (child, self.spec, self.device, str(self.root), str(self.root / "findings.toml"), self.n_stat,
                str(self.log_path) if self.log_path else None, tuple(sys.path), tuple(kinds.runtime_kinds()), {**os.environ, **self.env})
        self.proc = self.ctx.Process(target=_serve, args=args, daemon=True, name=f"sampcheck-{self.label}")
        try:
            self.proc.start()
        except (EOFError, OSError) as e:  # the fork server died (e.g. a module it preloads does not import)
            self.proc = None
            child.close()
            parent.close()
            raise RuntimeError(f"could not start a worker process ({type(e).__name__}: {e}); the fork server's "
                               "error, if any, is on this process's stderr") from None
        child.close()
        self.conn = parent
        if not self.conn.poll(self.startup_timeout):
            why = f"did not start within {self.startup_timeout:g} s"
            self._kill()
            raise RuntimeError(why)
        try:
            kind, payload = self.conn.recv()
        except EOFError:
            self.proc.join(5)
            why = f"worker {_signal_name(self.proc.exitcode)} while starting{self._log_tail()}"
            self._kill()
            raise RuntimeError(why) from None
        if kind != "ready":
            self._kill()
            raise RuntimeError(f"building the implementation failed: {payload}")
        self.info = payload

    def start(self) -> WorkerInfo:
        """Start the worker and return what it reports about its implementation.

        A worker that cannot start reports a ``skip_reason`` naming why
        (and :attr:`startup_error` keeps it): a crash while importing an
        engine is not a result of any case.
        """
        try:
            self._launch()
        except RuntimeError as e:
            self.startup_error = str(e)
            impl = self.spec
            if isinstance(self.spec, str):
                from impls import registry
                try:
                    impl = registry.create(self.spec)
                except Exception:
                    impl = None
            from impls.base import read_declared
            from impls.profiles import TRTLLM, Profile
            name, profile = read_declared(impl, "name")[0], read_declared(impl, "profile")[0]
            name = name if isinstance(name, str) and name else self.label
            profile = profile if isinstance(profile, Profile) else TRTLLM
            self.info = WorkerInfo(name=name, version="unknown", profile=profile,
                                   skip_reason=f"worker failed to start: {e}")
        return self.info

    def _alive(self) -> bool:
        return self.proc is not None and self.proc.is_alive()

    def _kill(self) -> None:
        if self.proc is not None and self.proc.is_alive():
            self.proc.kill()
        if self.proc is not None and self.proc.pid is not None:   # a process that never started has no pid
            self.proc.join(10)
        if self.conn is not None:
            self.conn.close()
        self.proc, self.conn = None, None

    def close(self) -> None:
        """Ask the worker to stop, and kill it if it does not within 10 s."""
        if self._alive():
            try:
                self.conn.send(("stop",))
            except (BrokenPipeError, OSError):
                pass
            self.proc.join(10)
        self._kill()

    def _log_size(self) -> int:
        try:
            return self.log_path.stat().st_size if self.log_path else 0
        except OSError:
            return 0

    def _log_tail(self, since: int = 0) -> str:
        """What the worker wrote to its log since byte ``since``: the beginning (a fatal
        error's report and stack) and the end, at most :data:`LOG_TAIL` characters."""
        if not self.log_path or not self.log_path.exists():
            return ""
        with open(self.log_path, "rb") as fh:
            fh.seek(since)
            text = fh.read().decode("utf-8", errors="replace").strip()
        fatal = text.find("Fatal Python error")
        if fatal > 0:
            text = text[fatal:]  # faulthandler's report first, whatever was logged before it
        if len(text) > LOG_TAIL:
            head = 3 * LOG_TAIL // 4
            text = text[:head] + "\n[...]\n" + text[-(LOG_TAIL - head):]
        return f"; worker log ({self.log_path}):\n{text}" if text else ""

    # -- one case ---------------------------------------------------------------
    def evaluate(self, path: Path, case_id: str, check: str, meanwhile: Optional[Callable] = None, case=None):
        """Judge one case in the worker; a crash or a timeout is an ``error`` result.

        Parameters
        ----------
        path : Path
            The case file (the worker loads it unless ``case`` is given).
        case_id, check : str
            The case's id and check kind, for an ``error`` result made here.
        meanwhile : callable, optional
            ``meanwhile(busy)`` is called once, right after the case is sent (also when the
            worker could not be restarted): work of this process that overlaps the worker's
            (the runner loads the next case there, and draws the report's charts while
            ``busy()``, True as long as the worker has not answered). Its time counts in the
            case's time limit; it must not raise.
        case : harness.corpus.load.Case, optional
            The case as this process loaded it from ``path``: sent to the worker, which
            judges it without loading the file again (the file is loaded when it does not
            pickle).

        Returns
        -------
        harness.judge.Result
        """
        from harness.judge.result import Result
        t0 = time.perf_counter()
        if not self._alive():
            try:
                self._launch()
                self.restarts += 1
            except RuntimeError as e:
                if meanwhile is not None:
                    meanwhile(_idle)
                return Result(case_id, self.info["name"], "error", check, time.perf_counter() - t0,
                              {"message": f"the worker could not be restarted: {e}"})
        pid = self.proc.pid
        log_start = self._log_size()
        events = _memory_events(pid)
        ooms = _oom_kills(events)
        blob = None if case is None else _pack_case(case)
        self.conn.send(("case", str(path)) if blob is None else ("case", str(path), blob))
        peak = 0
        deadline = time.monotonic() + self.timeout
        if meanwhile is not None:
            meanwhile(lambda: not self.conn.poll(0))
        while True:  # wait for the result, reading the worker's peak memory meanwhile
            left = deadline - time.monotonic()
            if left <= 0:
                self._kill()
                return Result(case_id, self.info["name"], "error", check, time.perf_counter() - t0,
                              {"message": f"timed out after {self.timeout:g} s (worker {pid} killed and restarted)",
                               "isolation": "timeout"})
            if self.conn.poll(min(left, MEMORY_POLL_S)):
                break
            peak = max(peak, _peak_rss(pid) or 0)
        try:
            kind, payload, poisoned = self.conn.recv()
        except (EOFError, ConnectionResetError, OSError):
            self.proc.join(5)
            code = self.proc.exitcode
            oom = code == -signal.SIGKILL and _oom_rose(ooms, _oom_kills(events))
            why = _signal_name(code)
            if oom:
                why = "was killed by the kernel's out-of-memory killer (SIGKILL; oom_kill count rose during the case)"
            mem = f" (peak resident memory seen: {peak / 2**20:.0f} MiB)" if peak else ""
            msg = f"the worker (pid {pid}) {why}{mem} while running this case{self._log_tail(log_start)}"
            self._kill()
            details = {"message": msg, "isolation": "crash", "exitcode": code}
            if oom:
                details["oom_killed"] = True
            if peak:
                details["peak_rss_bytes"] = peak
            return Result(case_id, self.info["name"], "error", check, time.perf_counter() - t0, details)
        d = payload
        if poisoned:
            # A CUDA error leaves the worker's device context unusable: start afresh.
            self._kill()
            d["details"]["worker_restarted"] = "after a device error"
        return Result(d["case"], d["impl"], d["status"], d["check"], d["seconds"], d["details"], d.get("provenance"))


def _idle() -> bool:
    """The ``busy`` of a ``meanwhile`` call when no worker is judging (:meth:`Worker.evaluate`)."""
    return False


class InProcess:
    """The same interface as :class:`Worker`, without a process (``--no-isolation``)."""

    why_not_isolated: Optional[str] = None

    def __init__(self, spec, device: str, root: Path, n_stat: int, **_):
        from harness.corpus.findings import load_findings
        from harness.judge.judge import Judge
        self.spec, self.device, self.root = spec, device, Path(root)
        self._holds_threads = _hold_threads(device)
        try:
            self.impl = _build(spec)
        except BaseException:
            self.close()
            raise
        self.judge = Judge(load_findings(self.root / "findings.toml"), n_stat, device)
        self.info: Optional[WorkerInfo] = None
        self.restarts = 0

    def start(self) -> WorkerInfo:
        """Describe the implementation (available, version, profile)."""
        self.info = _describe(self.impl, self.device)
        return self.info

    def evaluate(self, path: Path, case_id: str, check: str, meanwhile: Optional[Callable] = None, case=None):
        """Judge one case in this process (exceptions become ``error``, as in the judge).

        ``meanwhile`` (:meth:`Worker.evaluate`) is called after the case is judged, with a
        ``busy`` that is always False: nothing runs alongside an in-process implementation.
        ``case`` is ignored: the file is loaded afresh, so that judging cannot change the
        caller's case object.
        """
        from harness.corpus.load import load_case
        res = self.judge.evaluate(load_case(Path(path), self.root), self.impl, self.info["version"])
        if meanwhile is not None:
            meanwhile(_idle)
        return res

    def close(self) -> None:
        """Give torch back the thread count it had before this runner (:func:`torch_threads`)."""
        if self._holds_threads:
            self._holds_threads = False
            _release_threads()


def make_runner(spec, device: str, root: Path, n_stat: int, isolate: bool = True, **kw):
    """A :class:`Worker` when ``isolate`` and :func:`start_method` allows one, else an :class:`InProcess`."""
    if isolate and start_method(spec) is not None:
        return Worker(spec, device, root, n_stat, **kw)
    runner = InProcess(spec, device, root, n_stat)
    if isolate:
        runner.why_not_isolated = ("the implementation object cannot be pickled and this process has "
                                   f"{_thread_count()} threads: forking it could deadlock")
    return runner
