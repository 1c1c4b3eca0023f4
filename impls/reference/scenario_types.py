"""The data of a multi-step scenario: request and scenario specs, step records, results, slot state.

Kept apart from the decoder (:mod:`.scenario`) so that its parts (:mod:`.beam`,
:mod:`.speculative`) and the harness can use these types without importing it.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Optional

import torch

from ..base import Row, RowError
from .scripted import ScriptedModel
from .toy_tokenizer import ToyTokenizer

__all__ = ["PAD", "DRAFT_PAD", "CHILD_SEP", "child_id", "parent_of", "RequestSpec", "ScenarioSpec", "StepRecord",
           "RequestResult", "ScenarioResult", "SlotState", "ScenarioUnsupported", "replicate", "alone",
           "fail_request"]


#: Token written for a beam that is frozen (finished) this step (TensorRT-LLM's
#: ``BEAM_SEARCH_PAD_TOKEN``, beam_search.py@095443e5).
PAD = -1

#: A padding entry of a literal draft list (FlashInfer's ``chain_speculative_sampling``
#: convention, flashinfer-ai/flashinfer#879 and PR #3551; vLLM's rejection sampler,
#: rejection_sampler.py@v0.32.0): the first one ends the drafts examined that step
#: (SEMANTICS §4). Never an index.
DRAFT_PAD = -1


#: Between a request's id and its child's index: child ``i`` of request ``a`` with ``n > 1`` is ``a#i``
#: (cases/README.md, "Parallel sampling"). Request ids never hold it (``[\w.-]+``).
CHILD_SEP = "#"


def child_id(rid: str, index: int) -> str:
    """The id of child ``index`` of request ``rid``: ``"<rid>#<index>"``."""
    return f"{rid}{CHILD_SEP}{int(index)}"


def parent_of(cid: str) -> Optional[tuple]:
    """``(request id, index)`` of a child id ``"<rid>#<index>"``, or None for any other string."""
    rid, sep, idx = str(cid).rpartition(CHILD_SEP)
    if not sep or not rid or not idx.isdigit() or str(int(idx)) != idx:
        return None
    return rid, int(idx)


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
        Literal draft tokens per step (else the draft model proposes them);
        a ``-1`` pads a list (:data:`DRAFT_PAD`, SEMANTICS §4).
    d2t : list of int or None
        Draft-to-target offsets, ``(V_draft,)``: ``token += d2t[token]``.
    model : ScriptedModel or None
        Overrides the scenario's target model for this request.
    stop : tuple of str
        Stop strings (SEMANTICS §1.8a), matched on the text of the scenario's
        :attr:`ScenarioSpec.tokenizer`; empty: none.
    include_stop_str_in_output : bool
        Keep the matched stop string in the output text.
    n : int
        Parallel sampling (SEMANTICS §2a): the request fans out into ``n``
        children (:meth:`children`); a child keeps its request's ``n``.
    parent : str or None
        A child's request id (None: not a child).
    index : int
        A child's index ``i`` in ``[0, n)``.
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
    stop: tuple = ()
    include_stop_str_in_output: bool = False
    n: int = 1
    parent: Optional[str] = None
    index: int = 0

    @property
    def use_beam_search(self) -> bool:
        """Whether the request asks for beam search (``fields["use_beam_search"]``)."""
        return bool(self.fields.get("use_beam_search", False))

    def wants_step(self, step: int) -> bool:
        """Whether the request asks to run at ``step`` (0-based) by its own fields: arrived (``arrive <= step``)
        and not paused then. A scenario's explicit ``schedule`` overrides it (:meth:`ScenarioSpec.schedule_at`)."""
        return self.arrive <= step and step not in self.pause

    def row(self, logits: torch.Tensor, generated: list, slot: Optional[int] = None, draft_position: int = 0) -> Row:
        """The :class:`~impls.base.Row` of this request at one step.

        Parameters
        ----------
        logits : torch.Tensor
            ``(V,)`` float32.
        generated : list of int
            The finalised history before this step.
        slot : int, optional
            Defaults to :attr:`slot`.
        draft_position : int
            Speculative verification row ``i``: the ``i`` drafts ahead of it,
            which ``min_length`` counts (:func:`.bans.min_length_bans`); 0
            for every other row.
        """
        return Row(logits=logits, generated=list(generated), slot=self.slot if slot is None else slot,
                   request_id=self.id, draft_position=int(draft_position), **self.fields)

    def children(self) -> list:
        """The sequences this request decodes: itself when ``n == 1``, else its ``n`` children.

        Child ``i`` is this request with id :func:`child_id` ``(id, i)``, slot ``slot + i``,
        ``parent = id`` and ``index = i``; its fields are the request's (the seed as the
        case gives it: each profile derives the child's own, :func:`.seeds.child_seed`).
        """
        if self.n == 1 or self.parent is not None:
            return [self]
        return [dataclasses.replace(self, id=child_id(self.id, i), slot=self.slot + i, fields=dict(self.fields),
                                    parent=self.id, index=i) for i in range(self.n)]


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
    tokenizer : ToyTokenizer or None
        The case's toy tokenizer (token id -> text): requests' text and stop strings
        (SEMANTICS §1.8a); None: the scenario has no text.
    """

    model: ScriptedModel
    requests: list
    draft_model: Optional[ScriptedModel] = None
    max_beam_width: int = 4
    max_steps: int = 32
    max_seq_len: Optional[int] = None
    schedule: Optional[list] = None
    tokenizer: Optional[ToyTokenizer] = None

    def request(self, rid: str) -> RequestSpec:
        """The request called ``rid``, or the child so named (``"<id>#<i>"``); KeyError if absent."""
        for r in self.requests:
            if r.id == rid:
                return r
        named = parent_of(rid)
        if named is not None:
            for r in self.requests:
                if r.id == named[0] and r.n > 1 and named[1] < r.n:
                    return r.children()[named[1]]
        raise KeyError(rid)

    def observed(self) -> list:
        """Every sequence a decode reports, in batch order: each request, or its children when ``n > 1``."""
        return [c for r in self.requests for c in r.children()]

    def schedule_at(self, step: int) -> Optional[list]:
        """The request ids the explicit ``schedule`` runs at ``step`` (``[]`` past its end), or None without one
        (each request then runs when :meth:`RequestSpec.wants_step`). Every driver's scheduling rule."""
        if self.schedule is None:
            return None
        return list(self.schedule[step]) if step < len(self.schedule) else []

    def schedule_over(self, step: int) -> bool:
        """Whether an explicit ``schedule`` has no step ``step`` (the decode stops there)."""
        return self.schedule is not None and step >= len(self.schedule)


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
        Speculative: the draft tokens verified this step (target vocabulary):
        for a literal list padded with ``-1``, the prefix before the first
        pad.
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
    text : str or None
        With a tokenizer: the output text (the generated tokens' text, cut at a stop string
        that finished the request; SEMANTICS §1.8a). None without a tokenizer or on error.
    stop_reason : str or None
        The stop string that finished the request (vLLM's ``stop_reason``), else None.
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
    text: Optional[str] = None
    stop_reason: Optional[str] = None


@dataclass
class ScenarioResult:
    """All requests' results (``requests`` keyed by id) and the steps run.

    ``keys`` names the observations an implementation reports (see
    :data:`harness.kinds.scenario.EXPECT_KEYS`); ``None`` (the reference) means
    all of them. The judge compares only those. ``path`` says which of an
    implementation's code paths decoded it (recorded in the result's details;
    None: its only one). ``stages_used`` (as a session's, :class:`impls.base.Session`):
    ``{stage: provenance}`` where that path's code differs from the implementation's
    ``scenario_stages``; the judge folds it into the case's provenance.
    """

    requests: dict
    steps_run: int = 0
    keys: Optional[frozenset] = None
    path: Optional[str] = None
    stages_used: dict = field(default_factory=dict)


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
    stop_match : object or None
        The :class:`~.stop_strings.StopMatch` that finished the request (SEMANTICS §1.8a).
    """

    request: RequestSpec
    status: str = "waiting"
    generated: list = field(default_factory=list)
    counts: Counter = field(default_factory=Counter)
    top_p: Optional[float] = None
    mode: Optional[str] = None
    beam: Any = None
    result: Optional[RequestResult] = None
    stop_match: Any = None

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


def fail_request(st: SlotState, err: RowError, step: int) -> None:
    """Mark the request in ``st`` failed at ``step`` with ``err``'s kind and message."""
    st.status = "failed"
    st.result.error, st.result.message, st.result.error_step = err.kind, err.message, step



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
        reqs.append(RequestSpec(id=child_id(rid, i), slot=i, fields=f, beam_width=base.beam_width,
                                length_penalty=base.length_penalty, early_stopping=base.early_stopping,
                                diversity_rate=base.diversity_rate, draft_len=base.draft_len, drafts=base.drafts,
                                d2t=base.d2t, model=base.model, stop=base.stop,
                                include_stop_str_in_output=base.include_stop_str_in_output))
    return ScenarioSpec(model=spec.model, requests=reqs, draft_model=spec.draft_model,
                        max_beam_width=spec.max_beam_width, max_steps=1, max_seq_len=spec.max_seq_len,
                        tokenizer=spec.tokenizer)


def alone(spec: ScenarioSpec, rid: str) -> ScenarioSpec:
    """A one-step scenario with request ``rid`` alone, arriving at step 0 in slot 0.

    The draws of a statistical check over the children of a request with ``n > 1``
    (cases/README.md, "Statistical scenarios"): its ``n`` children, decoded once as the
    case gives the request (seeded or not). Every other request is dropped.

    Raises
    ------
    KeyError
        When ``rid`` is not a request of ``spec``.
    """
    base = spec.request(rid)
    req = dataclasses.replace(base, slot=0, arrive=0, pause=frozenset())
    return ScenarioSpec(model=spec.model, requests=[req], draft_model=spec.draft_model,
                        max_beam_width=spec.max_beam_width, max_steps=1, max_seq_len=spec.max_seq_len,
                        tokenizer=spec.tokenizer)
