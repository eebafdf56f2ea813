"""FederatedKubernetesOperator: a KubernetesPodOperator that chooses its cluster at run time.

At the start of a try it asks the federation engine where to run, launches the pod there through the
KubernetesPodOperator machinery (switching hook, client and pod manager to that cluster), and when the
cluster cannot take the pod (quota, unschedulable past the grace period), evicts or preempts it, or stops
answering, it deletes what it left there, cools the cluster down and carries on with the next decision,
inside the same Airflow try. The task's own failure (a non-zero exit) fails the try as usual.
"""

from __future__ import annotations

import copy
import hashlib
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from functools import cached_property
from typing import Any

import kubernetes
from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook
from airflow.providers.cncf.kubernetes.operators.pod import KubernetesPodOperator
from airflow.providers.cncf.kubernetes.utils.pod_manager import (
    PodLaunchTimeoutException,
    detect_pod_terminate_early_issues,
)
from airflow.sdk.exceptions import AirflowException, TaskDeferred
from kubernetes.client import models as k8s
from kubernetes.client.exceptions import ApiException

from airflow_provider_fedsched.federation.decision import Decision
from airflow_provider_fedsched.federation.record import XCOM_KEY, Attempt, PlacementRecord
from airflow_provider_fedsched.federation.request import TaskRequest
from airflow_provider_fedsched.federation.resources import format_quantity
from airflow_provider_fedsched.federation.spec import FederationSpec, PolicySpec, SpecError
from airflow_provider_fedsched.hooks.federation import FederationHook, poll_interval
from airflow_provider_fedsched.kube.access import ClusterAccessError
from airflow_provider_fedsched.kube.failures import (
    ClusterFailure,
    disruption,
    missing_namespace,
    quota_exceeded,
    unschedulable_message,
)
from airflow_provider_fedsched.kube.snapshots import PLACEMENT_LABEL
from airflow_provider_fedsched.operators.links import FederatedClusterLink

CLUSTER_LABEL = "fedsched.io/cluster"
ATTEMPT_LABEL = "fedsched.io/cluster-attempt"
DECISION_ANNOTATION = "fedsched.io/decision"
STATE_STORE_KEY = "fedsched_placement"
"""Task state store key holding the try's :class:`PlacementRecord` (cluster, namespace and pod included)."""

ENV_CLUSTER = "FEDSCHED_CLUSTER"
ENV_ATTEMPT = "FEDSCHED_CLUSTER_ATTEMPT"
ENV_CHECKPOINT = "FEDSCHED_CHECKPOINT"
ENV_RESUME = "FEDSCHED_RESUME"

_CONFLICTING = ("kubernetes_conn_id", "cluster_context", "config_file", "in_cluster")
_START_CHECK_INTERVAL = 0.5
"""Seconds between pod reads while waiting for the scheduler: fast, so that failover takes seconds."""
_GONE_TIMEOUT = 60.0


class FederationError(AirflowException):
    """Bad federation input, or no cluster could run the task: the try fails with this message."""


class _ClusterLeft(Exception):
    """Internal: the current cluster cannot run the pod; carries why."""

    def __init__(self, failure: ClusterFailure) -> None:
        super().__init__(failure.reason)
        self.failure = failure


def _seconds(value: timedelta | float | int | None, argument: str) -> float | None:
    if value is None:
        return None
    seconds = value.total_seconds() if isinstance(value, timedelta) else float(value)
    if seconds < 0:
        raise FederationError(f"{argument} must not be negative (got {value!r})")
    return seconds


