"""The SGLang adapter's session: one decode step for a batch of rows, through SGLang's ``Sampler``.

Imported lazily (it imports SGLang through :mod:`.engine`).

Per step:

1. per row: slot check (``duplicate_slot``), :func:`.translate.unsupported_reason`
   (``unsupported``), :func:`.engine.make_request` (SGLang's own validation; a rejection is this
   row's error);
2. the valid rows, grouped by vocabulary size (an SGLang batch has one vocabulary; the corpus
   mixes sizes only in bad-input cases), form one batch each, in their order:
   :func:`.engine.run_batch`. An exception SGLang raises for the batch is an error of every row
   in it (``engine_error``): in the server it would fail the whole step;
3. per row: the token; the mode (greedy iff the request's ``top_k <= 1`` after
   ``SamplingParams.__post_init__``, SGLang's test in ``SamplingBatchInfo``); the RAW logprobs
   (SGLang's top logprobs over the whole vocabulary, scattered back to ids; with ``logprobs =
   -1`` they are also the row's ``vocab_logprobs``) and the sampled token's logprob as SGLang
   reports them; the distribution sampled from and the PROCESSED logprob from SGLang's sampling
   mask (the kept ids and their renormalised logprobs; one-hot for greedy rows); the rewritten
   logits; the finish reason of ``Req.update_finish_state``; with ``logprob_token_ids``, SGLang's
   logprobs of the request's ``token_ids_logprob`` in the order asked (``token_logprobs``).
   The rank is the adapter's: ``1 +`` the number of SGLang's logprobs strictly above the
   token's (SGLang reports none).

SGLang keeps no per-slot state the sampler reads: penalties come from each request's output
tokens, which every step replays into fresh penalizers, and seeds are not read (no
deterministic inference).
"""

from __future__ import annotations

from typing import Sequence

import torch

from ..base import Row, RowError, RowResult, claim_slot
from ..profiles import Profile
from . import engine
from .translate import unsupported_reason

__all__ = ["SglangSession"]

GREEDY, SAMPLING = "greedy", "sampling"


