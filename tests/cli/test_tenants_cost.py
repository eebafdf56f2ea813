"""``fedsched tenants`` and ``fedsched cost`` through the real entry point: tables, JSON, exit 2 on bad
input naming the option."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from airflow_provider_fedsched import cli

SPEC: dict[str, Any] = {
    "name": "teams-cli",
    "clusters": [
        {"name": "a", "conn_id": "k8s_a", "region": "r1"},
        {"name": "b", "conn_id": "k8s_b", "region": "r1"},
    ],
    "tenants": [
        {
            "name": "team-ml",
            "quota": {"nvidia.com/gpu": 64, "pods": 10},
            "weight": 3,
            "budget": {"max_cost": 500},
        },
        {"name": "team-bi", "quota": {"cpu": "8"}},
    ],
}
SNAPSHOTS = {
    "clusters": [
        {
            "cluster": name,
            "observed_at": datetime.now(UTC).isoformat(),
            "nodes": [{"name": f"{name}0", "allocatable": {"cpu": "64", "nvidia.com/gpu": "32"}}],
            "tenants": {"team-ml": {"nvidia.com/gpu": "30", "pods": "3"}},
        }
        for name in ("a", "b")
    ]
}


@pytest.fixture
def files(tmp_path: Path) -> tuple[str, str]:
    spec, snapshots = tmp_path / "federation.yaml", tmp_path / "snapshots.yaml"
    spec.write_text(yaml.safe_dump(SPEC))
    snapshots.write_text(yaml.safe_dump(SNAPSHOTS))
    return str(spec), str(snapshots)


def json_out(out: str) -> Any:
    """The JSON document the command printed (Airflow's test configuration logs a line before it)."""
    return json.loads(out[out.index("{") :])


def test_tenants_from_a_snapshot_file(files: tuple[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    spec, snapshots = files
    assert cli.main(["tenants", "--federation", spec, "--snapshots", snapshots, "--json"]) == cli.EXIT_OK
    rows = {row["tenant"]: row for row in json_out(capsys.readouterr().out)["tenants"]}
    assert rows["team-ml"]["used"] == {"nvidia.com/gpu": "60", "pods": "6"}
    assert rows["team-ml"]["quota"] == {"nvidia.com/gpu": "64", "pods": "10"}
    assert rows["team-bi"]["used"] == {}
    assert cli.main(["tenants", "--federation", spec, "--snapshots", snapshots]) == cli.EXIT_OK
    table = capsys.readouterr().out
    assert "Tenants" in table and "nvidia.com/gpu 60/64" in table and "0.00 / 500 (month)" in table


def test_bad_input_exits_2_naming_the_option(
    files: tuple[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec, _ = files
    bare = tmp_path / "bare.yaml"
    bare.write_text(yaml.safe_dump({"clusters": SPEC["clusters"]}))
    broken = tmp_path / "broken.yaml"
    broken.write_text(
        yaml.safe_dump(
            {"clusters": [{"cluster": "a", "observed_at": "x", "tenants": {"t": {"cpu": "lots"}}}]}
        )
    )
    cases = [
        (["tenants", "--federation", str(bare)], "the spec has no tenants"),
        (["tenants", "--federation", spec, "--snapshots", str(broken)], "--snapshots"),
        (["cost", "--federation", spec, "--by", "planet"], "--by: unknown group 'planet'"),
        (["cost", "--federation", spec, "--since", "soon"], "--since: 'soon' is not a duration"),
        (["cost", "--federation", str(tmp_path / "missing.yaml")], "--federation"),
    ]
    for argv, message in cases:
        assert cli.main(argv) == cli.EXIT_BAD_INPUT, argv
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err, err


Charge = tuple[str, str, str, float, float, str, int]
"""(placement id, tenant, DAG, cost, egress GB, outcome, hours ago), on cluster ``a``."""


def record_charges(hook: Any, now: datetime, charges: list[Charge]) -> None:
    for pid, tenant, dag, cost, gb, outcome, age in charges:
        at = (now - timedelta(hours=age)).isoformat()
        hook.charge(
            pid,
            {
                "tenant": tenant,
                "dag_id": dag,
                "cost": cost,
                "egress_gb": gb,
                "at": at,
                "outcome": outcome,
                "cluster": "a",
            },
        )


def test_cost_report_from_the_deployments_charges(
    files: tuple[str, str], airflow_db: None, capsys: pytest.CaptureFixture[str]
) -> None:
    from airflow_provider_fedsched.hooks.federation import FederationHook
    from airflow_provider_fedsched.state import AirflowVariableStateBackend

    spec, _ = files
    hook = FederationHook(spec, state=AirflowVariableStateBackend())
    record_charges(
        hook,
        datetime.now(UTC),
        [
            ("p1", "team-ml", "train", 12.5, 0.0, "succeeded", 1),
            ("p2", "team-ml", "train", 2.5, 100.0, "evicted", 1),
            ("p3", "team-bi", "report", 1.0, 0.0, "succeeded", 1),
            ("p4", "team-bi", "report", 99.0, 0.0, "succeeded", 24 * 40),  # outside --since 30d
        ],
    )
    assert cli.main(["cost", "--federation", spec, "--json"]) == cli.EXIT_OK
    rows = json_out(capsys.readouterr().out)["rows"]
    assert rows == [
        {"tenant": "team-ml", "attempts": 2, "failed_attempts": 1, "cost": 15.0, "egress_gb": 100.0},
        {"tenant": "team-bi", "attempts": 1, "failed_attempts": 0, "cost": 1.0, "egress_gb": 0.0},
    ]
    assert cli.main(["cost", "--federation", spec, "--by", "dag"]) == cli.EXIT_OK
    table = capsys.readouterr().out
    assert "Cost by dag" in table and "train" in table and "15.00" in table
