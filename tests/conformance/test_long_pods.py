"""Pods that run for minutes, with their logs followed, on real control planes at time scale 1 (issue 34).

Two members with one 6-cpu node each, as a new user makes them; no fault at all. Six tasks at once, each in
its own ``airflow dags test`` process: sync and deferrable, pods of 45 s, 75 s and 5 minutes, every one
with ``get_logs=True``. Every task succeeds, every log line is in its task's log once, each task's pod was
created once (the API servers' audit logs), none is left, and nothing is written outside the state dir.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_fedsched.testbed import TestbedFederation
from tests.conformance.conftest import running
from tests.conformance.dags.long_pod_dags import SECONDS, dag_id, lines

DAG_FILE = Path(__file__).parent / "dags" / "long_pod_dags.py"
DAGS = [(mode, seconds) for seconds in SECONDS for mode in ("sync", "deferrable")]


def _outside_the_state_dir() -> dict[str, set[str]]:
    """Where the test bed wrote outside its state dir before: the root's entries (the ``/airflow/xcom``
    link) and its pods' folders in the temporary directory (other test beds' state dirs may come and go
    there meanwhile)."""
    temp = Path(tempfile.gettempdir())
    return {
        "/": {p.name for p in Path("/").iterdir()},
        str(temp): {p.name for p in temp.iterdir() if p.name.startswith("fedsched-testbed-pods")},
    }


@pytest.fixture(scope="module")
def two_members(airflow_db: None) -> Iterator[tuple[TestbedFederation, dict[str, set[str]]]]:
    before = _outside_the_state_dir()
    cfg = {
        "time_scale": 1,
        "clusters": [
            {
                "name": name,
                "region": region,
                "node_pools": [{"name": "p", "count": 1, "cpu": "6", "memory": "24Gi"}],
            }
            for name, region in (("tll-a", "eu-north"), ("tll-b", "eu-west"))
        ],
    }
    with running(TestbedFederation(cfg)) as fed:
        yield fed, before


def _created_pods(fed: TestbedFederation, prefix: str) -> list[str]:
    """Pods named ``prefix...`` the API servers created (201), from their audit logs: ``cluster/name``."""
    created = []
    for name, cluster in fed.clusters.items():
        for line in (cluster.root / "logs" / "audit.log").read_text().splitlines():
            event: dict[str, Any] = json.loads(line) if line.startswith("{") else {}
            ref = event.get("objectRef") or {}
            if (
                event.get("verb") == "create"
                and ref.get("resource") == "pods"
                and not ref.get("subresource")
                and str(ref.get("name", "")).startswith(prefix)
                and (event.get("responseStatus") or {}).get("code") == 201
            ):
                created.append(f"{name}/{ref['name']}")
    return created


@pytest.mark.timeout(1500)  # a 5-minute pod, six Airflow processes starting on a shared 2-core machine
def test_pods_that_run_for_minutes_succeed_with_every_log_line_once(
    two_members: tuple[TestbedFederation, dict[str, set[str]]], tmp_path: Path
) -> None:
    fed, before = two_members
    airflow = str(Path(sys.executable).with_name("airflow"))
    homes = {key: _airflow_home(tmp_path / dag_id(*key)) for key in DAGS}
    runs = {
        (mode, seconds): subprocess.Popen(
            [airflow, "dags", "test", dag_id(mode, seconds)],
            env={
                **os.environ,
                **fed.airflow_env_vars(),
                **homes[(mode, seconds)],
                "AIRFLOW__FEDSCHED__FEDERATION_SPEC": str(fed.state_dir / "federation.yaml"),
            },
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for mode, seconds in DAGS
    }
    outputs = {key: proc.communicate(timeout=900)[0] for key, proc in runs.items()}
    for key, out in outputs.items():  # kept with the test's temporary files, for a failure's story
        (tmp_path / f"{dag_id(*key)}.log").write_text(out)

    for (mode, seconds), out in outputs.items():
        name = dag_id(mode, seconds)
        assert runs[(mode, seconds)].returncode == 0, f"{name}:\n{out[-4000:]}"
        assert "returned a failure" not in out and "is a directory" not in out, f"{name}:\n{out[-4000:]}"
        assert _task_state(homes[(mode, seconds)], name) == "success", f"{name}:\n{out[-4000:]}"
        for line in lines(mode, seconds):
            # Sync: the followed stream's lines; deferrable: the provider's read after the end ("logs: ").
            printed = re.findall(rf"\[base\] (?:logs: )?{re.escape(line)}(?:\s|$)", out)
            assert len(printed) == 1, f"{name}: {line!r} printed {len(printed)} times:\n{out[-4000:]}"
        created = _created_pods(fed, name.replace("_", "-"))
        assert len(created) == 1, f"{name}: pods created {created}"
    assert all(not handle.pods() for handle in fed), "pods left behind"
    assert _outside_the_state_dir() == before


def _airflow_home(home: Path) -> dict[str, str]:
    """An Airflow home of its own for one ``dags test`` process (six writers at once would lock one
    SQLite file): the session's migrated database copied, a DAGs folder with only the long pods' DAGs."""
    (home / "dags").mkdir(parents=True)
    (home / "dags" / DAG_FILE.name).symlink_to(DAG_FILE)
    session_db = os.environ["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].removeprefix("sqlite:///")
    with sqlite3.connect(session_db) as source, sqlite3.connect(home / "airflow.db") as copy:
        source.backup(copy)  # whatever the session's connections still hold in its write-ahead log
    return {
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(home / "dags"),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
    }


def _task_state(home: dict[str, str], dag: str) -> str:
    """The task's state in the process's own database."""
    with sqlite3.connect(home["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].removeprefix("sqlite:///")) as db:
        rows = db.execute("SELECT state FROM task_instance WHERE dag_id = ?", (dag,)).fetchall()
    return str(rows[-1][0]) if rows else "none"
