"""vLLM's own engine loop on a multi-step scenario: ``LLMEngine.add_request`` / ``step`` with a scripted model.

Imported lazily (it imports vLLM). :func:`run_scenario` decodes a
:class:`~impls.reference.scenario_types.ScenarioSpec` through vLLM 0.32.0's
real engine (paths relative to ``vllm/`` of vllm-project/vllm@v0.32.0), CPU
build: ``LLM(...).llm_engine`` (v1/engine/llm_engine.py) with the engine core
in-process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``, so the model registered here
is the one the engine builds), on the model of :mod:`.scripted_model`. What
runs is vLLM's: request validation (``InputProcessor.process_inputs``,
``SamplingParams.verify``), the scheduler (v1/core/sched/scheduler.py), the
model runner's persistent batch and per-request generators
(v1/worker/gpu_model_runner.py, cpu_model_runner.py), the ``Sampler`` with
penalties over each request's real prompt and output tokens, bad words,
``min_tokens``, logit bias, the stop check (``check_stop``: EOS, stop token
ids, ``max_tokens``, ``max_model_len``) and the output processor's finish
reasons. What this module adds:

* the scripted model's binding (prompt -> scripted model) for the run;
* arrivals: a request is added (``LLMEngine.add_request``) before the engine
  step of its ``arrive`` step, so the scenario's step ``s`` is the engine's
  ``s``-th ``step()`` (idle steps, with nothing in the engine, run no engine
  step);
* the model's tokenizer, which vLLM reads the EOS id and bad-word ids from
  (``InputProcessor.process_inputs``: ``renderer.get_eos_token_id()``,
  ``update_from_tokenizer``): a case gives them per request, so each
  ``add_request`` is lent a stand-in tokenizer with that request's EOS id and
  bad words (:func:`.translate.eos_id`, :func:`.translate.bad_word_text`), and
  an EOS set's ids as the model's generation config
  (``InputProcessor.generation_config_fields``,
  :func:`.translate.generation_config`); the engine itself runs without a
  tokenizer (``skip_tokenizer_init``), unless the scenario has a toy
  tokenizer (next item);
* stop strings (SEMANTICS §1.8a): a scenario with a ``[scenario.tokenizer]``
  runs on an engine started *with* a tokenizer, the case's toy vocabulary
  saved as a Hugging Face fast tokenizer in the model directory
  (:func:`impls.reference.toy_tokenizer.save_fast_tokenizer`; nothing is
  downloaded), so that vLLM's own output processor detokenizes every request
  (``FastIncrementalDetokenizer``, v1/engine/detokenizer.py) and its
  ``check_stop_strings`` finishes and trims it; a request's ``stop`` and
  ``include_stop_str_in_output`` are ``SamplingParams`` arguments. The
  observed text is ``CompletionOutput.text`` (cumulative), the stop string
  its ``stop_reason``. A request the run cuts at ``max_steps`` reports the text
  vLLM streamed so far, which holds back ``len(longest stop string) - 1``
  characters until the request finishes (``get_next_output_text``): cases
  let stop-string requests finish;
* the end of the run: after ``max_steps`` steps the requests still running
  are aborted and report ``finish_reason = "none"``;
* parallel sampling: a request with ``n > 1`` is added once with
  ``SamplingParams(n=n)``; vLLM's own ``LLMEngine.add_request`` fans it out
  (``ParentRequest``, v1/engine/parallel_sampling.py: child ``i`` gets
  ``seed + i``) and its outputs, each with the child's ``index``, are the
  case's children ``"<id>#<i>"`` (one slot each, ``slot + i``). Each child the
  engine core receives is encoded first, as the multiprocess client does; a
  child it cannot encode (a seed past ``2**64 - 1``) makes ``add_request``
  raise, that child and those after it carry ``invalid_seed``, and the children
  added before it run on (vLLM does not take them back).
* custom logits processors: a scenario whose requests have ``logits_processors``
  runs on an engine built with the two ``LogitsProcessor`` classes of
  :mod:`.processors` (``LLM(logits_processors=[...])``), each request carrying
  its processors in ``SamplingParams.extra_args``; the processors' per-request
  state is kept by batch row and moved by vLLM's own ``BatchUpdate``s as its
  persistent batch changes (requests finishing: ``InputBatch.condense``). After
  each step the loop checks that no processor found a row whose steps counter
  disagrees with its output tokens (:data:`.processors.MISMATCHES`).

The ``SamplingParams`` of a request are :func:`.translate.sampling_kwargs`
of its fields (the single-step adapter's mapping). A request vLLM rejects
(``SamplingParams`` construction or ``InputProcessor.process_inputs``
raising ``VLLMValidationError``/``ValueError``) is an admission error at its
arrival step (kind: :func:`.translate.classify_validation_error`). Each
``EngineCoreRequest`` ``LLMEngine.add_request`` hands the engine core (the
request, or each child of a request with ``n > 1``) is first encoded with
vLLM's ``MsgpackEncoder``, as the default (multiprocess) engine client does
before the engine core sees it: a request it refuses (a seed outside
``[-2**63, 2**64)``: ``invalid_seed``) is an admission error too, where the
in-process engine would fail the whole step in the model runner.

Beam requests run on ``LLM.beam_search`` (entrypoints/generate/beam_search/
offline.py) on the same engine, one call per request (:func:`run_beam`):
vLLM's beam loop submits each beam as a new one-token request whose prompt
is the beam's history; its output is the best ``W`` sequences with their
cumulative logprobs, scored by vLLM's ``get_beam_search_score``
(utils.py).

Engines are cached per ``(vocab, max_model_len, tokenizer)`` for the life of the process
(:func:`engine_for`): a worker process of ``sampcheck run`` builds each once
(a few seconds; the first also imports vLLM) and reuses it across cases.

What it cannot express raises
:class:`~impls.reference.scenario_types.ScenarioUnsupported` with the missing
vLLM feature (:func:`unsupported_reason`; some are only known during the run:
a slot still held, a paused or reordered request).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Optional

import torch

os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # before vLLM reads it: the engine core must run in-process

from vllm import LLM, SamplingParams  # noqa: E402
from vllm import envs  # noqa: E402
from vllm.exceptions import VLLMValidationError  # noqa: E402
from vllm.inputs import TokensPrompt  # noqa: E402
from vllm.v1.serial_utils import MsgpackEncoder  # noqa: E402

from ..base import Row, RowError  # noqa: E402
from ..reference.scenario_types import (RequestResult, RequestSpec, ScenarioResult, ScenarioSpec,  # noqa: E402
                                        ScenarioUnsupported, StepRecord)
from ..reference.toy_tokenizer import save_fast_tokenizer  # noqa: E402
from . import engine as _engine  # noqa: E402
from . import processors as _case_processors  # noqa: E402
from . import scripted_model  # noqa: E402
from .translate import (classify_validation_error, eos_id, generation_config, sampling_kwargs,  # noqa: E402
                        stop_kwargs, unsupported_reason as row_unsupported_reason)

__all__ = ["REPORTED", "BEAM_REPORTED", "DEFAULT_MAX_MODEL_LEN", "ENGINE_ARGS", "ScriptedEngine", "engine_for",
           "run_scenario", "run_beam", "unsupported_reason", "beam_unsupported_reason", "first_tokens",
           "first_token_unsupported", "sample_counts", "count_unsupported",
           "COUNT_LOOP_DRAWS"]

#: Observations the engine loop reports (:data:`harness.kinds.scenario.EXPECT_KEYS`): no Philox offsets, kept
#: sets, top-p decay, speculative or beam records (vLLM exposes none of them).
REPORTED = frozenset({"error", "error_step", "tokens", "finish_reason", "finish_step", "scheduled", "text",
                      "stop_reason"})

#: ``max_model_len`` of an engine whose requests set no ``max_seq_len`` (longer than any scenario runs).
DEFAULT_MAX_MODEL_LEN = 4096

#: The ``LLM(...)`` arguments of every scripted engine (besides the model directory and ``max_model_len``):
#: no weights, no tokenizer, eager, float32 logits; prefix caching off and a token budget above any model
#: length, so that each new sequence's first forward holds its whole prompt (:mod:`.scripted_model`);
#: synchronous scheduling, so that each ``step()`` returns the tokens of that step; room for 1024 requests
#: in one step (a statistical scenario's 1000 draws are 1000 one-step requests, or the 1000 children of one
#: request with ``n = 1000``): ``max_num_seqs`` 1024 and a KV cache of 64 MiB, 131072 token slots of the tiny
#: model, 1024 of the CPU backend's 128-token blocks, so nothing waits or is preempted. ``skip_tokenizer_init``
#: is dropped for a scenario with a toy tokenizer (:class:`ScriptedEngine`).
ENGINE_ARGS = dict(load_format="dummy", skip_tokenizer_init=True, enforce_eager=True, dtype="float32",
                   enable_prefix_caching=False, async_scheduling=False, max_num_seqs=1024,
                   max_num_batched_tokens=8192, kv_cache_memory_bytes=1 << 26, seed=0)

_ENCODER = MsgpackEncoder()


class _RequestTokenizer(_engine._WordTokenizer):
    """The stand-in tokenizer lent to one ``add_request``: the request's EOS id and bad words.

    ``encode`` gives the ids of bad word ``i`` for its placeholder
    (:func:`.translate.bad_word_text`), as :class:`.engine._WordTokenizer`
    does for the single-step adapter; ``eos_token_id`` is what
    ``BaseRenderer.get_eos_token_id`` (renderers/base.py) returns.
    """

    bos_token_id = None

    def __init__(self, words, vocab: int, eos: Optional[int]):
        super().__init__(words, vocab)
        self.eos_token_id = eos

    def decode(self, ids, skip_special_tokens: bool = True) -> str:
        """No text (``LLM.beam_search`` decodes its output beams; the scenario reads token ids only)."""
        return ""


class ScriptedEngine:
    """One vLLM engine (``LLM``) serving :class:`.scripted_model.ScriptedLlamaForCausalLM`.

    Parameters
    ----------
    vocab : int
        The model's ``vocab_size``.
    max_model_len : int
        vLLM's ``max_model_len`` (prompt + output), engine-wide.
    processors : bool
        Build the engine with the custom ``LogitsProcessor`` classes of :mod:`.processors`
        (``LLM(logits_processors=[...])``: an engine-wide setting, so engines with and without
        them are cached apart).
    tokenizer : ToyTokenizer or None
        A scenario's toy tokenizer: saved next to ``config.json``
        (:func:`impls.reference.toy_tokenizer.save_fast_tokenizer`) and loaded by vLLM
        (``skip_tokenizer_init=False``), so its output processor detokenizes and checks
        stop strings. None: no tokenizer (token ids only).

    Attributes
    ----------
    key : str
        The :class:`.scripted_model.Binding` key its model serves.
    llm : vllm.LLM
    engine : vllm.v1.engine.llm_engine.LLMEngine
    runs : int
        Scenarios run so far (request ids are ``"<run>:<id>"``).

    Raises
    ------
    RuntimeError
        When vLLM would run the engine core in another process
        (``VLLM_ENABLE_V1_MULTIPROCESSING`` already read as 1).
    """

    def __init__(self, vocab: int, max_model_len: int, processors: bool = False, tokenizer=None):
        if envs.VLLM_ENABLE_V1_MULTIPROCESSING:
            raise RuntimeError("the scripted engine needs VLLM_ENABLE_V1_MULTIPROCESSING=0 (an in-process engine "
                               "core); vLLM read it as 1 before impls.vllm.loop was imported")
        scripted_model.register()
        self.vocab, self.max_model_len = int(vocab), int(max_model_len)
        self.key = f"sampcheck-{self.vocab}-{self.max_model_len}-{os.getpid()}-{id(self)}"
        self._dir = tempfile.mkdtemp(prefix="sampcheck-vllm-")
        scripted_model.write_config(self._dir, self.vocab, self.max_model_len, self.key)
        args = dict(ENGINE_ARGS)
        if processors:
            args["logits_processors"] = list(_case_processors.CLASSES)
        if tokenizer is not None:
            save_fast_tokenizer(tokenizer, self._dir)
            args["skip_tokenizer_init"] = False
        self.tokenizer = tokenizer
        self.llm = LLM(model=self._dir, max_model_len=self.max_model_len, **args)
        self.engine = self.llm.llm_engine
        self.runs = 0

    @contextmanager
    def lend_tokenizer(self, row: Row):
        """Within the block, vLLM's renderer has the request's stand-in tokenizer and generation config."""
        ip = self.engine.input_processor
        renderer, saved_tok, saved_gen = ip.renderer, ip.renderer.tokenizer, ip.generation_config_fields
        renderer.tokenizer = _RequestTokenizer(row.bad_words, self.vocab, eos_id(row))
        ip.generation_config_fields = generation_config(row)
        try:
            yield
        finally:
            renderer.tokenizer, ip.generation_config_fields = saved_tok, saved_gen

    def close(self) -> None:
        """Shut the engine core down and remove the model directory."""
        try:
            self.engine.engine_core.shutdown()
        finally:
            shutil.rmtree(self._dir, ignore_errors=True)


_ENGINES: dict = {}
#: Engines kept alive at once (the oldest is closed beyond it).
MAX_ENGINES = 8


def engine_for(vocab: int, max_model_len: int, processors: bool = False, tokenizer=None) -> ScriptedEngine:
    """The cached :class:`ScriptedEngine` for ``(vocab, max_model_len, processors, tokenizer)``, built on first use."""
    key = (int(vocab), int(max_model_len), bool(processors), None if tokenizer is None else tokenizer.key())
    eng = _ENGINES.pop(key, None)
    if eng is None:
        while len(_ENGINES) >= MAX_ENGINES:
            _ENGINES.pop(next(iter(_ENGINES))).close()
        eng = ScriptedEngine(key[0], key[1], key[2], tokenizer)
    _ENGINES[key] = eng  # most recently used last
    return eng


def discard(eng: ScriptedEngine) -> None:
    """Drop ``eng`` from the cache and close it (after vLLM raised inside a step)."""
    for k, v in list(_ENGINES.items()):
        if v is eng:
            del _ENGINES[k]
    try:
        eng.close()
    except Exception:  # a broken engine may not shut down cleanly; it is unreachable either way
        pass


def _model_of(spec: ScenarioSpec, req):
    return req.model or spec.model


def _max_model_len(spec: ScenarioSpec) -> int:
    lens = {req.fields.get("max_seq_len") for req in spec.requests}
    if len(lens) > 1:
        raise ScenarioUnsupported("max_seq_len differs between requests (or is unset for some): it is vLLM's "
                                  "engine-wide max_model_len, not a request parameter")
    (v,) = lens
    return DEFAULT_MAX_MODEL_LEN if v is None else int(v)


def unsupported_reason(spec: ScenarioSpec) -> Optional[str]:
    """Why the engine loop cannot run ``spec`` (known before the run), or None.

    Returns
    -------
    str or None
        A reason naming the vLLM feature that is missing: for beam search,
        :func:`beam_unsupported_reason`; draft tokens, pauses (vLLM's
        scheduler runs every running request each step), a request field
        :func:`.translate.unsupported_reason` refuses, ``max_seq_len`` that differs between requests
        (``max_model_len`` is engine-wide), requests with equal prompts and
        different scripted models (the scripted model tells sequences apart
        by their prompts), vocabularies that differ between requests (one
        engine, one vocabulary).
    """
    if any(req.use_beam_search or req.beam_width != 1 for req in spec.requests):
        return beam_unsupported_reason(spec)
    vocabs, by_prompt = set(), {}
    for req in spec.requests:
        if req.draft_len or req.drafts:
            return ("draft tokens: vLLM drafts with a proposer of its speculative_config (ngram, EAGLE, "
                    "draft_model, custom_class) only for running requests, from the step after a request's "
                    "prefill (Scheduler.schedule schedules spec_token_ids for running requests alone), and "
                    "without draft probabilities for ngram/custom_class proposals; drafts verified from a "
                    "request's first step, with a draft model's q or a draft-to-target map, cannot be given")
        if req.pause and any(p >= req.arrive for p in req.pause):
            return ("a paused request: vLLM's Scheduler.schedule runs every running request at every step while "
                    "the token budget allows; a request cannot sit out a step")
        model = _model_of(spec, req)
        why = row_unsupported_reason(req.row(torch.zeros(model.vocab), []))
        if why is not None:
            return f"request {req.id!r}: {why}"
        vocabs.add(model.vocab)
        prompt = tuple(req.fields.get("prompt", ()))
        if by_prompt.setdefault(prompt, model) is not model:
            return (f"requests with the prompt {list(prompt)} have different scripted models: the scripted model "
                    "tells vLLM's sequences apart by their prompts")
    if len(vocabs) > 1:
        return "requests with different vocabularies: one vLLM engine serves one vocabulary"
    try:
        _max_model_len(spec)
    except ScenarioUnsupported as e:
        return str(e)
    return None


@dataclass(eq=False)
class _Req:
    """One sequence of a run: a case request, or one child of a request with ``n > 1``.

    Attributes
    ----------
    spec : RequestSpec
        The request, or the child (:meth:`RequestSpec.children`).
    rid : str
        The vLLM request id of its request (a child shares its parent's; vLLM names the
        child ``"<index>_<parent's internal id>"``: :attr:`internal`).
    index : int
        ``CompletionOutput.index`` of its outputs (0 for a request with ``n = 1``).
    group : list of _Req
        Its request's sequences (itself alone when ``n = 1``).
    internal : str or None
        A child's internal vLLM id, once its request was added (what a per-child abort names).
    """

    spec: object
    rid: str
    status: str = "waiting"      # waiting, running, finished, failed
    tokens: list = field(default_factory=list)
    result: Optional[RequestResult] = None
    index: int = 0
    group: list = field(default_factory=list)
    internal: Optional[str] = None
    text: Optional[str] = None   # CompletionOutput.text of its last output (with a tokenizer)


def _error_kind(e: Exception, row: Row) -> str:
    """The error kind of a request vLLM refused: :func:`.translate.classify_validation_error`, except that a
    request the engine client cannot encode because of its seed (``MsgpackEncoder`` refuses the int) is
    ``invalid_seed``."""
    if isinstance(e, OverflowError) and row.seed is not None:
        try:
            _ENCODER.encode(int(row.seed))
        except OverflowError:
            return "invalid_seed"
    return classify_validation_error(e)


def _finish_reason(out) -> str:
    """vLLM's ``CompletionOutput`` finish -> ours: EOS (no ``stop_reason``) ``end_id``, a stop token
    (``stop_reason`` an int: ``check_stop`` sets it) ``stop_words``, ``length`` as is."""
    if out.finish_reason == "length":
        return "length"
    if out.finish_reason == "stop":
        return "end_id" if out.stop_reason is None else "stop_words"
    return f"other:{out.finish_reason}"


class _Run:
    """One scenario on one :class:`ScriptedEngine`: arrivals, engine steps, the result (:func:`run_scenario`)."""

    def __init__(self, spec: ScenarioSpec, eng: ScriptedEngine):
        self.spec, self.eng = spec, eng
        eng.runs += 1
        self.reqs, self.groups = [], {}
        for r in spec.requests:
            group = [_Req(c, f"{eng.runs}:{r.id}", result=RequestResult(c.id), index=c.index) for c in r.children()]
            for q in group:
                q.group = group
            self.groups[r.id] = group
            self.reqs.extend(group)
        self.by_key = {(q.rid, q.index): q for q in self.reqs}
        self.admitted: list = []  # running requests in admission order
        self.owner: dict = {}     # slot -> the running request holding it
        self.binding = scripted_model.Binding(
            models={tuple(r.fields.get("prompt", ())): _model_of(spec, r) for r in spec.requests})

    # -- scheduling ----------------------------------------------------------------
    def scheduled(self, step: int) -> list:
        live = ("waiting", "running")
        ids = self.spec.schedule_at(step)
        if ids is not None:
            return [q for i in ids for q in self.groups[i] if q.status in live]
        return [q for q in self.reqs if q.status in live and q.spec.wants_step(step)]

    def done(self, step: int) -> bool:
        if self.spec.schedule_over(step):
            return True
        return all(q.status not in ("waiting", "running") for q in self.reqs)

    def check_schedule(self, sched: list) -> None:
        """The scenario's schedule at this step must be what vLLM will do: every running request, in admission order."""
        running = [q for q in self.admitted if q.status == "running"]
        missing = [q.spec.id for q in running if q not in sched]
        if missing:
            raise ScenarioUnsupported(f"request(s) {missing} are not scheduled at a step while running: vLLM's "
                                      "Scheduler.schedule runs every running request each step (no pauses)")
        order = [q for q in sched if q.status == "running"]
        if self.spec.schedule is not None and order != running:
            raise ScenarioUnsupported("the schedule orders the batch: vLLM's scheduler and persistent batch "
                                      "(InputBatch) decide the order of its requests; it cannot be given")

    # -- admission -----------------------------------------------------------------
    def admit(self, q: _Req, step: int) -> None:
        """Add ``q``'s request to the engine (once for all children of a request with ``n > 1``)."""
        group = q.group
        if group[0] is not q:
            return  # a child after the first: its request was added with the first
        for c in group:
            holder = self.owner.get(c.spec.slot)
            if holder is not None and holder is not c:
                raise ScenarioUnsupported(f"request {c.spec.id!r} takes slot {c.spec.slot} while {holder.spec.id!r} "
                                          "still holds it: vLLM has no sequence slots (requests are keyed by id), so "
                                          "duplicate_slot cannot arise")
        req = q.spec
        n = len(group)
        model = _model_of(self.spec, req)
        row = req.row(torch.zeros(model.vocab), [])
        eng = self.eng.engine
        added, failed_encode = [], []

        def add_to_core(request, _orig=eng.engine_core.add_request):
            # What vLLM's default, multiprocess engine client does with each request before the engine core
            # sees it (v1/engine/core_client.py SyncMPClient.add_request -> MPClient._send_input: MsgpackEncoder):
            # a request it cannot encode (a seed outside [-2**63, 2**64), e.g. a child's seed + i) is refused
            # there; in-process it would reach the model runner and fail the whole step
            # (GPUModelRunner._update_states: torch.Generator.manual_seed). LLMEngine.add_request fans a
            # request with n > 1 out here, one child at a time (ParentRequest.get_child_info).
            try:
                _ENCODER.encode(request)
            except OverflowError:
                failed_encode.append(request)
                raise
            _orig(request)
            added.append(request.request_id)

        try:
            sp = SamplingParams(**sampling_kwargs(row), **stop_kwargs(req), **({"n": n} if n > 1 else {}))
            with self.eng.lend_tokenizer(row):
                request = eng.input_processor.process_inputs(
                    q.rid, TokensPrompt(prompt_token_ids=list(req.fields.get("prompt", []))), sp,
                    supported_tasks=eng.get_supported_tasks())
            eng.engine_core.add_request = add_to_core
            try:
                eng.add_request(q.rid, request, request.params)
            finally:
                del eng.engine_core.add_request  # the instance attribute: the client's own method again
        except (VLLMValidationError, ValueError, TypeError, OverflowError) as e:
            kind = "invalid_seed" if failed_encode else _error_kind(e, row)
            # vLLM raised, but the children it had already handed to the engine core run there (nothing
            # aborts them: finding vllm-n-seed-overflow-orphans-children); their outputs come out of step()
            for c in group:
                if c.index < len(added):
                    c.internal = added[c.index]
                    self._start(c)
                else:
                    c.status = "failed"
                    r = c.result
                    r.error, r.message, r.error_step = kind, f"{type(e).__name__}: {e}", step
            return
        for c in group:
            c.internal = added[c.index] if n > 1 else None
            self._start(c)

    def _start(self, q: _Req) -> None:
        q.status = "running"
        self.owner[q.spec.slot] = q
        self.admitted.append(q)

    def release(self, q: _Req) -> None:
        if self.owner.get(q.spec.slot) is q:
            del self.owner[q.spec.slot]

    def fail(self, q: _Req, err: RowError, step: int) -> None:
        q.status = "failed"
        q.result.error, q.result.message, q.result.error_step = err.kind, err.message, step
        if q.internal is not None:  # one child of a request with n > 1: only it
            self.eng.engine.abort_request([q.internal], internal=True)
        else:
            self.eng.engine.abort_request([q.rid])
        self.release(q)

    # -- one engine step -----------------------------------------------------------
    def step(self, step: int) -> None:
        before = {q: list(q.tokens) for q in self.admitted if q.status == "running"}
        self.binding.errors.clear()
        _case_processors.MISMATCHES.clear()
        try:
            outs = self.eng.engine.step()
        except Exception:
            discard(self.eng)  # vLLM failed the whole step: the engine's state cannot be trusted any more
            raise
        if _case_processors.MISMATCHES:
            raise RuntimeError(f"step {step}: a custom logits processor's steps counter disagrees with its row's "
                               f"output tokens (class, batch index, counter, outputs): {_case_processors.MISMATCHES}")
        failed = {}
        for prompt, generated, msg in self.binding.errors:
            for q in self.admitted:
                if (q.status == "running" and tuple(q.spec.fields.get("prompt", ())) == prompt
                        and tuple(before.get(q, ())) == generated):
                    failed[q] = msg
        for out in outs:
            # a request with n > 1 reports each child's output under the request's id, with the child's
            # index (v1/engine/parallel_sampling.py ParentRequest.get_outputs; cumulative output kind)
            for comp in out.outputs:
                q = self.by_key.get((out.request_id, comp.index))
                if q is None or q.status != "running":
                    continue
                if q in failed:
                    self.fail(q, RowError("bad_logits", f"scripted model: {failed[q]}"), step)
                    continue
                new = list(comp.token_ids)[len(q.tokens):]
                self._check_served(q, new)
                q.tokens.extend(int(t) for t in new)
                rec = StepRecord(step, tokens=[int(t) for t in new])
                q.result.steps.append(rec)
                if self.spec.tokenizer is not None:
                    q.text = comp.text
                if comp.finish_reason is not None:  # this sequence (out.finished: every child of the request)
                    if isinstance(comp.stop_reason, str):
                        q.result.stop_reason = comp.stop_reason  # a stop string (an int: a stop token id)
                    reason = _finish_reason(comp)
                    rec.finish_reason = reason
                    q.status = "finished"
                    q.result.finish_reason, q.result.finish_step = reason, step
                    self.release(q)
        for q, msg in failed.items():  # a failing sequence vLLM gave no output for this step
            if q.status == "running":
                self.fail(q, RowError("bad_logits", f"scripted model: {msg}"), step)

    def _check_served(self, q: _Req, new: list) -> None:
        """Each new token's history was served by the request's scripted model (the sequence mapping held)."""
        mid = id(_model_of(self.spec, q.spec))
        prompt = tuple(q.spec.fields.get("prompt", ()))
        hist = list(q.tokens)
        for t in new:
            if (mid, prompt, tuple(hist)) not in self.binding.served:
                raise RuntimeError(f"vLLM sampled a token for request {q.spec.id!r} after {hist} that the scripted "
                                   "model never served logits for: the sequence mapping broke")
            hist.append(int(t))

    # -- the run -------------------------------------------------------------------
    def run(self) -> ScenarioResult:
        if self.eng.engine.has_unfinished_requests():
            raise RuntimeError("the scripted engine still holds requests of an earlier run")
        _engine.seed_engine()  # unseeded requests draw from torch's global generator: start as a new engine does
        scripted_model.bind(self.eng.key, self.binding)
        step = 0
        try:
            while step < self.spec.max_steps and not self.done(step):
                sched = self.scheduled(step)
                self.check_schedule(sched)
                for q in sched:
                    if q.status == "waiting":
                        self.admit(q, step)
                if any(q.status == "running" for q in self.admitted):
                    self.step(step)
                step += 1
        finally:
            # every request of this run, by external id (a request with n > 1: all its children), so that the
            # engine is clean for the next run: those still running, the children vLLM keeps after refusing
            # their request, and a refused request's state: LLMEngine.add_request gives the output processor
            # each sequence's RequestState before the engine core refuses it (OutputProcessor.add_request, then
            # engine_core.add_request), so has_unfinished_requests() stays True until it is aborted. Aborting an
            # id vLLM does not hold (finished, or refused before add_request) does nothing
            # (OutputProcessor.abort_requests).
            live = sorted({q.rid for q in self.reqs if q.status != "waiting"})
            if live and self.eng in _ENGINES.values():
                self.eng.engine.abort_request(live)
            scripted_model.unbind(self.eng.key)
        for q in self.reqs:
            r = q.result
            if q.status == "running":
                r.finish_reason = "none"
            if q.status != "failed":
                r.tokens = list(q.tokens)
                if self.spec.tokenizer is not None:
                    r.text = q.text if q.text is not None else ""
        return ScenarioResult({q.spec.id: q.result for q in self.reqs}, step, keys=REPORTED)


