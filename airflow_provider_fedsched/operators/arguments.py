"""Checks of the operator's federation arguments: a clear error naming the argument, before anything is
reserved or created."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Literal

import kubernetes
from airflow.providers.cncf.kubernetes.operators.pod import KubernetesPodOperator
from airflow.sdk import Asset
from airflow.sdk.definitions.asset import AssetNameRef, AssetUriRef
from airflow.sdk.exceptions import AirflowException
from kubernetes.client import models as k8s

from airflow_provider_fedsched.federation._errors import PermanentError
from airflow_provider_fedsched.federation.assets import (
    EXTRA_KEY,
    AssetDataset,
    WrittenEvent,
    asset_dataset,
    size_reported,
    where_written,
    written_event,
)
from airflow_provider_fedsched.federation.limits import check_seconds
from airflow_provider_fedsched.federation.request import TaskRequest
from airflow_provider_fedsched.federation.spec import FederationSpec, PolicySpec, SpecError
from airflow_provider_fedsched.kube.access import ClusterAccessError
from airflow_provider_fedsched.kube.labels import PREEMPTIBLE_LABEL, TENANT_LABEL
from airflow_provider_fedsched.validation.operator import (
    OperatorArguments,
    check_annotations,
    check_labels,
    check_operator_arguments,
    check_pod_arguments,
    check_pod_labels,
    check_pod_name,
    check_pod_size,
)

if TYPE_CHECKING:
    from airflow_provider_fedsched.hooks.federation import FederationHook

log = logging.getLogger(__name__)

CONFLICTING = ("kubernetes_conn_id", "cluster_context", "config_file", "in_cluster")
"""KubernetesPodOperator arguments that pick a cluster: the federation does that."""


class FederationError(AirflowException, PermanentError):
    """Bad federation input, or no cluster could run the task: the try fails with this message."""


def seconds(value: timedelta | float | int | None, argument: str) -> float | None:
    if value is None:
        return None
    try:
        return check_seconds(value, argument)  # finite, non-negative, at most ten years
    except SpecError as exc:
        raise FederationError(str(exc)) from None


def _is_template(value: Any) -> bool:
    return isinstance(value, str) and "{{" in value


def checked_arguments(**raw: Any) -> OperatorArguments:
    """The federation arguments as given (``validation.operator``), as a :class:`FederationError` naming
    the argument; a Jinja template string is left for :meth:`Arguments.prepare` to check once rendered."""
    given = {name: value for name, value in raw.items() if not _is_template(value)}
    try:
        return check_operator_arguments(**given)
    except SpecError as exc:
        raise FederationError(str(exc)) from None


def check_arguments(
    spec: FederationSpec,
    *,
    conflicting: Sequence[str],
    max_cluster_attempts: int,
    durations: Mapping[str, Any],
    clusters: Sequence[str] | None,
    datasets: Sequence[str],
    prefer_region: str | None,
    prefer_group: str | None,
    cluster_selector: Mapping[str, Any],
    policy: Mapping[str, Any],
) -> PolicySpec:
    """Every federation argument against ``spec``; returns the task's effective policy."""
    checked_arguments(
        max_cluster_attempts=max_cluster_attempts,
        clusters=clusters,
        datasets=datasets,
        prefer_region=prefer_region,
        prefer_group=prefer_group,
        cluster_selector=cluster_selector,
        policy=policy,
        **durations,
    )
    if conflicting:
        raise FederationError(
            f"argument(s) {', '.join(conflicting)} conflict with federation placement: the federation "
            "chooses the cluster and its connection; restrict members with clusters=[...]"
        )
    if max_cluster_attempts < 1:
        raise FederationError(f"max_cluster_attempts must be at least 1 (got {max_cluster_attempts})")
    for name, value in durations.items():
        seconds(value, name)
    known = {c.name for c in spec.clusters}
    if clusters is not None:
        if not clusters:
            raise FederationError("clusters: the cluster subset is empty; name at least one member")
        unknown = sorted(set(clusters) - known)
        if unknown:
            raise FederationError(f"clusters: unknown cluster(s) {unknown} (members: {sorted(known)})")
    names = {d.name for d in spec.datasets}
    unknown_datasets = sorted(set(datasets) - names)
    if unknown_datasets:
        raise FederationError(f"datasets: unknown dataset(s) {unknown_datasets} (known: {sorted(names)})")
    regions = spec.known_regions()
    if prefer_region is not None and prefer_region not in regions:
        raise FederationError(f"prefer_region: unknown region {prefer_region!r} (known: {sorted(regions)})")
    groups = {c.proximity_group for c in spec.clusters}
    if prefer_group is not None and prefer_group not in groups:
        raise FederationError(f"prefer_group: unknown group {prefer_group!r} (known: {sorted(groups)})")
    for key, value in cluster_selector.items():
        if not isinstance(key, str) or not isinstance(value, str) or not key:
            raise FederationError(f"cluster_selector: labels are strings (got {key!r}: {value!r})")
    try:
        return spec.policy.merged(dict(policy))
    except SpecError as exc:
        raise FederationError(f"policy: {exc}") from None


