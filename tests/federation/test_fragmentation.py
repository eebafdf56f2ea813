"""GPU fragmentation (FGD's definitions over arrays) and the engine's ``Fragmentation`` score: its hint,
its explanation, pods in flight, the snapshot fields it reads, and its cache of unchanged nodes."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_provider_fedsched.federation import (
    ClusterSnapshot,
    FederationEngine,
    NodeSnapshot,
    SpecError,
    dump_snapshots,
    load_snapshots,
    parse_resource_list,
)
from airflow_provider_fedsched.federation.fragmentation import GpuView, TaskShape, Workload, fgd_scores
from airflow_provider_fedsched.federation.plugins import fragmentation as plugin
from airflow_provider_fedsched.federation.registry import default_weights
from airflow_provider_fedsched.federation.resources import GPU_MILLI
from airflow_provider_fedsched.federation.snapshot import NodeGpus, WorkloadShape
from airflow_provider_fedsched.render import decision_table
from tests.federation.helpers import GPU, NOW, cluster, request, spec

# ---------------------------------------------------------------- the definitions, written out plainly


def reference_fragmentation(cpu: int, devices: list[int], model: str, workload: Workload) -> float:
    """The paper's node fragmentation, shape by shape: a task that cannot run there (GPU type, cpu,
    devices) finds all the free GPU a fragment; one that can, the devices too small for it; a task
    without GPU uses none of it."""
    total = sum(devices)
    amount = 0.0
    for shape, share in zip(workload.shapes, workload.popularity, strict=True):
        if not shape.gpus or (shape.models and model not in shape.models):
            amount += share * total
        elif cpu >= shape.cpu and sum(g >= shape.gpu_milli for g in devices) >= shape.gpus:
            amount += share * sum(g for g in devices if g < shape.gpu_milli)
        else:
            amount += share * total
    return amount


def reference_take(devices: list[int], shape: TaskShape) -> tuple[list[int], bool]:
    """The devices a task not sharing a GPU takes: those with the least free that hold its share."""
    after = list(devices)
    need = shape.gpus
    for index in sorted(range(len(after)), key=lambda i: (after[i], i)):
        if need and after[index] >= shape.gpu_milli:
            after[index] -= shape.gpu_milli
            need -= 1
    return after, need == 0


MODELS = ("A", "B", "C")


def random_case(
    rng: random.Random,
) -> tuple[Workload, list[int], list[list[int]], list[str], list[TaskShape]]:
    counts: dict[TaskShape, float] = {}
    for _ in range(rng.randint(1, 10)):
        gpus = rng.choice((0, 1, 1, 2, 4, 8))
        milli = 0 if not gpus else rng.choice((100, 250, 500, 700, 1000)) if gpus == 1 else 1000
        models = tuple(rng.sample(MODELS, rng.randint(0, 2))) if gpus else ()
        counts[TaskShape(rng.choice((1000, 4000, 16000)), gpus, milli, models)] = rng.randint(1, 40)
    size = rng.randint(1, 12)
    cpu = [rng.choice((0, 2000, 8000, 32000)) for _ in range(size)]
    devices, models = [], []
    for _ in range(size):
        count = rng.choice((0, 1, 2, 4, 8))
        devices.append([rng.choice((0, 200, 500, 800, 1000, 1000)) for _ in range(count)])
        models.append(rng.choice(MODELS) if count else "")
    return Workload.typical(counts), cpu, devices, models, list(counts)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.integers(0, 2**32 - 1))
def test_fragmentation_and_gradients_follow_the_definitions(decision_path: str, seed: int) -> None:
    workload, cpu, devices, models, shapes = random_case(random.Random(seed))
    view = GpuView.of(cpu, [10**12] * len(cpu), devices, models, workload)
    width = view.devices.shape[1]
    for index in range(len(cpu)):
        assert view.fragmentation[index] == pytest.approx(
            reference_fragmentation(cpu[index], devices[index], models[index], workload), abs=1e-6
        )
    for shape in shapes:
        gradient = view.gradient(shape)
        for index in range(len(cpu)):
            before = reference_fragmentation(cpu[index], devices[index], models[index], workload)
            padded = devices[index] + [0] * (width - len(devices[index]))
            if shape.shares:
                for device, free in enumerate(padded):
                    if free < shape.gpu_milli:
                        assert gradient[index, device] == np.inf
                        continue
                    after = list(devices[index])
                    after[device] -= shape.gpu_milli
                    expected = reference_fragmentation(cpu[index] - shape.cpu, after, models[index], workload)
                    assert gradient[index, device] == pytest.approx(expected - before, abs=1e-6)
            else:
                after, fits = reference_take(devices[index], shape)
                if not fits:
                    assert gradient[index, 0] == np.inf
                    continue
                expected = reference_fragmentation(cpu[index] - shape.cpu, after, models[index], workload)
                assert gradient[index, 0] == pytest.approx(expected - before, abs=1e-6)


def test_a_placement_recomputes_only_what_changed_and_matches_a_fresh_view(decision_path: str) -> None:
    rng = random.Random(3)
    for _ in range(30):
        workload, cpu, devices, models, shapes = random_case(rng)
        view = GpuView.of(cpu, [10**12] * len(cpu), devices, models, workload)
        for shape in shapes:
            view.gradient(shape)  # warm every cache
        for _ in range(6):
            shape = rng.choice(shapes)
            fits = np.flatnonzero(view.fits(shape, 0))
            if not fits.size:
                continue
            node = int(fits[0])
            device = int(np.argmax(view.devices[node] >= shape.gpu_milli)) if shape.shares else None
            view.place(node, shape, 0, device)
            fresh = GpuView(
                view.cpu.copy(), view.memory.copy(), view.devices.copy(), view.model, view.models, workload
            )
            assert np.allclose(view.fragmentation, fresh.fragmentation)
            for other in shapes:
                assert np.array_equal(np.isinf(view.gradient(other)), np.isinf(fresh.gradient(other)))
                finite = np.isfinite(fresh.gradient(other))
                assert np.allclose(view.gradient(other)[finite], fresh.gradient(other)[finite])
                assert np.array_equal(view.fgd(other)[0], fresh.fgd(other)[0])


def test_the_target_workload_is_the_most_common_shapes_covering_95_percent(decision_path: str) -> None:
    counts = {TaskShape(1000 * k, 1, 1000): float(100 - k) for k in range(1, 40)}
    workload = Workload.typical(counts)
    total = sum(counts.values())
    chosen = sum(counts[shape] for shape in workload.shapes)
    assert chosen >= 0.95 * total > chosen - counts[workload.shapes[-1]]
    assert (
        list(workload.shapes) == sorted(counts, key=counts.__getitem__, reverse=True)[: len(workload.shapes)]
    )
    assert sum(workload.popularity) == pytest.approx(1.0)
    assert fgd_scores(np.array([[0.0, -1000.0, np.inf]])).tolist() == [[50, 73, -1]]


# ---------------------------------------------------------------- the score plugin in the engine


SHARE_WORKLOAD = [
    WorkloadShape(cpu=2000, gpus=1, gpu_milli=500, count=60),
    WorkloadShape(cpu=4000, gpus=1, gpu_milli=1000, count=30),
    WorkloadShape(cpu=8000, gpus=8, gpu_milli=1000, count=10),
]


def gpu_node(
    name: str, free: list[int], cpu_used: str = "0", model: str = "V100", **labels: str
) -> NodeSnapshot:
    count = len(free)
    return NodeSnapshot(
        name=name,
        allocatable=parse_resource_list({"cpu": "64", "memory": "256Gi", GPU_MILLI: str(count * 1000)}),
        requested=parse_resource_list({"cpu": cpu_used, GPU_MILLI: str(count * 1000 - sum(free))}),
        labels=dict(labels),
        gpus=NodeGpus(model=model, free=free),
    )


def gpu_snapshot(
    name: str, nodes: list[NodeSnapshot], workload: list[WorkloadShape] | None = None
) -> ClusterSnapshot:
    return ClusterSnapshot(cluster=name, observed_at=NOW, nodes=nodes, workload=workload or SHARE_WORKLOAD)


def only_fragmentation() -> dict[str, Any]:
    weights = dict.fromkeys(default_weights(), 0.0)
    weights["fragmentation"] = 1.0
    return {"weights": weights}


@pytest.fixture(autouse=True)
def fresh_cache() -> None:
    plugin.forget()


def test_a_sharing_pod_goes_where_it_fills_a_gpu_and_the_decision_names_the_node(decision_path: str) -> None:
    fed = spec([cluster("a"), cluster("b")], policy=only_fragmentation())
    snapshots = {
        # a: every GPU whole; b: one half-used GPU the pod fills exactly, on node b-1.
        "a": gpu_snapshot("a", [gpu_node("a-0", [1000] * 8), gpu_node("a-1", [1000] * 8)]),
        "b": gpu_snapshot("b", [gpu_node("b-0", [1000] * 8), gpu_node("b-1", [1000] * 7 + [500])]),
    }
    decision = FederationEngine(fed).decide(
        request({"cpu": "2", "memory": "4Gi", GPU_MILLI: "500"}), snapshots, now=NOW
    )
    assert decision.cluster == "b"
    assert decision.extra["preferred_node"] == "b-1"
    assert decision.reason.endswith("; preferred node b-1")
    terms = {c.cluster: c.breakdown["Fragmentation"] for c in decision.candidates}
    assert terms["b"].raw > 50 > terms["a"].raw  # filling a fragment removes it; a whole GPU makes one
    assert decision.to_dict()["extra"] == {"preferred_node": "b-1"}
    assert "fragmentation" in decision_table(decision)


def test_whole_gpus_from_nvidia_gpu_and_the_nodes_a_selector_admits(decision_path: str) -> None:
    fed = spec([cluster("a")], policy=only_fragmentation())

    def whole(name: str, used: int, model: str) -> NodeSnapshot:
        return NodeSnapshot(
            name=name,
            allocatable=parse_resource_list({"cpu": "64", "memory": "256Gi", GPU: "8"}),
            requested=parse_resource_list({GPU: str(used)}),
            labels={"nvidia.com/gpu.product": model, "pool": model.lower()},
        )

    nodes = [whole("empty", 0, "T4"), whole("seven-used", 7, "T4"), whole("other-model", 7, "A100")]
    workload = [
        WorkloadShape(cpu=1000, gpus=1, gpu_milli=1000, count=50),
        WorkloadShape(cpu=1000, gpus=8, gpu_milli=1000, count=50),
    ]
    snapshots = {"a": gpu_snapshot("a", nodes, workload)}
    one_gpu = request({"cpu": "1", "memory": "1Gi", GPU: "1"})
    # The last free GPU of a busy node, not a fresh node an 8-GPU task still needs whole.
    decision = FederationEngine(fed).decide(one_gpu, snapshots, now=NOW)
    assert decision.extra["preferred_node"] in {"seven-used", "other-model"}
    selected = request({"cpu": "1", "memory": "1Gi", GPU: "1"}, node_selector={"pool": "t4"})
    assert FederationEngine(fed).decide(selected, snapshots, now=NOW).extra["preferred_node"] == "seven-used"


def test_pods_in_flight_are_charged_where_they_were_hinted(decision_path: str) -> None:
    fed = spec([cluster("a")], policy=only_fragmentation())
    nodes = [gpu_node("n0", [1000] * 8), gpu_node("n1", [0] * 7 + [500])]
    snapshots = {"a": gpu_snapshot("a", nodes)}
    half = request({"cpu": "2", "memory": "4Gi", GPU_MILLI: "500"})
    engine = FederationEngine(fed)
    first = engine.decide(half, snapshots, now=NOW)
    assert first.extra["preferred_node"] == "n1"
    # The first pod is in flight (not in the snapshot yet): the half GPU it fills is taken, n1 is full.
    second = engine.decide(half, snapshots, now=NOW, in_flight={"a": [half.resources]})
    assert second.extra["preferred_node"] == "n0"
    plugin.forget()
    assert engine.decide(half, snapshots, now=NOW, in_flight={"a": [half.resources]}).extra == second.extra


def test_without_gpus_the_score_is_neutral_and_names_no_node(decision_path: str) -> None:
    fed = spec([cluster("a"), cluster("b")])
    cpu_only = {
        name: ClusterSnapshot(
            cluster=name,
            observed_at=NOW,
            nodes=[
                NodeSnapshot(name=f"{name}-0", allocatable=parse_resource_list({"cpu": "8", "memory": "8Gi"}))
            ],
        )
        for name in ("a", "b")
    }
    decision = FederationEngine(fed).decide(request(), cpu_only, now=NOW)
    assert {c.breakdown["Fragmentation"].raw for c in decision.candidates} == {plugin.NEUTRAL}
    assert "preferred_node" not in decision.extra and "preferred node" not in decision.reason


def test_gpu_thousandths_without_devices_are_neutral_and_name_no_node(decision_path: str) -> None:
    """A snapshot that tells only a ``fedsched.io/gpu-milli`` total per node (as the makespan replay's
    members do) says nothing of devices: nothing to measure, so the score stays out of the decision."""
    fed = spec([cluster("a"), cluster("b")])
    totals = {
        name: ClusterSnapshot(
            cluster=name,
            observed_at=NOW,
            nodes=[
                NodeSnapshot(
                    name=f"{name}-0",
                    allocatable=parse_resource_list({"cpu": "8", "memory": "8Gi", GPU_MILLI: "4000"}),
                    requested=parse_resource_list({GPU_MILLI: "1500" if name == "a" else "0"}),
                )
            ],
        )
        for name in ("a", "b")
    }
    decision = FederationEngine(fed).decide(
        request({"cpu": "1", "memory": "1Gi", GPU_MILLI: "500"}), totals, now=NOW
    )
    assert decision.cluster is not None
    assert {c.breakdown["Fragmentation"].raw for c in decision.candidates} == {plugin.NEUTRAL}
    assert "preferred_node" not in decision.extra and "preferred node" not in decision.reason


def test_decisions_are_the_same_with_the_cache_warm_or_cold(decision_path: str) -> None:
    """The cache of unchanged nodes is a pure cache: a sequence of decisions (snapshots changing a node at
    a time, pods in flight) gives the same decisions as deciding each from scratch."""
    rng = random.Random(11)
    fed = spec([cluster("a"), cluster("b", region="r2")])
    engine = FederationEngine(fed)
    frees = {name: [[rng.choice((0, 300, 500, 1000)) for _ in range(4)] for _ in range(6)] for name in "ab"}
    in_flight: dict[str, list[dict[str, int]]] = {"a": [], "b": []}
    for step in range(25):
        name = rng.choice("ab")
        node = rng.randrange(6)
        frees[name][node][rng.randrange(4)] = rng.choice((0, 300, 500, 1000))
        snapshots = {
            n: gpu_snapshot(n, [gpu_node(f"{n}-{i}", free) for i, free in enumerate(frees[n])]) for n in "ab"
        }
        ask = request({"cpu": "1", "memory": "1Gi", GPU_MILLI: str(rng.choice((200, 500, 1000, 2000)))})
        warm = engine.decide(ask, snapshots, now=NOW, in_flight=in_flight)
        plugin.forget()
        cold = engine.decide(ask, snapshots, now=NOW, in_flight=in_flight)
        assert warm.to_dict() == cold.to_dict(), step
        if warm.cluster is not None and step % 3:
            in_flight[warm.cluster].append(dict(ask.resources))


def test_the_snapshot_file_carries_gpu_devices_and_the_workload(decision_path: str) -> None:
    snapshot = gpu_snapshot("a", [gpu_node("n0", [1000, 250], model="T4")])
    loaded = load_snapshots(dump_snapshots({"a": snapshot}))["a"]
    assert loaded.nodes[0].gpus == NodeGpus(model="T4", free=[1000, 250])
    assert loaded.workload == SHARE_WORKLOAD
    document = dump_snapshots({"a": snapshot})
    document["clusters"][0]["nodes"][0]["gpus"]["free"] = [1001]
    with pytest.raises(SpecError, match=r"clusters\[0\]\.nodes\[0\]\.gpus\.free\[0\]: .*1000"):
        load_snapshots(document)
    document = dump_snapshots({"a": snapshot})
    document["clusters"][0]["workload"][0]["count"] = 0
    with pytest.raises(SpecError, match=r"clusters\[0\]\.workload\[0\]\.count: "):
        load_snapshots(document)


def test_a_decision_with_nothing_to_measure_does_not_load_numpy(decision_path: str) -> None:
    """A fresh worker deciding a cpu task over a few clusters without GPUs (below the columnar index's
    size) imports no numpy: the Fragmentation score builds the task's shape only for a cluster it
    measures (a fresh task process paid numpy's import inside its time to a running pod). The columnar
    index, whose columns are numpy arrays, does load it."""
    import subprocess
    import sys

    columnar = decision_path == "columnar"
    code = """
import sys
from airflow_provider_fedsched.federation import engine
engine.COLUMNAR_MIN_CLUSTERS = 0 if ON_THE_COLUMNAR_PATH else engine.COLUMNAR_MIN_CLUSTERS
from airflow_provider_fedsched.federation import (
    ClusterSnapshot, FederationEngine, NodeSnapshot, parse_resource_list)
from tests.federation.helpers import NOW, cluster, request, spec

names = ("a", "b", "c")
snapshots = {
    name: ClusterSnapshot(cluster=name, observed_at=NOW, nodes=[NodeSnapshot(
        name=f"{name}-0", allocatable=parse_resource_list({"cpu": "8", "memory": "8Gi"}))])
    for name in names
}
decision = FederationEngine(spec([cluster(n) for n in names])).decide(request(), snapshots, now=NOW)
assert decision.placed, decision.reason
print("numpy" in sys.modules)
"""
    code = code.replace("ON_THE_COLUMNAR_PATH", str(columnar))
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert found.stdout.strip() == str(columnar), found.stderr
