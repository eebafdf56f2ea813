"""Earlier tries of the same task instance (docs/operator.md, "Reattach, never duplicate").

A new try first adopts a pod an earlier try left running or finished, in any member cluster, whatever
labels it carries; a finished pod's result is never produced a second time. The cluster where the earlier
try's work may still run is waited for within the grace; a member that does not answer a preemptible
task's search is searched again before each launch, and the earlier pod there is fenced.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from airflow.providers.cncf.kubernetes.operators.pod import KubernetesPodOperator

from airflow_provider_fedsched.federation.record import LEFT_BY_EARLIER_TRIES, Attempt, PlacementRecord
from airflow_provider_fedsched.operators import attempts, records

if TYPE_CHECKING:
    from airflow_provider_fedsched.federation.request import TaskRequest
    from airflow_provider_fedsched.hooks.federation import FederationHook
    from airflow_provider_fedsched.kube.pods import FederatedPodManager
    from airflow_provider_fedsched.operators.arguments import FederationError

GONE_TIMEOUT = 60.0
"""Seconds to confirm that a left cluster's pod is gone before the next cluster is tried."""
LEFT_UNREAD = ("unreachable", "lost", "running")
"""Outcomes of attempts whose pods were left where nobody read their end (see ``_left_pod_succeeded``)."""


