"""The Federation page's Tenants, costs and utilization API over the deployment's shared state (Airflow
Variables in the session's SQLite database): the same figures as ``fedsched tenants`` / ``fedsched cost``,
the history samples as recorded, and a 4xx naming the parameter for bad input."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from airflow_provider_fedsched import cli
from airflow_provider_fedsched.federation.snapshot import ClusterSnapshot, NodeSnapshot
from tests.cli import test_tenants_cost

pytestmark = pytest.mark.airflow

SPEC: dict[str, Any] = {**test_tenants_cost.SPEC, "name": "teams-page"}
"""The command line's tests' tenants (team-ml: 64 GPUs, 10 pods, a budget of 500; team-bi: 8 cpu)."""
NOW = datetime.now(UTC)
# (placement id, tenant, DAG, cost, egress GB, outcome, hours ago)
CHARGES: list[test_tenants_cost.Charge] = [
    ("p1", "team-ml", "train", 12.5, 0.0, "succeeded", 1),
    ("p2", "team-ml", "train", 2.5, 1000.0, "evicted", 1),
    ("p3", "team-bi", "report", 1.0, 0.0, "succeeded", 1),
    ("p4", "team-bi", "report", 4.0, 0.0, "succeeded", 49),
    ("p5", "team-bi", "report", 99.0, 0.0, "succeeded", 24 * 40),  # outside the default 14 days
]


# (cluster, seconds waited before the first placement, tenant, hours ago)
WAITS: list[tuple[str, float, str, float]] = [
    ("a", 0.0, "team-ml", 1),
    ("a", 0.4, "team-ml", 1),
    ("b", 42.0, "team-ml", 2),
    ("a", 3599.0, "team-bi", 3),
    ("b", 7200.0, "", 3),
    ("a", 5.0, "team-bi", 24 * 20),  # outside the default 14 days
]


@pytest.fixture(scope="module")
def site(airflow_db: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    from airflow.api_fastapi.core_api.security import get_user
    from fastapi.testclient import TestClient

    from airflow_provider_fedsched.hooks.federation import FederationHook
    from airflow_provider_fedsched.plugins.app import create_app

    spec = tmp_path_factory.mktemp("teams") / "federation.yaml"
    spec.write_text(yaml.safe_dump(SPEC))
    hook = FederationHook(str(spec), state="airflow")
    for name in hook.state.backend.get_many(hook.state.prefix + "/"):  # a clean slate for this spec
        hook.state.backend.delete(name)
    test_tenants_cost.record_charges(hook, NOW, CHARGES)
    snapshots = []
    for minute, (name, used) in enumerate([("a", 8), ("b", 16), ("a", 32)]):
        snapshots.append(
            ClusterSnapshot(
                cluster=name,
                observed_at=NOW - timedelta(minutes=10 - minute),
                nodes=[
                    NodeSnapshot(
                        name=f"{name}0",
                        allocatable={"cpu": 64_000, "nvidia.com/gpu": 32},
                        requested={"cpu": used * 1000},
                    )
                ],
                tenants={"team-ml": {"nvidia.com/gpu": 30, "pods": 3}},
            )
        )
    for snapshot in snapshots:  # as hooks/sensing.py does for every snapshot collected
        hook.state.snapshots.put([snapshot])
        hook.record(snapshot.cluster, "utilization", _sample(snapshot))
    for cluster, seconds, tenant, hours_ago in WAITS:  # as operators/records.note_placed does
        at = (NOW - timedelta(hours=hours_ago)).isoformat()
        hook.record(cluster, "wait", {"at": at, "seconds": seconds, "tenant": tenant, "dag_id": "d"})
    app = create_app()
    app.dependency_overrides[get_user] = lambda: object()
    mp = pytest.MonkeyPatch()
    mp.setenv("AIRFLOW__FEDSCHED__FEDERATION_SPEC", str(spec))
    with TestClient(app) as client:
        yield {"client": client, "spec": str(spec), "hook": hook}
    mp.undo()


def _sample(snapshot: ClusterSnapshot) -> dict[str, Any]:
    from airflow_provider_fedsched.hooks.sensing import _utilization_sample

    return _utilization_sample(snapshot)


def get(site: dict[str, Any], path: str, **params: Any) -> Any:
    response = site["client"].get(path, params=params)
    assert response.status_code == 200, response.text
    return response.json()


def cli_json(argv: list[str], capsys: pytest.CaptureFixture[str]) -> Any:
    assert cli.main([*argv, "--json"]) == cli.EXIT_OK
    out = capsys.readouterr().out
    return json.loads(out[out.index("{") :])


def test_tenants_are_what_fedsched_tenants_prints(
    site: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    data = get(site, "/api/tenants")
    assert data["federation"] == "teams-page" and data["error"] is None
    assert data["tenants"] == cli_json(["tenants", "--federation", site["spec"]], capsys)["tenants"]
    rows = {row["tenant"]: row for row in data["tenants"]}
    # Usage from the newest snapshot of each member (a: 30, b: 30 GPUs); cost from this month's charges.
    assert rows["team-ml"]["used"] == {"nvidia.com/gpu": "60", "pods": "6"}
    assert rows["team-ml"]["quota"] == {"nvidia.com/gpu": "64", "pods": "10"}
    assert rows["team-ml"]["cost"] == 15.0 and rows["team-ml"]["egress_gb"] == 1000.0
    assert rows["team-ml"]["max_cost"] == 500 and rows["team-ml"]["waiting"] == 0


def test_cost_per_day_per_tenant_from_the_charges(
    site: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    data = get(site, "/api/costs", by="day", split="tenant", days=14)
    assert data["charges"] == 4  # the 40-day-old charge is outside the window
    assert (
        data["rows"]
        == cli_json(["cost", "--federation", site["spec"], "--by", "day", "--since", "14d"], capsys)["rows"]
    )
    today, two_days_ago = (
        (NOW - timedelta(hours=1)).date().isoformat(),
        (NOW - timedelta(hours=49)).date().isoformat(),
    )
    series = {s["tenant"]: {row["day"]: row["cost"] for row in s["rows"]} for s in data["series"]}
    assert series == {"team-bi": {two_days_ago: 4.0, today: 1.0}, "team-ml": {today: 15.0}}
    by_dag = get(site, "/api/costs", by="dag")
    assert [(row["dag"], row["cost"], row["failed_attempts"]) for row in by_dag["rows"]] == [
        ("train", 15.0, 1),
        ("report", 5.0, 0),
    ]
    assert get(site, "/api/costs", by="tenant", days=62)["charges"] == 5


def test_utilization_is_the_recorded_history(site: dict[str, Any]) -> None:
    data = get(site, "/api/utilization")
    samples = {c["cluster"]: c["samples"] for c in data["clusters"]}
    assert samples == {name: site["hook"].history(name, "utilization") for name in ("a", "b")}
    assert [s["used_fraction"]["cpu"] for s in samples["a"]] == [0.125, 0.5]
    (only,) = get(site, "/api/utilization", cluster="a", limit=1)["clusters"]
    assert only["cluster"] == "a" and [s["used_fraction"]["cpu"] for s in only["samples"]] == [0.5]


@pytest.mark.parametrize(
    ("path", "params", "named"),
    [
        ("/api/costs", {"by": "planet"}, "by"),
        ("/api/costs", {"by": "day", "split": "day"}, "split"),
        ("/api/costs", {"split": "galaxy"}, "split"),
        ("/api/costs", {"days": 0}, "days"),
        ("/api/costs", {"days": 10_000}, "days"),
        ("/api/costs", {"days": "soon"}, "days"),
        ("/api/utilization", {"cluster": "nowhere"}, "cluster"),
        ("/api/utilization", {"limit": 0}, "limit"),
        ("/api/utilization", {"limit": "many"}, "limit"),
    ],
)
def test_bad_parameters_are_a_4xx_naming_the_parameter(
    site: dict[str, Any], path: str, params: dict[str, Any], named: str
) -> None:
    response = site["client"].get(path, params=params)
    assert response.status_code == 422, response.text
    detail = response.json()["detail"]
    if isinstance(detail, str):
        assert detail.startswith(f"{named}: "), detail
    else:  # FastAPI's validation error: the parameter is in the location
        assert [error["loc"] for error in detail] == [["query", named]], detail


def test_without_tenants_the_view_says_so(
    site: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bare = tmp_path / "bare.yaml"
    bare.write_text(yaml.safe_dump({"name": "bare-page", "clusters": SPEC["clusters"]}))
    monkeypatch.setenv("AIRFLOW__FEDSCHED__FEDERATION_SPEC", str(bare))
    assert get(site, "/api/tenants")["tenants"] == []
    monkeypatch.delenv("AIRFLOW__FEDSCHED__FEDERATION_SPEC")
    data = get(site, "/api/tenants")
    assert data["tenants"] == [] and "federation_spec" in data["error"]


def test_without_a_spec_costs_and_utilization_say_why(
    site: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AIRFLOW__FEDSCHED__FEDERATION_SPEC")
    for path, key in (("/api/costs", "rows"), ("/api/utilization", "clusters")):
        data = get(site, path)  # never a 500
        assert data[key] == [] and "federation_spec" in data["error"], data


def test_wait_times_per_bucket_and_tenant(site: dict[str, Any]) -> None:
    data = get(site, "/api/waits")
    assert data["error"] is None and data["samples"] == 5
    assert data["buckets"] == ["none", "1-10 s", "10 s-1 min", "1-10 min", "10 min-1 h", "over 1 h"]
    assert {s["tenant"]: s["counts"] for s in data["series"]} == {
        "(no tenant)": {"over 1 h": 1},
        "team-bi": {"10 min-1 h": 1},
        "team-ml": {"none": 2, "10 s-1 min": 1},
    }
    assert get(site, "/api/waits", days=62)["samples"] == 6
    response = site["client"].get("/api/waits", params={"days": 0})
    assert response.status_code == 422 and "days" in response.text
