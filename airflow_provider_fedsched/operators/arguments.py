"""Checks of the operator's federation arguments: a clear error naming the argument, before anything is
reserved or created."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Literal

from airflow.sdk import Asset
from airflow.sdk.definitions.asset import AssetNameRef, AssetUriRef
from airflow.sdk.exceptions import AirflowException

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
from airflow_provider_fedsched.federation.spec import FederationSpec, PolicySpec, SpecError
from airflow_provider_fedsched.validation.operator import (
    OperatorArguments,
    check_operator_arguments,
)

if TYPE_CHECKING:
    pass

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
    the argument; a Jinja template string is left for the operator's ``prepare`` to check once rendered."""
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
