"""TensorRT-LLM's candidate-beams-array (CBA) beam search, driven step by step from a source checkout.

Used when the checkout's ``sampler_strategy.py`` sends **every**
``early_stopping`` mode to ``beam_search_sampling_batch_cba``
(:attr:`.loader.Engine.beam_path` ``== "candidate_beams"``;
``sampler_strategy.py``@029e223d ``sample``: "Every early_stopping mode goes
through the candidate-beams-array path: TRUE differs only in the done
verdict", and ``FlashInferGroupedStrategySampler.sample_grouped_strategies``,
which picks ``_StrategyImpls.CBABeamSearchStep`` for every beam group;
``beam_search.py``@50aec1cb no longer has the regular step).

One :class:`EngineBeamSearch` per beam request holds the engine's per-slot
store for that request (one sequence slot, ``W`` beams: the tensors of
``BeamSearchStore`` and the CBA pool of ``_CBAFields``, laid out as
``BeamSearchStore.create`` / ``ensure_cba`` / ``prepare_beam_search`` of
beam_search.py@50aec1cb lay them out, on the CPU). Per step, whose is what:

1. each live beam's logits after the penalties and bans — **reference**
   (:meth:`impls.reference.beam.BeamSearch.rewritten`: counts inherited from
   the predecessor, bans from the beam's own history); a beam latched for
   harvesting gets zeros (the engine masks its row);
2. the step — **engine**: ``sampler_strategy.sample`` with the request's
   ``BeamSearch`` strategy tuple (fields as ``resolve_sampling_strategy``
   fills them: ``temperature or 1.0``, ``length_penalty or 0.0``,
   ``diversity_rate or 0.0``, ``BeamSearchEarlyStop.from_raw(early_stopping)``)
   and the ``BeamSearchMetadata`` / ``CBAState`` over the store, which calls
   ``beam_search_sampling_batch_cba`` (eager ``_cba_step_math`` on the CPU):
   temperature, log-softmax, harvest of latched beams, the top ``W +
   max(W, W_in)`` candidates by ``beam_candidate_topk`` (diversity rate, no
   length penalty), end-id candidates ranked within the first ``W`` into the
   pool by ``cum / (gen + 1) ** length_penalty``, slots refilled with the
   best non-end candidates, the done verdict (``TRUE``: pool full;
   ``FALSE`` / ``NEVER``: pool full and its worst entry beats the best
   attainable score), predecessors and cumulative logprobs;
3. what ``sampler.py`` and ``finish_reasons.py`` do after the op — **adapter**
   (neither file is loaded): the emitted tokens are written into
   ``original_tokens`` at their position; each new beam's finish reason is
   the reference's rule (:func:`impls.reference.finish.finish_reason`,
   profile ``trtllm``) and is written into ``first_finish_reasons`` only where
   it is still ``NOT_FINISHED``; a stop word also sets the one-shot
   ``pending_harvest`` latch; the request stops when every one of its ``W``
   entries of ``first_finish_reasons`` is non-zero (the ``should_stop`` test
   of ``BeamSearchHandler.prepare_cba_group_host``, which needs CUDA);
4. re-parenting of histories and penalty counts — **reference**
   (:func:`impls.reference.beam.inherit_counts`);
5. the output — **engine**: ``_prepare_beam_history_cba`` (the best ``W`` of
   pool entries and running slot paths by normalised score) and
   ``finalize_beam`` on a stand-in request (:class:`BeamRequest`); the
   per-beam finish reason and score are attached by the adapter in the
   ranking the engine's code uses (pool entries: ``end_id`` when they end with
   the end id, else ``stop_words``; running paths: the reason in their slot's
   ``first_finish_reasons``), and the tokens of that ranking are checked
   against the engine's output.
"""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Optional

import torch

from ..reference.beam import Beam, BeamSearch, inherit_counts
from ..reference.finish import END_ID, LENGTH, NOT_FINISHED, STOP_WORDS
from ..reference.scenario import _Runner
from ..reference.scenario_types import RequestResult, StepRecord
from .loader import Engine, FinishReason

