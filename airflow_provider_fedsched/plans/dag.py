"""``planner_dag()``: a DAG that plans the upcoming runs of every federated DAG, on its own schedule.

Drop a file like ``example_dags/fedsched_planner_dag.py`` into the DAGs folder::

    from airflow_provider_fedsched.plans.dag import planner_dag

    dag = planner_dag()
"""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from airflow_provider_fedsched.plans.planner import (
    DEFAULT_HORIZON,
    DEFAULT_RUNS_PER_DAG,
    DEFAULT_VALID_FOR,
    run_planner,
)
from airflow_provider_fedsched.render import plan_table


def plan_upcoming_runs(
    *,
    horizon_seconds: float,
    runs_per_dag: int,
    valid_for_seconds: float,
    dags_folder: str | None = None,
    federation: str | None = None,
) -> dict[str, Any]:
    """The planner task: plan, log the table, return counts (the task's XCom)."""
    from airflow_provider_fedsched.hooks.federation import FederationHook

    planned, errors = run_planner(
        dags_folder=dags_folder,
        hook=FederationHook(federation) if federation is not None else None,
        horizon=timedelta(seconds=horizon_seconds),
        runs_per_dag=runs_per_dag,
        valid_for=timedelta(seconds=valid_for_seconds),
    )
    print(plan_table(planned))
    for path, error in errors.items():
        print(f"Not planned: {path} does not import: {error.splitlines()[-1] if error else ''}")
    return {
        "planned": sum(run.plan is not None for run in planned),
        "without_plan": sum(run.plan is None for run in planned),
        "dags": sorted({run.dag_id for run in planned}),
        "import_errors": sorted(errors),
    }


def planner_dag(
    dag_id: str = "fedsched_planner",
    schedule: str | None = "*/30 * * * *",
    *,
    horizon: timedelta = DEFAULT_HORIZON,
    runs_per_dag: int = DEFAULT_RUNS_PER_DAG,
    valid_for: timedelta = DEFAULT_VALID_FOR,
    dags_folder: str | Path | None = None,
    federation: str | None = None,
    start_date: datetime | None = None,
    **dag_kwargs: Any,
) -> Any:
    """A DAG whose one task, ``plan``, plans every scheduled federated DAG's runs within ``horizon``.

    :param schedule: how often to plan; shorter than ``horizon`` so that every run gets planned, and
        short enough that plans see recent snapshots and forecasts.
    :param dags_folder: the folder to read DAGs from (default: Airflow's ``[core] dags_folder``).
    :param federation: one federation spec for every task (default: each task's own).
    """
    import pendulum
    from airflow.providers.standard.operators.python import PythonOperator
    from airflow.sdk import DAG

    with DAG(
        dag_id=dag_id,
        schedule=schedule,
        start_date=start_date or pendulum.datetime(2026, 1, 1, tz="UTC"),
        catchup=False,
        max_active_runs=1,
        tags=["fedsched"],
        doc_md=__doc__,
        **dag_kwargs,
    ) as dag:
        PythonOperator(
            task_id="plan",
            python_callable=plan_upcoming_runs,
            op_kwargs={
                "horizon_seconds": horizon.total_seconds(),
                "runs_per_dag": runs_per_dag,
                "valid_for_seconds": valid_for.total_seconds(),
                "dags_folder": str(dags_folder) if dags_folder is not None else None,
                "federation": federation,
            },
        )
    return dag
