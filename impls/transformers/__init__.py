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

``import impls.transformers`` works without transformers installed; it is
imported inside the methods that need it.
"""

from __future__ import annotations

from typing import Optional

from ..base import Row
from ..profiles import HF, Profile
from ..registry import Entry
from .translate import SUPPORTED_FEATURES, unsupported_reason

__all__ = ["TransformersImpl", "IMPLEMENTATIONS"]


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
    """

    name = "transformers"
    features = SUPPORTED_FEATURES
    devices = frozenset({"cpu", "cuda"})
    slow = False
    #: HF's processors validate and rewrite, its warpers filter, ``_sample`` draws and its stopping
    #: criteria finish; the adapter keeps a generator per slot (HF has no per-request seed) and
    #: computes logprobs from HF's raw and processed scores with the reference's rank rules.
    stages = {"validation": "own", "logit_bias": "own", "penalties": "own", "bans": "own", "filters": "own",
              "draw": "own", "seeds": "adapter", "logprobs": "adapter", "finish": "own"}

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
        """A fresh :class:`~impls.transformers.session.TransformersSession` (no slot generators yet).

        Raises
        ------
        ImportError
            When transformers is not installed.
        """
        from .session import TransformersSession
        return TransformersSession(self.profile, device)


def _beam():
    from .beam import TransformersBeamImpl
    return TransformersBeamImpl()


IMPLEMENTATIONS = (Entry("transformers", TransformersImpl), Entry("transformers-beam", _beam))
