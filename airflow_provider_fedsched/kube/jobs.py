"""A batch/v1 Job and its pods in one cluster: read them together, delete them together and confirm both
are gone (a gang leaves a cluster whole; nothing of it is left behind)."""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from kubernetes.client import BatchV1Api, CoreV1Api
from kubernetes.client import models as k8s

from airflow_provider_fedsched.kube.failures import (
    ClusterFailure,
    disruption,
    scheduled,
    unschedulable_message,
)
from airflow_provider_fedsched.kube.pods import (
    CONFIRM_INTERVAL,
    STOP_GRACE_SECONDS,
    as_dict,
    is_gone,
    read_document,
)

__all__ = ["JOB_NAME_LABEL", "GangView", "JobManager", "Removal", "ajobs_complete", "aremove_jobs"]

JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
"""Set by the Job controller on every pod it creates (upstream and the simulator alike)."""
DELETE_WITH_PODS = {"propagationPolicy": "Foreground", "gracePeriodSeconds": 0}
"""A Job is deleted with its pods (a Job's default deletion orphans them), none given a grace period: a
member must never start later."""


def _condition(job: dict[str, Any], kind: str) -> dict[str, Any] | None:
    for condition in (job.get("status") or {}).get("conditions") or []:
        if condition.get("type") == kind and condition.get("status") == "True":
            return dict(condition)
    return None


