"""Each filter plugin, through the engine: who is rejected, by which plugin, with what reason."""

from __future__ import annotations

from datetime import timedelta

import pytest

from airflow_provider_fedsched.federation import FederationEngine, SpecError, Taint, Toleration
from tests.federation.helpers import GPU, NOW, cluster, node, request, snapshot, spec

GPU_TAINT = Taint(key=GPU, value="present", effect="NoSchedule")
GPU_TOLERATION = Toleration(key=GPU, operator="Equal", value="present", effect="NoSchedule")


def rejection(decision, name):  # type: ignore[no-untyped-def]
    return next(r for r in decision.rejected if r.cluster == name)


def test_fragmentation_eight_free_gpus_two_per_node_cannot_take_a_four_gpu_pod() -> None:
    fed = spec([cluster("gpu")])
    gpu_nodes = [node(f"g{i}", {"cpu": "32", "memory": "128Gi", GPU: "2"}) for i in range(4)]
    decision = FederationEngine(fed).decide(
        request({"cpu": "1", GPU: "4"}), {"gpu": snapshot("gpu", gpu_nodes)}, now=NOW
    )
    assert decision.outcome == "impossible"  # no node has 4 GPUs even when empty
    assert rejection(decision, "gpu").reason.endswith("0/4 nodes fit: 4 Insufficient nvidia.com/gpu")

    # Same free total, but a bigger node that is busy now: wait, with the Kubernetes-style reason.
    busy = [node(f"g{i}", {"cpu": "32", GPU: "4"}, {GPU: "2"}) for i in range(4)]
    decision = FederationEngine(fed).decide(
        request({"cpu": "1", GPU: "4"}), {"gpu": snapshot("gpu", busy)}, now=NOW
    )
    assert decision.outcome == "wait"
    assert (rejection(decision, "gpu").plugin, rejection(decision, "gpu").reason) == (
        "NodeFit",
        "0/4 nodes fit: 4 Insufficient nvidia.com/gpu",
    )
    two = FederationEngine(fed).decide(
        request({"cpu": "1", GPU: "2"}), {"gpu": snapshot("gpu", busy)}, now=NOW
    )
    assert two.cluster == "gpu"


def test_node_fit_skips_not_ready_unschedulable_tainted_and_unselected_nodes() -> None:
    fed = spec([cluster("c")])
    nodes = [
        node("notready", ready=False),
        node("cordoned", unschedulable=True),
        node("tainted", taints=[GPU_TAINT]),
        node("wronglabel", labels={"disk": "hdd"}),
        node("full", {"cpu": "2"}, {"cpu": "2"}, labels={"disk": "ssd"}),
    ]
    engine = FederationEngine(fed)
    req = request({"cpu": "1"}, node_selector={"disk": "ssd"})
    decision = engine.decide(req, {"c": snapshot("c", nodes)}, now=NOW)
    assert decision.outcome == "wait"
    # Kubernetes style: one count per reason, reasons sorted.
    assert rejection(decision, "c").reason == (
        "0/5 nodes fit: 1 Insufficient cpu, 1 node(s) didn't match Pod's node affinity/selector, "
        "1 node(s) had untolerated taint {nvidia.com/gpu: present}, 2 node(s) were unschedulable or not ready"
    )
    # Tolerating the taint makes the tainted node usable (it has no disk label, so drop the selector).
    tolerant = request({"cpu": "1"}, tolerations=[GPU_TOLERATION])
    only_tainted = [node("notready", ready=False), node("tainted", taints=[GPU_TAINT])]
    assert engine.decide(tolerant, {"c": snapshot("c", only_tainted)}, now=NOW).cluster == "c"
    assert engine.decide(request({"cpu": "1"}), {"c": snapshot("c", only_tainted)}, now=NOW).outcome == "wait"


def test_node_fit_counts_only_the_nodes_a_selector_admits_and_reuses_them_across_decisions() -> None:
    # The only node with room is of the wrong type: the group's largest free cpu fits, the selector's
    # nodes do not. The same snapshot answers requests with other selectors (its index keeps one list of
    # nodes per selector) without mixing them up.
    fed = spec([cluster("c")])
    nodes = [
        node("v100-free", {"cpu": "8"}, labels={"model": "v100"}),
        node("a100-busy", {"cpu": "8"}, {"cpu": "6"}, labels={"model": "a100"}),
        node("a100-full", {"cpu": "8"}, {"cpu": "8"}, labels={"model": "a100"}),
    ]
    engine = FederationEngine(fed)
    snap = {"c": snapshot("c", nodes)}
    a100 = request({"cpu": "4"}, node_selector={"model": "a100"})
    decision = engine.decide(a100, snap, now=NOW)
    assert decision.outcome == "wait"
    assert rejection(decision, "c").reason == (
        "0/3 nodes fit: 2 Insufficient cpu, 1 node(s) didn't match Pod's node affinity/selector"
    )
    assert engine.decide(request({"cpu": "4"}, node_selector={"model": "v100"}), snap, now=NOW).cluster == "c"
    assert engine.decide(request({"cpu": "2"}, node_selector={"model": "a100"}), snap, now=NOW).cluster == "c"
    never = engine.decide(request({"cpu": "2"}, node_selector={"model": "h100"}), snap, now=NOW)
    assert never.outcome == "impossible"
    assert rejection(never, "c").reason.endswith(
        "0/3 nodes fit: 3 node(s) didn't match Pod's node affinity/selector"
    )
    assert engine.decide(a100, snap, now=NOW).outcome == "wait"  # same answer from the kept lists


