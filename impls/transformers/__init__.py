"""Adapter for Hugging Face transformers' generation-time sampling (profile ``hf``).

It drives transformers' **own** code, without a model: the model-free
methods of ``GenerationMixin`` (``_prepare_generation_config``,
``_prepare_special_tokens``, ``_prepare_generated_length``,
``_validate_generated_length``, ``_get_logits_processor``,
``_get_stopping_criteria``) build the ``LogitsProcessor`` list and the
stopping criteria exactly as ``generate`` does in transformers 5.24.0, and
the token is chosen as ``GenerationMixin._sample`` does (``softmax`` +
``torch.multinomial`` when sampling, ``torch.argmax`` otherwise). See
:mod:`.translate` for the Row -> ``generate`` argument mapping, :mod:`.hf`
for the borrowed machinery and :mod:`.session` for the step.

A row's mode is ``do_sample`` as a transformers user would write the call
(:func:`.translate.resolve_do_sample`): the row's ``do_sample`` when it sets
one; else ``temperature = 0`` is greedy (``generate``'s default
``do_sample=False``; ``do_sample=True`` with it is ``invalid_temperature``);
else any sampling parameter set means ``do_sample=True``.

``import impls.transformers`` works without transformers installed; it is
imported inside the methods that need it.
"""

from __future__ import annotations

from typing import Optional

from ..base import Row
from ..profiles import HF, Profile
from ..registry import Entry
from ..reference.scenario_types import ScenarioResult, ScenarioSpec
from .beam import BEAM_FEATURES
from .translate import SCENARIO_FEATURES, SUPPORTED_FEATURES, unsupported_reason

__all__ = ["TransformersImpl", "TransformersBeamImpl", "IMPLEMENTATIONS"]


class TransformersImpl:
    """Hugging Face transformers as an implementation under test.

    Parameters
    ----------
    profile : Profile
        The profile whose reference run predicts it (default
        :data:`impls.profiles.HF`); the adapter reads ``raw_logprobs_stage``,
        ``rank_rule`` and ``finish_order`` from it.

    Attributes
    ----------
    name : str
        ``"transformers"``.
    features : frozenset of str
        What the adapter can express (:data:`.translate.SUPPORTED_FEATURES`):
        no presence/frequency penalty, top-p decay, beam search or canonical
        RNG.
    scenario_features : frozenset of str
        What :meth:`run_scenario` (``generate()`` per request on a scripted
        model, :mod:`.scenario`) can express: the above less logprobs,
        processed and low-precision logits, plus beam search.
    """

    name = "transformers"
    features = SUPPORTED_FEATURES
    #: What :meth:`run_scenario` expresses (:data:`.translate.SCENARIO_FEATURES`): beam search
    #: too, no logprobs (a scenario reports none).
    scenario_features = SCENARIO_FEATURES
    devices = frozenset({"cpu", "cuda"})
    slow = False
    #: HF's processors validate and rewrite, its warpers filter, ``_sample`` draws and its stopping
    #: criteria finish; the adapter computes logprobs from HF's raw and processed scores with the
    #: reference's rank rules. Seeds: HF has no per-request seed; a seeded row or request is seeded
    #: by ``transformers.set_seed(seed)`` (trainer_utils.py, v5.24.0 and v4.57.6), what an HF user
    #: calls before ``generate()``, and drawn from torch's global generator as ``_sample`` draws.
    #: Where the adapter keeps a stream in HF's stead (a slot's request continued over several
    #: session steps; ``sample_many``'s one stream for many seeds) its session says so
    #: (``stages_used``: the case's provenance reads ``seeds: adapter``; :mod:`.session`).
    #: Scenarios: ``generate()``'s loop decodes each request (``_sample``, ``_beam_search``);
    #: the scenario's schedule is mapped onto it by the adapter (:mod:`.scenario`).
    stages = {"validation": "own", "logit_bias": "own", "penalties": "own", "bans": "own", "filters": "own",
              "draw": "own", "seeds": "own", "logprobs": "adapter", "finish": "own", "decode": "own",
              "beam": "own"}

    def __init__(self, profile: Profile = HF):
        self.profile = profile

    def version(self) -> str:
        """``transformers.__version__``.

        Raises
        ------
        ImportError
            When transformers is not installed (call :meth:`available` first).
        """
        import transformers
        return transformers.__version__

    def available(self, device: str) -> Optional[str]:
        """``None`` when transformers imports and ``device`` is usable, else the reason."""
        try:
            import transformers  # noqa: F401
            from transformers.generation import logits_process  # noqa: F401
        except Exception as e:  # ImportError, or a broken install
            return f"transformers is not importable: {type(e).__name__}: {e}"
        import torch
        if str(device).startswith("cuda") and not torch.cuda.is_available():
            return "no CUDA device"
        return None

    def unsupported(self, row: Row) -> Optional[str]:
        """Why transformers cannot express ``row`` (the harness reports ``n/a``), or ``None``.

        See :func:`.translate.unsupported_reason`.
        """
        return unsupported_reason(row)

    def open_session(self, device: str = "cpu"):
        """A fresh :class:`~impls.transformers.session.TransformersSession` (no seeded slot streams yet).

        Raises
        ------
        ImportError
            When transformers is not installed.
        """
        from .session import TransformersSession
        return TransformersSession(self.profile, device)

    def run_scenario(self, spec, device: str = "cpu"):
        """Run a multi-step scenario: each request is one ``generate()`` call on the scripted model.

        See :func:`.scenario.run_scenario` (plain requests sample or decode greedily through
        ``_sample``, beam requests through ``_beam_search``).

        Raises
        ------
        impls.reference.scenario.ScenarioUnsupported
            What ``generate()`` cannot express, with the reason (``n/a``).
        ImportError
            When transformers is not installed.
        """
        from .scenario import run_scenario
        return run_scenario(spec, self.profile, device)


