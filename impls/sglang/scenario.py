"""Multi-step scenarios on SGLang's per-request code: real ``Req`` objects across steps.

Imported lazily (it imports SGLang through :mod:`.engine`). Paths are relative to
``python/sglang/srt/`` of sgl-project/sglang@v0.5.23 (the wheel ``sglang-0.5.23``).

What is SGLang's:

* **admission**: each request's ``SamplingParams`` (``__post_init__``, ``verify``, ``normalize``:
  ``sampling/sampling_params.py``) and its ``Req`` (``managers/schedule_batch.py``), built by
  :func:`.engine.make_request` with the request's stop strings (``stop``) and
  ``include_stop_str_in_output`` as ``no_stop_trim``; a ``ValueError`` is the request's error at its
  first scheduled step;
* **each step**: the scheduled requests' logits go through :func:`.engine.run_batch`, the single-step
  session's path (``SamplingBatchInfo.from_schedule_batch`` per request, its penalizers fed the
  request's ``output_ids`` one token at a time with ``cumulate_output_tokens``, ``merge_batch``,
  ``copy_for_forward``, ``ModelRunner._preprocess_logits``, ``Sampler.forward``; custom logit
  processors read ``len(req.output_ids)`` of the request itself);
* **finish**: the sampled token is appended to the *same* ``Req`` and ``Req.update_finish_state``
  decides, as ``SchedulerBatchResultProcessor.process_batch_result_decode``
  (``managers/scheduler_components/batch_result_processor.py``) does: stop strings first
  (``_check_str_based_finish``: each of ``stop_strs``, in list order, looked for in ``tail_str``, the
  request tokenizer's ``decode`` of the last ``stop_str_max_len + 1`` output ids), then
  ``stop_token_ids`` and the EOS ids (``_check_token_based_finish``; nothing under ``ignore_eos``), then
  ``max_new_tokens``;
* **output**: the tokens are ``Req.output_ids_through_stop``; the text is what SGLang's output path
  makes of the request: ``_GenerationStreamAccumulator.accept`` and ``to_payload``
  (``managers/scheduler_components/output_streamer.py``, a non-streaming request: sent when it
  finishes) and ``DetokenizerManager._decode_batch_token_id_output``
  (``managers/detokenizer_manager.py``: the ids decoded with ``skip_special_tokens``, a matched stop
  token dropped, then ``trim_matched_stop`` cuts the text at the first occurrence of a matched stop
  string, or after it under ``no_stop_trim``); ``stop_reason`` is the ``matched`` string of a
  ``FINISH_MATCHED_STR``.

What is the adapter's (stage ``decode``: :attr:`impls.sglang.SglangImpl.scenario_stages`):

* the schedule: which requests run at each step (``arrive``, ``pause``, an explicit ``schedule``,
  ``max_steps``), in the scenario's order, batched by vocabulary; SGLang's scheduler (its waiting
  queue, prefill/decode batches, retraction) is not driven. A request still running when the
  scenario ends is aborted as SGLang aborts one (``FINISH_ABORT``: its text is sent untrimmed) and
  reports ``finish_reason = "none"``;
* the scripted model's logits (a :class:`~impls.reference.scripted.ScriptedModel` row per history;
  a row it cannot give is the request's ``bad_logits`` at that step);
* the tokenizer (:class:`CaseTokenizer`): the case's toy vocabulary as a Hugging Face fast tokenizer
  (:func:`impls.reference.toy_tokenizer.fast_tokenizer`, SGLang's tokenizers are Hugging Face ones),
  whose ``encode`` (read only by ``SamplingParams.normalize`` for ``stop_str_max_len``) is a longest-
  match over the vocabulary, a character outside every entry one token.

A request with ``n > 1`` is fanned out as SGLang's tokenizer manager does: how many copies is
SGLang's ``GenerateReqInput.normalize_batch_and_arguments`` (:func:`.engine.parallel_sample_num`),
and ``TokenizerManager._handle_batch_request`` sends each copy as the same tokenized request with a
new rid, so every child is a ``Req`` with the request's own sampling parameters, seed included (the
children are :meth:`~impls.reference.scenario_types.RequestSpec.children`, ``"<id>#<i>"``, which
keep the request's fields). The prompt-caching request it sends first (``max_new_tokens = 0``)
is not run: no client sees its token, and what it does to the shared generator is chance here
anyway (SGLang's draws are not canonical).

Refused (``n/a``, :func:`unsupported_reason`): beam search, draft tokens, an engine ``max_seq_len``
(the model's context length, a server setting), a request field the single-step adapter cannot express (:func:`.translate.unsupported_reason`), two requests in
one slot at once (SGLang has no slots: ``duplicate_slot`` cannot arise).
"""

