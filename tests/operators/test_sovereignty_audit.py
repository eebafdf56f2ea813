"""``fedsched audit`` in real Airflow on the simulated federation: a sovereign task run by dag.test is listed
compliant and its exported report verifies (one byte altered: it does not); a violation injected into a
placement record or into a member's own ledger is reported with exit 1."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_fedsched import cli
from airflow_provider_fedsched.federation.record import Attempt, PlacementRecord
from airflow_provider_fedsched.hooks.federation import FederationHook
from airflow_provider_fedsched.kube.clients import shared_sync_client
from airflow_provider_fedsched.kube.ledger import PlacementLedger
from airflow_provider_fedsched.sim import SimFederation
from tests import airflow_harness
from tests.operators.test_federated_operator import DAG_FILE, xcom
from tests.plugins.records import insert_xcoms

pytestmark = [pytest.mark.airflow]
WINDOW = datetime(2025, 3, 1, tzinfo=UTC)
"""Injected records start here, long before any try this session runs (``--until`` keeps them apart)."""


def audit(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = cli.main(["audit", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def sovereign_record(task_id: str, cluster: str) -> PlacementRecord:
    """A finished try that read eu-customers (allowed in eu-west-1 only), as the operator writes it."""
    record = PlacementRecord(
        dag_id="audited", run_id="manual__1", task_id=task_id, try_number=1, started_at=WINDOW
    )
    record.request = {"datasets": ["eu-customers"], "resources": {"cpu": 500}}
    record.attempts.append(
        Attempt(
            number=1,
            cluster=cluster,
            namespace="default",
            pod=f"{task_id}-1",
            placement_id=record.placement_id(1),
            outcome="succeeded",
            started_at=WINDOW,
            ended_at=WINDOW + timedelta(seconds=30),
        )
    )
    record.cluster, record.outcome, record.ended_at = cluster, "succeeded", WINDOW + timedelta(seconds=30)
    return record


def store(*records: PlacementRecord) -> None:
    insert_xcoms(
        {
            "dag_id": r.dag_id,
            "run_id": r.run_id,
            "task_id": r.task_id,
            "timestamp": r.started_at,
            "value": r.model_dump(mode="json"),
        }
        for r in records
    )


def ledger_of(cluster: str) -> PlacementLedger:
    hook = FederationHook()
    access = hook.access(cluster)
    return PlacementLedger(shared_sync_client(access), access.namespace, hook.spec.name)


def hold_in_ledger(cluster: str, placement_id: str) -> None:
    """Write ``placement_id`` into ``cluster``'s own ledger, as a worker holding a placement there does."""
    held = ledger_of(cluster).reserve(
        placement_id, {"cpu": 500}, fits=lambda _: True, landed=lambda *_: False, ttl=3600.0
    )
    assert held


def release_in_ledger(cluster: str, placement_id: str) -> None:
    ledger_of(cluster).release(placement_id)


def entries(out: str) -> list[dict[str, Any]]:
    return list(json.loads(out)["entries"])


