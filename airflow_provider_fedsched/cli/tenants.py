"""``fedsched tenants``: each tenant's quota and use, what it borrows, its waiting tasks and its spend.

Usage and spend come from the deployment's shared state (Airflow Variables: run it where the Airflow
configuration is), or, with ``--snapshots FILE``, usage from a snapshot file's ``tenants`` (no state read).
"""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from typing import Any

from airflow_provider_fedsched.cli import _common as common


def add_parser(subparsers: Any) -> None:
    parser = common.add_verb(
        subparsers, "tenants", "show each tenant's quota, use, waiting tasks and spend", __doc__
    )
    parser.add_argument("--federation", required=True, help="federation spec (YAML)")
    parser.add_argument("--snapshots", help="snapshot file to count usage from, instead of shared state")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    spec = common.load_federation(args.federation)
    if not spec.tenants:
        raise common.UsageError(f"--federation {args.federation}: the spec has no tenants")
    snapshots = common.load_snapshot_file(args.snapshots) if args.snapshots else None
    if snapshots is None:
        common.require_airflow_database("variable", instead="or count usage from a file with --snapshots")
    from airflow_provider_fedsched.hooks.federation import FederationHook

    hook = FederationHook(spec, state="memory" if snapshots is not None else "airflow")
    if snapshots is not None:
        hook.store_snapshots(snapshots.values())
    rows = hook.tenants(datetime.now(UTC))
    if args.json:
        common.print_json({"tenants": rows})
    else:
        from airflow_provider_fedsched.render import tenants_table

        print(tenants_table(rows))
    return common.EXIT_OK