# --------------------------------------------------------------------------- beam search
#: Observations of a beam request (``LLM.beam_search`` returns the best ``W`` sequences and their cumulative
#: logprobs; no per-step predecessor map, no finish step).
BEAM_REPORTED = frozenset({"error", "error_step", "tokens", "finish_reason", "beams", "cum_logprobs", "scores",
                           "beam_finish_reasons"})

#: Request fields ``LLM.beam_search`` can be given: ``BeamSearchParams`` (sampling_params.py@v0.32.0) has
#: ``beam_width``, ``max_tokens``, ``ignore_eos``, ``temperature``, ``length_penalty``; the EOS id is the
#: tokenizer's. A seed draws nothing it uses (the sampled token of a beam step is never read when
#: ``2 * beam_width >= V``; see :func:`beam_unsupported_reason`).
BEAM_FIELDS = frozenset({"prompt", "use_beam_search", "max_new_tokens", "end_id", "ignore_eos", "temperature",
                         "seed"})


def beam_unsupported_reason(spec: ScenarioSpec) -> Optional[str]:
    """Why ``LLM.beam_search`` (entrypoints/generate/beam_search/offline.py@v0.32.0) cannot run ``spec``, or None.

    Returns
    -------
    str or None
        A plain request beside beam requests (beam search is a blocking
        loop of its own), draft tokens, a schedule or pause, a field outside
        :data:`BEAM_FIELDS` (penalties, bad words, stop words, min_length,
        ...: ``BeamSearchParams`` has none), ``early_stopping`` (none either:
        vLLM's beam search runs ``max_tokens`` steps, stopping early only
        when no beam is left) or ``diversity_rate``, no ``max_new_tokens``
        (``BeamSearchParams.max_tokens`` has no default), an EOS set (only
        the tokenizer's ``eos_token_id`` finishes a beam), a ``beam_width``
        above the scenario's ``max_beam_width`` (vLLM's only limit is
        ``VLLM_MAX_N_SEQUENCES``, fixed per process), or ``2 * beam_width``
        below the vocabulary with a temperature (each beam step samples one
        token from ``T``-scaled logits and adds it to the ``2W`` candidates
        when it is not among them: a random candidate set).
    """
    for req in spec.requests:
        if not (req.use_beam_search or req.beam_width != 1):
            return (f"request {req.id!r} does not use beam search: vLLM's LLM.beam_search is a blocking loop of its "
                    "own and cannot share engine steps with other requests")
        if req.draft_len or req.drafts:
            return "draft tokens with beam search: vLLM's beam search has no speculative decoding"
        if spec.schedule is not None or req.pause:
            return "a schedule or pause: LLM.beam_search runs each request to its end in one call"
        extra = sorted(k for k, v in req.fields.items() if k not in BEAM_FIELDS and v is not None)
        if extra:
            return (f"request {req.id!r} sets {', '.join(extra)}: BeamSearchParams has only beam_width, max_tokens, "
                    "ignore_eos, temperature and length_penalty")
        if req.early_stopping is not None:
            return ("early_stopping: BeamSearchParams has none (vLLM's beam search runs max_tokens steps; "
                    "BeamSearchOfflineMixin.beam_search)")
        if req.diversity_rate:
            return "diversity_rate: BeamSearchParams has none"
        if req.fields.get("max_new_tokens") is None:
            return "max_new_tokens unset: BeamSearchParams.max_tokens has no default"
        if isinstance(req.fields.get("end_id"), (list, tuple)):
            return "an EOS set: LLM.beam_search finishes a beam only on the tokenizer's eos_token_id"
        if req.beam_width > spec.max_beam_width:
            return (f"beam_width {req.beam_width} above max_beam_width {spec.max_beam_width}: vLLM has no engine "
                    "beam-width limit to reject it (only VLLM_MAX_N_SEQUENCES, fixed per process)")
        V = _model_of(spec, req).vocab
        if req.fields.get("temperature") and 2 * req.beam_width < V:
            return ("a temperature with 2 * beam_width < V: each beam step of LLM.beam_search samples a token at "
                    "that temperature and adds it to the 2W candidates when it is not among them")
    return None


