"""The baseline DAG of benchmarks/bench_operator.py: the pod through KubernetesPodOperator, bound to one
cluster. A file of its own, which imports nothing of this provider: a worker process running it pays
only for what KubernetesPodOperator needs (bench_federated_dag.py is the federated twin)."""

from __future__ import annotations

import sys
from datetime import datetime
from pathlib import Path
from typing import Any

from airflow.providers.cncf.kubernetes.operators.pod import KubernetesPodOperator
from airflow.sdk import DAG

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from operator_timing import POD, mark_execute_start


class TimedKubernetesPodOperator(KubernetesPodOperator):
    def execute(self, context: Any) -> Any:
        mark_execute_start()
        return super().execute(context)


with DAG("bench_kpo", start_date=datetime(2026, 1, 1), schedule=None):
    TimedKubernetesPodOperator(task_id="pod", kubernetes_conn_id="k8s_c00", namespace="default", **POD)