__all__ = ["BeamRequest", "EngineBeamSearch", "run_scenario", "RAW_EARLY_STOPPING"]

#: A case's ``early_stopping`` as TensorRT-LLM's integer ``sampling_config.early_stopping`` (None: unset):
#: ``BeamSearchEarlyStop`` of beam_search.py@50aec1cb has TRUE = 1, FALSE = 0, NEVER = 2 (HF's ``"never"``).
RAW_EARLY_STOPPING = {None: None, True: 1, False: 0, "never": 2}

#: FinishReason value -> the reference's finish-reason name.
_REASON_NAMES = {int(FinishReason.NOT_FINISHED): NOT_FINISHED, int(FinishReason.END_ID): END_ID,
                 int(FinishReason.STOP_WORDS): STOP_WORDS, int(FinishReason.LENGTH): LENGTH}
_REASON_VALUES = {v: k for k, v in _REASON_NAMES.items()}


class BeamRequest:
    """Stand-in for ``LlmRequest`` as ``_prepare_beam_history_cba`` and ``finalize_beam`` read it.

    Parameters
    ----------
    prompt_len : int
    beam_width : int
    num_generated : int
        Tokens generated so far, this step's included (the request's
        ``max_beam_num_tokens`` is ``prompt_len + num_generated - 1``: the
        history code adds one, "last token is not yet added").
    length_penalty : float or None
        The request's ``sampling_config.length_penalty`` (the code applies
        ``or 0.0``).

    Notes
    -----
    ``is_context_init_state`` is False: the history is read after the
    request's first step, with ``W`` live slots (``_get_beam_width_in`` then
    answers ``get_beam_width_by_iter(for_next_iteration=False) = W``).
    ``finalize_beam`` hands the output beams to :meth:`set_generated_tokens`.
    """

    def __init__(self, prompt_len: int, beam_width: int, num_generated: int, length_penalty: Optional[float]):
        from .loader import LlmRequestState
        self.py_prompt_len = prompt_len
        self.py_beam_width = beam_width
        self.max_beam_num_tokens = prompt_len + num_generated - 1
        self.py_seq_slot = 0
        self.py_return_log_probs = False
        self.state = LlmRequestState.GENERATION_IN_PROGRESS
        self.is_context_init_state = False
        self.sampling_config = SimpleNamespace(length_penalty=length_penalty)
        self.generated: Optional[list] = None

    def get_beam_width_by_iter(self, for_next_iteration: bool = False) -> int:
        """The request's beam width (no variable beam width here)."""
        return self.py_beam_width

    def set_generated_tokens(self, tokens: list) -> None:
        """Receive the output beams (list of list of int), as ``finalize_beam`` hands them over."""
        self.generated = [list(t) for t in tokens]