def test_a_sovereign_task_is_audited_compliant_and_its_export_verifies(
    sim_federation: SimFederation, federation: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    started = datetime.now(UTC)
    dag_run = airflow_harness.run_dag(DAG_FILE, "fed_sovereign")
    assert airflow_harness.task_states(dag_run)["work"] == "success"
    assert xcom(dag_run, "fedsched_placement") is not None
    capsys.readouterr()

    code, out, err = audit(["--since", started.isoformat(), "--json"], capsys)
    assert code == 0, err
    (entry,) = [e for e in entries(out) if e["dag_id"] == "fed_sovereign"]
    assert (entry["cluster"], entry["region"], entry["verdict"]) == ("west-general", "eu-west-1", "compliant")
    assert entry["allowed_regions"] == ["eu-west-1"] and entry["seen_in"][0] == "record"
    assert entry["datasets"][0]["rule"].endswith("(eu-customers)")
    assert json.loads(out)["header"]["ledgers"]["west-general"] == "read"

    report = tmp_path / "report.json"
    report.write_text(out)
    assert audit(["verify", str(report)], capsys)[:2] == (
        0,
        f"{report}: intact: 1 entries verify (1 compliant, 0 violation(s), 0 unverifiable)\n",
    )
    # One byte altered anywhere (here: the verdict's first letter, then a space of indentation).
    for old, new in ((b'"compliant"', b'"Compliant"'), (b'\n  "entries"', b'\n \t"entries"')):
        data = report.read_bytes()
        assert old in data
        report.write_bytes(data.replace(old, new, 1))
        code, _, err = audit(["verify", str(report)], capsys)
        assert code == 1 and "does not verify" in err and "Traceback" not in err
        report.write_text(out)

    code, table, _ = audit(["--since", started.isoformat()], capsys)
    assert code == 0 and "fed_sovereign.work" in table and "compliant" in table
    code, rows, _ = audit(["--since", started.isoformat(), "--csv", "--dataset", "eu-customers"], capsys)
    assert code == 0 and rows.splitlines()[0].startswith("number,verdict,dag_id")
    assert any(",compliant,fed_sovereign," in row for row in rows.splitlines()[1:])


def test_a_record_altered_to_name_a_cluster_outside_the_allowed_regions_is_a_violation(
    sim_federation: SimFederation, federation: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kept = sovereign_record("kept", "west-general")
    store(kept, sovereign_record("moved", "east-cpu"))
    window = ["--since", WINDOW.isoformat(), "--until", (WINDOW + timedelta(hours=1)).isoformat()]
    code, out, err = audit([*window, "--json"], capsys)
    # This federation (a fresh name) never held a placement in west-general: no ledger to cross-check with.
    assert code == 1, err
    (unchecked,) = [e for e in entries(out) if e["task_id"] == "kept"]
    assert unchecked["verdict"] == "unverifiable" and "keeps no ledger" in unchecked["reason"]

    hold_in_ledger("west-general", kept.placement_id(1))  # as the try did; released when it ended
    release_in_ledger("west-general", kept.placement_id(1))
    code, out, err = audit([*window, "--json"], capsys)
    assert code == 1, err
    verdicts = {e["task_id"]: (e["cluster"], e["verdict"]) for e in entries(out)}
    assert verdicts == {"kept": ("west-general", "compliant"), "moved": ("east-cpu", "violation")}
    (moved,) = [e for e in entries(out) if e["task_id"] == "moved"]
    assert "east-cpu in region cn-east-1" in moved["reason"] and "eu-west-1" in moved["reason"]


def test_a_ledger_entry_of_the_try_in_a_cluster_outside_the_allowed_regions_is_a_violation(
    sim_federation: SimFederation, federation: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The record says west-general; north-gpu's own ledger holds a placement of the same try."""
    record = sovereign_record("held", "west-general")
    record.run_id = "manual__2"
    store(record)
    hold_in_ledger("west-general", record.placement_id(1))  # the recorded attempt, ended since
    release_in_ledger("west-general", record.placement_id(1))
    hold_in_ledger("north-gpu", record.placement_id(2))
    window = ["--since", WINDOW.isoformat(), "--until", (WINDOW + timedelta(hours=1)).isoformat()]
    code, out, _ = audit([*window, "--json"], capsys)
    assert code == 1
    found = [(e["cluster"], e["seen_in"], e["verdict"]) for e in entries(out) if e["run_id"] == "manual__2"]
    assert found == [("west-general", ["record"], "compliant"), ("north-gpu", ["ledger"], "violation")]


def test_bad_input_exits_2_naming_the_option(
    sim_federation: SimFederation, federation: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for argv, named in (
        (["--since", "yesterday"], "--since"),
        (["--dataset", "nope"], "--dataset: unknown dataset 'nope'"),
        (["--dataset", "clickstream-archive"], "--dataset: 'clickstream-archive' has no allowed_regions"),
        (["--since", "2026-01-02", "--until", "2026-01-01"], "--until"),
    ):
        code, out, err = audit(argv, capsys)
        assert (code, out) == (2, ""), err
        assert err.startswith("fedsched audit: error: ") and named in err, err
    with pytest.raises(SystemExit) as exited:
        cli.main(["audit", "--json", "--csv"])
    assert exited.value.code == 2 and "not allowed with argument --json" in capsys.readouterr().err