def _run_beam(spec: ScenarioSpec, req, eng: ScriptedEngine) -> RequestResult:
    """One beam request through ``LLM.beam_search`` on ``eng``."""
    from vllm.entrypoints.generate.beam_search.utils import get_beam_search_score
    from vllm.sampling_params import BeamSearchParams

    model = _model_of(spec, req)
    prompt = tuple(req.fields.get("prompt", ()))
    row = req.row(torch.zeros(model.vocab), [])
    res = RequestResult(req.id)
    kw = dict(beam_width=int(req.beam_width), max_tokens=int(req.fields["max_new_tokens"]))
    if row.ignore_eos:
        kw["ignore_eos"] = True
    if row.temperature is not None:
        kw["temperature"] = float(row.temperature)
    if req.length_penalty is not None:
        kw["length_penalty"] = float(req.length_penalty)
    binding = scripted_model.Binding(extends=(prompt, model))
    scripted_model.bind(eng.key, binding)
    try:
        params = BeamSearchParams(**kw)
        with eng.lend_tokenizer(row):
            out = eng.llm.beam_search([TokensPrompt(prompt_token_ids=list(prompt))], params)[0]
    except (VLLMValidationError, ValueError) as e:
        res.error, res.message, res.error_step = _error_kind(e, row), f"{type(e).__name__}: {e}", req.arrive
        return res
    except Exception:
        # vLLM failed a whole engine step (e.g. 2 * beam_width above the vocabulary: the Sampler's
        # torch.topk of 2W logprobs raises): the engine's state cannot be trusted any more
        discard(eng)
        raise
    finally:
        scripted_model.unbind(eng.key)
    if binding.errors:
        p, g, msg = binding.errors[0]
        res.error, res.message, res.error_step = "bad_logits", f"scripted model: {msg}", req.arrive + len(g)
        return res
    eos = eos_id(row)
    beams, cums, scores, reasons = [], [], [], []
    for seq in out.sequences:
        gen = [int(t) for t in seq.tokens[len(prompt):]]
        for k in range(len(gen)):
            if (id(model), prompt, tuple(gen[:k])) not in binding.served:
                raise RuntimeError(f"vLLM's beam {gen} extends a history the scripted model never served: the "
                                   "sequence mapping broke")
        beams.append(gen)
        cums.append(float(seq.cum_logprob))
        scores.append(float(get_beam_search_score(list(seq.tokens), seq.cum_logprob, eos, params.length_penalty)))
        reasons.append("end_id" if eos is not None and not params.ignore_eos and gen and gen[-1] == eos
                       else "length")
    res.beams, res.cum_logprobs, res.scores, res.beam_finish_reasons = beams, cums, scores, reasons
    res.tokens, res.finish_reason = list(beams[0]), reasons[0]
    res.steps = [StepRecord(req.arrive + s) for s in range(max(len(b) for b in beams))]
    return res


