"""`fedsched history export`: placement records in Airflow's XCom table become a pod list for the replay."""

from __future__ import annotations

import csv
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_fedsched import cli
from airflow_provider_fedsched.federation import TaskRequest
from airflow_provider_fedsched.replay.workload import read_pods
from tests.plugins.records import BASE_TIME, clear_xcoms, insert_xcoms, record


def stored(task_id: str, offset: float, request: TaskRequest | None, **kwargs: Any) -> dict[str, Any]:
    value = record(task_id=task_id, run_id="manual__1", **kwargs)
    started = BASE_TIME + timedelta(seconds=offset)
    value["started_at"] = started.isoformat()
    for attempt in value["attempts"]:
        attempt["started_at"] = started.isoformat()
        attempt["running_at"] = (started + timedelta(seconds=5)).isoformat()
        attempt["ended_at"] = (started + timedelta(seconds=605)).isoformat()
    value["request"] = request.model_dump(mode="json") if request is not None else None
    return {"dag_id": "etl", "run_id": "manual__1", "task_id": task_id, "timestamp": started, "value": value}


@pytest.fixture
def history(airflow_db: None) -> Iterator[None]:
    clear_xcoms()
    train = TaskRequest(
        resources={"cpu": 4000, "memory": 8 * 2**30, "nvidia.com/gpu": 2},
        datasets=["eu-customers"],
        expected_duration_seconds=900,
        preemptible=True,
    )
    insert_xcoms(
        [
            stored("train", 0.0, train, clusters=("east-cpu", "west-general")),
            stored("load", 120.0, TaskRequest(resources={"cpu": 500, "memory": 2**30})),
            stored("old", 60.0, None),
            stored("busy", 90.0, TaskRequest(resources={"cpu": 500}), outcome="running"),
            stored("broken", 150.0, TaskRequest(resources={"cpu": 250}), outcome="failed"),
        ]
    )
    yield
    clear_xcoms()


def test_export_writes_finished_tries_as_pods_the_replay_reads(
    history: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "pods.csv"
    assert cli.main(["history", "export", "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "wrote 3 pod(s)" in err and "1 no request" in err and "1 still running" in err
    pods = {pod.name: pod for pod in read_pods(out)}
    # Issue 25, finding 8: a try that failed is written as a Failed pod, not Succeeded.
    with out.open(newline="") as handle:
        phases = {row["name"]: row["pod_phase"] for row in csv.DictReader(handle)}
    assert phases == {
        "etl.train@manual__1": "Succeeded",
        "etl.load@manual__1": "Succeeded",
        "etl.broken@manual__1": "Failed",
    }
    assert pods["etl.broken@manual__1"].phase == "Failed"
    train, load = pods["etl.train@manual__1"], pods["etl.load@manual__1"]
    assert (train.arrival, train.run, train.cpu, train.memory_mib, train.gpu_milli) == (
        0,
        600,
        4000,
        8192,
        2000,
    )
    assert train.qos == "BE" and train.home == "east-cpu" and train.datasets == ("eu-customers",)
    assert (load.arrival, load.cpu, load.memory_mib, load.gpu_milli, load.qos) == (
        120,
        500,
        1024,
        0,
        "Burstable",
    )


def test_export_window_and_bad_options(
    history: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "pods.csv"
    since = (BASE_TIME + timedelta(seconds=100)).isoformat()
    assert cli.main(["history", "export", "--out", str(out), "--since", since]) == 0
    assert [pod.name for pod in read_pods(out)] == ["etl.load@manual__1", "etl.broken@manual__1"]
    capsys.readouterr()
    assert cli.main(["history", "export", "--out", str(out), "--since", "yesterday"]) == 2
    assert "--since" in capsys.readouterr().err
    assert cli.main(["history", "export", "--out", str(tmp_path / "missing" / "p.csv")]) == 2
    assert "--out" in capsys.readouterr().err
