"""FederatedKubernetesOperator: a KubernetesPodOperator that chooses its cluster at run time.

At the start of a try it looks for a pod an earlier try left running or finished (in any member cluster)
and adopts it; otherwise it asks the federation where to run and launches the pod there through the
KubernetesPodOperator machinery (switching hook, client and pod manager to that cluster). When the
cluster cannot take the pod (quota, unschedulable past the grace period) or evicts it, it deletes what it
left there and carries on with the next decision inside the same Airflow try. When the pod's cluster or
node stops answering it waits, up to ``unreachable_grace``, and reattaches; a ``preemptible`` task moves
at once instead. The task's own failure (a non-zero exit) fails the try as usual. The delivery contract
is written down in docs/operator.md.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from functools import cached_property
from typing import Any

import kubernetes
from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook
from airflow.providers.cncf.kubernetes.operators.pod import KubernetesPodOperator
from airflow.sdk.exceptions import TaskDeferred
from kubernetes.client import models as k8s

from airflow_provider_fedsched.federation.decision import Decision
from airflow_provider_fedsched.federation.record import Attempt, PlacementRecord
from airflow_provider_fedsched.federation.resources import format_quantity
from airflow_provider_fedsched.federation.spec import FederationSpec
from airflow_provider_fedsched.hooks.federation import FederationHook
from airflow_provider_fedsched.hooks.waiting import WaitWatch
from airflow_provider_fedsched.kube import failures
from airflow_provider_fedsched.kube.access import ClusterAccess
from airflow_provider_fedsched.kube.clients import sync_api_client
from airflow_provider_fedsched.kube.failures import describe_error, never_sent
from airflow_provider_fedsched.kube.pods import FederatedPodManager, Watch, is_gone, unanswered
from airflow_provider_fedsched.operators import attempts, records
from airflow_provider_fedsched.operators.arguments import (
    CONFLICTING,
    Arguments,
    FederationError,
    report_sizes,
    seconds,
)
from airflow_provider_fedsched.operators.contract import ClusterLeft
from airflow_provider_fedsched.operators.deferral import Deferral
from airflow_provider_fedsched.operators.links import FederationLinks
from airflow_provider_fedsched.render import decision_table
from airflow_provider_fedsched.triggers.events import PodEvent, UnreadableEvent, WaitEvent, decode

__all__ = ["FederatedKubernetesOperator", "FederationError"]


def _is_collection(value: Any) -> bool:
    return isinstance(value, list | tuple | set | frozenset)


def _is_mapping(value: Any) -> bool:
    return value is None or isinstance(value, Mapping)


class FederatedKubernetesOperator(Arguments, Deferral):
    """Run a pod on the best cluster of a federation, failing over between clusters within one try.

    Accepts every KubernetesPodOperator argument (image, cmds, env, volumes, resources, node selectors,
    tolerations, pod templates, ``do_xcom_push``, ``deferrable``, ...) except those that pick a cluster
    (``kubernetes_conn_id``, ``cluster_context``, ``config_file``, ``in_cluster``): the federation does.

    :param federation: the federation spec (path, YAML text, mapping, ``"variable:NAME"``); default the
        ``[fedsched] federation_spec`` option.
    :param datasets: names of the spec's datasets the task reads (sovereignty, locality, egress).
    :param prefer_region: region to prefer (proximity score).
    :param prefer_group: proximity group to prefer.
    :param clusters: restrict placement to these member clusters.
    :param cluster_selector: labels a member cluster must have in the spec (``{"gpu": "true"}``).
    :param policy: per-task policy overrides (``weights``, ``filters``, ``scores``, ...).
    :param preemptible: the task tolerates eviction and resumes from ``checkpoint``: it moves at once when
        its cluster stops answering (the old pod is fenced).
    :param checkpoint: where the task keeps its checkpoint; passed to the pod as ``FEDSCHED_CHECKPOINT``.
    :param expected_duration: how long the task usually runs (cost score and health-check cadence).
    :param max_cluster_attempts: clusters to try within one Airflow try before failing it.
    :param unschedulable_grace_seconds: how long a pod may stay unschedulable (time for a cluster
        autoscaler) before the task moves on.
    :param unreachable_grace: how long a task that is not preemptible waits for its pod's cluster (or
        node) to answer again before failing the try; it never starts the work a second time meanwhile.
    :param wait_timeout: how long to wait when the rules leave no cluster now (sovereignty or fit).
    """

    template_fields: Sequence[str] = (
        *KubernetesPodOperator.template_fields,
        "datasets",
        "checkpoint",
        "clusters",
        "prefer_region",
        "prefer_group",
        "cluster_selector",
    )
    operator_extra_links = FederationLinks()

    def __init__(
        self,
        *,
        federation: str | Mapping[str, Any] | FederationSpec | None = None,
        datasets: Sequence[str] = (),
        prefer_region: str | None = None,
        prefer_group: str | None = None,
        clusters: Sequence[str] | None = None,
        cluster_selector: Mapping[str, str] | None = None,
        policy: Mapping[str, Any] | None = None,
        preemptible: bool = False,
        checkpoint: str | None = None,
        expected_duration: timedelta | float | None = None,
        max_cluster_attempts: int = 3,
        unschedulable_grace_seconds: float = 30.0,
        unreachable_grace: timedelta | float = timedelta(minutes=5),
        wait_timeout: timedelta | float = timedelta(minutes=30),
        **kwargs: Any,
    ) -> None:
        self._conflicting_arguments = [name for name in CONFLICTING if kwargs.get(name) not in (None, "")]
        super().__init__(**kwargs)
        self.federation = federation
        # Kept as given when of the wrong type (a lone string, a template): prepare() checks them all,
        # before anything is reserved, so that one bad task never breaks the import of its DAG file.
        self.datasets = list(datasets) if _is_collection(datasets) else datasets  # type: ignore[assignment]
        self.prefer_region = prefer_region
        self.prefer_group = prefer_group
        self.clusters = list(clusters) if _is_collection(clusters) else clusters  # type: ignore[arg-type,assignment]
        self.cluster_selector = (
            dict(cluster_selector or {}) if _is_mapping(cluster_selector) else cluster_selector  # type: ignore[assignment]
        )
        self.policy = dict(policy or {}) if _is_mapping(policy) else policy  # type: ignore[assignment]
        self.preemptible = preemptible
        self.checkpoint = checkpoint
        self.expected_duration = expected_duration
        self.max_cluster_attempts = max_cluster_attempts
        self.unschedulable_grace_seconds = unschedulable_grace_seconds
        self.unreachable_grace = unreachable_grace
        self.wait_timeout = wait_timeout
        self.current_cluster: str | None = None
        self._access: ClusterAccess  # set by use_cluster, with current_cluster
        self.placement: PlacementRecord | None = None
        self._records = records.RecordKeeper()
        self._first_placement = False
        self._unpublished = False
        self._watch = Watch(grace=0.0)
        self._context: Any = None
        self._created: bool | None = None
        self._settled = False
        self._inline_result: Any = None

    # Cluster switching -------------------------------------------------------------------------------
    @cached_property
    def federation_hook(self) -> FederationHook:
        return FederationHook(self.federation)

    @cached_property
    def hook(self) -> KubernetesHook:
        """KubernetesHook for the connection's extras (namespace, sidecar image); its API client is the
        cluster's own bounded one, never built from ambient configuration."""
        hook = KubernetesHook(
            conn_id=self.kubernetes_conn_id, client_configuration=kubernetes.client.Configuration()
        )
        hook.__dict__["api_client"] = sync_api_client(self._access)
        hook._is_in_cluster = False
        return hook

    @cached_property
    def pod_manager(self) -> FederatedPodManager:
        access = self._access
        return FederatedPodManager(
            kube_client=self.client,
            callbacks=self.callbacks,
            cluster=access.cluster,
            server=access.server,
            watch=self._watch,
            describe=lambda exc: describe_error(exc, access.server),
        )

    def use_cluster(self, cluster: str, hook: FederationHook | None = None) -> None:
        """Point hook, client and pod manager at ``cluster`` (dropping the cached ones)."""
        access = (hook or self.federation_hook).access(cluster)
        if self.current_cluster == cluster:
            return
        self.current_cluster, self._access = cluster, access
        self.kubernetes_conn_id = access.conn_id or cluster
        for cached in ("hook", "client", "pod_manager"):
            self.__dict__.pop(cached, None)

    # Entry points: a new try, a resume after a wait, a resume after the pod trigger ---------------------
    def execute(self, context: Any) -> Any:
        self._begin(context)
        with self._sweeping_at_the_end():
            return self._ended(context, self._continue(context))

    def resume_placement(self, context: Any, event: Any = None) -> Any:
        """Re-entry after a deferred wait: decide again. An event that cannot be read ends the try, failed,
        with the field at fault (no pod of it runs while it waits)."""
        self._begin(context)
        if event is not None:
            try:
                news = decode(event, WaitEvent)
            except UnreadableEvent as exc:
                raise self._give_up(context, str(exc)) from None
            if news.message:
                self.log.info("Deciding again: %s", news.message)
        with self._sweeping_at_the_end():
            return self._ended(context, self._place_and_run(context))

    def trigger_reentry(self, context: Any, event: dict[str, Any]) -> Any:
        """Re-entry after the pod trigger fired: judge the attempt from a fresh read of its pod."""
        self._begin(context)
        attempt = self._record.current
        if attempt is None or attempt.outcome != "running":
            raise FederationError("resumed from a deferral without a running attempt in the placement record")
        try:
            news = decode(event, PodEvent)
        except UnreadableEvent as exc:
            raise self._unreadable_event(context, attempt, str(exc)) from None
        self.use_cluster(news.fedsched_cluster or attempt.cluster)
        with self._sweeping_at_the_end():
            return self._ended(context, self._reenter(context, attempt, news))

    def _ended(self, context: Any, result: Any) -> Any:
        """The try succeeded with ``result``: the size its pod reported joins its outlets' events."""
        if self.outlets:
            report_sizes(context, self.outlets, result)
        return result

    @contextlib.contextmanager
    def _sweeping_at_the_end(self) -> Iterator[None]:
        """When the try ends here (not when it defers), clean up what the federation left in clusters
        that answer again (:meth:`FederationHook.sweep_orphans`); best effort, never the try's outcome."""
        try:
            yield
        except TaskDeferred:
            raise
        except Exception:
            self._sweep_orphans()
            raise
        self._sweep_orphans()

    def _sweep_orphans(self) -> None:
        try:
            swept = self.federation_hook.sweep_orphans()
        except Exception as exc:
            self.log.warning("Could not clean up pods written down in silent clusters: %s", exc)
            return
        if swept:
            self.log.info("Refreshed the snapshots of %s, where pods were written down", ", ".join(swept))

    def _begin(self, context: Any) -> None:
        """What every entry point does first: name, pod template and request, the try's record."""
        attempts.die_with_supervisor()
        self._context = context  # for the steps KubernetesPodOperator calls without it (pod deletion)
        self.name = self._set_name(self.name)
        self.pod_template, self.task_request = self.prepare(context)
        stored = records.stored_record(context)
        try_number = context["ti"].try_number
        self._earlier = stored if stored is not None and stored.try_number != try_number else None
        same_try = stored is not None and stored.try_number == try_number and stored.ended_at is None
        self.placement = stored if same_try else records.new_record(context)
        self._hand_on_earlier()

    # The placement loop ------------------------------------------------------------------------------
    def _place_and_run(self, context: Any) -> Any:
        record = self._record
        while True:
            tried = [a for a in record.attempts if a.outcome != "running" and not a.adopted]
            if len(tried) >= self.max_cluster_attempts:
                raise self._give_up(context, f"gave up after {len(tried)} cluster attempt(s)")
            decision = self._decide(context)
            records.add_decision(record, decision.to_dict())
            if record.request is None:  # for `fedsched history export`
                record.request = self.task_request.model_dump(mode="json")
            self.log.info("Federation decision:\n%s", decision_table(decision))
            if len(record.decisions) == 1 and not record.attempts:
                self._warn_missing_permissions(decision)
            if decision.outcome == "impossible":
                raise self._give_up(context, f"no member cluster can ever run this task: {decision.reason}")
            if decision.outcome == "wait":
                self._wait(context, decision)
                continue
            records.stop_waiting(record)
            # The decision's snapshot may have swept a pod this task left in a silent cluster, and found
            # it Succeeded: then nothing is launched.
            reserved = record.placement_id(len(record.attempts) + 1)
            if self._left_pod_succeeded(context):
                self.federation_hook.release(str(decision.cluster), reserved)
                return None
            # A member that did not answer this try's search for an earlier try's pods may answer now.
            adopted = self._adopt_unsearched(context) if record.unsearched else None
            if adopted is not None:
                self.federation_hook.release(str(decision.cluster), reserved)
                if adopted.outcome == "succeeded":
                    return None  # an earlier try's pod Succeeded: its success was taken
                try:
                    return self._run_attempt(context, adopted)
                except ClusterLeft:
                    continue
            # The try's first placement is written down as a wait sample once a pod of it is created.
            self._first_placement = self._first_placement or not record.attempts
            attempt = self._launch(context, decision)
            try:
                return self._run_attempt(context, attempt)
            except ClusterLeft:
                continue

    def _warn_missing_permissions(self, decision: Decision) -> None:
        """At the start of the try's log: each member considered that forbids what the provider needs there
        (``kube/permissions.py``, seen by its snapshot), naming the rule and what is lost without it."""
        names = (
            {decision.cluster}
            | {r.cluster for r in decision.rejected}
            | {c.cluster for c in decision.candidates}
        )
        snapshots = self.federation_hook.state.snapshots.newest(sorted(n for n in names if n))
        for name, snapshot in sorted(snapshots.items()):
            for missing in snapshot.missing_permissions:
                self.log.warning("Member %s does not grant the provider (deploy/rbac.yaml) %s", name, missing)

    def _wait(self, context: Any, decision: Decision) -> None:
        """Wait for a compliant cluster: the clock runs from the first wait (across deferrals); the try
        decides again as soon as shared state shows news that changes its decision (hooks/waiting.py),
        at the latest at the wait's deadline."""
        record = self._record
        waited = records.start_waiting(record, decision.reason)
        limit = seconds(self.wait_timeout, "wait_timeout") or 0.0
        if waited >= limit:
            raise self._give_up(
                context, f"no cluster could take the task within {limit:g}s: {decision.reason}"
            )
        left = max(limit - waited, 0.1)
        watch = WaitWatch.start(
            self.federation_hook,
            self.task_request,
            record.placement_id(len(record.attempts) + 1),
            decision.decided_at,
            exclude=record.excluded,
            excluded_at=record.excluded_at,
            impossible=record.impossible,
            policy=self.policy_spec,
        )
        self._save(context)
        self.log.info(
            "Waiting up to %.0fs more (wait_timeout %gs) for a compliant cluster, %s: %s",
            left,
            limit,
            watch.describe(),
            decision.reason,
        )
        if decision.extra.get("reclaim"):
            self.log.info("Giving borrowed capacity back: %s", decision.extra["reclaim"])
        if self.deferrable:
            from airflow_provider_fedsched.triggers.wait import FederationWaitTrigger

            trigger = FederationWaitTrigger(
                federation=self.federation_hook.serializable_source(),
                wait_for=watch.wait_for.to_json(),
                deadline=time.time() + left,
            )
            self.defer(trigger=trigger, method_name="resume_placement")
        news = watch.wait(left)
        self.log.info("Deciding again: %s", news or f"the wait's deadline ({limit:g}s) came")

    def _decide(self, context: Any) -> Decision:
        """A valid precomputed plan for the first decision of a try, else a fresh one; either way the
        chosen cluster holds the request (a reservation) until its snapshot shows the pod."""
        record = self._record
        placement_id = record.placement_id(len(record.attempts) + 1)
        hook = self.federation_hook
        exclude = {**record.excluded, **record.impossible}
        if not record.decisions:
            decision, why = hook.planned_decision(
                self.task_request,
                dag_id=record.dag_id,
                task_id=record.task_id,
                logical_date=context.get("logical_date"),
                exclude=exclude,
                policy=self.policy_spec,
            )
            planned = decision.cluster if decision is not None else None
            if decision is not None and planned is not None:
                if hook.reserve(planned, self.task_request, placement_id, policy=self.policy_spec):
                    record.plan_used = True
                    self.log.info("Using the precomputed plan: %s", decision.reason)
                    return decision
                why = f"other workers took the room on {planned} meanwhile"
            self.log.info("Scoring afresh: %s", why)
        now = datetime.now(UTC)
        horizon = timedelta(seconds=self.task_request.expected_duration_seconds)
        return hook.place(
            self.task_request,
            placement_id,
            exclude=record.excluded,
            excluded_at=record.excluded_at,
            impossible=record.impossible,
            policy=self.policy_spec,
            forecast=hook.forecast_idle(now, now + horizon, self.task_request.resources),
        )

    def _launch(self, context: Any, decision: Decision) -> Attempt:
        record = self._record
        cluster = str(decision.cluster)
        self.use_cluster(cluster)
        namespace = (
            self.federation_hook.spec.cluster(cluster).namespace
            or self.namespace
            or self.federation_hook.access(cluster).namespace
            or "default"
        )
        attempt = attempts.new_attempt(record, decision, cluster, namespace, self.pod_template.metadata.name)
        previous = record.current
        if previous is not None and previous.failed_at is not None:
            record.failover_seconds += (attempt.started_at - previous.failed_at).total_seconds()
        record.attempts.append(attempt)
        record.cluster, record.outcome, record.reason = cluster, "running", ""
        # In the task's state before the create (a worker that dies right after it still finds the pod);
        # published as the XCom while the pod starts (_publish_attempt), off the way to the pod.
        self._records.save(context, record, publish=False)
        self.log.info(
            "Attempt %d: launching %s %s/%s in cluster %s (%s)%s",
            attempt.number,
            self.earlier_kind,
            attempt.namespace,
            attempt.pod,
            cluster,
            ", ".join(f"{k}={format_quantity(k, v)}" for k, v in sorted(self.task_request.resources.items())),
            " resuming from checkpoint" if attempt.resumed_from_checkpoint else "",
        )
        return attempt

    def _run_attempt(self, context: Any, attempt: Attempt) -> Any:
        """Run KubernetesPodOperator's flow in the attempt's cluster; judge how it ended."""
        self.use_cluster(attempt.cluster)
        self.pod_request_obj = self._attempt_pod(attempt)
        self.pod = self.remote_pod = None
        self._created = None
        self._watch.reset(self._grace(), self._result_grace())
        self.schedule_timeout_seconds = int(max(float(self.unschedulable_grace_seconds), 2.0))
        fences = None if self.deferrable else self._watch_fenced(attempt)
        try:
            if self.deferrable:
                # Creates the pod and defers to the pod trigger (TaskDeferred). Returns only when the pod
                # had already ended: then the attempt was judged inline.
                KubernetesPodOperator.execute_async(self, context)
                return self._inline_result
            result = KubernetesPodOperator.execute_sync(self, context)
        except TaskDeferred:
            raise
        except Exception as exc:
            if fences is not None:
                fences.stop()
                if fences.took is not None:  # a fenced copy Succeeded: this one was stopped
                    return self._take_fenced(context, attempt, fences.took)
            if self._settled:
                raise
            outcome = self._after_failure(context, attempt, exc)
            if outcome is None:
                return None  # the pod Succeeded before its cluster went silent: the try succeeds
            raise outcome from exc
        finally:
            if fences is not None:
                fences.stop()
        if attempt.outcome == "running":  # else written down before its pod was deleted
            self._finish(context, attempt, "succeeded", "")
        return result

    def _grace(self) -> float:
        """How long this task waits for an unanswering cluster: not at all when preemptible."""
        return 0.0 if self.preemptible else float(seconds(self.unreachable_grace, "unreachable_grace") or 0)

    # KubernetesPodOperator overrides ---------------------------------------------------------------------
    def get_or_create_pod(self, pod_request_obj: k8s.V1Pod, context: Any) -> k8s.V1Pod:
        """The attempt's own pod if it exists (whatever labels an earlier process left on it: a pod that
        finished while no worker watched is adopted, never run again), else create it once."""
        attempt = self._record.current
        assert attempt is not None
        try:
            pod = self.pod_manager.read_pod(pod_request_obj)
            self.log.info(
                "Reattached to pod %s/%s in cluster %s (phase %s)",
                attempt.namespace,
                attempt.pod,
                attempt.cluster,
                pod.status.phase if pod.status else "unknown",
            )
            self._created = True
            return pod
        except Exception as exc:
            if not is_gone(exc):
                raise
        if attempt.adopted or attempt.running_at is not None:
            raise ClusterLeft(failures.disappeared(f"pod {attempt.pod}"))
        try:
            self.pod_manager.create_pod(pod_request_obj)
        except Exception as exc:
            if never_sent(exc) or not unanswered(exc):
                self._created = False
                raise
            # The create may have landed: find out (waiting within the grace) rather than guess.
            self.pod_manager.read_pod(pod_request_obj)
        self._created = True
        self._unpublished = True
        return pod_request_obj

    def _publish_attempt(self) -> None:
        """What the try publishes about a newly created pod's attempt, while the pod starts (in the wait
        between two start-up checks, or before deferring): the record as the XCom, and, for the try's
        first placement, how long it waited. Nothing of it is needed before the create."""
        if not self._unpublished:
            return
        self._unpublished = False
        self._save(self._context)
        attempt = self._record.current
        if self._first_placement and attempt is not None:
            self._first_placement = False
            records.note_placed(self.federation_hook, self._record, attempt.cluster, self.task_request.tenant)

    def find_pod(self, namespace: str, context: Any, *, exclude_checked: bool = True) -> k8s.V1Pod | None:
        """The attempt's pod by name (KubernetesPodOperator's label search would also match other tries)."""
        try:
            return self.pod_manager.read_pod(self.pod_request_obj)
        except Exception as exc:
            if is_gone(exc):
                return None
            raise

    def on_kill(self) -> None:
        self._cancel()
