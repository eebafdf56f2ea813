"""The placement record stays small (under Airflow's 64 KB XCom limit for 20 attempts) and is written
only when it changes."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from airflow_provider_fedsched.federation.engine import FederationEngine
from airflow_provider_fedsched.federation.record import Attempt, PlacementRecord
from airflow_provider_fedsched.operators import records
from tests.federation.helpers import cluster, request, snapshot, spec

XCOM_LIMIT = 64 * 1024


class Store:
    """The task state store's interface: get/set of JSON values."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}
        self.writes = 0

    def get(self, key: str) -> Any:
        return self.values.get(key)

    def set(self, key: str, value: Any) -> None:
        self.values[key] = json.loads(json.dumps(value))
        self.writes += 1


class TaskInstance:
    dag_id, run_id, task_id, map_index, try_number = "d", "r", "t", -1, 1

    def __init__(self) -> None:
        self.pushed: list[Any] = []

    def xcom_push(self, key: str, value: Any) -> None:
        self.pushed.append(json.dumps(value))


def busy_record() -> PlacementRecord:
    """20 cluster attempts, each after a decision over five clusters with long rejection reasons."""
    names = [f"cluster-{i}" for i in range(5)]
    fed = spec([cluster(name) for name in names])
    snapshots = {name: snapshot(name) for name in names}
    now = datetime.now(UTC)
    record = PlacementRecord(dag_id="d", run_id="r", task_id="t", try_number=1, started_at=now)
    for number in range(1, 21):
        decision = FederationEngine(fed).decide(
            request({"cpu": "1"}), snapshots, now=now, exclude={n: "x" * 300 for n in names[:2]}
        )
        records.add_decision(record, decision.to_dict())
        record.attempts.append(
            Attempt(
                number=number,
                cluster=names[number % 5],
                namespace="default",
                pod=f"work-{number}",
                placement_id=f"p-{number}",
                outcome="insufficient",
                reason=records.short("unschedulable: " + "0/50 nodes are available: Insufficient cpu. " * 40),
                started_at=now,
                decision=records.short(decision.reason),
            )
        )
    return record


def test_twenty_attempts_stay_under_the_xcom_limit() -> None:
    record = busy_record()
    size = len(json.dumps(record.model_dump(mode="json")))
    assert size < XCOM_LIMIT, size
    assert len(record.decisions) == records.KEPT_DECISIONS
    assert record.decisions_dropped == 20 - records.KEPT_DECISIONS
    assert all(len(a.reason) <= records.REASON_LIMIT for a in record.attempts)


def test_the_record_is_written_only_when_it_changes() -> None:
    store, ti = Store(), TaskInstance()
    context = {"task_state_store": store, "ti": ti}
    keeper = records.RecordKeeper()
    record = records.new_record(context)
    for _ in range(5):  # a poll loop saving an unchanged record
        keeper.save(context, record)
    assert store.writes == 1 and len(ti.pushed) == 1
    records.start_waiting(record, "no room")
    keeper.save(context, record)
    keeper.save(context, record)
    assert store.writes == 2 and len(ti.pushed) == 2
    assert records.stored_record(context) == record


def test_the_wait_clock_survives_a_resume() -> None:
    store, ti = Store(), TaskInstance()
    context = {"task_state_store": store, "ti": ti}
    record = records.new_record(context)
    records.start_waiting(record, "no room")
    records.RecordKeeper().save(context, record)
    resumed = records.stored_record(context)  # a deferral later: a new operator object reads it back
    assert resumed is not None and resumed.waiting_since == record.waiting_since
    waited = records.start_waiting(resumed, "still no room")
    assert waited >= 0 and resumed.waiting_since == record.waiting_since
    records.stop_waiting(resumed)
    assert resumed.waiting_since is None and resumed.waited_seconds >= waited


def test_a_record_written_before_divided_jobs_loads_and_a_slice_keeps_its_indices() -> None:
    """``Attempt.indices`` (a divided Job's slice) is new: a stored record without it loads unchanged, one
    with it reads it back."""
    now = datetime.now(UTC).isoformat()
    old = {
        "version": 1,
        "dag_id": "d",
        "run_id": "r",
        "task_id": "t",
        "try_number": 1,
        "started_at": now,
        "attempts": [
            {
                "number": 1,
                "cluster": "a",
                "namespace": "default",
                "pod": "p",
                "placement_id": "x-1",
                "outcome": "succeeded",
                "started_at": now,
            }
        ],
    }
    loaded = PlacementRecord.model_validate(old)
    assert loaded.attempts[0].indices is None and loaded.succeeded_indices is None
    assert loaded.model_dump(mode="json")["attempts"][0]["pod"] == "p"
    old["attempts"][0]["indices"] = "0-19,25"  # type: ignore[index]
    assert PlacementRecord.model_validate(old).attempts[0].indices == "0-19,25"
