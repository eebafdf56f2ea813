"""The soak's DAG: one dynamically mapped FederatedKubernetesOperator per group of the soak's manifest.

The manifest (``FEDSCHED_SOAK_MANIFEST``, written by ``python -m soak``) says, for every map index, which
datasets the task reads, how long its pod runs and its exit code; the simulated kubelet acts them out
through the ``sim.fedsched.io/*`` annotations (and the test bed's kwok nodes, through the same ones). A
group with ``gang`` is a FederatedKubernetesJobOperator: one Job of that many pods per task.
"""

from __future__ import annotations

import inspect
import json
import os
from datetime import timedelta
from pathlib import Path
from typing import Any

from airflow.sdk import DAG
from kubernetes.client import models as k8s

from airflow_provider_fedsched.operators.federated_job import FederatedKubernetesJobOperator
from airflow_provider_fedsched.operators.federated_pod import FederatedKubernetesOperator

TASK_LABEL = "fedsched-soak/task"
_ACCEPTS = set(inspect.signature(FederatedKubernetesOperator.__init__).parameters)

manifest = json.loads(Path(os.environ["FEDSCHED_SOAK_MANIFEST"]).read_text())

with DAG(
    dag_id=manifest["dag_id"],
    schedule=None,
    catchup=False,
    max_active_runs=1,
    max_active_tasks=512,
    tags=["fedsched", "soak"],
):
    for group in manifest["groups"]:
        tasks = [t for t in manifest["tasks"] if t["task_id"] == group["task_id"]]
        extra: dict[str, Any] = {}
        if (
            "unreachable_grace" in _ACCEPTS
        ):  # the delivery contract's per-task grace, when the operator has it
            extra["unreachable_grace"] = timedelta(seconds=manifest["unreachable_grace"])
        if group.get("gang"):
            # A gang: one Job of ``gang`` pods, all in one cluster (the Job controller makes the pods).
            extra.update(
                parallelism=group["gang"], completions=group["gang"], backoff_limit=0, job_poll_interval=2.0
            )
        else:
            extra.update(deferrable=group["deferrable"], get_logs=True)
        operator = FederatedKubernetesJobOperator if group.get("gang") else FederatedKubernetesOperator
        operator.partial(
            task_id=group["task_id"],
            name=group["task_id"].replace("_", "-"),
            image="busybox:1.36",
            cmds=["sh", "-c"],
            arguments=["run-soak-work"],
            namespace=group["namespace"],
            preemptible=group["preemptible"],
            checkpoint=(
                "memory://soak/{{ ti.task_id }}/{{ ti.map_index }}" if group["preemptible"] else None
            ),
            container_resources=k8s.V1ResourceRequirements(
                requests={"cpu": group["cpu"], "memory": "256Mi"}, limits={"memory": "256Mi"}
            ),
            expected_duration=timedelta(seconds=20),
            wait_timeout=timedelta(seconds=group["wait_timeout"]),
            unschedulable_grace_seconds=20.0,
            retries=group["retries"],
            retry_delay=timedelta(seconds=5),
            **extra,
        ).expand_kwargs(
            [
                {
                    "datasets": task["datasets"],
                    "labels": {TASK_LABEL: f"{task['task_id']}.{task['map_index']}"},
                    "annotations": {
                        "sim.fedsched.io/duration": str(task["duration"]),
                        "sim.fedsched.io/exit-code": str(task["exit_code"]),
                        "sim.fedsched.io/logs": json.dumps(
                            [
                                f"soak {task['task_id']}.{task['map_index']} on ${{FEDSCHED_CLUSTER}}",
                                "working",
                                f"soak {task['task_id']}.{task['map_index']} done (exit {task['exit_code']})",
                            ]
                        ),
                    },
                }
                for task in tasks
            ]
        )
