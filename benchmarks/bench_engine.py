"""Decision latency of the federation engine at 10, 100 and 1,000 clusters of 50 nodes each.

Run: ``.venv/bin/python benchmarks/bench_engine.py [--quick]``

Federations are generated from a fixed seed: 10 regions in 5 proximity groups, a tenth of the clusters
with a tainted GPU pool, nodes 20-95% requested, some nodes not ready, 20 datasets of which half are
region-restricted. Each decision draws one of four request shapes (CPU only; CPU reading datasets; GPU with
a toleration; CPU with a node selector and a preferred region).

Reported per size:
- ``first``: the first decision, which builds every snapshot's index (once per snapshot);
- ``p50``/``p99``: decisions after that warm-up;
- ``p50``/``p99 without gc.freeze()``: the same decisions before the snapshots are frozen (see below);
- baseline measured in the same run: the same decision with no precomputed index (every snapshot's index
  dropped first, so every node of every cluster is scanned and summarised again), as a ratio to p50, and
  the plain time to iterate the snapshot dict once.

The main p50/p99 are taken after ``gc.freeze()``: a long-lived process holding 50,000 nodes of snapshots
should freeze them after loading, or Python's full collections (which walk every one of those objects,
~200 ms here) land in whatever code happens to allocate at the time. Both are printed.
"""

from __future__ import annotations

import argparse
import gc
import random
import statistics
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from airflow_provider_fedsched.federation import (
    ClusterSnapshot,
    FederationEngine,
    FederationSpec,
    NodeSnapshot,
    Taint,
    TaskRequest,
    Toleration,
    load_spec,
)

NODES_PER_CLUSTER = 50
GIB = 2**30
GPU = "nvidia.com/gpu"
NOW = datetime(2025, 6, 1, 8, 0, 0, tzinfo=UTC)
GPU_TAINT = Taint(key=GPU, value="present", effect="NoSchedule")
REGIONS = [f"region-{i}" for i in range(10)]


def generate(clusters: int, seed: int) -> tuple[FederationSpec, dict[str, ClusterSnapshot]]:
    rng = random.Random(seed)
    cluster_docs = []
    snapshots: dict[str, ClusterSnapshot] = {}
    for index in range(clusters):
        name = f"c{index:04d}"
        region = REGIONS[index % len(REGIONS)]
        has_gpu = index % 10 == 3
        cluster_docs.append(
            {
                "name": name,
                "conn_id": f"k8s_{name}",
                "region": region,
                "group": f"group-{REGIONS.index(region) // 2}",
                "labels": {"gpu": str(has_gpu).lower()},
                "prices": {
                    "cpu_hour": round(rng.uniform(0.02, 0.08), 4),
                    "memory_gib_hour": round(rng.uniform(0.002, 0.01), 4),
                    "gpu_hour": round(rng.uniform(1.5, 3.5), 3) if has_gpu else 0.0,
                    "egress_gb": round(rng.uniform(0.05, 0.12), 3),
                },
            }
        )
        nodes = []
        for position in range(NODES_PER_CLUSTER):
            gpu_node = has_gpu and position >= NODES_PER_CLUSTER - 10
            cpu, memory = (32, 128) if gpu_node else (16, 64)
            load = rng.uniform(0.2, 0.95)
            allocatable = {"cpu": cpu * 1000, "memory": memory * GIB, "pods": 110}
            requested = {
                "cpu": int(cpu * 1000 * load),
                "memory": int(memory * GIB * load * rng.uniform(0.7, 1.1)),
            }
            requested["memory"] = min(requested["memory"], allocatable["memory"])
            if gpu_node:
                allocatable[GPU] = 4
                requested[GPU] = rng.randint(0, 4)
            nodes.append(
                NodeSnapshot(
                    name=f"{name}-n{position:02d}",
                    allocatable=allocatable,
                    requested=requested,
                    labels={"disk": rng.choice(["ssd", "hdd"]), "zone": f"{region}-{position % 3}"},
                    taints=[GPU_TAINT] if gpu_node else [],
                    ready=rng.random() > 0.02,
                )
            )
        snapshots[name] = ClusterSnapshot(
            cluster=name,
            observed_at=NOW - timedelta(seconds=rng.uniform(0, 20)),  # some are past the 15 s TTL
            nodes=nodes,
            quota_headroom={"default": {"cpu": 64_000}} if index % 7 == 0 else {},
        )
    datasets = []
    for position in range(20):
        home = rng.randrange(clusters)
        restricted = position % 2 == 0
        datasets.append(
            {
                "name": f"ds{position:02d}",
                "cluster": f"c{home:04d}",
                "size_gb": round(rng.uniform(1, 3000), 1),
                "allowed_regions": sorted(rng.sample(REGIONS, 4)) if restricted else None,
            }
        )
    spec = load_spec({"clusters": cluster_docs, "datasets": datasets, "regions": REGIONS})
    return spec, snapshots