@dataclass(slots=True)
class GangView:
    """One read of a Job and its pods."""

    job: dict[str, Any] | None
    """None when the Job does not exist."""
    pods: list[dict[str, Any]] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        """The gang's work is done: the Job controller says so (``Complete``, or ``SuccessCriteriaMet``
        before it), or enough of its pods Succeeded (``spec.completions``; without it, one, with none
        left running), which a Job that is being deleted, or whose controller has not caught up yet,
        still shows."""
        job = self.job
        if job is None:
            return False
        if _condition(job, "Complete") is not None or _condition(job, "SuccessCriteriaMet") is not None:
            return True
        if _condition(job, "Failed") is not None:
            return False
        pods = [(pod.get("status") or {}).get("phase") for pod in self.pods]
        status = job.get("status") or {}
        succeeded = max(int(status.get("succeeded") or 0), pods.count("Succeeded"))
        completions = (job.get("spec") or {}).get("completions")
        if completions is not None:
            return succeeded >= int(completions)
        running = any(phase not in ("Succeeded", "Failed") for phase in pods)
        return succeeded >= 1 and not running and not int(status.get("active") or 0)

    @property
    def failed(self) -> str | None:
        """The Job's own failure (backoff limit, deadline), with its reason, else None."""
        condition = _condition(self.job, "Failed") if self.job is not None else None
        if condition is None:
            return None
        return f"{condition.get('reason') or 'Failed'}: {condition.get('message') or ''}".strip(": ")

    def disrupted(self) -> ClusterFailure | None:
        """The first member evicted or preempted, as the cluster's failure."""
        for pod in self.pods:
            found = disruption(pod)
            if found is not None:
                name = (pod.get("metadata") or {}).get("name")
                return found.of(f"member {name}")
        return None

    def placed_together(self) -> int:
        """Members bound to a node and not yet ended, now: a gang is placed when all of them are at once
        (members that already ended while another waited for a node do not count)."""
        return sum(
            1
            for pod in self.live_pods()
            if scheduled(pod) and (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
        )

    @property
    def started_at(self) -> datetime | None:
        """When the first of its containers started running (a running or terminated container's
        ``startedAt``), else None: the running time of a gang that ended between two reads."""
        starts = [
            datetime.fromisoformat(str(started).replace("Z", "+00:00"))
            for pod in self.pods
            for status in (pod.get("status") or {}).get("containerStatuses") or []
            for state in (
                (status.get("state") or {}).get("running"),
                (status.get("state") or {}).get("terminated"),
            )
            if state and (started := state.get("startedAt"))
        ]
        return min(starts, default=None)

    def live_pods(self) -> list[dict[str, Any]]:
        return [pod for pod in self.pods if not (pod.get("metadata") or {}).get("deletionTimestamp")]

    def unschedulable(self) -> str | None:
        """The scheduler's message for the first member it cannot place, else None."""
        return next((m for pod in self.live_pods() if (m := unschedulable_message(pod)) is not None), None)


class JobManager:
    """Job I/O in one cluster through the official client."""

    def __init__(self, batch: BatchV1Api, core: CoreV1Api) -> None:
        self._batch = batch
        self._core = core

    def create(self, job: k8s.V1Job) -> None:
        self._batch.create_namespaced_job(job.metadata.namespace, job)

    def read(self, namespace: str, name: str) -> GangView:
        try:
            job = read_document(self._batch.read_namespaced_job, name, namespace)
        except Exception as exc:
            if not is_gone(exc):
                raise
            job = None
        return GangView(job, self.pods(namespace, name))

    def pods(self, namespace: str, name: str) -> list[dict[str, Any]]:
        listed = read_document(
            self._core.list_namespaced_pod, namespace, label_selector=f"{JOB_NAME_LABEL}={name}"
        )
        return list(listed.get("items") or [])

    def find(self, task: str, label: str) -> list[dict[str, Any]]:
        """Jobs of any namespace carrying ``label=task`` (an earlier try's job, to adopt or delete)."""
        listed = read_document(self._batch.list_job_for_all_namespaces, label_selector=f"{label}={task}")
        return list(listed.get("items") or [])

    def remove(self, namespace: str, name: str, *, within: float) -> Removal:
        """Delete the Job with its pods (foreground propagation, no grace: a member must never start
        later) and confirm within ``within`` seconds that neither the Job nor any pod of it is left.

        The Job is read before the delete and after: a Job found complete on the way out is reported so
        (:attr:`Removal.complete`), so that whoever deletes a finished Job writes its success down first."""
        deadline = time.monotonic() + within
        deleted = complete = False
        while True:
            try:
                if not deleted:
                    complete = complete or self.read(namespace, name).complete
                    body = k8s.V1DeleteOptions(
                        propagation_policy=DELETE_WITH_PODS["propagationPolicy"],
                        grace_period_seconds=DELETE_WITH_PODS["gracePeriodSeconds"],
                    )
                    try:
                        self._batch.delete_namespaced_job(name, namespace, body=body)
                    except Exception as exc:
                        if not is_gone(exc):
                            raise
                    deleted = True
                view = self.read(namespace, name)
                complete = complete or view.complete
                for pod in view.pods:  # pods the propagation has not reached yet go at once
                    pod_name = pod["metadata"]["name"]
                    try:
                        self._core.delete_namespaced_pod(
                            pod_name, namespace, grace_period_seconds=STOP_GRACE_SECONDS
                        )
                    except Exception as exc:
                        if not is_gone(exc):
                            raise
                if view.job is None and not view.pods:
                    return Removal(gone=True, complete=complete)
            except Exception:
                pass  # no answer, or a refusal: not confirmed gone; ask again until the deadline
            if time.monotonic() >= deadline:
                return Removal(gone=False, complete=complete)
            time.sleep(CONFIRM_INTERVAL)


@dataclass(frozen=True, slots=True)
class Removal:
    """What :meth:`JobManager.remove` found."""

    gone: bool
    """The Job and every pod of it are confirmed gone."""
    complete: bool
    """The Job was seen complete (its gang's work done) before or while it was deleted."""


# Async (the snapshot refresh deletes orphaned Jobs) ------------------------------------------------------
async def aremove_job(batch: Any, core: Any, namespace: str, name: str, *, within: float) -> bool:
    """:meth:`JobManager.remove` for ``kubernetes_asyncio`` BatchV1Api and CoreV1Api clients."""
    import asyncio

    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    deleted = False
    selector = f"{JOB_NAME_LABEL}={name}"
    while True:
        try:
            if not deleted:
                try:
                    await batch.delete_namespaced_job(name, namespace, body=dict(DELETE_WITH_PODS))
                except Exception as exc:
                    if not is_gone(exc):
                        raise
                deleted = True
            try:
                await batch.read_namespaced_job(name, namespace)
                job_left = True
            except Exception as exc:
                if not is_gone(exc):
                    raise
                job_left = False
            pods = (await core.list_namespaced_pod(namespace, label_selector=selector)).items
            for pod in pods:  # pods the propagation has not reached yet go at once
                try:
                    await core.delete_namespaced_pod(
                        pod.metadata.name, namespace, grace_period_seconds=STOP_GRACE_SECONDS
                    )
                except Exception as exc:
                    if not is_gone(exc):
                        raise
            if not job_left and not pods:
                return True
        except Exception:
            pass  # no answer, or a refusal: not confirmed gone; ask again until the deadline
        if loop.time() >= deadline:
            return False
        await asyncio.sleep(CONFIRM_INTERVAL)


async def aremove_jobs(
    batch: Any, core: Any, jobs: Iterable[tuple[str, str]], *, within: float
) -> list[tuple[str, str]]:
    """Remove ``(namespace, name)`` Jobs with their pods; return those confirmed gone."""
    gone = []
    for namespace, name in jobs:
        if await aremove_job(batch, core, namespace, name, within=within):
            gone.append((namespace, name))
    return gone


async def ajobs_complete(
    batch: Any, core: Any, jobs: Iterable[tuple[str, str]], *, within: float
) -> dict[tuple[str, str], bool]:
    """Of ``(namespace, name)`` Jobs, whether each one's gang's work is done (:attr:`GangView.complete`,
    from a read of the Job and its pods, each within ``within`` seconds). A Job the cluster did not
    answer about is left out: how it ended is unknown, and deleting it now could lose a result."""
    import asyncio

    async def read(namespace: str, name: str) -> bool:
        try:
            job: dict[str, Any] | None = as_dict(await batch.read_namespaced_job(name, namespace))
        except Exception as exc:
            if not is_gone(exc):
                raise
            job = None
        selector = f"{JOB_NAME_LABEL}={name}"
        pods = (await core.list_namespaced_pod(namespace, label_selector=selector)).items
        return GangView(job, [as_dict(pod) for pod in pods]).complete

    known: dict[tuple[str, str], bool] = {}
    for namespace, name in jobs:
        try:
            known[(namespace, name)] = await asyncio.wait_for(read(namespace, name), within)
        except Exception:
            continue
    return known
