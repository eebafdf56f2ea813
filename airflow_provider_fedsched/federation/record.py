"""The placement record of one task try: where it ran, why, and every cluster attempt on the way.

The operator keeps it in the task's state store while the try runs (so a resumed or restarted try
continues it) and publishes it as the XCom ``fedsched_placement``; the Federation UI page reads it back.
"""

from __future__ import annotations

import hashlib
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

AttemptOutcome = Literal["running", "succeeded", "failed", "lost", "cancelled", FailureKind]
"""``failed`` is the task's own failure; a :data:`FailureKind` moved the task to another cluster; ``lost``:
the pod's cluster or node did not answer within the task's ``unreachable_grace``, so the try failed rather
than start the work twice (the pod is deleted once its cluster answers); ``cancelled``: the task was ended
from the UI or the API and its pod deleted."""


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
    preferred_node: str | None = None
    """The node the decision preferred (its ``Fragmentation`` hint): the pod asks for it with a preferred
    node affinity, the member's scheduler decides."""
    adopted: bool = False
    """The pod is an earlier try's, found still running or finished and watched to its end."""
    failed_at: datetime | None = None
    """When the cluster's failure was first seen (the first call without an answer, the eviction...)."""
    tenant: str | None = None
    price_per_hour: float = 0.0
    """The cluster's price of the task's requests per hour (``federation/costs.py``)."""
    egress_gb: float = 0.0
    """Data the task reads from other clusters: moved once its pod runs."""
    egress_cost: float = 0.0
    cost: float | None = None
    """Estimated cost of this attempt, set when it ends: price per hour x hours its pod ran, plus the
    egress cost if it ran at all (an attempt that never ran moved and used nothing)."""
    indices: str | None = None
    """A divided Job's slice (``divide=True``): the global indices this attempt's Job ran, as Kubernetes
    writes completed indexes (``0-19,25``); None for a whole Job or a pod (and in older records)."""

    def accrued_cost(self, until: datetime) -> tuple[float, float]:
        """``(cost, egress GB)`` of this attempt up to ``until`` (or its end)."""
        if self.running_at is None:
            return 0.0, 0.0
        end = self.ended_at or until
        hours = max(0.0, (end - self.running_at).total_seconds()) / 3600.0
        return round(self.price_per_hour * hours + self.egress_cost, 6), self.egress_gb


LEFT_BY_EARLIER_TRIES = 64
"""At most this many of the earlier tries' unread attempts are carried (the latest)."""


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
    """Clusters left during this try and why; a decision skips them until a snapshot taken after they
    were left shows them answering (then the rules judge their room again)."""
    excluded_at: dict[str, datetime] = Field(default_factory=dict)
    impossible: dict[str, str] = Field(default_factory=dict)
    """Clusters that can never take this task, learnt at run time (a request above a hard quota)."""
    decisions_dropped: int = 0
    tenant: str | None = None
    """The tenant the task ran for, if any."""
    """Older decisions left out to keep the record small (the first and the latest are kept)."""
    waiting_since: datetime | None = None
    """While the try waits for a compliant cluster: since when (kept across deferrals)."""
    waited_seconds: float = 0.0
    """Wall-clock seconds spent waiting for a compliant cluster, all waits of the try."""
    failover_seconds: float = 0.0
    """Wall-clock seconds from each cluster failure first seen to the next pod created."""
    left_by_earlier_try: Attempt | None = None
    """An earlier try's attempt whose pod may still run in a cluster that did not answer this try, which
    therefore started nothing: kept so that the next try waits for that cluster too."""
    left_by_earlier_tries: list[Attempt] = Field(default_factory=list, max_length=LEFT_BY_EARLIER_TRIES)
    """The earlier tries' attempts whose pods were left where nobody read their end (``running``: a try
    that died; ``lost``, ``unreachable``: a silent cluster), carried from try to try: a snapshot that
    deletes such a pod writes down that it Succeeded, and this try takes that success instead of starting
    the work again, however long it waits and defers before it launches (the earlier record is gone from
    the task's state once this try saves its own)."""
    unsearched: list[str] = Field(default_factory=list)
    """Members that did not answer when this try looked for an earlier try's pods: looked at again before
    each launch, so a pod that finished or still runs there is adopted, never run a second time."""
    started_at: datetime
    ended_at: datetime | None = None
    succeeded_indices: str | None = None
    """A divided Job's try: every global index seen succeeded so far, as ranges (``0-19,25``), slices that
    were cancelled or refused included; a retry never runs them again. None for other tries (and in older
    records)."""
    request: dict[str, Any] | None = None
    """The task's :class:`TaskRequest` as JSON (resources, datasets, expected duration...), written with
    the first decision: what ``fedsched history export`` turns into a pod of a replayable trace."""

    def waited(self, now: datetime) -> float:
        """Seconds the try has waited for a compliant cluster up to ``now``: the waits that ended, and the
        one still running (a try waiting for a minute has waited a minute, not zero)."""
        running = 0.0
        if self.waiting_since is not None and self.ended_at is None:
            running = max(0.0, (now - self.waiting_since).total_seconds())
        return self.waited_seconds + running

    def cost(self, until: datetime) -> tuple[float, float]:
        """``(cost, egress GB)`` of every cluster attempt of the try, failed ones included."""
        cost = egress = 0.0
        for attempt in self.attempts:
            c, gb = attempt.accrued_cost(until)
            cost, egress = cost + c, egress + gb
        return round(cost, 6), round(egress, 6)

    @property
    def placement_prefix(self) -> str:
        """What every placement id of this try starts with: a digest of the task instance and try, so that
        a member's ledger entry names the try it belongs to (the audit finds a try's entries by it)."""
        digest = hashlib.sha256(
            f"{self.dag_id}/{self.run_id}/{self.task_id}/{self.map_index}/{self.try_number}".encode()
        ).hexdigest()[:16]
        return f"{digest}-"

    def placement_id(self, number: int) -> str:
        """The placement id of this try's cluster attempt ``number`` (its ledger entry, its pod's label)."""
        return f"{self.placement_prefix}{number}"

    @property
    def current(self) -> Attempt | None:
        return self.attempts[-1] if self.attempts else None

    @property
    def last_known(self) -> Attempt | None:
        """The latest attempt whose pod this try knows of: its own, else the one an earlier try left."""
        return self.current or self.left_by_earlier_try

    @property
    def known_attempts(self) -> list[Attempt]:
        """This try's attempts, after the one an earlier try left (if any)."""
        left = self.left_by_earlier_try
        return [left, *self.attempts] if left is not None else list(self.attempts)

    def summary(self) -> str:
        """One line for logs: where it ran and which clusters it left on the way."""
        path = " -> ".join(f"{a.cluster}({a.outcome})" for a in self.attempts) or "no attempt"
        return f"{self.outcome}: {path}" + (f"; {self.reason}" if self.reason else "")
