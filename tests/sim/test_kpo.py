"""An unchanged KubernetesPodOperator against the simulator, through Airflow's real ``dag.test()``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from airflow_provider_fedsched.sim import SimFederation
from tests import airflow_harness

DAG_FILE = Path(__file__).parent / "dags" / "sim_kpo_dag.py"
pytestmark = pytest.mark.airflow


@pytest.fixture
def airflow_conns(fed: SimFederation, monkeypatch: pytest.MonkeyPatch, airflow_db: None) -> Iterator[None]:
    for key, value in fed.airflow_env_vars().items():
        monkeypatch.setenv(key, value)
    yield


def _xcom(dag_run: object, task_id: str) -> object:
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        row = (
            session.query(XComModel)
            .filter_by(
                dag_id=dag_run.dag_id,
                run_id=dag_run.run_id,
                task_id=task_id,
                key="return_value",  # type: ignore[attr-defined]
            )
            .one()
        )
        return XComModel.deserialize_value(row)


def test_kpo_runs_pod_to_success_with_logs_and_xcom(
    airflow_conns: None, fed: SimFederation, capfd: pytest.CaptureFixture[str]
) -> None:
    dag_run = airflow_harness.run_dag(DAG_FILE, "sim_kpo_success")
    assert airflow_harness.task_states(dag_run) == {"run": "success"}
    # The task log (structlog on stdout) carries the container's lines streamed by follow=true.
    assert "[base] hello from the sim" in capfd.readouterr().out
    assert _xcom(dag_run, "run") == {"answer": 42}
    # on_finish_action=delete_pod: nothing left behind.
    assert not [p for p in fed["east-cpu"].pods("default") if p["metadata"]["name"].startswith("sim-kpo-ok")]


def test_kubernetes_job_operator_runs_a_job_of_two_pods(
    airflow_conns: None, fed: SimFederation, capfd: pytest.CaptureFixture[str]
) -> None:
    dag_run = airflow_harness.run_dag(DAG_FILE, "sim_job_two_workers")
    assert airflow_harness.task_states(dag_run) == {"train": "success", "clean_up": "success"}
    assert "worker says hi" in capfd.readouterr().out
    east = fed["east-cpu"]
    runs = [r for r in east.journal("default") if r["labels"].get("task_id") == "train"]
    assert len(runs) == 2 and {r["outcome"] for r in runs} == {"succeeded"}
    job_name = runs[0]["labels"]["job-name"]
    assert {r["labels"]["job-name"] for r in runs} == {job_name}
    # The operator deleted its pods once done (on_finish_action), then KubernetesDeleteJobOperator the Job.
    assert all(r["removed_at"] for r in runs)
    assert not east.call(lambda: east.store.get("jobs", "default", job_name))
    assert not [
        p for p in east.pods("default") if (p["metadata"].get("labels") or {}).get("job-name") == job_name
    ]


def test_deferrable_kubernetes_job_operator(airflow_conns: None, fed: SimFederation) -> None:
    dag_run = airflow_harness.run_dag(DAG_FILE, "sim_job_deferrable")
    assert airflow_harness.task_states(dag_run) == {"train_deferred": "success"}
    runs = [r for r in fed["east-cpu"].journal("default") if r["labels"].get("task_id") == "train_deferred"]
    assert [r["outcome"] for r in runs] == ["succeeded"]


def test_kpo_unschedulable_pod_hits_schedule_timeout(
    airflow_conns: None, fed: SimFederation, capfd: pytest.CaptureFixture[str]
) -> None:
    dag_run = airflow_harness.run_dag(DAG_FILE, "sim_kpo_unschedulable")
    assert airflow_harness.task_states(dag_run) == {"too_big": "failed"}
    out = capfd.readouterr().out
    assert "too long to be scheduled" in out
    assert "0/3 nodes are available: 3 Insufficient cpu." in out
