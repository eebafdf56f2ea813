"""One-task DAGs, each exercising one path of FederatedKubernetesOperator against the simulated federation.

The federation spec comes from ``[fedsched] federation_spec`` (set by the tests' fixture); the
``sim.fedsched.io/*`` annotations steer the simulated kubelet.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

from airflow.sdk import DAG, get_parsing_context
from kubernetes.client import models as k8s

from airflow_provider_fedsched.operators.federated_pod import FederatedKubernetesOperator


def dag_named(dag_id: str) -> DAG:
    """A test DAG (no schedule, started 2026-01-01), registered only when this parse is for it or for
    every DAG. Airflow parses these files for one DAG in a task's process and in the tests' harness
    around ``dag.test`` (``airflow_harness.parsing_for``): the others are built but not registered, as
    Airflow's docs advise for a file of many DAGs, so ``dag.test`` does not write all 178 test DAGs to the
    database again on each run. The DAG processor names none and gets them all."""
    only = get_parsing_context().dag_id  # read at each call: other DAG files import this module once
    return DAG(
        dag_id,
        start_date=datetime(2026, 1, 1),
        schedule=None,
        catchup=False,
        auto_register=only is None or dag_id == only,
    )


GPU_TOLERATION = [k8s.V1Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule")]


def requests(cpu: str = "2", memory: str = "4Gi", gpu: int = 0) -> k8s.V1ResourceRequirements:
    wanted = {"cpu": cpu, "memory": memory, **({"nvidia.com/gpu": str(gpu)} if gpu else {})}
    return k8s.V1ResourceRequirements(requests=wanted, limits={"nvidia.com/gpu": str(gpu)} if gpu else None)


def sim(
    duration: float = 1, exit_code: int = 0, logs: list[str] | None = None, **extra: str
) -> dict[str, str]:
    annotations = {"sim.fedsched.io/duration": str(duration), "sim.fedsched.io/exit-code": str(exit_code)}
    if logs:
        annotations["sim.fedsched.io/logs"] = json.dumps(logs)
    return {**annotations, **{f"sim.fedsched.io/{k.replace('_', '-')}": v for k, v in extra.items()}}


def pod_args(**extra: Any) -> dict[str, Any]:
    """What the test DAGs' tasks share (a pod of 2 cpu / 4 Gi that exits 0 at once on the simulator, no
    grace for Unschedulable), with ``extra`` added or overriding."""
    return {
        "image": "busybox:1.36",
        "cmds": ["sh", "-c", "true"],
        "unschedulable_grace_seconds": 0,
        "container_resources": requests(),
        "annotations": sim(),
        **extra,
    }


def federated_dag(
    dag_id: str,
    operator: type[FederatedKubernetesOperator] = FederatedKubernetesOperator,
    **operator_args: Any,
) -> DAG:
    with dag_named(dag_id) as dag:
        operator(task_id="work", **pod_args(get_logs=True, **operator_args))
    return dag


federated_dag(
    "fed_gpu_xcom",
    container_resources=requests("4", "16Gi", gpu=2),
    tolerations=GPU_TOLERATION,
    do_xcom_push=True,
    annotations=sim(logs=["epoch 1", "epoch 2"], xcom=json.dumps({"accuracy": 0.93})),
)
federated_dag("fed_sovereign", datasets=["eu-customers"])
federated_dag("fed_quota_failover", datasets=["user-events"], namespace="etl")
federated_dag("fed_unschedulable_failover", datasets=["user-events"])
federated_dag(
    "fed_evicted_resumes",
    preemptible=True,
    checkpoint="s3://bucket/ckpt",
    annotations=sim(duration=40, logs=["attempt ${FEDSCHED_CLUSTER_ATTEMPT} resume=${FEDSCHED_RESUME}"]),
)
federated_dag("fed_task_failure", annotations=sim(exit_code=3, logs=["boom"]))
federated_dag(
    "fed_task_failure_deferrable",
    deferrable=True,
    poll_interval=0.5,
    annotations=sim(exit_code=3, logs=["boom"]),
)
federated_dag("fed_wait_timeout", datasets=["eu-customers"], wait_timeout=3)
federated_dag("fed_wait_timeout_deferrable", datasets=["eu-customers"], wait_timeout=3, deferrable=True)
# A two-hour task waiting for room on its only cluster (test_federated_operator.py): it decides again as
# soon as a placement there ends, not after a poll tied to its duration (which would be 120 s).
federated_dag("fed_wait_for_room", datasets=["eu-customers"], expected_duration=7200, wait_timeout=300)
federated_dag(
    "fed_wait_for_room_deferrable",
    datasets=["eu-customers"],
    expected_duration=7200,
    wait_timeout=300,
    deferrable=True,
)
federated_dag("fed_reattach", annotations=sim(duration=60))
# A try killed after its pod Succeeded, while the pod's delete is refused (test_federated_operator.py).
federated_dag(
    "fed_killed_after_success", clusters=["east-cpu"], unreachable_grace=120, annotations=sim(duration=20)
)
# A preemptible try killed while its pod runs; the pod Succeeds and its cluster goes silent before the
# retry looks for it (test_federated_operator.py; the full soak's sync_resumable[26]).
federated_dag(
    "fed_killed_preemptible",
    clusters=["east-cpu"],
    preemptible=True,
    checkpoint="s3://bucket/ckpt",
    annotations=sim(duration=8, logs=["work done"]),
)
# A preemptible task ended (marked failed: SIGTERM, on_kill) while its pod runs, with room elsewhere: the
# pod's deletion is the cancellation, never a reason to move (test_federated_operator.py; the CI soak's
# sync_plain[7] at 2a1d15f).
federated_dag(
    "fed_ended_preemptible",
    clusters=["east-cpu", "west-general"],
    preemptible=True,
    checkpoint="s3://bucket/ckpt",
    annotations=sim(duration=3600),
)
# The same, with room elsewhere: the retry must wait for the dead try's silent cluster and adopt its
# finished pod, not start the work on west-general (test_federated_operator.py; the soak's
# sync_resumable[21]).
federated_dag(
    "fed_killed_preemptible_elsewhere",
    clusters=["east-cpu", "west-general"],
    preemptible=True,
    checkpoint="s3://bucket/ckpt",
    unreachable_grace=120,
    annotations=sim(duration=8, logs=["work done"]),
)
# A deferrable try killed while its pod runs; the pod Succeeds and a sweep deletes it; the retry must wait
# (defer) before it may launch (test_federated_operator.py; the full test-bed soak's deferred_plain[18]).
federated_dag(
    "fed_killed_retry_defers",
    clusters=["east-cpu"],
    deferrable=True,
    poll_interval=0.5,
    wait_timeout=240,
    annotations=sim(duration=3, logs=["work done"]),
)
# A try killed while its pod runs, not preemptible: the retry finds the pod Succeeded and being deleted.
federated_dag(
    "fed_killed_plain",
    clusters=["east-cpu", "west-general"],
    unreachable_grace=120,
    annotations=sim(duration=8, logs=["work done"]),
)
# The same, its cluster silent past the retry's grace: the retry gives up, and the dead try's pod is written
# down, deleted (its success kept) once east-cpu answers (test_federated_operator.py; the simulated
# LocalExecutor soak at acc8f6d, sync_plain[31]).
federated_dag(
    "fed_killed_plain_silent",
    clusters=["east-cpu", "west-general"],
    unreachable_grace=3,
    annotations=sim(duration=4, logs=["work done"]),
)
federated_dag(
    "fed_xcom_not_json",
    deferrable=True,
    poll_interval=1,
    do_xcom_push=True,
    annotations=sim(xcom="rows: 7 (YAML, not JSON)"),
)
federated_dag(
    "fed_deferrable_xcom",
    deferrable=True,
    do_xcom_push=True,
    poll_interval=1,
    annotations=sim(xcom=json.dumps({"rows": 7})),
)
federated_dag(
    "fed_deferrable_quota", deferrable=True, poll_interval=1, datasets=["user-events"], namespace="etl"
)
federated_dag("fed_deferrable_unschedulable", deferrable=True, poll_interval=1, datasets=["user-events"])

# Bad input: each fails at the start of the try, naming the argument.
federated_dag("fed_bad_dataset", datasets=["no-such-dataset"])
federated_dag("fed_bad_subset", clusters=[])
federated_dag("fed_bad_cluster", clusters=["moon-base"])
federated_dag("fed_bad_conflict", kubernetes_conn_id="k8s_east_cpu")
federated_dag(
    "fed_bad_impossible", container_resources=requests("8", "8Gi", gpu=64), tolerations=GPU_TOLERATION
)

# The delivery contract when the pod's cluster stops answering (see test_contract.py). East-cpu is the
# cheapest member: it is chosen first whenever it is allowed.
for mode, extra in (("sync", {}), ("deferrable", {"deferrable": True, "poll_interval": 0.5})):
    federated_dag(
        f"fed_outage_{mode}",
        clusters=["east-cpu"],
        unreachable_grace=60,
        unschedulable_grace_seconds=60,
        annotations=sim(duration=40, logs=["work done"]),
        **extra,
    )
    federated_dag(
        f"fed_outage_lost_{mode}",
        clusters=["east-cpu", "west-general"],
        unreachable_grace=3,
        annotations=sim(duration=600),
        **extra,
    )
    federated_dag(
        f"fed_outage_pending_lost_{mode}",
        clusters=["east-cpu", "west-general"],
        unreachable_grace=3,
        unschedulable_grace_seconds=60,  # Pending because its cluster's scheduler is paused, not full
        annotations=sim(duration=600),
        **extra,
    )
    # Preemptible with one allowed cluster: its fenced pod runs to the end while the cluster is silent.
    federated_dag(
        f"fed_fenced_ran_to_the_end_{mode}",
        clusters=["east-cpu"],
        preemptible=True,
        checkpoint="s3://bucket/ckpt",
        annotations=sim(duration=20, logs=["work done"]),
        **extra,
    )
    federated_dag(
        f"fed_outage_done_{mode}",
        clusters=["east-cpu"],
        unreachable_grace=60,
        annotations=sim(duration=5, logs=["work done"]),
        **extra,
    )
    federated_dag(
        f"fed_outage_preemptible_{mode}",
        clusters=["east-cpu", "west-general"],
        preemptible=True,
        checkpoint="s3://bucket/ckpt",
        annotations=sim(duration=40, logs=["attempt ${FEDSCHED_CLUSTER_ATTEMPT} resume=${FEDSCHED_RESUME}"]),
        **extra,
    )

# A preemptible task's cluster stops answering its reads in the very moment its pod Succeeds; the delete
# that fences the pod is answered, and says so (test_contract.py; the full test-bed soak's sync_resumable[5]).
# When the try reads the log stream's end before the first unanswered read, it waits the grace for a pod
# whose work is over before it fences: 10 s, not the default 5 minutes (the answer is the same).
for mode, extra in (("sync", {}), ("deferrable", {"deferrable": True, "poll_interval": 0.5})):
    federated_dag(
        f"fed_succeeded_as_fenced_{mode}",
        clusters=["east-cpu", "west-general"],
        preemptible=True,
        checkpoint="s3://bucket/ckpt",
        unreachable_grace=10,
        annotations=sim(duration=3, logs=["attempt ${FEDSCHED_CLUSTER_ATTEMPT} resume=${FEDSCHED_RESUME}"]),
        **extra,
    )

# A preemptible task's pod writes its last line and ends; east-cpu then answers nothing (reads and deletes)
# for a few seconds: its log stream ended, so the work is likely over and the task waits rather than moves
# (test_contract.py; the simulated CeleryExecutor soak at acc8f6d, sync_resumable[7]).
federated_dag(
    "fed_log_ended_then_silent",
    clusters=["east-cpu", "west-general"],
    preemptible=True,
    checkpoint="s3://bucket/ckpt",
    unreachable_grace=60,
    # 4 s at the tests' time scale: the task follows the log before the pod ends, however busy the machine.
    annotations=sim(duration=40, logs=["attempt ${FEDSCHED_CLUSTER_ATTEMPT} resume=${FEDSCHED_RESUME}"]),
)

# A preemptible task moves during a short outage of east-cpu; its fenced pod there Succeeds while the copy
# on west-general runs: that copy is stopped and the first one's result taken (test_contract.py; the
# soak's sync_resumable[5]). West's copy waits for its scheduler as long as the test holds it.
for mode, extra in (("sync", {}), ("deferrable", {"deferrable": True, "poll_interval": 0.5})):
    federated_dag(
        f"fed_moved_then_first_succeeded_{mode}",
        clusters=["east-cpu", "west-general"],
        preemptible=True,
        checkpoint="s3://bucket/ckpt",
        unschedulable_grace_seconds=120,
        annotations=sim(duration=60, logs=["attempt ${FEDSCHED_CLUSTER_ATTEMPT} resume=${FEDSCHED_RESUME}"]),
        **extra,
    )


# Its pod's node goes NotReady past the grace: try 1 is lost; try 2 must not start a second copy while
# that pod may still run there (test_contract.py).
federated_dag(
    "fed_node_lost",
    clusters=["east-cpu", "west-general"],
    unreachable_grace=3,
    retries=1,
    retry_delay=timedelta(seconds=1),
    annotations=sim(duration=600),
)


class _LooksForEarlierOperator(FederatedKubernetesOperator):
    def _adopt_earlier(self, context: Any) -> Any:
        from tests.operators import outage_trigger

        if outage_trigger.BEFORE_LOOKING_FOR_EARLIER is not None:
            outage_trigger.BEFORE_LOOKING_FOR_EARLIER(context["ti"].try_number)
        return super()._adopt_earlier(context)


# Try 1 is lost to an outage, its pod written down; try 2 adopts the pod (test_contract.py: the cluster
# answers again as try 2 looks for try 1's pod).
federated_dag(
    "fed_outage_lost_retry",
    operator=_LooksForEarlierOperator,
    clusters=["east-cpu", "west-general"],
    unreachable_grace=3,
    retries=1,
    retry_delay=timedelta(seconds=1),
    annotations=sim(duration=300, logs=["work done"]),
)


# Tries 1 and 2 find the cluster silent; try 3 must wait for it too and adopt the pod (test_contract.py).
with dag_named("fed_outage_lost_twice"):
    _LooksForEarlierOperator(
        task_id="work",
        image="busybox:1.36",
        clusters=["east-cpu", "west-general"],
        unreachable_grace=5,
        retries=2,
        retry_delay=timedelta(seconds=1),
        container_resources=requests(),
        annotations=sim(duration=40, logs=["work done"]),
    )

# The smaller defects of issue 10.
federated_dag("fed_cluster_selector", cluster_selector={"gpu": "true"})
federated_dag("fed_hard_quota", namespace="etl", wait_timeout=600)
federated_dag("fed_broken_member")

# A deferred try ended by a user while no triggerer runs, and one whose pod Succeeded before its try ended
# unresumed (test_ended_while_deferred.py).
for _dag_id, _seconds in (("fed_deferred_ended", 30), ("fed_deferred_done", 1)):
    federated_dag(
        _dag_id, clusters=["east-cpu"], deferrable=True, poll_interval=0.5, annotations=sim(duration=_seconds)
    )


def trigger_dag(dag_id: str, operator: type[FederatedKubernetesOperator], **operator_args: Any) -> DAG:
    """A deferrable task on east-cpu or west-general whose operator defers to a test trigger."""
    with dag_named(dag_id) as dag:
        operator(
            task_id="work",
            image="busybox:1.36",
            clusters=["east-cpu", "west-general"],
            deferrable=True,
            poll_interval=0.5,
            container_resources=requests(),
            **operator_args,
        )
    return dag


class _CrashingTriggerOperator(FederatedKubernetesOperator):
    trigger_class = "tests.operators.crashing_trigger.CrashingPodTrigger"


trigger_dag("fed_trigger_fails", _CrashingTriggerOperator, annotations=sim(duration=600))


class _GarbledEventOperator(FederatedKubernetesOperator):
    trigger_class = "tests.operators.crashing_trigger.GarbledEventTrigger"


trigger_dag("fed_trigger_garbled", _GarbledEventOperator, annotations=sim(duration=600))

# Deferred preemptible tasks whose pod ended, or whose cluster went silent, at a moment the test trigger
# chooses (test_contract.py): a result known is never run again, a cluster that answers is believed.
PREEMPTIBLE = {"preemptible": True, "checkpoint": "s3://bucket/ckpt"}


class _OutageAfterDoneOperator(FederatedKubernetesOperator):
    trigger_class = "tests.operators.outage_trigger.OutageAfterDoneTrigger"


class _RestartedAfterDoneOperator(FederatedKubernetesOperator):
    trigger_class = "tests.operators.outage_trigger.RestartedAfterDoneTrigger"


class _SilentOnceOperator(FederatedKubernetesOperator):
    trigger_class = "tests.operators.outage_trigger.SilentOnceTrigger"


DONE = sim(duration=5, logs=["work done"])
for name, grace in (("short", 60), ("long", 2)):
    trigger_dag(
        f"fed_done_then_silent_{name}",
        _OutageAfterDoneOperator,
        unreachable_grace=grace,
        annotations=DONE,
        **PREEMPTIBLE,
    )
trigger_dag(
    "fed_done_then_restarted",
    _RestartedAfterDoneOperator,
    unreachable_grace=60,
    annotations=DONE,
    **PREEMPTIBLE,
)
trigger_dag(
    "fed_lost_then_back", _SilentOnceOperator, annotations=sim(duration=30, logs=["work done"]), **PREEMPTIBLE
)
# The pod ran to Succeeded and its trigger fired ``done``; then the pod was deleted by someone else (the
# test-bed soak: the garbage collector of its deleted node) before the task resumed: not preemptible.
trigger_dag("fed_done_then_deleted", _OutageAfterDoneOperator, unreachable_grace=60, annotations=DONE)


class _EndedBeforeItResumesOperator(FederatedKubernetesOperator):
    """Try 1 ends before it resumes, its trigger's ``done`` never read (the test-bed soak: a scheduler
    stalled for a minute reset the queued resumption, and the next try started from the beginning)."""

    trigger_class = "tests.operators.outage_trigger.OutageAfterDoneTrigger"

    def trigger_reentry(self, context: Any, event: dict[str, Any]) -> Any:
        if context["ti"].try_number == 1:
            raise RuntimeError("test: the try ended before it resumed")
        return super().trigger_reentry(context, event)


class _DiesAsItSucceedsOperator(FederatedKubernetesOperator):
    """Try 1 resumes on its trigger's ``done``, finds the pod gone and takes the success its trigger saw,
    and dies as it writes that success down (the CeleryExecutor test-bed soak at 92108c3: its worker
    SIGKILLed 6 s after the try logged ``running -> succeeded``, before its record was saved)."""

    trigger_class = "tests.operators.outage_trigger.OutageAfterDoneTrigger"

    def _save(self, context: Any) -> None:
        if context["ti"].try_number == 1 and self._record.outcome == "succeeded":
            raise RuntimeError("test: the worker died as the try's success was written")
        super()._save(context)


# Its pod Succeeded and the trigger fired ``done``; the pod was deleted by someone else (the garbage
# collector of its deleted node) and try 1 ended unresumed, or died as it wrote the success down: the retry
# must not run the work again.
for dag_id, operator in (
    ("fed_done_then_try_ended", _EndedBeforeItResumesOperator),
    ("fed_done_then_died_as_it_succeeded", _DiesAsItSucceedsOperator),
):
    trigger_dag(
        dag_id,
        operator,
        unreachable_grace=60,
        retries=1,
        retry_delay=timedelta(seconds=1),
        annotations=DONE,
    )


class _LaunchesOnceItsFirstClusterAnswersOperator(FederatedKubernetesOperator):
    """After it left east-cpu, the try starts its copy only once east-cpu answers again and shows the
    pod it left there ended (a busy worker, slow between the decision and the create, as in the simulated
    CeleryExecutor soak at 92108c3, ``deferred_resumable[8]``)."""

    def _left_pod_succeeded(self, context: Any) -> bool:
        import time

        from airflow_provider_fedsched.operators.fences import own_pod_manager

        left_behind = [a for a in self._record.attempts if a.outcome == "unreachable"]
        for left in left_behind:
            pods = own_pod_manager(self.federation_hook, left.cluster)
            deadline = time.monotonic() + 120
            while pods.observe(left.namespace, left.pod, events=False).phase not in ("Succeeded", "Failed"):
                assert time.monotonic() < deadline, "east-cpu never answered with the pod's end"
                time.sleep(0.2)
        return super()._left_pod_succeeded(context)


with dag_named("fed_first_cluster_back_before_the_copy"):
    _LaunchesOnceItsFirstClusterAnswersOperator(
        task_id="work",
        image="busybox:1.36",
        clusters=["east-cpu", "west-general"],
        container_resources=requests(),
        annotations=sim(duration=40, logs=["work done"]),  # 4 s: the outage begins while it runs
        **PREEMPTIBLE,
    )


class _EndsBeforeItDefersAgainOperator(FederatedKubernetesOperator):
    """Resumed by a stale ``unschedulable`` event while its pod runs, it watches on, and the pod ends before
    it defers again (a slow worker between two reads, as in the test-bed soak)."""

    trigger_class = "tests.operators.outage_trigger.UnschedulableOnceTrigger"

    def trigger_reentry(self, context: Any, event: dict[str, Any]) -> Any:
        self._resumed = True
        return super().trigger_reentry(context, event)

    def invoke_defer_method(self, last_log_time: Any = None, context: Any = None) -> None:
        if getattr(self, "_resumed", False):
            import time

            deadline = time.monotonic() + 120
            while (phase := self.pod_manager.read_pod(self.pod_request_obj).status.phase) != "Succeeded":
                assert time.monotonic() < deadline, f"the pod never ended (phase {phase})"
                time.sleep(0.2)
        super().invoke_defer_method(last_log_time, context)


# The pod runs 20 s: still running when the task resumes, however loaded the machine (CI at a load of 30:
# with 4 s it had ended first, and the try took another, also correct, path than the one tested).
trigger_dag(
    "fed_ends_before_it_defers_again",
    _EndsBeforeItDefersAgainOperator,
    annotations=sim(duration=20, logs=["work done"]),
)


class _LateFirstReadOperator(FederatedKubernetesOperator):
    trigger_class = "tests.operators.outage_trigger.LateFirstReadTrigger"


class _StartedLateOperator(FederatedKubernetesOperator):
    trigger_class = "tests.operators.outage_trigger.StartedLateTrigger"


for dag_id, operator in (
    ("fed_ended_before_first_read", _LateFirstReadOperator),
    ("fed_ended_before_a_late_first_read", _StartedLateOperator),
):
    with dag_named(dag_id):
        operator(
            task_id="work",
            image="busybox:1.36",
            clusters=["east-cpu", "west-general"],
            preemptible=True,
            checkpoint="s3://bucket/ckpt",
            unreachable_grace=60,
            deferrable=True,
            poll_interval=0.5,
            container_resources=requests(),
            annotations=sim(duration=2, logs=["work done"]),
        )


# A tenant within its guaranteed share waits for room that another tenant's preemptible pods borrow
# (test_reclaim.py).
federated_dag(
    "fed_reclaim",
    clusters=["east-cpu"],
    tenant="team-a",
    expected_duration=60,
    wait_timeout=120,
    annotations=sim(duration=1, logs=["work done"]),
)


class _AirflowFailsWhilePodRunsOperator(FederatedKubernetesOperator):
    """Airflow's API fails KubernetesPodOperator's XCom push of the pod's name, its first call to Airflow
    after the create, as it did while the full test-bed soak restarted the metadata database
    (``sync_resumable[22]``): in try 1, the push answers 500 once the pod has run to Succeeded (the Task SDK
    retried meanwhile)."""

    phase_at_the_failure = "Succeeded"

    def get_or_create_pod(self, pod_request_obj: k8s.V1Pod, context: Any) -> k8s.V1Pod:
        from airflow.sdk.exceptions import AirflowRuntimeError, ErrorType
        from airflow.sdk.execution_time.comms import ErrorResponse

        from airflow_provider_fedsched.sim import wait_for

        pod = super().get_or_create_pod(pod_request_obj, context)
        ti = context["ti"]
        if ti.try_number != 1:
            return pod  # the database is back
        push = ti.xcom_push

        def failing_push(key: str, value: Any, **kwargs: Any) -> Any:
            if key != "pod_name":
                return push(key, value, **kwargs)
            vars(ti).pop("xcom_push")  # once
            wait_for(
                lambda: (
                    self.pod_manager.observe(pod.metadata.namespace, pod.metadata.name).phase
                    == self.phase_at_the_failure
                )
            )
            detail = {"status_code": 500, "message": "Server returned error", "detail": "Database error"}
            raise AirflowRuntimeError(ErrorResponse(error=ErrorType.API_SERVER_ERROR, detail=detail))

        object.__setattr__(ti, "xcom_push", failing_push)  # a pydantic model: its own setattr refuses
        return pod


class _AirflowFailsAsPodEndsOperator(_AirflowFailsWhilePodRunsOperator):
    """The push answers 500 while the pod runs, and the pod ends between the operator's fresh read (still
    Running) and its cleanup (the full test-bed soak at acc8f6d, ``deferred_resumable[28]``)."""

    phase_at_the_failure = "Running"

    def _make_sure_gone(self, attempt: Any) -> Any:
        from airflow_provider_fedsched.sim import wait_for

        wait_for(lambda: self.pod_manager.observe(attempt.namespace, attempt.pod).phase == "Succeeded")
        return super()._make_sure_gone(attempt)


with dag_named("fed_airflow_fails_as_pod_ends"):
    _AirflowFailsAsPodEndsOperator(
        task_id="work",
        retries=1,
        retry_delay=timedelta(seconds=1),
        **pod_args(annotations=sim(duration=3, logs=["work done"])),
    )

# Its pod runs to Succeeded while Airflow's API fails the try (test_federated_operator.py); one retry, which
# must not run the work again.
with dag_named("fed_airflow_fails_while_pod_runs"):
    _AirflowFailsWhilePodRunsOperator(
        task_id="work",
        retries=1,
        retry_delay=timedelta(seconds=1),
        preemptible=True,
        checkpoint="s3://bucket/ckpt",
        **pod_args(annotations=sim(duration=2, logs=["work done"])),
    )


class _RecordsItsStepsOperator(FederatedKubernetesOperator):
    """A user's subclass of the public steps (docs/operator.md, "Steps you can override"): it notes each
    launch and each cluster left, and calls ``super()`` to keep the contract."""

    def execute(self, context: Any) -> Any:
        self._steps: list[str] = []
        try:
            return super().execute(context)
        finally:
            context["ti"].xcom_push(key="steps", value=self._steps)

    def launch_attempt(self, context: Any, decision: Any) -> Any:
        attempt = super().launch_attempt(context, decision)
        self._steps.append(f"launch {attempt.cluster}")
        return attempt

    def leave_cluster(self, context: Any, attempt: Any, failure: Any) -> None:
        self._steps.append(f"leave {attempt.cluster}: {failure.kind}")
        super().leave_cluster(context, attempt, failure)


federated_dag("fed_overridden_steps", _RecordsItsStepsOperator, datasets=["user-events"], namespace="etl")
