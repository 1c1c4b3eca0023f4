"""FlashInfer's sampling functions as an implementation under test (GPU only).

FlashInfer is a kernel library, not an engine: it has no request
validation, logits processors (bias, penalties, bans), logprobs or stop
rules. This adapter drives exactly its sampling functions and declares
everything else absent (those cases are ``n/a``), so every token it reports
came out of a FlashInfer kernel. Pipeline of :meth:`FlashInferSession.step`,
in order:

1. per row on the host, as an engine does at admission: the slot check and
   the reference's validation and mode resolution under the ``flashinfer``
   profile (:func:`impls.reference.modes.resolve`); a GREEDY row becomes
   ``temperature = 1, top_k = 1`` (SGLang's normalisation, profile field
   ``greedy_as_top_k_1``), so FlashInfer decides greedy rows too;
2. ``(seed, offset)`` per row from per-slot bookkeeping
   (:class:`impls.reference.seeds.SeedManager`), passed as int64 tensors;
3. rows grouped by vocabulary; per group, ``flashinfer.sampling.softmax``
   with the per-row temperature tensor, then ``top_k_top_p_sampling_from_probs``
   (``filter_apply_order`` from the implementation: ``top_k_first`` or
   ``joint``) on the whole group for the rows without min-p, and
   ``min_p_sampling_from_probs`` on the whole group for the min-p rows, each
   with per-row tensors (neutral values, ``top_k = V``, ``top_p = 1``,
   ``min_p = 0``, for the rows the other call decides), ``deterministic=True``
   and ``return_valid=True``. FlashInfer keys a row's random stream by its
   position in the call (profile field ``seed_keyed_by_batch_row``), so every
   call sees the whole group: a row's stream never depends on which filters
   its neighbours use. :meth:`FlashInferSession.sample_many` (the draws of
   statistical checks, one row repeated) calls the function an engine picks
   for a batch of such rows: ``sampling_from_probs``,
   ``top_k_sampling_from_probs``, ``top_p_sampling_from_probs``,
   ``top_k_top_p_sampling_from_probs`` or ``min_p_sampling_from_probs``;
4. a row FlashInfer marks invalid becomes a per-row error, its kind read from
   the row's logits (``nan_logits``, ``posinf_logits``, ``no_valid_token``;
   ``invalid_distribution`` when none applies);
5. the distribution sampled from, for the report and ``support``
   expectations: ``top_k_renorm_probs`` / ``top_p_renorm_probs`` of the same
   softmax (for min-p, which has no renorm function, the kernel's rule
   ``p >= min_p * max p`` of ``MinPSamplingFromProbKernel`` applied with
   PyTorch).

Rows asking for min-p together with top-k or top-p are ``n/a``: FlashInfer
0.7.2 has no function that applies both.

Source of every rule: the installed ``flashinfer-python`` 0.7.2.post1
(``flashinfer/sampling.py``, ``include/flashinfer/sampling.cuh``), cited
field by field in :data:`impls.profiles.FLASHINFER`.

**Scenarios** (:meth:`FlashInferImpl.run_scenario`): speculative decoding
only. The reference's scenario runner (:mod:`impls.reference.scenario`)
decodes under the implementation's profile with a
:class:`FlashInferScenarioSession`: scripted models, drafting, the target
rows and their processed distributions, plain rows, offsets, emission and
finish rules stay the reference's; the verification of every speculative
request (all of them sample under this profile: a greedy request is
``top_k = 1``) is one call of ``chain_speculative_sampling`` per request
and step (:meth:`FlashInferScenarioSession.verify_chain`). What that
function does (``ChainSpeculativeSampling`` in ``sampling.cuh``): with
``u = curand_uniform`` in ``(0, 1]`` from ``curand_init(seed, batch row,
offset)``, draft ``i`` is accepted iff ``u * q_i(d) < p_i(d)`` (probability
``min(1, p/q)``); at the first rejection the token is drawn from
``relu(p_i - q_i)``; after ``K`` acceptances the bonus token is drawn from
``p_K``. It returns the ``(K + 1)`` tokens padded with ``-1``, an
"independent" acceptance count (every draft tested, not only the prefix:
not the accepted count) and ``emitted_draft_token_num``, the accepted
prefix, which is what the scenario records as ``accepted``. With a one-hot
target (greedy as ``top_k = 1``, no tie) and a one-hot draft the rule is
greedy verification: ``d = argmax p`` gives ``u * 1 < 1``, accepted unless
``u`` rounds to exactly 1.0 (``curand_uniform`` does for about ``2**-25``
of its outputs); ``d != argmax p`` gives ``u * 1 < 0``, rejected, and
``relu(p - q)`` is the one-hot of ``argmax p``, so the correction token is
the argmax, as is the bonus. Two edges of the kernel: a draft with
``q(d) = 0`` is accepted whenever ``p(d) > 0`` (the runner reports
``invalid_draft`` first, as the reference does); a rejection with
``relu(p - q)`` all zero (``p = q`` and ``u`` exactly 1.0) returns
``temp_storage.last_valid_id``, which this kernel never initialises
(the adapter turns a token outside ``[0, V)`` into ``invalid_distribution``).
Scenarios whose verdict would not involve this function are ``n/a``
(:func:`scenario_unsupported`).
"""

