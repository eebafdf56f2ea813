"""The placement record of one task try: where it ran, why, and every cluster attempt on the way.

The operator keeps it in the task's state store while the try runs (so a resumed or restarted try
continues it) and publishes it as the XCom ``fedsched_placement``; the Federation UI page reads it back.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field

XCOM_KEY = "fedsched_placement"
RECORD_VERSION = 1

FailureKind = Literal["insufficient", "evicted", "unreachable", "misconfigured"]
"""The failure vocabulary: why a cluster could not run a pod, in the federation's words (the cluster's
problem, never the task's). ``kube/failures.py`` classifies into it; the Federation page filters on it."""
FAILURE_KINDS: frozenset[str] = frozenset(get_args(FailureKind))
"""Attempt outcomes that moved the task to another cluster: a try with one of these failed over."""

AttemptOutcome = Literal["running", "succeeded", "failed", FailureKind]
"""``failed`` is the task's own failure; a :data:`FailureKind` moved the task to another cluster."""


class Attempt(BaseModel):
    """One pod in one cluster."""

    model_config = ConfigDict(extra="ignore")

    number: int
    cluster: str
    namespace: str
    pod: str
    placement_id: str
    outcome: AttemptOutcome = "running"
    reason: str = ""
    started_at: datetime
    ended_at: datetime | None = None
    resumed_from_checkpoint: bool = False
    running_at: datetime | None = None
    """When the operator saw the pod running (pod start latency = running_at - started_at)."""
    decision: str = ""
    """The decision's one-line reason for choosing this cluster."""


class PlacementRecord(BaseModel):
    """Everything the operator decided and did in one try."""

    model_config = ConfigDict(extra="ignore")

    version: int = RECORD_VERSION
    dag_id: str
    run_id: str
    task_id: str
    map_index: int = -1
    try_number: int
    cluster: str | None = None
    """Where the task finally ran (or is running)."""
    outcome: Literal["running", "waiting", "succeeded", "failed"] = "running"
    reason: str = ""
    plan_used: bool = False
    decisions: list[dict[str, Any]] = Field(default_factory=list)
    """Each decision's ``Decision.to_dict()``, in order (one per cluster attempt or wait)."""
    attempts: list[Attempt] = Field(default_factory=list)
    excluded: dict[str, str] = Field(default_factory=dict)
    """Clusters left during this try and why; the next decision skips them."""
    waited_seconds: float = 0.0
    failover_seconds: float = 0.0
    started_at: datetime
    ended_at: datetime | None = None

    @property
    def current(self) -> Attempt | None:
        return self.attempts[-1] if self.attempts else None

    def summary(self) -> str:
        """One line for logs: where it ran and which clusters it left on the way."""
        path = " -> ".join(f"{a.cluster}({a.outcome})" for a in self.attempts) or "no attempt"
        return f"{self.outcome}: {path}" + (f"; {self.reason}" if self.reason else "")
