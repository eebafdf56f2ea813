"""``fedsched replay``: placement quality in virtual time, every policy on the same workload in one run.

``--scenario seed-3x20`` generates the seed articles' setting; ``--nodes NODES.csv --pods PODS.csv`` reads a
trace in the Alibaba GPU trace's columns (see ``docs/replay.md``). ``--json`` prints one object, otherwise
a table; ``--plot FILE.png`` draws utilization over time and the wait-time CDF per policy.
"""

from __future__ import annotations

import argparse
import json
import os
import stat
import sys
from pathlib import Path
from typing import Any

from airflow_provider_fedsched.cli._common import EXIT_OK, UsageError
from airflow_provider_fedsched.federation.limits import describe
from airflow_provider_fedsched.replay.policies import POLICIES
from airflow_provider_fedsched.replay.run import ReplayReport, parse_policies, replay
from airflow_provider_fedsched.replay.scenario import SCENARIOS, seed_3x20
from airflow_provider_fedsched.replay.simulator import Settings
from airflow_provider_fedsched.replay.topology import (
    MAX_REPLAY_CLUSTERS,
    Federation,
    build_federation,
    load_federation_spec,
)
from airflow_provider_fedsched.replay.workload import (
    ReplayInputError,
    TraceShaping,
    check_seconds_option,
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


_TRACE_ONLY = {
    "pods": None,
    "federation": None,
    "clusters": 4,
    "window": 3600.0,
    "max_run": 3600.0,
    "copies": 1,
}
"""Options that shape a trace (``--nodes``/``--pods``), with their defaults: a scenario has none of them."""


def build_workload(args: argparse.Namespace) -> tuple[Federation, str]:
    if args.scenario is not None:
        given = [name for name, default in _TRACE_ONLY.items() if getattr(args, name) != default]
        if given:  # silently ignored, it would look applied
            option = "--" + given[0].replace("_", "-")
            raise UsageError(
                f"{option}: applies to a trace (--nodes/--pods), not to --scenario {args.scenario}"
            )
        return seed_3x20(args.seed), args.scenario
    if args.pods is None:
        raise UsageError("--pods: required with --nodes")
    nodes = read_nodes(args.nodes)
    tasks = shape_trace(read_pods(args.pods), TraceShaping(args.window, args.max_run, args.copies), args.seed)
    spec = load_federation_spec(args.federation) if args.federation else None
    federation = build_federation(nodes, tasks, clusters=args.clusters, seed=args.seed, spec=spec)
    return federation, Path(args.pods).name


def _validate(args: argparse.Namespace) -> None:
    """Every option checked before any file is read (each error names its option)."""
    try:
        TraceShaping(args.window, args.max_run, args.copies).check()
        check_seconds_option(args.staleness, "--staleness")
    except ReplayInputError as exc:
        raise UsageError(str(exc)) from None
    if not 1 <= args.clusters <= MAX_REPLAY_CLUSTERS:
        raise UsageError(f"--clusters: must be 1..{MAX_REPLAY_CLUSTERS:,} (got {describe(args.clusters)})")
    if not -(2**63) <= args.seed < 2**63:
        raise UsageError(f"--seed: must fit 64 bits (got {describe(args.seed)})")
    if args.plot is not None:
        _check_plot(args.plot)


def _check_plot(plot: str) -> None:
    """A PNG written where it was asked for: ``matplotlib`` adds ``.png`` to a name without a suffix, so
    ``--plot /dev/null`` or ``--plot some-folder`` would write a file beside it."""
    path = Path(plot)
    if path.suffix.lower() != ".png":
        raise UsageError(f"--plot {plot}: the file name must end in .png")
    try:
        info = os.stat(path)
    except FileNotFoundError:
        info = None
    except OSError as exc:
        raise UsageError(f"--plot {plot}: {exc.strerror or exc}") from None
    if info is not None and not stat.S_ISREG(info.st_mode):
        raise UsageError(f"--plot {plot}: exists and is not a regular file")
    folder = path.resolve().parent
    if not folder.is_dir():
        raise UsageError(f"--plot {plot}: its folder does not exist")
    if not os.access(folder, os.W_OK) or (info is not None and not os.access(path, os.W_OK)):
        raise UsageError(f"--plot {plot}: not writable")


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

        try:
            plot(report, args.plot)
        except OSError as exc:
            raise UsageError(f"--plot {args.plot}: cannot write it: {exc.strerror or exc}") from None
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