class FederatedKubernetesOperator(KubernetesPodOperator):
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
    :param policy: per-task policy overrides (``weights``, ``filters``, ``scores``, ...).
    :param preemptible: the task tolerates eviction and resumes from ``checkpoint``.
    :param checkpoint: where the task keeps its checkpoint; passed to the pod as ``FEDSCHED_CHECKPOINT``.
    :param expected_duration: how long the task usually runs (cost score and health-check cadence).
    :param max_cluster_attempts: clusters to try within one Airflow try before failing it.
    :param unschedulable_grace_seconds: how long a pod may stay unschedulable (time for a cluster
        autoscaler) before the task moves on.
    :param wait_timeout: how long to wait when the rules leave no cluster now (sovereignty or fit).
    """

    template_fields: Sequence[str] = (
        *KubernetesPodOperator.template_fields,
        "datasets",
        "checkpoint",
        "clusters",
        "prefer_region",
        "prefer_group",
    )
    operator_extra_links = (FederatedClusterLink(),)

    def __init__(
        self,
        *,
        federation: str | Mapping[str, Any] | FederationSpec | None = None,
        datasets: Sequence[str] = (),
        prefer_region: str | None = None,
        prefer_group: str | None = None,
        clusters: Sequence[str] | None = None,
        policy: Mapping[str, Any] | None = None,
        preemptible: bool = False,
        checkpoint: str | None = None,
        expected_duration: timedelta | float | None = None,
        max_cluster_attempts: int = 3,
        unschedulable_grace_seconds: float = 30.0,
        wait_timeout: timedelta | float = timedelta(minutes=30),
        **kwargs: Any,
    ) -> None:
        self._conflicting_arguments = [name for name in _CONFLICTING if kwargs.get(name) not in (None, "")]
        super().__init__(**kwargs)
        self.federation = federation
        self.datasets = list(datasets)
        self.prefer_region = prefer_region
        self.prefer_group = prefer_group
        self.clusters = None if clusters is None else list(clusters)
        self.policy = dict(policy or {})
        self.preemptible = preemptible
        self.checkpoint = checkpoint
        self.expected_duration = expected_duration
        self.max_cluster_attempts = max_cluster_attempts
        self.unschedulable_grace_seconds = unschedulable_grace_seconds
        self.wait_timeout = wait_timeout
        self.current_cluster: str | None = None
        self.placement: PlacementRecord | None = None
        self._failure: ClusterFailure | None = None
        self._trigger_status: str | None = None
        self._settled = False
        self._reattaching = False
        self._inline_result: Any = None

    # Cluster switching -------------------------------------------------------------------------------
    @cached_property
    def federation_hook(self) -> FederationHook:
        return FederationHook(self.federation)

    @cached_property
    def hook(self) -> KubernetesHook:
        # Each cluster gets its own client configuration: no process-wide kubeconfig state.
        return KubernetesHook(
            conn_id=self.kubernetes_conn_id, client_configuration=kubernetes.client.Configuration()
        )

    def use_cluster(self, cluster: str, hook: FederationHook | None = None) -> None:
        """Point hook, client and pod manager at ``cluster`` (dropping the cached ones)."""
        access = (hook or self.federation_hook).access(cluster)
        if self.current_cluster == cluster:
            return
        self.current_cluster = cluster
        self.kubernetes_conn_id = access.conn_id or cluster
        for cached in ("hook", "client", "pod_manager"):
            self.__dict__.pop(cached, None)

    # Validation ---------------------------------------------------------------------------------------
    def placement_request(self, hook: FederationHook) -> tuple[TaskRequest, PolicySpec]:
        """The validated placement request and effective policy against ``hook``'s federation (the
        planner's entry point: no task context)."""
        _, request = self.prepare(None, hook)
        return request, self.policy_spec

    def prepare(
        self, context: Any = None, hook: FederationHook | None = None
    ) -> tuple[k8s.V1Pod, TaskRequest]:
        """Check the federation arguments and build the pod once; fail the try naming the argument.

        Returns the pod template and the placement request derived from it."""
        hook = hook or self.federation_hook
        if self._conflicting_arguments:
            names = ", ".join(self._conflicting_arguments)
            raise FederationError(
                f"argument(s) {names} conflict with federation placement: the federation chooses the "
                "cluster and its connection; restrict members with clusters=[...]"
            )
        if self.max_cluster_attempts < 1:
            raise FederationError(
                f"max_cluster_attempts must be at least 1 (got {self.max_cluster_attempts})"
            )
        _seconds(self.unschedulable_grace_seconds, "unschedulable_grace_seconds")
        _seconds(self.wait_timeout, "wait_timeout")
        if self.checkpoint is not None and not self.preemptible and not isinstance(self.checkpoint, str):
            raise FederationError("checkpoint must be a string (a path or URL)")
        try:
            spec = hook.spec
        except SpecError as exc:
            raise FederationError(f"federation: the spec cannot be loaded: {exc}") from None
        known = {c.name for c in spec.clusters}
        if self.clusters is not None:
            if not self.clusters:
                raise FederationError("clusters: the cluster subset is empty; name at least one member")
            unknown = sorted(set(self.clusters) - known)
            if unknown:
                raise FederationError(f"clusters: unknown cluster(s) {unknown} (members: {sorted(known)})")
        datasets = {d.name for d in spec.datasets}
        unknown_datasets = sorted(set(self.datasets) - datasets)
        if unknown_datasets:
            raise FederationError(
                f"datasets: unknown dataset(s) {unknown_datasets} (known: {sorted(datasets)})"
            )
        regions = spec.known_regions()
        if self.prefer_region is not None and self.prefer_region not in regions:
            raise FederationError(
                f"prefer_region: unknown region {self.prefer_region!r} (known: {sorted(regions)})"
            )
        groups = {c.proximity_group for c in spec.clusters}
        if self.prefer_group is not None and self.prefer_group not in groups:
            raise FederationError(
                f"prefer_group: unknown group {self.prefer_group!r} (known: {sorted(groups)})"
            )
        try:
            self.policy_spec = spec.policy.merged(self.policy)
        except SpecError as exc:
            raise FederationError(f"policy: {exc}") from None
        members = self.clusters or sorted(known)
        try:
            # The pod template reads connection extras (namespace, sidecar).
            self.use_cluster(members[0], hook)
        except ClusterAccessError as exc:
            raise FederationError(str(exc)) from None
        pod = self.build_pod_request_obj(context, dry_run=True)
        pod_spec = kubernetes.client.ApiClient().sanitize_for_serialization(pod)["spec"]
        expected = _seconds(self.expected_duration, "expected_duration")
        try:
            request = TaskRequest.from_pod_spec(
                pod_spec,
                datasets=self.datasets,
                prefer_region=self.prefer_region,
                prefer_group=self.prefer_group,
                clusters=self.clusters,
                namespace=pod.metadata.namespace or "default",
                expected_duration_seconds=expected if expected is not None else 3600.0,
                preemptible=self.preemptible,
            )
        except SpecError as exc:
            raise FederationError(f"pod resources: {exc}") from None
        return pod, request

    # The placement loop ------------------------------------------------------------------------------
    def execute(self, context: Any) -> Any:
        self.name = self._set_name(self.name)
        self.pod_template, self.task_request = self.prepare(context)
        self.placement = self._restore_record(context) or self._new_record(context)
        attempt = self.placement.current
        if attempt is not None and attempt.outcome == "running":
            # A restarted or retried try: go back to the pod it launched, never start a second one.
            self._reattaching = True
            self.log.info(
                "Reattaching to pod %s/%s in cluster %s", attempt.namespace, attempt.pod, attempt.cluster
            )
            try:
                return self._run_attempt(context, attempt)
            except _ClusterLeft:
                pass  # the pod was evicted (or its cluster lost) while no worker watched: place again
        return self._place_and_run(context)

    def _place_and_run(self, context: Any) -> Any:
        record = self._record
        wait_started = time.monotonic()
        while True:
            finished = [a for a in record.attempts if a.outcome != "running"]
            if len(finished) >= self.max_cluster_attempts:
                raise self._give_up(context, f"gave up after {len(finished)} cluster attempt(s)")
            decision = self._decide(context)
            record.decisions.append(decision.to_dict())
            self.log.info("Federation decision:\n%s", decision.render_table())
            if decision.outcome == "impossible":
                raise self._give_up(context, f"no member cluster can ever run this task: {decision.reason}")
            if decision.outcome == "wait":
                waited = time.monotonic() - wait_started
                limit = _seconds(self.wait_timeout, "wait_timeout") or 0.0
                if waited >= limit:
                    raise self._give_up(
                        context, f"no cluster could take the task within {limit:g}s: {decision.reason}"
                    )
                interval = min(
                    poll_interval(self.task_request.expected_duration_seconds), max(limit - waited, 0.1)
                )
                record.outcome = "waiting"
                self._save(context)
                self.log.info("Waiting %.1fs for a compliant cluster: %s", interval, decision.reason)
                if self.deferrable:
                    from airflow.providers.standard.triggers.temporal import TimeDeltaTrigger

                    self.defer(
                        trigger=TimeDeltaTrigger(timedelta(seconds=interval)),
                        method_name="resume_placement",
                    )
                time.sleep(interval)
                record.waited_seconds += interval
                continue
            record.outcome = "running"
            attempt = self._launch(context, decision)
            try:
                return self._run_attempt(context, attempt)
            except _ClusterLeft:
                continue

    def _decide(self, context: Any) -> Decision:
        """A valid precomputed plan for the first decision of a try, else a fresh one; either way the
        chosen cluster holds the request (a reservation) until its snapshot shows the pod."""
        record = self._record
        placement_id = _placement_id(record, len(record.attempts) + 1)
        if not record.decisions:
            decision, why = self.federation_hook.planned_decision(
                self.task_request,
                dag_id=record.dag_id,
                task_id=record.task_id,
                logical_date=context.get("logical_date"),
                exclude=record.excluded,
                policy=self.policy_spec,
            )
            if decision is not None and decision.cluster is not None:
                record.plan_used = True
                self.log.info("Using the precomputed plan: %s", decision.reason)
                self.federation_hook.reserve(decision.cluster, self.task_request, placement_id)
                return decision
            self.log.info("Scoring afresh: %s", why)
        now = datetime.now(UTC)
        horizon = timedelta(seconds=self.task_request.expected_duration_seconds)
        return self.federation_hook.place(
            self.task_request,
            placement_id,
            exclude=record.excluded,
            policy=self.policy_spec,
            forecast=self.federation_hook.forecast_idle(now, now + horizon, self.task_request.resources),
        )

    def resume_placement(self, context: Any, event: Any = None) -> Any:
        """Re-entry after a deferred wait: decide again."""
        self.name = self._set_name(self.name)
        self.pod_template, self.task_request = self.prepare(context)
        self.placement = self._restore_record(context) or self._new_record(context)
        return self._place_and_run(context)

    def _launch(self, context: Any, decision: Decision) -> Attempt:
        self._reattaching = False
        record = self._record
        cluster = str(decision.cluster)
        number = len(record.attempts) + 1
        self.use_cluster(cluster)
        spec_cluster = self.federation_hook.spec.cluster(cluster)
        namespace = (
            spec_cluster.namespace
            or self.namespace
            or self.federation_hook.access(cluster).namespace
            or "default"
        )
        name = self.pod_template.metadata.name
        attempt = Attempt(
            number=number,
            cluster=cluster,
            namespace=namespace,
            pod=name if number == 1 else f"{name[:58]}-c{number}",
            placement_id=_placement_id(record, number),
            started_at=datetime.now(UTC),
            resumed_from_checkpoint=any(a.outcome == "evicted" for a in record.attempts),
            decision=decision.reason,
        )
        record.attempts.append(attempt)
        record.cluster = cluster
        # Saved before the pod is created: a worker that dies right after the create still finds it.
        self._save(context)
        self.log.info(
            "Attempt %d: launching pod %s/%s in cluster %s (%s)%s",
            number,
            attempt.namespace,
            attempt.pod,
            cluster,
            ", ".join(f"{k}={format_quantity(k, v)}" for k, v in sorted(self.task_request.resources.items())),
            " resuming from checkpoint" if attempt.resumed_from_checkpoint else "",
        )
        return attempt

    def attempt_pod(self, attempt: Attempt) -> k8s.V1Pod:
        """The pod of ``attempt``: the task's pod, in the attempt's namespace, labelled and told where
        it runs and whether it resumes from a checkpoint. Deterministic, so a reattach rebuilds it."""
        pod = copy.deepcopy(self.pod_template)
        pod.metadata.name, pod.metadata.namespace = attempt.pod, attempt.namespace
        pod.metadata.labels = {
            **(pod.metadata.labels or {}),
            PLACEMENT_LABEL: attempt.placement_id,
            CLUSTER_LABEL: attempt.cluster,
            ATTEMPT_LABEL: str(attempt.number),
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
        if self.checkpoint:
            env.append(k8s.V1EnvVar(name=ENV_CHECKPOINT, value=str(self.checkpoint)))
        names = {var.name for var in env}
        base = next(c for c in pod.spec.containers if c.name == self.base_container_name)
        base.env = [var for var in (base.env or []) if var.name not in names] + env
        return pod

    def _run_attempt(self, context: Any, attempt: Attempt) -> Any:
        """Run KubernetesPodOperator's flow in the attempt's cluster; classify how it ended."""
        self.use_cluster(attempt.cluster)
        self.pod_request_obj = self.attempt_pod(attempt)
        self.pod = self.remote_pod = None
        self._failure = None
        # The deferrable path relies on the pod trigger's schedule timeout; give the scheduler a moment.
        self.schedule_timeout_seconds = int(
            max(self.unschedulable_grace_seconds, 2 if self.deferrable else 0)
        )
        self.trigger_kwargs = {**(self.trigger_kwargs or {}), "fedsched_cluster": attempt.cluster}
        try:
            if self.deferrable:
                # Creates the pod and defers to the pod trigger (TaskDeferred). Returns only when the pod
                # had already ended: then trigger_reentry ran inline and settled the attempt.
                KubernetesPodOperator.execute_async(self, context)
                return self._inline_result
            result = KubernetesPodOperator.execute_sync(self, context)
        except TaskDeferred:
            raise
        except Exception as exc:
            if self._settled:
                raise
            raise self._after_failure(context, attempt, exc) from exc
        self._finish(context, attempt, "succeeded", "")
        return result

    def trigger_reentry(self, context: Any, event: dict[str, Any]) -> Any:
        """Resume after the pod trigger fired: go back to the attempt's cluster first."""
        self.name = self._set_name(self.name)
        self.pod_template, self.task_request = self.prepare(context)
        self.placement = self._restore_record(context) or self._new_record(context)
        attempt = self.placement.current
        cluster = event.get("fedsched_cluster") or (attempt.cluster if attempt else None)
        if attempt is None or cluster is None:
            raise FederationError("resumed from a deferral without a placement record")
        self.use_cluster(cluster)
        self._trigger_status = str(event.get("status"))
        try:
            result = super().trigger_reentry(context, event)
        except TaskDeferred:
            raise
        except Exception as exc:
            outcome = self._after_failure(context, attempt, exc)
            if isinstance(outcome, _ClusterLeft):
                self._inline_result = self._place_and_run(context)
                self._settled = True
                return self._inline_result
            self._settled = True
            raise outcome from exc
        # No worker watched the start: take it from the container's own start time.
        attempt.running_at = attempt.running_at or _container_started_at(self.pod, self.base_container_name)
        self._finish(context, attempt, "succeeded", "")
        self._settled = True
        self._inline_result = result
        return result

    def get_or_create_pod(self, pod_request_obj: k8s.V1Pod, context: Any) -> k8s.V1Pod:
        """Reattach to the attempt's pod whatever its state (a pod that finished while no worker watched
        it is adopted, not run again); otherwise KubernetesPodOperator's own lookup, then create."""
        attempt = self._record.current
        if self._reattaching and attempt is not None:
            try:
                pod = self.client.read_namespaced_pod(attempt.pod, attempt.namespace)
            except ApiException as exc:
                if exc.status != 404:
                    raise
                pod = None
            if pod is not None and (pod.metadata.labels or {}).get(self.POD_CHECKED_KEY) != "True":
                self.log.info(
                    "Reattached to pod %s/%s in cluster %s (phase %s)",
                    attempt.namespace,
                    attempt.pod,
                    attempt.cluster,
                    pod.status.phase if pod.status else "unknown",
                )
                self._persist_pod_identity_to_task_state_store(context, pod)
                return pod
        return super().get_or_create_pod(pod_request_obj, context)

    def await_pod_start(self, pod: k8s.V1Pod) -> None:
        """Watch the pod until it runs; an Unschedulable pod past the grace period moves the task.

        Polls faster than KubernetesPodOperator does (failover should take seconds), then hands over to
        it for its own startup checks once the pod runs, fails early, or exceeds its timeouts.
        """
        grace = float(self.unschedulable_grace_seconds)
        started = time.monotonic()
        scheduled_at: float | None = None
        first_unschedulable: float | None = None
        while True:
            remote_pod = self.pod_manager.read_pod(pod)
            remote = _as_dict(remote_pod)
            failure = disruption(remote)
            if failure is not None:
                self._failure = failure
                raise PodLaunchTimeoutException(failure.reason)
            if (remote.get("status") or {}).get("phase") not in (None, "Pending", "Unknown"):
                break
            now = time.monotonic()
            if _scheduled(remote):
                scheduled_at = scheduled_at or now
                if (
                    detect_pod_terminate_early_issues(remote_pod)
                    or now - scheduled_at >= self.startup_timeout_seconds
                ):
                    break
            else:
                message = unschedulable_message(remote)
                if message is not None:
                    first_unschedulable = first_unschedulable or now
                    if now - first_unschedulable >= grace:
                        self._failure = ClusterFailure("insufficient", f"unschedulable: {message}")
                        raise PodLaunchTimeoutException(self._failure.reason)
                if now - started >= self.schedule_timeout_seconds:
                    self._failure = ClusterFailure(
                        "insufficient", f"not scheduled within {self.schedule_timeout_seconds}s"
                    )
                    raise PodLaunchTimeoutException(self._failure.reason)
            time.sleep(_START_CHECK_INTERVAL)
        super().await_pod_start(pod)
        attempt = self._record.current
        if attempt is not None:
            attempt.running_at = datetime.now(UTC)  # recorded with the outcome, off the start-up path

    # How an attempt ended ----------------------------------------------------------------------------
    def _classify(self, exc: BaseException) -> ClusterFailure | None:
        if self._failure is not None:
            return self._failure
        for error in _chain(exc):
            if isinstance(error, ApiException):
                found = quota_exceeded(error.status, error.body) or missing_namespace(
                    error.status, error.body
                )
                if found is not None:
                    return found
                if error.status in (500, 502, 503, 504):
                    return ClusterFailure("unreachable", f"API server answered {error.status} {error.reason}")
            if _is_connection_error(error):
                return ClusterFailure("unreachable", f"API server unreachable: {type(error).__name__}")
        attempt = self._record.current
        pod, events = self._observe_pod(attempt) if attempt else (None, [])
        # The last state KubernetesPodOperator saw, for a pod its cleanup has deleted since.
        last_seen = self.remote_pod if self.remote_pod is not None else self.pod
        known = pod or (_as_dict(last_seen) if last_seen is not None else None)
        found = disruption(pod, events) or disruption(known)
        if found is not None:
            return found
        if known is not None and unschedulable_message(known) is not None:
            return ClusterFailure("insufficient", f"unschedulable: {unschedulable_message(known)}")
        if known is not None and self._trigger_status == "timeout" and not _scheduled(known):
            return ClusterFailure("insufficient", f"not scheduled within {self.schedule_timeout_seconds}s")
        return None

    def _observe_pod(self, attempt: Attempt) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
        """The attempt's pod (None if gone) and its events, read from its cluster."""
        pod: dict[str, Any] | None = None
        events: list[dict[str, Any]] = []
        try:
            pod = _as_dict(self.client.read_namespaced_pod(attempt.pod, attempt.namespace))
        except ApiException as exc:
            if exc.status != 404:
                return None, []
        except Exception:
            return None, []
        try:
            listed = self.client.list_namespaced_event(
                attempt.namespace, field_selector=f"involvedObject.name={attempt.pod}"
            )
            events = [_as_dict(e) for e in listed.items]
        except Exception:
            events = []
        return pod, events

    def _after_failure(self, context: Any, attempt: Attempt, exc: BaseException) -> BaseException:
        """Record how the attempt ended; return what to raise: the task's own error, or _ClusterLeft
        after the pod is gone and the cluster cools down."""
        failure = self._classify(exc)
        if failure is None:
            self._finish(context, attempt, "failed", _short(exc))
            return exc
        t0 = time.monotonic()
        self.log.warning(
            "Attempt %d in cluster %s ended: %s (%s)",
            attempt.number,
            attempt.cluster,
            failure.kind,
            failure.reason,
        )
        self._remove_pod(attempt, unreachable=failure.kind == "unreachable")
        until = self.federation_hook.cool_down(
            attempt.cluster,
            f"{failure.kind}: {failure.reason}",
            namespace=attempt.namespace if failure.namespace_only else None,
        )
        self.federation_hook.release(attempt.cluster, attempt.placement_id)
        self.federation_hook.record(
            attempt.cluster, "outcome", {"at": datetime.now(UTC).isoformat(), "outcome": failure.kind}
        )
        record = self._record
        record.excluded[attempt.cluster] = f"{failure.kind}: {failure.reason}"
        attempt.outcome = failure.kind
        attempt.reason = failure.reason
        attempt.ended_at = datetime.now(UTC)
        record.failover_seconds += time.monotonic() - t0
        self._save(context)
        self.log.info(
            "Cluster %s cools down until %s; deciding again without it", attempt.cluster, until.isoformat()
        )
        return _ClusterLeft(failure)

    def _remove_pod(self, attempt: Attempt, *, unreachable: bool) -> None:
        """Delete the attempt's pod and confirm it is gone, so it can never start later and run twice."""
        deadline = time.monotonic() + (5.0 if unreachable else _GONE_TIMEOUT)
        deleted = False
        while time.monotonic() < deadline:
            try:
                if not deleted:
                    self.client.delete_namespaced_pod(attempt.pod, attempt.namespace, grace_period_seconds=0)
                    deleted = True
                self.client.read_namespaced_pod(attempt.pod, attempt.namespace)
            except ApiException as exc:
                if exc.status == 404:
                    self.log.info(
                        "Pod %s/%s is gone from %s", attempt.namespace, attempt.pod, attempt.cluster
                    )
                    return
            except Exception:
                pass
            time.sleep(_START_CHECK_INTERVAL)
        # Could not confirm: leave a note so the next snapshot of that cluster deletes it.
        self.federation_hook.add_orphan(attempt.cluster, attempt.namespace, attempt.pod)
        self.log.warning(
            "Could not confirm pod %s/%s is gone from %s; it will be deleted when the cluster answers again",
            attempt.namespace,
            attempt.pod,
            attempt.cluster,
        )

    def _finish(self, context: Any, attempt: Attempt, outcome: str, reason: str) -> None:
        record = self._record
        attempt.outcome = outcome  # type: ignore[assignment]
        attempt.reason = reason
        attempt.ended_at = datetime.now(UTC)
        record.outcome = "succeeded" if outcome == "succeeded" else "failed"
        record.reason = reason
        record.ended_at = attempt.ended_at
        self.federation_hook.release(attempt.cluster, attempt.placement_id)
        self.federation_hook.record(
            attempt.cluster,
            "outcome",
            {
                "at": attempt.ended_at.isoformat(),
                "outcome": outcome,
                "duration": (attempt.ended_at - attempt.started_at).total_seconds(),
            },
        )
        if attempt.running_at is not None:
            self.federation_hook.record(
                attempt.cluster,
                "start_latency",
                {
                    "at": attempt.running_at.isoformat(),
                    # Container start times have whole-second resolution: never report below zero.
                    "seconds": max(0.0, (attempt.running_at - attempt.started_at).total_seconds()),
                },
            )
        self._save(context)
        self._publish(context)
        self.log.info("Placement: %s", record.summary())

    def _give_up(self, context: Any, reason: str) -> FederationError:
        record = self._record
        record.outcome = "failed"
        record.reason = reason
        record.ended_at = datetime.now(UTC)
        self._save(context)
        self._publish(context)
        return FederationError(reason)

    # Record keeping ----------------------------------------------------------------------------------
    @property
    def _record(self) -> PlacementRecord:
        if self.placement is None:
            raise RuntimeError("no placement record: execute() has not started")
        return self.placement

    def _new_record(self, context: Any) -> PlacementRecord:
        ti = context["ti"]
        return PlacementRecord(
            dag_id=ti.dag_id,
            run_id=ti.run_id,
            task_id=ti.task_id,
            map_index=getattr(ti, "map_index", -1) if getattr(ti, "map_index", -1) is not None else -1,
            try_number=ti.try_number,
            started_at=datetime.now(UTC),
        )

    def _restore_record(self, context: Any) -> PlacementRecord | None:
        store = context.get("task_state_store")
        raw = store.get(STATE_STORE_KEY) if store is not None else None
        if not isinstance(raw, dict):
            return None
        try:
            record = PlacementRecord.model_validate(raw)
        except Exception:
            self.log.warning("Ignoring an unreadable placement record in the task state store")
            return None
        if record.outcome in ("succeeded", "failed"):
            return None  # a finished try's record: this try starts afresh
        record.try_number = context["ti"].try_number  # a retry continuing a crashed try's placement
        return record

    def _save(self, context: Any) -> None:
        store = context.get("task_state_store")
        if store is not None:
            store.set(STATE_STORE_KEY, self._record.model_dump(mode="json"))

    def _publish(self, context: Any) -> None:
        context["ti"].xcom_push(key=XCOM_KEY, value=self._record.model_dump(mode="json"))

    def on_kill(self) -> None:
        # KubernetesPodOperator deletes self.pod through self.client: make sure that is the pod's cluster.
        attempt = self.placement.current if self.placement else None
        if attempt is not None and attempt.outcome == "running":
            self.use_cluster(attempt.cluster)
        super().on_kill()


def _placement_id(record: PlacementRecord, number: int) -> str:
    digest = hashlib.sha256(
        f"{record.dag_id}/{record.run_id}/{record.task_id}/{record.map_index}/{record.try_number}".encode()
    ).hexdigest()[:16]
    return f"{digest}-{number}"


def _as_dict(obj: Any) -> dict[str, Any]:
    if isinstance(obj, dict):
        return obj
    return kubernetes.client.ApiClient().sanitize_for_serialization(obj) or {}


def _container_started_at(pod: k8s.V1Pod | None, container: str) -> datetime | None:
    """When ``container`` of ``pod`` started running, from its status (running or terminated)."""
    statuses = (pod.status.container_statuses if pod is not None and pod.status else None) or []
    for status in statuses:
        if status.name == container and status.state is not None:
            state = status.state.running or status.state.terminated
            started = getattr(state, "started_at", None)
            if isinstance(started, datetime):
                return started.astimezone(UTC)
    return None


def _scheduled(pod: Mapping[str, Any]) -> bool:
    status = pod.get("status") or {}
    if status.get("phase") not in (None, "Pending", "Unknown"):
        return True
    return any(
        c.get("type") == "PodScheduled" and c.get("status") == "True" for c in status.get("conditions") or []
    )


def _chain(exc: BaseException) -> list[BaseException]:
    """The exception and those it masks (KubernetesPodOperator's cleanup raises from a ``finally``)."""
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in seen:
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


def _is_connection_error(error: BaseException) -> bool:
    import urllib3.exceptions

    return isinstance(
        error,
        ConnectionError
        | urllib3.exceptions.MaxRetryError
        | urllib3.exceptions.NewConnectionError
        | urllib3.exceptions.ProtocolError,
    )


def _short(exc: BaseException) -> str:
    return str(exc).splitlines()[0][:500] if str(exc) else type(exc).__name__
