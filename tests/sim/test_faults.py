"""Each fault, seen from the client side and in the status shapes and events it leaves."""

from __future__ import annotations

import json
import time

import pytest
import urllib3
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from airflow_provider_fedsched.sim import SimFederation, wait_for
from airflow_provider_fedsched.sim.util import ApiError
from tests.sim.conftest import pod_body, unique


def test_latency(small_fed: SimFederation, solo: client.CoreV1Api) -> None:
    small_fed["solo"].faults.latency(0.3)
    start = time.monotonic()
    solo.list_namespaced_pod("default")
    assert time.monotonic() - start >= 0.3
    small_fed["solo"].faults.latency(0)


def test_down_and_up_on_the_same_port(small_fed: SimFederation, solo: client.CoreV1Api) -> None:
    handle = small_fed["solo"]
    port = handle.port
    handle.faults.down()
    with pytest.raises(urllib3.exceptions.MaxRetryError) as exc:
        solo.list_namespaced_pod("default", _request_timeout=2)
    assert "Connection refused" in str(exc.value)
    handle.faults.up()
    assert handle.port == port
    assert solo.list_namespaced_pod("default").items == []


def test_error_burst_with_retry_after(small_fed: SimFederation, solo: client.CoreV1Api) -> None:
    small_fed["solo"].faults.fail(500, times=2, route=r"/pods")
    for _ in range(2):
        with pytest.raises(ApiException) as exc:
            solo.list_namespaced_pod("default")
        assert exc.value.status == 500 and json.loads(exc.value.body)["reason"] == "InternalError"
    solo.list_node()  # other routes unaffected
    assert solo.list_namespaced_pod("default").items == []
    # POST is not retried by urllib3, so the client sees the 429 and its Retry-After.
    small_fed["solo"].faults.fail(429, times=1, method="POST", retry_after=2)
    with pytest.raises(ApiException) as limited:
        solo.create_namespaced_pod("default", pod_body("not-created"))
    assert limited.value.status == 429 and limited.value.headers["Retry-After"] == "2"
    assert json.loads(limited.value.body)["reason"] == "TooManyRequests"
    assert small_fed["solo"].pod("default", "not-created") is None


def test_dropped_and_expired_watches(small_fed: SimFederation, solo: client.CoreV1Api) -> None:
    handle = small_fed["solo"]
    response = solo.list_node(watch=True, _preload_content=False, timeout_seconds=30)
    wait_for(lambda: handle.call(lambda: len(handle.store.watchers)) == 1)
    assert handle.faults.drop_watches() == 1
    assert len(response.data.decode().splitlines()) == 2  # the initial ADDED events, then a clean end
    response = solo.list_node(watch=True, _preload_content=False, timeout_seconds=30)
    wait_for(lambda: handle.call(lambda: len(handle.store.watchers)) == 1)
    handle.faults.expire_watches()
    last = json.loads(response.data.decode().splitlines()[-1])
    assert last["type"] == "ERROR" and last["object"]["code"] == 410
    # watch.Watch retries once on 410 and then surfaces it.
    rv = "1"
    with pytest.raises(ApiException) as exc:
        for _ in watch.Watch().stream(solo.list_node, resource_version=rv, timeout_seconds=1):
            pass
    assert exc.value.status == 410


def test_node_not_ready_and_taint_manager_eviction(small_fed: SimFederation, solo: client.CoreV1Api) -> None:
    handle = small_fed["solo"]
    name = unique("nr")
    body = pod_body(
        name,
        annotations={"sim.fedsched.io/duration": "3600"},
        tolerations=[
            {
                "key": "node.kubernetes.io/unreachable",
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": 5,
            }
        ],
    )
    solo.create_namespaced_pod("default", body)
    node = handle.wait_for_phase("default", name, "Running")["spec"]["nodeName"]
    handle.faults.node_not_ready(node)
    ready = next(c for c in solo.read_node(node).status.conditions if c.type == "Ready")
    assert (ready.status, ready.reason, ready.message) == (
        "Unknown",
        "NodeStatusUnknown",
        "Kubelet stopped posting node status.",
    )
    taints = {(t.key, t.effect) for t in solo.read_node(node).spec.taints}
    assert taints == {
        ("node.kubernetes.io/unreachable", "NoSchedule"),
        ("node.kubernetes.io/unreachable", "NoExecute"),
    }
    pod = handle.wait_for_pod("default", name, lambda p: p["metadata"].get("deletionTimestamp") is not None)
    disruption = next(c for c in pod["status"]["conditions"] if c["type"] == "DisruptionTarget")
    assert disruption["reason"] == "DeletionByTaintManager"
    ready_cond = next(c for c in pod["status"]["conditions"] if c["type"] == "Ready")
    assert ready_cond["status"] == "False"
    eviction = [e for e in handle.events("default", name) if e["reason"] == "TaintManagerEviction"]
    assert eviction[0]["message"] == f"Marking for deletion Pod default/{name}"
    # New pods avoid the tainted node.
    other = unique("avoid")
    solo.create_namespaced_pod("default", pod_body(other))
    assert handle.wait_for_phase("default", other, "Succeeded")["spec"]["nodeName"] != node
    handle.faults.node_ready(node)
    handle.wait_for_gone("default", name)