def task_tenant(
    spec: FederationSpec, tenant: str | None, owner: str | None, tags: Sequence[str]
) -> str | None:
    """The task's tenant: ``tenant=`` (or the DAG's ``default_args``), else the spec's mapping by owner or
    DAG tag; a name the spec does not know fails naming the argument."""
    if tenant is None:
        return spec.tenant_mapping.tenant_for(owner, tags)
    if not isinstance(tenant, str):
        raise FederationError(f"tenant must be a tenant's name (got {tenant!r})")
    known = sorted(t.name for t in spec.tenants)
    if tenant not in known:
        raise FederationError(f"tenant: unknown tenant {tenant!r} (known: {', '.join(known) or 'none'})")
    return tenant


def latest_event_extra(context: Any, inlet: Any, where: str) -> Any:
    """The ``extra`` of the inlet's latest asset event (None without a try's context or an event). An
    event that cannot be read fails the try before anything is reserved (one that may be tried again): it
    may carry the rule the data inherited, and placing without it could widen that rule."""
    if not isinstance(context, Mapping) or "inlet_events" not in context:
        return None
    try:
        events = list(context["inlet_events"][inlet].ascending(False).limit(1))
    except Exception as exc:  # the API server's answer: the try may succeed when it answers again
        raise AirflowException(
            f"{where}: cannot read the latest event of asset {inlet!r} (it may carry the rule its data "
            f"inherited): {str(exc)[:300]}"
        ) from None
    return events[0].extra if events else None


def task_assets(inlets: Sequence[Any], outlets: Sequence[Any], context: Any = None) -> list[AssetDataset]:
    """The task's Assets (inlets, then outlets) as the datasets it reads or writes, each once; its extra's
    ``fedsched`` fields checked, naming the asset. A reference by name or URI carries no extra; an
    AssetAlias names no asset until the task emits events, so it is not a dataset here. With a try's
    ``context``, an inlet carries what its latest event says: the cluster it was written on, the size its
    writer reported, the rule its writer ran under."""
    found: dict[str, AssetDataset] = {}
    roles: tuple[tuple[Literal["inlet", "outlet"], Sequence[Any]], ...] = (
        ("inlet", inlets),
        ("outlet", outlets),
    )
    for role, items in roles:
        for position, item in enumerate(items):
            where = f"{role}s[{position}]"
            try:
                if not isinstance(item, Asset | AssetUriRef | AssetNameRef):
                    continue
                written: WrittenEvent | None = None
                if role == "inlet":
                    uri = getattr(item, "uri", None) or getattr(item, "name", "")
                    at = f"{where} (inlet '{str(uri)[:200]}')"
                    written = written_event(latest_event_extra(context, item, at), at)
                if isinstance(item, Asset):
                    dataset = asset_dataset(item.uri, item.name, item.extra, role, where, written)
                elif isinstance(item, AssetUriRef):
                    dataset = asset_dataset(item.uri, item.uri, None, role, where, written)
                else:
                    dataset = asset_dataset(item.name, item.name, None, role, where, written)
            except SpecError as exc:
                raise FederationError(str(exc)) from None
            found.setdefault(dataset.model_dump_json(exclude={"role"}), dataset)
    return list(found.values())


