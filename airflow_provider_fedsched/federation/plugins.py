"""Filter and score plugins, in the style of the Kubernetes scheduler framework, one level up: per cluster.

A filter returns None (pass) or a human reason; the first failing filter rejects the cluster. Filters run
in :data:`spec.FILTER_PLUGINS` order, permanent rules first, so a cluster's rejection says whether it could
*ever* take the task. A score plugin returns a raw measurement per candidate and normalizes the raw values
of all candidates to 0..100 (higher is better); the engine multiplies by the policy weight and sums.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import ClassVar, Protocol

from airflow_provider_fedsched.federation.request import TaskRequest, tolerates_all
from airflow_provider_fedsched.federation.resources import (
    CPU,
    GPU,
    MEMORY,
    ResourceList,
    format_quantity,
)
from airflow_provider_fedsched.federation.snapshot import ClusterIndex, ClusterSnapshot
from airflow_provider_fedsched.federation.spec import (
    ClusterSpec,
    DatasetSpec,
    FederationSpec,
    PolicySpec,
    Taint,
)

__all__ = [
    "ClusterView",
    "DecisionContext",
    "FilterPlugin",
    "ScorePlugin",
    "build_filters",
    "build_scores",
    "compute_cost",
]

GIB = 2**30


@dataclass(slots=True)
class ClusterView:
    """One member cluster as the plugins see it during one decision."""

    spec: ClusterSpec
    snapshot: ClusterSnapshot | None
    index: ClusterIndex | None
    """The snapshot's index, looked up once per decision."""
    reservation: ResourceList
    """In-flight requests placed here but not yet visible in the snapshot."""
    namespace: str


@dataclass(slots=True)
class DecisionContext:
    """Everything about one decision that does not depend on the cluster, computed once."""

    spec: FederationSpec
    request: TaskRequest
    policy: PolicySpec
    now: datetime
    cooldowns: Mapping[str, datetime]
    exclude: Mapping[str, str]
    forecast: Mapping[str, float] | None
    datasets: list[DatasetSpec]
    request_items: tuple[tuple[str, int], ...]
    egress_total: float
    """Egress cost if no dataset were local to the candidate."""
    egress_saved: dict[str, float]
    """Cluster -> egress cost avoided because its datasets are local."""
    read_gb: float
    local_gb: dict[str, float]
    region_group: dict[str, str]
    _tolerated: dict[tuple[Taint, ...], bool] = field(default_factory=dict)

    @classmethod
    def build(
        cls,
        spec: FederationSpec,
        request: TaskRequest,
        policy: PolicySpec,
        now: datetime,
        cooldowns: Mapping[str, datetime],
        exclude: Mapping[str, str],
        forecast: Mapping[str, float] | None,
        datasets: list[DatasetSpec],
        clusters: Mapping[str, ClusterSpec],
    ) -> DecisionContext:
        egress_saved: dict[str, float] = {}
        local_gb: dict[str, float] = {}
        egress_total = 0.0
        for dataset in datasets:
            # Egress is billed by the cluster the data leaves.
            cost = dataset.size_gb * clusters[dataset.cluster].prices.egress_gb
            egress_total += cost
            egress_saved[dataset.cluster] = egress_saved.get(dataset.cluster, 0.0) + cost
            local_gb[dataset.cluster] = local_gb.get(dataset.cluster, 0.0) + dataset.size_gb
        region_group: dict[str, str] = {}
        for cluster in spec.clusters:
            region_group.setdefault(cluster.region, cluster.proximity_group)
        return cls(
            spec=spec,
            request=request,
            policy=policy,
            now=now,
            cooldowns=cooldowns,
            exclude=exclude,
            forecast=forecast,
            datasets=datasets,
            request_items=tuple(sorted(request.resources.items())),
            egress_total=egress_total,
            egress_saved=egress_saved,
            read_gb=sum(dataset.size_gb for dataset in datasets),
            local_gb=local_gb,
            region_group=region_group,
        )

    def tolerated(self, taints: tuple[Taint, ...]) -> bool:
        if not taints:
            return True
        known = self._tolerated.get(taints)
        if known is None:
            known = self._tolerated[taints] = tolerates_all(self.request.tolerations, taints)
        return known


