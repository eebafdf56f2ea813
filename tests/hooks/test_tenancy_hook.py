"""Tenant usage counted from the federation's own records (snapshots with the tenant label, reservations),
the waiting list fair share reads, charges, and quota admission from many worker processes at once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from airflow_provider_fedsched.federation import ClusterSnapshot, TaskRequest
from airflow_provider_fedsched.federation.tenancy import WaitingTask
from airflow_provider_fedsched.hooks import tenancy
from airflow_provider_fedsched.hooks.federation import FederationHook
from airflow_provider_fedsched.state import AirflowVariableStateBackend, FederationState, MemoryStateBackend
from tests.federation.helpers import node

SPEC: dict[str, Any] = {
    "name": "teams",
    "clusters": [
        {"name": "a", "conn_id": "k8s_a", "region": "r1", "prices": {"cpu_hour": 0.1}},
        {"name": "b", "conn_id": "k8s_b", "region": "r1", "prices": {"cpu_hour": 0.2}},
    ],
    "policy": {"snapshot_ttl_seconds": 3600},
    "tenants": [
        {"name": "team-a", "quota": {"cpu": "8"}, "weight": 3, "budget": {"period": "day", "max_cost": 100}},
        {"name": "team-b", "quota": {"cpu": "64"}},
    ],
}


@pytest.fixture(autouse=True)
def no_cluster_ledger(monkeypatch: pytest.MonkeyPatch) -> None:
    # These clusters are not running: reservations live in shared state only.
    monkeypatch.setenv("AIRFLOW__FEDSCHED__PLACEMENT_LEDGER", "False")


def snapshots(now: datetime, tenants: dict[str, dict[str, int]] | None = None) -> list[ClusterSnapshot]:
    return [
        ClusterSnapshot(
            cluster=name,
            observed_at=now,
            nodes=[node(f"{name}-n{i}", {"cpu": "32", "memory": "128Gi"}) for i in range(2)],
            tenants=tenants if name == "a" and tenants else {},
        )
        for name in ("a", "b")
    ]


def hook_on(backend: Any, now: datetime, tenants: dict[str, dict[str, int]] | None = None) -> FederationHook:
    hook = FederationHook(SPEC, state=FederationState(backend, federation="teams"))
    hook.state.snapshots.put(snapshots(now, tenants))
    return hook


def cpu(amount: str, tenant: str = "team-a") -> TaskRequest:
    return TaskRequest(
        resources={"cpu": int(float(amount) * 1000)}, tenant=tenant, expected_duration_seconds=60
    )


def test_usage_is_the_tenants_pods_in_snapshots_plus_its_reservations() -> None:
    now = datetime.now(UTC)
    backend = MemoryStateBackend()
    hook = hook_on(backend, now, {"team-a": {"cpu": 6000, "pods": 6}})
    assert hook.place(cpu("1"), "p1").placed
    assert hook.place(cpu("1"), "p2").placed  # 6 running + 2 reserved = 8 of 8
    third = hook.place(cpu("1"), "p3")
    assert third.outcome == "wait"
    assert "team-a uses 8/8 cpu" in third.reason
    # Another worker on the same state counts the same; team-b has its own quota.
    other = hook_on(backend, now, {"team-a": {"cpu": 6000, "pods": 6}})
    assert "team-a uses 8/8 cpu" in other.place(cpu("1"), "p4").reason
    assert other.place(cpu("1", "team-b"), "p5").placed
    rows = {row["tenant"]: row for row in other.tenants(now)}
    assert rows["team-a"]["used"] == {"cpu": "8", "pods": "8"}
    assert rows["team-a"]["waiting"] == 2
    assert rows["team-b"]["used"] == {"cpu": "1", "pods": "1"}


def test_a_waiting_task_is_listed_until_placed_and_keeps_its_first_wait() -> None:
    now = datetime.now(UTC)
    hook = hook_on(MemoryStateBackend(), now, {"team-a": {"cpu": 8000}})
    hook.place(cpu("1"), "w1")
    (listed,) = hook.state.waiting.current(datetime.now(UTC))
    assert (listed.tenant, listed.placement_id, listed.clusters) == ("team-a", "w1", frozenset({"a", "b"}))
    first = listed.since
    hook.place(cpu("1"), "w1")
    assert hook.state.waiting.current(datetime.now(UTC))[0].since == first
    hook.state.snapshots.put(snapshots(datetime.now(UTC)))  # team-a's pods ended
    assert hook.place(cpu("1"), "w1").placed
    assert hook.state.waiting.current(datetime.now(UTC)) == []


def test_charges_count_against_the_tenants_budget_this_period() -> None:
    now = datetime.now(UTC)
    hook = hook_on(MemoryStateBackend(), now)
    for index in range(3):
        hook.charge(f"c{index}", {"tenant": "team-a", "cost": 33.2, "egress_gb": 1.0, "at": now.isoformat()})
    hook.charge("old", {"tenant": "team-a", "cost": 500.0, "at": (now - timedelta(days=3)).isoformat()})
    hook.charge("c0", {"tenant": "team-a", "cost": 33.2, "egress_gb": 1.0, "at": now.isoformat()})  # again
    # 99.60 spent today (the old charge is from another day; c0 counted once); 5 cpu for two hours
    # cost 1.00 on a and 2.00 on b: either would go over 100.
    task = TaskRequest(resources={"cpu": 5000}, tenant="team-a", expected_duration_seconds=7200)
    decision = hook.place(task, "t1")
    assert decision.outcome == "wait"
    expected = "e.g. a: team-a spent 99.60 of its 100 budget this day; this task would cost ~1.00 here"
    assert expected in decision.reason
    rows = {row["tenant"]: row for row in hook.tenants(now)}
    assert (rows["team-a"]["cost"], rows["team-a"]["egress_gb"]) == (99.6, 3.0)


WORKER = """
import json, sys, time
from pathlib import Path
from airflow_provider_fedsched.federation import TaskRequest
from airflow_provider_fedsched.hooks.federation import FederationHook
from airflow_provider_fedsched.state import AirflowVariableStateBackend
hook = FederationHook(sys.argv[1], state=AirflowVariableStateBackend())
hook.spec, hook.state
Path(sys.argv[3]).touch()
while not Path(sys.argv[2]).exists():
    time.sleep(0.005)
