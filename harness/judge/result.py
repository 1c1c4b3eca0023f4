"""One verdict, as results.json stores it, and the fixed set of statuses (DESIGN.md)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from .compare import jsonable

__all__ = ["Result", "STATUSES"]

#: The statuses, in report order (pinned; DESIGN.md "results.json").
STATUSES = ("pass", "known-diff", "known-bug", "fail", "n/a", "skip", "error")


@dataclass
class Result:
    """One (case, implementation) verdict, as written to results.json.

    Attributes
    ----------
    provenance : dict or None
        Whose code decided a verdict (:func:`harness.judge.provenance.provenance`):
        ``{"stages", "own_code", "borrowed"}``; None for a status that is not a verdict.
    """

    case: str
    impl: str
    status: str
    check: str
    seconds: float = 0.0
    details: dict = field(default_factory=dict)
    provenance: Optional[dict] = None

    @property
    def own_code(self) -> Optional[bool]:
        """Whether the implementation's own code decided the verdict (None: not a verdict)."""
        return None if self.provenance is None else bool(self.provenance["own_code"])

    def to_json(self) -> dict:
        """The results.json form (non-finite floats as strings; ``provenance`` only on verdicts)."""
        out = {"case": self.case, "impl": self.impl, "status": self.status, "check": self.check,
               "seconds": round(self.seconds, 6), "details": jsonable(self.details)}
        if self.provenance is not None:
            out["provenance"] = self.provenance
        return out
