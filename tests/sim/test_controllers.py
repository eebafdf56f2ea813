"""Scheduler, kubelet, quota, logs and exec behaviour, asserted on real-cluster status shapes."""

from __future__ import annotations

import json

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException
from kubernetes.stream import stream

from airflow_provider_fedsched.sim import SimFederation, wait_for
from tests.sim.conftest import pod_body, unique


def _events(api: client.CoreV1Api, name: str, reason: str | None = None) -> list[client.CoreV1Event]:
    items = api.list_namespaced_event("default", field_selector=f"involvedObject.name={name}").items
    return [e for e in items if reason is None or e.reason == reason]


def test_pod_lifecycle_status_shapes(east: client.CoreV1Api, fed: SimFederation) -> None:
    name = unique("life")
    east.create_namespaced_pod("default", pod_body(name, annotations={"sim.fedsched.io/duration": "5"}))
    running = fed["east-cpu"].wait_for_phase("default", name, "Running")
    conds = {c["type"]: c["status"] for c in running["status"]["conditions"]}
    assert conds == {
        "PodScheduled": "True",
        "PodReadyToStartContainers": "True",
        "Initialized": "True",
        "Ready": "True",
        "ContainersReady": "True",
    }
    assert running["status"]["podIP"] and running["status"]["hostIP"] and running["status"]["startTime"]
    assert "running" in running["status"]["containerStatuses"][0]["state"]
    done = fed["east-cpu"].wait_for_phase("default", name, "Succeeded")
    term = done["status"]["containerStatuses"][0]["state"]["terminated"]
    assert term["exitCode"] == 0 and term["reason"] == "Completed" and term["finishedAt"]
    reasons = [e.reason for e in _events(east, name)]
    assert reasons[:1] == ["Scheduled"] and {"Pulling", "Pulled", "Created", "Started"} <= set(reasons)
    scheduled = _events(east, name, "Scheduled")[0]
    assert scheduled.source.component == "default-scheduler"
    assert scheduled.message == f"Successfully assigned default/{name} to {done['spec']['nodeName']}"


def test_exit_code_and_restart_on_failure(east: client.CoreV1Api, fed: SimFederation) -> None:
    name = unique("fail")
    east.create_namespaced_pod("default", pod_body(name, annotations={"sim.fedsched.io/exit-code": "3"}))
    failed = fed["east-cpu"].wait_for_phase("default", name, "Failed")
    term = failed["status"]["containerStatuses"][0]["state"]["terminated"]
    assert term["exitCode"] == 3 and term["reason"] == "Error"
    again = unique("again")
    east.create_namespaced_pod(
        "default", pod_body(again, restart="OnFailure", annotations={"sim.fedsched.io/exit-code": "1"})
    )
    pod = fed["east-cpu"].wait_for_pod(
        "default",
        again,
        lambda p: (p["status"].get("containerStatuses") or [{}])[0].get("restartCount", 0) >= 1,
    )
    assert pod["status"]["containerStatuses"][0]["lastState"]["terminated"]["exitCode"] == 1


def test_image_pull_failure(east: client.CoreV1Api, fed: SimFederation) -> None:
    name = unique("pull")
    east.create_namespaced_pod(
        "default",
        pod_body(name, annotations={"sim.fedsched.io/image-pull-error": "rpc error: manifest unknown"}),
    )
    pod = fed["east-cpu"].wait_for_pod(
        "default",
        name,
        lambda p: (
            (p["status"].get("containerStatuses") or [{}])[0]
            .get("state", {})
            .get("waiting", {})
            .get("reason")
            == "ErrImagePull"
        ),
    )
    # The pull's error reaches the user in the container's status (a kwok Stage's events are fixed text).
    waiting = pod["status"]["containerStatuses"][0]["state"]["waiting"]
    assert pod["status"]["phase"] == "Pending" and waiting["message"] == "rpc error: manifest unknown"
    assert any(e.reason == "Failed" and e.type == "Warning" for e in _events(east, name))


