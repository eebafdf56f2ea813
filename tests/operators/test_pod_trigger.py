"""FederatedPodTrigger against the simulated federation: real HTTP, the triggerer's own event loop."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from airflow_provider_fedsched.hooks.federation import FederationHook
from airflow_provider_fedsched.sim import SimFederation
from airflow_provider_fedsched.triggers.pod import LATE_START, FederatedPodTrigger

pytestmark = [pytest.mark.airflow]


def start_pod(fed: SimFederation, cluster: str, name: str, duration: float) -> None:
    fed[cluster].create_pod(
        "default",
        {
            "metadata": {"name": name, "annotations": {"sim.fedsched.io/duration": str(duration)}},
            "spec": {"restartPolicy": "Never", "containers": [{"name": "base", "image": "busybox"}]},
        },
    )


def trigger(
    federation: Path,
    cluster: str,
    pod: str,
    cls: type[FederatedPodTrigger] = FederatedPodTrigger,
    **kwargs: Any,
) -> FederatedPodTrigger:
    spec = FederationHook(str(federation)).serializable_source()
    return cls(
        federation=spec,
        cluster=cluster,
        conn_id=f"k8s_{cluster.replace('-', '_')}",
        pod_name=pod,
        pod_namespace="default",
        poll_interval=0.2,
        **{"not_before": time.time(), **kwargs},
    )


def first_event(watcher: FederatedPodTrigger, timeout: float = 60) -> dict[str, Any]:
    async def run() -> dict[str, Any]:
        async for event in watcher.run():
            return dict(event.payload)
        raise AssertionError("the trigger ended without an event")

    return asyncio.run(asyncio.wait_for(run(), timeout))


def test_kwargs_carry_the_connection_id_never_credentials(
    sim_federation: SimFederation, federation: Path
) -> None:
    _, kwargs = trigger(federation, "east-cpu", "p").serialize()
    text = json.dumps(kwargs)
    assert kwargs["conn_id"] == "k8s_east_cpu" and kwargs["cluster"] == "east-cpu"
    for handle in sim_federation.handles.values():
        assert handle.token not in text
    assert "kube_config" not in text and "certificate" not in text and "token" not in text


def test_a_finished_pod_fires_done_and_never_before_the_floor(
    sim_federation: SimFederation, federation: Path
) -> None:
    start_pod(sim_federation, "east-cpu", "trig-done", duration=1)
    started = time.time()
    event = first_event(trigger(federation, "east-cpu", "trig-done", not_before=started + 2))
    assert event["status"] == "done" and event["fedsched_cluster"] == "east-cpu" and event["version"] == 2
    assert time.time() - started >= 2  # held back: a short deferral races the scheduler
    sim_federation["east-cpu"].delete_pod("default", "trig-done", grace=0)


def test_ambient_kube_configuration_plays_no_part(
    sim_federation: SimFederation, federation: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """KUBECONFIG and ~/.kube/config of the triggerer process point elsewhere: the trigger does not care."""
    bogus = tmp_path / "kubeconfig"
    bogus.write_text(yaml.safe_dump({"apiVersion": "v1", "clusters": [], "contexts": [], "users": []}))
    monkeypatch.setenv("KUBECONFIG", str(bogus))
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / ".kube").mkdir()
    (tmp_path / ".kube" / "config").write_text("not: [a kubeconfig")
    start_pod(sim_federation, "north-gpu", "trig-ambient", duration=1)
    assert first_event(trigger(federation, "north-gpu", "trig-ambient"))["status"] == "done"
    sim_federation["north-gpu"].delete_pod("default", "trig-ambient", grace=0)


def test_an_outage_shorter_than_the_grace_is_waited_out(
    sim_federation: SimFederation, federation: Path
) -> None:
    start_pod(sim_federation, "west-general", "trig-short", duration=30)  # 3 s at the tests' time scale
    sim_federation["west-general"].faults.down()
    watcher = trigger(federation, "west-general", "trig-short", unreachable_grace=60)

    async def run() -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        loop.call_later(2, sim_federation["west-general"].faults.up)
        async for event in watcher.run():
            return dict(event.payload)
        raise AssertionError("no event")

    event = asyncio.run(asyncio.wait_for(run(), 60))
    assert event["status"] == "done"
    sim_federation["west-general"].delete_pod("default", "trig-short", grace=0)


@pytest.mark.parametrize("late", [False, True])
def test_a_preemptible_task_s_late_trigger_waits_for_a_silent_cluster_an_early_one_does_not(
    sim_federation: SimFederation, federation: Path, late: bool
) -> None:
    """A preemptible task's trigger (grace 0) fires ``lost`` at its first unanswered read, unless that
    read comes late after the deferral: the pod, unseen meanwhile, may have ended, so it is waited for."""
    name = f"trig-{'late' if late else 'early'}"
    start_pod(sim_federation, "west-general", name, duration=1)
    sim_federation["west-general"].wait_for_phase("default", name, "Succeeded")
    deferred_at = time.time() - (LATE_START + 5 if late else 0)
    watcher = trigger(
        federation, "west-general", name, unreachable_grace=0, result_grace=60, deferred_at=deferred_at
    )
    sim_federation["west-general"].faults.down()

    async def run() -> dict[str, Any]:
        asyncio.get_running_loop().call_later(2, sim_federation["west-general"].faults.up)
        async for event in watcher.run():
            return dict(event.payload)
        raise AssertionError("no event")

    try:
        event = asyncio.run(asyncio.wait_for(run(), 60))
    finally:
        sim_federation["west-general"].faults.up()
    assert (event["status"], event.get("phase")) == (("done", "Succeeded") if late else ("lost", None))
    sim_federation["west-general"].delete_pod("default", name, grace=0)


def test_an_outage_longer_than_the_grace_is_lost_with_a_reason(
    sim_federation: SimFederation, federation: Path
) -> None:
    start_pod(sim_federation, "west-general", "trig-long", duration=600)
    sim_federation["west-general"].faults.down()
    try:
        started = time.monotonic()
        event = first_event(trigger(federation, "west-general", "trig-long", unreachable_grace=2))
        took = time.monotonic() - started
    finally:
        sim_federation["west-general"].faults.up()
    assert event["status"] == "lost"
    assert event["message"].startswith("connection refused at http://127.0.0.1:")
    assert 2 <= took < 10
    sim_federation["west-general"].delete_pod("default", "trig-long", grace=0)


def test_a_missing_connection_is_an_error_event(sim_federation: SimFederation, federation: Path) -> None:
    watcher = trigger(federation, "east-cpu", "whatever")
    watcher.federation = {
        **watcher.federation,
        "clusters": [{**c, "conn_id": "k8s_nowhere"} for c in watcher.federation["clusters"]],
    }
    event = first_event(watcher)
    assert event["status"] == "error" and "connection 'k8s_nowhere'" in event["message"]


def test_on_kill_deletes_the_pod_and_confirms_it(sim_federation: SimFederation, federation: Path) -> None:
    start_pod(sim_federation, "east-cpu", "trig-killed", duration=600)
    watcher = trigger(federation, "east-cpu", "trig-killed")
    asyncio.run(watcher.on_kill())
    assert sim_federation["east-cpu"].pod("default", "trig-killed") is None


class _MeetingTrigger(FederatedPodTrigger):
    """Its check of the task instance returns only once the other trigger's check has begun too."""

    meeting = threading.Barrier(2, timeout=20)
    met: list[bool] = []

    def _task_state_if_not_deferred(self) -> str | None:
        try:
            self.meeting.wait()
            self.met.append(True)
        except threading.BrokenBarrierError:
            self.met.append(False)
        return None


