"""A divided Job's try: ``FederatedKubernetesJobOperator(divide=True)`` (docs/jobs.md, "Divided jobs").

An Indexed Job of ``completions`` independent indices is split over the members that may run one of its
pods (:mod:`federation.division`: every engine rule holds for every slice): one Job per member with its
slice. Kubernetes has no index offset, so each slice's pods are told their global indices by
:data:`ENV_INDICES` (the slice's indices as ranges, ``0-19,25``, as Kubernetes writes completed indexes):
the pod's global index is the ``JOB_COMPLETION_INDEX``-th of them. Indices beyond every member's room wait
in the federation and are dealt as room frees (``overflow=False``: the replay measured it), never more pods
at once over all slices than the Job's ``parallelism``.

The try succeeds when every global index succeeded. A member that refuses a slice (its create refused, no
pod of it created or a pod unschedulable past ``unschedulable_grace_seconds``, an eviction) has the slice's
Job deleted with its pods and confirmed gone first; then only the indices that had not succeeded there are
dealt again to the others. While a member does not answer, its indices stay where they are (fenced) and the
other slices are watched on; past ``unreachable_grace`` (or when a slice's Job vanished: its pods' fate is
unknown) the slice may still run or have run: its Job is fenced (deleted when the member answers) and the
try fails rather than start its indices twice. A slice's own failure (its backoff limit) fails the try.
However the try ends, every slice's Job goes with its pods (no pod outlives its try).

A retry never runs again an index an earlier try saw succeed (its record) or that an earlier try's slice
shows succeeded (found by the task label in every member, then deleted with its pods); an earlier slice not
confirmed gone, or a member that does not answer the search, fails the try: its indices may still run.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from airflow.sdk.exceptions import AirflowException
from kubernetes.client import models as k8s

from airflow_provider_fedsched.federation.costs import Estimate, slice_estimate
from airflow_provider_fedsched.federation.division import (
    IndexSlice,
    divide,
    format_ranges,
    parse_ranges,
    shares_of,
)
from airflow_provider_fedsched.federation.record import FAILURE_KINDS, Attempt
from airflow_provider_fedsched.federation.request import GangRole, TaskRequest
from airflow_provider_fedsched.federation.spec import SpecError
from airflow_provider_fedsched.kube import failures
from airflow_provider_fedsched.kube.clients import sync_api_client
from airflow_provider_fedsched.kube.failures import ClusterFailure, classify, never_sent
from airflow_provider_fedsched.kube.jobs import GangView, JobManager
from airflow_provider_fedsched.kube.pods import unanswered
from airflow_provider_fedsched.operators import attempts, records
from airflow_provider_fedsched.operators.arguments import FederationError, seconds
from airflow_provider_fedsched.operators.try_states import GONE_TIMEOUT, Judged, short_error
from airflow_provider_fedsched.render import decision_table

if TYPE_CHECKING:
    from airflow_provider_fedsched.federation.decision import Decision

__all__ = ["ENV_INDICES", "INDICES_ANNOTATION", "DividedRun", "global_index", "succeeded_indices"]

ENV_INDICES = "FEDSCHED_INDICES"
"""The slice's global indices, as ranges (``0-19,25``): a pod's global index is the
``JOB_COMPLETION_INDEX``-th of them (:func:`global_index`)."""
INDICES_ANNOTATION = "fedsched.io/indices"
"""On a slice's Job: its global indices (as :data:`ENV_INDICES`), for a retry that finds it."""
COMPLETION_INDEX_LABEL = "batch.kubernetes.io/job-completion-index"
KILL_DELETE_WITHIN = 10.0


def global_index(indices: str, completion_index: int | str) -> int:
    """The global index of the pod at ``JOB_COMPLETION_INDEX`` ``completion_index`` of a slice whose
    :data:`ENV_INDICES` is ``indices`` (what a pod computes; the tests judge with it)."""
    return parse_ranges(indices, ENV_INDICES)[int(completion_index)]