class EngineBeamSearch(BeamSearch):
    """One beam request decoded by the engine's candidate-beams-array step (see the module docstring).

    Parameters
    ----------
    req, model, profile, dtype, engine_max_seq_len
        As :class:`impls.reference.beam.BeamSearch` (the reference's rewrites,
        finish rule and ``max_seq_len`` resolution are used).
    engine : Engine
        A loaded checkout with ``beam_path == "candidate_beams"``.

    Attributes
    ----------
    beams : list of Beam
        The ``W`` slot beams after each step (the reference's bookkeeping of
        histories and counts).
    done : bool
        The engine's stop test after the last step.
    """

    def __init__(self, req, model, profile, dtype, engine_max_seq_len: Optional[int], engine: Engine):
        super().__init__(req, model, profile, dtype, engine_max_seq_len)
        if engine.beam_path != "candidate_beams":
            raise ValueError(f"EngineBeamSearch needs a checkout whose beam path is 'candidate_beams', not "
                             f"{engine.beam_path!r}")
        self.engine = engine
        bs = engine.beam_search
        f = req.fields
        es = req.early_stopping
        if es not in RAW_EARLY_STOPPING:
            raise ValueError(f"early_stopping={es!r}: expected true, false or \"never\"")
        # sampler_strategy.py@029e223d resolve_sampling_strategy (beam branch).
        t = f.get("temperature")
        self.temperature = float(t) if t else 1.0
        self.length_penalty = float(req.length_penalty or 0.0)
        self.diversity = float(req.diversity_rate or 0.0)
        self.mode = bs.BeamSearchEarlyStop.from_raw(RAW_EARLY_STOPPING[es])
        row = req.row(torch.zeros(1), [])
        end = row.end_id if isinstance(row.end_id, int) and not row.ignore_eos else -1
        self.end_id = int(end)
        self.P = len(self.prompt)
        bound = self._max_total_len()
        self.max_seq_len = int(bound) if math.isfinite(bound) else None
        self._alloc(self.P + 2)

    # -- the store --------------------------------------------------------------
    def _alloc(self, length: int) -> None:
        """Allocate (or widen to ``length`` positions) the per-slot tensors, keeping what they hold."""
        W, i32 = self.W, torch.int32
        old = getattr(self, "_store", None)
        if old is not None and old["cache_indirection"].shape[-1] >= length:
            return
        new = {
            # BeamSearchStore.create / prepare_beam_search: cache indirection and tokens 0, cum 0,
            # NOT_FINISHED, no latch; _CBAFields (ensure_cba + prepare_beam_search): pool tokens PAD,
            # cum 0, normed -inf, lengths 0.
            "cache_indirection": torch.zeros((1, W, length), dtype=i32),
            "cache_indirection_buffer": torch.zeros((1, W, length), dtype=i32),
            "original_tokens": torch.zeros((1, W, length), dtype=i32),
            "original_log_probs": torch.zeros((1, W, length), dtype=torch.float32),
            "cba_tokens": torch.full((1, W, length), int(self.engine.beam_search.BEAM_SEARCH_PAD_TOKEN), dtype=i32),
            "cba_log_probs": torch.zeros((1, W, length), dtype=torch.float32),
        }
        if old is not None:
            n = old["cache_indirection"].shape[-1]
            for k, v in new.items():
                v[..., :n] = old[k]
            old.update(new)
            return
        new.update({
            "cum_log_probs": torch.zeros((1, W), dtype=torch.float32),
            "new_log_probs": torch.zeros((1, W), dtype=torch.float32),
            "first_finish_reasons": torch.full((1, W), int(FinishReason.NOT_FINISHED), dtype=i32),
            "pending_harvest": torch.zeros((1, W), dtype=torch.bool),
            "predecessor_beams": torch.zeros((1, W), dtype=i32),
            "cba_cum_log_probs": torch.zeros((1, W), dtype=torch.float32),
            "cba_normed_scores": torch.full((1, W), float("-inf"), dtype=torch.float32),
            "cba_lengths": torch.zeros((1, W), dtype=i32),
            "batch_dones": torch.zeros(1, dtype=torch.bool),
        })
        self._store = new

    def _metadata(self, gen: int):
        """``BeamSearchMetadata`` with its ``CBAState`` over the store (BeamSearchHandler.build_metadata)."""
        bs, s = self.engine.beam_search, self._store
        i32 = torch.int32
        cba = bs.CBAState(
            end_ids=torch.tensor([self.end_id], dtype=i32), prompt_lens=torch.tensor([self.P], dtype=i32),
            original_tokens=s["original_tokens"], batch_dones=s["batch_dones"], cba_tokens=s["cba_tokens"],
            cba_cum_log_probs=s["cba_cum_log_probs"], cba_normed_scores=s["cba_normed_scores"],
            cba_lengths=s["cba_lengths"], original_log_probs=s["original_log_probs"],
            cba_log_probs=s["cba_log_probs"], cba_caps=torch.tensor([self.W], dtype=i32),
            max_seq_len=self.max_seq_len if self.max_seq_len is not None else s["cba_tokens"].shape[-1],
            # build_metadata: max_beam_num_tokens + 2 - prompt_len, before this step's token
            max_gen_len=gen + 2)
        return bs.BeamSearchMetadata(
            cache_indirection=s["cache_indirection"], cache_indirection_buffer=s["cache_indirection_buffer"],
            cum_log_probs=s["cum_log_probs"], new_log_probs=s["new_log_probs"],
            seq_slots=torch.zeros(1, dtype=torch.int64), seq_lens=torch.tensor([self.P + gen], dtype=i32),
            finished_beams=s["first_finish_reasons"], pending_harvest=s["pending_harvest"],
            predecessor_beams=s["predecessor_beams"], beam_idx_arange=torch.arange(self.W, dtype=i32),
            stop_past_tokens=None, cba=cba)

    # -- one step ----------------------------------------------------------------
    def step(self, step: int) -> StepRecord:
        """One engine step (module docstring, 1-4); returns the slots' tokens, predecessors and cum logprobs.

        Raises
        ------
        RowError, ModelError
            A live beam's logits fail (as :meth:`BeamSearch.rewritten`).
        RuntimeError
            The engine emitted a token outside the vocabulary for a slot.
        """
        ss, s = self.engine.sampler_strategy, self._store
        V = self.model.vocab
        gen = len(self.beams[0].tokens)
        w_in = len(self.beams)
        self._alloc(self.P + gen + 2)
        s = self._store
        latched = s["pending_harvest"][0, :w_in].tolist()
        rows = [torch.zeros(V, dtype=self.dtype) if latched[b] else self.rewritten(beam)
                for b, beam in enumerate(self.beams)]
        strategy = ss.BeamSearch(tag="beam_search", beam_width_in=w_in, beam_width_out=self.W,
                                 temperature=self.temperature, length_penalty=self.length_penalty,
                                 diversity_rate=self.diversity, early_stopping=self.mode, row_stride=w_in)
        tokens, _, _ = ss.sample(strategy, torch.stack(rows).to(torch.float32), group_metadata=self._metadata(gen),
                                 return_probs=False)
        W = self.W
        toks = [int(t) for t in tokens[0, :W].tolist()]
        preds = [int(p) for p in s["predecessor_beams"][0, :W].tolist()]
        cums = [float(c) for c in s["cum_log_probs"][0, :W].tolist()]
        for i, (b, t) in enumerate(zip(preds, toks)):
            if not (0 <= b < w_in and 0 <= t < V):
                raise RuntimeError(f"beam_search_sampling_batch_cba gave slot {i} predecessor {b} and token {t} "
                                   f"({w_in} beams in, vocab {V})")
        # sampler.py (not loaded): the emitted tokens at their position.
        s["original_tokens"][0, :W, self.P + gen] = torch.tensor(toks, dtype=torch.int32)
        new = []
        reasons = s["first_finish_reasons"][0]
        for i, (b, t, cum) in enumerate(zip(preds, toks, cums)):
            parent = self.beams[b]
            counts = inherit_counts(self.beams, b, i)
            counts[t] += 1
            # finish_reasons.py (not loaded): the first reason sticks; a stop word is latched for the harvest.
            reason = self._finish(parent, t)
            if reason != NOT_FINISHED and int(reasons[i]) == int(FinishReason.NOT_FINISHED):
                reasons[i] = _REASON_VALUES[reason]
            if reason == STOP_WORDS:
                s["pending_harvest"][0, i] = True
            new.append(Beam(parent.tokens + [t], counts, cum))
        self.beams = new
        # BeamSearchHandler.prepare_cba_group_host: should_stop = every one of the W entries is non-zero.
        self.done = bool((s["first_finish_reasons"][0, :W] > 0).all())
        return StepRecord(step, tokens=toks, predecessors=preds, cum_logprobs=cums)

    # -- output ------------------------------------------------------------------
    def finalize(self, result: RequestResult, reason: Optional[str] = None) -> None:
        """Write the engine's output beams into ``result`` (best first).

        Parameters
        ----------
        result : RequestResult
        reason : str or None
            ``"none"`` when the scenario ended before the engine stopped the
            request: the history is then built as if it had (pool and running
            beams ranked together) and the running beams report ``"none"``.

        Raises
        ------
        RuntimeError
            The adapter's ranking (for reasons and scores) does not give the
            engine's tokens.
        """
        bs, s, W = self.engine.beam_search, self._store, self.W
        gen = len(self.beams[0].tokens)
        req = BeamRequest(self.P, W, gen, self.req.length_penalty)
        # prepare_cba_group_host: the slices of the host snapshot.
        attn = min(s["cache_indirection"].shape[-1], req.max_beam_num_tokens + 1)
        snap = min(s["cba_tokens"].shape[-1], req.max_beam_num_tokens + 2 - self.P)
        group = bs.CBAGroupHost(
            pos={0: 0}, should_stop=torch.tensor([True]), cache_indirection=s["cache_indirection"][:, :, :attn],
            original_tokens=s["original_tokens"][:, :, :attn], cum=s["cum_log_probs"],
            cba_tokens=s["cba_tokens"][:, :, :snap], cba_cum=s["cba_cum_log_probs"],
            cba_normed=s["cba_normed_scores"], cba_lengths=s["cba_lengths"], original_log_probs=None,
            cba_log_probs=None)
        builder = bs._prepare_beam_history_cba(req, cba_group=group)
        history = builder() if builder is not None else None
        if history is None:
            result.beams, result.cum_logprobs, result.scores, result.beam_finish_reasons = [], [], [], []
            result.tokens, result.finish_reason = [], reason or NOT_FINISHED
            return
        bs.finalize_beam(req, history)
        beams = req.generated
        # Reasons and scores, in the ranking _prepare_beam_history_cba uses: [pool | running], normalised.
        pool_normed = s["cba_normed_scores"][0]
        running = s["cum_log_probs"][0, :W]
        lp = float(self.req.length_penalty or 0.0)
        running_normed = running / float(gen) ** lp if lp != 0.0 else running
        merged = torch.cat([pool_normed, running_normed])
        order = torch.argsort(merged, descending=True)[:W].tolist()
        scores, reasons = [], []
        pad = int(bs.BEAM_SEARCH_PAD_TOKEN)
        for out_idx, j in enumerate(order):
            if not math.isfinite(float(merged[j])):
                scores.append(float("-inf"))
                reasons.append(NOT_FINISHED)
                expect = []
            elif j < W:
                n = int(s["cba_lengths"][0, j])
                expect = [int(t) for t in s["cba_tokens"][0, j, :n].tolist()]
                scores.append(float(merged[j]))
                reasons.append(END_ID if expect and expect[-1] == self.end_id else STOP_WORDS)
            else:
                a = j - W
                expect = list(self.beams[a].tokens)
                scores.append(float(merged[j]))
                reasons.append(reason or _REASON_NAMES.get(int(s["first_finish_reasons"][0, a]), NOT_FINISHED))
            if [t for t in expect if t != pad] != beams[out_idx]:
                raise RuntimeError(f"output beam {out_idx}: the engine's tokens {beams[out_idx]} are not those of "
                                   f"entry {j} of its ranking ({expect})")
        result.beams = beams
        result.cum_logprobs = [float(c) for c in history.cum_logprobs.tolist()]
        result.scores = scores
        result.beam_finish_reasons = reasons
        result.tokens = list(beams[0]) if beams else []
        result.finish_reason = reason or (reasons[0] if reasons else NOT_FINISHED)


class _EngineRunner(_Runner):
    """The reference's scenario runner with beam requests decoded by :class:`EngineBeamSearch`."""

    def admit(self, st, step: int) -> None:
        super().admit(st, step)
        if st.beam is not None:
            st.beam = EngineBeamSearch(st.request, self.model_of(st.request), self.profile, self.session.dtype,
                                       self.spec.max_seq_len, self.session.engine)


def run_scenario(spec, profile, session):
    """Decode ``spec`` as :func:`impls.reference.scenario.run_scenario` does, beam requests by the engine.

    Parameters
    ----------
    spec : ScenarioSpec
    profile : Profile
    session : impls.trtllm.session.TrtllmSession
        Its ``engine`` must have ``beam_path == "candidate_beams"``.

    Returns
    -------
    ScenarioResult
    """
    return _EngineRunner(spec, profile, session).run()
