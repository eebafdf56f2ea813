"""``fedsched audit``: the sovereignty audit of every try that read a restricted dataset, and its verifier.

For each such try, every cluster it placed pods or Jobs in, checked against the federation spec's rule and
each member's placement ledger, with a verdict per cluster; ``--json`` exports the report with a SHA-256
chain that ``fedsched audit verify FILE`` checks later (docs/audit.md).

Reads the placement records (XComs) from the Airflow metadata database this environment is configured for,
and each member's ledger through its Airflow connection; ``--since``/``--until`` bound the tries' start
times. Exit codes: 0 no violation, 1 a violation found (``verify``: the report was altered), 2 bad input.
"""

from __future__ import annotations

import argparse
import csv
import sys
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from airflow_provider_fedsched.cli import _common as common

if TYPE_CHECKING:
    from airflow_provider_fedsched.federation.spec import FederationSpec

__all__ = ["EXIT_FOUND", "add_parser", "run", "verify"]

EXIT_FOUND = 1
"""A violation in the audit; a report that does not verify."""
CSV_COLUMNS = (
    "number",
    "verdict",
    "dag_id",
    "run_id",
    "task_id",
    "map_index",
    "try_number",
    "try_started_at",
    "datasets",
    "allowed_regions",
    "cluster",
    "region",
    "attempt",
    "placement_id",
    "namespace",
    "pod",
    "outcome",
    "seen_in",
    "ledger",
    "reason",
    "previous",
    "hash",
)


def add_parser(subparsers: Any) -> None:
    parser = common.add_verb(
        subparsers, "audit", "the sovereignty audit: where tries that read restricted data ran", __doc__
    )
    parser.add_argument(
        "--federation", help="federation spec (YAML); default: the configured [fedsched] federation_spec"
    )
    parser.add_argument("--since", help="only tries started at or after this ISO 8601 time")
    parser.add_argument("--until", help="only tries started before this ISO 8601 time")
    parser.add_argument("--dataset", help="only tries that read this restricted dataset")
    output = parser.add_mutually_exclusive_group()
    output.add_argument("--json", action="store_true", help="print the chained report (export it to a file)")
    output.add_argument("--csv", action="store_true", help="print the entries as CSV (not verifiable)")
    parser.set_defaults(handler=run)
    actions = parser.add_subparsers(dest="action")
    checker = actions.add_parser("verify", help="check an exported report's chain and every entry")
    checker.add_argument("file", metavar="FILE", help="a report written by `fedsched audit --json`")
    checker.set_defaults(handler=verify)


def _spec(path: str | None) -> FederationSpec:
    if path is not None:
        return common.load_federation(path)
    from airflow_provider_fedsched.federation.spec import SpecError
    from airflow_provider_fedsched.hooks.federation import FederationHook

    try:
        return FederationHook().spec
    except SpecError as exc:
        raise common.UsageError(
            f"the configured federation ([fedsched] federation_spec) cannot be read: {exc} "
            "(or give --federation)"
        ) from None


def run(args: argparse.Namespace) -> int:
    since = common.parse_time(args.since, "--since") if args.since else None
    until = common.parse_time(args.until, "--until") if args.until else None
    if since is not None and until is not None and until <= since:
        raise common.UsageError(f"--until: {args.until} is not after --since {args.since}")
    spec = _spec(args.federation)
    from airflow_provider_fedsched.federation.audit import check_dataset, dump_report
    from airflow_provider_fedsched.federation.spec import SpecError

    if args.dataset is not None:
        try:
            check_dataset(spec, args.dataset, "--dataset")
        except SpecError as exc:
            raise common.UsageError(str(exc)) from None
    common.require_airflow_database("xcom")
    from airflow.utils.session import create_session

    from airflow_provider_fedsched.hooks.federation import FederationHook
    from airflow_provider_fedsched.plugins.history import audit_report

    with create_session() as session:
        report = audit_report(
            session,
            FederationHook(spec, state="airflow"),
            now=datetime.now(UTC),
            since=since,
            until=until,
            dataset=args.dataset,
        )
    if args.json:
        sys.stdout.write(dump_report(report))
    elif args.csv:
        _write_csv(report["entries"])
    else:
        from airflow_provider_fedsched.render import audit_table

        print(audit_table(report))
    return EXIT_FOUND if report["header"]["verdicts"]["violation"] else common.EXIT_OK


def _write_csv(entries: list[dict[str, Any]]) -> None:
    writer = csv.DictWriter(sys.stdout, fieldnames=CSV_COLUMNS, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for entry in entries:
        writer.writerow(
            {
                **entry,
                "datasets": ";".join(dataset["name"] for dataset in entry["datasets"]),
                "allowed_regions": ";".join(entry["allowed_regions"] or []),
                "seen_in": ";".join(entry["seen_in"]),
            }
        )


def verify(args: argparse.Namespace) -> int:
    from airflow_provider_fedsched.federation.audit import MAX_REPORT_BYTES, NotAReport, verify_report

    path = common.regular_file(args.file, "FILE")
    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_REPORT_BYTES + 1)
    except OSError as exc:
        raise common.UsageError(f"FILE {args.file}: {exc.strerror or exc}") from None
    try:
        result = verify_report(data)
    except NotAReport as exc:
        raise common.UsageError(f"FILE {args.file}: not an audit report: {exc}") from None
    if not result.ok:
        print(f"fedsched audit verify: {args.file} does not verify: {result.problem}", file=sys.stderr)
        return EXIT_FOUND
    counts = result.verdicts or {}
    print(
        f"{args.file}: intact: {result.entries} entries verify "
        f"({counts.get('compliant', 0)} compliant, {counts.get('violation', 0)} violation(s), "
        f"{counts.get('unverifiable', 0)} unverifiable)"
    )
    return common.EXIT_OK
