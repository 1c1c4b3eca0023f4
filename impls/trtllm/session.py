"""The TensorRT-LLM adapter's session: the reference's step with engine stages swapped in.

:class:`TrtllmSession` is a :class:`~impls.reference.sampler.ReferenceSession`
whose stages that TensorRT-LLM's loaded source can compute are replaced by
calls into that source (:mod:`.loader`); the other stages stay the
reference's. Per row, in order:

1. batch and input checks, validation and mode resolution — **reference**
   (:func:`impls.reference.modes.resolve`; TensorRT-LLM's
   ``SamplingParams._validate`` / ``params_imply_greedy_decoding`` need the
   bindings and are not loaded). For an active top-p decay the runtime top-p
   is recomputed by the **engine**'s ``Fusions.top_p_decay_update`` (eager
   body) replayed over the row's generated tokens;
2. logit bias — **adapter** (a dense add; ``embedding_bias.py`` is a Triton
   kernel on CUDA logits only);
3. occurrence penalties — **engine**: ``Fusions.update_occurrence_workspace``
   fills the counts workspace and ``Fusions._apply_occurrence_penalties_impl``
   (eager body of ``apply_batched_occurrence_penalties``) gathers it and
   applies ``occurrence_penalized_logits``. Which tokens are counted (prompt
   after ``prompt_ignore_length``, then generated; the ignored prefix as the
   repetition-only mask; ids outside ``[0, V)`` dropped; a
   ``prompt_ignore_length`` at or below 0 ignored) is the **adapter**'s,
   following the ``PenaltyStore`` docstring of ``penalties.py``, which is not
   loaded;
4. bans — **engine**: ``SynchronousTokenBanHandler.generate_ban_list`` and
   ``apply_ban_list`` (min-length end id, bad words, no-repeat-ngram) on a
   stand-in request;
5. GREEDY: **engine** ``greedy_search_sampling_batch``. SAMPLING: the kept
   set and the distribution are the **engine**'s vanilla op
   ``top_k_top_p_sampling_batch`` (temperature, min-p, top-k, top-p); the
   draw is the **reference**'s canonical Philox Gumbel-max over that kept set
   (TensorRT-LLM's production draw, FlashInfer's sampling kernel with a
   per-row seed and offset, is CUDA code and is not run). The op's own
   ``torch.multinomial`` token is kept in ``extra`` and must lie in the
   support. Seeds and offsets of the draw are the reference's
   (:class:`~impls.reference.seeds.SeedManager`, profile ``trtllm``); the
   **engine**'s ``_SeedManager`` is driven alongside and its ``(seed,
   offset)`` per row is kept in ``extra["engine_seed_offset"]``;
6. RAW / PROCESSED logprobs, rank, top logprobs — **reference**, from the
   engine's rewritten logits and distribution (``logprobs.py`` needs Triton
   kernels);
7. finish reason — **engine**: ``finish_reasons.py``'s
   ``FinishReasonsHandler`` over the step's tokens (:mod:`.finish`), where
   the checkout has the file; else the **reference**'s
   (:func:`impls.reference.finish.finish_reason`, and
   :attr:`TrtllmSession.stages_used` says so).

Beam search on the candidate-beams-array path (a checkout whose
``sampler_strategy.py`` sends every ``early_stopping`` mode there,
:attr:`.loader.Engine.beam_path` ``"candidate_beams"``) is driven by
:mod:`.cba`, which says whose each stage is. Beam search on the regular path
(scenarios, when the checkout's ``beam_search.py`` still has
``beam_search_sampling_batch``): per
step, the beams' rewritten logits are the **reference**'s
(:meth:`impls.reference.beam.BeamSearch.rewritten`: penalties from each
beam's inherited counts, bans from its history); temperature, log-softmax,
the masking of finished beams, the candidate ranking (length penalty,
diversity rate) and the choice of the ``W`` new beams with their
predecessors and cumulative logprobs are the **engine**'s
``beam_search_sampling_batch`` (:meth:`TrtllmSession._beam_select`, the runner's ``beam_select`` hook); the
re-parenting of histories and counts and the finish reasons are the
**reference**'s.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Optional, Sequence

import torch

from ..base import Row, RowError, RowResult
from ..profiles import Profile
from ..reference import rewrites as ref_rewrites
from ..reference.modes import GREEDY, SAMPLING, TOP_P_MIN_DEFAULT, Resolved, _decay_active, effective_seed, resolve
from ..reference.sampler import ReferenceSession
from .finish import EngineFinish
from .loader import Engine, FinishReason, eager

__all__ = ["TrtllmSession", "FakeRequest"]


class FakeRequest:
    """Stand-in for TensorRT-LLM's ``LlmRequest``: the attributes and accessors the loaded code reads.

    ``token_ban.py`` reads ``py_min_length`` (a one-element list),
    ``py_end_id`` / ``py_original_end_id`` (with ``ignore_eos`` the engine
    sets the end id to -1 and keeps the original for the min-length ban),
    ``py_orig_prompt_len``, ``py_bad_words``, ``py_seq_slot``,
    ``get_tokens(beam)`` (prompt + generated), ``get_num_tokens(beam)`` and
    ``get_last_tokens(beam)``. ``seed_manager.py`` reads ``py_is_draft``,
    ``py_seq_slot``, ``py_request_id`` and, through the ``sampler_common``
    stand-in, ``py_random_seed``.
    """

    def __init__(self, row: Row, seed: Optional[int] = None):
        end = row.end_id if row.end_id is not None else -1
        self.py_min_length = [row.min_length] if row.min_length else None
        self.py_original_end_id = end
        self.py_end_id = -1 if row.ignore_eos else end
        self.py_orig_prompt_len = len(row.prompt)
        self.py_bad_words = [list(w) for w in row.bad_words] or None
        self.py_seq_slot = row.slot
        self.py_request_id = row.request_id
        self.py_is_draft = False
        self.py_random_seed = seed
        self._tokens = [int(t) for t in list(row.prompt) + list(row.generated)]

    def get_tokens(self, beam_idx: int = 0):
        """Prompt + generated token ids (list of int; one beam: ``beam_idx`` is ignored)."""
        return list(self._tokens)

    def get_num_tokens(self, beam_idx: int = 0) -> int:
        """Number of prompt + generated tokens."""
        return len(self._tokens)

    def get_last_tokens(self, beam_idx: int = 0) -> int:
        """The last token id (prompt or generated)."""
        return self._tokens[-1]


class TrtllmSession(ReferenceSession):
    """Per-slot state and the batched step, with TensorRT-LLM's loaded functions as stages.

    Parameters
    ----------
    engine : Engine
        The loaded checkout (:func:`.loader.load`).
    profile : Profile
        ``trtllm``: the reference stages (validation, draw, logprobs, finish
        reasons) follow it.
    device : str
        Only ``"cpu"`` is used by the harness here.
    """

    def __init__(self, engine: Engine, profile: Profile, device: str = "cpu"):
        super().__init__(profile, device, torch.float32)
        self.engine = engine
        v = engine.vanilla
        self._apply_penalties = eager(v.Fusions._apply_occurrence_penalties_impl)
        self._decay_update = eager(v.Fusions._top_p_decay_update_impl)
        self._bans = engine.token_ban.SynchronousTokenBanHandler()
        self._engine_seeds = engine.seed_manager._SeedManager(max_num_sequences=1, global_seed=profile.global_seed)
        self._probs: dict = {}
        self._gen = torch.Generator().manual_seed(0)
        self._finish = EngineFinish(engine.finish_reasons) if engine.finish_reasons is not None else None
        #: Stages some results took from other code than :attr:`impls.trtllm.TrtllmImpl.stages` declares.
        self.stages_used: dict = {} if self._finish is not None else {"finish": "reference"}
        if engine.beam_path == "regular":
            # the scenario runner's hook (impls.reference.beam); on the candidate-beams path the whole step is
            # the engine's (impls.trtllm.cba)
            self.beam_select = self._beam_select

    # -- beam search --------------------------------------------------------------
    def _beam_select(self, logits: torch.Tensor, cum: torch.Tensor, finished: list, gen_lengths: list, W: int,
                     temperature: Optional[float], length_penalty: float, diversity_rate: float) -> list:
        """One beam step's selection by the engine's ``beam_search_sampling_batch`` (one request).

        Parameters
        ----------
        logits : torch.Tensor
            ``(W_in, V)`` the beams' logits after the rewrites, before
            temperature (rows of finished beams are ignored: the engine masks
            them from ``finished``).
        cum : torch.Tensor
            ``(W_in,)`` cumulative logprobs.
        finished : list of bool
            Which beams are finished (frozen in their slots).
        gen_lengths : list of int
            Generated tokens per beam (frozen for finished beams).
        W : int
            Beam width out.
        temperature, length_penalty, diversity_rate : float
            The request's; 0 or None disables the last two (as the engine).

        Returns
        -------
        list of (float, int, int)
            ``(cum, predecessor, token)`` per new beam, best first; the token
            is ``BEAM_SEARCH_PAD_TOKEN`` (-1) where the predecessor is
            finished.

        Notes
        -----
        The engine's per-sampler store is built for one sequence slot with
        ``max(W_in, W)`` beams: ``finished_beams`` holds ``END_ID`` for a
        finished beam and ``NOT_FINISHED`` otherwise (only the difference is
        read), ``beam_gen_lengths`` the generated lengths (read when the
        length penalty is on), the cache indirection zeros (written, never
        read back here).
        """
        bs = self.engine.beam_search
        w_in, _V = logits.shape
        wmax = max(w_in, W)
        pos = max(gen_lengths) if gen_lengths else 0
        i32 = torch.int32
        fin = torch.full((1, wmax), int(FinishReason.NOT_FINISHED), dtype=i32)
        fin[0, :w_in] = torch.tensor([int(FinishReason.END_ID if f else FinishReason.NOT_FINISHED) for f in finished],
                                     dtype=i32)
        cums = torch.zeros((1, wmax), dtype=torch.float32)
        cums[0, :w_in] = cum.to(torch.float32)
        lengths = torch.zeros((1, wmax), dtype=i32)
        lengths[0, :w_in] = torch.tensor(gen_lengths, dtype=i32)
        meta = bs.BeamSearchMetadata(
            cache_indirection=torch.zeros((1, wmax, pos + 1), dtype=i32),
            cache_indirection_buffer=torch.zeros((1, wmax, pos + 1), dtype=i32),
            cum_log_probs=cums, new_log_probs=torch.zeros((1, wmax), dtype=torch.float32),
            seq_slots=torch.zeros(1, dtype=torch.int64), seq_lens=torch.tensor([pos], dtype=i32),
            finished_beams=fin, predecessor_beams=torch.zeros((1, wmax), dtype=i32),
            seq_offsets=torch.zeros(1, dtype=torch.int64), beam_idx_arange=torch.arange(wmax, dtype=i32),
            beam_gen_lengths=lengths)
        tokens, _ = bs.beam_search_sampling_batch(
            logits.to(torch.float32), beam_width_in=w_in, beam_width_out=W, beam_search_args=meta,
            temperature=temperature, length_penalty=length_penalty, diversity_rate=diversity_rate, return_probs=False)
        return [(float(meta.cum_log_probs[0, i]), int(meta.predecessor_beams[0, i]), int(tokens[0, i]))
                for i in range(W)]

    # -- engine stages ----------------------------------------------------------
    def _engine_penalties(self, x: torch.Tensor, row: Row) -> torch.Tensor:
        if not ref_rewrites.penalty_active(row):  # penalties.py@0a0ceb0c has_occurrence_penalty: the same test
            return x
        V = x.shape[-1]
        v = self.engine.vanilla
        prompt = [int(t) for t in row.prompt]
        pil = row.prompt_ignore_length or 0
        pil = min(pil, len(prompt)) if pil > 0 else 0  # penalties.py: min(prompt_ignore_length, prompt_len)
        in_vocab = lambda ts: [t for t in ts if 0 <= t < V]  # noqa: E731
        counted = in_vocab(prompt[pil:] + [int(t) for t in row.generated])
        prefix = in_vocab(prompt[:pil])
        counts = torch.zeros((1, V), dtype=torch.int32)
        prefix_seen = torch.zeros((1, V), dtype=torch.bool) if pil > 0 else None
        v.Fusions.update_occurrence_workspace(
            counts, prefix_seen,
            torch.zeros(len(counted), dtype=torch.int64), torch.tensor(counted, dtype=torch.int64),
            torch.zeros(len(prefix), dtype=torch.int64) if prefix_seen is not None else None,
            torch.tensor(prefix, dtype=torch.int64) if prefix_seen is not None else None)
        f32 = lambda val, default: torch.tensor([default if val is None else val], dtype=torch.float32)  # noqa: E731
        logits = x.clone().unsqueeze(0)
        self._apply_penalties(
            logits, counts, prefix_seen, torch.ones(1, dtype=torch.bool), torch.zeros(1, dtype=torch.bool),
            torch.zeros((1, 1, 1), dtype=torch.int32), torch.zeros(1, dtype=torch.int64),
            torch.zeros(1, dtype=torch.int64), torch.ones(1, dtype=torch.int64),
            f32(row.repetition_penalty, 1.0), f32(row.presence_penalty, 0.0), f32(row.frequency_penalty, 0.0),
            None, 1, False)
        return logits[0]

    def _engine_bans(self, x: torch.Tensor, row: Row) -> torch.Tensor:
        n = row.no_repeat_ngram_size
        if not (row.min_length or row.bad_words or n is not None):
            return x
        req = FakeRequest(row)
        bans = self._bans.generate_ban_list([req], [1], [1], [n])
        logits = x.clone().unsqueeze(0)
        self._bans.apply_ban_list(logits, bans)
        return logits[0]

    def _engine_decayed_top_p(self, row: Row, p0: float) -> float:
        """The runtime top-p after the row's generated tokens, by the engine's decay update."""
        f = lambda val: torch.tensor([val], dtype=torch.float32)  # noqa: E731
        runtime = f(p0)
        reset = (row.top_p_reset_ids or [-1])[0]
        args = dict(initial_top_p=f(p0), top_p_decay=f(row.top_p_decay),
                    top_p_min=f(row.top_p_min if row.top_p_min is not None else TOP_P_MIN_DEFAULT),
                    reset_ids=torch.tensor([reset], dtype=torch.int32), is_decay_slot=torch.ones(1, dtype=torch.bool),
                    sampled_slots=torch.zeros(1, dtype=torch.int64))
        for tok in row.generated:
            self._decay_update(runtime_top_p=runtime, step_tokens=torch.tensor([int(tok)], dtype=torch.int32), **args)
        return float(runtime[0])

    # -- ReferenceSession stages, overridden -------------------------------------
    def _prepare(self, row: Row) -> tuple[Resolved, torch.Tensor, torch.Tensor]:
        if row.logits.dim() != 1:
            raise RowError("bad_logits", f"logits must be 1-D, got shape {tuple(row.logits.shape)}")
        if bool(torch.isnan(row.logits).any()):
            where = torch.nonzero(torch.isnan(row.logits)).flatten()[:5].tolist()
            raise RowError("nan_logits", f"NaN at token ids {where}")
        res = resolve(row, self.profile)
        if res.mode == SAMPLING and _decay_active(row):
            p0 = row.top_p if row.top_p is not None else 1.0
            res = dataclasses.replace(res, top_p=self._engine_decayed_top_p(row, p0))
        x0 = row.logits.to(self.device).to(self.dtype)
        x = x0
        for name in self.profile.rewrite_order:
            if name == "logit_bias":
                x = ref_rewrites.apply_logit_bias(x, row, self.profile)
            elif name == "repetition":
                x = self._engine_penalties(x, row)  # repetition, then presence/frequency, in one op
            elif name == "min_length":
                x = self._engine_bans(x, row)  # min_length, bad words and no-repeat-ngram in one pass
            elif name == "dry":
                pass   # TensorRT-LLM has no DRY: the adapter declares no "dry" feature, so no row sets it
            elif name == "allowed_token_ids":
                pass   # not a TensorRT-LLM parameter: the adapter declares no "allowed_token_ids" feature
            elif name == "custom":
                pass   # logits post-processors run in the model engine, not the sampler files loaded here:
                #        the adapter declares no "logits_processors" feature, so no row sets them
            elif name not in ("presence_frequency", "bad_words", "no_repeat_ngram"):
                raise ValueError(f"rewrite {name!r} of profile {self.profile.name} has no engine stage")
        if torch.isnan(x).any():
            raise RowError("nan_logits", "a logits rewrite produced NaN (e.g. -inf logit plus +inf bias)")
        return res, x0, x

    def _choose_deterministic(self, res: Resolved, x: torch.Tensor) -> int:
        if not (x > float("-inf")).any():
            raise RowError("no_valid_token", "every token is -inf after bias, penalties and bans")
        if res.mode != GREEDY:
            return super()._choose_deterministic(res, x)
        tok, _ = self.engine.vanilla.greedy_search_sampling_batch(x.unsqueeze(0), return_probs=False)
        return int(tok[0])

    def _kept(self, res: Resolved, x: torch.Tensor, profile: Optional[Profile] = None) -> torch.Tensor:
        # ``profile``: the reference's batch variant of the session's profile (batch_min_p_filters, SGLang's
        # FlashInfer backend only); the trtllm profiles have none, and the kept set here is the engine's op
        if torch.isposinf(x).any():
            raise RowError("posinf_logits", "+inf logit in a sampling row: the distribution is undefined")
        if not (x > float("-inf")).any():
            raise RowError("no_valid_token", "every token is -inf after bias, penalties and bans")
        try:
            tok, probs = self.engine.vanilla.top_k_top_p_sampling_batch(
                x.unsqueeze(0), temperature=res.temperature, top_k=res.top_k or None, top_p=res.top_p,
                min_p=res.min_p, generator=self._gen)
        except (RuntimeError, IndexError, AssertionError) as e:
            raise RowError("engine_error", f"ops/vanilla.py top_k_top_p_sampling_batch raised "
                                           f"{type(e).__name__}: {e}") from None
        probs = probs[0]
        if not torch.isfinite(probs).all():
            raise RowError("engine_error",
                           "ops/vanilla.py top_k_top_p_sampling_batch returned non-finite probabilities")
        keep = probs > 0
        t = int(tok[0])
        if not bool(keep[t]):
            raise RowError("engine_error", f"the vanilla op's own multinomial drew token {t}, outside its support")
        self._probs[id(keep)] = (keep, probs, t)
        return keep

    def _annotate(self, row: Row, staged, result: RowResult) -> None:
        super()._annotate(row, staged, result)
        keep = staged[3]
        if keep is not None and id(keep) in self._probs:
            _, probs, t = self._probs[id(keep)]
            result.probs = probs.to(result.rewritten_logits.dtype)
            p = float(probs[result.token])
            result.processed_logprob = math.log(p) if p > 0 else float("-inf")
            result.extra["engine_multinomial_token"] = t

    def _draw(self, rows, staged, draw_idx, out) -> None:
        super()._draw(rows, staged, draw_idx, out)
        if not draw_idx:
            return
        # TensorRT-LLM's own per-slot bookkeeping, driven alongside (not used for the draw).
        sm = self._engine_seeds
        need = max(rows[i].slot for i in draw_idx) + 1
        if need > sm._seeds.numel():
            grown = type(sm)(max_num_sequences=need, global_seed=self.profile.global_seed)
            n = sm._seeds.numel()
            grown._seeds[:n], grown._offsets[:n] = sm._seeds, sm._offsets
            grown._slot_owner[:n], grown._slot_seeded[:n] = sm._slot_owner, sm._slot_seeded
            sm = self._engine_seeds = grown
        reqs = [FakeRequest(rows[i], effective_seed(rows[i], self.profile)) for i in draw_idx]
        sm.observe(reqs)
        slots = [rows[i].slot for i in draw_idx]
        rs = sm.make_row_seeds(slots, device=torch.device("cpu"))
        for j, i in enumerate(draw_idx):
            if out[i] is not None and out[i].error is None:
                out[i].extra["engine_seed_offset"] = [int(rs.seed[j]), int(rs.offset[j])]
        sm.advance(slots)

    def step(self, rows: Sequence[Row]) -> list:
        """One step (see the module docstring for which stage is whose)."""
        self._probs = {}
        try:
            out = super().step(rows)
        finally:
            self._probs = {}
        if self._finish is not None:
            tokens = [r.token if r.error is None else None for r in out]
            try:
                reasons = self._finish.reasons(rows, tokens)
            except Exception as e:  # the engine's handler failed: the step's rows fail with its message
                err = RowError("engine_error", f"finish_reasons.py FinishReasonsHandler: {type(e).__name__}: {e}")
                return [r if r.error is not None else RowResult.failed(err, r.mode) for r in out]
            for r, reason in zip(out, reasons):
                if reason is not None:
                    r.finish_reason = reason
        return out

    def sample_many(self, row: Row, seeds: Sequence[int], chunk: Optional[int] = None) -> torch.Tensor:
        """Counts of canonical draws from the engine-computed kept set (see :meth:`ReferenceSession.sample_many`)."""
        self._probs = {}
        try:
            return super().sample_many(row, seeds, chunk)
        finally:
            self._probs = {}