class SglangSession:
    """The batched step of the SGLang adapter.

    Parameters
    ----------
    profile : Profile
        Not read by the step (SGLang decides everything); kept for reports.
    device : str
        Only ``"cpu"`` (the pytorch sampling backend).

    Notes
    -----
    Opening a session seeds torch's global generator with SGLang's ``set_random_seed`` and the
    server's ``random_seed`` (:data:`.engine.RANDOM_SEED`), as a new server does, so draws are
    reproducible whatever ran earlier in the process.
    """

    def __init__(self, profile: Profile, device: str = "cpu"):
        self.profile = profile
        self.device = torch.device(device)
        rt = engine.runtime()
        rt["modules"].set_random_seed(engine.RANDOM_SEED)
        self.path = engine.path_description()
        self._rid = 0

    def _next_rid(self) -> str:
        self._rid += 1
        return f"sampcheck-{self._rid}"

    def step(self, rows: Sequence[Row]) -> list:
        """Sample one step for ``rows`` (``logits`` ``(V_i,)`` float32/bfloat16/float16).

        Returns
        -------
        list of RowResult
            One per row, in order. Error kinds: SGLang's rejections mapped by
            :func:`.translate.classify_validation_error`, ``duplicate_slot``, ``bad_logits``,
            ``unsupported`` (rows the harness never sends), ``engine_error`` (SGLang raised
            for the whole batch).
        """
        out: list = [None] * len(rows)
        reqs: dict = {}
        used = set()
        for i, row in enumerate(rows):
            try:
                claim_slot(row, used)
                why = unsupported_reason(row)
                if why is not None:
                    raise RowError("unsupported", why)
                reqs[i] = engine.make_request(row, self._next_rid(), row.vocab)
            except RowError as e:
                out[i] = RowResult.failed(e)
        groups: dict = {}
        for i in reqs:
            groups.setdefault(rows[i].vocab, []).append(i)
        for idx in groups.values():
            self._run_group(rows, idx, reqs, out)
        return out

    def _run_group(self, rows, idx, reqs, out) -> None:
        grp = [rows[i] for i in idx]
        dtypes = {r.logits.dtype for r in grp}
        dt = dtypes.pop() if len(dtypes) == 1 else torch.float32
        logits = torch.stack([r.logits.to(dt) for r in grp])
        try:
            res = engine.run_batch(grp, [reqs[i] for i in idx], logits)
        except Exception as e:  # SGLang failed the whole batch
            for i in idx:
                out[i] = RowResult(error="engine_error", message=f"SGLang raised for the batch: {type(e).__name__}: {e}")
            return
        for j, i in enumerate(idx):
            out[i] = self._result(rows[i], reqs[i], res, j)

    def _result(self, row: Row, req, res: engine.BatchOutput, j: int) -> RowResult:
        tok = res.tokens[j]
        V = row.vocab
        mode = GREEDY if req.sampling_params.top_k <= 1 else SAMPLING
        r = RowResult(token=tok, mode=mode)
        raw = torch.full((V,), float("-inf"), dtype=torch.float32)
        raw[torch.tensor(res.top_ids[j], dtype=torch.long)] = torch.tensor(res.top_vals[j], dtype=torch.float32)
        r.raw_logprobs = raw
        r.logprob = res.logprobs[j]
        r.rank = 1 + int((raw > raw[tok]).sum()) if 0 <= tok < V else None
        if row.logprobs == -1:
            # every token's logprob: the request asked top_logprobs_num = V (SGLang has no -1 spelling;
            # layers/logprob_processor.py get_top_logprobs_raw takes logprobs.topk(V)), laid out by id
            r.vocab_logprobs = raw.clone()
        elif row.logprobs is not None:
            top = [(int(t), float(v)) for t, v in zip(res.top_ids[j][:row.logprobs], res.top_vals[j][:row.logprobs])]
            if tok not in [t for t, _ in top]:
                top.append((tok, r.logprob))
            r.top_logprobs = top
        if row.logprob_token_ids is not None and res.token_ids_logprobs is not None:
            # the request's token_ids_logprob: SGLang's logprobs (the RAW vector above) at each id, in order
            r.token_logprobs = res.token_ids_logprobs[j]
        probs = torch.zeros(V, dtype=torch.float32)
        if res.support is not None:
            ids, lps = res.support[j]
            probs[torch.tensor(ids, dtype=torch.long)] = torch.tensor(lps, dtype=torch.float64).exp().to(torch.float32)
            r.processed_logprob = res.selected_logprob[j]
        elif 0 <= tok < V:
            probs[tok] = 1.0
            r.processed_logprob = 0.0
        r.probs = probs
        r.rewritten_logits = res.rewritten[j]
        r.finish_reason = engine.finish_reason(req, row, tok)
        r.extra["sglang_path"] = ({"greedy": self.path["greedy"]} if res.all_greedy else
                                  {k: self.path[k] for k in ("filters", "unfiltered_draw", "schedule")})
        return r

    def sample_many(self, row: Row, seeds: Sequence[int], chunk: int = 4096) -> torch.Tensor:
        """Draw ``len(seeds)`` tokens from one row with SGLang's ``Sampler``.

        The row is replicated into batches of at most ``chunk`` requests (``Sampler.forward``
        without logprobs or masks: :class:`.engine.Draws`). SGLang reads no per-request seed, so
        torch's global generator is seeded once with ``seeds[0]`` and the counts are
        reproducible for a given ``seeds`` list.

        Returns
        -------
        torch.Tensor
            ``(V,)`` int64 counts, summing to ``len(seeds)``.

        Raises
        ------
        RowError
            The row's error, as :meth:`step` would report it.
        """
        why = unsupported_reason(row)
        if why is not None:
            raise RowError("unsupported", why)
        base = row.replace(slot=0)
        engine.make_request(base, "check", 0, mask=False)  # SGLang's validation, as in step
        counts = torch.zeros(row.vocab, dtype=torch.int64)
        n = len(seeds)
        if n == 0:
            return counts
        torch.manual_seed(int(seeds[0]) & ((1 << 63) - 1))
        done, drawer = 0, None
        while done < n:
            m = min(chunk, n - done)
            try:
                if drawer is None or drawer.n != m:
                    drawer = engine.Draws(base, m)
                toks = drawer.draw()
            except Exception as e:
                raise RowError("engine_error", f"SGLang raised for the batch: {type(e).__name__}: {e}") from None
            bad = (toks < 0) | (toks >= row.vocab)
            if bool(bad.any()):
                raise RowError("engine_error", f"SGLang drew token id {int(toks[bad][0])} outside the vocabulary "
                                               f"[0, {row.vocab})")
            counts += torch.bincount(toks, minlength=row.vocab)
            done += m
        return counts
