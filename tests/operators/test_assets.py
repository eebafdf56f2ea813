"""Airflow Assets as datasets in real Airflow on the simulated federation (dag.test): a task whose inlet or
outlet is a sovereign dataset is never placed outside its regions, and its decision and placement record
name the dataset and the asset it came from; a widening extra fails the try before anything is created."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from airflow_provider_fedsched.sim import SimFederation
from tests import airflow_harness
from tests.operators.test_federated_operator import pods_of, xcom

pytestmark = [pytest.mark.airflow]
DAG_FILE = Path(__file__).parent / "dags" / "asset_dags.py"
PATTERNS = {
    "eu-customers": ["s3://eu-lake/customers/*"],
    "user-events": ["s3://cn-lake/user-events/*"],
    "clickstream-archive": ["s3://archive/clickstream/*", "s3://nothing-here/*"],  # matches nothing: fine
}


@pytest.fixture
def asset_federation(federation: Path) -> Path:
    """The simulated federation's spec, its datasets naming their Airflow Assets."""
    spec = yaml.safe_load(federation.read_text())
    for dataset in spec["datasets"]:
        dataset["assets"] = PATTERNS[dataset["name"]]
    federation.write_text(yaml.safe_dump(spec))
    return federation


def run_assets(dag_id: str) -> tuple[str, dict[str, Any] | None]:
    dag_run = airflow_harness.run_dag(DAG_FILE, dag_id)
    record = xcom(dag_run, "fedsched_placement")
    state = airflow_harness.task_states(dag_run)["work"]
    return state, (json.loads(record) if isinstance(record, str) else record)


def clusters_tried(record: dict[str, Any]) -> list[str]:
    return [attempt["cluster"] for attempt in record["attempts"]]


def test_a_sovereign_inlet_keeps_the_task_in_its_regions_and_the_decision_names_it(
    sim_federation: SimFederation, asset_federation: Path
) -> None:
    state, record = run_assets("fed_asset_sovereign")

    assert state == "success" and record is not None
    assert clusters_tried(record) == ["west-general"]  # eu-west-1, despite prefer_region=cn-east-1
    assert record["request"]["assets"] == [
        {
            "uri": "s3://eu-lake/customers/2026.parquet",
            "name": "customers-2026",
            "role": "inlet",
            "fedsched": None,
            "written_on": None,  # no task wrote it before
            "written_region": None,
            "written_size_gb": None,
            "inherited_regions": None,
        }
    ]
    (decision,) = record["decisions"]
    reasons = {r["cluster"]: r["reason"] for r in decision["rejected"]}
    named = "dataset 'eu-customers' (asset 's3://eu-lake/customers/2026.parquet')"
    assert sorted(reasons) == ["east-cpu", "north-gpu"]
    assert all(named in reason for reason in reasons.values()), reasons
    assert pods_of(sim_federation, "fed_asset_sovereign") == []


def test_a_sovereign_outlet_keeps_the_task_in_its_regions(
    sim_federation: SimFederation, asset_federation: Path
) -> None:
    state, record = run_assets("fed_asset_outlet")

    assert state == "success" and record is not None
    assert clusters_tried(record) == ["west-general"]
    assert record["request"]["assets"][0]["role"] == "outlet"


def test_an_extra_narrows_the_rule_of_its_entry(
    sim_federation: SimFederation, asset_federation: Path
) -> None:
    state, record = run_assets("fed_asset_narrowed")

    assert state == "success" and record is not None
    assert clusters_tried(record) == ["north-gpu"]  # cn-north-1 only; user-events itself allows cn-east-1
    reasons = {r["cluster"]: r["reason"] for r in record["decisions"][0]["rejected"]}
    assert (
        "not allowed by dataset 'user-events' (asset 's3://cn-lake/user-events/day=1')" in reasons["east-cpu"]
    )


@pytest.mark.parametrize(
    ("dag_id", "message"),
    [
        (
            "fed_asset_widening",
            "assets[0] (inlet 's3://eu-lake/customers/all'): extra.fedsched.allowed_regions: ['cn-east-1'] "
            "widen spec dataset 'eu-customers'",
        ),
        ("fed_asset_and_datasets", "no member cluster can ever run this task"),
    ],
)
def test_conflicting_rules_fail_the_try_naming_the_asset_with_nothing_created(
    sim_federation: SimFederation,
    asset_federation: Path,
    capfd: pytest.CaptureFixture[str],
    dag_id: str,
    message: str,
) -> None:
    state, record = run_assets(dag_id)

    assert state == "failed"
    assert message in capfd.readouterr().out
    assert pods_of(sim_federation, dag_id) == []
    if dag_id == "fed_asset_widening":
        assert record is None  # failed before a placement was recorded, reserved or created