placed = []
for i in range(4):
    request = TaskRequest(resources={"cpu": 1000}, tenant="team-a", expected_duration_seconds=60)
    decision = hook.place(request, f"{sys.argv[4]}-{i}")
    placed.append(decision.cluster if decision.placed else decision.reason)
print(json.dumps(placed))
"""


def place_from_worker_processes(tmp_path: Path, spec: dict[str, Any], workers: int = 6) -> list[str]:
    """``workers`` processes place four one-cpu tasks of team-a each, all starting at the same moment
    (shared state: Airflow Variables); each outcome is the cluster placed on, or the reason it waits."""
    spec_path = tmp_path / "federation.yaml"
    spec_path.write_text(yaml.safe_dump(spec))
    go = tmp_path / "go"
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, str(spec_path), str(go), str(tmp_path / f"ready-{i}"), f"w{i}"],
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "AIRFLOW__FEDSCHED__PLACEMENT_LEDGER": "False"},
        )
        for i in range(workers)
    ]
    deadline = time.monotonic() + 400
    while not all((tmp_path / f"ready-{i}").exists() for i in range(workers)):
        assert time.monotonic() < deadline, "workers did not start"
        time.sleep(0.05)
    go.touch()
    results = [json.loads(p.communicate(timeout=400)[0].strip().splitlines()[-1]) for p in processes]
    return [outcome for result in results for outcome in result]


def test_a_hold_decided_first_but_written_last_counts_the_hold_kept_before_it_landed() -> None:
    """Worker A decides first, but its hold lands after worker B has read the holds back and kept its own
    (a loaded machine: six worker processes once admitted five where four could go). By time A's hold
    comes first, yet B never saw it: A counts B's hold and gives up; B's stays admitted."""
    now = datetime.now(UTC)
    hook = hook_on(MemoryStateBackend(), now, {"team-a": {"cpu": 7000, "pods": 7}})  # 1 of 8 cpu left
    a_saw = tenancy.seen_before_hold(hook, cpu("1"), "a", now)  # A reads the holds: none yet
    assert hook.reserve("a", cpu("1"), "b-worker", now=now + timedelta(milliseconds=30))
    assert tenancy.admitted(hook, cpu("1"), "b-worker", "a", datetime.now(UTC)) is None
    hook.state.reservations.hold("a", {"cpu": 1000}, now, "a-worker", tenant="team-a", after=a_saw)
    reason = tenancy.admitted(hook, cpu("1"), "a-worker", "a", datetime.now(UTC))
    assert reason is not None and "quota of" in reason and "taken by placements of other workers" in reason
    # A wrote its hold again having seen B's (the two looked concurrent): B need not count A's.
    assert tenancy.admitted(hook, cpu("1"), "b-worker", "a", datetime.now(UTC)) is None


def test_holds_written_at_the_same_time_count_each_other_and_a_later_write_orders_them() -> None:
    """Neither of two holds saw the other before its write: each counts the other, whatever their times.
    A hold that saw another before its write is counted by it no longer."""
    from airflow_provider_fedsched.federation.cycle import Pending, concurrent_holds, counted_holds

    now = datetime.now(UTC)
    first = Pending(now, "p1", "a", "team-a", {"cpu": 1000}, "w1")
    second = Pending(now - timedelta(seconds=1), "p2", "a", "team-a", {"cpu": 1000}, "w2")
    holds = [second, first]
    assert counted_holds(holds, "a", "p1") == holds and counted_holds(holds, "a", "p2") == holds
    assert concurrent_holds(holds, first) == [second]
    later = Pending(now, "p2", "a", "team-a", {"cpu": 1000}, "w3", frozenset({"w1"}))  # p2 written again
    assert counted_holds([later, first], "a", "p1") == [first]
    assert counted_holds([later, first], "a", "p2") == [later, first]
    assert concurrent_holds([later, first], later) == []
    assert counted_holds([first], "a", "p2") is None  # its own hold is not visible (seen and released)


@pytest.mark.timeout(600)  # six Airflow worker processes start on a shared 2-core machine
def test_quota_admission_from_many_worker_processes_does_not_over_admit(
    tmp_path: Path, airflow_db: None
) -> None:
    """Six processes place four one-cpu tasks each at the same moment against team-a's 8-cpu quota."""
    hook_on(AirflowVariableStateBackend(), datetime.now(UTC))
    outcomes = place_from_worker_processes(tmp_path, SPEC)
    placed = sum(1 for outcome in outcomes if outcome in ("a", "b"))
    held = FederationHook(SPEC, state=FederationState(AirflowVariableStateBackend(), federation="teams"))
    rows = {row["tenant"]: row for row in held.tenants(datetime.now(UTC))}
    print(f"quota admission: 24 requests, quota 8, placed {placed}, over-admitted {max(0, placed - 8)}")
    assert 1 <= placed <= 8
    assert rows["team-a"]["used"]["cpu"] == str(placed)  # every admitted placement is still held


