"""``fedsched replay``: placement quality in virtual time, every policy on the same workload in one run.

Two protocols (``docs/replay.md``). ``makespan`` (the default): ``--scenario seed-3x20`` generates the seed
articles' setting; ``--nodes NODES.csv --pods PODS.csv`` reads a trace in the Alibaba GPU trace's columns;
``--plot FILE.png`` draws utilization over time and the wait-time CDF per policy. ``fragmentation``: GPU
allocation under fragmentation as the FGD paper measures it, ``--seeds`` seeds up to ``--load`` x the GPU
capacity, in one cluster (the paper's node binders) or ``--clusters K`` members (the federation's
policies); ``--plot`` draws allocation against load. ``--json`` prints one object, otherwise tables.
"""

from __future__ import annotations

import argparse
import json
import os
import stat
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow_provider_fedsched.cli._common import EXIT_OK, UsageError
from airflow_provider_fedsched.federation.limits import describe

# The replay is a dev tool (the second distribution): imported inside each function, never when the
# provider's wheel loads this module.
if TYPE_CHECKING:
    from airflow_provider_fedsched.replay.run import ReplayReport
    from airflow_provider_fedsched.replay.simulator import Settings
    from airflow_provider_fedsched.replay.topology import Federation

__all__ = ["add_parser", "build_workload", "run"]

PROTOCOLS = ("makespan", "fragmentation")