from __future__ import annotations

from typing import Optional, Sequence

import torch

from ..base import LatencyBatch, LatencyUnsupported, Row, RowError, RowResult, claim_slot
from ..profiles import FLASHINFER, FLASHINFER_JOINT, Profile
from ..registry import Entry
from ..reference.sampler import ReferenceSession

__all__ = ["FlashInferImpl", "FlashInferSession", "FlashInferScenarioSession", "IMPLEMENTATIONS", "SUPPORTED_FEATURES",
           "SCENARIO_FEATURES", "FUNCTIONS", "row_function", "scenario_unsupported"]

#: Features FlashInfer's sampling functions express (the others are ``n/a``).
SUPPORTED_FEATURES = frozenset({"temperature", "top_k", "top_p", "min_p", "seed", "low_precision_logits"})

#: Features of a speculative scenario this adapter can run: the finish rules
#: are the reference runner's there. The judge's feature check reads it
#: (:attr:`FlashInferImpl.scenario_features`) for scenario cases.
SCENARIO_FEATURES = SUPPORTED_FEATURES | frozenset({"end_id", "end_id_set", "ignore_eos", "stop_words",
                                                     "max_new_tokens", "max_seq_len", "finish_reason"})

#: Row kind → the FlashInfer function that samples it.
FUNCTIONS = {
    "plain": "sampling_from_probs",
    "top_k": "top_k_sampling_from_probs",
    "top_p": "top_p_sampling_from_probs",
    "top_k_top_p": "top_k_top_p_sampling_from_probs",
    "min_p": "min_p_sampling_from_probs",
}

#: Row fields that ask for a logits processor FlashInfer does not have.
_PROCESSOR_FIELDS = ("repetition_penalty", "presence_penalty", "frequency_penalty", "min_length",
                     "no_repeat_ngram_size", "top_p_decay")


def row_function(res, vocab: int) -> str:
    """The key of :data:`FUNCTIONS` for a row's resolved filter values.

    Parameters
    ----------
    res : impls.reference.modes.Resolved
        Read by name: ``top_k`` (0 or ``>= vocab``: off), ``top_p`` (1.0: off), ``min_p``
        (0.0: off).
    vocab : int

    Returns
    -------
    str
        ``"plain"``, ``"top_k"``, ``"top_p"``, ``"top_k_top_p"`` or ``"min_p"``.

    Raises
    ------
    ValueError
        When min-p is active together with top-k or top-p (no FlashInfer
        function applies both; :meth:`FlashInferImpl.unsupported` reports
        such rows as ``n/a`` before this is reached).
    """
    k_on = 0 < res.top_k < vocab
    p_on = res.top_p < 1.0
    if res.min_p > 0:
        if k_on or p_on:
            raise ValueError("min_p with top_k or top_p: no FlashInfer 0.7.2 function applies both")
        return "min_p"
    if k_on and p_on:
        return "top_k_top_p"
    return "top_k" if k_on else "top_p" if p_on else "plain"


