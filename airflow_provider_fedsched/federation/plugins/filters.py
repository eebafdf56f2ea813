"""Filters on a cluster as a whole: the task's cluster list, data sovereignty, cluster taints and labels,
failover exclusions, reachability, snapshot freshness, cooldowns and namespace quota.

Node-level fit (could any node ever hold the pod, does one have room now) is in :mod:`.nodefit`.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, ClassVar

from airflow_provider_fedsched.federation.framework import (
    SUCCESS,
    ClusterView,
    CycleState,
    FilterPlugin,
    Status,
    unresolvable,
    unschedulable,
)
from airflow_provider_fedsched.federation.request import Toleration, tolerates_all
from airflow_provider_fedsched.federation.resources import ResourceList, format_quantity

if TYPE_CHECKING:
    from airflow_provider_fedsched.federation.columns import Batch, Ints
    from airflow_provider_fedsched.federation.snapshot import ClusterSnapshot
    from airflow_provider_fedsched.federation.spec import DatasetSpec, Taint

__all__ = [
    "ClusterLabels",
    "ClusterSubset",
    "ClusterTaints",
    "Cooldown",
    "Excluded",
    "Freshness",
    "Quota",
    "Reachable",
    "Sovereignty",
]


# ``filter_all``: the same verdicts as ``filter`` for every cluster still in the running, over the columnar
# index (:mod:`federation.columns`). Each finds the clusters it may reject with array operations, then
# takes each one's verdict from the per-cluster rule, so that reasons are written in one place.


def _by_id(
    state: CycleState, batch: Batch, ids: Ints, verdicts: Sequence[Status]
) -> list[tuple[int, Status]]:
    """Rejections where each cluster's verdict is that of its id (a region, a set of taints)."""
    import numpy as np

    failing = [number for number, verdict in enumerate(verdicts) if verdict is not SUCCESS]
    if not failing:
        return []
    return [(p, verdicts[int(ids[p])]) for p in batch.alive_positions(np.isin(ids, failing))]


class ClusterSubset(FilterPlugin):
    name: ClassVar[str] = "ClusterSubset"

    def filter(self, state: CycleState, cluster: ClusterView) -> Status:
        allowed = state.request.clusters
        if allowed is None or cluster.spec.name in allowed:
            return SUCCESS
        return unresolvable("not in the task's cluster list")

    def filter_all(self, state: CycleState, batch: Batch) -> list[tuple[int, Status]]:
        allowed = state.request.clusters
        if allowed is None:
            return []
        outside = unresolvable("not in the task's cluster list")
        return [(position, outside) for position in batch.alive_positions(~batch.spec.among(allowed))]


def _sovereignty(datasets: list[DatasetSpec], region: str) -> Status:
    for dataset in datasets:
        if dataset.allowed_regions is not None and region not in dataset.allowed_regions:
            allowed = ", ".join(dataset.allowed_regions) or "none"
            return unresolvable(
                f"region '{region}' is not allowed by dataset {dataset.label} (allowed: {allowed})"
            )
    return SUCCESS


class Sovereignty(FilterPlugin):
    name: ClassVar[str] = "Sovereignty"

    def filter(self, state: CycleState, cluster: ClusterView) -> Status:
        return _sovereignty(state.datasets, cluster.spec.region)

    def filter_all(self, state: CycleState, batch: Batch) -> list[tuple[int, Status]]:
        if all(dataset.allowed_regions is None for dataset in state.datasets):
            return []
        verdicts = [_sovereignty(state.datasets, region) for region in batch.spec.regions]
        return _by_id(state, batch, batch.spec.region_ids, verdicts)

    def explain_all(self, state: CycleState) -> str | None:
        """When sovereignty rejects every cluster: where the data may go, and why nothing runs there."""
        restricted = [d for d in state.datasets if d.allowed_regions is not None]
        if not restricted:
            return None
        allowed = set.intersection(*(set(d.allowed_regions or ()) for d in restricted))
        names = ", ".join(d.label for d in restricted)
        if allowed:
            return (
                f"datasets {names} may only be processed in {', '.join(sorted(allowed))}, "
                "where no eligible cluster runs"
            )
        return f"the allowed regions of datasets {names} have no region in common"


def _cluster_taints(tolerations: list[Toleration], taints: tuple[Taint, ...]) -> Status:
    for taint in taints:
        if taint.effect != "PreferNoSchedule" and not tolerates_all(tolerations, (taint,)):
            return unresolvable(f"cluster taint {taint} is not tolerated")
    return SUCCESS


class ClusterTaints(FilterPlugin):
    name: ClassVar[str] = "ClusterTaints"

    def filter(self, state: CycleState, cluster: ClusterView) -> Status:
        return _cluster_taints(state.request.tolerations, tuple(cluster.spec.taints))

    def filter_all(self, state: CycleState, batch: Batch) -> list[tuple[int, Status]]:
        if batch.spec.taint_sets == [()]:
            return []  # no cluster has a taint
        verdicts = [_cluster_taints(state.request.tolerations, taints) for taints in batch.spec.taint_sets]
        return _by_id(state, batch, batch.spec.taint_ids, verdicts)


class ClusterLabels(FilterPlugin):
    name: ClassVar[str] = "ClusterLabels"

    def filter(self, state: CycleState, cluster: ClusterView) -> Status:
        labels = cluster.spec.labels
        for key, value in state.request.cluster_selector.items():
            if labels.get(key) != value:
                have = f"'{labels[key]}'" if key in labels else "absent"
                return unresolvable(f"cluster label {key}={value} required ({key} is {have})")
        return SUCCESS

    def filter_all(self, state: CycleState, batch: Batch) -> list[tuple[int, Status]]:
        import numpy as np

        if not state.request.cluster_selector:
            return []
        mismatched = np.zeros(batch.spec.count, np.bool_)
        for key, value in state.request.cluster_selector.items():
            values, ids = batch.spec.label(key)
            mismatched |= ids != values.get(value, -2)
        return [(p, self.filter(state, batch.view(p))) for p in batch.alive_positions(mismatched)]


