"""The one protocol every implementation (reference, fused, engine adapter) speaks.

A batch is a list of :class:`Row` (one request's row of logits plus its
parameters, histories and slot). An implementation opens a :class:`Session`
(fresh per-slot state: seed offsets, counters) and calls
:meth:`Session.step` once per decoding step; the result is one
:class:`RowResult` per row, carrying either a token or an error kind, so one
bad row never fails the batch (DESIGN.md, "Per-row errors").

Multi-step scenarios reuse the same session across steps; process isolation
wraps a session in a worker process without changing this interface.
"""

from __future__ import annotations

import dataclasses
import inspect
from dataclasses import dataclass, field
from typing import Any, Optional, Protocol, Sequence

import torch

from . import params as _params
from .profiles import Profile

__all__ = ["Row", "RowResult", "Session", "Implementation", "RowError", "FEATURES", "STAGES", "PROVENANCE", "ROLES",
           "DEVICES", "CliOption", "LatencyBatch", "LatencyUnsupported", "claim_slot", "active", "stage_provenance",
           "declaration_problems", "read_declared", "error_kind"]

#: The fixed feature list (:data:`impls.params.FEATURES`; ``cases/features.txt`` is generated from
#: it). A case declares the features it needs; an implementation lacking one reports ``n/a``.
FEATURES = tuple(_params.FEATURES)


class RowError(Exception):
    """A per-request rejection: ``kind`` is a stable identifier, ``message`` prose.

    Raised inside an implementation for one row and turned into that row's
    :class:`RowResult` error; never allowed to fail the batch.
    """

    def __init__(self, kind: str, message: str):
        super().__init__(f"{kind}: {message}")
        self.kind = kind
        self.message = message


def _row_doc() -> str:
    lines = ["One request's row in one sampling step; its fields are the parameter registry's",
             "(:data:`impls.params.PARAMS`, read by name: ``row.<name>``).", "", "Attributes", "----------"]
    for prm in _params.PARAMS:
        if not prm.row_field:
            continue
        lines.append(f"{prm.name} : {prm.type.replace('`', '')}")
        text = prm.doc + (f". Unset: {prm.unset}" if prm.unset else "") + "."
        lines.append(f"    {text}")
    return "\n".join(lines) + "\n"


def _vocab(self) -> int:
    """Vocabulary size ``V`` (the length of ``logits``)."""
    return int(self.logits.shape[-1])


def _replace(self, **changes: Any) -> "Row":
    """Return a copy with ``changes`` applied (``dataclasses.replace``)."""
    return dataclasses.replace(self, **changes)


#: One request's row in one sampling step, built from the parameter registry (:mod:`impls.params`).
Row = dataclasses.make_dataclass("Row", _params.row_fields(),
                                 namespace={"vocab": property(_vocab), "replace": _replace, "__doc__": _row_doc()})
Row.__module__ = __name__  # pickles (worker processes) and shows as impls.base.Row


