"""Why a pod did not run to completion in its cluster, and whether that is the federation's business.

The operator moves a task to another cluster only for reasons that belong to the cluster, never for the
task's own failure (a non-zero exit code fails the try as KubernetesPodOperator would):

* ``insufficient``: the cluster cannot take the pod (quota 403 on create; Unschedulable past the grace).
* ``evicted``: the pod was evicted or preempted (reason ``Evicted``, a ``DisruptionTarget`` condition,
  a ``Preempted``/``Evicted``/``TaintManagerEviction`` event).
* ``unreachable``: the API server did not answer.
* ``misconfigured``: the cluster lacks what the pod needs from it (its namespace does not exist).

The functions read the API's JSON (dicts), so they are shared by the sync and deferrable paths.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from airflow_provider_fedsched.federation.record import FailureKind

DISRUPTION_EVENTS = frozenset({"Preempted", "Evicted", "TaintManagerEviction"})


@dataclass(frozen=True)
class ClusterFailure:
    """A reason to leave a cluster: what happened there, in the cluster's words."""

    kind: FailureKind
    reason: str
    namespace_only: bool = False
    """The problem is the namespace's (its quota, or it does not exist), not the whole cluster's."""

    @property
    def resumable(self) -> bool:
        """Evictions and preemptions interrupt work in progress: the next pod may resume a checkpoint."""
        return self.kind == "evicted"


def _conditions(pod: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return list((pod.get("status") or {}).get("conditions") or [])


def unschedulable_message(pod: Mapping[str, Any]) -> str | None:
    """The scheduler's message while the pod is Pending with ``PodScheduled=False/Unschedulable``."""
    status = pod.get("status") or {}
    if status.get("phase") not in (None, "Pending"):
        return None
    for condition in _conditions(pod):
        if (
            condition.get("type") == "PodScheduled"
            and condition.get("status") == "False"
            and condition.get("reason") == "Unschedulable"
        ):
            return str(condition.get("message") or "Unschedulable")
    return None


def disruption(
    pod: Mapping[str, Any] | None, events: Iterable[Mapping[str, Any]] = ()
) -> ClusterFailure | None:
    """An eviction or preemption seen on the pod or in its events, else None."""
    if pod is not None:
        status = pod.get("status") or {}
        if str(status.get("reason") or "").lower() == "evicted":
            return ClusterFailure("evicted", f"evicted: {status.get('message') or 'Evicted'}".strip())
        for condition in _conditions(pod):
            if condition.get("type") == "DisruptionTarget" and condition.get("status") == "True":
                why = condition.get("reason") or "DisruptionTarget"
                return ClusterFailure("evicted", f"{why}: {condition.get('message') or ''}".strip(": "))
    for event in events:
        reason = event.get("reason")
        if reason in DISRUPTION_EVENTS:
            return ClusterFailure("evicted", f"{reason}: {event.get('message') or ''}".strip(": "))
    return None


def quota_exceeded(status: int | None, body: str | bytes | None) -> ClusterFailure | None:
    """A 403 from admission because a ResourceQuota would be exceeded."""
    if status != 403 or not body:
        return None
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
    if "exceeded quota" not in text and "failed quota" not in text:
        return None
    try:
        import json

        message = json.loads(text).get("message") or text
    except ValueError:
        message = text
    return ClusterFailure("insufficient", f"quota: {message}", namespace_only=True)


def missing_namespace(status: int | None, body: str | bytes | None) -> ClusterFailure | None:
    """A 404 on create because the namespace does not exist in this cluster."""
    if status != 404 or not body:
        return None
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
    if '"kind":"namespaces"' not in text.replace(" ", "") and "namespaces " not in text:
        return None
    try:
        import json

        message = json.loads(text).get("message") or text
    except ValueError:
        message = text
    return ClusterFailure("misconfigured", str(message), namespace_only=True)
