"""The transformers adapter's session: one step for a batch of rows, HF's way.

Imported lazily (it imports transformers through :mod:`.hf`).

Per row (each row is its own ``generate`` call with a batch of one: HF
shares one ``GenerationConfig`` across a batch, our rows each carry their
own parameters):

1. logits must be 1-D (``bad_logits``); upcast to float32 as
   ``GenerationMixin._sample`` does (``outputs.logits[:, -1].to(copy=True,
   dtype=torch.float32)``, utils.py@v5.24.0);
2. :func:`.hf.prepare` builds HF's processors, warpers and criteria (an HF
   ``ValueError`` becomes this row's error);
3. the processors (bias, repetition, no-repeat-ngram, bad words, min
   length) give ``rewritten_logits``;
4. greedy (``do_sample`` False): ``torch.argmax`` of the processed scores
   (first maximum, so ties go to the lowest id; a NaN counts as the
   maximum, an all ``-inf`` row gives id 0: both are what ``_sample`` does,
   reported as is). Sampling: the warpers, ``softmax``, then
   ``torch.multinomial(probs, 1, generator=g)``; the ``RuntimeError`` it
   raises on NaN/inf probabilities becomes ``nan_logits``,
   ``posinf_logits`` or ``no_valid_token`` for that row only (HF itself
   would abort the whole ``generate`` call);
5. logprobs from ``profile.raw_logprobs_stage`` (``"before_processing"``:
   ``log_softmax`` of the raw float32 logits, i.e. of HF's
   ``output_logits``; the whole vector is ``raw_logprobs``); the processed
   logprob is ``log_softmax`` of the fully
   processed scores (HF's ``output_scores``, what
   ``compute_transition_scores(..., normalize_logits=True)`` reads);
6. finish reason from HF's criteria evaluated one by one on the history
   with the token appended: ``EosTokenCriteria`` -> ``"end_id"``,
   ``MaxLengthCriteria`` -> ``"length"``, the single-token stop words'
   ``EosTokenCriteria`` -> ``"stop_words"``. ``StoppingCriteriaList`` only
   ORs them; the reported precedence is ``profile.finish_order``
   (END_ID > LENGTH > STOP_WORDS).

Seeds: HF has no per-request seed. A transformers user seeds with
``transformers.set_seed(seed)`` (``src/transformers/trainer_utils.py``, the
same body in v5.24.0 and v4.57.6) and then calls ``generate()``, whose
``_sample`` draws ``torch.multinomial(probs, num_samples=1)`` from torch's
global generator (``generation/utils.py``@v5.24.0 line 3277, @v4.57.6 line
2831). The session does the same (:func:`.hf.set_seed`, inside
:func:`.hf.isolated_rng`, so the process's generators are restored after
each draw):

* every seeded row's seed goes through ``set_seed`` first: a seed it
  refuses (negative, or at or above ``2**32``: ``numpy.random.seed``) is
  that row's ``invalid_seed``, with ``set_seed``'s message, greedy rows
  included (a user calls ``set_seed`` before ``generate`` whatever the mode);
* the first draw of a slot's request: ``set_seed(seed)``, then
  ``torch.multinomial`` without ``generator=`` (the global generator, as
  ``_sample``). Seeds stage: transformers' own (``set_seed``), declared
  ``"seeds": "own"``; ``extra["seed_path"] = "transformers.set_seed"``;
* a later draw of the same request in that slot continues its stream: the
  adapter restores the global generator's state it kept for the slot after
  the previous draw (HF keeps no stream per request: one ``generate`` call
  holds the global generator for its whole decode). That bookkeeping is the
  adapter's: ``extra["stages"] = {"seeds": "adapter"}`` and
  :attr:`TransformersSession.stages_used` (the judge reads it; the single-step
  kinds run each batch on a fresh session, so only a session driven over
  several steps reaches this);
* unseeded rows draw from torch's global generator, as HF does;
* :meth:`TransformersSession.sample_many` (statistical draws): ``n`` draws
  from one stream seeded ``set_seed(seeds[0])`` stand for ``n`` separately
  seeded draws: the adapter's (``stages_used``).

A seed ``s`` and ``s + 2**32`` can no longer collide (torch's CPU mt19937
keys on the low 32 bits): ``set_seed`` refuses the latter.
"""

