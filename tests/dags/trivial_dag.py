"""The smallest DAG, used to prove the Airflow test harness."""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG, task

with DAG(dag_id="fedsched_trivial", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC")):

    @task
    def add(a: int, b: int) -> int:
        return a + b

    @task
    def check(total: int) -> None:
        if total != 5:
            raise ValueError(f"expected 5, got {total}")

    check(add(2, 3))