def test_a_reader_is_placed_where_its_inlet_was_written(
    sim_federation: SimFederation, asset_federation: Path
) -> None:
    """Locality follows the data: ``write`` ran on west-general, its outlet event says so, and ``read``
    (no rule, nothing else pulling it there) is placed on west-general for its 300 GB; with no event, the
    same reader goes elsewhere."""
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session

    dag_run = airflow_harness.run_dag(DAG_FILE, "fed_asset_lineage")
    assert airflow_harness.task_states(dag_run) == {"write": "success", "read": "success"}
    with create_session() as session:
        (event,) = (
            session.query(AssetEvent)
            .join(AssetModel, AssetEvent.asset_id == AssetModel.id)
            .filter(AssetModel.uri == "s3://scratch/features/v1", AssetEvent.source_run_id == dag_run.run_id)
            .all()
        )
        assert event.extra["fedsched"] == {"cluster": "west-general", "region": "eu-west-1"}
    record = json.loads(raw) if isinstance(raw := xcom(dag_run, "fedsched_placement", "read"), str) else raw
    assert clusters_tried(record) == ["west-general"]
    assert record["request"]["assets"][0]["written_on"] == "west-general"
    (chosen,) = [c for c in record["decisions"][0]["candidates"] if c["cluster"] == "west-general"]
    assert chosen["breakdown"]["Locality"]["raw"] == 100.0

    alone = airflow_harness.run_dag(DAG_FILE, "fed_asset_never_written")
    raw = xcom(alone, "fedsched_placement", "read")
    record = json.loads(raw) if isinstance(raw, str) else raw
    assert airflow_harness.task_states(alone) == {"read": "success"}
    assert clusters_tried(record) != ["west-general"]  # no event: nothing pulls it to the EU
    assert record["request"]["assets"][0]["written_on"] is None  # and its size alone makes no dataset


