"""The Federation page's Audit API: the report ``fedsched audit --json`` prints, in the exported form that
``fedsched audit verify`` accepts, limited to the DAGs the user may read, with a 4xx naming a bad
parameter."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_fedsched.federation.audit import verify_report
from airflow_provider_fedsched.federation.record import Attempt, PlacementRecord
from tests.hostile.test_files_and_cli import SPEC
from tests.plugins.records import clear_xcoms, insert_xcoms

pytestmark = pytest.mark.airflow
STARTED = datetime(2025, 5, 1, tzinfo=UTC)


def stored(dag_id: str, cluster: str) -> dict[str, Any]:
    record = PlacementRecord(dag_id=dag_id, run_id="r", task_id="t", try_number=1, started_at=STARTED)
    record.request = {"datasets": ["eu-customers"]}
    record.attempts.append(
        Attempt(
            number=1,
            cluster=cluster,
            namespace="default",
            pod="t-1",
            placement_id=record.placement_id(1),
            outcome="succeeded",
            started_at=STARTED,
        )
    )
    value = record.model_dump(mode="json")
    return {"dag_id": dag_id, "run_id": "r", "task_id": "t", "timestamp": STARTED, "value": value}


@pytest.fixture(scope="module")
def client(airflow_db: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from airflow.api_fastapi.core_api.security import get_user
    from fastapi.testclient import TestClient

    from airflow_provider_fedsched.plugins.app import create_app

    spec = tmp_path_factory.mktemp("audit") / "federation.yaml"
    spec.write_text(SPEC)  # eu-customers may stay in eu-west-1 only; eu-a is there, cn-a is not
    clear_xcoms()
    insert_xcoms([stored("stays", "eu-a"), stored("leaves", "cn-a")])
    app = create_app()
    app.dependency_overrides[get_user] = lambda: object()
    app.dependency_overrides[app.state.readable_dag_ids] = lambda: None
    mp = pytest.MonkeyPatch()
    mp.setenv("AIRFLOW__FEDSCHED__FEDERATION_SPEC", str(spec))
    with TestClient(app) as test_client:
        test_client.app_under_test = app
        yield test_client
    mp.undo()
    clear_xcoms()


def test_the_report_is_the_verifiable_export(client: Any, tmp_path: Path) -> None:
    response = client.get("/api/audit", params={"since": "2025-05-01T00:00:00Z", "download": "true"})
    assert response.status_code == 200, response.text
    assert response.headers["content-disposition"].startswith('attachment; filename="audit-hostile-')
    result = verify_report(response.content)
    assert result.ok and result.verdicts == {"compliant": 0, "violation": 1, "unverifiable": 1}
    report = json.loads(response.content)
    verdicts = {e["dag_id"]: (e["cluster"], e["verdict"]) for e in report["entries"]}
    # The members' connections do not exist here: eu-a's placement cannot be cross-checked; cn-a's is a
    # violation by the record alone.
    assert verdicts == {"stays": ("eu-a", "unverifiable"), "leaves": ("cn-a", "violation")}
    assert report["header"]["scope"] == "every DAG"
    assert report["header"]["ledgers"]["eu-a"].startswith("cannot be reached")


def test_only_the_dags_the_user_may_read(client: Any) -> None:
    app = client.app_under_test
    app.dependency_overrides[app.state.readable_dag_ids] = lambda: frozenset({"stays"})
    try:
        report = client.get("/api/audit").json()
    finally:
        app.dependency_overrides[app.state.readable_dag_ids] = lambda: None
    assert [e["dag_id"] for e in report["entries"]] == ["stays"]
    assert report["header"]["scope"] == "the DAGs the requesting user may read"


@pytest.mark.parametrize(
    ("params", "named"),
    [
        ({"since": "yesterday"}, "since"),
        ({"until": "0001-01-01T00:00:00"}, "until: 0001-01-01"),
        ({"since": "2025-06-01T00:00:00Z", "until": "2025-05-01T00:00:00Z"}, "until: not after since"),
        ({"dataset": "nope"}, "dataset: unknown dataset 'nope'"),
        ({"dataset": "x" * 300}, "dataset"),
        ({"download": "maybe"}, "download"),
    ],
)
def test_bad_parameters_are_a_422_naming_them(client: Any, params: dict[str, str], named: str) -> None:
    response = client.get("/api/audit", params=params)
    assert response.status_code == 422, response.text
    assert named in json.dumps(response.json())


def test_a_window_without_tries_is_an_empty_report(client: Any) -> None:
    later = (STARTED + timedelta(days=1)).isoformat()
    report = client.get("/api/audit", params={"since": later}).json()
    assert report["entries"] == [] and report["header"]["entries"] == 0
