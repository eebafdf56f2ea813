"""The columnar snapshot index decides exactly as a from-scratch scan does: the same outcome, cluster,
candidates (scores and every score term, bit for bit), rejections (plugin, reason, permanence), reason,
snapshot ages and the preferred node (the ``Fragmentation`` score's hint, over GPU devices and target
workloads the snapshots report), on generated federations, requests and decision inputs, decision after
decision on one engine (so that every cache the index keeps is exercised)."""

from __future__ import annotations

import math
from datetime import timedelta
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_provider_fedsched.federation import (
    ClusterSnapshot,
    FederationEngine,
    NodeSnapshot,
    PolicySpec,
    Taint,
    TaskRequest,
    Toleration,
    load_spec,
)
from airflow_provider_fedsched.federation.columns import rounded
from airflow_provider_fedsched.federation.limits import MAX_QUANTITY
from airflow_provider_fedsched.federation.request import GangRole
from airflow_provider_fedsched.federation.resources import GPU_MILLI
from airflow_provider_fedsched.federation.snapshot import NodeGpus
from tests.federation.helpers import GPU, NOW

GIB = 2**30
REGIONS = ["eu", "us", "ap"]
FPGA = "example.com/fpga"
TAINTS = [
    Taint(key=GPU, value="present", effect="NoSchedule"),
    Taint(key="spot", effect="NoExecute"),
    Taint(key="slow", effect="PreferNoSchedule"),
]

# Amounts from small sets, so that ties (between nodes, clusters and scores) are common; now and then one
# beyond 2^53 (not exact as a float) or at Kubernetes' limit. Nodes are mostly larger than requests, so
# that most decisions have candidates to rank.
node_cpu = st.sampled_from([16000, 8000, 32000, 4000, 0]) | st.integers(0, 64_000)
node_memory = st.sampled_from([64 * GIB, 16 * GIB, 4 * GIB, 0])
small_cpu = st.sampled_from([1000, 500, 2000, 4000, 0])
cpu = st.one_of(small_cpu, small_cpu, small_cpu, st.sampled_from([8000, 16000]), st.integers(0, 64_000))
memory = st.one_of(st.sampled_from([GIB, 0, 4 * GIB]), st.sampled_from([GIB, 16 * GIB, 64 * GIB]))
gpus = st.sampled_from([1, 0, 2, 4, 8])
huge = st.sampled_from([2**53 + 1, MAX_QUANTITY])
device_free = st.sampled_from([1000, 0, 500, 250, 700])
gpu_milli = st.sampled_from([500, 1000, 250, 2000, 4000])
# The strategies the composites below draw from, built once: built inside them, hypothesis validates each
# again at every draw, which cost more than the decisions under test.
node_count = st.integers(1, 6) | st.just(0)
used = st.sampled_from([0.25, 0.5, 0.0, 0.9, 1.0, 1.25])  # of allocatable (a node may be overcommitted)
device_lists = st.lists(device_free, max_size=8)
gpu_models = st.sampled_from(["V100", "T4"])
fpga_count = st.integers(1, 3) | st.just(0)
node_labels = st.sampled_from([{"disk": "ssd"}, {}, {"disk": "hdd"}, {"disk": "ssd", "zone": "a"}])
node_taints = st.sampled_from([[], [], [], [TAINTS[0]], [TAINTS[2]], [TAINTS[1], TAINTS[0]]])
regions = st.sampled_from(REGIONS)
cluster_labels = st.sampled_from([{}, {"tier": "gold"}, {"tier": "silver"}])
cpu_hour = st.sampled_from([0.04, 0.05, 0.1, 0.0])
memory_gib_hour = st.sampled_from([0.005, 0.01, 0.0])
gpu_hour = st.sampled_from([2.0, 2.5, 0.0])
egress_gb = st.sampled_from([0.08, 0.1, 0.0])
extended_prices = st.sampled_from([{}, {FPGA: 1.5}])
groups = st.sampled_from(["west", "east"])
age_seconds = st.integers(0, 12) | st.integers(-40, 40)
reasons = st.sampled_from([None, "connection refused"])
quota_headroom = st.sampled_from(
    [{}, {"default": {"cpu": 4000}}, {"batch": {"cpu": 2000, "memory": 4 * GIB}}]
)
dataset_sizes = st.sampled_from([1.0, 100.0, 2500.0])
allowed_regions = st.sampled_from([None, None, ["eu", "us"], ["eu"], []])
node_selectors = st.sampled_from([{}, {}, {"disk": "ssd"}, {"disk": "ssd", "zone": "a"}])
cluster_selectors = st.sampled_from([{}] * 5 + [{"tier": "gold"}])
tolerations = st.sampled_from(
    [
        [],
        [Toleration(key=GPU, operator="Exists", effect="NoSchedule")],
        [Toleration(operator="Exists")],
    ]
)
prefer_regions = st.sampled_from([None, *REGIONS])
prefer_groups = st.sampled_from([None, None, "west"])
namespaces = st.sampled_from(["default", "batch"])
durations = st.sampled_from([60.0, 3600.0, 7200.0])
pods_in_flight = st.lists(
    st.fixed_dictionaries({"cpu": cpu, GPU: gpus})
    | st.fixed_dictionaries({"cpu": cpu, GPU_MILLI: gpu_milli}),
    max_size=3,
)
snapshot_ttls = st.sampled_from([15.0, 30.0])
score_lists = st.lists(st.sampled_from(PolicySpec().scores), unique=True, max_size=5)
weights = st.sampled_from([{}, {"cost": 1.0, "headroom": 2.0}])
forecast_values = st.sampled_from([0.0, 0.3, 1.7, -0.2, math.nan]) | st.integers(0, 1)
# Target workloads (the shapes a member's pods have, counted), for the Fragmentation score.
WORKLOADS = [
    [],
    [
        {"cpu": 2000, "gpus": 1, "gpu_milli": 500, "count": 60},
        {"cpu": 4000, "gpus": 1, "gpu_milli": 1000, "count": 30},
    ],
    [
        {"cpu": 1000, "count": 20},
        {"cpu": 8000, "gpus": 4, "gpu_milli": 1000, "models": ["V100"], "count": 10},
        {"cpu": 1000, "gpus": 1, "gpu_milli": 250, "models": ["T4"], "count": 10},
    ],
]