def run_beam(spec: ScenarioSpec) -> ScenarioResult:
    """Run every (beam) request of ``spec`` through ``LLM.beam_search``, one call per request.

    Raises
    ------
    ScenarioUnsupported
        :func:`beam_unsupported_reason`.
    """
    why = beam_unsupported_reason(spec)
    if why is not None:
        raise ScenarioUnsupported(why)
    _engine.seed_engine()
    out = {}
    for req in spec.requests:
        eng = engine_for(_model_of(spec, req).vocab, DEFAULT_MAX_MODEL_LEN)
        out[req.id] = _run_beam(spec, req, eng)
    steps = max((s.step + 1 for r in out.values() for s in r.steps), default=0)
    return ScenarioResult(out, steps, keys=BEAM_REPORTED)


def run_scenario(spec: ScenarioSpec) -> ScenarioResult:
    """Decode ``spec`` on vLLM's engine (module docstring).

    Parameters
    ----------
    spec : ScenarioSpec

    Returns
    -------
    ScenarioResult
        ``keys`` = :data:`REPORTED`; per request its tokens, finish reason
        and step, one :class:`StepRecord` per step it produced tokens at
        (``scheduled``), or its admission / step error.

    Raises
    ------
    ScenarioUnsupported
        :func:`unsupported_reason`, or what the run finds it cannot express
        (a slot still held by a running request, a running request the
        schedule leaves out, a schedule that orders the batch).
    """
    why = unsupported_reason(spec)
    if why is not None:
        raise ScenarioUnsupported(why)
    if any(req.use_beam_search or req.beam_width != 1 for req in spec.requests):
        return run_beam(spec)
    V = _model_of(spec, spec.requests[0]).vocab
    procs = any(req.fields.get("logits_processors") for req in spec.requests)
    return _Run(spec, engine_for(V, _max_model_len(spec), procs, spec.tokenizer)).run()


