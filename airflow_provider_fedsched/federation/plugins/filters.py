"""Filters on a cluster as a whole: the task's cluster list, data sovereignty, cluster taints and labels,
failover exclusions, reachability, snapshot freshness, cooldowns and namespace quota.

Node-level fit (could any node ever hold the pod, does one have room now) is in :mod:`.nodefit`.
"""

from __future__ import annotations

from typing import ClassVar

from airflow_provider_fedsched.federation.framework import (
    SUCCESS,
    ClusterView,
    CycleState,
    FilterPlugin,
    Status,
    unresolvable,
    unschedulable,
)
from airflow_provider_fedsched.federation.request import tolerates_all
from airflow_provider_fedsched.federation.resources import format_quantity

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


class ClusterSubset(FilterPlugin):
    name: ClassVar[str] = "ClusterSubset"

    def filter(self, state: CycleState, cluster: ClusterView) -> Status:
        allowed = state.request.clusters
        if allowed is None or cluster.spec.name in allowed:
            return SUCCESS
        return unresolvable("not in the task's cluster list")


class Sovereignty(FilterPlugin):
    name: ClassVar[str] = "Sovereignty"

    def filter(self, state: CycleState, cluster: ClusterView) -> Status:
        region = cluster.spec.region
        for dataset in state.datasets:
            if dataset.allowed_regions is not None and region not in dataset.allowed_regions:
                allowed = ", ".join(dataset.allowed_regions) or "none"
                return unresolvable(
                    f"region '{region}' is not allowed by dataset '{dataset.name}' (allowed: {allowed})"
                )
        return SUCCESS

    def explain_all(self, state: CycleState) -> str | None:
        """When sovereignty rejects every cluster: where the data may go, and why nothing runs there."""
        restricted = [d for d in state.datasets if d.allowed_regions is not None]
        if not restricted:
            return None
        allowed = set.intersection(*(set(d.allowed_regions or ()) for d in restricted))
        names = ", ".join(d.name for d in restricted)
        if allowed:
            return (
                f"datasets {names} may only be processed in {', '.join(sorted(allowed))}, "
                "where no eligible cluster runs"
            )
        return f"the allowed regions of datasets {names} have no region in common"


class ClusterTaints(FilterPlugin):
    name: ClassVar[str] = "ClusterTaints"

    def filter(self, state: CycleState, cluster: ClusterView) -> Status:
        for taint in cluster.spec.taints:
            if taint.effect != "PreferNoSchedule" and not tolerates_all(state.request.tolerations, (taint,)):
                return unresolvable(f"cluster taint {taint} is not tolerated")
        return SUCCESS


class ClusterLabels(FilterPlugin):
    name: ClassVar[str] = "ClusterLabels"

    def filter(self, state: CycleState, cluster: ClusterView) -> Status:
        labels = cluster.spec.labels
        for key, value in state.request.cluster_selector.items():
            if labels.get(key) != value:
                have = f"'{labels[key]}'" if key in labels else "absent"
                return unresolvable(f"cluster label {key}={value} required ({key} is {have})")
        return SUCCESS


class Excluded(FilterPlugin):
    name: ClassVar[str] = "Excluded"

    def filter(self, state: CycleState, cluster: ClusterView) -> Status:
        reason = state.exclude.get(cluster.spec.name)
        return SUCCESS if reason is None else unschedulable(f"excluded: {reason}")


class Reachable(FilterPlugin):
    name: ClassVar[str] = "Reachable"

    def filter(self, state: CycleState, cluster: ClusterView) -> Status:
        if cluster.snapshot is None:
            return unschedulable("no snapshot of this cluster")
        if not cluster.snapshot.reachable:
            return unschedulable(f"unreachable: {cluster.snapshot.reason or 'no reason given'}")
        return SUCCESS


class Freshness(FilterPlugin):
    name: ClassVar[str] = "Freshness"

    def filter(self, state: CycleState, cluster: ClusterView) -> Status:
        if cluster.snapshot is None:
            return unschedulable("no snapshot of this cluster")
        age = cluster.snapshot.age_seconds(state.now)
        ttl = state.policy.snapshot_ttl_seconds
        if age < -ttl:
            # Observed "in the future" by more than a TTL: the clocks disagree, and trusting it would keep
            # the snapshot fresh for as long as the skew (forever, for an observed_at in 2099).
            return unschedulable(
                f"snapshot observed_at {cluster.snapshot.observed_at.isoformat(timespec='seconds')} is "
                f"{-age:.0f}s in the future (more than the ttl {ttl:g}s): clocks disagree"
            )
        return unschedulable(f"snapshot is {age:.1f}s old (ttl {ttl:g}s)") if age > ttl else SUCCESS


class Cooldown(FilterPlugin):
    name: ClassVar[str] = "Cooldown"

    def filter(self, state: CycleState, cluster: ClusterView) -> Status:
        until = state.cooldowns.get(cluster.spec.name)
        if until is None or until <= state.now:
            return SUCCESS
        left = (until - state.now).total_seconds()
        return unschedulable(f"cooling down until {until.isoformat(timespec='seconds')} ({left:.0f}s left)")


class Quota(FilterPlugin):
    name: ClassVar[str] = "Quota"

    def filter(self, state: CycleState, cluster: ClusterView) -> Status:
        if cluster.snapshot is None:
            return SUCCESS
        headroom = cluster.snapshot.quota_headroom.get(cluster.namespace)
        if headroom is None:
            return SUCCESS
        short = []
        for name, amount in state.request_items:
            # Only resources the quota names are limited by it.
            if name in headroom:
                available = headroom[name] - cluster.reservation.get(name, 0)
                if amount > available:
                    short.append(
                        f"{name} requested {format_quantity(name, amount)}, "
                        f"headroom {format_quantity(name, max(0, available))}"
                    )
        if not short:
            return SUCCESS
        return unschedulable(f"namespace '{cluster.namespace}' quota: " + "; ".join(short))