def test_node_pressure_eviction(small_fed: SimFederation, solo: client.CoreV1Api) -> None:
    handle = small_fed["solo"]
    name = unique("ev")
    solo.create_namespaced_pod("default", pod_body(name, annotations={"sim.fedsched.io/duration": "3600"}))
    handle.wait_for_phase("default", name, "Running")
    handle.faults.evict_pod("default", name)
    pod = solo.read_namespaced_pod(name, "default")
    assert (pod.status.phase, pod.status.reason) == ("Failed", "Evicted")
    assert pod.status.message.startswith("The node was low on resource: memory. Threshold quantity: 100Mi")
    target = next(c for c in pod.status.conditions if c.type == "DisruptionTarget")
    assert target.reason == "TerminationByKubelet"
    assert any(e["reason"] == "Evicted" and e["type"] == "Warning" for e in handle.events("default", name))


def test_api_eviction(small_fed: SimFederation, solo: client.CoreV1Api) -> None:
    handle = small_fed["solo"]
    name = unique("apiev")
    solo.create_namespaced_pod("default", pod_body(name, annotations={"sim.fedsched.io/duration": "3600"}))
    handle.wait_for_phase("default", name, "Running")
    solo.create_namespaced_pod_eviction(
        name, "default", client.V1Eviction(metadata=client.V1ObjectMeta(name=name, namespace="default"))
    )
    pod = handle.pod("default", name)
    assert pod is not None and pod["metadata"]["deletionTimestamp"]
    assert next(c for c in pod["status"]["conditions"] if c["type"] == "DisruptionTarget")["reason"] == (
        "EvictionByEvictionAPI"
    )
    handle.wait_for_gone("default", name)


def test_scheduler_pause_and_resume(small_fed: SimFederation, solo: client.CoreV1Api) -> None:
    handle = small_fed["solo"]
    handle.scheduler.pause()
    name = unique("paused")
    solo.create_namespaced_pod("default", pod_body(name))
    time.sleep(0.2)  # nothing may happen while paused; a short real wait is the assertion itself
    pod = handle.pod("default", name)
    assert pod is not None and not pod["spec"].get("nodeName") and not handle.events("default", name)
    handle.scheduler.resume()
    # What the pause held back is scheduling: the pod is bound once it ends. (Not "it then ran": on the
    # test bed a pod starts only once kwok knows its Exec, which took more than the 30 s wait once under
    # CI's load; how pods run is the other tests'.)
    bound = handle.wait_for_pod("default", name, lambda p: bool(p["spec"].get("nodeName")))
    assert bound["spec"]["nodeName"] in {n["metadata"]["name"] for n in handle.nodes()}


def test_quota_fault_sets_and_removes_a_quota(small_fed: SimFederation, solo: client.CoreV1Api) -> None:
    handle = small_fed["solo"]
    result = handle.faults.apply("quota", namespace="default", **{"requests.cpu": "1", "pods": "3"})
    assert result["status"]["hard"] == {"requests.cpu": "1", "pods": "3"}
    with pytest.raises(ApiException) as refused:
        solo.create_namespaced_pod("default", pod_body("too-much", cpu="2"))
    assert (
        refused.value.status == 403 and "exceeded quota: compute" in json.loads(refused.value.body)["message"]
    )
    assert handle.faults.apply("quota", namespace="default") == {"ok": True, "removed": "default/compute"}
    solo.create_namespaced_pod("default", pod_body("fits-now", cpu="2"))
    with pytest.raises(ApiError) as bad:
        handle.faults.apply("quota", **{"requests.cpu": "lots"})
    assert bad.value.code == 422 and "spec.hard[requests.cpu]" in bad.value.message