# Fair share across workers: one cluster with 8 cpu free (team-a already uses 2 of its 10); team-b, with
# nothing running, is further below its share and has a 4-cpu task waiting for that cluster.
FAIR_SPEC: dict[str, Any] = {
    "name": "fair",
    "clusters": [{"name": "a", "conn_id": "k8s_a", "region": "r1"}],
    "policy": {"snapshot_ttl_seconds": 3600},
    "tenants": [{"name": "team-a"}, {"name": "team-b"}],
}


def fair_hook(backend: Any, now: datetime) -> FederationHook:
    hook = FederationHook(FAIR_SPEC, state=FederationState(backend, federation="fair"))
    hook.state.snapshots.put(
        [
            ClusterSnapshot(
                cluster="a",
                observed_at=now,
                nodes=[node("a-n0", {"cpu": "10", "memory": "64Gi"}, {"cpu": "2"})],
                tenants={"team-a": {"cpu": 2000, "pods": 2}},
            )
        ]
    )
    hook.state.waiting.put(
        WaitingTask("b-waits", "team-b", {"cpu": 4000}, frozenset({"a"}), now - timedelta(seconds=30)), now
    )
    return hook


def test_fair_share_is_judged_again_with_the_holds_other_workers_made_at_the_same_time() -> None:
    """Another worker's 4-cpu hold, made just before this one and unseen by this decision, leaves 4 cpu:
    taking 1 more would leave team-b's waiting 4-cpu task no room, so this hold is given up."""
    now = datetime.now(UTC)
    hook = fair_hook(MemoryStateBackend(), now)
    assert hook.decide(cpu("1")).cluster == "a"  # 8 free: 1 cpu leaves team-b its 4
    hook.reserve("a", cpu("4"), "other-worker", now=now - timedelta(milliseconds=5))
    hook.reserve("a", cpu("1"), "mine", now=now)
    reason = tenancy.admitted(hook, cpu("1"), "mine", "a", datetime.now(UTC))
    assert reason is not None and reason.startswith("fair share: team-b is further below its weighted share")
    assert "placements of other workers made at the same time" in reason
    # The hold made first is judged without the later one: it still leaves team-b its room.
    assert tenancy.admitted(hook, cpu("3"), "other-worker", "a", datetime.now(UTC)) is None
    # Nothing waiting: nothing to judge again.
    hook.state.waiting.remove("b-waits")
    assert tenancy.admitted(hook, cpu("1"), "mine", "a", datetime.now(UTC)) is None


