"""The test bed's audit log read as a journal (``soak.auditlog``): synthetic events in the API server's
shape pin each rule; the soak's own runs read real ones."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from soak.auditlog import PROVIDER_USER, events, journal

T0 = 1_700_000_000.0


def stamp(seconds: float) -> str:
    return datetime.fromtimestamp(T0 + seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def pod_object(
    name: str, uid: str, phase: str = "Pending", node: str | None = None, containers: list[Any] | None = None
) -> dict[str, Any]:
    return {
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "soak",
            "uid": uid,
            "labels": {"fedsched-soak/task": "t.0"},
            "creationTimestamp": stamp(0)[:19] + "Z",
        },
        "spec": {"nodeName": node} if node else {},
        "status": {"phase": phase, "containerStatuses": containers or []},
    }


def write(
    at: float,
    verb: str,
    obj: dict[str, Any] | None,
    user: str = "kwok",
    sub: str = "",
    name: str = "p",
    code: int = 200,
    received: float | None = None,
    resource: str = "pods",
) -> dict[str, Any]:
    ref = {"resource": resource, "namespace": "soak", "name": name, "apiVersion": "v1"}
    if sub:
        ref["subresource"] = sub
    event: dict[str, Any] = {
        "stage": "ResponseComplete",
        "verb": verb,
        "user": {"username": user},
        "objectRef": ref,
        "responseStatus": {"code": code},
        "requestReceivedTimestamp": stamp(at if received is None else received),
        "stageTimestamp": stamp(at),
    }
    if obj is not None:
        event["responseObject"] = obj
    return event


RUNNING = [{"name": "base", "state": {"running": {"startedAt": "x"}}}]
DONE = [{"name": "base", "state": {"terminated": {"exitCode": 0}}}]
FAILED = [{"name": "base", "state": {"terminated": {"exitCode": 3}}}]


def test_a_pods_life_from_its_writes_and_deletes() -> None:
    log = [
        write(1, "create", pod_object("p", "u1"), user=PROVIDER_USER, code=201),
        write(2, "patch", pod_object("p", "u1", "Pending", "n1"), sub="status"),
        write(3, "patch", pod_object("p", "u1", "Running", "n1", RUNNING), sub="status"),
        write(20, "patch", pod_object("p", "u1", "Succeeded", "n1", DONE), sub="status"),
        write(21, "delete", None, user=PROVIDER_USER),
        write(22, "delete", None),
    ]
    (entry,) = journal("east", log, present=[], observed_at=T0 + 30)["pods"]
    assert entry["node"] == "n1" and entry["outcome"] == "succeeded" and entry["exit_code"] == 0
    assert (entry["started_at"] - T0, entry["ended_at"] - T0, entry["removed_at"] - T0) == (3, 20, 22)
    assert entry["labels"] == {"fedsched-soak/task": "t.0"} and not entry["running"]


def test_a_pod_deleted_while_it_ran_ended_when_it_left_the_api_and_one_still_there_is_not_removed() -> None:
    log = [
        write(1, "create", pod_object("p", "u1"), user=PROVIDER_USER, code=201),
        write(3, "patch", pod_object("p", "u1", "Running", "n1", RUNNING), sub="status"),
        write(9, "delete", None),
        write(10, "create", pod_object("q", "u2"), user=PROVIDER_USER, name="q", code=201),
        write(11, "patch", pod_object("q", "u2", "Running", "n2", RUNNING), sub="status", name="q"),
        write(12, "patch", pod_object("q", "u2", "Failed", "n2", FAILED), sub="status", name="q"),
    ]
    found = {p["name"]: p for p in journal("east", log, present=["u2"], observed_at=T0 + 30)["pods"]}
    assert found["p"]["ended_at"] - T0 == 9 and found["p"]["outcome"] == "deleted"
    assert found["q"]["removed_at"] is None and found["q"]["outcome"] == "failed"
    assert found["q"]["exit_code"] == 3


def test_the_provider_is_taken_to_have_seen_an_end_by_its_first_read_that_could_have_carried_it() -> None:
    log = [
        write(1, "create", pod_object("p", "u1"), user=PROVIDER_USER, code=201),
        write(3, "patch", pod_object("p", "u1", "Running", "n1", RUNNING), sub="status"),
        write(8, "get", None, user=PROVIDER_USER),  # before the end
        write(12, "get", None, user="fedsched-admin"),  # the soak's own read
        write(15, "list", None, user=PROVIDER_USER, name="", code=500),  # no answer
        write(30, "watch", None, user=PROVIDER_USER, name="", received=2),  # open across the end
        write(10, "patch", pod_object("p", "u1", "Succeeded", "n1", DONE), sub="status"),
    ]
    (entry,) = journal("east", sorted(log, key=lambda e: e["stageTimestamp"]), [], T0 + 40)["pods"]
    assert entry["end_seen"]["provider"] - T0 == 10  # the watch was open when it ended
    (entry,) = journal("east", [e for e in log if e["verb"] != "watch"], [], T0 + 40)["pods"]
    assert entry["end_seen"] == {}


def test_events_reads_finished_requests_in_order(tmp_path: Path) -> None:
    path = tmp_path / "audit.log"
    late, early = write(5, "get", None), write(2, "get", None)
    started = {**early, "stage": "RequestReceived"}
    path.write_text("\n".join(json.dumps(e) for e in (late, early, started)) + "\n")
    assert [e["stageTimestamp"] for e in events([path])] == [stamp(2), stamp(5)]


def test_a_status_write_answered_504_that_landed_shows_in_the_pod_the_delete_found() -> None:
    """The LocalExecutor test-bed soak at 1483d8e, ``sync_plain[11]``: kwok's write of the pod's end was
    answered 504 as its kube-apiserver came back from a SIGSTOP, yet landed (etcd held the pod Succeeded
    at the next revision); the provider's sweep read it Succeeded and deleted it. The journal takes the
    end from the pod the delete found, not "deleted while running"."""
    log = [
        write(1, "create", pod_object("p", "u1"), user=PROVIDER_USER, code=201),
        write(3, "patch", pod_object("p", "u1", "Running", "n1", RUNNING), sub="status"),
        write(60, "patch", {"kind": "Status", "code": 504}, sub="status", code=504),
        write(64, "delete", pod_object("p", "u1", "Succeeded", "n1", DONE), user=PROVIDER_USER),
    ]
    (entry,) = journal("east", log, present=[], observed_at=T0 + 70)["pods"]
    assert (entry["outcome"], entry["exit_code"], entry["phase"]) == ("succeeded", 0, "Succeeded")
    assert entry["ended_at"] == T0 + 64  # no earlier than the write the cluster confirmed


def test_a_pod_the_delete_found_running_was_deleted_while_it_ran() -> None:
    log = [
        write(1, "create", pod_object("p", "u1"), user=PROVIDER_USER, code=201),
        write(3, "patch", pod_object("p", "u1", "Running", "n1", RUNNING), sub="status"),
        write(30, "delete", pod_object("p", "u1", "Running", "n1", RUNNING), user=PROVIDER_USER),
    ]
    (entry,) = journal("east", log, present=[], observed_at=T0 + 40)["pods"]
    assert entry["outcome"] == "deleted" and entry["phase"] == "Running"
