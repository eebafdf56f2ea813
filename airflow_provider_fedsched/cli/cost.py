"""``fedsched cost``: what the federation's tasks cost, per tenant, DAG, cluster or day.

Reads the charges each cluster attempt left in the deployment's shared state (Airflow Variables: run it
where the Airflow configuration is); failed attempts count. ``--since`` is a duration back from now.
"""

from __future__ import annotations

import argparse
from datetime import UTC, datetime, timedelta
from typing import Any

from airflow_provider_fedsched.cli import _common as common
from airflow_provider_fedsched.federation.costs import REPORT_GROUPS


def add_parser(subparsers: Any) -> None:
    parser = common.add_verb(
        subparsers, "cost", "report estimated cost and egress of cluster attempts", __doc__
    )
    parser.add_argument("--federation", required=True, help="federation spec (YAML)")
    parser.add_argument("--since", default="30d", help="how far back (default 30d; e.g. 7d, 12h)")
    parser.add_argument(
        "--by", default="tenant", help=f"group by: {', '.join(REPORT_GROUPS)} (default tenant)"
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    if args.by not in REPORT_GROUPS:
        raise common.UsageError(f"--by: unknown group '{args.by}' (choose {', '.join(REPORT_GROUPS)})")
    since = datetime.now(UTC) - timedelta(seconds=common.parse_duration(args.since, "--since"))
    spec = common.load_federation(args.federation)
    if not spec.tenants:
        raise common.UsageError(
            f"--federation {args.federation}: the spec has no tenants (nothing is charged)"
        )
    common.require_airflow_database("variable")
    from airflow_provider_fedsched.federation.costs import cost_report
    from airflow_provider_fedsched.hooks.federation import FederationHook

    rows = cost_report(FederationHook(spec, state="airflow").charges(since), args.by)
    if args.json:
        common.print_json({"since": since.isoformat(), "by": args.by, "rows": rows})
    else:
        from airflow_provider_fedsched.render import cost_table

        print(cost_table(rows, args.by))
    return common.EXIT_OK
