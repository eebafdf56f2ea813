"""Gang fit through the engine: every pod of a gang on a real node of one cluster, at the same time."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_provider_fedsched.federation import FederationEngine, SpecError, TaskRequest, parse_resource_list
from airflow_provider_fedsched.federation.request import GangRole
from tests.federation.helpers import GPU, NOW, cluster, node, request, snapshot, spec


def gang(*roles: tuple[str, int, dict[str, Any]], **extra: Any) -> TaskRequest:
    return TaskRequest.for_gang(
        [GangRole(name=name, count=count, resources=parse_resource_list(r)) for name, count, r in roles],
        **extra,
    )


def gpu_nodes(prefix: str, free: list[int], size: int = 4) -> list[Any]:
    """Nodes of ``size`` GPUs each with ``free`` GPUs left (the rest requested by other tenants)."""
    return [
        node(f"{prefix}{i}", {"cpu": "32", "memory": "128Gi", GPU: str(size)}, {GPU: str(size - f)})
        for i, f in enumerate(free)
    ]


def rejection(decision: Any, name: str) -> Any:
    return next(r for r in decision.rejected if r.cluster == name)


def test_a_gang_lands_where_it_fits_node_by_node_although_another_has_more_free_in_aggregate() -> None:
    # "wide" is cheaper and has 16 free GPUs, 2 on each of 8 nodes; "deep" has 8, 4 on each of 2 nodes.
    cheap = {"cpu_hour": 0.01, "memory_gib_hour": 0.001, "gpu_hour": 0.5, "egress_gb": 0.1}
    fed = spec([cluster("wide", prices=cheap), cluster("deep")])
    snapshots = {
        "wide": snapshot("wide", gpu_nodes("w", [2] * 8)),
        "deep": snapshot("deep", gpu_nodes("d", [4, 4])),
    }
    workers = gang(("worker", 2, {"cpu": "4", GPU: "4"}))
    assert snapshots["wide"].index.total_free[GPU] > snapshots["deep"].index.total_free[GPU]

    decision = FederationEngine(fed).decide(workers, snapshots, now=NOW)

    assert decision.cluster == "deep"
    wide = rejection(decision, "wide")
    assert (wide.plugin, wide.permanent) == ("GangFit", False)
    assert wide.reason == (
        "gang of 2: 0 of 2 worker pod(s) fit: the largest free node left has 2 nvidia.com/gpu "
        "(each worker asks 4)"
    )
    # The same two workers one at a time would each fit "wide" (the aggregate view): the gang would split.
    one = FederationEngine(fed).decide(request({"cpu": "4", GPU: "2"}), snapshots, now=NOW)
    assert one.cluster == "wide"


def test_three_of_four_workers_fit_the_reason_says_so_and_the_gang_waits_whole() -> None:
    fed = spec([cluster("gpu")])
    snapshots = {"gpu": snapshot("gpu", gpu_nodes("g", [4, 4, 4, 2]))}

    decision = FederationEngine(fed).decide(gang(("worker", 4, {"cpu": "1", GPU: "4"})), snapshots, now=NOW)

    assert (decision.outcome, decision.cluster) == ("wait", None)
    assert rejection(decision, "gpu").reason == (
        "gang of 4: 3 of 4 worker pod(s) fit: the largest free node left has 2 nvidia.com/gpu "
        "(each worker asks 4)"
    )
    assert "no cluster can take it now" in decision.reason


def test_a_gang_no_cluster_can_take_whole_waits_and_never_splits_across_clusters() -> None:
    # Two clusters could take 2 workers each: together all 4, but no one of them can take the gang.
    fed = spec([cluster("a"), cluster("b")])
    snapshots = {
        "a": snapshot("a", gpu_nodes("a", [4, 4, 0, 0])),
        "b": snapshot("b", gpu_nodes("b", [4, 0, 4, 0])),
    }

    decision = FederationEngine(fed).decide(gang(("worker", 4, {"cpu": "1", GPU: "4"})), snapshots, now=NOW)

    assert decision.outcome == "wait" and decision.candidates == []
    assert {r.plugin for r in decision.rejected} == {"GangFit"}
    assert all("2 of 4 worker pod(s) fit" in r.reason for r in decision.rejected)


def test_a_gang_larger_than_the_empty_cluster_is_impossible() -> None:
    fed = spec([cluster("gpu")])
    snapshots = {"gpu": snapshot("gpu", gpu_nodes("g", [0, 0], size=4))}

    decision = FederationEngine(fed).decide(gang(("worker", 3, {"cpu": "1", GPU: "4"})), snapshots, now=NOW)

    assert decision.outcome == "impossible"
    assert (rejection(decision, "gpu").plugin, rejection(decision, "gpu").reason) == (
        "GangCapacity",
        "gang never fits, even on empty nodes: 2 of 3 worker pod(s) fit: the largest empty node left has "
        "0 nvidia.com/gpu (each worker asks 4)",
    )


def test_several_pods_share_a_node_and_roles_of_different_shapes_pack_together() -> None:
    fed = spec([cluster("gpu")])
    # Two 4-GPU nodes with 16 cpus each: 1 launcher (cpu 6, no GPU) + 8 one-GPU workers (cpu 1 each).
    nodes = [node(f"g{i}", {"cpu": "16", "memory": "64Gi", GPU: "4"}) for i in range(2)]
    snapshots = {"gpu": snapshot("gpu", nodes)}
    job = gang(("launcher", 1, {"cpu": "6"}), ("worker", 8, {"cpu": "1", GPU: "1"}))

    assert FederationEngine(fed).decide(job, snapshots, now=NOW).cluster == "gpu"

    # A ninth worker finds no GPU: the launcher would still fit, the workers would not.
    bigger = gang(("launcher", 1, {"cpu": "6"}), ("worker", 9, {"cpu": "1", GPU: "1"}))
    decision = FederationEngine(fed).decide(bigger, snapshots, now=NOW)
    assert decision.outcome == "impossible"
    assert "8 of 9 worker pod(s) fit" in rejection(decision, "gpu").reason
    # Too much cpu for the launcher beside 8 workers' 8 cpus on two 16-cpu nodes.
    crowded = gang(("launcher", 1, {"cpu": "13"}), ("worker", 8, {"cpu": "2", GPU: "1"}))
    reason = rejection(FederationEngine(fed).decide(crowded, snapshots, now=NOW), "gpu").reason
    assert reason.endswith(
        "0 of 1 launcher pod(s) fit: the largest empty node left has 8 cpu (each launcher asks 13)"
    )


def test_gang_fit_honours_node_selectors_taints_readiness_and_in_flight_reservations() -> None:
    fed = spec([cluster("gpu")])
    labelled = [
        node("a100-0", {"cpu": "32", GPU: "4"}, labels={"gpu": "a100"}),
        node("a100-1", {"cpu": "32", GPU: "4"}, labels={"gpu": "a100"}, ready=False),
        node("t4-0", {"cpu": "32", GPU: "4"}, labels={"gpu": "t4"}),
    ]
    snapshots = {"gpu": snapshot("gpu", labelled)}
    job = gang(("worker", 2, {"cpu": "1", GPU: "4"}), node_selector={"gpu": "a100"})
    decision = FederationEngine(fed).decide(job, snapshots, now=NOW)
    assert decision.outcome == "wait"  # the second a100 node is not ready; the t4 node does not match
    assert "1 of 2 worker pod(s) fit" in rejection(decision, "gpu").reason

    ready = {
        "gpu": snapshot("gpu", [labelled[0], node("a100-1", {"cpu": "32", GPU: "4"}, labels={"gpu": "a100"})])
    }
    assert FederationEngine(fed).decide(job, ready, now=NOW).cluster == "gpu"
    # Another gang placed here a moment ago, not yet in the snapshot, took 4 GPUs.
    held = FederationEngine(fed).decide(job, ready, now=NOW, reservations={"gpu": {GPU: 4, "cpu": 1000}})
    assert held.outcome == "wait"


def test_the_gang_is_priced_whole_and_one_pod_requests_are_judged_as_before() -> None:
    fed = spec([cluster("gpu")])
    snapshots = {"gpu": snapshot("gpu", gpu_nodes("g", [4, 4, 4]))}
    one = FederationEngine(fed).decide(request({"cpu": "1", GPU: "4"}), snapshots, now=NOW)
    three = FederationEngine(fed).decide(gang(("worker", 3, {"cpu": "1", GPU: "4"})), snapshots, now=NOW)
    assert three.candidates[0].breakdown["Cost"].raw == pytest.approx(
        3 * one.candidates[0].breakdown["Cost"].raw
    )


def test_a_gang_request_is_checked_naming_the_field() -> None:
    with pytest.raises(ValueError, match=r"resources: a gang request's resources are the sum"):
        TaskRequest(resources={"cpu": 1000}, gang=(GangRole(count=2, resources={"cpu": 1000}),))
    with pytest.raises(SpecError, match=r"request.gang\[0\].count"):
        TaskRequest.from_pod_spec({"containers": [{"name": "c"}]}, gang_of=0)
    with pytest.raises(SpecError, match=r"request.gang: a gang has at least one role"):
        TaskRequest.for_gang([])
    built = TaskRequest.from_pod_spec(
        {"containers": [{"name": "c", "resources": {"requests": {"cpu": "2", GPU: "1"}}}]}, gang_of=3
    )
    assert (built.resources, built.gang_size, built.gang[0].resources) == (
        {"cpu": 6000, GPU: 3},
        3,
        {"cpu": 2000, GPU: 1},
    )
