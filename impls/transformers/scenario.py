"""Multi-step scenarios on transformers: each request is one ``generate()`` call on a scripted model.

Hugging Face has no scheduler, slots or per-request state outside one
``generate()`` call: a request's whole decode (its processors over the real
history, the stopping criteria, the draws) happens inside that call. So
:func:`run_scenario` runs every request of a scenario alone, in spec order,
through ``GenerationMixin.generate`` (transformers 5.24.0,
``src/transformers/generation/utils.py``) on
:class:`~impls.transformers.beam.ScriptedLM`, whose ``forward`` returns the
scripted model's logits for each row's history (the model is input data).

A plain request (no beam search):

* ``generate(prompt, **generate_kwargs(row))`` with the mapping of
  :mod:`.translate` (``do_sample`` as :func:`.translate.resolve_do_sample`
  says, so ``_sample`` draws or takes the argmax), ``use_cache=False``,
  ``pad_token_id`` set (the EOS id, else 0; only silences a warning for a
  batch of one);
* ``prompt_ignore_length``: the custom ``RepetitionPenaltyLogitsProcessor``
  that :func:`.hf.prepare` uses, passed as ``logits_processor`` (it takes the
  default one's place in ``_merge_criteria_processor_list``);
* custom logits processors: :class:`.hf.CaseProcessors`, passed as
  ``logits_processor`` after the repetition processor (appended after HF's own
  processors, before the warpers);
* stop strings (SEMANTICS §1.8a): ``generate(stop_strings=req.stop,
  tokenizer=...)`` with the case's toy tokenizer as a Hugging Face fast
  tokenizer (:func:`impls.reference.toy_tokenizer.fast_tokenizer`), so that
  transformers builds its own ``StopStringCriteria``; the output text is that
  tokenizer's ``decode(tokens, skip_special_tokens=True)`` (transformers has
  no ``include_stop_str_in_output``: nothing is trimmed, profile field
  ``stop_string_trim``), and the finish reason counts a ``StopStringCriteria``
  that fires on the final history as ``stop_words``;
* single-token stop words: an ``EosTokenCriteria`` on their ids, passed as
  ``stopping_criteria`` under a subclass with no code of its own
  (``_merge_criteria_processor_list`` replaces a default criterion by a custom
  one of the *same type*; a plain ``EosTokenCriteria`` would replace the EOS
  criterion);
* seeds: HF has no per-request seed; a user calls ``transformers.set_seed(seed)``
  (``src/transformers/trainer_utils.py``, the same body in v5.24.0 and
  v4.57.6) and then ``generate()``, whose ``_sample`` draws from torch's
  global generator. A seeded request does exactly that
  (:func:`.hf.set_seed`), inside :func:`.hf.isolated_rng` so that its draws
  leave the process's generators as they were: the seeds stage is
  transformers' own (``set_seed`` seeds, ``generate``'s loop carries the
  stream across steps). A seed ``set_seed`` refuses (negative, or at or above
  ``2**32``: ``numpy.random.seed``) is ``invalid_seed`` at admission, with its
  message; a beam request's seed too (a user's ``set_seed`` call comes before
  ``generate`` whatever it decodes), though beam search draws nothing. An
  unseeded request draws from the global generator;
* the scenario's schedule (``arrive``, ``pause``, ``schedule``,
  ``max_steps``) is the adapter's: the request's ``n``-th token is the one of
  its ``n``-th scheduled step (:func:`scheduled_steps`), and a stopping
  criterion of the adapter (:class:`_Budget`) ends ``generate`` after as many
  tokens as the request has scheduled steps. Its finish reason is then what
  the request's own HF criteria say of the final history
  (:func:`.session.finish_reason`, precedence ``profile.finish_order``), or
  ``"none"`` when none fires (the scenario ended first);
* errors: a ``ValueError`` of transformers' preparation (the
  ``GenerationMixin`` methods ``generate`` runs first, called by
  :func:`.hf.prepare`, or ``generate`` itself;
  :func:`.hf.classify_value_error`) is the request's error at its first
  scheduled step; a ``torch.multinomial`` ``RuntimeError`` at a later step
  is classified as the single-step adapter does
  (:func:`.session.sampling_failure`, on that step's raw and processed
  scores); a scripted model that cannot produce logits is ``bad_logits``.

A request with ``n > 1`` is one ``generate(num_return_sequences=n)`` call
(:func:`run_request`): row ``i`` of its output is child ``"<id>#<i>"``, all
rows drawn from the request's one generator (profile ``hf``:
``child_seed_rule = "shared_stream"``).

Beam requests run through :func:`.beam.run_beam_request` (its module
docstring).

What cannot be expressed raises
:class:`~impls.reference.scenario.ScenarioUnsupported` (``n/a``) with the
missing feature named: draft tokens (no literal drafts in ``generate``;
assisted generation proposes its own), an empty prompt (a decoder-only
``generate`` needs an input token), ``beam_width`` without beam search
(``num_beams`` *is* beam search), any row field
:func:`.translate.unsupported_reason` refuses, and a request admitted into a
slot another request still holds (the reference rejects it with
``duplicate_slot``; transformers has no slots to hold).

Reported (``ScenarioResult.keys``): :data:`REPORTED`. Not reported: the
per-step ``scheduled`` list, Philox ``offsets``, supports and runtime top-p
(none is an observation of ``generate``), nor ``stop_reason`` (no criterion
says which stop string it matched).

Imported lazily: it imports transformers.
"""

