"""The check-kind registry: what ``check = "..."`` in a case file means, one object per kind.

A check kind (:class:`CheckKind`) knows everything about its cases: the top-level
fields it takes and how to load them, how many statistical checks it adds to the
budget, how to predict, run, observe and compare (its ``evaluate``, which ends in the
one verdict ladder of :mod:`harness.judge.verdict`), how to write and compare golden
records, how its results condense into run records and how the report shows its
inputs. The loader, the judge, the golden store, the runner, the records and the
report ask the case's kind (``case.kind``) and never compare kind names.

Where kinds come from, in order:

1. the project's own, :data:`BUILTIN_MODULES` (``harness.kinds``: exact, statistical,
   invariant, scenario), imported the first time the registry is read;
2. entry points of the group :data:`ENTRY_POINT_GROUP` (``sampcheck.check_kinds``): each
   names a :class:`CheckKind` instance or class;
3. :func:`register` at run time (tests; a plug-in's own start-up). Kinds registered at
   run time reach worker processes with the run (:func:`runtime_kinds`).
"""

from __future__ import annotations

import importlib
from typing import Optional

from . import outputs

__all__ = ["CheckKind", "RECORD_KEYS", "builtin", "register", "unregister", "get", "names", "all_kinds", "runtime_kinds",
           "ENTRY_POINT_GROUP", "BUILTIN_MODULES", "version"]

#: The entry-point group third-party check kinds register under.
ENTRY_POINT_GROUP = "sampcheck.check_kinds"
#: Modules that register the project's own kinds when imported.
BUILTIN_MODULES = ("harness.kinds",)


class CheckKind:
    """One kind of check. Subclass it, set :attr:`name`, and implement :meth:`load` and :meth:`evaluate`.

    The other methods have defaults that suit a kind whose results carry ``rows`` of
    ``{"row", "actual", ...}`` and ``invariants`` in ``details`` (the shapes run records
    and ``sampcheck diff`` understand: :mod:`harness.records.records`).

    Attributes
    ----------
    name : str
        The value of ``check`` in a case file.
    case_fields : dict
        Top-level case fields this kind takes: name -> JSON schema (merged into the case
        schema; a field two kinds share must have one schema).
    exclusive_fields : tuple of str
        Fields no other kind may use (a case of another kind that sets one is a load error
        "only allowed when check = '<this>'").
    draws_view : bool
        The report shows its result rows as draws (the statistical view with charts).
    record_keys : tuple of str or None
        The keys of a result row's ``actual`` that run records keep (None: every key).
    runs_scenarios : bool
        Its cases run through an implementation's ``run_scenario`` (multi-step), whose
        ``scenario_stages`` then say whose code performs each stage
        (:func:`impls.base.stage_provenance`).
    """

    name: str = ""
    case_fields: dict = {}
    exclusive_fields: tuple = ()
    draws_view: bool = False
    record_keys = None
    runs_scenarios: bool = False

    # -- corpus ------------------------------------------------------------------
    def load(self, data: dict, shown: str) -> tuple:
        """Validate this kind's part of a parsed case file.

        Parameters
        ----------
        data : dict
            The whole parsed TOML (already checked against the case schema).
        shown : str
            The file name for messages.

        Returns
        -------
        (dict, set)
            Attributes of :class:`harness.corpus.load.Case` to set (``batches``,
            ``invariants``, ``draws``, ``scenario``; anything else goes to
            ``Case.payload``), and the ``(feature, where)`` pairs the fields need.

        Raises
        ------
        harness.corpus.load.CaseError
            Naming the field and the reason.
        """
        raise NotImplementedError

    def statistical_checks(self, data: dict) -> int:
        """Statistical checks a case file adds to the declared corpus's budget (DESIGN.md decision 3).

        Counted from the parsed TOML, so a file that fails validation still counts as
        written (the per-check level does not depend on which files are broken).
        """
        return 0

    def is_statistical(self, case) -> bool:
        """Whether the case's results are statistical verdicts (the report's statistical summary)."""
        return False

    # -- judging -------------------------------------------------------------------
    def feature_set(self, impl) -> frozenset:
        """The features of ``impl`` that apply to this kind's cases (default: ``impl.features``)."""
        return impl.features

    def unsupported(self, case, impl) -> Optional[str]:
        """Why ``impl`` cannot express one of the case's inputs (``n/a``), or None."""
        return None

    def evaluate(self, judge, case, impl, version: str):
        """Judge ``case`` on ``impl``: returns a :class:`harness.judge.result.Result`.

        Parameters
        ----------
        judge : harness.judge.Judge
            Services: ``predict`` cache, ``device``, ``alpha``, ``draw_counts``, and the
            verdict ladder :func:`harness.judge.verdict.verdict`.
        """
        raise NotImplementedError

    def predict(self, judge, case, profile, dtype, cache: bool = True):
        """The reference's outputs for ``case`` under ``profile`` (the kind's own shape)."""
        raise NotImplementedError

    def exercised_stages(self, case, output_stages: dict, error_stages: dict) -> set:
        """The pipeline stages the case exercises beyond its declared features (:mod:`harness.judge.provenance`).

        Parameters
        ----------
        output_stages, error_stages : dict
            Output key -> stage, error kind -> stage (:data:`harness.judge.provenance.OUTPUT_STAGES`,
            :data:`~harness.judge.provenance.ERROR_STAGES`).

        Returns
        -------
        set of str
            Default: ``{"draw"}`` (a token is judged).
        """
        return {"draw"}

    # -- hand-written truths (harness.corpus.truths) ------------------------------------
    def truth_profiles(self, case) -> set:
        """The profiles the case gives a hand-written truth for (the default's name for ``expect``)."""
        return set()

    def truth_mismatches(self, judge, case, profile, truth_name: str) -> list:
        """Where the reference under ``profile`` contradicts the case's truth for ``truth_name``.

        Returns
        -------
        list of str
            One line per contradicting row or request; empty when none (or no truth).
        """
        return []

    def predicted_relations(self, judge, case, profile) -> list:
        """Whether each relation the case declares holds for the reference under ``profile`` (default: none)."""
        return []

    # -- golden files ----------------------------------------------------------------
    def golden_record(self, judge, case, profile_name: str) -> dict:
        """The golden content of ``case`` under one profile (JSON-ready, deterministic)."""
        raise NotImplementedError

    def golden_diff(self, old: dict, new: dict) -> list:
        """Lines naming what differs between two golden records of a case (:func:`harness.records.golden.check`)."""
        return [f"{k}: golden {old.get(k)!r}, now {new.get(k)!r}" for k in sorted(set(old) | set(new))
                if k not in ("case", "profile", "reference_version") and old.get(k) != new.get(k)]

    # -- records and the report ----------------------------------------------------
    def unseeded_rows(self, case) -> set:
        """Labels of the case's rows that give no seed (run records mark their draws stochastic)."""
        return set()

    def report_inputs(self, case) -> list:
        """One entry per input row or request: ``{"where", "fields", "expect"}`` (values as given)."""
        return []

    def report_setup(self, case) -> dict:
        """What the inputs share (a scenario's model and defaults): ``{field: value}``."""
        return {}

    def relations(self, case) -> list:
        """The relations the case declares (``{kind, a, b}``), shown with its inputs."""
        return []


