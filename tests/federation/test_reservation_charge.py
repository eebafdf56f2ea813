"""In-flight reservations are charged to the nodes with the most free first, whatever order is cached."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_provider_fedsched.federation import (
    ClusterSnapshot,
    FederationEngine,
    FederationSpec,
    NodeSnapshot,
    TaskRequest,
)
from airflow_provider_fedsched.federation.plugins.nodefit import _charge_reservation, _NodeFitData

NOW = datetime(2025, 6, 1, 8, 0, 0, tzinfo=UTC)


def _reference(snapshot: ClusterSnapshot, reservation: dict[str, int]) -> dict[str, dict[str, int]]:
    """The charge as first specified: every resource walks all schedulable nodes sorted afresh."""
    adjusted: dict[str, dict[str, int]] = {}
    nodes = [node for group in snapshot.index.groups for node in group.nodes if node.schedulable]
    for name, amount in reservation.items():
        left = amount
        for node in sorted(nodes, key=lambda n: (-n.free.get(name, 0), n.name)):
            if left <= 0:
                break
            free = adjusted.setdefault(node.name, dict(node.free))
            take = min(left, free.get(name, 0))
            if take > 0:
                free[name] -= take
                left -= take
    return adjusted


nodes = st.lists(
    st.tuples(
        st.integers(0, 64_000),
        st.integers(0, 64_000),
        st.integers(0, 8),
        st.integers(0, 8),
        st.booleans(),
    ),
    min_size=1,
    max_size=12,
)
reservations = st.dictionaries(
    st.sampled_from(["cpu", "nvidia.com/gpu"]), st.integers(1, 200_000), min_size=1, max_size=2
)


@settings(max_examples=200, deadline=None)
@given(nodes, st.lists(reservations, min_size=1, max_size=3))
def test_charge_matches_the_reference_over_repeated_decisions(
    shapes: list[tuple[int, int, int, int, bool]], charges: list[dict[str, int]]
) -> None:
    snapshot = ClusterSnapshot(
        cluster="c",
        observed_at=NOW,
        nodes=[
            NodeSnapshot(
                name=f"n{i}",
                allocatable={"cpu": max(cpu, used), "nvidia.com/gpu": max(gpu, gpu_used)},
                requested={"cpu": used, "nvidia.com/gpu": gpu_used},
                ready=ready,
            )
            for i, (cpu, used, gpu, gpu_used, ready) in enumerate(shapes)
        ],
    )
    data = _NodeFitData(items=(), selector={}, tolerations=())
    # The same snapshot serves many decisions: the cached order must give the reference answer each time.
    for reservation in charges:
        assert _charge_reservation(data, snapshot.index, reservation) == _reference(snapshot, reservation)


def test_decisions_with_reservations_are_unchanged_by_the_cached_order() -> None:
    spec = FederationSpec.model_validate({"clusters": [{"name": "c", "conn_id": "k", "region": "r"}]})
    snapshot = ClusterSnapshot(
        cluster="c",
        observed_at=NOW,
        nodes=[
            NodeSnapshot(name="big", allocatable={"cpu": 8000}, requested={"cpu": 1000}),
            NodeSnapshot(name="small", allocatable={"cpu": 4000}),
        ],
    )
    engine = FederationEngine(spec)
    request = TaskRequest(resources={"cpu": 4000})
    # 7 cpu free on big is charged first: 3 left there, 4 on small, so a 4-cpu pod still fits (small).
    assert engine.decide(request, {"c": snapshot}, now=NOW, reservations={"c": {"cpu": 4000}}).placed
    # Charging 8 cpu takes all of big and 1 of small: no node has 4 free any more.
    waited = engine.decide(request, {"c": snapshot}, now=NOW, reservations={"c": {"cpu": 8000}})
    assert waited.outcome == "wait"
    assert engine.decide(request, {"c": snapshot}, now=NOW, reservations={"c": {"cpu": 3000}}).placed


def test_reservations_are_charged_to_the_nodes_the_request_could_use() -> None:
    """In-flight CPU is assumed to have landed where a CPU pod could run, not on a tainted GPU node with
    more cpu free: a stale snapshot must not show a CPU pod room that in-flight pods took."""
    spec = FederationSpec.model_validate({"clusters": [{"name": "c", "conn_id": "k", "region": "r"}]})
    snapshot = ClusterSnapshot(
        cluster="c",
        observed_at=NOW,
        nodes=[
            NodeSnapshot(
                name="gpu",
                allocatable={"cpu": 64000, "nvidia.com/gpu": 8},
                taints=[{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}],
            ),
            NodeSnapshot(name="cpu", allocatable={"cpu": 8000}, requested={"cpu": 4000}),
        ],
    )
    engine = FederationEngine(spec)
    cpu_pod = TaskRequest(resources={"cpu": 4000})
    assert engine.decide(cpu_pod, {"c": snapshot}, now=NOW).placed
    waited = engine.decide(cpu_pod, {"c": snapshot}, now=NOW, reservations={"c": {"cpu": 4000}})
    assert waited.outcome == "wait"
    assert "counting in-flight reservations: cpu 4" in waited.reason