def add_parser(subparsers: Any) -> None:
    from airflow_provider_fedsched.replay.fragmentation import FEDERATION_POLICIES, FIRST_SEED, NODE_POLICIES
    from airflow_provider_fedsched.replay.policies import POLICIES
    from airflow_provider_fedsched.replay.scenario import SCENARIOS

    parser = subparsers.add_parser(
        "replay",
        help="replay a workload in virtual time through fedsched and every baseline",
        description=__doc__.splitlines()[0] if __doc__ else None,
    )
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--scenario", choices=SCENARIOS, help="a generated workload")
    source.add_argument("--nodes", help="nodes CSV (sn, cpu_milli, memory_mib, gpu, model[, cluster])")
    parser.add_argument("--pods", help="pods CSV (the trace's columns); required with --nodes")
    parser.add_argument(
        "--protocol",
        choices=PROTOCOLS,
        default="makespan",
        help="makespan (default): virtual time; fragmentation: GPU allocation by load (FGD's yardstick)",
    )
    parser.add_argument("--clusters", type=int, default=4, help="member clusters to split the nodes into")
    parser.add_argument("--federation", help="a federation spec to replay on (nodes must name clusters)")
    parser.add_argument(
        "--policies",
        help=f"comma-separated subset of: {', '.join(POLICIES)} (fragmentation, one cluster: "
        f"{', '.join(NODE_POLICIES)}; K clusters: {', '.join(FEDERATION_POLICIES)})",
    )
    parser.add_argument("--seed", type=int, help="seed for every generated choice (default 0; makespan)")
    parser.add_argument("--window", type=float, default=3600.0, help="trace arrivals spread over seconds")
    parser.add_argument("--max-run", type=float, help="trace run times capped at seconds (default 3600)")
    parser.add_argument("--copies", type=int, help="replay the pod list this many times (default 1)")
    parser.add_argument("--staleness", type=float, default=10.0, help="snapshot age in seconds (default 10)")
    parser.add_argument("--load", type=float, help="fragmentation: arrivals up to this x GPU capacity (1.3)")
    parser.add_argument("--seeds", type=int, help=f"fragmentation: seeds {FIRST_SEED}, ... (default 10)")
    parser.add_argument("--jobs", type=int, help="fragmentation: worker processes (default 2 at most)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    parser.add_argument("--plot", help="write the protocol's plot to this PNG")
    parser.add_argument("--no-progress", action="store_true", help="no progress on stderr")
    parser.set_defaults(handler=run)


_TRACE_ONLY = {
    "pods": None,
    "federation": None,
    "clusters": 4,
    "window": 3600.0,
    "max_run": None,
    "copies": None,
}
"""Options that shape a trace (``--nodes``/``--pods``), with their defaults: a scenario has none of them."""


def build_workload(args: argparse.Namespace) -> tuple[Federation, str]:
    from airflow_provider_fedsched.replay.scenario import seed_3x20
    from airflow_provider_fedsched.replay.topology import build_federation, load_federation_spec
    from airflow_provider_fedsched.replay.workload import TraceShaping, read_nodes, read_pods, shape_trace

    seed = 0 if args.seed is None else args.seed
    if args.scenario is not None:
        given = [name for name, default in _TRACE_ONLY.items() if getattr(args, name) != default]
        if given:  # silently ignored, it would look applied
            option = "--" + given[0].replace("_", "-")
            raise UsageError(
                f"{option}: applies to a trace (--nodes/--pods), not to --scenario {args.scenario}"
            )
        return seed_3x20(seed), args.scenario
    if args.pods is None:
        raise UsageError("--pods: required with --nodes")
    nodes = read_nodes(args.nodes)
    shaping = TraceShaping(
        args.window,
        3600.0 if args.max_run is None else args.max_run,
        1 if args.copies is None else args.copies,
    )
    tasks = shape_trace(read_pods(args.pods), shaping, seed)
    spec = load_federation_spec(args.federation) if args.federation else None
    federation = build_federation(nodes, tasks, clusters=args.clusters, seed=seed, spec=spec)
    return federation, Path(args.pods).name


_MAKESPAN_ONLY = (("--scenario", "scenario"), ("--federation", "federation"), ("--seed", "seed"))
_MAKESPAN_ONLY_TRACE = (("--max-run", "max_run"), ("--copies", "copies"))
_FRAGMENTATION_ONLY = (("--load", "load"), ("--seeds", "seeds"), ("--jobs", "jobs"))


def _validate(args: argparse.Namespace) -> None:
    """Every option checked before any file is read (each error names its option)."""
    from airflow_provider_fedsched.replay.topology import MAX_REPLAY_CLUSTERS
    from airflow_provider_fedsched.replay.workload import ReplayInputError, TraceShaping, check_seconds_option

    fragmentation = args.protocol == "fragmentation"
    try:
        TraceShaping(
            args.window,
            3600.0 if args.max_run is None else args.max_run,
            1 if args.copies is None else args.copies,
        ).check()
        check_seconds_option(args.staleness, "--staleness")
        if fragmentation:  # the arrivals are spread over the window: it must have a length
            check_seconds_option(args.window, "--window", positive=True)
    except ReplayInputError as exc:
        raise UsageError(str(exc)) from None
    if not 1 <= args.clusters <= MAX_REPLAY_CLUSTERS:
        raise UsageError(f"--clusters: must be 1..{MAX_REPLAY_CLUSTERS:,} (got {describe(args.clusters)})")
    if args.plot is not None:
        _check_plot(args.plot)
    if fragmentation:
        for option, name in (*_MAKESPAN_ONLY, *_MAKESPAN_ONLY_TRACE):
            if getattr(args, name) is not None:
                raise UsageError(
                    f"{option}: not with --protocol fragmentation (it replays a pod list: --nodes and "
                    "--pods, seeds with --seeds)"
                )
        if args.pods is None:
            raise UsageError("--pods: required with --nodes")
        if args.load is not None and not (0 < args.load <= 10):
            raise UsageError(f"--load: must be above 0 and at most 10 (got {args.load})")
        if args.seeds is not None and not (1 <= args.seeds <= 1000):
            raise UsageError(f"--seeds: must be 1 to 1000 (got {describe(args.seeds)})")
        if args.jobs is not None and not (1 <= args.jobs <= 64):
            raise UsageError(f"--jobs: must be 1 to 64 (got {describe(args.jobs)})")
        return
    for option, name in _FRAGMENTATION_ONLY:
        if getattr(args, name) is not None:
            raise UsageError(f"{option}: only with --protocol fragmentation")
    if args.seed is not None and not -(2**63) <= args.seed < 2**63:
        raise UsageError(f"--seed: must fit 64 bits (got {describe(args.seed)})")


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
    from airflow_provider_fedsched.replay.run import parse_policies
    from airflow_provider_fedsched.replay.simulator import Settings
    from airflow_provider_fedsched.replay.workload import ReplayInputError

    _validate(args)
    if args.protocol == "fragmentation":
        return _run_fragmentation(args)
    try:
        policies = parse_policies(args.policies)
        federation, workload = build_workload(args)
        report = _replay_with_progress(
            federation,
            policies,
            Settings(staleness=args.staleness, seed=0 if args.seed is None else args.seed),
            workload,
            show=not args.no_progress,
        )
    except ReplayInputError as exc:
        raise UsageError(str(exc)) from None
    from airflow_provider_fedsched.replay.report import plot, render_table

    return _emit(args, report, plot, render_table)


def _emit(args: argparse.Namespace, report: Any, plot: Any, render: Any) -> int:
    """Either protocol's report: its plot with ``--plot``, then JSON with ``--json`` or the table."""
    if args.plot is not None:
        try:
            plot(report, args.plot)
        except OSError as exc:
            raise UsageError(f"--plot {args.plot}: cannot write it: {exc.strerror or exc}") from None
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        print(render(report), end="")
    return EXIT_OK


def _replay_with_progress(
    federation: Federation, policies: list[str], settings: Settings, workload: str, show: bool
) -> ReplayReport:
    from airflow_provider_fedsched.replay.run import replay

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


def _run_fragmentation(args: argparse.Namespace) -> int:
    from airflow_provider_fedsched.replay.fragmentation import Protocol, read_pod_list
    from airflow_provider_fedsched.replay.fragmentation_run import default_jobs, policies_for, run_protocol
    from airflow_provider_fedsched.replay.report import plot_fragmentation, render_fragmentation
    from airflow_provider_fedsched.replay.workload import ReplayInputError, read_nodes

    protocol = Protocol(
        load=1.3 if args.load is None else args.load,
        seeds=10 if args.seeds is None else args.seeds,
        staleness=args.staleness,
        window=args.window,
    )
    try:
        policies = policies_for(args.clusters, _names(args.policies))
        nodes = read_nodes(args.nodes)
        if len(nodes) < args.clusters:
            raise ReplayInputError(f"--clusters: {args.clusters} members but only {len(nodes)} nodes")
        pods = read_pod_list(args.pods)
        jobs = default_jobs() if args.jobs is None else args.jobs
        total = len(policies) * protocol.seeds
        with _FragmentationProgress(total, show=not args.no_progress) as progress:
            report = run_protocol(
                nodes,
                pods,
                clusters=args.clusters,
                protocol=protocol,
                policies=policies,
                jobs=jobs,
                progress=progress.done,
            )
    except ReplayInputError as exc:
        raise UsageError(str(exc)) from None
    return _emit(args, report, plot_fragmentation, render_fragmentation)


def _names(text: str | None) -> list[str] | None:
    if text is None:
        return None
    names = [part.strip() for part in text.split(",") if part.strip()]
    if not names:
        raise UsageError("--policies: no policy given")
    return names


class _FragmentationProgress:
    """Seeds x policies done, on stderr: a bar on a terminal, a line per run otherwise."""

    def __init__(self, total: int, show: bool) -> None:
        self.total = total
        self.show = show
        self.count = 0
        self._bar: Any = None
        self._task: Any = None

    def __enter__(self) -> _FragmentationProgress:
        if self.show and sys.stderr.isatty():
            from rich.progress import Progress

            self._bar = Progress(transient=True)
            self._bar.__enter__()
            self._task = self._bar.add_task("seeds x policies", total=self.total)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.__exit__(None, None, None)

    def done(self, policy: str, seed: int, run: Any, seconds: float) -> None:
        self.count += 1
        if self._bar is not None:
            self._bar.advance(self._task)
        elif self.show:
            allocated = 100.0 * float(run.allocated[-1]) / max(1.0, float(run.arrived[-1]))
            print(
                f"[{self.count}/{self.total}] {policy} seed {seed}: {allocated:.1f} % of the arrived GPU "
                f"request allocated ({seconds:.1f} s)",
                file=sys.stderr,
                flush=True,
            )