#: The output keys run records (schema 1) keep of a result row's ``actual``, for the project's kinds:
#: whatever of these a row observed (``message`` is kept, never compared; a scenario request's tokens
#: are not among them). Declared with the outputs: :data:`harness.corpus.outputs.RECORD_KEYS`.
RECORD_KEYS = outputs.RECORD_KEYS

_KINDS: dict = {}
_RUNTIME: list = []
_STATE = {"loaded": False, "version": 0}


def _load() -> None:
    if _STATE["loaded"]:
        return
    _STATE["loaded"] = True
    for mod in BUILTIN_MODULES:
        importlib.import_module(mod)
    from importlib import metadata
    for ep in sorted(metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        obj = ep.load()  # a broken plug-in kind is a usage error: the corpus cannot be read without it
        _add(obj() if isinstance(obj, type) else obj)


def _add(kind: CheckKind) -> None:
    if not isinstance(kind, CheckKind) or not kind.name:
        raise TypeError(f"{kind!r}: a check kind is a CheckKind with a name")
    if kind.name in _KINDS and _KINDS[kind.name] is not kind:
        raise ValueError(f"check kind {kind.name!r} is already registered ({type(_KINDS[kind.name]).__module__})")
    for f, schema in kind.case_fields.items():
        for other in _KINDS.values():
            if f in other.case_fields and other.case_fields[f] != schema:
                raise ValueError(f"check kind {kind.name!r}: field {f!r} has another schema in kind {other.name!r}")
    _KINDS[kind.name] = kind
    _STATE["version"] += 1


def builtin(kind: CheckKind) -> CheckKind:
    """Register one of the project's own kinds (called by :data:`BUILTIN_MODULES` as they import)."""
    _add(kind)
    return kind


def register(kind: CheckKind) -> CheckKind:
    """Register a check kind at run time (the builtins and entry points are registered first).

    Returns
    -------
    CheckKind
        ``kind``, so that the call can decorate an instance's creation.

    Raises
    ------
    TypeError
        Not a :class:`CheckKind` with a name.
    ValueError
        The name is taken by another kind, or a case field clashes with another kind's schema.
    """
    _load()
    if _KINDS.get(kind.name) is not kind:
        _add(kind)
        _RUNTIME.append(kind)
    return kind


def unregister(name: str) -> None:
    """Remove a kind registered at run time (tests clean up with it)."""
    kind = _KINDS.get(name)
    if kind in _RUNTIME:
        _RUNTIME.remove(kind)
        del _KINDS[name]
        _STATE["version"] += 1


def get(name: str) -> CheckKind:
    """The kind called ``name``.

    Raises
    ------
    KeyError
        Unknown kind; the message lists the registered ones.
    """
    _load()
    try:
        return _KINDS[name]
    except KeyError:
        raise KeyError(f"unknown check kind {name!r}; registered: {', '.join(_KINDS)}") from None


def names() -> list:
    """Registered kind names, builtins first."""
    _load()
    return list(_KINDS)


def all_kinds() -> list:
    """Every registered :class:`CheckKind`, builtins first."""
    _load()
    return list(_KINDS.values())


def runtime_kinds() -> list:
    """The kinds registered with :func:`register` (a run hands them to its worker processes)."""
    return list(_RUNTIME)


def version() -> int:
    """A number that changes whenever the registry does (the loader recompiles its schema then)."""
    _load()
    return _STATE["version"]
