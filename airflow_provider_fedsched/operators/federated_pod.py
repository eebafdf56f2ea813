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
from airflow.providers.cncf.kubernetes.utils.container import container_is_completed, container_is_succeeded
from airflow.providers.cncf.kubernetes.utils.pod_manager import (
    OnFinishAction,
    detect_pod_terminate_early_issues,
)
from airflow.sdk.exceptions import AirflowException, TaskDeferred
from kubernetes.client import models as k8s

from airflow_provider_fedsched.federation.decision import Decision
from airflow_provider_fedsched.federation.record import LEFT_BY_EARLIER_TRIES, Attempt, PlacementRecord
from airflow_provider_fedsched.federation.request import TaskRequest
from airflow_provider_fedsched.federation.resources import format_quantity
from airflow_provider_fedsched.federation.spec import FederationSpec, PolicySpec, SpecError
from airflow_provider_fedsched.hooks.federation import FederationHook
from airflow_provider_fedsched.hooks.waiting import WaitWatch
from airflow_provider_fedsched.kube import failures
from airflow_provider_fedsched.kube.access import ClusterAccess, ClusterAccessError
from airflow_provider_fedsched.kube.clients import sync_api_client
from airflow_provider_fedsched.kube.failures import (
    ClusterFailure,
    chain,
    classify,
    describe_error,
    disruption,
    never_sent,
    scheduled,
    unschedulable_message,
)
from airflow_provider_fedsched.kube.labels import PREEMPTIBLE_LABEL, TENANT_LABEL
from airflow_provider_fedsched.kube.pods import (
    CONFIRM_INTERVAL,
    ClusterLost,
    FederatedPodManager,
    Observation,
    PodNotDeleted,
    Watch,
    as_dict,
    is_gone,
    unanswered,
)
from airflow_provider_fedsched.operators import attempts, records
from airflow_provider_fedsched.operators.arguments import (
    CONFLICTING,
    FederationError,
    budget,
    check_arguments,
    checked_arguments,
    mark_outlets,
    report_sizes,
    seconds,
    task_assets,
    task_tenant,
)
from airflow_provider_fedsched.operators.fences import FenceWatch, own_pod_manager
from airflow_provider_fedsched.operators.links import FederationLinks
from airflow_provider_fedsched.operators.try_states import (
    GONE_TIMEOUT,
    LEFT_UNREAD,
    ClusterLeft,
    Judged,
    TryState,
    TryStates,
    airflow_failed,
    short_error,
)
from airflow_provider_fedsched.render import decision_table
from airflow_provider_fedsched.triggers.events import (
    Done,
    Error,
    FencedDone,
    Lost,
    PodEvent,
    Timeout,
    UnreadableEvent,
    Unschedulable,
    WaitEvent,
    decode,
)
from airflow_provider_fedsched.validation.operator import (
    check_annotations,
    check_labels,
    check_pod_arguments,
    check_pod_labels,
    check_pod_name,
    check_pod_size,
)

__all__ = ["FederatedKubernetesOperator", "FederationError"]


def _is_collection(value: Any) -> bool:
    return isinstance(value, list | tuple | set | frozenset)


def _is_mapping(value: Any) -> bool:
    return value is None or isinstance(value, Mapping)


def _unit_test_mode() -> bool:
    """Airflow's own test switch: a try's transition the table does not hold then fails the test."""
    from airflow.configuration import conf

    return conf.getboolean("core", "unit_test_mode", fallback=False)


