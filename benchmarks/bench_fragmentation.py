"""GPU allocation under fragmentation (``fedsched replay --protocol fragmentation``) on the Alibaba GPU trace:
the FGD paper's table reproduced in one cluster, and the federation's policies at K members.

Run: ``.venv/bin/python benchmarks/bench_fragmentation.py [--traces ../shared/traces] [--runs reproduction,
default:3,default:8,...] [--seeds 10] [--jobs 2] [--plots]``

A run is ``reproduction`` (the six binders, one cluster of the 1,213 GPU nodes, the default list: beside
the published table) or ``LIST:K`` (the pod list ``openb_pod_list_LIST.csv`` on all 1,523 nodes in K
members, every federation policy). Each prints its tables, one JSON line (the command's ``--json``
object with the run's name, wall and CPU seconds and the load average at its end) and, with ``--plots``,
writes ``docs/images/fragmentation-<run>.png``.

``engine:C`` measures instead what the ``Fragmentation`` score costs a decision: ``bench_engine.py``'s
federation of C clusters of 50 nodes (a tenth with a GPU pool, no workload reported) and its requests,
each decided with the default policy and, as the baseline in the same process, alternately, with every
score but ``Fragmentation``; p50/p99 of the second pass (the first warms the per-cluster views, as a
long-lived worker has them), after ``gc.freeze()`` as ``bench_engine.py`` measures.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from airflow_provider_fedsched.replay.fragmentation import PUBLISHED, Protocol, read_pod_list
from airflow_provider_fedsched.replay.fragmentation_run import run_protocol
from airflow_provider_fedsched.replay.report import plot_fragmentation, render_fragmentation
from airflow_provider_fedsched.replay.workload import read_nodes

IMAGES = Path(__file__).resolve().parents[1] / "docs" / "images"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--traces", default=str(Path(__file__).resolve().parents[1].parent / "shared" / "traces")
    )
    parser.add_argument("--runs", default="reproduction,default:3,default:8")
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--plots", action="store_true")
    args = parser.parse_args()
    folder = Path(args.traces) / "alibaba-gpu-v2023"
    for run in args.runs.split(","):
        if run.startswith("engine:"):
            engine_cost(int(run.partition(":")[2]))
            continue
        if run == "reproduction":
            nodes_file, list_name, clusters = "openb_node_list_gpu_node.csv", "default", 1
        else:
            list_name, _, members = run.partition(":")
            nodes_file, clusters = "openb_node_list_all_node.csv", int(members)
        nodes = read_nodes(folder / nodes_file)
        pods = read_pod_list(folder / f"openb_pod_list_{list_name}.csv")
        policies = list(PUBLISHED) if clusters == 1 else None
        started, cpu = time.perf_counter(), time.process_time()
        report = run_protocol(
            nodes,
            pods,
            clusters=clusters,
            protocol=Protocol(seeds=args.seeds),
            policies=policies
            or ["home", "round-robin", "random", "least-loaded", "cheapest", "static-labels", "fedsched"],
            jobs=args.jobs,
        )
        wall = time.perf_counter() - started
        print(render_fragmentation(report), end="")
        if clusters == 1:
            for name, (at_100, at_130) in PUBLISHED.items():
                summary = report.policies[name]
                ours = (100 * summary.allocation[100], 100 * summary.allocation[130])
                print(
                    f"{name}: {ours[0]:.2f} / {ours[1]:.2f} (published {at_100:.2f} / {at_130:.2f}; "
                    f"{ours[0] - at_100:+.2f} / {ours[1] - at_130:+.2f})"
                )
        workers = sum(summary.seconds for summary in report.policies.values())
        line = {
            "run": run,
            "wall_s": round(wall, 1),
            "cpu_s_workers": round(workers, 1),
            "cpu_s_parent": round(time.process_time() - cpu, 1),
            "load_average": [round(value, 2) for value in os.getloadavg()],
            **report.to_dict(),
        }
        print(json.dumps(line), flush=True)
        if args.plots:
            plot_fragmentation(report, IMAGES / f"fragmentation-{run.replace(':', '-k')}.png")


def engine_cost(clusters: int, decisions: int = 300) -> None:
    """The default policy's decision latency against the same without the ``Fragmentation`` score."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import bench_engine

    from airflow_provider_fedsched.federation import FederationEngine, PolicySpec

    spec, snapshots = bench_engine.generate(clusters, 20250601)
    workload = bench_engine.requests(20250602, decisions)
    engine = FederationEngine(spec)
    without = PolicySpec(scores=[name for name in PolicySpec().scores if name != "Fragmentation"])
    load_before = os.getloadavg()
    for request in workload:  # warm: every snapshot's index and columns, every cluster's view
        engine.decide(request, snapshots, now=bench_engine.NOW)
        engine.decide(request, snapshots, now=bench_engine.NOW, policy=without)
    gc.collect()
    gc.freeze()
    timed: dict[str, list[float]] = {"with": [], "without": []}
    try:
        for request in workload:
            for name, policy in (("with", None), ("without", without)):
                start = time.perf_counter()
                engine.decide(request, snapshots, now=bench_engine.NOW, policy=policy)
                timed[name].append(time.perf_counter() - start)
    finally:
        gc.unfreeze()
    figures = {
        name: (statistics.median(values) * 1000, bench_engine.percentile(values, 0.99) * 1000)
        for name, values in timed.items()
    }
    (p50, p99), (base50, base99) = figures["with"], figures["without"]
    print(
        f"fragmentation score cost: clusters={clusters} decisions={decisions} p50_ms={p50:.2f} "
        f"p99_ms={p99:.2f}; without it (same process): p50_ms={base50:.2f} p99_ms={base99:.2f} "
        f"({p50 / base50:.2f}x / {p99 / base99:.2f}x); load average "
        f"{' '.join(f'{v:.1f}' for v in load_before)} -> {' '.join(f'{v:.1f}' for v in os.getloadavg())}",
        flush=True,
    )


if __name__ == "__main__":
    main()
