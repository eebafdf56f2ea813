"""FederatedKubernetesJobOperator: a KubernetesJobOperator whose whole Job (a gang of pods) the federation
places in one cluster, all or nothing.

It is FederatedKubernetesOperator's placement loop (decide, reserve, launch, leave, decide again within
the try) with a Job as the unit: the decision is a gang decision (every pod of the Job on a real node of one
cluster at the same time, :mod:`federation.plugins.gang`); if not every pod is scheduled within
``unschedulable_grace_seconds``, or any member is evicted, the whole Job is deleted with its pods, confirmed
gone, and the gang moves to the next cluster as one unit (resuming from ``checkpoint``). The delivery
contract is the pod tasks' (operators/federated_pod.py): a silent cluster is waited for within
``unreachable_grace``, then the try fails; a preemptible gang moves at once. A Job that disappeared (deleted
by someone) is the same: its pods may have run, so only a preemptible gang is started elsewhere. A Job not
confirmed gone is written down as an orphan (``kind="job"``), deleted with its pods by the next snapshot
that reaches its cluster, which writes down first whether it had completed: a retry takes that success
instead of running the gang again. Whoever deletes a finished Job (this try, a retry, the sweep, on_kill)
records its success first. Once the task is ended (``on_kill``), no attempt is judged or started again.
The Job's own failure (its backoff limit, a member's non-zero exit) fails the try as usual. See
docs/jobs.md.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from functools import cached_property
from typing import Any

from airflow.providers.cncf.kubernetes.operators.job import KubernetesJobOperator
from airflow.sdk.exceptions import AirflowException
from kubernetes.client import models as k8s

from airflow_provider_fedsched.federation.record import Attempt
from airflow_provider_fedsched.federation.request import GangRole, TaskRequest
from airflow_provider_fedsched.federation.spec import SpecError
from airflow_provider_fedsched.kube import failures
from airflow_provider_fedsched.kube.failures import ClusterFailure, classify, never_sent
from airflow_provider_fedsched.kube.jobs import GangView, JobManager
from airflow_provider_fedsched.kube.labels import TASK_LABEL, TRY_LABEL
from airflow_provider_fedsched.kube.pods import unanswered
from airflow_provider_fedsched.operators import attempts, records
from airflow_provider_fedsched.operators.arguments import FederationError
from airflow_provider_fedsched.operators.divided import DividedRun
from airflow_provider_fedsched.operators.federated_pod import FederatedKubernetesOperator
from airflow_provider_fedsched.operators.try_states import (
    GONE_TIMEOUT,
    ClusterLeft,
    Judged,
    TryState,
    short_error,
)
from airflow_provider_fedsched.validation.operator import (
    check_annotations,
    check_divided_job,
    check_job_arguments,
    gang_marker,
)

__all__ = ["FederatedKubernetesJobOperator"]


class FederatedKubernetesJobOperator(FederatedKubernetesOperator, KubernetesJobOperator):
    """Run a Job (``parallelism`` pods at once, ``completions`` in all) on one cluster of a federation.

    Accepts KubernetesJobOperator's arguments (``parallelism``, ``completions``, ``backoff_limit``,
    ``completion_mode``, ``ttl_seconds_after_finished``, ``full_job_spec``, ``job_poll_interval``, ...)
    and FederatedKubernetesOperator's federation arguments. The gang is ``min(parallelism, completions)``
    pods of the pod template. The Job is always watched to its end (all or nothing needs a watcher); with
    ``deferrable=True`` the worker slot is released between polls, each poll judging a fresh read.
    ``on_finish_action`` ``delete_pod`` (the default) deletes the finished Job with its pods.
    """

    template_fields: Sequence[str] = tuple(
        dict.fromkeys((*FederatedKubernetesOperator.template_fields, *KubernetesJobOperator.template_fields))
    )

    def __init__(
        self,
        *,
        job_poll_interval: float = 2.0,
        wait_until_job_complete: bool = True,
        divide: bool = False,
        **kwargs: Any,
    ):
        super().__init__(
            job_poll_interval=job_poll_interval, wait_until_job_complete=wait_until_job_complete, **kwargs
        )
        self.divide = divide
        """Split an Indexed Job's indices over the members by their room (docs/jobs.md, Divided jobs)."""
        self.division_size = (0, 0)
        """``(completions, parallelism)`` of a divided Job, as it runs (set by :meth:`prepare`)."""
        self._divided: DividedRun | None = None

    # The gang ------------------------------------------------------------------------------------------
    def prepare(self, context: Any = None, hook: Any = None) -> tuple[k8s.V1Pod, TaskRequest]:
        """The pod template once, and the gang request: ``min(parallelism, completions)`` such pods."""
        if not self.wait_until_job_complete:
            raise FederationError(
                "wait_until_job_complete: a federated Job is always watched to its end (all or nothing "
                "needs a watcher)"
            )
        if self.do_xcom_push:
            raise FederationError("do_xcom_push: not supported for federated Jobs yet")
        try:
            check_job_arguments(
                job_poll_interval=self.job_poll_interval,
                backoff_limit=self.backoff_limit,
                ttl_seconds_after_finished=self.ttl_seconds_after_finished,
                parallelism=self.parallelism,
                completions=self.completions,
                completion_mode=self.completion_mode,
            )
            job_metadata = getattr(self.full_job_spec, "metadata", None)
            check_annotations(
                getattr(job_metadata, "annotations", None), "full_job_spec.metadata.annotations"
            )
        except SpecError as exc:
            raise FederationError(str(exc)) from None
        self._check_division()
        pod, request = super().prepare(context, hook)
        if self.divide:
            return pod, request  # judged for one of its pods: the slices follow every member's room
        others = request.model_dump(exclude={"resources", "gang"})
        gang = TaskRequest.for_gang([GangRole(count=self.gang_size, resources=request.resources)], **others)
        return pod, gang

    def _check_division(self) -> None:
        """``divide`` and what a divided Job needs, judged on the Job as it would run: ``full_job_spec``
        fills what the operator's arguments leave unset (as :meth:`_attempt_job` merges them)."""
        job = self.full_job_spec
        job_spec = getattr(job, "spec", None)
        template = getattr(getattr(job_spec, "template", None), "metadata", None)

        def effective(name: str) -> Any:
            given = getattr(self, name, None)
            return given if given is not None else getattr(job_spec, name, None)

        pod = getattr(self.full_pod_spec, "metadata", None)
        markers = [
            ("labels", self.labels),
            ("annotations", self.annotations),
            ("full_pod_spec.metadata.labels", getattr(pod, "labels", None)),
            ("full_pod_spec.metadata.annotations", getattr(pod, "annotations", None)),
            ("full_job_spec.metadata.labels", getattr(job.metadata, "labels", None) if job else None),
            (
                "full_job_spec.metadata.annotations",
                getattr(job.metadata, "annotations", None) if job else None,
            ),
            ("full_job_spec.spec.template.metadata.labels", getattr(template, "labels", None)),
            ("full_job_spec.spec.template.metadata.annotations", getattr(template, "annotations", None)),
        ]
        completions, parallelism = effective("completions"), effective("parallelism")
        try:
            check_divided_job(
                divide=self.divide,
                completions=completions,
                parallelism=parallelism,
                completion_mode=effective("completion_mode"),
                gang=gang_marker(markers),
            )
        except SpecError as exc:
            raise FederationError(str(exc)) from None
        if not self.divide:
            return
        for name, given in (("deferrable", self.deferrable), ("preemptible", self.preemptible)):
            if given:
                raise FederationError(
                    f"{name}: not available yet for a divided Job (divide=True): the worker watches every "
                    "slice, and a silent member's slice fails the try"
                )
        self.division_size = (int(completions), int(parallelism or 1))

    @property
    def gang_size(self) -> int:
        parallelism = self.parallelism or 1
        return parallelism if self.completions is None else min(parallelism, self.completions)

    # Cluster switching ---------------------------------------------------------------------------------
    @cached_property
    def job_manager(self) -> JobManager:
        return JobManager(self.hook.batch_v1_client, self.client)

    def use_cluster(self, cluster: str, hook: Any = None) -> None:
        before = self.current_cluster
        super().use_cluster(cluster, hook)
        if self.current_cluster != before:
            for cached in ("job_client", "job_manager"):
                self.__dict__.pop(cached, None)

    # Entry points ----------------------------------------------------------------------------------------
    def _continue(self, context: Any) -> Any:
        """A divided Job's try watches its slices itself (operators/divided.py); a whole Job's is a gang's."""
        if not self.divide:
            return super()._continue(context)
        self._divided = DividedRun(self, context)
        return self._divided.run()

    def resume_job(self, context: Any, event: Any = None) -> Any:
        """Re-entry after a deferred poll: judge the running attempt from a fresh read."""
        self._begin(context)
        attempt = self._record.current
        if attempt is None or attempt.outcome != "running":
            raise FederationError("resumed from a deferral without a running attempt in the placement record")
        self.federation_hook.forget_deferral(attempt.cluster, attempt.namespace, attempt.pod, "job")
        return self._place_after(context, attempt)

    def _place_after(self, context: Any, attempt: Attempt) -> Any:
        try:
            return self.run_attempt(context, attempt)
        except ClusterLeft:
            return self.place_and_run(context)

    # One attempt: the Job in one cluster ------------------------------------------------------------------
    def run_attempt(self, context: Any, attempt: Attempt) -> Any:
        """Create the attempt's Job once (or reattach to it) and watch the gang until it ends."""
        self._enter(TryState.RUNNING, f"attempt {attempt.number}: job {attempt.pod} in {attempt.cluster}")
        self.use_cluster(attempt.cluster)
        try:
            view = self._read(attempt)
            if view.job is None:
                if attempt.adopted or attempt.running_at is not None:
                    raise Judged(failures.disappeared(f"job {attempt.pod}"))
                if self._killed:
                    raise self._ended_by_kill(attempt)
                self._create(context, attempt)
            else:
                self.log.info(
                    "Reattached to job %s/%s in %s", attempt.namespace, attempt.pod, attempt.cluster
                )
            while True:
                if self._step(context, attempt):
                    return self._succeeded(context, attempt)
                if self.deferrable:
                    self._defer_poll(context, attempt)
                time.sleep(float(self.job_poll_interval))
        except Judged as judged:
            if self._killed:  # the operator's own cancellation, never a lost Job
                raise self._ended_by_kill(attempt) from judged
            left = self._gang_left(context, attempt, judged.failure)
            if left is None:
                return None  # the Job was found complete on its way out: the try succeeds
            raise left from judged

    def _defer_poll(self, context: Any, attempt: Attempt) -> None:
        """Release the worker slot until the next poll (never sooner than ``[fedsched]
        min_deferral_seconds``: a shorter deferral races the scheduler). The Job is written down with its
        task instance, so that a try a user ends meanwhile (its timer trigger deletes nothing) has its Job
        deleted by the next snapshot of its cluster (``hooks/sensing.py``)."""
        from airflow.providers.standard.triggers.temporal import TimeDeltaTrigger

        from airflow_provider_fedsched.triggers.pod import min_deferral_seconds

        self.federation_hook.note_deferral(
            attempt.cluster, attempt.namespace, attempt.pod, context["ti"], kind="job"
        )
        self._save(context)
        pause = max(float(self.job_poll_interval), min_deferral_seconds())
        self.defer(trigger=TimeDeltaTrigger(timedelta(seconds=pause)), method_name="resume_job")

    def _attempt_job(self, attempt: Attempt) -> k8s.V1Job:
        """The attempt's Job: the task's pod template (labelled, told where it runs and whether it
        resumes) as the Job's template, with the Job's own labels the same (adoption finds it)."""
        pod = self._attempt_pod(attempt)
        labels = dict(pod.metadata.labels or {})
        job = k8s.V1Job(
            api_version="batch/v1",
            kind="Job",
            metadata=k8s.V1ObjectMeta(
                name=attempt.pod,
                namespace=attempt.namespace,
                labels=labels,
                annotations={attempts.DECISION_ANNOTATION: attempt.decision[:1000]},
            ),
            spec=k8s.V1JobSpec(
                parallelism=self.parallelism,
                completions=self.completions,
                backoff_limit=self.backoff_limit,
                completion_mode=self.completion_mode,
                ttl_seconds_after_finished=self.ttl_seconds_after_finished,
                template=k8s.V1PodTemplateSpec(
                    metadata=k8s.V1ObjectMeta(labels=labels, annotations=pod.metadata.annotations),
                    spec=pod.spec,
                ),
            ),
        )
        if self.full_job_spec is not None:
            job = self.reconcile_jobs(self.full_job_spec, job)
        return job

    def _create(self, context: Any, attempt: Attempt) -> None:
        job = self._attempt_job(attempt)
        try:
            self.job_manager.create(job)
        except Exception as exc:
            if not never_sent(exc) and unanswered(exc):
                pass  # The create may have landed: the reads that follow find out (within the grace).
            else:
                # Refused (or never sent): no Job exists. The cluster's refusal (a quota) moves the gang
                # on; any other ends the attempt and the try, its reservation released, never "running".
                failure = classify([exc], None, server=self.pod_manager.server)
                if failure is not None:
                    raise Judged(failure) from exc
                self._finish(context, attempt, "failed", f"job {attempt.pod} not created: {short_error(exc)}")
                raise
        ti = context["ti"]
        ti.xcom_push(key="job_name", value=attempt.pod)
        ti.xcom_push(key="job_namespace", value=attempt.namespace)
        self._unpublished = True
        self._publish_attempt()
        self.log.info(
            "Job %s/%s created in %s: a gang of %d pod(s)",
            attempt.namespace,
            attempt.pod,
            attempt.cluster,
            self.gang_size,
        )

    def _read(self, attempt: Attempt) -> GangView:
        """A fresh read of the Job and its pods, waiting within the grace for an answer."""
        deadline = time.monotonic() + self._grace()
        while True:
            try:
                return self.job_manager.read(attempt.namespace, attempt.pod)
            except Exception as exc:
                if not unanswered(exc) or self._killed:
                    raise
                if time.monotonic() >= deadline:
                    raise Judged(self.pod_manager.unreachable(exc, self._grace())) from exc
                time.sleep(2.0)

    def _step(self, context: Any, attempt: Attempt) -> bool:
        """One judgement of the gang: True when the Job completed; raises Judged when the cluster failed
        it, AirflowException when the Job failed on its own."""
        if self._killed:
            raise self._ended_by_kill(attempt)
        view = self._read(attempt)
        if view.job is None:
            raise Judged(failures.disappeared(f"job {attempt.pod}"))
        found = view.disrupted()
        if found is not None:
            raise Judged(found)
        if view.complete:
            if attempt.running_at is None:
                # Ended between two reads: it ran from its first container's start (the launch, when its
                # pods are gone; a cost never undercounted).
                attempt.running_at = view.started_at or attempt.started_at
            return True
        failed = view.failed
        if failed is not None:
            reason = f"job {attempt.pod} failed: {failed}"
            self._end(attempt)
            self._finish(context, attempt, "failed", reason)
            raise AirflowException(reason)
        if attempt.running_at is None:
            size, placed = self.gang_size, view.placed_together()
            if placed >= size:
                attempt.running_at = datetime.now(UTC)
                self._save(context)
                self.log.info("All %d pods of the gang are scheduled in %s", size, attempt.cluster)
                return False
            grace = float(self.unschedulable_grace_seconds)
            waited = (datetime.now(UTC) - attempt.started_at).total_seconds()
            if waited >= grace:
                why = view.unschedulable() or "not scheduled"
                raise Judged(
                    failures.insufficient(
                        f"{placed} of {size} pods of the gang scheduled together within {grace:g}s: {why}"
                    )
                )
        return False

    def _succeeded(self, context: Any, attempt: Attempt) -> Any:
        if self.get_logs:
            for pod in self.job_manager.pods(attempt.namespace, attempt.pod):
                name = pod["metadata"]["name"]
                try:
                    # Unparsed: the client's own parsing renders the body as "b'...'".
                    text = self.client.read_namespaced_pod_log(
                        name, attempt.namespace, container=self.base_container_name, _preload_content=False
                    ).data
                except Exception as exc:  # logs are a courtesy: the Job's result stands
                    self.log.warning("Could not read the logs of %s: %s", name, exc)
                    continue
                if isinstance(text, bytes):
                    text = text.decode("utf-8", "replace")
                for line in str(text).splitlines():
                    self.log.info("[%s] %s: %s", self.base_container_name, name, line)
        # Written down before the Job goes: a try ended between the two leaves either the Job or the record
        # of its success for the retry, never neither.
        self._finish(context, attempt, "succeeded", "")
        self._end(attempt)
        return None

    def _end(self, attempt: Attempt) -> None:
        """After the Job ended: delete it with its pods, as ``on_finish_action`` says; a Job not confirmed
        deleted (its cluster stopped answering) is written down and deleted when the cluster answers."""
        if self.on_finish_action.value == "keep_pod":
            return
        if not self.job_manager.remove(attempt.namespace, attempt.pod, within=GONE_TIMEOUT).gone:
            self._fence(attempt.cluster, attempt.namespace, attempt.pod)

    def _fence(self, cluster: str, namespace: str, name: str) -> None:
        """A Job not confirmed gone: the next snapshot of ``cluster`` that answers deletes it with its pods
        (the pods' orphan path: no Job outlives its try)."""
        self.federation_hook.add_orphan(cluster, namespace, name, kind="job")
        self.log.warning(
            "Job %s/%s in %s is not confirmed deleted: it is deleted when the cluster answers again",
            namespace,
            name,
            cluster,
        )

    def _gang_left(self, context: Any, attempt: Attempt, failure: ClusterFailure) -> BaseException | None:
        """The cluster failed the gang: delete the whole Job, confirm it is gone, leave the cluster.

        A cluster that does not answer is not waited for again (the reads already waited the grace): the
        Job is fenced. A Job found complete on its way out is a success (None: the try succeeds). After an
        ``unreachable`` failure (silence past the grace, or a Job that disappeared: deleted by someone) the
        gang may have run, so only a preemptible gang starts elsewhere; any other fails the try
        (FederationError), as does one whose Job is not confirmed gone."""
        attempt.failed_at = attempt.failed_at or datetime.now(UTC)
        self.log.warning(
            "Attempt %d in %s ended: %s (%s)", attempt.number, attempt.cluster, failure.kind, failure.reason
        )
        within = 0.0 if failure.kind == "unreachable" else GONE_TIMEOUT
        removal = self.job_manager.remove(attempt.namespace, attempt.pod, within=within)
        if not removal.gone:
            self._fence(attempt.cluster, attempt.namespace, attempt.pod)
        else:
            self.log.info(
                "Job %s/%s and its pods are gone from %s", attempt.namespace, attempt.pod, attempt.cluster
            )
        if removal.complete:
            reason = (
                f"job {attempt.pod} completed ({failure.reason} before that was read): its work is done, "
                "never run again"
            )
            self.log.warning("%s", reason)
            self._finish(context, attempt, "succeeded", reason)
            return None
        if not self.preemptible and (failure.kind == "unreachable" or not removal.gone):
            where = "it was deleted" if removal.gone else "it is deleted when the cluster answers again"
            reason = (
                f"{failure.reason}; job {attempt.pod} may have run its gang, so the gang is not started "
                f"elsewhere (unreachable_grace {self._grace():g}s); {where}"
                if failure.kind == "unreachable"
                else f"{failure.reason}; job {attempt.pod} is not confirmed gone, so the gang is not "
                f"started elsewhere; {where}"
            )
            self._finish(context, attempt, "lost", reason)
            return FederationError(reason)
        self._enter(TryState.LEAVING, f"{failure.kind}: {failure.reason}")
        self.leave_cluster(context, attempt, failure)
        return ClusterLeft(failure)

    # An earlier try's Job; the task ended ------------------------------------------------------------------
    earlier_kind = "job"

    def _find_in_cluster(self, digest: str) -> list[Any]:
        return list(self.job_manager.find(digest, TASK_LABEL))

    def _adopt_found(self, context: Any, found: list[tuple[str, Any]]) -> Attempt | None:
        """An earlier try's Job of this task instance (complete, else still running) is adopted, never run
        a second time; any other is deleted (written down if not confirmed gone). The cluster where the
        earlier try ran is waited for within the grace, as for pods (:meth:`_find_earlier`).

        A complete Job that is already being deleted (a dead try's cleanup, a sweep) cannot be watched, but
        its gang's work is done: its success is taken (an attempt whose outcome is ``succeeded``: the try
        is over), never run again, as is that of one found complete while this try deletes it. An earlier
        Job not confirmed stopped is never doubled: a gang that is not preemptible is not started again."""
        if self._divided is not None:
            self._divided.take_earlier(found)
            return None
        usable = [
            (cluster, job)
            for cluster, job in found
            if GangView(job).failed is None and not job["metadata"].get("deletionTimestamp")
        ]
        usable.sort(key=lambda item: (not GangView(item[1]).complete, item[1]["metadata"]["name"]))
        chosen = usable[0] if usable else None
        others = [(cluster, job) for cluster, job in found if chosen is None or job is not chosen[1]]
        done = None if chosen is not None else next((i for i in others if GangView(i[1]).complete), None)
        if done is not None:
            for cluster, job in others:  # deleted by the next snapshot of their cluster
                metadata = job["metadata"]
                self.federation_hook.add_orphan(cluster, metadata["namespace"], metadata["name"], "job")
            return self._take_success(context, *done, "it is being deleted")
        for cluster, job in others:
            self.use_cluster(cluster)
            metadata = job["metadata"]
            self.log.info("Deleting job %s/%s of an earlier try", metadata["namespace"], metadata["name"])
            removal = self.job_manager.remove(metadata["namespace"], metadata["name"], within=GONE_TIMEOUT)
            if removal.complete and chosen is None:
                if not removal.gone:
                    self._fence(cluster, metadata["namespace"], metadata["name"])
                return self._take_success(context, cluster, job, "it was found complete as it was deleted")
            if not removal.gone:
                self._fence(cluster, metadata["namespace"], metadata["name"])
                if chosen is None:
                    self._never_doubled(
                        context,
                        cluster,
                        job,
                        f"job {metadata['name']}",
                        ": its gang may still run, so it is not started again; it is deleted when its "
                        "cluster answers",
                    )
        if chosen is None:
            return None
        attempt = attempts.adopted_attempt(self._record, *chosen)
        attempt.running_at = attempt.started_at  # its gang was placed: a missing Job is not a fresh start
        tried = (chosen[1]["metadata"].get("labels") or {}).get(TRY_LABEL) or "?"
        state = "had already completed" if GangView(chosen[1]).complete else "was still running"
        attempt.decision = f"adopted the job of try {tried} (it {state})"
        return self._adopt(context, attempt, "job")

    def _take_success(self, context: Any, cluster: str, job: Any, how: str) -> Attempt | None:
        """An earlier try's Job completed: its success is this try's, its gang never run again."""
        tried = (job["metadata"].get("labels") or {}).get(TRY_LABEL) or "?"
        reason = (
            f"job {job['metadata']['name']} of try {tried} completed in {cluster} ({how}): its work is not "
            "run again"
        )
        self._succeed_with(context, attempts.adopted_attempt(self._record, cluster, job), reason)
        return self._record.current

    def _cancel(self) -> None:
        """The task was ended (UI, API, timeout): delete the Job with its pods where it runs; a Job not
        confirmed deleted is written down and deleted when its cluster answers. From now on the attempt
        loop judges and starts nothing (the Job's disappearance is this cancellation, not a lost Job).

        The Job is written down first (a process being killed may not live to the end of the delete), and
        a Job found complete is recorded as a success before it goes, so that a retry never runs the gang
        again."""
        self._killed = True
        if self._divided is not None:
            self._divided.cancel()
            return
        attempt = self.placement.current if self.placement else None
        if attempt is None or attempt.outcome != "running":
            return
        self.use_cluster(attempt.cluster)
        hook = self.federation_hook
        hook.add_orphan(attempt.cluster, attempt.namespace, attempt.pod, kind="job")
        removal = self.job_manager.remove(attempt.namespace, attempt.pod, within=10.0)
        if removal.gone:
            hook.forget_orphan(attempt.cluster, attempt.namespace, attempt.pod, "job")
        else:
            self._fence(attempt.cluster, attempt.namespace, attempt.pod)
        if removal.complete:
            why = f"job {attempt.pod} completed before the task was ended: its work is done, never run again"
            outcome = "succeeded"
        else:
            why = "the task was ended while its job ran: " + (
                "job deleted" if removal.gone else "job deleted later"
            )
            outcome = "cancelled"
        records.end_attempt(hook, self._record, attempt, outcome, why)
        records.end_try(self._record, "succeeded" if removal.complete else "failed", why)
        if self._context is not None:
            self._save(self._context)
        self.log.info("%s (%s/%s in %s)", why, attempt.namespace, attempt.pod, attempt.cluster)
