"""Golden files: the reference's predictions per profile, reviewed and guarding against drift.

``golden/<profile>/<case-id>.json`` records what the reference predicts for a
case under that profile, in the shape its check kind writes
(:meth:`harness.corpus.kinds.CheckKind.golden_record`): for the single-step
kinds, every row of every batch (token, error, mode, finish reason,
RAW/PROCESSED logprobs rounded to 1e-6, rank and the support: listed up to 64
ids, otherwise its size and a CRC-32 of the ids; and the rewritten logits of a
row whose truths check them); for scenarios, per request,
every observation (for beam search the predecessor map of every step). Each
file names the case, the profile and :data:`REFERENCE_VERSION`.

Floats are compared within :data:`FLOAT_ATOL` (1e-5), because float32
results differ in their last bits between CPUs; anything else compares
exactly. ``sampcheck golden update`` shows a
unified diff of every file it would change and writes them only with
``--accept``; ``sampcheck golden add ID``
does the same for the files of one new case; ``sampcheck golden check``
fails on any difference (drift).
"""

from __future__ import annotations

import json
from pathlib import Path

from impls.profiles import PROFILES

from harness.corpus.paths import project_dir

__all__ = ["GOLDEN_DIR", "golden_path", "plan", "unified_diff", "write", "update", "check", "same", "FLOAT_ATOL",
           "FLOAT_RTOL"]

GOLDEN_DIR = project_dir("golden")


#: How far a float of a golden file may move and still be "the same": golden files round to 1e-6,
#: and float32 arithmetic differs between CPUs (vector widths change the order of the sums of a
#: softmax over 32000 tokens). Measured on 2026-12-01: the committed files, written on the CI
#: machine, against an AMD EPYC development machine: 127 of 186 cases differed in the sixth decimal,
#: by at most 5.0e-6 (a logprob of a 32000-token row); twice that, and still far below any rule's
#: effect.
FLOAT_ATOL, FLOAT_RTOL = 1e-5, 1e-6


def same(a, b) -> bool:
    """Whether two golden contents are equal, floats within :data:`FLOAT_ATOL` + :data:`FLOAT_RTOL` ``|b|``.

    Integers (tokens, ranks, sizes), strings (``"inf"``, error kinds) and the structure compare
    exactly.
    """
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, float) or isinstance(b, float):
        if isinstance(a, bool) or isinstance(b, bool) or not isinstance(a, (int, float)) \
                or not isinstance(b, (int, float)):
            return False
        return abs(a - b) <= FLOAT_ATOL + FLOAT_RTOL * abs(b)
    return a == b


def _changed(old, new: str) -> bool:
    """Whether a golden file's text ``old`` (None: missing) differs from ``new`` beyond :func:`same`."""
    if old is None:
        return True
    if old == new:
        return False
    try:
        return not same(json.loads(old), json.loads(new))
    except json.JSONDecodeError:
        return True


def golden_path(case_id: str, profile_name: str, root: Path = GOLDEN_DIR) -> Path:
    """``golden/<profile>/<case-id>.json``.

    Raises
    ------
    ValueError
        ``case_id`` is an external id (``ext/...``: a file from outside the corpus,
        :mod:`harness.corpus.ids`), or the path would leave ``root/<profile>`` (an id with
        ``..`` or an absolute one): golden files are written for corpus cases only, and only
        under the golden folder.
    """
    import os
    from harness.corpus.ids import is_external
    if is_external(case_id):
        raise ValueError(f"{case_id}: a case from outside the corpus has no golden file")
    base = Path(root) / profile_name
    path = base / f"{case_id}.json"
    if not os.path.normpath(path).startswith(os.path.normpath(base) + os.sep):
        raise ValueError(f"{case_id!r}: its golden file would lie outside {base}")
    return path


def _dump(rec: dict) -> str:
    return json.dumps(rec, indent=1, sort_keys=True) + "\n"


def _compute(cases: list, judge, profiles) -> dict:
    """``{path relative to the golden folder: (case, text)}`` of every case under every profile."""
    import sys

    from tqdm import tqdm
    out = {}
    # progress on a terminal only (tqdm turns itself off when stderr is not one: CI logs stay clean)
    for case in tqdm(cases, desc="golden", unit="case", file=sys.stderr, disable=None, leave=False):
        for name in profiles:
            out[golden_path(case.id, name, Path())] = (case, _dump(case.kind.golden_record(judge, case, name)))
    return out