def test_prefer_no_schedule_taints_do_not_block() -> None:
    soft = Taint(key="spot", value="true", effect="PreferNoSchedule")
    fed = spec([cluster("c", taints=[soft.model_dump()])])
    decision = FederationEngine(fed).decide(
        request(), {"c": snapshot("c", [node("n", taints=[soft])])}, now=NOW
    )
    assert decision.cluster == "c"


@pytest.mark.parametrize(
    ("toleration", "tolerated"),
    [
        (Toleration(key="dedicated", value="batch", effect="NoSchedule"), True),
        (Toleration(key="dedicated", value="other", effect="NoSchedule"), False),
        (Toleration(key="dedicated", operator="Exists"), True),
        (Toleration(operator="Exists"), True),  # empty key + Exists tolerates everything
        (Toleration(key="dedicated", value="batch", effect="NoExecute"), False),
        (Toleration(key="other", operator="Exists"), False),
    ],
)
def test_cluster_taints_need_a_matching_toleration(toleration: Toleration, tolerated: bool) -> None:
    fed = spec([cluster("c", taints=[{"key": "dedicated", "value": "batch", "effect": "NoSchedule"}])])
    decision = FederationEngine(fed).decide(request(tolerations=[toleration]), {"c": snapshot("c")}, now=NOW)
    if tolerated:
        assert decision.cluster == "c"
    else:
        assert decision.outcome == "impossible"
        assert rejection(decision, "c").plugin == "ClusterTaints"
        assert "dedicated=batch:NoSchedule" in rejection(decision, "c").reason


def test_cluster_labels_are_matched_by_the_cluster_selector() -> None:
    fed = spec([cluster("a", labels={"gpu": "true"}), cluster("b", labels={"gpu": "false"}), cluster("c")])
    snaps = {name: snapshot(name) for name in "abc"}
    decision = FederationEngine(fed).decide(request(cluster_selector={"gpu": "true"}), snaps, now=NOW)
    assert decision.cluster == "a" and [c.cluster for c in decision.candidates] == ["a"]
    assert rejection(decision, "b").reason == "cluster label gpu=true required (gpu is 'false')"
    assert rejection(decision, "c").reason == "cluster label gpu=true required (gpu is absent)"


def test_cluster_subset_restricts_and_unknown_names_are_errors() -> None:
    fed = spec([cluster("a"), cluster("b")])
    snaps = {"a": snapshot("a"), "b": snapshot("b")}
    engine = FederationEngine(fed)
    assert engine.decide(request(clusters=["b"]), snaps, now=NOW).cluster == "b"
    empty = engine.decide(request(clusters=[]), snaps, now=NOW)
    assert empty.outcome == "impossible" and {r.plugin for r in empty.rejected} == {"ClusterSubset"}
    with pytest.raises(SpecError, match=r"request\.clusters\[1\]: unknown cluster 'zz' \(known: a, b\)"):
        engine.decide(request(clusters=["a", "zz"]), snaps, now=NOW)
    with pytest.raises(SpecError, match=r"request\.datasets\[0\]: unknown dataset 'nope'"):
        engine.decide(request(datasets=["nope"]), snaps, now=NOW)


def test_stale_snapshot_makes_the_cluster_unavailable_with_its_age() -> None:
    fed = spec([cluster("fresh"), cluster("stale")])
    snaps = {"fresh": snapshot("fresh", age_seconds=3), "stale": snapshot("stale", age_seconds=42)}
    decision = FederationEngine(fed).decide(request(), snaps, now=NOW)
    assert decision.cluster == "fresh"
    assert (rejection(decision, "stale").plugin, rejection(decision, "stale").reason) == (
        "Freshness",
        "snapshot is 42.0s old (ttl 15s)",
    )
    assert decision.snapshot_age_seconds == {"fresh": 3.0, "stale": 42.0}
    only_stale = FederationEngine(fed).decide(request(clusters=["stale"]), snaps, now=NOW)
    assert only_stale.outcome == "wait"
    # A per-task policy with a longer TTL accepts it.
    relaxed = fed.policy.merged({"snapshot_ttl_seconds": 60})
    assert FederationEngine(fed).decide(request(clusters=["stale"]), snaps, now=NOW, policy=relaxed).placed


