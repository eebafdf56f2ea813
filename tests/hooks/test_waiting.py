"""A try waiting for a compliant cluster (hooks/waiting.py) against a simulated member: it decides again
when shared state shows news, not on a timer, and asks no cluster while nothing changes."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from airflow_provider_fedsched.federation.request import TaskRequest
from airflow_provider_fedsched.hooks.federation import FederationHook
from airflow_provider_fedsched.hooks.waiting import WaitFor, WaitWatch
from airflow_provider_fedsched.sim import SimFederation
from airflow_provider_fedsched.state import FederationState, MemoryStateBackend

pytestmark = pytest.mark.sim

CONFIG = {
    "time_scale": 0.1,
    "clusters": [
        {
            "name": "solo",
            "region": "r1",
            "prices": {"cpu_hour": 0.01, "memory_gib_hour": 0.001},
            "node_pools": [{"name": "p", "count": 1, "cpu": "4", "memory": "16Gi"}],
        }
    ],
}
TWO_CPU = TaskRequest(resources={"cpu": 2000, "memory": 2**30}, expected_duration_seconds=7200)


@pytest.fixture(scope="module")
def fed() -> Iterator[SimFederation]:
    with SimFederation(CONFIG) as federation:
        yield federation


def hook_for(fed: SimFederation, tmp_path: Path, ttl: float = 600) -> FederationHook:
    spec = yaml.safe_load((fed.state_dir / "federation.yaml").read_text())
    spec["policy"]["snapshot_ttl_seconds"] = ttl
    path = tmp_path / "federation.yaml"
    path.write_text(yaml.safe_dump(spec))
    return FederationHook(
        path, kubeconfig=fed.state_dir / "kubeconfig", state=FederationState(MemoryStateBackend())
    )


def filler(fed: SimFederation, name: str, cpu: str) -> None:
    """A pod outside the federation that holds ``cpu`` of the only node for an hour."""
    node = fed["solo"].nodes()[0]["metadata"]["name"]
    fed["solo"].create_pod(
        "default",
        {
            "metadata": {"name": name, "annotations": {"sim.fedsched.io/duration": "3600"}},
            "spec": {
                "nodeName": node,
                "containers": [{"name": "c", "image": "busybox", "resources": {"requests": {"cpu": cpu}}}],
            },
        },
    )


def counting_collects(hook: FederationHook, monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """Every snapshot the hook takes, by the clusters asked (the calls go on to the member as before)."""
    asked: list[list[str]] = []
    collect = hook.collect

    def counted(clusters: Any = None) -> Any:
        asked.append(sorted(clusters) if clusters is not None else ["<all>"])
        return collect(clusters)

    monkeypatch.setattr(hook, "collect", counted)
    return asked


def test_decides_again_when_a_placement_on_its_cluster_ends_with_a_fresh_snapshot(
    fed: SimFederation, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hook = hook_for(fed, tmp_path)
    blocker = hook.place(TaskRequest(resources={"cpu": 3000}), "blocker")
    assert blocker.outcome == "placed"
    waiting = hook.place(TWO_CPU, "waiter")
    assert waiting.outcome == "wait", waiting.reason
    watch = WaitWatch.start(hook, TWO_CPU, "waiter", waiting.decided_at)
    asked = counting_collects(hook, monkeypatch)

    # Nothing changed: no decision, no cluster asked (a look at shared state only).
    assert [watch.check() for _ in range(3)] == [None, None, None]
    assert watch.decided == 0 and asked == []

    released_at = datetime.now(UTC)
    hook.release("solo", "blocker")  # the blocker's try ended
    news = watch.check()

    assert news is not None and news.startswith("a placement on solo ended")
    assert "the decision is now 'placed'" in news
    assert watch.decided == 1
    # The snapshot taken before the placement ended could not show its room: it was taken again.
    assert asked == [["solo"]]
    snapshot = hook.stored_snapshot("solo")
    assert snapshot is not None and snapshot.observed_at >= released_at


def test_news_that_leaves_no_room_keeps_it_waiting_silently(fed: SimFederation, tmp_path: Path) -> None:
    hook = hook_for(fed, tmp_path)
    hook.place(TaskRequest(resources={"cpu": 3000}), "blocker")
    hook.place(TaskRequest(resources={"cpu": 500}), "small")
    waiting = hook.place(TWO_CPU, "waiter")
    assert waiting.outcome == "wait"
    watch = WaitWatch.start(hook, TWO_CPU, "waiter", waiting.decided_at)

    hook.release("solo", "small")  # 0.5 cpu back: still not 2
    assert watch.check() is None and watch.decided == 1
    assert watch.check() is None and watch.decided == 1  # the same news is not news twice
    hook.release("solo", "blocker")
    assert "'placed'" in str(watch.check())


def test_room_freed_outside_the_federation_is_seen_by_the_waiter_refreshing_a_stale_snapshot(
    fed: SimFederation, tmp_path: Path
) -> None:
    """A pod no try of the federation ran ends: no placement ends, no reservation is released; the
    waiting try refreshes the snapshot nobody else refreshes once it is older than the TTL."""
    from airflow_provider_fedsched.sim import wait_for

    filler(fed, "outsider", "3")
    try:
        hook = hook_for(fed, tmp_path, ttl=1)
        waiting = hook.place(TWO_CPU, "waiter")
        assert waiting.outcome == "wait", waiting.reason
        watch = WaitWatch.start(hook, TWO_CPU, "waiter", waiting.decided_at)
    finally:
        fed["solo"].delete_pod("default", "outsider", grace=0)
        fed["solo"].wait_for_gone("default", "outsider", timeout=30)

    news = wait_for(watch.check, timeout=30)
    assert "the decision is now 'placed'" in news


def test_what_a_deferred_wait_carries_round_trips_as_json() -> None:
    import json

    wait_for = WaitFor(
        request=TWO_CPU,
        placement_id="p-1",
        since=datetime(2026, 1, 1, tzinfo=UTC),
        seen={"solo": datetime(2026, 1, 1, 0, 0, 5, tzinfo=UTC)},
        exclude={"solo": "insufficient"},
        excluded_at={"solo": datetime(2026, 1, 1, tzinfo=UTC)},
    )
    again = WaitFor.from_json(json.loads(json.dumps(wait_for.to_json())))
    assert again == wait_for
