"""The sovereignty audit's pure part: entries and verdicts from records and ledgers, the hash chain, and
verification of an exported report (any single-byte change is detected)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_provider_fedsched.federation.audit import (
    LedgerReading,
    NotAReport,
    UnreadableTry,
    build_report,
    dump_report,
    verify_report,
)
from airflow_provider_fedsched.federation.record import Attempt, PlacementRecord
from airflow_provider_fedsched.federation.spec import FederationSpec, load_spec

SPEC_FILE = Path(__file__).resolve().parents[2] / "example_dags" / "federation.yaml"
NOW = datetime(2026, 3, 1, tzinfo=UTC)


@pytest.fixture(scope="module")
def spec() -> FederationSpec:
    return load_spec(SPEC_FILE)


def try_record(
    task_id: str, clusters: list[str], datasets: list[str] | None, *, offset: float = 0.0
) -> PlacementRecord:
    started = NOW - timedelta(hours=1) + timedelta(seconds=offset)
    record = PlacementRecord(
        dag_id="etl", run_id="manual__1", task_id=task_id, try_number=1, started_at=started
    )
    record.request = None if datasets is None else {"datasets": datasets, "resources": {"cpu": 500}}
    for number, cluster in enumerate(clusters, start=1):
        record.attempts.append(
            Attempt(
                number=number,
                cluster=cluster,
                namespace="etl",
                pod=f"{task_id}-{number}",
                placement_id=record.placement_id(number),
                outcome="succeeded" if number == len(clusters) else "insufficient",
                started_at=started,
            )
        )
    record.cluster = clusters[-1] if clusters else None
    record.outcome = "succeeded"
    return record


def all_read(spec: FederationSpec, held: dict[str, set[str]] | None = None) -> dict[str, LedgerReading]:
    return {c.name: LedgerReading(frozenset((held or {}).get(c.name, set()))) for c in spec.clusters}


def report_of(spec: FederationSpec, records: list[PlacementRecord], **kwargs: Any) -> dict[str, Any]:
    ledgers = kwargs.pop("ledgers", None) or all_read(spec)
    return build_report(spec, records, ledgers, generated_at=NOW, **kwargs)


def verdicts(report: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [(e["task_id"], e["cluster"], e["verdict"]) for e in report["entries"]]


def test_only_tries_that_touched_a_restricted_dataset_are_entries_each_with_its_rule(
    spec: FederationSpec,
) -> None:
    report = report_of(
        spec,
        [
            try_record("sovereign", ["west-general"], ["eu-customers"]),
            try_record("open", ["north-gpu"], ["clickstream-archive"]),  # no allowed_regions: anywhere
            try_record("plain", ["east-cpu"], []),
            try_record("failover", ["east-cpu", "north-gpu"], ["user-events"], offset=1),
        ],
    )
    assert verdicts(report) == [
        ("sovereign", "west-general", "compliant"),
        ("failover", "east-cpu", "compliant"),
        ("failover", "north-gpu", "compliant"),
    ]
    first = report["entries"][0]
    assert first["allowed_regions"] == ["eu-west-1"] and first["region"] == "eu-west-1"
    assert first["datasets"] == [
        {
            "name": "eu-customers",
            "allowed_regions": ["eu-west-1"],
            "rule": f"federation spec '{spec.name}', datasets[1] (eu-customers)",
        }
    ]
    assert report["header"]["verdicts"] == {"compliant": 3, "violation": 0, "unverifiable": 0}
    assert verify_report(dump_report(report).encode()).ok


def test_a_record_naming_a_cluster_outside_the_allowed_regions_is_a_violation(spec: FederationSpec) -> None:
    report = report_of(spec, [try_record("sovereign", ["east-cpu"], ["eu-customers"])])
    (entry,) = report["entries"]
    assert entry["verdict"] == "violation"
    assert "east-cpu in region cn-east-1" in entry["reason"] and "eu-west-1" in entry["reason"]


def test_the_narrowest_rule_of_several_datasets_wins(spec: FederationSpec) -> None:
    report = report_of(spec, [try_record("both", ["west-general"], ["eu-customers", "user-events"])])
    (entry,) = report["entries"]
    assert entry["allowed_regions"] == [] and entry["verdict"] == "violation"


def test_a_ledger_holding_the_try_s_placement_elsewhere_is_reported(spec: FederationSpec) -> None:
    record = try_record("sovereign", ["west-general"], ["eu-customers"])
    # east-cpu's ledger holds a placement of this try that the record does not name (the record was
    # altered, or lost a write): the cluster's own ledger says work went to cn-east-1.
    ledgers = all_read(spec, {"east-cpu": {record.placement_id(2)}, "west-general": {record.placement_id(1)}})
    report = report_of(spec, [record], ledgers=ledgers)
    assert verdicts(report) == [
        ("sovereign", "west-general", "compliant"),
        ("sovereign", "east-cpu", "violation"),
    ]
    recorded, held = report["entries"]
    assert recorded["seen_in"] == ["record", "ledger"] and recorded["ledger"] == "holds the placement"
    assert held["seen_in"] == ["ledger"] and held["attempt"] is None and "ledger" in held["reason"]


def test_a_ledger_that_could_not_be_read_makes_its_entries_unverifiable(spec: FederationSpec) -> None:
    ledgers = {**all_read(spec), "west-general": LedgerReading(None, "did not answer (timeout)")}
    report = report_of(spec, [try_record("sovereign", ["west-general"], ["eu-customers"])], ledgers=ledgers)
    (entry,) = report["entries"]
    assert entry["verdict"] == "unverifiable" and "did not answer (timeout)" in entry["reason"]
    assert report["header"]["ledgers"]["west-general"] == "did not answer (timeout)"
    # A violation stays a violation however the ledger answered: the record alone shows it.
    report = report_of(spec, [try_record("s", ["east-cpu"], ["eu-customers"])], ledgers=ledgers)
    assert report["entries"][0]["verdict"] == "violation"


def test_what_the_audit_cannot_tell_is_unverifiable_with_the_reason(spec: FederationSpec) -> None:
    report = report_of(
        spec,
        [
            try_record("gone-cluster", ["old-cluster"], ["eu-customers"]),
            try_record("gone-dataset", ["west-general"], ["retired-data"], offset=1),
            try_record("no-request", ["west-general"], None, offset=2),
        ],
        unreadable=[UnreadableTry("etl", "manual__1", "broken", -1, "not JSON (JSONDecodeError)")],
    )
    reasons = {e["task_id"]: (e["verdict"], e["reason"]) for e in report["entries"]}
    assert {task: verdict for task, (verdict, _) in reasons.items()} == dict.fromkeys(
        ("gone-cluster", "gone-dataset", "no-request", "broken"), "unverifiable"
    )
    assert "not a member" in reasons["gone-cluster"][1]
    assert "retired-data" in reasons["gone-dataset"][1]
    assert "keeps no request" in reasons["no-request"][1]
    assert "unreadable" in reasons["broken"][1]
    assert report["header"]["records"] == {"read": 3, "unreadable": 1}


def test_the_dataset_filter_keeps_the_tries_that_read_it(spec: FederationSpec) -> None:
    records = [
        try_record("eu", ["west-general"], ["eu-customers"]),
        try_record("cn", ["east-cpu"], ["user-events"], offset=1),
        try_record("unknown", ["east-cpu"], None, offset=2),
    ]
    report = report_of(spec, records, dataset="user-events")
    assert verdicts(report) == [("cn", "east-cpu", "compliant")]
    assert report["header"]["dataset"] == "user-events"


# --- The chain ---------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def exported(spec: FederationSpec) -> bytes:
    records = [
        try_record("sovereign", ["west-general"], ["eu-customers"]),
        try_record("failover", ["east-cpu", "north-gpu"], ["user-events"], offset=1),
        try_record("bad", ["east-cpu"], ["eu-customers"], offset=2),
    ]
    return dump_report(report_of(spec, records)).encode()


def test_each_entry_chains_to_the_one_before(exported: bytes) -> None:
    document = json.loads(exported)
    entries = document["entries"]
    assert [e["previous"] for e in entries[1:]] == [e["hash"] for e in entries[:-1]]
    assert document["chain_end"] == entries[-1]["hash"]
    result = verify_report(exported)
    assert result.ok and result.entries == 4
    assert result.verdicts == {"compliant": 3, "violation": 1, "unverifiable": 0}


def edited(exported: bytes, change: Any) -> bytes:
    document = json.loads(exported)
    change(document)
    return dump_report(document).encode()


def test_an_altered_verdict_names_its_entry(exported: bytes) -> None:
    def clear(document: dict[str, Any]) -> None:
        document["entries"][3]["verdict"] = "compliant"

    result = verify_report(edited(exported, clear))
    assert (
        not result.ok
        and result.entry == 4
        and "entry 4 (etl.bad on east-cpu) was altered" in str(result.problem)
    )


def test_an_altered_header_is_named_before_any_entry(exported: bytes) -> None:
    def clear(document: dict[str, Any]) -> None:
        document["entries"][3]["verdict"] = "compliant"
        document["header"]["verdicts"] = {"compliant": 4, "violation": 0, "unverifiable": 0}

    result = verify_report(edited(exported, clear))
    assert not result.ok and result.entry is None and "the header" in str(result.problem)


def test_a_removed_entry_breaks_the_chain_at_the_next_one(exported: bytes) -> None:
    def drop(document: dict[str, Any]) -> None:
        del document["entries"][1]

    result = verify_report(edited(exported, drop))
    assert result.entry == 2 and "does not follow" in str(result.problem)


def test_an_entry_cut_from_the_end_is_detected(exported: bytes) -> None:
    def cut(document: dict[str, Any]) -> None:
        document["entries"].pop()

    result = verify_report(edited(exported, cut))
    assert not result.ok and "end" in str(result.problem)


def test_a_change_json_does_not_see_is_detected(exported: bytes) -> None:
    changed = exported.replace(b'{\n  "chain_end"', b'{\n \t"chain_end"', 1)
    assert json.loads(changed) == json.loads(exported)
    result = verify_report(changed)
    assert not result.ok and "the byte at offset 3 differs" in str(result.problem)


def test_a_header_whose_key_was_altered_is_an_altered_report_not_something_else(exported: bytes) -> None:
    # Found by the property below: the format is still named, so these bytes are a report, damaged.
    changed = exported.replace(b'\n  "header": {', b'\n  " eader": {', 1)
    assert changed != exported
    result = verify_report(changed)
    assert not result.ok and "no header naming its format" in str(result.problem)


@settings(max_examples=300, deadline=None)
@given(position=st.integers(min_value=0), byte=st.integers(min_value=0, max_value=255))
def test_any_single_byte_change_is_detected(exported: bytes, position: int, byte: int) -> None:
    position %= len(exported)
    if exported[position] == byte:
        byte = (byte + 1) % 256
    changed = exported[:position] + bytes([byte]) + exported[position + 1 :]
    try:
        result = verify_report(changed)
    except NotAReport:
        # Only a change to what makes it a report at all (its format name and key) or a report this
        # version reads (its version) reads as not one.
        assert b'"format": "fedsched-audit-report"' not in changed or b'"version": 1\n' not in changed
        return
    assert not result.ok and result.problem


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "not JSON"),
        (b"\xff\xfe", "not JSON"),
        (b"[1, 2]", "no header"),
        (b'{"header": {"format": "other"}}', "no header"),
        (b'{"header": {"format": "fedsched-audit-report", "version": 99}}', "version 99"),
        (b"[" * 100_000, "not JSON"),
        (b'{"a": NaN}', "not JSON"),
        (b'{"a": 1e999}', "not JSON"),
    ],
)
def test_what_is_not_a_report_says_so(data: bytes, message: str) -> None:
    with pytest.raises(NotAReport, match=message):
        verify_report(data)


def test_the_table_lists_every_entry_and_each_ledger_not_read(spec: FederationSpec) -> None:
    from airflow_provider_fedsched.render import audit_table

    record = try_record("mapped", ["east-cpu"], ["eu-customers"])
    record.map_index = 3
    ledgers = {**all_read(spec), "east-cpu": LedgerReading(None, "did not answer (timeout)")}
    table = audit_table(report_of(spec, [record], ledgers=ledgers))
    assert "violation" in table and "etl.mapped @ manual__1 [3]" in table and "cn-east-1" in table
    assert "1 entries: 0 compliant, 1 violation(s), 0 unverifiable" in table
    assert "ledger of east-cpu not read: did not answer (timeout)" in table
    assert "0 entries" in audit_table(report_of(spec, []))


def asset_try(task_id: str, cluster: str, *assets: dict[str, Any]) -> PlacementRecord:
    record = try_record(task_id, [cluster], [])
    assert record.request is not None
    record.request["assets"] = list(assets)
    return record


def test_a_try_whose_asset_is_a_restricted_dataset_is_audited_under_the_rule_it_brought(
    spec: FederationSpec,
) -> None:
    customers = {"uri": "s3://eu-lake/customers/2026.parquet", "name": "customers", "role": "inlet"}
    narrowed = {
        "uri": "s3://cn-lake/user-events/day=1",
        "name": "s3://cn-lake/user-events/day=1",
        "role": "outlet",
        "fedsched": {"allowed_regions": ["cn-north-1"]},
    }
    report = report_of(
        spec,
        [
            asset_try("kept", "west-general", customers),
            asset_try("moved", "east-cpu", narrowed),  # user-events allows cn-east-1; the asset does not
            asset_try("scratch", "east-cpu", {"uri": "file:///tmp/x", "name": "x"}),  # not restricted
            asset_try(
                "gone", "east-cpu", {"uri": "s3://other", "name": "o", "fedsched": {"cluster": "moon"}}
            ),
        ],
    )
    by_task = {e["task_id"]: e for e in report["entries"]}
    assert sorted(by_task) == ["gone", "kept", "moved"]
    assert by_task["kept"]["verdict"] == "compliant"
    assert by_task["kept"]["datasets"] == [
        {
            "name": "eu-customers",
            "asset": "s3://eu-lake/customers/2026.parquet",
            "allowed_regions": ["eu-west-1"],
            "rule": f"federation spec '{spec.name}', datasets[1] (eu-customers)",
        }
    ]
    moved = by_task["moved"]
    assert (moved["verdict"], moved["allowed_regions"]) == ("violation", ["cn-north-1"])
    assert moved["datasets"][0]["rule"].endswith(
        "(user-events), narrowed by asset 's3://cn-lake/user-events/day=1' extra.fedsched"
    )
    assert by_task["gone"]["verdict"] == "unverifiable" and "asset 's3://other'" in by_task["gone"]["reason"]
    only = report_of(spec, [asset_try("kept", "west-general", customers)], dataset="eu-customers")
    assert [e["task_id"] for e in only["entries"]] == ["kept"]
    assert verify_report(dump_report(report).encode()).ok