def mark_outlets(
    context: Any, outlets: Sequence[Any], cluster: str, region: str, allowed_regions: list[str] | None
) -> None:
    """On success: each outlet Asset's event says where the data was written and the rule the task ran
    under (``extra["fedsched"]``), so that a task reading it next is placed toward it and inherits it."""
    if not isinstance(context, Mapping) or "outlet_events" not in context:
        return
    for item in outlets:
        if isinstance(item, Asset | AssetUriRef | AssetNameRef):
            context["outlet_events"][item].extra[EXTRA_KEY] = where_written(cluster, region, allowed_regions)


def report_sizes(context: Any, outlets: Sequence[Any], result: Any) -> None:
    """After success: the size the pod reported in its XCom result (``{"fedsched_size_gb": ...}``) joins
    each marked outlet's event. A value that is no size is left out with a warning naming it: the work is
    done, and failing the try would run it again."""
    if not isinstance(context, Mapping) or "outlet_events" not in context:
        return
    for item in outlets:
        if not isinstance(item, Asset | AssetUriRef | AssetNameRef):
            continue
        uri = item.uri if isinstance(item, Asset | AssetUriRef) else item.name
        try:
            size = size_reported(result, uri)
        except SpecError as exc:
            log.warning("Outlet %r: its size is not recorded: %s", uri[:200], exc)
            continue
        marked = context["outlet_events"][item].extra.get(EXTRA_KEY)
        if size is not None and isinstance(marked, dict):
            marked["size_gb"] = size


def budget(value: Any, argument: str) -> float | None:
    if value is None:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not value >= 0
        or value == float("inf")
    ):
        raise FederationError(f"{argument} must be a non-negative number (got {value!r})")
    return float(value)


class Arguments(KubernetesPodOperator):
    """The operator's validation steps (a base of FederatedKubernetesOperator).

    :param tenant: the tenant the task runs for (quota, fair share, budget); default the spec's
        ``tenant_mapping`` by owner or DAG tag (or ``default_args={"tenant": ...}`` for a whole DAG).
    :param max_cost: a cluster where the task's estimated cost is above this is never chosen.
    :param max_egress_gb: a cluster it would have to move more data to is never chosen.
    """

    def __init__(
        self,
        *,
        tenant: str | None = None,
        max_cost: float | None = None,
        max_egress_gb: float | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.tenant = tenant
        self.max_cost = max_cost
        self.max_egress_gb = max_egress_gb
        self.data_rule: list[str] | None = None
        """The regions its data allows (every dataset's rule at once; None = anywhere), once prepared."""

    if TYPE_CHECKING:  # provided by FederatedKubernetesOperator

        @property
        def federation_hook(self) -> FederationHook: ...

        policy_spec: PolicySpec
        _conflicting_arguments: list[str]
        max_cluster_attempts: int
        unschedulable_grace_seconds: float
        unreachable_grace: timedelta | float
        wait_timeout: timedelta | float
        expected_duration: timedelta | float | None
        clusters: list[str] | None
        datasets: list[str]
        prefer_region: str | None
        prefer_group: str | None
        cluster_selector: dict[str, str]
        policy: dict[str, Any]
        preemptible: bool
        checkpoint: str | None

        def use_cluster(self, cluster: str, hook: FederationHook | None = None) -> None: ...

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
