"""Node NotReady on a real control plane: lease expiry, the node lifecycle controller's taints, the taint
manager's eviction, and the operator failing over with a checkpoint resume."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_fedsched.sim import wait_for
from airflow_provider_fedsched.testbed import TestbedFederation
from tests import airflow_harness
from tests.operators.test_federated_operator import background, path, pods_of, xcom  # noqa: F401 - fixture

DAG_FILE = Path(__file__).parent / "dags" / "conformance_dags.py"
pytestmark = [pytest.mark.airflow, pytest.mark.integration]


def test_node_not_ready_taint_eviction_fails_over_with_checkpoint(
    sim_federation: TestbedFederation,
    federation: Path,
    background: Callable[[Callable[[], None]], None],  # noqa: F811 - the fixture imported above
    capfd: pytest.CaptureFixture[str],
) -> None:
    lost: list[tuple[str, str]] = []

    def lose_the_node_of_the_first_attempt() -> None:
        def running_first_attempt() -> tuple[str, dict[str, Any]] | None:
            for name, handle in sim_federation.handles.items():
                for pod in handle.pods():
                    labels = pod["metadata"].get("labels") or {}
                    if (
                        labels.get("dag_id") == "fed_not_ready_resumes"
                        and labels.get("fedsched.io/cluster-attempt") == "1"
                        and pod["status"].get("phase") == "Running"
                    ):
                        return name, pod
            return None

        cluster, pod = wait_for(running_first_attempt, timeout=90)
        lost.append((cluster, pod["spec"]["nodeName"]))
        sim_federation[cluster].faults.node_not_ready(pod["spec"]["nodeName"])

    background(lose_the_node_of_the_first_attempt)
    try:
        dag_run = airflow_harness.run_dag(DAG_FILE, "fed_not_ready_resumes")
        state = airflow_harness.task_states(dag_run)["work"]
        raw = xcom(dag_run, "fedsched_placement")
        record = json.loads(raw) if isinstance(raw, str) else raw
    finally:
        for cluster, node in lost:
            sim_federation[cluster].faults.node_ready(node)

    assert state == "success" and record is not None
    (first, first_outcome), (second, second_outcome) = path(record)
    assert (first_outcome, second_outcome) == ("evicted", "succeeded") and first != second
    assert "DeletionByTaintManager" in record["attempts"][0]["reason"]
    assert record["attempts"][1]["resumed_from_checkpoint"] is True
    assert "attempt 2 resume=true" in capfd.readouterr().out
    wait_for(lambda: pods_of(sim_federation, "fed_not_ready_resumes") == [], timeout=60)