@pytest.mark.timeout(600)  # six Airflow worker processes start on a shared 2-core machine
def test_fair_share_from_many_worker_processes_leaves_the_waiting_tenant_its_room(
    tmp_path: Path, airflow_db: None
) -> None:
    """Six processes of over-served team-a place four one-cpu tasks each at the same moment on a cluster
    with 8 cpu free, while team-b's 4-cpu task waits for it: team-a may take 4 at most."""
    fair_hook(AirflowVariableStateBackend(), datetime.now(UTC))
    outcomes = place_from_worker_processes(tmp_path, FAIR_SPEC)
    placed = outcomes.count("a")
    print(
        f"fair share: 24 requests, room 8 cpu, 4 left for team-b, placed {placed}, over {max(0, placed - 4)}"
    )
    assert 1 <= placed <= 4
    # The others wait: refused by fair share, or, while holds given up are still being released, by room.
    assert all(o == "a" or o.startswith("wait: ") for o in outcomes), outcomes


def test_each_attempt_records_its_cost_failed_ones_included() -> None:
    from airflow_provider_fedsched.federation.record import PlacementRecord
    from airflow_provider_fedsched.operators import attempts, records

    now = datetime.now(UTC)
    hook = hook_on(MemoryStateBackend(), now)
    task = TaskRequest(resources={"cpu": 4000}, tenant="team-b", expected_duration_seconds=1800)
    record = PlacementRecord(dag_id="d", run_id="r", task_id="t", try_number=1, started_at=now)
    first = hook.place(task, record.placement_id(1))
    # a: 4 cpu x 0.1 = 0.40/h; the cheapest compliant alternative is a itself.
    assert first.extra["cost"]["estimate"] == first.extra["cost"]["cheapest_compliant"]
    assert first.extra["cost"]["estimate"]["per_hour"] == 0.4
    attempt = attempts.new_attempt(record, first, "a", "default", "pod")
    record.attempts.append(attempt)
    attempt.running_at = attempt.started_at
    records.end_attempt(hook, record, attempt, "evicted", "node drained")
    attempt.ended_at = attempt.running_at + timedelta(minutes=30)  # as if it ran half an hour
    records.charge(hook, record, attempt)
    assert attempt.cost == 0.2
    second = hook.place(task, record.placement_id(2), exclude={"a": "evicted"})
    assert second.cluster == "b" and second.extra["cost"]["cheapest_compliant"]["cluster"] == "b"
    retry = attempts.new_attempt(record, second, "b", "default", "pod")
    record.attempts.append(retry)
    retry.running_at = retry.started_at
    retry.ended_at = retry.running_at + timedelta(hours=1)
    records.charge(hook, record, retry)
    assert retry.cost == 0.8  # b: 4 x 0.2 for an hour
    assert record.cost(now) == (1.0, 0.0)
    charges = {c["cluster"]: c for c in hook.charges()}
    assert (charges["a"]["cost"], charges["a"]["outcome"], charges["b"]["cost"]) == (0.2, "evicted", 0.8)
    assert record.tenant == "team-b"
