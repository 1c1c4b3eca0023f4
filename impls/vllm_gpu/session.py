"""Sessions of the vLLM GPU implementations: vLLM's ``Sampler.sample`` and ``rejection_sample`` driven per step.

Imported lazily by :mod:`impls.vllm_gpu` (it loads the bundle through :mod:`.loader`).

What the adapter builds, as vLLM's GPU model runner would (vLLM 0.32.0,
``v1/worker/gpu_input_batch.py`` ``InputBatch.add_request`` and ``_make_sampling_metadata``;
``v1/worker/gpu_model_runner.py`` ``GPUModelRunner._update_states``):

* per row, from the reference's validation and mode resolution under the
  implementation's profile (vLLM's ``SamplingParams`` needs pydantic and msgspec, absent
  from the GPU machine): ``temperature`` 0 for a greedy request (``SamplingType.GREEDY``)
  else the resolved one; ``top_k`` the request's when ``0 < k < V``, else ``V``;
  ``top_p`` and ``min_p`` the request's; a greedy request keeps the ``top_k``, ``top_p``
  and ``min_p`` it gave (vLLM stores them whatever the sampling type);
* per batch: ``SamplingMetadata`` with ``temperature`` None when every row is greedy,
  ``top_k`` None when no row has ``0 < k < V``, ``top_p`` None when no row has ``p < 1``
  (``InputBatch.no_top_k`` / ``no_top_p``), ``generators`` ``{batch index:
  torch.Generator}`` for the seeded rows, no penalties, and the argmax-invariant
  processors: vLLM's own ``MinPLogitsProcessor`` fed a ``BatchUpdate`` of the batch;
* a seeded request's generator: ``torch.Generator(device).manual_seed(seed)`` when the
  request first takes its slot (a new request or a new seed in the slot), then kept
  across steps, as ``GPUModelRunner._update_states`` does (:class:`SlotGenerators`);
* ``Sampler`` and ``TopKTopPSampler`` objects built without their ``__init__`` (which
  picks ``forward`` from the platform and FlashInfer's availability and registers JIT
  warmups): :func:`make_sampler` binds ``forward`` to the path the implementation
  names, ``forward_native`` (vllm-triton: what ``__init__`` binds on CUDA when FlashInfer
  is off or a processed logprobs mode is configured) or ``forward_cuda``
  (vllm-flashinfer: what it binds on CUDA with FlashInfer on).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Optional, Sequence

import torch

from ..base import Row, RowError, RowResult, claim_slot
from ..profiles import Profile
from ..reference.modes import GREEDY, SAMPLING, effective_seed, resolve
from ..reference.sampler import ReferenceSession
from . import loader

__all__ = ["SlotGenerators", "make_sampler", "batch_params", "make_metadata", "VllmSamplerSession",
           "VllmRejectionScenarioSession", "device_of"]


def device_of(device: str) -> torch.device:
    """The torch device a session runs on (``cuda`` or ``cpu`` under Triton's interpreter)."""
    return torch.device(device)


def _bare(cls, **attrs):
    """An ``nn.Module`` subclass instance without its ``__init__`` (attributes set here)."""
    obj = cls.__new__(cls)
    torch.nn.Module.__init__(obj)
    for k, v in attrs.items():
        setattr(obj, k, v)
    return obj


def make_sampler(eng: loader.Engine, forward: str, logprobs_mode: str):
    """vLLM's ``Sampler`` with a ``TopKTopPSampler`` whose ``forward`` is ``forward`` (a method name).

    Parameters
    ----------
    eng : loader.Engine
    forward : {"forward_native", "forward_cuda"}
    logprobs_mode : str
        ``"processed_logits"`` (``Sampler.sample`` returns the masked logits: the
        distribution drawn from) or ``"raw_logprobs"`` (the default; required by
        ``forward_cuda``, which asserts FlashInfer is not asked for processed logits).

    Returns
    -------
    Sampler
        ``Sampler.sample(logits, metadata) -> (tokens, processed or None)``.
    """
    tks_mod = eng["v1.sample.ops.topk_topp_sampler"]
    tks = _bare(tks_mod.TopKTopPSampler, logprobs_mode=logprobs_mode, use_fp64_gumbel=False)
    tks.forward = getattr(tks, forward)
    return _bare(eng["v1.sample.sampler"].Sampler, topk_topp_sampler=tks, pin_memory=False,
                 logprobs_mode=logprobs_mode, use_fp64_gumbel=False)


class SlotGenerators:
    """Per-slot ``torch.Generator`` of seeded requests, as ``GPUModelRunner._update_states`` keeps them.

    A slot gets a fresh generator seeded with the request's seed when a new request (or
    a new seed) takes it; the generator then persists across the request's steps, so a
    seeded request's draws continue its own stream. The same rule as the CPU adapter's
    ``impls.vllm.session.VllmSession._generator`` (which imports vLLM, absent on the GPU
    machine).

    Parameters
    ----------
    device : torch.device
    """

    def __init__(self, device):
        self.device = torch.device(device)
        self._owner: dict = {}
        self._seed: dict = {}
        self._gen: dict = {}

    def get(self, slot: int, owner, seed: Optional[int]) -> Optional[torch.Generator]:
        """The generator of ``slot`` for ``owner`` with ``seed`` (signed 64-bit view), or None when unseeded.

        Raises
        ------
        RowError
            ``invalid_seed`` when ``torch.Generator.manual_seed`` refuses the seed.
        """
        if slot not in self._owner or self._owner[slot] != owner or self._seed.get(slot) != seed:
            self._owner[slot], self._seed[slot] = owner, seed
            self._gen.pop(slot, None)
        if seed is None:
            return None
        if slot not in self._gen:
            try:
                self._gen[slot] = torch.Generator(device=self.device).manual_seed(int(seed))
            except (RuntimeError, ValueError, OverflowError) as e:
                raise RowError("invalid_seed", f"seed {seed!r}: torch.Generator.manual_seed refused it ({e})") from None
        return self._gen[slot]


def batch_params(row: Row, res, V: int) -> dict:
    """One row's entries of the batch tensors, as ``InputBatch.add_request`` stores them.

    Parameters
    ----------
    row : Row
    res : impls.reference.modes.Resolved
        The reference's resolution under the implementation's profile.
    V : int

    Returns
    -------
    dict
        ``greedy`` (bool), ``temperature`` (0.0 for greedy), ``top_k`` (``V`` when off),
        ``top_p``, ``min_p``.
    """
    greedy = res.mode == GREEDY
    if greedy:  # vLLM keeps a greedy request's own filter values
        k = row.top_k if row.top_k is not None else 0
        p = row.top_p if row.top_p is not None else 1.0
        m = row.min_p if row.min_p is not None else 0.0
    else:
        k, p, m = res.top_k, res.top_p, res.min_p
    return {"greedy": greedy, "temperature": 0.0 if greedy else float(res.temperature),
            "top_k": int(k) if 0 < int(k) < V else V, "top_p": float(p), "min_p": float(m)}


def make_metadata(eng: loader.Engine, params: Sequence[dict], V: int, generators: dict, device) -> object:
    """vLLM's ``SamplingMetadata`` for one batch (module docstring), with its ``MinPLogitsProcessor``.

    Parameters
    ----------
    eng : loader.Engine
    params : sequence of dict
        :func:`batch_params` per row.
    V : int
    generators : dict
        ``{batch index: torch.Generator}`` of the seeded rows.
    device : torch.device

    Returns
    -------
    SamplingMetadata
    """
    dev = torch.device(device)
    B = len(params)
    greedy = [p["greedy"] for p in params]
    lp = eng["v1.sample.logits_processor.builtin"]
    iface = eng["v1.sample.logits_processor.interface"]
    cfg = SimpleNamespace(scheduler_config=SimpleNamespace(max_num_seqs=max(B, 1)))
    minp = lp.MinPLogitsProcessor(cfg, dev, False)
    minp.update_state(iface.BatchUpdate(batch_size=B, removed=[], moved=[],
                                        added=[(i, SimpleNamespace(min_p=p["min_p"]), None, [])
                                               for i, p in enumerate(params)]))
    f32 = dict(dtype=torch.float32, device=dev)
    return eng["v1.sample.metadata"].SamplingMetadata(
        temperature=None if all(greedy) else torch.tensor([p["temperature"] for p in params], **f32),
        all_greedy=all(greedy), all_random=not any(greedy),
        top_p=(torch.tensor([p["top_p"] for p in params], **f32) if any(p["top_p"] < 1 for p in params) else None),
        top_k=(torch.tensor([p["top_k"] for p in params], dtype=torch.int32, device=dev)
               if any(p["top_k"] < V for p in params) else None),
        generators=dict(generators), max_num_logprobs=None, no_penalties=True, prompt_token_ids=None,
        frequency_penalties=torch.zeros(B, **f32), presence_penalties=torch.zeros(B, **f32),
        repetition_penalties=torch.ones(B, **f32), output_token_ids=[], allowed_token_ids_mask=None,
        bad_words_token_ids={}, logitsprocs=eng["v1.sample.logits_processor.state"].LogitsProcessors([minp]))


class VllmSamplerSession:
    """One step = vLLM's ``Sampler.sample`` per vocabulary group, with ``forward`` bound as the implementation says.

    Parameters
    ----------
    profile : Profile
        Validation and mode resolution (the reference's, under this profile).
    device : str
    forward : {"forward_native", "forward_cuda"}
    distribution : callable
        ``distribution(x_after, md) -> (B, V)`` probabilities drawn from, given the
        logits as ``Sampler.sample`` left them and the metadata (the ``processed``
        logits' softmax for ``forward_native``; FlashInfer's renormalised
        distribution for ``forward_cuda``, :func:`impls.vllm_gpu.flashinfer_distribution`).
    logprobs_mode : str
    """

    def __init__(self, profile: Profile, device: str, forward: str, distribution, logprobs_mode: str):
        self.profile = profile
        self.device = device_of(device)
        self.engine = loader.load()
        self.forward = forward
        self.sampler = make_sampler(self.engine, forward, logprobs_mode)
        self.distribution = distribution
        self.generators = SlotGenerators(self.device)
        # a fresh engine's global generators (set_random_seed(ModelConfig.seed = 0)): unseeded draws
        # do not depend on what ran before in the process
        torch.manual_seed(0)

    def _call(self, x: torch.Tensor, md) -> tuple:
        sampled, processed = self.sampler.sample(x, md)
        return sampled.to(torch.int64).cpu(), processed

    def step(self, rows: Sequence[Row]) -> list:
        """Sample one step.

        Parameters
        ----------
        rows : sequence of Row
            ``logits`` ``(V,)`` float32/bfloat16/float16 (cast to float32 as
            ``Sampler.forward`` does).

        Returns
        -------
        list of RowResult
            One per row; ``extra`` holds ``vllm_forward`` (the bound method), ``batch_size``
            and ``seed``. ``engine_error`` for every row of a batch vLLM raised for.
        """
        out: list = [None] * len(rows)
        staged = {}
        used = set()
        for i, row in enumerate(rows):
            try:
                claim_slot(row, used)
                res = resolve(row, self.profile)
                seed = effective_seed(row, self.profile)
                gen = self.generators.get(row.slot, row.request_id, seed)
                staged[i] = (res, batch_params(row, res, row.vocab), gen, seed)
            except RowError as e:
                out[i] = RowResult.failed(e)
        groups: dict = {}
        for i in staged:
            groups.setdefault(rows[i].vocab, []).append(i)
        for V, idx in groups.items():
            params = [staged[i][1] for i in idx]
            gens = {j: staged[i][2] for j, i in enumerate(idx) if staged[i][2] is not None}
            x = torch.stack([rows[i].logits for i in idx]).to(device=self.device, dtype=torch.float32)
            try:
                md = make_metadata(self.engine, params, V, gens, self.device)
                tokens, processed = self._call(x, md)
                dist = self.distribution(x if processed is None else processed, md)
            except Exception as e:  # vLLM failed the whole batch (in the engine the step would fail)
                for i in idx:
                    out[i] = RowResult(error="engine_error", message=f"vLLM raised for the batch: "
                                                                     f"{type(e).__name__}: {e}")
                continue
            for j, i in enumerate(idx):
                res, p, _gen, seed = staged[i]
                tok = int(tokens[j])
                if res.mode == GREEDY:
                    probs = torch.zeros(V, dtype=torch.float32)
                    if 0 <= tok < V:
                        probs[tok] = 1.0
                else:
                    probs = dist[j].detach().to("cpu", torch.float32)
                r = RowResult(token=tok, mode=GREEDY if res.mode == GREEDY else SAMPLING, probs=probs,
                              extra={"vllm_forward": self.forward, "batch_size": len(idx)})
                if seed is not None:
                    r.extra["seed"] = int(seed)
                out[i] = r
        return out

    def sample_many(self, row: Row, seeds: Sequence[int], chunk: int = 8192) -> torch.Tensor:
        """``(V,)`` int64 counts of ``len(seeds)`` draws of ``row`` as unseeded requests.

        Each call is ``Sampler.sample`` on a batch of copies of the row (at most ``chunk``,
        and ``2**26 // V``), unseeded: the noise comes from torch's default generator,
        seeded once with ``seeds[0]`` (vLLM's own ``random_sample`` with no generators),
        as the CPU adapter's ``sample_many`` draws. Under Triton's interpreter the
        top-k/top-p kernel runs on one copy and ``random_sample`` draws the chunk from that
        copy's distribution: the kernel's programs handle whole rows, so every copy of a
        row is masked alike (a full batch per chunk would take hours in the interpreter).

        Raises
        ------
        RowError
            The row's rejection (validation).
        """
        res = resolve(row, self.profile)
        V = row.vocab
        counts = torch.zeros(V, dtype=torch.int64)
        n = len(seeds)
        if n == 0:
            return counts
        torch.manual_seed(int(seeds[0]) & ((1 << 63) - 1))
        p = batch_params(row, res, V)
        x0 = row.logits.to(device=self.device, dtype=torch.float32)
        m_max = max(1, min(chunk, (1 << 26) // V))
        tks = self.engine["v1.sample.ops.topk_topp_sampler"]
        done = 0
        while done < n:
            m = min(m_max, n - done)
            rows_k = m if self.device.type == "cuda" else 1
            md = make_metadata(self.engine, [p] * rows_k, V, {}, self.device)
            x = x0.expand(rows_k, V).clone()  # Sampler.sample writes into its logits (temperature, masks)
            tokens, processed = self._call(x, md)
            if rows_k < m:
                if res.mode == GREEDY:
                    tokens = tokens[:1].repeat(m)
                else:
                    probs = self.distribution(x if processed is None else processed, md)[:1]
                    tokens = tks.random_sample(probs.expand(m, V).contiguous(), {}).to(torch.int64).cpu()
            if bool((tokens < 0).any()) or bool((tokens >= V).any()):
                raise RowError("invalid_distribution", f"vLLM drew tokens outside [0, {V}): "
                                                       f"{sorted(set(tokens[(tokens < 0) | (tokens >= V)].tolist()))}")
            counts += torch.bincount(tokens, minlength=V)
            done += m
        return counts


class VllmRejectionScenarioSession(ReferenceSession):
    """The reference's scenario session plus ``verify_chain``: vLLM's ``rejection_sample`` (Triton kernels).

    Everything of a scenario but the verification of sampling requests runs on the
    reference (CPU, float32, the implementation's profile; :mod:`impls.reference.speculative`).
    Per call (one request, batch 1), as ``RejectionSampler.forward`` orders it
    (v1/sample/rejection_sampler.py@v0.32.0):

    1. the bonus token: vLLM's ``random_sample`` (topk_topp_sampler.py) on the target's
       ``p_K`` (in vLLM the main ``Sampler`` samples it from the bonus logits, with the
       request's generator, before the rejection sampler runs);
    2. ``rejection_sample`` with ``draft_probs = q``, ``target_logits = log p`` (so the
       ``softmax`` it takes gives back ``p``), ``draft_token_ids``, ``cu_num_draft_tokens =
       [K]``, the bonus token and a ``SamplingMetadata`` of one sampling request
       (``temperature`` 1: the distributions already hold the temperature; ``all_random``),
       with the request's generator: ``generate_uniform_probs`` (float64 uniforms, the
       acceptance test ``p/q >= u`` of ``rejection_random_sample_kernel``) and the
       exponential noise of ``sample_recovered_tokens`` (the recovered token, argmax of
       ``max(p - q, 0) / E``).

    A seeded request's generator is created on its first verification (offset 0 of its
    slot) and kept: the hook gets the request's seed and first Philox offset, and a later
    verification continues the generator of that seed last used at the largest offset
    below it (:attr:`_gens`; two requests with one seed at the same offsets are not told
    apart); unseeded requests (offset at or above the profile's ``unseeded_offset_base``)
    draw from the device's default generator, as vLLM's unseeded requests do.

    Parameters
    ----------
    profile : Profile
    device : str
        Where vLLM's kernels run (``cuda``; ``cpu`` under Triton's interpreter).
    """

    def __init__(self, profile: Profile, device: str = "cuda"):
        super().__init__(profile, "cpu", torch.float32)
        self.engine = loader.load()
        self.vdev = device_of(device)
        self._gens: dict = {}
        torch.manual_seed(0)

    def _generator(self, seed: int, offset: int) -> Optional[torch.Generator]:
        # A seeded request's first verification is at offset 0 of its slot (a new generator); a later one
        # continues the generator of that seed whose last verification was at the largest offset below this
        # one (offsets grow by the declared K + 1 per step, pads included, while the hook sees the examined K).
        if offset >= self.profile.unseeded_offset_base:
            return None
        entries = self._gens.setdefault(seed, [])
        if offset == 0:
            entry = [0, torch.Generator(device=self.vdev).manual_seed(int(seed))]
            entries.append(entry)
            return entry[1]
        before = [e for e in entries if e[0] < offset]
        if not before:
            raise RowError("engine_error", f"no generator of seed {seed} was used before offset {offset} (a "
                                           "request's verifications must come in order, from offset 0)")
        entry = max(before, key=lambda e: e[0])
        entry[0] = offset
        return entry[1]

    def verify_chain(self, draft_probs: torch.Tensor, draft_ids: torch.Tensor, target_probs: torch.Tensor,
                     seed: int, offset: int) -> tuple:
        """One request's verification by vLLM's ``rejection_sample`` (class docstring).

        Parameters
        ----------
        draft_probs : torch.Tensor
            ``(K, V)`` draft distributions ``q``.
        draft_ids : torch.Tensor
            ``(K,)`` draft tokens.
        target_probs : torch.Tensor
            ``(K + 1, V)`` target distributions ``p``.
        seed, offset : int
            The request's seed (signed 64-bit view) and first Philox offset.

        Returns
        -------
        (list of int, int)
            The emitted tokens (accepted drafts, then the recovered or bonus token) and the
            accepted count.

        Raises
        ------
        RowError
            ``invalid_distribution`` when the output is inconsistent (tokens outside
            ``[0, V)``, accepted ids that are not the drafts).
        """
        eng, dev = self.engine, self.vdev
        K, V = int(draft_ids.shape[0]), int(target_probs.shape[-1])
        gen = self._generator(int(seed), int(offset))
        gens = {0: gen} if gen is not None else {}
        tks = eng["v1.sample.ops.topk_topp_sampler"]
        p = target_probs.to(device=dev, dtype=torch.float32)
        bonus = tks.random_sample(p[K:K + 1].clone(), gens).to(torch.int32).reshape(1, 1)
        if K == 0:
            toks, n = [int(bonus[0, 0])], 0
        else:
            rs = eng["v1.sample.rejection_sampler"]
            md = make_metadata(eng, [{"greedy": False, "temperature": 1.0, "top_k": V, "top_p": 1.0, "min_p": 0.0}],
                               V, gens, dev)
            with torch.no_grad():
                target_logits = torch.log(p[:K]).contiguous()
            out = rs.rejection_sample(draft_ids.to(device=dev, dtype=torch.int32).contiguous(), [K], K,
                                      torch.tensor([K], dtype=torch.int32, device=dev),
                                      draft_probs.to(device=dev, dtype=torch.float32).contiguous(), target_logits,
                                      bonus.contiguous(), md)
            row = [int(t) for t in out[0].tolist()]
            toks = [t for t in row if t != rs.PLACEHOLDER_TOKEN_ID]
            n = len(toks) - 1
            if n < 0 or toks[:n] != [int(t) for t in draft_ids[:n].tolist()] or row[:n + 1] != toks:
                raise RowError("invalid_distribution", f"rejection_sample returned {row} for drafts "
                                                       f"{draft_ids.tolist()}")
        if not all(0 <= t < V for t in toks):
            raise RowError("invalid_distribution", f"vLLM returned tokens {toks} outside [0, {V})")
        return toks, n
