"""Score plugins, normalization and weighting, ranking and ties, and the sovereignty property."""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_provider_fedsched.federation import Decision, FederationEngine, TaskRequest
from airflow_provider_fedsched.federation.registry import default_weights
from airflow_provider_fedsched.federation.snapshot import WorkloadShape
from airflow_provider_fedsched.render import decision_table
from tests.federation.helpers import GPU, NOW, cluster, node, request, snapshot, spec


def decide(fed: Any, req: TaskRequest, **kwargs: Any) -> Decision:
    snaps = kwargs.pop("snapshots", None) or {c.name: snapshot(c.name) for c in fed.clusters}
    return FederationEngine(fed).decide(req, snaps, now=NOW, **kwargs)


def only(plugin: str) -> dict[str, Any]:
    """A policy that scores with ``plugin`` alone (weight 1)."""
    weights = dict.fromkeys(default_weights(), 0.0)
    weights[plugin.lower()] = 1.0
    return {"weights": weights}


def test_cost_prices_requests_for_the_expected_duration_and_cheaper_scores_higher() -> None:
    fed = spec(
        [
            cluster("cheap", prices={"cpu_hour": 0.02, "memory_gib_hour": 0.001}),
            cluster("dear", prices={"cpu_hour": 0.08, "memory_gib_hour": 0.004}),
            cluster("gpu", prices={"cpu_hour": 0.04, "gpu_hour": 2.5, "extended": {"example.com/fpga": 1.0}}),
        ],
        policy=only("cost"),
    )
    req = request({"cpu": "4", "memory": "8Gi"}, expected_duration_seconds=2 * 3600)
    decision = decide(fed, req)
    assert [c.cluster for c in decision.candidates] == ["cheap", "gpu", "dear"]
    cheap, _, dear = decision.candidates
    assert cheap.breakdown["Cost"].raw == pytest.approx((4 * 0.02 + 8 * 0.001) * 2)
    assert dear.breakdown["Cost"].raw == pytest.approx((4 * 0.08 + 8 * 0.004) * 2)
    assert cheap.breakdown["Cost"].normalized == 100.0
    # 100 * (1 - (dear - cheap) / dear) = 100 * cheap / dear
    assert dear.breakdown["Cost"].normalized == pytest.approx(100 * 0.176 / 0.704)
    extended = request({"cpu": "1", GPU: "1", "example.com/fpga": "2"}, expected_duration_seconds=3600)
    gpu_cost = (
        decide(
            fed,
            extended,
            snapshots={"gpu": snapshot("gpu", [node("n", {"cpu": "8", GPU: "1", "example.com/fpga": "4"})])},
        )
        .candidates[0]
        .breakdown["Cost"]
        .raw
    )
    assert gpu_cost == pytest.approx(0.04 + 2.5 + 2 * 1.0)


def _data_gravity_federation(size_gb: float) -> Any:
    return spec(
        [
            # Where the data lives: compute is dearer, egress out of it is what moving the data costs.
            cluster(
                "data-home",
                region="r1",
                prices={"cpu_hour": 0.10, "memory_gib_hour": 0.01, "egress_gb": 0.09},
            ),
            cluster(
                "cheap-compute",
                region="r2",
                prices={"cpu_hour": 0.02, "memory_gib_hour": 0.002, "egress_gb": 0.09},
            ),
        ],
        datasets=[{"name": "events", "cluster": "data-home", "size_gb": size_gb}],
        policy=only("cost"),
    )


def test_egress_makes_data_stay_and_compute_move_when_data_is_large() -> None:
    req = request({"cpu": "8", "memory": "32Gi"}, datasets=["events"], expected_duration_seconds=3600)
    large = decide(_data_gravity_federation(2000), req)
    assert large.cluster == "data-home"
    assert large.candidates[1].breakdown["Cost"].raw == pytest.approx(8 * 0.02 + 32 * 0.002 + 2000 * 0.09)
    tiny = decide(_data_gravity_federation(0.5), req)
    assert tiny.cluster == "cheap-compute"


def test_locality_is_the_fraction_of_read_bytes_already_local() -> None:
    fed = spec(
        [cluster("a"), cluster("b"), cluster("c")],
        datasets=[
            {"name": "big", "cluster": "a", "size_gb": 300},
            {"name": "small", "cluster": "b", "size_gb": 100},
        ],
        policy=only("locality"),
    )
    decision = decide(fed, request(datasets=["big", "small"]))
    raw = {c.cluster: c.breakdown["Locality"].raw for c in decision.candidates}
    assert raw == {"a": 75.0, "b": 25.0, "c": 0.0}
    assert decision.cluster == "a"
    no_data = decide(fed, request())
    assert {c.breakdown["Locality"].normalized for c in no_data.candidates} == {100.0}