def test_one_trigger_s_slow_start_holds_no_other_back(
    sim_federation: SimFederation, federation: Path
) -> None:
    """A triggerer starts many triggers at once: their SDK calls (spec, connection, task state) run side
    by side, not one after the other in one shared thread (the soak's triggers first read their pods 15 s
    after the deferral, when a pod had ended unseen and its cluster gone silent)."""
    for name in ("trig-meet-a", "trig-meet-b"):
        start_pod(sim_federation, "east-cpu", name, duration=1)
    watchers = [
        trigger(federation, "east-cpu", name, cls=_MeetingTrigger) for name in ("trig-meet-a", "trig-meet-b")
    ]

    async def first(watcher: FederatedPodTrigger) -> dict[str, Any]:
        async for event in watcher.run():
            return dict(event.payload)
        raise AssertionError("the trigger ended without an event")

    async def both() -> list[dict[str, Any]]:
        return await asyncio.gather(*(first(watcher) for watcher in watchers))

    events = asyncio.run(asyncio.wait_for(both(), 90))
    assert [event["status"] for event in events] == ["done", "done"]
    assert _MeetingTrigger.met == [True] * 4  # each checked its task instance before and after watching
    for name in ("trig-meet-a", "trig-meet-b"):
        sim_federation["east-cpu"].delete_pod("default", name, grace=0)