class EarlierTries(KubernetesPodOperator):
    """Finding and adopting an earlier try's pods (a base of :class:`.contract.Contract`)."""

    if TYPE_CHECKING:  # provided by Contract and FederatedKubernetesOperator

        @property
        def federation_hook(self) -> FederationHook: ...

        @property
        def pod_manager(self) -> FederatedPodManager: ...

        @property
        def _record(self) -> PlacementRecord: ...

        preemptible: bool
        task_request: TaskRequest
        _earlier: PlacementRecord | None

        def use_cluster(self, cluster: str, hook: FederationHook | None = None) -> None: ...

        def _grace(self) -> float: ...

        def _result_grace(self) -> float: ...

        def _save(self, context: Any) -> None: ...

        def _give_up(self, context: Any, reason: str) -> FederationError: ...

    def _earlier_succeeded(self, context: Any) -> bool:
        """The earlier try's record says its pod Succeeded (that try was ended before Airflow heard of it):
        the work is not run again. Not for a task whose result is an XCom read from the pod."""
        earlier = self._earlier
        last = earlier.current if earlier is not None else None
        if last is None or last.outcome != "succeeded" or self.do_xcom_push or self._record.attempts:
            return False
        assert earlier is not None
        reason = (
            f"try {earlier.try_number}'s pod {last.pod} Succeeded in {last.cluster} before that try was "
            "ended: its work is not run again"
        )
        self._succeed_with(context, last, reason)
        return True

    def _left_pod_succeeded(self, context: Any) -> bool:
        """A pod (or Job) this task left in a silent cluster (fenced, or lost past the grace), in this try
        or an earlier one, ran to the end meanwhile: the snapshot that deleted it found it Succeeded (a Job:
        complete) and wrote that down (``hooks/sensing.py``). Its work is not run again. Not for
        ``do_xcom_push`` tasks."""
        if self.do_xcom_push:
            return False
        orphans = self.federation_hook.state.orphans
        kind = self.earlier_kind
        for attempt in self._left_unread():
            if orphans.was_swept_succeeded(attempt.cluster, attempt.namespace, attempt.pod, kind):
                ended = "Succeeded" if kind == "pod" else "completed"
                reason = (
                    f"{kind} {attempt.pod} {ended} in {attempt.cluster} while that cluster was silent to "
                    "this task (the snapshot that deleted it saw it end): its work is not run again"
                )
                self._succeed_with(context, attempt, reason)
                orphans.forget_swept(attempt.cluster, attempt.namespace, attempt.pod, kind)
                return True
        return False

    def _left_unread(self) -> list[Attempt]:
        """The attempts of this try and the earlier ones whose pods were left where nobody read their end:
        "running" (a dead earlier try's pod, or one fenced by this try when its cluster did not answer),
        "lost", "unreachable"."""
        record = self._record  # the earlier tries' are in it since the try began (_hand_on_earlier)
        found = (*record.known_attempts, *record.left_by_earlier_tries)
        return [a for a in found if a.outcome in LEFT_UNREAD]

    def _hand_on_earlier(self) -> None:
        """A new try keeps what the earlier one left unread (its record is replaced by this try's own)."""
        earlier = self._earlier
        if earlier is None or self._record.left_by_earlier_tries:
            return
        left = [*earlier.left_by_earlier_tries, *earlier.known_attempts]
        unique = {(a.cluster, a.namespace, a.pod): a for a in left if a.outcome in LEFT_UNREAD}
        self._record.left_by_earlier_tries = list(unique.values())[-LEFT_BY_EARLIER_TRIES:]

    def _succeed_with(self, context: Any, attempt: Attempt, reason: str) -> None:
        # A try that died left its reservation: the pod it stood for is over.
        self.federation_hook.release(attempt.cluster, attempt.placement_id)
        records.succeed_with(self._record, attempt, reason)
        self._save(context)
        self.log.info("Placement: %s", self._record.summary())

    earlier_kind = "pod"
    """What a try of this operator leaves in a cluster (the Job operator: ``job``)."""

    def _find_in_cluster(self, digest: str) -> list[Any]:
        """The current cluster's pods (or Jobs) of the task instance whose task label is ``digest``."""
        return list(self.pod_manager.find(digest))

    def _adopt_earlier(self, context: Any) -> Attempt | None:
        """An earlier try's pod of this task instance, running or finished, in any member cluster."""
        found = self._find_earlier(context)
        return None if found is None else self._adopt_found(context, found)

    def _never_doubled(self, context: Any, cluster: str, left: Any, what: str, why: str) -> None:
        """An earlier try's pod or Job that was not confirmed stopped, with nothing adopted: its work may
        still run, so a task that is not preemptible is not started again (the try gives up, and the next
        one waits for that cluster too)."""
        if self.preemptible:
            return
        self._record.left_by_earlier_try = attempts.adopted_attempt(self._record, cluster, left)
        raise self._give_up(
            context,
            f"{what} of an earlier try is not confirmed stopped in {cluster} within {GONE_TIMEOUT:g}s{why}",
        )

    def _adopt_found(self, context: Any, found: list[tuple[str, Any]]) -> Attempt | None:
        """Of an earlier try's pods, the one to watch to its end is adopted; the others are deleted.

        A pod that Succeeded but is already being deleted (a dead try's cleanup, a sweep, a node that
        stopped answering while its deletion waits for it) cannot be watched, but its work is done: its
        success is taken (an attempt whose outcome is ``succeeded``: the try is over), never run again.
        Not for ``do_xcom_push`` tasks, whose result is read from the pod."""
        chosen, others = attempts.pick_adoptable(found)
        done = None if chosen is not None or self.do_xcom_push else attempts.succeeded_among(others)
        if done is not None:
            for cluster, pod in others:  # deleted by the next snapshot of their cluster
                self.federation_hook.add_orphan(cluster, pod.metadata.namespace, pod.metadata.name)
            cluster, pod = done
            reason = (
                f"pod {pod.metadata.name} of an earlier try Succeeded in {cluster} (it is being deleted): "
                "its work is not run again"
            )
            self._succeed_with(context, attempts.adopted_attempt(self._record, cluster, pod), reason)
            return self._record.current
        for cluster, pod in others:
            self.use_cluster(cluster)
            metadata = pod.metadata
            self.log.info(
                "Deleting pod %s/%s of an earlier try (it ended)", metadata.namespace, metadata.name
            )
            if not self.pod_manager.remove(metadata.namespace, metadata.name, within=GONE_TIMEOUT):
                self.federation_hook.add_orphan(cluster, metadata.namespace, metadata.name)
                if chosen is None:
                    # A terminating pod on a NotReady node runs on.
                    self._never_doubled(
                        context,
                        cluster,
                        pod,
                        f"pod {metadata.name}",
                        " (its node may not answer): its work may still run, so it is not started again; it "
                        "is deleted when its node answers",
                    )
        if chosen is None:
            return None
        return self._adopt(context, attempts.adopted_attempt(self._record, *chosen), "pod")

    def _adopt(self, context: Any, attempt: Attempt, kind: str) -> Attempt:
        """Watch an earlier try's pod (or Job) to its end as this try's attempt."""
        # The earlier try may have written it down (its cluster was silent): no sweep may delete it now.
        self.federation_hook.forget_orphan(attempt.cluster, attempt.namespace, attempt.pod, kind)
        record = self._record
        record.attempts.append(attempt)
        record.cluster, record.outcome = attempt.cluster, "running"
        self._save(context)
        self.log.info(
            "Adopting %s %s/%s in %s: %s",
            kind,
            attempt.namespace,
            attempt.pod,
            attempt.cluster,
            attempt.decision,
        )
        return attempt

    def _find_earlier(self, context: Any) -> list[tuple[str, Any]] | None:
        """An earlier try's pods (or Jobs: :meth:`_find_in_cluster`) as ``(cluster, item)``; None when
        this try can have none.

        Only a retry (or a try whose record survived) can have one. Every member is searched, not only
        those the task may use today. The earlier record says where its last pod ran: that cluster is
        waited for within the grace; the others are asked once."""
        record, earlier, kind, find = self._record, self._earlier, self.earlier_kind, self._find_in_cluster
        if record.try_number <= 1 and earlier is None:
            return None
        digest = attempts.record_digest(record)
        spec_members = [c.name for c in self.federation_hook.spec.clusters]
        members = list(dict.fromkeys([*(self.task_request.clusters or []), *spec_members]))
        # Where the work may still run: the earlier try's last pod, or the one that try found silent.
        last = earlier.last_known if earlier is not None else None
        found: list[tuple[str, Any]] = []
        for cluster in members:
            where_it_ran = last is not None and last.cluster == cluster
            # A pod whose end nobody read is waited for even when preemptible: one seen ended whose
            # cluster then went silent ("lost"), and one a try that died left "running" (its process
            # killed with its supervisor, nobody watched it since: it may have run to the end). Its work
            # may be done: it must be adopted, not run again. A preemptible task moves only from a pod it
            # saw running when its cluster went silent.
            ended_there = where_it_ran and last is not None and last.outcome in ("lost", "running")
            wait = self._result_grace() if ended_there else self._grace() if where_it_ran else 0.0
            deadline, waiting = time.monotonic() + wait, False
            while True:
                try:
                    self.use_cluster(cluster)
                    found.extend((cluster, item) for item in find(digest))
                    break
                except Exception as exc:
                    if time.monotonic() < deadline:
                        if not waiting and last is not None:
                            waiting = True
                            self.log.warning(
                                "The earlier try's %s %s may have run to the end in %s (%s), which does not "
                                "answer: waiting up to %gs for it, not starting the work elsewhere: %s",
                                kind,
                                last.pod,
                                cluster,
                                "its try ended without word of it"
                                if last.outcome == "running"
                                else f"last seen {last.outcome}",
                                wait,
                                self.pod_manager.reason(exc),
                            )
                        time.sleep(2.0)
                        continue
                    if where_it_ran and (not self.preemptible or ended_there):
                        record.left_by_earlier_try = last  # the next try waits for this cluster too
                        raise self._give_up(
                            context,
                            f"the earlier try's {kind} may still run in {cluster}, which does not answer: "
                            f"{self.pod_manager.reason(exc)}",
                        ) from exc
                    self.log.warning("Could not look for earlier %ss in %s: %s", kind, cluster, exc)
                    self._unsearched(cluster, last if where_it_ran else None, kind)
                    break
        return found

    def _unsearched(self, cluster: str, last: Attempt | None, kind: str) -> None:
        """``cluster`` did not answer the search (a preemptible task goes on): it is searched again before
        each launch, and the earlier try's last pod there is fenced (deleted, its end written down, once
        the cluster answers), so that it neither runs twice unseen nor outlives this try."""
        if cluster not in self._record.unsearched:
            self._record.unsearched.append(cluster)
        if last is not None:
            self.federation_hook.add_orphan(cluster, last.namespace, last.pod, kind)

    def _adopt_unsearched(self, context: Any) -> Attempt | None:
        """Before a launch: an earlier try's pod in a member that did not answer the first search and now
        does, adopted instead of starting the work again."""
        record = self._record
        found: list[tuple[str, Any]] = []
        for cluster in list(record.unsearched):
            try:
                self.use_cluster(cluster)
                found.extend(
                    (cluster, item) for item in self._find_in_cluster(attempts.record_digest(record))
                )
            except Exception as exc:
                self.log.info("Still cannot look for earlier %ss in %s: %s", self.earlier_kind, cluster, exc)
                continue
            record.unsearched.remove(cluster)
        return self._adopt_found(context, found) if found else None
