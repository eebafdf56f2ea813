"""``fedsched history export``: the placement history recorded in Airflow as a pod list ``fedsched replay``
reads (``--pods``), so that a user can ask what other weights would have done with last week's work.

Reads the placement records (XComs under the operator's key) from the Airflow metadata database this
environment is configured for; ``--since``/``--until`` bound the tries' start times.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from airflow_provider_fedsched.cli._common import (
    EXIT_OK,
    UsageError,
    check_output,
    open_output,
    parse_time,
    require_airflow_database,
    require_dev_tools,
)

__all__ = ["add_parser", "export"]


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "history",
        help="the placement history recorded in Airflow",
        description=__doc__.splitlines()[0] if __doc__ else None,
    )
    actions = parser.add_subparsers(dest="action", required=True)
    exporter = actions.add_parser("export", help="write the history as a pod list for `fedsched replay`")
    exporter.add_argument("--out", required=True, help="pods CSV to write (the trace's columns)")
    exporter.add_argument("--since", help="only tries started at or after this ISO 8601 time")
    exporter.add_argument("--until", help="only tries started before this ISO 8601 time")
    exporter.add_argument("--dag-id", help="only this DAG's tasks")
    exporter.set_defaults(handler=export)


def export(args: argparse.Namespace) -> int:
    require_dev_tools()  # the pod list is the replay's (a dev tool)
    from airflow_provider_fedsched.replay.history import tasks_from_records
    from airflow_provider_fedsched.replay.workload import write_pods

    since = parse_time(args.since, "--since") if args.since else None
    until = parse_time(args.until, "--until") if args.until else None
    if since is not None and until is not None and until <= since:
        raise UsageError(f"--until: {args.until} is not after --since {args.since}")
    check_output(args.out, "--out")
    require_airflow_database("xcom")
    from airflow.utils.session import create_session

    from airflow_provider_fedsched.plugins.history import records_between

    with create_session() as session:
        read = records_between(session, since, until, args.dag_id)
    unreadable = len(read.unreadable)
    result = tasks_from_records(read.records)
    try:
        write_pods(open_output(args.out, "--out"), result.tasks)
    except OSError as exc:
        raise UsageError(f"--out {args.out}: cannot write it: {exc.strerror or exc}") from None
    notes = [f"{count} {why}" for why, count in sorted(result.skipped.items())]
    if unreadable:
        notes.append(f"{unreadable} unreadable value(s)")
    print(
        f"wrote {len(result.tasks)} pod(s) to {args.out}"
        + (f"; left out: {', '.join(notes)}" if notes else ""),
        file=sys.stderr,
    )
    return EXIT_OK
