"""The adapter conformance kit: ``sampcheck check-impl NAME`` (``docs/adapters.md``, section 7).

Two parts:

1. **protocol checks** (:func:`protocol_checks`): what ``impls/base.py`` asks of every
   implementation, each check a :class:`Problem` naming the check, what was seen and the
   rule (with the file that states it);
2. **the smoke corpus** (:func:`smoke`): the cases tagged ``smoke`` run through the real
   runner on the implementation (``sampcheck run --cases tag:smoke``).

:func:`assert_conforms` raises :class:`AssertionError` with every problem, for an
adapter's own test suite. Sits above :mod:`harness.records` in the layers (it runs the
runner).
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import torch

from impls import params, registry
from impls.base import Row, RowResult, declaration_problems

__all__ = ["Problem", "protocol_checks", "smoke", "assert_conforms", "SMOKE_TAG"]

#: The tag of the smoke corpus (``tags = ["smoke"]`` in a case file).
SMOKE_TAG = "smoke"


@dataclass(frozen=True)
class Problem:
    """One broken rule of the protocol.

    Attributes
    ----------
    check : str
        The check's name (``step-length``, ``duplicate-slot``, ...).
    message : str
        What was seen, and the rule with the file that states it.
    """

    check: str
    message: str

    def __str__(self) -> str:
        return f"FAIL {self.check}: {self.message}"


def _declaration(impl) -> list:
    """:func:`impls.base.declaration_problems` as :class:`Problem` objects."""
    return [Problem(field_, message) for field_, message in declaration_problems(impl)]


def _plain_rows(impl, vocab: int = 5) -> list:
    """Rows that need no feature: only logits (and a slot)."""
    x = torch.tensor([0.5, 2.0, 1.0, -1.0, 0.0])[:vocab]
    return [Row(x.clone(), slot=0), Row(torch.tensor([3.0, 1.0, 0.0, 2.0, -2.0]), slot=1),
            Row(torch.tensor([0.0, 0.0, 4.0, 1.0, 1.0]), slot=2)]


def _check_results(what: str, rows: list, out, problems: list) -> None:
    if not isinstance(out, list):
        problems.append(Problem("step-type", f"{what} returned a {type(out).__name__}, not a list of RowResult "
                                             "(impls/base.py Session.step)"))
        return
    if len(out) != len(rows):
        problems.append(Problem("step-length", f"{what} on {len(rows)} rows returned {len(out)} results "
                                               "(impls/base.py Session.step: one RowResult per row, in order)"))
    for i, (row, r) in enumerate(zip(rows, out)):
        where = f"{what}, row {i}"
        if not isinstance(r, RowResult):
            problems.append(Problem("result-type", f"{where}: a {type(r).__name__}, not impls.base.RowResult"))
            continue
        if (r.token is None) == (r.error is None):
            problems.append(Problem("token-xor-error", f"{where}: token={r.token!r}, error={r.error!r}: exactly one "
                                                       "is set (impls/base.py RowResult)"))
            continue
        if r.token is not None:
            try:
                tok = operator.index(r.token)
            except TypeError:
                problems.append(Problem("token-type", f"{where}: token {r.token!r} is not an int"))
                continue
            if not 0 <= tok < row.vocab:
                problems.append(Problem("token-range", f"{where}: token {tok} outside the vocabulary [0, {row.vocab})"))
        elif r.error not in params.ERRORS:
            problems.append(Problem("error-kind", f"{where}: error kind {r.error!r} is not one of the fixed kinds "
                                                  "(impls/params.py ERRORS; cases/README.md, error kinds)"))


def protocol_checks(impl, device: str = "cpu") -> list:
    """Every broken rule of the protocol, as :class:`Problem` (empty: it conforms).

    Parameters
    ----------
    impl : Implementation
        The built object (:func:`impls.registry.create`).
    device : str

    Returns
    -------
    list of Problem
        In order: the declaration, ``available``/``version``/``unsupported``, a session,
        one step of plain rows, a reused slot, a seeded row on two fresh sessions (when it
        declares ``seed``), ``sample_many`` (when its session has it). A check that cannot
        run because an earlier one failed is not reported.
    """
    problems = _declaration(impl)
    why = impl.available(device)
    if why is not None and not isinstance(why, str):
        problems.append(Problem("available", f"available({device!r}) returned {why!r}: None or the reason (str)"))
        return problems
    if why:
        problems.append(Problem("available", f"not available on {device}: {why} (the other checks need it)"))
        return problems
    try:
        ver = impl.version()
        if not isinstance(ver, str) or not ver:
            problems.append(Problem("version", f"version() returned {ver!r}: a non-empty str"))
    except Exception as e:
        problems.append(Problem("version", f"version() raised {type(e).__name__}: {e}"))
    if "conformance" not in registry.roles_of(impl):
        return problems
    rows = _plain_rows(impl)
    for i, row in enumerate(rows):
        try:
            r = impl.unsupported(row)
        except Exception as e:
            problems.append(Problem("unsupported", f"unsupported(row {i}) raised {type(e).__name__}: {e}"))
            return problems
        if r is not None and not isinstance(r, str):
            problems.append(Problem("unsupported", f"unsupported(row {i}) returned {r!r}: None or the reason (str)"))
    if any(impl.unsupported(r) for r in rows):
        return problems  # it expresses no plain row (a scenario-only driver): nothing more to check by step
    try:
        session = impl.open_session(device)
    except Exception as e:
        problems.append(Problem("open-session", f"open_session({device!r}) raised {type(e).__name__}: {e}"))
        return problems
    if not callable(getattr(session, "step", None)):
        problems.append(Problem("open-session", "the session has no step(rows) method (impls/base.py Session)"))
        return problems
    try:
        out = session.step(rows)
    except Exception as e:
        problems.append(Problem("step", f"step() on {len(rows)} plain rows raised {type(e).__name__}: {e} (a bad row "
                                        "is that row's error, never an exception: impls/base.py RowError)"))
        return problems
    _check_results("step()", rows, out, problems)
    # one row per slot per step: the later row of a reused slot is duplicate_slot, the earlier keeps its token
    dup = [rows[0], rows[1].replace(slot=rows[0].slot)]
    try:
        out = impl.open_session(device).step(dup)
        _check_results("step() with a reused slot", dup, out, problems)
        if isinstance(out, list) and len(out) == 2 and all(isinstance(r, RowResult) for r in out):
            if out[1].error != "duplicate_slot":
                got = f"token {out[1].token}" if out[1].error is None else f"error {out[1].error!r}"
                problems.append(Problem("duplicate-slot", f"row 1 reuses slot {rows[0].slot} and got {got}, want error "
                                                          "'duplicate_slot' (impls/base.py claim_slot)"))
            if out[0].error is not None:
                problems.append(Problem("duplicate-slot", f"row 0 (the slot's first row) got error {out[0].error!r}: "
                                                          "one bad row never fails another"))
    except Exception as e:
        problems.append(Problem("duplicate-slot", f"step() with a reused slot raised {type(e).__name__}: {e}"))
    if "seed" in impl.features and "temperature" in impl.features:
        seeded = [Row(torch.tensor([1.0, 1.1, 0.9, 1.05, 0.95]), temperature=1.0, seed=1234, slot=0)]
        try:
            a = impl.open_session(device).step(seeded)[0]
            b = impl.open_session(device).step(seeded)[0]
            if a.error is None and b.error is None and a.token != b.token:
                problems.append(Problem("seed-fresh-session", f"one seeded row on two fresh sessions gave tokens "
                                                              f"{a.token} and {b.token} (a fresh session starts every "
                                                              "seeded stream at its beginning: docs/adapters.md, section 4)"))
        except Exception as e:
            problems.append(Problem("seed-fresh-session", f"a seeded sampling row raised {type(e).__name__}: {e}"))
    sample_many = getattr(impl.open_session(device), "sample_many", None)
    if callable(sample_many):
        row = Row(torch.tensor([0.0, 1.0, 2.0]), temperature=1.0)
        try:
            counts = torch.as_tensor(sample_many(row, range(50)))
            if tuple(counts.shape) != (3,) or int(counts.sum()) != 50:
                problems.append(Problem("sample-many", f"sample_many(row of vocab 3, 50 seeds) returned counts of "
                                                       f"shape {tuple(counts.shape)} summing to {int(counts.sum())}: "
                                                       "want (3,) summing to 50"))
        except Exception as e:
            problems.append(Problem("sample-many", f"sample_many raised {type(e).__name__}: {e}"))
    return problems


def smoke(spec, device: str = "cpu", out_dir: Optional[Path] = None, progress: bool = False):
    """Run the smoke corpus (cases tagged :data:`SMOKE_TAG`) on ``spec`` through the runner.

    Returns
    -------
    harness.run.runner.RunOutcome
    """
    import tempfile

    from harness.run.runner import run
    if out_dir is None:
        out_dir = Path(tempfile.mkdtemp(prefix="sampcheck-kit-"))
    return run([spec], [f"tag:{SMOKE_TAG}"], Path(out_dir), device, progress=progress)


def assert_conforms(spec, device: str = "cpu", smoke_corpus: bool = True) -> None:
    """Raise :class:`AssertionError` listing every protocol problem and smoke ``fail``/``error`` of ``spec``.

    Parameters
    ----------
    spec : str or Implementation
        A registered name, ``package.module:Class``, or the object.
    """
    impl = registry.create(spec) if isinstance(spec, str) else spec
    lines = [str(p) for p in protocol_checks(impl, device)]
    if smoke_corpus and not lines:
        out = smoke(spec, device)
        lines += [f"SMOKE {r['status'].upper()} {r['case']}: {r['details'].get('message', '')}"
                  for r in out.doc["results"] if r["status"] in ("fail", "error")]
    assert not lines, "\n".join(lines)
