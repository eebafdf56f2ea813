"""``fedsched plan``: precompute placements for the upcoming runs of every scheduled federated DAG.

For cron or CI: reads the DAGs folder with Airflow's DagBag, plans every run due within ``--horizon`` and
stores the plans in shared federation state (Airflow Variables), where the operator looks for them.
``--dry-run`` prints the plan table without storing anything.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

from airflow_provider_fedsched.cli._common import (
    EXIT_OK,
    UsageError,
    add_member_options,
    add_verb,
    bounded_int,
    load_federation,
    parse_duration,
    print_json,
    regular_file,
    require_airflow_database,
)

MAX_RUNS = 10_000
MAX_FALLBACKS = 100


def add_parser(subparsers: Any) -> None:
    parser = add_verb(
        subparsers, "plan", "precompute placements for the upcoming runs of scheduled federated DAGs", __doc__
    )
    parser.add_argument("--dags-folder", help="DAGs folder to read (default: Airflow's [core] dags_folder)")
    parser.add_argument(
        "--federation", help="federation spec (YAML) for every task (default: each task's own)"
    )
    add_member_options(parser)
    parser.add_argument("--horizon", default="24h", help="plan runs due within this long (default 24h)")
    parser.add_argument(
        "--runs",
        type=bounded_int(1, MAX_RUNS),
        default=48,
        help="at most this many runs per DAG (default 48)",
    )
    parser.add_argument(
        "--valid-for", default="1h", help="how long after its run is due a plan stays usable (default 1h)"
    )
    parser.add_argument(
        "--fallbacks",
        type=bounded_int(0, MAX_FALLBACKS),
        default=2,
        help="fallback clusters per plan (default 2)",
    )
    parser.add_argument("--dry-run", action="store_true", help="print the plan table, store nothing")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument(
        "--verbose", action="store_true", help="show Airflow's log while it reads the DAGs (on stderr)"
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    horizon = timedelta(seconds=parse_duration(args.horizon, "--horizon"))
    valid_for = timedelta(seconds=parse_duration(args.valid_for, "--valid-for"))
    if args.runs < 1:
        raise UsageError(f"--runs: must be at least 1 (got {args.runs})")
    if args.fallbacks < 0:
        raise UsageError(f"--fallbacks: must not be negative (got {args.fallbacks})")
    if args.dags_folder is not None:
        folder = Path(args.dags_folder)
        if not folder.exists():
            raise UsageError(f"--dags-folder {args.dags_folder}: no such file or directory")
        if not (folder.is_dir() or folder.is_file()):  # /dev/zero, a FIFO: nothing Airflow can parse
            raise UsageError(f"--dags-folder {args.dags_folder}: not a directory nor a regular file")
    if args.kubeconfig is not None:
        regular_file(args.kubeconfig, "--kubeconfig")
    if args.kubeconfig is not None and args.federation is None:
        raise UsageError("--kubeconfig: needs --federation (the spec whose clusters it names)")
    if not args.verbose:
        # Airflow logs every DAG file it parses; the command reports what was not planned itself. Set
        # before Airflow is first imported (it reads its configuration once); an explicit level wins.
        os.environ.setdefault("AIRFLOW__LOGGING__LOGGING_LEVEL", "CRITICAL")
    if not args.dry_run:  # plans are stored in Airflow Variables
        require_airflow_database("variable", instead="or try --dry-run, which stores nothing")
    from sqlalchemy.exc import SQLAlchemyError

    from airflow_provider_fedsched.plans.planner import run_planner
    from airflow_provider_fedsched.render import plan_table

    # Airflow logs to stdout while it parses DAGs; keep stdout for the table or the JSON document.
    with contextlib.redirect_stdout(sys.stderr):
        try:
            planned, errors = run_planner(
                dags_folder=args.dags_folder,
                hook=_hook(args),
                horizon=horizon,
                runs_per_dag=args.runs,
                valid_for=valid_for,
                fallbacks=args.fallbacks,
                dry_run=args.dry_run,
            )
        except SQLAlchemyError:
            # A dry run reads Variables only for a task with its own federation: say why in one line.
            require_airflow_database("variable", instead="or give --federation FILE with --dry-run")
            raise
    for path, error in sorted(errors.items()):
        last = error.strip().splitlines()[-1] if error.strip() else "import error"
        print(f"fedsched plan: warning: {path} was not planned: {last}", file=sys.stderr)
    if args.json:
        document = {
            "dry_run": args.dry_run,
            "runs": [run.to_dict() for run in planned],
            "import_errors": sorted(errors),
        }
        print_json(document)
    else:
        print(plan_table(planned), end="")
        stored = sum(run.plan is not None for run in planned)
        print("dry run: nothing stored" if args.dry_run else f"stored {stored} plan(s)")
    return EXIT_OK


def _hook(args: argparse.Namespace) -> Any:
    """The hook serving every task when the command names the federation, else None (each task's own)."""
    if args.federation is None:
        return None
    from airflow_provider_fedsched.hooks.federation import FederationHook
    from airflow_provider_fedsched.state import AirflowVariableStateBackend, MemoryStateBackend

    spec = load_federation(args.federation)
    if args.kubeconfig is not None:
        _kubeconfig_connections(spec, args.kubeconfig)
    # Stored plans must reach the operators: Airflow Variables, unless this is a dry run.
    backend = MemoryStateBackend() if args.dry_run else AirflowVariableStateBackend()
    return FederationHook(spec, state=backend, kubeconfig=args.kubeconfig, snapshot_timeout=args.timeout)


def _kubeconfig_connections(spec: Any, kubeconfig: str) -> None:
    """Outside Airflow, the operator builds its pod template through a connection named after the
    cluster (its access from a kubeconfig has no conn_id): define one per member, for this process only,
    pointing at the kubeconfig context of that name, unless such a connection is already defined."""
    for cluster in spec.clusters:
        variable = f"AIRFLOW_CONN_{cluster.name.upper()}"
        if variable not in os.environ:
            extra = {"kube_config_path": str(Path(kubeconfig).resolve()), "cluster_context": cluster.name}
            if cluster.namespace:
                extra["namespace"] = cluster.namespace
            os.environ[variable] = json.dumps({"conn_type": "kubernetes", "extra": extra})
