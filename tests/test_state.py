"""Shared federation state on the in-memory backend (the Airflow backend is exercised end to end)."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest

from airflow_provider_fedsched.federation.snapshot import ClusterSnapshot
from airflow_provider_fedsched.state import (
    RESERVATION_TTL,
    AirflowVariableStateBackend,
    FederationState,
    MemoryStateBackend,
    open_backend,
)

NOW = datetime(2026, 11, 30, 12, tzinfo=UTC)


def state() -> FederationState:
    return FederationState(MemoryStateBackend(), federation="test")


def test_snapshot_round_trip() -> None:
    shared = state()
    snapshot = ClusterSnapshot(cluster="east", observed_at=NOW, reachable=False, reason="down")
    shared.snapshots.put([snapshot])
    assert shared.snapshots.get("east") == snapshot
    assert shared.snapshots.newest(["east", "west"]) == {"east": snapshot}


def test_cooldown_expires() -> None:
    cooldowns = state().cooldowns
    cooldowns.set("east", NOW + timedelta(seconds=120), "insufficient: quota")
    assert cooldowns.get("east", NOW) == (NOW + timedelta(seconds=120), "insufficient: quota")
    assert cooldowns.in_force(["east", "west"], NOW) == {"east": NOW + timedelta(seconds=120)}
    assert cooldowns.get("east", NOW + timedelta(seconds=121)) is None


def test_reservation_held_until_a_later_snapshot_shows_the_placement() -> None:
    reservations = state().reservations
    reservations.hold("east", {"cpu": 2000}, NOW, "p1")
    reservations.hold("east", {"cpu": 1000}, NOW, "p2")
    before = ClusterSnapshot(cluster="east", observed_at=NOW - timedelta(seconds=1), placements=["p1"])
    assert reservations.pending({"east": before}, NOW) == {"east": {"cpu": 3000}}
    after = ClusterSnapshot(cluster="east", observed_at=NOW + timedelta(seconds=1), placements=["p1"])
    assert reservations.pending({"east": after}, NOW) == {"east": {"cpu": 1000}}
    reservations.release("east", "p2")
    assert reservations.pending({"east": after}, NOW) == {}


def test_reservation_of_a_lost_worker_expires() -> None:
    reservations = state().reservations
    reservations.hold("east", {"cpu": 2000}, NOW, "p1")
    assert reservations.pending({}, NOW + RESERVATION_TTL + timedelta(seconds=1)) == {}


def test_lease_is_exclusive_until_it_expires_or_ends() -> None:
    leases = state().leases
    ttl = timedelta(seconds=5)
    assert leases.claim(["east"], "w1", NOW, ttl) == ["east"]
    assert leases.claim(["east"], "w2", NOW, ttl) == []
    assert leases.claim(["east"], "w2", NOW + timedelta(seconds=6), ttl) == ["east"]
    leases.end("east", "w2")
    assert leases.claim(["east"], "w1", NOW, ttl) == ["east"]


def test_orphan_jobs_are_kept_apart_from_pods_and_old_pod_entries_stay_readable() -> None:
    shared = state()
    # What an earlier release wrote for a pod (no "kind"): still a pod.
    shared.backend.set("fedsched/test/orphan/east/default.pod-a", {"namespace": "default", "pod": "pod-a"})
    shared.orphans.add("east", "default", "train", kind="job")
    shared.orphans.add("east", "default", "train")  # a pod of the same name is another orphan
    assert sorted(shared.orphans.of("east")) == [("default", "pod-a"), ("default", "train")]
    assert shared.orphans.of("east", "job") == [("default", "train")]
    shared.orphans.forget("east", "default", "train", kind="job")
    assert shared.orphans.of("east", "job") == []
    assert sorted(shared.orphans.of("east")) == [("default", "pod-a"), ("default", "train")]
    shared.backend.set("fedsched/test/orphan/east/x", {"namespace": "n", "pod": "p", "kind": "cronjob"})
    assert shared.orphans.of("east", "job") == []  # an unknown kind is unreadable, logged, never deleted
    with pytest.raises(ValueError, match="kind"):
        shared.orphans.add("east", "default", "x", kind="cronjob")


def test_deferred_jobs_are_kept_apart_from_deferred_pods() -> None:
    shared = state()
    ti = {"dag_id": "d", "run_id": "r", "task_id": "t", "map_index": -1}
    shared.deferred.add("east", "default", "train", ti)
    shared.deferred.add("east", "default", "train", ti, kind="job")
    assert sorted(e["kind"] for e in shared.deferred.of("east")) == ["job", "pod"]
    shared.deferred.forget("east", "default", "train", "job")
    assert [(e["kind"], e["pod"]) for e in shared.deferred.of("east")] == [("pod", "train")]


def test_orphans_and_history() -> None:
    shared = state()
    shared.orphans.add("east", "default", "pod-a")
    assert shared.orphans.of("east") == [("default", "pod-a")]
    shared.orphans.forget("east", "default", "pod-a")
    assert shared.orphans.of("east") == []
    for i in range(250):
        shared.history.append("east", "outcome", {"at": NOW.isoformat(), "i": i})
    history = shared.history.samples("east", "outcome")
    assert len(history) == 200 and history[0]["i"] == 50 and history[-1]["i"] == 249
    assert len(shared.backend.keys("fedsched/test/history-outcome/east/")) <= 220  # pruned as it goes


def test_concurrent_history_writers_lose_no_sample() -> None:
    """Samples are keys of their own: writers never overwrite each other (no read-modify-write)."""
    shared = state()

    def write(worker: int) -> None:
        for i in range(20):
            shared.history.append("east", "outcome", {"at": NOW.isoformat(), "worker": worker, "i": i})

    threads = [threading.Thread(target=write, args=(w,)) for w in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    samples = shared.history.samples("east", "outcome")
    assert len(samples) == 160
    assert {(s["worker"], s["i"]) for s in samples} == {(w, i) for w in range(8) for i in range(20)}


def test_namespace_cooldown_applies_to_that_namespace_only() -> None:
    cooldowns = state().cooldowns
    cooldowns.set("east", NOW + timedelta(seconds=60), "quota", namespace="etl")
    cooldowns.set("west", NOW + timedelta(seconds=30), "unreachable")
    assert cooldowns.in_force(["east", "west"], NOW, namespace="etl") == {
        "east": NOW + timedelta(seconds=60),
        "west": NOW + timedelta(seconds=30),
    }
    assert cooldowns.in_force(["east", "west"], NOW, namespace="default") == {
        "west": NOW + timedelta(seconds=30)
    }
    assert cooldowns.get("east", NOW) is None
    assert cooldowns.get("east", NOW, namespace="etl") == (NOW + timedelta(seconds=60), "quota")
    cooldowns.set("east", NOW + timedelta(seconds=10), "evicted")
    assert cooldowns.details("east", NOW) == [
        (None, NOW + timedelta(seconds=10), "evicted"),
        ("etl", NOW + timedelta(seconds=60), "quota"),
    ]


def test_the_backend_is_chosen_in_one_place_and_declares_its_consistency() -> None:
    assert isinstance(open_backend("memory"), MemoryStateBackend)
    assert isinstance(open_backend(None), AirflowVariableStateBackend)
    given = MemoryStateBackend()
    assert open_backend(given) is given
    with pytest.raises(ValueError, match="unknown backend 'redis'"):
        open_backend("redis")  # type: ignore[arg-type]
    memory, variables = MemoryStateBackend.consistency, AirflowVariableStateBackend.consistency
    assert (memory.shared_by, memory.settle_seconds) == ("process", 0.0)
    assert variables.shared_by == "deployment" and variables.settle_seconds > 0
    assert not variables.compare_and_set


def test_the_clusters_with_orphans_come_from_one_listing() -> None:
    shared = state()
    assert shared.orphans.clusters() == set()
    shared.orphans.add("east", "default", "a")
    shared.orphans.add("west", "default", "b", kind="job")
    assert shared.orphans.clusters() == {"east", "west"}
    shared.orphans.forget("east", "default", "a")
    assert shared.orphans.clusters() == {"west"}