# --------------------------------------------------------------------------- single-step rows
#: Row fields a first-token request does not take: the logits (the scripted model serves them), the history
#: and slot bookkeeping, and the length limits (the request runs one step: ``max_tokens = 1``).
_FIRST_TOKEN_DROPPED = frozenset({"logits", "generated", "slot", "request_id", "draft_position", "max_seq_len",
                                  "max_new_tokens", "child_stream"})


#: Rows per engine run of :func:`first_tokens`: ``max_num_seqs`` of :data:`ENGINE_ARGS` (one engine step holds
#: them all).
FIRST_TOKEN_RUN = ENGINE_ARGS["max_num_seqs"]
#: Prompt tokens per engine run of :func:`first_tokens`: ``max_num_batched_tokens``, so that no prompt of the run
#: is split. A split (chunked) prefill of a *seeded* request fails the engine step on the CPU build:
#: ``GPUModelRunner`` rewinds the generator of a request whose sampled token it discards (a prefill chunk that is
#: not the prompt's last), ``gen.set_offset(gen.get_offset() - 4)`` (v1/worker/gpu_model_runner.py @ v0.32.0),
#: and a CPU ``torch.Generator`` has no offset: ``RuntimeError: CPU Generator does not use offset``
#: (``tests/test_vllm_loop.py::test_seeded_request_with_a_split_prompt_fails_the_step_on_cpu``). Before the limit,
#: runs of 128 rows with stand-in prompts ``[0] * (i + 1)`` (8256 tokens) met it.
FIRST_TOKEN_PROMPT_TOKENS = ENGINE_ARGS["max_num_batched_tokens"]


