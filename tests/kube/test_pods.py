"""FederatedPodManager's log following against a simulated cluster that stops answering mid-stream."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any, ClassVar

import pytest
from kubernetes import client

from airflow_provider_fedsched.kube.pods import FederatedPodManager, Watch
from airflow_provider_fedsched.sim import SimFederation, wait_for
from tests.sim.conftest import TIME_SCALE, core_api, pod_body, unique


@pytest.fixture
def solo() -> Iterator[tuple[SimFederation, client.CoreV1Api]]:
    """A private one-cluster federation (this test takes its API down) and a client of it."""
    cfg = {
        "time_scale": TIME_SCALE,
        "clusters": [{"name": "solo", "node_pools": [{"name": "p", "count": 1}]}],
    }
    with SimFederation(cfg) as federation:
        api = core_api(federation, "solo")
        yield federation, api
        api.api_client.close()


class Lines:
    """A KubernetesPodOperator callback that keeps every log line the manager reads."""

    seen: ClassVar[list[str]] = []

    @staticmethod
    def progress_callback(*, line: str, **_: Any) -> None:
        Lines.seen.append(line)


def test_lines_written_while_the_stream_was_broken_are_read_once_the_cluster_answers(
    solo: tuple[SimFederation, client.CoreV1Api],
) -> None:
    fed, api = solo
    name = unique("logs")
    # 200 simulated seconds = 4 s real: a line each second, then the container ends. The provider hands a
    # line on when the next one begins (it may continue): "started" is seen once "running" was read.
    lines = ["started", "running", "work done"]
    annotations = {"sim.fedsched.io/duration": "200", "sim.fedsched.io/logs": json.dumps(lines)}
    api.create_namespaced_pod("default", pod_body(name, annotations=annotations))
    fed["solo"].wait_for_phase("default", name, "Running")
    Lines.seen = []
    manager = FederatedPodManager(api, [Lines], cluster="solo", server=fed["solo"].url, watch=Watch(grace=60))
    remote = client.V1Pod(metadata=client.V1ObjectMeta(name=name, namespace="default"))
    followed = threading.Thread(
        target=manager.fetch_container_logs, args=(remote, "base"), kwargs={"follow": True}
    )
    followed.start()
    wait_for(lambda: "started" in Lines.seen, 10, message="the first line was not read")

    fed["solo"].faults.down()  # the open stream breaks; the container writes its last line unseen
    fed["solo"].wait_for_phase("default", name, "Succeeded")
    fed["solo"].faults.up()
    followed.join(30)

    assert not followed.is_alive()
    # Each line once: the rest is read after the outage, without the lines read before it.
    assert [line.strip() for line in Lines.seen] == lines
    assert manager.logs_interrupted


def test_a_refused_read_of_a_pod_its_attempt_created_is_waited_for_not_taken_as_an_answer(
    solo: tuple[SimFederation, client.CoreV1Api],
) -> None:
    """Full test-bed soak finding (``deferred_plain[4]``): a deferred task resumed after its pod
    Succeeded, while its cluster's RBAC was revoked for 40 s; the resumed process's manager had never
    read the pod, took the 403 for an answer, and the try failed, so its retry ran the work again.
    A pod its attempt created (``know``) is read again through refusals, within the grace."""
    fed, api = solo
    name = unique("known")
    api.create_namespaced_pod("default", pod_body(name, annotations={"sim.fedsched.io/duration": "1"}))
    fed["solo"].wait_for_phase("default", name, "Succeeded")
    remote = client.V1Pod(metadata=client.V1ObjectMeta(name=name, namespace="default"))
    route = f"/api/v1/namespaces/default/pods/{name}$"

    fresh = FederatedPodManager(api, cluster="solo", server=fed["solo"].url, watch=Watch(grace=60))
    fed["solo"].faults.fail(status=403, times=1, route=route, method="GET")
    with pytest.raises(client.ApiException) as refused:
        fresh.read_pod(remote)  # a pod this manager knows nothing of: the refusal is its answer
    assert refused.value.status == 403

    resumed = FederatedPodManager(api, cluster="solo", server=fed["solo"].url, watch=Watch(grace=60))
    resumed.know("default", name)
    fed["solo"].faults.fail(status=403, times=3, route=route, method="GET")
    read = resumed.read_pod(remote)
    assert read.status.phase == "Succeeded"
    assert resumed.watch.unanswered_since is None  # reattached once the cluster allowed the read
    fed["solo"].faults.clear()