from __future__ import annotations

import types
from dataclasses import dataclass, field
from typing import Optional

import torch

from ..base import RowError
from ..reference.scenario_types import (RequestResult, ScenarioResult, ScenarioSpec, ScenarioUnsupported,
                                        StepRecord)
from ..reference.scripted import ModelError
from ..reference.toy_tokenizer import ToyTokenizer, fast_tokenizer
from . import engine
from .translate import eos_ids, unsupported_reason as row_unsupported_reason

__all__ = ["REPORTED", "PATH", "unsupported_reason", "CaseTokenizer", "run_scenario"]

#: Observations this path reports (:data:`harness.kinds.scenario.EXPECT_KEYS`): no Philox offsets, kept
#: sets, top-p decay, speculative or beam records.
REPORTED = frozenset({"error", "error_step", "tokens", "finish_reason", "finish_step", "scheduled", "text",
                      "stop_reason"})

#: What a result of this path says it ran (``ScenarioResult.path``).
PATH = ("SGLang's Req per request across steps (impls/sglang/scenario.py): SamplingParams, penaltylib, "
        "SamplingBatchInfo, ModelRunner._preprocess_logits, Sampler.forward, Req.update_finish_state, "
        "the output streamer and DetokenizerManager for the text; the adapter schedules")


def unsupported_reason(spec: ScenarioSpec) -> Optional[str]:
    """Why SGLang's per-request code cannot run ``spec`` (known before the run), or None (module docstring)."""
    if spec.max_seq_len is not None:
        return "an engine max_seq_len: SGLang's context length is the model's (a server setting)"
    for req in spec.requests:
        if req.use_beam_search or req.beam_width != 1:
            return (f"request {req.id!r}: beam search (SGLang's beam_width requests run in its BeamCoordinator "
                    "inside the scheduler, which is not driven)")
        if req.draft_len or req.drafts is not None or req.d2t is not None:
            return (f"request {req.id!r}: draft tokens (SGLang's speculative workers propose their own drafts; "
                    "literal drafts or a draft model's q cannot be given)")
        model = req.model or spec.model
        why = row_unsupported_reason(req.row(torch.zeros(model.vocab), []))
        if why is not None:
            return f"request {req.id!r}: {why}"
    return None


class CaseTokenizer:
    """The tokenizer a scenario's ``Req`` reads: the case's toy vocabulary (module docstring).

    ``decode`` is the Hugging Face fast tokenizer's (``skip_special_tokens`` False by default, as
    ``Req.tail_str`` calls it); ``encode`` a longest match over the vocabulary (the stop strings'
    token counts, ``SamplingParams.normalize``); ``eos_token_id`` the request's first EOS id and
    ``additional_stop_token_ids`` None, as the single-step stand-in (:func:`.engine.make_request`).

    Parameters
    ----------
    tok : ToyTokenizer
    fast : transformers.PreTrainedTokenizerFast
        :func:`impls.reference.toy_tokenizer.fast_tokenizer` of ``tok`` (shared by a run).
    eos : int or None
    """

    additional_stop_token_ids = None

    def __init__(self, tok: ToyTokenizer, fast, eos: Optional[int]):
        self.tok, self.fast, self.eos_token_id = tok, fast, eos

    def encode(self, text: str, add_special_tokens: bool = False) -> list:
        """Greedy longest match of ``text`` over the vocabulary; a character no entry starts with is one token."""
        ids, i, table = [], 0, {t: k for k, t in enumerate(self.tok.vocab)}
        longest = max(len(t) for t in self.tok.vocab)
        while i < len(text):
            for j in range(min(len(text), i + longest), i, -1):
                if text[i:j] in table:
                    ids.append(table[text[i:j]])
                    i = j
                    break
            else:
                ids.append(-1)
                i += 1
        return ids

    def decode(self, ids, **kw) -> str:
        """``PreTrainedTokenizerFast.decode`` (special tokens' text kept unless ``skip_special_tokens``)."""
        return self.fast.decode([int(t) for t in ids], **kw)


