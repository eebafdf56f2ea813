"""Telling the cluster's problems (move on) from the task's own failure (fail the try)."""

from __future__ import annotations

import json

from airflow_provider_fedsched.kube.failures import disruption, quota_exceeded, unschedulable_message

UNSCHEDULABLE = {
    "status": {
        "phase": "Pending",
        "conditions": [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": "0/3 nodes are available: 3 Insufficient cpu.",
            }
        ],
    }
}


def test_unschedulable_message_is_the_schedulers() -> None:
    assert unschedulable_message(UNSCHEDULABLE) == "0/3 nodes are available: 3 Insufficient cpu."
    assert unschedulable_message({"status": {"phase": "Running"}}) is None
    assert unschedulable_message({"status": {"phase": "Pending", "conditions": []}}) is None


def test_node_pressure_eviction() -> None:
    pod = {
        "status": {"phase": "Failed", "reason": "Evicted", "message": "The node was low on resource: memory."}
    }
    found = disruption(pod)
    assert found is not None and found.kind == "evicted" and found.resumable
    assert "low on resource: memory" in found.reason


def test_disruption_target_condition_and_preempted_event() -> None:
    pod = {
        "status": {
            "phase": "Running",
            "conditions": [{"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}],
        }
    }
    found = disruption(pod)
    assert found is not None and found.reason.startswith("PreemptionByScheduler")
    gone = disruption(
        None, [{"reason": "Scheduled"}, {"reason": "Preempted", "message": "Preempted by pod x"}]
    )
    assert gone is not None and gone.reason == "Preempted: Preempted by pod x"


def test_a_failed_container_is_not_a_disruption() -> None:
    pod = {
        "status": {
            "phase": "Failed",
            "containerStatuses": [{"name": "base", "state": {"terminated": {"exitCode": 1}}}],
        }
    }
    assert disruption(pod, [{"reason": "Started"}, {"reason": "BackOff"}]) is None


def test_quota_403_is_insufficient_but_other_403s_are_not() -> None:
    body = json.dumps(
        {
            "kind": "Status",
            "code": 403,
            "reason": "Forbidden",
            "message": 'pods "p" is forbidden: exceeded quota: q, requested: requests.cpu=2, '
            "used: requests.cpu=3, limited: requests.cpu=4",
        }
    )
    found = quota_exceeded(403, body)
    assert found is not None and found.kind == "insufficient" and "exceeded quota: q" in found.reason
    assert quota_exceeded(403, '{"message": "pods is forbidden: User cannot create"}') is None
    assert quota_exceeded(409, body) is None