def succeeded_indices(view: GangView, indices: tuple[int, ...]) -> set[int]:
    """The global indices a slice's Job shows succeeded: its ``completedIndexes`` and its Succeeded pods."""
    if view.job is None:
        return set()
    local: set[int] = set()
    completed = (view.job.get("status") or {}).get("completedIndexes") or ""
    with contextlib.suppress(SpecError):  # unreadable: the pods below still say which succeeded
        local.update(parse_ranges(completed, "status.completedIndexes", below=len(indices)))
    for pod in view.pods:
        labels = (pod.get("metadata") or {}).get("labels") or {}
        position = str(labels.get(COMPLETION_INDEX_LABEL))
        if (pod.get("status") or {}).get("phase") == "Succeeded" and position.isdigit() and len(position) < 7:
            local.add(int(position))
    if view.complete:
        local = set(range(len(indices)))
    return {indices[position] for position in local if position < len(indices)}


def _started_and_running(pod: dict[str, Any]) -> bool:
    """A pod bound to a node that has not ended (being deleted or not): its container may be running the
    work, and may still end Succeeded."""
    status, spec = pod.get("status") or {}, pod.get("spec") or {}
    return bool(spec.get("nodeName")) and status.get("phase") not in ("Succeeded", "Failed")


def slice_pods(view: GangView | None, indices: tuple[int, ...]) -> str:
    """Where a slice's pods ran and how they ended, as ``view`` (its last read) showed them, by global
    index: ``on node-1: 0-4 Succeeded; on node-2: 5-7 Succeeded, 8 Running; 9 no pod``."""
    if view is None:
        return "never read"
    by_node: dict[str, dict[str, list[int]]] = {}
    seen: set[int] = set()
    for pod in view.pods:
        labels = (pod.get("metadata") or {}).get("labels") or {}
        position = str(labels.get(COMPLETION_INDEX_LABEL))
        if not (position.isdigit() and len(position) < 7 and int(position) < len(indices)):
            continue
        index = indices[int(position)]
        node = str((pod.get("spec") or {}).get("nodeName") or "no node")
        phase = str((pod.get("status") or {}).get("phase") or "Pending")
        by_node.setdefault(node, {}).setdefault(phase, []).append(index)
        seen.add(index)
    parts = [
        f"on {node}: "
        + ", ".join(f"{format_ranges(sorted(found))} {phase}" for phase, found in sorted(phases.items()))
        for node, phases in sorted(by_node.items())
    ]
    done = succeeded_indices(view, indices) - seen  # succeeded pods already gone (completedIndexes)
    if done:
        parts.append(f"{format_ranges(sorted(done))} Succeeded (pods gone)")
    unseen = sorted(set(indices) - seen - done)
    if unseen:
        parts.append(f"{format_ranges(unseen)} no pod")
    return "; ".join(parts)


@dataclass
class Slice:
    """One member's running Job of the divided Job."""

    attempt: Attempt
    indices: tuple[int, ...]
    parallelism: int
    unschedulable_since: float | None = None
    silent_since: float | None = None
    """Since when its member has not answered (monotonic), while it does not."""
    done: set[int] = field(default_factory=set)
    last_view: GangView | None = None
    """Its Job and pods as last read: what the task log says of the slice when it ends."""


