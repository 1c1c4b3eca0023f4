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
A flip *changes a prediction* when what the judge compares changes for some case: its golden
record (:meth:`~harness.corpus.kinds.CheckKind.golden_record`; under an RNG that is not the
canonical one, without the drawn token of a sampling row and what follows from it) or whether
each of its relations holds (:meth:`~harness.corpus.kinds.CheckKind.predicted_relations`). :func:`coverage` reports both for every flip; a flip that changes a
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


#: Outputs that follow a sampling row's drawn token: under an RNG that is not the canonical one
#: the judge compares the token only as membership in the support, so these are no prediction.
_DRAWN = ("token", "logprob", "processed_logprob", "rank", "finish_reason")


def _record(judge, case, profile, canonical: bool) -> object:
    """What the judge compares of the prediction: the golden record and whether each declared relation
    holds; with ``canonical`` False (another RNG), without a sampling row's drawn token and what follows
    from it, and of a scenario request that drew random numbers only its error (as the judge compares)."""
    rec = case.kind.golden_record(judge, case, profile)
    out = {k: v for k, v in rec.items() if k not in ("profile", "reference_version")}
    if not canonical:
        for b in out.get("batches", []):
            for row in b["rows"]:
                wide = len(row.get("support", [])) > 1 or row.get("support_size", 0) > 1
                if row.get("mode") == "sampling" and wide:
                    for k in _DRAWN:
                        row.pop(k, None)
        scen = out.get("scenario")
        if isinstance(scen, dict):
            for rid, req in scen.items():
                if isinstance(req, dict) and req.get("offsets"):
                    scen[rid] = {"error": req.get("error")}
    out["relations"] = case.kind.predicted_relations(judge, case, profile)
    return out


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
                # under another RNG (either side) a draw is compared only as membership in the support
                canonical = profile.rng == "canonical" and probe.rng == "canonical"
                for c in cases:
                    if (c.id, canonical) not in base:
                        base[(c.id, canonical)] = _record(judge, c, profile, canonical)
                    try:
                        differs = _record(judge, c, probe, canonical) != base[(c.id, canonical)]
                    except Exception:
                        differs = True
                    if differs:
                        changes = c.id
                        break
            out.append({"profile": profile.name, "field": field, "value": repr(value), "caught_by": caught,
                        "changes": changes})
    return out


def main(argv=None) -> int:
    """``python -m harness.judge.mutation [PROFILE ...]``: every flip of the profiles (default: all), one line each.

    Lines read ``CAUGHT <profile> <field> <value> <case>``, ``GAP ... <case whose prediction changes>`` or
    ``no-effect ...``. Exit status 1 when any GAP is left, 2 for an unknown profile or a case that does not load.
    """
    import sys
    from harness.corpus.load import CaseError, discover, load_case
    names = list(argv if argv is not None else sys.argv[1:]) or list(PROFILES)
    unknown = [n for n in names if n not in PROFILES]
    if unknown:
        print(f"unknown profile(s) {', '.join(unknown)}; known: {', '.join(PROFILES)}", file=sys.stderr)
        return 2
    cases = []
    for p in discover():
        try:
            cases.append(load_case(p))
        except CaseError as e:
            print(f"does not load: {e}", file=sys.stderr)
            return 2
    res = coverage(cases, [PROFILES[n] for n in names], progress=lambda line: print(line, file=sys.stderr))
    for r in res:
        mark = "CAUGHT" if r["caught_by"] else ("GAP" if r["changes"] else "no-effect")
        where = r["caught_by"][0] if r["caught_by"] else (r["changes"] or "")
        print(f"{mark:9s} {r['profile']:17s} {r['field']:36s} {r['value'][:40]:40s} {where}")
    return 1 if any(not r["caught_by"] and r["changes"] for r in res) else 0


if __name__ == "__main__":
    raise SystemExit(main())
