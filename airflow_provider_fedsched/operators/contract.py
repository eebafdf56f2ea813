"""The delivery contract of one try (docs/operator.md): how an attempt is judged and what follows.

* A new try first adopts a pod an earlier try of the same task instance left running or finished, in any
  member cluster, whatever labels it carries; a finished pod's result is never produced a second time.
* An attempt is judged from a fresh read of its pod and its events (:func:`kube.failures.classify`),
  never from a stale state or a timer alone.
* A cluster that cannot take the pod (quota, unschedulable, eviction, missing namespace) is left: the pod
  is deleted and confirmed gone first, then the next decision is made within the try.
* A cluster (or node) that stops answering is waited for up to ``unreachable_grace`` (the pod manager's
  reads wait and reattach); past it a task that is not preemptible fails the try rather than start its
  work a second time, and its pod is deleted when the cluster answers again. A preemptible task moves at
  once and its old pod is fenced the same way.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from airflow.providers.cncf.kubernetes.operators.pod import KubernetesPodOperator
from airflow.providers.cncf.kubernetes.utils.pod_manager import (
    OnFinishAction,
    detect_pod_terminate_early_issues,
)

from airflow_provider_fedsched.federation.record import Attempt, PlacementRecord
from airflow_provider_fedsched.federation.spec import SpecError
from airflow_provider_fedsched.kube import failures
from airflow_provider_fedsched.kube.failures import (
    ClusterFailure,
    api_refusal,
    chain,
    classify,
    disruption,
    scheduled,
    unschedulable_message,
)
from airflow_provider_fedsched.kube.pods import (
    CONFIRM_INTERVAL,
    ClusterLost,
    Observation,
    PodNotDeleted,
    as_dict,
)
from airflow_provider_fedsched.operators import attempts, records
from airflow_provider_fedsched.operators.arguments import FederationError, mark_outlets, seconds
from airflow_provider_fedsched.operators.earlier import GONE_TIMEOUT, EarlierTries
from airflow_provider_fedsched.operators.fences import FenceWatch, own_pod_manager

if TYPE_CHECKING:
    from kubernetes.client import models as k8s

    from airflow_provider_fedsched.federation.request import TaskRequest
    from airflow_provider_fedsched.hooks.federation import FederationHook
    from airflow_provider_fedsched.kube.pods import FederatedPodManager, Watch


class ClusterLeft(Exception):
    """Internal: the current cluster cannot run the pod; the next decision follows within the try."""

    def __init__(self, failure: ClusterFailure) -> None:
        super().__init__(failure.reason)
        self.failure = failure


class Judged(Exception):
    """Internal: the attempt was judged from a fresh read of its pod: the cluster's failure it carries."""

    def __init__(self, failure: ClusterFailure) -> None:
        super().__init__(failure.reason)
        self.failure = failure


