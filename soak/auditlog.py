"""Each pod's life as a test-bed member's API server recorded it: its audit log, read as a journal.

The test bed's audit policy (``testbed/cluster.py``) writes every pod create and every write of a pod or
its status, whoever sends it (kwok playing the kubelet, the Job controller), with the pod as it then was,
and every pod delete, with the pod as the delete found it. From these the reader rebuilds, per pod, what
the simulator's execution journal says (``soak.audit.PodRun``): where it was bound (the node), when it
was created, when its containers started (the first write that shows a main container running), when they
ended (the first write that shows the pod Succeeded or Failed, with the main container's exit code; a pod
deleted while it ran ended when it left the API), and when it left the API.

``end_seen``: when the provider was first sent the pod's end. The audit log does not hold what a read
answered, so the reader takes the earliest moment one could have: any successful read of the provider's
identity of that pod (a get, its log) or of pods in its namespace (a list, a watch open at that time)
that finished after the pod ended counts as having been sent the end as soon as it had ended. This can
only make a pod's end seen earlier than it was, so that a pair of pods counts as a preemptible move less
often than it might: never more.

Pure reading: the soak calls it on the log files after the run.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

PROVIDER_USER = "system:serviceaccount:fedsched-system:fedsched-provider"
SIDECAR = "airflow-xcom-sidecar"
TERMINAL = ("Succeeded", "Failed")


def _at(stamp: str | None) -> float | None:
    if not stamp:
        return None
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


@dataclass
class _Pod:
    namespace: str
    name: str
    uid: str
    labels: dict[str, str]
    created_at: float
    node: str | None = None
    started_at: float | None = None
    ended_at: float | None = None
    phase: str = "Pending"
    exit_code: int | None = None
    reason: str | None = None
    deleted_at: float | None = None
    end_seen: dict[str, float] = field(default_factory=dict)

    def observe(self, pod: Mapping[str, Any], at: float) -> None:
        """A write's answer: the pod as it was at ``at``."""
        spec, status = pod.get("spec") or {}, pod.get("status") or {}
        self.node = spec.get("nodeName") or self.node
        self.labels = dict((pod.get("metadata") or {}).get("labels") or self.labels)
        mains = [c for c in status.get("containerStatuses") or [] if c.get("name") != SIDECAR]
        states = [c.get("state") or {} for c in mains]
        if self.started_at is None and any("running" in s or "terminated" in s for s in states):
            self.started_at = at
        phase = str(status.get("phase") or self.phase)
        if self.ended_at is None:
            if phase in TERMINAL:
                self.ended_at = at
                self.started_at = self.started_at if self.started_at is not None else at
            elif states and all("terminated" in s for s in states):  # the XCom sidecar still runs
                self.ended_at = at
        if self.ended_at is not None and self.exit_code is None:
            codes = [s["terminated"].get("exitCode") for s in states if "terminated" in s]
            failed = [c for c in codes if c not in (None, 0)]
            self.exit_code = failed[0] if failed else (0 if codes else None)
        self.phase = phase
        self.reason = status.get("reason") or self.reason

    def entry(self, cluster: str, present: bool) -> dict[str, Any]:
        ended = self.ended_at
        if ended is None and self.started_at is not None and not present:
            ended = self.deleted_at  # deleted while it ran: its containers stopped as it left the API
        outcome = None
        if self.ended_at is not None:
            outcome = "succeeded" if self.phase == "Succeeded" or self.exit_code == 0 else "failed"
        elif ended is not None:
            outcome = "deleted"
        return {
            "cluster": cluster,
            "namespace": self.namespace,
            "name": self.name,
            "uid": self.uid,
            "labels": self.labels,
            "node": self.node,
            "created_at": self.created_at,
            "started_at": self.started_at,
            "ended_at": ended,
            "removed_at": None if present else (self.deleted_at or ended or self.created_at),
            "phase": self.phase,
            "outcome": outcome,
            "exit_code": self.exit_code,
            "reason": self.reason,
            "running": False,  # kwok runs nothing once a pod has left the API
            "end_seen": self.end_seen,
        }


