"""Condensing the API's node, pod and quota lists into a snapshot."""

from __future__ import annotations

from datetime import UTC, datetime

from airflow_provider_fedsched.kube.labels import PLACEMENT_LABEL
from airflow_provider_fedsched.kube.snapshots import condense, quota_headroom

NOW = datetime(2026, 11, 30, tzinfo=UTC)


def node(name: str, cpu: str, ready: str = "True", **extra: object) -> dict:
    return {
        "metadata": {"name": name, "labels": {"zone": "a"}},
        "spec": extra.get("spec", {}),
        "status": {
            "allocatable": {"cpu": cpu, "memory": "16Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": ready}],
        },
    }


def pod(name: str, node_name: str | None, cpu: str, placement: str | None = None) -> dict:
    labels = {PLACEMENT_LABEL: placement} if placement else {}
    spec: dict = {"containers": [{"name": "base", "resources": {"requests": {"cpu": cpu}}}]}
    if node_name:
        spec["nodeName"] = node_name
    return {"metadata": {"name": name, "namespace": "default", "labels": labels}, "spec": spec}


def test_requests_add_up_per_node_and_unbound_pods_are_not_counted() -> None:
    snapshot = condense(
        "east",
        [
            node("n1", "8"),
            node("n2", "4", ready="False", spec={"taints": [{"key": "k", "effect": "NoSchedule"}]}),
        ],
        [pod("a", "n1", "1500m", placement="p-1"), pod("b", "n1", "500m"), pod("c", None, "2")],
        [],
        NOW,
    )
    n1, n2 = snapshot.nodes
    assert n1.requested == {"cpu": 2000, "pods": 2}
    assert n1.free["cpu"] == 6000 and n1.ready
    assert not n2.ready and n2.requested == {} and n2.taints[0].key == "k"
    assert snapshot.placements == ["p-1"]
    assert snapshot.observed_at == NOW and snapshot.reachable


def test_quota_headroom_is_the_smallest_remaining_per_namespace() -> None:
    quotas = [
        {
            "metadata": {"namespace": "etl"},
            "status": {
                "hard": {"requests.cpu": "4", "limits.cpu": "8", "pods": "10"},
                "used": {"requests.cpu": "3500m", "pods": "3"},
            },
        },
        {"metadata": {"namespace": "etl"}, "status": {"hard": {"cpu": "2"}, "used": {"cpu": "1"}}},
        {
            "metadata": {"namespace": "full"},
            "status": {"hard": {"requests.memory": "1Gi"}, "used": {"requests.memory": "2Gi"}},
        },
    ]
    assert quota_headroom(quotas) == {"etl": {"cpu": 500, "pods": 7}, "full": {"memory": 0}}