from __future__ import annotations

import contextlib
import math
from typing import Optional

import torch

from ..base import Row, RowError
from ..profiles import Profile
from ..reference.scenario_types import (RequestResult, RequestSpec, ScenarioResult, ScenarioSpec,
                                        ScenarioUnsupported, StepRecord)
from ..reference.scripted import ModelError
from ..reference.toy_tokenizer import ToyTokenizer, fast_tokenizer
from . import TransformersBeamImpl, beam, hf  # TransformersBeamImpl: defined in the package, re-exported
from .session import finish_reason, sampling_failure
from .translate import SCENARIO_FEATURES, generate_kwargs, unsupported_reason

__all__ = ["run_scenario", "run_plain_request", "run_request", "scheduled_steps", "SCENARIO_FEATURES", "REPORTED",
           "TransformersBeamImpl"]

#: Observations of a request: its error (and the step), tokens, finish reason and step; for
#: beam requests also what :data:`.beam.REPORTED` lists.
REPORTED = frozenset({"error", "error_step", "tokens", "finish_reason", "finish_step", "text"}) | beam.REPORTED

_FAST: dict = {}


def _fast(tok: ToyTokenizer):
    """The Hugging Face fast tokenizer of a toy tokenizer, built once per tokenizer."""
    key = tok.key()
    if key not in _FAST:
        _FAST[key] = fast_tokenizer(tok)
    return _FAST[key]


def scheduled_steps(spec: ScenarioSpec, req: RequestSpec) -> list:
    """The steps at which ``req`` is scheduled while it runs (the reference's ``_Runner.scheduled``).

    With an explicit ``schedule``: the steps below ``min(max_steps, len(schedule))`` that
    list it; otherwise the steps in ``[arrive, max_steps)`` not in ``pause``. A request that
    finishes after ``n`` tokens uses the first ``n`` of them.

    Returns
    -------
    list of int
    """
    steps = range(spec.max_steps)
    if spec.schedule is not None:
        return [s for s in steps if not spec.schedule_over(s) and req.id in spec.schedule_at(s)]
    return [s for s in steps if req.wants_step(s)]


class _StopTokens(hf.sc.EosTokenCriteria):
    """HF's ``EosTokenCriteria`` on the single-token stop words; a distinct type only so that
    ``_merge_criteria_processor_list`` keeps it next to the EOS criterion instead of replacing it."""


class _Budget(hf.sc.StoppingCriteria):
    """Stops ``generate`` once ``length`` tokens (prompt included) exist: the steps the scenario gives.

    Parameters
    ----------
    length : int
    """

    def __init__(self, length: int):
        self.length = int(length)

    def __call__(self, input_ids: torch.Tensor, scores, **kwargs) -> torch.Tensor:
        """``(batch,)`` bool: whether each sequence reached ``length``."""
        return torch.full((input_ids.shape[0],), input_ids.shape[-1] >= self.length, dtype=torch.bool,
                          device=input_ids.device)


@contextlib.contextmanager
def _seeded(seed: Optional[int]):
    """``transformers.set_seed(seed)`` inside, every generator it seeds restored on exit
    (:func:`.hf.isolated_rng`; nothing done for None).

    Raises
    ------
    RowError
        ``invalid_seed`` when ``set_seed`` refuses the value (:func:`.hf.set_seed`).
    """
    if seed is None:
        yield
        return
    with hf.isolated_rng():
        hf.set_seed(seed)
        yield


def _failed(res: RequestResult, err: RowError, step: int) -> RequestResult:
    res.error, res.message, res.error_step = err.kind, err.message, step
    return res