workloads = st.sampled_from(WORKLOADS)


@st.composite
def nodes(draw: st.DrawFn, cluster: str) -> list[NodeSnapshot]:
    made = []
    for position in range(draw(node_count)):
        allocatable = {"cpu": draw(node_cpu), "memory": draw(node_memory), "pods": 110}
        requested = {
            "cpu": int(allocatable["cpu"] * draw(used)),
            "memory": int(allocatable["memory"] * draw(used)),
        }
        if draw(st.booleans()):
            allocatable[GPU] = draw(gpus) * 2
            requested[GPU] = draw(gpus)
        devices = None
        if draw(st.integers(0, 2)) == 0:
            # GPU devices as a sharing member reports them (the Fragmentation score's input), with their
            # thousandths as an extended resource the scheduler counts.
            free = draw(device_lists)
            devices = NodeGpus(model=draw(gpu_models), free=free)
            allocatable[GPU_MILLI] = 1000 * len(free)
            requested[GPU_MILLI] = 1000 * len(free) - sum(free)
        if draw(st.integers(0, 3)) == 0:
            allocatable[FPGA] = draw(fpga_count)
        if draw(st.integers(0, 14)) == 0:
            allocatable["cpu"] = draw(huge)
        made.append(
            NodeSnapshot(
                name=f"{cluster}-n{position}",
                allocatable=allocatable,
                requested=requested,
                labels=draw(node_labels),
                taints=draw(node_taints),
                ready=draw(st.integers(0, 5)) > 0,
                unschedulable=draw(st.integers(0, 7)) == 0,
                gpus=devices,
            )
        )
    return made