def _error_kind(x: torch.Tensor) -> RowError:
    if bool(torch.isnan(x).any()):
        return RowError("nan_logits", "FlashInfer marked the row invalid (return_valid): NaN logit")
    if bool(torch.isposinf(x).any()):
        return RowError("posinf_logits", "FlashInfer marked the row invalid (return_valid): +inf logit")
    if not bool((x > float("-inf")).any()):
        return RowError("no_valid_token", "FlashInfer marked the row invalid (return_valid): every logit is -inf")
    return RowError("invalid_distribution", "FlashInfer marked the row invalid (return_valid)")


class FlashInferSession:
    """Per-slot seed bookkeeping and the calls of FlashInfer's sampling functions.

    Parameters
    ----------
    profile : Profile
        ``flashinfer`` or ``flashinfer-joint``.
    order : {"top_k_first", "joint"}
        ``filter_apply_order`` of ``top_k_top_p_sampling_from_probs``.
    device : str
        A CUDA device.
    """

    def __init__(self, profile: Profile, order: str, device: str = "cuda"):
        import flashinfer.sampling as fs

        from ..reference.seeds import SeedManager
        self.fs = fs
        self.profile = profile
        self.order = order
        self.device = torch.device(device)
        self.seeds = SeedManager(profile)

    # -- one group: same vocabulary, same function ---------------------------
    def _call(self, kind: str, probs, K, P, M, seeds, offs):
        fs = self.fs
        common = dict(deterministic=True, seed=seeds, offset=offs, return_valid=True)
        if kind == "plain":
            return fs.sampling_from_probs(probs, **common)
        if kind == "top_k":
            return fs.top_k_sampling_from_probs(probs, K, **common)
        if kind == "top_p":
            return fs.top_p_sampling_from_probs(probs, P, **common)
        if kind == "top_k_top_p":
            return fs.top_k_top_p_sampling_from_probs(probs, K, P, filter_apply_order=self.order, **common)
        return fs.min_p_sampling_from_probs(probs, M, **common)

    def _distribution(self, kind: str, probs, K, P, M) -> torch.Tensor:
        fs = self.fs
        if kind == "plain":
            return probs
        if kind == "top_k":
            return fs.top_k_renorm_probs(probs, K)
        if kind == "top_p":
            return fs.top_p_renorm_probs(probs, P)
        if kind == "top_k_top_p":
            if self.order == "top_k_first":
                return fs.top_p_renorm_probs(fs.top_k_renorm_probs(probs, K), P)
            keep = (fs.top_k_renorm_probs(probs, K) > 0) & (fs.top_p_renorm_probs(probs, P) > 0)
            q = torch.where(keep, probs, 0.0)
            return q / q.sum(-1, keepdim=True)
        keep = probs >= M.unsqueeze(1) * probs.max(-1, keepdim=True).values
        q = torch.where(keep, probs, 0.0)
        return q / q.sum(-1, keepdim=True)

    def _tensors(self, res_list, seeds_offsets):
        dev = self.device
        T = torch.tensor([r.temperature for r in res_list], dtype=torch.float32, device=dev)
        K = torch.tensor([r.top_k for r in res_list], dtype=torch.int32, device=dev)
        P = torch.tensor([r.top_p for r in res_list], dtype=torch.float32, device=dev)
        M = torch.tensor([r.min_p for r in res_list], dtype=torch.float32, device=dev)
        S = torch.tensor([s for s, _ in seeds_offsets], dtype=torch.int64, device=dev)
        O = torch.tensor([o for _, o in seeds_offsets], dtype=torch.int64, device=dev)
        return T, K, P, M, S, O

    def step(self, rows: Sequence[Row]) -> list:
        """Sample one step; see the module docstring for the pipeline.

        Parameters
        ----------
        rows : sequence of Row
            ``logits`` ``(V,)`` in float32, bfloat16 or float16 (upcast to
            float32: FlashInfer's sampling functions take float32).

        Returns
        -------
        list of RowResult
            One per row; ``extra`` names the FlashInfer function, the seed and
            the offset.
        """
        from ..reference.modes import effective_seed, resolve

        out: list = [None] * len(rows)
        staged = {}
        used = set()
        for i, row in enumerate(rows):
            try:
                claim_slot(row, used)
                res = resolve(row, self.profile)
                try:
                    kind = row_function(res, row.vocab)
                except ValueError as e:  # min-p with top-k/top-p: this row only (unsupported() says n/a first)
                    raise RowError("unsupported", str(e)) from None
                self.seeds.observe(row.slot, row.request_id, effective_seed(row, self.profile))
                staged[i] = (res, kind, row.logits.to(self.device).to(torch.float32), self.seeds.take(row.slot))
            except RowError as e:
                out[i] = RowResult.failed(e)
        # One call per FlashInfer function over the WHOLE group of a vocabulary, in batch order,
        # with neutral values for the rows another call decides: FlashInfer keys a row's stream
        # by its position in the call, so a row's position is its batch position whatever its
        # neighbours ask for (an engine passes the whole batch with per-row tensors).
        groups: dict = {}
        for i in staged:
            groups.setdefault(rows[i].vocab, []).append(i)
        for V, idx in groups.items():
            X = torch.stack([staged[i][2] for i in idx])
            T, K, P, M, S, O = self._tensors([staged[i][0] for i in idx], [staged[i][3] for i in idx])
            K = torch.where((K > 0) & (K < V), K, torch.full_like(K, V))  # 0 or >= V: no top-k
            probs = self.fs.softmax(X, temperature=T)
            kinds = [staged[i][1] for i in idx]
            answers = {}  # tokens and valid flags on the host, one transfer per call
            if any(k != "min_p" for k in kinds):
                answers["top_k_top_p"] = [t.tolist() for t in self._call("top_k_top_p", probs, K, P, M, S, O)]
            if any(k == "min_p" for k in kinds):
                answers["min_p"] = [t.tolist() for t in self._call("min_p", probs, K, P, M, S, O)]
            dists = {k: self._distribution(k, probs, K, P, M) for k in set(kinds)}  # per kind, whole group
            for j, i in enumerate(idx):
                res, kind, x, (seed, off) = staged[i]
                call = "min_p" if kind == "min_p" else "top_k_top_p"
                tok, valid = answers[call]
                if not valid[j]:
                    out[i] = RowResult.failed(_error_kind(x), res.mode)
                    continue
                out[i] = RowResult(token=int(tok[j]), mode=res.mode, probs=dists[kind][j],
                                   extra={"function": FUNCTIONS[call], "seed": seed, "offset": off,
                                          "batch_row": j})
        return out

    def sample_many(self, row: Row, seeds: Sequence[int], chunk: int = 8192) -> torch.Tensor:
        """``(V,)`` int64 counts of one draw per seed (offset 0), in batched calls.

        The row is replicated ``min(chunk, 2**26 // V)`` times per call, copy
        ``j`` with its own seed, through the function an engine picks for a
        batch of such rows (``sampling_from_probs``, ``top_k_/top_p_/
        top_k_top_p_/min_p_sampling_from_probs``; :meth:`step` always calls
        ``top_k_top_p_sampling_from_probs`` or ``min_p_sampling_from_probs``
        over a mixed batch), so the statistical cases test those functions.

        Parameters
        ----------
        row : Row
            The row to draw from; its ``seed`` is replaced by each of ``seeds``.
        seeds : sequence of int
            One seed per draw (a ``range`` is fine).
        chunk : int
            Largest number of copies per call (also capped at ``2**26 // V``).

        Raises
        ------
        RowError
            If the row is rejected or FlashInfer marks it invalid.
        """
        from ..reference.modes import effective_seed, resolve

        res = resolve(row, self.profile)
        kind = row_function(res, row.vocab)
        x = row.logits.to(self.device).to(torch.float32)
        V = x.shape[-1]
        counts = torch.zeros(V, dtype=torch.int64)
        n_max = max(1, min(chunk, (1 << 26) // V))
        for start in range(0, len(seeds), n_max):
            part = [effective_seed(row.replace(seed=int(s)), self.profile) for s in seeds[start:start + n_max]]
            n = len(part)
            T, K, P, M, _, _ = self._tensors([res] * n, [(0, 0)] * n)
            S = torch.tensor(part, dtype=torch.int64, device=self.device)
            O = torch.zeros(n, dtype=torch.int64, device=self.device)
            probs = self.fs.softmax(x.expand(n, V).contiguous(), temperature=T)
            tok, valid = self._call(kind, probs, K, P, M, S, O)
            if not bool(valid.all()):
                raise _error_kind(x)
            counts += torch.bincount(tok.long().cpu(), minlength=V)
        return counts


#: The value of each :data:`_PROCESSOR_FIELDS` entry that leaves the logits alone.
_NEUTRAL = {"repetition_penalty": 1.0, "presence_penalty": 0.0, "frequency_penalty": 0.0, "min_length": 0,
            "no_repeat_ngram_size": 0, "top_p_decay": 1.0}


def scenario_unsupported(spec) -> Optional[str]:
    """Why a scenario's verdict would not involve FlashInfer (``n/a``), or ``None``.

    Every reason found is listed (``; ``-separated), each naming its request:

    * beam search (FlashInfer has none);
    * a logits processor (penalties, ``min_length``, ``no_repeat_ngram_size``,
      top-p decay, ``logit_bias``, ``bad_words``): FlashInfer has none, and
      a case about one would judge the reference's code;
    * no request with ``draft_len > 0``: ``chain_speculative_sampling`` is
      FlashInfer's only multi-step function, plain rows are the reference's;
    * ``d2t``: the reference admits it for greedy requests only, and the
      profile has no greedy mode (``greedy_as_top_k_1``), so the request
      would end in ``invalid_d2t`` at admission, before any FlashInfer call;
    * literal drafts without a ``draft_model``: no draft probabilities to
      pass (the reference fails such a sampling request with
      ``invalid_draft``, again before any FlashInfer call).

    Parameters
    ----------
    spec : impls.reference.scenario.ScenarioSpec
    
    Returns
    -------
    str or None
        The reasons, or ``None`` when FlashInfer decides the verdict.
    """
    why = []
    for r in spec.requests:
        f = r.fields
        if r.use_beam_search:
            why.append(f"request {r.id}: FlashInfer has no beam search")
        used = [k for k in _PROCESSOR_FIELDS if f.get(k) is not None and f.get(k) != _NEUTRAL[k]]
        used += [k for k in ("logit_bias", "bad_words") if f.get(k)]
        if used:
            why.append(f"request {r.id}: FlashInfer has no logits processors ({', '.join(used)})")
        if r.draft_len > 0 and r.d2t is not None:
            why.append(f"request {r.id}: d2t is admitted for greedy requests only and this profile samples greedy "
                       "requests with top_k = 1 (invalid_d2t at admission; no FlashInfer call)")
        if r.draft_len > 0 and spec.draft_model is None:
            why.append(f"request {r.id}: literal drafts without a draft_model: no draft probabilities for "
                       "chain_speculative_sampling")
    if not any(r.draft_len > 0 for r in spec.requests):
        why.append("no speculative request: chain_speculative_sampling is FlashInfer's only multi-step function "
                   "(plain multi-step rows would run on the reference)")
    return "; ".join(why) or None


class FlashInferScenarioSession(ReferenceSession):
    """The reference's scenario session plus ``verify_chain``, FlashInfer's speculative verification.

    Everything but the verification runs on the reference (CPU, float32,
    the implementation's profile); see :mod:`impls.reference.speculative`.

    Parameters
    ----------
    profile : Profile
    device : str
        The CUDA device FlashInfer runs on.
    """

    def __init__(self, profile: Profile, device: str = "cuda"):
        import flashinfer.sampling as fs
        super().__init__(profile, "cpu", torch.float32)
        self.fs = fs
        self.fi_device = torch.device(device)

    def verify_chain(self, draft_probs: torch.Tensor, draft_ids: torch.Tensor, target_probs: torch.Tensor,
                     seed: int, offset: int) -> tuple:
        """One request's verification: ``chain_speculative_sampling`` with batch 1.

        Parameters
        ----------
        draft_probs : torch.Tensor
            ``(K, V)``, the draft distributions ``q`` (for the literal drafts
            of a greedy request under ``greedy_as_top_k_1``, the one-hot of
            each draft: :func:`impls.reference.speculative.greedy_by_convention`).
        draft_ids : torch.Tensor
            ``(K,)``, the draft tokens the runner examines, all in ``[0, V)``:
            a literal list padded with ``-1`` arrives cut before its first
            pad (``K`` = that position, ``target_probs`` rows ``0..K``), so
            the pad's position is the bonus draw and the kernel never reads a
            ``-1`` as an index (FlashInfer 0.7.2 does, flashinfer-ai/flashinfer#879;
            PR #3551's fix rejects it instead, the same token with a zero ``q``
            row there).
        target_probs : torch.Tensor
            ``(K + 1, V)``, the target's processed distributions ``p``.
        seed, offset : int
            The request's Philox seed (signed 64-bit view) and the first of
            the offsets the runner took from its slot (one per declared
            draft, pads included, plus one), passed as
            one-element int64 tensors: batch row 0, so the stream depends on
            the request's seed and offset only.

        Returns
        -------
        (list of int, int)
            The emitted tokens (accepted drafts, then the correction or bonus
            token) and the accepted count (``emitted_draft_token_num``). With
            ``K = 0`` (no draft this step) the token comes from
            ``sampling_from_probs`` on ``p_0``, what the chain kernel draws
            after full acceptance.

        Raises
        ------
        RowError
            ``invalid_distribution`` when FlashInfer returns a token outside
            ``[0, V)`` or an inconsistent count (its residual draw reads an
            uninitialised index when ``relu(p - q)`` is all zero).
        """
        fs, dev = self.fs, self.fi_device
        K, V = int(draft_ids.shape[0]), int(target_probs.shape[-1])
        S = torch.tensor([int(seed)], dtype=torch.int64, device=dev)
        O = torch.tensor([int(offset)], dtype=torch.int64, device=dev)
        tp = target_probs.to(device=dev, dtype=torch.float32).reshape(1, K + 1, V).contiguous()
        if K == 0:
            tok, valid = fs.sampling_from_probs(tp[:, 0].contiguous(), deterministic=True, seed=S, offset=O,
                                                return_valid=True)
            if not bool(valid[0]):
                raise RowError("invalid_distribution", "FlashInfer marked the target row invalid (return_valid)")
            toks, n = [int(tok[0])], 0
        else:
            dp = draft_probs.to(device=dev, dtype=torch.float32).reshape(1, K, V).contiguous()
            ids = draft_ids.to(device=dev, dtype=torch.int32).reshape(1, K).contiguous()
            out, _independent, emitted = fs.chain_speculative_sampling(dp, ids, tp, deterministic=True,
                                                                       seed=S, offset=O)
            n = int(emitted[0])
            row = [int(t) for t in out[0].tolist()]
            toks = row[:n + 1] if 0 <= n <= K else row
            if not 0 <= n <= K or toks[:n] != [int(t) for t in draft_ids[:n].tolist()]:
                raise RowError("invalid_distribution", f"chain_speculative_sampling returned {row} with "
                               f"emitted_draft_token_num {n} for drafts {draft_ids.tolist()}")
        if not 0 <= toks[-1] < V:
            raise RowError("invalid_distribution", f"FlashInfer returned token {toks[-1]} outside [0, {V})")
        return toks, n


class FlashInferImpl:
    """FlashInfer's sampling functions behind the implementation protocol.

    Parameters
    ----------
    order : {"top_k_first", "joint"}
        ``filter_apply_order`` for rows with both top-k and top-p; selects the
        profile ``flashinfer`` or ``flashinfer-joint``.
    """

    features = SUPPORTED_FEATURES
    devices = frozenset({"cuda"})
    slow = False
    #: FlashInfer's functions filter and draw (and verify drafts in scenarios); validation, mode
    #: resolution, seed bookkeeping and a scenario's decode are the reference's.
    stages = {"validation": "reference", "filters": "own", "draw": "own", "seeds": "reference",
              "decode": "reference", "finish": "reference", "speculative": "own"}

    def __init__(self, order: str = "top_k_first"):
        if order not in ("top_k_first", "joint"):
            raise ValueError(f"filter_apply_order must be 'top_k_first' or 'joint', got {order!r}")
        self.order = order
        self.profile = FLASHINFER if order == "top_k_first" else FLASHINFER_JOINT
        self.name = self.profile.name
        #: ``flashinfer`` is also the latency suite's peer (one filter order is timed).
        self.roles = frozenset({"conformance", "latency"}) if order == "top_k_first" else frozenset({"conformance"})

    def version(self) -> str:
        """The installed ``flashinfer-python`` distribution's version.

        Raises
        ------
        importlib.metadata.PackageNotFoundError
            When FlashInfer is not installed (call :meth:`available` first).
        """
        from importlib import metadata
        return metadata.version("flashinfer-python")

    def available(self, device: str) -> Optional[str]:
        """``None`` on a CUDA device with FlashInfer importable, else the reason.

        Parameters
        ----------
        device : str
            ``"cpu"`` or ``"cuda"``.

        Returns
        -------
        str or None
        """
        if not str(device).startswith("cuda"):
            return "FlashInfer's sampling kernels run only on CUDA devices (use --device cuda)"
        if not torch.cuda.is_available():
            return "no CUDA device"
        try:
            import flashinfer.sampling  # noqa: F401
        except Exception as e:  # ImportError, or a broken install
            return f"flashinfer is not importable: {type(e).__name__}: {e}"
        return None

    def describe(self, device: str = "cuda") -> dict:
        """Facts recorded with the run: which parts came from FlashInfer.

        Returns
        -------
        dict
            ``from_engine`` (softmax with temperature, the five sampling
            functions, the renorm functions), ``from_harness`` (validation
            and mode resolution, seed bookkeeping, the min-p support of the
            reported distribution), ``filter_apply_order``.
        """
        return {"from_engine": "flashinfer.sampling: softmax(temperature), " + ", ".join(FUNCTIONS.values())
                + ", top_k_renorm_probs, top_p_renorm_probs; in scenarios chain_speculative_sampling (the "
                "verification of speculative requests; everything else of a scenario is the reference's)",
                "from_harness": "validation and mode resolution (reference, flashinfer profile), per-slot seeds and "
                                "offsets, the min-p support of the reported distribution",
                "filter_apply_order": self.order}

    def unsupported(self, row: Row) -> Optional[str]:
        """Why FlashInfer cannot express ``row`` (``n/a``), or ``None``.

        Parameters
        ----------
        row : Row

        Returns
        -------
        str or None
            A logits processor at a non-neutral value, logprobs, beam search,
            or min-p together with top-k/top-p; ``None`` otherwise (also for
            an invalid row: the step reports its error).
        """
        from ..reference.modes import resolve

        for f in _PROCESSOR_FIELDS:
            v = getattr(row, f)
            if v is not None and v != _NEUTRAL[f]:
                return f"FlashInfer has no logits processors ({f}): engines apply them before sampling"
        if row.logit_bias or row.bad_words:
            return "FlashInfer has no logits processors (logit_bias, bad_words): engines apply them before sampling"
        if row.logprobs is not None:
            return "FlashInfer's sampling functions return no logprobs"
        if row.use_beam_search:
            return "FlashInfer has no beam search"
        try:
            res = resolve(row, self.profile)
            row_function(res, row.vocab)
        except RowError:
            return None  # the step reports the rejection
        except ValueError as e:
            return str(e)
        return None

    def open_session(self, device: str = "cuda") -> FlashInferSession:
        """A fresh :class:`FlashInferSession`.

        Raises
        ------
        ImportError
            When FlashInfer is not installed.
        """
        return FlashInferSession(self.profile, self.order, device)

    #: Features of the scenarios :meth:`run_scenario` can run (see :data:`SCENARIO_FEATURES`).
    scenario_features = SCENARIO_FEATURES

    def run_scenario(self, spec, device: str = "cuda"):
        """Decode a speculative scenario on the reference runner with FlashInfer's verification.

        See the module docstring, "Scenarios".

        Raises
        ------
        impls.reference.scenario.ScenarioUnsupported
            With :func:`scenario_unsupported`'s reasons.
        """
        from ..reference.scenario import ScenarioUnsupported, run_scenario

        why = scenario_unsupported(spec)
        if why:
            raise ScenarioUnsupported(why)
        return run_scenario(spec, self.profile, FlashInferScenarioSession(self.profile, device))

    def latency_call(self, batch: LatencyBatch) -> tuple:
        """FlashInfer for a mix, with per-row tensors (greedy rows as top_k = 1, SGLang's convention).

        ``minp005`` is ``softmax`` + ``min_p_sampling_from_probs``; ``mixed``
        splits the batch into a ``top_k_top_p_sampling_from_logits`` call and a
        min-p call (no FlashInfer function applies min-p with top-k/top-p).

        Returns
        -------
        (callable, bool)
            ``fn(logits)`` and whether it may be graph-captured (not ``mixed``: its two calls index
            the batch).

        Raises
        ------
        LatencyUnsupported
            When ``flashinfer.sampling`` does not import.
        """
        try:
            import flashinfer.sampling as fs
        except Exception as e:  # reported as the skip reason
            raise LatencyUnsupported(f"flashinfer is not importable: {type(e).__name__}: {e}") from None
        rows, dev, vocab, B = batch.params, batch.device, batch.vocab, batch.batch
        seed, off = batch.seeds()
        kp = [i for i, r in enumerate(rows) if r[3] == 0.0]
        mp = [i for i, r in enumerate(rows) if r[3] > 0.0]
        K = torch.tensor([(1 if r[0] == 0 else (r[1] or vocab)) for r in rows], dtype=torch.int32, device=dev)
        P = torch.tensor([r[2] for r in rows], dtype=torch.float32, device=dev)
        M = torch.tensor([r[3] for r in rows], dtype=torch.float32, device=dev)
        if not mp:
            return (lambda x: fs.top_k_top_p_sampling_from_logits(x, K, P, deterministic=True, seed=seed,
                                                                   offset=off)), True
        if not kp:
            return (lambda x: fs.min_p_sampling_from_probs(torch.softmax(x, -1), M, deterministic=True, seed=seed,
                                                           offset=off)), True
        ikp = torch.tensor(kp, device=dev)
        imp = torch.tensor(mp, device=dev)
        Kk, Pk, Mm = K[ikp], P[ikp], M[imp]
        sk, ok, sm, om = seed[ikp], off[ikp], seed[imp], off[imp]

        def call(x):
            out = torch.empty(B, dtype=torch.int32, device=dev)
            out[ikp] = fs.top_k_top_p_sampling_from_logits(x[ikp], Kk, Pk, deterministic=True, seed=sk, offset=ok)
            out[imp] = fs.min_p_sampling_from_probs(torch.softmax(x[imp], -1), Mm, deterministic=True, seed=sm,
                                                    offset=om)
            return out
        return call, False


IMPLEMENTATIONS = (Entry("flashinfer", FlashInferImpl), Entry("flashinfer-joint", lambda: FlashInferImpl("joint")))