@dataclass
class RowResult:
    """What an implementation returns for one row.

    Exactly one of ``token`` and ``error`` is set.

    Attributes
    ----------
    token : int or None
        The sampled token id.
    error : str or None
        Stable error kind (e.g. ``"invalid_top_p"``, ``"nan_logits"``).
    message : str
        Human-readable detail of ``error``.
    mode : str or None
        ``"greedy"``, ``"sampling"`` or ``"beam"``, when the implementation
        can tell.
    finish_reason : str or None
        ``"end_id"``, ``"length"``, ``"stop_words"`` or ``"none"``; ``None``
        when not evaluated.
    logprob, processed_logprob : float or None
        RAW and PROCESSED logprob of the sampled token (§1.7).
    top_logprobs : list of (int, float) or None
        The requested top-k RAW logprobs, plus the sampled token if absent.
    rank : int or None
        Rank of the sampled token under the profile's rank rule.
    rewritten_logits : torch.Tensor or None
        ``(vocab,)`` float, the logits after bias, penalties and bans.
    probs : torch.Tensor or None
        ``(vocab,)`` float, the distribution actually sampled from (after
        temperature and filters; zeros outside the support; one-hot for
        greedy rows).
    raw_logprobs : torch.Tensor or None
        ``(vocab,)`` float, the vector ``logprob``, ``rank`` and ``top_logprobs`` are read
        from: the RAW logprobs of every token (§1.7), or the row's ``logprobs_mode``'s vector.
    vocab_logprobs : torch.Tensor or None
        ``(vocab,)`` float, every token's value of that vector, returned for ``logprobs = -1``.
    token_logprobs : list of (int, float) or None
        That vector at each id of ``logprob_token_ids``, in their order.
    extra : dict
        Implementation-specific facts for the report (e.g. the Philox
        ``seed`` and ``offset`` a row drew with).
    """

    token: Optional[int] = None
    error: Optional[str] = None
    message: str = ""
    mode: Optional[str] = None
    finish_reason: Optional[str] = None
    logprob: Optional[float] = None
    processed_logprob: Optional[float] = None
    top_logprobs: Optional[list] = None
    rank: Optional[int] = None
    rewritten_logits: Optional[torch.Tensor] = None
    probs: Optional[torch.Tensor] = None
    raw_logprobs: Optional[torch.Tensor] = None
    vocab_logprobs: Optional[torch.Tensor] = None
    token_logprobs: Optional[list] = None
    extra: dict = field(default_factory=dict)

    @classmethod
    def failed(cls, err: RowError, mode: Optional[str] = None) -> "RowResult":
        """Build the result of a rejected row from a :class:`RowError`."""
        return cls(error=err.kind, message=err.message, mode=mode)


class Session(Protocol):
    """Per-slot state of one implementation across the steps of one decode.

    Optional attribute ``stages_used``: ``{stage: provenance}`` for stages some of its results took
    from other code than the implementation's ``stages`` declare (:data:`PROVENANCE`); the judge
    reports the case's provenance with them (:meth:`harness.judge.judge.Judge.note_stages`).
    """

    def step(self, rows: Sequence[Row]) -> list[RowResult]:
        """Sample one step for ``rows``; one result per row, in order."""
        ...


#: The pipeline stages an implementation may perform, in pipeline order, with the SEMANTICS
#: sections that define them. An implementation declares, per stage, whose code performs it
#: (:data:`PROVENANCE`, attribute ``stages``); a stage it does not list it does not perform.
STAGES = {
    "validation": "validation and mode resolution (SEMANTICS §1.1, §5)",
    "logit_bias": "the logit bias (§1.2)",
    "penalties": "repetition, presence and frequency penalties (§1.3)",
    "bans": "bans: min_length end id, bad words, no-repeat n-grams (§1.4)",
    "filters": "temperature, min-p, top-k, top-p: the kept set and the distribution (§1.5)",
    "draw": "the token: argmax, or the draw from the distribution (§1.5, §1.6)",
    "seeds": "per-slot seed and offset bookkeeping (§1.6, §2)",
    "logprobs": "RAW and PROCESSED logprobs, rank, top logprobs (§1.7)",
    "finish": "finish reasons (§1.8)",
    "decode": "multi-step decoding: admission, scheduling, histories across steps (§2)",
    "beam": "beam search: candidates, re-parenting, finished hypotheses (§3)",
    "speculative": "speculative verification: acceptance and the correction token (§4)",
}
#: Whose code performs a stage: ``own`` (the implementation's, e.g. the engine's), ``adapter``
#: (this project's glue standing in for something the engine lacks or needs), ``reference``
#: (borrowed from :mod:`impls.reference`).
PROVENANCE = ("own", "adapter", "reference")
#: What an implementation is registered for: ``conformance`` (the corpus runs on it) and/or
#: ``latency`` (the latency suite times it; a latency-only peer such as ``torch.argmax``).
ROLES = ("conformance", "latency")
#: Device kinds an implementation may declare.
DEVICES = ("cpu", "cuda")


@dataclass(frozen=True)
class CliOption:
    """A command-line option an implementation needs, added to ``sampcheck run``, ``list``, ``record``.

    The option sets an environment variable, which worker processes inherit and the
    implementation reads (e.g. TensorRT-LLM's ``--trtllm-src PATH`` sets
    ``SAMPCHECK_TRTLLM_SRC``).

    Attributes
    ----------
    flag : str
        ``--name``.
    env : str
        The environment variable it sets (also its default).
    metavar, help : str
    path : bool
        The value is a path: made absolute before it is exported.
    """

    flag: str
    env: str
    metavar: str = "VALUE"
    help: str = ""
    path: bool = False


