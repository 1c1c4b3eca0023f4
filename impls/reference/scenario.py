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
   rejected), in spec order; a request with ``n > 1`` is its ``n`` children
   (:func:`fan_out`, SEMANTICS §2a), consecutive in the batch, each a request of
   its own from here on (its slot, seed, history and finish);
2. **admission** of the requests scheduled for the first time (SEMANTICS
   §1.1 rule 5, §2, §3, §4; seed 000 § Top-P Decay, "rejected at admission,
   one request"): a slot still held by a running request (``duplicate_slot``),
   the per-request validation of :func:`.modes.validate`, beam width outside
   ``[1, max_beam_width]`` (``invalid_beam_width``), top-p decay with beam
   search or draft tokens (``invalid_top_p_decay``), ``d2t`` on a request
   that does not decode greedily (``invalid_d2t``), draft tokens with beam
   search (``invalid_draft``), an empty stop string (``invalid_stop_words``,
   unless the profile skips that check), ``n > 1`` on a greedy request under
   ``n_greedy = "error"`` (``invalid_n``), a child seed past ``2**64 - 1`` under
   ``child_seed_overflow = "error"`` (``invalid_seed``, every child). A rejected
   request takes no slot; the others run;
3. **draft batch** of the speculative requests (:mod:`.speculative`): draws
   as unseeded rows, never touching a slot's counter;
4. **target batch**: the plain requests in one
   :meth:`~.sampler.ReferenceSession.step` (histories are the finalised
   tokens, so penalty counts fold finalised tokens only), then the
   verification rows of the speculative requests;
5. **beam search** requests (:mod:`.beam`), one beam step each;
6. **finalise**: append the emitted tokens, fold them into the slot's state
   (penalty counts, top-p decay runtime value), record finish reasons (a stop
   string found in the scenario's toy-tokenizer text, :mod:`.stop_strings`,
   takes the ``stop_words`` place of ``finish_order``) and release the slots
   of finished or failed requests. When the run ends, each request with a
   tokenizer gets its output text (cut at the stop string that finished it).

Per-slot state (:class:`SlotState`) lives as long as the request holding the
slot: the Philox ``(seed, offset)`` of :mod:`.seeds` (reset when a new
request takes the slot), the occurrence counts of the finalised tokens, the
runtime top-p of an active decay, and the finish state.
"""

from __future__ import annotations

import math
from typing import Optional

import torch

from ..base import RowError
from ..profiles import Profile
from .beam import BeamSearch, beam_step
from .modes import GREEDY, _decay_active, resolve, runtime_top_p
from .scenario_types import (RequestResult, RequestSpec, ScenarioResult, ScenarioSpec, ScenarioUnsupported,
                             SlotState, StepRecord, alone, fail_request, replicate)
from .scripted import ModelError, ScriptedModel
from .seeds import child_seed
from .speculative import speculative_step
from .finish import STOP_WORDS, finish_reason
from .stop_strings import find_stop, output_text

__all__ = ["RequestSpec", "ScenarioSpec", "StepRecord", "RequestResult", "ScenarioResult", "SlotState",
           "ScenarioUnsupported", "run_scenario", "replicate", "alone", "fan_out"]

def fan_out(req: RequestSpec, profile: Profile) -> list:
    """The sequences request ``req`` decodes under ``profile`` (SEMANTICS §2a), and their admission errors.

    Returns
    -------
    list of (RequestSpec, RowError or None)
        ``req`` itself when ``n == 1``; else its children (:meth:`RequestSpec.children`),
        each with the seed :func:`.seeds.child_seed` gives it (a ``shared_stream``
        child also its ``child_stream``), and the error that rejects the whole request
        at admission (``child_seed_overflow = "error"``), else None. A request seed of
        ``-1`` under ``seed_minus_one_unseeded`` makes the request unseeded before its
        children are made (vLLM's ``SamplingParams.__post_init__``).
    """
    if req.n == 1 or req.parent is not None:
        return [(req, None)]
    seed = req.fields.get("seed")
    if seed is not None and profile.seed_minus_one_unseeded and seed == -1:
        seed = None
    out = []
    for child in req.children():
        cs = child_seed(seed, child.index, req.n, profile)
        f = child.fields
        f.pop("seed", None)
        if cs.seed is not None:
            f["seed"] = cs.seed
        if cs.stream is not None:
            f["child_stream"] = cs.stream
        err = None
        if cs.error is not None:
            err = RowError(cs.error, f"child {child.index}'s seed {seed} + {child.index} is above 2**64 - 1 "
                           "(child_seed_overflow = 'error': the request is refused)")
        out.append((child, err))
    return out


class _Runner:
    def __init__(self, spec: ScenarioSpec, profile: Profile, session):
        self.spec, self.profile, self.session = spec, profile, session
        self.states, self.fan_errors, self.members = {}, {}, {}
        for r in spec.requests:
            kids = fan_out(r, profile)
            self.members[r.id] = [c.id for c, _ in kids]
            for c, err in kids:
                self.states[c.id] = SlotState(c, result=RequestResult(c.id))
                if err is not None:
                    self.fan_errors[c.id] = err
        self.owner: dict = {}

    def model_of(self, req: RequestSpec) -> ScriptedModel:
        return req.model or self.spec.model

    def scheduled(self, step: int) -> list:
        live = ("waiting", "running")
        ids = self.spec.schedule_at(step)
        if ids is not None:
            ids = [c for i in ids for c in self.members[i]]  # a request with n > 1: its children, in order
            return [self.states[i] for i in ids if self.states[i].status in live]
        return [st for st in self.states.values() if st.status in live and st.request.wants_step(step)]

    def done(self, step: int) -> bool:
        if self.spec.schedule_over(step):
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
            if "" in req.stop and "empty_stop_string" not in self.profile.validation_skips:
                raise RowError("invalid_stop_words", "stop strings must not be empty")
            if req.n > 1 and res.mode == GREEDY and self.profile.n_greedy == "error":
                raise RowError("invalid_n", f"n={req.n} on a request that decodes greedily (n_greedy = 'error')")
            if req.id in self.fan_errors:
                raise self.fan_errors[req.id]
        except RowError as e:
            fail_request(st, e, step)
            return
        st.status, st.mode = "running", res.mode
        self.owner[req.slot] = req.id
        if _decay_active(row):
            st.top_p = req.fields.get("top_p") if req.fields.get("top_p") is not None else 1.0
        if req.use_beam_search:
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
                fail_request(st, RowError("bad_logits", f"scripted model: {e}"), step)
                continue
            rows.append(req.row(logits, st.generated))
            live.append(st)
        if not rows:
            return
        for st, row, out in zip(live, rows, self.session.step(rows)):
            if out.error is not None:
                fail_request(st, RowError(out.error, out.message), step)
                continue
            rec = StepRecord(step, tokens=[out.token], finish_reason=out.finish_reason)
            if "offset" in out.extra:
                rec.offsets, rec.seed = [out.extra["offset"]], out.extra["seed"]
            if out.mode == "sampling" and out.probs is not None:
                rec.support = [int(i) for i in torch.nonzero(out.probs > 0).flatten().tolist()]
            reason = out.finish_reason
            if st.request.stop and self.spec.tokenizer is not None:
                match = find_stop(self.spec.tokenizer, st.request.stop, st.request.fields.get("prompt", []),
                                  st.generated + [out.token], self.profile, row.min_length)
                if match is not None:
                    reason = finish_reason(row, out.token, self.profile, stop_string=True)
                    if reason == STOP_WORDS:
                        st.stop_match = match
                    rec.finish_reason = reason
            if st.top_p is not None:
                rec.top_p = st.top_p
                p0 = st.request.fields.get("top_p") if st.request.fields.get("top_p") is not None else 1.0
                assert math.isclose(runtime_top_p(row, p0), st.top_p, rel_tol=0, abs_tol=0), \
                    "runtime top-p state and history disagree"
            self.finish(st, rec, [out.token], reason)

    def finish(self, st: SlotState, rec: StepRecord, tokens: list, reason: Optional[str]) -> None:
        st.fold(tokens)
        st.result.steps.append(rec)
        if reason is not None and reason != "none":
            st.status = "finished"
            st.result.finish_reason, st.result.finish_step = reason, rec.step

    # -- the run -------------------------------------------------------------
    def run(self) -> ScenarioResult:
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
            if self.spec.tokenizer is not None and st.status != "failed" and r.error is None:
                m = st.stop_match
                r.text = output_text(self.spec.tokenizer, r.tokens, m, st.request.include_stop_str_in_output,
                                     self.profile)
                r.stop_reason = m.string if m is not None else None
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
        One :class:`RequestResult` per request, in spec order (a request with
        ``n > 1``: one per child, ``"<id>#<i>"``, :func:`fan_out`). A request
        rejected at admission or failing at a step carries its error; the
        others run to their end.

    Notes
    -----
    Steps run until every request finished or failed, the explicit
    ``schedule`` ends, or ``spec.max_steps`` (then unfinished requests
    report ``finish_reason = "none"``).
    """
    return _Runner(spec, profile, session).run()
