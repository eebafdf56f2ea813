"""The Federation JSON API over real XCom rows in the session's SQLite metadata database."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from tests.plugins import records

pytestmark = pytest.mark.airflow


@pytest.fixture(scope="module")
def client(airflow_db: None) -> Iterator[Any]:
    """A TestClient for the plugin's app, authenticated by overriding Airflow's user dependency."""
    from airflow.api_fastapi.core_api.security import get_user
    from fastapi.testclient import TestClient

    from airflow_provider_fedsched.plugins.app import create_app

    app = create_app()
    app.dependency_overrides[get_user] = lambda: object()
    # The rows below have no DAG in the database, so the auth manager's DAG filter would hide them.
    app.dependency_overrides[app.state.readable_dag_ids] = lambda: None
    app.dependency_overrides[app.state.signed_in] = lambda: True
    rows = [
        {
            "dag_id": "etl",
            "run_id": "manual__1",
            "task_id": "extract",
            "value": records.record(task_id="extract"),
        },
        {
            "dag_id": "etl",
            "run_id": "manual__1",
            "task_id": "load",
            "value": records.record(task_id="load", clusters=("east-cpu", "north-gpu")),
        },
        {
            "dag_id": "etl",
            "run_id": "manual__2",
            "task_id": "load",
            "value": records.record(
                run_id="manual__2", task_id="load", clusters=("west-general",), outcome="failed"
            ),
        },
        {
            "dag_id": "report",
            "run_id": "manual__1",
            "task_id": "render",
            "map_index": 3,
            "value": records.record(dag_id="report", task_id="render", map_index=3, clusters=("north-gpu",)),
        },
        {"dag_id": "report", "run_id": "manual__1", "task_id": "broken", "raw_value": "not json {"},
        {"dag_id": "report", "run_id": "manual__1", "task_id": "foreign", "raw_value": json.dumps([1, 2, 3])},
        {"dag_id": "report", "run_id": "manual__1", "task_id": "other", "raw_value": json.dumps({"x": 1})},
    ]
    for minute, row in enumerate(rows):
        row["timestamp"] = records.BASE_TIME + timedelta(minutes=minute)
    records.clear_xcoms()
    records.insert_xcoms(rows)
    with TestClient(app) as test_client:
        yield test_client
    records.clear_xcoms()


def placements(client: Any, **params: Any) -> dict[str, Any]:
    response = client.get("/api/placements", params=params)
    assert response.status_code == 200, response.text
    return response.json()


def test_newest_first_with_total(client: Any) -> None:
    data = placements(client)
    assert data["total"] == 7
    assert [r["task_id"] for r in data["placements"]] == [
        "other",
        "foreign",
        "broken",
        "render",
        "load",
        "load",
        "extract",
    ]


def test_pagination(client: Any) -> None:
    first = placements(client, limit=3, offset=0)["placements"]
    second = placements(client, limit=3, offset=3)["placements"]
    last = placements(client, limit=3, offset=6)
    assert len(first) == len(second) == 3 and len(last["placements"]) == 1 and last["total"] == 7
    assert {r["task_id"] for r in first}.isdisjoint({r["run_id"] + r["task_id"] for r in second})


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({"dag_id": "etl"}, {("manual__1", "extract"), ("manual__1", "load"), ("manual__2", "load")}),
        ({"dag_id": "etl", "run_id": "manual__2"}, {("manual__2", "load")}),
        ({"task_id": "load"}, {("manual__1", "load"), ("manual__2", "load")}),
        # the cluster filter matches where a try ran and every cluster it attempted
        ({"cluster": "east-cpu"}, {("manual__1", "extract"), ("manual__1", "load")}),
        ({"cluster": "north-gpu"}, {("manual__1", "load"), ("manual__1", "render")}),
        ({"outcome": "failed"}, {("manual__2", "load")}),
        ({"outcome": "failover"}, {("manual__1", "load")}),
        ({"cluster": "west-general", "outcome": "succeeded"}, set()),
    ],
)
def test_filters(client: Any, params: dict[str, str], expected: set[tuple[str, str]]) -> None:
    data = placements(client, **params)
    assert {(r["run_id"], r["task_id"]) for r in data["placements"]} == expected
    assert data["total"] == len(expected)


def test_failover_row(client: Any) -> None:
    (row,) = placements(client, outcome="failover")["placements"]
    assert row["failover"] is True and row["cluster"] == "north-gpu" and row["failover_seconds"] == 1.25
    assert [(a["cluster"], a["outcome"]) for a in row["attempts"]] == [
        ("east-cpu", "insufficient"),
        ("north-gpu", "succeeded"),
    ]
    assert row["attempts"][0]["reason"] == "quota exceeded on east-cpu"
    assert row["task_instance_url"] == "/dags/etl/runs/manual__1/tasks/load"


def test_mapped_task_link(client: Any) -> None:
    (row,) = placements(client, task_id="render")["placements"]
    assert row["task_instance_url"] == "/dags/report/runs/manual__1/tasks/render/mapped/3"


def test_unreadable_values_are_rows_not_errors(client: Any) -> None:
    rows = {r["task_id"]: r for r in placements(client, dag_id="report")["placements"]}
    for task_id in ("broken", "foreign", "other"):
        assert rows[task_id]["readable"] is False, task_id
        assert rows[task_id]["error"].startswith(("not JSON", "not a placement record"))
    detail = client.get("/api/placements/report/manual__1/broken")
    assert detail.status_code == 200 and detail.json()["readable"] is False


def test_decision_detail(client: Any) -> None:
    response = client.get("/api/placements/etl/manual__1/load", params={"try_number": 1})
    assert response.status_code == 200, response.text
    detail = response.json()
    assert len(detail["decisions"]) == 2
    first = detail["decisions"][0]
    assert first["readable"] and first["cluster"] == "east-cpu" and first["plugins"] == ["Cost", "Locality"]
    assert first["candidates"][0]["breakdown"]["Cost"]["weight"] == 2.0
    assert first["rejected"][0]["plugin"] == "Sovereignty"


def test_decision_detail_not_found(client: Any) -> None:
    assert client.get("/api/placements/etl/manual__1/nope").status_code == 404
    # Airflow clears XComs when a task runs again: an earlier try has no record any more
    assert client.get("/api/placements/etl/manual__1/load", params={"try_number": 2}).status_code == 404


def test_the_listing_says_what_counts_as_a_large_move(client: Any) -> None:
    data = placements(client, task_id="extract")
    assert data["large_egress_gb"] == 100.0
    (row,) = data["placements"]
    assert row["cost"] == 0.0 and row["egress_gb"] == 0.0 and row["large_egress"] is False


def test_bad_parameters(client: Any) -> None:
    assert client.get("/api/placements", params={"outcome": "exploded"}).status_code == 422
    assert client.get("/api/placements", params={"limit": 0}).status_code == 422
    assert client.get("/api/placements", params={"limit": 10_000}).status_code == 422


def test_clusters_without_a_spec_explains(client: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AIRFLOW__FEDSCHED__FEDERATION_SPEC", raising=False)
    data = client.get("/api/clusters").json()
    assert data["clusters"] == [] and "federation_spec" in data["error"]


def test_only_readable_dags_are_listed(client: Any) -> None:
    app = client.app
    app.dependency_overrides[app.state.readable_dag_ids] = lambda: frozenset({"report"})
    try:
        assert {r["dag_id"] for r in placements(client)["placements"]} == {"report"}
        assert client.get("/api/placements/etl/manual__1/load").status_code == 404
    finally:
        app.dependency_overrides[app.state.readable_dag_ids] = lambda: None


def test_page_and_static_files(client: Any) -> None:
    page = client.get("/ui")
    assert page.status_code == 200 and "static/federation.js" in page.text
    assert client.get("/static/federation.js").status_code == 200
    assert client.get("/static/federation.css").headers["content-type"].startswith("text/css")
    assert client.get("/static/..%2Fapp.py").status_code == 404
    assert "//" not in page.text.replace("<!doctype", "")  # no external (CDN) assets


API_PATHS = [
    "/static/federation.js",
    "/static/charts.js",
    "/api/clusters",
    "/api/placements",
    "/api/tenants",
    "/api/costs",
    "/api/utilization",
]


@pytest.mark.parametrize("path", API_PATHS)
def test_refused_without_credentials(airflow_db: None, path: str) -> None:
    from fastapi.testclient import TestClient

    from airflow_provider_fedsched.plugins.app import create_app

    with TestClient(create_app()) as anonymous:
        assert anonymous.get(path).status_code in (401, 403)
        assert anonymous.get(path, headers={"Authorization": "Bearer not-a-token"}).status_code in (401, 403)


def test_the_page_signed_out_redirects_to_the_login(airflow_db: None) -> None:
    """A browser signed out is sent to Airflow's login, which comes back to the page (query kept)."""
    from airflow.api_fastapi.app import create_auth_manager
    from fastapi.testclient import TestClient

    from airflow_provider_fedsched.plugins.app import create_app

    create_auth_manager()
    with TestClient(create_app(), follow_redirects=False) as anonymous:
        for headers in ({}, {"Authorization": "Bearer not-a-token"}):
            response = anonymous.get("/ui", params={"dag_id": "etl", "task_id": "load"}, headers=headers)
            assert response.status_code == 307, response.text
            location = response.headers["location"]
            assert location.startswith("/auth/") and "login" in location, location
            assert "next=%2Ffedsched%2Fui%3Fdag_id%3Detl%26task_id%3Dload" in location


