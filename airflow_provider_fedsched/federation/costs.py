"""Cost and egress: what running a request on a cluster costs, estimated before and accounted after.

Compute is priced per hour of *requested* capacity (``prices`` of the cluster it runs on); egress is billed
where data leaves: every dataset the task reads that is not on its cluster moves its size at the egress
price of the cluster holding it. The Cost score, the budget rules and the records all use these functions,
so a figure in a decision, a record and a budget is the same figure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow_provider_fedsched.federation.resources import CPU, GPU, MEMORY

if TYPE_CHECKING:
    from airflow_provider_fedsched.federation.decision import Decision
    from airflow_provider_fedsched.federation.request import TaskRequest
    from airflow_provider_fedsched.federation.spec import DatasetSpec, FederationSpec, Prices

__all__ = [
    "REPORT_GROUPS",
    "Estimate",
    "attempt_cost",
    "compute_per_hour",
    "cost_report",
    "decision_costs",
    "egress",
    "estimate",
    "report_key",
    "slice_estimate",
]

GIB = 2**30


def compute_per_hour(prices: Prices, items: Iterable[tuple[str, int]]) -> float:
    """Price per hour of these requests (scheduler units) at ``prices``."""
    per_hour = 0.0
    for name, amount in items:
        if name == CPU:
            per_hour += amount / 1000 * prices.cpu_hour
        elif name == MEMORY:
            per_hour += amount / GIB * prices.memory_gib_hour
        elif name == GPU:
            per_hour += amount * prices.gpu_hour
        else:
            per_hour += amount * prices.extended.get(name, 0.0)
    return per_hour


def egress(spec: FederationSpec, datasets: Sequence[DatasetSpec], cluster: str) -> tuple[float, float]:
    """``(gigabytes moved, their cost)`` for a task reading ``datasets`` on ``cluster``."""
    gb = cost = 0.0
    for dataset in datasets:
        if dataset.cluster is not None and dataset.cluster != cluster:
            gb += dataset.size_gb
            cost += dataset.size_gb * spec.cluster(dataset.cluster).prices.egress_gb
    return gb, cost


@dataclass(frozen=True, slots=True)
class Estimate:
    cluster: str
    compute: float
    egress_gb: float
    egress_cost: float
    per_hour: float

    @property
    def total(self) -> float:
        return self.compute + self.egress_cost

    def to_dict(self) -> dict[str, Any]:
        return {
            "cluster": self.cluster,
            "per_hour": round(self.per_hour, 6),
            "compute": round(self.compute, 6),
            "egress_gb": round(self.egress_gb, 6),
            "egress_cost": round(self.egress_cost, 6),
            "total": round(self.total, 6),
        }


def estimate(
    spec: FederationSpec,
    request: TaskRequest,
    cluster: str,
    *,
    seconds: float | None = None,
    datasets: Sequence[DatasetSpec] | None = None,
) -> Estimate:
    """The cost of ``request`` on ``cluster`` for ``seconds`` (default: its expected duration)."""
    if datasets is None:
        datasets = spec.check_references(datasets=request.datasets, assets=request.assets)
    hours = (request.expected_duration_seconds if seconds is None else max(0.0, seconds)) / 3600.0
    per_hour = compute_per_hour(spec.cluster(cluster).prices, request.resources.items())
    gb, cost = egress(spec, datasets, cluster)
    return Estimate(cluster, per_hour * hours, gb, cost, per_hour)


def slice_estimate(
    spec: FederationSpec,
    request: TaskRequest,
    cluster: str,
    *,
    indices: int,
    completions: int,
    parallelism: int,
    datasets: Sequence[DatasetSpec] | None = None,
) -> Estimate:
    """The cost of a divided Job's slice (``federation/division.py``) on ``cluster``: ``request`` is one
    pod of the Job. Compute: each of the slice's ``indices`` pods for the expected duration; per hour, its
    ``parallelism`` pods at once (what an attempt accrues while the slice runs). Egress: the slice's share
    (``indices`` of ``completions``) of the data not on ``cluster``, as an Indexed Job's indices are its
    input's shards."""
    if not 0 <= indices <= completions or completions < 1 or parallelism < 0:
        raise ValueError(f"a slice of {indices} of {completions} indices, {parallelism} at a time")
    one = estimate(spec, request, cluster, datasets=datasets)
    share = indices / completions
    return Estimate(
        cluster,
        one.compute * indices,
        one.egress_gb * share,
        one.egress_cost * share,
        one.per_hour * parallelism,
    )


def decision_costs(spec: FederationSpec, request: TaskRequest, decision: Decision) -> dict[str, Any]:
    """The chosen cluster's estimate and the cheapest compliant alternative's (every candidate passed
    every rule), so a saving is shown against what could really have been chosen."""
    datasets = spec.check_references(datasets=request.datasets, assets=request.assets)
    estimates = [estimate(spec, request, c.cluster, datasets=datasets) for c in decision.candidates]
    if not estimates:
        return {}
    chosen = next((e for e in estimates if e.cluster == decision.cluster), estimates[0])
    cheapest = min(estimates, key=lambda e: (round(e.total, 9), e.cluster))
    return {"estimate": chosen.to_dict(), "cheapest_compliant": cheapest.to_dict()}


def attempt_cost(
    spec: FederationSpec, request: TaskRequest, cluster: str, seconds: float
) -> Mapping[str, float]:
    """What one cluster attempt cost: compute for the seconds its pod held the requests, and egress
    (the data moved to it, whether or not the attempt succeeded)."""
    found = estimate(spec, request, cluster, seconds=seconds)
    return {
        "cost": round(found.total, 6),
        "compute_cost": round(found.compute, 6),
        "egress_gb": round(found.egress_gb, 6),
        "egress_cost": round(found.egress_cost, 6),
    }


REPORT_GROUPS = ("tenant", "dag", "cluster", "day")
"""What ``fedsched cost --by`` and the Tenants view group charges by."""


def report_key(charge: Mapping[str, Any], by: str) -> str:
    """The ``by`` group a charge falls in: its UTC day (``YYYY-MM-DD``), DAG, tenant or cluster."""
    if by == "day":
        return str(charge.get("at", ""))[:10]
    if by == "dag":
        return str(charge.get("dag_id") or "-")
    return str(charge.get(by) or "-")


def cost_report(charges: Iterable[Mapping[str, Any]], by: str) -> list[dict[str, Any]]:
    """Charges (one per cluster attempt) summed per ``by`` group, most expensive first."""
    if by not in REPORT_GROUPS:
        raise ValueError(f"by: unknown group {by!r} (choose {', '.join(REPORT_GROUPS)})")
    groups: dict[str, dict[str, Any]] = {}
    for charge in charges:
        key = report_key(charge, by)
        row = groups.setdefault(
            key, {by: key, "attempts": 0, "failed_attempts": 0, "cost": 0.0, "egress_gb": 0.0}
        )
        row["attempts"] += 1
        row["failed_attempts"] += 0 if charge.get("outcome") == "succeeded" else 1
        row["cost"] += float(charge.get("cost") or 0.0)
        row["egress_gb"] += float(charge.get("egress_gb") or 0.0)
    rows = [
        {**row, "cost": round(row["cost"], 6), "egress_gb": round(row["egress_gb"], 6)}
        for row in groups.values()
    ]
    order = (lambda r: r[by]) if by == "day" else (lambda r: (-r["cost"], r[by]))
    return sorted(rows, key=order)
