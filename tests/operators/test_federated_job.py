"""FederatedKubernetesJobOperator end to end: real Airflow (dag.test), the official client over real HTTP,
the simulated federation's Job controller. A gang runs whole in one cluster or moves whole."""

from __future__ import annotations

import contextlib
import json
import os
import signal
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
import yaml

from airflow_provider_fedsched.hooks.federation import FederationHook
from airflow_provider_fedsched.sim import SimFederation, wait_for
from tests import airflow_harness
from tests.operators import test_federated_operator as pod_tests
from tests.operators.test_contract import Outage, sweep_orphans

DAG_FILE = Path(__file__).parent / "dags" / "federated_job_dags.py"
pytestmark = [pytest.mark.airflow]
xcom = pod_tests.xcom
background = pod_tests.background  # the fixture, shared with the pod operator's tests


def run(dag_id: str) -> tuple[str, dict[str, Any] | None]:
    dag_run = airflow_harness.run_dag(DAG_FILE, dag_id)
    state = airflow_harness.task_states(dag_run)["work"]
    record = xcom(dag_run, "fedsched_placement")
    return state, (json.loads(record) if isinstance(record, str) else record)


def path(record: dict[str, Any]) -> list[tuple[str, str]]:
    return [(a["cluster"], a["outcome"]) for a in record["attempts"]]


def left_behind(fed: SimFederation, dag_id: str) -> list[str]:
    """Every Job and pod of the DAG still in any cluster."""
    found = []
    for name, handle in fed.handles.items():
        for plural, items in (("jobs", handle.jobs()), ("pods", handle.pods())):
            for item in items:
                if (item["metadata"].get("labels") or {}).get("dag_id") == dag_id:
                    found.append(f"{name}/{plural}/{item['metadata']['name']}")
    return found


@pytest.fixture
def east_mostly_down(sim_federation: SimFederation, federation: Path) -> Iterator[None]:
    """After the federation's snapshot, two of east-cpu's three nodes go NotReady: its one ready node takes
    two 3-cpu workers, not the gang's three.

    The snapshot stays valid for the whole test (however slow the machine): the federation decides on
    what it saw, and the cluster's scheduler tells otherwise at run time."""
    spec = yaml.safe_load(federation.read_text())
    spec["policy"]["snapshot_ttl_seconds"] = 3600
    federation.write_text(yaml.safe_dump(spec))

    def roomy_snapshot() -> bool:
        # On a loaded machine a collection may time out (the cluster is then "unreachable"): ask again.
        # Every node must take a 3-cpu worker: on real control planes the previous test's pods may still
        # be terminating, leaving room in total but not on every node.
        seen = FederationHook().collect()["east-cpu"]
        return seen.reachable and all(
            node.schedulable and node.free.get("cpu", 0) >= 3000 for node in seen.nodes
        )

    wait_for(roomy_snapshot, timeout=120, interval=1.0)
    east = sim_federation["east-cpu"]
    down = [node["metadata"]["name"] for node in east.nodes()][1:]
    for name in down:
        east.faults.node_not_ready(name)
    yield
    for name in down:
        east.faults.node_ready(name)


def test_a_gang_runs_whole_in_the_chosen_cluster_and_leaves_nothing(
    sim_federation: SimFederation, federation: Path
) -> None:
    state, record = run("gang_runs_whole")

    assert state == "success" and record is not None
    assert path(record) == [("east-cpu", "succeeded")]
    assert record["attempts"][0]["running_at"] is not None  # all 3 pods were scheduled together
    assert left_behind(sim_federation, "gang_runs_whole") == []


@pytest.mark.parametrize("dag_id", ["gang_unschedulable_moves", "gang_deferrable_unschedulable_moves"])
def test_a_member_unschedulable_past_the_grace_moves_the_whole_gang(
    sim_federation: SimFederation, federation: Path, east_mostly_down: None, dag_id: str
) -> None:
    state, record = run(dag_id)

    assert state == "success" and record is not None
    assert path(record) == [("east-cpu", "insufficient"), ("north-gpu", "succeeded")]
    first = record["attempts"][0]
    assert first["reason"].startswith("2 of 3 pods of the gang scheduled together within 3s: ")
    assert "1 Insufficient cpu" in first["reason"]
    # The whole Job left east-cpu, the two members already placed with it; nothing is left anywhere.
    assert left_behind(sim_federation, dag_id) == []


def test_an_evicted_member_moves_the_gang_which_resumes_from_its_checkpoint(
    sim_federation: SimFederation,
    federation: Path,
    background: Callable[[Callable[[], None]], None],
    capfd: pytest.CaptureFixture[str],
) -> None:
    def evict_one_member_once_all_run() -> None:
        def running_members() -> tuple[str, list[dict[str, Any]]] | None:
            for name, handle in sim_federation.handles.items():
                members = [
                    pod
                    for pod in handle.pods()
                    if (pod["metadata"].get("labels") or {}).get("dag_id") == "gang_evicted_resumes"
                    and pod["metadata"]["labels"].get("fedsched.io/cluster-attempt") == "1"
                    and pod["status"].get("phase") == "Running"
                ]
                if len(members) == 3:
                    return name, members
            return None

        cluster, members = wait_for(running_members, timeout=60)
        member = members[1]["metadata"]
        sim_federation[cluster].faults.evict_pod(member["namespace"], member["name"])

    background(evict_one_member_once_all_run)
    state, record = run("gang_evicted_resumes")

    assert state == "success" and record is not None
    assert path(record) == [("east-cpu", "evicted"), ("north-gpu", "succeeded")]
    assert record["attempts"][1]["resumed_from_checkpoint"] is True
    out = capfd.readouterr().out
    assert "attempt 2 resume=true" in out
    assert "Attempt 1: launching job default/" in out  # a Job, not "pod" (issue 26)
    assert left_behind(sim_federation, "gang_evicted_resumes") == []


