"""The verdict ladder, once: from what a check kind found to a status (DESIGN.md, "Statuses").

Every check kind gathers its :class:`Evidence` and calls :func:`verdict`, which decides in
this order:

1. **the case is broken** — the reference under the default profile contradicts the
   case's hand-written truth (or a relation the case declares): ``error`` for every
   implementation ("case disagrees with the reference: ..."; ``details["broken_case"]``
   true), since no implementation can be judged against a wrong truth;
2. **the implementation's profile contradicts its own hand-written truth** — the case gives
   a truth for that profile (``expect_by_profile``: :mod:`harness.corpus.truths`) and the
   reference under the profile contradicts it: ``fail`` for the reference under that
   profile (``reference-<profile>``: it is the code at fault), naming the output fields and
   the profile fields one change of which would agree (``details["suspects"]``); ``error``
   for an engine with that profile, which cannot be judged against a wrong prediction
   (``details["broken_profile"]`` true in both);
3. **the implementation disagrees with its own profile's prediction** — ``known-bug``
   when a registered finding (``cases/findings.toml``) covers the case and version, else
   ``fail``;
4. **the check could not decide** (too few draws, a prediction that is an error):
   ``error``;
5. **the prediction differs from the default profile's** — ``known-diff``, the details
   naming the profile fields responsible (:mod:`.blame`) and their citations;
6. otherwise ``pass``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Callable, Optional

from .result import Result

__all__ = ["Evidence", "verdict", "BROKEN_PREFIX"]

#: How the message of a broken case starts.
BROKEN_PREFIX = "case disagrees with the reference: "


@dataclass
class Evidence:
    """What a check kind found, for :func:`verdict`.

    Attributes
    ----------
    details : dict
        The result's details so far (rows, invariants, profile, ...); the ladder adds
        ``message``, and ``fields`` or ``finding`` where they apply.
    broken_case : str or None
        Step 1: where the reference under the default profile contradicts the case (e.g.
        ``"main:0: token: got 1, want 2"``: the reference gave 1, the case wants 2); the
        message is :data:`BROKEN_PREFIX` followed by it.
    profile_truth : str or None
        Step 2: where the prediction of the implementation's profile contradicts the case's
        truth for that profile (``"main:0: token: got 1, want 2"``).
    suspects : callable or None
        ``suspects() -> list of dict`` (:func:`harness.judge.blame.suspects`); called only
        at step 2.
    own : str or None
        Step 3: the message when the implementation's outputs differ from its profile's
        prediction.
    own_rows : list of str or None
        Step 3: the labels of the rows that differ (exact cases); a finding with ``rows``
        explains the case only when every one of them is among its rows.
    undecided : str or None
        Step 4: the message when the check cannot be judged.
    differs : bool
        Step 5: the profile's prediction differs from the default profile's.
    explain : callable or None
        ``explain() -> list of dict``: the profile fields behind the difference
        (:func:`harness.judge.blame.field_entries`); called only for ``known-diff``.
    diff_message : callable or None
        ``diff_message(fields) -> str``: the ``known-diff`` message.
    pass_message : str
    """

    details: dict = field(default_factory=dict)
    broken_case: Optional[str] = None
    profile_truth: Optional[str] = None
    suspects: Optional[Callable[[], list]] = None
    own: Optional[str] = None
    own_rows: Optional[list] = None
    undecided: Optional[str] = None
    differs: bool = False
    explain: Optional[Callable[[], list]] = None
    diff_message: Optional[Callable[[list], str]] = None
    pass_message: str = "matches the prediction, which equals the default profile's"


def verdict(judge, case, impl, version: str, ev: Evidence) -> Result:
    """The status of ``case`` on ``impl`` from ``ev`` (the ladder of the module docstring).

    Parameters
    ----------
    judge : harness.judge.Judge
        Its registered findings decide ``known-bug``.
    case : harness.corpus.load.Case
    impl : Implementation
    version : str
        The implementation's version (findings have version ranges).
    ev : Evidence

    Returns
    -------
    Result
    """
    details = ev.details

    def out(status: str, message: str) -> Result:
        details["message"] = message
        return Result(case.id, impl.name, status, case.check, details=details)

    if ev.broken_case:
        details["broken_case"] = True
        legend = " (got: the reference under the default profile; want: the case)" if "want " in ev.broken_case else ""
        return out("error", BROKEN_PREFIX + ev.broken_case + legend)
    if ev.profile_truth:
        details["broken_profile"] = True
        name = impl.profile.name
        found = ev.suspects() if ev.suspects else []
        details["suspects"] = found
        what = (f"the {name!r} profile's prediction contradicts the case's truth for {name!r}: {ev.profile_truth} "
                f"(got: the reference under {name!r}; want: the case's expect_by_profile.{name})")
        what += ("; it would agree with " + ", ".join(f"{s['field']} = {s['would_agree_with']} (now {s['profile']})"
                                                      for s in found)) if found else (
            "; no single profile field change makes it agree")
        if getattr(impl, "is_prediction", False):
            return out("fail", what)
        return out("error", f"cannot be judged: {what}")
    if ev.own:
        finding = judge.finding(impl.name, version, case.id)
        unexplained = ([r for r in ev.own_rows if r not in finding.rows]
                       if finding and finding.rows and ev.own_rows is not None else [])
        if unexplained:
            details["finding_rows_unexplained"] = unexplained
            return out("fail", f"{ev.own} (finding {finding.id} explains row(s) {', '.join(finding.rows)} only; "
                               f"also differ: {', '.join(unexplained)})")
        if finding:
            details["finding"] = dataclasses.asdict(finding)
            return out("known-bug", f"{ev.own} — known bug {finding.id}: {finding.title}")
        return out("fail", ev.own)
    if ev.undecided:
        return out("error", ev.undecided)
    if ev.differs:
        details["fields"] = ev.explain() if ev.explain else []
        return out("known-diff", ev.diff_message(details["fields"]) if ev.diff_message else "differs from the default")
    return out("pass", ev.pass_message)