def _stand_in_prompt(i: int, vocab: int) -> tuple:
    """The prompt of the ``i``-th (from 1) row without one: ``i`` in base ``vocab``, least significant digit first.

    Distinct for distinct ``i``, and short (a few tokens), so that a run's prompts stay within
    :data:`FIRST_TOKEN_PROMPT_TOKENS`.
    """
    digits = []
    while True:
        i, d = divmod(i, vocab)
        digits.append(d)
        if i == 0:
            return tuple(digits)


def first_token_unsupported(row: Row) -> Optional[str]:
    """Why :func:`first_tokens` cannot draw ``row``'s token on the engine loop, or None.

    A single-step row is one step of a request; the engine loop can stand in for it only when that step is the
    request's first (no ``generated`` history: vLLM's output tokens are the ones it sampled itself), when the
    request's prompt fits :data:`DEFAULT_MAX_MODEL_LEN`, when its logprobs mode is the engine's default
    (``logprobs_mode`` is an engine-wide ``ModelConfig`` setting), when it has no grammar bitmask (the
    engine's comes from its grammar backend) and, for a row without a prompt (vLLM refuses
    an empty one), when no repetition penalty reads the stand-in prompt it is given (vLLM's repetition penalty
    counts prompt tokens; presence, frequency, bad words and ``min_tokens`` read output tokens only:
    v1/sample/ops/penalties.py, v1/sample/ops/bad_words.py @ v0.32.0).
    """
    if row.generated:
        return "the row has generated tokens, which only vLLM's own earlier steps could have produced"
    if row.prompt is not None and len(row.prompt) + 1 > DEFAULT_MAX_MODEL_LEN:
        return f"a prompt of {len(row.prompt)} tokens is past the scripted engines' max_model_len"
    if row.logprobs_mode is not None:
        return "logprobs_mode is an engine-wide setting (ModelConfig.logprobs_mode)"
    if row.token_bitmask is not None:
        return ("on the engine loop a grammar bitmask is the grammar backend's output for the request's grammar "
                "(StructuredOutputManager, v1/structured_output/); the case gives the bitmask itself")
    if not row.prompt and row.repetition_penalty not in (None, 1.0):
        return "a repetition penalty would read the stand-in prompt a row without a prompt is given"
    return None


