"""Timestamps taken inside the benchmarked operators (imported by the DAGs of benchmarks/dags/)."""

from __future__ import annotations

import time
from typing import Any

from airflow.providers.cncf.kubernetes.callbacks import KubernetesPodOperatorCallback
from kubernetes.client import models as k8s

STAMPS: dict[str, float] = {}


class RecordRunning(KubernetesPodOperatorCallback):
    """Wall-clock time when the operator has seen its pod running (KubernetesPodOperator's own hook)."""

    @staticmethod
    def on_pod_starting(*, pod: Any, **kwargs: Any) -> None:
        STAMPS["running"] = time.time()


def mark_execute_start() -> None:
    STAMPS.clear()
    STAMPS["execute"] = time.time()


# The pod both benchmarked operators launch (1 cpu, 1 GiB, 0.2 s image start, 2 s run).
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