def plan(cases: list, judge, profiles=tuple(PROFILES), root: Path = None) -> list:
    """The golden files that differ from what the reference computes now.

    Parameters
    ----------
    cases : list of Case
    judge : harness.judge.Judge
        Its :meth:`~harness.judge.Judge.predict` gives the predictions.
    profiles : sequence of str
        Profile names (default: every profile of :data:`impls.profiles.PROFILES`).
    root : Path, optional
        The golden directory (default :data:`GOLDEN_DIR`, ``golden/``).

    Returns
    -------
    list of (Path, str or None, str)
        ``(path, old text or None when the file does not exist, new text)``
        for every file that would change, in case then profile order.
        Nothing is written.
    """
    out = []
    for path, (_case, text) in _compute(cases, judge, profiles).items():
        path = Path(root if root is not None else GOLDEN_DIR) / path
        old = path.read_text() if path.exists() else None
        if _changed(old, text):
            out.append((path, old, text))
    return out


def unified_diff(path: Path, old, new: str, base: Path = None) -> str:
    """A unified diff (``git diff`` style) of one golden file, ``old`` -> ``new``.

    Parameters
    ----------
    path : Path
    old : str or None
        The current text; ``None`` for a file that does not exist yet
        (shown against ``/dev/null``).
    new : str
    base : Path, optional
        Paths are shown relative to it (default: the project root).

    Returns
    -------
    str
        Ends with a newline; empty when ``old == new``.
    """
    import difflib
    base = Path(base) if base else Path(GOLDEN_DIR).parent
    try:
        shown = Path(path).resolve().relative_to(base.resolve()).as_posix()
    except ValueError:
        shown = str(path)
    lines = difflib.unified_diff((old or "").splitlines(keepends=True), new.splitlines(keepends=True),
                                 fromfile="/dev/null" if old is None else f"a/{shown}", tofile=f"b/{shown}")
    return "".join(lines)


def write(changes: list, root: Path = None) -> list:
    """Write the files of :func:`plan`; return ``[(path, "added"|"changed")]``.

    Raises
    ------
    ValueError
        A path outside ``root`` (default :data:`GOLDEN_DIR`), symbolic links resolved, before
        anything is written: golden files are written under the golden folder only.
    """
    import os
    base = os.path.realpath(root if root is not None else GOLDEN_DIR)
    for path, _, _ in changes:
        if not os.path.realpath(path).startswith(base + os.sep):
            raise ValueError(f"{path}: outside the golden folder {base}; nothing written")
    done = []
    for path, old, text in changes:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        done.append((path, "added" if old is None else "changed"))
    return done


def update(cases: list, judge, profiles=tuple(PROFILES), root: Path = None, accept: bool = False) -> list:
    """Golden files that change: written only when ``accept`` is true.

    Returns
    -------
    list of (Path, str)
        ``(path, "added"|"changed")`` for every file that differs from the
        reference's output now (written when ``accept``, else untouched).
    """
    changes = plan(cases, judge, profiles, root)
    if accept:
        return write(changes, root)
    return [(path, "added" if old is None else "changed") for path, old, _ in changes]


def check(cases: list, judge, profiles=tuple(PROFILES), root: Path = None) -> list:
    """Compare predictions with golden files; return ``[(path, problem)]`` (empty when clean)."""
    problems = []
    for path, (case, text) in _compute(cases, judge, profiles).items():
        path = Path(root if root is not None else GOLDEN_DIR) / path
        if not path.exists():
            problems.append((path, "missing (run 'sampcheck golden add <id>', review, then add --accept)"))
            continue
        try:
            old = path.read_text(encoding="utf-8")
            a = json.loads(old)
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            where = f" (line {e.lineno}, column {e.colno})" if isinstance(e, json.JSONDecodeError) else ""
            problems.append((path, f"unreadable golden file{where}: {e.msg if isinstance(e, json.JSONDecodeError) else e}; "
                                   "rewrite it with 'sampcheck golden update --accept' after review"))
            continue
        b = json.loads(text)
        if not same(a, b):
            diffs = case.kind.golden_diff(a, b)
            if a.get("reference_version") != b["reference_version"]:
                diffs.append(f"reference_version: golden {a.get('reference_version')!r}, now {b['reference_version']!r}")
            problems.append((path, "; ".join(diffs) or "content differs (row count or layout)"))
    return problems