class LatencyUnsupported(Exception):
    """A latency peer cannot run one point of the latency suite; the message says why (the point is skipped)."""


@dataclass(frozen=True)
class LatencyBatch:
    """One point of the latency suite, as a peer builds its call from it (``benchmarks/latency.py``).

    Attributes
    ----------
    mix : str
        The parameter mix's name (``greedy``, ``k50_p09``, ``p09``, ``minp005``, ``mixed``).
    params : tuple of (float, int, float, float)
        Per row ``(temperature, top_k, top_p, min_p)``; temperature 0 is greedy, ``top_k``
        0, ``top_p`` 1 and ``min_p`` 0 are off (SEMANTICS §1.1).
    vocab : int
    device : torch.device
        Where the logits live.
    """

    mix: str
    params: tuple
    vocab: int
    device: Any

    @property
    def batch(self) -> int:
        """Rows per call."""
        return len(self.params)

    def tensors(self) -> tuple:
        """``(temperature, top_k, top_p, min_p)``: ``(batch,)`` float32, int64, float32, float32 on :attr:`device`."""
        dtypes = (torch.float32, torch.int64, torch.float32, torch.float32)
        return tuple(torch.tensor([r[i] for r in self.params], dtype=dt, device=self.device)
                     for i, dt in enumerate(dtypes))

    def seeds(self) -> tuple:
        """``(seed, offset)``: ``(batch,)`` int64 on :attr:`device`, seeds ``7 + row``, offsets 0 (every peer the same)."""
        seed = torch.arange(self.batch, dtype=torch.int64, device=self.device) + 7
        return seed, torch.zeros(self.batch, dtype=torch.int64, device=self.device)


class Implementation(Protocol):
    """An implementation under test, as the harness sees it (``docs/adapters.md``).

    Attributes
    ----------
    name : str
        Its name in the registry (:mod:`impls.registry`) and in every result.
    profile : Profile
        The semantic profile whose reference run predicts this implementation.
    features : frozenset of str
        Features (from :data:`FEATURES`) it can express: declared one by one, never "all"
        (a case needing another is ``n/a``).
    devices : frozenset of str
        Device kinds (:data:`DEVICES`) it can run on.
    slow : bool
        Seconds per call rather than milliseconds (a per-row Python pipeline): the latency
        suite times it on few calls.
    stages : dict
        Stage (:data:`STAGES`) -> provenance (:data:`PROVENANCE`): whose code performs each
        stage it performs.
    roles : frozenset of str
        :data:`ROLES`; default ``{"conformance"}``.

    Optional attributes and methods, read with ``getattr`` by the harness:
    ``scenario_features`` (frozenset: what its ``run_scenario`` can express,
    when more than its single steps; read by the judge's feature check),
    ``scenario_stages`` (dict: the :attr:`stages` entries that differ on its
    ``run_scenario`` path; read for the provenance of scenario verdicts),
    ``draw_limits`` (dict: device kind -> ``(most draws, why)``: a statistical
    check planning more draws per row than that on the device is ``n/a``, with
    the reason, instead of running past the case timeout; read by
    :class:`harness.kinds.statistical.StatisticalKind`),
    ``is_prediction`` (bool: the reference under a profile, not an engine
    release), ``describe(device) -> dict`` (facts recorded with the run),
    ``run_scenario(spec, device)`` (multi-step scenarios; without it they are
    ``n/a``), ``Session.sample_many(row, seeds)`` (batched draws for
    statistical checks), ``Session.draw_tokens(row, seeds)`` (the first token per seed, for an
    RNG the reference models token for token), ``cli_options`` (tuple of :class:`CliOption`) and,
    for the ``latency`` role, ``latency_call(batch: LatencyBatch) -> (fn,
    graphable)`` (``fn(logits)`` samples one call; raises
    :class:`LatencyUnsupported` for a point it cannot run).
    """

    name: str
    profile: Profile
    features: frozenset
    devices: frozenset
    slow: bool
    stages: dict

    def version(self) -> str:
        """Version string of the code under test (engine version for adapters)."""
        ...

    def available(self, device: str) -> Optional[str]:
        """Return ``None`` if runnable on ``device``, else the reason it is not."""
        ...

    def unsupported(self, row: Row) -> Optional[str]:
        """Return why this implementation cannot express ``row`` (``n/a``), or ``None``."""
        ...

    def open_session(self, device: str) -> Session:
        """Return a fresh session (all slot counters at their initial values)."""
        ...


