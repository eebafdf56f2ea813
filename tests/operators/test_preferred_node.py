"""The decision's node hint reaches the pod as a *preferred* node affinity (never ``nodeName``), is kept in
the attempt's record, so a reattach rebuilds the same pod, and leaves the template's own affinity alone."""

from __future__ import annotations

from datetime import UTC, datetime

from kubernetes.client import models as k8s

from airflow_provider_fedsched.federation import ClusterSnapshot, FederationEngine, NodeSnapshot
from airflow_provider_fedsched.federation.record import Attempt, PlacementRecord
from airflow_provider_fedsched.federation.resources import GPU_MILLI, parse_resource_list
from airflow_provider_fedsched.federation.snapshot import NodeGpus, WorkloadShape
from airflow_provider_fedsched.operators import attempts
from tests.federation.helpers import NOW, cluster, request, spec


def template() -> k8s.V1Pod:
    own = k8s.V1PreferredSchedulingTerm(
        weight=5,
        preference=k8s.V1NodeSelectorTerm(
            match_expressions=[k8s.V1NodeSelectorRequirement(key="zone", operator="In", values=["z1"])]
        ),
    )
    return k8s.V1Pod(
        metadata=k8s.V1ObjectMeta(name="work"),
        spec=k8s.V1PodSpec(
            containers=[k8s.V1Container(name="base", image="busybox")],
            affinity=k8s.V1Affinity(
                node_affinity=k8s.V1NodeAffinity(preferred_during_scheduling_ignored_during_execution=[own])
            ),
        ),
    )


def gpu_node(name: str, free: list[int]) -> NodeSnapshot:
    return NodeSnapshot(
        name=name,
        allocatable=parse_resource_list({"cpu": "64", "memory": "256Gi", GPU_MILLI: str(1000 * len(free))}),
        requested=parse_resource_list({GPU_MILLI: str(1000 * len(free) - sum(free))}),
        gpus=NodeGpus(model="T4", free=free),
    )


def test_the_hint_becomes_a_preferred_node_affinity_kept_across_a_reattach() -> None:
    fed = spec([cluster("a")])
    snapshots = {
        "a": ClusterSnapshot(
            cluster="a",
            observed_at=NOW,
            nodes=[gpu_node("a-0", [1000] * 4), gpu_node("a-1", [500, 0])],
            # Half and whole GPUs run there: a half on a fresh device would strand the other half.
            workload=[
                WorkloadShape(cpu=1000, gpus=1, gpu_milli=500, count=1),
                WorkloadShape(cpu=1000, gpus=1, gpu_milli=1000, count=1),
            ],
        )
    }
    decision = FederationEngine(fed).decide(
        request({"cpu": "1", "memory": "1Gi", GPU_MILLI: "500"}), snapshots, now=NOW
    )
    assert decision.extra["preferred_node"] == "a-1"
    record = PlacementRecord(dag_id="d", run_id="r", task_id="t", try_number=1, started_at=datetime.now(UTC))
    attempt = attempts.new_attempt(record, decision, "a", "default", "work")
    assert attempt.preferred_node == "a-1"
    stored = Attempt.model_validate_json(attempt.model_dump_json())  # the record as XCom keeps it
    pod = attempts.attempt_pod(template(), record, stored, base_container="base", checkpoint=None)
    assert pod.spec.node_name is None
    terms = pod.spec.affinity.node_affinity.preferred_during_scheduling_ignored_during_execution
    assert [term.weight for term in terms] == [5, 100]  # the template's own preference stays
    hint = terms[1].preference.match_fields[0]
    assert (hint.key, hint.operator, hint.values) == ("metadata.name", "In", ["a-1"])
    again = attempts.attempt_pod(template(), record, stored, base_container="base", checkpoint=None)
    assert again.to_dict() == pod.to_dict()


def test_no_hint_no_affinity_added() -> None:
    fed = spec([cluster("a")])
    decision = FederationEngine(fed).decide(
        request(),
        {
            "a": ClusterSnapshot(
                cluster="a", observed_at=NOW, nodes=[NodeSnapshot(name="n", allocatable={"cpu": 4000})]
            )
        },
        now=NOW,
    )
    assert "preferred_node" not in decision.extra
    record = PlacementRecord(dag_id="d", run_id="r", task_id="t", try_number=1, started_at=datetime.now(UTC))
    attempt = attempts.new_attempt(record, decision, "a", "default", "work")
    pod = attempts.attempt_pod(template(), record, attempt, base_container="base", checkpoint=None)
    assert pod.spec.affinity.to_dict() == template().spec.affinity.to_dict()