@dataclass(eq=False)
class _Seq:
    """One request of a run: its spec, its SGLang ``Req`` once admitted, its result."""

    spec: object
    status: str = "waiting"      # waiting, running, finished, failed
    req: object = None
    result: Optional[RequestResult] = None
    text: list = field(default_factory=list)


def _detokenizer(fast):
    """A ``DetokenizerManager`` without its process: the attributes ``init_tokenizer``/``init_running_status`` set."""
    from sglang.srt.managers.detokenizer_manager import DetokenizerManager
    dm = DetokenizerManager.__new__(DetokenizerManager)
    dm.tokenizer, dm.vocab_size = fast, len(fast)
    dm.decode_status = {}
    dm.disable_tokenizer_batch_decode = False
    dm.is_tool_call_parser_gpt_oss = False
    dm.tool_close_token_ids = set()
    return dm


def _accumulator():
    """``_GenerationStreamAccumulator`` as ``SchedulerOutputStreamer`` builds it for a batch without logprobs."""
    from sglang.srt.disaggregation.utils import DisaggregationMode
    from sglang.srt.managers.scheduler_components.output_streamer import (DEFAULT_FORCE_STREAM_INTERVAL,
                                                                          _GenerationStreamAccumulator)
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
    return _GenerationStreamAccumulator(
        return_logprob=False, return_hidden_states=False, return_routed_experts=False, return_indexer_topk=False,
        return_sampling_mask=False, spec_algorithm=SpeculativeAlgorithm.NONE,
        disaggregation_mode=DisaggregationMode.NULL, default_stream_interval=1,
        default_force_stream_interval=DEFAULT_FORCE_STREAM_INTERVAL, get_cached_tokens_details=lambda req: None,
        is_request_level_customized_info_key=lambda key: False, current_weight_version=None)


