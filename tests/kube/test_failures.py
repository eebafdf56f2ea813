"""Telling the cluster's problems (move on) from the task's own failure (fail the try)."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import airflow_provider_fedsched
from airflow_provider_fedsched.kube import failures
from airflow_provider_fedsched.kube.failures import (
    ClusterFailure,
    api_refusal,
    classify,
    describe_error,
    disappeared,
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


def test_an_api_refusal_is_told_with_the_servers_message_naming_the_permission() -> None:
    from kubernetes.client.exceptions import ApiException

    refused = ApiException(status=403, reason="Forbidden")
    message = (
        'pods is forbidden: User "system:serviceaccount:s:p" cannot create resource "pods" in API group ""'
    )
    refused.body = json.dumps({"kind": "Status", "reason": "Forbidden", "message": message, "code": 403})
    wrapped = RuntimeError("cleanup failed")
    wrapped.__context__ = refused

    assert api_refusal(refused) == f"403 Forbidden: {message}"
    assert api_refusal(wrapped) == f"403 Forbidden: {message}"
    assert api_refusal(ApiException(status=500, reason="boom")) is None  # no Status body
    assert api_refusal(ValueError("x")) is None


def test_a_cluster_failure_is_built_in_kube_failures_only() -> None:
    """One vocabulary: every other module names what it saw through the constructors of kube/failures.py
    (issue 28 item 3), so a kind and its wording are decided in one place."""
    package = Path(airflow_provider_fedsched.__file__).parent
    home = Path(failures.__file__).resolve()
    built_elsewhere = [
        f"{path.relative_to(package)}:{node.lineno}"
        for path in sorted(package.rglob("*.py"))
        if path.resolve() != home
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Call)
        and (getattr(node.func, "id", None) or getattr(node.func, "attr", None)) == "ClusterFailure"
    ]
    assert built_elsewhere == []


def test_the_named_constructors_say_what_the_steps_saw() -> None:
    assert disappeared("pod p-1") == ClusterFailure("unreachable", "pod p-1 disappeared before it ended")
    assert failures.unschedulable("0/3 nodes") == ClusterFailure("insufficient", "unschedulable: 0/3 nodes")
    assert failures.insufficient("not scheduled within 5s").kind == "insufficient"
    evicted = disruption({"status": {"reason": "Evicted", "message": "low on memory"}})
    assert evicted is not None
    member = evicted.of("member job-0-abc")
    assert (member.kind, member.reason) == ("evicted", "member job-0-abc: evicted: low on memory")
    assert member.resumable and not member.namespace_only and not member.permanent
