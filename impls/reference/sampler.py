"""The reference sampler: one batched step with per-row parameters.

Pipeline of :meth:`ReferenceSession.step`, in order (SEMANTICS §1; profile
fields choose the variants, never the engine's name):

1. batch checks: a slot used twice in one step rejects the later rows;
2. per row, input checks: the grammar bitmask where the profile applies it to the
   model's logits (:func:`model_logits`, §1.4a); logits must be 1-D and free of NaN (§5; under
   ``profile.greedy_degenerate == "argmax"`` a GREEDY row may hold NaN, under
   ``profile.nan_logits == "first_unmasked"`` a SAMPLING row);
3. validation and mode resolution (:mod:`.modes`, §1.1);
4. upcast to the working dtype (float32; float64 in oracle mode);
5. logits rewrites in ``profile.rewrite_order`` (:mod:`.rewrites`,
   :mod:`.bans`; §1.2-§1.4b): allowed token ids, logit bias, repetition,
   presence/frequency, DRY, min_length, bad words, no-repeat-ngram, the row's
   custom logits processors (:mod:`impls.processors`; the argmax-invariant ones
   among the filters where ``profile.filter_order`` holds ``"custom"``) (and the
   grammar bitmask under ``token_bitmask_stage == "rewrite"``);
6. RAW logprobs from the stage ``profile.raw_logprobs_stage`` (§1.7);
7. GREEDY: argmax, ties → lowest id. BEAM (one step, width 1): argmax of
   ``log_softmax(x / T)``. SAMPLING: the kept set of :mod:`.filters`
   (§1.5; a ``+inf`` logit is ``posinf_logits``, or under
   ``profile.posinf_logits == "argmax"`` the point mass on the lowest
   ``+inf`` id; a NaN follows ``profile.nan_logits``), then the canonical
   draw of :mod:`.draw` with ``(seed, offset)`` from :mod:`.seeds` (§1.6),
   all sampling rows drawn in one batched call;
8. PROCESSED logprob, top-k logprobs and rank, read from the vector the row's
   ``logprobs_mode`` names (RAW logprobs by default), the whole vector
   (``logprobs = -1``) and the ``logprob_token_ids`` entries (:mod:`.logprobs`);
9. finish reason (:mod:`.finish`, §1.8).

Any :class:`~impls.base.RowError` raised for one row becomes that row's
error; the rest of the batch is sampled.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Optional, Sequence

import numpy as np
import torch

from ..base import Row, RowError, RowResult, claim_slot
from ..profiles import Profile, TRTLLM
from . import bans, rewrites
from .draw import gumbel_argmax
from . import mirostat, mt19937
from .filters import chain, mixture_probs, processed_probs
from .finish import finish_reason
from .logprobs import mode_vector, posinf_point_mass, rank, raw_logprobs, top_logprobs
from .modes import BEAM, GREEDY, SAMPLING, Resolved, effective_seed, resolve
from .philox import seed_bits
from .seeds import SeedManager

__all__ = ["ReferenceSession", "rewrite_logits", "model_logits", "token_outputs", "vector_outputs",
           "signed_seeds", "REFERENCE_VERSION"]

#: Bumped whenever a rule of the reference changes; recorded in golden files.
#: 2: top-p decay across steps (§2), decay + beam rejected, integer-only seeds,
#: a new seed in a slot restarts its stream, prompt_ignore_length < 0 a no-op.
REFERENCE_VERSION = "2"


def rewrite_logits(x: torch.Tensor, row: Row, profile: Profile, allow_nan: bool = False) -> torch.Tensor:
    """Apply the logits rewrites of ``profile.rewrite_order`` to one row.

    Parameters
    ----------
    x : torch.Tensor
        ``(V,)`` logits in the working dtype.
    row : Row
    profile : Profile
    allow_nan : bool
        Let a NaN produced by a rewrite through (a GREEDY row under
        ``profile.greedy_degenerate == "argmax"``).

    Returns
    -------
    torch.Tensor
        ``(V,)`` rewritten logits; banned tokens are ``-inf``.

    Raises
    ------
    RowError
        ``invalid_logit_bias``; ``nan_logits`` when a rewrite produced NaN
        (e.g. ``-inf`` logit plus ``+inf`` bias).
    """
    V = x.shape[-1]
    # with mirostat, common_sampler_init's chain is the logit bias, the temperature and mirostat
    # (SEMANTICS §1.5a): the penalties and DRY are not applied
    skip = ("repetition", "presence_frequency", "dry") if row.mirostat in (1, 2) else ()
    steps = {
        "custom": lambda y: rewrites.apply_custom(y, row, profile),
        "allowed_token_ids": lambda y: bans.apply_allowed_token_ids(y, row, profile),
        "token_bitmask": lambda y: (bans.apply_bans(y, bans.bitmask_bans(row))
                                    if profile.token_bitmask_stage == "rewrite" else y),
        "logit_bias": lambda y: rewrites.apply_logit_bias(y, row, profile),
        "repetition": lambda y: rewrites.apply_repetition(y, row, profile),
        "presence_frequency": lambda y: rewrites.apply_presence_frequency(y, row, profile),
        "dry": lambda y: rewrites.apply_dry(y, row, profile),
        "min_length": lambda y: _min_length(y, row, profile),
        "bad_words": lambda y: bans.apply_bans(y, bans.bad_word_bans(row, profile)),
        "no_repeat_ngram": lambda y: bans.apply_bans(y, bans.no_repeat_ngram_bans(row, V)),
    }
    for name in profile.rewrite_order:
        if name not in skip:
            x = steps[name](x)
    if not allow_nan and torch.isnan(x).any():
        raise RowError("nan_logits", "a logits rewrite produced NaN (e.g. -inf logit plus +inf bias)")
    return x


def _min_length(x: torch.Tensor, row: Row, profile: Profile) -> torch.Tensor:
    # The min_length ban (§1.4); under min_length_yields_when_empty == "token_bitmask" a row with a
    # grammar bitmask keeps its end ids' logits when banning them would leave no finite logit: vLLM's
    # MinTokensLogitsProcessor._mask_stop_token_logits restores the finite ones, and nothing else was
    # finite, so the row is what it was (v1/sample/logits_processor/builtin.py@v0.32.0).
    y = bans.apply_bans(x, bans.min_length_bans(row, profile))
    if (profile.min_length_yields_when_empty == "token_bitmask" and row.token_bitmask is not None
            and not (y > float("-inf")).any()):
        return x
    return y


def model_logits(row: Row, profile: Profile) -> torch.Tensor:
    """The logits the sampler receives: ``row.logits`` with its grammar bitmask applied there.

    Under ``profile.token_bitmask_stage == "logits"`` (vLLM's model runner, TensorRT-LLM's executor
    loop apply the bitmask in place on the model's output before sampling) the ids the bitmask
    bans are ``-inf`` here, before any check or logprob (§1.4a); otherwise ``row.logits``.

    Returns
    -------
    torch.Tensor
        ``(V,)`` in the row's dtype (a copy when a bitmask applies).
    """
    if row.token_bitmask is None or profile.token_bitmask_stage != "logits" or row.logits.dim() != 1:
        return row.logits
    return bans.apply_bans(row.logits, bans.bitmask_bans(row))


def token_outputs(row: Row, token: int, raw_lp: torch.Tensor, probs: torch.Tensor, profile: Profile) -> dict:
    """The outputs of a row that depend on which token was drawn.

    Used by the reference itself and by the judge, to predict these values at
    the token an implementation with another RNG actually drew.

    Parameters
    ----------
    row : Row
    token : int
    raw_lp : torch.Tensor
        ``(V,)`` RAW logprobs (§1.7).
    probs : torch.Tensor
        ``(V,)`` the distribution sampled from.
    profile : Profile

    Returns
    -------
    dict
        ``logprob``, ``processed_logprob``, ``rank``, ``top_logprobs``
        (None unless ``row.logprobs`` is set) and ``finish_reason``.
    """
    p = float(probs[token])
    return {
        "logprob": float(raw_lp[token]),
        "processed_logprob": math.log(p) if p > 0 else float("-inf"),
        "rank": rank(raw_lp, token, profile.rank_rule),
        "top_logprobs": (top_logprobs(raw_lp, row.logprobs, token)
                         if row.logprobs is not None and row.logprobs >= 0 else None),
        "finish_reason": finish_reason(row, token, profile),
    }


def vector_outputs(row: Row, lp: torch.Tensor) -> dict:
    """The outputs of a row read from its whole logprob vector, whatever token was drawn.

    Parameters
    ----------
    row : Row
    lp : torch.Tensor
        ``(V,)`` the vector of the row's ``logprobs_mode`` (:func:`.logprobs.mode_vector`;
        RAW logprobs when the mode is unset).

    Returns
    -------
    dict
        ``vocab_logprobs``: ``lp`` when ``row.logprobs == -1`` (every token, in id order),
        else None; ``token_logprobs``: ``[(id, lp[id]), ...]`` in the order of
        ``row.logprob_token_ids``, else None. Source: SEMANTICS §1.7;
        vllm-project/vllm:vllm/v1/sample/sampler.py@v0.32.0 ``Sampler.forward``
        (``num_logprobs == -1``) and ``Sampler.gather_specific_token_logprobs``.
    """
    return {
        "vocab_logprobs": lp if row.logprobs == -1 else None,
        "token_logprobs": ([(int(t), float(lp[int(t)])) for t in row.logprob_token_ids]
                           if row.logprob_token_ids is not None else None),
    }


def signed_seeds(seeds: Sequence[int]) -> torch.Tensor:
    """``(n,)`` int64: the signed 64-bit view of each seed (:func:`.philox.seed_bits`, SEMANTICS §1.6).

    A ``range`` is converted without a Python loop (its ends are checked; uint64 arithmetic
    wraps exactly as the bit patterns do); any other sequence seed by seed.

    Raises
    ------
    ValueError
        For a seed outside ``[-2**63, 2**64)``.
    """
    if isinstance(seeds, range):
        n = len(seeds)
        if n == 0:
            return torch.zeros(0, dtype=torch.int64)
        seed_bits(seeds[0])
        seed_bits(seeds[-1])
        m = (1 << 64) - 1
        with np.errstate(over="ignore"):
            u = np.arange(n, dtype=np.uint64) * np.uint64(seeds.step & m) + np.uint64(seeds.start & m)
        return torch.from_numpy(u.view(np.int64).copy())
    bits = (seed_bits(int(s)) for s in seeds)
    return torch.tensor([b - (1 << 64) if b >= (1 << 63) else b for b in bits], dtype=torch.int64)


class ReferenceSession:
    """Per-slot state and the batched step of the reference sampler.

    Parameters
    ----------
    profile : Profile
    device : str
        ``"cpu"`` or ``"cuda"``; logits are moved there.
    dtype : torch.dtype
        Working dtype, ``torch.float32`` (default) or ``torch.float64``
        (oracle mode).
    """

    def __init__(self, profile: Profile = TRTLLM, device: str = "cpu", dtype: torch.dtype = torch.float32):
        self.profile = profile
        self.device = torch.device(device)
        self.dtype = dtype
        self.seeds = SeedManager(profile)
        self.streams = mt19937.Streams()
        self.mu = mirostat.MuStates()   # per-slot mirostat state (SEMANTICS §1.5a)
        # id(kept set) -> (kept set, chain outcomes), for the draw and the PROCESSED distribution
        self._chains: dict = {}

    # -- per-row stages -------------------------------------------------
    def _prepare(self, row: Row) -> tuple[Resolved, torch.Tensor, torch.Tensor]:
        if row.logits.dim() != 1:
            raise RowError("bad_logits", f"logits must be 1-D, got shape {tuple(row.logits.shape)}")
        logits = model_logits(row, self.profile)
        nan = bool(torch.isnan(logits).any())
        lenient = self.profile.greedy_degenerate == "argmax"
        nan_sampling = self.profile.nan_logits == "first_unmasked"
        nan_error = RowError("nan_logits", f"NaN at token ids {torch.nonzero(torch.isnan(logits)).flatten()[:5].tolist()}")
        if nan and not (lenient or nan_sampling):
            raise nan_error
        res = resolve(row, self.profile)
        # Under greedy_degenerate == "argmax" (Hugging Face, vLLM) a GREEDY row takes
        # whatever torch.argmax answers; under nan_logits == "first_unmasked" (vLLM) a
        # SAMPLING row keeps its NaN for _kept; every other row still needs clean logits.
        allow = (lenient and res.mode == GREEDY) or (nan_sampling and res.mode == SAMPLING)
        if nan and not allow:
            raise nan_error
        x0 = logits.to(self.device).to(self.dtype)
        x = rewrite_logits(x0, row, self.profile, allow_nan=allow)
        return res, x0, x

    def _choose_deterministic(self, res: Resolved, x: torch.Tensor) -> int:
        lenient = self.profile.greedy_degenerate == "argmax" and res.mode == GREEDY
        if not lenient and not (x > float("-inf")).any():
            raise RowError("no_valid_token", "every token is -inf after bias, penalties and bans")
        if res.mode == BEAM:
            return int(torch.argmax(torch.log_softmax(x / res.temperature, dim=-1)))
        return int(torch.argmax(x))

    def _kept(self, res: Resolved, x: torch.Tensor, profile: Optional[Profile] = None) -> torch.Tensor:
        """The kept set of a SAMPLING row: ``(V,)`` bool.

        ``profile`` (default the session's) is the one whose filter rules apply: the
        session's, or its batch variant (:meth:`batch_profiles`).

        A ``+inf`` in ``x`` is ``posinf_logits`` under ``profile.posinf_logits
        == "error"``; under ``"argmax"`` the kept set is the point mass on the
        lowest ``+inf`` id (:func:`.logprobs.posinf_point_mass`).

        A NaN in ``x`` (only under ``profile.nan_logits == "first_unmasked"``;
        :meth:`_prepare` rejects it otherwise) gives :meth:`_kept_nan`'s set.

        Raises
        ------
        RowError
            ``posinf_logits``; ``no_valid_token`` (every token ``-inf``);
            ``nan_logits`` (NaN under ``profile.nan_logits == "error"``).
        """
        nan = torch.isnan(x)
        if nan.any():
            return self._kept_nan(res, x, nan)
        if torch.isposinf(x).any():
            if self.profile.posinf_logits == "argmax":
                return posinf_point_mass(x)
            raise RowError("posinf_logits", "+inf logit in a sampling row: the distribution is undefined")
        if not (x > float("-inf")).any():
            raise RowError("no_valid_token", "every token is -inf after bias, penalties and bans")
        outcomes = chain(x, res, profile or self.profile)
        keep = outcomes[0].keep
        for o in outcomes[1:]:
            keep = keep | o.keep
        if len(self._chains) > (1 << 16):   # outside step() (speculative verification); step() clears it
            self._chains.clear()
        self._chains[id(keep)] = (keep, outcomes)
        return keep

    def _outcomes(self, keep: torch.Tensor):
        """The chain outcomes :meth:`_kept` found for ``keep``, or None (a point mass, a NaN row)."""
        hit = self._chains.get(id(keep))
        return hit[1] if hit is not None and hit[0] is keep else None

    def _plain(self, res: Resolved, keep: torch.Tensor) -> bool:
        """Whether the row draws ``softmax(x / T)`` on one kept set at its own temperature."""
        outs = self._outcomes(keep)
        return outs is None or (len(outs) == 1 and outs[0].temperature == res.temperature)

    def _kept_nan(self, res: Resolved, x: torch.Tensor, nan: torch.Tensor) -> torch.Tensor:
        """The kept set of a SAMPLING row holding NaN under ``profile.nan_logits == "first_unmasked"``.

        Min-p and top-p mask nothing (their softmax is NaN everywhere); top-k masks
        the values below the k-th largest, NaN ranked above every number (``torch.topk``'s
        order; with ``k`` NaN or more nothing is masked). If the lowest id left above
        ``-inf`` holds NaN, the set is that id alone (drawn on every seed); otherwise it
        is the unmasked ids less the NaN ones, a ``+inf`` among them following
        ``profile.posinf_logits``. Source: the profile field's citation (vLLM 0.32.0
        ``TopKTopPSampler.forward_cpu`` and ``fused_gumbel_argmax``).

        Parameters
        ----------
        res : Resolved
            Reads ``top_k`` (0 or ``>= V``: off).
        x : torch.Tensor
            ``(V,)`` rewritten logits holding at least one NaN.
        nan : torch.Tensor
            ``(V,)`` bool, ``torch.isnan(x)``.

        Returns
        -------
        torch.Tensor
            ``(V,)`` bool, at least one True.

        Raises
        ------
        RowError
            ``nan_logits`` under ``profile.nan_logits == "error"``; ``posinf_logits``
            for a kept ``+inf`` under ``profile.posinf_logits == "error"``.
        """
        if self.profile.nan_logits != "first_unmasked":
            raise RowError("nan_logits", f"NaN at token ids {torch.nonzero(nan).flatten()[:5].tolist()}")
        alive = ~torch.isneginf(x)
        V = x.shape[-1]
        if 0 < res.top_k < V:
            kth = torch.topk(x, res.top_k).values[-1]   # NaN sorts above every number
            alive &= ~(x < kth)                           # x < NaN is False: nothing masked
        first = int(torch.nonzero(alive).flatten()[0])   # a NaN is never masked, so one is left
        if bool(nan[first]):
            keep = torch.zeros_like(alive)
            keep[first] = True
            return keep
        keep = alive & ~nan
        if torch.isposinf(x[keep]).any():
            if self.profile.posinf_logits == "argmax":
                return posinf_point_mass(torch.where(keep, x, torch.full_like(x, float("-inf"))))
            raise RowError("posinf_logits", "+inf logit in a sampling row: the distribution is undefined")
        return keep

    @staticmethod
    def _draw_logits(x: torch.Tensor) -> torch.Tensor:
        # The logits the canonical draw sees: a +inf (kept alone, posinf_logits == "argmax")
        # or a NaN (kept alone, nan_logits == "first_unmasked"; a NaN outside the kept set is
        # masked anyway) becomes 0, so the draw's max-shift stays finite and a token kept
        # alone wins on every seed.
        return torch.where(torch.isposinf(x) | torch.isnan(x), torch.zeros_like(x), x)

    def _sampled_probs(self, res: Resolved, x: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        # The distribution a SAMPLING row is drawn from (PROCESSED logprobs): the point mass
        # of its kept +inf token under posinf_logits == "argmax" or of its kept NaN token under
        # nan_logits == "first_unmasked", else softmax(x / T) on keep.
        kx = x[keep]
        if torch.isposinf(kx).any() or torch.isnan(kx).any():
            return keep.to(x.dtype)
        if not self._plain(res, keep):
            # a dynamic temperature, or XTC's two outcomes weighted by its coin
            return mixture_probs(x, self._outcomes(keep))
        return processed_probs(x, keep, res.temperature)

    # -- the step ---------------------------------------------------------
    def batch_profiles(self, rows: Sequence[Row], admitted: Sequence[int]) -> dict:
        """The profile whose filter rules each admitted row follows, given its batch.

        Under ``profile.batch_min_p_filters`` (SGLang's FlashInfer backend) a row's batch is
        the admitted rows of its vocabulary size; when one of them sets ``min_p > 0`` (as
        given: a greedy row's ``min_p`` counts, as SGLang keeps it), the rows of that batch
        follow the profile with ``filter_order = batch_min_p_filters`` and
        ``filters_renormalise = True``. Without the field every row follows the session's
        profile.

        Parameters
        ----------
        rows : sequence of Row
        admitted : sequence of int
            Indices of the rows that passed the batch and validation checks.

        Returns
        -------
        dict
            Row index -> Profile, for ``admitted``.
        """
        if self.profile.batch_min_p_filters is None:
            return {i: self.profile for i in admitted}
        switched = dataclasses.replace(self.profile, filter_order=tuple(self.profile.batch_min_p_filters),
                                       filters_renormalise=True)
        with_min_p = {rows[i].vocab for i in admitted if rows[i].min_p is not None and rows[i].min_p > 0}
        return {i: switched if rows[i].vocab in with_min_p else self.profile for i in admitted}

    def step(self, rows: Sequence[Row]) -> list[RowResult]:
        """Sample one step for ``rows`` (see the module docstring for the pipeline).

        Parameters
        ----------
        rows : sequence of Row
            Each row's ``logits`` is ``(V_i,)``; vocabularies may differ
            between rows.

        Returns
        -------
        list of RowResult
            One per row, in order; ``error`` set for rejected rows.
        """
        out: list[Optional[RowResult]] = [None] * len(rows)
        self._chains.clear()
        staged = {}
        used_slots = set()
        draw_idx = []
        prepared = {}
        for i, row in enumerate(rows):
            try:
                claim_slot(row, used_slots, one_d=False)
                prepared[i] = self._prepare(row)
                self.seeds.observe(row.slot, row.request_id, effective_seed(row, self.profile),
                                   stream=row.child_stream)
                self.streams.observe(row.slot, row.request_id, effective_seed(row, self.profile))
            except RowError as e:
                out[i] = RowResult.failed(e, prepared[i][0].mode if i in prepared else None)
                prepared.pop(i, None)
        profiles = self.batch_profiles(rows, list(prepared))
        for i, (res, x0, x) in prepared.items():
            row = rows[i]
            try:
                if res.mode == SAMPLING:
                    if res.mirostat in (1, 2):
                        res = dataclasses.replace(res, mirostat_mu=self.mu.current(
                            row.slot, self._mirostat_key(row, res), res.mirostat_tau))
                    keep = self._kept(res, x, profiles[i])
                    staged[i] = (res, x0, x, keep)
                    draw_idx.append(i)
                else:
                    tok = self._choose_deterministic(res, x)
                    staged[i] = (res, x0, x, None)
                    out[i] = RowResult(token=tok, mode=res.mode)
            except RowError as e:
                out[i] = RowResult.failed(e, res.mode)
        self._draw(rows, staged, draw_idx, out)
        for i in draw_idx:
            if out[i].error is None:
                self._mirostat_update(rows[i], staged[i], out[i].token)
        for i, row in enumerate(rows):
            if out[i].error is None:
                self._annotate(row, staged[i], out[i])
        return out

    def _mirostat_key(self, row: Row, res: Resolved) -> tuple:
        """Who owns a slot's mirostat sampler: the request, its seed and its settings (a new one: a new sampler)."""
        return (row.request_id, effective_seed(row, self.profile), res.mirostat, res.mirostat_tau, res.mirostat_eta)

    def _mirostat_update(self, row: Row, staged, token: int) -> None:
        """After a mirostat row's draw: ``mu -= eta * (surprise of the token - tau)`` for its slot."""
        res, _x0, _x, keep = staged
        outs = self._outcomes(keep) if keep is not None else None
        st = outs[0].mirostat if outs else None
        if st is None:
            return
        pos = np.nonzero(st.ids == int(token))[0]
        p = float(st.p[int(pos[0])]) if len(pos) else 0.0   # a token outside the prefix: surprise inf
        self.mu.set(row.slot, self._mirostat_key(row, res), mirostat.update(st.mu, st.tau, st.eta, p))

    def _draw(self, rows, staged, draw_idx, out) -> None:
        # All sampling rows of the step in one call per vocabulary size.
        by_vocab: dict[int, list[int]] = {}
        for i in draw_idx:
            by_vocab.setdefault(rows[i].vocab, []).append(i)
        seeds_offsets = {i: self.seeds.take(rows[i].slot) for i in draw_idx}
        modelled = {}
        if self.profile.rng == "mt19937":
            for i in draw_idx:
                seed = mt19937.engine_seed(effective_seed(rows[i], self.profile))
                if seed is not None and self._outcomes(staged[i][3]) is not None:
                    modelled[i] = self._draw_mt19937(rows[i], staged[i], seed)
        for i, t in modelled.items():
            out[i] = RowResult(token=t, mode=SAMPLING, extra={"seed": seeds_offsets[i][0], "offset": seeds_offsets[i][1]})
        for V, idx in by_vocab.items():
            idx = [i for i in idx if i not in modelled]
            if not idx:
                continue
            plain = {i: self._plain(staged[i][0], staged[i][3]) for i in idx}
            # a row drawn from a mixture or at a dynamic temperature: Gumbel-max over log(probs) at T = 1
            x = self._draw_logits(torch.stack([staged[i][2] if plain[i] else
                                               torch.log(self._sampled_probs(staged[i][0], staged[i][2], staged[i][3]))
                                               for i in idx]))
            keep = torch.stack([staged[i][3] for i in idx])
            temp = torch.tensor([staged[i][0].temperature if plain[i] else 1.0 for i in idx], dtype=self.dtype,
                                device=self.device)
            seeds = torch.tensor([seeds_offsets[i][0] for i in idx], dtype=torch.int64)
            offs = torch.tensor([seeds_offsets[i][1] for i in idx], dtype=torch.int64)
            if self.profile.seed_keyed_by_batch_row:
                # The stream depends on the row's position in the sampling call (FlashInfer: the
                # admitted rows of one vocabulary): model the dependence by moving each row's
                # draw 2**40 counters per position (the reported offset stays the slot's).
                offs = offs + (torch.arange(len(idx), dtype=torch.int64) << 40)
            toks = gumbel_argmax(x, keep, temp, seeds, offs).tolist()
            for i, t in zip(idx, toks):
                out[i] = RowResult(token=int(t), mode=SAMPLING, extra={"seed": seeds_offsets[i][0], "offset": seeds_offsets[i][1]})

    def _draw_mt19937(self, row: Row, staged, seed: int) -> int:
        """llama.cpp's draw of one seeded row (profile ``rng == "mt19937"``; :mod:`.mt19937`).

        XTC's coin (its own generator) picks the outcome when XTC drew one; then ``dist``'s
        uniform walks the outcome's candidates in llama.cpp's array order.
        """
        res, _x0, x, keep = staged
        outs = self._outcomes(keep)
        o = outs[0]
        if o.mirostat is not None:
            # mirostat draws with its own generator (the slot's only one: no dist in its chain),
            # two outputs per draw, none with one candidate (std::discrete_distribution)
            st = o.mirostat
            u = self.streams.take_dist(row.slot, seed) if len(st.ids) >= 2 else None
            return int(st.ids[mirostat.pick(st.p, u)])
        if o.xtc_coin:
            coin = self.streams.take_xtc(row.slot, seed)
            if len(outs) == 2 and coin > res.xtc_probability:
                o = outs[1]
        u = self.streams.take_dist(row.slot, seed)
        return mt19937.dist_pick(x, self._array_order(x, o), o.temperature, u)

    @staticmethod
    def _array_order(x: torch.Tensor, o) -> torch.Tensor:
        """The kept ids of outcome ``o`` in llama.cpp's array order (:class:`.filters.Outcome`)."""
        ids = torch.nonzero(o.keep).flatten().cpu()
        if o.order == "descending":
            vals = x.detach().cpu().to(torch.float64)[ids]
            ids = ids[torch.sort(-vals, stable=True).indices]
        elif o.order == "typical":
            ids = ids[torch.sort(o.typical_key.cpu()[ids], stable=True).indices]
        return ids

    def _annotate(self, row: Row, staged, result: RowResult) -> None:
        res, x0, x, keep = staged
        tok = result.token
        if keep is None:
            probs = torch.zeros_like(x)
            probs[tok] = 1.0
        else:
            probs = self._sampled_probs(res, x, keep)
        result.rewritten_logits = x
        result.probs = probs
        stage = self.profile.raw_logprobs_stage
        raw_src = x0 if stage == "before_processing" else x
        if stage == "after_temperature" and keep is not None and res.temperature != 1.0:
            raw_src = x / res.temperature
        # processed logits at the temperature of the draw: a dynamic one where the row has it (one outcome)
        outs = self._outcomes(keep) if keep is not None else None
        t = outs[0].temperature if outs is not None and len(outs) == 1 else res.temperature
        lp = mode_vector(row.logprobs_mode, raw_src, x, keep, t, probs, self.profile.posinf_logits)
        result.raw_logprobs = lp
        for k, v in (*vector_outputs(row, lp).items(), *token_outputs(row, tok, lp, probs, self.profile).items()):
            setattr(result, k, v)

    def sample_many(self, row: Row, seeds: Sequence[int], chunk: Optional[int] = None) -> torch.Tensor:
        """Draw ``len(seeds)`` tokens from one row, each from its own seed at offset 0.

        The kept set and logits are computed once; only the draw is repeated, over the kept
        tokens alone and in blocks of at most :data:`.draw.DRAW_BLOCK_ELEMENTS` scores
        (:func:`.draw.gumbel_argmax_kept`: the same tokens as :meth:`step` draws), so the
        draws' working memory is about 21 MiB whatever the vocabulary and the number of draws
        (beyond the row's own ``O(V)`` tensors).

        Parameters
        ----------
        row : Row
            A row that resolves to SAMPLING.
        seeds : sequence of int
            One seed per draw (signed or unsigned 64-bit).
        chunk : int, optional
            Most scores per block (default :data:`.draw.DRAW_BLOCK_ELEMENTS`).

        Returns
        -------
        torch.Tensor
            ``(V,)`` int64 counts of each token.

        Raises
        ------
        RowError
            If the row is rejected, or resolves to a mode other than SAMPLING
            (``not_sampling``).
        """
        from .draw import DRAW_BLOCK_ELEMENTS, gumbel_argmax_kept
        block = int(chunk or DRAW_BLOCK_ELEMENTS)
        res, _x0, x = self._prepare(row)
        V = x.shape[-1]
        counts = torch.zeros(V, dtype=torch.int64)
        if res.mode != SAMPLING:
            tok = self._choose_deterministic(res, x)
            counts[tok] = len(seeds)
            return counts
        keep = self._kept(res, x, self.batch_profiles([row], [0])[0])   # the draws' batches: copies of the row
        plain = self._plain(res, keep)
        xd = self._draw_logits(x) if plain else torch.log(self._sampled_probs(res, x, keep))
        T = res.temperature if plain else 1.0
        sv = signed_seeds(seeds)   # the signed 64-bit view of each seed (SEMANTICS §1.6)
        cols = torch.nonzero(keep.cpu()).flatten().to(self.device)
        xk = xd[cols]
        fast = bool(torch.isfinite(xk.max())) and math.isfinite(float(T)) and float(T) > 0
        per_call = max(1, len(sv)) if fast else max(1, block // max(V, 1))
        for start in range(0, len(sv), per_call):
            part = sv[start:start + per_call]
            n = len(part)
            if fast:
                toks = gumbel_argmax_kept(xk, cols, float(T), part, torch.zeros(n, dtype=torch.int64))
            else:   # a kept +-inf or NaN, or an odd temperature: the step's own draw, a few rows at a time
                toks = gumbel_argmax(xd.expand(n, V), keep.expand(n, V),
                                     torch.full((n,), T, dtype=self.dtype, device=self.device),
                                     part, torch.zeros(n, dtype=torch.int64))
            counts += torch.bincount(toks.cpu(), minlength=V)
        return counts

    def first_draws(self, row: Row, seeds: Sequence[int]) -> list:
        """The token of ``row`` drawn first from each seed, as the profile's engine draws it.

        Each seed is a fresh request (a fresh chain under ``rng == "mt19937"``, offset 0 under
        the canonical RNG): the token-for-token counterpart of :meth:`sample_many`, for an
        implementation whose RNG the reference models.

        Returns
        -------
        list of int or None
            One token per seed; None where the seed's draw is not modelled (llama.cpp's
            random seed ``0xFFFFFFFF``).

        Raises
        ------
        RowError
            If the row is rejected.
        """
        if self.profile.rng == "mt19937":
            return self._first_draws_mt19937(row, seeds)
        out = []
        for s in seeds:
            seed = s
            if seed is None:
                out.append(None)
                continue
            fresh = ReferenceSession(self.profile, str(self.device), self.dtype)
            r = fresh.step([row.replace(seed=int(s), slot=0, request_id=None)])[0]
            if r.error:
                raise RowError(r.error, r.message or "")
            out.append(r.token)
        return out

    def _first_draws_mirostat(self, row: Row, st, seeds: Sequence[int]) -> list:
        """:meth:`first_draws` of a mirostat row: a new sampler per seed (``mu = 2 * tau``), one discrete draw."""
        effective_seed(row.replace(seed=int(seeds[0])) if len(seeds) else row, self.profile)
        eng = [None if self.profile.seed_minus_one_unseeded and int(s) == -1 else mt19937.engine_seed(int(s))
               for s in seeds]
        if len(st.ids) < 2:
            return [int(st.ids[0]) if e is not None else None for e in eng]
        live = [e for e in eng if e is not None]
        g = mt19937.first_outputs(live, 2)
        cp = mirostat.cumulative(st.p)
        u = (g[:, 0].astype(np.float64) + g[:, 1].astype(np.float64) * 4294967296.0) / 18446744073709551616.0
        u = np.where(u >= 1.0, np.nextafter(1.0, 0.0), u)
        idx = np.searchsorted(cp, u, side="left")
        out, j = [], 0
        for e in eng:
            if e is None:
                out.append(None)
                continue
            out.append(int(st.ids[int(idx[j])]))
            j += 1
        return out

    def _first_draws_mt19937(self, row: Row, seeds: Sequence[int]) -> list:
        """:meth:`first_draws` under llama.cpp's generators: the chain once, then one walk per seed."""
        res, _x0, x = self._prepare(row)
        if res.mode != SAMPLING:
            tok = self._choose_deterministic(res, x)
            return [tok if mt19937.engine_seed(s) is not None else None for s in seeds]
        keep = self._kept(res, x, self.batch_profiles([row], [0])[0])
        outs = self._outcomes(keep)
        if outs is None:   # a point mass (+inf under posinf_logits == "argmax")
            tok = int(torch.nonzero(keep).flatten()[0])
            return [tok if mt19937.engine_seed(s) is not None else None for s in seeds]
        if outs[0].mirostat is not None:
            return self._first_draws_mirostat(row, outs[0].mirostat, seeds)
        walks = [mt19937.walk(x, self._array_order(x, o), o.temperature) for o in outs]
        # the low 32 bits of the seed's pattern (a signed or unsigned view of it alike); validated once
        effective_seed(row.replace(seed=int(seeds[0])) if len(seeds) else row, self.profile)
        eng = [None if self.profile.seed_minus_one_unseeded and int(s) == -1 else mt19937.engine_seed(int(s))
               for s in seeds]
        live = [e for e in eng if e is not None]
        dist_g = mt19937.first_outputs(live, 2)
        xtc_g = dist_g[:, :1] if outs[0].xtc_coin else None   # XTC's generator has the same seed
        out, j = [], 0
        for e in eng:
            if e is None:
                out.append(None)
                continue
            w = 0
            if xtc_g is not None and len(outs) == 2 and mt19937.uniform_float(int(xtc_g[j, 0])) > res.xtc_probability:
                w = 1
            ids, cum = walks[w]
            u = mt19937.uniform_double(int(dist_g[j, 0]), int(dist_g[j, 1]))
            i = int(np.searchsorted(cum, cum[-1] * u, side="left"))
            out.append(int(ids[min(i, len(ids) - 1)]))
            j += 1
        return out
