"""DAGs for benchmarks/bench_failover.py: the same pod, its cluster dies while it runs."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from airflow.providers.cncf.kubernetes.operators.pod import KubernetesPodOperator
from airflow.sdk import DAG
from kubernetes.client import models as k8s

from airflow_provider_fedsched.operators.federated_pod import FederatedKubernetesOperator

POD: dict[str, Any] = {
    "image": "busybox:1.36",
    "cmds": ["sh", "-c", "true"],
    "container_resources": k8s.V1ResourceRequirements(requests={"cpu": "1", "memory": "1Gi"}),
    "annotations": {"sim.fedsched.io/duration": "8", "sim.fedsched.io/logs": '["working"]'},
    "get_logs": True,
}

with DAG("bench_failover_kpo", start_date=datetime(2026, 1, 1), schedule=None):
    KubernetesPodOperator(task_id="pod", kubernetes_conn_id="k8s_c00", namespace="default", **POD)

with DAG("bench_failover_federated", start_date=datetime(2026, 1, 1), schedule=None):
    FederatedKubernetesOperator(
        task_id="pod", clusters=["c00", "c01"], preemptible=True, checkpoint="s3://b/ckpt", **POD
    )
