"""Divided jobs against whole-Job placement (issue 31): Indexed Jobs from the Alibaba GPU trace, each placed
whole (a gang of all its pods on one member, as the Job operator places a Job) or divided over the members
(``federation/division.py``), on the same federation in the same run.

Run: ``.venv/bin/python benchmarks/bench_divided.py [--traces ../shared/traces] [--lists default]
[--copies 4]``

The pod list is shaped as ``bench_replay.py`` shapes it, repeated ``--copies`` times in the hour (the
unrepeated list fits the federation at once, so neither mode ever waits), dealt into jobs of 4, 8, 16 or
32 indices (``replay/divided.py``), over 4 members, seed 0. The ratios are divided against whole.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from airflow_provider_fedsched.replay.divided import MODES, DividedResult, jobs_from_pods, replay_jobs
from airflow_provider_fedsched.replay.topology import build_federation
from airflow_provider_fedsched.replay.workload import TraceShaping, read_nodes, read_pods, shape_trace


def ratio(value: float, baseline: float) -> str:
    return f"{value / baseline:.3f}x" if baseline else "-"


def table(results: dict[str, DividedResult]) -> str:
    whole = results["whole"]
    lines = [
        "| mode | makespan s | mean wait s | p95 wait s | mean completion s | p95 completion s "
        "| GPU allocation | members per job | unplaced | decisions | wall s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for mode, r in results.items():
        lines.append(
            f"| {mode} | {r.makespan_s:,.0f} ({ratio(r.makespan_s, whole.makespan_s)}) "
            f"| {r.mean_wait_s:,.0f} ({ratio(r.mean_wait_s, whole.mean_wait_s)}) "
            f"| {r.p95_wait_s:,.0f} | {r.mean_completion_s:,.0f} "
            f"({ratio(r.mean_completion_s, whole.mean_completion_s)}) | {r.p95_completion_s:,.0f} "
            f"| {100 * r.gpu_allocation:.1f} % ({ratio(r.gpu_allocation, whole.gpu_allocation)}) "
            f"| {r.members_per_job:.2f} | {r.unplaced} | {r.decisions:,} | {r.replay_seconds:.1f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--traces", default=str(Path(__file__).resolve().parents[1].parent / "shared" / "traces")
    )
    parser.add_argument("--lists", default="default")
    parser.add_argument("--copies", type=int, default=4)
    args = parser.parse_args()
    folder = Path(args.traces) / "alibaba-gpu-v2023"
    nodes = read_nodes(folder / "openb_node_list_all_node.csv")
    for name in args.lists.split(","):
        pods = shape_trace(
            read_pods(folder / f"openb_pod_list_{name}.csv"), TraceShaping(copies=args.copies), seed=0
        )
        federation = build_federation(nodes, pods, clusters=4, seed=0)
        jobs = jobs_from_pods(federation.tasks, seed=0)
        results = {mode: replay_jobs(federation, jobs, mode) for mode in MODES}
        print(f"alibaba {name} x{args.copies}: {len(jobs):,} jobs, {len(pods):,} pods, 4 members, seed 0")
        print(table(results))
        print(f"load average {', '.join(f'{v:.2f}' for v in os.getloadavg())}", flush=True)


if __name__ == "__main__":
    main()
