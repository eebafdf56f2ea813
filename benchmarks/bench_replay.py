"""Placement quality and replay speed: ``fedsched replay`` on seed-3x20 and on the Alibaba GPU trace.

Run: ``.venv/bin/python benchmarks/bench_replay.py [--traces ../shared/traces] [--lists default,...]``

Every policy runs on the same workload in the same run; the ratios are against the physical lower bound
and against ``cheapest`` (cost) measured there. Speed is pods replayed per second of wall time over all
policies. Plots go to ``docs/images/replay-*.png``.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from airflow_provider_fedsched.replay import Settings, replay
from airflow_provider_fedsched.replay.policies import POLICIES
from airflow_provider_fedsched.replay.report import plot, render_table
from airflow_provider_fedsched.replay.run import ReplayReport
from airflow_provider_fedsched.replay.scenario import seed_3x20
from airflow_provider_fedsched.replay.topology import build_federation
from airflow_provider_fedsched.replay.workload import TraceShaping, read_nodes, read_pods, shape_trace

IMAGES = Path(__file__).resolve().parents[1] / "docs" / "images"


def timings(report: ReplayReport) -> str:
    """Seconds of wall time per policy, and the machine's load average when the replays ended."""
    per_policy = ", ".join(f"{name} {result.replay_seconds:.1f}" for name, result in report.results.items())
    load = ", ".join(f"{value:.2f}" for value in os.getloadavg())
    return f"wall s per policy: {per_policy}; load average {load}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--traces", default=str(Path(__file__).resolve().parents[1].parent / "shared" / "traces")
    )
    parser.add_argument("--lists", default="default,gpuspec33,cpu050,multigpu20")
    parser.add_argument("--no-plots", action="store_true")
    args = parser.parse_args()
    report = replay(seed_3x20(0), list(POLICIES), Settings(), "seed-3x20")
    print(render_table(report))
    print(timings(report))
    if not args.no_plots:
        plot(report, IMAGES / "replay-seed-3x20.png")
    folder = Path(args.traces) / "alibaba-gpu-v2023"
    nodes = read_nodes(folder / "openb_node_list_all_node.csv")
    for name in args.lists.split(","):
        tasks = shape_trace(read_pods(folder / f"openb_pod_list_{name}.csv"), TraceShaping(), seed=0)
        federation = build_federation(nodes, tasks, clusters=4, seed=0)
        report = replay(federation, list(POLICIES), Settings(), f"alibaba {name}")
        print(render_table(report))
        print(timings(report), flush=True)
        if name == "default" and not args.no_plots:
            plot(report, IMAGES / "replay-alibaba-default.png")


if __name__ == "__main__":
    main()
