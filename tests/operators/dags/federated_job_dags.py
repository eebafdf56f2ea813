"""One-task DAGs exercising FederatedKubernetesJobOperator (gangs) against the simulated federation."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from airflow.sdk import DAG
from kubernetes.client import models as k8s

from airflow_provider_fedsched.operators.federated_job import FederatedKubernetesJobOperator
from tests.operators.dags.federated_dags import dag_named


class _LooksForEarlierJobOperator(FederatedKubernetesJobOperator):
    def _adopt_earlier(self, context: Any) -> Any:
        from tests.operators import outage_trigger

        if outage_trigger.BEFORE_LOOKING_FOR_EARLIER is not None:
            outage_trigger.BEFORE_LOOKING_FOR_EARLIER(context["ti"].try_number)
        return super()._adopt_earlier(context)


def gang_dag(
    dag_id: str,
    duration: float = 2,
    logs: list[str] | None = None,
    operator: type[FederatedKubernetesJobOperator] = FederatedKubernetesJobOperator,
    **operator_args: Any,
) -> DAG:
    annotations = {"sim.fedsched.io/duration": str(duration)}
    if logs:
        annotations["sim.fedsched.io/logs"] = json.dumps(logs)
    args: dict[str, Any] = {"parallelism": 3, "completions": 3, "retries": 0, **operator_args}
    with dag_named(dag_id) as dag:
        operator(
            task_id="work",
            name="gang",
            image="busybox:1.36",
            cmds=["sh", "-c", "true"],
            namespace="default",
            # user-events lives in east-cpu and may only go to cn-east-1 or cn-north-1.
            datasets=["user-events"],
            container_resources=k8s.V1ResourceRequirements(requests={"cpu": "3", "memory": "1Gi"}),
            # Two 3-cpu workers per 8-cpu node: north-gpu holds the gang only on its GPU pool's nodes.
            tolerations=[k8s.V1Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule")],
            backoff_limit=0,
            job_poll_interval=0.3,
            unschedulable_grace_seconds=3,
            annotations=annotations,
            get_logs=True,
            **args,
        )
    return dag


# Simulated pods do not wait for each other as a real gang's workers do: each runs longer (x0.1 in the
# tests' simulated time) than the 3 s grace, so a member that gets no node is seen while the others run.
gang_dag("gang_runs_whole", duration=20)
gang_dag("gang_unschedulable_moves", duration=60)
gang_dag("gang_deferrable_unschedulable_moves", duration=60, deferrable=True)
gang_dag(
    "gang_evicted_resumes",
    duration=40,
    preemptible=True,
    checkpoint="s3://bucket/ckpt",
    logs=["attempt ${FEDSCHED_CLUSTER_ATTEMPT} resume=${FEDSCHED_RESUME}"],
)
gang_dag("gang_bad_parallelism", parallelism=0)

# Its cluster stops answering while the gang runs (tests/operators/test_federated_job.py, Outage).
for _mode, _deferrable in (("sync", False), ("deferrable", True)):
    gang_dag(f"gang_outage_short_{_mode}", duration=40, unreachable_grace=60, deferrable=_deferrable)
    gang_dag(f"gang_outage_lost_{_mode}", duration=600, unreachable_grace=3, deferrable=_deferrable)
    gang_dag(
        f"gang_outage_preemptible_{_mode}",
        duration=40,
        preemptible=True,
        checkpoint="s3://bucket/ckpt",
        deferrable=_deferrable,
    )
# Try 1 is lost to the outage; try 2 adopts try 1's Job (the cluster answers again as try 2 looks for it).
for _name, _duration in (("gang_retry_adopts_running", 300), ("gang_retry_adopts_complete", 60)):
    gang_dag(
        _name,
        operator=_LooksForEarlierJobOperator,
        duration=_duration,
        unreachable_grace=3,
        retries=1,
        retry_delay=timedelta(seconds=1),
        logs=["gang work done"],
    )
# Deferred between polls, then ended by a user (its timer trigger deletes nothing): the sweep deletes it.
gang_dag("gang_deferred_ended", duration=36000, deferrable=True)
# Try 1 is lost to the outage; its Job completes while its cluster is silent and is then swept (deleted,
# or held being deleted) before try 2 looks: try 2 takes its success, never runs the gang again. Try 2
# looks for try 1's Job once the test has swept it (BEFORE_LOOKING_FOR_EARLIER), not after a delay.
for _name in ("gang_retry_after_sweep", "gang_retry_finds_it_being_deleted"):
    gang_dag(
        _name,
        operator=_LooksForEarlierJobOperator,
        duration=60,
        unreachable_grace=3,
        retries=1,
        retry_delay=timedelta(seconds=1),
    )
# Ended by a user (on_kill) while its Job runs; deleted by someone else while it runs (not preemptible).
gang_dag("gang_killed_while_running", duration=600)
gang_dag("gang_deleted_by_someone", duration=600)
# Its worker is SIGKILLed while the gang runs; the Job completes unwatched; its cluster goes silent.
gang_dag(
    "gang_killed_preemptible",
    duration=40,
    preemptible=True,
    checkpoint="s3://bucket/ckpt",
    unreachable_grace=120,
)


# Divided Indexed Jobs (issue 31): one slice per member, by its room (tests/operators/test_federated_job.py).
def divided_dag(
    dag_id: str,
    duration: float = 20,
    operator: type[FederatedKubernetesJobOperator] = FederatedKubernetesJobOperator,
    **operator_args: Any,
) -> DAG:
    args: dict[str, Any] = {"completions": 40, "parallelism": 40, "retries": 0, **operator_args}
    with dag_named(dag_id) as dag:
        operator(
            task_id="work",
            name="shards",
            image="busybox:1.36",
            cmds=["sh", "-c", "true"],
            namespace="default",
            container_resources=k8s.V1ResourceRequirements(requests={"cpu": "1", "memory": "64Mi"}),
            completion_mode="Indexed",
            divide=True,
            backoff_limit=0,
            job_poll_interval=0.3,
            unschedulable_grace_seconds=3,
            annotations={"sim.fedsched.io/duration": str(duration)},
            **args,
        )
    return dag


divided_dag("divided_by_room")
divided_dag("divided_killed_while_running", duration=3600)
divided_dag("divided_member_refuses", duration=100)
divided_dag("divided_outage_short", duration=40, unreachable_grace=60)
divided_dag("divided_outage_lost", duration=600, unreachable_grace=3)
divided_dag("divided_quota_refuses", duration=20)
# user-events may go to cn-east-1 and cn-north-1 only: west-general's room (the most) is never dealt a slice.
divided_dag("divided_sovereign", duration=20, datasets=["user-events"])
# Try 1 is lost to east-cpu's outage past the grace; try 2 (east answers as it looks) never runs again an
# index try 1 saw succeed or that east's Job shows succeeded.
divided_dag(
    "divided_retry_keeps_done",
    duration=10,
    operator=_LooksForEarlierJobOperator,
    unreachable_grace=3,
    retries=1,
    retry_delay=timedelta(seconds=1),
)