class FilterPlugin(Protocol):
    name: str
    permanent: bool
    """A rejection by this plugin means the cluster can never take the task (not just "not now")."""

    def filter(self, ctx: DecisionContext, cluster: ClusterView) -> str | None: ...


class ScorePlugin(Protocol):
    name: str

    def score(self, ctx: DecisionContext, cluster: ClusterView) -> float: ...

    def normalize(self, raw: Sequence[float]) -> list[float]: ...


# ---------------------------------------------------------------- node fit helpers


def _selector_matches(selector: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    return all(labels.get(key) == value for key, value in selector.items())


def _fits(items: tuple[tuple[str, int], ...], free: Mapping[str, int]) -> bool:
    # A plain loop: this is the hot path, and all() over a generator costs about twice as much here.
    for name, amount in items:  # noqa: SIM110
        if amount > free.get(name, 0):
            return False
    return True


def _charge_reservation(
    ctx: DecisionContext, index: ClusterIndex, reservation: ResourceList
) -> dict[str, ResourceList]:
    """Node name -> free after charging the in-flight reservation.

    Where the in-flight pods land is unknown, so each resource is charged to the nodes this request could
    use (tolerated taints, matching node selector) with the most of it free first: the pessimistic guess
    for the next pod (better to wait than to leave a pod Pending). Charging nodes the request cannot use
    (say, in-flight CPU on tainted GPU nodes for a CPU pod) would hide the pods that took its room.
    """
    adjusted: dict[str, ResourceList] = {}
    groups = tuple(position for position, group in enumerate(index.groups) if ctx.tolerated(group.taints))
    selector = tuple(sorted(ctx.request.node_selector.items()))
    for name, amount in reservation.items():
        left = amount
        for node in index.by_free(name, groups, selector):
            if left <= 0:
                break
            free = adjusted.setdefault(node.name, dict(node.free))
            take = min(left, free.get(name, 0))
            if take > 0:
                free[name] -= take
                left -= take
    return adjusted


def _explain(
    ctx: DecisionContext,
    index: ClusterIndex,
    available: Mapping[str, ResourceList] | None,
    check_status: bool,
) -> str:
    """Kubernetes-style "0/3 nodes fit: 3 Insufficient nvidia.com/gpu" over every node of the cluster.

    Each node counts once under the first check it fails (status, taints, selector), or once per
    resource it lacks. ``available`` overrides nodes' free resources (reservations); ``check_status``
    False compares requests with allocatable and ignores readiness (the "could it ever fit" question).
    """
    counts: dict[str, int] = {}

    def count(reason: str, times: int) -> None:
        if times:
            counts[reason] = counts.get(reason, 0) + times

    selector = ctx.request.node_selector
    items = ctx.request_items
    for group in index.groups:
        considered = len(group.nodes)
        if check_status:
            count("node(s) were unschedulable or not ready", considered - group.schedulable_count)
            considered = group.schedulable_count
        if not ctx.tolerated(group.taints):
            first = next(t for t in group.taints if not tolerates_all(ctx.request.tolerations, (t,)))
            count("node(s) had untolerated taint {" + f"{first.key}: {first.value}" + "}", considered)
            continue
        if not selector and available is None:
            # No per-node condition left: count shortfalls per resource by bisecting the sorted amounts.
            columns = group.sorted_free if check_status else group.sorted_allocatable
            for name, amount in items:
                column = columns.get(name)
                count(
                    f"Insufficient {name}", bisect_left(column, amount) if column is not None else considered
                )
            continue
        for node in group.nodes:
            if check_status and not node.schedulable:
                continue  # counted above
            if selector and not _selector_matches(selector, node.labels):
                count("node(s) didn't match Pod's node affinity/selector", 1)
                continue
            if not check_status:
                free = node.allocatable
            elif available is not None and node.name in available:
                free = available[node.name]
            else:
                free = node.free
            for name, amount in items:
                if amount > free.get(name, 0):
                    count(f"Insufficient {name}", 1)
    details = ", ".join(f"{times} {reason}" for reason, times in sorted(counts.items()))
    return f"0/{index.node_count} nodes fit: {details}" if details else f"0/{index.node_count} nodes fit"


def _format_resources(resources: Iterable[tuple[str, int]]) -> str:
    return ", ".join(f"{name} {format_quantity(name, amount)}" for name, amount in resources if amount)


# ---------------------------------------------------------------- filters


class ClusterSubset:
    name = "ClusterSubset"
    permanent = True

    def filter(self, ctx: DecisionContext, cluster: ClusterView) -> str | None:
        allowed = ctx.request.clusters
        if allowed is None or cluster.spec.name in allowed:
            return None
        return "not in the task's cluster list"


class Sovereignty:
    name = "Sovereignty"
    permanent = True

    def filter(self, ctx: DecisionContext, cluster: ClusterView) -> str | None:
        region = cluster.spec.region
        for dataset in ctx.datasets:
            if dataset.allowed_regions is not None and region not in dataset.allowed_regions:
                allowed = ", ".join(dataset.allowed_regions) or "none"
                return f"region '{region}' is not allowed by dataset '{dataset.name}' (allowed: {allowed})"
        return None


class ClusterTaints:
    name = "ClusterTaints"
    permanent = True

    def filter(self, ctx: DecisionContext, cluster: ClusterView) -> str | None:
        for taint in cluster.spec.taints:
            if taint.effect != "PreferNoSchedule" and not tolerates_all(ctx.request.tolerations, (taint,)):
                return f"cluster taint {taint} is not tolerated"
        return None


class ClusterLabels:
    name = "ClusterLabels"
    permanent = True

    def filter(self, ctx: DecisionContext, cluster: ClusterView) -> str | None:
        labels = cluster.spec.labels
        for key, value in ctx.request.cluster_selector.items():
            if labels.get(key) != value:
                have = f"'{labels[key]}'" if key in labels else "absent"
                return f"cluster label {key}={value} required ({key} is {have})"
        return None


class Capacity:
    """Could any node, even empty, ever hold the pod? If not, waiting will not help."""

    name = "Capacity"
    permanent = True

    def filter(self, ctx: DecisionContext, cluster: ClusterView) -> str | None:
        index = cluster.index
        if index is None or not index.node_count:
            return None  # nothing known about the nodes: not a reason to give up
        selector = ctx.request.node_selector
        items = ctx.request_items
        for group in index.groups:
            if not ctx.tolerated(group.taints) or not _fits(items, group.max_allocatable):
                continue
            for node in group.nodes:
                if (not selector or _selector_matches(selector, node.labels)) and _fits(
                    items, node.allocatable
                ):
                    return None
        return "no node could ever fit, even empty: " + _explain(ctx, index, None, check_status=False)


class Excluded:
    name = "Excluded"
    permanent = False

    def filter(self, ctx: DecisionContext, cluster: ClusterView) -> str | None:
        reason = ctx.exclude.get(cluster.spec.name)
        return None if reason is None else f"excluded: {reason}"


class Reachable:
    name = "Reachable"
    permanent = False

    def filter(self, ctx: DecisionContext, cluster: ClusterView) -> str | None:
        if cluster.snapshot is None:
            return "no snapshot of this cluster"
        if not cluster.snapshot.reachable:
            return f"unreachable: {cluster.snapshot.reason or 'no reason given'}"
        return None


class Freshness:
    name = "Freshness"
    permanent = False

    def filter(self, ctx: DecisionContext, cluster: ClusterView) -> str | None:
        if cluster.snapshot is None:
            return "no snapshot of this cluster"
        age = cluster.snapshot.age_seconds(ctx.now)
        ttl = ctx.policy.snapshot_ttl_seconds
        return f"snapshot is {age:.1f}s old (ttl {ttl:g}s)" if age > ttl else None


class Cooldown:
    name = "Cooldown"
    permanent = False

    def filter(self, ctx: DecisionContext, cluster: ClusterView) -> str | None:
        until = ctx.cooldowns.get(cluster.spec.name)
        if until is None or until <= ctx.now:
            return None
        left = (until - ctx.now).total_seconds()
        return f"cooling down until {until.isoformat(timespec='seconds')} ({left:.0f}s left)"


class Quota:
    name = "Quota"
    permanent = False

    def filter(self, ctx: DecisionContext, cluster: ClusterView) -> str | None:
        if cluster.snapshot is None:
            return None
        headroom = cluster.snapshot.quota_headroom.get(cluster.namespace)
        if headroom is None:
            return None
        short = []
        for name, amount in ctx.request_items:
            # Only resources the quota names are limited by it.
            if name in headroom:
                available = headroom[name] - cluster.reservation.get(name, 0)
                if amount > available:
                    short.append(
                        f"{name} requested {format_quantity(name, amount)}, "
                        f"headroom {format_quantity(name, max(0, available))}"
                    )
        return f"namespace '{cluster.namespace}' quota: " + "; ".join(short) if short else None


class NodeFit:
    """At least one ready, schedulable node matches the selector, tolerates-wise, and has room now."""

    name = "NodeFit"
    permanent = False

    def filter(self, ctx: DecisionContext, cluster: ClusterView) -> str | None:
        index = cluster.index
        if index is None:
            return "no snapshot of this cluster"
        items = ctx.request_items
        selector = ctx.request.node_selector
        reservation = {name: amount for name, amount in cluster.reservation.items() if amount > 0}
        adjusted = _charge_reservation(ctx, index, reservation) if reservation else None
        for group in index.groups:
            if not ctx.tolerated(group.taints) or not _fits(items, group.max_free):
                continue
            for node in group.nodes:
                if not node.schedulable:
                    break  # schedulable nodes come first in each group
                if selector and not _selector_matches(selector, node.labels):
                    continue
                free = adjusted.get(node.name, node.free) if adjusted else node.free
                if _fits(items, free):
                    return None
        reason = _explain(ctx, index, adjusted, check_status=True)
        if reservation:
            reason += f" (counting in-flight reservations: {_format_resources(sorted(reservation.items()))})"
        return reason


# ---------------------------------------------------------------- scores


def compute_cost(ctx: DecisionContext, cluster: ClusterSpec) -> float:
    """Compute price x requests x expected duration, plus egress for every dataset not on ``cluster``."""
    prices = cluster.prices
    hours = ctx.request.expected_duration_seconds / 3600.0
    per_hour = 0.0
    for name, amount in ctx.request_items:
        if name == CPU:
            per_hour += amount / 1000 * prices.cpu_hour
        elif name == MEMORY:
            per_hour += amount / GIB * prices.memory_gib_hour
        elif name == GPU:
            per_hour += amount * prices.gpu_hour
        else:
            per_hour += amount * prices.extended.get(name, 0.0)
    egress = ctx.egress_total - ctx.egress_saved.get(cluster.name, 0.0)
    return per_hour * hours + max(0.0, egress)


def _absolute(raw: Sequence[float]) -> list[float]:
    """For raws already on a 0..100 scale: kept as they are, so small differences stay small."""
    return [min(100.0, max(0.0, value)) for value in raw]


class Cost:
    """Lower is better. The cheapest candidate gets 100; the others lose points in proportion to how much
    more they cost, relative to the most expensive candidate: ``100 * (1 - (c - min) / max)``."""

    name = "Cost"

    def score(self, ctx: DecisionContext, cluster: ClusterView) -> float:
        return compute_cost(ctx, cluster.spec)

    def normalize(self, raw: Sequence[float]) -> list[float]:
        if not raw:
            return []
        low, high = min(raw), max(raw)
        if high <= 0:
            return [100.0] * len(raw)
        return [100.0 * (1.0 - (value - low) / high) for value in raw]


class Locality:
    """Percentage of the bytes the task reads that are already on the cluster (100 when it reads none)."""

    name = "Locality"
    normalize = staticmethod(_absolute)

    def score(self, ctx: DecisionContext, cluster: ClusterView) -> float:
        if ctx.read_gb <= 0:
            return 100.0
        return 100.0 * ctx.local_gb.get(cluster.spec.name, 0.0) / ctx.read_gb


class Proximity:
    """100 in the preferred region, 50 in its proximity group (or the preferred group), else 0."""

    name = "Proximity"
    normalize = staticmethod(_absolute)

    def score(self, ctx: DecisionContext, cluster: ClusterView) -> float:
        request = ctx.request
        if request.prefer_region is not None and cluster.spec.region == request.prefer_region:
            return 100.0
        group = cluster.spec.proximity_group
        if request.prefer_group is not None and group == request.prefer_group:
            return 50.0
        if request.prefer_region is not None and ctx.region_group.get(request.prefer_region) == group:
            return 50.0
        return 0.0


class Headroom:
    """Percentage of the cluster left free after placement, for the scarcest resource the task requests."""

    name = "Headroom"
    normalize = staticmethod(_absolute)

    def score(self, ctx: DecisionContext, cluster: ClusterView) -> float:
        index = cluster.index
        if index is None:
            return 0.0
        items = ctx.request_items or ((CPU, 0), (MEMORY, 0))
        scarcest = 1.0
        for name, amount in items:
            total = index.total_allocatable.get(name, 0)
            if total <= 0:
                return 0.0
            left = index.total_free.get(name, 0) - cluster.reservation.get(name, 0) - amount
            scarcest = min(scarcest, left / total)
        return 100.0 * max(0.0, scarcest)


class Forecast:
    """Predicted idle fraction (0..1, clamped) x 100; a cluster with no forecast is neutral (50). The
    clamp bounds the bias: at most ``weight x 100`` points, whatever the forecaster says."""

    name = "Forecast"
    normalize = staticmethod(_absolute)
    neutral: ClassVar[float] = 50.0

    def score(self, ctx: DecisionContext, cluster: ClusterView) -> float:
        if ctx.forecast is None:
            return self.neutral
        value = ctx.forecast.get(cluster.spec.name)
        if value is None or value != value:  # missing or NaN
            return self.neutral
        return 100.0 * min(1.0, max(0.0, float(value)))


_FILTERS: dict[str, FilterPlugin] = {
    plugin.name: plugin
    for plugin in (
        ClusterSubset(),
        Sovereignty(),
        ClusterTaints(),
        ClusterLabels(),
        Capacity(),
        Excluded(),
        Reachable(),
        Freshness(),
        Cooldown(),
        Quota(),
        NodeFit(),
    )
}
_SCORES: dict[str, ScorePlugin] = {
    plugin.name: plugin for plugin in (Cost(), Locality(), Proximity(), Headroom(), Forecast())
}


def build_filters(policy: PolicySpec) -> list[FilterPlugin]:
    """The enabled filters, always in the canonical order (permanent rules first)."""
    enabled = set(policy.filters)
    return [plugin for name, plugin in _FILTERS.items() if name in enabled]


def build_scores(policy: PolicySpec) -> list[ScorePlugin]:
    enabled = set(policy.scores)
    return [plugin for name, plugin in _SCORES.items() if name in enabled]
