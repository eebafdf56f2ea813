"""``GET .../log?follow=true`` ends as soon as the container is terminated, whatever terminated it.

KubernetesPodOperator follows the base container's log until the stream ends; a stream that outlives its
container leaves the task hanging until the client's read timeout.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from kubernetes import client

from airflow_provider_fedsched.sim import SimFederation, wait_for
from tests.sim.conftest import pod_body, unique

LONG = {"sim.fedsched.io/duration": "60", "sim.fedsched.io/logs": '["first", "second", "third"]'}
# Simulated grace long enough (3000 s * 0.02 = 60 s real) that only an early end passes the test.
LONG_GRACE = 3000
# Real seconds a stream may take to end once the container is terminated.
END_WITHIN = 3.0


@dataclass
class Follower:
    """Reads a follow stream in a thread, the way KubernetesPodOperator does (``_preload_content=False``)."""

    chunks: list[bytes] = field(default_factory=list)
    ended: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None

    @property
    def text(self) -> str:
        return b"".join(self.chunks).decode()


def follow(api: client.CoreV1Api, name: str, namespace: str = "default") -> Follower:
    follower = Follower()
    # The request returns once the headers arrive; the body streams as the container writes.
    response = api.read_namespaced_pod_log(
        name, namespace, container="base", follow=True, _preload_content=False, _request_timeout=60
    )

    def read() -> None:
        try:
            for chunk in response.stream(amt=64, decode_content=False):
                follower.chunks.append(chunk)
        except BaseException as exc:  # a read timeout shows up here; the test then fails on `error`
            follower.error = exc
        finally:
            response.release_conn()
            follower.ended.set()

    threading.Thread(target=read, name=f"follow-{name}", daemon=True).start()
    return follower


def start_long_pod(fed: SimFederation, cluster: str, api: client.CoreV1Api, name: str, **spec: Any) -> None:
    api.create_namespaced_pod("default", pod_body(name, annotations=LONG, **spec))
    fed[cluster].wait_for_phase("default", name, "Running")


def assert_ends(follower: Follower) -> None:
    wait_for(follower.ended.is_set, END_WITHIN, message="follow stream still open after termination")
    assert follower.error is None, follower.error


def _terminated(pod: dict[str, Any]) -> dict[str, Any]:
    statuses = pod["status"]["containerStatuses"]
    assert [cs["name"] for cs in statuses] == ["base"]
    state = statuses[0]["state"]
    assert set(state) == {"terminated"}, state
    assert statuses[0]["ready"] is False and statuses[0]["started"] is False
    return dict(state["terminated"])


def _evict(fed: SimFederation, api: client.CoreV1Api, name: str) -> None:
    fed["east-cpu"].faults.evict_pod("default", name)


def _delete(fed: SimFederation, api: client.CoreV1Api, name: str) -> None:
    api.delete_namespaced_pod(name, "default", grace_period_seconds=LONG_GRACE)


def _api_evict(fed: SimFederation, api: client.CoreV1Api, name: str) -> None:
    api.create_namespaced_pod_eviction(
        name,
        "default",
        client.V1Eviction(
            metadata=client.V1ObjectMeta(name=name, namespace="default"),
            delete_options=client.V1DeleteOptions(grace_period_seconds=LONG_GRACE),
        ),
    )


def _delete_now(fed: SimFederation, api: client.CoreV1Api, name: str) -> None:
    api.delete_namespaced_pod(name, "default", grace_period_seconds=0)


@pytest.mark.parametrize(
    "terminate",
    [_evict, _delete, _api_evict, _delete_now],
    ids=["node-pressure-eviction", "graceful-delete", "api-eviction", "immediate-delete"],
)
def test_follow_ends_when_the_container_is_terminated(
    fed: SimFederation,
    east: client.CoreV1Api,
    terminate: Callable[[SimFederation, client.CoreV1Api, str], None],
) -> None:
    handle = fed["east-cpu"]
    name = unique("follow")
    start_long_pod(fed, "east-cpu", east, name)
    follower = follow(east, name)
    wait_for(lambda: "first" in follower.text, 10, message="first line streamed")
    assert not follower.ended.is_set()
    terminate(fed, east, name)
    assert_ends(follower)
    assert follower.text.splitlines() == ["first"]  # nothing after the kill, and no lost lines
    pod = handle.pod("default", name)
    if terminate is _delete_now:
        assert pod is None
        return
    assert pod is not None
    terminated = _terminated(pod)
    assert terminated["exitCode"] == 137
    if terminate is _evict:
        assert (pod["status"]["phase"], pod["status"]["reason"]) == ("Failed", "Evicted")
        assert terminated["reason"] == "ContainerStatusUnknown"
        assert pod["metadata"].get("deletionTimestamp") is None
    else:
        # Still Terminating for the long grace period, yet the stream has already ended.
        assert pod["metadata"]["deletionTimestamp"]
        assert terminated["reason"] == "Error"
        handle.delete_pod("default", name, grace=0)


def test_follow_of_an_evicted_pod_returns_its_lines_and_ends(
    fed: SimFederation, east: client.CoreV1Api
) -> None:
    name = unique("follow-after")
    start_long_pod(fed, "east-cpu", east, name)
    wait_for(lambda: fed["east-cpu"].logs("default", name), 10)
    fed["east-cpu"].faults.evict_pod("default", name)
    follower = follow(east, name)
    assert_ends(follower)
    assert follower.text.splitlines()[0] == "first"


def test_follow_ends_on_preemption(small_fed: SimFederation, solo: client.CoreV1Api) -> None:
    handle = small_fed["solo"]
    names = [unique("victim") for _ in range(2)]
    followers = {}
    for name in names:  # one per 2-cpu node: the cluster is full
        start_long_pod(small_fed, "solo", solo, name, cpu="1500m")
        followers[name] = follow(solo, name)
    handle.priority_pod(unique("vip"), cpu="1")

    def preempted() -> str | None:
        for name in names:
            pod = handle.pod("default", name)
            if pod is None or pod["metadata"].get("deletionTimestamp"):
                return name
        return None

    victim = wait_for(preempted, 10, message="a victim preempted")
    assert_ends(followers[victim])
    survivor = next(n for n in names if n != victim)
    assert not followers[survivor].ended.is_set()
    handle.delete_pod("default", survivor, grace=0)
    assert_ends(followers[survivor])


def test_follow_ends_on_taint_manager_deletion(small_fed: SimFederation, solo: client.CoreV1Api) -> None:
    handle = small_fed["solo"]
    name = unique("follow-nr")
    toleration = {
        "key": "node.kubernetes.io/unreachable",
        "operator": "Exists",
        "effect": "NoExecute",
        "tolerationSeconds": 5,
    }
    start_long_pod(small_fed, "solo", solo, name, tolerations=[toleration])
    follower = follow(solo, name)
    running = handle.pod("default", name)
    assert running is not None
    node = running["spec"]["nodeName"]
    handle.faults.node_not_ready(node)
    handle.wait_for_pod("default", name, lambda p: p["metadata"].get("deletionTimestamp") is not None)
    assert_ends(follower)
    # The unreachable kubelet never confirms: the pod stays Terminating until the node returns.
    assert handle.pod("default", name) is not None
    handle.faults.node_ready(node)
    handle.wait_for_gone("default", name)