class _Run:
    """One scenario's decode on SGLang's ``Req`` objects, scheduled by the adapter (module docstring).

    ``seqs``: every sequence in spec order (a request, or its ``n`` copies); ``owner``: slot -> the
    sequence holding it (SGLang has no slots: two requests in one slot at once are ``n/a``).
    """

    def __init__(self, spec: ScenarioSpec):
        self.spec = spec
        #: request id -> its sequences (the request itself, or its n children as SGLang copies it)
        self.members = {r.id: [_Seq(c, result=RequestResult(c.id)) for c in _fan_out(r)] for r in spec.requests}
        self.seqs = [q for r in spec.requests for q in self.members[r.id]]
        self.owner: dict = {}
        tok = spec.tokenizer
        self.fast = fast_tokenizer(tok) if tok is not None else None
        self.detok = _detokenizer(self.fast) if tok is not None else None
        self._rid = 0

    def model_of(self, req):
        """The scripted model serving ``req``: its own, else the scenario's."""
        return req.model or self.spec.model

    # -- scheduling (the adapter's) ------------------------------------------------
    def scheduled(self, step: int) -> list:
        """The live sequences that run at ``step`` (the explicit schedule's, else those that want it)."""
        live = ("waiting", "running")
        ids = self.spec.schedule_at(step)
        if ids is not None:
            return [q for i in ids for q in self.members[i] if q.status in live]
        return [q for q in self.seqs if q.status in live and q.spec.wants_step(step)]

    def done(self, step: int) -> bool:
        """Whether the decode ends before ``step``: past the schedule, or nothing waiting or running."""
        if self.spec.schedule_over(step):
            return True
        return all(q.status not in ("waiting", "running") for q in self.seqs)

    def fail(self, q: _Seq, err: RowError, step: int) -> None:
        """Record ``err`` at ``step`` as ``q``'s error and free its slot."""
        q.status = "failed"
        q.result.error, q.result.message, q.result.error_step = err.kind, err.message, step
        self.release(q)

    def release(self, q: _Seq) -> None:
        """Free ``q``'s slot if it holds it."""
        if self.owner.get(q.spec.slot) is q:
            del self.owner[q.spec.slot]

    # -- admission: SGLang's SamplingParams and Req ----------------------------------
    def admit(self, q: _Seq, step: int) -> None:
        """Build ``q``'s SGLang ``Req`` (SGLang validates it here: a refusal is ``q``'s error at ``step``).

        Raises
        ------
        ScenarioUnsupported
            Another sequence holds ``q``'s slot.
        """
        req = q.spec
        holder = self.owner.get(req.slot)
        if holder is not None:
            raise ScenarioUnsupported(f"request {req.id!r} takes slot {req.slot} while {holder.spec.id!r} still holds "
                                      "it: SGLang has no sequence slots (requests are keyed by rid), so "
                                      "duplicate_slot cannot arise")
        try:
            logits = self.model_of(req).logits(req.fields.get("prompt", []), [])
        except ModelError as e:
            self.fail(q, RowError("bad_logits", f"scripted model: {e}"), step)
            return
        row = req.row(logits, [])
        eos = eos_ids(row)
        tok = (CaseTokenizer(self.spec.tokenizer, self.fast, eos[0] if eos else None)
               if self.spec.tokenizer is not None else None)
        self._rid += 1
        try:
            q.req = engine.make_request(row, f"scenario-{self._rid}", row.vocab, mask=False, tokenizer=tok,
                                        stop=req.stop, no_stop_trim=req.include_stop_str_in_output)
        except RowError as e:
            self.fail(q, e, step)
            return
        q.status = "running"
        self.owner[req.slot] = q

    # -- one step --------------------------------------------------------------------
    def step(self, run: list, step: int) -> None:
        """One decode step of the running sequences ``run``: SGLang samples each vocabulary's batch, appends the
        tokens and decides the finish (``Req.update_finish_state``); a batch SGLang raises for fails its rows."""
        rows, live = [], []
        for q in run:
            hist = [int(t) for t in q.req.output_ids]
            try:
                logits = self.model_of(q.spec).logits(q.spec.fields.get("prompt", []), hist)
            except ModelError as e:
                self.fail(q, RowError("bad_logits", f"scripted model: {e}"), step)
                continue
            rows.append(q.spec.row(logits, hist))
            live.append(q)
        groups: dict = {}
        for i, row in enumerate(rows):
            groups.setdefault(row.vocab, []).append(i)
        sent = []
        for idx in groups.values():
            grp = [rows[i] for i in idx]
            try:
                out = engine.run_batch(grp, [live[i].req for i in idx], torch.stack([r.logits for r in grp]))
            except Exception as e:  # SGLang failed the whole batch
                for i in idx:
                    self.fail(live[i], RowError("engine_error", f"SGLang raised for the batch: "
                                                               f"{type(e).__name__}: {e}"), step)
                continue
            for j, i in enumerate(idx):
                q, tok = live[i], int(out.tokens[j])
                # batch_result_processor.py process_batch_result_decode: output_ids.extend, update_finish_state
                q.req.output_ids.append(tok)
                q.req.update_finish_state(1)
                reason = engine.reason_name(q.req)
                q.result.steps.append(StepRecord(step, tokens=[tok], finish_reason=reason))
                sent.append(q)
                if reason != "none":
                    q.status = "finished"
                    q.result.finish_reason, q.result.finish_step = reason, step
                    self.release(q)
        self.stream(sent)

    def stream(self, seqs: list) -> None:
        """SGLang's output path for ``seqs`` (each got a token or was aborted): streamer, then detokenizer."""
        if self.detok is None or not seqs:
            return
        acc = _accumulator()
        for q in seqs:
            acc.accept(req=q.req)
        payload = acc.to_payload(dp_rank=0, is_idle_batch=False)
        if payload is None:
            return
        texts = type(self.detok)._decode_batch_token_id_output(self.detok, payload)
        for rid, text in zip(payload.rids, texts):
            next(q for q in seqs if q.req.rid == rid).text.append(text)

    # -- the run ---------------------------------------------------------------------
    def run(self) -> ScenarioResult:
        """Decode to the end (``spec.max_steps`` at most; unfinished requests are aborted, reason ``"none"``)."""
        rt = engine.runtime()
        rt["modules"].set_random_seed(engine.RANDOM_SEED)   # as a new server's Scheduler.__init__
        sb = rt["modules"].schedule_batch
        step = 0
        while step < self.spec.max_steps and not self.done(step):
            sched = self.scheduled(step)
            for q in sched:
                if q.status == "waiting":
                    self.admit(q, step)
            run = [q for q in sched if q.status == "running"]
            if run:
                self.step(run, step)
            step += 1
        unfinished = [q for q in self.seqs if q.status == "running"]
        for q in unfinished:
            q.req.finished_reason = sb.FINISH_ABORT()   # the scenario ends: the client aborts it
        self.stream(unfinished)
        for q in self.seqs:
            r = q.result
            if q.status == "running":
                r.finish_reason = "none"
            if q.status == "failed":
                continue
            if q.req is not None:
                r.tokens = [int(t) for t in q.req.output_ids_through_stop]
                reason = q.req.finished_reason
                if isinstance(reason, sb.FINISH_MATCHED_STR):
                    r.stop_reason = reason.matched
            if self.spec.tokenizer is not None:
                r.text = "".join(q.text)
        return ScenarioResult({q.spec.id: q.result for q in self.seqs}, step, keys=REPORTED, path=PATH)


