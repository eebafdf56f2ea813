"""Telling the cluster's problems (move on) from the task's own failure (fail the try)."""

from __future__ import annotations

import json

from airflow_provider_fedsched.kube.failures import (
    classify,
    describe_error,
    disruption,
    is_connection_error,
    never_sent,
    quota_exceeded,
    unschedulable_message,
)

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


def test_a_request_above_the_hard_limit_can_never_fit() -> None:
    above = json.dumps(
        {
            "message": 'pods "p" is forbidden: exceeded quota: tight, requested: requests.cpu=2,'
            "requests.memory=1Gi, used: requests.cpu=0,requests.memory=0, limited: requests.cpu=1,"
            "requests.memory=8Gi"
        }
    )
    found = quota_exceeded(403, above)
    assert found is not None and found.permanent and found.namespace_only
    assert "above the quota's hard limit for requests.cpu" in found.reason
    below = quota_exceeded(
        403,
        '{"message": "exceeded quota: q, requested: requests.cpu=2, used: requests.cpu=3, '
        'limited: requests.cpu=4"}',
    )
    assert below is not None and not below.permanent


def test_classify_judges_from_the_fresh_read_not_from_a_timer() -> None:
    running = {"status": {"phase": "Running", "conditions": [{"type": "PodScheduled", "status": "True"}]}}
    pending = {"status": {"phase": "Pending", "conditions": []}}
    timeout = TimeoutError("the trigger's timer ran out")
    # A timer alone proves nothing: the pod ran meanwhile, so this is not the cluster's failure.
    assert classify([RuntimeError("pod failed")], running, timed_out=True) is None
    found = classify([RuntimeError("schedule timeout")], pending, timed_out=True, schedule_timeout=2)
    assert found is not None and found.kind == "insufficient" and found.reason == "not scheduled within 2s"
    unschedulable = classify([RuntimeError("x")], UNSCHEDULABLE)
    assert unschedulable is not None and unschedulable.reason.startswith("unschedulable: 0/3 nodes")
    unreachable = classify([timeout], None, server="https://10.0.0.1:6443")
    assert unreachable is not None and unreachable.kind == "unreachable"
    assert unreachable.reason == "no answer from https://10.0.0.1:6443"


def test_failure_reasons_a_person_understands() -> None:
    import urllib3.exceptions

    server = "https://east.example:6443"
    refused = urllib3.exceptions.MaxRetryError(
        None,  # type: ignore[arg-type]
        "/api/v1/namespaces/default/pods/p",
        urllib3.exceptions.NewConnectionError(
            None, "Failed to establish a new connection: [Errno 111] Connection refused"
        ),  # type: ignore[arg-type]
    )
    assert describe_error(refused, server) == f"connection refused at {server}"
    assert never_sent(refused) and is_connection_error(refused)
    reset = urllib3.exceptions.ProtocolError("Connection aborted.", ConnectionResetError(104, "reset"))
    assert describe_error(reset, server) == f"connection reset by {server}"
    assert is_connection_error(reset) and not never_sent(reset)
    read_timeout = urllib3.exceptions.ReadTimeoutError(None, "/", "Read timed out.")  # type: ignore[arg-type]
    assert describe_error(read_timeout, server, 10) == f"no answer from {server} within 10s"
    assert not never_sent(read_timeout)
    assert describe_error(ConnectionRefusedError(111, "refused"), server) == f"connection refused at {server}"
    assert not is_connection_error(ValueError("not a network problem"))
