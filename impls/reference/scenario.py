"""Multi-step scenarios on the reference: a stateful decoder (SEMANTICS §2-§4).

A :class:`ScenarioSpec` describes a decode of several steps over a batch
whose membership changes: requests arrive (``arrive``), are not scheduled on
some steps (``pause``, or an explicit ``schedule``), finish, and free their
slot for a later request. Logits come from a scripted model
(:mod:`.scripted`). :func:`run_scenario` decodes it and returns a
:class:`ScenarioResult`: per request, its tokens, finish reason and step, and
one :class:`StepRecord` per scheduled step.

Pipeline of one step, in order:

1. **schedule**: the requests scheduled at this step (``schedule[step]``, or
   every request with ``arrive <= step`` that is not paused, finished or
   rejected), in spec order;
2. **admission** of the requests scheduled for the first time (SEMANTICS
   §1.1 rule 5, §2, §3, §4; seed 000 § Top-P Decay, "rejected at admission,
   one request"): a slot still held by a running request (``duplicate_slot``),
   the per-request validation of :func:`.modes.validate`, beam width outside
   ``[1, max_beam_width]`` (``invalid_beam_width``), top-p decay with beam
   search or draft tokens (``invalid_top_p_decay``), ``d2t`` on a request
   that does not decode greedily (``invalid_d2t``), draft tokens with beam
   search (``invalid_draft``). A rejected request takes no slot; the others
   run;
3. **draft batch** of the speculative requests (:mod:`.speculative`): draws
   as unseeded rows, never touching a slot's counter;
4. **target batch**: the plain requests in one
   :meth:`~.sampler.ReferenceSession.step` (histories are the finalised
   tokens, so penalty counts fold finalised tokens only), then the
   verification rows of the speculative requests;
5. **beam search** requests (:mod:`.beam`), one beam step each;
6. **finalise**: append the emitted tokens, fold them into the slot's state
   (penalty counts, top-p decay runtime value), record finish reasons and
   release the slots of finished or failed requests.

Per-slot state (:class:`SlotState`) lives as long as the request holding the
slot: the Philox ``(seed, offset)`` of :mod:`.seeds` (reset when a new
request takes the slot), the occurrence counts of the finalised tokens, the
runtime top-p of an active decay, and the finish state.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Optional

import torch

from ..base import Row, RowError
from ..profiles import Profile
from .modes import GREEDY, _decay_active, resolve, runtime_top_p
from .scripted import ModelError, ScriptedModel

__all__ = ["RequestSpec", "ScenarioSpec", "StepRecord", "RequestResult", "ScenarioResult", "SlotState",
           "ScenarioUnsupported", "run_scenario", "replicate"]

#: Token written for a beam that is frozen (finished) this step (TensorRT-LLM's
#: ``BEAM_SEARCH_PAD_TOKEN``, beam_search.py@095443e5).
PAD = -1


class ScenarioUnsupported(Exception):
    """An implementation cannot express a scenario (the harness reports ``n/a``)."""


@dataclass
class RequestSpec:
    """One request of a scenario.

    Attributes
    ----------
    id : str
        Unique within the scenario; also the request id that owns its slot.
    slot : int
        Sequence slot (seed offsets and penalty state are per slot).
    fields : dict
        :class:`~impls.base.Row` fields (``prompt``, ``temperature``,
        ``seed`` as an int, ``end_id``, ``max_new_tokens``, ...), never
        ``logits``, ``generated`` or ``slot``.
    arrive : int
        First step (0-based) at which it is scheduled.
    pause : frozenset of int
        Steps at which it is not scheduled (its state is kept).
    beam_width : int
        Beams under ``use_beam_search`` (SEMANTICS §3).
    length_penalty, diversity_rate : float or None
        Beam search knobs; ``None``: the profile's default.
    early_stopping : bool, "never" or None
    draft_len : int
        Draft tokens per step ``K`` (SEMANTICS §4); 0: no speculation.
    drafts : list of list of int or None
        Literal draft tokens per step (else the draft model proposes them).
    d2t : list of int or None
        Draft-to-target offsets, ``(V_draft,)``: ``token += d2t[token]``.
    model : ScriptedModel or None
        Overrides the scenario's target model for this request.
    """

    id: str
    slot: int
    fields: dict = field(default_factory=dict)
    arrive: int = 0
    pause: frozenset = frozenset()
    beam_width: int = 1
    length_penalty: Optional[float] = None
    early_stopping: Any = None
    diversity_rate: Optional[float] = None
    draft_len: int = 0
    drafts: Optional[list] = None
    d2t: Optional[list] = None
    model: Optional[ScriptedModel] = None

    @property
    def use_beam_search(self) -> bool:
        """Whether the request asks for beam search (``fields["use_beam_search"]``)."""
        return bool(self.fields.get("use_beam_search", False))

    def row(self, logits: torch.Tensor, generated: list, slot: Optional[int] = None) -> Row:
        """The :class:`~impls.base.Row` of this request at one step.

        Parameters
        ----------
        logits : torch.Tensor
            ``(V,)`` float32.
        generated : list of int
            The finalised history before this step.
        slot : int, optional
            Defaults to :attr:`slot`.
        """
        return Row(logits=logits, generated=list(generated), slot=self.slot if slot is None else slot,
                   request_id=self.id, **self.fields)


@dataclass
class ScenarioSpec:
    """A whole decode: the scripted models, the requests and the engine limits.

    Attributes
    ----------
    model : ScriptedModel
        Target model shared by the requests (a request may override it).
    requests : list of RequestSpec
    draft_model : ScriptedModel or None
        Proposes draft tokens for requests with ``draft_len > 0`` and no
        literal ``drafts``; also gives the draft probabilities ``q``.
    max_beam_width : int
        Engine limit: a request asking for more beams is rejected.
    max_steps : int
        Steps decoded at most (the run stops earlier when every request is
        done).
    max_seq_len : int or None
        Engine sequence limit (prompt + generated); bounds the ``"never"``
        early-stopping estimate of TensorRT-LLM.
    schedule : list of list of str or None
        Explicit request ids per step; replaces ``arrive``/``pause``.
    """

    model: ScriptedModel
    requests: list
    draft_model: Optional[ScriptedModel] = None
    max_beam_width: int = 4
    max_steps: int = 32
    max_seq_len: Optional[int] = None
    schedule: Optional[list] = None

    def request(self, rid: str) -> RequestSpec:
        """The request called ``rid`` (KeyError if absent)."""
        for r in self.requests:
            if r.id == rid:
                return r
        raise KeyError(rid)


@dataclass
class StepRecord:
    """What one request did at one scheduled step.

    Attributes
    ----------
    step : int
        0-based scenario step.
    tokens : list of int
        Tokens emitted this step (plain: one; speculative: accepted drafts
        then the correction or bonus token; beam: one per beam slot in slot
        order, :data:`PAD` for a frozen beam).
    offsets : list of int
        Philox offsets this request's target rows drew with (empty when it
        drew nothing).
    seed : int or None
        The Philox seed of those draws (signed 64-bit view).
    top_p : float or None
        Runtime top-p of an active top-p decay used at this step.
    support : list of int or None
        Kept set of a plain sampling row.
    predecessors, cum_logprobs : list or None
        Beam search: predecessor beam and cumulative logprob per new beam.
    drafts : list of int or None
        Speculative: the draft tokens verified this step (target vocabulary).
    accepted, rewind : int or None
        Speculative: accepted draft count and ``K - accepted``.
    finish_reason : str or None
    """

    step: int
    tokens: list = field(default_factory=list)
    offsets: list = field(default_factory=list)
    seed: Optional[int] = None
    top_p: Optional[float] = None
    support: Optional[list] = None
    predecessors: Optional[list] = None
    cum_logprobs: Optional[list] = None
    drafts: Optional[list] = None
    accepted: Optional[int] = None
    rewind: Optional[int] = None
    finish_reason: Optional[str] = None


@dataclass
class RequestResult:
    """The outcome of one request.

    Attributes
    ----------
    id : str
    error, message : str
        Error kind (admission or a failing step) and its detail.
    error_step : int or None
    tokens : list of int
        Generated tokens (beam search: the first output beam).
    finish_reason : str or None
        ``"end_id"``, ``"length"``, ``"stop_words"``, or ``"none"`` when
        the run ended first; ``None`` for a rejected request.
    finish_step : int or None
    steps : list of StepRecord
    beams : list of list of int or None
        Beam search: the output beams, best first.
    cum_logprobs, scores : list of float or None
        Their unnormalised cumulative logprobs and length-normalised scores.
    beam_finish_reasons : list of str or None
    """

    id: str
    error: Optional[str] = None
    message: str = ""
    error_step: Optional[int] = None
    tokens: list = field(default_factory=list)
    finish_reason: Optional[str] = None
    finish_step: Optional[int] = None
    steps: list = field(default_factory=list)
    beams: Optional[list] = None
    cum_logprobs: Optional[list] = None
    scores: Optional[list] = None
    beam_finish_reasons: Optional[list] = None


@dataclass
class ScenarioResult:
    """All requests' results (``requests`` keyed by id) and the steps run.

    ``keys`` names the observations an implementation reports (see
    :data:`harness.scenarios.EXPECT_KEYS`); ``None`` (the reference) means
    all of them. The judge compares only those.
    """

    requests: dict
    steps_run: int = 0
    keys: Optional[frozenset] = None


@dataclass(eq=False)
class SlotState:
    """Per-slot state of the request holding it (SEMANTICS §2).

    Attributes
    ----------
    request : RequestSpec
    status : {"waiting", "running", "finished", "failed"}
    generated : list of int
        Finalised tokens (accepted drafts only; never rejected ones).
    counts : collections.Counter
        Occurrences of the finalised tokens (the penalty workspace row).
    top_p : float or None
        Runtime top-p of an active decay (starts at the request's top_p).
    mode : str or None
        Resolved mode at admission.
    beam : object or None
        The :class:`~.beam.BeamSearch` of a beam request.
    result : RequestResult
    """

    request: RequestSpec
    status: str = "waiting"
    generated: list = field(default_factory=list)
    counts: Counter = field(default_factory=Counter)
    top_p: Optional[float] = None
    mode: Optional[str] = None
    beam: Any = None
    result: Optional[RequestResult] = None

    def fold(self, tokens: list) -> None:
        """Append finalised ``tokens`` and fold them into the counts and the decay runtime value.

        The decay recurrence is seed 000 § Top-P Decay / TensorRT-LLM
        top_p_decay.py@5c470e44 ``TopPDecayStore``: ``p = p0`` if the token
        is a reset id, else ``max(p * decay, top_p_min)``, in float32.
        """
        for t in tokens:
            self.generated.append(int(t))
            self.counts[int(t)] += 1
            if self.top_p is not None:
                f = self.request.fields
                f32 = lambda v: float(torch.tensor(v, dtype=torch.float32))
                p0 = f.get("top_p") if f.get("top_p") is not None else 1.0
                if t in set(f.get("top_p_reset_ids") or ()):
                    self.top_p = p0
                else:
                    floor = f32(f.get("top_p_min") if f.get("top_p_min") is not None else 1e-6)
                    self.top_p = max(f32(f32(self.top_p) * f32(f["top_p_decay"])), floor)


def _fail(st: SlotState, err: RowError, step: int) -> None:
    st.status = "failed"
    st.result.error, st.result.message, st.result.error_step = err.kind, err.message, step


class _Runner:
    def __init__(self, spec: ScenarioSpec, profile: Profile, session):
        from . import beam, speculative  # noqa: F401  (import cycle: they import this module)
        self.spec, self.profile, self.session = spec, profile, session
        self.states = {r.id: SlotState(r, result=RequestResult(r.id)) for r in spec.requests}
        self.owner: dict = {}

    def model_of(self, req: RequestSpec) -> ScriptedModel:
        return req.model or self.spec.model

    def scheduled(self, step: int) -> list:
        live = ("waiting", "running")
        if self.spec.schedule is not None:
            ids = self.spec.schedule[step] if step < len(self.spec.schedule) else []
            return [self.states[i] for i in ids if self.states[i].status in live]
        return [st for st in self.states.values() if st.status in live
                and st.request.arrive <= step and step not in st.request.pause]

    def done(self, step: int) -> bool:
        if self.spec.schedule is not None and step >= len(self.spec.schedule):
            return True
        return all(st.status not in ("waiting", "running") for st in self.states.values())

    # -- admission ---------------------------------------------------------
    def admit(self, st: SlotState, step: int) -> None:
        req = st.request
        try:
            holder = self.owner.get(req.slot)
            if holder is not None and holder != req.id:
                raise RowError("duplicate_slot", f"step {step}: slot {req.slot} is still held by request {holder!r}")
            try:
                logits = self.model_of(req).logits(req.fields.get("prompt", []), [])
            except ModelError as e:
                raise RowError("bad_logits", f"scripted model: {e}") from None
            row = req.row(logits, [])
            res = resolve(row, self.profile)
            if req.use_beam_search:
                if not 1 <= req.beam_width <= self.spec.max_beam_width:
                    raise RowError("invalid_beam_width", f"beam_width={req.beam_width}: must be in "
                                   f"[1, max_beam_width={self.spec.max_beam_width}]")
                if req.draft_len:
                    raise RowError("invalid_draft", "draft tokens are rejected together with beam search")
            elif req.beam_width != 1:
                raise RowError("invalid_beam_width", f"beam_width={req.beam_width} needs use_beam_search = true")
            if req.draft_len and _decay_active(row):
                raise RowError("invalid_top_p_decay", "top_p_decay is not supported for requests carrying draft tokens")
            if req.d2t is not None and res.mode != GREEDY:
                raise RowError("invalid_d2t", f"d2t needs greedy decoding; this request resolves to {res.mode}")
        except RowError as e:
            _fail(st, e, step)
            return
        st.status, st.mode = "running", res.mode
        self.owner[req.slot] = req.id
        if _decay_active(row):
            st.top_p = req.fields.get("top_p") if req.fields.get("top_p") is not None else 1.0
        if req.use_beam_search:
            from .beam import BeamSearch
            st.beam = BeamSearch(req, self.model_of(req), self.profile, self.session.dtype,
                                 self.spec.max_seq_len, select=getattr(self.session, "beam_select", None))

    # -- plain rows ----------------------------------------------------------
    def plain(self, states: list, step: int) -> None:
        rows, live = [], []
        for st in states:
            req = st.request
            try:
                logits = self.model_of(req).logits(req.fields.get("prompt", []), st.generated)
            except ModelError as e:
                _fail(st, RowError("bad_logits", f"scripted model: {e}"), step)
                continue
            rows.append(req.row(logits, st.generated))
            live.append(st)
        if not rows:
            return
        for st, row, out in zip(live, rows, self.session.step(rows)):
            if out.error is not None:
                _fail(st, RowError(out.error, out.message), step)
                continue
            rec = StepRecord(step, tokens=[out.token], finish_reason=out.finish_reason)
            if "offset" in out.extra:
                rec.offsets, rec.seed = [out.extra["offset"]], out.extra["seed"]
            if out.mode == "sampling" and out.probs is not None:
                rec.support = [int(i) for i in torch.nonzero(out.probs > 0).flatten().tolist()]
            if st.top_p is not None:
                rec.top_p = st.top_p
                p0 = st.request.fields.get("top_p") if st.request.fields.get("top_p") is not None else 1.0
                assert math.isclose(runtime_top_p(row, p0), st.top_p, rel_tol=0, abs_tol=0), \
                    "runtime top-p state and history disagree"
            self.finish(st, rec, [out.token], out.finish_reason)

    def finish(self, st: SlotState, rec: StepRecord, tokens: list, reason: Optional[str]) -> None:
        st.fold(tokens)
        st.result.steps.append(rec)
        if reason is not None and reason != "none":
            st.status = "finished"
            st.result.finish_reason, st.result.finish_step = reason, rec.step

    # -- the run -------------------------------------------------------------
    def run(self) -> ScenarioResult:
        from .beam import beam_step
        from .speculative import speculative_step
        step = 0
        while step < self.spec.max_steps and not self.done(step):
            sched = self.scheduled(step)
            for st in sched:
                if st.status == "waiting":
                    self.admit(st, step)
            sched = [st for st in sched if st.status == "running"]
            spec = [st for st in sched if st.request.draft_len > 0 and st.beam is None]
            beams = [st for st in sched if st.beam is not None]
            plain = [st for st in sched if st.request.draft_len == 0 and st.beam is None]
            speculative_step(self, spec, step, plain)
            for st in beams:
                beam_step(self, st, step)
            for st in self.states.values():
                if st.status in ("finished", "failed") and self.owner.get(st.request.slot) == st.request.id:
                    del self.owner[st.request.slot]
            step += 1
        for st in self.states.values():
            r = st.result
            if st.status == "running":
                r.finish_reason = "none"
                if st.beam is not None:
                    st.beam.finalize(r, "none")
            if st.beam is None and st.status != "failed":
                r.tokens = list(st.generated)
        return ScenarioResult({k: st.result for k, st in self.states.items()}, step)


def run_scenario(spec: ScenarioSpec, profile: Profile, session) -> ScenarioResult:
    """Decode ``spec`` on the reference under ``profile``.

    Parameters
    ----------
    spec : ScenarioSpec
    profile : Profile
        Beam-search and speculative rules are its ``beam_*`` fields.
    session : impls.reference.sampler.ReferenceSession
        A fresh session (its :class:`~.seeds.SeedManager` holds the
        per-slot Philox state). A subclass may define ``verify_chain`` to
        verify speculative sampling requests with its own kernel
        (:func:`.speculative._verify_chain`), and ``beam_select`` to choose
        the beams of a frozen-slots beam step with its own code
        (:meth:`.beam.BeamSearch._step_engine`); the reference's defines
        neither.

    Returns
    -------
    ScenarioResult
        One :class:`RequestResult` per request, in spec order. A request
        rejected at admission or failing at a step carries its error; the
        others run to their end.

    Notes
    -----
    Steps run until every request finished or failed, the explicit
    ``schedule`` ends, or ``spec.max_steps`` (then unfinished requests
    report ``finish_reason = "none"``).
    """
    return _Runner(spec, profile, session).run()


def replicate(spec: ScenarioSpec, rid: str, seeds: list) -> ScenarioSpec:
    """A one-step scenario with ``len(seeds)`` copies of request ``rid``.

    Copy ``i`` is request ``f"{rid}#{i}"`` in slot ``i`` with seed
    ``seeds[i]``, all arriving at step 0: the draws of a statistical scenario
    check (cases/README.md). Every other request is dropped.

    Raises
    ------
    KeyError
        When ``rid`` is not a request of ``spec``.
    """
    base = spec.request(rid)
    reqs = []
    for i, s in enumerate(seeds):
        f = dict(base.fields, seed=int(s))
        reqs.append(RequestSpec(id=f"{rid}#{i}", slot=i, fields=f, beam_width=base.beam_width,
                                length_penalty=base.length_penalty, early_stopping=base.early_stopping,
                                diversity_rate=base.diversity_rate, draft_len=base.draft_len, drafts=base.drafts,
                                d2t=base.d2t, model=base.model))
    return ScenarioSpec(model=spec.model, requests=reqs, draft_model=spec.draft_model,
                        max_beam_width=spec.max_beam_width, max_steps=1, max_seq_len=spec.max_seq_len)