def test_failed_scheduling_message_and_aggregation(small_fed: SimFederation, solo: client.CoreV1Api) -> None:
    name = unique("big")
    solo.create_namespaced_pod("default", pod_body(name, cpu="3"))
    expected = (
        "0/2 nodes are available: 2 Insufficient cpu. preemption: 0/2 nodes are available: "
        "2 No preemption victims found for incoming pod."
    )
    wait_for(lambda: _events(solo, name, "FailedScheduling"))
    event = _events(solo, name, "FailedScheduling")[0]
    assert event.type == "Warning" and event.message == expected
    pod = solo.read_namespaced_pod(name, "default")
    cond = next(c for c in pod.status.conditions if c.type == "PodScheduled")
    assert (pod.status.phase, cond.status, cond.reason, cond.message) == (
        "Pending",
        "False",
        "Unschedulable",
        expected,
    )
    # Backoff retries aggregate into the same event (count++), not new ones.
    wait_for(lambda: _events(solo, name, "FailedScheduling")[0].count >= 2, 5)
    assert len(_events(solo, name, "FailedScheduling")) == 1
    # A new node that fits wakes the scheduler.
    small_fed["solo"].add_node("big-node", cpu="8", memory="16Gi")
    wait_for(lambda: solo.read_namespaced_pod(name, "default").spec.node_name == "big-node")


