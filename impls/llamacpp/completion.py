"""llama-cpp-python's own generation loop on a scenario: ``Llama.create_completion`` with a scripted model.

Imported lazily (it imports llama-cpp-python). The scenarios whose requests have stop strings,
custom logits processors or ``min_length`` (what llama.cpp's C sampler chain has no stage for)
run here, through llama-cpp-python 0.3.36's high-level API (paths relative to ``llama_cpp/`` of
abetlen/llama-cpp-python@v0.3.36):

* the model is a tiny GGUF file whose vocabulary is the case's toy tokenizer
  (:mod:`.tiny_gguf`); its own logits are meaningless;
* each request is one ``Llama.create_completion(prompt_ids, ...)`` call (llama.py
  ``Llama._create_completion``), whose ``logits_processor`` is a ``LogitsProcessorList`` of:
  first the scripted model (:class:`ScriptedLogits`: it *replaces* the logits with the case
  model's row for the sequence's token history, the ``input_ids`` llama-cpp-python hands every
  processor; the tokens past the case's vocabulary get ``-inf``), then each of the request's
  ``logits_processors`` (:mod:`impls.processors`) in order, then, for a request with
  ``min_length`` and an end id, llama-cpp-python's own ``MinTokensLogitsProcessor``;
  ``Llama._init_sampler`` adds that list as a custom sampler in front of its chain (penalties,
  top-k, typical-p, top-p, min-p, temperature, ``dist`` seeded with the request's seed; greedy
  at temperature 0);
* llama-cpp-python decides the rest: the EOS test (``llama_vocab_is_eog``), the stop strings
  (searched in the detokenized completion text after each token; the text cut before the
  first listed string found), ``max_tokens``, and ``finish_reason`` (``"stop"`` or
  ``"length"``).

What this module adds:

* admission: the reference's validation under the profile (:func:`impls.reference.modes.resolve`,
  the empty-stop-string check of the scenario driver), at the request's ``arrive`` step;
* scheduling: ``Llama`` decodes one sequence (``LlamaBatch.set_batch`` puts every token in
  sequence 0, ``_internals.py``), so the requests are served one after another in arrival order,
  as llama-cpp-python's server serialises them; a request's ``i``-th token is labelled with
  scenario step ``arrive + i`` (:data:`REPORTED` ``scheduled``, ``finish_step``). Scenarios
  where that labelling is not the reference's schedule are refused (:func:`unsupported_reason`);
* the end of the run: ``max_tokens`` is the request's ``max_new_tokens`` or the steps left
  until ``max_steps``, whichever is smaller; a request cut by the latter reports
  ``finish_reason = "none"``;
* the reading of ``"stop"``: ``end_id`` when the last sampled token is the request's end id
  (the EOS test comes first in ``_create_completion``), else ``stop_words``. The tokens are
  recorded as ``Llama.sample`` returns them (:func:`_llama_class`), the EOS included;
  ``create_completion`` returns text only.

What it cannot express raises :class:`~impls.reference.scenario_types.ScenarioUnsupported`
naming the missing llama-cpp-python feature (:func:`unsupported_reason`; a step's logits that
the chain cannot take are known during the run only).
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import torch

from ..base import RowError
from ..profiles import Profile
from ..reference.scenario_types import (RequestResult, ScenarioResult, ScenarioSpec, ScenarioUnsupported,
                                        StepRecord)
from ..reference.scripted import ModelError
from .tiny_gguf import EXTRA, model_path, text_problem, token_texts

__all__ = ["REPORTED", "PATH", "needs_completion", "unsupported_reason", "ScriptedLogits", "run_scenario"]

#: Observations this path reports (:data:`harness.kinds.scenario.EXPECT_KEYS`): no stop string (the
#: completion's ``finish_reason`` is ``"stop"`` for an EOS and a stop string alike), no kept sets or
#: generator positions.
REPORTED = frozenset({"error", "error_step", "tokens", "finish_reason", "finish_step", "scheduled", "text"})

#: What a result of this path says it ran (``ScenarioResult.path``).
PATH = ("llama_cpp.Llama.create_completion on a tiny GGUF model (impls/llamacpp/completion.py): scripted "
        "logits processor, the case's processors, llama-cpp-python's sampler chain, stop strings and finish "
        "reasons; one request at a time")

#: Request fields this path passes to ``create_completion`` (or its processors); any other field a
#: request sets makes the scenario ``n/a``.
_TAKEN = frozenset({"prompt", "temperature", "top_k", "top_p", "min_p", "min_keep", "seed", "end_id",
                    "max_new_tokens", "min_length", "logits_processors"})

#: Why a field this path does not take cannot be expressed (the others: "not a parameter of
#: create_completion").
_WHY = {
    "repetition_penalty": "Llama._init_sampler's penalty sampler is only shown the sampled tokens (llama_sampler_"
                          "sample accepts them; the prompt never is), where the llamacpp profile's penalty window "
                          "holds the prompt (llama-server accepts it)",
    "presence_penalty": "see repetition_penalty: the high-level loop's penalty window has no prompt",
    "frequency_penalty": "see repetition_penalty: the high-level loop's penalty window has no prompt",
    "penalty_last_n": "the penalty window is Llama's last_n_tokens_size, not a request parameter",
    "logit_bias": "_create_completion joins its logit-bias processor to a given logits_processor with "
                  "LogitsProcessorList.extend, which returns None: both are dropped (llama.py@v0.3.36)",
    "ignore_eos": "create_completion has no ignore_eos (llama_vocab_is_eog ends every completion)",
    "stop_words": "create_completion has no token-id stop words (its stop is text)",
    "max_seq_len": "create_completion has no per-request sequence limit (n_ctx is the context's)",
    "typical_p": "the tokens past the case's vocabulary sit at -inf in the candidates, and llama.cpp's typical "
                 "sampler counts them in its entropy",
    "mirostat": "not wired on this path (the C chain runs mirostat)",
}


def needs_completion(spec: ScenarioSpec) -> bool:
    """Whether ``spec`` asks what only the high-level loop has: stop strings, custom processors, ``min_length``."""
    for r in spec.requests:
        f = r.fields
        if r.stop or f.get("logits_processors") or (f.get("min_length") or 0) > 0:
            return True
    return False


def _field_reason(name: str, value) -> Optional[str]:
    if value is None:
        return None
    if name not in _TAKEN:
        return f"{name}: {_WHY.get(name, 'not a parameter of Llama.create_completion')}"
    if name == "prompt" and (not value):
        return ("an empty prompt: _create_completion then starts the completion with the BOS token "
                "(completion_tokens = [bos_token_id])")
    if name == "temperature" and not value >= 0:
        return f"temperature={value!r}: Llama._init_sampler takes a negative one as dist without a temperature"
    if name == "min_keep" and value not in (0, 1):
        return f"min_keep={value}: Llama._init_sampler fixes min_keep at 1"
    if name == "end_id" and not isinstance(value, int):
        return "an EOS set: the GGUF vocabulary has one EOS id (tokenizer.ggml.eos_token_id)"
    if name == "max_new_tokens" and value < 1:
        return f"max_new_tokens={value}: create_completion takes max_tokens <= 0 as unlimited"
    return None


def unsupported_reason(spec: ScenarioSpec) -> Optional[str]:
    """Why this path cannot run ``spec`` (known before the run), or None.

    Refused: beam search and drafts (``Llama`` has neither on this path), ``n > 1``
    (``create_completion`` has no ``n``), pauses and an explicit schedule (a request runs every
    step from its arrival to its end: the completion loop cannot sit out a step), an engine-wide
    ``max_seq_len``, two requests in one slot (``Llama`` has no slots: the reference's
    ``duplicate_slot`` admission has no counterpart), a request field :data:`_TAKEN` lacks or a
    value it cannot pass (:func:`_field_reason`), a prompt or end id outside the vocabulary, token
    texts the GGUF vocabulary cannot carry (:func:`.tiny_gguf.text_problem`).
    """
    if spec.schedule is not None:
        return "an explicit schedule: Llama.create_completion decodes a request at every step until it ends"
    if spec.max_seq_len is not None:
        return "an engine max_seq_len: create_completion has no per-request sequence limit"
    slots: dict = {}
    for r in spec.requests:
        if r.use_beam_search or r.beam_width != 1:
            return f"request {r.id!r}: beam search (create_completion has none)"
        if r.draft_len or r.drafts is not None or r.d2t is not None:
            return (f"request {r.id!r}: draft tokens (Llama's draft_model proposes its own; literal drafts cannot "
                    "be given)")
        if r.n != 1:
            return f"request {r.id!r}: n={r.n} (create_completion has no n)"
        if r.pause:
            return f"request {r.id!r}: a pause (create_completion decodes a request at every step until it ends)"
        if r.slot in slots:
            return (f"requests {slots[r.slot]!r} and {r.id!r} share slot {r.slot}: Llama has no slots (the "
                    "reference's duplicate_slot admission has no counterpart)")
        slots[r.slot] = r.id
        for name, value in r.fields.items():
            why = _field_reason(name, value)
            if why:
                return f"request {r.id!r}: {why}"
        model = r.model or spec.model
        bad = [t for t in r.fields.get("prompt", []) if not 0 <= int(t) < model.vocab]
        if bad:
            return f"request {r.id!r}: prompt ids {bad[:3]} outside the vocabulary (GGUF ids are [0, V))"
        e = r.fields.get("end_id")
        if e is not None and e != -1 and not 0 <= e < model.vocab:
            return (f"request {r.id!r}: end_id {e} outside [0, {model.vocab}): llama.cpp's vocabulary loader "
                    "replaces a special id outside the vocabulary by its default")
    if spec.tokenizer is not None:
        why = text_problem(spec.tokenizer.vocab)
        if why:
            return why
    return None


class ScriptedLogits:
    """The scripted model as the first processor of a ``LogitsProcessorList`` (llama-cpp-python's ``LogitsProcessor``).

    Called by llama-cpp-python's custom sampler (``Llama._init_sampler``'s ``apply_func``) with
    ``input_ids`` (the prompt, then the tokens generated so far) and ``scores`` (``(n_vocab,)``
    float32, the candidates in token-id order: ``llama_sampler_sample`` builds them so). Returns
    the case model's ``(V,)`` row for that history, ``-inf`` at the ids past ``V``
    (:data:`.tiny_gguf.EXTRA`). It never reads the case's expectations.

    A problem inside the callback cannot propagate (ctypes prints and drops a callback's
    exception), so it is recorded instead: :attr:`model_error` (the scripted model has no row:
    ``(generated position, message)``), :attr:`unsupported` (a row the chain cannot take,
    :func:`impls.llamacpp._unsupported`); the scores are then returned unchanged and the caller
    discards the completion.

    Parameters
    ----------
    request : RequestSpec
    model : ScriptedModel
    """

    def __init__(self, request, model):
        self.request, self.model = request, model
        self.prompt = [int(t) for t in request.fields.get("prompt", [])]
        self.model_error: Optional[tuple] = None
        self.unsupported: Optional[str] = None
        self.calls = 0

    def __call__(self, input_ids, scores):
        """``(n_vocab,)`` float32: the scripted row for ``input_ids`` (class docstring)."""
        from . import _unsupported
        self.calls += 1
        if self.model_error is not None or self.unsupported is not None:
            return scores
        try:
            ids = [int(t) for t in input_ids]
            if ids[:len(self.prompt)] != self.prompt:
                self.unsupported = f"the history {ids} handed to the processor does not start with the prompt"
                return scores
            generated = ids[len(self.prompt):]
            try:
                row = self.model.logits(self.prompt, generated)
            except ModelError as e:
                self.model_error = (len(generated), f"scripted model: {e}")
                return scores
            why = _unsupported(self.request.row(row, generated))
            if why:
                self.unsupported = why
                return scores
            out = np.full(scores.shape, -np.inf, dtype=np.float32)
            out[:row.shape[0]] = row.numpy()
            return out
        except Exception as e:   # noqa: BLE001 -- recorded: the callback cannot raise
            self.unsupported = f"the scripted processor raised {type(e).__name__}: {e}"
            return scores


class _CaseProcessor:
    """One :class:`impls.processors.Processor` as a llama-cpp-python ``LogitsProcessor`` on the case's ``V`` ids.

    ``n`` (the request's steps) is read from ``input_ids``: its length less the prompt's.
    """

    def __init__(self, proc, prompt_len: int, vocab: int, owner: ScriptedLogits):
        self.proc, self.prompt_len, self.vocab, self.owner = proc, prompt_len, vocab, owner

    def __call__(self, input_ids, scores):
        if self.owner.model_error is not None or self.owner.unsupported is not None:
            return scores
        try:
            x = torch.from_numpy(np.array(scores[:self.vocab], dtype=np.float32))
            y = self.proc.apply(x, len(input_ids) - self.prompt_len)
            out = np.array(scores, dtype=np.float32)
            out[:self.vocab] = y.numpy()
            return out
        except Exception as e:   # noqa: BLE001 -- recorded: the callback cannot raise
            self.owner.unsupported = f"processor {self.proc.kind!r} raised {type(e).__name__}: {e}"
            return scores


_CLASS = None
_LLAMAS: dict = {}


def _llama_class():
    """``llama_cpp.Llama`` with ``sample`` recording each token it returns (``sampled``); nothing else changes."""
    global _CLASS
    if _CLASS is None:
        import llama_cpp

        class RecordingLlama(llama_cpp.Llama):
            """``Llama`` whose ``sample`` appends each token it returns to ``self.sampled``."""

            sampled: list

            def sample(self, *args, **kwargs):
                """``Llama.sample``, the token recorded."""
                token = super().sample(*args, **kwargs)
                self.sampled.append(int(token))
                return token

        _CLASS = RecordingLlama
    return _CLASS


def _llama(path: str):
    llm = _LLAMAS.get(path)
    if llm is None:
        llm = _llama_class()(model_path=path, n_ctx=4096, n_batch=512, n_threads=1, n_threads_batch=1,
                             seed=0, verbose=False)
        llm.sampled = []
        _LLAMAS[path] = llm
    return llm


def _admit(spec: ScenarioSpec, req, profile: Profile) -> Optional[RowError]:
    """The reference's admission of ``req`` under ``profile`` (scenario.py ``_Runner.admit``, one request, no slots)."""
    from ..reference.modes import resolve
    model = req.model or spec.model
    try:
        logits = model.logits(req.fields.get("prompt", []), [])
    except ModelError as e:
        return RowError("bad_logits", f"scripted model: {e}")
    try:
        resolve(req.row(logits, []), profile)
    except RowError as e:
        return e
    if "" in req.stop and "empty_stop_string" not in profile.validation_skips:
        return RowError("invalid_stop_words", "stop strings must not be empty")
    return None


def _one(spec: ScenarioSpec, req, profile: Profile) -> RequestResult:
    import llama_cpp

    from . import _unsupported
    rr = RequestResult(req.id)
    try:
        first = (req.model or spec.model).logits(req.fields.get("prompt", []), [])
    except ModelError:
        first = None            # the admission reports it
    if first is not None:
        why = _unsupported(req.row(first, []))
        if why:
            raise ScenarioUnsupported(f"request {req.id!r}: {why}")
    err = _admit(spec, req, profile)
    if err is not None:
        rr.error, rr.message, rr.error_step = err.kind, err.message, req.arrive
        return rr
    model = req.model or spec.model
    f = req.fields
    V = model.vocab
    tok = spec.tokenizer
    end = f.get("end_id")
    eos = None if end is None or end == -1 else int(end)
    llm = _llama(model_path(token_texts(V, tok.vocab if tok is not None else None),
                            tok.special if tok is not None else frozenset(), eos))
    scripted = ScriptedLogits(req, model)
    procs = [scripted] + [_CaseProcessor(p, len(scripted.prompt), V, scripted) for p in f.get("logits_processors") or ()]
    if (f.get("min_length") or 0) > 0 and eos is not None:
        procs.append(llama_cpp.MinTokensLogitsProcessor(int(f["min_length"]), eos))
    left = spec.max_steps - req.arrive
    if left <= 0:
        rr.finish_reason = "none"
        return rr
    max_new = f.get("max_new_tokens")
    cap = left if max_new is None else min(int(max_new), left)
    temperature = f.get("temperature")
    llm.sampled = []
    out = llm.create_completion(
        list(scripted.prompt), max_tokens=cap, stop=list(req.stop),
        temperature=1.0 if temperature is None else float(temperature),
        top_k=int(f["top_k"]) if f.get("top_k") is not None else 0,
        top_p=float(f["top_p"]) if f.get("top_p") is not None else 1.0,
        min_p=float(f["min_p"]) if f.get("min_p") is not None else 0.0,
        typical_p=1.0, repeat_penalty=1.0, frequency_penalty=0.0, presence_penalty=0.0,
        seed=None if f.get("seed") is None else int(f["seed"]),
        logits_processor=llama_cpp.LogitsProcessorList(procs))
    if scripted.unsupported is not None:
        raise ScenarioUnsupported(f"request {req.id!r}: {scripted.unsupported}")
    tokens = list(llm.sampled)
    if scripted.model_error is not None:
        pos, msg = scripted.model_error
        rr.error, rr.message, rr.error_step = "bad_logits", msg, req.arrive + pos
        rr.steps = [StepRecord(req.arrive + i, tokens=[t]) for i, t in enumerate(tokens[:pos])]
        return rr
    choice = out["choices"][0]
    reason = choice["finish_reason"]
    if reason == "stop":
        reason = "end_id" if eos is not None and tokens and tokens[-1] == eos else "stop_words"
    elif reason == "length":
        reason = "length" if max_new is not None and len(tokens) >= int(max_new) else "none"
    rr.tokens = tokens
    rr.steps = [StepRecord(req.arrive + i, tokens=[t]) for i, t in enumerate(tokens)]
    rr.finish_reason = reason
    if reason != "none":
        rr.finish_step = req.arrive + len(tokens) - 1
    if rr.steps and reason != "none":
        rr.steps[-1].finish_reason = reason
    if tok is not None:
        rr.text = choice["text"]
    return rr


def run_scenario(spec: ScenarioSpec, profile: Profile) -> ScenarioResult:
    """Decode ``spec`` through ``Llama.create_completion``, one request at a time (the module docstring).

    Returns
    -------
    ScenarioResult
        ``keys`` = :data:`REPORTED`, ``path`` = :data:`PATH`; per request, in spec order.

    Raises
    ------
    ScenarioUnsupported
        :func:`unsupported_reason`, or a step's row the chain cannot take (found during the run).
    """
    why = unsupported_reason(spec)
    if why:
        raise ScenarioUnsupported(why)
    order = sorted(range(len(spec.requests)), key=lambda i: (spec.requests[i].arrive, i))
    done = {spec.requests[i].id: _one(spec, spec.requests[i], profile) for i in order}
    steps = max([s.step + 1 for rr in done.values() for s in rr.steps], default=0)
    return ScenarioResult({r.id: done[r.id] for r in spec.requests}, steps, keys=REPORTED, path=PATH)
