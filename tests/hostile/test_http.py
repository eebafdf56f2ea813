"""Hostile input, table-driven: HTTP query parameters and stored XComs of the Federation API, and the
simulator's list parameters. Every bad request is a 4xx naming the parameter (never a 500); a value under
the placement XCom key that cannot be read is a row that says so, never a broken page."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from tests.hostile.harness import Outcome, check, run_bounded
from tests.plugins import records

pytestmark = pytest.mark.airflow

NESTED = "[" * 100_000 + "]" * 100_000
ROWS: list[dict[str, Any]] = [
    {
        "dag_id": "h",
        "run_id": "r",
        "task_id": "good",
        "value": records.record(dag_id="h", run_id="r", task_id="good"),
    },
    {"dag_id": "h", "run_id": "r", "task_id": "nested", "raw_value": json.dumps(NESTED)},
    {"dag_id": "h", "run_id": "r", "task_id": "nested-raw", "raw_value": NESTED},
    {"dag_id": "h", "run_id": "r", "task_id": "deep-object", "raw_value": '{"a":' * 5000 + "1" + "}" * 5000},
    {"dag_id": "h", "run_id": "r", "task_id": "nan", "raw_value": '{"try_number": NaN}'},
    {"dag_id": "h", "run_id": "r", "task_id": "huge-number", "raw_value": '{"try_number": 1e999}'},
    {
        "dag_id": "h",
        "run_id": "r",
        "task_id": "infinite-wait",
        "raw_value": json.dumps(records.record(dag_id="h", run_id="r", task_id="infinite-wait")).replace(
            '"waited_seconds": 0.0', '"waited_seconds": 1e999'
        ),
    },
]


def _app(authenticated: bool) -> Any:
    from airflow.api_fastapi.core_api.security import get_user

    from airflow_provider_fedsched.plugins.app import create_app

    app = create_app()
    if authenticated:
        app.dependency_overrides[get_user] = lambda: object()
    app.dependency_overrides[app.state.readable_dag_ids] = lambda: None
    return app


@pytest.fixture(scope="module")
def client(airflow_db: None) -> Iterator[Any]:
    from fastapi.testclient import TestClient

    for minute, row in enumerate(ROWS):
        row["timestamp"] = records.BASE_TIME + timedelta(minutes=minute)
    records.clear_xcoms()
    records.insert_xcoms(ROWS)
    with TestClient(_app(authenticated=True), raise_server_exceptions=False) as test_client:
        yield test_client
    records.clear_xcoms()


def _get(client: Any, path: str) -> Outcome:
    response = client.get(path)
    return Outcome("http", response.status_code, response.text)


DETAIL = "/api/placements/h/r/good"
# (id, path, status, culprit)
QUERY_CASES: list[tuple[str, str, int, str]] = [
    ("offset 2^63", "/api/placements?offset=9223372036854775808", 422, "offset"),
    ("offset -1", "/api/placements?offset=-1", 422, "offset"),
    ("offset abc", "/api/placements?offset=abc", 422, "offset"),
    ("offset 1e20", "/api/placements?offset=1e20", 422, "offset"),
    ("limit 0", "/api/placements?limit=0", 422, "limit"),
    ("limit 10^6", "/api/placements?limit=1000000", 422, "limit"),
    ("outcome bogus", "/api/placements?outcome=bogus", 422, "outcome"),
    ("map_index 1e20", f"{DETAIL}?map_index=1e20", 422, "map_index"),
    ("map_index 2^63", f"{DETAIL}?map_index=9223372036854775808", 422, "map_index"),
    ("map_index -2", f"{DETAIL}?map_index=-2", 422, "map_index"),
    ("try_number -5", f"{DETAIL}?try_number=-5", 422, "try_number"),
    ("try_number 2^40", f"{DETAIL}?try_number=1099511627776", 422, "try_number"),
]


@pytest.mark.parametrize(
    ("path", "status", "culprit"), [c[1:] for c in QUERY_CASES], ids=[c[0] for c in QUERY_CASES]
)
def test_bad_query_parameter_is_a_4xx_naming_it(client: Any, path: str, status: int, culprit: str) -> None:
    check(*run_bounded(lambda: _get(client, path)), "http", status, culprit)


# (id, task id, what the row's error says): the row is unreadable, the page and the other rows are fine
XCOM_CASES: list[tuple[str, str, str]] = [
    ("XCom nested 100,000 deep (JSON string)", "nested", "nested deeper"),
    ("XCom nested 100,000 deep (raw)", "nested-raw", "nested deeper"),
    ("XCom object nested 5,000 deep", "deep-object", "nested deeper"),
    ("XCom with NaN", "nan", "NaN"),
    ("XCom with 1e999", "huge-number", "beyond a float"),
    ("XCom waited_seconds 1e999", "infinite-wait", "beyond a float"),
]


@pytest.mark.parametrize(("task_id", "error"), [c[1:] for c in XCOM_CASES], ids=[c[0] for c in XCOM_CASES])
def test_a_hostile_xcom_is_an_unreadable_row_never_a_500(client: Any, task_id: str, error: str) -> None:
    outcome, elapsed, peak = run_bounded(lambda: _get(client, f"/api/placements/h/r/{task_id}"))
    check(outcome, elapsed, peak, "http", 200, error)
    assert json.loads(outcome.message)["readable"] is False
    listing = _get(client, "/api/placements?dag_id=h")
    rows = {row["task_id"]: row for row in json.loads(listing.message)["placements"]}
    assert listing.value == 200 and rows["good"]["readable"] is True and rows[task_id]["readable"] is False


def test_openapi_needs_a_user_as_every_route(airflow_db: None) -> None:
    from fastapi.testclient import TestClient

    with TestClient(_app(authenticated=False), raise_server_exceptions=False) as anonymous:
        outcome = run_bounded(lambda: _get(anonymous, "/api/openapi.json"))
        check(*outcome, "http", outcome[0].value, "")
        assert outcome[0].value in (401, 403), outcome[0].message
        assert _get(anonymous, "/api/placements").value in (401, 403)
    with TestClient(_app(authenticated=True)) as user:
        assert "/api/placements" in json.loads(_get(user, "/api/openapi.json").message)["paths"]


@pytest.fixture(scope="module")
def sim_server() -> Iterator[tuple[str, str]]:
    from airflow_provider_fedsched.sim import SimFederation

    with SimFederation(time_scale=0.05) as federation:
        handle = federation.clusters[next(iter(federation.clusters))]
        yield handle.url, handle.token


def _sim_get(url: str, token: str) -> Outcome:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(request, timeout=2) as response:
            return Outcome("http", response.status, response.read().decode())
    except urllib.error.HTTPError as exc:
        return Outcome("http", exc.code, exc.read().decode())


SIM_CASES: list[tuple[str, str, str]] = [
    ("limit=-1", "limit=-1", "limit"),
    ("limit=abc", "limit=abc", "limit"),
    ("continue=garbage", "continue=not-a-token", "continue"),
    ("continue=deep JSON", "continue=" + "W" * 4000, "continue"),
]


@pytest.mark.parametrize(("query", "culprit"), [c[1:] for c in SIM_CASES], ids=[c[0] for c in SIM_CASES])
def test_simulator_list_parameters_are_a_400(sim_server: tuple[str, str], query: str, culprit: str) -> None:
    url, token = sim_server
    outcome = run_bounded(lambda: _sim_get(f"{url}/api/v1/namespaces/default/pods?{query}", token))
    check(*outcome, "http", 400, culprit)


@pytest.mark.parametrize(
    "text", ["not json {", "[" * 5000 + "]" * 5000, '{"until": NaN}'], ids=["not JSON", "nested", "NaN"]
)
def test_a_corrupted_airflow_variable_is_logged_with_its_key_and_read_as_absent(
    airflow_db: None, text: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The deployment's real backend: one corrupted Variable under a cooldown key stops nothing."""
    import logging

    from airflow.models import Variable

    from airflow_provider_fedsched.state import FederationState
    from airflow_provider_fedsched.state.airflow import AirflowVariableStateBackend
    from airflow_provider_fedsched.state.base import forget_logged

    key = "fedsched/hostile-var/cooldown/eu-a"
    Variable.set(key, text)
    forget_logged()
    state = FederationState(AirflowVariableStateBackend(), "hostile-var")

    def read() -> Outcome:
        with caplog.at_level(logging.WARNING):
            found = [
                state.cooldowns.in_force(["eu-a"], records.BASE_TIME),
                state.cooldowns.get("eu-a", records.BASE_TIME),
            ]
        lines = [r.getMessage() for r in caplog.records if key in r.getMessage()]
        return Outcome("read", found, lines[0] if len(lines) == 1 else str(lines))

    try:
        check(*run_bounded(read), "read", [{}, None], f"unreadable stored value under {key}")
    finally:
        Variable.delete(key)
