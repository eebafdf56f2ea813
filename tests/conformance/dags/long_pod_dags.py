"""Airflow DAGs of pods that run for minutes, as real ones do, with their logs followed.

Each DAG has one task whose pod prints ``LINES`` lines spread over its run (the test bed writes a
container's output while it runs), with silences longer than the operator's log read timeout on the
longest pods: sync and deferrable, 45 s, 75 s and 5 minutes.
"""

from __future__ import annotations

import json
from datetime import datetime

from airflow.sdk import DAG
from kubernetes.client import models as k8s

from airflow_provider_fedsched.operators.federated_pod import FederatedKubernetesOperator

SECONDS = (45, 75, 300)
LINES = 4


def dag_id(mode: str, seconds: int) -> str:
    return f"long_{mode}_{seconds}s"


def lines(mode: str, seconds: int) -> list[str]:
    return [f"{dag_id(mode, seconds)} line {n} of {LINES}" for n in range(1, LINES + 1)]


for _seconds in SECONDS:
    for _mode in ("sync", "deferrable"):
        with DAG(
            dag_id(_mode, _seconds), start_date=datetime(2026, 1, 1), schedule=None, catchup=False
        ) as _dag:
            FederatedKubernetesOperator(
                task_id="work",
                name=dag_id(_mode, _seconds).replace("_", "-"),
                image="busybox:1.36",
                cmds=["sh", "-c", "true"],
                get_logs=True,
                deferrable=_mode == "deferrable",
                container_resources=k8s.V1ResourceRequirements(requests={"cpu": "1", "memory": "1Gi"}),
                annotations={
                    "sim.fedsched.io/duration": str(_seconds),
                    "sim.fedsched.io/logs": json.dumps(lines(_mode, _seconds)),
                },
            )
        globals()[dag_id(_mode, _seconds)] = _dag
