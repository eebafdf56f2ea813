"""FederatedKubernetesOperator end to end: real Airflow (dag.test), real clients, the simulated federation."""

from __future__ import annotations

import contextlib
import json
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from airflow_provider_fedsched.hooks.federation import FederationHook
from airflow_provider_fedsched.sim import SimFederation, wait_for
from tests import airflow_harness

DAG_FILE = Path(__file__).parent / "dags" / "federated_dags.py"
pytestmark = [pytest.mark.airflow]


def xcom(dag_run: Any, key: str, task_id: str = "work") -> Any:
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        row = (
            session.query(XComModel)
            .filter_by(dag_id=dag_run.dag_id, run_id=dag_run.run_id, task_id=task_id, key=key)
            .one_or_none()
        )
        return None if row is None else XComModel.deserialize_value(row)


def run(dag_id: str) -> tuple[str, dict[str, Any] | None, Any]:
    dag_run = airflow_harness.run_dag(DAG_FILE, dag_id)
    state = airflow_harness.task_states(dag_run)["work"]
    record = xcom(dag_run, "fedsched_placement")
    return state, (json.loads(record) if isinstance(record, str) else record), dag_run


def pods_of(fed: SimFederation, dag_id: str) -> list[str]:
    return [
        f"{name}/{pod['metadata']['name']}"
        for name, handle in fed.handles.items()
        for pod in handle.pods()
        if (pod["metadata"].get("labels") or {}).get("dag_id") == dag_id
    ]


def path(record: dict[str, Any]) -> list[tuple[str, str]]:
    return [(a["cluster"], a["outcome"]) for a in record["attempts"]]


def take_snapshot() -> None:
    """What the federation knows before the incident: cached in shared state (Airflow Variables)."""
    FederationHook().collect()


@contextlib.contextmanager
def etl_quota_taken_after_the_snapshot(fed: SimFederation) -> Iterator[None]:
    """The cheapest cluster's etl quota is used up right after the federation's snapshot."""
    take_snapshot()
    fed["east-cpu"].set_quota("etl", {"requests.cpu": "1"}, name="tight")
    try:
        yield
    finally:
        fed["east-cpu"].set_quota("etl", {"requests.cpu": "1000"}, name="tight")


@pytest.fixture
def background() -> Iterator[Callable[[Callable[[], None]], None]]:
    threads: list[threading.Thread] = []

    def start(target: Callable[[], None]) -> None:
        thread = threading.Thread(target=target, daemon=True)
        threads.append(thread)
        thread.start()

    yield start
    for thread in threads:
        thread.join(timeout=30)


