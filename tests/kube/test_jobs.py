"""When a Job's gang's work is done (kube/jobs.py): what every deletion path reads before a Job goes, so
that a finished Job's success is written down and never run again."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_provider_fedsched.kube.jobs import GangView


def job(completions: int | None = 3, conditions: tuple[str, ...] = (), **status: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "gang", "namespace": "default"},
        "spec": {"parallelism": 3, **({"completions": completions} if completions is not None else {})},
        "status": {"conditions": [{"type": kind, "status": "True"} for kind in conditions], **status},
    }


def pods(*phases: str) -> list[dict[str, Any]]:
    return [{"metadata": {"name": f"gang-{i}"}, "status": {"phase": phase}} for i, phase in enumerate(phases)]


@pytest.mark.parametrize(
    ("view", "complete"),
    [
        (GangView(job(conditions=("Complete",))), True),
        (GangView(job(conditions=("SuccessCriteriaMet",))), True),  # before Complete, on Kubernetes 1.31+
        # The Job controller has not caught up (or the Job is being deleted): its pods say so.
        (GangView(job(), pods("Succeeded", "Succeeded", "Succeeded")), True),
        (GangView(job(succeeded=3)), True),
        (GangView(job(), pods("Succeeded", "Succeeded", "Running")), False),
        (GangView(job(conditions=("Failed",)), pods("Succeeded", "Succeeded", "Succeeded")), False),
        # Without completions, one success ends the Job once no pod runs.
        (GangView(job(None), pods("Succeeded", "Succeeded")), True),
        (GangView(job(None), pods("Succeeded", "Running")), False),
        (GangView(job(None, succeeded=1, active=1)), False),
        (GangView(None, pods("Succeeded", "Succeeded", "Succeeded")), False),  # no Job: not known
    ],
)
def test_a_job_is_complete_by_its_condition_or_by_enough_succeeded_pods(
    view: GangView, complete: bool
) -> None:
    assert view.complete is complete


def started(*stamps: tuple[str, str]) -> dict[str, Any]:
    return {
        "metadata": {"name": "gang-x"},
        "status": {
            "phase": "Succeeded",
            "containerStatuses": [
                {"name": "base", "state": {state: {"startedAt": at}}} for state, at in stamps
            ],
        },
    }


def test_a_gang_that_ended_between_two_reads_ran_from_its_first_container_start() -> None:
    # The running time, and so the cost, of a Job that was never seen running (divided slices, gangs).
    view = GangView(
        job(conditions=("Complete",)),
        [
            started(("terminated", "2026-12-06T07:31:00Z")),
            started(("running", "2026-12-06T07:30:58Z"), ("waiting", "2026-12-06T07:30:00Z")),
            {"metadata": {"name": "gang-pending"}, "status": {"phase": "Pending"}},
        ],
    )
    assert view.started_at is not None
    assert view.started_at.isoformat() == "2026-12-06T07:30:58+00:00"
    assert GangView(job(), pods("Pending")).started_at is None
    assert GangView(None).started_at is None
