"""The Airflow harness runs a real DAG with ``dag.test()`` on the session's SQLite database."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.airflow_harness import run_dag, task_states

pytestmark = pytest.mark.airflow
DAGS = Path(__file__).resolve().parent.parent / "dags"


def test_trivial_dag_runs_to_success(airflow_db: None) -> None:
    dag_run = run_dag(DAGS / "trivial_dag.py", "fedsched_trivial")

    assert str(dag_run.state) == "success"
    assert task_states(dag_run) == {"add": "success", "check": "success"}


def test_provider_is_registered_with_airflow(airflow_db: None) -> None:
    from airflow.providers_manager import ProvidersManager

    providers = ProvidersManager().providers
    assert "airflow-provider-fedsched" in providers
    assert providers["airflow-provider-fedsched"].data["name"] == "Federated Kubernetes scheduling"
