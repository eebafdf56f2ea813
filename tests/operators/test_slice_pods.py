"""What the task log says of a divided Job's slice when it ends (operators/divided.slice_pods): where each
of its global indices ran and how it ended, from the slice's last read of its Job and pods."""

from __future__ import annotations

from typing import Any

from airflow_provider_fedsched.kube.jobs import GangView
from airflow_provider_fedsched.operators.divided import COMPLETION_INDEX_LABEL, slice_pods


def pod(position: Any, node: str | None, phase: str) -> dict[str, Any]:
    return {
        "metadata": {"labels": {COMPLETION_INDEX_LABEL: str(position)}},
        "spec": {"nodeName": node} if node else {},
        "status": {"phase": phase},
    }


def job(completed: str = "", completions: int = 6) -> dict[str, Any]:
    return {"spec": {"completions": completions}, "status": {"completedIndexes": completed}}


def test_each_index_is_told_by_node_and_phase_in_global_indices() -> None:
    indices = (20, 21, 22, 23, 24, 25)  # the slice 20-25: its pods see 0..5
    view = GangView(
        job=job(completed="0-1"),
        pods=[
            pod(0, "node-a", "Succeeded"),
            pod(1, "node-a", "Succeeded"),
            pod(2, "node-b", "Running"),
            pod(3, "node-b", "Failed"),
            pod(4, None, "Pending"),
            pod("not-an-index", "node-b", "Running"),  # not the Job controller's: left out
            pod(99, "node-b", "Running"),  # outside the slice: left out
        ],
    )

    assert slice_pods(view, indices) == (
        "on no node: 24 Pending; on node-a: 20-21 Succeeded; on node-b: 23 Failed, 22 Running; 25 no pod"
    )


def test_indices_whose_pods_are_gone_are_told_from_the_job_s_completed_indexes() -> None:
    view = GangView(job=job(completed="0-2,4", completions=5), pods=[pod(3, "node-a", "Running")])

    assert slice_pods(view, (0, 1, 2, 3, 4)) == "on node-a: 3 Running; 0-2,4 Succeeded (pods gone)"
    assert slice_pods(None, (0, 1)) == "never read"


def test_a_pod_bound_to_a_node_that_has_not_ended_is_waited_for_before_its_slice_is_taken() -> None:
    """A retry deletes an earlier slice's Job only once no pod of it that started is still running: a pod
    deleted while it runs may end Succeeded before it goes (kwok did, on the test bed), and its index
    would run twice."""
    from airflow_provider_fedsched.operators.divided import _started_and_running

    def pod(phase: str, node: str | None, deleting: bool = False) -> dict[str, object]:
        metadata = {"deletionTimestamp": "2026-12-04T21:00:00Z"} if deleting else {}
        return {"metadata": metadata, "spec": {"nodeName": node} if node else {}, "status": {"phase": phase}}

    assert _started_and_running(pod("Running", "n1"))
    assert _started_and_running(pod("Pending", "n1"))  # bound: its containers are being started
    assert _started_and_running(pod("Running", "n1", deleting=True))  # may still end Succeeded
    assert not _started_and_running(pod("Pending", None))  # never started: deleting it runs nothing
    assert not _started_and_running(pod("Succeeded", "n1"))
    assert not _started_and_running(pod("Failed", "n1"))
