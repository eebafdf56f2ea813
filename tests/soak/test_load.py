"""The soak's load and fault schedule cover what the soak promises (docs/reliability.md)."""

from __future__ import annotations

from collections import Counter

import pytest

from airflow_provider_fedsched.federation.resources import parse_quantity
from airflow_provider_fedsched.sim.config import parse_config
from soak.faults import schedule
from soak.load import CLUSTERS, PROFILES, Manifest, allowed_regions, manifest, regions, sim_config


def test_the_full_load_is_at_least_200_mixed_tasks_far_above_capacity() -> None:
    profile = PROFILES["full"]
    plan = manifest(profile)
    assert len(plan.tasks) == profile.tasks >= 200
    kinds = Counter((g["deferrable"], g["preemptible"]) for g in plan.groups for _ in range(g["count"]))
    assert set(kinds) == {(False, False), (False, True), (True, False), (True, True)}
    sovereign = [t for t in plan.tasks if any(allowed_regions()[d] for d in t.datasets)]
    assert 0.3 * len(plan.tasks) < len(sovereign) < 0.8 * len(plan.tasks)
    slots = sum(c["nodes"] * parse_quantity(c["cpu"]) // 1000 for c in CLUSTERS)
    assert len(CLUSTERS) == 5 and slots * 5 < len(plan.tasks)
    assert Counter(t.expect for t in plan.tasks) == {"succeed": 202, "exit": 4, "wait-timeout": 4}
    assert sum(g["count"] for g in plan.groups if g["gang"]) >= 10


def test_the_manifest_is_reproducible_and_round_trips() -> None:
    first, second = manifest(PROFILES["ci"]), manifest(PROFILES["ci"])
    assert first.to_json() == second.to_json()
    assert Manifest.from_json(first.to_json()).tasks == first.tasks
    assert len(first.tasks) == 46 and [(g["count"], g["gang"]) for g in first.groups if g["gang"]] == [(2, 3)]


def test_the_simulated_federation_is_valid_and_every_dataset_region_has_a_cluster() -> None:
    config = parse_config(sim_config())
    assert [c.name for c in config.clusters] == [c["name"] for c in CLUSTERS]
    for dataset, allowed in allowed_regions().items():
        assert allowed is None or set(allowed) <= set(regions().values()), dataset


@pytest.mark.parametrize("executor", ["local", "celery"])
def test_the_full_schedule_has_every_fault_the_soak_promises(executor: str) -> None:
    faults = schedule(PROFILES["full"], executor)
    kinds = Counter(f.kind for f in faults)
    for kind in ("down", "fail", "latency", "node-not-ready", "evict", "quota-fill", "kill-supervisor"):
        assert kinds[kind] >= 1, kind
    assert kinds["restart-triggerer"] == kinds["mark-failed"] == 1
    grace = PROFILES["full"].unreachable_grace
    outages = sorted(f.args["seconds"] for f in faults if f.kind == "down")
    assert outages[0] < grace < outages[-1]
    assert {f.args["preemptible"] for f in faults if f.kind == "evict"} == {True, False}
    assert (kinds["kill-worker"] == 1) == (executor == "celery")


def test_the_ci_schedule_has_four_faults() -> None:
    faults = schedule(PROFILES["ci"], "local", "sim")
    assert [f.kind for f in faults] == ["down", "kill-supervisor", "restart-triggerer", "mark-failed"]
    assert faults[0].args["seconds"] > PROFILES["ci"].unreachable_grace


def test_the_ci_schedule_on_the_test_bed_stops_an_api_server_under_a_non_deferrable_pod() -> None:
    faults = schedule(PROFILES["ci"], "local", "testbed")
    assert [f.kind for f in faults] == [
        *("stop-apiserver", "kill-supervisor", "mark-failed", "restart-triggerer", "node-not-ready"),
        *("kill-etcd", "restart-database"),
    ]
    assert faults[0].args == {"seconds": 18, "deferrable": False}


@pytest.mark.parametrize("executor", ["local", "celery"])
def test_the_full_schedule_on_the_test_bed_has_every_kind_of_the_issue(executor: str) -> None:
    faults = schedule(PROFILES["full"], executor, "testbed")
    kinds = Counter(f.kind for f in faults)
    for kind in (
        *("kill-etcd", "stop-scheduler", "node-not-ready", "delete-node", "quota-fill", "revoke-rbac"),
        *("kill-supervisor", "restart-triggerer", "restart-database"),
    ):
        assert kinds[kind] >= 1, kind
    grace = PROFILES["full"].unreachable_grace
    stops = sorted(f.args["seconds"] for f in faults if f.kind == "stop-apiserver")
    assert stops[0] < grace < stops[-1]
    assert [f.args["seconds"] for f in faults if f.kind == "stop-scheduler"] == [120]
    assert (kinds["kill-worker"] == 1) == (executor == "celery")
    # the full run's eviction needs a Running preemptible pod while east-b's scheduler is stopped: it
    # looks for one well past the stop's end instead of being skipped (two full runs found none in 60 s)
    evict = next(f for f in faults if f.kind == "evict")
    stop = next(f for f in faults if f.kind == "stop-scheduler")
    assert evict.at + evict.patience > stop.at + stop.args["seconds"] + 60


def test_the_ci_load_still_runs_pods_when_its_last_test_bed_fault_needing_a_target_is_applied() -> None:
    """Faults look for a Running pod for a minute after their time: pods longer than that, in members of
    two nodes (where a node fault may strike), keep the faults from being skipped on a fast machine."""
    from soak.faults import testbed_schedule

    profile = PROFILES["ci"]
    plan = manifest(profile)
    needing = [f for f in testbed_schedule(profile, "local") if f.kind in ("node-not-ready", "kill-etcd")]
    last = max(f.at for f in needing)
    patience = min(f.patience for f in needing)
    two_nodes = {c["name"] for c in CLUSTERS if c["nodes"] >= 2}
    long = [t for t in plan.tasks if t.duration > last + patience / 2]
    assert len(long) >= 4 and {t.expect for t in long} == {"succeed"}
    for task in long:
        allowed = set().union(*(allowed_regions()[d] or [] for d in task.datasets))
        assert allowed and {c for c, r in regions().items() if r in allowed} <= two_nodes, task
    assert {g["deferrable"] for g in plan.groups if g["task_id"].startswith("long_")} == {True, False}