def read_declared(impl, field: str) -> tuple:
    """``(value, error)`` of attribute ``field`` of ``impl``: ``(None, None)`` when it has none; ``(None, "reading
    FIELD raised Error: message")`` when reading it raises (a plug-in's property: its own code), AttributeError
    included, which ``getattr(impl, field, None)`` would take for a missing attribute."""
    try:
        return getattr(impl, field), None
    except AttributeError as e:
        if inspect.getattr_static(impl, field, _MISSING) is _MISSING:
            return None, None
        return None, f"reading {field} raised AttributeError: {e}"
    except Exception as e:  # noqa: BLE001 - any error of the user's code is reported, located
        return None, f"reading {field} raised {type(e).__name__}: {e}"


_MISSING = object()


def declaration_problems(impl) -> list:
    """What is wrong with what ``impl`` declares: ``[(field, message)]`` (empty: nothing).

    Checks (an attribute whose reading raises is a problem of that field, with the error): ``name``
    a non-empty str; ``roles`` from :data:`ROLES`; ``devices`` a non-empty set of :data:`DEVICES`;
    ``slow`` a bool; ``draw_limits`` when given; ``stages`` (:func:`stage_provenance`); and for the
    ``conformance`` role: a :class:`~impls.profiles.Profile` whose every field that differs from
    the default profile carries a citation, ``features`` a set of names from :data:`FEATURES`, at
    least one stage. ``field`` is the attribute at fault (``citations`` for a missing citation).
    The runner skips an implementation with problems (the reason lists them);
    ``sampcheck check-impl`` prints them.
    """
    from .profiles import TRTLLM, Profile, profile_diff
    out = []
    raised = set()

    def read(field):
        # the implementation's own property may raise: a problem of that field, not a traceback
        value, error = read_declared(impl, field)
        if error:
            out.append((field, error))
            raised.add(field)
        return value

    name = read("name")
    if "name" not in raised and (not isinstance(name, str) or not name):
        out.append(("name", f"name is {name!r}: a non-empty str (impls/base.py Implementation.name)"))
    roles = frozenset(read("roles") or ("conformance",))
    if not roles <= set(ROLES):
        out.append(("roles", f"roles {sorted(roles)}: each one of {', '.join(ROLES)} (impls/base.py ROLES)"))
    devices = read("devices")
    if "devices" not in raised and (not isinstance(devices, (set, frozenset)) or not devices
                                    or not set(devices) <= set(DEVICES)):
        out.append(("devices", f"devices is {devices!r}: a non-empty frozenset of {', '.join(DEVICES)} "
                               "(impls/base.py DEVICES)"))
    slow = read("slow")
    if "slow" not in raised and not isinstance(slow, bool):
        out.append(("slow", f"slow is {slow!r}: a bool (impls/base.py Implementation)"))
    limits = read("draw_limits")
    if limits is not None:
        rule = (f"a dict of device kind ({', '.join(DEVICES)}) -> a tuple (most draws per statistical row, an int "
                ">= 0; why, a non-empty str)")
        bad = None if isinstance(limits, dict) else f"draw_limits is {limits!r}: {rule}"
        for k, v in (limits.items() if isinstance(limits, dict) else ()):
            if not (k in DEVICES and isinstance(v, tuple) and len(v) == 2 and isinstance(v[0], int)
                    and not isinstance(v[0], bool) and v[0] >= 0 and isinstance(v[1], str) and v[1].strip()):
                bad = f"draw_limits entry {k!r}: {v!r}: {rule}"   # the first entry at fault
                break
        if bad:
            out.append(("draw_limits", bad))
    try:
        stage_provenance(impl, scenario=True)
    except ValueError as e:
        out.append(("stages", f"{e} (impls/base.py STAGES, PROVENANCE)"))
    except Exception as e:  # noqa: BLE001 - a stages property of the implementation's own raised
        out.append(("stages", f"reading stages or scenario_stages raised {type(e).__name__}: {e}"))
    if "conformance" in roles:
        profile = read("profile")
        if "profile" not in raised and not isinstance(profile, Profile):
            out.append(("profile", f"profile is {profile!r}: an impls.profiles.Profile (docs/adapters.md, section 5)"))
        elif "profile" not in raised:
            uncited = [f for f in profile_diff(TRTLLM, profile) if not str(profile.citations.get(f, "")).strip()]
            if uncited:
                out.append(("citations", f"profile {profile.name!r}: field(s) {', '.join(uncited)} differ from the "
                                         "default profile without a citation (Profile.citations: where the engine's "
                                         "rule was read, 'repo:path@version Symbol'; docs/adapters.md, section 5)"))
        feats = read("features")
        if "features" in raised:
            pass  # reported by read()
        elif not isinstance(feats, (set, frozenset)):
            out.append(("features", f"features is {feats!r}: a frozenset of feature names"))
        else:
            unknown = sorted(set(feats) - set(FEATURES))
            if unknown:
                out.append(("features", f"unknown feature(s) {unknown} (cases/features.txt lists the known)"))
        if "stages" not in {f for f, _ in out} and not read("stages"):
            out.append(("stages", "declares no stage: say whose code performs each stage it performs "
                                  "(impls/base.py STAGES)"))
    return out


