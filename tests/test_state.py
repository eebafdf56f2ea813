"""Shared federation state on the in-memory backend (the Airflow backend is exercised end to end)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from airflow_provider_fedsched.federation.snapshot import ClusterSnapshot
from airflow_provider_fedsched.state import RESERVATION_TTL, FederationState, MemoryStateBackend

NOW = datetime(2026, 11, 30, 12, tzinfo=UTC)


def state() -> FederationState:
    return FederationState(MemoryStateBackend(), federation="test")


def test_snapshot_round_trip() -> None:
    shared = state()
    snapshot = ClusterSnapshot(cluster="east", observed_at=NOW, reachable=False, reason="down")
    shared.put_snapshot(snapshot)
    assert shared.get_snapshot("east") == snapshot
    assert shared.snapshots(["east", "west"]) == {"east": snapshot}


def test_cooldown_expires() -> None:
    shared = state()
    shared.cool_down("east", NOW + timedelta(seconds=120), "insufficient: quota")
    assert shared.cooldown("east", NOW) == (NOW + timedelta(seconds=120), "insufficient: quota")
    assert shared.cooldowns(["east", "west"], NOW) == {"east": NOW + timedelta(seconds=120)}
    assert shared.cooldown("east", NOW + timedelta(seconds=121)) is None


def test_reservation_held_until_a_later_snapshot_shows_the_placement() -> None:
    shared = state()
    shared.reserve("east", {"cpu": 2000}, NOW, "p1")
    shared.reserve("east", {"cpu": 1000}, NOW, "p2")
    before = ClusterSnapshot(cluster="east", observed_at=NOW - timedelta(seconds=1), placements=["p1"])
    assert shared.reservations({"east": before}, NOW) == {"east": {"cpu": 3000}}
    after = ClusterSnapshot(cluster="east", observed_at=NOW + timedelta(seconds=1), placements=["p1"])
    assert shared.reservations({"east": after}, NOW) == {"east": {"cpu": 1000}}
    shared.release("east", "p2")
    assert shared.reservations({"east": after}, NOW) == {}


def test_reservation_of_a_lost_worker_expires() -> None:
    shared = state()
    shared.reserve("east", {"cpu": 2000}, NOW, "p1")
    assert shared.reservations({}, NOW + RESERVATION_TTL + timedelta(seconds=1)) == {}


def test_lease_is_exclusive_until_it_expires_or_ends() -> None:
    shared = state()
    ttl = timedelta(seconds=5)
    assert shared.try_leases(["east"], "w1", NOW, ttl) == ["east"]
    assert shared.try_leases(["east"], "w2", NOW, ttl) == []
    assert shared.try_leases(["east"], "w2", NOW + timedelta(seconds=6), ttl) == ["east"]
    shared.end_lease("east", "w2")
    assert shared.try_leases(["east"], "w1", NOW, ttl) == ["east"]


def test_orphans_and_history() -> None:
    shared = state()
    shared.add_orphan("east", "default", "pod-a")
    assert shared.orphans("east") == [("default", "pod-a")]
    shared.forget_orphan("east", "default", "pod-a")
    assert shared.orphans("east") == []
    for i in range(250):
        shared.record("east", "outcome", {"i": i})
    history = shared.history("east", "outcome")
    assert len(history) == 200 and history[-1] == {"i": 249}


def test_namespace_cooldown_applies_to_that_namespace_only() -> None:
    shared = state()
    shared.cool_down("east", NOW + timedelta(seconds=60), "quota", namespace="etl")
    shared.cool_down("west", NOW + timedelta(seconds=30), "unreachable")
    assert shared.cooldowns(["east", "west"], NOW, namespace="etl") == {
        "east": NOW + timedelta(seconds=60),
        "west": NOW + timedelta(seconds=30),
    }
    assert shared.cooldowns(["east", "west"], NOW, namespace="default") == {
        "west": NOW + timedelta(seconds=30)
    }
    assert shared.cooldown("east", NOW) is None
    assert shared.cooldown("east", NOW, namespace="etl") == (NOW + timedelta(seconds=60), "quota")
    shared.cool_down("east", NOW + timedelta(seconds=10), "evicted")
    assert shared.cooldown_details("east", NOW) == [
        (None, NOW + timedelta(seconds=10), "evicted"),
        ("etl", NOW + timedelta(seconds=60), "quota"),
    ]