def run_plain_request(req: RequestSpec, model, steps: list, profile: Profile, device: str = "cpu",
                      tokenizer: Optional[ToyTokenizer] = None) -> RequestResult:
    """Run one request without beam search through ``generate()`` (the module docstring).

    Parameters
    ----------
    req : RequestSpec
        ``n == 1`` (:func:`run_request` takes any ``n``).
    model : ScriptedModel
    steps : list of int
        Its scheduled steps (:func:`scheduled_steps`); none: it never runs.
    profile : Profile
        Supplies ``finish_order``.
    device : str
    tokenizer : ToyTokenizer, optional
        The scenario's toy tokenizer: the request's stop strings and its output ``text``.

    Returns
    -------
    RequestResult
        ``tokens``, ``finish_reason``, ``finish_step``, ``text`` (with a tokenizer) and one
        :class:`StepRecord` per token; or ``error``, ``message``, ``error_step``.

    Raises
    ------
    ScenarioUnsupported
        A field :func:`.translate.unsupported_reason` refuses.
    """
    return run_request(req, model, steps, profile, device, tokenizer)[req.id]


def run_request(req: RequestSpec, model, steps: list, profile: Profile, device: str = "cpu",
                tokenizer: Optional[ToyTokenizer] = None) -> dict:
    """Run one request without beam search through ``generate()``; ``n > 1`` as ``num_return_sequences``.

    A request with ``n > 1`` is one ``generate(num_return_sequences=n)`` call:
    ``_expand_inputs_for_generation`` repeats its ``input_ids`` ``n`` times
    (``repeat_interleave``) and ``_sample`` draws every row from the one generator of
    the call (seeded once for the request: no seed per child, SEMANTICS §2a); row ``i``
    of the output is child ``"<id>#<i>"``. A row that finished is padded by
    ``generate`` until every row is done: its tokens end where its own criteria first
    fire (:func:`.session.finish_reason` on each prefix).

    Parameters
    ----------
    req : RequestSpec
    model, steps, profile, device, tokenizer
        As :func:`run_plain_request`'s.

    Returns
    -------
    dict
        Sequence id (the request's, or each child's) -> :class:`RequestResult`.

    Raises
    ------
    ScenarioUnsupported
        A field :func:`.translate.unsupported_reason` refuses.
    """
    ids_out = [c.id for c in req.children()]
    results = {i: RequestResult(i) for i in ids_out}
    res = RequestResult(req.id)

    def every(r: RequestResult) -> dict:
        # the request's outcome (an error) for each of its sequences
        out = {}
        for i in ids_out:
            out[i] = RequestResult(i, error=r.error, message=r.message, error_step=r.error_step)
        return out

    prompt = [int(t) for t in req.fields.get("prompt", [])]
    row = Row(logits=torch.zeros(model.vocab), request_id=req.id, **req.fields)
    why = unsupported_reason(row) or ("an empty prompt: generate() needs an input token" if not prompt else None)
    if why:
        raise ScenarioUnsupported(f"request {req.id!r}: {why}")
    if not steps:
        return results  # never scheduled (the reference leaves it waiting)
    dev = torch.device(device)
    free = hf.ModelFree(dev)
    try:
        prep = hf.prepare(row, free)  # HF's criteria for the finish reason (generate rebuilds its own)
    except RowError as e:
        return every(_failed(res, e, steps[0]))
    kw = generate_kwargs(row)
    eos = kw.get("eos_token_id")
    kw.update(use_cache=False, pad_token_id=(eos[0] if isinstance(eos, list) else eos) if eos is not None else 0)
    if req.n > 1:
        kw["num_return_sequences"] = int(req.n)
    procs = hf.lp.LogitsProcessorList()
    gc = prep.generation_config
    if row.prompt_ignore_length is not None and gc.repetition_penalty is not None and gc.repetition_penalty != 1.0:
        procs.append(hf.lp.RepetitionPenaltyLogitsProcessor(gc.repetition_penalty,
                                                            prompt_ignore_length=int(row.prompt_ignore_length)))
    if row.logits_processors:
        procs.append(hf.CaseProcessors(row.logits_processors, len(prompt)))
    crits = hf.sc.StoppingCriteriaList([_Budget(len(prompt) + len(steps))])
    stops = sorted({int(w[0]) for w in row.stop_words if len(w) == 1})
    if stops:
        crits.append(_StopTokens(torch.tensor(stops, dtype=torch.long, device=dev)))
    fast = _fast(tokenizer) if tokenizer is not None else None
    if req.stop:
        kw.update(stop_strings=list(req.stop), tokenizer=fast)
    lm = beam._model_class()(model, len(prompt)).to(dev).eval()
    ids = torch.tensor([prompt], dtype=torch.long, device=dev).reshape(1, len(prompt))
    try:
        with hf.quiet(), torch.no_grad(), _seeded(row.seed):
            out = lm.generate(ids, logits_processor=procs,
                              stopping_criteria=crits, **kw)
    except RowError as e:  # the seed
        return every(_failed(res, e, steps[0]))
    except ModelError as e:
        gen = _generated(lm, prompt)
        return every(_failed(res, RowError("bad_logits", f"scripted model: {e}"),
                             steps[min(len(gen), len(steps) - 1)]))
    except ValueError as e:
        return every(_failed(res, RowError(hf.classify_value_error(e), f"transformers: {e}".splitlines()[0]),
                             steps[0]))
    except (RuntimeError, IndexError) as e:
        gen = _generated(lm, prompt)
        return every(_failed(res, _step_failure(row, model, prompt, gen, free, e),
                             steps[min(len(gen), len(steps) - 1)]))
    string_crits = [hf.sc.StopStringCriteria(fast, list(req.stop))] if req.stop else []
    for i, sid in enumerate(ids_out):
        r = results[sid]
        toks = [int(t) for t in out[i, len(prompt):].tolist()]
        if req.n > 1:
            toks = _own_tokens(prep, prompt, toks, profile, dev, string_crits)
        r.tokens = toks
        r.steps = [StepRecord(s, tokens=[t]) for s, t in zip(steps, toks)]
        final = torch.tensor([prompt + toks], dtype=torch.long, device=dev)
        reason = finish_reason(prep, final, profile.finish_order, string_crits) if toks else "none"
        if fast is not None:
            r.text = fast.decode(toks, skip_special_tokens=True)
        r.finish_reason = reason
        if reason != "none":
            r.finish_step = steps[len(toks) - 1]
            r.steps[-1].finish_reason = reason
    return results


