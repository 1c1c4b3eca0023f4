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

:func:`dependence` asks the converse for the coverage table of ``docs/coverage.md``: which
fields each case's prediction depends on, trying every flip of every profile (and, for a field
no profile varies, :func:`extra_flips`) on the cases that read the field (:func:`fields_read`);
:func:`refresh` keeps its cache (``docs/coverage.json``) up to date.
"""

from __future__ import annotations

import dataclasses
import re
import time
from pathlib import Path
from typing import Callable, Optional

from harness.corpus.tables import CACHE_SCHEMA, canon, case_fingerprint, profile_fingerprint
from impls.profiles import PROFILES, TRTLLM, Profile, profile_diff

from .judge import Judge

__all__ = ["flips", "flipped", "coverage", "extra_flips", "fields_read", "dependence", "flip_key", "all_flip_keys",
           "refresh", "cache_gaps"]


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


def extra_flips(profile: Profile) -> list:
    """Flips :func:`flips` lacks, for :func:`dependence`: for the default profile, each field no registered
    profile varies (and not a bool) gets the other values its ``Profile`` docstring names (``{"end_id",
    "length"}``), or, for an integer, ``value + 1``. Empty for any other profile."""
    if profile.name != TRTLLM.name:
        return []
    have = {f for f, _ in flips(profile)}
    out = []
    for f, mine in profile.semantic_fields().items():
        if f in have:
            continue
        m = re.search(rf"^    {f} : \{{([^}}]*)\}}", Profile.__doc__, re.M)
        named = re.findall(r'"([^"]*)"', m.group(1)) if m else []
        if named:
            out += [(f, v) for v in named if v != mine]
        elif isinstance(mine, int) and not isinstance(mine, bool):
            out.append((f, mine + 1))
    return out


class _Memo(Judge):
    """A judge that keeps every prediction, probes included: one record computes a probe's prediction once
    (:func:`_record` asks for it twice for an invariant case: its rows and its relations)."""

    def cached(self, key, compute, cache: bool = True):
        return super().cached(key, compute, True)


class _Reads:
    """The semantic fields read through a :class:`_Tracked` profile (``names`` None: not recording)."""
    names: Optional[set] = None
    mute = 0


_FIELDS = frozenset(TRTLLM.semantic_fields())


class _Tracked(Profile):
    """A profile that notes every semantic field read from it in :class:`_Reads` (not those that hashing or
    comparing it reads: a prediction cache's keys read every field)."""

    def __getattribute__(self, name):
        if _Reads.names is not None and not _Reads.mute and name in _FIELDS:
            _Reads.names.add(name)
        return object.__getattribute__(self, name)

    def __hash__(self):
        _Reads.mute += 1
        try:
            return Profile.__hash__(self)
        finally:
            _Reads.mute -= 1

    def __eq__(self, other):
        _Reads.mute += 1
        try:
            return type(other) is type(self) and Profile.__eq__(self, other)
        finally:
            _Reads.mute -= 1


def fields_read(case, profile: Profile) -> tuple:
    """The records :func:`_record` gives ``case`` under ``profile`` (``{canonical: record}``), and the semantic
    fields the reference and the judge read from the profile to make them.

    A field not read cannot change the records: the prediction is deterministic, so with
    that field alone set otherwise every step runs as before. (A flip that changes which
    fields are read changes them only after reading one it flipped.)
    """
    tracked = _Tracked(**{f.name: getattr(profile, f.name) for f in dataclasses.fields(profile)})
    judge = _Memo([], 1)
    _Reads.names = set()
    try:
        records = {c: _record(judge, case, tracked, c) for c in (True, False)}
        return records, set(_Reads.names)
    finally:
        _Reads.names = None


def flip_key(profile: Profile, field: str, value) -> str:
    """``"<profile>@<fingerprint> <field> = <value>"``: a flip as the cache names it (the value as
    :func:`harness.corpus.tables.canon` writes it; the fingerprint changes with any field of the profile)."""
    return f"{profile.name}@{profile_fingerprint(profile)} {field} = {canon(value)}"


def dependence(cases: list, profiles: Optional[list] = None, todo: Optional[Callable] = None,
               found: Optional[dict] = None, progress: Optional[Callable[[str], None]] = None) -> dict:
    """The profile fields each case's prediction depends on: flipping the field changes what the judge compares.

    Parameters
    ----------
    cases : list of harness.corpus.load.Case
    profiles : list of Profile, optional
        Whose flips (:func:`flips` and :func:`extra_flips`) to try; default every registered one.
    todo : callable, optional
        ``todo(case_id, key) -> bool``: whether to try the flip of that :func:`flip_key` (default: all).
    found : dict, optional
        ``{case_id: {field: key}}`` already known (not tried again); updated in place.
    progress : callable, optional
        Called with one line per case.

    Returns
    -------
    dict
        ``{case_id: {field: key}}``: per case, each field with the first flip (:func:`flip_key`, in
        profile then flip order) that changed its golden record or one of its relations
        (:func:`_record`; under an RNG that is not the canonical one on either side, without the
        draws). A flip the reference cannot run counts as a change. A field's other flips are not
        tried once one changed the case, nor a flip of a field the case does not read under that
        profile (:func:`fields_read`).
    """
    found = {} if found is None else found
    plan = [(p, [(f, v, flip_key(p, f, v)) for f, v in flips(p) + extra_flips(p)])
            for p in profiles or list(PROFILES.values())]
    for c in cases:
        t0, tried = time.perf_counter(), 0
        mine = found.setdefault(c.id, {})
        for profile, keyed in plan:
            want = [(f, v, k) for f, v, k in keyed if f not in mine and (todo is None or todo(c.id, k))]
            if not want:
                continue
            base, read = fields_read(c, profile)
            for f, v, k in want:
                if f in mine or f not in read:
                    continue
                probe = flipped(profile, f, v)
                canonical = profile.rng == "canonical" and probe.rng == "canonical"
                tried += 1
                try:
                    differs = _record(_Memo([], 1), c, probe, canonical) != base[canonical]
                except Exception:  # a flip the reference cannot run changes the prediction
                    differs = True
                if differs:
                    mine[f] = k
        if progress:
            progress(f"{c.id}: {len(mine)} field(s), {tried} flip(s) tried, {time.perf_counter() - t0:.1f} s")
    return found


def all_flip_keys() -> list:
    """:func:`flip_key` of every flip :func:`dependence` tries (every registered profile), in its order."""
    return [flip_key(p, f, v) for p in PROFILES.values() for f, v in flips(p) + extra_flips(p)]


def cache_gaps(cache: dict, scanned: list) -> tuple:
    """What :func:`refresh` would measure: ``(case ids, flip keys)``.

    Parameters
    ----------
    cache : dict
        :func:`harness.corpus.tables.read_cache`'s content.
    scanned : list of dict
        :func:`harness.corpus.tables.scan_cases`'s entries (their ``id`` and ``sha256``).

    Returns
    -------
    (list of str, list of str)
        The cases the cache lacks or measured from another file (and those it holds that the
        corpus lacks), and the flips it never tried (new profiles or values), each sorted.
    """
    have = cache.get("cases", {})
    ids = {c["id"]: c["sha256"] for c in scanned}
    cases = sorted({i for i, sha in ids.items() if have.get(i, {}).get("sha256") != sha} | (set(have) - set(ids)))
    return cases, sorted(set(all_flip_keys()) - set(cache.get("flips", [])))


def _measure(path: str, root: str, keys: list, known: dict) -> tuple:
    """One case in a worker process: ``(id, {field: key})`` (:func:`dependence` on the flips ``keys``)."""
    import torch
    from harness.corpus.load import load_case
    torch.set_num_threads(1)
    case = load_case(Path(path), Path(root))
    want = set(keys)
    return case.id, dependence([case], todo=lambda cid, k: k in want, found={case.id: dict(known)})[case.id]


def refresh(cases: list, cache: dict, everything: bool = False, progress: Optional[Callable[[str], None]] = None,
            jobs: int = 1, journal: Optional[Path] = None, root: Optional[Path] = None) -> dict:
    """The mutation cache of ``docs/coverage.json`` brought up to date for ``cases``.

    Tries only what ``cache`` lacks: every flip on a case that is new or whose file changed
    (:func:`~harness.corpus.tables.case_fingerprint`), a flip that is new (a new profile, a
    profile or a value that changed: :func:`flip_key`) on every case, and every flip of a field
    whose recorded flip is gone. With ``everything``, all of it (the reference's code changed).

    Parameters
    ----------
    cases : list of harness.corpus.load.Case
        The corpus (every case must load).
    cache : dict
        :func:`harness.corpus.tables.read_cache`'s content.
    everything : bool
        Ignore ``cache``.
    progress : callable, optional
        Called with one line per case measured.
    jobs : int
        Worker processes (each loads its cases again from ``root``); 1: this process.
    journal : Path, optional
        A JSON-lines file each measured case is appended to at once, and read back by the next
        call for the same flips (an interrupted refresh resumes); the caller removes it once
        the cache is written.
    root : Path, optional
        The corpus the cases were loaded from (with ``jobs > 1``; default ``CASES_DIR``).

    Returns
    -------
    dict
        The new cache: ``{"schema", "flips", "cases": {id: {"sha256", "fields"}}}``.
    """
    import hashlib
    import json
    current = all_flip_keys()
    stamp = hashlib.sha256("\n".join(sorted(current)).encode()).hexdigest()[:12]
    old_flips = set() if everything else set(cache.get("flips", [])) & set(current)
    old = {} if everything else cache.get("cases", {})
    found, todo = {}, {}
    for c in cases:
        sha = case_fingerprint(c.path)
        entry = old.get(c.id)
        if entry is None or entry.get("sha256") != sha:
            found[c.id], todo[c.id] = {}, list(current)
            continue
        kept = {f: k for f, k in entry.get("fields", {}).items() if k in set(current)}
        gone = set(entry.get("fields", {})) - set(kept)
        found[c.id] = kept
        todo[c.id] = [k for k in current if k not in old_flips or k.split(" ")[1] in gone]
    done = {}
    if journal is not None and Path(journal).is_file():
        lines = Path(journal).read_text(encoding="utf-8").splitlines()
        if lines and json.loads(lines[0]).get("flips") == stamp:
            for line in lines[1:]:
                try:
                    e = json.loads(line)
                except ValueError:   # a line cut short by an interruption
                    continue
                done[e["id"]] = e
    shas = {c.id: case_fingerprint(c.path) for c in cases}
    for cid, e in done.items():
        if cid in found and e.get("sha256") == shas[cid]:
            found[cid], todo[cid] = e["fields"], []
    if progress and done:
        progress(f"resumed {sum(1 for c in cases if not todo[c.id] and c.id in done)} case(s) from {journal}")
    out = None
    if journal is not None:
        Path(journal).parent.mkdir(parents=True, exist_ok=True)
        fresh = not done
        out = open(journal, "w" if fresh else "a", encoding="utf-8")
        if fresh:
            out.write(json.dumps({"flips": stamp}) + "\n")
            out.flush()

    def keep(cid: str, fields: dict) -> None:
        found[cid] = fields
        if out is not None:
            out.write(json.dumps({"id": cid, "sha256": shas[cid], "fields": fields}) + "\n")
            out.flush()
    try:
        work = [c for c in cases if todo[c.id]]
        if jobs <= 1:
            for c in work:
                want = set(todo[c.id])
                keep(c.id, dependence([c], todo=lambda cid, k: k in want, found={c.id: found[c.id]},
                                      progress=progress)[c.id])
        else:
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor, as_completed
            from harness.corpus.paths import CASES_DIR
            where = str(root or CASES_DIR)
            # the slow cases first, so that the last worker does not finish alone
            work.sort(key=lambda c: -(len(c.invariants) + sum(len(b.rows) for b in c.batches)))
            with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("fork")) as pool:
                futs = {pool.submit(_measure, str(c.path), where, todo[c.id], found[c.id]): c for c in work}
                for fut in as_completed(futs):
                    cid, fields = fut.result()
                    keep(cid, fields)
                    if progress:
                        progress(f"{cid}: {len(fields)} field(s)")
    finally:
        if out is not None:
            out.close()
    return {"schema": CACHE_SCHEMA, "flips": sorted(current),
            "cases": {c.id: {"sha256": shas[c.id], "fields": dict(sorted(found[c.id].items()))}
                      for c in sorted(cases, key=lambda c: c.id)}}


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