class DividedRun:
    """One try of a divided Job, run by its operator (sync: the worker watches every slice)."""

    def __init__(self, operator: Any, context: Any) -> None:
        # ``operator``: the FederatedKubernetesJobOperator whose try this is (not imported: it imports this)
        self.op = operator
        self.context = context
        self.hook = operator.federation_hook
        self.completions, self.parallelism = operator.division_size
        self.done: set[int] = set()
        self.running: list[Slice] = []
        self.waiting: list[int] = []
        self._managers: dict[str, JobManager] = {}
        self._deal_due = True
        self._placed = False
        self._earlier_found: set[int] = set()

    @property
    def record(self) -> Any:
        return self.op._record

    # The try ---------------------------------------------------------------------------------------------
    def run(self) -> Any:
        try:
            self.done = self._earlier_done()
            self.waiting = [i for i in range(self.completions) if i not in self.done]
            poll = float(self.op.job_poll_interval)
            while True:
                self._check_killed()
                if not self.waiting and not self.running:
                    return self._succeeded()
                if self.waiting and self._deal_due and self._pods_left() > 0:
                    self._deal()
                for piece in list(self.running):
                    self._check_killed()
                    self._judge(piece)
                if self.waiting or self.running:
                    time.sleep(poll)
        finally:
            self._end_all()

    def _save(self) -> None:
        """The record (with every index seen succeeded so far: a retry never runs them again), saved."""
        done = self.done.union(*(piece.done for piece in self.running))
        self.record.succeeded_indices = format_ranges(done)
        self.op._save(self.context)

    def _check_killed(self) -> None:
        if self.op._killed:
            why = self.record.reason or "the task was ended while its slices ran"
            raise AirflowException(f"{why}; no slice is started again")

    def _pods_left(self) -> int:
        return int(self.parallelism) - sum(piece.parallelism for piece in self.running)

    # Dealing the waiting indices ---------------------------------------------------------------------------
    def _deal(self) -> None:
        """Decide for one pod of the Job; deal the waiting indices over the members by their room now."""
        op, record, request = self.op, self.record, self.op.task_request
        self._deal_due = False
        decision = self.hook.decide(
            request,
            exclude=record.excluded,
            excluded_at=record.excluded_at,
            impossible=record.impossible,
            policy=op.policy_spec,
        )
        if decision.outcome == "impossible":
            raise self._give_up(f"no member cluster can ever run this job's pods: {decision.reason}")
        names = [c.cluster for c in decision.candidates] + [r.cluster for r in decision.rejected]
        view = self.hook.view(names, request.namespace)
        shares, excluded = shares_of(
            decision,
            request,
            self.hook.spec,
            view.snapshots,
            reservations=view.reservations,
            in_flight=view.in_flight,
        )
        todo = list(self.waiting)
        division = divide(
            len(todo),
            shares,
            parallelism=min(self._pods_left(), len(todo)),
            excluded=excluded,
            overflow=False,
        )
        decision.extra["division"] = {
            cluster: why.replace(f"of {len(todo)} indices", f"of {len(todo)} waiting indices")
            for cluster, why in division.reasons.items()
        }
        dealt = [
            IndexSlice(
                cluster=piece.cluster,
                indices=tuple(todo[position] for position in piece.indices),
                parallelism=piece.parallelism,
            )
            for piece in division.slices
        ]
        costs = {
            piece.cluster: slice_estimate(
                self.hook.spec,
                request,
                piece.cluster,
                indices=len(piece.indices),
                completions=self.completions,
                parallelism=piece.parallelism,
            )
            for piece in dealt
        }
        # Each slice's indices and estimate, where the decision is explained (the record, the page).
        decision.extra["slices"] = {
            piece.cluster: {"indices": piece.ranges, "parallelism": piece.parallelism}
            | costs[piece.cluster].to_dict()
            for piece in dealt
        }
        records.add_decision(record, decision.to_dict())
        if record.request is None:
            record.request = request.model_dump(mode="json")
        op.log.info("Federation decision for one pod of the divided job:\n%s", decision_table(decision))
        launched: set[int] = set()
        for piece in dealt:
            if self._launch(decision, piece, division.reasons, costs[piece.cluster]):
                launched.update(piece.indices)
        self.waiting = [index for index in todo if index not in launched]
        if launched:
            records.stop_waiting(record)
        elif not self.running:
            self._wait(decision)
        if self.waiting:
            op.log.info("%d index(es) wait for room in the federation", len(self.waiting))

    def _wait(self, decision: Decision) -> None:
        """Nothing runs and nothing could be dealt: wait (within ``wait_timeout``) for room."""
        waited = records.start_waiting(self.record, decision.reason)
        limit = seconds(self.op.wait_timeout, "wait_timeout") or 0.0
        if waited >= limit:
            raise self._give_up(f"no member could take an index within {limit:g}s: {decision.reason}")
        self._save()
        self._deal_due = True  # the next poll decides again

    def _launch(self, decision: Decision, piece: IndexSlice, reasons: dict[str, str], cost: Estimate) -> bool:
        """Hold the slice's room on its member, write its attempt down (with the slice's ``cost``
        estimate), create its Job. False when the room is gone or the member refused the Job (its indices
        wait again)."""
        op, record, hook = self.op, self.record, self.hook
        cluster, indices, parallelism = piece.cluster, piece.indices, piece.parallelism
        if op._killed:
            return False
        number = len(record.attempts) + 1
        placement_id = record.placement_id(number)
        request = op.task_request
        others = request.model_dump(exclude={"resources", "gang"})
        hold = TaskRequest.for_gang([GangRole(count=parallelism, resources=request.resources)], **others)
        if not hook.reserve(cluster, hold, placement_id, policy=op.policy_spec):
            op.log.info("The room on %s was taken meanwhile: its indices wait", cluster)
            self._deal_due = True
            return False
        namespace = (
            hook.spec.cluster(cluster).namespace
            or op.namespace
            or hook.access(cluster).namespace
            or "default"
        )
        attempt = attempts.new_attempt(record, decision, cluster, namespace, op.pod_template.metadata.name)
        attempt.indices = piece.ranges
        attempt.preferred_node = None  # many pods: no one node is preferred
        attempt.decision = records.short(f"slice {piece.ranges}: {reasons.get(cluster, '')}")
        # The slice's own figures, not the decision's (which are one pod's on its chosen member).
        attempt.price_per_hour, attempt.egress_gb = cost.per_hour, cost.egress_gb
        attempt.egress_cost = cost.egress_cost
        previous = record.current
        if previous is not None and previous.failed_at is not None and not self.running:
            record.failover_seconds += (attempt.started_at - previous.failed_at).total_seconds()
        record.attempts.append(attempt)
        record.cluster = record.cluster or cluster
        record.outcome, record.reason = "running", ""
        op._records.save(self.context, record, publish=False)
        try:
            self._manager(cluster).create(self._job(attempt, piece))
        except Exception as exc:
            if never_sent(exc) or not unanswered(exc):
                failure = classify([exc], None, server=hook.access(cluster).server)
                if failure is None:
                    records.end_attempt(
                        hook, record, attempt, "failed", f"job {attempt.pod} not created: {short_error(exc)}"
                    )
                    raise
                self._leave(attempt, failure)
                return False
            # The create may have landed: the reads that follow find out (within the grace).
        self.running.append(Slice(attempt, indices, parallelism))
        self._save()
        if not self._placed:  # the try's wait for its first slice, once
            self._placed = True
            records.note_placed(hook, record, cluster, request.tenant)
        op.log.info(
            "Attempt %d: job %s/%s in %s runs indices %s (%d at a time)",
            attempt.number,
            namespace,
            attempt.pod,
            cluster,
            piece.ranges,
            parallelism,
        )
        return True

    def _job(self, attempt: Attempt, piece: IndexSlice) -> k8s.V1Job:
        """The attempt's Job (the task's, as a whole Job's) running only the slice: ``completions`` its size,
        ``parallelism`` its share, each pod told the slice's global indices."""
        job = self.op._attempt_job(attempt)
        job.spec.completions = len(piece.indices)
        job.spec.parallelism = piece.parallelism
        job.spec.completion_mode = "Indexed"
        job.metadata.annotations = {**(job.metadata.annotations or {}), INDICES_ANNOTATION: piece.ranges}
        for container in job.spec.template.spec.containers:
            if container.name == self.op.base_container_name:
                kept = [var for var in (container.env or []) if var.name != ENV_INDICES]
                container.env = [*kept, k8s.V1EnvVar(name=ENV_INDICES, value=piece.ranges)]
        return job

    def _manager(self, cluster: str) -> JobManager:
        """Job I/O in ``cluster`` through its own bounded client (the slices live in several members)."""
        if cluster not in self._managers:
            import kubernetes

            api = sync_api_client(self.hook.access(cluster))
            self._managers[cluster] = JobManager(
                kubernetes.client.BatchV1Api(api), kubernetes.client.CoreV1Api(api)
            )
        return self._managers[cluster]

    # Watching the slices ---------------------------------------------------------------------------------
    def _read(self, piece: Slice) -> GangView | None:
        """A fresh read of the slice's Job and pods; None while its member does not answer (within the
        grace, the other slices are watched meanwhile and its indices stay where they are: fenced)."""
        attempt = piece.attempt
        try:
            view = self._manager(attempt.cluster).read(attempt.namespace, attempt.pod)
        except Exception as exc:
            if not unanswered(exc) or self.op._killed:
                raise
            now = time.monotonic()
            if piece.silent_since is None:
                piece.silent_since = now
                self.op.log.warning(
                    "%s does not answer about slice %s: its indices wait for it up to %gs (%s)",
                    attempt.cluster,
                    attempt.indices,
                    self.op._grace(),
                    short_error(exc),
                )
            if now - piece.silent_since >= self.op._grace():
                reason = f"{short_error(exc)} for {now - piece.silent_since:.0f}s"
                raise Judged(failures.unreachable(reason)) from exc
            return None
        piece.silent_since = None
        piece.last_view = view
        return view

    def _judge(self, piece: Slice) -> None:
        """One judgement of a slice: complete (its indices done, its Job deleted), failed on its own (the
        try fails), refused by its member (its unsucceeded indices wait again), or running on."""
        attempt = piece.attempt
        try:
            view = self._read(piece)
            if view is None:
                return
            if view.job is None:
                raise Judged(failures.disappeared(f"job {attempt.pod}"))
            piece.done |= succeeded_indices(view, piece.indices)
            if view.complete:
                if attempt.running_at is None:
                    # Ended between two reads: it ran from its first container's start (the launch, when
                    # its pods are gone; a cost never undercounted).
                    attempt.running_at = view.started_at or attempt.started_at
                self._slice_done(piece)
                return
            failed = view.failed
            if failed is not None:
                reason = f"job {attempt.pod} (indices {attempt.indices}) failed: {failed}"
                self._log_pods(piece)
                records.end_attempt(self.hook, self.record, attempt, "failed", reason)
                self.running.remove(piece)
                self._remove(attempt)
                raise self._give_up(reason, own=True)
            found = view.disrupted()
            if found is not None:
                raise Judged(found)
            grace = float(self.op.unschedulable_grace_seconds)
            if attempt.running_at is None:
                if view.placed_together() > 0 or piece.done:
                    attempt.running_at = datetime.now(UTC)
                    self._save()
                elif (datetime.now(UTC) - attempt.started_at).total_seconds() >= grace and not view.pods:
                    # No pod of it exists: its member refuses to create them (a quota, an admission rule).
                    raise Judged(
                        failures.insufficient(f"no pod of job {attempt.pod} was created within {grace:g}s")
                    )
            waiting_for_node = view.unschedulable()
            if waiting_for_node is None:
                piece.unschedulable_since = None
            else:
                now = time.monotonic()
                piece.unschedulable_since = piece.unschedulable_since or now
                if now - piece.unschedulable_since >= grace:
                    raise Judged(failures.unschedulable(waiting_for_node))
        except Judged as judged:
            self._rejected(piece, judged.failure)

    def _last_read(self, piece: Slice) -> None:
        """Before a slice's Job is deleted: the indices it shows succeeded are done (kept, never run again);
        a member that does not answer leaves what the last read showed."""
        attempt = piece.attempt
        with contextlib.suppress(Exception):
            view = self._manager(attempt.cluster).read(attempt.namespace, attempt.pod)
            piece.done |= succeeded_indices(view, piece.indices)
            piece.last_view = view
        self.done |= piece.done
        self._log_pods(piece)

    def _log_pods(self, piece: Slice) -> None:
        """The slice's pods in the task log: where each index ran and how it ended (its last read)."""
        attempt = piece.attempt
        self.op.log.info(
            "Slice %s (job %s in %s): %s",
            attempt.indices,
            attempt.pod,
            attempt.cluster,
            slice_pods(piece.last_view, piece.indices),
        )

    def _slice_done(self, piece: Slice) -> None:
        attempt = piece.attempt
        self.done.update(piece.indices)
        # Written down before the Job goes: a try ended between the two keeps the record of its success.
        records.end_attempt(self.hook, self.record, attempt, "succeeded", "")
        self.running.remove(piece)
        self._save()
        self.op.log.info("Job %s in %s ran indices %s", attempt.pod, attempt.cluster, attempt.indices)
        self._log_pods(piece)
        self._remove(attempt)
        self._deal_due = True  # room freed: deal the waiting indices

    def _rejected(self, piece: Slice, failure: ClusterFailure) -> None:
        """The member refused the slice: delete its Job with its pods and confirm it; then the indices that
        did not succeed there wait for another member. Unconfirmed, or silent past the grace: fenced, and the
        try fails rather than run them twice."""
        attempt = piece.attempt
        attempt.failed_at = attempt.failed_at or datetime.now(UTC)
        self.op.log.warning(
            "Slice %s in %s ended: %s (%s)", attempt.indices, attempt.cluster, failure.kind, failure.reason
        )
        within = 0.0 if failure.kind == "unreachable" else GONE_TIMEOUT
        manager = self._manager(attempt.cluster)
        self._last_read(piece)
        removal = manager.remove(attempt.namespace, attempt.pod, within=within)
        self.running.remove(piece)
        if removal.complete:
            piece.done = set(piece.indices)
        self.done |= piece.done
        if not removal.gone:
            self._fence(attempt)
        if removal.complete:
            records.end_attempt(self.hook, self.record, attempt, "succeeded", f"completed ({failure.reason})")
            return
        unfinished = [index for index in piece.indices if index not in piece.done]
        if failure.kind == "unreachable" or not removal.gone:
            where = (
                "its job is deleted when the member answers" if not removal.gone else "its job was deleted"
            )
            reason = (
                f"{failure.reason}; {len(unfinished)} index(es) of job {attempt.pod} may still run there, so "
                f"they are not started elsewhere; {where}"
            )
            records.end_attempt(self.hook, self.record, attempt, "lost", reason)
            raise self._give_up(reason)
        self._leave(attempt, failure)
        self.op.log.info(
            "%d index(es) of the slice succeeded in %s and are kept; %d wait for another member",
            len(piece.done),
            attempt.cluster,
            len(unfinished),
        )
        self.waiting = sorted({*self.waiting, *unfinished})

    def _leave(self, attempt: Attempt, failure: ClusterFailure) -> None:
        """The member refused a slice: it is left for this try (as a whole Job's member is), within the
        try's ``max_cluster_attempts`` refusals."""
        self.record.succeeded_indices = format_ranges(self.done)
        self.op.leave_cluster(self.context, attempt, failure)
        self.record.outcome, self.record.reason = "running", ""
        self._deal_due = True
        refused = [a for a in self.record.attempts if a.outcome in FAILURE_KINDS]
        if len(refused) >= self.op.max_cluster_attempts:
            raise self._give_up(f"gave up after {len(refused)} slice(s) refused by their members")

    # The end of the try ----------------------------------------------------------------------------------
    def _succeeded(self) -> None:
        record = self.record
        ran: dict[str, int] = {}
        for attempt in record.attempts:
            if attempt.outcome == "succeeded" and attempt.indices:
                ran[attempt.cluster] = ran.get(attempt.cluster, 0) + len(parse_ranges(attempt.indices, "x"))
        if ran:
            record.cluster = max(ran, key=lambda cluster: (ran[cluster], cluster))
        reason = "every index succeeded: " + ", ".join(f"{c} {n}" for c, n in sorted(ran.items()))
        records.end_try(record, "succeeded", reason)
        self._save()
        self.op.log.info("Placement: %s", record.summary())

    def _give_up(self, reason: str, *, own: bool = False) -> Exception:
        records.end_try(self.record, "failed", reason)
        self._save()
        return AirflowException(reason) if own else FederationError(reason)

    def _remove(self, attempt: Attempt) -> None:
        """A slice's Job goes with its pods (``on_finish_action`` ``keep_pod`` keeps a finished one)."""
        if attempt.outcome == "succeeded" and self.op.on_finish_action.value == "keep_pod":
            return
        if (
            not self._manager(attempt.cluster)
            .remove(attempt.namespace, attempt.pod, within=GONE_TIMEOUT)
            .gone
        ):
            self._fence(attempt)

    def _fence(self, attempt: Attempt) -> None:
        self.hook.add_orphan(attempt.cluster, attempt.namespace, attempt.pod, kind="job")
        self.op.log.warning(
            "Job %s/%s in %s is not confirmed deleted: it is deleted when the cluster answers again",
            attempt.namespace,
            attempt.pod,
            attempt.cluster,
        )

    def _end_all(self) -> None:
        """However the try ends: every slice still running is deleted with its pods (or fenced)."""
        for piece in list(self.running):
            attempt = piece.attempt
            self._last_read(piece)
            removal = self._manager(attempt.cluster).remove(
                attempt.namespace, attempt.pod, within=GONE_TIMEOUT
            )
            if not removal.gone:
                self._fence(attempt)
            if attempt.outcome == "running":
                outcome = "succeeded" if removal.complete else "cancelled"
                why = (
                    "completed"
                    if removal.complete
                    else "the try ended: job deleted" + ("" if removal.gone else " later")
                )
                records.end_attempt(self.hook, self.record, attempt, outcome, why)
            self.running.remove(piece)
        if self.record.ended_at is None:
            records.end_try(self.record, "failed", "the try ended before every index succeeded")
        self._save()

    def cancel(self) -> None:
        """``on_kill``: every running slice's Job is deleted with its pods, written down first."""
        for piece in list(self.running):
            attempt = piece.attempt
            self.hook.add_orphan(attempt.cluster, attempt.namespace, attempt.pod, kind="job")
            self._last_read(piece)
            removal = self._manager(attempt.cluster).remove(
                attempt.namespace, attempt.pod, within=KILL_DELETE_WITHIN
            )
            if removal.gone:
                self.hook.forget_orphan(attempt.cluster, attempt.namespace, attempt.pod, "job")
            if attempt.outcome == "running":
                outcome = "succeeded" if removal.complete else "cancelled"
                why = (
                    "completed before the task was ended"
                    if removal.complete
                    else (
                        "the task was ended while its slice ran: job deleted"
                        + ("" if removal.gone else " later")
                    )
                )
                records.end_attempt(self.hook, self.record, attempt, outcome, why)
        self.running.clear()  # each one deleted, or written down and deleted when its member answers
        if self.record.ended_at is None:
            records.end_try(self.record, "failed", "the task was ended while its slices ran")
        self._save()

    # Earlier tries ---------------------------------------------------------------------------------------
    def _earlier_done(self) -> set[int]:
        """The indices earlier tries saw succeed (their record, their slices' Jobs found in the members,
        which are deleted); fails the try when an earlier slice may still run."""
        done: set[int] = set()
        earlier = self.op._earlier
        if earlier is not None:
            for attempt in earlier.attempts:
                if attempt.outcome == "succeeded" and attempt.indices:
                    done.update(self._indices_of(attempt.indices))
            if earlier.succeeded_indices:
                done.update(self._indices_of(earlier.succeeded_indices))
            # A slice left in a silent member that the snapshot deleting it saw complete (hooks/sensing.py).
            for attempt in earlier.known_attempts:
                left = attempt.outcome in ("unreachable", "lost", "running") and attempt.indices
                where = (attempt.cluster, attempt.namespace, attempt.pod)
                if left and self.hook.swept_success(*where, "job"):
                    done.update(self._indices_of(str(attempt.indices)))
                    self.hook.forget_swept_success(*where, "job")
        self._earlier_found = done
        self.op._adopt_earlier(self.context)  # -> take_earlier with what the members hold
        return self._earlier_found

    def take_earlier(self, found: list[tuple[str, Any]]) -> None:
        """An earlier try's slice Jobs found in the members (the operator's search for an earlier try's
        Jobs): the indices each shows succeeded are done, never run again; each is deleted with its pods.
        One not confirmed gone, or a member that did not answer the search, fails the try: its indices
        may still run."""
        if self.record.unsearched:
            raise self._give_up(
                f"an earlier try's slices may still run in {', '.join(self.record.unsearched)}, which did "
                "not answer the search: no index is started again"
            )
        for cluster, job in found:
            metadata = job["metadata"]
            annotated = (metadata.get("annotations") or {}).get(INDICES_ANNOTATION)
            indices = self._indices_of(annotated) if annotated else tuple(range(self.completions))
            manager = self._manager(cluster)
            view = self._once_started_pods_end(manager, cluster, metadata)
            succeeded = succeeded_indices(view, indices)
            removal = manager.remove(metadata["namespace"], metadata["name"], within=GONE_TIMEOUT)
            if removal.complete:
                succeeded = set(indices)
            self._earlier_found |= succeeded
            self.hook.forget_orphan(cluster, metadata["namespace"], metadata["name"], "job")
            self.op.log.info(
                "Job %s of an earlier try in %s: %d of its indices succeeded (never run again); deleted",
                metadata["name"],
                cluster,
                len(succeeded),
            )
            if not removal.gone:
                self.hook.add_orphan(cluster, metadata["namespace"], metadata["name"], kind="job")
                raise self._give_up(
                    f"job {metadata['name']} of an earlier try is not confirmed stopped in {cluster} within "
                    f"{GONE_TIMEOUT:g}s: its indices may still run, so none is started again"
                )

    def _once_started_pods_end(self, manager: JobManager, cluster: str, metadata: Any) -> GangView:
        """The earlier slice's Job once none of its pods that started (bound to a node) is still running:
        deleting one might end an index that then succeeds before it goes (the test bed's kwok ended pods
        Succeeded as their API server answered again, after the read and before the deletion: the index ran
        twice). Its pods are waited for, as an earlier try's pod is adopted; the try's timeout bounds it."""
        namespace, name = metadata["namespace"], metadata["name"]
        view = manager.read(namespace, name)
        logged = False
        while any(_started_and_running(pod) for pod in view.pods):
            if not logged:
                self.op.log.info(
                    "Job %s of an earlier try in %s still runs pods: waiting for them to end before taking "
                    "its indices (an index is never started twice)",
                    name,
                    cluster,
                )
                logged = True
            self._check_killed()
            time.sleep(float(self.op.job_poll_interval))
            view = manager.read(namespace, name)
        return view

    def _indices_of(self, ranges: str) -> tuple[int, ...]:
        try:
            return parse_ranges(ranges, INDICES_ANNOTATION, below=self.completions)
        except SpecError as exc:
            raise self._give_up(f"an earlier try's slice is unreadable: {exc}") from None