def _fan_out(req) -> list:
    """The sequences SGLang decodes for ``req``: itself, or the ``parallel_sample_num`` copies of it.

    Raises
    ------
    ScenarioUnsupported
        SGLang makes another number of copies than the case's ``n`` (the message says how many).
    """
    if req.n == 1:
        return [req]
    # The count does not depend on the prompt; GenerateReqInput refuses an empty input_ids for any n, which
    # the adapter does not model for n = 1 either (a scenario's Req takes an empty prompt): one placeholder id.
    prompt = list(req.fields.get("prompt") or []) or [0]
    try:
        k = engine.parallel_sample_num(prompt, {"n": req.n})
    except ValueError as e:
        raise ScenarioUnsupported(f"request {req.id!r}: SGLang's GenerateReqInput refuses n={req.n}: {e}") from e
    kids = req.children()
    if k != len(kids):
        raise ScenarioUnsupported(f"request {req.id!r}: n={req.n}, but SGLang's GenerateReqInput makes {k} "
                                  "copies")
    return kids


def run_scenario(spec: ScenarioSpec) -> ScenarioResult:
    """Decode ``spec`` with SGLang's per-request code, the adapter scheduling (module docstring).

    Returns
    -------
    ScenarioResult
        ``keys`` = :data:`REPORTED`, ``path`` = :data:`PATH`; per request, in spec order.

    Raises
    ------
    ScenarioUnsupported
        :func:`unsupported_reason`, or two requests in one slot at once (found during the run).
    """
    why = unsupported_reason(spec)
    if why:
        raise ScenarioUnsupported(why)
    return _Run(spec).run()
