"""The federated DAG of benchmarks/bench_operator.py: the same pod as bench_kpo_dag.py, placed by
FederatedKubernetesOperator among the federation's clusters."""

from __future__ import annotations

import sys
from datetime import datetime
from pathlib import Path
from typing import Any

from airflow.sdk import DAG

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from operator_timing import POD, mark_execute_start

from airflow_provider_fedsched.operators.federated_pod import FederatedKubernetesOperator


class TimedFederatedKubernetesOperator(FederatedKubernetesOperator):
    def execute(self, context: Any) -> Any:
        mark_execute_start()
        return super().execute(context)


with DAG("bench_federated", start_date=datetime(2026, 1, 1), schedule=None):
    TimedFederatedKubernetesOperator(task_id="pod", unschedulable_grace_seconds=0, **POD)