def test_acceptance_data_written_in_its_region_is_read_there_and_both_tries_audit_compliant(
    sim_federation: SimFederation,
    asset_federation: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Issue 32's acceptance: ``write`` writes an EU-only Asset on west-general; its readers, one tempted to
    China and one whose only other member is in China, are placed on west-general (locality and the rule
    agree); one allowed no EU member fails before anything is created. ``fedsched audit`` lists every try
    compliant, the exported report verifies, and one altered byte makes it fail."""
    from datetime import UTC, datetime

    from airflow_provider_fedsched import cli

    started = datetime.now(UTC)
    dag_run = airflow_harness.run_dag(DAG_FILE, "fed_asset_acceptance")
    assert airflow_harness.task_states(dag_run) == {
        "write": "success",
        "read": "success",
        "read_steered": "success",
    }
    placed = {}
    for task_id in ("write", "read", "read_steered"):
        raw = xcom(dag_run, "fedsched_placement", task_id)
        placed[task_id] = json.loads(raw) if isinstance(raw, str) else raw
    assert {task: clusters_tried(record) for task, record in placed.items()} == {
        "write": ["west-general"],
        "read": ["west-general"],
        "read_steered": ["west-general"],
    }
    for task_id in ("read", "read_steered"):
        (asset,) = placed[task_id]["request"]["assets"]
        assert (asset["role"], asset["written_on"]) == ("inlet", "west-general")
        reasons = {r["cluster"]: r["reason"] for r in placed[task_id]["decisions"][0]["rejected"]}
        assert "east-cpu" in reasons and "not allowed by dataset 'eu-customers'" in reasons["east-cpu"]
        assert "written on 'west-general'" in reasons["east-cpu"]

    excluded = airflow_harness.run_dag(DAG_FILE, "fed_asset_acceptance_excluded")
    assert airflow_harness.task_states(excluded) == {"work": "failed"}
    assert "no member cluster can ever run this task" in capsys.readouterr().out
    assert pods_of(sim_federation, "fed_asset_acceptance_excluded") == []

    code = cli.main(["audit", "--since", started.isoformat(), "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    verdicts = {
        e["task_id"]: (e["cluster"], e["region"], e["verdict"])
        for e in json.loads(out)["entries"]
        if e["dag_id"] == "fed_asset_acceptance"
    }
    assert verdicts == {
        task: ("west-general", "eu-west-1", "compliant") for task in ("write", "read", "read_steered")
    }
    report = tmp_path / "report.json"
    report.write_text(out)
    assert cli.main(["audit", "verify", str(report)]) == 0
    assert "intact" in capsys.readouterr().out
    data = report.read_bytes()
    at = data.index(b'"read_steered"') + 1
    report.write_bytes(data[:at] + b"R" + data[at + 1 :])  # one byte: read_steered -> Read_steered
    assert cli.main(["audit", "verify", str(report)]) == 1
    err = capsys.readouterr().err
    assert "does not verify" in err and "Traceback" not in err


@pytest.mark.parametrize("dag_id", ["fed_asset_derived", "fed_asset_derived_deferrable"])
def test_derived_data_inherits_its_inputs_rule_and_the_size_its_pod_reported(
    sim_federation: SimFederation, asset_federation: Path, capsys: pytest.CaptureFixture[str], dag_id: str
) -> None:
    """``derive`` read EU-only customers and wrote a report no spec entry names; its pod reported 120 GB.
    The report's event says so; ``read``, tempted towards China, inherits eu-west-1, is placed where the
    report was written, and its decision detail says where, how large and under which inherited rule. The
    audit judges it by that rule."""
    from datetime import UTC, datetime

    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session

    from airflow_provider_fedsched import cli
    from airflow_provider_fedsched.plugins import history

    started = datetime.now(UTC)
    dag_run = airflow_harness.run_dag(DAG_FILE, dag_id)
    assert airflow_harness.task_states(dag_run) == {"derive": "success", "read": "success"}
    with create_session() as session:
        (event,) = (
            session.query(AssetEvent)
            .join(AssetModel, AssetEvent.asset_id == AssetModel.id)
            .filter(
                AssetModel.uri == "s3://scratch/reports/customer-summary",
                AssetEvent.source_run_id == dag_run.run_id,
            )
            .all()
        )
        assert event.extra["fedsched"] == {
            "cluster": "west-general",
            "region": "eu-west-1",
            "allowed_regions": ["eu-west-1"],
            "size_gb": 120.0,
        }
    raw = xcom(dag_run, "fedsched_placement", "read")
    record = json.loads(raw) if isinstance(raw, str) else raw
    assert clusters_tried(record) == ["west-general"]
    (asset,) = record["request"]["assets"]
    assert (asset["written_on"], asset["written_size_gb"], asset["inherited_regions"]) == (
        "west-general",
        120.0,
        ["eu-west-1"],
    )
    reasons = {r["cluster"]: r["reason"] for r in record["decisions"][0]["rejected"]}
    assert (
        "'s3://scratch/reports/customer-summary' (asset, written on 'west-general' (eu-west-1), 120 GB, "
        "inherited rule: eu-west-1)"
    ) in reasons["east-cpu"]

    where = {"dag_id": dag_id, "run_id": dag_run.run_id, "task_id": "read", "map_index": -1}
    detail = history.placement_detail(raw, **where, recorded_at=None)  # the Federation page's decision view
    assert detail["data"] == [
        {
            "uri": "s3://scratch/reports/customer-summary",
            "name": "s3://scratch/reports/customer-summary",
            "role": "inlet",
            "written_on": "west-general",
            "written_region": "eu-west-1",
            "written_size_gb": 120.0,
            "inherited_regions": ["eu-west-1"],
        }
    ]

    capsys.readouterr()
    code = cli.main(["audit", "--since", started.isoformat(), "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    (entry,) = [e for e in json.loads(out)["entries"] if (e["dag_id"], e["task_id"]) == (dag_id, "read")]
    assert (entry["cluster"], entry["verdict"], entry["allowed_regions"]) == (
        "west-general",
        "compliant",
        ["eu-west-1"],
    )
    assert entry["datasets"][0]["rule"].startswith(
        "the rule inherited from the data asset 's3://scratch/reports/customer-summary' was derived from"
    )
