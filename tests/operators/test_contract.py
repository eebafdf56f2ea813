"""The delivery contract when a pod's cluster stops answering (docs/operator.md), sync and deferrable.

Real Airflow (``dag.test``), real clients over HTTP, the simulated federation; the cluster's API server
stops listening (connection refused) for a while. A task that is not preemptible waits up to its
``unreachable_grace`` and reattaches, adopting a pod that finished meanwhile; past the grace it fails the
try and never starts its work a second time. A preemptible task moves at once and fences its old pod.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from airflow_provider_fedsched.hooks.federation import FederationHook
from airflow_provider_fedsched.sim import SimFederation, wait_for
from tests.operators.test_federated_operator import path, pod_creates, pod_of, pods_of, run

pytestmark = [pytest.mark.airflow]
MODES = ["sync", "deferrable"]


class Outage:
    """Takes ``cluster`` down once the task's pod reaches ``phase``; up again after ``seconds``, or once
    ``until()`` is true (an event: the pod ended meanwhile), or, with neither, when the ``with`` block
    ends: for a try that must give up on the silent cluster, the outage then lasts exactly as long as the
    try waited, however long that takes on a busy machine.

    Pending and Running last: a background thread sees them and takes the cluster down. A terminal phase
    is fleeting (the operator deletes the pod at once), so then the outage begins in the very store
    update that ends the pod (a listener of the simulated API server's store): no client reads it first.
    """

    def __init__(
        self,
        fed: SimFederation,
        dag_id: str,
        cluster: str,
        phase: str,
        seconds: float | None = None,
        until: Callable[[], object] | None = None,
    ) -> None:
        self.fed, self.dag_id, self.cluster, self.phase, self.seconds = fed, dag_id, cluster, phase, seconds
        self.until = until
        self.down_at: float | None = None
        self.lifted = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.terminal = phase in ("Succeeded", "Failed")
        self._down: set[asyncio.Future[None]] = set()

    def _run(self) -> None:
        if not self.terminal:
            wait_for(
                lambda: pod_of(self.fed, self.dag_id, self.cluster, self.phase), timeout=120, interval=0.05
            )
            self.fed[self.cluster].faults.down()
            self.down_at = time.monotonic()
        else:
            wait_for(lambda: self.down_at is not None, timeout=120, interval=0.05)
        if self.until is not None:
            wait_for(self.until, timeout=120, interval=0.2)
        elif self.seconds is None:
            self.lifted.wait()
        else:
            time.sleep(self.seconds)
        self.fed[self.cluster].faults.up()

    def _on_event(self, event: Any) -> None:  # in the simulator's thread
        pod = event.obj
        if (
            self.down_at is not None
            or event.plural != "pods"
            or (pod["metadata"].get("labels") or {}).get("dag_id") != self.dag_id
            or (pod.get("status") or {}).get("phase") != self.phase
        ):
            return
        faults = self.fed[self.cluster].cluster.faults
        faults.is_down = True  # every request from now on fails; then the port stops listening
        self._down.add(asyncio.ensure_future(faults.down()))
        self.down_at = time.monotonic()

    def __enter__(self) -> Outage:
        if self.terminal:
            handle = self.fed[self.cluster]
            handle.call(handle.store.listeners.append, self._on_event)
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        handle = self.fed[self.cluster]
        if self.terminal:
            handle.call(handle.store.listeners.remove, self._on_event)
        self.lifted.set()
        self.thread.join(timeout=180)
        handle.faults.up()
        if exc[0] is None:
            assert self.down_at is not None, f"{self.cluster} never went down: no pod reached {self.phase}"


@pytest.fixture
def creates(sim_federation: SimFederation) -> Iterator[Callable[[], int]]:
    before = pod_creates(sim_federation)
    yield lambda: pod_creates(sim_federation) - before


def sweep_orphans() -> None:
    """The next snapshot of a cluster that answers again deletes the pods and Jobs written down as orphans."""
    FederationHook().collect()


@pytest.mark.parametrize("mode", MODES)
def test_outage_while_running_shorter_than_the_grace_reattaches(
    sim_federation: SimFederation, federation: Path, creates: Callable[[], int], mode: str
) -> None:
    dag_id = f"fed_outage_{mode}"
    with Outage(sim_federation, dag_id, "east-cpu", "Running", seconds=2):
        state, record, _ = run(dag_id)

    assert state == "success" and record is not None
    assert path(record) == [("east-cpu", "succeeded")]
    assert creates() == 1  # reattached to the one pod, never started a second
    assert pods_of(sim_federation, dag_id) == []


@pytest.mark.parametrize("mode", MODES)
def test_outage_while_pending_shorter_than_the_grace_reattaches(
    sim_federation: SimFederation, federation: Path, creates: Callable[[], int], mode: str
) -> None:
    dag_id = f"fed_outage_{mode}"
    east = sim_federation["east-cpu"]
    east.scheduler.pause()  # the pod stays Pending while its cluster is down

    def release_once_pending_for_4s() -> None:  # counted from the pod, not from a first run's start-up
        wait_for(lambda: pod_of(sim_federation, dag_id, "east-cpu", "Pending"), timeout=120, interval=0.05)
        time.sleep(4.0)
        east.scheduler.resume()

    released = threading.Thread(target=release_once_pending_for_4s, daemon=True)
    released.start()
    try:
        with Outage(sim_federation, dag_id, "east-cpu", "Pending", seconds=2):
            state, record, _ = run(dag_id)
    finally:
        east.scheduler.resume()

    assert state == "success" and record is not None
    assert path(record) == [("east-cpu", "succeeded")]
    assert creates() == 1


@pytest.mark.parametrize("mode", MODES)
def test_a_pod_that_succeeded_during_the_outage_is_adopted_never_rerun(
    sim_federation: SimFederation, federation: Path, creates: Callable[[], int], mode: str, capfd: Any
) -> None:
    dag_id = f"fed_outage_{mode}"

    def ended() -> object:  # the outage lasts until the pod has Succeeded (it runs 4 s)
        return pod_of(sim_federation, dag_id, "east-cpu", "Succeeded")

    with Outage(sim_federation, dag_id, "east-cpu", "Running", until=ended):
        state, record, _ = run(dag_id)

    assert state == "success" and record is not None
    assert path(record) == [("east-cpu", "succeeded")]
    assert creates() == 1
    assert "work done" in capfd.readouterr().out  # its logs were read after the cluster came back


@pytest.mark.parametrize("mode", MODES)
def test_outage_longer_than_the_grace_fails_the_try_and_never_runs_the_work_twice(
    sim_federation: SimFederation, federation: Path, creates: Callable[[], int], mode: str
) -> None:
    dag_id = f"fed_outage_lost_{mode}"
    with Outage(sim_federation, dag_id, "east-cpu", "Running"):
        state, record, _ = run(dag_id)
        assert state == "failed" and record is not None
        assert creates() == 1  # west-general was allowed, but the work was not started there
    (attempt,) = record["attempts"]
    assert (attempt["cluster"], attempt["outcome"]) == ("east-cpu", "lost")
    assert "connection refused at http" in attempt["reason"]  # http:// (simulator) or https:// (test bed)
    assert "not started elsewhere" in record["reason"]
    # Written down, then deleted by the first snapshot that finds the cluster answering again.
    assert FederationHook().orphans("east-cpu") == [(attempt["namespace"], attempt["pod"])]
    sweep_orphans()
    assert FederationHook().orphans("east-cpu") == []
    assert pods_of(sim_federation, dag_id) == []


def test_the_end_of_any_try_cleans_up_a_pod_left_in_a_cluster_that_answers_again(
    sim_federation: SimFederation, federation: Path
) -> None:
    """CI soak finding: pods written down in a silent cluster stayed there after it answered again,
    because the load had ended and no decision refreshed that cluster's snapshot. Every try now refreshes,
    at its end, the snapshots of clusters where pods are written down."""
    dag_id = "fed_outage_lost_sync"
    # A fixed outage, longer than the try: the try's own end finds east-cpu silent, and the cluster is
    # back only later, when nothing but the next try's end (in another DAG) can clean it.
    with Outage(sim_federation, dag_id, "east-cpu", "Running", seconds=8):
        state, record, _ = run(dag_id)
        assert state == "failed" and record is not None
    (attempt,) = record["attempts"]
    assert FederationHook().orphans("east-cpu") == [(attempt["namespace"], attempt["pod"])]
    assert pods_of(sim_federation, dag_id) == [f"east-cpu/{attempt['pod']}"]

    other, _, _ = run("fed_sovereign")  # an unrelated task, on another cluster, after east-cpu is back

    assert other == "success"
    assert FederationHook().orphans("east-cpu") == []
    # Deleted by that try's end with the pod's grace period: the outage lifted while the pod still ran,
    # so it may be terminating for that long before it is gone.
    wait_for(lambda: pods_of(sim_federation, dag_id) == [], timeout=30, message="the swept pod is gone")


@pytest.mark.parametrize("mode", MODES)
def test_outage_while_pending_longer_than_the_grace_fails_the_try_and_never_runs_the_work_twice(
    sim_federation: SimFederation, federation: Path, creates: Callable[[], int], mode: str
) -> None:
    dag_id = f"fed_outage_pending_lost_{mode}"
    east = sim_federation["east-cpu"]
    east.scheduler.pause()  # the pod stays Pending while its cluster is down
    try:
        with Outage(sim_federation, dag_id, "east-cpu", "Pending"):
            state, record, _ = run(dag_id)
            assert state == "failed" and record is not None
            assert creates() == 1  # a Pending pod may still start: the work is not started elsewhere
    finally:
        east.scheduler.resume()
    (attempt,) = record["attempts"]
    assert (attempt["cluster"], attempt["outcome"]) == ("east-cpu", "lost")
    assert "not started elsewhere" in record["reason"]
    sweep_orphans()
    assert pods_of(sim_federation, dag_id) == []


@pytest.mark.parametrize("mode", MODES)
def test_outage_after_the_pod_succeeded_is_waited_out_and_the_result_adopted(
    sim_federation: SimFederation, federation: Path, creates: Callable[[], int], mode: str, capfd: Any
) -> None:
    dag_id = f"fed_outage_done_{mode}"
    with Outage(sim_federation, dag_id, "east-cpu", "Succeeded", seconds=3):
        state, record, _ = run(dag_id)

    assert state == "success" and record is not None
    assert path(record) == [("east-cpu", "succeeded")]
    assert creates() == 1  # a result already known is never re-run
    assert "work done" in capfd.readouterr().out
    assert pods_of(sim_federation, dag_id) == []


@pytest.mark.parametrize("mode", MODES)
def test_a_preemptible_task_moves_at_once_and_fences_its_old_pod(
    sim_federation: SimFederation, federation: Path, creates: Callable[[], int], mode: str, capfd: Any
) -> None:
    dag_id = f"fed_outage_preemptible_{mode}"
    with Outage(sim_federation, dag_id, "east-cpu", "Running") as outage:
        state, record, _ = run(dag_id)
        moved_at = time.monotonic()
        assert state == "success" and record is not None
        assert path(record) == [("east-cpu", "unreachable"), ("west-general", "succeeded")]
        assert creates() == 2
        first, second = record["attempts"]
        assert second["resumed_from_checkpoint"] is True
        assert "attempt 2 resume=true" in capfd.readouterr().out
        # Noticed within seconds of the first failed call, and the record says so in wall-clock time.
        failover = record["failover_seconds"]
        assert 0 < failover <= 5.0, failover
        seen = datetime.fromisoformat(second["started_at"]) - datetime.fromisoformat(first["failed_at"])
        assert abs(seen.total_seconds() - failover) < 0.01
        assert outage.down_at is not None and failover <= moved_at - outage.down_at
    sweep_orphans()  # the old pod is fenced: deleted once its cluster answers again
    assert pods_of(sim_federation, dag_id) == []


@contextlib.contextmanager
def answers_503_from_its_success(
    fed: SimFederation, dag_id: str, method: str | None = None, lift_after: float | None = None
) -> Iterator[None]:
    """East-cpu answers 503 to every request (of ``method``, if given) from the very store update that
    ends the DAG's pod Succeeded (a listener of the simulated API server's store: no client reads the end
    first), until ``lift_after`` seconds later, or until the block ends."""
    handle = fed["east-cpu"]
    silenced: list[str] = []

    def fail_once_it_succeeds(event: Any) -> None:  # in the simulator's thread
        pod = event.obj
        labels = pod["metadata"].get("labels") or {}
        if silenced or event.plural != "pods" or labels.get("dag_id") != dag_id:
            return
        if (pod.get("status") or {}).get("phase") == "Succeeded":
            handle.cluster.faults.fail(503, times=10**6, method=method)
            if lift_after is not None:
                threading.Timer(lift_after, handle.faults.clear).start()
            silenced.append(pod["metadata"]["name"])

    handle.call(handle.store.listeners.append, fail_once_it_succeeds)
    try:
        yield
    finally:
        handle.call(handle.store.listeners.remove, fail_once_it_succeeds)
        handle.faults.clear()
    assert silenced, "the pod never Succeeded"


@pytest.mark.parametrize("mode", MODES)
def test_a_preemptible_pod_that_succeeded_as_it_was_fenced_is_not_run_elsewhere(
    sim_federation: SimFederation, federation: Path, creates: Callable[[], int], mode: str
) -> None:
    """Full test-bed soak finding (``sync_resumable[5]``, east-a's etcd killed): the preemptible task's reads
    went unanswered, it left east-a and deleted its pod to fence it; the pod had run to Succeeded by the
    time the delete was answered (the answer says so), and the task ran the work again in west. Here
    east-cpu answers no read from the very update that ends the pod, and answers the delete."""
    dag_id = f"fed_succeeded_as_fenced_{mode}"
    with answers_503_from_its_success(sim_federation, dag_id, method="GET"):
        state, record, _ = run(dag_id)
    assert state == "success" and record is not None
    assert path(record) == [("east-cpu", "succeeded")]
    assert "Succeeded as it was deleted to leave east-cpu" in record["attempts"][0]["reason"]
    assert creates() == 1
    sweep_orphans()
    assert pods_of(sim_federation, dag_id) == []


def test_a_preemptible_pod_whose_log_stream_ended_is_waited_for_not_moved(
    sim_federation: SimFederation, federation: Path, creates: Callable[[], int]
) -> None:
    """Simulated CeleryExecutor soak finding at acc8f6d (``sync_resumable[7]``): the task read its pod's
    log to the end, then east-a answered 503 to the reads that follow (a burst of 25); the preemptible task
    took the first 503 for a silent cluster, fenced the pod and started a copy elsewhere, which ran until
    the fence watch saw the first pod Succeeded. A follow stream that ends on its own is the container's
    end: the work is likely over, so the task waits for the cluster (``unreachable_grace``) as for a pod
    seen to end. Here east-cpu answers nothing for 6 s from the update that ends the pod."""
    dag_id = "fed_log_ended_then_silent"
    with answers_503_from_its_success(sim_federation, dag_id, lift_after=6.0):
        state, record, _ = run(dag_id)
    assert state == "success" and record is not None
    assert path(record) == [("east-cpu", "succeeded")]
    assert creates() == 1
    assert pods_of(sim_federation, dag_id) == []


def test_a_waiting_try_shows_on_the_federation_page_while_it_waits(
    sim_federation: SimFederation, federation: Path
) -> None:
    """The page's API lists the try as waiting, since when and why, before the try ends."""
    from airflow.utils.session import create_session

    from airflow_provider_fedsched.plugins import history

    seen: list[dict[str, Any]] = []

    def watch_page() -> None:
        def live_row() -> dict[str, Any] | None:
            with create_session() as session:
                rows = history.list_placements(session, history.PlacementFilter(dag_id="fed_wait_timeout"))
            return next((r for r in rows if r.get("live")), None)

        seen.append(wait_for(live_row, timeout=60, interval=0.1))

    watcher = threading.Thread(target=watch_page, daemon=True)
    sim_federation["west-general"].faults.down()
    try:
        watcher.start()
        state, record, _ = run("fed_wait_timeout")
    finally:
        sim_federation["west-general"].faults.up()
        watcher.join(timeout=60)

    assert state == "failed" and record is not None and seen
    live = seen[0]["live"]
    assert live["state"] == "waiting" and "west-general" in live["why"]
    assert datetime.fromisoformat(live["since"]) <= datetime.fromisoformat(record["ended_at"])


def test_a_trigger_that_fails_deletes_the_pod_and_never_runs_the_work_twice(
    sim_federation: SimFederation, federation: Path, creates: Callable[[], int]
) -> None:
    state, record, _ = run("fed_trigger_fails")

    assert state == "failed" and record is not None
    (attempt,) = record["attempts"]
    assert attempt["outcome"] == "failed"
    assert "the pod trigger failed" in record["reason"] and "the trigger broke" in record["reason"]
    assert "its pod was deleted" in record["reason"]
    assert creates() == 1  # not started again elsewhere
    assert pods_of(sim_federation, "fed_trigger_fails") == []


def test_an_event_the_operator_cannot_read_deletes_the_pod_and_names_the_field(
    sim_federation: SimFederation, federation: Path, creates: Callable[[], int]
) -> None:
    """Never taken for news it does not carry (triggers/events.py): the try fails as when its trigger
    failed, naming the field at fault, and its pod does not outlive it."""
    state, record, _ = run("fed_trigger_garbled")

    assert state == "failed" and record is not None
    (attempt,) = record["attempts"]
    assert attempt["outcome"] == "failed"
    assert "the trigger's event is unreadable: status: Input tag 'finished'" in record["reason"]
    assert "its pod was deleted" in record["reason"]
    assert creates() == 1  # not started again elsewhere
    assert pods_of(sim_federation, "fed_trigger_garbled") == []


def test_a_finished_pod_whose_delete_is_not_answered_is_written_down_and_swept(
    sim_federation: SimFederation, federation: Path
) -> None:
    """KubernetesPodOperator's cleanup deletes the finished pod; a cluster down at that moment (past the
    grace) must not leave it behind: it becomes an orphan, deleted by the next snapshot that answers."""
    from kubernetes.client import models as k8s

    from airflow_provider_fedsched.operators.federated_pod import FederatedKubernetesOperator

    west = sim_federation["west-general"]
    west.create_pod(
        "default",
        {
            "metadata": {"name": "cleanup-me"},
            "spec": {"restartPolicy": "Never", "containers": [{"name": "base", "image": "busybox"}]},
        },
    )
    wait_for(lambda: west.pod("default", "cleanup-me")["status"].get("phase") == "Succeeded", timeout=30)
    operator = FederatedKubernetesOperator(task_id="cleanup", image="busybox", preemptible=True)
    operator.use_cluster("west-general")
    pod = k8s.V1Pod(
        metadata=k8s.V1ObjectMeta(name="cleanup-me", namespace="default"),
        status=k8s.V1PodStatus(phase="Succeeded"),
    )
    west.faults.down()
    try:
        assert operator.process_pod_deletion(pod, reraise=False) is False
    finally:
        west.faults.up()
    assert FederationHook().orphans("west-general") == [("default", "cleanup-me")]
    assert west.pod("default", "cleanup-me") is not None  # nothing reached the cluster while it was down
    sweep_orphans()
    assert FederationHook().orphans("west-general") == []
    assert all(p["metadata"]["name"] != "cleanup-me" for p in west.pods())


@contextlib.contextmanager
def silent_after_done(fed: SimFederation, seconds: float) -> Iterator[list[threading.Thread]]:
    """The pod's cluster stops answering for ``seconds`` as soon as the pod trigger fires ``done``."""
    from tests.operators import outage_trigger

    outages: list[threading.Thread] = []

    def down(cluster: str) -> None:
        fed[cluster].faults.down()
        outage = threading.Timer(seconds, fed[cluster].faults.up)
        outage.start()
        outages.append(outage)

    outage_trigger.AFTER_DONE = down
    try:
        yield outages
    finally:
        outage_trigger.AFTER_DONE = None
        for outage in outages:
            outage.join(timeout=60)
        for handle in fed.handles.values():
            handle.faults.up()


def run_deleting_after_done(fed: SimFederation, dag_id: str) -> tuple[str, dict[str, Any] | None, list[str]]:
    """Run ``dag_id``, whose trigger fires ``done``; then someone else (the garbage collector of a deleted
    node) deletes the run's pods before the task resumes. Returns the state, the record, the pods deleted."""
    from tests.operators import outage_trigger

    deleted: list[str] = []

    def delete(cluster: str) -> None:
        for pod in fed[cluster].pods():
            if (pod["metadata"].get("labels") or {}).get("dag_id") == dag_id:
                meta = pod["metadata"]
                fed[cluster].delete_pod(meta["namespace"], meta["name"], grace=0)
                deleted.append(meta["name"])

    outage_trigger.AFTER_DONE = delete
    try:
        state, record, _ = run(dag_id)
    finally:
        outage_trigger.AFTER_DONE = None
    return state, record, deleted


def test_a_pod_deleted_by_someone_else_after_its_trigger_saw_it_succeed_is_not_run_again(
    sim_federation: SimFederation, federation: Path, creates: Callable[[], int], capfd: Any
) -> None:
    """Test-bed soak finding (its delete-node fault, five tasks): deferred tasks' pods ran to Succeeded and
    their triggers fired ``done``; the tasks were slow to resume (a busy scheduler), and meanwhile their node
    was deleted and the garbage collector deleted the pods. The resumed try took the 404 of its fresh read
    for the task's own failure, and the retry ran the work again. Seen Succeeded, the work is done: the try
    succeeds, its logs unread."""
    dag_id = "fed_done_then_deleted"
    state, record, deleted = run_deleting_after_done(sim_federation, dag_id)
    assert len(deleted) == 1
    assert state == "success" and record is not None
    assert path(record) == [("east-cpu", "succeeded")]
    assert "deleted by someone else" in record["attempts"][0]["reason"]
    assert creates() == 1
    assert pods_of(sim_federation, dag_id) == []


def test_a_pod_its_trigger_saw_succeed_is_not_run_again_by_the_next_try_when_it_is_gone(
    sim_federation: SimFederation, federation: Path, creates: Callable[[], int], capfd: Any
) -> None:
    """Test-bed soak finding (LocalExecutor, three tasks over two runs): the trigger fired ``done`` on a
    Succeeded pod; the scheduler, stalled for a minute, reset the queued resumption and the try ended
    unresumed; the pod's node was deleted, and with it the pod; the next try found no pod and ran the work
    again. The trigger wrote down that the pod Succeeded: the next try takes that success."""
    dag_id = "fed_done_then_try_ended"
    state, record, deleted = run_deleting_after_done(sim_federation, dag_id)
    assert len(deleted) == 1
    assert state == "success" and record is not None
    assert record["try_number"] == 2
    assert path(record) == [("east-cpu", "succeeded")]
    assert "as its trigger saw" in record["reason"], record["reason"]
    assert creates() == 1
    assert FederationHook().state.deferred.of("east-cpu") == []


def test_a_success_its_trigger_saw_outlives_a_resumed_try_that_dies_before_writing_it(
    sim_federation: SimFederation, federation: Path, creates: Callable[[], int], capfd: Any
) -> None:
    """The CeleryExecutor test-bed soak at 92108c3 (``deferred_plain[10]``): the pod Succeeded, a snapshot
    wrote that on the try's deferral entry, the node was deleted and the pod with it; the resumed try
    forgot the entry as it began, judged the success, and its worker was SIGKILLed before the success was
    written; the retry found neither pod nor entry and ran the work again. The entry now stays until the
    try's judgement is over, so the retry takes that success."""
    dag_id = "fed_done_then_died_as_it_succeeded"
    state, record, deleted = run_deleting_after_done(sim_federation, dag_id)
    assert len(deleted) == 1
    assert "the worker died as the try's success was written" in capfd.readouterr().out
    assert state == "success" and record is not None
    assert record["try_number"] == 2
    assert path(record) == [("east-cpu", "succeeded")]
    assert creates() == 1
    assert FederationHook().state.deferred.of("east-cpu") == []


def test_a_pod_that_ends_while_a_resumed_try_defers_again_is_judged_once(
    sim_federation: SimFederation, federation: Path, creates: Callable[[], int], capfd: Any
) -> None:
    """Test-bed soak finding (east-b's kube-scheduler stopped, ``deferred_resumable[14]``): the trigger
    fired ``unschedulable``; when the task resumed the pod ran, so it watched on, and the pod ended before
    it deferred again: judged there, a success, the pod deleted. The resumed step then judged it a second
    time from its stale read, found no pod, failed the try, and the retry ran the work again."""
    from tests.operators import outage_trigger

    def once_it_runs(cluster: str, namespace: str, pod: str) -> None:
        sim_federation[cluster].wait_for_phase(namespace, pod, "Running", timeout=60)

    outage_trigger.UNSCHEDULABLE_ONCE = once_it_runs
    try:
        state, record, _ = run("fed_ends_before_it_defers_again")
    finally:
        outage_trigger.UNSCHEDULABLE_ONCE = None
    assert state == "success" and record is not None
    assert path(record) == [("east-cpu", "succeeded")]
    assert creates() == 1
    output = capfd.readouterr().out
    assert "runs on (the trigger said unschedulable)" in output
    assert "already ended: judged without deferring" in output and "work done" in output
    assert "Try: succeeded -> failed" not in output


def test_a_preemptible_pod_seen_ended_is_adopted_after_its_cluster_comes_back(
    sim_federation: SimFederation, federation: Path, creates: Callable[[], int], capfd: Any
) -> None:
    """Preemptible work moves at once when its cluster goes silent, unless its pod is known to have ended:
    then its result is waited for (``unreachable_grace``), never run a second time elsewhere."""
    dag_id = "fed_done_then_silent_short"
    with silent_after_done(sim_federation, seconds=3) as outages:
        state, record, _ = run(dag_id)
    assert len(outages) == 1  # the cluster was silent when the task resumed
    assert state == "success" and record is not None
    assert path(record) == [("east-cpu", "succeeded")]
    assert creates() == 1
    assert "work done" in capfd.readouterr().out  # its logs were read once the cluster answered
    assert pods_of(sim_federation, dag_id) == []


def test_a_preemptible_pod_seen_succeeded_succeeds_unread_past_the_grace_and_is_swept(
    sim_federation: SimFederation, federation: Path, creates: Callable[[], int]
) -> None:
    dag_id = "fed_done_then_silent_long"
    with silent_after_done(sim_federation, seconds=8) as outages:
        state, record, _ = run(dag_id)
        assert len(outages) == 1
        assert state == "success" and record is not None
        assert path(record) == [("east-cpu", "succeeded")]
        assert creates() == 1  # west-general was allowed: the work was still not started there
        (attempt,) = record["attempts"]
        assert "Succeeded; its cluster then stopped answering" in attempt["reason"]
        assert "logs were not read" in attempt["reason"]
        assert FederationHook().orphans("east-cpu") == [(attempt["namespace"], attempt["pod"])]
    sweep_orphans()
    assert FederationHook().orphans("east-cpu") == []
    assert pods_of(sim_federation, dag_id) == []


def test_a_pod_seen_ended_by_a_trigger_that_never_fired_is_not_run_again(
    sim_federation: SimFederation, federation: Path, creates: Callable[[], int], capfd: Any
) -> None:
    """Soak finding (CeleryExecutor): the trigger saw the pod Succeeded, the triggerer was restarted
    before the event fired, and the restarted trigger found the cluster silent: ``lost``. The first
    trigger's note says the pod ended, so the preemptible task waits for its result instead of moving."""
    dag_id = "fed_done_then_restarted"
    with silent_after_done(sim_federation, seconds=3) as outages:
        state, record, _ = run(dag_id)
    assert len(outages) == 1
    assert state == "success" and record is not None
    assert path(record) == [("east-cpu", "succeeded")]
    assert creates() == 1
    assert "work done" in capfd.readouterr().out
    assert pods_of(sim_federation, dag_id) == []


def test_a_retry_adopts_the_pod_its_earlier_try_wrote_down_and_takes_it_off_the_list(
    sim_federation: SimFederation, federation: Path, creates: Callable[[], int]
) -> None:
    """Try 1 gives up on a silent cluster and writes its pod down; try 2 finds the pod running there and
    adopts it. The pod must leave the orphan list, or the next snapshot would delete work being watched."""
    from tests.operators import outage_trigger

    dag_id = "fed_outage_lost_retry"
    east = sim_federation["east-cpu"]
    tries: list[int] = []

    def before_looking(try_number: int) -> None:
        tries.append(try_number)
        if try_number == 2:  # the cluster answers again as try 2 looks for try 1's pod
            east.faults.up()

    with (
        outage_trigger.before_looking_for_earlier(before_looking),
        Outage(sim_federation, dag_id, "east-cpu", "Running"),
    ):
        state, record, _ = run(dag_id)
    assert tries == [1, 2]
    assert state == "success" and record is not None
    assert record["try_number"] == 2
    (attempt,) = record["attempts"]
    assert (attempt["cluster"], attempt["outcome"], attempt["adopted"]) == ("east-cpu", "succeeded", True)
    assert creates() == 1
    assert FederationHook().orphans("east-cpu") == []
    assert pods_of(sim_federation, dag_id) == []


def test_a_try_that_found_the_cluster_silent_hands_on_where_the_work_may_run(
    sim_federation: SimFederation, federation: Path, creates: Callable[[], int], capfd: Any
) -> None:
    """CI soak finding: try 1's pod ran in a cluster that went silent; try 1 failed ``lost`` past the
    grace, and try 2, finding the cluster still silent, failed without starting anything. Its record named
    no pod, so try 3 did not wait for that cluster and started the work elsewhere: a second copy of
    non-preemptible work (the first had Succeeded unseen). Try 2 now hands on where the work may run, and
    try 3 waits for that cluster and adopts the pod."""
    from tests.operators import outage_trigger

    dag_id = "fed_outage_lost_twice"
    east = sim_federation["east-cpu"]
    tries: list[int] = []
    timers: list[threading.Timer] = []

    def before_looking(try_number: int) -> None:
        tries.append(try_number)
        if try_number == 3:  # the cluster answers again while try 3 waits for it (grace 5 s)
            timers.append(threading.Timer(1, east.faults.up))
            timers[-1].start()

    def outage() -> None:
        wait_for(lambda: pod_of(sim_federation, dag_id, "east-cpu", "Running"), timeout=120, interval=0.05)
        east.faults.down()

    outage_trigger.BEFORE_LOOKING_FOR_EARLIER = before_looking
    down = threading.Thread(target=outage, daemon=True)
    down.start()
    try:
        state, record, _ = run(dag_id)
    finally:
        outage_trigger.BEFORE_LOOKING_FOR_EARLIER = None
        down.join(timeout=60)
        for timer in timers:
            timer.join(timeout=60)
        east.faults.up()
    assert tries == [1, 2, 3]
    assert state == "success" and record is not None
    assert record["try_number"] == 3
    assert path(record) == [("east-cpu", "succeeded")]
    assert record["attempts"][0]["adopted"] is True
    assert creates() == 1
    assert "work done" in capfd.readouterr().out
    assert pods_of(sim_federation, dag_id) == []


def test_a_lost_event_from_a_cluster_that_answers_again_is_judged_by_a_fresh_read(
    sim_federation: SimFederation, federation: Path, creates: Callable[[], int], capfd: Any
) -> None:
    """The trigger of a preemptible task fires ``lost`` at its first unanswered read; by the time the task
    resumes the cluster answers again: the pod is read afresh and watched on, not moved."""
    from tests.operators import outage_trigger

    dag_id = "fed_lost_then_back"
    silenced: list[str] = []

    def down(cluster: str) -> None:
        silenced.append(cluster)
        sim_federation[cluster].faults.down()

    outage_trigger.SILENCE_ONCE = (down, lambda cluster: sim_federation[cluster].faults.up())
    try:
        state, record, _ = run(dag_id)
    finally:
        outage_trigger.SILENCE_ONCE = None
        sim_federation["east-cpu"].faults.up()
    assert silenced == ["east-cpu"]
    assert state == "success" and record is not None
    assert path(record) == [("east-cpu", "succeeded")]
    assert creates() == 1
    output = capfd.readouterr().out
    assert "the trigger said lost" in output and "work done" in output
    assert pods_of(sim_federation, dag_id) == []


def run_silenced_at_the_first_read(
    fed: SimFederation, dag_id: str, look: Callable[[str, str, str], None]
) -> tuple[str, dict[str, Any] | None, int]:
    """Run ``dag_id``, whose trigger, before its first read, lets the pod run to its end, calls
    ``look(cluster, namespace, pod)`` and then finds its cluster silent for 3 s. Returns the state, the
    record and how many outages began.

    The pod stays Pending (east-cpu's scheduler paused) until the trigger runs: had it ended before the
    task deferred, the task would have judged it inline, and no trigger would read it."""
    from tests.operators import outage_trigger

    outages: list[threading.Timer] = []

    def before_first_read(cluster: str, namespace: str, pod: str) -> None:
        fed[cluster].scheduler.resume()
        fed[cluster].wait_for_phase(namespace, pod, "Succeeded", timeout=120)
        look(cluster, namespace, pod)
        fed[cluster].faults.down()
        outage = threading.Timer(3, fed[cluster].faults.up)
        outage.start()
        outages.append(outage)

    outage_trigger.BEFORE_FIRST_READ = before_first_read
    fed["east-cpu"].scheduler.pause()
    try:
        state, record, _ = run(dag_id)
    finally:
        outage_trigger.BEFORE_FIRST_READ = None
        for outage in outages:
            outage.join(timeout=60)
        fed["east-cpu"].scheduler.resume()
        fed["east-cpu"].faults.up()
    return state, record, len(outages)


def test_a_pod_that_ended_before_its_trigger_first_read_it_is_not_run_again(
    sim_federation: SimFederation, federation: Path, creates: Callable[[], int], capfd: Any
) -> None:
    """Soak finding (CI profile): a busy triggerer started the trigger 15 s after the deferral; the pod
    Succeeded meanwhile and its cluster went silent before the first read, so nobody had seen it end and
    the preemptible task moved. Another worker's snapshot of that cluster, taken in between, now writes the
    end down as the trigger would: the task waits for the result instead of running the work again."""
    dag_id = "fed_ended_before_first_read"
    noted: list[str | None] = []

    def snapshot_sees_the_end(cluster: str, namespace: str, pod: str) -> None:
        wait_for(
            lambda: (
                (sim_federation[cluster].pod(namespace, pod) or {}).get("status", {}).get("phase")
                == "Succeeded"
            ),
            timeout=120,
            interval=0.05,
        )
        FederationHook().collect([cluster])  # another worker's decision refreshes the snapshot
        noted.append((FederationHook().state.deferred.get(cluster, namespace, pod) or {}).get("ended"))

    state, record, _ = run_silenced_at_the_first_read(sim_federation, dag_id, snapshot_sees_the_end)
    assert noted == ["Succeeded"]  # the task deferred, and the snapshot wrote the end down
    assert state == "success" and record is not None
    assert path(record) == [("east-cpu", "succeeded")]
    assert creates() == 1
    assert "work done" in capfd.readouterr().out
    assert pods_of(sim_federation, dag_id) == []


def test_a_late_trigger_that_finds_the_cluster_silent_waits_for_the_truth_even_when_preemptible(
    sim_federation: SimFederation, federation: Path, creates: Callable[[], int], capfd: Any
) -> None:
    """Full CeleryExecutor soak finding: a restarted triggerer started a preemptible task's trigger late;
    its pod had Succeeded meanwhile, unseen by anyone, and its cluster was silent at the trigger's first
    read, so the task moved and ran the work again. Unseen since the deferral, the pod's state is not
    known: the trigger now waits for the cluster (within the result grace) and the result is adopted."""
    dag_id = "fed_ended_before_a_late_first_read"

    def ended_unseen(cluster: str, namespace: str, pod: str) -> None:
        phase = (sim_federation[cluster].pod(namespace, pod) or {}).get("status", {}).get("phase")
        assert phase == "Succeeded"  # it ran to its end after the deferral, before the trigger's first read

    state, record, outages = run_silenced_at_the_first_read(sim_federation, dag_id, ended_unseen)
    assert outages == 1
    assert state == "success" and record is not None
    assert path(record) == [("east-cpu", "succeeded")]
    assert creates() == 1
    assert "work done" in capfd.readouterr().out
    assert pods_of(sim_federation, dag_id) == []


@pytest.mark.parametrize("mode", MODES)
def test_a_fenced_pod_that_ran_to_the_end_unseen_is_not_run_again(
    sim_federation: SimFederation, federation: Path, creates: Callable[[], int], mode: str
) -> None:
    """Full soak finding: a preemptible task's cluster went silent while its pod ran; the pod was fenced
    and the task, with nowhere else to go, waited. The pod ran to the end meanwhile. When the cluster
    answered again, the snapshot that deleted the fenced pod found it Succeeded and wrote that down: the
    task takes that result instead of running the work a second time there."""
    dag_id = f"fed_fenced_ran_to_the_end_{mode}"
    # The waiting task takes a snapshot of east-cpu again once its last one is older than half the TTL:
    # 10 s here rather than the fixture's 60 s (the snapshot may be retaken while the cluster is still
    # silent; the test asserts what the first one that finds it answering does).
    spec = yaml.safe_load(federation.read_text())
    spec["policy"]["snapshot_ttl_seconds"] = 20
    federation.write_text(yaml.safe_dump(spec))

    def ended() -> object:  # the outage lasts until the fenced pod ran to the end (2 s)
        return pod_of(sim_federation, dag_id, "east-cpu", "Succeeded")

    with Outage(sim_federation, dag_id, "east-cpu", "Running", until=ended):
        state, record, _ = run(dag_id)
    assert state == "success" and record is not None
    assert path(record) == [("east-cpu", "unreachable"), ("east-cpu", "succeeded")]
    left, taken = record["attempts"]
    assert taken["adopted"] is True and "its work is not run again" in taken["decision"]
    assert creates() == 1
    assert pods_of(sim_federation, dag_id) == []
    orphans = FederationHook().state.orphans
    assert not orphans.was_swept_succeeded("east-cpu", left["namespace"], left["pod"])  # taken: forgotten


@pytest.fixture
def short_gone_timeout(monkeypatch: pytest.MonkeyPatch) -> float:
    """How long a try waits for a deletion to be confirmed before it counts as not confirmed
    (``GONE_TIMEOUT``, 60 s in production): 5 s, for a test whose pod is never confirmed gone (its node
    does not answer), so that any length gives the same outcome. Set wherever the operators import it."""
    seconds = 5.0
    for name, module in list(sys.modules.items()):
        if name.startswith("airflow_provider_fedsched.operators") and hasattr(module, "GONE_TIMEOUT"):
            monkeypatch.setattr(module, "GONE_TIMEOUT", seconds)
    return seconds


def test_a_fenced_pod_that_succeeded_before_the_copy_is_created_is_taken_and_no_copy_starts(
    sim_federation: SimFederation, federation: Path, creates: Callable[[], int]
) -> None:
    """The simulated CeleryExecutor soak at 92108c3 (``deferred_resumable[8]``): a preemptible task moved
    during an 18 s outage of north; its first pod Succeeded unseen; north answered again a second before
    the copy was created, and the copy's trigger, slow on a loaded triggerer, read the first pod's end only
    after the copy had run the work to the end. Before a copy is created, each pod the try fenced is looked
    at once: Succeeded, its result is taken and nothing starts elsewhere."""
    dag_id = "fed_first_cluster_back_before_the_copy"

    def ended() -> object:
        return pod_of(sim_federation, dag_id, "east-cpu", "Succeeded")

    with Outage(sim_federation, dag_id, "east-cpu", "Running", until=ended):
        state, record, _ = run(dag_id)
    assert state == "success" and record is not None
    assert creates() == 1
    assert "answered again before the work was started elsewhere" in record["reason"], record["reason"]
    sweep_orphans()
    assert pods_of(sim_federation, dag_id) == []


@pytest.mark.parametrize("mode", MODES)
def test_a_preemptible_task_that_moved_takes_its_first_copy_s_success_and_stops_the_second(
    sim_federation: SimFederation, federation: Path, creates: Callable[[], int], mode: str
) -> None:
    """Soak finding (CeleryExecutor, ``sync_resumable[5]``): during a short outage of its cluster a
    preemptible task moved; its first pod ran to Succeeded there, and the second copy then ran the work
    to the end too. While the second copy runs, the fenced first pod is read; once its cluster answers
    and it shows Succeeded, the second copy is stopped and the first one's result taken."""
    dag_id = f"fed_moved_then_first_succeeded_{mode}"
    east, west = sim_federation["east-cpu"], sim_federation["west-general"]
    seconds_copy: list[dict[str, Any]] = []

    def long_running(pod: dict[str, Any]) -> None:
        pod["metadata"]["annotations"]["sim.fedsched.io/duration"] = "400"  # 40 s at the tests' time scale

    def incident() -> None:
        wait_for(lambda: pod_of(sim_federation, dag_id, "east-cpu", "Running"), timeout=120, interval=0.05)
        east.faults.down()
        second = wait_for(lambda: pod_of(sim_federation, dag_id, "west-general", "Pending"), timeout=120)
        meta = second["metadata"]
        west.call(west.store.mutate, "pods", meta["namespace"], meta["name"], long_running)
        seconds_copy.append(second)
        west.scheduler.resume()
        wait_for(lambda: pod_of(sim_federation, dag_id, "west-general", "Running"), timeout=120)
        wait_for(lambda: pod_of(sim_federation, dag_id, "east-cpu", "Succeeded"), timeout=120)
        east.faults.up()  # the first copy's cluster answers again while the second runs

    west.scheduler.pause()  # the second copy waits for west's scheduler until the test lets it run
    thread = threading.Thread(target=incident, daemon=True)
    thread.start()
    try:
        state, record, _ = run(dag_id)
        thread.join(timeout=120)
    finally:
        west.scheduler.resume()
        east.faults.up()
    assert state == "success" and record is not None
    assert path(record) == [
        ("east-cpu", "unreachable"),
        ("west-general", "cancelled"),
        ("east-cpu", "succeeded"),
    ], record
    assert record["attempts"][-1]["adopted"] is True
    assert creates() == 2
    (second,) = seconds_copy
    (ran,) = [r for r in west.journal() if r["name"] == second["metadata"]["name"]]
    assert ran["outcome"] != "succeeded", ran  # stopped before it finished the work a second time
    assert pods_of(sim_federation, dag_id) == []


@pytest.mark.parametrize("mode", MODES)
def test_a_failed_pod_whose_delete_was_refused_does_not_outlive_its_try(
    sim_federation: SimFederation, federation: Path, mode: str
) -> None:
    """Soak finding (CeleryExecutor, ``sync_plain[26]``): a pod that ended Failed was still in its
    cluster's API after the run. A delete refused with an answer (a 403 from an API server whose
    authorizer's caches are not filled yet, or a permission revoked for a while) was swallowed by the
    cleanup, and the try, failed by the task's own exit code, ended without its pod gone or written down.
    The try now makes sure its pod is gone (or written down, deleted when the cluster allows it)."""
    dag_id = "fed_task_failure" if mode == "sync" else "fed_task_failure_deferrable"
    for handle in sim_federation.handles.values():
        handle.faults.fail(status=403, times=2, route="/api/v1/namespaces/[^/]+/pods/", method="DELETE")
    try:
        state, record, _ = run(dag_id)
    finally:
        for handle in sim_federation.handles.values():
            handle.faults.clear()
    assert state == "failed" and record is not None
    assert [outcome for _, outcome in path(record)] == ["failed"], record
    assert pods_of(sim_federation, dag_id) == []


@pytest.mark.timeout(600)
def test_a_pod_on_a_node_that_stopped_answering_is_never_run_a_second_time(
    sim_federation: SimFederation, federation: Path, creates: Callable[[], int], short_gone_timeout: float
) -> None:
    """Soak finding (CeleryExecutor): a task's pod kept running on a node that went NotReady; the try was
    lost past the grace and its pod deleted with no grace period, which removes it from the API at once
    while its container runs on (the node's kubelet is not there to stop it); the retry found no pod and
    started a second copy. Deletions that must be confirmed now give the kubelet its say (the pod stays,
    terminating, until its node stops it), and a retry that cannot confirm an earlier pod stopped does not
    start the work again."""
    dag_id = "fed_node_lost"
    east = sim_federation["east-cpu"]
    lost_node: list[str] = []

    def node_lost_once_running() -> None:
        pod = wait_for(
            lambda: pod_of(sim_federation, dag_id, "east-cpu", "Running"), timeout=120, interval=0.05
        )
        lost_node.append(pod["spec"]["nodeName"])
        east.faults.node_not_ready(lost_node[0])

    thread = threading.Thread(target=node_lost_once_running, daemon=True)
    thread.start()
    try:
        state, record, _ = run(dag_id)
        thread.join(timeout=30)

        assert state == "failed" and record is not None and record["try_number"] == 2
        assert creates() == 1  # never a second copy, although west-general was allowed
        assert "not confirmed stopped in east-cpu" in record["reason"]
        assert record["left_by_earlier_try"]["cluster"] == "east-cpu"  # the next try waits for it too
        (pod,) = [p for p in east.pods() if (p["metadata"].get("labels") or {}).get("dag_id") == dag_id]
        assert pod["metadata"].get("deletionTimestamp")  # terminating, its node not there to stop it
    finally:
        for node in lost_node:
            east.faults.node_ready(node)
    # The node back, its kubelet stops the pod; the next snapshot sweeps what was written down.
    wait_for(lambda: not pods_of(sim_federation, dag_id), timeout=60, interval=0.2)