def test_missing_or_unreachable_snapshot_means_wait() -> None:
    fed = spec([cluster("gone"), cluster("down")])
    decision = FederationEngine(fed).decide(
        request(), {"down": snapshot("down", [], reachable=False)}, now=NOW
    )
    assert decision.outcome == "wait"
    assert rejection(decision, "gone").reason == "no snapshot of this cluster"
    assert rejection(decision, "down").reason == "unreachable: connection refused"


def test_cooldown_rejects_until_it_expires() -> None:
    fed = spec([cluster("a"), cluster("b", prices={"cpu_hour": 9})])
    snaps = {"a": snapshot("a"), "b": snapshot("b")}
    engine = FederationEngine(fed)
    until = NOW + timedelta(seconds=90)
    decision = engine.decide(request(), snaps, now=NOW, cooldowns={"a": until})
    assert decision.cluster == "b"
    assert rejection(decision, "a").reason == "cooling down until 2025-06-01T08:01:30+00:00 (90s left)"
    later = NOW + timedelta(seconds=91)
    assert (
        engine.decide(
            request(),
            snaps,
            now=later,
            cooldowns={"a": until},
            policy=fed.policy.merged({"snapshot_ttl_seconds": 1000}),
        ).cluster
        == "a"
    )


def test_excluded_clusters_are_rejected_with_the_given_reason() -> None:
    fed = spec([cluster("a"), cluster("b")])
    decision = FederationEngine(fed).decide(
        request(),
        {"a": snapshot("a"), "b": snapshot("b")},
        now=NOW,
        exclude={"a": "pod failed: ImagePullBackOff"},
    )
    assert decision.cluster == "b"
    assert rejection(decision, "a").reason == "excluded: pod failed: ImagePullBackOff"


def test_namespace_quota_headroom_must_cover_the_request() -> None:
    fed = spec([cluster("a"), cluster("b", namespace="batch")])
    snaps = {
        "a": snapshot("a", quota={"default": {"cpu": "2"}}),
        "b": snapshot("b", quota={"default": {"cpu": "0"}}),  # b runs pods in "batch", which has no quota
    }
    engine = FederationEngine(fed)
    decision = engine.decide(request({"cpu": "4", "memory": "1Gi"}), snaps, now=NOW)
    assert decision.cluster == "b"
    assert rejection(decision, "a").reason == "namespace 'default' quota: cpu requested 4, headroom 2"
    # Reservations eat into quota headroom too.
    small = request({"cpu": "1"}, clusters=["a"])
    assert engine.decide(small, snaps, now=NOW).placed
    assert engine.decide(small, snaps, now=NOW, reservations={"a": {"cpu": 1500}}).outcome == "wait"


def test_reservations_count_against_free_capacity() -> None:
    fed = spec([cluster("c")])
    engine = FederationEngine(fed)
    one_node = {"c": snapshot("c", [node("n", {"cpu": "8", GPU: "4"})])}
    assert engine.decide(request({GPU: "1"}), one_node, now=NOW).placed
    decision = engine.decide(request({GPU: "1"}), one_node, now=NOW, reservations={"c": {GPU: 4}})
    assert decision.outcome == "wait"
    assert rejection(decision, "c").reason == (
        "0/1 nodes fit: 1 Insufficient nvidia.com/gpu (counting in-flight reservations: nvidia.com/gpu 4)"
    )
    # Two nodes with 2 free each and 2 in flight: the in-flight pod takes one node, the other still fits 2.
    two_nodes = {"c": snapshot("c", [node("n0", {"cpu": "8", GPU: "2"}), node("n1", {"cpu": "8", GPU: "2"})])}
    assert engine.decide(request({GPU: "2"}), two_nodes, now=NOW, reservations={"c": {GPU: 2}}).placed
    # Nodes with 4 and 1 free and 2 in flight: assume the worst (it lands on the big node), so 3 do not fit.
    uneven = {"c": snapshot("c", [node("n0", {"cpu": "8", GPU: "4"}), node("n1", {"cpu": "8", GPU: "1"})])}
    assert engine.decide(request({GPU: "3"}), uneven, now=NOW).placed
    assert engine.decide(request({GPU: "3"}), uneven, now=NOW, reservations={"c": {GPU: 2}}).outcome == "wait"


def test_capacity_distinguishes_impossible_from_wait() -> None:
    fed = spec([cluster("small"), cluster("big")])
    snaps = {
        "small": snapshot("small", [node("s", {"cpu": "4", "memory": "8Gi"})]),
        "big": snapshot("big", [node("b", {"cpu": "64", "memory": "256Gi"}, {"cpu": "60"})]),
    }
    decision = FederationEngine(fed).decide(request({"cpu": "16"}), snaps, now=NOW)
    assert decision.outcome == "wait"  # big could take it once it drains
    assert rejection(decision, "small").permanent and rejection(decision, "small").plugin == "Capacity"
    assert not rejection(decision, "big").permanent
    huge = FederationEngine(fed).decide(request({"cpu": "128"}), snaps, now=NOW)
    assert huge.outcome == "impossible"
    assert huge.reason.startswith(
        "impossible: no cluster could ever take this task (0/2 clusters: 2 Capacity)"
    )
