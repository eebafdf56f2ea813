"""The ``fedsched`` command: what-if placement, snapshots and the simulated federation.

Each subcommand lives beside the code it drives and registers itself here through ``add_parser``.
Exit codes: 0 success, 2 bad input (a clear message naming the field at fault, never a traceback),
3 a placement whose answer is "wait" or "impossible".
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

EXIT_OK = 0
EXIT_BAD_INPUT = 2
EXIT_NOT_PLACED = 3


class UsageError(Exception):
    """Bad input from the command line or a file it names; printed without a traceback, exit 2."""


def build_parser() -> argparse.ArgumentParser:
    from airflow_provider_fedsched import cli_place, cli_plan, cli_snapshot
    from airflow_provider_fedsched.sim import cli as sim_cli

    parser = argparse.ArgumentParser(
        prog="fedsched",
        description="Federated Kubernetes scheduling for Airflow: what-if placement, live snapshots, "
        "precomputed plans and the simulated federation.",
    )
    subparsers = parser.add_subparsers(dest="command", required=True)
    cli_place.add_parser(subparsers)
    cli_snapshot.add_parser(subparsers)
    cli_plan.add_parser(subparsers)
    sim_cli.add_parser(subparsers)
    __import__("airflow_provider_fedsched.replay.command", fromlist=["add_parser"]).add_parser(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.handler(args))
    except UsageError as exc:
        print(f"fedsched {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