def first_tokens(rows: list) -> list:
    """Draw each row's token on vLLM's engine loop: one request per row, one engine step (``max_tokens = 1``).

    The single-step adapter (:mod:`.session`) samples a row with vLLM's ``Sampler`` but seeds the row's
    generator itself; here vLLM's model runner seeds it (``GPUModelRunner._update_states``: a
    ``torch.Generator`` per request with ``SamplingType.RANDOM_SEED``) and its sampler draws, from the
    scripted model's logits (:class:`impls.reference.scripted.TableModel` holding the row's logits as its first
    step). The engine serves the row's vocabulary (:func:`engine_for`); rows without a prompt are given the
    stand-in prompt :func:`_stand_in_prompt` (distinct, so that prompts, which tell sequences apart, differ);
    rows whose prompts are equal run in separate runs (a seeded row's draw depends on its request alone:
    ``forward_cpu`` draws its 31-bit noise seed from the request's generator), at most
    :data:`FIRST_TOKEN_RUN` rows and :data:`FIRST_TOKEN_PROMPT_TOKENS` prompt tokens a run.

    Parameters
    ----------
    rows : list of Row
        Rows :func:`first_token_unsupported` accepts, of one vocabulary.

    Returns
    -------
    list of (int or None, str)
        Per row: the token vLLM's engine sampled, or None and why (the engine refused the request, or failed
        its step: the message).
    """
    from ..reference.scripted import TableModel

    if not rows:
        return []
    out: list = [None] * len(rows)
    runs: list = []   # each: {prompt: row index}, prompts distinct within a run
    sizes: list = []  # prompt tokens per run
    anon = 0
    for i, row in enumerate(rows):
        if row.prompt:
            prompt = tuple(int(t) for t in row.prompt)
        else:
            anon += 1
            prompt = _stand_in_prompt(anon, row.vocab)
        for r, run in enumerate(runs):
            if (prompt not in run and len(run) < FIRST_TOKEN_RUN
                    and sizes[r] + len(prompt) <= FIRST_TOKEN_PROMPT_TOKENS):
                run[prompt] = i
                sizes[r] += len(prompt)
                break
        else:
            runs.append({prompt: i})
            sizes.append(len(prompt))
    procs = any(r.logits_processors for r in rows)
    for run in runs:
        reqs = []
        for prompt, i in run.items():
            row = rows[i]
            fields = {f.name: getattr(row, f.name) for f in dataclasses.fields(row)
                      if f.name not in _FIRST_TOKEN_DROPPED and getattr(row, f.name) is not None}
            fields.update(prompt=list(prompt), max_new_tokens=1)
            model = TableModel([row.logits.to(torch.float64).tolist()])
            reqs.append(RequestSpec(id=f"row{i}", slot=i, fields=fields, model=model))
        spec = ScenarioSpec(model=reqs[0].model, requests=reqs, max_steps=1)
        try:
            eng = engine_for(rows[0].vocab, DEFAULT_MAX_MODEL_LEN, procs)
            res = _Run(spec, eng).run()
        except Exception as e:  # vLLM failed the step: every row of the run says so
            for i in run.values():
                out[i] = (None, f"the engine loop raised: {type(e).__name__}: {e}")
            continue
        for prompt, i in run.items():
            r = res.requests[f"row{i}"]
            if r.error:
                out[i] = (None, f"the engine loop refused the request: {r.error}: {r.message}")
            elif len(r.tokens) != 1:
                out[i] = (None, f"the engine loop returned {len(r.tokens)} tokens for one step")
            else:
                out[i] = (int(r.tokens[0]), "")
    return out