def test_rows_show_each_attempts_cost_and_egress_and_mark_a_large_move() -> None:
    from airflow_provider_fedsched.plugins import history

    value = records.record(clusters=("east-cpu", "north-gpu"))
    first, second = value["attempts"]
    # east-cpu never ran the pod (nothing moved, nothing charged); north-gpu ran it for an hour and read
    # a 1 TB dataset from elsewhere.
    first.update(cost=0.0, price_per_hour=0.5, egress_gb=1000.0, egress_cost=50.0, running_at=None)
    second.update(
        price_per_hour=2.0,
        egress_gb=1000.0,
        egress_cost=80.0,
        running_at=(records.BASE_TIME - timedelta(hours=1)).isoformat(),
        cost=82.0,
    )
    row = history.placement_row(
        json.dumps(value), dag_id="etl", run_id="r", task_id="load", map_index=-1, recorded_at=None
    )
    assert [(a["cluster"], a["cost"], a["egress_gb"], a["egress_cost"]) for a in row["attempts"]] == [
        ("east-cpu", 0.0, 0.0, 0.0),
        ("north-gpu", 82.0, 1000.0, 80.0),
    ]
    assert row["cost"] == 82.0 and row["egress_gb"] == 1000.0 and row["large_egress"] is True
    small = history.placement_row(
        json.dumps(records.record()), dag_id="etl", run_id="r", task_id="x", map_index=-1, recorded_at=None
    )
    assert small["egress_gb"] == 0.0 and small["large_egress"] is False