def _own_tokens(prep, prompt: list, toks: list, profile: Profile, dev, string_crits=()) -> list:
    """A row of a ``num_return_sequences`` batch up to where its own criteria first fire.

    ``generate`` keeps a finished row in the batch, writing ``pad_token_id`` after its end
    until every row is done (``GenerationMixin._sample``: ``next_tokens * unfinished_sequences
    + pad_token_id * (1 - unfinished_sequences)``). ``string_crits``: the request's
    ``StopStringCriteria`` (stop strings), checked on each prefix as the others.
    """
    for k in range(1, len(toks) + 1):
        ids = torch.tensor([prompt + toks[:k]], dtype=torch.long, device=dev)
        if finish_reason(prep, ids, profile.finish_order, string_crits) != "none":
            return toks[:k]
    return toks


def _generated(lm, prompt: list) -> list:
    """The tokens generated before the last ``forward`` call of ``lm`` (the step that failed)."""
    return [int(t) for t in getattr(lm, "last_ids", prompt)[len(prompt):]]


def _step_failure(row: Row, model, prompt: list, gen: list, free, err: Exception) -> RowError:
    """The error of the step after ``gen`` that ``generate`` aborted with ``err``, judged on that
    step's raw and processed scores as the single-step adapter judges a row: an HF processor's
    own error (:func:`.hf.run_processors`), else :func:`.session.sampling_failure`."""
    try:
        raw = model.logits(prompt, gen).to(torch.float32).reshape(1, -1)
        prep = hf.prepare(row.replace(logits=raw[0], generated=list(gen)), free)
        rewritten = hf.run_processors(prep.processors, prep.input_ids, raw.clone())
    except RowError as e:
        return e
    except ModelError as e:
        return RowError("bad_logits", f"scripted model: {e}")
    return sampling_failure(raw, rewritten, err)


def _slot_conflict(spec: ScenarioSpec, results: dict, sched: dict) -> Optional[str]:
    """A request admitted into a slot that another still holds, or None (the reference's
    ``_Runner.admit`` would reject it with ``duplicate_slot``; transformers has no slots).

    A request holds its slot from its first scheduled step to the step it finishes or fails
    at (released after it); one rejected at admission never holds it; one still running when
    the scenario ends holds it to the end. Same-step admissions go in spec order.
    """
    spans = []
    for order, req in enumerate(spec.observed()):  # a request with n > 1: each child, slot + i
        steps, rr = sched[req.id], results[req.id]
        if not steps:
            continue
        start = steps[0]
        if rr.error is not None:
            if rr.error_step == start:
                spans.append((req, start, None, order))  # rejected at admission: holds nothing
                continue
            end = rr.error_step
        elif rr.finish_reason not in (None, "none"):
            end = rr.finish_step if rr.finish_step is not None else steps[max(len(rr.steps) - 1, 0)]
        else:
            end = math.inf
        spans.append((req, start, end, order))
    for req, start, _, order in spans:
        for other, o_start, o_end, o_order in spans:
            if other is req or other.slot != req.slot or o_end is None:
                continue
            if (o_start < start or (o_start == start and o_order < order)) and start <= o_end:
                return (f"request {req.id!r} is admitted at step {start} into slot {req.slot}, which request "
                        f"{other.id!r} still holds: transformers' generate() has no slots (the reference "
                        f"rejects it as duplicate_slot)")
    return None