class Contract(EarlierTries):
    """The operator's judging and bookkeeping steps (a base of FederatedKubernetesOperator)."""

    if TYPE_CHECKING:  # provided by FederatedKubernetesOperator

        @property
        def federation_hook(self) -> FederationHook: ...

        placement: PlacementRecord | None
        current_cluster: str | None
        pod_template: k8s.V1Pod
        task_request: TaskRequest
        preemptible: bool
        checkpoint: str | None
        data_rule: list[str] | None
        unschedulable_grace_seconds: float
        unreachable_grace: timedelta | float
        _records: records.RecordKeeper
        _watch: Watch
        _created: bool | None
        _settled: bool
        _inline_result: Any
        _earlier: PlacementRecord | None
        _context: Any

        @property
        def pod_manager(self) -> FederatedPodManager: ...

        def use_cluster(self, cluster: str, hook: FederationHook | None = None) -> None: ...

        def _grace(self) -> float: ...

        def _run_attempt(self, context: Any, attempt: Attempt) -> Any: ...

        def _publish_attempt(self) -> None: ...

        def _place_and_run(self, context: Any) -> Any: ...

    # Where a try resumes -------------------------------------------------------------------------------
    def _continue(self, context: Any) -> Any:
        """Reattach to this try's running attempt, or adopt an earlier try's pod (or its recorded
        success); then place."""
        attempt = self._record.current
        if attempt is None or attempt.outcome != "running":
            attempt = self._adopt_earlier(context)
            if attempt is not None and attempt.outcome == "succeeded":
                return None  # an earlier try's pod Succeeded: its success was taken
            if attempt is None and self._earlier_succeeded(context):
                return None
        if attempt is not None:
            self.log.info(
                "Reattaching to pod %s/%s in cluster %s", attempt.namespace, attempt.pod, attempt.cluster
            )
            try:
                return self._run_attempt(context, attempt)
            except ClusterLeft:
                pass  # evicted or gone while no worker watched: place again
        return self._place_and_run(context)

    # Start-up (sync) -------------------------------------------------------------------------------------
    def await_pod_start(self, pod: k8s.V1Pod) -> None:
        """Watch the pod until it runs; an Unschedulable pod past the grace period moves the task.

        Polls faster than KubernetesPodOperator does (failover should take seconds), then hands over to
        it for its own start-up checks once the pod runs, fails early, or exceeds its timeouts."""
        grace = float(self.unschedulable_grace_seconds)
        started = time.monotonic()
        scheduled_at: float | None = None
        first_unschedulable: float | None = None
        while True:
            remote_pod = self.pod_manager.read_pod(pod)
            remote = as_dict(remote_pod)
            found = disruption(remote)
            if found is not None:
                raise Judged(found)
            if (remote.get("status") or {}).get("phase") not in (None, "Pending", "Unknown"):
                break
            now = time.monotonic()
            if scheduled(remote):
                scheduled_at = scheduled_at or now
                if (
                    detect_pod_terminate_early_issues(remote_pod)
                    or now - scheduled_at >= self.startup_timeout_seconds
                ):
                    break
            elif unschedulable_message(remote) is not None:
                first_unschedulable = first_unschedulable or now
                if now - first_unschedulable >= grace:
                    raise Judged(failures.unschedulable(str(unschedulable_message(remote))))
            elif now - started >= self.schedule_timeout_seconds:
                reason = f"not scheduled within {self.schedule_timeout_seconds}s"
                raise Judged(failures.insufficient(reason))
            began = time.monotonic()
            self._publish_attempt()  # while the pod starts: it takes part of this wait, not more
            time.sleep(max(0.0, CONFIRM_INTERVAL - (time.monotonic() - began)))
        self._publish_attempt()
        KubernetesPodOperator.await_pod_start(self, pod)
        attempt = self._record.current
        if attempt is not None:
            attempt.running_at = datetime.now(UTC)

    # How an attempt ended ----------------------------------------------------------------------------
    def _judge(
        self, attempt: Attempt, exc: BaseException, seen: Observation | None = None
    ) -> ClusterFailure | None:
        """The cluster's failure, or None for the task's own: from a fresh read of the pod and events
        (``seen``, when already taken; or the read that already judged it: an unschedulable pod, an answer
        that never came)."""
        judged = next((e for e in chain(exc) if isinstance(e, ClusterLost | ClusterLeft | Judged)), None)
        if judged is not None:
            return judged.failure
        seen = seen or self._observe(attempt)
        if not seen.answered:
            return failures.unreachable(self.pod_manager.reason(seen.error))  # type: ignore[arg-type]
        if (
            seen.pod is None
            and self._created
            and (attempt.namespace, attempt.pod) not in self.pod_manager.removed
        ):
            # Gone before it ended: evicted by the cluster, or deleted by someone; its fate is unknown.
            found = classify([exc], None, seen.events, server=self.pod_manager.server)
            return found or failures.disappeared(f"pod {attempt.pod}")
        known = seen.pod if seen.pod is not None else as_dict(self.remote_pod or self.pod) or None
        return classify([exc], known, seen.events, server=self.pod_manager.server)

    def _observe(self, attempt: Attempt) -> Observation:
        """A fresh read of the attempt's pod and events, waiting within the grace for an answer."""
        deadline = time.monotonic() + self._watch.grace
        while True:
            seen = self.pod_manager.observe(attempt.namespace, attempt.pod)
            if seen.answered or time.monotonic() >= deadline:
                return seen
            time.sleep(min(2.0, max(0.05, deadline - time.monotonic())))

    def _after_failure(self, context: Any, attempt: Attempt, exc: BaseException) -> BaseException | None:
        """Record how the attempt ended; return what to raise: the task's own error, a FederationError
        when the try must fail, or ClusterLeft after the pod is gone and the cluster left; None when the
        pod had Succeeded before its cluster stopped answering (the try succeeds, its work is not re-run)."""
        seen = self._observe(attempt) if airflow_failed(exc) and not self.do_xcom_push else None
        if seen is not None and seen.phase == "Succeeded":
            self._done_while_airflow_failed(context, attempt, exc)
            return None
        failure = self._judge(attempt, exc, seen)
        if failure is None:
            self._finish(context, attempt, "failed", short_error(exc))
            self._make_sure_gone(attempt)
            return exc
        attempt.failed_at = attempt.failed_at or self._failed_at()
        self.log.warning(
            "Attempt %d in %s ended: %s (%s)", attempt.number, attempt.cluster, failure.kind, failure.reason
        )
        if failure.kind == "unreachable" and self._watch.ended_phase is not None:
            return self._ended_unread(context, attempt, failure, self._watch.ended_phase)
        if failure.kind == "unreachable" and self._created is not False:
            # The pod may still run: fence it; only a preemptible task may start its work elsewhere.
            gone = self.pod_manager.remove(attempt.namespace, attempt.pod, within=0.0)
            if not gone:
                self.federation_hook.add_orphan(attempt.cluster, attempt.namespace, attempt.pod)
            if not self.preemptible:
                reason = (
                    f"{failure.reason}; the pod may still run there, so the work is not started elsewhere "
                    f"(unreachable_grace {self._grace():g}s); "
                    + ("its pod was deleted" if gone else "its pod is deleted when the cluster answers again")
                )
                self._finish(context, attempt, "lost", reason)
                return FederationError(reason)
        elif not self.pod_manager.remove(attempt.namespace, attempt.pod, within=GONE_TIMEOUT):
            self.federation_hook.add_orphan(attempt.cluster, attempt.namespace, attempt.pod)
            if not self.preemptible:
                reason = f"{failure.reason}; the pod is not confirmed gone: the work is not started elsewhere"
                self._finish(context, attempt, "lost", reason)
                return FederationError(reason)
        self._leave(context, attempt, failure)
        return ClusterLeft(failure)

    def _done_while_airflow_failed(self, context: Any, attempt: Attempt, exc: BaseException) -> None:
        """Airflow's own API failed a step of the try (a metadata database restarting: KubernetesPodOperator's
        XCom push of the pod's name answered 500) while the pod ran, and a fresh read shows the pod
        Succeeded: the work is done, so the try succeeds. Its success is written down before the pod goes
        (should Airflow still fail, the error is raised with the pod left in place, and the retry adopts it);
        the full test-bed soak's ``sync_resumable[22]``: its Succeeded pod was deleted as "left after the
        task failed", and the retry ran the work a second time."""
        reason = f"pod {attempt.pod} Succeeded while Airflow failed a step of the try ({short_error(exc)})"
        self.log.warning("%s: its work is done, the try succeeds", reason)
        self._finish(context, attempt, "succeeded", reason)
        deletes = (OnFinishAction.DELETE_POD, OnFinishAction.DELETE_SUCCEEDED_POD)
        if self.on_finish_action in deletes and not self.pod_manager.remove(
            attempt.namespace, attempt.pod, within=GONE_TIMEOUT
        ):
            self.federation_hook.add_orphan(attempt.cluster, attempt.namespace, attempt.pod)

    def _make_sure_gone(self, attempt: Attempt) -> None:
        """The try fails with the task's own failure: its pod goes with it, as ``on_finish_action`` says,
        even when KubernetesPodOperator's cleanup did not run (the pod's name could not be published) or
        its delete was refused (a 403 from an API server that has just restarted): deleted now, confirmed,
        else written down and deleted by the next snapshot of its cluster. No pod outlives its try."""
        if self.on_finish_action == OnFinishAction.KEEP_POD:
            return
        seen = self.pod_manager.observe(attempt.namespace, attempt.pod, events=False)
        if seen.answered and seen.pod is None:
            return
        ended = seen.phase in ("Succeeded", "Failed")
        if ended and self.on_finish_action != OnFinishAction.DELETE_POD:
            return  # kept as asked (a running pod never is: it would outlive its try)
        self.log.info("Deleting pod %s/%s, left after the task failed", attempt.namespace, attempt.pod)
        if not self.pod_manager.remove(attempt.namespace, attempt.pod, within=GONE_TIMEOUT):
            self.federation_hook.add_orphan(attempt.cluster, attempt.namespace, attempt.pod)
            self.log.warning(
                "Pod %s/%s in %s is not confirmed deleted: it is deleted when its cluster allows it",
                attempt.namespace,
                attempt.pod,
                attempt.cluster,
            )

    def _ended_unread(
        self, context: Any, attempt: Attempt, failure: ClusterFailure, phase: str
    ) -> BaseException | None:
        """The pod was seen ``phase`` (its work is over), then its cluster stopped answering for longer than
        ``unreachable_grace``: the work is never started again, preemptible or not. Succeeded, with no
        XCom to read, the try succeeds without the pod's logs; otherwise it fails, and a retry waits for
        that cluster to adopt the pod. Either way the pod is deleted when its cluster answers again."""
        self.federation_hook.add_orphan(attempt.cluster, attempt.namespace, attempt.pod)
        if phase == "Succeeded" and not self.do_xcom_push:
            reason = (
                f"pod {attempt.pod} Succeeded; its cluster then stopped answering ({failure.reason}), so its "
                "logs were not read; the pod is deleted when the cluster answers again"
            )
            self.log.warning("%s", reason)
            self._finish(context, attempt, "succeeded", reason)
            return None
        reason = (
            f"pod {attempt.pod} {phase}, but its cluster stopped answering before its "
            f"{'result' if self.do_xcom_push else 'outcome'} was read ({failure.reason}); the work is not "
            "started again; the pod is deleted when the cluster answers again"
        )
        self._finish(context, attempt, "lost", reason)
        return FederationError(reason)

    def _watch_fenced(self, attempt: Attempt) -> FenceWatch | None:
        """While ``attempt`` runs, the pods this preemptible try fenced when their clusters stopped
        answering are read (:class:`FenceWatch`): one seen Succeeded stops ``attempt``'s pod, and its
        result is taken (:meth:`_take_fenced`). Not for ``do_xcom_push`` tasks: their result is read from
        the pod that runs it."""
        fenced = self._fenced(attempt)
        if not fenced:
            return None
        hook = self.federation_hook

        def stop_this_copy(done: Attempt) -> None:
            self.log.warning(
                "Pod %s, left in %s when that cluster stopped answering, Succeeded: stopping pod %s in %s, "
                "the work is not finished a second time",
                done.pod,
                done.cluster,
                attempt.pod,
                attempt.cluster,
            )
            stopped = own_pod_manager(hook, attempt.cluster).remove(
                attempt.namespace, attempt.pod, within=0.0
            )
            if not stopped:
                self.log.info("Pod %s is being stopped in %s", attempt.pod, attempt.cluster)

        return FenceWatch(hook, fenced, stop_this_copy).start()

    def _fenced(self, attempt: Attempt) -> list[Attempt]:
        """The pods this preemptible try left (fenced) in clusters that stopped answering, to read while
        ``attempt`` runs; none for ``do_xcom_push`` tasks (their result is read from the pod that ran)."""
        if not self.preemptible or self.do_xcom_push:
            return []
        return [a for a in self._record.attempts if a is not attempt and a.outcome == "unreachable"]

    def _take_fenced(self, context: Any, attempt: Attempt, done: Attempt) -> None:
        """``done``, a pod this try fenced, Succeeded; ``attempt``'s pod was stopped for it: the try ends
        in success with ``done``'s result. Both pods are deleted (or written down and deleted later)."""
        hook = self.federation_hook
        if not self.pod_manager.remove(attempt.namespace, attempt.pod, within=GONE_TIMEOUT):
            hook.add_orphan(attempt.cluster, attempt.namespace, attempt.pod)
        reason = (
            f"stopped: pod {done.pod} (attempt {done.number}), left in {done.cluster} when that cluster "
            "stopped answering, Succeeded: its result is taken, the work is not finished a second time"
        )
        records.end_attempt(hook, self._record, attempt, "cancelled", reason)
        self.use_cluster(done.cluster)
        if self.pod_manager.remove(done.namespace, done.pod, within=10.0):
            hook.forget_orphan(done.cluster, done.namespace, done.pod)
        else:
            hook.add_orphan(done.cluster, done.namespace, done.pod)
        hook.state.orphans.forget_swept(done.cluster, done.namespace, done.pod)
        self._succeed_with(
            context,
            done,
            f"pod {done.pod} Succeeded in {done.cluster} while this try ran its work elsewhere (that "
            f"cluster had stopped answering): its result is taken; pod {attempt.pod} in {attempt.cluster} "
            "was stopped",
        )

    def _result_grace(self) -> float:
        """How long a pod whose work is over is waited for: ``unreachable_grace``, preemptible or not."""
        return float(seconds(self.unreachable_grace, "unreachable_grace") or 0)

    def _failed_at(self) -> datetime:
        """When the failure was first seen: the first call without an answer, if there was one."""
        since = self._watch.unanswered_since or self._watch.node_unready_since
        now = datetime.now(UTC)
        return now - timedelta(seconds=time.monotonic() - since) if since is not None else now

    def _leave(self, context: Any, attempt: Attempt, failure: ClusterFailure) -> None:
        """Cool the cluster (or namespace) down as far as the failure says, and leave it for this try."""
        record = self._record
        records.end_attempt(self.federation_hook, record, attempt, failure.kind, failure.reason)
        if failure.kind != "evicted":  # an eviction is about one pod or node, not the cluster
            self.federation_hook.cool_down(
                attempt.cluster,
                f"{failure.kind}: {failure.reason}",
                namespace=attempt.namespace if failure.namespace_only else None,
            )
        target = record.impossible if failure.permanent else record.excluded
        target[attempt.cluster] = records.short(f"{failure.kind}: {failure.reason}")
        record.excluded_at[attempt.cluster] = datetime.now(UTC)
        self._save(context)

    def process_pod_deletion(self, pod: k8s.V1Pod, *, reraise: bool = True) -> bool:
        """KubernetesPodOperator's deletion of a finished pod; a pod whose cluster never accepted the delete
        is written down as an orphan, deleted by the next snapshot that finds the cluster answering."""
        attempt = self.placement.current if self.placement else None
        phase = pod.status.phase if pod is not None and pod.status is not None else None
        if attempt is not None and attempt.outcome == "running" and phase == "Succeeded":
            # Written down before the pod goes: a try ended between the two (Airflow killing a starved
            # task) leaves either the pod or the record of its success for the retry, never neither.
            self._finish(self._context, attempt, "succeeded", "")
        try:
            deleted: bool = KubernetesPodOperator.process_pod_deletion(self, pod, reraise=True)
            return deleted
        except PodNotDeleted as exc:
            self.federation_hook.add_orphan(exc.cluster, exc.namespace, exc.name)
            self.log.warning("%s; it is deleted when the cluster answers again", exc)
            return False
        except Exception as exc:
            # Refused with an answer (401, 403, 409...): written down all the same, never left behind.
            metadata = pod.metadata if pod is not None else None
            if metadata is not None and self.current_cluster is not None:
                self.federation_hook.add_orphan(self.current_cluster, metadata.namespace, metadata.name)
                self.log.warning(
                    "Pod %s/%s in %s was not deleted (%s); it is deleted when the cluster allows it",
                    metadata.namespace,
                    metadata.name,
                    self.current_cluster,
                    short_error(exc),
                )
            if reraise:
                raise
            return False

    def _cancel(self) -> None:
        """The task was ended (UI, API, timeout, or Airflow resetting a try it took for orphaned): delete
        the pod where it runs and record it.

        The pod is written down first: a process being killed may not live to the end of the delete.
        A pod already Succeeded (read now, or seen to end before its cluster went silent) is recorded as
        a success before it goes, so that a retry never runs the work again (the full soak: four tries
        reset this way after their pods had run to the end were run a second time)."""
        self._killed = True
        attempt = self.placement.current if self.placement else None
        if attempt is None or attempt.outcome != "running":
            return
        self.use_cluster(attempt.cluster)
        hook = self.federation_hook
        hook.add_orphan(attempt.cluster, attempt.namespace, attempt.pod)
        seen = self.pod_manager.observe(attempt.namespace, attempt.pod, events=False)
        status = ((seen.pod or {}).get("status") or {}) if seen.answered else {}
        ended = status.get("phase") if seen.answered else self._watch.ended_phase
        if ended == "Succeeded" and not self.do_xcom_push:
            why = f"pod {attempt.pod} Succeeded before the task was ended: its work is done, never run again"
            records.end_attempt(hook, self._record, attempt, "succeeded", why)
            records.end_try(self._record, "succeeded", why)
        gone = seen.answered and seen.pod is None
        gone = gone or self.pod_manager.remove(attempt.namespace, attempt.pod, within=10.0)
        if gone:
            hook.forget_orphan(attempt.cluster, attempt.namespace, attempt.pod)
        if attempt.outcome == "running":
            why = "the task was ended while its pod ran: " + ("pod deleted" if gone else "pod deleted later")
            records.end_attempt(hook, self._record, attempt, "cancelled", why)
            records.end_try(self._record, "failed", why)
        if self._context is not None:
            self._save(self._context)
        self.log.info("%s (%s/%s in %s)", attempt.reason, attempt.namespace, attempt.pod, attempt.cluster)

    def _attempt_pod(self, attempt: Attempt) -> k8s.V1Pod:
        """The attempt's pod: the task's template, labelled, told where it runs and whether it resumes."""
        return attempts.attempt_pod(
            self.pod_template,
            self._record,
            attempt,
            base_container=self.base_container_name,
            checkpoint=self.checkpoint,
        )

    # Record keeping ----------------------------------------------------------------------------------
    @property
    def _record(self) -> PlacementRecord:
        if self.placement is None:
            raise RuntimeError("no placement record: execute() has not started")
        return self.placement

    def _save(self, context: Any) -> None:
        self._records.save(context, self._record)

    def _finish(self, context: Any, attempt: Attempt, outcome: str, reason: str) -> None:
        records.end_attempt(self.federation_hook, self._record, attempt, outcome, reason)
        records.end_try(self._record, outcome, reason)
        self._save(context)
        if outcome == "succeeded" and self.outlets:  # where its outputs were written, for their readers
            try:
                region = self.federation_hook.spec.cluster(attempt.cluster).region
            except SpecError:
                return  # a member gone from the spec since: no place to point a reader to
            mark_outlets(context, self.outlets, attempt.cluster, region, self.data_rule)
        self.log.info("Placement: %s", self._record.summary())

    def _give_up(self, context: Any, reason: str) -> FederationError:
        records.end_try(self._record, "failed", reason)
        self._save(context)
        return FederationError(reason)


def airflow_failed(exc: BaseException) -> bool:
    """Whether Airflow's own API failed the try's step (the Task SDK's error for an API server that answered
    with an error or not at all), not the pod or its cluster."""
    from airflow.sdk.exceptions import AirflowRuntimeError

    return any(isinstance(e, AirflowRuntimeError) for e in chain(exc))


def short_error(exc: BaseException) -> str:
    # An API refusal's first line is only "(403)": the server's message names what was refused.
    refused = api_refusal(exc)
    if refused:
        return refused
    return str(exc).splitlines()[0][:500] if str(exc) else type(exc).__name__
