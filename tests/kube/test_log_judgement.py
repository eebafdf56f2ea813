"""How a try is judged once its log stream ends: from fresh reads of the pod, never from the stream.

A scripted API (the answers a cluster gave, in order) stands in for one cluster, so that each way a real
log stream ends can be played exactly: a 400 or 500 from the node, a connection reset, a read timeout,
then a stale read of the pod (an earlier stage of its life) before the fresh one.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar

import pytest
import urllib3.exceptions
from kubernetes import client
from kubernetes.client import models as k8s
from kubernetes.client.rest import ApiException

from airflow_provider_fedsched.kube.pods import ClusterLost, FederatedPodManager, Watch

START = datetime(2026, 12, 3, 12, 0, 0, tzinfo=UTC)
LINES = ["loading shards", "epoch 1 done", "epoch 2 done", "model written"]


def stamped(index: int) -> bytes:
    at = START + timedelta(seconds=20 * index, microseconds=7)
    return f"{at.strftime('%Y-%m-%dT%H:%M:%S.%f')}000Z {LINES[index]}\n".encode()


class Stream:
    """A followed log: ``lines`` (indexes into LINES), then ``ends`` raised (or a clean end)."""

    def __init__(self, lines: list[int], ends: BaseException | None = None) -> None:
        self.lines, self.ends = lines, ends

    def stream(self, amt: Any = None, decode_content: bool = True) -> Iterator[bytes]:
        for index in self.lines:
            yield stamped(index)
        if self.ends is not None:
            raise self.ends

    def close(self) -> None:
        pass

    def release_conn(self) -> None:
        pass


def pod(phase: str, base: str) -> k8s.V1Pod:
    """The pod in ``phase`` with its base container ``waiting``, ``running`` or ``terminated`` (exit 0)."""
    state = {
        "waiting": k8s.V1ContainerState(waiting=k8s.V1ContainerStateWaiting(reason="ContainerCreating")),
        "running": k8s.V1ContainerState(running=k8s.V1ContainerStateRunning(started_at=START)),
        "terminated": k8s.V1ContainerState(
            # Just ended: the provider reads no logs of a container that ended over 2 minutes ago.
            terminated=k8s.V1ContainerStateTerminated(
                exit_code=0, reason="Completed", finished_at=datetime.now(UTC)
            )
        ),
    }[base]
    return k8s.V1Pod(
        metadata=k8s.V1ObjectMeta(name="work-1", namespace="default", uid="uid-1"),
        spec=k8s.V1PodSpec(containers=[k8s.V1Container(name="base")], node_name="node-1"),
        status=k8s.V1PodStatus(
            phase=phase,
            container_statuses=[
                k8s.V1ContainerStatus(
                    name="base", state=state, ready=False, restart_count=0, image="i", image_id=""
                )
            ],
        ),
    )


RUNNING = pod("Running", "running")
STALE_PENDING = pod("Pending", "waiting")  # what a lagging API server or cache answers after Running


def succeeded() -> k8s.V1Pod:
    """The pod Succeeded, its container just ended: built when a test reads it, since the provider reads
    no logs of a container that ended over 2 minutes ago (a module-level pod aged with the test run)."""
    return pod("Succeeded", "terminated")


class ScriptedCluster:
    """The answers one cluster gives: log reads in order, and pod reads in order (the last repeats)."""

    def __init__(self, logs: list[Any], reads: list[Any]) -> None:
        self.logs, self.reads = list(logs), list(reads)
        self.plain_log_reads: list[dict[str, Any]] = []

    def read_namespaced_pod_log(self, name: str, namespace: str, **kwargs: Any) -> Any:
        if not kwargs.get("follow"):
            self.plain_log_reads.append(kwargs)
            return Stream(list(range(len(LINES))))  # a plain read after the end: the whole log
        answer = self.logs.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer

    def read_namespaced_pod(self, name: str, namespace: str, **kwargs: Any) -> k8s.V1Pod:
        answer = self.reads.pop(0) if len(self.reads) > 1 else self.reads[0]
        if isinstance(answer, BaseException):
            raise answer
        return answer

    def read_node(self, name: str, **kwargs: Any) -> Any:
        raise AssertionError("the pods here never say their node is not Ready")


class Lines:
    """A KubernetesPodOperator callback keeping every log line the manager hands on."""

    seen: ClassVar[list[str]] = []

    @staticmethod
    def progress_callback(*, line: str, **_: Any) -> None:
        Lines.seen.append(line)


def manager(cluster: ScriptedCluster, grace: float = 30.0) -> FederatedPodManager:
    Lines.seen = []
    return FederatedPodManager(
        cluster, [Lines], cluster="west", server="https://west.example:6443", watch=Watch(grace=grace)
    )


def reset() -> BaseException:
    return urllib3.exceptions.ProtocolError(
        "Connection broken: ConnectionResetError(104, 'Connection reset by peer')"
    )


def timeout() -> BaseException:
    return urllib3.exceptions.ReadTimeoutError(
        None, "/api/v1/namespaces/default/pods/work-1/log", "Read timed out."
    )


def refused() -> BaseException:
    return urllib3.exceptions.MaxRetryError(
        None, "/api/v1/namespaces/default/pods/work-1", urllib3.exceptions.NewConnectionError(None, "refused")
    )


def node_error(status: int) -> ApiException:
    return ApiException(status=status, reason="BadRequest" if status == 400 else "InternalError")


# How the first stream ends, and what the next log read answers while the container still runs.
ENDINGS = {
    "a 400 from the node": [Stream([0, 1], reset()), node_error(400)],
    "a 500 from the node": [Stream([0, 1], timeout()), node_error(500)],
    "a 400 at once": [node_error(400)],
    "a connection reset": [Stream([0, 1], reset())],
    "a read timeout": [Stream([0, 1], timeout())],
}


@pytest.mark.parametrize("ending", ENDINGS)
def test_a_stream_that_ends_badly_then_a_stale_read_then_succeeded_is_a_success(ending: str) -> None:
    # The stream breaks while the container runs; the provider looks at the pod (Running) and reads
    # again; whatever that read answers, the pod is then read afresh: first a stale Pending, then the
    # truth, Succeeded.
    reads = [RUNNING, RUNNING, STALE_PENDING, succeeded()]
    cluster = ScriptedCluster(ENDINGS[ending], reads)
    pods = manager(cluster)
    target = k8s.V1Pod(metadata=k8s.V1ObjectMeta(name="work-1", namespace="default"))

    status = pods.fetch_container_logs(target, "base", follow=True)
    final = pods.await_pod_completion(target, container_name="base")

    assert not status.running
    assert final.status.phase == "Succeeded"
    # Every line once: the rest is read after the end, without the lines the stream had printed.
    assert [line.strip() for line in Lines.seen] == LINES
    assert pods.logs_interrupted and len(cluster.plain_log_reads) == 1


def test_a_clean_end_with_a_stale_read_after_it_waits_for_the_fresh_one() -> None:
    cluster = ScriptedCluster([Stream([0, 1, 2, 3])], [RUNNING, STALE_PENDING, STALE_PENDING, succeeded()])
    pods = manager(cluster)
    target = k8s.V1Pod(metadata=k8s.V1ObjectMeta(name="work-1", namespace="default"))

    pods.fetch_container_logs(target, "base", follow=True)
    final = pods.await_pod_completion(target, container_name="base")

    assert final.status.phase == "Succeeded"
    assert [line.strip() for line in Lines.seen] == LINES and not cluster.plain_log_reads


def test_no_readable_pod_within_the_grace_is_a_failure_that_says_why() -> None:
    cluster = ScriptedCluster([Stream([0, 1], reset())], [RUNNING, RUNNING, refused()])
    pods = manager(cluster, grace=1.0)
    target = k8s.V1Pod(metadata=k8s.V1ObjectMeta(name="work-1", namespace="default"))

    with pytest.raises(ClusterLost) as lost:
        pods.fetch_container_logs(target, "base", follow=True)

    assert lost.value.failure.kind == "unreachable"
    assert "west.example" in lost.value.failure.reason and "for 1s" in lost.value.failure.reason
    assert [line.strip() for line in Lines.seen] == LINES[:2]


def test_only_stale_reads_within_the_grace_are_no_answer() -> None:
    cluster = ScriptedCluster([Stream([0, 1], reset())], [RUNNING, RUNNING, STALE_PENDING])
    pods = manager(cluster, grace=1.0)
    target = k8s.V1Pod(metadata=k8s.V1ObjectMeta(name="work-1", namespace="default"))

    with pytest.raises(ClusterLost) as lost:
        pods.fetch_container_logs(target, "base", follow=True)

    assert lost.value.failure.kind == "unreachable"
    assert "older states of pod work-1" in lost.value.failure.reason


def test_a_401_is_left_to_kubernetes_pod_operator_to_refresh_credentials() -> None:
    cluster = ScriptedCluster([ApiException(status=401, reason="Unauthorized")], [RUNNING])
    pods = manager(cluster)
    target = k8s.V1Pod(metadata=k8s.V1ObjectMeta(name="work-1", namespace="default"))

    with pytest.raises(client.ApiException) as refused_read:
        pods.fetch_container_logs(target, "base", follow=True)

    assert refused_read.value.status == 401


def forbidden() -> ApiException:
    return ApiException(status=403, reason="Forbidden")


def test_a_refusal_after_the_pod_was_read_is_waited_out_like_silence() -> None:
    """Found on the test bed: an API server that restarts answers 403 to the provider's read of its own
    pod until its authorizer's caches fill; the try failed on it although the pod ran on."""
    pods = manager(ScriptedCluster([], [RUNNING, forbidden(), forbidden(), succeeded()]))
    target = k8s.V1Pod(metadata=k8s.V1ObjectMeta(name="work-1", namespace="default"))

    assert pods.read_pod(target).status.phase == "Running"
    assert pods.read_pod(target).status.phase == "Succeeded"


def test_a_refusal_past_the_grace_is_a_lost_cluster_and_before_any_read_an_answer() -> None:
    pods = manager(ScriptedCluster([], [RUNNING, forbidden()]), grace=0.2)
    target = k8s.V1Pod(metadata=k8s.V1ObjectMeta(name="work-1", namespace="default"))
    pods.read_pod(target)
    with pytest.raises(ClusterLost):
        pods.read_pod(target)

    never_read = manager(ScriptedCluster([], [forbidden()]))  # may we look at all? No: that is an answer
    with pytest.raises(ApiException):
        never_read.read_pod(target)