def run_scenario(spec: ScenarioSpec, profile: Profile, device: str = "cpu", beams_only: bool = False) -> ScenarioResult:
    """Run every request of ``spec`` alone through ``generate()`` (the module docstring).

    Parameters
    ----------
    spec : ScenarioSpec
    profile : Profile
    device : str
    beams_only : bool
        Refuse a scenario with a request that does not use beam search (``transformers-beam``).

    Returns
    -------
    ScenarioResult
        ``keys`` = :data:`REPORTED` (without ``finish_step`` when a request uses beam search).

    Raises
    ------
    ScenarioUnsupported
        A request it cannot express (the module docstring names which), checked for every
        request before any runs; a slot conflict; a beam request cut by the scenario's end.
    """
    sched = {r.id: scheduled_steps(spec, r) for r in spec.requests}
    for r in spec.requests:
        if r.draft_len or r.drafts:
            raise ScenarioUnsupported(f"request {r.id!r} has draft tokens: generate() takes no literal drafts "
                                      "(assisted generation proposes its own)")
        if not r.fields.get("prompt"):
            raise ScenarioUnsupported(f"request {r.id!r} has an empty prompt: generate() on a decoder-only model "
                                      "needs an input token (the scripted model has no bos_token_id)")
        if r.use_beam_search:
            why = beam._unsupported(r)
        elif beams_only:
            why = f"request {r.id!r} does not use beam search (only beam scenarios go through transformers-beam)"
        elif r.beam_width != 1:
            why = (f"request {r.id!r}: beam_width {r.beam_width} without use_beam_search has no generate() "
                   "spelling (num_beams > 1 is beam search)")
        else:
            why = unsupported_reason(Row(logits=torch.zeros((r.model or spec.model).vocab), **r.fields))
            why = f"request {r.id!r}: {why}" if why else None
        if why:
            raise ScenarioUnsupported(why)
    out = {}
    for r in spec.requests:
        model = r.model or spec.model
        if not r.use_beam_search:
            out.update(run_request(r, model, sched[r.id], profile, device, spec.tokenizer))
            continue
        try:
            with _seeded(r.fields.get("seed")):
                pass  # set_seed before generate(): a seed it refuses is the request's error, even for beam search
        except RowError as e:
            out[r.id] = RequestResult(r.id, error=e.kind, message=e.message,
                                      error_step=sched[r.id][0] if sched[r.id] else 0)
            continue
        if not 1 <= r.beam_width <= spec.max_beam_width:
            # transformers has no max_beam_width: the engine limit of the scenario is the adapter's
            out[r.id] = RequestResult(r.id, error="invalid_beam_width", error_step=sched[r.id][0] if sched[r.id] else 0,
                                      message=f"beam_width={r.beam_width} outside [1, {spec.max_beam_width}]")
            continue
        res = beam.run_beam_request(r, model, device)
        if res.error is None and len(res.steps) > len(sched[r.id]):
            raise ScenarioUnsupported(f"beam request {r.id!r} needs {len(res.steps)} steps, the scenario gives it "
                                      f"{len(sched[r.id])}: generate() cannot stop a beam search part-way")
        if res.error is not None and sched[r.id]:
            res.error_step = sched[r.id][0]
        out[r.id] = res
    seqs = spec.observed()
    sched = {c.id: sched[c.parent or c.id] for c in seqs}
    why = _slot_conflict(spec, out, sched)
    if why:
        raise ScenarioUnsupported(why)
    steps_run = max((s[min(len(out[i].steps), len(s)) - 1] + 1 for i, s in sched.items() if out[i].steps and s),
                    default=0)
    # generate() does not say at which step a beam search ended (the returned beams may be shorter)
    keys = REPORTED - {"finish_step"} if any(r.use_beam_search for r in spec.requests) else REPORTED
    return ScenarioResult(out, steps_run, keys=keys)
