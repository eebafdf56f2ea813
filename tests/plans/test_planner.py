"""The planner's reading of DAGs: which runs of a cron DAG come next (the timetable as the scheduler
evaluates it, relative to the wall clock, since catch-up of the past is not planned)."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

import pendulum
from airflow.sdk import DAG

from airflow_provider_fedsched.plans.planner import federated_tasks, upcoming_runs


def cron_dag(schedule: str | None, **kwargs: object) -> DAG:
    return DAG(dag_id="cron", schedule=schedule, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"), **kwargs)  # type: ignore[arg-type]


def test_next_n_runs_of_a_cron_dag_within_the_horizon() -> None:
    now = datetime.now(UTC)
    runs = upcoming_runs(cron_dag("*/15 * * * *"), now, timedelta(hours=2), limit=100)
    times = [run_after for _, run_after in runs]
    assert len(times) in (8, 9)  # 9 when now falls exactly on a quarter hour
    assert now - timedelta(minutes=15) < times[0] <= now + timedelta(minutes=15)
    assert all(t.minute % 15 == 0 and t.second == 0 and t.tzinfo is UTC for t in times)
    assert all(b - a == timedelta(minutes=15) for a, b in itertools.pairwise(times))
    assert times[-1] <= now + timedelta(hours=2)
    assert len(upcoming_runs(cron_dag("*/15 * * * *"), now, timedelta(hours=2), limit=3)) == 3


def test_unscheduled_not_yet_started_and_ending_dags() -> None:
    now = datetime.now(UTC)
    assert upcoming_runs(cron_dag(None), now, timedelta(days=1), limit=10) == []
    later = DAG(dag_id="later", schedule="@daily", start_date=pendulum.instance(now + timedelta(days=30)))
    assert upcoming_runs(later, now, timedelta(days=1), limit=10) == []
    end = now + timedelta(minutes=90)
    ending = upcoming_runs(cron_dag("@hourly", end_date=pendulum.instance(end)), now, timedelta(days=1), 10)
    assert 1 <= len(ending) <= 3 and all(logical <= end for logical, _ in ending)


def test_only_federated_tasks_are_planned() -> None:
    from airflow.providers.standard.operators.empty import EmptyOperator

    with cron_dag("@hourly") as dag:
        EmptyOperator(task_id="nothing_to_place")
    assert federated_tasks(dag) == []