class Excluded(FilterPlugin):
    name: ClassVar[str] = "Excluded"

    def filter(self, state: CycleState, cluster: ClusterView) -> Status:
        reason = state.exclude.get(cluster.spec.name)
        return SUCCESS if reason is None else unschedulable(f"excluded: {reason}")

    def filter_all(self, state: CycleState, batch: Batch) -> list[tuple[int, Status]]:
        if not state.exclude:
            return []
        named = batch.spec.among(state.exclude)
        return [(p, self.filter(state, batch.view(p))) for p in batch.alive_positions(named)]


class Reachable(FilterPlugin):
    name: ClassVar[str] = "Reachable"

    def filter(self, state: CycleState, cluster: ClusterView) -> Status:
        if cluster.snapshot is None:
            return unschedulable("no snapshot of this cluster")
        if not cluster.snapshot.reachable:
            return unschedulable(f"unreachable: {cluster.snapshot.reason or 'no reason given'}")
        return SUCCESS

    def filter_all(self, state: CycleState, batch: Batch) -> list[tuple[int, Status]]:
        if batch.columns.all_reachable:
            return []
        unreachable = ~batch.columns.reachable
        return [(p, self.filter(state, batch.view(p))) for p in batch.alive_positions(unreachable)]


def _freshness(snapshot: ClusterSnapshot | None, age: float, ttl: float) -> Status:
    """The verdict on a snapshot ``age`` seconds old (``(now - observed_at).total_seconds()``)."""
    if snapshot is None:
        return unschedulable("no snapshot of this cluster")
    if age < -ttl:
        # Observed "in the future" by more than a TTL: the clocks disagree, and trusting it would keep
        # the snapshot fresh for as long as the skew (forever, for an observed_at in 2099).
        return unschedulable(
            f"snapshot observed_at {snapshot.observed_at.isoformat(timespec='seconds')} is "
            f"{-age:.0f}s in the future (more than the ttl {ttl:g}s): clocks disagree"
        )
    return unschedulable(f"snapshot is {age:.1f}s old (ttl {ttl:g}s)") if age > ttl else SUCCESS


class Freshness(FilterPlugin):
    name: ClassVar[str] = "Freshness"

    def filter(self, state: CycleState, cluster: ClusterView) -> Status:
        snapshot = cluster.snapshot
        age = snapshot.age_seconds(state.now) if snapshot is not None else 0.0
        return _freshness(snapshot, age, state.policy.snapshot_ttl_seconds)

    def filter_all(self, state: CycleState, batch: Batch) -> list[tuple[int, Status]]:
        ttl = state.policy.snapshot_ttl_seconds
        ages, snapshots = batch.ages, batch.columns.snapshots
        odd = ~batch.columns.has_snapshot | (ages > ttl) | (ages < -ttl)
        positions = batch.alive_positions(odd)
        return [
            (p, _freshness(snapshots[p], age, ttl))
            for p, age in zip(positions, ages[positions].tolist(), strict=True)
        ]


def _cooldown(until: datetime | None, now: datetime) -> Status:
    if until is None or until <= now:
        return SUCCESS
    left = (until - now).total_seconds()
    return unschedulable(f"cooling down until {until.isoformat(timespec='seconds')} ({left:.0f}s left)")


class Cooldown(FilterPlugin):
    name: ClassVar[str] = "Cooldown"

    def filter(self, state: CycleState, cluster: ClusterView) -> Status:
        return _cooldown(state.cooldowns.get(cluster.spec.name), state.now)

    def filter_all(self, state: CycleState, batch: Batch) -> list[tuple[int, Status]]:
        if not state.cooldowns:
            return []
        verdicts = [
            (p, _cooldown(state.cooldowns.get(batch.spec.names[p]), state.now))
            for p in batch.alive_positions(batch.spec.among(state.cooldowns))
        ]
        return [(p, verdict) for p, verdict in verdicts if verdict is not SUCCESS]


def _quota(
    state: CycleState, snapshot: ClusterSnapshot | None, namespace: str, reservation: ResourceList
) -> Status:
    if snapshot is None:
        return SUCCESS
    headroom = snapshot.quota_headroom.get(namespace)
    if headroom is None:
        return SUCCESS
    short = []
    for name, amount in state.request_items:
        # Only resources the quota names are limited by it.
        if name in headroom:
            available = headroom[name] - reservation.get(name, 0)
            if amount > available:
                short.append(
                    f"{name} requested {format_quantity(name, amount)}, "
                    f"headroom {format_quantity(name, max(0, available))}"
                )
    if not short:
        return SUCCESS
    return unschedulable(f"namespace '{namespace}' quota: " + "; ".join(short))


class Quota(FilterPlugin):
    name: ClassVar[str] = "Quota"

    def filter(self, state: CycleState, cluster: ClusterView) -> Status:
        return _quota(state, cluster.snapshot, cluster.namespace, cluster.reservation)

    def filter_all(self, state: CycleState, batch: Batch) -> list[tuple[int, Status]]:
        out = []
        specs, snapshots = batch.spec.specs, batch.columns.snapshots
        for p in batch.columns.with_quota:
            if batch.alive[p]:
                reservation = batch.reservations[p][0] if p in batch.reservations else {}
                verdict = _quota(state, snapshots[p], specs[p].namespace or batch.namespace, reservation)
                if verdict is not SUCCESS:
                    out.append((p, verdict))
        return out
