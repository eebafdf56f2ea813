"""``fedsched snapshot``: read every member cluster now and show what each could take.

Members resolve through Airflow connections, as the operator resolves them (secrets backend,
``AIRFLOW_CONN_*`` variables, metadata database: run it where the Airflow configuration is) or,
with ``--kubeconfig FILE``, through the context of that file named after each cluster (what
``fedsched sim up`` writes). ``--out`` writes the snapshot file that ``fedsched place --snapshots`` reads.
"""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from typing import Any

from airflow_provider_fedsched.cli import _common as common


def add_parser(subparsers: Any) -> None:
    parser = common.add_verb(
        subparsers, "snapshot", "read every member cluster now and print its free capacity", __doc__
    )
    parser.add_argument("--federation", required=True, help="federation spec (YAML)")
    common.add_member_options(parser)
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--out", help="write the snapshot file (YAML) that `fedsched place` reads")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from airflow_provider_fedsched.federation.snapshot import dump_snapshots, summarize

    if args.out:
        common.check_output(args.out, "--out")
    snapshots = common.live_snapshots(common.load_federation(args.federation), args.kubeconfig, args.timeout)
    now = datetime.now(UTC)
    rows = [summarize(snapshots[name], now) for name in sorted(snapshots)]
    if args.out:
        import yaml

        try:
            with common.open_output(args.out, "--out") as handle:
                handle.write(yaml.safe_dump(dump_snapshots(snapshots), sort_keys=False))
        except OSError as exc:
            raise common.UsageError(f"--out {args.out}: {exc.strerror or exc}") from None
    if args.json:
        common.print_json({"clusters": rows})
    else:
        from airflow_provider_fedsched.render import snapshot_table

        print(snapshot_table(rows))
    return common.EXIT_OK