from __future__ import annotations

from typing import Sequence

import torch

from ..base import Row, RowError, RowResult, claim_slot
from ..profiles import Profile
from . import hf
from ..reference.logprobs import rank, top_logprobs  # ranking rules are profile fields, not engine code
from .translate import unsupported_reason

__all__ = ["TransformersSession", "finish_reason", "sampling_failure"]

GREEDY, SAMPLING = "greedy", "sampling"


def sampling_failure(raw: torch.Tensor, rewritten: torch.Tensor, err: Exception) -> RowError:
    """The row error of a ``torch.multinomial`` ``RuntimeError``: ``nan_logits``, ``posinf_logits``,
    ``no_valid_token`` (judged on the raw and the processed ``(1, V)`` scores), else ``sampling_failed``."""
    if torch.isnan(raw).any():
        return RowError("nan_logits", f"NaN logits: torch.multinomial refused the probabilities ({err})")
    if torch.isnan(rewritten).any():
        return RowError("nan_logits", f"a processor produced NaN (e.g. -inf logit plus +inf bias): {err}")
    if torch.isposinf(rewritten).any():
        return RowError("posinf_logits", f"+inf logit: softmax gives NaN, torch.multinomial refused it ({err})")
    if not (rewritten > float("-inf")).any():
        return RowError("no_valid_token", f"every token is -inf after the processors ({err})")
    return RowError("sampling_failed", str(err))


def finish_reason(prep: hf.Prepared, ids: torch.Tensor, order: Sequence[str], stop_strings=()) -> str:
    """The finish reason of a sequence whose history is ``ids``, from HF's own stopping criteria.

    Parameters
    ----------
    prep : hf.Prepared
        The request's criteria (:func:`.hf.prepare`).
    ids : torch.Tensor
        ``(1, L)`` int64: prompt, generated tokens, the new token last.
    order : sequence of str
        The precedence (``Profile.finish_order``): ``StoppingCriteriaList`` only ORs its
        criteria, so transformers keeps no reason.
    stop_strings : sequence of StoppingCriteria
        A scenario request's ``StopStringCriteria`` (SEMANTICS §1.8a): firing is ``"stop_words"``.

    Returns
    -------
    str
        ``"end_id"`` (``EosTokenCriteria``), ``"length"`` (``MaxLengthCriteria``),
        ``"stop_words"`` (the single-token stop words' ``EosTokenCriteria``, or a stop string), the first of
        ``order`` that fires; ``"none"`` when none does.
    """
    def fired(crits, types) -> bool:
        return any(bool(c(ids, None).any()) for c in crits if isinstance(c, types))

    hits = {
        "end_id": fired(prep.criteria, hf.sc.EosTokenCriteria),
        "length": fired(prep.criteria, hf.sc.MaxLengthCriteria),
        "stop_words": fired(prep.stop_criteria, hf.sc.EosTokenCriteria)
        or any(bool(c(ids, None).any()) for c in stop_strings),
    }
    for reason in order:
        if hits.get(reason):
            return reason
    return "none"


