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


def test_not_ready_and_cordon_taints_are_a_state_of_the_node_not_a_gang_that_never_fits() -> None:
    """The node lifecycle controller taints NotReady nodes (and keeps the taint for a few seconds after
    the node is Ready again): a gang whose only fitting nodes are those waits; it is never "impossible"."""
    from airflow_provider_fedsched.federation import FederationEngine, TaskRequest, parse_resource_list
    from airflow_provider_fedsched.federation.request import GangRole
    from tests.federation.helpers import cluster, spec

    not_ready = {"taints": [{"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}]}
    lingering = {"taints": [{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}]}
    cordoned = {"taints": [{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}]}
    snapshot = condense(
        "east",
        [
            node("n1", "8"),
            node("n2", "8", ready="Unknown", spec=not_ready),
            node("n3", "8", spec=lingering),  # Ready again, the taint not lifted yet
            node("n4", "8", spec=cordoned),
        ],
        [],
        [],
        NOW,
    )
    _, n2, n3, n4 = snapshot.nodes
    assert [n.taints for n in snapshot.nodes] == [[], [], [], []]
    assert [n.schedulable for n in snapshot.nodes] == [True, False, False, False]
    assert n4.unschedulable and not n3.ready and not n2.ready

    gang = TaskRequest.for_gang(
        [GangRole(name="worker", count=3, resources=parse_resource_list({"cpu": "6"}))]
    )
    decision = FederationEngine(spec([cluster("east")])).decide(gang, {"east": snapshot}, now=NOW)

    assert decision.outcome == "wait"
    (rejected,) = decision.rejected
    assert (rejected.plugin, rejected.permanent) == ("GangFit", False)
