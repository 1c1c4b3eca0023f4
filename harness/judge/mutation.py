"""Whether the corpus's hand-written truths catch a wrong profile field: one field flipped at a time.

A *flip* replaces one semantic field of a profile by another value (:func:`flips`):

* for the default profile (``trtllm``, whose truth is ``expect``), every value another
  registered profile gives the field, or the negation of a bool;
* for any other profile, the default's value of each field where the profile differs
  from the default (the fields that make it that engine's profile).

A flip is *caught* when some case that gives a truth for the profile
(:meth:`~harness.corpus.kinds.CheckKind.truth_profiles`) sees its prediction under the
flipped profile contradict that truth (:meth:`~harness.corpus.kinds.CheckKind.truth_mismatches`):
the run would then make ``reference-<profile>`` ``fail`` (the default: a broken case).
A flip *changes a prediction* when some case's golden record
(:meth:`~harness.corpus.kinds.CheckKind.golden_record`) differs between the profile and the
flipped one. :func:`coverage` reports both for every flip; a flip that changes a
prediction without being caught is a gap in the corpus's truths.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Optional

from impls.profiles import PROFILES, TRTLLM, Profile, profile_diff

__all__ = ["flips", "flipped", "coverage"]


def flips(profile: Profile) -> list:
    """``(field, value)`` for each flip of ``profile`` (the module docstring's rule), in field order."""
    if profile.name == TRTLLM.name:
        out = []
        for f, mine in profile.semantic_fields().items():
            values = [not mine] if isinstance(mine, bool) else []
            for p in PROFILES.values():
                v = getattr(p, f)
                if v != mine and v not in values:
                    values.append(v)
            out += [(f, v) for v in values]
        return out
    return [(f, getattr(TRTLLM, f)) for f in profile_diff(TRTLLM, profile)]


def flipped(profile: Profile, field: str, value) -> Profile:
    """``profile`` with ``field`` set to ``value``, named ``<profile>~<field>``."""
    return dataclasses.replace(profile, name=f"{profile.name}~{field}", **{field: value})


def _record(judge, case, profile) -> object:
    rec = case.kind.golden_record(judge, case, profile)
    return {k: v for k, v in rec.items() if k not in ("profile", "reference_version")}


def coverage(cases: list, profiles: Optional[list] = None, progress: Optional[Callable[[str], None]] = None) -> list:
    """Every flip of every profile, with the cases that catch it or, if none, one whose prediction it changes.

    Parameters
    ----------
    cases : list of harness.corpus.load.Case
        The corpus (load errors left out by the caller).
    profiles : list of Profile, optional
        Default: every registered profile.
    progress : callable, optional
        Called with one line per profile.

    Returns
    -------
    list of dict
        ``{"profile", "field", "value", "caught_by", "changes"}``: ``caught_by`` the ids of
        the cases whose truth for the profile the flip contradicts (the first one found is
        enough; empty when none), ``changes`` the id of one case whose prediction the flip
        changes (None when caught, or when no prediction changes), ``value`` as ``repr``.
    """
    from .judge import Judge
    judge = Judge([], 1)
    out = []
    for profile in profiles or list(PROFILES.values()):
        with_truth = [c for c in cases if profile.name in c.kind.truth_profiles(c)]
        if progress:
            progress(f"{profile.name}: {len(flips(profile))} flips, {len(with_truth)} cases with a truth")
        base: dict = {}
        for field, value in flips(profile):
            probe = flipped(profile, field, value)
            caught = []
            for c in with_truth:
                try:
                    bad = c.kind.truth_mismatches(judge, c, probe, profile.name)
                except Exception as e:  # a flip the reference cannot run counts as contradicting
                    bad = [f"{type(e).__name__}: {e}"]
                if bad:
                    caught.append(c.id)
                    break
            changes = None
            if not caught:
                for c in cases:
                    if c.id not in base:
                        base[c.id] = _record(judge, c, profile)
                    try:
                        differs = _record(judge, c, probe) != base[c.id]
                    except Exception:
                        differs = True
                    if differs:
                        changes = c.id
                        break
            out.append({"profile": profile.name, "field": field, "value": repr(value), "caught_by": caught,
                        "changes": changes})
    return out
