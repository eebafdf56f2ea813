"""The batch/v1 Job controller (and the TTL-after-finished controller for Jobs).

It creates pods from the template (labels ``batch.kubernetes.io/controller-uid``, ``job-name``..., an owner
reference and the ``batch.kubernetes.io/job-tracking`` finalizer), keeps ``parallelism`` of them active until
``completions`` succeeded (each index once for ``Indexed`` Jobs), replaces failed pods with an exponential
backoff until ``backoffLimit`` is passed, honours ``suspend`` and ``activeDeadlineSeconds``, and writes
``status`` (active, ready, succeeded, failed, terminating, startTime, completionTime, conditions). A pod
counts once: its tracking finalizer is removed when its end is recorded, as upstream does.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from airflow_provider_fedsched.sim.apiserver import pods, registry
from airflow_provider_fedsched.sim.apiserver.events import EventRecorder
from airflow_provider_fedsched.sim.apiserver.jobs import pod_from_template
from airflow_provider_fedsched.sim.apiserver.objects import TERMINAL
from airflow_provider_fedsched.sim.apiserver.store import Obj, Store, WatchEvent
from airflow_provider_fedsched.sim.controllers.workqueue import WorkQueue
from airflow_provider_fedsched.sim.util import ApiError, Clock, now_iso, parse_time

COMPONENT = "job-controller"
TRACKING = "batch.kubernetes.io/job-tracking"
INDEX = "batch.kubernetes.io/job-completion-index"
BACKOFF_BASE, BACKOFF_MAX = 10.0, 360.0


def controller_uid(pod: Obj) -> str | None:
    for ref in pod["metadata"].get("ownerReferences") or []:
        if ref.get("controller") and ref.get("kind") == "Job":
            return str(ref.get("uid"))
    return None


def _condition(job: Obj, ctype: str) -> bool:
    return any(
        c.get("type") == ctype and c.get("status") == "True"
        for c in (job.get("status") or {}).get("conditions") or []
    )


def finished(job: Obj) -> bool:
    return _condition(job, "Complete") or _condition(job, "Failed")


def _ranges(indexes: set[int]) -> str:
    """``{0, 1, 2, 4}`` -> ``"0-2,4"`` (status.completedIndexes)."""
    out: list[str] = []
    for i in sorted(indexes):
        if out and "-" not in out[-1].split(",")[-1] and int(out[-1]) == i - 1:
            out[-1] = f"{out[-1]}-{i}"
        elif out and "-" in out[-1] and int(out[-1].split("-")[1]) == i - 1:
            out[-1] = f"{out[-1].split('-')[0]}-{i}"
        else:
            out.append(str(i))
    return ",".join(out)


def _parse_ranges(text: str | None) -> set[int]:
    found: set[int] = set()
    for part in (text or "").split(","):
        if "-" in part:
            low, high = part.split("-", 1)
            found.update(range(int(low), int(high) + 1))
        elif part.strip():
            found.add(int(part))
    return found


class JobController:
    def __init__(self, store: Store, events: EventRecorder, clock: Clock) -> None:
        self.store = store
        self.events = events
        self.clock = clock
        self._jobs: dict[str, tuple[str, str]] = {}  # uid -> (namespace, name)
        self.queue = WorkQueue(self._sync_key)
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._not_before: dict[str, float] = {}  # uid -> no new pod before (after failures), wall clock
        self._started: dict[str, float] = {}  # uid -> when it started (wall clock, for the deadline)
        store.listeners.append(self._on_event)

    def stop(self) -> None:
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()

    # -- reacting --------------------------------------------------------------------------------------
    def _on_event(self, event: WatchEvent) -> None:
        if event.plural == "jobs":
            meta = event.obj["metadata"]
            if event.type == "DELETED":
                self._jobs.pop(meta["uid"], None)
                self._not_before.pop(meta["uid"], None)
                self._started.pop(meta["uid"], None)
                for key in [k for k in self._timers if k.endswith(":" + meta["uid"])]:
                    self._timers.pop(key).cancel()
                return
            self._jobs[meta["uid"]] = (meta["namespace"], meta["name"])
            if (
                event.type == "MODIFIED"
                and event.obj.get("spec") == (event.old or {}).get("spec")
                and (
                    bool(meta.get("deletionTimestamp"))
                    == bool((event.old or {}).get("metadata", {}).get("deletionTimestamp"))
                )
            ):
                return  # our own status write
            self._mark(meta["uid"])
        elif event.plural == "pods":
            owner = controller_uid(event.obj)
            if owner is not None and owner in self._jobs:
                self._mark(owner)
            elif TRACKING in (event.obj["metadata"].get("finalizers") or []) and event.type != "DELETED":
                self._mark("orphans:" + event.obj["metadata"]["namespace"])  # its Job is gone

    def _mark(self, key: str) -> None:
        self.queue.add(key)

    def _sync_key(self, key: str) -> None:
        if key.startswith("orphans:"):
            self._release_orphans(key.split(":", 1)[1])
            return
        where = self._jobs.get(key)
        job = self.store.get("jobs", *where) if where else None
        pods_of = [p for p in self.store.list("pods", where[0]) if controller_uid(p) == key] if where else []
        if job is None or job["metadata"]["uid"] != key:
            for pod in pods_of:
                self._untrack(pod)
            return
        try:
            self._sync(job, pods_of)
        except ApiError:
            self._later(key, self.clock.real(1.0), "retry")  # the store moved under us: look again soon

    def _later(self, uid: str, real_seconds: float, purpose: str) -> None:
        """Look at the Job again after ``real_seconds`` (one timer per purpose: backoff, deadline, retry)."""
        key = f"{purpose}:{uid}"
        timer = self._timers.pop(key, None)
        if timer is not None:
            timer.cancel()

        def fire() -> None:
            self._timers.pop(key, None)
            self._mark(uid)

        self._timers[key] = asyncio.get_running_loop().call_later(max(0.0, real_seconds), fire)

    # -- pods ------------------------------------------------------------------------------------------
    def _untrack(self, pod: Obj) -> None:
        if TRACKING not in (pod["metadata"].get("finalizers") or []):
            return

        def apply(p: Obj) -> None:
            p["metadata"]["finalizers"] = [f for f in p["metadata"].get("finalizers") or [] if f != TRACKING]

        meta = pod["metadata"]
        self.store.mutate("pods", meta["namespace"], meta["name"], apply)

    def _release_orphans(self, namespace: str) -> None:
        for pod in self.store.list("pods", namespace):
            owner = controller_uid(pod)
            if owner is None or owner not in self._jobs:
                self._untrack(pod)

    def _delete_pod(self, job: Obj, pod: Obj) -> None:
        meta = pod["metadata"]
        if meta.get("deletionTimestamp"):
            return
        with contextlib.suppress(ApiError):
            pods.delete_pod(self.store, meta["namespace"], meta["name"])
            self.events.record(job, "Normal", "SuccessfulDelete", f"Deleted pod: {meta['name']}", COMPONENT)

    def _create_pod(self, job: Obj, index: int | None) -> bool:
        body = pod_from_template(job, index)
        try:
            pod = pods.create_pod(self.store, job["metadata"]["namespace"], body)
        except ApiError as exc:
            self.events.record(job, "Warning", "FailedCreate", f"Error creating: {exc.message}", COMPONENT)
            return False
        self.events.record(
            job, "Normal", "SuccessfulCreate", f"Created pod: {pod['metadata']['name']}", COMPONENT
        )
        return True

    # -- the sync --------------------------------------------------------------------------------------
    def _sync(self, job: Obj, owned: list[Obj]) -> None:
        meta, spec = job["metadata"], job["spec"]
        uid, namespace, name = meta["uid"], meta["namespace"], meta["name"]
        status: dict[str, Any] = dict(job.get("status") or {})
        if meta.get("deletionTimestamp"):
            for pod in owned:
                self._untrack(pod)
            return
        indexed = spec.get("completionMode") == "Indexed"
        completed = _parse_ranges(status.get("completedIndexes"))
        succeeded, failed = int(status.get("succeeded") or 0), int(status.get("failed") or 0)
        new_failures = 0
        for pod in owned:
            phase = (pod.get("status") or {}).get("phase")
            if TRACKING in (pod["metadata"].get("finalizers") or []) and phase in TERMINAL:
                if phase == "Succeeded":
                    succeeded += 1
                    index = (pod["metadata"].get("labels") or {}).get(INDEX)
                    if indexed and index is not None and index.isdigit():
                        completed.add(int(index))
                else:
                    failed += 1
                    new_failures += 1
                self._untrack(pod)
        live = [p for p in owned if (p.get("status") or {}).get("phase") not in TERMINAL]
        active = [p for p in live if not p["metadata"].get("deletionTimestamp")]
        terminating = [p for p in live if p["metadata"].get("deletionTimestamp")]
        conditions: list[Obj] = list(status.get("conditions") or [])
        now = now_iso()

        def add_condition(ctype: str, cstatus: str, reason: str, message: str) -> None:
            for cond in conditions:
                if cond.get("type") == ctype:
                    if cond.get("status") != cstatus:
                        cond.update(status=cstatus, lastTransitionTime=now)
                    cond.update(reason=reason, message=message, lastProbeTime=now)
                    return
            conditions.append(
                {
                    "type": ctype,
                    "status": cstatus,
                    "reason": reason,
                    "message": message,
                    "lastProbeTime": now,
                    "lastTransitionTime": now,
                }
            )

        completions, parallelism = spec.get("completions"), int(spec.get("parallelism") or 0)
        if not finished(job):
            if spec.get("suspend"):
                for pod in active:
                    self._delete_pod(job, pod)
                active = []
                if not _condition(job, "Suspended"):
                    add_condition("Suspended", "True", "JobSuspended", "Job suspended")
                    self.events.record(job, "Normal", "Suspended", "Job suspended", COMPONENT)
                status.pop("startTime", None)
            else:
                if _condition(job, "Suspended"):
                    add_condition("Suspended", "False", "JobResumed", "Job resumed")
                    self.events.record(job, "Normal", "Resumed", "Job resumed", COMPONENT)
                if "startTime" not in status:
                    status["startTime"] = now
                    self._started[uid] = self.clock.now()
                outcome = self._outcome(uid, spec, status, succeeded, failed, completed, active, indexed)
                if outcome is not None:
                    ctype, reason, message = outcome
                    for pod in active:
                        self._delete_pod(job, pod)
                    active = []
                    add_condition(ctype, "True", reason, message)
                    if ctype == "Complete":
                        status["completionTime"] = now
                    self.events.record(
                        job, "Normal" if ctype == "Complete" else "Warning", reason, message, COMPONENT
                    )
                else:
                    if new_failures:
                        delay = min(BACKOFF_BASE * 2 ** max(0, failed - 1), BACKOFF_MAX)
                        self._not_before[uid] = self.clock.now() + self.clock.real(delay)
                    wait = self._not_before.get(uid, 0.0) - self.clock.now()
                    if wait > 0:
                        self._later(uid, wait, "backoff")
                    else:
                        replacing = spec.get("podReplacementPolicy") == "Failed"
                        count = len(active) + (len(terminating) if replacing else 0)
                        if not self._fill(
                            job, active, count, completions, parallelism, succeeded, completed, indexed
                        ):
                            self._later(uid, self.clock.real(1.0), "retry")  # a creation was refused
                    deadline = spec.get("activeDeadlineSeconds")
                    if deadline:
                        left = self._start(uid, status) + self.clock.real(int(deadline)) - self.clock.now()
                        self._later(uid, left, "deadline")
        active_now = [
            p
            for p in self.store.list("pods", namespace)
            if controller_uid(p) == uid
            and (p.get("status") or {}).get("phase") not in TERMINAL
            and not p["metadata"].get("deletionTimestamp")
        ]
        status.update(
            active=len(active_now),
            ready=sum(1 for p in active_now if pods.healthy(p)),
            succeeded=succeeded,
            failed=failed,
            terminating=len(terminating),
            conditions=conditions,
            uncountedTerminatedPods={},
        )
        if indexed:
            status["completedIndexes"] = _ranges(completed)
        for key in ("active", "succeeded", "failed"):
            if not status[key]:
                status.pop(key)
        if not conditions:
            status.pop("conditions")
        if status != (job.get("status") or {}):
            self.store.mutate("jobs", namespace, name, lambda j: j.__setitem__("status", status))
        if finished(self.store.get("jobs", namespace, name) or job):
            self._schedule_ttl(self.store.get("jobs", namespace, name) or job)

    def _start(self, uid: str, status: Obj) -> float:
        started = self._started.get(uid)
        return started if started is not None else parse_time(status["startTime"])

    def _outcome(
        self,
        uid: str,
        spec: Obj,
        status: Obj,
        succeeded: int,
        failed: int,
        completed: set[int],
        active: list[Obj],
        indexed: bool,
    ) -> tuple[str, str, str] | None:
        if failed > int(spec.get("backoffLimit", 6)):
            return ("Failed", "BackoffLimitExceeded", "Job has reached the specified backoff limit")
        deadline = spec.get("activeDeadlineSeconds")
        started = self._start(uid, status) if status.get("startTime") else None
        if deadline and started is not None and self.clock.now() - started >= self.clock.real(int(deadline)):
            return ("Failed", "DeadlineExceeded", "Job was active longer than specified deadline")
        completions = spec.get("completions")
        if indexed and completions is not None:
            done = len([i for i in completed if i < int(completions)]) >= int(completions)
        elif completions is not None:
            done = succeeded >= int(completions)
        else:
            done = succeeded > 0 and not active
        if done:
            return ("Complete", "Completed", "Job completed")
        return None

    def _fill(
        self,
        job: Obj,
        active: list[Obj],
        active_count: int,
        completions: int | None,
        parallelism: int,
        succeeded: int,
        completed: set[int],
        indexed: bool,
    ) -> bool:
        """Create the pods that are missing; False when the apiserver refused one (try again later)."""
        if indexed and completions is not None:
            running = {
                int((p["metadata"].get("labels") or {}).get(INDEX, "-1"))
                for p in active
                if str((p["metadata"].get("labels") or {}).get(INDEX, "")).isdigit()
            }
            missing = [i for i in range(int(completions)) if i not in completed and i not in running]
            wanted = missing[: max(0, parallelism - active_count)]
            return all(self._create_pod(job, index) for index in wanted)
        if completions is not None:
            want = min(parallelism, int(completions) - succeeded)
        else:
            want = parallelism if succeeded == 0 else 0
        return all(self._create_pod(job, None) for _ in range(max(0, want - active_count)))

    # -- TTL after finished ----------------------------------------------------------------------------
    def _schedule_ttl(self, job: Obj) -> None:
        ttl = (job.get("spec") or {}).get("ttlSecondsAfterFinished")
        uid = job["metadata"]["uid"]
        if ttl is None or job["metadata"].get("deletionTimestamp") or f"ttl:{uid}" in self._timers:
            return
        meta = job["metadata"]
        self._timers[f"ttl:{uid}"] = asyncio.get_running_loop().call_later(
            self.clock.real(float(ttl)), self._expire, meta["namespace"], meta["name"], uid
        )

    def _expire(self, namespace: str, name: str, uid: str) -> None:
        self._timers.pop(f"ttl:{uid}", None)
        job = self.store.get("jobs", namespace, name)
        if job is not None and job["metadata"]["uid"] == uid:
            with contextlib.suppress(ApiError):
                registry.delete(self.store, "jobs", namespace, name, {"propagationPolicy": "Background"})
