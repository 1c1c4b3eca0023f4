"""Beam search with re-parenting (SEMANTICS §3, "beam re-parenting").

One :class:`BeamSearch` per request; :meth:`BeamSearch.step` runs one
decoding step over all its beams. Per step, in order:

1. per beam ``b`` (its history is ``prompt + tokens_b``): the scripted
   model's logits; the rewrites of ``profile.rewrite_order`` with the
   occurrence penalties read from the beam's **own counts** (inherited from
   its predecessor, never re-walked) and the bans from its own history;
   then ``log_softmax(x / T)`` (``profile.beam_logprob_stage ==
   "after_rewrites"``, TensorRT-LLM: penalties -> bans -> temperature ->
   log-softmax) or ``log_softmax(x)`` followed by the processors on the
   log-probs with no temperature (``"processors_on_logprobs"``, Hugging
   Face ``_beam_search``), or ``log_softmax(x)`` with no rewrite and no
   temperature (``"raw_logits"``, vLLM's raw logprobs);
2. candidate score ``s = cum_b + logprob``; the first step has one beam;
3. selection, by ``profile.beam_early_stopping_true`` and the request's
   ``early_stopping``:

   * **frozen slots** (TensorRT-LLM's regular path, ``early_stopping =
     True``): the best ``W`` candidates over all beams by the key
     ``(s + rate * b) / L ** length_penalty`` (``L`` = the candidate's
     generated length; no division when the penalty is 0). A beam that
     finished stays in its slot with its score frozen and competes with one
     candidate (logprob 0, token :data:`~.scenario.PAD`); it can be evicted.
     The request is done when all ``W`` slots hold finished beams. Output:
     the slots in order;
   * **pool** (TensorRT-LLM's candidate-beams array for ``False`` /
     ``"never"``, and for every mode from beam_search.py@50aec1cb; Hugging
     Face for every mode): the best ``2W`` candidates
     by ``s + rate * b``; finishing candidates ranked within the first ``W``
     (``profile.beam_pool_candidates == "first_w"``; ``"per_beam_top_2w"``,
     vLLM: every one among its beam's ``2W`` most likely tokens) enter a
     pool of ``W`` finished hypotheses scored by :meth:`BeamSearch.score`
     (``s / L ** length_penalty``, ``L`` by ``profile.beam_score_length``:
     generated length, end token included, prompt never; or vLLM's whole
     sequence less a final end token); the beams continue with the first
     ``W`` non-finishing candidates. Done (``profile.beam_done_rule ==
     "verdict"``) when the pool is full and its worst score is at least the
     best attainable one (``early_stopping = True``: as soon as it is full);
     ``"max_tokens"`` (vLLM): only at the length limit or with no beam left;
     output: the best ``W`` of the pool (plus the running beams when
     ``profile.beam_final_includes_running``; a running beam the done
     verdict stops reports ``profile.beam_done_running_reason``, one the
     length limit stops ``length``);

4. **re-parenting**: each new beam records its predecessor, copies the
   predecessor's token history and penalty counts (:func:`inherit_counts`)
   and folds in the one token it emitted;
5. per-beam finish reasons (:func:`.finish.finish_reason`).

Cumulative logprobs in the output are never normalised. Sources:
TensorRT-LLM ``tensorrt_llm/_torch/pyexecutor/sampler/beam_search.py``
@095443e5 (``beam_candidate_topk``, ``beam_search_sampling_batch``,
``_cba_step_math``, ``_prepare_beam_history_cba``), ``penalties.py``
@0a0ceb0c (per-beam counts, re-parented each step), seed 000 § 罚项与
beam search:重新挂父; transformers 5.24.0 ``generation/utils.py``
(``_beam_search`` and helpers); vLLM 0.32.0
``entrypoints/generate/beam_search/offline.py`` (``beam_search``,
``_beam_search_step``) and ``utils.py`` (``get_beam_search_score``). The
frozen-slots ranking key always uses the generated length.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Optional

import torch

from ..base import RowError
from ..params import end_id_set
from ..profiles import Profile
from . import bans, rewrites
from .finish import finish_reason
from .scenario_types import PAD, RequestResult, RequestSpec, StepRecord, fail_request
from .scripted import ModelError, ScriptedModel

__all__ = ["Beam", "Hypothesis", "BeamSearch", "inherit_counts", "beam_step"]


@dataclass
class Beam:
    """One live beam (or a frozen finished one).

    Attributes
    ----------
    tokens : list of int
        Generated tokens, never :data:`~.scenario.PAD`.
    counts : collections.Counter
        Occurrences of ``tokens`` (the beam's row of the penalty workspace).
    cum : float
        Unnormalised cumulative logprob (working dtype value).
    finish : str or None
        Finish reason once the beam finished (frozen path), or a stop word
        latched for harvesting (pool path).
    """

    tokens: list
    counts: Counter
    cum: float
    finish: Optional[str] = None


@dataclass
class Hypothesis:
    """A finished hypothesis of the pool: tokens, raw ``cum``, normalised ``score``, ``finish`` reason."""

    tokens: list
    cum: float
    score: float
    finish: str


def inherit_counts(beams: list, predecessor: int, index: int) -> Counter:
    """The penalty counts new beam ``index`` starts from: a copy of its predecessor's.

    Parameters
    ----------
    beams : list of Beam
        The beams of the previous step.
    predecessor : int
        The beam the new beam continues (its entry in the predecessor map).
    index : int
        The new beam's slot (unused by the correct rule; a re-parenting bug
        would read ``beams[index]``).

    Returns
    -------
    collections.Counter
        A fresh copy.

    Source: seed 000 § 罚项与 beam search ("beam b of slot s takes over the
    counts of predecessor_beams[s, b] before this step's token is folded
    in"); TensorRT-LLM penalties.py@0a0ceb0c ``PenaltyStore`` (one counts row
    per beam, re-parented each step).
    """
    return Counter(beams[predecessor].counts)


def _pow(length: float, lp: float) -> float:
    return float(length) ** lp


class BeamSearch:
    """The beam state of one request across steps.

    Parameters
    ----------
    req : RequestSpec
        ``beam_width`` ``W``, ``length_penalty``, ``early_stopping``,
        ``diversity_rate`` and the row fields.
    model : ScriptedModel
    profile : Profile
        Reads every ``beam_*`` field, ``rewrite_order``, ``finish_order``.
    dtype : torch.dtype
        Working dtype of logprobs and scores (float32, or float64 for an
        oracle).
    engine_max_seq_len : int or None
        Engine sequence limit (TensorRT-LLM's bound for ``"never"``).
    select : callable or None
        An engine's selection step for the frozen-slots path (a scenario
        session's ``beam_select``, see :meth:`_step_frozen`); None: the
        reference's own.

    Attributes
    ----------
    beams : list of Beam
    pool : list of Hypothesis
    done : bool
    """

    def __init__(self, req: RequestSpec, model: ScriptedModel, profile: Profile, dtype: torch.dtype,
                 engine_max_seq_len: Optional[int] = None, select=None):
        self.req, self.model, self.profile, self.dtype = req, model, profile, dtype
        self.select = select
        self.W = int(req.beam_width)
        lp = req.length_penalty
        self.lp = float(profile.beam_length_penalty_unset if lp is None else lp)
        es = req.early_stopping
        self.early_stopping = profile.beam_early_stopping_unset if es is None else es
        self.frozen = self.early_stopping is True and profile.beam_early_stopping_true == "frozen_slots"
        self.rate = float(req.diversity_rate or 0.0) if profile.beam_diversity == "source_beam_index" else 0.0
        self.prompt = list(req.fields.get("prompt", []))
        self.engine_max_seq_len = engine_max_seq_len
        self.beams = [Beam([], Counter(), 0.0)]
        self.pool: list = []
        self.done = False
        self.length_done = False
        self.open = True  # Hugging Face's sticky "improvement still possible"

    # -- per-beam logprobs ---------------------------------------------------
    def _rewrite(self, x: torch.Tensor, hist, counted) -> torch.Tensor:
        p, V = self.profile, x.shape[-1]
        steps = {
            "allowed_token_ids": lambda y: bans.apply_allowed_token_ids(y, hist, p),
            "token_bitmask": lambda y: y,   # a step field: a beam request carries none
            "custom": lambda y: rewrites.apply_custom(y, hist, p),   # each beam at its own history
            "logit_bias": lambda y: rewrites.apply_logit_bias(y, hist),
            "repetition": lambda y: rewrites.apply_repetition(y, counted, p),
            "presence_frequency": lambda y: rewrites.apply_presence_frequency(y, counted, p),
            "dry": lambda y: rewrites.apply_dry(y, hist, p),
            "min_length": lambda y: bans.apply_bans(y, bans.min_length_bans(hist, p)),
            "bad_words": lambda y: bans.apply_bans(y, bans.bad_word_bans(hist)),
            "no_repeat_ngram": lambda y: bans.apply_bans(y, bans.no_repeat_ngram_bans(hist, V)),
        }
        for name in p.rewrite_order:
            x = steps[name](x)
        if torch.isnan(x).any():
            raise RowError("nan_logits", "a logits rewrite produced NaN")
        return x

    def _inputs(self, beam: Beam) -> tuple:
        """``(x, hist, counted)``: the beam's scripted logits, its row, and its row for the penalties."""
        x = self.model.logits(self.prompt, beam.tokens).to(self.dtype)
        if torch.isnan(x).any():
            raise RowError("nan_logits", "NaN in the scripted model's logits")
        # The penalties read the beam's inherited counts, not its history.
        return x, self.req.row(x, beam.tokens), self.req.row(x, sorted(beam.counts.elements()))

    def rewritten(self, beam: Beam) -> torch.Tensor:
        """``(V,)`` logits of one live beam after the rewrites, before temperature and log-softmax.

        Raises
        ------
        RowError
            ``nan_logits`` (NaN in the scripted logits or after a rewrite),
            ``invalid_logit_bias``.
        ModelError
            From the scripted model.
        """
        x, hist, counted = self._inputs(beam)
        return self._rewrite(x, hist, counted)

    def logprobs(self, beam: Beam) -> torch.Tensor:
        """``(V,)`` logprobs of one live beam's next token (step 1 of the module docstring).

        Raises
        ------
        RowError, ModelError
            As :meth:`rewritten`; ``ValueError`` for an unknown
            ``profile.beam_logprob_stage``.
        """
        if self.profile.beam_logprob_stage == "after_rewrites":
            y = self.rewritten(beam)
            t = self.req.fields.get("temperature")
            if t is not None and t != 0:
                # beam_search.py@095443e5 _beam_step_preprocess: logits / max(temperature, 1e-5)
                y = y / max(float(t), 1e-5)
            return torch.log_softmax(y, dim=-1)
        if self.profile.beam_logprob_stage == "processors_on_logprobs":
            x, hist, counted = self._inputs(beam)
            return self._rewrite(torch.log_softmax(x, dim=-1), hist, counted)
        if self.profile.beam_logprob_stage == "raw_logits":
            # vLLM: the raw logprobs of the beam's one-token request (no rewrite, no temperature).
            return torch.log_softmax(self._inputs(beam)[0], dim=-1)
        raise ValueError(f"unknown beam_logprob_stage {self.profile.beam_logprob_stage!r}")

    def score(self, tokens: list, cum: float) -> float:
        """The score ``cum / L ** length_penalty`` of a beam with generated ``tokens`` (``profile.beam_score_length``).

        Parameters
        ----------
        tokens : list of int
            The beam's generated tokens (an end token included, never PAD).
        cum : float
            Its unnormalised cumulative logprob.

        Returns
        -------
        float
            ``"generated"``: ``L = len(tokens)``, and ``cum`` itself for no
            token (TensorRT-LLM, Hugging Face). ``"sequence_less_final_end"``:
            ``L = max(len(prompt) + len(tokens) - e, 1)``, ``e = 1`` when the
            sequence's last id is the request's (first) end id, whether or
            not ``ignore_eos`` (vLLM 0.32.0
            entrypoints/generate/beam_search/utils.py
            ``get_beam_search_score``).

        Raises
        ------
        ValueError
            For an unknown ``profile.beam_score_length``.
        """
        rule = self.profile.beam_score_length
        if rule == "generated":
            return cum / _pow(len(tokens), self.lp) if tokens else cum
        if rule == "sequence_less_final_end":
            seq = self.prompt + list(tokens)
            ends = end_id_set(self.req.fields.get("end_id"))
            n = len(seq) - (1 if seq and ends and seq[-1] == ends[0] else 0)
            return cum / _pow(max(n, 1), self.lp)
        raise ValueError(f"unknown beam_score_length {rule!r}")

    def _finish(self, parent: Beam, token: int) -> str:
        return finish_reason(self.req.row(torch.zeros(1), parent.tokens), token, self.profile)

    def _max_total_len(self) -> float:
        f = self.req.fields
        by_request = (len(self.prompt) + f["max_new_tokens"] if f.get("max_new_tokens") is not None
                      else f.get("max_seq_len"))
        if self.profile.beam_never_bound == "engine_max_seq_len":
            order = (self.engine_max_seq_len, f.get("max_seq_len"), by_request)
        else:
            order = (by_request, self.engine_max_seq_len)
        for v in order:
            if v is not None:
                return float(v)
        return math.inf

    # -- one step --------------------------------------------------------------
    def step(self, step: int) -> StepRecord:
        """Run one beam step (see the module docstring) and return its record.

        Raises
        ------
        RowError, ModelError
            Failures of a beam's logits (the request fails at this step).
        """
        V = self.model.vocab
        if self.frozen and self.select is not None:
            return self._step_engine(step, V)
        rows = []
        for b in self.beams:
            if b.finish is None:
                rows.append(self.logprobs(b))
            else:
                # Frozen: one candidate keeping the score (token 0, logprob 0, emitted as PAD);
                # latched (pool path): masked, the beam is harvested into the pool below.
                r = torch.full((V,), float("-inf"), dtype=self.dtype)
                if self.frozen:
                    r[0] = 0.0
                rows.append(r)
        lps = torch.stack(rows)
        S = lps + torch.tensor([b.cum for b in self.beams], dtype=self.dtype).unsqueeze(-1)
        if self.frozen:
            return self._step_frozen(S, step)
        return self._step_pool(S, step)

    def _order(self, keys: torch.Tensor) -> list:
        # Best first; ties go to the lowest (beam, token) flat index (torch.topk's order is
        # unspecified on ties, so cases avoid them).
        return torch.sort(keys.flatten(), descending=True, stable=True).indices.tolist()

    def _step_frozen(self, S: torch.Tensor, step: int) -> StepRecord:
        Win, V = S.shape
        keys = S.clone()
        if self.rate:
            keys = keys + self.rate * torch.arange(Win, dtype=self.dtype).unsqueeze(-1)
        if self.lp:
            L = torch.tensor([len(b.tokens) + (0 if b.finish else 1) for b in self.beams], dtype=self.dtype)
            keys = keys / L.pow(self.lp).unsqueeze(-1)
        chosen = [divmod(idx, V) + (float(S.flatten()[idx]),) for idx in self._order(keys)[:self.W]]
        return self._reparent(chosen, step)

    def _step_engine(self, step: int, V: int) -> StepRecord:
        """The frozen-slots step with an engine's selection (``self.select``).

        The engine gets the beams' rewritten logits (before temperature;
        zeros for a frozen beam, which the engine itself must mask), their
        cumulative logprobs, which are finished, their generated lengths,
        ``W``, the temperature, length penalty and diversity rate, and
        returns ``W`` triples ``(cum, predecessor, token)`` best first
        (token :data:`~.scenario.PAD` where the predecessor is frozen). The
        re-parenting and finish reasons that follow are the reference's.

        Raises
        ------
        RuntimeError
            When the engine returns something malformed (wrong count, a
            predecessor out of range, a token outside the vocabulary for a
            live predecessor): the case is an ``error`` of that engine.
        RowError, ModelError
            The beams' own errors, as :meth:`rewritten`.
        """
        rows = [self.rewritten(b) if b.finish is None else torch.zeros(V, dtype=self.dtype) for b in self.beams]
        t = self.req.fields.get("temperature")
        out = self.select(torch.stack(rows), torch.tensor([b.cum for b in self.beams], dtype=self.dtype),
                          [b.finish is not None for b in self.beams], [len(b.tokens) for b in self.beams], self.W,
                          None if t is None else float(t), self.lp, self.rate)
        if len(out) != self.W:
            raise RuntimeError(f"beam selection returned {len(out)} beams for beam width {self.W}")
        chosen = []
        for cum, b, tok in out:
            if not 0 <= b < len(self.beams):
                raise RuntimeError(f"beam selection chose predecessor {b} of {len(self.beams)} beams")
            if self.beams[b].finish is None and not 0 <= tok < V:
                raise RuntimeError(f"beam selection emitted token {tok} for live beam {b} (vocab {V})")
            chosen.append((b, tok, float(cum)))
        return self._reparent(chosen, step)

    def _reparent(self, chosen: list, step: int) -> StepRecord:
        """New beams from ``(predecessor, token, cum)`` triples, best first (step 4 of the module docstring)."""
        new, toks, preds, cums = [], [], [], []
        for i, (b, t, cum) in enumerate(chosen):
            parent = self.beams[b]
            counts = inherit_counts(self.beams, b, i)
            if parent.finish is not None:
                new.append(Beam(list(parent.tokens), counts, cum, parent.finish))
                toks.append(PAD)
            else:
                counts[t] += 1
                reason = self._finish(parent, t)
                new.append(Beam(parent.tokens + [t], counts, cum, None if reason == "none" else reason))
                toks.append(t)
            preds.append(b)
            cums.append(cum)
        self.beams = new
        self.done = all(b.finish is not None for b in new)
        return StepRecord(step, tokens=toks, predecessors=preds, cum_logprobs=cums)

    def _step_pool(self, S: torch.Tensor, step: int) -> StepRecord:
        Win, V = S.shape
        W, lp, p = self.W, self.lp, self.profile
        gen = len(self.beams[0].tokens)
        harvest = [Hypothesis(list(b.tokens), b.cum, self.score(b.tokens, b.cum), b.finish)
                   for b in self.beams if b.finish is not None]
        keys = S + self.rate * torch.arange(Win, dtype=self.dtype).unsqueeze(-1) if self.rate else S

        def finishing(s: float, reason: str) -> bool:
            if p.beam_finish_candidates == "end_id":
                return math.isfinite(s) and reason == "end_id"
            return math.isfinite(s) and reason != "none"

        n_cand = W + max(W, Win)
        cands = []
        for rank, idx in enumerate(self._order(keys)[:n_cand]):
            b, t = divmod(idx, V)
            s = float(S[b, t])
            parent = self.beams[b]
            reason = self._finish(parent, t) if parent.finish is None else "none"
            cands.append((rank, b, t, s, finishing(s, reason), reason))
        cont = [c for c in cands if not c[4]][:W]
        if p.beam_pool_candidates == "first_w":
            offered = [(b, t, s, reason) for rank, b, t, s, hits, reason in cands if hits and rank < W]
        elif p.beam_pool_candidates == "per_beam_top_2w":
            # vLLM: every finishing token among each live beam's own 2W most likely ones.
            offered = []
            for b, parent in enumerate(self.beams):
                if parent.finish is None:
                    for t in torch.sort(S[b], descending=True, stable=True).indices[:2 * W].tolist():
                        s, reason = float(S[b, t]), self._finish(parent, t)
                        if finishing(s, reason):
                            offered.append((b, t, s, reason))
        else:
            raise ValueError(f"unknown beam_pool_candidates {p.beam_pool_candidates!r}")
        verdict = p.beam_done_rule == "verdict"
        blocked = verdict and ((self.early_stopping is True and len(self.pool) >= W) or not self.open)
        new_hyps = [] if blocked else [
            Hypothesis(self.beams[b].tokens + [t], s, self.score(self.beams[b].tokens + [t], s), reason)
            for b, t, s, reason in offered]
        merged = self.pool + new_hyps + harvest
        self.pool = sorted(merged, key=lambda h: -h.score)[:W]
        new = []
        for i, (rank, b, t, s, hits, reason) in enumerate(cont):
            counts = inherit_counts(self.beams, b, i)
            counts[t] += 1
            latched = None
            if reason == "stop_words":
                latched = "stop_words"  # harvested into the pool at the next step
            elif reason == "length":
                self.length_done = True
            new.append(Beam(self.beams[b].tokens + [t], counts, s, latched))
        # The record lists the continuing beams; when every candidate finished (Hugging Face at the
        # length limit) it lists the best W candidates instead, which went to the pool.
        shown = cont or cands[:W]
        toks, preds, cums = [c[2] for c in shown], [c[1] for c in shown], [c[3] for c in shown]
        self.beams = new
        all_hit = bool(cands) and all(c[4] for c in cands)
        if p.beam_done_rule == "max_tokens":
            # vLLM: no done verdict; the length limit, or no beam left, ends the search.
            self.done = all_hit or self.length_done or not new
            return StepRecord(step, tokens=toks, predecessors=preds, cum_logprobs=cums)
        if not verdict:
            raise ValueError(f"unknown beam_done_rule {p.beam_done_rule!r}")
        # Done verdict.
        full = len(self.pool) >= W
        never = self.early_stopping == "never" and lp > 0
        bound = self._max_total_len() - len(self.prompt) if never else gen + 1
        if p.beam_done_bound == "best_candidate":
            best = cands[0][3] if cands else float("-inf")
        else:
            best = cont[0][3] if cont else float("-inf")
        attainable = best / _pow(bound, lp)
        if full and self.pool[-1].score >= attainable:
            self.open = False
        self.done = (not self.open or (self.early_stopping is True and full) or all_hit or self.length_done
                     or not new)
        return StepRecord(step, tokens=toks, predecessors=preds, cum_logprobs=cums)

    # -- output ------------------------------------------------------------------
    def finalize(self, result: RequestResult, reason: Optional[str] = None) -> None:
        """Write the output beams into ``result`` (best first).

        Parameters
        ----------
        result : RequestResult
        reason : str or None
            ``"none"`` when the run ended before the request finished (the
            current beams are reported with that reason).
        """
        if self.frozen:
            out = [Hypothesis(b.tokens, b.cum, self.score(b.tokens, b.cum),
                              reason or b.finish or "none") for b in self.beams]
        else:
            # A running beam the done verdict stops reports profile.beam_done_running_reason.
            active_reason = reason or ("length" if self.length_done else self.profile.beam_done_running_reason)
            hyps = list(self.pool)
            if self.profile.beam_final_includes_running or reason == "none":
                hyps += [Hypothesis(b.tokens, b.cum, self.score(b.tokens, b.cum),
                                    b.finish or active_reason) for b in self.beams]
            out = sorted(hyps, key=lambda h: -h.score)[:self.W]
        result.beams = [list(h.tokens) for h in out]
        result.cum_logprobs = [h.cum for h in out]
        result.scores = [h.score for h in out]
        result.beam_finish_reasons = [h.finish for h in out]
        result.tokens = list(out[0].tokens) if out else []
        result.finish_reason = reason or (out[0].finish if out else "none")


def beam_step(runner, st, step: int) -> None:
    """Run one beam step of the request held in ``st`` inside a scenario run.

    A failure (``RowError`` from a beam's logits, or the scripted model)
    fails that request only. When the search is done, the output beams are
    written and the slot is released at the end of the step.
    """
    try:
        rec = st.beam.step(step)
    except RowError as e:
        fail_request(st, e, step)
        return
    except ModelError as e:
        fail_request(st, RowError("bad_logits", f"scripted model: {e}"), step)
        return
    st.result.steps.append(rec)
    if st.beam.done:
        st.beam.finalize(st.result)
        st.status = "finished"
        st.result.finish_step = step