@st.composite
def federations(draw: st.DrawFn) -> dict[str, Any]:
    count = draw(st.integers(1, 9))
    names = [f"c{i}" for i in draw(st.permutations(range(count)))]  # spec order is not name order
    clusters, snapshots = [], {}
    for name in names:
        cluster: dict[str, Any] = {
            "name": name,
            "conn_id": f"k8s_{name}",
            "region": draw(regions),
            "labels": draw(cluster_labels),
            "prices": {
                "cpu_hour": draw(cpu_hour),
                "memory_gib_hour": draw(memory_gib_hour),
                "gpu_hour": draw(gpu_hour),
                "egress_gb": draw(egress_gb),
                "extended": draw(extended_prices),
            },
        }
        if draw(st.integers(0, 3)) == 0:
            cluster["group"] = draw(groups)
        if draw(st.integers(0, 9)) == 0:
            cluster["taints"] = [TAINTS[draw(st.integers(0, 2))].model_dump()]
        if draw(st.integers(0, 4)) == 0:
            cluster["namespace"] = "batch"
        if draw(st.integers(0, 3)) == 0:
            cluster["scoring_strategy"] = {"type": "MostAllocated", "resources": [GPU]}
        clusters.append(cluster)
        if draw(st.integers(0, 15)) == 0:
            continue  # no snapshot
        # Now and then observed millennia ahead (clocks disagree): an age not exact as a float.
        skew = timedelta(days=2_000_000) if draw(st.integers(0, 20)) == 0 else timedelta(0)
        snapshots[name] = {
            "cluster": name,
            "observed_at": NOW + skew - timedelta(seconds=draw(age_seconds)),
            "reachable": draw(st.integers(0, 15)) > 0,
            "reason": draw(reasons),
            "nodes": draw(nodes(name)),
            "workload": draw(workloads),
            "quota_headroom": draw(quota_headroom),
        }
    datasets = [
        {
            "name": f"ds{i}",
            "cluster": draw(st.sampled_from(names)),
            "size_gb": draw(dataset_sizes),
            "allowed_regions": draw(allowed_regions),
        }
        for i in range(draw(st.integers(0, 3)))
    ]
    return {"clusters": clusters, "datasets": datasets, "regions": REGIONS, "snapshots": snapshots}


@st.composite
def requests(draw: st.DrawFn, federation: dict[str, Any]) -> TaskRequest:
    names = [c["name"] for c in federation["clusters"]]
    resources = {"cpu": draw(cpu), "memory": draw(memory)}
    if draw(st.integers(0, 2)) == 0:
        resources[GPU] = draw(gpus)
    if draw(st.integers(0, 7)) == 0:
        resources[FPGA] = draw(st.integers(1, 2))
    if draw(st.integers(0, 3)) == 0:
        resources[GPU_MILLI] = draw(gpu_milli)
    if draw(st.integers(0, 14)) == 0:
        resources["cpu"] = draw(huge)
    fields: dict[str, Any] = {
        "node_selector": draw(node_selectors),
        "cluster_selector": draw(cluster_selectors),
        "tolerations": draw(tolerations),
        "datasets": draw(
            st.lists(st.sampled_from([d["name"] for d in federation["datasets"]] or ["-"]), max_size=2)
            | st.just([])
        )
        if federation["datasets"]
        else [],
        "prefer_region": draw(prefer_regions),
        "prefer_group": draw(prefer_groups),
        "clusters": draw(st.sampled_from([None] * 6 + [sorted(names)[:1], names[::2]])),
        "namespace": draw(namespaces),
        "expected_duration_seconds": draw(durations),
    }
    if fields["prefer_group"] is not None and fields["prefer_group"] not in {
        c.get("group", c["region"]) for c in federation["clusters"]
    }:
        fields["prefer_group"] = None
    if draw(st.integers(0, 9)) == 0:
        pod = {
            name: min(amount, 64_000) for name, amount in resources.items()
        }  # the gang's sum stays in range
        return TaskRequest.for_gang([GangRole(count=draw(st.integers(1, 3)), resources=pod)], **fields)
    return TaskRequest(resources=resources, **fields)


