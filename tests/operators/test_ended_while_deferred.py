"""A deferred try ended from the REST API while no triggerer runs leaves no pod (soak finding, issue 10).

Real Airflow: the task runs through the Task SDK's supervisor and defers (Airflow's ``dag.test`` path
without its inline triggerer, so the try stays ``deferred`` with its trigger row in the metadata
database); the try is marked failed the way ``PATCH /api/v2/.../taskInstances/...`` does it; then a real
``airflow triggerer`` process starts, as after a triggerer restart. The simulated cluster's pod must go.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_fedsched.sim import SimFederation, wait_for
from tests import airflow_harness
from tests.operators.test_federated_operator import DAG_FILE, placement_of_run

pytestmark = [pytest.mark.airflow]
DAG_ID = "fed_deferred_ended"

SECRET_MARKERS = (
    "BEGIN CERTIFICATE",
    "BEGIN RSA PRIVATE KEY",
    "certificate-authority-data",
    "client-key-data",
)


@contextlib.contextmanager
def triggerer_running(log_path: Path, **env: str) -> Iterator[subprocess.Popen[bytes]]:
    """A real ``airflow triggerer`` process (its output in ``log_path``), stopped on leaving."""
    with log_path.open("w") as log:
        triggerer = subprocess.Popen(
            [str(Path(sys.executable).with_name("airflow")), "triggerer", "--skip-serve-logs"],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **env},
            start_new_session=True,
        )
    try:
        yield triggerer
    finally:
        os.killpg(triggerer.pid, signal.SIGTERM)
        try:
            triggerer.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(triggerer.pid, signal.SIGKILL)
            triggerer.wait(timeout=30)


def the_pod(fed: SimFederation, run_id: str, dag_id: str = DAG_ID) -> tuple[str, dict[str, Any]] | None:
    for name, handle in fed.handles.items():
        for pod in handle.pods():
            labels = pod["metadata"].get("labels") or {}
            if labels.get("dag_id") == dag_id and labels.get("run_id") == run_id:
                return name, pod
    return None


def defer(run_id: str, dag_id: str = DAG_ID, dag_file: Path = DAG_FILE) -> Any:
    """Run the task until it defers, through the Task SDK's in-process supervisor."""
    from airflow.models.taskinstance import TaskInstance
    from airflow.sdk.definitions.dag import _run_task
    from airflow.utils.session import create_session

    dag = airflow_harness.load_dag(dag_file, dag_id)
    with create_session() as session:
        ti = session.query(TaskInstance).filter_by(dag_id=dag_id, run_id=run_id, task_id="work").one()
        session.expunge(ti)
    _run_task(ti=ti, task=dag.get_task("work"), run_triggerer=False)
    return ti


def deferred_run(fed: SimFederation, prefix: str, dag_id: str = DAG_ID) -> tuple[str, str, str, str]:
    """A new run of the DAG whose task deferred with no triggerer: (run id, cluster, namespace, pod)."""
    airflow_harness.load_dag(DAG_FILE, dag_id)
    airflow_harness.serialize_dags(dag_id)
    now = datetime.now(UTC)
    run_id = f"manual__{prefix}-{now.timestamp():.0f}"
    airflow_harness.create_dag_run(dag_id, run_id, now)
    defer(run_id, dag_id)
    found = the_pod(fed, run_id, dag_id)
    assert found is not None
    cluster, pod = found
    return run_id, cluster, pod["metadata"]["namespace"], pod["metadata"]["name"]


def ti_row(run_id: str, dag_id: str = DAG_ID) -> tuple[str, int | None]:
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session

    with create_session() as session:
        ti = session.query(TaskInstance).filter_by(dag_id=dag_id, run_id=run_id, task_id="work").one()
        return str(ti.state), ti.trigger_id


def mark_failed_as_the_rest_api_does(run_id: str, dag_id: str = DAG_ID) -> None:
    from airflow.models.serialized_dag import SerializedDagModel
    from airflow.utils.session import create_session
    from airflow.utils.state import TaskInstanceState

    dag = SerializedDagModel.get_dag(dag_id)
    assert dag is not None
    with create_session() as session:
        updated = dag.set_task_instance_state(
            task_id="work",
            run_id=run_id,
            map_indexes=None,
            state=TaskInstanceState.FAILED,
            upstream=False,
            downstream=False,
            future=False,
            past=False,
            commit=True,
            session=session,
        )
    assert updated


def metadata_database_text() -> str:
    """Every value of every row of every table of the metadata database, as text."""
    from airflow.settings import engine
    from sqlalchemy import MetaData, select

    metadata = MetaData()
    metadata.reflect(bind=engine)
    chunks: list[str] = []
    with engine.connect() as connection:
        for table in metadata.sorted_tables:
            for row in connection.execute(select(table)):
                for value in row:
                    if isinstance(value, bytes | bytearray | memoryview):
                        chunks.append(bytes(value).decode("utf-8", errors="replace"))
                    elif value is not None:
                        chunks.append(str(value))
    return "\n".join(chunks)


def assert_no_credentials_in_the_database(fed: SimFederation) -> None:
    text = metadata_database_text()
    assert len(text) > 1000  # the scan did read the database
    for name, handle in fed.handles.items():
        assert handle.token not in text, f"the kubeconfig token of {name} is in the metadata database"
    for marker in SECRET_MARKERS:
        assert marker not in text, f"{marker!r} is in the metadata database"


