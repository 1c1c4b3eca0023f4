"""Which profile fields explain a ``known-diff``: one search shared by every kind of check.

A profile differs from the default (``trtllm``) on some fields. To say
*which* of them a case depends on, :func:`blame` puts each field alone on
the default profile (a probe profile) and asks the caller's predicate whether
the probe reproduces the difference (a changed prediction, a broken
relation). Where no single field does, and ``pairs`` is set, it tries every
pair of fields: some rules act only together (Hugging Face's ``do_sample``
switch with its temperature-zero error). :func:`field_entries` formats the
answer for the report and the run records.

Used by :meth:`harness.kinds.rows.RowsKind.explain` and
:meth:`harness.kinds.invariant.InvariantKind.explain_relations` (single-step cases) and by
:mod:`harness.kinds.scenario` (scenario cases).
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Iterable

from impls.profiles import TRTLLM, Profile, profile_diff

__all__ = ["probe", "blame", "suspects", "field_entries", "show_value", "MAX_PAIR_FIELDS"]

#: Largest number of differing fields for which the pair search runs (at most 780 probes).
MAX_PAIR_FIELDS = 40


def probe(profile: Profile, fields: Iterable[str]) -> Profile:
    """The default profile with ``fields`` taken from ``profile``.

    Parameters
    ----------
    profile : Profile
    fields : iterable of str
        Semantic field names of :class:`impls.profiles.Profile`.

    Returns
    -------
    Profile
        Named ``trtllm+f1+f2`` (predictions are cached by name).

    Raises
    ------
    TypeError
        For a name that is not a field.
    """
    fields = tuple(fields)
    return dataclasses.replace(TRTLLM, name="trtllm+" + "+".join(fields), **{f: getattr(profile, f) for f in fields})


def blame(profile: Profile, reproduces: Callable[[Profile], bool], pairs: bool = False) -> tuple:
    """The fields of ``profile`` whose value reproduces a difference from the default.

    Parameters
    ----------
    profile : Profile
        The implementation's profile.
    reproduces : callable
        ``reproduces(probe_profile) -> bool``: whether predicting under the
        probe shows the difference being explained. An exception counts as
        ``False`` (a field that only works together with others).
    pairs : bool
        When no single field reproduces it, search the pairs (only while the
        profile differs on at most :data:`MAX_PAIR_FIELDS` fields).

    Returns
    -------
    (list of str, bool)
        The responsible fields in profile order, and whether they act only
        together (found by the pair search). Empty when nothing was found.
    """
    diffs = profile_diff(TRTLLM, profile)

    def ok(fields) -> bool:
        try:
            return bool(reproduces(probe(profile, fields)))
        except Exception:
            return False

    found = [f for f in diffs if ok((f,))]
    if found or not pairs or len(diffs) > MAX_PAIR_FIELDS:
        return found, False
    hits = [(f, g) for i, f in enumerate(diffs) for g in diffs[i + 1:] if ok((f, g))]
    return sorted({f for pair in hits for f in pair}, key=diffs.index), bool(hits)


def suspects(profile: Profile, agrees: Callable[[Profile], bool]) -> list:
    """Single-field changes of ``profile`` after which its prediction agrees with the case's truth for it.

    Each semantic field is set, one at a time, to each other value some registered profile
    (:data:`impls.profiles.PROFILES`) gives it, or to its negation for a bool; the probe is
    named ``<profile>~<field>`` (predictions of probes are not cached).

    Parameters
    ----------
    profile : Profile
        The profile whose prediction contradicts its hand-written truth.
    agrees : callable
        ``agrees(probe_profile) -> bool``; an exception counts as ``False``.

    Returns
    -------
    list of dict
        ``{"field", "profile", "would_agree_with"}``: the field, its value in ``profile``
        and the value that makes the prediction agree (both as :func:`show_value` writes them),
        in field order.
    """
    from impls.profiles import PROFILES
    out = []
    for f in profile.semantic_fields():
        mine = getattr(profile, f)
        values = [] if not isinstance(mine, bool) else [not mine]
        for p in PROFILES.values():
            v = getattr(p, f)
            if v != mine and v not in values:
                values.append(v)
        for v in values:
            try:
                ok = bool(agrees(dataclasses.replace(profile, name=f"{profile.name}~{f}", **{f: v})))
            except Exception:
                ok = False
            if ok:
                out.append({"field": f, "profile": show_value(mine), "would_agree_with": show_value(v)})
                break
    return out


def show_value(v) -> str:
    """A profile field's value as the report shows it: ``repr``, but a set as ``{a, b}`` in sorted order."""
    if isinstance(v, (set, frozenset)):
        return "{" + ", ".join(sorted(repr(x) for x in v)) + "}" if v else "{}"
    return repr(v)


def field_entries(profile: Profile, names=None, combination: bool = False) -> list:
    """Report entries ``{"field", "default", "profile", "citation"[, "combination"]}``.

    Parameters
    ----------
    profile : Profile
    names : list of str, optional
        The fields to list; ``None``: every field where ``profile`` differs
        from the default, marked ``combination`` (nothing narrower was found).
    combination : bool
        Mark the fields as acting together.
    """
    if names is None:
        names, combination = profile_diff(TRTLLM, profile), True
    return [{"field": f, "default": show_value(getattr(TRTLLM, f)), "profile": show_value(getattr(profile, f)),
             "citation": profile.citations.get(f, "(no citation)"), **({"combination": True} if combination else {})}
            for f in names]