class TransformersBeamImpl:
    """Hugging Face's ``generate()`` beam search as an implementation under test.

    Parameters
    ----------
    profile : Profile
        Default :data:`impls.profiles.HF`.

    Attributes
    ----------
    name : str
        ``"transformers-beam"``.
    features : frozenset of str
        Empty: single-step rows are not this driver's business.
    scenario_features : frozenset of str
        :data:`.beam.BEAM_FEATURES`: what :meth:`run_scenario` expresses.

    Defined here, not in :mod:`.scenario`, so that building it (what the registry does to
    read its declarations) imports no transformers.
    """

    name = "transformers-beam"
    features = frozenset()
    scenario_features = BEAM_FEATURES
    devices = frozenset({"cpu", "cuda"})
    slow = False
    #: ``generate()`` runs the whole decode with a scripted model; only the model is the project's.
    #: ``draw`` (the token of each step, :data:`impls.base.STAGES`): a beam's tokens are chosen by
    #: ``_beam_search``'s own top-k over the beam scores, not by a random draw.
    stages = {"validation": "own", "logit_bias": "own", "penalties": "own", "bans": "own", "logprobs": "own",
              "finish": "own", "decode": "own", "beam": "own", "draw": "own"}

    def __init__(self, profile: Profile = HF):
        self.profile = profile

    def version(self) -> str:
        """``transformers.__version__``."""
        import transformers
        return transformers.__version__

    def available(self, device: str) -> Optional[str]:
        """``None`` when transformers imports (and ``device`` is usable), else the reason."""
        try:
            import transformers  # noqa: F401
        except Exception as e:
            return f"transformers is not importable: {type(e).__name__}: {e}"
        import torch
        if str(device).startswith("cuda") and not torch.cuda.is_available():
            return "no CUDA device"
        return None

    def unsupported(self, row: Row) -> Optional[str]:
        """Single-step rows are not this driver's business (scenario cases only)."""
        return "the beam driver runs scenario cases only"

    def run_scenario(self, spec: ScenarioSpec, device: str = "cpu") -> ScenarioResult:
        """Run a beam-search scenario through ``generate()``: the ``transformers`` implementation's
        scenario driver (:func:`impls.transformers.scenario.run_scenario`) limited to scenarios
        whose every request uses beam search.

        Raises
        ------
        ScenarioUnsupported
            When any request does not use beam search or cannot be expressed (see
            :mod:`impls.transformers.scenario` and the module docstring).
        """
        from .scenario import run_scenario
        return run_scenario(spec, self.profile, device, beams_only=True)


IMPLEMENTATIONS = (Entry("transformers", TransformersImpl), Entry("transformers-beam", TransformersBeamImpl))
