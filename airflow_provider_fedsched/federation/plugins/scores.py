"""Score plugins: each measures one raw value per candidate cluster and normalizes the candidates' raw
values to 0..100 (higher is better); the engine multiplies by the policy's weight and sums."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar, NamedTuple

from airflow_provider_fedsched.federation.costs import compute_per_hour
from airflow_provider_fedsched.federation.framework import ClusterView, CycleState, DataKey, ScorePlugin
from airflow_provider_fedsched.federation.resources import CPU, MEMORY

__all__ = ["Cost", "Forecast", "Headroom", "Locality", "Proximity"]


def _absolute(raw: Sequence[float]) -> list[float]:
    """For raws already on a 0..100 scale: kept as they are, so small differences stay small."""
    return [min(100.0, max(0.0, value)) for value in raw]


class _Egress(NamedTuple):
    total: float
    """Egress cost if no dataset were local to the candidate."""
    saved: dict[str, float]
    """Cluster -> egress cost avoided because its datasets are local (egress is billed where data leaves)."""


_EGRESS = DataKey[_Egress]("Cost")


class Cost(ScorePlugin):
    """Price x requests x expected duration, plus egress for every dataset not on the cluster
    (:mod:`federation.costs`; the egress part precomputed once per decision).

    Lower is better. The cheapest candidate gets 100; the others lose points in proportion to how much
    more they cost, relative to the most expensive candidate: ``100 * (1 - (c - min) / max)``."""

    name: ClassVar[str] = "Cost"

    def prepare(self, state: CycleState) -> None:
        saved: dict[str, float] = {}
        total = 0.0
        for dataset in state.datasets:
            cost = dataset.size_gb * state.spec.cluster(dataset.cluster).prices.egress_gb
            total += cost
            saved[dataset.cluster] = saved.get(dataset.cluster, 0.0) + cost
        _EGRESS.put(state, _Egress(total, saved))

    def score(self, state: CycleState, cluster: ClusterView) -> float:
        hours = state.request.expected_duration_seconds / 3600.0
        per_hour = compute_per_hour(cluster.spec.prices, state.request_items)
        egress: _Egress = state.data[_EGRESS.name]  # per candidate: indexing, not a call
        return per_hour * hours + max(0.0, egress.total - egress.saved.get(cluster.spec.name, 0.0))

    def normalize(self, raw: Sequence[float]) -> list[float]:
        if not raw:
            return []
        low, high = min(raw), max(raw)
        if high <= 0:
            return [100.0] * len(raw)
        return [100.0 * (1.0 - (value - low) / high) for value in raw]


_SHARES = DataKey[dict[str, float] | None]("Locality")
"""Cluster -> percentage of the bytes the task reads stored there; None when it reads nothing."""


class Locality(ScorePlugin):
    """Percentage of the bytes the task reads that are already on the cluster (100 when it reads none)."""

    name: ClassVar[str] = "Locality"

    def prepare(self, state: CycleState) -> None:
        total = sum(dataset.size_gb for dataset in state.datasets)
        if total <= 0:
            _SHARES.put(state, None)
            return
        local: dict[str, float] = {}
        for dataset in state.datasets:
            local[dataset.cluster] = local.get(dataset.cluster, 0.0) + dataset.size_gb
        _SHARES.put(state, {cluster: 100.0 * gb / total for cluster, gb in local.items()})

    def score(self, state: CycleState, cluster: ClusterView) -> float:
        shares: dict[str, float] | None = state.data[_SHARES.name]  # per candidate: indexing
        return 100.0 if shares is None else shares.get(cluster.spec.name, 0.0)

    def normalize(self, raw: Sequence[float]) -> list[float]:
        return _absolute(raw)


_REGION_GROUP = DataKey[dict[str, str]]("Proximity")


class Proximity(ScorePlugin):
    """100 in the preferred region, 50 in its proximity group (or the preferred group), else 0."""

    name: ClassVar[str] = "Proximity"

    def prepare(self, state: CycleState) -> None:
        region_group: dict[str, str] = {}
        for cluster in state.spec.clusters:
            region_group.setdefault(cluster.region, cluster.proximity_group)
        _REGION_GROUP.put(state, region_group)

    def score(self, state: CycleState, cluster: ClusterView) -> float:
        request = state.request
        if request.prefer_region is not None and cluster.spec.region == request.prefer_region:
            return 100.0
        group = cluster.spec.proximity_group
        if request.prefer_group is not None and group == request.prefer_group:
            return 50.0
        if request.prefer_region is not None and _REGION_GROUP.get(state).get(request.prefer_region) == group:
            return 50.0
        return 0.0

    def normalize(self, raw: Sequence[float]) -> list[float]:
        return _absolute(raw)


class Headroom(ScorePlugin):
    """Percentage of the cluster left free after placement, for the scarcest resource the task requests."""

    name: ClassVar[str] = "Headroom"

    def score(self, state: CycleState, cluster: ClusterView) -> float:
        index = cluster.index
        if index is None:
            return 0.0
        items = state.request_items or ((CPU, 0), (MEMORY, 0))
        scarcest = 1.0
        for name, amount in items:
            total = index.total_allocatable.get(name, 0)
            if total <= 0:
                return 0.0
            left = index.total_free.get(name, 0) - cluster.reservation.get(name, 0) - amount
            scarcest = min(scarcest, left / total)
        return 100.0 * max(0.0, scarcest)

    def normalize(self, raw: Sequence[float]) -> list[float]:
        return _absolute(raw)


class Forecast(ScorePlugin):
    """Predicted idle fraction (0..1, clamped) x 100; a cluster with no forecast is neutral (50). The
    clamp bounds the bias: at most ``weight x 100`` points, whatever the forecaster says."""

    name: ClassVar[str] = "Forecast"
    neutral: ClassVar[float] = 50.0

    def score(self, state: CycleState, cluster: ClusterView) -> float:
        if state.forecast is None:
            return self.neutral
        value = state.forecast.get(cluster.spec.name)
        if value is None or value != value:  # missing or NaN
            return self.neutral
        return 100.0 * min(1.0, max(0.0, float(value)))

    def normalize(self, raw: Sequence[float]) -> list[float]:
        return _absolute(raw)
