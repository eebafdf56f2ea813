"""A precomputed placement for one upcoming run of a task, and its validation at run time.

A :class:`Plan` names ranked clusters (a primary and fallbacks) for one (DAG, task, logical date), the
forecast it assumed, when it was computed and until when it is valid, and the fingerprints of the spec and
of the task's request and policy it was made for: a change to either sets the plan aside.

:func:`validate_plan` never trusts a plan: it runs the engine's own filters (every hard rule: sovereignty,
taints, labels, capacity, exclusion, reachability, freshness, cooldown, quota, fit now) over the plan's
clusters only, and returns the first that passes, in the plan's order, or why none does.

Pure: no Airflow import and no I/O.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from airflow_provider_fedsched.federation.decision import Decision
from airflow_provider_fedsched.federation.engine import FederationEngine
from airflow_provider_fedsched.federation.request import TaskRequest
from airflow_provider_fedsched.federation.resources import ResourceList
from airflow_provider_fedsched.federation.snapshot import ClusterSnapshot
from airflow_provider_fedsched.federation.spec import PolicySpec

__all__ = ["Plan", "plan_from_decision", "request_fingerprint", "validate_plan", "version_problem"]


def _utc(value: datetime) -> datetime:
    if value.tzinfo is None:
        raise ValueError("must be timezone-aware")
    return value.astimezone(UTC)


class Plan(BaseModel):
    """Where one run of one task should go, decided ahead of time."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    dag_id: str
    task_id: str
    logical_date: datetime
    run_after: datetime
    """When the run is expected to start (the forecast window starts here)."""
    clusters: list[str] = Field(min_length=1)
    """Ranked: the primary first, then fallbacks."""
    forecast: dict[str, float] | None = None
    """The predicted idle fraction per cluster the plan assumed for its window."""
    computed_at: datetime
    valid_until: datetime
    spec_fingerprint: str
    request_fingerprint: str
    reason: str = ""
    """The planning decision's one-line reason."""

    _utc_times = field_validator("logical_date", "run_after", "computed_at", "valid_until")(_utc)

    @property
    def primary(self) -> str:
        return self.clusters[0]


def request_fingerprint(request: TaskRequest, policy: PolicySpec | None = None) -> str:
    """sha256 of the request and the task's effective policy: what a plan was made for."""
    document = {
        "request": request.model_dump(mode="json"),
        "policy": policy.model_dump(mode="json") if policy is not None else None,
    }
    canonical = json.dumps(document, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def plan_from_decision(
    decision: Decision,
    *,
    dag_id: str,
    task_id: str,
    logical_date: datetime,
    run_after: datetime,
    valid_until: datetime,
    request: TaskRequest,
    policy: PolicySpec | None,
    forecast: Mapping[str, float] | None,
    fallbacks: int = 2,
) -> Plan | None:
    """The plan of a placed decision (its best candidates), None when it was not placed."""
    if not decision.placed or decision.spec_fingerprint is None:
        return None
    ranked = [candidate.cluster for candidate in decision.candidates[: 1 + max(0, fallbacks)]]
    return Plan(
        dag_id=dag_id,
        task_id=task_id,
        logical_date=logical_date,
        run_after=run_after,
        clusters=ranked,
        forecast=_assumed(forecast, ranked),
        computed_at=decision.decided_at,
        valid_until=valid_until,
        spec_fingerprint=decision.spec_fingerprint,
        request_fingerprint=request_fingerprint(request, policy),
        reason=decision.reason,
    )


def _assumed(forecast: Mapping[str, float] | None, clusters: list[str]) -> dict[str, float] | None:
    """The forecast values of the planned clusters, as the Forecast score reads them (clamped 0..1)."""
    kept = {
        name: round(min(1.0, max(0.0, float(value))), 4)
        for name, value in (forecast or {}).items()
        if name in clusters and math.isfinite(float(value))
    }
    return kept or None


def version_problem(
    plan: Plan, engine: FederationEngine, request: TaskRequest, policy: PolicySpec | None, now: datetime
) -> str | None:
    """Why the plan cannot be used whatever the clusters look like (versions, expiry), or None."""
    if plan.spec_fingerprint != engine.fingerprint:
        return "the federation spec changed since the plan was computed"
    if plan.request_fingerprint != request_fingerprint(request, policy):
        return "the task's requirements or policy changed since the plan was computed"
    if now > plan.valid_until:
        return f"the plan expired at {plan.valid_until.isoformat()}"
    return None


def validate_plan(
    plan: Plan,
    engine: FederationEngine,
    request: TaskRequest,
    snapshots: Mapping[str, ClusterSnapshot],
    *,
    now: datetime,
    cooldowns: Mapping[str, datetime] | None = None,
    reservations: Mapping[str, ResourceList] | None = None,
    exclude: Mapping[str, str] | None = None,
    policy: PolicySpec | None = None,
) -> tuple[Decision | None, str]:
    """``(decision, "")`` placing on the first of the plan's clusters that passes every hard rule now,
    or ``(None, why the plan was set aside)``.

    The engine decides over the plan's clusters only (the request restricted to them), so the rules are
    exactly the engine's; then the plan's order, not a fresh ranking, picks among the survivors.
    """
    problem = version_problem(plan, engine, request, policy, now)
    if problem is not None:
        return None, problem
    members = {cluster.name for cluster in engine.spec.clusters}
    unknown = [name for name in plan.clusters if name not in members]
    if unknown:
        return None, f"the plan names unknown cluster(s) {', '.join(unknown)}"
    allowed = [c for c in plan.clusters if request.clusters is None or c in request.clusters]
    if not allowed:
        return None, "none of the plan's clusters is in the task's cluster list"
    restricted = request.model_copy(update={"clusters": allowed})
    checked = engine.decide(
        restricted,
        {name: snapshots[name] for name in allowed if name in snapshots},
        now=now,
        cooldowns=cooldowns,
        reservations=reservations,
        forecast=plan.forecast,
        exclude=exclude,
        policy=policy,
    )
    passed = {candidate.cluster: candidate for candidate in checked.candidates}
    planned = [name for name in plan.clusters if name in passed]
    rejected = [r for r in checked.rejected if r.cluster in plan.clusters]
    if not planned:
        why = "; ".join(f"{r.cluster}: {r.plugin}: {r.reason}" for r in rejected)
        return None, f"no planned cluster passes the rules now ({why})"
    chosen = planned[0]
    reason = f"placed on {chosen} from plan computed at {plan.computed_at.isoformat(timespec='seconds')}"
    if chosen != plan.primary:
        rank = plan.clusters.index(chosen)
        skipped = "; ".join(f"{r.cluster}: {r.plugin}: {r.reason}" for r in rejected)
        reason += f" (fallback #{rank}; {skipped})"
    extra: dict[str, Any] = {
        "plan": {
            "clusters": list(plan.clusters),
            "computed_at": plan.computed_at.isoformat(),
            "valid_until": plan.valid_until.isoformat(),
            "logical_date": plan.logical_date.isoformat(),
        }
    }
    return (
        Decision(
            outcome="placed",
            cluster=chosen,
            candidates=[passed[name] for name in planned],
            rejected=rejected,
            snapshot_age_seconds=checked.snapshot_age_seconds,
            reason=reason,
            decided_at=now,
            spec_fingerprint=engine.fingerprint,
            extra=extra,
        ),
        "",
    )
