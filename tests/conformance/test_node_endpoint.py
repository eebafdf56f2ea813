"""The test bed's nodes answer logs and exec as a kubelet does (testbed/node_endpoint.py, testbed/agent.py).

A follow of a container's log ends cleanly when the container ends, with every line and no error text;
the XCom sidecar's result is read by KubernetesPodOperator's own exec commands (`sh -c` and an interactive
session), whose kill ends the session; nothing is linked at ``/airflow``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from airflow.providers.cncf.kubernetes.utils.pod_manager import PodManager
from kubernetes import client

from airflow_provider_fedsched.sim import wait_for
from airflow_provider_fedsched.testbed import TestbedFederation
from airflow_provider_fedsched.testbed.agent import KWOK_EXEC_WAIT
from tests.sim.conftest import pod_body, unique

LINES = ["first", "second", "third"]


@pytest.fixture
def core(fed: TestbedFederation) -> Iterator[client.CoreV1Api]:
    api = client.ApiClient(fed.clusters["east-cpu"].client_config())
    yield client.CoreV1Api(api)
    api.close()


def _pod(core: client.CoreV1Api, seconds: float, xcom: bool = False) -> str:
    name = unique("endpoint")
    annotations = {"sim.fedsched.io/duration": str(seconds), "sim.fedsched.io/logs": json.dumps(LINES)}
    body = pod_body(name, annotations=annotations)
    if xcom:
        annotations["sim.fedsched.io/xcom"] = json.dumps({"rows": 3})
        body["spec"]["containers"].append({"name": "airflow-xcom-sidecar", "image": "alpine"})
    core.create_namespaced_pod("default", body)
    wait_for(
        lambda: core.read_namespaced_pod(name, "default").status.phase == "Running",
        60,
        message=f"pod {name} running",
    )
    return name


def test_a_follow_ends_cleanly_when_the_container_ends_with_every_line(core: client.CoreV1Api) -> None:
    # 24 s written, 6 s at the suite's time scale: lines at 1.5, 3 and 4.5 s, the end at 6 s.
    name = _pod(core, 24)
    began = time.monotonic()
    stream = core.read_namespaced_pod_log(
        name, "default", container="base", follow=True, _preload_content=False
    )
    body = b"".join(stream.stream(amt=None)).decode()
    followed = time.monotonic() - began

    assert body.splitlines() == LINES  # no error text in the stream
    assert followed >= 3.0  # the lines came while the container ran, and the stream ended with it
    container = core.read_namespaced_pod(name, "default").status.container_statuses[0]
    assert container.state.terminated is not None and container.state.terminated.exit_code == 0
    # A read after the end has the whole log too.
    after = core.read_namespaced_pod_log(name, "default", container="base", _preload_content=False)
    assert after.data.decode().splitlines() == LINES
    core.delete_namespaced_pod(name, "default", grace_period_seconds=0)


def test_the_xcom_sidecar_is_read_and_stopped_as_in_a_real_pod(core: client.CoreV1Api) -> None:
    name = _pod(core, 2, xcom=True)
    pods = PodManager(kube_client=core)
    wait_for(
        lambda: pods.container_is_terminated(core.read_namespaced_pod(name, "default"), "base"),
        60,
        message="the base container ended",
    )

    result = pods.extract_xcom(core.read_namespaced_pod(name, "default"))  # `sh -c`, then the kill session

    assert json.loads(result) == {"rows": 3}
    wait_for(
        lambda: core.read_namespaced_pod(name, "default").status.phase == "Succeeded",
        60,
        message="the pod completes once its sidecar was killed",
    )
    assert not Path("/airflow").exists()
    core.delete_namespaced_pod(name, "default", grace_period_seconds=0)


def test_pods_deleted_before_they_start_do_not_hold_up_the_next_pods_start(core: client.CoreV1Api) -> None:
    # kwok never learns of the Exec of a pod that is gone; the agent stops waiting for it, and prepares
    # each pod on its own, so the next pod starts as soon as kwok knows its own Exec.
    for _ in range(3):
        gone = unique("gone")
        core.create_namespaced_pod("default", pod_body(gone, annotations={"sim.fedsched.io/duration": "5"}))
        core.delete_namespaced_pod(gone, "default", grace_period_seconds=0)
    name = unique("next")
    core.create_namespaced_pod("default", pod_body(name, annotations={"sim.fedsched.io/duration": "5"}))
    wait_for(
        lambda: core.read_namespaced_pod(name, "default").status.phase == "Running",
        KWOK_EXEC_WAIT,
        message=f"pod {name} running before a gone pod's wait for kwok would have ended",
    )
    core.delete_namespaced_pod(name, "default", grace_period_seconds=0)