def test_proximity_prefers_the_region_then_its_group() -> None:
    fed = spec(
        [
            cluster("same-region", region="cn-east-1", group="cn-east"),
            cluster("same-metro", region="cn-east-2", group="cn-east"),
            cluster("far", region="eu-west-1"),
        ],
        policy=only("proximity"),
    )
    by_region = decide(fed, request(prefer_region="cn-east-1"))
    assert {c.cluster: c.breakdown["Proximity"].raw for c in by_region.candidates} == {
        "same-region": 100.0,
        "same-metro": 50.0,
        "far": 0.0,
    }
    by_group = decide(fed, request(prefer_group="cn-east"))
    assert {c.cluster: c.breakdown["Proximity"].raw for c in by_group.candidates} == {
        "same-region": 50.0,
        "same-metro": 50.0,
        "far": 0.0,
    }
    assert by_group.cluster == "same-metro"  # a tie on everything: by name


def test_headroom_uses_the_scarcest_requested_resource_after_placement() -> None:
    fed = spec([cluster("roomy"), cluster("tight")], policy=only("headroom"))
    snaps = {
        # cpu 16 free of 32, memory 64Gi free of 64Gi -> after 4 cpu: cpu is scarcest, 12/32.
        "roomy": snapshot("roomy", [node("r", {"cpu": "32", "memory": "64Gi"}, {"cpu": "16"})]),
        "tight": snapshot(
            "tight", [node("t", {"cpu": "32", "memory": "64Gi"}, {"cpu": "4", "memory": "56Gi"})]
        ),
    }
    decision = decide(fed, request({"cpu": "4", "memory": "4Gi"}), snapshots=snaps)
    raw = {c.cluster: c.breakdown["Headroom"].raw for c in decision.candidates}
    assert raw["roomy"] == pytest.approx(100 * 12 / 32)
    assert raw["tight"] == pytest.approx(100 * 4 / 64)
    assert decision.cluster == "roomy"
    # An in-flight reservation lowers headroom.
    reserved = decide(
        fed, request({"cpu": "4", "memory": "4Gi"}), snapshots=snaps, reservations={"roomy": {"cpu": 12000}}
    )
    assert {c.cluster: c.breakdown["Headroom"].raw for c in reserved.candidates}["roomy"] == 0.0


def test_forecast_biases_within_its_weight_and_missing_is_neutral() -> None:
    fed = spec([cluster("a"), cluster("b"), cluster("c")], policy=only("forecast"))
    decision = decide(fed, request(), forecast={"a": 0.2, "b": 7.0})  # 7.0 is clamped to 1.0
    raw = {c.cluster: c.breakdown["Forecast"].raw for c in decision.candidates}
    assert raw == {"a": 20.0, "b": 100.0, "c": 50.0}
    assert decision.cluster == "b"
    assert max(c.score for c in decision.candidates) <= 100.0  # bounded by weight x 100
    neutral = decide(fed, request())
    assert {c.breakdown["Forecast"].raw for c in neutral.candidates} == {50.0}


def test_fragmentation_takes_the_last_free_gpu_with_its_registry_weight_and_names_the_node() -> None:
    """The ``Fragmentation`` score (FGD's gradient, docs/federation-spec.md) in the default policy: a
    one-GPU task where it closes a fragment the cluster's 8-GPU pods cannot use, not where it breaks up a
    whole 8-GPU node, although ``Headroom`` prefers the emptier cluster; the explanation names the node."""
    fed = spec([cluster("a"), cluster("b")])
    gpu_node = {"cpu": "64", "memory": "256Gi", GPU: "8"}
    workload = [
        WorkloadShape(cpu=1000, gpus=1, gpu_milli=1000, count=5),
        WorkloadShape(cpu=8000, gpus=8, gpu_milli=1000, count=5),
    ]
    snaps = {
        "a": snapshot("a", [node("a-empty", gpu_node)]).model_copy(update={"workload": workload}),
        "b": snapshot(
            "b", [node("b-empty", gpu_node), node("b-seven-used", gpu_node, {GPU: "7"})]
        ).model_copy(update={"workload": workload}),
    }
    decision = decide(fed, request({"cpu": "1", "memory": "1Gi", GPU: "1"}), snapshots=snaps)
    terms = {c.cluster: c.breakdown["Fragmentation"] for c in decision.candidates}
    assert terms["b"].weight == default_weights()["fragmentation"] == 2.0
    assert terms["b"].raw > 50.0 > terms["a"].raw  # closing a fragment removes it; breaking a node makes one
    assert terms["b"].weighted == pytest.approx(2.0 * terms["b"].normalized)
    headroom = {c.cluster: c.breakdown["Headroom"].weighted for c in decision.candidates}
    assert headroom["a"] > headroom["b"]
    assert decision.cluster == "b" and decision.extra == {"preferred_node": "b-seven-used"}
    assert decision.reason.endswith("; preferred node b-seven-used")
    table = decision_table(decision, width=140)
    assert "fragmentation" in table and "preferred node b-seven-used" in table  # a column per score


