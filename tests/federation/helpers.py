"""Small builders for federation tests: specs, snapshots and requests with readable defaults."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from airflow_provider_fedsched.federation import (
    ClusterSnapshot,
    FederationSpec,
    NodeSnapshot,
    Taint,
    TaskRequest,
    load_spec,
    parse_resource_list,
)

NOW = datetime(2025, 6, 1, 8, 0, 0, tzinfo=UTC)
GPU = "nvidia.com/gpu"


def cluster(name: str, region: str = "r1", **extra: Any) -> dict[str, Any]:
    prices = extra.pop(
        "prices", {"cpu_hour": 0.04, "memory_gib_hour": 0.005, "gpu_hour": 2.0, "egress_gb": 0.1}
    )
    return {"name": name, "conn_id": f"k8s_{name}", "region": region, "prices": prices, **extra}


def spec(
    clusters: Iterable[dict[str, Any]], datasets: Iterable[dict[str, Any]] = (), **extra: Any
) -> FederationSpec:
    return load_spec({"clusters": list(clusters), "datasets": list(datasets), **extra})


def node(
    name: str,
    allocatable: Mapping[str, Any] | None = None,
    requested: Mapping[str, Any] | None = None,
    *,
    labels: Mapping[str, str] | None = None,
    taints: Iterable[Taint] = (),
    ready: bool = True,
    unschedulable: bool = False,
) -> NodeSnapshot:
    return NodeSnapshot(
        name=name,
        allocatable=parse_resource_list(allocatable or {"cpu": "16", "memory": "64Gi"}),
        requested=parse_resource_list(requested or {}),
        labels=dict(labels or {}),
        taints=list(taints),
        ready=ready,
        unschedulable=unschedulable,
    )


def snapshot(
    name: str,
    nodes: Iterable[NodeSnapshot] | None = None,
    *,
    age_seconds: float = 1.0,
    reachable: bool = True,
    quota: Mapping[str, Mapping[str, Any]] | None = None,
) -> ClusterSnapshot:
    return ClusterSnapshot(
        cluster=name,
        observed_at=NOW - timedelta(seconds=age_seconds),
        reachable=reachable,
        reason=None if reachable else "connection refused",
        nodes=list(nodes) if nodes is not None else [node(f"{name}-n0")],
        quota_headroom={ns: parse_resource_list(values) for ns, values in (quota or {}).items()},
    )


def request(resources: Mapping[str, Any] | None = None, **extra: Any) -> TaskRequest:
    return TaskRequest(resources=parse_resource_list(resources or {"cpu": "1", "memory": "1Gi"}), **extra)