def stage_provenance(impl, scenario: bool = False) -> dict:
    """``{stage: provenance}`` for every stage of :data:`STAGES` that ``impl`` declares, in pipeline order.

    Parameters
    ----------
    impl : Implementation
    scenario : bool
        For a multi-step scenario: ``impl.scenario_stages`` (optional; the stages of its
        ``run_scenario`` path where they differ, e.g. vLLM's engine loop seeds its own
        generators) overrides ``impl.stages`` entry by entry.

    Raises
    ------
    ValueError
        A stage not in :data:`STAGES` or a provenance not in :data:`PROVENANCE` (the
        message names the implementation, the attribute and the entry).
    """
    name = getattr(impl, "name", type(impl).__name__)
    declared = {}
    for attr in ("stages", "scenario_stages") if scenario else ("stages",):
        entries = dict(getattr(impl, attr, {}) or {})
        for stage, prov in entries.items():
            if stage not in STAGES:
                raise ValueError(f"{name}: {attr}: unknown stage {stage!r}; known: {', '.join(STAGES)}")
            if prov not in PROVENANCE:
                raise ValueError(f"{name}: {attr}[{stage!r}] = {prov!r}: must be one of {', '.join(PROVENANCE)}")
        declared.update(entries)
    return {s: declared[s] for s in STAGES if s in declared}


def claim_slot(row: Row, used: set, one_d: bool = True) -> None:
    """Admission checks every session makes per row: one row per slot per step, 1-D logits.

    Parameters
    ----------
    row : Row
    used : set of int
        The slots of the earlier rows of this step; ``row.slot`` is added.
    one_d : bool
        Also require ``row.logits`` to be 1-D.

    Raises
    ------
    RowError
        ``duplicate_slot`` when an earlier row of the step holds the slot;
        ``bad_logits`` for logits that are not 1-D.
    """
    if row.slot in used:
        raise RowError("duplicate_slot", f"slot {row.slot} is used by an earlier row of this step")
    used.add(row.slot)
    if one_d and row.logits.dim() != 1:
        raise RowError("bad_logits", f"logits must be 1-D, got shape {tuple(row.logits.shape)}")


def active(value) -> bool:
    """Whether an optional penalty/decay parameter asks for its rule: set and not 0 (NaN counts as set).

    Adapters use it to decide which rows their engine cannot express
    (``unsupported``); the reference validates the values themselves.
    """
    return value is not None and (value != value or value != 0)


def error_kind(text: str, table, default: str) -> str:
    """The error kind of an engine's rejection message: the kind of the first ``(needle, kind)`` of
    ``table`` whose needle occurs in ``text``, else ``default``.

    Adapters map their engine's validation messages with it (each table cites the engine code whose
    messages it reads: ``impls/vllm/translate.py``, ``impls/sglang/translate.py``,
    ``impls/transformers/hf.py``).
    """
    return next((kind for needle, kind in table if needle in text), default)