# --------------------------------------------------------------------------- many draws of one row
#: Tokens each request of :func:`sample_counts` draws (its prompt and these fit one 128-token KV block).
COUNT_TOKENS = 120
#: Requests :func:`sample_counts` runs at once: below ``max_num_seqs`` and the 1024 KV blocks of
#: :data:`ENGINE_ARGS`, so that none waits or is preempted.
COUNT_WAVE = 1000
#: The most draws :meth:`impls.vllm.session.VllmSession.sample_many` takes on the engine loop. The loop costs
#: about 56 us per draw on the project's 2-core machine (vLLM's scheduler, model runner, sampler and output
#: processor per request and step; 240,000 draws of a 64-token top-p row in 13.4 s, 2026-12-05). The corpus's
#: statistical cases on vLLM draw 99,000 to 179,200 tokens each (the judge's sample size, below their
#: ``draws`` cap of 10^6): all on the loop. Above this many draws the ``Sampler`` draws instead (10^6 draws
#: on the loop would take about a minute), and the result says so.
COUNT_LOOP_DRAWS = 250_000


def count_unsupported(row: Row) -> Optional[str]:
    """Why :func:`sample_counts` cannot draw ``row`` on the engine loop, or None.

    Each request of :func:`sample_counts` draws many tokens from one unchanging logits row, so the row's
    distribution must not depend on the request's output: no repetition, presence or frequency penalty (they
    count output tokens), no ``min_length`` (vLLM's ``min_tokens`` bans the EOS and stop ids only at the first
    steps), no bad word of more than one token (banned only after its prefix), no custom logits processor
    (stateful); and the row must be one :func:`first_token_unsupported` accepts.
    """
    why = first_token_unsupported(row)
    if why is not None:
        return why
    for name, neutral in (("repetition_penalty", 1.0), ("presence_penalty", 0.0), ("frequency_penalty", 0.0)):
        if getattr(row, name) not in (None, neutral):
            return f"{name} counts the request's output tokens: its draws are not alike"
    if row.min_length:
        return "min_length (min_tokens) bans the EOS and stop ids at the first steps only"
    if any(len(w) > 1 for w in row.bad_words or ()):
        return "a bad word of several tokens is banned only after its prefix was drawn"
    if row.logits_processors:
        return "a custom logits processor may keep state across a request's steps"
    return None


def sample_counts(row: Row, seeds) -> torch.Tensor:
    """Draw ``len(seeds)`` tokens from one row on vLLM's engine loop; return the counts per token.

    Requests of :data:`COUNT_TOKENS` tokens each (the last one shorter) are added :data:`COUNT_WAVE` at a time;
    request ``j`` has seed ``seeds[j]``, so vLLM's model runner gives it its own generator
    (``GPUModelRunner._update_states``) and its sampler draws every token from it; the scripted model serves
    the row's logits at every step (:attr:`.scripted_model.Binding.constant`). The request's stop rules are
    left out (``ignore_eos``, no stop ids), which :func:`count_unsupported` makes irrelevant to the draws.
    Reproducible for a given ``seeds`` (nothing unseeded is drawn).

    Parameters
    ----------
    row : Row
        A row :func:`count_unsupported` accepts; ``logits`` ``(V,)``.
    seeds : sequence of int
        At least one per request: ``ceil(len(seeds) / COUNT_TOKENS)`` are used.

    Returns
    -------
    torch.Tensor
        ``(V,)`` int64 counts summing to ``len(seeds)``.

    Raises
    ------
    RowError
        ``unsupported`` (:func:`count_unsupported`), or vLLM's rejection of the request
        (:func:`.translate.classify_validation_error`).
    RuntimeError
        vLLM failed an engine step (the engine is then discarded), or returned fewer tokens than asked.
    """
    from vllm.sampling_params import RequestOutputKind

    why = count_unsupported(row)
    if why is not None:
        raise RowError("unsupported", why)
    n, V = len(seeds), row.vocab
    counts = torch.zeros(V, dtype=torch.int64)
    if n == 0:
        return counts
    kw = sampling_kwargs(row.replace(seed=None, stop_words=None, max_new_tokens=None, max_seq_len=None))
    kw.pop("logprobs", None)   # draws only: no logprobs to compute and carry
    prompt = [int(t) for t in row.prompt] if row.prompt else [0]
    eng = engine_for(V, DEFAULT_MAX_MODEL_LEN)
    llm = eng.engine
    if llm.has_unfinished_requests():
        raise RuntimeError("the scripted engine still holds requests of an earlier run")
    eng.runs += 1
    scripted_model.bind(eng.key, scripted_model.Binding(constant=row.logits.to(torch.float32)))
    done, j, live = 0, 0, set()
    try:
        while done < n:
            while j * COUNT_TOKENS < n and len(live) < COUNT_WAVE:
                rid = f"{eng.runs}:draw{j}"
                sp = SamplingParams(**kw, seed=int(seeds[j]), ignore_eos=True,
                                    max_tokens=min(COUNT_TOKENS, n - j * COUNT_TOKENS),
                                    output_kind=RequestOutputKind.FINAL_ONLY)
                try:
                    with eng.lend_tokenizer(row):
                        req = llm.input_processor.process_inputs(rid, TokensPrompt(prompt_token_ids=prompt), sp,
                                                                 supported_tasks=llm.get_supported_tasks())
                    llm.add_request(rid, req, req.params)
                except (VLLMValidationError, ValueError, TypeError, OverflowError) as e:
                    raise RowError(_error_kind(e, row), f"{type(e).__name__}: {e}") from None
                live.add(rid)
                j += 1
            try:
                outs = llm.step()
            except Exception:
                discard(eng)
                raise
            for out in outs:
                if out.finished:
                    live.discard(out.request_id)
                    toks = torch.tensor(list(out.outputs[0].token_ids), dtype=torch.int64)
                    counts += torch.bincount(toks, minlength=V)
                    done += len(toks)
            if not live and j * COUNT_TOKENS >= n and done < n:
                raise RuntimeError(f"the engine loop returned {done} tokens of the {n} asked for")
    finally:
        if live and eng in _ENGINES.values():
            llm.abort_request(sorted(live))
        scripted_model.unbind(eng.key)
    return counts
