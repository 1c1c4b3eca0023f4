"""The session of ``sglang-flashinfer``: one decode step through SGLang's own ``SamplingBatchInfo`` and ``Sampler``.

Imported lazily by :mod:`impls.sglang_gpu` (it loads the bundle through :mod:`.loader`).

Per step, for the rows of one vocabulary size (an SGLang batch has one vocabulary):

1. per row (the adapter's): slot check (``duplicate_slot``), the reference's validation and
   mode resolution under the implementation's profile (SGLang's ``SamplingParams`` needs
   msgspec, absent from the GPU machine), then the request's sampling values as
   ``SamplingParams.__post_init__`` leaves them (:func:`request`: unset values at their class
   defaults, ``0 <= temperature < _SAMPLING_EPS`` becomes temperature 1 and ``top_k = 1``,
   ``top_k = -1`` becomes ``TOP_K_ALL``; both constants read from the bundle), wrapped in the
   part of a ``Req`` that SGLang reads here (its sampling parameters, no custom logit
   processor, the sampling mask asked for with ``sampling_logprobs_mode = "support"``);
2. SGLang's: ``SamplingBatchInfo.from_schedule_batch`` on the batch (which builds the batch
   tensors, the penalizers, and decides ``is_all_greedy`` and ``need_top_k/top_p/min_p_sampling``),
   then ``Sampler.forward`` on ``LogitsProcessorOutput(next_token_logits = the float32 logits)``
   without logprobs: temperature, softmax, then argmax for an all-greedy batch, or the
   FlashInfer backend's branch for the batch, and the sampling mask (the kept ids and their
   renormalised logprobs, SGLang's own report of the distribution it sampled from);
3. per row: the token, the mode (greedy iff the request's ``top_k <= 1``, SGLang's test), the
   distribution from the mask (one-hot for an all-greedy batch), and in ``extra`` the branch
   SGLang took for the batch (:func:`branch`).

An exception SGLang raises for the batch is every row's ``engine_error`` (in the server it would
fail the step). SGLang reads no per-request seed here (no deterministic inference): the
FlashInfer kernels draw from torch's default generator, which the session seeds once with the
server's ``random_seed`` (:data:`RANDOM_SEED`), as ``Scheduler.__init__`` does.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Sequence

import torch

from ..base import Row, RowError, RowResult, claim_slot
from ..profiles import Profile
from ..reference.modes import resolve
from . import loader

__all__ = ["RANDOM_SEED", "request", "branch", "SglangFlashInferSession"]

#: The server's ``random_seed`` (as :data:`impls.sglang.engine.RANDOM_SEED`).
RANDOM_SEED = 42

GREEDY, SAMPLING = "greedy", "sampling"


def request(row: Row, constants: dict, mask: bool = True) -> SimpleNamespace:
    """The part of an SGLang ``Req`` for ``row`` that ``from_schedule_batch``, the penalizers and the sampler read.

    Parameters
    ----------
    row : Row
        Already validated (the reference's validation).
    constants : dict
        ``TOP_K_ALL`` and ``_SAMPLING_EPS`` (:attr:`loader.Engine.constants`).
    mask : bool
        Ask for the sampling mask (``return_sampling_mask``, support logprobs).

    Returns
    -------
    SimpleNamespace
        ``sampling_params`` (``temperature``, ``top_p``, ``top_k``, ``min_p`` as
        ``SamplingParams.__post_init__`` leaves them, sglang/srt/sampling/sampling_params.py@v0.5.23;
        penalties at their neutral defaults, the row's seed as ``sampling_seed``, which
        ``from_schedule_batch`` reads only under deterministic inference; no logit bias or custom
        parameters),
        ``return_sampling_mask``, ``sampling_logprobs_mode``, ``custom_logit_processor``.
    """
    t = 1.0 if row.temperature is None else float(row.temperature)
    k = -1 if row.top_k is None else int(row.top_k)
    if 0 <= t < constants["_SAMPLING_EPS"]:
        t, k = 1.0, 1
    if k == -1:
        k = constants["TOP_K_ALL"]
    sp = SimpleNamespace(temperature=t, top_p=1.0 if row.top_p is None else float(row.top_p), top_k=k,
                         min_p=0.0 if row.min_p is None else float(row.min_p), frequency_penalty=0.0,
                         presence_penalty=0.0, repetition_penalty=1.0, min_new_tokens=0, logit_bias=None,
                         sampling_seed=row.seed, custom_params=None, stop_token_ids=None)
    return SimpleNamespace(sampling_params=sp, return_sampling_mask=mask,
                           sampling_logprobs_mode="support" if mask else "selected", custom_logit_processor=None,
                           eos_token_ids=None)


class _Batch:
    """The part of a ``ScheduleBatch`` ``SamplingBatchInfo`` and the penalizers read (weak-referenceable)."""

    def __init__(self, reqs: list, device: str):
        self.reqs = reqs
        self.device = device


def branch(info, backend: str) -> str:
    """The code path ``Sampler.forward`` takes for a batch, read from SGLang's own ``SamplingBatchInfo`` flags.

    Returns
    -------
    str
        ``"argmax"`` (``is_all_greedy``), ``"sampling_from_probs_torch"`` (no filter in the
        batch), ``"flashinfer: top_k_renorm_prob, top_p_renorm_prob, min_p_sampling_from_probs"``
        (``need_min_p_sampling``), ``"flashinfer: top_k_top_p_sampling_from_probs(joint)"``, or
        ``"top_k_top_p_min_p_sampling_from_probs_torch"`` (the pytorch backend).
    """
    if info.is_all_greedy:
        return "argmax"
    if not (info.need_top_p_sampling or info.need_top_k_sampling or info.need_min_p_sampling):
        return "sampling_from_probs_torch"
    if backend != "flashinfer":
        return "top_k_top_p_min_p_sampling_from_probs_torch"
    if info.need_min_p_sampling:
        return "flashinfer: top_k_renorm_prob, top_p_renorm_prob, min_p_sampling_from_probs"
    return "flashinfer: top_k_top_p_sampling_from_probs(joint)"


class SglangFlashInferSession:
    """The batched step of ``sglang-flashinfer`` (module docstring).

    Parameters
    ----------
    profile : Profile
        Validation and mode resolution (the reference's, under this profile).
    device : str
        ``"cuda"``; ``"cpu"`` runs the same files for the CPU kind (the pytorch backend, tests).
    kind : {"cuda", "cpu"}, optional
        The loader's kind (default: ``"cuda"`` on a CUDA device, else ``"cpu"``).
    engine : loader.Engine, optional
        A loaded bundle (default :func:`loader.load` for ``kind``).
    """

    def __init__(self, profile: Profile, device: str = "cuda", kind: str = None, engine=None):
        self.profile = profile
        self.device = torch.device(device)
        self.kind = kind or ("cuda" if self.device.type == "cuda" else "cpu")
        self.engine = engine or loader.load(kind=self.kind)
        self.backend = self.engine.config.kernel.sampling_backend
        with self.engine.active():
            self.sampler = self.engine.sampler.Sampler()
        torch.manual_seed(RANDOM_SEED)

    def _forward(self, reqs: list, logits: torch.Tensor) -> tuple:
        """``from_schedule_batch`` and ``Sampler.forward`` on one batch: ``(token ids, info, mask output)``."""
        eng = self.engine
        V = logits.shape[-1]
        batch = _Batch(reqs, str(self.device))
        with eng.active():
            info = eng.batch_info.SamplingBatchInfo.from_schedule_batch(batch, V)
            out = eng.classes["LogitsProcessorOutput"](next_token_logits=logits)
            positions = torch.zeros(len(reqs), dtype=torch.int64, device=self.device)
            ids = self.sampler.forward(out, info, False, [0] * len(reqs), [None] * len(reqs), positions)
        return ids.to(torch.int64).cpu(), info, out.sampling_mask_output

    def step(self, rows: Sequence[Row]) -> list:
        """Sample one step for ``rows`` (``logits`` ``(V_i,)``, cast to float32).

        Returns
        -------
        list of RowResult
            One per row, in order; ``extra`` holds ``sglang_path`` (:func:`branch`) and
            ``batch_size``. Errors: the reference's validation kinds, ``duplicate_slot``,
            ``engine_error`` (SGLang raised for the batch, or its sampling mask says INVALID).
        """
        out: list = [None] * len(rows)
        staged = {}
        used = set()
        for i, row in enumerate(rows):
            try:
                claim_slot(row, used)
                resolve(row, self.profile)   # the reference's validation under the profile
                staged[i] = request(row, self.engine.constants)
            except RowError as e:
                out[i] = RowResult.failed(e)
        groups: dict = {}
        for i in staged:
            groups.setdefault(rows[i].vocab, []).append(i)
        for V, idx in groups.items():
            reqs = [staged[i] for i in idx]
            x = torch.stack([rows[i].logits for i in idx]).to(device=self.device, dtype=torch.float32)
            try:
                ids, info, mask = self._forward(reqs, x)
            except Exception as e:  # SGLang failed the whole batch
                for i in idx:
                    out[i] = RowResult(error="engine_error", message=f"SGLang raised for the batch: "
                                                                     f"{type(e).__name__}: {e}")
                continue
            path = branch(info, self.backend)
            for j, i in enumerate(idx):
                out[i] = self._result(V, reqs[j], int(ids[j]), mask, j, path, len(idx))
        return out

    @staticmethod
    def _result(V: int, req, tok: int, mask, j: int, path: str, n: int) -> RowResult:
        mode = GREEDY if req.sampling_params.top_k <= 1 else SAMPLING
        extra = {"sglang_path": path, "batch_size": n}
        if mask is not None and int(mask.statuses[j]) != 0:
            return RowResult(error="engine_error", message=f"SGLang's sampling mask for the row has status "
                                                           f"{int(mask.statuses[j])} (1 overflow, 2 invalid): "
                                                           f"token {tok}", mode=mode)
        probs = torch.zeros(V, dtype=torch.float32)
        if mask is not None and mask.support_logprobs is not None:
            k = int(mask.lengths[j])
            ids = mask.token_ids[j, :k].to(torch.long).cpu()
            probs[ids] = mask.support_logprobs[j, :k].to(torch.float64).exp().to(torch.float32).cpu()
        elif 0 <= tok < V:
            probs[tok] = 1.0
        return RowResult(token=tok, mode=mode, probs=probs, extra=extra)

    def sample_many(self, row: Row, seeds: Sequence[int], chunk: int = 8192) -> torch.Tensor:
        """``(V,)`` int64 counts of ``len(seeds)`` draws of ``row``.

        Each call is SGLang's production path on a batch of copies of the row (at most
        ``chunk`` and ``2**26 // V``; no sampling mask): ``from_schedule_batch`` and
        ``Sampler.forward``. SGLang reads no per-request seed: torch's default generator is
        seeded once with ``seeds[0]``, so the counts are reproducible for a given ``seeds``.

        Raises
        ------
        RowError
            The row's rejection (the reference's validation), or ``engine_error`` when SGLang
            raises or draws a token outside the vocabulary.
        """
        resolve(row, self.profile)
        V = row.vocab
        counts = torch.zeros(V, dtype=torch.int64)
        n = len(seeds)
        if n == 0:
            return counts
        torch.manual_seed(int(seeds[0]) & ((1 << 63) - 1))
        x0 = row.logits.to(device=self.device, dtype=torch.float32)
        m_max = max(1, min(chunk, (1 << 26) // V))
        done = 0
        while done < n:
            m = min(m_max, n - done)
            reqs = [request(row, self.engine.constants, mask=False) for _ in range(m)]
            try:
                toks, _info, _mask = self._forward(reqs, x0.expand(m, V).clone())
            except Exception as e:
                raise RowError("engine_error", f"SGLang raised for the batch: {type(e).__name__}: {e}") from None
            bad = (toks < 0) | (toks >= V)
            if bool(bad.any()):
                raise RowError("engine_error", f"SGLang drew token id {int(toks[bad][0])} outside [0, {V})")
            counts += torch.bincount(toks, minlength=V)
            done += m
        return counts
