"""Pods in flight, one by one: each is charged whole to the node the cluster's scheduler would give it."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_provider_fedsched.federation import (
    ClusterSnapshot,
    FederationEngine,
    FederationSpec,
    NodeSnapshot,
    SpecError,
    load_spec,
)
from airflow_provider_fedsched.federation.framework import ClusterView
from airflow_provider_fedsched.federation.plugins.nodefit import _charge_pods, _NodeFitData
from airflow_provider_fedsched.federation.spec import Taint
from tests.federation.helpers import GPU, NOW, cluster, node, request, snapshot, spec

PACKS_GPU: dict[str, object] = {"type": "MostAllocated", "resources": [GPU]}


def _spec(strategy: dict[str, object] | None = None) -> FederationSpec:
    extra: dict[str, Any] = {"scoring_strategy": strategy} if strategy else {}
    return spec([cluster("c", **extra)])


def _gpu_nodes(quota: dict[str, dict[str, str]] | None = None) -> ClusterSnapshot:
    # "empty": a whole 8-GPU node free; "busy": one GPU left.
    busy = node("busy", {"cpu": "64", GPU: "8"}, {"cpu": "56", GPU: "7"})
    return snapshot("c", [busy, node("empty", {"cpu": "64", GPU: "8"})], quota=quota)


def test_a_packing_cluster_keeps_the_whole_node_free_for_the_next_pod() -> None:
    """A 1-GPU pod in flight lands on the fullest node that fits under ``MostAllocated``: the 8-GPU pod
    decided next still has the empty node. Charged as a sum, most free first, it would wait."""
    packing = FederationEngine(_spec(PACKS_GPU))
    eight = request({"cpu": "8", GPU: "8"})
    one = {"cpu": 4000, GPU: 1}
    snapshots = {"c": _gpu_nodes()}
    assert packing.decide(eight, snapshots, now=NOW, in_flight={"c": [one]}).placed
    summed = packing.decide(eight, snapshots, now=NOW, reservations={"c": one})
    assert summed.outcome == "wait"
    # The default strategy spreads: the cluster's scheduler puts the small pod on the empty node.
    spreading = FederationEngine(_spec())
    waited = spreading.decide(eight, snapshots, now=NOW, in_flight={"c": [one]})
    assert waited.outcome == "wait"
    assert "counting in-flight reservations: cpu 4, nvidia.com/gpu 1" in waited.reason


def test_a_gpu_pods_cpu_is_charged_to_its_gpu_node() -> None:
    """The cpu of a GPU pod in flight goes with its GPU, not to the node with the most cpu free."""
    nodes = snapshot("c", [node("a-cpu", {"cpu": "10"}), node("b-gpu", {"cpu": "8", GPU: "1"})])
    engine = FederationEngine(_spec())
    ten = request({"cpu": "10"})
    in_flight = {"cpu": 8000, GPU: 1}
    assert engine.decide(ten, {"c": nodes}, now=NOW, in_flight={"c": [in_flight]}).placed
    assert engine.decide(ten, {"c": nodes}, now=NOW, reservations={"c": in_flight}).outcome == "wait"


def test_a_held_gpu_pod_takes_no_room_on_the_cpu_node_a_cpu_pod_needs() -> None:
    """The demo's clickstream_rollup: a CPU pod may use only the untainted CPU node of a GPU cluster, and a
    GPU pod is in flight there. Charged pod by pod, the GPU pod lands on a GPU node and the CPU pod is
    placed; charged as one sum to the nodes the CPU pod may use, it fills the CPU node and the CPU pod
    waits. The placement ledger's check of a cluster (a request restricted to it) passes its held
    placements pod by pod, so that it agrees with the decision that chose the cluster."""
    taint = Taint(key=GPU, value="present", effect="NoSchedule")
    gpu_node = {"cpu": "8", "memory": "64Gi", GPU: "2"}
    nodes = snapshot(
        "c",
        [
            node("gpu-1", gpu_node, taints=[taint]),
            node("gpu-2", gpu_node, taints=[taint]),
            node("cpu-1", {"cpu": "3", "memory": "12Gi"}),
        ],
    )
    engine = FederationEngine(_spec())
    cpu_pod = request({"cpu": "2", "memory": "8Gi"}, clusters=["c"])
    held = {"cpu": 4000, "memory": 16 * 2**30, GPU: 2}
    placed = engine.decide(cpu_pod, {"c": nodes}, now=NOW, reservations={"c": held}, in_flight={"c": [held]})
    assert (placed.outcome, placed.cluster) == ("placed", "c")
    summed = engine.decide(cpu_pod, {"c": nodes}, now=NOW, reservations={"c": held})
    assert summed.outcome == "wait"
    assert summed.rejected[0].reason.startswith("0/3 nodes fit: 1 Insufficient cpu, 1 Insufficient memory")


def test_a_pod_no_node_holds_stays_pending_and_takes_nothing() -> None:
    engine = FederationEngine(_spec())
    too_big = {"cpu": 200000, GPU: 1}
    decision = engine.decide(
        request({"cpu": "8", GPU: "8"}), {"c": _gpu_nodes()}, now=NOW, in_flight={"c": [too_big]}
    )
    assert decision.placed


def test_the_pods_sum_is_the_reservation_other_rules_see() -> None:
    """Given pods only, the quota and the headroom score see their sum."""
    engine = FederationEngine(_spec())
    quota_of_10 = _gpu_nodes(quota={"default": {"cpu": "10"}})
    pods = [{"cpu": 4000}, {"cpu": 4000}]
    decision = engine.decide(request({"cpu": "4"}), {"c": quota_of_10}, now=NOW, in_flight={"c": pods})
    assert decision.outcome == "wait"
    assert any(r.plugin == "Quota" for r in decision.rejected)


def _snapshot(shapes: list[tuple[int, int, int, int]]) -> ClusterSnapshot:
    return ClusterSnapshot(
        cluster="c",
        observed_at=NOW,
        nodes=[
            NodeSnapshot(
                name=f"n{i}",
                allocatable={"cpu": max(cpu, used), GPU: max(gpu, gpu_used)},
                requested={"cpu": used, GPU: gpu_used},
            )
            for i, (cpu, used, gpu, gpu_used) in enumerate(shapes)
        ],
    )


def _reference(
    observed: ClusterSnapshot, pods: list[dict[str, int]], packs: bool
) -> dict[str, dict[str, int]]:
    """Every pod in turn on the best-scoring node that fits, recomputed from scratch."""
    free = {node.name: dict(node.free) for node in observed.nodes}
    allocatable = {node.name: node.allocatable for node in observed.nodes}
    changed: set[str] = set()
    for pod in pods:
        scored = [GPU] if packs and pod.get(GPU) else ["cpu", "memory"]
        best, best_score = None, 0.0
        for name in sorted(free, key=lambda n: (-free_cpu(observed, n), n)):
            if any(amount > free[name].get(resource, 0) for resource, amount in pod.items() if amount > 0):
                continue
            share = sum(
                (free[name].get(r, 0) - pod.get(r, 0)) / allocatable[name][r]
                for r in scored
                if allocatable[name].get(r, 0) > 0
            )
            score = -share if packs and pod.get(GPU) else share
            if best is None or score > best_score:
                best, best_score = name, score
        if best is not None:
            changed.add(best)
            for resource, amount in pod.items():
                free[best][resource] = free[best].get(resource, 0) - amount
    return {name: free[name] for name in changed}


def free_cpu(observed: ClusterSnapshot, name: str) -> int:
    return next(node.free.get("cpu", 0) for node in observed.nodes if node.name == name)


pods = st.lists(
    st.fixed_dictionaries({"cpu": st.integers(0, 40_000), GPU: st.integers(0, 8)}), min_size=1, max_size=8
)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 64_000), st.integers(0, 64_000), st.integers(0, 8), st.integers(0, 8)),
        min_size=1,
        max_size=10,
    ),
    pods,
    st.integers(0, 8),
    st.booleans(),
)
def test_charging_the_pods_sent_since_equals_charging_them_all_afresh(
    shapes: list[tuple[int, int, int, int]], in_flight: list[dict[str, int]], split: int, packs: bool
) -> None:
    """The index keeps the charge for the next decision, which adds only the pods sent since; the result
    is the reference charge of the whole list, and a list that is not an extension starts afresh."""
    federation = _spec(PACKS_GPU if packs else None)
    observed = _snapshot(shapes)
    data = _NodeFitData(items=(), selector={}, tolerations=())

    def view(listed: list[dict[str, int]]) -> ClusterView:
        return ClusterView(federation.clusters[0], observed, observed.index, {}, "default", tuple(listed))

    first = in_flight[: min(split, len(in_flight))]
    if first:
        assert _charge_pods(data, observed.index, view(first)) == _reference(observed, first, packs)
    assert _charge_pods(data, observed.index, view(in_flight)) == _reference(observed, in_flight, packs)
    # Not an extension of what was charged (the oldest pod bound since): charged afresh.
    rest = in_flight[1:]
    if rest:
        assert _charge_pods(data, observed.index, view(rest)) == _reference(observed, rest, packs)


@pytest.mark.parametrize(
    ("strategy", "message"),
    [
        ({"type": "Balanced"}, "clusters[0].scoring_strategy.type"),
        ({"type": "MostAllocated", "resources": []}, "clusters[0].scoring_strategy.resources"),
        ({"type": "MostAllocated", "resources": [GPU, GPU]}, "listed more than once"),
        ({"type": "MostAllocated", "resources": ["bad name!"]}, "clusters[0].scoring_strategy.resources[0]"),
        ({"type": "MostAllocated", "weight": 2}, "clusters[0].scoring_strategy.weight"),
    ],
)
def test_a_bad_scoring_strategy_is_refused_naming_the_field(
    strategy: dict[str, object], message: str
) -> None:
    cluster = {"name": "c", "conn_id": "k", "region": "r", "scoring_strategy": strategy}
    with pytest.raises(SpecError) as refused:
        load_spec({"clusters": [cluster]})
    assert message in str(refused.value)