def test_a_divided_job_s_row_and_decision_detail_show_each_slice_its_indices_cost_and_egress() -> None:
    """Issue 31: which member ran which indices, and each slice's estimate, where decisions are explained."""
    from airflow_provider_fedsched.plugins import history

    value = records.record(clusters=("east-cpu", "north-gpu"))
    east, north = value["attempts"]
    east.update(outcome="succeeded", indices="0-11", price_per_hour=0.5, egress_gb=0.0, egress_cost=0.0)
    ran = (records.BASE_TIME - timedelta(minutes=30)).isoformat()
    north.update(indices="12-19", price_per_hour=0.4, egress_gb=100.0, egress_cost=5.0, running_at=ran)
    slices = {
        "east-cpu": {"indices": "0-11", "parallelism": 12, "total": 0.25, "egress_gb": 0.0},
        "north-gpu": {"indices": "12-19", "parallelism": 8, "total": 5.2, "egress_gb": 100.0},
    }
    division = {
        "east-cpu": "12 of 20 waiting indices: room for 12 pod(s) now",
        "west-general": "excluded: Sovereignty: ...",
    }
    value["decisions"] = value["decisions"][:1]  # one decision dealt both slices
    value["decisions"][0]["extra"] = {"slices": slices, "division": division}
    detail = history.placement_detail(
        json.dumps(value), dag_id="etl", run_id="r", task_id="shards", map_index=-1, recorded_at=None
    )
    assert [(a["cluster"], a["indices"], a["egress_gb"]) for a in detail["attempts"]] == [
        ("east-cpu", "0-11", 0.0),
        ("north-gpu", "12-19", 100.0),
    ]
    (decision,) = detail["decisions"]
    assert decision["extra"] == {"slices": slices, "division": division}
    plain = history.placement_row(
        json.dumps(records.record()), dag_id="etl", run_id="r", task_id="x", map_index=-1, recorded_at=None
    )
    assert [a["indices"] for a in plain["attempts"]] == [None]


def test_a_try_still_waiting_counts_its_wait_so_far() -> None:
    """The Waited column of a try that waits right now is the wait so far, as its live state says, not the
    0 s of the waits that ended; a try that ended keeps what it recorded."""
    from datetime import UTC, datetime

    from airflow_provider_fedsched.plugins import history

    since = datetime.now(UTC) - timedelta(seconds=54)
    waiting = records.record(clusters=(), outcome="waiting")
    waiting.update(ended_at=None, waiting_since=since.isoformat(), waited_seconds=6.0, reason="no room")
    before = datetime.now(UTC)
    row = history.placement_row(
        json.dumps(waiting), dag_id="etl", run_id="r", task_id="w", map_index=-1, recorded_at=None
    )
    after = datetime.now(UTC)
    assert row["live"] == {"state": "waiting", "since": since.isoformat(), "why": "no room"}
    # 6 s of an earlier wait of the try, and this one's 54 s (and the moment the row took).
    assert 6 + (before - since).total_seconds() - 0.001 <= row["waited_seconds"]
    assert row["waited_seconds"] <= 6 + (after - since).total_seconds() + 0.001

    ended = records.record()
    ended.update(waited_seconds=12.5, waiting_since=since.isoformat())  # an ended try's clock has stopped
    row = history.placement_row(
        json.dumps(ended), dag_id="etl", run_id="r", task_id="e", map_index=-1, recorded_at=None
    )
    assert row["waited_seconds"] == 12.5
