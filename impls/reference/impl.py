"""The reference sampler as an implementation under test (:class:`Reference`)."""

from __future__ import annotations

from typing import Optional

import torch

from ..base import FEATURES, STAGES, Row
from ..profiles import Profile, TRTLLM
from .sampler import REFERENCE_VERSION, ReferenceSession
from .scenario import run_scenario

__all__ = ["Reference"]


class Reference:
    """The reference implementation, as the harness sees it.

    Parameters
    ----------
    profile : Profile
        The semantics to follow (default ``trtllm``).
    dtype : torch.dtype
        Working dtype (``torch.float64`` for an oracle).
    name : str
        Display name (default ``"reference"``).

    Attributes
    ----------
    is_prediction : bool
        True: this implementation *is* the prediction of its profile, not an
        engine release (the runner checks engine versions against a
        profile's ``versions`` only for the others).
    """

    is_prediction = True

    #: The reference is the definition of every feature (a feature exists because the reference
    #: implements its rule, SEMANTICS.md), so it alone claims them all.
    features = frozenset(FEATURES)
    devices = frozenset({"cpu", "cuda"})
    slow = False
    #: Every stage is the reference's own code.
    stages = {s: "own" for s in STAGES}

    def __init__(self, profile: Profile = TRTLLM, dtype: torch.dtype = torch.float32, name: str = "reference"):
        self.profile = profile
        self.dtype = dtype
        self.name = name

    def version(self) -> str:
        """``"<rule version> (reference rules; torch <version>)"``: the first word stays a bare number."""
        return f"{REFERENCE_VERSION} (reference rules; torch {torch.__version__})"

    def available(self, device: str) -> Optional[str]:
        """``None`` when ``device`` is usable, else the reason."""
        if device.startswith("cuda") and not torch.cuda.is_available():
            return "no CUDA device"
        return None

    def unsupported(self, row: Row) -> Optional[str]:
        """The reference expresses every feature: always ``None``."""
        return None

    def open_session(self, device: str = "cpu") -> ReferenceSession:
        """A fresh :class:`ReferenceSession`."""
        return ReferenceSession(self.profile, device, self.dtype)

    def run_scenario(self, spec, device: str = "cpu"):
        """Decode a multi-step scenario on a fresh session (:func:`.scenario.run_scenario`).

        Parameters
        ----------
        spec : impls.reference.scenario.ScenarioSpec
        device : str

        Returns
        -------
        impls.reference.scenario.ScenarioResult
        """
        return run_scenario(spec, self.profile, self.open_session(device))
