"""One cluster attempt's pod, the earlier tries' pods a new try adopts, and a task process that never
outlives its supervisor."""

from __future__ import annotations

import copy
import os
import signal
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from kubernetes.client import models as k8s

from airflow_provider_fedsched.federation.record import Attempt, PlacementRecord
from airflow_provider_fedsched.kube.failures import disruption
from airflow_provider_fedsched.kube.labels import (
    ATTEMPT_LABEL,
    CLUSTER_LABEL,
    PLACEMENT_LABEL,
    TASK_LABEL,
    TRY_LABEL,
    task_digest,
)
from airflow_provider_fedsched.kube.pods import as_dict

DECISION_ANNOTATION = "fedsched.io/decision"
ENV_CLUSTER = "FEDSCHED_CLUSTER"
ENV_ATTEMPT = "FEDSCHED_CLUSTER_ATTEMPT"
ENV_CHECKPOINT = "FEDSCHED_CHECKPOINT"
ENV_RESUME = "FEDSCHED_RESUME"


def record_digest(record: PlacementRecord) -> str:
    return task_digest(record.dag_id, record.run_id, record.task_id, record.map_index)


def new_attempt(record: PlacementRecord, decision: Any, cluster: str, namespace: str, name: str) -> Attempt:
    """The next attempt of the try, on the decision's cluster."""
    number = len(record.attempts) + 1
    extra = getattr(decision, "extra", None) or {}
    estimate = extra.get("cost", {}).get("estimate", {})
    preferred = extra.get("preferred_node")
    return Attempt(
        tenant=decision.extra.get("tenant") if estimate else None,
        price_per_hour=float(estimate.get("per_hour", 0.0)),
        egress_gb=float(estimate.get("egress_gb", 0.0)),
        egress_cost=float(estimate.get("egress_cost", 0.0)),
        number=number,
        cluster=cluster,
        namespace=namespace,
        pod=name if number == 1 else f"{name[:58]}-c{number}",
        placement_id=record.placement_id(number),
        started_at=datetime.now(UTC),
        # An earlier pod that may have run (evicted, or left while unanswered) may have left a checkpoint.
        resumed_from_checkpoint=any(a.outcome in ("evicted", "unreachable") for a in record.attempts),
        decision=str(decision.reason)[:500],
        preferred_node=preferred if isinstance(preferred, str) and preferred else None,
    )


def attempt_pod(
    template: k8s.V1Pod,
    record: PlacementRecord,
    attempt: Attempt,
    *,
    base_container: str,
    checkpoint: str | None,
) -> k8s.V1Pod:
    """The pod of ``attempt``: the task's pod, in the attempt's namespace, labelled (task instance, try,
    placement) and told where it runs and whether it resumes from a checkpoint. Deterministic, so a
    reattach rebuilds the same pod."""
    pod = copy.deepcopy(template)
    pod.metadata.name, pod.metadata.namespace = attempt.pod, attempt.namespace
    pod.metadata.labels = {
        **(pod.metadata.labels or {}),
        PLACEMENT_LABEL: attempt.placement_id,
        CLUSTER_LABEL: attempt.cluster,
        ATTEMPT_LABEL: str(attempt.number),
        TASK_LABEL: record_digest(record),
        TRY_LABEL: str(record.try_number),
        "airflow_kpo_in_cluster": "False",
    }
    pod.metadata.annotations = {
        **(pod.metadata.annotations or {}),
        DECISION_ANNOTATION: attempt.decision[:1000],
    }
    env = [
        k8s.V1EnvVar(name=ENV_CLUSTER, value=attempt.cluster),
        k8s.V1EnvVar(name=ENV_ATTEMPT, value=str(attempt.number)),
        k8s.V1EnvVar(name=ENV_RESUME, value="true" if attempt.resumed_from_checkpoint else "false"),
    ]
    if checkpoint:
        env.append(k8s.V1EnvVar(name=ENV_CHECKPOINT, value=str(checkpoint)))
    names = {var.name for var in env}
    base = next(c for c in pod.spec.containers if c.name == base_container)
    base.env = [var for var in (base.env or []) if var.name not in names] + env
    if attempt.preferred_node:
        _prefer_node(pod, attempt.preferred_node)
    return pod


PREFERRED_NODE_WEIGHT = 100
"""The largest preferred-affinity weight: the member's scheduler takes the node when it fits, as the
decision's ``Fragmentation`` score expects, and chooses another when it does not."""


