"""One verdict, as results.json stores it, and the fixed set of statuses (DESIGN.md)."""

from __future__ import annotations

from dataclasses import dataclass, field

from .compare import jsonable

__all__ = ["Result", "STATUSES"]

#: The statuses, in report order (pinned; DESIGN.md "results.json").
STATUSES = ("pass", "known-diff", "known-bug", "fail", "n/a", "skip", "error")


@dataclass
class Result:
    """One (case, implementation) verdict, as written to results.json."""

    case: str
    impl: str
    status: str
    check: str
    seconds: float = 0.0
    details: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        """The results.json form (non-finite floats as strings)."""
        return {"case": self.case, "impl": self.impl, "status": self.status, "check": self.check,
                "seconds": round(self.seconds, 6), "details": jsonable(self.details)}
