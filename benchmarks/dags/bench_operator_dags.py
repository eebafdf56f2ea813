"""DAGs for benchmarks/bench_operator.py: the same pod through KubernetesPodOperator and the federated one."""

from __future__ import annotations

import sys
from datetime import datetime
from pathlib import Path
from typing import Any

from airflow.providers.cncf.kubernetes.operators.pod import KubernetesPodOperator
from airflow.sdk import DAG
from kubernetes.client import models as k8s

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from operator_timing import RecordRunning, mark_execute_start

from airflow_provider_fedsched.operators.federated_pod import FederatedKubernetesOperator

POD: dict[str, Any] = {
    "image": "busybox:1.36",
    "cmds": ["sh", "-c", "true"],
    "container_resources": k8s.V1ResourceRequirements(requests={"cpu": "1", "memory": "1Gi"}),
    "annotations": {"sim.fedsched.io/duration": "2", "sim.fedsched.io/startup-delay": "0.2"},
    "get_logs": False,
    "callbacks": [RecordRunning],
    # Both operators check a starting pod every 0.5 s (the federated one does so by default).
    "startup_check_interval_seconds": 0.5,
}


class TimedKubernetesPodOperator(KubernetesPodOperator):
    def execute(self, context: Any) -> Any:
        mark_execute_start()
        return super().execute(context)


class TimedFederatedKubernetesOperator(FederatedKubernetesOperator):
    def execute(self, context: Any) -> Any:
        mark_execute_start()
        return super().execute(context)


with DAG("bench_kpo", start_date=datetime(2026, 1, 1), schedule=None):
    TimedKubernetesPodOperator(task_id="pod", kubernetes_conn_id="k8s_c00", namespace="default", **POD)

with DAG("bench_federated", start_date=datetime(2026, 1, 1), schedule=None):
    TimedFederatedKubernetesOperator(task_id="pod", unschedulable_grace_seconds=0, **POD)
