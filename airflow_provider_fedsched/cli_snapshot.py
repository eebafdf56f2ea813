"""``fedsched snapshot``: read every member cluster now and show what each could take.

Members resolve through Airflow connections (``AIRFLOW_CONN_*`` variables or the metadata database) or,
with ``--kubeconfig FILE``, through the context of that file named after each cluster (what
``fedsched sim up`` writes). ``--out`` writes the snapshot file that ``fedsched place --snapshots`` reads.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from airflow_provider_fedsched.cli import EXIT_OK, UsageError
from airflow_provider_fedsched.federation.resources import CPU, GPU, MEMORY, format_quantity
from airflow_provider_fedsched.federation.snapshot import ClusterSnapshot, dump_snapshots
from airflow_provider_fedsched.federation.spec import SpecError


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "snapshot",
        help="read every member cluster now and print its free capacity",
        description=__doc__.splitlines()[0] if __doc__ else None,
    )
    parser.add_argument("--federation", required=True, help="federation spec (YAML)")
    add_member_options(parser)
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--out", help="write the snapshot file (YAML) that `fedsched place` reads")
    parser.set_defaults(handler=run)


def add_member_options(parser: argparse.ArgumentParser) -> None:
    """How the CLI reaches member clusters; shared with ``fedsched place --live``."""
    parser.add_argument(
        "--kubeconfig",
        help="outside Airflow: resolve each cluster to the context of this kubeconfig named after it",
    )
    parser.add_argument(
        "--timeout", type=float, default=2.0, help="seconds each cluster has to answer (default 2)"
    )


def live_snapshots(federation: str, kubeconfig: str | None, timeout: float) -> dict[str, ClusterSnapshot]:
    """Collect every member's snapshot now; every problem becomes a :class:`UsageError` or a reason."""
    from airflow_provider_fedsched.hooks.federation import FederationHook
    from airflow_provider_fedsched.state import FederationState, MemoryStateBackend

    if kubeconfig is not None and not Path(kubeconfig).is_file():
        raise UsageError(f"--kubeconfig {kubeconfig}: no such file")
    if timeout <= 0:
        raise UsageError(f"--timeout: must be positive (got {timeout:g})")
    try:
        hook = FederationHook(
            Path(federation),
            kubeconfig=kubeconfig,
            snapshot_timeout=timeout,
            state=FederationState(MemoryStateBackend()),
        )
        return hook.collect()
    except SpecError as exc:
        raise UsageError(f"--federation {federation}: {exc}") from None


def _largest_free_node(snapshot: ClusterSnapshot) -> str:
    best = max(
        (node for node in snapshot.nodes if node.schedulable),
        key=lambda node: (node.free.get(GPU, 0), node.free.get(CPU, 0), node.free.get(MEMORY, 0)),
        default=None,
    )
    if best is None:
        return "-"
    free = best.free
    parts = [f"{format_quantity(r, free[r])} {r}" for r in (CPU, MEMORY, GPU) if free.get(r)]
    return f"{best.name} ({', '.join(parts) or 'nothing free'})"


def summarize(snapshot: ClusterSnapshot, now: datetime) -> dict[str, Any]:
    """One cluster's headline numbers (free/total over ready, schedulable nodes)."""
    index = snapshot.index
    return {
        "cluster": snapshot.cluster,
        "reachable": snapshot.reachable,
        "reason": snapshot.reason,
        "age_seconds": round(snapshot.age_seconds(now), 3),
        "nodes": len(snapshot.nodes),
        "ready_nodes": sum(1 for node in snapshot.nodes if node.schedulable),
        "free": {r: format_quantity(r, a) for r, a in sorted(index.total_free.items())},
        "total": {r: format_quantity(r, a) for r, a in sorted(index.total_allocatable.items())},
        "largest_free_node": _largest_free_node(snapshot),
    }


def render(rows: Sequence[Mapping[str, Any]]) -> str:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="Member clusters", show_lines=False)
    for column in (
        "cluster",
        "reachable",
        "age",
        "ready nodes",
        "free cpu",
        "free memory",
        "free gpu",
        "largest free node",
    ):
        table.add_column(column)
    for row in rows:
        free = row["free"]
        table.add_row(
            row["cluster"],
            "yes" if row["reachable"] else f"no: {row['reason']}",
            f"{row['age_seconds']:.1f}s",
            f"{row['ready_nodes']}/{row['nodes']}",
            f"{free.get(CPU, '0')}/{row['total'].get(CPU, '0')}",
            f"{free.get(MEMORY, '0')}/{row['total'].get(MEMORY, '0')}",
            f"{free.get(GPU, '0')}/{row['total'].get(GPU, '0')}",
            row["largest_free_node"],
        )
    console = Console(record=True, width=160, color_system=None, force_terminal=False)
    with console.capture() as capture:
        console.print(table)
    return capture.get()


def run(args: argparse.Namespace) -> int:
    snapshots = live_snapshots(args.federation, args.kubeconfig, args.timeout)
    now = datetime.now(UTC)
    rows = [summarize(snapshots[name], now) for name in sorted(snapshots)]
    if args.out:
        try:
            Path(args.out).write_text(yaml.safe_dump(dump_snapshots(snapshots), sort_keys=False))
        except OSError as exc:
            raise UsageError(f"--out {args.out}: {exc.strerror or exc}") from None
    print(json.dumps({"clusters": rows}, indent=2) if args.json else render(rows))
    return EXIT_OK