def test_taints_affinity_and_unschedulable_fragments(
    small_fed: SimFederation, solo: client.CoreV1Api
) -> None:
    handle = small_fed["solo"]
    handle.add_node(
        "gpu-node",
        cpu="8",
        memory="16Gi",
        extra={"nvidia.com/gpu": "2"},
        taints=[{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}],
    )
    cordoned = handle.nodes()[0]["metadata"]["name"]
    solo.patch_node(cordoned, {"spec": {"unschedulable": True}})
    name = unique("sel")
    solo.create_namespaced_pod("default", pod_body(name, nodeSelector={"zone": "x"}))
    wait_for(lambda: _events(solo, name, "FailedScheduling"))
    assert _events(solo, name, "FailedScheduling")[0].message == (
        "0/3 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, "
        "1 node(s) had untolerated taint {nvidia.com/gpu: present}, 1 node(s) were unschedulable. "
        "preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling."
    )
    gpu = unique("gpu")
    body = pod_body(
        gpu,
        tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        affinity={
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {"key": "kubernetes.io/hostname", "operator": "In", "values": ["gpu-node"]}
                            ]
                        }
                    ]
                }
            }
        },
    )
    body["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "1"}}
    solo.create_namespaced_pod("default", body)
    wait_for(lambda: solo.read_namespaced_pod(gpu, "default").spec.node_name == "gpu-node")


def test_preemption(small_fed: SimFederation, solo: client.CoreV1Api) -> None:
    handle = small_fed["solo"]
    low = [unique("low") for _ in range(2)]
    for name in low:
        solo.create_namespaced_pod(
            "default", pod_body(name, cpu="1500m", annotations={"sim.fedsched.io/duration": "3600"})
        )
    for name in low:
        handle.wait_for_phase("default", name, "Running")
    high = unique("high")
    handle.priority_pod(high, cpu="1500m", memory="64Mi")
    handle.wait_for_phase("default", high, "Running", timeout=15)
    victims = [e for e in handle.events("default") if e["reason"] == "Preempted"]
    assert len(victims) == 1
    preemptor_uid = handle.pod("default", high)["metadata"]["uid"]
    assert victims[0]["message"].startswith(f"Preempted by pod {preemptor_uid} on node ")
    victim = handle.pod("default", victims[0]["involvedObject"]["name"])
    assert victim is None or victim["metadata"]["deletionTimestamp"]
    handle.wait_for_gone("default", victims[0]["involvedObject"]["name"])


def test_quota_admission_and_usage(small_fed: SimFederation, solo: client.CoreV1Api) -> None:
    handle = small_fed["solo"]
    handle.set_quota("default", {"requests.cpu": "1", "pods": "10"})
    first = unique("q")
    solo.create_namespaced_pod(
        "default", pod_body(first, cpu="600m", annotations={"sim.fedsched.io/duration": "3600"})
    )
    with pytest.raises(ApiException) as exc:
        solo.create_namespaced_pod("default", pod_body("q-second", cpu="500m"))
    body = json.loads(exc.value.body)
    assert exc.value.status == 403 and body["reason"] == "Forbidden"
    assert body["message"] == (
        'pods "q-second" is forbidden: exceeded quota: compute, requested: '
        "requests.cpu=500m, used: requests.cpu=600m, limited: requests.cpu=1"
    )
    assert body["details"] == {"name": "q-second", "kind": "pods"}
    quota = wait_for(
        lambda: (
            (q := solo.read_namespaced_resource_quota("compute", "default")).status.used
            and q.status.used.get("requests.cpu") == "600m"
            and q
        )
    )
    assert quota.status.hard == {"requests.cpu": "1", "pods": "10"}
    solo.delete_namespaced_pod(first, "default", grace_period_seconds=0)
    wait_for(
        lambda: solo.read_namespaced_resource_quota("compute", "default").status.used["requests.cpu"] == "0"
    )


def test_logs_options_and_errors(east: client.CoreV1Api, fed: SimFederation) -> None:
    name = unique("logs")
    lines = [f"line {i}" for i in range(5)]
    east.create_namespaced_pod(
        "default",
        pod_body(
            name,
            annotations={
                "sim.fedsched.io/logs": json.dumps(lines),
                "sim.fedsched.io/duration": "20",
                "sim.fedsched.io/startup-delay": "2",
            },
        ),
    )
    with pytest.raises(ApiException) as waiting:
        east.read_namespaced_pod_log(name, "default", container="base")
    assert waiting.value.status == 400
    assert json.loads(waiting.value.body)["message"] == (
        f'container "base" in pod "{name}" is waiting to start: ContainerCreating'
    )
    with pytest.raises(ApiException) as unknown:
        east.read_namespaced_pod_log(name, "default", container="nope")
    assert unknown.value.status == 400
    fed["east-cpu"].wait_for_phase("default", name, "Running")
    # follow=true streams until the container terminates.
    stream_resp = east.read_namespaced_pod_log(
        name, "default", container="base", follow=True, timestamps=True, _preload_content=False
    )
    followed = b"".join(stream_resp.stream()).decode().splitlines()
    assert [ln.split(" ", 1)[1] for ln in followed] == lines
    assert followed[0][:4].isdigit() and followed[0].split(" ", 1)[0].endswith("Z")
    tail = east.read_namespaced_pod_log(name, "default", tail_lines=2, _preload_content=False).data.decode()
    assert tail.splitlines() == lines[-2:]
    limited = east.read_namespaced_pod_log(name, "default", limit_bytes=4, _preload_content=False).data
    assert limited == b"line"
    assert east.read_namespaced_pod_log(name, "default", since_seconds=3600, _preload_content=False).data


def test_exec_xcom_sidecar_protocol(east: client.CoreV1Api, fed: SimFederation) -> None:
    name = unique("xcom")
    body = pod_body(name, annotations={"sim.fedsched.io/xcom": '{"a": 1}'})
    body["spec"]["containers"].append({"name": "airflow-xcom-sidecar", "image": "alpine:3.24.2"})
    east.create_namespaced_pod("default", body)
    handle = fed["east-cpu"]
    pod = handle.wait_for_pod(
        "default",
        name,
        lambda p: "terminated" in p["status"].get("containerStatuses", [{}])[0].get("state", {}),
    )
    assert pod["status"]["phase"] == "Running"  # the sidecar keeps the pod running
    script = (
        "if [ -s /airflow/xcom/return.json ]; then cat /airflow/xcom/return.json; "
        "else echo __airflow_xcom_result_empty__; fi"
    )
    out = stream(
        east.connect_get_namespaced_pod_exec,
        name,
        "default",
        container="airflow-xcom-sidecar",
        command=["/bin/sh", "-c", script],
        stdin=False,
        stdout=True,
        stderr=True,
        tty=False,
        _preload_content=False,
    )
    out.run_forever(timeout=5)
    assert out.read_all() == '{"a": 1}'
    resp = stream(
        east.connect_get_namespaced_pod_exec,
        name,
        "default",
        container="airflow-xcom-sidecar",
        command=["/bin/sh"],
        stdin=True,
        stdout=True,
        stderr=True,
        tty=False,
        _preload_content=False,
    )
    resp.write_stdin("kill -2 $(pgrep -u $(id -u) -f 'sh')\n")
    while resp.is_open():
        resp.update(timeout=1)
    resp.close()
    handle.wait_for_phase("default", name, "Succeeded")
    echo = unique("echo")
    east.create_namespaced_pod("default", pod_body(echo, annotations={"sim.fedsched.io/duration": "3600"}))
    handle.wait_for_phase("default", echo, "Running")
    assert (
        stream(
            east.connect_get_namespaced_pod_exec,
            echo,
            "default",
            command=["echo", "hi"],
            stdout=True,
            stderr=True,
            stdin=False,
            tty=False,
        )
        == "hi\n"
    )
    failing = stream(
        east.connect_get_namespaced_pod_exec,
        echo,
        "default",
        command=["frobnicate"],
        stdout=True,
        stderr=True,
        stdin=False,
        tty=False,
        _preload_content=False,
    )
    failing.run_forever(timeout=5)
    assert failing.returncode == 127


def test_graceful_delete(east: client.CoreV1Api, fed: SimFederation) -> None:
    name = unique("grace")
    east.create_namespaced_pod(
        "default",
        pod_body(name, annotations={"sim.fedsched.io/duration": "3600"}, terminationGracePeriodSeconds=60),
    )
    fed["east-cpu"].wait_for_phase("default", name, "Running")
    deleted = east.delete_namespaced_pod(name, "default")
    assert (
        deleted.metadata.deletion_timestamp is not None
        and deleted.metadata.deletion_grace_period_seconds == 60
    )
    fed["east-cpu"].wait_for_gone("default", name)
    assert any(
        e.reason == "Killing" and e.message.startswith("Stopping container") for e in _events(east, name)
    )


def test_kubelet_rejects_what_its_node_cannot_hold(small_fed: SimFederation, solo: client.CoreV1Api) -> None:
    handle = small_fed["solo"]
    node = handle.nodes()[0]["metadata"]["name"]
    name = unique("outofcpu")
    # Bound by the client, past the scheduler: the node's kubelet refuses it (2 cpu node, 3 cpu asked).
    solo.create_namespaced_pod("default", pod_body(name, cpu="3", nodeName=node))
    pod = handle.wait_for_phase("default", name, "Failed")
    assert pod["status"]["reason"] == "OutOfcpu"
    assert pod["status"]["message"].startswith("Pod was rejected: Node didn't have enough resource: cpu")
    assert [r["started_at"] for r in handle.journal("default") if r["name"] == name] == [None]
    assert all(not load["overcommits"] for load in handle.node_loads().values())
    ghost = unique("ghost")
    solo.create_namespaced_pod("default", pod_body(ghost, nodeName="no-such-node"))
    assert handle.pod("default", ghost)["status"]["phase"] == "Pending"  # no kubelet runs there
    solo.delete_namespaced_pod(ghost, "default")
    handle.wait_for_gone("default", ghost)  # the pod garbage collector removes it