def requests(seed: int, count: int) -> list[TaskRequest]:
    rng = random.Random(seed)
    shapes: list[Callable[[], TaskRequest]] = [
        lambda: TaskRequest(
            resources={"cpu": rng.choice([500, 2000, 4000]), "memory": rng.choice([1, 4, 8]) * GIB}
        ),
        lambda: TaskRequest(
            resources={"cpu": 2000, "memory": 4 * GIB},
            datasets=rng.sample([f"ds{i:02d}" for i in range(20)], rng.randint(1, 2)),
        ),
        lambda: TaskRequest(
            resources={"cpu": 4000, "memory": 16 * GIB, GPU: rng.choice([1, 2])},
            tolerations=[Toleration(key=GPU, operator="Exists", effect="NoSchedule")],
        ),
        lambda: TaskRequest(
            resources={"cpu": 1000, "memory": 2 * GIB},
            node_selector={"disk": "ssd"},
            prefer_region=rng.choice(REGIONS),
        ),
    ]
    return [rng.choice(shapes)() for _ in range(count)]


def rebuild_indexes(snapshots: dict[str, ClusterSnapshot]) -> None:
    """Drop every cached index: the next decision scans all nodes again (the no-precomputation baseline)."""
    for snapshot in snapshots.values():
        snapshot._index = None


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def timed_decisions(
    engine: FederationEngine, workload: list[TaskRequest], snapshots: dict[str, ClusterSnapshot]
) -> tuple[list[float], int]:
    latencies: list[float] = []
    placed = 0
    for request in workload:
        start = time.perf_counter()
        decision = engine.decide(request, snapshots, now=NOW)
        latencies.append(time.perf_counter() - start)
        placed += decision.placed
    return latencies, placed


def measure(clusters: int, decisions: int, seed: int) -> dict[str, float]:
    spec, snapshots = generate(clusters, seed)
    engine = FederationEngine(spec)
    workload = requests(seed + 1, decisions)
    start = time.perf_counter()
    engine.decide(workload[0], snapshots, now=NOW)  # builds every snapshot's index
    first = time.perf_counter() - start
    # As-is first: the cyclic collector walks every snapshot object now and then, and that pause lands in
    # whichever decision allocates at the time.
    unfrozen, _ = timed_decisions(engine, workload, snapshots)
    # Then as recommended for a long-lived process holding large snapshots: gc.freeze() after loading
    # them moves those objects out of the collector's reach.
    gc.collect()
    gc.freeze()
    try:
        latencies, placed = timed_decisions(engine, workload, snapshots)
    finally:
        gc.unfreeze()
    baseline: list[float] = []
    for request in workload[: max(5, min(20, decisions // 20))]:
        rebuild_indexes(snapshots)
        start = time.perf_counter()
        engine.decide(request, snapshots, now=NOW)
        baseline.append(time.perf_counter() - start)
    start = time.perf_counter()
    for _ in range(100):
        for _snapshot in snapshots.values():
            pass
    iterate = (time.perf_counter() - start) / 100
    return {
        "clusters": clusters,
        "nodes": clusters * NODES_PER_CLUSTER,
        "decisions": decisions,
        "placed": placed / decisions,
        "first_ms": first * 1000,
        "p50_ms": statistics.median(latencies) * 1000,
        "p99_ms": percentile(latencies, 0.99) * 1000,
        "unfrozen_p50_ms": statistics.median(unfrozen) * 1000,
        "unfrozen_p99_ms": percentile(unfrozen, 0.99) * 1000,
        "baseline_p50_ms": statistics.median(baseline) * 1000,
        "iterate_ms": iterate * 1000,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="fewer decisions (a smoke run, ~10 s)")
    parser.add_argument("--seed", type=int, default=20250601)
    args = parser.parse_args()
    plan = [(10, 300), (100, 200), (1000, 60)] if args.quick else [(10, 2000), (100, 1000), (1000, 300)]
    started = time.perf_counter()
    rows = [measure(clusters, decisions, args.seed) for clusters, decisions in plan]
    command = "python benchmarks/bench_engine.py" + (" --quick" if args.quick else "")
    print(f"Command: `{command}` (seed {args.seed}, Python {sys.version.split()[0]})\n")
    print(
        "| clusters | nodes | decisions | placed | first decision (index build) | p50 | p99 "
        "| p50 / p99 without gc.freeze() | baseline: no index (scan all nodes) p50 | baseline / p50 "
        "| iterate snapshot dict |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        print(
            f"| {row['clusters']:,.0f} | {row['nodes']:,.0f} | {row['decisions']:.0f} | {row['placed']:.0%} "
            f"| {row['first_ms']:.1f} ms | {row['p50_ms']:.2f} ms | {row['p99_ms']:.2f} ms "
            f"| {row['unfrozen_p50_ms']:.2f} / {row['unfrozen_p99_ms']:.2f} ms "
            f"| {row['baseline_p50_ms']:.2f} ms | {row['baseline_p50_ms'] / row['p50_ms']:.1f}x "
            f"| {row['iterate_ms'] * 1000:.1f} us |"
        )
    targets = {100: 5.0, 1000: 50.0}
    verdicts = []
    for row in rows:
        target = targets.get(int(row["clusters"]))
        if target is not None:
            verdict = "OK" if row["p99_ms"] < target else "MISSED"
            verdicts.append(
                f"{row['clusters']:.0f} clusters: p99 {row['p99_ms']:.2f} ms (target {target:.0f}) {verdict}"
            )
    print("\n" + "; ".join(verdicts) + f". Total run time {time.perf_counter() - started:.0f} s.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
