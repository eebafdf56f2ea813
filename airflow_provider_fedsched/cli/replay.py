"""``fedsched replay``: placement quality in virtual time, every policy on the same workload in one run.

``--scenario seed-3x20`` generates the seed articles' setting; ``--nodes NODES.csv --pods PODS.csv`` reads a
trace in the Alibaba GPU trace's columns (see ``docs/replay.md``). ``--json`` prints one object, otherwise
a table; ``--plot FILE.png`` draws utilization over time and the wait-time CDF per policy.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from airflow_provider_fedsched.cli._common import EXIT_OK, UsageError
from airflow_provider_fedsched.replay.policies import POLICIES
from airflow_provider_fedsched.replay.run import ReplayReport, parse_policies, replay
from airflow_provider_fedsched.replay.scenario import SCENARIOS, seed_3x20
from airflow_provider_fedsched.replay.simulator import Settings
from airflow_provider_fedsched.replay.topology import Federation, build_federation, load_federation_spec
from airflow_provider_fedsched.replay.workload import (
    ReplayInputError,
    TraceShaping,
    read_nodes,
    read_pods,
    shape_trace,
)

__all__ = ["add_parser", "build_workload", "run"]


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "replay",
        help="replay a workload in virtual time through fedsched and every baseline",
        description=__doc__.splitlines()[0] if __doc__ else None,
    )
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--scenario", choices=SCENARIOS, help="a generated workload")
    source.add_argument("--nodes", help="nodes CSV (sn, cpu_milli, memory_mib, gpu, model[, cluster])")
    parser.add_argument("--pods", help="pods CSV (the trace's columns); required with --nodes")
    parser.add_argument("--clusters", type=int, default=4, help="member clusters to split the nodes into")
    parser.add_argument("--federation", help="a federation spec to replay on (nodes must name clusters)")
    parser.add_argument("--policies", help=f"comma-separated subset of: {', '.join(POLICIES)}")
    parser.add_argument("--seed", type=int, default=0, help="seed for every generated choice (default 0)")
    parser.add_argument("--window", type=float, default=3600.0, help="trace arrivals spread over seconds")
    parser.add_argument("--max-run", type=float, default=3600.0, help="trace run times capped at seconds")
    parser.add_argument("--copies", type=int, default=1, help="replay the pod list this many times")
    parser.add_argument("--staleness", type=float, default=10.0, help="snapshot age in seconds (default 10)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    parser.add_argument("--plot", help="write utilization over time and wait CDFs to this PNG")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    parser.set_defaults(handler=run)


def build_workload(args: argparse.Namespace) -> tuple[Federation, str]:
    if args.scenario is not None:
        return seed_3x20(args.seed), args.scenario
    if args.pods is None:
        raise UsageError("--pods: required with --nodes")
    nodes = read_nodes(args.nodes)
    tasks = shape_trace(read_pods(args.pods), TraceShaping(args.window, args.max_run, args.copies), args.seed)
    spec = load_federation_spec(args.federation) if args.federation else None
    federation = build_federation(nodes, tasks, clusters=args.clusters, seed=args.seed, spec=spec)
    return federation, Path(args.pods).name


def _validate(args: argparse.Namespace) -> None:
    if args.staleness < 0:
        raise UsageError(f"--staleness: must not be negative (got {args.staleness})")
    if args.clusters < 1:
        raise UsageError(f"--clusters: must be at least 1 (got {args.clusters})")
    if args.plot is not None and not Path(args.plot).resolve().parent.is_dir():
        raise UsageError(f"--plot {args.plot}: its folder does not exist")


def run(args: argparse.Namespace) -> int:
    _validate(args)
    try:
        policies = parse_policies(args.policies)
        federation, workload = build_workload(args)
        report = _replay_with_progress(
            federation,
            policies,
            Settings(staleness=args.staleness, seed=args.seed),
            workload,
            show=not args.no_progress,
        )
    except ReplayInputError as exc:
        raise UsageError(str(exc)) from None
    if args.plot is not None:
        from airflow_provider_fedsched.replay.report import plot

        plot(report, args.plot)
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        from airflow_provider_fedsched.replay.report import render_table

        print(render_table(report), end="")
    return EXIT_OK


def _replay_with_progress(
    federation: Federation, policies: list[str], settings: Settings, workload: str, show: bool
) -> ReplayReport:
    if not show or not sys.stderr.isatty():
        return replay(federation, policies, settings, workload)
    from rich.progress import Progress

    with Progress(transient=True) as bar:
        tasks = {name: bar.add_task(name, total=len(federation.tasks)) for name in policies}
        return replay(
            federation,
            policies,
            settings,
            workload,
            progress=lambda name, count: bar.advance(tasks[name], count),
        )