class TransformersSession:
    """Per-slot seeded streams and the batched step of the transformers adapter.

    Parameters
    ----------
    profile : Profile
        Supplies ``raw_logprobs_stage``, ``rank_rule`` and ``finish_order``.
    device : str
        ``"cpu"`` or ``"cuda"``.
    """

    def __init__(self, profile: Profile, device: str = "cpu"):
        self.profile = profile
        self.device = torch.device(device)
        self.model = hf.ModelFree(self.device)
        self._owner: dict = {}
        self._seed: dict = {}
        #: slot -> the global generator's state after the slot's last draw (its request's stream)
        self._state: dict = {}
        #: Stages some results took from other code than ``TransformersImpl.stages`` declare
        #: (``{"seeds": "adapter"}``: a continued stream or ``sample_many``; module docstring).
        self.stages_used: dict = {}

    # -- seeds -------------------------------------------------------------
    def _observe(self, row: Row) -> None:
        slot = row.slot
        if slot not in self._owner or self._owner[slot] != row.request_id:
            self._owner[slot] = row.request_id
            self._seed[slot] = row.seed
            self._state.pop(slot, None)

    def _draw(self, row: Row, probs: torch.Tensor) -> tuple:
        """Draw the token of a sampling row as ``GenerationMixin._sample`` does (the module docstring).

        Parameters
        ----------
        row : Row
        probs : torch.Tensor
            ``(1, V)``: ``softmax`` of the processed scores.

        Returns
        -------
        tuple
            ``(token, seed_path)``: ``torch.multinomial(probs, 1)`` on torch's global generator;
            ``seed_path`` None for an unseeded slot, ``"transformers.set_seed"`` for the first draw
            of a seeded slot's request (seeded by ``set_seed``), else the adapter's restore of the
            slot's stream (``stages_used["seeds"] = "adapter"``).

        Raises
        ------
        RuntimeError
            ``torch.multinomial``'s, on NaN/inf/all-zero probabilities (the caller classifies it).
        """
        seed = self._seed.get(row.slot)
        if seed is None:
            return int(torch.multinomial(probs, num_samples=1)[0, 0]), None
        gen = hf.global_generator(self.device)
        with hf.isolated_rng():
            state = self._state.get(row.slot)
            if state is None:
                hf.set_seed(seed)
                path = "transformers.set_seed"
            else:
                gen.set_state(state)
                path = "adapter (the slot's stream, continued from its last draw)"
                self.stages_used["seeds"] = "adapter"
            try:
                return int(torch.multinomial(probs, num_samples=1)[0, 0]), path
            finally:
                self._state[row.slot] = gen.get_state()

    # -- one row -------------------------------------------------------------
    def _process(self, row: Row):
        """Return ``(prepared, raw, rewritten, final)``, each score tensor ``(1, V)`` float32."""
        if row.logits.dim() != 1:
            raise RowError("bad_logits", f"logits must be 1-D, got shape {tuple(row.logits.shape)}")
        why = unsupported_reason(row)
        if why is not None:
            raise RowError("unsupported", why)
        if row.seed is not None:
            with hf.isolated_rng():
                hf.set_seed(row.seed)  # validate early: a seed set_seed refuses is this row's invalid_seed
        prep = hf.prepare(row, self.model)
        raw = row.logits.to(device=self.device, dtype=torch.float32, copy=True).reshape(1, -1)
        rewritten = hf.run_processors(prep.processors, prep.input_ids, raw.clone())
        final = hf.run_processors(prep.warpers, prep.input_ids, rewritten) if prep.do_sample else rewritten
        return prep, raw, rewritten, final

    def _finish(self, prep: hf.Prepared, token: int) -> str:
        ids = torch.cat([prep.input_ids, torch.tensor([[token]], dtype=torch.long, device=self.device)], dim=1)
        return finish_reason(prep, ids, self.profile.finish_order)

    def _annotate(self, row: Row, res: RowResult, prep, raw, rewritten, final) -> None:
        tok = res.token
        V = raw.shape[-1]
        if res.mode == GREEDY:
            probs = torch.zeros(V, dtype=torch.float32, device=self.device)
            probs[tok] = 1.0
            res.processed_logprob = 0.0
        else:
            probs = torch.softmax(final[0], dim=-1)
            res.processed_logprob = float(torch.log_softmax(final[0], dim=-1)[tok])
        res.rewritten_logits = rewritten[0]
        res.probs = probs
        src = raw[0] if self.profile.raw_logprobs_stage == "before_processing" else rewritten[0]
        # logprobs_mode: transformers returns raw logits (output_logits) and processed scores
        # (output_scores: after the processors and, when sampling, the warpers); the *_logprobs
        # modes are their log_softmax, taken here.
        lps = {None: lambda: torch.log_softmax(src, dim=-1), "raw_logprobs": lambda: torch.log_softmax(src, dim=-1),
               "raw_logits": lambda: src.clone(), "processed_logits": lambda: final[0].clone(),
               "processed_logprobs": lambda: torch.log_softmax(final[0], dim=-1)}[row.logprobs_mode]()
        res.raw_logprobs = lps
        res.logprob = float(lps[tok])
        res.rank = rank(lps, tok, self.profile.rank_rule)
        if row.logprobs == -1:
            res.vocab_logprobs = lps
        elif row.logprobs is not None:
            res.top_logprobs = top_logprobs(lps, row.logprobs, tok)
        if row.logprob_token_ids is not None:
            res.token_logprobs = [(int(t), float(lps[int(t)])) for t in row.logprob_token_ids]
        res.finish_reason = self._finish(prep, tok)
        res.extra["hf_processors"] = prep.names()

    # -- the step --------------------------------------------------------------
    def step(self, rows: Sequence[Row]) -> list:
        """Sample one step for ``rows``.

        Parameters
        ----------
        rows : sequence of Row
            ``logits`` ``(V_i,)`` float32/bfloat16/float16.

        Returns
        -------
        list of RowResult
            One per row, in order. ``error`` kinds: those of
            ``cases/README.md`` (from HF's ``ValueError``s and
            ``torch.multinomial``'s ``RuntimeError``), plus ``unsupported``
            for a row :meth:`TransformersImpl.unsupported` rejects (the
            harness never sends those) and ``duplicate_slot`` for a slot
            used twice in one step.
        """
        out = []
        used = set()
        for row in rows:
            mode = None
            try:
                claim_slot(row, used, one_d=False)
                prep, raw, rewritten, final = self._process(row)
                mode = SAMPLING if prep.do_sample else GREEDY
                self._observe(row)
                path = None
                if prep.do_sample:
                    probs = torch.softmax(final, dim=-1)
                    try:
                        tok, path = self._draw(row, probs)
                    except RuntimeError as e:
                        raise sampling_failure(raw, rewritten, e) from None
                else:
                    tok = int(torch.argmax(final, dim=-1)[0])
                res = RowResult(token=tok, mode=mode)
                if row.seed is not None:
                    res.extra["seed"] = int(row.seed)
                if path is not None:
                    res.extra["seed_path"] = path
                    if path != "transformers.set_seed":
                        res.extra["stages"] = {"seeds": "adapter"}
                self._annotate(row, res, prep, raw, rewritten, final)
                out.append(res)
            except RowError as e:
                out.append(RowResult.failed(e, mode))
        return out

    def sample_many(self, row: Row, seeds: Sequence[int], chunk: int = 1 << 20) -> torch.Tensor:
        """Draw ``len(seeds)`` tokens from one row; the row is processed once.

        HF has no per-draw seed, so the draws come from one stream seeded
        ``transformers.set_seed(seeds[0])`` (torch's global generator, inside
        :func:`.hf.isolated_rng`), ``torch.multinomial`` with replacement,
        ``chunk`` draws per call: the counts are reproducible for a given
        ``seeds`` list, and the draws are independent samples of the processed
        distribution. One stream standing for ``len(seeds)`` seeded draws is
        the adapter's: a sampling row sets ``stages_used["seeds"] = "adapter"``.

        Parameters
        ----------
        row : Row
        seeds : sequence of int
            Only ``len(seeds)`` and ``seeds[0]`` are used.
        chunk : int
            Draws per ``torch.multinomial`` call.

        Returns
        -------
        torch.Tensor
            ``(V,)`` int64 counts, summing to ``len(seeds)``; a greedy row
            puts every draw on its argmax.

        Raises
        ------
        RowError
            The row's error, as :meth:`step` would report it.
        """
        prep, raw, rewritten, final = self._process(row)
        V = raw.shape[-1]
        n = len(seeds)
        counts = torch.zeros(V, dtype=torch.int64)
        if n == 0:
            return counts
        if not prep.do_sample:
            counts[int(torch.argmax(final, dim=-1)[0])] = n
            return counts
        self.stages_used["seeds"] = "adapter"
        probs = torch.softmax(final, dim=-1)
        done = 0
        with hf.isolated_rng():
            hf.set_seed(seeds[0])
            while done < n:
                m = min(chunk, n - done)
                try:
                    toks = torch.multinomial(probs, num_samples=m, replacement=True)[0]
                except RuntimeError as e:
                    raise sampling_failure(raw, rewritten, e) from None
                counts += torch.bincount(toks.cpu(), minlength=V)
                done += m
        return counts
