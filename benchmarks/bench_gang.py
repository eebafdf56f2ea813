"""Gang decision latency at 100 clusters of 50 nodes: gangs of 8 and 64 pods against single-pod decisions
in the same run, on the same federation (bench_engine's generator, same seed).

Run: ``.venv/bin/python benchmarks/bench_gang.py [--quick]``

Each gang decision packs every pod of the gang onto the nodes of every candidate cluster
(``federation/plugins/gang.py``); the single-pod baseline is the same shape asked for one pod (the
node-fit walk that stops at the first node with room). Shapes: CPU workers (2 cpu, 4 GiB) and GPU workers
(4 cpu, 16 GiB, 1 GPU, tolerating the GPU pool's taint). Reported: p50/p99 per kind and the ratio of each
gang p50 to the single-pod p50; and how many gang decisions placed (large gangs often fit nowhere whole).
"""

from __future__ import annotations

import argparse
import gc
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_engine import GIB, GPU, NOW, generate, percentile, timed_decisions

from airflow_provider_fedsched.federation import FederationEngine, TaskRequest, Toleration
from airflow_provider_fedsched.federation.request import GangRole

SEED = 20250601
TOLERATE_GPU = [Toleration(key=GPU, operator="Exists", effect="NoSchedule")]
SHAPES = (
    ({"cpu": 2000, "memory": 4 * GIB}, []),
    ({"cpu": 4000, "memory": 16 * GIB, GPU: 1}, TOLERATE_GPU),
)


def workload(size: int, count: int, seed: int) -> list[TaskRequest]:
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        resources, tolerations = rng.choice(SHAPES)
        if size == 1:
            out.append(TaskRequest(resources=dict(resources), tolerations=tolerations))
        else:
            out.append(
                TaskRequest.for_gang(
                    [GangRole(count=size, resources=dict(resources))], tolerations=tolerations
                )
            )
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    decisions = 100 if args.quick else 500
    spec, snapshots = generate(100, SEED)
    engine = FederationEngine(spec)
    engine.decide(workload(1, 1, SEED)[0], snapshots, now=NOW)  # builds every snapshot's index
    gc.freeze()
    nodes = sum(len(s.nodes) for s in snapshots.values())
    print(
        f"100 clusters, {nodes:,} nodes, {decisions} decisions per kind "
        f"(seed {SEED}, Python {sys.version.split()[0]})"
    )
    print()
    print("| request | p50 | p99 | placed | p50 / single-pod p50 |")
    print("|---|---:|---:|---:|---:|")
    rows = []
    for size in (1, 8, 64):
        latencies, placed = timed_decisions(engine, workload(size, decisions, SEED + size), snapshots)
        rows.append((size, percentile(latencies, 0.5), percentile(latencies, 0.99), placed))
    base = rows[0][1]
    for size, p50, p99, placed in rows:
        label = "single pod (baseline)" if size == 1 else f"gang of {size} pods"
        print(
            f"| {label} | {p50 * 1000:.2f} ms | {p99 * 1000:.2f} ms | {placed / decisions:.0%} "
            f"| {p50 / base:.1f}x |"
        )


if __name__ == "__main__":
    main()