def events(paths: Iterable[Path]) -> list[dict[str, Any]]:
    """The finished requests of the given audit log files, in the order the API server wrote them."""
    out = []
    for path in paths:
        with path.open(errors="replace") as fh:
            for line in fh:
                if line.startswith("{"):
                    event = json.loads(line)
                    if event.get("stage") == "ResponseComplete":
                        out.append(event)
    out.sort(key=lambda e: e.get("stageTimestamp") or "")
    return out


def log_files(logs: Path) -> list[Path]:
    """``audit.log`` and the files the API server rotated it into (``audit-<time>.log``)."""
    return sorted(logs.glob("audit*.log"))


def journal(
    cluster: str, audit_events: Iterable[Mapping[str, Any]], present: Iterable[str], observed_at: float
) -> dict[str, Any]:
    """The cluster's journal in the simulator's shape (``pods``; no ``nodes``: kube-scheduler admits
    by requests, so a node is never over-committed). ``present``: uids of the pods still in the API
    when the log was read."""
    pods: dict[str, _Pod] = {}
    by_name: dict[tuple[str, str], str] = {}
    reads: list[tuple[str, str, str, float, float]] = []  # resource, namespace, name, from, to
    for event in audit_events:
        ref = event.get("objectRef") or {}
        code = int((event.get("responseStatus") or {}).get("code") or 0)
        if not 200 <= code < 300 or ref.get("apiGroup") not in (None, "", "batch"):
            continue
        at = _at(event.get("stageTimestamp"))
        assert at is not None
        resource, sub, verb = ref.get("resource"), ref.get("subresource") or "", event.get("verb")
        namespace, name = str(ref.get("namespace") or ""), str(ref.get("name") or "")
        user = (event.get("user") or {}).get("username")
        if user == PROVIDER_USER and verb in ("get", "list", "watch") and sub in ("", "log", "status"):
            received = _at(event.get("requestReceivedTimestamp")) or at
            reads.append((str(resource), namespace, name, received, at))
        if resource != "pods":
            continue
        answer = event.get("responseObject") or {}
        if answer.get("kind") == "Pod" and verb in ("create", "update", "patch"):
            meta = answer.get("metadata") or {}
            uid = str(meta.get("uid") or "")
            if not uid:
                continue
            if uid not in pods:
                pods[uid] = _Pod(
                    str(meta.get("namespace") or namespace),
                    str(meta.get("name") or name),
                    uid,
                    dict(meta.get("labels") or {}),
                    _at(meta.get("creationTimestamp")) or at,
                )
                by_name[(pods[uid].namespace, pods[uid].name)] = uid
            pods[uid].observe(answer, at)
        elif verb == "delete" and not sub:
            uid = by_name.get((namespace, name), "")
            if uid in pods:
                if answer.get("kind") == "Pod":
                    # The pod as the delete found it: a status write the API server answered 504 (its
                    # own timeout; the write may still land, and did in the test-bed soak at 1483d8e)
                    # is skipped above, and this is where its outcome shows.
                    pods[uid].observe(answer, at)
                pods[uid].deleted_at = at  # the last delete: the one that took it out of the API
    for pod in pods.values():
        if pod.ended_at is None:
            continue
        job = pod.labels.get("batch.kubernetes.io/job-name")
        for resource, namespace, name, received, finished in reads:
            if namespace not in ("", pod.namespace) or finished < pod.ended_at:
                continue
            if (resource == "pods" and name in ("", pod.name)) or (
                resource == "jobs" and job and name in ("", job)
            ):
                seen = max(received, pod.ended_at)
                pod.end_seen["provider"] = min(pod.end_seen.get("provider", seen), seen)
    still = set(present)
    return {
        "cluster": cluster,
        "observed_at": observed_at,
        "pods": [p.entry(cluster, p.uid in still) for p in pods.values()],
        "nodes": {},
    }