def test_weights_multiply_normalized_scores_and_disabled_scores_are_absent() -> None:
    fed = spec([cluster("a"), cluster("b")], datasets=[{"name": "d", "cluster": "a", "size_gb": 10}])
    policy = fed.policy.merged({"weights": {"locality": 2.0}, "scores": ["Locality", "Cost"]})
    decision = decide(fed, request(datasets=["d"]), policy=policy)
    best = decision.candidates[0]
    assert set(best.breakdown) == {"Cost", "Locality"}
    term = best.breakdown["Locality"]
    assert term.weight == 2.0 and term.weighted == pytest.approx(term.normalized * 2.0)
    assert best.score == pytest.approx(sum(t.weighted for t in best.breakdown.values()))


def test_ties_break_by_cost_then_name_whatever_the_input_order() -> None:
    clusters = [
        cluster(f"c{i:02d}", region=f"r{i % 3}", prices={"cpu_hour": 0.04 if i % 2 else 0.05})
        for i in range(12)
    ]
    req = request({"cpu": "2", "memory": "2Gi"})
    snaps = {c["name"]: snapshot(c["name"]) for c in clusters}
    reference = decide(spec(clusters, policy=only("locality")), req, snapshots=snaps)
    # All equal on locality: cheapest first, then by name.
    assert [c.cluster for c in reference.candidates][:3] == ["c01", "c03", "c05"]
    rng = random.Random(7)
    for _ in range(5):
        shuffled = clusters[:]
        rng.shuffle(shuffled)
        snap_items = list(snaps.items())
        rng.shuffle(snap_items)
        again = decide(spec(shuffled, policy=only("locality")), req, snapshots=dict(snap_items))
        assert again.cluster == reference.cluster
        assert [c.cluster for c in again.candidates] == [c.cluster for c in reference.candidates]


def test_decision_serialises_and_renders_without_colour_codes() -> None:
    fed = spec([cluster("a"), cluster("b", prices={"cpu_hour": 1})])
    decision = decide(fed, request(), snapshots={"a": snapshot("a"), "b": snapshot("b", age_seconds=99)})
    data = decision.to_dict()
    assert {"outcome", "cluster", "candidates", "rejected", "reason", "snapshot_age_seconds"} <= set(data)
    restored = Decision.from_dict(data)
    assert restored.cluster == "a" and restored.rejected == decision.rejected
    assert restored.candidates[0].breakdown.keys() == decision.candidates[0].breakdown.keys()
    table = decision_table(decision, width=100)
    assert "\x1b[" not in table
    assert "a" in table and "Freshness" in table and "snapshot is 99.0s old" in table


# ---------------------------------------------------------------- sovereignty property

REGIONS = ["r1", "r2", "r3", "r4"]


@st.composite
def federations(draw: st.DrawFn) -> tuple[Any, list[str], dict[str, Any]]:
    count = draw(st.integers(min_value=1, max_value=6))
    clusters = [cluster(f"c{i}", region=draw(st.sampled_from(REGIONS))) for i in range(count)]
    datasets = []
    for position in range(draw(st.integers(min_value=0, max_value=4))):
        known = sorted({c["region"] for c in clusters})
        allowed = draw(st.none() | st.lists(st.sampled_from(known), max_size=3, unique=True))
        datasets.append(
            {
                "name": f"d{position}",
                "cluster": f"c{draw(st.integers(min_value=0, max_value=count - 1))}",
                "size_gb": draw(st.floats(min_value=0, max_value=5000)),
                "allowed_regions": allowed,
            }
        )
    reads = draw(st.lists(st.sampled_from([d["name"] for d in datasets]), unique=True)) if datasets else []
    snaps = {
        c["name"]: snapshot(c["name"], age_seconds=draw(st.sampled_from([1.0, 30.0])))
        for c in clusters
        if draw(st.integers(min_value=0, max_value=4))  # now and then a cluster has no snapshot
    }
    return spec(clusters, datasets), reads, snaps


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(federations())
def test_sovereignty_is_never_broken(generated: tuple[Any, list[str], dict[str, Any]]) -> None:
    fed, reads, snaps = generated
    decision = FederationEngine(fed).decide(request(datasets=reads), snaps, now=NOW)
    allowed_sets = [
        set(d.allowed_regions) for d in fed.datasets if d.name in reads and d.allowed_regions is not None
    ]
    regions = {c.name: c.region for c in fed.clusters}
    if decision.outcome == "placed":
        assert decision.cluster is not None
        assert all(regions[decision.cluster] in allowed for allowed in allowed_sets)
        for candidate in decision.candidates:
            assert all(regions[candidate.cluster] in allowed for allowed in allowed_sets)
    else:
        assert decision.cluster is None and decision.outcome in ("wait", "impossible")
    if allowed_sets and not any(all(r in a for a in allowed_sets) for r in regions.values()):
        assert decision.outcome == "impossible"