def _container_started_at(pod: Any, container: str) -> datetime | None:
    """When ``container`` of ``pod`` started running, from its status (running or terminated)."""
    statuses = (pod.status.container_statuses if pod is not None and pod.status else None) or []
    for status in statuses:
        if status.name == container and status.state is not None:
            state = status.state.running or status.state.terminated
            started = getattr(state, "started_at", None)
            if isinstance(started, datetime):
                return started.astimezone(UTC)
    return None


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
    :param cluster_selector: labels a member cluster must have in the spec (``{"gpu": "true"}``).
    :param policy: per-task policy overrides (``weights``, ``filters``, ``scores``, ...).
    :param preemptible: the task tolerates eviction and resumes from ``checkpoint``: it moves at once when
        its cluster stops answering (the old pod is fenced), unless its pod's work is over or likely over
        (seen ended, or its log stream ended): then it waits within ``unreachable_grace``.
    :param checkpoint: where the task keeps its checkpoint; passed to the pod as ``FEDSCHED_CHECKPOINT``.
    :param expected_duration: how long the task usually runs (cost score and health-check cadence).
    :param max_cluster_attempts: clusters to try within one Airflow try before failing it.
    :param unschedulable_grace_seconds: how long a pod may stay unschedulable (time for a cluster
        autoscaler) before the task moves on.
    :param unreachable_grace: how long a task that is not preemptible waits for its pod's cluster (or
        node) to answer again before failing the try; it never starts the work a second time meanwhile.
    :param wait_timeout: how long to wait when the rules leave no cluster now (sovereignty or fit).
    :param tenant: the tenant the task runs for (quota, fair share, budget); default the spec's
        ``tenant_mapping`` by owner or DAG tag (or ``default_args={"tenant": ...}`` for a whole DAG).
    :param max_cost: a cluster where the task's estimated cost is above this is never chosen.
    :param max_egress_gb: a cluster it would have to move more data to is never chosen.

    One class holds the whole try (docs/operator.md): its states and transitions are
    ``operators/try_states.py``; the steps below are grouped by the part of the contract they serve.
    The public steps of the placement loop are the ones to override, as KubernetesPodOperator's are
    (call ``super()`` to keep the contract): :meth:`place_and_run`, :meth:`decide_placement`,
    :meth:`wait_for_room`, :meth:`launch_attempt`, :meth:`run_attempt`, :meth:`handle_attempt_failure`,
    :meth:`leave_cluster`, besides :meth:`prepare` and :meth:`placement_request`.
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
    earlier_kind = "pod"
    """What a try of this operator leaves in a cluster (the Job operator: ``job``)."""
    trigger_class: str = "airflow_provider_fedsched.triggers.pod.FederatedPodTrigger"
    """Dotted path of the trigger deferred to (a subclass of FederatedPodTrigger)."""

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
        tenant: str | None = None,
        max_cost: float | None = None,
        max_egress_gb: float | None = None,
        **kwargs: Any,
    ) -> None:
        self._conflicting_arguments = [name for name in CONFLICTING if kwargs.get(name) not in (None, "")]
        super().__init__(**kwargs)
        self.federation = federation
        self.tenant = tenant
        self.max_cost = max_cost
        self.max_egress_gb = max_egress_gb
        self.data_rule: list[str] | None = None
        """The regions its data allows (every dataset's rule at once; None = anywhere), once prepared."""
        # Kept as given when of the wrong type (a lone string, a template): prepare() checks them all,
        # before anything is reserved, so that one bad task never breaks the import of its DAG file.
        self.datasets: list[str] = list(datasets) if _is_collection(datasets) else datasets  # type: ignore[assignment]
        self.prefer_region = prefer_region
        self.prefer_group = prefer_group
        self.clusters: list[str] | None = list(clusters) if _is_collection(clusters) else clusters  # type: ignore[arg-type,assignment]
        self.cluster_selector: dict[str, str] = (
            dict(cluster_selector or {}) if _is_mapping(cluster_selector) else cluster_selector  # type: ignore[assignment]
        )
        self.policy: dict[str, Any] = dict(policy or {}) if _is_mapping(policy) else policy  # type: ignore[assignment]
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
        self._killed = False
        """Set by :meth:`on_kill`: the task was ended; nothing is judged, created or launched after it."""
        self._inline_result: Any = None
        self._result_read = False
        """A ``do_xcom_push`` attempt's result was read from its pod: only then is its success written."""

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
            return self._ended(context, self.place_and_run(context))

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
        self._try_states = TryStates(self.log, strict=_unit_test_mode())

    # The placement loop ------------------------------------------------------------------------------
    def place_and_run(self, context: Any) -> Any:
        """The placement loop of a try: decide, wait or launch, run; on leaving a cluster, decide again
        (at most ``max_cluster_attempts`` clusters). Returns the task's result."""
        record = self._record
        while True:
            self._enter(TryState.DECIDING)
            tried = [a for a in record.attempts if a.outcome != "running" and not a.adopted]
            if len(tried) >= self.max_cluster_attempts:
                raise self._give_up(context, f"gave up after {len(tried)} cluster attempt(s)")
            decision = self.decide_placement(context)
            records.add_decision(record, decision.to_dict())
            if record.request is None:  # for `fedsched history export`
                record.request = self.task_request.model_dump(mode="json")
            self.log.info("Federation decision:\n%s", decision_table(decision))
            if len(record.decisions) == 1 and not record.attempts:
                self._warn_missing_permissions(decision)
            if decision.outcome == "impossible":
                raise self._give_up(context, f"no member cluster can ever run this task: {decision.reason}")
            if decision.outcome == "wait":
                self.wait_for_room(context, decision)
                continue
            records.stop_waiting(record)
            # The decision's snapshot may have swept a pod this task left in a silent cluster, and found
            # it Succeeded: then nothing is launched.
            reserved = record.placement_id(len(record.attempts) + 1)
            if self._left_pod_succeeded(context) or self._fenced_pod_succeeded(context):
                self.federation_hook.release(str(decision.cluster), reserved)
                return None
            # A member that did not answer this try's search for an earlier try's pods may answer now.
            adopted = self._adopt_unsearched(context) if record.unsearched else None
            if adopted is not None:
                self.federation_hook.release(str(decision.cluster), reserved)
                if adopted.outcome == "succeeded":
                    return None  # an earlier try's pod Succeeded: its success was taken
                try:
                    return self.run_attempt(context, adopted)
                except ClusterLeft:
                    continue
            # The try's first placement is written down as a wait sample once a pod of it is created.
            self._first_placement = self._first_placement or not record.attempts
            attempt = self.launch_attempt(context, decision)
            try:
                return self.run_attempt(context, attempt)
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
        snapshots = self.federation_hook.stored_snapshots(sorted(n for n in names if n))
        for name, snapshot in sorted(snapshots.items()):
            for missing in snapshot.missing_permissions:
                self.log.warning("Member %s does not grant the provider (deploy/rbac.yaml) %s", name, missing)

    def wait_for_room(self, context: Any, decision: Decision) -> None:
        """Wait for a compliant cluster: the clock runs from the first wait (across deferrals); the try
        decides again as soon as shared state shows news that changes its decision (hooks/waiting.py),
        at the latest at the wait's deadline."""
        record = self._record
        self._enter(TryState.WAITING, records.short(decision.reason))
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

    def decide_placement(self, context: Any) -> Decision:
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

    def launch_attempt(self, context: Any, decision: Decision) -> Attempt:
        """A new attempt in the decision's cluster, written to the try's record before any pod of it is
        created (a worker that dies right after the create still finds the pod); none once the task was
        ended (its reservation is then released)."""
        record = self._record
        cluster = str(decision.cluster)
        if self._killed:
            self.federation_hook.release(cluster, record.placement_id(len(record.attempts) + 1))
            raise AirflowException(f"the task was ended: no {self.earlier_kind} is created")
        self.use_cluster(cluster)
        namespace = (
            self.federation_hook.spec.cluster(cluster).namespace
            or self.namespace
            or self.federation_hook.access(cluster).namespace
            or "default"
        )
        attempt = attempts.new_attempt(record, decision, cluster, namespace, self.pod_template.metadata.name)
        self._enter(TryState.LAUNCHING, f"attempt {attempt.number} in {cluster}")
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

    def run_attempt(self, context: Any, attempt: Attempt) -> Any:
        """Run KubernetesPodOperator's flow in the attempt's cluster; judge how it ended."""
        self._enter(TryState.RUNNING, f"attempt {attempt.number}: pod {attempt.pod} in {attempt.cluster}")
        self.use_cluster(attempt.cluster)
        self.pod_request_obj = self._attempt_pod(attempt)
        self.pod = self.remote_pod = None
        self._created = None
        self._result_read = False
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
            outcome = self.handle_attempt_failure(context, attempt, exc)
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

    def extract_xcom(self, pod: k8s.V1Pod, *, ignore_kill_failure: bool = True) -> dict[Any, Any] | None:
        """KubernetesPodOperator's read of the pod's result; noted, so that a pod whose result could not be
        read is not written down as a success when it is deleted (the try fails on the read)."""
        result = super().extract_xcom(pod, ignore_kill_failure=ignore_kill_failure)
        self._result_read = True
        return result

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

    # Arguments: checked before anything is reserved -------------------------------------------

    def placement_request(self, hook: FederationHook) -> tuple[TaskRequest, PolicySpec]:
        """The validated placement request and effective policy against ``hook``'s federation (the
        planner's entry point: no task context)."""
        _, request = self.prepare(None, hook)
        return request, self.policy_spec

    def prepare(
        self, context: Any = None, hook: FederationHook | None = None
    ) -> tuple[k8s.V1Pod, TaskRequest]:
        """Check the federation arguments and build the pod once; fail the try naming the argument."""
        hook = hook or self.federation_hook
        try:
            spec = hook.spec
        except SpecError as exc:
            raise FederationError(f"federation: the spec cannot be loaded: {exc}") from None
        checked_arguments(preemptible=self.preemptible, checkpoint=self.checkpoint)
        try:
            check_annotations(self.annotations)
            check_pod_labels(
                labels=self.labels,
                node_selector=self.node_selector,
                tolerations=self.tolerations,
                full_pod_spec=self.full_pod_spec,
            )
            check_pod_arguments(vars(self))
        except SpecError as exc:
            raise FederationError(str(exc)) from None
        self.policy_spec = check_arguments(
            spec,
            conflicting=self._conflicting_arguments,
            max_cluster_attempts=self.max_cluster_attempts,
            durations={
                "unschedulable_grace_seconds": self.unschedulable_grace_seconds,
                "unreachable_grace": self.unreachable_grace,
                "wait_timeout": self.wait_timeout,
                "expected_duration": self.expected_duration,
            },
            clusters=self.clusters,
            datasets=self.datasets,
            prefer_region=self.prefer_region,
            prefer_group=self.prefer_group,
            cluster_selector=self.cluster_selector,
            policy=self.policy,
        )
        assets = task_assets(self.inlets, self.outlets, context)
        try:  # the datasets its Assets are, before anything is reserved: a conflict fails the try here
            resolved = spec.check_references(datasets=self.datasets, assets=assets)
        except SpecError as exc:
            raise FederationError(str(exc)) from None
        # The rule the task runs under: what its outputs inherit (:func:`mark_outlets`).
        self.data_rule = FederationSpec.rule_of(resolved)
        # The pod template reads connection extras (namespace, sidecar): any member that resolves will
        # do, so a broken member never fails a task the others can run (the decision says why it is out).
        members = self.clusters or [c.name for c in spec.clusters]
        problems = []
        for member in members:
            try:
                self.use_cluster(member, hook)
                break
            except ClusterAccessError as exc:
                problems.append(str(exc))
        else:
            raise FederationError("no member cluster can be reached: " + "; ".join(problems))
        pod = self.build_pod_request_obj(context, dry_run=True)
        document = kubernetes.client.ApiClient().sanitize_for_serialization(pod)
        pod_spec = document["spec"]
        expected = seconds(self.expected_duration, "expected_duration")
        dag = getattr(self, "_dag", None)  # has_dag() is untyped; a bare operator has none
        tags = sorted(dag.tags or ()) if dag is not None else []
        tenant = task_tenant(spec, self.tenant, self.owner, tags)
        if tenant is not None:
            pod.metadata.labels = {**(pod.metadata.labels or {}), TENANT_LABEL: tenant}
        if self.preemptible:
            pod.metadata.labels = {**(pod.metadata.labels or {}), PREEMPTIBLE_LABEL: "true"}
        try:  # the pod's (and a Job's) labels, a pod_template_file's included, and its name
            check_labels(pod.metadata.labels, "labels")
            check_pod_name(pod.metadata.name)
            check_pod_size(document)
        except SpecError as exc:
            raise FederationError(str(exc)) from None
        try:
            request = TaskRequest.from_pod_spec(
                pod_spec,
                datasets=self.datasets,
                assets=assets,
                prefer_region=self.prefer_region,
                prefer_group=self.prefer_group,
                clusters=self.clusters,
                cluster_selector=self.cluster_selector,
                namespace=pod.metadata.namespace or "default",
                expected_duration_seconds=expected if expected is not None else 3600.0,
                preemptible=self.preemptible,
                tenant=tenant,
                max_cost=budget(self.max_cost, "max_cost"),
                max_egress_gb=budget(self.max_egress_gb, "max_egress_gb"),
            )
        except SpecError as exc:
            raise FederationError(f"pod resources: {exc}") from None
        return pod, request

    # Earlier tries of the same task instance --------------------------------------------------

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
        complete) and wrote that down (``hooks/sensing.py``), or its trigger saw it Succeeded before the
        try that deferred on it ended unresumed (``DeferredStore.ended``). Its work is not run again. Not
        for ``do_xcom_push`` tasks."""
        if self.do_xcom_push:
            return False
        hook, kind = self.federation_hook, self.earlier_kind
        for attempt in self._left_unread():
            where = (attempt.cluster, attempt.namespace, attempt.pod)
            if hook.swept_success(*where, kind):
                ended = "Succeeded" if kind == "pod" else "completed"
                reason = (
                    f"{kind} {attempt.pod} {ended} in {attempt.cluster} while that cluster was silent to "
                    "this task (the snapshot that deleted it saw it end): its work is not run again"
                )
            elif kind == "pod" and (hook.deferral(*where) or {}).get("ended") == "Succeeded":
                # Its trigger saw it Succeeded, and the try ended before it resumed (the scheduler reset
                # it); the pod may be gone since (the garbage collector of a deleted node).
                reason = (
                    f"pod {attempt.pod} Succeeded in {attempt.cluster}, as its trigger saw, and that try "
                    "ended before it resumed: its work is not run again"
                )
            else:
                continue
            self._succeed_with(context, attempt, reason)
            hook.forget_swept_success(*where, kind)
            hook.forget_deferral(*where, kind)
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
        self._enter(TryState.SUCCEEDED, reason)
        # A try that died left its reservation: the pod it stood for is over.
        self.federation_hook.release(attempt.cluster, attempt.placement_id)
        records.succeed_with(self._record, attempt, reason)
        self._save(context)
        self.log.info("Placement: %s", self._record.summary())

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
                    if last is not None and where_it_ran and (not self.preemptible or ended_there):
                        record.left_by_earlier_try = last  # the next try waits for this cluster too
                        # Written down as this try's own lost pods are: deleted, its end kept, once the
                        # cluster answers, so that it outlives no try (the simulated soak at acc8f6d,
                        # sync_plain[31]: left in east-a after the task's last try gave up on it).
                        self.federation_hook.add_orphan(cluster, last.namespace, last.pod, kind)
                        raise self._give_up(
                            context,
                            f"the earlier try's {kind} may still run in {cluster}, which does not answer: "
                            f"{self.pod_manager.reason(exc)}; it is deleted when the cluster answers again",
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

    # The delivery contract: judging an attempt and what follows -------------------------------

    # Where a try resumes -------------------------------------------------------------------------------
    def _continue(self, context: Any) -> Any:
        """Reattach to this try's running attempt, or adopt an earlier try's pod (or its recorded
        success); then place."""
        attempt = self._record.current
        if attempt is None or attempt.outcome != "running":
            attempt = self._adopt_earlier(context)
            if attempt is not None and attempt.outcome == "succeeded":
                return None  # an earlier try's pod Succeeded: its success was taken
            if attempt is None and (self._earlier_succeeded(context) or self._left_pod_succeeded(context)):
                return None
        if attempt is not None:
            self.log.info(
                "Reattaching to pod %s/%s in cluster %s", attempt.namespace, attempt.pod, attempt.cluster
            )
            try:
                return self.run_attempt(context, attempt)
            except ClusterLeft:
                pass  # evicted or gone while no worker watched: place again
        return self.place_and_run(context)

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

    def handle_attempt_failure(
        self, context: Any, attempt: Attempt, exc: BaseException
    ) -> BaseException | None:
        """Record how the attempt ended; return what to raise: the task's own error, a FederationError
        when the try must fail, or ClusterLeft after the pod is gone and the cluster left; None when the
        pod had Succeeded before its cluster stopped answering (the try succeeds, its work is not re-run).
        Once the task was ended (:meth:`on_kill`), nothing is judged: the pod's end is that cancellation,
        and no other attempt is started (the CI soak at 2a1d15f, ``sync_plain[7]``: marked failed, its
        deleted pod read as evicted, a copy launched elsewhere ran to the end after the process died)."""
        if self._killed:
            return self._ended_by_kill(attempt)
        seen = self._observe(attempt) if airflow_failed(exc) and not self.do_xcom_push else None
        if seen is not None and seen.phase == "Succeeded":
            self._done_while_airflow_failed(context, attempt, exc)
            return None
        failure = self._judge(attempt, exc, seen)
        if failure is None:
            last = self._make_sure_gone(attempt)
            if seen is not None and last == "Succeeded":
                # Airflow failed the step as the pod ended: the read saw it running, the cleanup Succeeded
                # (the full test-bed soak at acc8f6d, deferred_resumable[28]: deleted unrecorded, run again).
                self._done_while_airflow_failed(context, attempt, exc, delete=False)
                return None
            self._finish(context, attempt, "failed", short_error(exc))
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
            if self._succeeded_as_removed(context, attempt, failure):
                return None
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
            if self._succeeded_as_removed(context, attempt, failure):
                return None
            if not self.preemptible:
                reason = f"{failure.reason}; the pod is not confirmed gone: the work is not started elsewhere"
                self._finish(context, attempt, "lost", reason)
                return FederationError(reason)
        elif self._succeeded_as_removed(context, attempt, failure):
            return None
        self._enter(TryState.LEAVING, f"{failure.kind}: {failure.reason}")
        self.leave_cluster(context, attempt, failure)
        return ClusterLeft(failure)

    def _succeeded_as_removed(self, context: Any, attempt: Attempt, failure: ClusterFailure) -> bool:
        """The pod this try deleted to leave its cluster had Succeeded by then (the delete's answer, or a
        read after it, said so): its work is done, so the try succeeds instead of starting it elsewhere (the
        full test-bed soak's ``sync_resumable[5]``: its pod ended as east-a's etcd came back and the delete
        landed, and the work ran a second time in west). Not for ``do_xcom_push`` tasks."""
        phase = self.pod_manager.phase_when_removed.get((attempt.namespace, attempt.pod))
        if phase != "Succeeded" or self.do_xcom_push:
            return False
        reason = (
            f"pod {attempt.pod} Succeeded as it was deleted to leave {attempt.cluster} ({failure.kind}: "
            f"{failure.reason}): its work is done, not started elsewhere"
        )
        self.log.warning("%s", reason)
        self._finish(context, attempt, "succeeded", reason)
        return True

    def _done_while_airflow_failed(
        self, context: Any, attempt: Attempt, exc: BaseException, *, delete: bool = True
    ) -> None:
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
        if (
            delete
            and self.on_finish_action in deletes
            and not self.pod_manager.remove(attempt.namespace, attempt.pod, within=GONE_TIMEOUT)
        ):
            self.federation_hook.add_orphan(attempt.cluster, attempt.namespace, attempt.pod)

    def _make_sure_gone(self, attempt: Attempt) -> str | None:
        """The try fails with the task's own failure: its pod goes with it, as ``on_finish_action`` says,
        even when KubernetesPodOperator's cleanup did not run (the pod's name could not be published) or
        its delete was refused (a 403 from an API server that has just restarted): deleted now, confirmed,
        else written down and deleted by the next snapshot of its cluster. No pod outlives its try.
        Returns the pod's last phase this saw (its read, or its delete's answer), if any."""
        if self.on_finish_action == OnFinishAction.KEEP_POD:
            return None
        seen = self.pod_manager.observe(attempt.namespace, attempt.pod, events=False)
        if seen.answered and seen.pod is None:
            return None
        ended = seen.phase in ("Succeeded", "Failed")
        if ended and self.on_finish_action != OnFinishAction.DELETE_POD:
            return seen.phase  # kept as asked (a running pod never is: it would outlive its try)
        self.log.info("Deleting pod %s/%s, left after the task failed", attempt.namespace, attempt.pod)
        if not self.pod_manager.remove(attempt.namespace, attempt.pod, within=GONE_TIMEOUT):
            self.federation_hook.add_orphan(attempt.cluster, attempt.namespace, attempt.pod)
            self.log.warning(
                "Pod %s/%s in %s is not confirmed deleted: it is deleted when its cluster allows it",
                attempt.namespace,
                attempt.pod,
                attempt.cluster,
            )
        return self.pod_manager.phase_when_removed.get((attempt.namespace, attempt.pod), seen.phase)

    def _ended_unread(
        self, context: Any, attempt: Attempt, failure: ClusterFailure, phase: str
    ) -> BaseException | None:
        """The pod was seen ``phase`` (its work is over), then its cluster stopped answering for longer than
        ``unreachable_grace``, or the pod disappeared (deleted by someone: the garbage collector of a deleted
        node) before its end was read: the work is never started again, preemptible or not. Succeeded, with no
        XCom to read, the try succeeds without the pod's logs; otherwise it fails, and a retry waits for
        that cluster to adopt the pod. Either way the pod is deleted when its cluster answers again."""
        self.federation_hook.add_orphan(attempt.cluster, attempt.namespace, attempt.pod)
        if phase == "Succeeded" and not self.do_xcom_push:
            silent = self._watch.unanswered_since is not None or self._watch.node_unready_since is not None
            reason = (
                f"pod {attempt.pod} Succeeded; its cluster then stopped answering ({failure.reason}), so its "
                "logs were not read; the pod is deleted when the cluster answers again"
                if silent
                else f"pod {attempt.pod} Succeeded; it was then deleted by someone else (the garbage "
                f"collector of a deleted node?) before its logs were read ({failure.reason})"
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

    def _fenced_pod_succeeded(self, context: Any) -> bool:
        """Before a copy starts elsewhere, one look at each pod this try fenced: one whose cluster answers
        again and shows it Succeeded is the try's result, and no copy starts (the simulated CeleryExecutor
        soak at 92108c3, ``deferred_resumable[8]``: north answered again a second before the copy was
        created, and the copy's trigger, slow on a loaded triggerer, read the first pod's end only after the
        copy had run the work to the end a second time)."""
        fenced = self._fenced(None)
        # Short reads: a cluster that still does not answer must not hold the move up.
        done = FenceWatch(self.federation_hook, fenced, read_timeout=2.0).look_once() if fenced else None
        if done is None:
            return False  # the copy starts, and the fence watch reads on while it runs
        self.log.warning(
            "Pod %s, left in %s when that cluster stopped answering, Succeeded: its result is taken, no copy "
            "is started",
            done.pod,
            done.cluster,
        )
        self._take_left_result(
            context,
            done,
            f"pod {done.pod} Succeeded in {done.cluster}, which answered again before the work was started "
            "elsewhere: its result is taken",
        )
        return True

    def _fenced(self, attempt: Attempt | None) -> list[Attempt]:
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
        self._take_left_result(
            context,
            done,
            f"pod {done.pod} Succeeded in {done.cluster} while this try ran its work elsewhere (that "
            f"cluster had stopped answering): its result is taken; pod {attempt.pod} in {attempt.cluster} "
            "was stopped",
        )

    def _take_left_result(self, context: Any, done: Attempt, reason: str) -> None:
        """``done``, a pod this try fenced, Succeeded: the try ends in success with its result, and the pod
        is deleted (or written down and deleted once its cluster allows)."""
        hook = self.federation_hook
        self.use_cluster(done.cluster)
        if self.pod_manager.remove(done.namespace, done.pod, within=10.0):
            hook.forget_orphan(done.cluster, done.namespace, done.pod)
        else:
            hook.add_orphan(done.cluster, done.namespace, done.pod)
        hook.forget_swept_success(done.cluster, done.namespace, done.pod)
        self._succeed_with(context, done, reason)

    def _result_grace(self) -> float:
        """How long a pod whose work is over is waited for: ``unreachable_grace``, preemptible or not."""
        return float(seconds(self.unreachable_grace, "unreachable_grace") or 0)

    def _failed_at(self) -> datetime:
        """When the failure was first seen: the first call without an answer, if there was one."""
        since = self._watch.unanswered_since or self._watch.node_unready_since
        now = datetime.now(UTC)
        return now - timedelta(seconds=time.monotonic() - since) if since is not None else now

    def leave_cluster(self, context: Any, attempt: Attempt, failure: ClusterFailure) -> None:
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
        done = phase == "Succeeded" and (self._result_read or not self.do_xcom_push)
        if attempt is not None and attempt.outcome == "running" and done:
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

    def _ended_by_kill(self, attempt: Attempt) -> AirflowException:
        """What the attempt loop raises once the task was ended (:meth:`on_kill` deleted what ran): its
        disappearance is not a failure of the cluster, and no other attempt is started."""
        why = self._record.reason or f"the task was ended while its {self.earlier_kind} ran"
        return AirflowException(
            f"{why} ({self.earlier_kind} {attempt.pod} in {attempt.cluster}); no other attempt is started"
        )

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

    def _enter(self, state: TryState, why: str = "") -> None:
        """The try takes a transition of ``operators/try_states.py`` (logged with ``why``)."""
        states = self.__dict__.get("_try_states")
        if states is None:  # a step called before any entry point began the try (a test's, a subclass's)
            states = self._try_states = TryStates(self.log, strict=_unit_test_mode())
        states.enter(state, why)

    def _finish(self, context: Any, attempt: Attempt, outcome: str, reason: str) -> None:
        self._enter(TryState.SUCCEEDED if outcome == "succeeded" else TryState.FAILED, reason)
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
        self._enter(TryState.FAILED, reason)
        records.end_try(self._record, "failed", reason)
        self._save(context)
        return FederationError(reason)

    # Deferral: the pod trigger, and judging when it fires -------------------------------------

    def resume_execution(self, next_method: str, next_kwargs: dict[str, Any] | None, context: Any) -> Any:
        """A trigger that crashed or timed out resumes the task with ``__fail__``, which would fail the
        try without a word to the operator: nobody would watch or delete the pod. Delete and record it
        first."""
        if next_method == "__fail__":
            self._begin(context)
            attempt = self._record.current
            if attempt is not None and attempt.outcome == "running":
                self.use_cluster(attempt.cluster)
                self.federation_hook.forget_deferral(attempt.cluster, attempt.namespace, attempt.pod)
                error = (next_kwargs or {}).get("error", "unknown error")
                self.log.error("The pod trigger failed (%s): deleting pod %s", error, attempt.pod)
                self._trigger_failed(context, attempt, str(error))
        return super().resume_execution(next_method, next_kwargs, context)

    def invoke_defer_method(self, last_log_time: Any = None, context: Any = None) -> None:
        """Defer to the federation's pod trigger: it carries the cluster and connection id, no credentials."""
        from airflow.sdk.module_loading import import_string  # type: ignore[attr-defined]

        attempt = self._record.current
        assert attempt is not None
        deadline = None
        if self.execution_timeout is not None and context is not None:
            deadline = context["ti"].start_date.timestamp() + self.execution_timeout.total_seconds()
        self._publish_attempt()
        self._save(context)
        trigger = import_string(self.trigger_class)(
            federation=self.federation_hook.serializable_source(),
            cluster=attempt.cluster,
            conn_id=self.federation_hook.access(attempt.cluster).conn_id,
            pod_name=attempt.pod,
            pod_namespace=attempt.namespace,
            base_container_name=self.base_container_name,
            poll_interval=self.poll_interval,
            unreachable_grace=self._grace(),
            result_grace=self._result_grace(),
            unschedulable_grace=float(self.unschedulable_grace_seconds),
            schedule_timeout=float(self.schedule_timeout_seconds),
            execution_deadline=deadline,
            fenced=[
                {"cluster": a.cluster, "namespace": a.namespace, "pod": a.pod} for a in self._fenced(attempt)
            ],
        )
        pod = self.pod_manager.read_pod(self.pod_request_obj)
        if self._pod_ended(pod):
            self.log.info("Pod %s already ended: judged without deferring", attempt.pod)
            done = Done(
                name=attempt.pod,
                namespace=attempt.namespace,
                fedsched_cluster=attempt.cluster,
                message="done",
            )
            self._inline_result = self._reenter(context, attempt, done)
            self._settled = True
            return
        ti = context["ti"] if context is not None else None
        if ti is not None:  # for the sweep of tries that end while no trigger watches (hooks/sensing.py)
            self.federation_hook.note_deferral(attempt.cluster, attempt.namespace, attempt.pod, ti)
        self.defer(trigger=trigger, method_name="trigger_reentry")

    def _unreadable_event(self, context: Any, attempt: Attempt, problem: str) -> FederationError:
        """The trigger's event cannot be read (``triggers/events.py``): nobody knows what it saw, so the
        pod is deleted and the try fails with the field at fault, as when the trigger itself failed."""
        self.use_cluster(attempt.cluster)
        self.federation_hook.forget_deferral(attempt.cluster, attempt.namespace, attempt.pod)
        self.log.error("%s: deleting pod %s", problem, attempt.pod)
        return self._trigger_failed(context, attempt, problem)

    def _reenter(self, context: Any, attempt: Attempt, event: PodEvent) -> Any:
        """Judge the attempt the trigger fired about, from a fresh read of its pod.

        The deferral's entry is forgotten once the judgement is over, not before: it may hold the trigger's
        note that the pod Succeeded, the only proof of the result once the pod is gone, and a try that dies
        before its success is written leaves it to the next try (or to the sweep of ended tries). The
        CeleryExecutor test-bed soak at 92108c3, ``deferred_plain[10]``: forgotten as the try began, its
        worker SIGKILLed before the success was written, and the retry ran the work again."""
        hook = self.federation_hook
        where = (attempt.cluster, attempt.namespace, attempt.pod)
        noted = hook.deferral(*where) or {}
        try:
            result = self._judge_reentry(context, attempt, event, noted)
        except TaskDeferred:
            current = self._record.current
            if current is None or (current.cluster, current.namespace, current.pod) != where:
                hook.forget_deferral(*where)  # it defers on another pod (on this one, its entry is rewritten)
            raise
        except BaseException:
            if noted.get("ended") != "Succeeded":
                hook.forget_deferral(*where)
            raise  # a success seen stays for the next try; the sweep of ended tries keeps it then
        hook.forget_deferral(*where)
        return result

    def _judge_reentry(
        self, context: Any, attempt: Attempt, event: PodEvent, noted: Mapping[str, Any]
    ) -> Any:
        self._enter(TryState.RUNNING, f"the pod trigger fired about pod {attempt.pod}: {event.status}")
        status, message = event.status, event.message or event.status
        self.pod_request_obj = self._attempt_pod(attempt)
        # This try created the pod before it deferred: a permission revoked for a while (403) while it
        # is read again says nothing about its work (the full soak's deferred_plain[4] was judged failed
        # on one, and its retry ran the work a second time).
        self.pod_manager.know(attempt.namespace, attempt.pod)
        # ... and created it: a pod gone now, deleted by someone else (the garbage collector of a deleted
        # node), disappeared; if it was seen to end first, its result is known (_ended_unread).
        self._created = True
        self._result_read = False
        self._watch.reset(self._grace() if not isinstance(event, Lost) else 0.0, self._result_grace())
        # A trigger that saw the pod end (this one, or one a restarted triggerer lost): its result is
        # known, whatever happens to its cluster now.
        self._watch.seen(str(noted.get("ended") or ""))
        if isinstance(event, Done):
            self._watch.seen(event.phase or "")
        if isinstance(event, Error):
            raise self._trigger_failed(context, attempt, message)
        if isinstance(event, FencedDone):  # a pod this try left Succeeded: stop this copy, take its result
            wanted = (event.fenced_cluster, event.fenced_pod)
            done = next((a for a in self._fenced(attempt) if (a.cluster, a.pod) == wanted), None)
            if done is not None:
                self.log.warning("%s: stopping pod %s in %s", message, attempt.pod, attempt.cluster)
                self._take_fenced(context, attempt, done)
                self._settled = True
                return None
        try:
            # A lost event may be minutes old: a cluster that answers now is judged by its answer.
            if (
                isinstance(event, Lost)
                and self._watch.ended_phase is None
                and not self.pod_manager.observe(attempt.namespace, attempt.pod, events=False).answered
            ):
                raise ClusterLost(failures.unreachable(message))
            seen = self.pod_manager.read_pod(self.pod_request_obj)  # fresh: the event may be stale
            if not self._pod_ended(seen):
                document = as_dict(seen)
                found = disruption(document)
                if found is None and (
                    unschedulable_message(document)
                    or (isinstance(event, Unschedulable) and not scheduled(document))
                ):
                    found = (
                        failures.insufficient(message)
                        if isinstance(event, Unschedulable)
                        else failures.unschedulable(str(unschedulable_message(document)))
                    )
                if found is not None:
                    raise Judged(found)
                if isinstance(event, Timeout):
                    raise FederationError(f"{message}: the pod had not ended")
                self.log.info("Pod %s runs on (the trigger said %s): watching on", attempt.pod, status)
                self.invoke_defer_method(context=context)
                # Returned without deferring: the pod ended meanwhile and was judged there, its pod deleted
                # (the test-bed soak's deferred_resumable[14]: judged again here, the deleted pod was
                # taken for a failure and the retry ran the work again).
                return self._inline_result
            attempt.running_at = attempt.running_at or _container_started_at(seen, self.base_container_name)
            succeeded = seen.status.phase == "Succeeded" or container_is_succeeded(
                seen, self.base_container_name
            )
            result = KubernetesPodOperator.trigger_reentry(
                self,
                context,
                {
                    **event.dump(),
                    "status": "success" if succeeded else "failed",
                    "message": "pod failed",
                    "name": attempt.pod,
                    "namespace": attempt.namespace,
                },
            )
        except Exception as exc:
            outcome = self.handle_attempt_failure(context, attempt, exc)
            if outcome is None:  # the pod Succeeded before its cluster went silent: the try succeeds
                self._settled = True
                return None
            if isinstance(outcome, ClusterLeft):
                self._inline_result = self.place_and_run(context)
                self._settled = True
                return self._inline_result
            self._settled = True
            raise outcome from exc
        if attempt.outcome == "running":  # else written down before its pod was deleted
            self._finish(context, attempt, "succeeded", "")
        self._settled = True
        return result

    def _trigger_failed(self, context: Any, attempt: Attempt, message: str) -> FederationError:
        """The trigger could not watch the pod: nobody would, so the pod is deleted and the try fails."""
        gone = self.pod_manager.remove(attempt.namespace, attempt.pod, within=30.0)
        if not gone:
            self.federation_hook.add_orphan(attempt.cluster, attempt.namespace, attempt.pod)
        reason = f"the pod trigger failed: {message}; " + (
            "its pod was deleted" if gone else "its pod is deleted when the cluster answers again"
        )
        self._finish(context, attempt, "failed", reason)
        self._settled = True
        return FederationError(reason)

    def _pod_ended(self, pod: k8s.V1Pod) -> bool:
        """The pod's work is over: a terminal phase, or the base container terminated (a sidecar such as
        the XCom one may keep the pod Running)."""
        phase = pod.status.phase if pod.status is not None else None
        return phase in ("Succeeded", "Failed") or container_is_completed(pod, self.base_container_name)