def test_bad_parallelism_fails_at_the_start_naming_the_argument(
    sim_federation: SimFederation, federation: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    state, _ = run("gang_bad_parallelism")

    assert state == "failed"
    assert "parallelism: 0 is outside 1..100000" in capfd.readouterr().out
    assert left_behind(sim_federation, "gang_bad_parallelism") == []


# The delivery contract of pod tasks, for Jobs ---------------------------------------------------------------
JOB_CREATES = "/apis/batch/v1/namespaces/default/jobs"
MODES = ["sync", "deferrable"]


@pytest.fixture
def job_creates(sim_federation: SimFederation) -> Iterator[Callable[[], int]]:
    """Jobs created (POSTs to the batch API, in every cluster) since the test began."""

    def count() -> int:
        return sum(h.request_count("POST", JOB_CREATES) for h in sim_federation.handles.values())

    before = count()
    yield lambda: count() - before


@pytest.mark.parametrize("mode", MODES)
def test_an_outage_shorter_than_the_grace_reattaches_to_the_one_job(
    sim_federation: SimFederation, federation: Path, job_creates: Callable[[], int], mode: str
) -> None:
    dag_id = f"gang_outage_short_{mode}"
    with Outage(sim_federation, dag_id, "east-cpu", "Running", seconds=2) as outage:
        state, record = run(dag_id)

    assert outage.down_at is not None  # the cluster was silent while the gang ran
    assert state == "success" and record is not None
    assert path(record) == [("east-cpu", "succeeded")]
    assert job_creates() == 1  # reattached, never a second Job
    assert left_behind(sim_federation, dag_id) == []


@pytest.mark.parametrize("mode", MODES)
def test_an_outage_longer_than_the_grace_fails_the_try_lost_and_the_job_is_swept(
    sim_federation: SimFederation, federation: Path, job_creates: Callable[[], int], mode: str
) -> None:
    dag_id = f"gang_outage_lost_{mode}"
    with Outage(sim_federation, dag_id, "east-cpu", "Running"):
        state, record = run(dag_id)
        assert state == "failed" and record is not None
        assert job_creates() == 1  # north-gpu could take the gang: it was not started there
        (attempt,) = record["attempts"]
        assert (attempt["cluster"], attempt["outcome"]) == ("east-cpu", "lost")
        assert "connection refused at http://127.0.0.1" in attempt["reason"]
        assert "the gang is not started elsewhere" in record["reason"]
        # Written down while its cluster is silent; the Job and its pods are still there.
        assert FederationHook().orphans("east-cpu", kind="job") == [(attempt["namespace"], attempt["pod"])]
    assert left_behind(sim_federation, dag_id) != []
    sweep_orphans()  # the first snapshot that finds east-cpu answering deletes the Job with its pods
    assert FederationHook().orphans("east-cpu", kind="job") == []
    assert left_behind(sim_federation, dag_id) == []


@pytest.mark.parametrize("mode", MODES)
def test_a_preemptible_gang_moves_at_once_and_its_old_job_is_fenced(
    sim_federation: SimFederation, federation: Path, job_creates: Callable[[], int], mode: str
) -> None:
    dag_id = f"gang_outage_preemptible_{mode}"
    with Outage(sim_federation, dag_id, "east-cpu", "Running"):
        state, record = run(dag_id)
        assert state == "success" and record is not None
        assert path(record) == [("east-cpu", "unreachable"), ("north-gpu", "succeeded")]
        assert record["attempts"][1]["resumed_from_checkpoint"] is True
        assert 0 < record["failover_seconds"] <= 5.0  # at once: the old Job is not waited for
        assert job_creates() == 2
        first = record["attempts"][0]
        assert FederationHook().orphans("east-cpu", kind="job") == [(first["namespace"], first["pod"])]
    sweep_orphans()  # fenced: deleted with its pods once east-cpu answers again
    assert FederationHook().orphans("east-cpu", kind="job") == []
    assert left_behind(sim_federation, dag_id) == []


@pytest.mark.parametrize(
    ("dag_id", "found"),
    [
        ("gang_retry_adopts_running", "was still running"),  # runs 30 s: past the outage
        ("gang_retry_adopts_complete", "had already completed"),  # runs 6 s: ends while east-cpu is silent
    ],
)
def test_a_retry_adopts_the_earlier_tries_job_and_never_creates_a_second(
    sim_federation: SimFederation,
    federation: Path,
    job_creates: Callable[[], int],
    capfd: pytest.CaptureFixture[str],
    dag_id: str,
    found: str,
) -> None:
    """Try 1 is lost to an outage past the grace (its Job written down); try 2 starts once the cluster
    answers and adopts that Job, still running or already complete, instead of running the gang again."""
    from tests.operators import outage_trigger

    east = sim_federation["east-cpu"]
    tries: list[int] = []

    def complete() -> bool:
        return any(
            condition["type"] == "Complete" and condition["status"] == "True"
            for job in east.jobs()
            if (job["metadata"].get("labels") or {}).get("dag_id") == dag_id
            for condition in (job.get("status") or {}).get("conditions") or []
        )

    def before_looking(try_number: int) -> None:
        tries.append(try_number)
        if try_number == 2:  # the cluster answers again as try 2 looks for try 1's Job
            if found == "had already completed":  # which ran to the end while its cluster was silent
                wait_for(complete, timeout=120, interval=0.1)
            east.faults.up()

    with (
        outage_trigger.before_looking_for_earlier(before_looking),
        Outage(sim_federation, dag_id, "east-cpu", "Running"),
    ):
        dag_run = airflow_harness.run_dag(DAG_FILE, dag_id)
    assert tries == [1, 2]
    state = airflow_harness.task_states(dag_run)["work"]
    raw = xcom(dag_run, "fedsched_placement")
    record = json.loads(raw) if isinstance(raw, str) else raw

    assert state == "success" and record is not None
    assert record["try_number"] == 2
    assert path(record) == [("east-cpu", "succeeded")]
    (attempt,) = record["attempts"]
    assert attempt["adopted"] is True
    assert attempt["decision"] == f"adopted the job of try 1 (it {found})"
    assert job_creates() == 1  # one Job for both tries
    out = capfd.readouterr().out
    assert "Adopting job" in out and "gang work done" in out  # watched to its end, its logs read
    assert FederationHook().orphans("east-cpu", kind="job") == []  # adopted: no longer fenced
    assert left_behind(sim_federation, dag_id) == []


def _killable_job(operator: Any, cluster: str, name: str) -> None:
    """A running 2-pod Job in ``cluster``, created through the operator's own client over HTTP."""
    from kubernetes.client import models as k8s

    operator.use_cluster(cluster)
    template = k8s.V1PodTemplateSpec(
        metadata=k8s.V1ObjectMeta(
            labels={"dag_id": "killed_job"}, annotations={"sim.fedsched.io/duration": "3600"}
        ),
        spec=k8s.V1PodSpec(
            restart_policy="Never", containers=[k8s.V1Container(name="base", image="busybox")]
        ),
    )
    operator.job_manager.create(
        k8s.V1Job(
            metadata=k8s.V1ObjectMeta(name=name, namespace="default", labels={"dag_id": "killed_job"}),
            spec=k8s.V1JobSpec(parallelism=2, completions=2, backoff_limit=0, template=template),
        )
    )


def _running_attempt(operator: Any, cluster: str, name: str) -> Any:
    from datetime import UTC, datetime

    from airflow_provider_fedsched.federation.record import Attempt, PlacementRecord

    now = datetime.now(UTC)
    attempt = Attempt(
        number=1, cluster=cluster, namespace="default", pod=name, placement_id="p", started_at=now
    )
    operator.placement = PlacementRecord(
        dag_id="killed_job", run_id="r", task_id="killed", try_number=1, started_at=now, attempts=[attempt]
    )
    return attempt


@pytest.mark.parametrize("answering", [True, False], ids=["cluster-answers", "cluster-silent"])
def test_ending_the_task_deletes_its_job_with_its_pods_and_records_cancelled(
    sim_federation: SimFederation, federation: Path, answering: bool
) -> None:
    """on_kill (the UI's mark-failed, the API, a timeout) deletes the Job with its pods where it runs; a
    cluster that does not answer then gets it written down, deleted when it answers again."""
    from airflow_provider_fedsched.operators.federated_job import FederatedKubernetesJobOperator

    north = sim_federation["north-gpu"]
    name = f"killed-{'answers' if answering else 'silent'}"
    operator = FederatedKubernetesJobOperator(task_id="killed", image="busybox", parallelism=2, completions=2)
    _killable_job(operator, "north-gpu", name)

    def both_running() -> bool:
        members = [p for p in north.pods() if p["metadata"]["name"].startswith(name)]
        return len(members) == 2 and all(p["status"].get("phase") == "Running" for p in members)

    wait_for(both_running, timeout=60)
    attempt = _running_attempt(operator, "north-gpu", name)
    operator.use_cluster("east-cpu")  # whatever cluster the operator last talked to

    if not answering:
        north.faults.down()
    try:
        operator.on_kill()
    finally:
        north.faults.up()

    assert attempt.outcome == "cancelled"
    assert operator.placement.outcome == "failed"
    samples = FederationHook().history("north-gpu", "outcome")
    assert samples and samples[-1]["outcome"] == "cancelled"
    if answering:
        assert attempt.reason == "the task was ended while its job ran: job deleted"
        assert FederationHook().orphans("north-gpu", kind="job") == []
    else:
        assert attempt.reason == "the task was ended while its job ran: job deleted later"
        assert FederationHook().orphans("north-gpu", kind="job") == [("default", name)]
        assert left_behind(sim_federation, "killed_job") != []  # nothing reached the silent cluster
        sweep_orphans()
        assert FederationHook().orphans("north-gpu", kind="job") == []
    assert left_behind(sim_federation, "killed_job") == []


def test_a_deferred_job_try_ended_by_a_user_has_its_job_swept_by_the_next_snapshot(
    sim_federation: SimFederation, federation: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A deferrable Job try waits between polls on a timer trigger, which deletes nothing when a user marks
    the try failed: the deferral is written down with its task instance, and the next snapshot of the
    Job's cluster finds the try over and deletes the Job with its pods."""
    from datetime import UTC, datetime

    from airflow.models.trigger import Trigger

    from airflow_provider_fedsched.hooks import sensing
    from tests.operators import test_ended_while_deferred as ended

    dag_id = "gang_deferred_ended"
    airflow_harness.load_dag(DAG_FILE, dag_id)
    airflow_harness.serialize_dags(dag_id)
    run_id = f"manual__job-swept-{datetime.now(UTC).timestamp():.0f}"
    airflow_harness.create_dag_run(dag_id, run_id, datetime.now(UTC))
    ended.defer(run_id, dag_id, DAG_FILE)
    hook = FederationHook()
    (entry,) = [e for handle in sim_federation.handles for e in hook.state.deferred.of(handle)]
    assert entry["kind"] == "job" and entry["run_id"] == run_id
    assert left_behind(sim_federation, dag_id) != []

    ended.mark_failed_as_the_rest_api_does(run_id, dag_id)
    Trigger.clean_unused()
    assert ended.ti_row(run_id, dag_id) == ("failed", None)

    # A deferral still within its trigger's time is left alone; then the sweep finds the try over.
    hook.collect()
    assert left_behind(sim_federation, dag_id) != []
    monkeypatch.setattr(sensing, "ENDED_TRY_AGE", 0.0)
    hook.collect()
    assert left_behind(sim_federation, dag_id) == []
    for cluster in sim_federation.handles:
        assert hook.state.deferred.of(cluster) == [] and hook.orphans(cluster, kind="job") == []


# The soak's Job findings (docs/reliability.md) ------------------------------------------------------------
def _run_with_retry(dag_id: str) -> tuple[str, dict[str, Any]]:
    dag_run = airflow_harness.run_dag(DAG_FILE, dag_id)
    state = airflow_harness.task_states(dag_run)["work"]
    raw = xcom(dag_run, "fedsched_placement")
    return state, json.loads(raw) if isinstance(raw, str) else raw


def _the_job(fed: SimFederation, cluster: str, dag_id: str) -> dict[str, Any] | None:
    return next(
        (j for j in fed[cluster].jobs() if (j["metadata"].get("labels") or {}).get("dag_id") == dag_id), None
    )


def _gang_done(fed: SimFederation, cluster: str, dag_id: str) -> dict[str, Any] | None:
    """The Job of ``dag_id`` once its gang's work is done (by its status or its pods'), else None; None
    too while the cluster does not answer (the test bed's API server stopped)."""
    from airflow_provider_fedsched.kube.jobs import JOB_NAME_LABEL, GangView

    try:
        job = _the_job(fed, cluster, dag_id)
        if job is None:
            return None
        name = job["metadata"]["name"]
        pods = [
            p for p in fed[cluster].pods() if (p["metadata"].get("labels") or {}).get(JOB_NAME_LABEL) == name
        ]
    except Exception:
        return None
    return job if GangView(job, pods).complete else None


def test_a_retry_takes_the_success_of_a_lost_try_s_job_that_completed_and_was_swept(
    sim_federation: SimFederation, federation: Path, job_creates: Callable[[], int]
) -> None:
    """The test-bed soak's ``gang_job[1]``: try 1 is lost to an outage past the grace (its Job written
    down); the Job completes while its cluster is silent; once the cluster answers, a sweep deletes the
    finished Job; the retry scored afresh and ran the gang a second time. The sweep writes the Job's
    success down before deleting it, and the retry takes it: one Job, ever; nothing left."""
    from tests.operators import outage_trigger

    dag_id = "gang_retry_after_sweep"
    outage = Outage(sim_federation, dag_id, "east-cpu", "Running", seconds=10)
    swept: list[dict[str, Any]] = []
    swept_at: list[datetime] = []

    def sweep_once_east_answers() -> None:
        # The Job completes while east-cpu is silent (on the test bed: once its API server is back, when
        # kwok and the Job controller can say so); a snapshot that reaches east-cpu then sweeps it.
        wait_for(lambda: outage.down_at is not None, timeout=240)
        swept.append(wait_for(lambda: _gang_done(sim_federation, "east-cpu", dag_id), timeout=180))

        def answered_and_swept() -> bool:
            hook = FederationHook()
            return hook.collect(["east-cpu"])["east-cpu"].reachable and not hook.orphans("east-cpu", "job")

        wait_for(answered_and_swept, timeout=120, interval=0.5)
        swept_at.append(datetime.now(UTC))

    looked_at: list[datetime] = []

    def once_swept(try_number: int) -> None:
        # Try 2 looks for try 1's Job once a sweep has deleted it. The sweep runs here, in the task's
        # thread: a second thread would share the task's Task SDK channel, which dag.test() serves
        # one caller at a time (test_federated_operator.py, other_tries_end).
        if try_number == 2:
            sweep_once_east_answers()
            looked_at.append(datetime.now(UTC))

    with outage_trigger.before_looking_for_earlier(once_swept), outage:
        state, record = _run_with_retry(dag_id)

    assert swept_at and _the_job(sim_federation, "east-cpu", dag_id) is None
    assert state == "success" and record is not None
    assert record["try_number"] == 2
    assert looked_at and swept_at[0] <= looked_at[0]  # swept before try 2 looked
    assert job_creates() == 1, record  # the gang ran once
    ((cluster, outcome),) = path(record)
    assert (cluster, outcome) == ("east-cpu", "succeeded")
    assert record["attempts"][0]["pod"] == swept[0]["metadata"]["name"]
    assert "its work is not run again" in record["reason"]
    assert left_behind(sim_federation, dag_id) == []


def test_a_retry_takes_the_success_of_a_lost_try_s_finished_job_that_is_being_deleted(
    sim_federation: SimFederation,
    federation: Path,
    job_creates: Callable[[], int],
    background: Callable[[Callable[[], None]], None],
) -> None:
    """As above, but the finished Job is being deleted (a finalizer holds it) when the retry looks: it
    cannot be watched, but its gang is done: the retry takes its success and starts nothing."""
    from airflow_provider_fedsched.sim.apiserver import registry
    from tests.operators import outage_trigger

    dag_id = "gang_retry_finds_it_being_deleted"
    east = sim_federation["east-cpu"]
    outage = Outage(sim_federation, dag_id, "east-cpu", "Running", seconds=10)
    held: list[dict[str, Any]] = []

    def hold(job: dict[str, Any]) -> None:
        job["metadata"]["finalizers"] = ["example.com/hold"]

    def release(job: dict[str, Any]) -> None:
        job["metadata"]["finalizers"] = []

    def delete_it_once_complete() -> None:
        wait_for(lambda: outage.down_at is not None, timeout=240)
        job = wait_for(lambda: _gang_done(sim_federation, "east-cpu", dag_id), timeout=180)
        namespace, name = job["metadata"]["namespace"], job["metadata"]["name"]
        east.call(east.store.mutate, "jobs", namespace, name, hold)
        east.call(registry.delete, east.store, "jobs", namespace, name, {"propagationPolicy": "Background"})
        held.append(job)

    background(delete_it_once_complete)

    def once_held(try_number: int) -> None:
        # Try 2 looks for try 1's Job once it is being deleted and east-cpu answers again (the Job can
        # complete, and be held, while the outage lasts).
        if try_number == 2:
            wait_for(lambda: held and not east.cluster.faults.is_down, timeout=240, interval=0.1)

    try:
        with outage_trigger.before_looking_for_earlier(once_held), outage:
            state, record = _run_with_retry(dag_id)
    finally:
        for job in held:
            east.call(
                east.store.mutate, "jobs", job["metadata"]["namespace"], job["metadata"]["name"], release
            )

    assert held, "the Job never completed"
    assert state == "success" and record is not None
    assert record["try_number"] == 2
    assert job_creates() == 1, record  # the gang ran once
    assert [(a["pod"], a["adopted"]) for a in record["attempts"]] == [(held[0]["metadata"]["name"], True)]
    assert "its work is not run again" in record["reason"]
    sweep_orphans()
    assert left_behind(sim_federation, dag_id) == []


def _running_gang(fed: SimFederation, dag_id: str) -> tuple[str, dict[str, Any]] | None:
    """The cluster and Job of ``dag_id`` once all three of its pods run."""
    for cluster, handle in fed.handles.items():
        members = [
            p
            for p in handle.pods()
            if (p["metadata"].get("labels") or {}).get("dag_id") == dag_id
            and p["status"].get("phase") == "Running"
        ]
        job = _the_job(fed, cluster, dag_id)
        if len(members) == 3 and job is not None:
            return cluster, job
    return None


def test_a_gang_task_ended_while_its_job_runs_starts_nothing_else(
    sim_federation: SimFederation,
    federation: Path,
    job_creates: Callable[[], int],
    background: Callable[[Callable[[], None]], None],
) -> None:
    """The simulator soak's ``gang_job[1]``: the task was marked failed while its Job ran; ``on_kill``
    deleted the Job, the attempt loop took the Job's disappearance for a lost Job and launched the gang
    again in another member, which ran to the end after the task process was killed. The operator's own
    cancellation is never a lost Job: after ``on_kill`` nothing is judged or launched."""
    dag_id = "gang_killed_while_running"
    previous = signal.getsignal(signal.SIGTERM)
    ended: list[str] = []

    def end_the_task_once_its_gang_runs() -> None:
        cluster, job = wait_for(lambda: _running_gang(sim_federation, dag_id), timeout=240)
        ended.append(cluster)
        airflow_harness.end_the_task_once_it_watches(
            sim_federation[cluster], f"{JOB_CREATES}/{job['metadata']['name']}"
        )

    background(end_the_task_once_its_gang_runs)
    try:
        state, record = run(dag_id)
    finally:
        signal.signal(signal.SIGTERM, previous)

    assert ended, "the gang never ran"
    assert state == "failed" and record is not None
    assert job_creates() == 1, record  # never started again elsewhere
    assert path(record) == [(ended[0], "cancelled")], record
    assert record["attempts"][0]["reason"] == "the task was ended while its job ran: job deleted"
    assert left_behind(sim_federation, dag_id) == []


def test_a_job_deleted_by_someone_while_its_gang_runs_is_not_started_again(
    sim_federation: SimFederation,
    federation: Path,
    job_creates: Callable[[], int],
    background: Callable[[Callable[[], None]], None],
) -> None:
    """A Job that disappears while its gang runs (deleted by someone, its pods with it) may have run its
    gang's work: a gang that is not preemptible is not started again elsewhere (as a pod task whose pod
    disappeared); the try fails. Only a preemptible gang moves."""
    dag_id = "gang_deleted_by_someone"
    deleted: list[str] = []

    def delete_the_job_and_its_pods() -> None:
        cluster, job = wait_for(lambda: _running_gang(sim_federation, dag_id), timeout=240)
        handle = sim_federation[cluster]
        namespace = job["metadata"]["namespace"]

        def remove_all() -> None:  # at once, in the simulator's thread: no read sees half of it
            handle.store.remove("jobs", namespace, job["metadata"]["name"])
            for pod in handle.store.list("pods", namespace):
                if (pod["metadata"].get("labels") or {}).get("dag_id") == dag_id:
                    handle.store.remove("pods", namespace, pod["metadata"]["name"])

        handle.call(remove_all)
        deleted.append(cluster)

    background(delete_the_job_and_its_pods)
    state, record = run(dag_id)

    assert deleted, "the gang never ran"
    assert state == "failed" and record is not None
    assert job_creates() == 1, record  # not started again elsewhere
    assert path(record) == [(deleted[0], "lost")], record
    assert "disappeared before it ended" in record["reason"]
    assert "so the gang is not started elsewhere" in record["reason"]
    assert left_behind(sim_federation, dag_id) == []


@pytest.mark.timeout(600)  # on the loaded test bed, the sweep may wait minutes for east-cpu's controllers
def test_a_retry_waits_for_a_dead_try_s_silent_cluster_and_adopts_its_complete_job(
    sim_federation: SimFederation, federation: Path, job_creates: Callable[[], int]
) -> None:
    """The pods' ``sync_resumable[21]``, for a gang: a preemptible try's worker is SIGKILLed while its
    Job runs in east-cpu; the Job completes unwatched; east-cpu goes silent. Nobody watched that Job since
    its try died: the retry waits for east-cpu within ``unreachable_grace``, preemptible or not, and
    adopts the complete Job instead of running the gang on another member. One Job, ever; none left."""
    import subprocess
    import sys

    dag_id = "gang_killed_preemptible"
    airflow_harness.load_dag(DAG_FILE, dag_id)
    airflow_harness.serialize_dags(dag_id)
    now = datetime.now(UTC)
    run_id = f"manual__killed-gang-{now.timestamp():.0f}"
    airflow_harness.create_dag_run(dag_id, run_id, now)
    command = [str(Path(sys.executable).with_name("airflow")), "tasks", "test", dag_id, "work", run_id]
    east = sim_federation["east-cpu"]

    first_log = federation.parent / "first-worker.log"
    worker = subprocess.Popen(command, stdout=first_log.open("w"), stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: _running_gang(sim_federation, dag_id), timeout=240, message=str(first_log))
    finally:
        worker.send_signal(signal.SIGKILL)
        worker.wait(timeout=30)
    first = wait_for(lambda: _gang_done(sim_federation, "east-cpu", dag_id), timeout=120)
    east.faults.down()
    pod_tests.bump_try_number(dag_id, run_id)
    retry_log = federation.parent / "retry.log"
    retry = subprocess.Popen(command, stdout=retry_log.open("w"), stderr=subprocess.STDOUT)
    try:
        # East-cpu answers again once the retry waits for it, or once it started the gang elsewhere.
        wait_for(
            lambda: "may have run to the end in east-cpu" in retry_log.read_text() or job_creates() > 1,
            timeout=240,
            message=str(retry_log),
        )
        east.faults.up()
        assert retry.wait(timeout=300) == 0, retry_log.read_text()[-3000:]
    finally:
        east.faults.up()
        if retry.poll() is None:
            retry.kill()
            retry.wait(timeout=30)

    assert job_creates() == 1, retry_log.read_text()[-3000:]
    record = pod_tests.placement_of_run(dag_id, run_id)
    assert record["outcome"] == "succeeded", record
    assert [(a["cluster"], a["pod"], a["adopted"]) for a in record["attempts"]] == [
        ("east-cpu", first["metadata"]["name"], True)
    ], record
    if left_behind(sim_federation, dag_id) or FederationHook().orphans("east-cpu", kind="job"):
        # On the test bed, after its API server's restart kwok and the garbage collector come back after
        # their watches' backoff, which on a loaded machine outlasts the retry's minute of confirming the
        # Job's deletion (two CI runs: the Job and its three Succeeded pods still there, or gone just after
        # the try). The deletion was asked within the try and the Job written down: the next sweep that
        # reaches east-cpu ends it and its record.
        jobs = [j for j in east.jobs() if (j["metadata"].get("labels") or {}).get("dag_id") == dag_id]
        assert all(j["metadata"].get("deletionTimestamp") for j in jobs), jobs
        assert FederationHook().orphans("east-cpu", kind="job") != []

        def swept() -> bool:
            sweep_orphans()
            return not left_behind(sim_federation, dag_id) and not FederationHook().orphans(
                "east-cpu", kind="job"
            )

        wait_for(swept, timeout=240, interval=2.0, message="east-cpu's leftovers swept")
    assert left_behind(sim_federation, dag_id) == []
    assert FederationHook().orphans("east-cpu", kind="job") == []


# Divided Indexed Jobs (issue 31) --------------------------------------------------------------------------
FREE_CPU = {"west-general": 5, "east-cpu": 4}
"""Free cpu left on each node of these members by fillers: 4 x 5 and 3 x 4. north-gpu's one untainted node
(8 cpu) is its only room for an untolerating pod: 20 / 12 / 8 one-cpu pods, 50 / 30 / 20 % of 40."""


def _leave_room(fed: SimFederation) -> list[tuple[str, str]]:
    """Fillers leaving :data:`FREE_CPU` on every node of those members; returns them, once they run."""
    fillers = [
        (cluster, name)
        for cluster, free in FREE_CPU.items()
        for name in pod_tests.fill_nodes(fed[cluster], leave_cpu=free)
    ]
    wait_for(
        lambda: all(
            (fed[c].pod("default", n) or {}).get("status", {}).get("phase") == "Running" for c, n in fillers
        ),
        timeout=60,
    )
    return fillers


@pytest.fixture
def room_50_30_20(sim_federation: SimFederation, federation: Path) -> Iterator[None]:
    fillers = _leave_room(sim_federation)
    yield
    for cluster, name in fillers:
        sim_federation[cluster].delete_pod("default", name, grace=0)


def _slice_jobs(cluster: str, handle: Any, dag_id: str, seen: dict[tuple[str, str], str], stop: Any) -> None:
    """Every slice Job of the DAG as the member holds it: (cluster, job) -> the FEDSCHED_INDICES its pods
    are given (read from the Job's own pod template, until ``stop`` is set)."""
    while not stop.is_set():
        try:
            members_jobs = handle.jobs()
        except Exception:  # its API server down (on the test bed): read again at the next pass
            members_jobs = []
        for job in members_jobs:
            if (job["metadata"].get("labels") or {}).get("dag_id") != dag_id:
                continue
            (container,) = [c for c in job["spec"]["template"]["spec"]["containers"] if c["name"] == "base"]
            env = {var["name"]: var.get("value") for var in container.get("env") or []}
            seen[(cluster, job["metadata"]["name"])] = env["FEDSCHED_INDICES"]
        stop.wait(0.1)


def test_a_divided_job_runs_each_index_exactly_once_in_slices_that_follow_the_room(
    sim_federation: SimFederation,
    federation: Path,
    room_50_30_20: None,
    background: Callable[[Callable[[], None]], None],
    pods_ran: Callable[[Any], dict[str, list[dict[str, Any]]]],
) -> None:
    dag_id = "divided_by_room"
    with watching_slices(sim_federation, dag_id, background) as jobs:
        state, record = run(dag_id)

    assert state == "success" and record is not None
    assert record["outcome"] == "succeeded"
    # One slice per member, each as large as the member's room: 50 / 30 / 20 % of the 40 indices.
    slices = {a["cluster"]: (a["indices"], a["outcome"]) for a in record["attempts"]}
    assert slices == {
        "west-general": ("0-19", "succeeded"),
        "east-cpu": ("20-31", "succeeded"),
        "north-gpu": ("32-39", "succeeded"),
    }
    assert len(record["attempts"]) == 3
    assert set(jobs) == {(a["cluster"], a["pod"]) for a in record["attempts"]}
    assert {jobs[(a["cluster"], a["pod"])] for a in record["attempts"]} == {"0-19", "20-31", "32-39"}
    division = record["decisions"][0]["extra"]["division"]
    assert division["west-general"].startswith("20 of 40 waiting indices: room for 20 pod(s) now")
    # Each slice's own estimate, in its attempt and in the decision: its pods at a time at its member's
    # prices (1 cpu and 64Mi a pod; sim/defaults.yaml), no data moved.
    per_pod = {
        "west-general": 0.04 + 0.0625 * 0.004,
        "east-cpu": 0.02 + 0.0625 * 0.002,
        "north-gpu": 0.06 + 0.0625 * 0.006,
    }
    size = {"west-general": 20, "east-cpu": 12, "north-gpu": 8}
    expected = {cluster: pytest.approx(size[cluster] * per_pod[cluster]) for cluster in size}
    assert {a["cluster"]: a["price_per_hour"] for a in record["attempts"]} == expected
    assert all(a["egress_gb"] == 0.0 and a["cost"] > 0 for a in record["attempts"])
    dealt = record["decisions"][0]["extra"]["slices"]
    assert {c: (s["indices"], s["parallelism"], s["per_hour"]) for c, s in dealt.items()} == {
        cluster: (indices, size[cluster], expected[cluster]) for cluster, (indices, _) in slices.items()
    }
    ran = _runs_by_index(pods_ran(sim_federation), dag_id, jobs)
    assert sorted(ran) == list(range(40))
    assert all([run["outcome"] for run in runs] == ["succeeded"] for runs in ran.values()), ran
    assert left_behind(sim_federation, dag_id) == []  # every slice's Job went with its pods


def test_a_sovereign_divided_job_never_places_a_slice_outside_its_regions(
    sim_federation: SimFederation,
    federation: Path,
    room_50_30_20: None,
    background: Callable[[Callable[[], None]], None],
    pods_ran: Callable[[Any], dict[str, list[dict[str, Any]]]],
) -> None:
    """user-events may be read in cn-east-1 and cn-north-1 only: west-general (eu-west-1), with the most
    room, gets no slice; the 20 indices beyond east's and north's room wait and are dealt there as room
    frees."""
    dag_id = "divided_sovereign"
    with watching_slices(sim_federation, dag_id, background) as jobs:
        state, record = run(dag_id)

    assert state == "success" and record is not None
    assert {a["cluster"] for a in record["attempts"]} == {"east-cpu", "north-gpu"}
    assert all(a["outcome"] == "succeeded" for a in record["attempts"])
    assert all(cluster != "west-general" for cluster, _ in jobs)
    division = record["decisions"][0]["extra"]["division"]
    assert division["west-general"].startswith("excluded: Sovereignty"), division
    # user-events (500 GB) lives in east-cpu: a slice in north-gpu moves its share of it, billed at
    # east-cpu's egress price (0.05 a GB); a slice in east-cpu moves nothing.
    from airflow_provider_fedsched.federation.division import parse_ranges

    for attempt in record["attempts"]:
        share = len(parse_ranges(attempt["indices"], "indices")) / 40
        moved = 500 * share if attempt["cluster"] == "north-gpu" else 0.0
        assert (attempt["egress_gb"], attempt["egress_cost"]) == pytest.approx((moved, moved * 0.05))
        assert attempt["price_per_hour"] > 0
    dealt = [cluster for d in record["decisions"] for cluster in d.get("extra", {}).get("slices", {})]
    assert dealt and set(dealt) <= {"east-cpu", "north-gpu"}
    journals = pods_ran(sim_federation)
    assert not [e for e in journals["west-general"] if e["labels"].get("dag_id") == dag_id]
    ran = _runs_by_index(journals, dag_id, jobs)
    assert sorted(ran) == list(range(40))
    assert all([run["outcome"] for run in runs] == ["succeeded"] for runs in ran.values()), ran
    assert left_behind(sim_federation, dag_id) == []


def _runs_by_index(
    journals: dict[str, list[dict[str, Any]]], dag_id: str, jobs: dict[tuple[str, str], str]
) -> dict[int, list[dict[str, Any]]]:
    """Every pod of the DAG that started, by global index, judged from the members' own records
    (``pods_ran``: the simulator's execution journal, the test bed's audit logs): the pod's Job and
    JOB_COMPLETION_INDEX (the labels the Job controller sets) mapped through that Job's FEDSCHED_INDICES."""
    from airflow_provider_fedsched.operators.divided import global_index

    ran: dict[int, list[dict[str, Any]]] = {}
    for cluster, entries in journals.items():
        for entry in entries:
            labels = entry["labels"]
            if labels.get("dag_id") != dag_id or entry["started_at"] is None:
                continue
            job = labels["batch.kubernetes.io/job-name"]
            index = global_index(jobs[(cluster, job)], labels["batch.kubernetes.io/job-completion-index"])
            ran.setdefault(index, []).append({**entry, "cluster": cluster})
    return ran


@contextlib.contextmanager
def watching_slices(
    fed: SimFederation, dag_id: str, background: Callable[[Callable[[], None]], None]
) -> Iterator[dict[tuple[str, str], str]]:
    """(cluster, Job name) -> the indices of each slice's Job of ``dag_id`` seen while the block runs."""
    import threading

    jobs: dict[tuple[str, str], str] = {}
    stop = threading.Event()
    for cluster, handle in fed.handles.items():  # one reader a member: a hanging one holds up no other
        background(lambda c=cluster, h=handle: _slice_jobs(c, h, dag_id, jobs, stop))
    try:
        yield jobs
    finally:
        stop.set()


def _divided_pods(fed: SimFederation, dag_id: str, phase: str) -> int:
    return sum(
        1
        for handle in fed.handles.values()
        for pod in handle.pods()
        if (pod["metadata"].get("labels") or {}).get("dag_id") == dag_id
        and pod["status"].get("phase") == phase
    )


def test_ending_a_divided_task_deletes_every_slice_with_its_pods_and_starts_nothing_else(
    sim_federation: SimFederation,
    federation: Path,
    room_50_30_20: None,
    job_creates: Callable[[], int],
    background: Callable[[Callable[[], None]], None],
) -> None:
    dag_id = "divided_killed_while_running"
    previous = signal.getsignal(signal.SIGTERM)
    ended: list[bool] = []

    def end_the_task_once_every_slice_runs() -> None:
        wait_for(lambda: _divided_pods(sim_federation, dag_id, "Running") == 40, timeout=240)
        # SIGTERM, as the supervisor sends when a user marks the task failed: its handler calls on_kill.
        wait_for(lambda: getattr(signal.getsignal(signal.SIGTERM), "__name__", "") == "_on_term", timeout=30)
        ended.append(True)
        os.kill(os.getpid(), signal.SIGTERM)

    background(end_the_task_once_every_slice_runs)
    try:
        state, record = run(dag_id)
    finally:
        signal.signal(signal.SIGTERM, previous)

    assert ended, "the slices never all ran"
    assert state == "failed" and record is not None
    assert sorted(path(record)) == [
        ("east-cpu", "cancelled"),
        ("north-gpu", "cancelled"),
        ("west-general", "cancelled"),
    ]
    assert {a["reason"] for a in record["attempts"]} == {
        "the task was ended while its slice ran: job deleted"
    }
    assert job_creates() == 3  # nothing started after on_kill
    assert left_behind(sim_federation, dag_id) == []


@pytest.fixture
def east_refuses(sim_federation: SimFederation, federation: Path) -> Iterator[None]:
    """The federation's snapshot shows east-cpu with room for 12 pods (4 on each of its 3 nodes); then two
    of its nodes go NotReady: its scheduler places 4 of the 12 pods of its slice, the rest stay
    Unschedulable past the grace."""
    spec = yaml.safe_load(federation.read_text())
    spec["policy"]["snapshot_ttl_seconds"] = 3600  # the decisions use the snapshot of the room, throughout
    federation.write_text(yaml.safe_dump(spec))
    fillers = _leave_room(sim_federation)

    def room_seen() -> bool:
        seen = FederationHook().collect()["east-cpu"]
        return seen.reachable and sum(node.free.get("cpu", 0) for node in seen.nodes) == 12000

    wait_for(room_seen, timeout=120, interval=1.0)
    east = sim_federation["east-cpu"]
    down = [node["metadata"]["name"] for node in east.nodes()][1:]
    for name in down:
        east.faults.node_not_ready(name)
    yield
    for name in down:
        east.faults.node_ready(name)
    for cluster, name in fillers:
        sim_federation[cluster].delete_pod("default", name, grace=0)


def test_a_refused_divided_slice_has_its_job_deleted_and_only_its_unfinished_indices_run_elsewhere(
    sim_federation: SimFederation,
    federation: Path,
    east_refuses: None,
    background: Callable[[Callable[[], None]], None],
    pods_ran: Callable[[Any], dict[str, list[dict[str, Any]]]],
) -> None:
    dag_id = "divided_member_refuses"
    with watching_slices(sim_federation, dag_id, background) as jobs:
        state, record = run(dag_id)

    assert state == "success" and record is not None
    first = [(a["cluster"], a["indices"], a["outcome"]) for a in record["attempts"][:3]]
    assert first == [
        ("west-general", "0-19", "succeeded"),
        ("east-cpu", "20-31", "insufficient"),
        ("north-gpu", "32-39", "succeeded"),
    ]
    assert "Insufficient cpu" in record["attempts"][1]["reason"]
    # East's indices (none had succeeded there) were dealt again, to members with room once it freed.
    later = record["attempts"][3:]
    assert later and all(a["outcome"] == "succeeded" and a["cluster"] != "east-cpu" for a in later)
    from airflow_provider_fedsched.federation.division import parse_ranges

    moved = sorted(i for a in later for i in parse_ranges(a["indices"], "indices"))
    assert moved == list(range(20, 32))
    # Every index succeeded exactly once; an index started twice (killed in east, run again) never ran
    # in two places at once.
    ran = _runs_by_index(pods_ran(sim_federation), dag_id, jobs)
    assert sorted(ran) == list(range(40))
    for index, runs in ran.items():
        assert [run["outcome"] for run in runs].count("succeeded") == 1, (index, runs)
        spans = sorted((run["started_at"], run["ended_at"]) for run in runs)
        assert all(before[1] is not None and before[1] <= after[0] for before, after in pairwise(spans))
    assert all(run["cluster"] == "east-cpu" for i in range(20, 32) for run in ran[i][:-1])
    assert left_behind(sim_federation, dag_id) == []


def test_a_divided_slice_whose_member_is_silent_within_the_grace_runs_on_each_index_once(
    sim_federation: SimFederation,
    federation: Path,
    room_50_30_20: None,
    job_creates: Callable[[], int],
    background: Callable[[Callable[[], None]], None],
    pods_ran: Callable[[Any], dict[str, list[dict[str, Any]]]],
) -> None:
    dag_id = "divided_outage_short"
    with (
        watching_slices(sim_federation, dag_id, background) as jobs,
        Outage(sim_federation, dag_id, "east-cpu", "Running", seconds=2) as outage,
    ):
        state, record = run(dag_id)

    assert outage.down_at is not None  # east-cpu was silent while its slice ran
    assert state == "success" and record is not None
    assert sorted(path(record)) == [
        ("east-cpu", "succeeded"),
        ("north-gpu", "succeeded"),
        ("west-general", "succeeded"),
    ]
    assert job_creates() == 3  # its indices waited for it: never started elsewhere
    ran = _runs_by_index(pods_ran(sim_federation), dag_id, jobs)
    assert sorted(ran) == list(range(40))
    assert all([run["outcome"] for run in runs] == ["succeeded"] for runs in ran.values()), ran
    assert left_behind(sim_federation, dag_id) == []


def test_a_divided_slice_whose_member_is_silent_past_the_grace_is_fenced_and_fails_the_try(
    sim_federation: SimFederation, federation: Path, room_50_30_20: None, job_creates: Callable[[], int]
) -> None:
    dag_id = "divided_outage_lost"
    with Outage(sim_federation, dag_id, "east-cpu", "Running"):
        state, record = run(dag_id)
        assert state == "failed" and record is not None
        outcomes = {a["cluster"]: a["outcome"] for a in record["attempts"]}
        assert outcomes == {"east-cpu": "lost", "west-general": "cancelled", "north-gpu": "cancelled"}
        assert job_creates() == 3  # east's indices were not started elsewhere
        east = next(a for a in record["attempts"] if a["cluster"] == "east-cpu")
        assert "may still run there, so they are not started elsewhere" in record["reason"]
        # Written down while its member is silent; the other slices' Jobs went with the try.
        assert FederationHook().orphans("east-cpu", kind="job") == [(east["namespace"], east["pod"])]
        assert {item.split("/")[0] for item in left_behind(sim_federation, dag_id)} == {"east-cpu"}

    def swept() -> bool:
        # The first snapshot that finds east-cpu answering about the Job deletes it with its pods; on a
        # loaded machine the Job's read can time out after the snapshot's, and the sweep then keeps it
        # (a Job the cluster did not answer about may hold a result).
        sweep_orphans()
        return FederationHook().orphans("east-cpu", kind="job") == []

    wait_for(swept, timeout=60, interval=1.0)
    assert left_behind(sim_federation, dag_id) == []


def test_a_divided_slice_whose_pods_a_quota_refuses_runs_elsewhere_each_index_once(
    sim_federation: SimFederation,
    federation: Path,
    room_50_30_20: None,
    background: Callable[[Callable[[], None]], None],
    pods_ran: Callable[[Any], dict[str, list[dict[str, Any]]]],
) -> None:
    """After the federation's snapshot, east-cpu's namespace gets a quota below one pod: its slice's Job is
    created, but none of its pods: past the grace the slice is refused, and its indices run elsewhere."""
    dag_id = "divided_quota_refuses"
    FederationHook().collect()
    east = sim_federation["east-cpu"]
    east.set_quota("default", {"requests.cpu": "500m"}, name="tight")
    with watching_slices(sim_federation, dag_id, background) as jobs:
        try:
            state, record = run(dag_id)
        finally:
            east.set_quota("default", {"requests.cpu": "1000"}, name="tight")

    assert state == "success" and record is not None
    refused = next(a for a in record["attempts"] if a["cluster"] == "east-cpu")
    assert (refused["indices"], refused["outcome"]) == ("20-31", "insufficient")
    assert refused["reason"].startswith(f"no pod of job {refused['pod']} was created within 3s")
    from airflow_provider_fedsched.federation.division import parse_ranges

    others = [a for a in record["attempts"] if a is not refused]
    assert all(a["outcome"] == "succeeded" and a["cluster"] != "east-cpu" for a in others)
    assert sorted(i for a in others for i in parse_ranges(a["indices"], "indices")) == list(range(40))
    ran = _runs_by_index(pods_ran(sim_federation), dag_id, jobs)
    assert sorted(ran) == list(range(40))
    assert all([run["outcome"] for run in runs] == ["succeeded"] for runs in ran.values()), ran
    assert left_behind(sim_federation, dag_id) == []


def test_a_divided_retry_never_runs_again_an_index_an_earlier_try_saw_succeed(
    sim_federation: SimFederation,
    federation: Path,
    room_50_30_20: None,
    job_creates: Callable[[], int],
    background: Callable[[Callable[[], None]], None],
    pods_ran: Callable[[Any], dict[str, list[dict[str, Any]]]],
) -> None:
    """Try 1 is lost to east-cpu's outage past the grace (its slice fenced); try 2 starts as east answers
    again: the indices try 1 saw succeed (its record) and those east's Job shows succeeded are never run
    again; only the others are."""
    from airflow_provider_fedsched.federation.division import parse_ranges
    from tests.operators import outage_trigger

    dag_id = "divided_retry_keeps_done"
    east = sim_federation["east-cpu"]
    tries: list[int] = []
    outage = Outage(sim_federation, dag_id, "east-cpu", "Running")

    def before_looking(try_number: int) -> None:
        tries.append(try_number)
        if try_number == 2:
            # A real API server may take seconds to end (its in-flight requests drain): start it again
            # only once it has.
            wait_for(lambda: outage.down_at is not None, timeout=60)
            east.faults.up()

    outage_trigger.BEFORE_LOOKING_FOR_EARLIER = before_looking
    with watching_slices(sim_federation, dag_id, background) as jobs:
        try:
            with outage:
                dag_run = airflow_harness.run_dag(DAG_FILE, dag_id)
        finally:
            outage_trigger.BEFORE_LOOKING_FOR_EARLIER = None
    assert tries == [1, 2]
    state = airflow_harness.task_states(dag_run)["work"]
    raw = xcom(dag_run, "fedsched_placement")
    record = json.loads(raw) if isinstance(raw, str) else raw

    assert state == "success" and record is not None and record["try_number"] == 2
    rerun = [i for a in record["attempts"] for i in parse_ranges(a["indices"], "indices")]
    assert job_creates() == 3 + len(record["attempts"])
    ran = _runs_by_index(pods_ran(sim_federation), dag_id, jobs)
    assert sorted(ran) == list(range(40))
    for index, runs in ran.items():
        assert [run["outcome"] for run in runs].count("succeeded") == 1, (index, runs)
        spans = sorted((run["started_at"], run["ended_at"]) for run in runs)
        assert all(before[1] is not None and before[1] <= after[0] for before, after in pairwise(spans))
    # East's slice was taken from its Job: an index that succeeded there is never run again. (The
    # simulator's east ran its whole slice meanwhile; on the test bed kwok, which could not write to the
    # stopped API server, may not have ended every pod when try 2 looks: those were deleted, then rerun.)
    done_in_east = {
        i
        for i in range(20, 32)
        for run in ran[i]
        if run["cluster"] == "east-cpu" and run["outcome"] == "succeeded"
    }
    assert not set(rerun) & done_in_east, rerun
    assert set(rerun) & set(range(20, 32)) == set(range(20, 32)) - done_in_east
    assert FederationHook().orphans("east-cpu", kind="job") == []
    assert left_behind(sim_federation, dag_id) == []