def test_gpu_task_lands_on_gpu_pool_with_logs_xcom_and_labels(
    sim_federation: SimFederation, federation: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    state, record, dag_run = run("fed_gpu_xcom")

    assert state == "success"
    assert record is not None and record["outcome"] == "succeeded"
    assert path(record) == [("north-gpu", "succeeded")]
    assert xcom(dag_run, "return_value") == {"accuracy": 0.93}
    out = capfd.readouterr().out
    assert "[base] epoch 2" in out
    assert "Federation decision" in out and "north-gpu" in out
    # No credential of any member reaches the task log or the XCom record.
    tokens = [handle.token for handle in sim_federation.handles.values()]
    assert all(token not in out and token not in json.dumps(record) for token in tokens)
    assert pods_of(sim_federation, "fed_gpu_xcom") == []


def test_sovereign_data_stays_in_its_region_although_another_is_cheaper(
    sim_federation: SimFederation, federation: Path
) -> None:
    state, record, _ = run("fed_sovereign")

    assert state == "success" and record is not None
    assert path(record) == [("west-general", "succeeded")]
    rejected = {r["cluster"]: r["plugin"] for r in record["decisions"][0]["rejected"]}
    assert rejected == {"east-cpu": "Sovereignty", "north-gpu": "Sovereignty"}


def test_quota_exhausted_since_the_snapshot_fails_over_in_the_same_try(
    sim_federation: SimFederation, federation: Path
) -> None:
    with etl_quota_taken_after_the_snapshot(sim_federation):
        state, record, dag_run = run("fed_quota_failover")

    assert state == "success" and record is not None
    assert path(record) == [("east-cpu", "insufficient"), ("north-gpu", "succeeded")]
    assert "exceeded quota: tight" in record["attempts"][0]["reason"]
    assert dag_run.get_task_instances()[0].try_number == 1  # no Airflow retry was spent
    # The etl namespace's quota cools east-cpu down for etl pods only, not for the cluster's other tenants.
    hook = FederationHook()
    cooldown = hook.cooldown("east-cpu", namespace="etl")
    assert cooldown is not None and "quota" in cooldown[1]
    assert hook.cooldown("east-cpu") is None
    assert pods_of(sim_federation, "fed_quota_failover") == []


def test_a_subclass_overriding_the_public_steps_sees_each_launch_and_each_cluster_left(
    sim_federation: SimFederation, federation: Path
) -> None:
    """The placement loop calls the overridable steps (``launch_attempt``, ``leave_cluster``) of a user's
    subclass, which keeps the contract by calling ``super()``: the quota failover runs as without it."""
    with etl_quota_taken_after_the_snapshot(sim_federation):
        state, record, dag_run = run("fed_overridden_steps")

    assert state == "success" and record is not None
    assert path(record) == [("east-cpu", "insufficient"), ("north-gpu", "succeeded")]
    assert xcom(dag_run, "steps") == ["launch east-cpu", "leave east-cpu: insufficient", "launch north-gpu"]
    assert pods_of(sim_federation, "fed_overridden_steps") == []


def test_unschedulable_pod_is_deleted_before_moving_on(
    sim_federation: SimFederation, federation: Path
) -> None:
    take_snapshot()
    east = sim_federation["east-cpu"]
    fillers = fill_nodes(east, leave_cpu=1, duration="3600")
    try:
        state, record, _ = run("fed_unschedulable_failover")
    finally:
        for name in fillers:
            east.delete_pod("default", name, grace=0)

    assert state == "success" and record is not None
    assert path(record) == [("east-cpu", "insufficient"), ("north-gpu", "succeeded")]
    assert "Insufficient cpu" in record["attempts"][0]["reason"]
    assert pods_of(sim_federation, "fed_unschedulable_failover") == []


def test_evicted_task_resumes_from_checkpoint_on_another_cluster(
    sim_federation: SimFederation,
    federation: Path,
    background: Callable[[Callable[[], None]], None],
    capfd: pytest.CaptureFixture[str],
) -> None:
    def evict_first_pod() -> None:
        def running_first_attempt() -> tuple[str, dict[str, Any]] | None:
            for name, handle in sim_federation.handles.items():
                for pod in handle.pods():
                    labels = pod["metadata"].get("labels") or {}
                    if (
                        labels.get("dag_id") == "fed_evicted_resumes"
                        and labels.get("fedsched.io/cluster-attempt") == "1"
                        and labels.get("fedsched.io/preemptible") == "true"  # a reclaim may move it
                        and pod["status"].get("phase") == "Running"
                    ):
                        return name, pod
            return None

        cluster, pod = wait_for(running_first_attempt, timeout=60)
        sim_federation[cluster].faults.evict_pod(pod["metadata"]["namespace"], pod["metadata"]["name"])

    background(evict_first_pod)
    state, record, _ = run("fed_evicted_resumes")

    assert state == "success" and record is not None
    (first, first_outcome), (second, second_outcome) = path(record)
    assert (first_outcome, second_outcome) == ("evicted", "succeeded") and first != second
    assert record["attempts"][1]["resumed_from_checkpoint"] is True
    assert "attempt 2 resume=true" in capfd.readouterr().out
    assert pods_of(sim_federation, "fed_evicted_resumes") == []


def test_task_failure_is_not_retried_elsewhere(sim_federation: SimFederation, federation: Path) -> None:
    state, record, _ = run("fed_task_failure")

    assert state == "failed" and record is not None
    assert [outcome for _, outcome in path(record)] == ["failed"]
    assert pods_of(sim_federation, "fed_task_failure") == []


@pytest.mark.parametrize("dag_id", ["fed_wait_timeout", "fed_wait_timeout_deferrable"])
def test_waits_for_a_compliant_cluster_then_fails_with_the_reasons(
    sim_federation: SimFederation, federation: Path, dag_id: str
) -> None:
    """The only cluster the data may go to does not answer: the task waits, then fails saying why; the
    wait survives deferrals, and the record's waited time is the wall clock's."""
    sim_federation["west-general"].faults.down()
    try:
        started = time.monotonic()
        state, record, _ = run(dag_id)
        wall = time.monotonic() - started
    finally:
        sim_federation["west-general"].faults.up()

    assert state == "failed" and record is not None
    assert record["attempts"] == []  # never placed outside eu-west-1
    assert "no cluster could take the task within 3s" in record["reason"]
    assert re.search(r"connection refused at https?://127\.0\.0\.1", json.dumps(record["decisions"]))
    assert 3 <= record["waited_seconds"] <= wall
    waited = datetime.fromisoformat(record["ended_at"]) - datetime.fromisoformat(record["started_at"])
    assert record["waited_seconds"] <= waited.total_seconds() + 0.01


@pytest.mark.parametrize("dag_id", ["fed_wait_for_room", "fed_wait_for_room_deferrable"])
def test_a_waiting_task_decides_again_as_soon_as_a_placement_on_its_cluster_ends(
    sim_federation: SimFederation,
    federation: Path,
    dag_id: str,
    background: Callable[[Callable[[], None]], None],
    capfd: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A two-hour task whose only compliant cluster is taken by the placements of other tries: it is
    placed as soon as they end, not after a poll tied to its duration (120 s, the old wait), sync or
    deferred; its log says what it waits for, for how long at most, and what woke it."""
    from airflow_provider_fedsched.federation.request import TaskRequest
    from airflow_provider_fedsched.hooks.federation import poll_interval

    monkeypatch.setenv("AIRFLOW__FEDSCHED__WAIT_CHECK_SECONDS", "0.2")
    hook = FederationHook()
    take_snapshot()
    blockers = [f"blocker-{node}" for node in range(4)]  # 15 of the 16 cpu of each of its 4 nodes
    for placement in blockers:
        assert hook.reserve("west-general", TaskRequest(resources={"cpu": 15000}), placement)

    def waiting() -> bool:
        from airflow.models.xcom import XComModel
        from airflow.utils.session import create_session

        with create_session() as session:
            row = session.query(XComModel).filter_by(dag_id=dag_id, key="fedsched_placement").one_or_none()
            value = None if row is None else XComModel.deserialize_value(row)
        record = json.loads(value) if isinstance(value, str) else value
        return bool(record) and record["outcome"] == "waiting"

    def other_tries_end() -> None:
        # The other tries run in other worker processes: their placements end there. A thread of this
        # process would share the running task's Task SDK channel, which dag.test()'s in-process
        # supervisor takes out of the module while it serves a request: the task's own call in that
        # moment failed ("name 'SUPERVISOR_COMMS' is not defined", a CI run under load).
        wait_for(waiting, timeout=120)
        script = (
            "import sys\n"
            "from airflow_provider_fedsched.hooks.federation import FederationHook\n"
            "hook = FederationHook()\n"
            "for placement in sys.argv[1:]:\n"
            "    hook.release('west-general', placement)\n"
        )
        worker = subprocess.run(
            [sys.executable, "-c", script, *blockers], capture_output=True, text=True, timeout=120
        )
        assert worker.returncode == 0, worker.stderr[-2000:]

    background(other_tries_end)
    state, record, _ = run(dag_id)

    assert state == "success" and record is not None
    assert path(record) == [("west-general", "succeeded")]
    # Woken by each placement that ends (the other workers release theirs one by one): it may wait again
    # until the last one has, and is then placed, never after a poll tied to its duration.
    outcomes = [d["outcome"] for d in record["decisions"]]
    assert outcomes[0] == "wait" and outcomes[-1] == "placed" and set(outcomes[1:-1]) <= {"wait"}, outcomes
    assert len(outcomes) <= 1 + len(blockers)
    assert record["waited_seconds"] < poll_interval(7200) == 120.0
    out = capfd.readouterr().out
    assert (
        "Waiting up to 300s more (wait_timeout 300s) for a compliant cluster, deciding again as soon" in out
    )
    assert "Deciding again: a placement on west-general ended: the decision is now 'placed'" in out


def test_a_cooldown_never_holds_back_a_task_whose_only_compliant_cluster_has_room(
    sim_federation: SimFederation, federation: Path
) -> None:
    hook = FederationHook()
    hook.cool_down("west-general", "insufficient: an earlier pod could not be scheduled")
    try:
        state, record, _ = run("fed_wait_timeout")
    finally:
        hook.clear_cooldown("west-general")

    assert state == "success" and record is not None
    assert path(record) == [("west-general", "succeeded")]
    assert "a cooldown is not a reason to wait" in record["attempts"][0]["decision"]


@pytest.mark.parametrize(
    ("dag_id", "message"),
    [
        ("fed_bad_dataset", "datasets: unknown dataset(s) ['no-such-dataset']"),
        ("fed_bad_subset", "clusters: the cluster subset is empty"),
        ("fed_bad_cluster", "clusters: unknown cluster(s) ['moon-base']"),
        ("fed_bad_conflict", "argument(s) kubernetes_conn_id conflict with federation placement"),
        ("fed_bad_impossible", "no member cluster can ever run this task"),
    ],
)
def test_bad_input_fails_at_the_start_naming_the_argument(
    sim_federation: SimFederation,
    federation: Path,
    capfd: pytest.CaptureFixture[str],
    dag_id: str,
    message: str,
) -> None:
    state, _, _ = run(dag_id)

    assert state == "failed"
    assert message in capfd.readouterr().out
    assert pods_of(sim_federation, dag_id) == []


def test_deferrable_mode_runs_in_the_chosen_cluster_and_returns_xcom(
    sim_federation: SimFederation, federation: Path
) -> None:
    state, record, dag_run = run("fed_deferrable_xcom")

    assert state == "success" and record is not None
    assert path(record) == [("east-cpu", "succeeded")]
    assert xcom(dag_run, "return_value") == {"rows": 7}
    assert pods_of(sim_federation, "fed_deferrable_xcom") == []


def test_deferrable_quota_failover(sim_federation: SimFederation, federation: Path) -> None:
    with etl_quota_taken_after_the_snapshot(sim_federation):
        state, record, _ = run("fed_deferrable_quota")

    assert state == "success" and record is not None
    assert path(record) == [("east-cpu", "insufficient"), ("north-gpu", "succeeded")]
    assert pods_of(sim_federation, "fed_deferrable_quota") == []


def test_deferrable_unschedulable_failover_through_the_pod_trigger(
    sim_federation: SimFederation, federation: Path
) -> None:
    take_snapshot()
    sim_federation["east-cpu"].scheduler.pause()
    try:
        state, record, _ = run("fed_deferrable_unschedulable")
    finally:
        sim_federation["east-cpu"].scheduler.resume()

    assert state == "success" and record is not None
    assert path(record) == [("east-cpu", "insufficient"), ("north-gpu", "succeeded")]
    assert pods_of(sim_federation, "fed_deferrable_unschedulable") == []


def pod_creates(fed: SimFederation) -> int:
    return sum(
        handle.request_count("POST", "/api/v1/namespaces/default/pods") for handle in fed.handles.values()
    )


@pytest.mark.parametrize("retry", [False, True], ids=["same-try", "next-try"])
def test_killed_worker_then_restarted_try_reattaches_to_the_same_pod(
    sim_federation: SimFederation, federation: Path, retry: bool
) -> None:
    """A worker dies mid-task; the restarted try (or, after a retry, the next try) finds the pod in its
    cluster, whatever labels an orphaned earlier process left on it: one pod is ever created."""
    airflow_harness.load_dag(DAG_FILE, "fed_reattach")
    airflow_harness.serialize_dags("fed_reattach")
    now = datetime.now(UTC)
    run_id = f"manual__reattach-{retry}-{now.timestamp():.0f}"
    airflow_harness.create_dag_run("fed_reattach", run_id, now)
    command = [
        str(Path(sys.executable).with_name("airflow")),
        "tasks",
        "test",
        "fed_reattach",
        "work",
        run_id,
    ]
    creates_before = pod_creates(sim_federation)
    first_try = try_number_of("fed_reattach", run_id)
    log = (federation.parent / "first-worker.log").open("w")
    worker = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    try:

        def running_pod() -> tuple[str, dict[str, Any]] | None:
            for name, handle in sim_federation.handles.items():
                for pod in handle.pods():
                    labels = pod["metadata"].get("labels") or {}
                    if (
                        labels.get("dag_id") == "fed_reattach"
                        and labels.get("run_id", "").startswith(f"manual__reattach-{retry}")
                        and pod["status"].get("phase") == "Running"
                    ):
                        return name, pod
            return None

        # A fresh `airflow tasks test` process imports Airflow and the provider first: slow on a busy machine.
        cluster, pod = wait_for(running_pod, timeout=240, message=str(federation.parent / "first-worker.log"))
    finally:
        worker.send_signal(signal.SIGKILL)
        worker.wait(timeout=30)
    first_pod = f"{cluster}/{pod['metadata']['name']}"
    if retry:
        # What an orphaned task process of the dead worker did: label the pod as processed.
        sim_federation[cluster].label_pod(
            pod["metadata"]["namespace"], pod["metadata"]["name"], {"already_checked": "True"}
        )
        bump_try_number("fed_reattach", run_id)

    restarted = subprocess.run(command, capture_output=True, text=True, timeout=300)

    assert restarted.returncode == 0, restarted.stdout[-3000:]
    assert ("Adopting pod" if retry else "Reattached to pod") in restarted.stdout
    assert pod_creates(sim_federation) - creates_before == 1
    record = placement_of_run("fed_reattach", run_id)
    assert record["outcome"] == "succeeded" and record["try_number"] == first_try + retry
    assert [f"{a['cluster']}/{a['pod']}" for a in record["attempts"]] == [first_pod]
    assert record["attempts"][0]["adopted"] is retry
    assert pods_of(sim_federation, "fed_reattach") == []


@pytest.mark.parametrize("pod_left", [True, False], ids=["pod-left", "pod-gone"])
def test_a_try_killed_after_its_pod_succeeded_is_never_run_again(
    sim_federation: SimFederation, federation: Path, pod_left: bool
) -> None:
    """Airflow kills a try (a starved worker's heartbeat) after its pod Succeeded, while the operator
    deletes the pod. The success is written down before the delete, so the next try finds either the
    pod (adopted, its logs read) or the record of its success (not run again): one pod, ever."""
    dag_id = "fed_killed_after_success"
    run_id, command = task_test_run(dag_id, f"killed-{pod_left}")
    east = sim_federation["east-cpu"]
    creates_before = pod_creates(sim_federation)
    deletes = "/api/v1/namespaces/default/pods/"
    deletes_before = east.request_count("DELETE", deletes + "*")
    east.faults.fail(status=503, times=100000, route=deletes, method="DELETE")  # the delete hangs on
    log_path = federation.parent / "killed-worker.log"
    worker = subprocess.Popen(command, stdout=log_path.open("w"), stderr=subprocess.STDOUT)
    try:
        wait_for(
            lambda: east.request_count("DELETE", deletes + "*") > deletes_before,
            timeout=240,
            message=str(log_path),
        )
    finally:
        worker.send_signal(signal.SIGKILL)
        worker.wait(timeout=30)
        east.faults.clear()
    (pod,) = [p for p in east.pods() if (p["metadata"].get("labels") or {}).get("dag_id") == dag_id]
    assert pod["status"]["phase"] == "Succeeded"
    if not pod_left:  # the kill came just after the delete landed
        east.delete_pod(pod["metadata"]["namespace"], pod["metadata"]["name"], grace=0)
    bump_try_number(dag_id, run_id)

    retried = subprocess.run(command, capture_output=True, text=True, timeout=300)

    assert retried.returncode == 0, retried.stdout[-3000:]
    assert pod_creates(sim_federation) - creates_before == 1
    record = placement_of_run(dag_id, run_id)
    assert record["outcome"] == "succeeded", record
    (attempt,) = record["attempts"]
    assert attempt["pod"] == pod["metadata"]["name"] and attempt["adopted"] is True
    if pod_left:
        assert "Adopting pod" in retried.stdout
    else:
        assert "its work is not run again" in record["reason"]
    assert pods_of(sim_federation, dag_id) == []


def test_a_retry_that_found_a_dead_try_s_cluster_silent_adopts_its_result_once_it_answers(
    sim_federation: SimFederation, federation: Path
) -> None:
    """The full soak's ``sync_resumable[26]``: a preemptible try's worker is killed while its pod runs;
    the pod Succeeds; its cluster goes silent before the retry looks for it. The retry must not start the
    work again there (or leave the finished pod behind) once the cluster answers: it waits for that
    cluster (the dead try's pod may have run to the end) and adopts the pod. One pod, ever; none left."""
    dag_id = "fed_killed_preemptible"
    run_id, command = task_test_run(dag_id, "killed-preemptible")
    east = sim_federation["east-cpu"]
    creates_before = pod_creates(sim_federation)
    first_try = try_number_of(dag_id, run_id)

    first = killed_while_its_pod_runs(sim_federation, dag_id, command, federation.parent / "first-worker.log")
    east.faults.down()
    bump_try_number(dag_id, run_id)
    retry_log = federation.parent / "retry.log"
    retry = subprocess.Popen(command, stdout=retry_log.open("w"), stderr=subprocess.STDOUT)
    try:
        wait_for(
            lambda: "may have run to the end in east-cpu" in retry_log.read_text(),
            timeout=240,
            message=str(retry_log),
        )
        east.faults.up()  # east-cpu answers while the retry waits for it
        assert retry.wait(timeout=300) == 0, retry_log.read_text()[-3000:]
    finally:
        east.faults.up()
        if retry.poll() is None:
            retry.kill()
            retry.wait(timeout=30)

    assert pod_creates(sim_federation) - creates_before == 1
    record = placement_of_run(dag_id, run_id)
    assert record["outcome"] == "succeeded" and record["try_number"] == first_try + 1, record
    assert [a["pod"] for a in record["attempts"]] == [first["metadata"]["name"]], record
    assert record["unsearched"] == []
    assert pods_of(sim_federation, dag_id) == []
    assert FederationHook().orphans("east-cpu") == []


def test_a_preemptible_retry_waits_for_a_dead_try_s_silent_cluster_and_adopts_its_finished_pod(
    sim_federation: SimFederation, federation: Path
) -> None:
    """The full soak's ``sync_resumable[21]``: a preemptible try's supervisor is SIGKILLed while its pod
    runs on east-a; the pod Succeeds unwatched; east-a goes silent; the retry finds it silent and, with
    room on west, ran the work again there. A dead try's pod may have run to the end (nobody was watching
    it): the retry waits for its cluster within ``unreachable_grace``, preemptible or not, and adopts
    the finished pod. One pod, ever; none left."""
    dag_id = "fed_killed_preemptible_elsewhere"
    run_id, command = task_test_run(dag_id, "killed-elsewhere")
    east = sim_federation["east-cpu"]
    creates_before = pod_creates(sim_federation)
    first_try = try_number_of(dag_id, run_id)

    first = killed_while_its_pod_runs(sim_federation, dag_id, command, federation.parent / "first-worker.log")
    east.faults.down()
    bump_try_number(dag_id, run_id)
    retry_log = federation.parent / "retry.log"
    retry = subprocess.Popen(command, stdout=retry_log.open("w"), stderr=subprocess.STDOUT)
    try:
        # East-cpu answers again once the retry waits for it, or (as before the fix) once it started the
        # work on west-general instead.
        wait_for(
            lambda: (
                "may have run to the end in east-cpu" in retry_log.read_text()
                or pod_creates(sim_federation) - creates_before > 1
            ),
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

    assert pod_creates(sim_federation) - creates_before == 1, retry_log.read_text()[-3000:]
    record = placement_of_run(dag_id, run_id)
    assert record["outcome"] == "succeeded" and record["try_number"] == first_try + 1, record
    assert [(a["cluster"], a["pod"], a["adopted"]) for a in record["attempts"]] == [
        ("east-cpu", first["metadata"]["name"], True)
    ], record
    assert pods_of(sim_federation, dag_id) == []
    assert FederationHook().orphans("east-cpu") == []


def test_a_dead_try_s_pod_a_retry_gave_up_on_is_swept_when_its_cluster_answers_and_its_success_kept(
    sim_federation: SimFederation, federation: Path
) -> None:
    """The simulated LocalExecutor soak at acc8f6d (``sync_plain[31]``): a try's supervisor is SIGKILLed
    while its pod runs on east-a; the pod Succeeds unwatched; east-a goes silent past the retry's grace,
    and the retry fails (the work may still run there: it is not started elsewhere). Nobody wrote the dead
    try's pod down, so it stayed in east-a after the run. The retry that gives up now writes it down: the
    first snapshot of east-cpu that answers deletes it and keeps its success, which the next try takes."""
    dag_id = "fed_killed_plain_silent"
    run_id, command = task_test_run(dag_id, "killed-silent")
    east = sim_federation["east-cpu"]
    creates_before = pod_creates(sim_federation)

    first = killed_while_its_pod_runs(sim_federation, dag_id, command, federation.parent / "first-worker.log")
    east.faults.down()
    try:
        bump_try_number(dag_id, run_id)
        retry = subprocess.run(command, capture_output=True, text=True, timeout=300)
        said = retry.stdout + retry.stderr
        assert "may still run in east-cpu, which does not answer" in said, said[-3000:]
    finally:
        east.faults.up()
    FederationHook().collect()  # a snapshot of east-cpu, which answers again
    assert pods_of(sim_federation, dag_id) == []
    assert FederationHook().orphans("east-cpu") == []

    bump_try_number(dag_id, run_id)
    last = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert last.returncode == 0, (last.stdout + last.stderr)[-3000:]
    assert pod_creates(sim_federation) - creates_before == 1
    record = placement_of_run(dag_id, run_id)
    assert record["outcome"] == "succeeded", record
    assert [(a["cluster"], a["pod"]) for a in record["attempts"]] == [("east-cpu", first["metadata"]["name"])]


def test_a_retry_takes_the_success_of_a_dead_try_s_pod_that_is_being_deleted(
    sim_federation: SimFederation, federation: Path
) -> None:
    """A try dies while its pod runs; the pod Succeeds and its deletion has begun (a finalizer holds it,
    as a deletion waits for a node that stopped answering) when the retry looks. The pod cannot be
    watched, but its work is done: the retry takes its success and starts nothing (it failed, its pod
    not confirmed stopped within a minute)."""
    dag_id = "fed_killed_plain"
    run_id, command = task_test_run(dag_id, "killed-deleting")
    east = sim_federation["east-cpu"]
    creates_before = pod_creates(sim_federation)

    first = killed_while_its_pod_runs(sim_federation, dag_id, command, federation.parent / "first-worker.log")
    namespace, name = first["metadata"]["namespace"], first["metadata"]["name"]

    def hold(pod: dict[str, Any]) -> None:
        pod["metadata"]["finalizers"] = ["example.com/hold"]

    def release(pod: dict[str, Any]) -> None:
        pod["metadata"]["finalizers"] = []

    east.call(east.store.mutate, "pods", namespace, name, hold)
    east.delete_pod(namespace, name, grace=0)
    assert (east.pod(namespace, name) or {}).get("metadata", {}).get("deletionTimestamp")
    bump_try_number(dag_id, run_id)
    try:
        retried = subprocess.run(command, capture_output=True, text=True, timeout=300)
    finally:
        east.call(east.store.mutate, "pods", namespace, name, release)

    assert retried.returncode == 0, retried.stdout[-3000:]
    assert pod_creates(sim_federation) - creates_before == 1, retried.stdout[-3000:]
    record = placement_of_run(dag_id, run_id)
    assert record["outcome"] == "succeeded", record
    assert "its work is not run again" in record["reason"], record
    assert [(a["pod"], a["adopted"]) for a in record["attempts"]] == [(name, True)], record
    assert pods_of(sim_federation, dag_id) == []


def fill_nodes(handle: Any, leave_cpu: int, duration: str = "36000") -> list[str]:
    """A filler pod on each node of a member, leaving ``leave_cpu`` cpu free there; their names."""
    fillers = []
    for node in handle.nodes():
        name = f"filler-{node['metadata']['name']}"
        cpu = str(int(node["status"]["allocatable"]["cpu"]) - leave_cpu)
        handle.create_pod(
            "default",
            {
                "metadata": {"name": name, "annotations": {"sim.fedsched.io/duration": duration}},
                "spec": {
                    "nodeName": node["metadata"]["name"],
                    "containers": [
                        {"name": "c", "image": "busybox", "resources": {"requests": {"cpu": cpu}}}
                    ],
                },
            },
        )
        fillers.append(name)
    return fillers


def pod_of(fed: SimFederation, dag_id: str, cluster: str, phase: str) -> dict[str, Any] | None:
    for pod in fed[cluster].pods():
        labels = pod["metadata"].get("labels") or {}
        if labels.get("dag_id") == dag_id and pod["status"].get("phase") == phase:
            return pod
    return None


def killed_while_its_pod_runs(
    fed: SimFederation, dag_id: str, command: list[str], log: Path
) -> dict[str, Any]:
    """Run the task in a worker process (``command``), SIGKILL it once its pod runs in east-cpu, and return
    the pod once it has Succeeded with nobody watching it."""
    worker = subprocess.Popen(command, stdout=log.open("w"), stderr=subprocess.STDOUT)
    try:
        # A fresh `airflow tasks test` process imports Airflow and the provider first: slow on a busy machine.
        wait_for(lambda: pod_of(fed, dag_id, "east-cpu", "Running"), timeout=240, message=str(log))
    finally:
        worker.send_signal(signal.SIGKILL)
        worker.wait(timeout=30)
    found: dict[str, Any] = wait_for(lambda: pod_of(fed, dag_id, "east-cpu", "Succeeded"), timeout=120)
    return found


def task_test_run(dag_id: str, prefix: str) -> tuple[str, list[str]]:
    """A new run of ``dag_id`` and the ``airflow tasks test`` command that runs its task (a worker)."""
    airflow_harness.load_dag(DAG_FILE, dag_id)
    airflow_harness.serialize_dags(dag_id)
    now = datetime.now(UTC)
    run_id = f"manual__{prefix}-{now.timestamp():.0f}"
    airflow_harness.create_dag_run(dag_id, run_id, now)
    return run_id, [str(Path(sys.executable).with_name("airflow")), "tasks", "test", dag_id, "work", run_id]


def try_number_of(dag_id: str, run_id: str) -> int:
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session

    with create_session() as session:
        ti = session.query(TaskInstance).filter_by(dag_id=dag_id, run_id=run_id, task_id="work").one()
        return int(ti.try_number)


def bump_try_number(dag_id: str, run_id: str) -> None:
    """What the scheduler does when it retries a task instance whose worker died."""
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session

    with create_session() as session:
        ti = session.query(TaskInstance).filter_by(dag_id=dag_id, run_id=run_id, task_id="work").one()
        ti.try_number += 1


def placement_of_run(dag_id: str, run_id: str) -> dict[str, Any]:
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        row = session.query(XComModel).filter_by(dag_id=dag_id, run_id=run_id, key="fedsched_placement").one()
        value = XComModel.deserialize_value(row)
    return json.loads(value) if isinstance(value, str) else value


def operator_running(pod: str, cluster: str) -> tuple[Any, Any]:
    """A FederatedKubernetesOperator whose try's current attempt is ``pod`` in ``cluster``, as on_kill
    finds it: (operator, attempt)."""
    from kubernetes.client import models as k8s

    from airflow_provider_fedsched.federation.record import Attempt, PlacementRecord
    from airflow_provider_fedsched.operators.federated_pod import FederatedKubernetesOperator

    operator = FederatedKubernetesOperator(task_id="killed", image="busybox", termination_grace_period=0)
    now = datetime.now(UTC)
    attempt = Attempt(
        number=1, cluster=cluster, namespace="default", pod=pod, placement_id="p", started_at=now
    )
    operator.placement = PlacementRecord(
        dag_id="d", run_id="r", task_id="killed", try_number=1, started_at=now, attempts=[attempt]
    )
    operator.pod = k8s.V1Pod(metadata=k8s.V1ObjectMeta(name=pod, namespace="default"))
    return operator, attempt


def test_on_kill_deletes_the_pod_in_the_cluster_where_it_runs(
    sim_federation: SimFederation, federation: Path
) -> None:
    north = sim_federation["north-gpu"]
    north.create_pod(
        "default",
        {
            "metadata": {"name": "killed-task", "annotations": {"sim.fedsched.io/duration": "3600"}},
            "spec": {"containers": [{"name": "base", "image": "busybox"}]},
        },
    )
    operator, _ = operator_running("killed-task", "north-gpu")
    operator.use_cluster("east-cpu")  # whatever cluster the operator last talked to

    operator.on_kill()

    north.wait_for_gone("default", "killed-task", timeout=10)


def test_a_preemptible_task_ended_while_its_pod_runs_starts_nothing_else(
    sim_federation: SimFederation, federation: Path, background: Callable[[Callable[[], None]], None]
) -> None:
    """The CI soak at 2a1d15f, ``sync_plain[7]``: the task was marked failed while its pod ran; ``on_kill``
    deleted the pod, the attempt loop judged the deleted pod (read as evicted) and launched a copy in
    another member, which ran to the end after the task process was killed and stayed in the API. The
    operator's own cancellation is never judged: after ``on_kill`` nothing is judged or launched. Before
    the fix this test failed too: the loop judged the deleted pod and wrote the attempt ``failed`` over
    its ``cancelled``."""
    dag_id = "fed_ended_preemptible"
    previous = signal.getsignal(signal.SIGTERM)
    creates_before = pod_creates(sim_federation)
    ended: list[str] = []

    def end_the_task_once_its_pod_runs() -> None:
        def running() -> tuple[str, str] | None:
            for name, handle in sim_federation.handles.items():
                for pod in handle.pods():
                    labels = pod["metadata"].get("labels") or {}
                    if labels.get("dag_id") == dag_id and (pod.get("status") or {}).get("phase") == "Running":
                        return name, pod["metadata"]["name"]
            return None

        cluster, pod = wait_for(running, timeout=240)
        ended.append(cluster)
        airflow_harness.end_the_task_once_it_watches(
            sim_federation[cluster], f"/api/v1/namespaces/default/pods/{pod}*"
        )

    background(end_the_task_once_its_pod_runs)
    try:
        state, record, _ = run(dag_id)
    finally:
        signal.signal(signal.SIGTERM, previous)

    assert ended, "the pod never ran"
    assert state == "failed" and record is not None
    assert pod_creates(sim_federation) - creates_before == 1, record  # never started again elsewhere
    assert path(record) == [(ended[0], "cancelled")], record
    assert pods_of(sim_federation, dag_id) == []


def test_deferrable_run_records_pod_start_latency(sim_federation: SimFederation, federation: Path) -> None:
    state, record, _ = run("fed_deferrable_xcom")

    assert state == "success" and record is not None
    attempt = record["attempts"][0]
    started, running = (
        datetime.fromisoformat(attempt["started_at"]),
        datetime.fromisoformat(attempt["running_at"]),
    )
    assert running >= started.replace(microsecond=0)  # the kubelet reports start times in whole seconds
    samples = FederationHook().history(attempt["cluster"], "start_latency")
    assert samples and datetime.fromisoformat(samples[-1]["at"]) == running
    assert 0 <= samples[-1]["seconds"] < 60


def test_a_deferred_tasks_xcom_that_is_not_json_fails_the_task_naming_what_the_sidecar_read(
    sim_federation: SimFederation, federation: Path
) -> None:
    state, record, _ = run("fed_xcom_not_json")

    assert state == "failed" and record is not None
    assert [outcome for _, outcome in path(record)] == ["failed"]
    assert "is not JSON (Expecting value at char 0): 'rows: 7 (YAML, not JSON)" in record["reason"], record
    assert pods_of(sim_federation, "fed_xcom_not_json") == []


def test_cluster_selector_restricts_members_by_their_labels(
    sim_federation: SimFederation, federation: Path
) -> None:
    state, record, _ = run("fed_cluster_selector")

    assert state == "success" and record is not None
    assert path(record) == [("north-gpu", "succeeded")]  # the only member labelled gpu=true
    rejected = {r["cluster"]: r["plugin"] for r in record["decisions"][0]["rejected"]}
    assert rejected == {"east-cpu": "ClusterLabels", "west-general": "ClusterLabels"}


def test_a_request_above_every_hard_quota_is_impossible_not_a_wait(
    sim_federation: SimFederation, federation: Path
) -> None:
    for handle in sim_federation.handles.values():
        handle.set_quota("etl", {"requests.cpu": "1"}, name="tiny")
    try:
        take_snapshot()
        started = time.monotonic()
        state, record, _ = run("fed_hard_quota")  # wait_timeout is 10 minutes: it must not wait
        took = time.monotonic() - started
    finally:
        for handle in sim_federation.handles.values():
            handle.set_quota("etl", {"requests.cpu": "1000"}, name="tiny")

    assert state == "failed" and record is not None and record["attempts"] == []
    assert "no member cluster can ever run this task" in record["reason"]
    assert "hard quota" in record["reason"] and took < 120


def test_a_member_whose_hard_quota_is_below_the_request_is_rejected_as_never_when_placed_elsewhere(
    sim_federation: SimFederation, federation: Path
) -> None:
    """Issue 25, finding 6: the task ran elsewhere, and its explanation said the member with the tiny
    quota was "not now" (wait) although the request alone is above that namespace's hard limit."""
    east = sim_federation["east-cpu"]
    east.set_quota("etl", {"requests.cpu": "1"}, name="tiny")
    try:
        take_snapshot()
        state, record, _ = run("fed_hard_quota")
    finally:
        east.set_quota("etl", {"requests.cpu": "1000"}, name="tiny")

    assert state == "success" and record is not None and record["cluster"] != "east-cpu"
    (rejection,) = [r for r in record["decisions"][0]["rejected"] if r["cluster"] == "east-cpu"]
    assert rejection["plugin"] == "Quota" and rejection["permanent"] is True
    assert "above the namespace's hard quota for cpu: it can never fit" in rejection["reason"]


def test_a_broken_member_is_skipped_with_its_reason_while_healthy_ones_serve(
    sim_federation: SimFederation, federation: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = yaml.safe_load(federation.read_text())
    broken = {**spec["clusters"][0], "name": "aaa-broken", "conn_id": "k8s_nowhere"}
    spec["clusters"].insert(0, broken)  # sorts first: the first member used to fail every task
    with_broken = federation.with_name("with-broken.yaml")
    with_broken.write_text(yaml.safe_dump(spec))
    monkeypatch.setenv("AIRFLOW__FEDSCHED__FEDERATION_SPEC", str(with_broken))

    state, record, _ = run("fed_broken_member")

    assert state == "success" and record is not None
    assert record["cluster"] != "aaa-broken"
    rejected = {r["cluster"]: r["reason"] for r in record["decisions"][0]["rejected"]}
    assert "connection does not exist" in rejected["aaa-broken"]
    assert "k8s_nowhere" in rejected["aaa-broken"]


def test_on_kill_after_the_pod_succeeded_records_the_success_then_deletes_it(
    sim_federation: SimFederation, federation: Path
) -> None:
    """Full soak finding: Airflow reset tries it took for orphaned (a starved scheduler) after their pods
    had run to the end; ``on_kill`` deleted the Succeeded pods and the retries ran the work again. The
    success is now recorded before the pod goes: the next try finds it (``_earlier_succeeded``)."""
    north = sim_federation["north-gpu"]
    north.create_pod(
        "default",
        {
            "metadata": {"name": "done-then-killed", "annotations": {"sim.fedsched.io/duration": "1"}},
            "spec": {"restartPolicy": "Never", "containers": [{"name": "base", "image": "busybox"}]},
        },
    )
    wait_for(
        lambda: (
            (north.pod("default", "done-then-killed") or {}).get("status", {}).get("phase") == "Succeeded"
        ),
        timeout=60,
        interval=0.05,
    )
    operator, attempt = operator_running("done-then-killed", "north-gpu")

    operator.on_kill()

    north.wait_for_gone("default", "done-then-killed", timeout=10)
    assert (attempt.outcome, operator.placement.outcome) == ("succeeded", "succeeded")
    assert "never run again" in operator.placement.reason
    assert FederationHook().orphans("north-gpu") == []  # written down first, taken off once gone


def test_a_pod_that_succeeded_while_airflow_failed_the_try_is_a_success_not_run_again(
    sim_federation: SimFederation, federation: Path
) -> None:
    """The full test-bed soak's ``sync_resumable[22]``: the metadata database restarted just after the
    create, so KubernetesPodOperator's XCom push of the pod's name answered 500 (after the Task SDK's
    retries) while the pod ran to Succeeded. The operator took the error for the task's own failure,
    deleted the pod ("left after the task failed") and failed the try; the retry ran the work again. A
    fresh read shows the pod Succeeded: its work is done and the try succeeds. One pod, ever; none left."""
    dag_id = "fed_airflow_fails_while_pod_runs"
    before = pod_creates(sim_federation)
    state, record, _ = run(dag_id)

    assert state == "success" and record is not None
    assert record["try_number"] == 1 and path(record) == [(record["attempts"][0]["cluster"], "succeeded")]
    assert (
        "Succeeded while Airflow failed a step of the try (API_SERVER_ERROR"
        in record["attempts"][0]["reason"]
    )
    assert pod_creates(sim_federation) - before == 1
    assert pods_of(sim_federation, dag_id) == []


def test_a_pod_that_succeeded_as_the_try_airflow_failed_cleaned_it_up_is_a_success_not_run_again(
    sim_federation: SimFederation, federation: Path
) -> None:
    """The full test-bed soak at acc8f6d, ``deferred_resumable[28]``: Airflow's API answered 500 while the
    pod ran; the fresh read still saw it Running, so the try failed, and its cleanup deleted the pod 2 s
    after it Succeeded, unrecorded; the retry ran the work again. The cleanup's read (or its delete's
    answer) shows the pod Succeeded: the work is done and the try succeeds. One pod, ever."""
    dag_id = "fed_airflow_fails_as_pod_ends"
    before = pod_creates(sim_federation)
    state, record, _ = run(dag_id)

    assert state == "success" and record is not None
    assert record["try_number"] == 1 and path(record) == [(record["attempts"][0]["cluster"], "succeeded")]
    assert "Succeeded while Airflow failed a step of the try" in record["attempts"][0]["reason"]
    assert pod_creates(sim_federation) - before == 1
    assert pods_of(sim_federation, dag_id) == []


def test_a_retry_with_no_room_takes_a_swept_success_of_a_dead_try_before_it_waits(
    sim_federation: SimFederation, federation: Path
) -> None:
    """The full test-bed soak's ``deferred_plain[18]``: try 1 died while its pod ran; the pod Succeeded,
    and a snapshot deleted it as an orphan, writing down that it Succeeded. The retry found no pod, had to
    wait for room and deferred; resumed, it had forgotten try 1's record (its own replaces it in the task's
    state) and ran the work again. The retry carries what the earlier try left unread in its own record
    (``left_by_earlier_tries``) and takes the swept success as it starts, before it waits for room (since
    acc8f6d; before, it took it once placed, after its wait). One pod, ever."""
    dag_id = "fed_killed_retry_defers"
    run_id, command = task_test_run(dag_id, "swept-then-defers")
    east = sim_federation["east-cpu"]
    creates_before = pod_creates(sim_federation)

    first = killed_while_its_pod_runs(sim_federation, dag_id, command, federation.parent / "first-worker.log")
    name = first["metadata"]["name"]
    # No room in east-cpu, the task's only member: a retry that placed first would wait, deferring.
    fillers = fill_nodes(east, leave_cpu=0)
    wait_for(
        lambda: all(
            (east.pod("default", f) or {}).get("status", {}).get("phase") == "Running" for f in fillers
        )
    )
    # What a snapshot does with a try that is over and left its pod: deleted, its success written down.
    hook = FederationHook()
    hook.add_orphan("east-cpu", "default", name)
    hook.collect(["east-cpu"])
    assert east.pod("default", name) is None
    assert hook.state.orphans.was_swept_succeeded("east-cpu", "default", name, "pod")
    bump_try_number(dag_id, run_id)
    retry_log = federation.parent / "retry.log"
    retry = subprocess.Popen(command, stdout=retry_log.open("w"), stderr=subprocess.STDOUT)
    try:
        assert retry.wait(timeout=300) == 0, retry_log.read_text()[-3000:]
    finally:
        for filler in fillers:
            if east.pod("default", filler) is not None:
                east.delete_pod("default", filler, grace=0)
        if retry.poll() is None:
            retry.kill()
            retry.wait(timeout=30)

    output = retry_log.read_text()
    assert "Pausing task as DEFERRED" not in output, output[-3000:]
    assert "the snapshot that deleted it saw it end" in output, output[-3000:]
    assert pod_creates(sim_federation) - creates_before == 1, output[-3000:]
    record = placement_of_run(dag_id, run_id)
    assert record["outcome"] == "succeeded", record
    assert [(a["cluster"], a["pod"], a["outcome"]) for a in record["attempts"]] == [
        ("east-cpu", name, "succeeded")
    ], record
    assert pods_of(sim_federation, dag_id) == []