def _prefer_node(pod: k8s.V1Pod, node: str) -> None:
    """Add a preferred node affinity for ``node`` (by name, ``metadata.name``), keeping the template's
    own affinity: a preference, never ``nodeName``, so the member's scheduler still decides."""
    spec = pod.spec
    affinity = spec.affinity or k8s.V1Affinity()
    node_affinity = affinity.node_affinity or k8s.V1NodeAffinity()
    preferred = list(node_affinity.preferred_during_scheduling_ignored_during_execution or [])
    preferred.append(
        k8s.V1PreferredSchedulingTerm(
            weight=PREFERRED_NODE_WEIGHT,
            preference=k8s.V1NodeSelectorTerm(
                match_fields=[
                    k8s.V1NodeSelectorRequirement(key="metadata.name", operator="In", values=[node])
                ]
            ),
        )
    )
    node_affinity.preferred_during_scheduling_ignored_during_execution = preferred
    affinity.node_affinity = node_affinity
    spec.affinity = affinity


_RANK = {"Succeeded": 0, "Running": 1, "Pending": 2, "Unknown": 3}


def pick_adoptable(pods: Iterable[tuple[str, Any]]) -> tuple[tuple[str, Any] | None, list[tuple[str, Any]]]:
    """Of an earlier try's pods (``(cluster, pod)``), the one to adopt (finished, else furthest along),
    and the others to delete. Failed and evicted pods are never adopted: their try is over."""
    ranked: list[tuple[int, str, tuple[str, Any]]] = []
    rest: list[tuple[str, Any]] = []
    for cluster, pod in pods:
        document = as_dict(pod)
        phase = (document.get("status") or {}).get("phase") or "Unknown"
        deleting = bool((document.get("metadata") or {}).get("deletionTimestamp"))
        if phase in _RANK and not deleting and disruption(document) is None:
            created = str((document.get("metadata") or {}).get("creationTimestamp") or "")
            ranked.append((_RANK[phase], created, (cluster, pod)))
        else:
            rest.append((cluster, pod))
    ranked.sort(key=lambda item: (item[0], item[1]))
    if not ranked:
        return None, rest
    return ranked[0][2], rest + [item[2] for item in ranked[1:]]


def succeeded_among(pods: Iterable[tuple[str, Any]]) -> tuple[str, Any] | None:
    """Of ``(cluster, pod)`` pairs, one whose pod ran to Succeeded (deleted or not), if any."""
    return next(
        ((c, p) for c, p in pods if (as_dict(p).get("status") or {}).get("phase") == "Succeeded"), None
    )


def adopted_attempt(record: PlacementRecord, cluster: str, pod: Any) -> Attempt:
    """The attempt that stands for an earlier try's pod this try watches to its end instead of a new one."""
    document = as_dict(pod)
    metadata = document.get("metadata") or {}
    labels = metadata.get("labels") or {}
    created = metadata.get("creationTimestamp")
    started = datetime.fromisoformat(created.replace("Z", "+00:00")) if created else datetime.now(UTC)
    tried = labels.get(TRY_LABEL) or labels.get("try_number")
    return Attempt(
        number=len(record.attempts) + 1,
        cluster=cluster,
        namespace=str(metadata.get("namespace") or "default"),
        pod=str(metadata.get("name")),
        placement_id=str(labels.get(PLACEMENT_LABEL) or ""),
        started_at=started.astimezone(UTC),
        decision=f"adopted the pod of try {tried or '?'} (it {_phase_words(document)})",
        adopted=True,
    )


def _phase_words(document: dict[str, Any]) -> str:
    phase = (document.get("status") or {}).get("phase")
    return {"Succeeded": "had already succeeded", "Running": "was still running"}.get(
        str(phase), f"was {str(phase or 'unknown').lower()}"
    )


def die_with_supervisor() -> None:
    """Have the kernel kill this task process if its supervisor dies (Linux), so that an orphaned task
    process never goes on to label, delete or outlive the pod a later try adopts."""
    try:
        from airflow.sdk.execution_time import task_runner
    except ImportError:  # pragma: no cover
        return
    comms = getattr(task_runner, "SUPERVISOR_COMMS", None)
    if comms is None or type(comms).__name__ != "CommsDecoder":
        return  # not a forked task process (dag.test runs in the supervisor's own process)
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the supervisor's own kill still applies
        return
    if os.getppid() == 1:  # the supervisor died before the call
        os.kill(os.getpid(), signal.SIGKILL)