def test_a_try_marked_failed_while_no_triggerer_runs_leaves_no_pod(
    sim_federation: SimFederation, federation: Path
) -> None:
    run_id, cluster, namespace, name = deferred_run(sim_federation, "ended")
    state, trigger_id = ti_row(run_id)
    assert state == "deferred" and trigger_id is not None
    # The trigger's kwargs are stored now: the connection id, never the kubeconfig's token.
    assert_no_credentials_in_the_database(sim_federation)

    # The pod runs to the end while nobody watches it (the triggerer is down), and a user fails the try.
    wait_for(
        lambda: (
            (sim_federation[cluster].pod(namespace, name) or {}).get("status", {}).get("phase") == "Succeeded"
        ),
        timeout=120,
        interval=0.1,
    )
    mark_failed_as_the_rest_api_does(run_id)
    assert ti_row(run_id)[0] == "failed"
    assert sim_federation[cluster].pod(namespace, name) is not None

    # The triggerer comes back.
    log_path = federation.parent / "triggerer.log"
    with triggerer_running(log_path):
        # A fresh process imports Airflow and the provider first: slow on a busy machine.
        wait_for(
            lambda: sim_federation[cluster].pod(namespace, name) is None,
            timeout=300,
            interval=0.2,
            message=str(log_path),
        )
        # Then the trigger writes the outcome into the try's placement record.
        wait_for(
            lambda: placement_of_run(DAG_ID, run_id)["attempts"][0]["outcome"] == "cancelled",
            timeout=120,
            interval=0.2,
            message=str(log_path),
        )

    # The trigger's log says why it deleted the pod: its own check of the task instance found the try
    # over, or the triggerer cancelled it as a user's action first (on_kill); which one comes first depends
    # on when the triggerer's clean-up runs. A line written after the trigger ended goes to the triggerer's
    # own log rather than the try's trigger log file: read both (this run's lines).
    trigger_logs = Path(os.environ["AIRFLOW_HOME"], "logs", f"dag_id={DAG_ID}", f"run_id={run_id}")
    log_text = "".join(p.read_text() for p in trigger_logs.rglob("*trigger*"))
    log_text += "".join(line for line in log_path.read_text().splitlines(True) if run_id in line)
    why = ("no longer deferred", "Task ended by a user")
    assert any(reason in log_text for reason in why) and "deleted" in log_text, log_text[-3000:]
    record = placement_of_run(DAG_ID, run_id)
    (attempt,) = record["attempts"]
    assert attempt["outcome"] == "cancelled" and attempt["pod"] == name, log_text[-4000:]
    assert record["outcome"] == "failed" and "ended from the UI or the API" in record["reason"]
    assert_no_credentials_in_the_database(sim_federation)


def test_a_try_whose_trigger_never_ran_is_swept_by_the_next_snapshot(
    sim_federation: SimFederation, federation: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Soak finding: a try marked failed just after it deferred, its trigger row cleaned up (Airflow's
    ``Trigger.clean_unused``, run by every triggerer loop) before any triggerer ran it: no trigger, no
    ``on_kill``, yet its pod must go. The next snapshot of the pod's cluster sweeps it."""
    from airflow.models.trigger import Trigger

    from airflow_provider_fedsched.hooks import sensing
    from airflow_provider_fedsched.hooks.federation import FederationHook

    run_id, cluster, namespace, name = deferred_run(sim_federation, "swept")
    hook = FederationHook()
    assert [e["pod"] for e in hook.state.deferred.of(cluster)] == [name]

    mark_failed_as_the_rest_api_does(run_id)
    Trigger.clean_unused()
    assert ti_row(run_id) == ("failed", None)

    # A deferral still within its trigger's time is left alone; then the sweep finds the try over.
    hook.collect()
    assert sim_federation[cluster].pod(namespace, name) is not None
    monkeypatch.setattr(sensing, "ENDED_TRY_AGE", 0.0)
    hook.collect()
    assert sim_federation[cluster].pod(namespace, name) is None
    assert hook.state.deferred.of(cluster) == [] and hook.orphans(cluster) == []


def test_a_pod_seen_succeeded_of_a_try_that_ended_unresumed_stays_known_after_the_sweep(
    sim_federation: SimFederation, federation: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Test-bed soak finding: a deferred try's pod Succeeded (written down on its deferral entry), the try
    ended before it resumed, and the pod was deleted by someone else (its node's garbage collector). The
    sweep that turns the entry into an orphan keeps that success, for the next try to take."""
    from airflow_provider_fedsched.hooks import sensing
    from airflow_provider_fedsched.hooks.federation import FederationHook

    dag_id = "fed_deferred_done"
    # The 1 s pod stays Pending until the task has deferred: had it ended first, the task would judge it
    # inline (federated_pod.invoke_defer_method) and there would be no deferral to sweep.
    sim_federation["east-cpu"].scheduler.pause()
    run_id, cluster, namespace, name = deferred_run(sim_federation, "done", dag_id)
    assert ti_row(run_id, dag_id)[0] == "deferred"
    sim_federation[cluster].scheduler.resume()
    sim_federation[cluster].wait_for_phase(namespace, name, "Succeeded", timeout=60)
    hook = FederationHook()
    hook.collect()  # no trigger runs: the snapshot's sweep sees the pod end and writes it down
    assert [e.get("ended") for e in hook.state.deferred.of(cluster)] == ["Succeeded"]

    sim_federation[cluster].delete_pod(namespace, name, grace=0)
    mark_failed_as_the_rest_api_does(run_id, dag_id)
    monkeypatch.setattr(sensing, "ENDED_TRY_AGE", 0.0)
    hook.collect()
    assert hook.state.deferred.of(cluster) == [] and hook.orphans(cluster) == []
    assert hook.state.orphans.was_swept_succeeded(cluster, namespace, name)
