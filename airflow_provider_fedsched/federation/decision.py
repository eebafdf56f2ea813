"""The outcome of one placement decision: the choice, every ranked candidate and every rejection.

Plain dataclasses and a named tuple rather than pydantic models: a decision over 1,000 clusters creates
thousands of these, from already-validated data, so construction cost matters. ``to_dict``/``from_dict``
give the JSON form.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, NamedTuple, cast

__all__ = ["Candidate", "Decision", "Outcome", "Rejection", "ScoreTerm"]

Outcome = Literal["placed", "wait", "impossible"]


class ScoreTerm(NamedTuple):
    raw: float
    """What the plugin measured (cost in currency, locality %, ...)."""
    normalized: float
    """0..100 across the candidates, higher is better."""
    weight: float
    weighted: float
    """normalized x weight; a candidate's score is the sum of these."""


@dataclass(slots=True)
class Candidate:
    cluster: str
    score: float
    breakdown: dict[str, ScoreTerm]

    def to_dict(self) -> dict[str, Any]:
        return {
            "cluster": self.cluster,
            "score": round(self.score, 6),
            "breakdown": {
                name: {
                    "raw": term.raw,
                    "normalized": round(term.normalized, 6),
                    "weight": term.weight,
                    "weighted": round(term.weighted, 6),
                }
                for name, term in self.breakdown.items()
            },
        }


@dataclass(slots=True)
class Rejection:
    cluster: str
    plugin: str
    reason: str
    permanent: bool = False
    """True when the cluster could never take this task (versus "not now")."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "cluster": self.cluster,
            "plugin": self.plugin,
            "reason": self.reason,
            "permanent": self.permanent,
        }


@dataclass(slots=True)
class Decision:
    outcome: Outcome
    cluster: str | None
    candidates: list[Candidate]
    """Ranked best first: score desc, then cost asc, then cluster name."""
    rejected: list[Rejection]
    snapshot_age_seconds: dict[str, float]
    reason: str
    decided_at: datetime
    spec_fingerprint: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def placed(self) -> bool:
        return self.outcome == "placed"

    def to_dict(self) -> dict[str, Any]:
        return {
            "outcome": self.outcome,
            "cluster": self.cluster,
            "reason": self.reason,
            "decided_at": self.decided_at.isoformat(),
            "spec_fingerprint": self.spec_fingerprint,
            "candidates": [candidate.to_dict() for candidate in self.candidates],
            "rejected": [rejection.to_dict() for rejection in self.rejected],
            "snapshot_age_seconds": {name: round(age, 3) for name, age in self.snapshot_age_seconds.items()},
            **({"extra": self.extra} if self.extra else {}),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Decision:
        return cls(
            outcome=cast(Outcome, data["outcome"]),
            cluster=data.get("cluster"),
            candidates=[
                Candidate(
                    cluster=c["cluster"],
                    score=float(c["score"]),
                    breakdown={name: ScoreTerm(**term) for name, term in c.get("breakdown", {}).items()},
                )
                for c in data.get("candidates", [])
            ],
            rejected=[Rejection(**r) for r in data.get("rejected", [])],
            snapshot_age_seconds=dict(data.get("snapshot_age_seconds", {})),
            reason=data.get("reason", ""),
            decided_at=datetime.fromisoformat(data["decided_at"]),
            spec_fingerprint=data.get("spec_fingerprint"),
            extra=dict(data.get("extra", {})),
        )
