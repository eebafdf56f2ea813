"""Timestamps taken inside the benchmarked operators (imported by benchmarks/dags/bench_operator_dags.py)."""

from __future__ import annotations

import time
from typing import Any

from airflow.providers.cncf.kubernetes.callbacks import KubernetesPodOperatorCallback

STAMPS: dict[str, float] = {}


class RecordRunning(KubernetesPodOperatorCallback):
    """Wall-clock time when the operator has seen its pod running (KubernetesPodOperator's own hook)."""

    @staticmethod
    def on_pod_starting(*, pod: Any, **kwargs: Any) -> None:
        STAMPS["running"] = time.time()


def mark_execute_start() -> None:
    STAMPS.clear()
    STAMPS["execute"] = time.time()