@st.composite
def inputs(draw: st.DrawFn, federation: dict[str, Any]) -> dict[str, Any]:
    """One decision's inputs besides the request: cooldowns, exclusions, reservations and pods in flight,
    a forecast and a policy."""
    names = [c["name"] for c in federation["clusters"]]
    some = st.lists(st.sampled_from(names), max_size=2, unique=True) | st.just([])
    policy = PolicySpec(
        snapshot_ttl_seconds=draw(snapshot_ttls),
        filters=[
            name
            for name in PolicySpec().filters
            if name not in {"ClusterLabels", "Freshness", "Cooldown", "Quota"} or draw(st.booleans())
        ],
        scores=draw(score_lists),
        weights=draw(weights),
    )
    return {
        "cooldowns": {name: NOW + timedelta(seconds=draw(st.integers(-60, 60))) for name in draw(some)},
        "exclude": {name: "failed over" for name in draw(some)},
        "reservations": {name: draw(st.fixed_dictionaries({"cpu": cpu})) for name in draw(some)},
        "in_flight": {name: draw(pods_in_flight) for name in draw(some)},
        "forecast": draw(st.none() | st.dictionaries(st.sampled_from(names), forecast_values)),
        "policy": draw(st.sampled_from([None, policy])),
    }


def _snapshots(federation: dict[str, Any]) -> dict[str, ClusterSnapshot]:
    """New snapshot objects each time: the scan never sees an index the columnar engine built."""
    return {name: ClusterSnapshot.model_validate(raw) for name, raw in federation["snapshots"].items()}


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_the_columnar_index_decides_as_a_from_scratch_scan(data: st.DataObject) -> None:
    federation = data.draw(federations())
    spec = load_spec({k: federation[k] for k in ("clusters", "datasets", "regions")})
    columnar = FederationEngine(spec, columnar=True)
    kept = _snapshots(federation)  # the columnar engine's snapshots, kept across its decisions
    # First a request most clusters have room for (so that there are candidates to rank), then drawn ones.
    easy = data.draw(
        st.sampled_from(
            [
                TaskRequest(resources={"cpu": 100}, prefer_region="eu"),
                TaskRequest(resources={"cpu": 100, GPU_MILLI: 500}),  # a GPU share: a node hint, mostly
                TaskRequest(
                    resources={"cpu": 100, GPU: 1, FPGA: 1}, tolerations=[Toleration(operator="Exists")]
                ),
            ]
        )
    )
    for position in range(data.draw(st.integers(2, 4))):
        request = easy if position == 0 else data.draw(requests(federation))
        given_inputs = data.draw(inputs(federation))
        scan = FederationEngine(spec, columnar=False).decide(
            request, _snapshots(federation), now=NOW, **given_inputs
        )
        decided = columnar.decide(request, kept, now=NOW, **given_inputs)
        assert decided == scan
        if federation["snapshots"] and data.draw(st.booleans()):
            # A new snapshot of one cluster (its reachability flipped, its nodes halved) replaces the old
            # object: the index must see it.
            name = data.draw(st.sampled_from(sorted(federation["snapshots"])))
            raw = federation["snapshots"][name]
            raw = {**raw, "reachable": not raw["reachable"], "nodes": raw["nodes"][::2]}
            federation["snapshots"][name] = raw
            kept[name] = ClusterSnapshot.model_validate(raw)


@settings(max_examples=500, deadline=None)
@given(
    st.lists(
        st.floats(min_value=-1e12, max_value=1e12)
        | st.sampled_from([math.inf, -math.inf, 1e300, -0.0])
        | st.integers(-(2**20), 2**20).map(lambda k: k / 1024)  # binary fractions: exact decimal halves
        | st.integers(-(10**6), 10**6).map(lambda k: k / 1e9 + 5e-10),
        min_size=64,  # fewer are rounded by Python's round itself
        max_size=150,
    )
)
def test_rounding_over_an_array_is_pythons_round(values: list[float]) -> None:
    import numpy as np

    assert rounded(np.array(values, np.float64), 9) == [round(value, 9) for value in values]
