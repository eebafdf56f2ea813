"""Score plugins: each measures one raw value per candidate cluster and normalizes the candidates' raw
values to 0..100 (higher is better); the engine multiplies by the policy's weight and sums.

``score_all``/``normalize_all`` do the same for every candidate at once over the columnar index
(:mod:`federation.columns`), with the same float operations in the same order, so the numbers are the
per-cluster ones bit for bit; ``score_all`` returns None where it cannot promise that (the engine then
scores cluster by cluster).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, ClassVar, NamedTuple

from airflow_provider_fedsched.federation.costs import GIB, compute_per_hour
from airflow_provider_fedsched.federation.framework import ClusterView, CycleState, DataKey, ScorePlugin
from airflow_provider_fedsched.federation.resources import CPU, GPU, MEMORY

if TYPE_CHECKING:
    from airflow_provider_fedsched.federation.columns import Batch, Floats, Positions

__all__ = ["Cost", "Forecast", "Headroom", "Locality", "Proximity"]


def _absolute(raw: Sequence[float]) -> list[float]:
    """For raws already on a 0..100 scale: kept as they are, so small differences stay small."""
    return [min(100.0, max(0.0, value)) for value in raw]


def _absolute_all(raw: Floats) -> Floats:
    """:func:`_absolute` over an array (``max(0.0, v)`` is ``v`` only when ``v > 0.0``)."""
    import numpy as np

    above = np.where(raw > 0.0, raw, 0.0)
    return np.where(above < 100.0, above, 100.0)


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
            if dataset.cluster is None:
                continue  # an asset in a region, on no member: no cluster has it locally
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

    def score_all(self, state: CycleState, batch: Batch, positions: Positions) -> Floats:
        """``compute_per_hour`` term by term in the request's order, then the egress term."""
        import numpy as np

        spec = batch.spec
        per_hour = np.zeros(len(positions), np.float64)
        for name, amount in state.request_items:
            if name == CPU:
                per_hour = per_hour + amount / 1000 * spec.cpu_hour[positions]
            elif name == MEMORY:
                per_hour = per_hour + amount / GIB * spec.memory_gib_hour[positions]
            elif name == GPU:
                per_hour = per_hour + amount * spec.gpu_hour[positions]
            else:
                per_hour = per_hour + amount * spec.extended_price(name)[positions]
        egress: _Egress = state.data[_EGRESS.name]
        left = np.full(spec.count, egress.total - 0.0)
        for cluster, saved in egress.saved.items():
            left[spec.positions[cluster]] = egress.total - saved
        left = left[positions]
        hours = state.request.expected_duration_seconds / 3600.0
        return per_hour * hours + np.where(left > 0.0, left, 0.0)

    def normalize_all(self, raw: Floats) -> Floats:
        import numpy as np

        if not len(raw):
            return raw
        low, high = raw.min(), raw.max()
        if high <= 0:
            return np.full(len(raw), 100.0)
        normalized: Floats = 100.0 * (1.0 - (raw - low) / high)
        return normalized


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
            if dataset.cluster is None:
                continue
            local[dataset.cluster] = local.get(dataset.cluster, 0.0) + dataset.size_gb
        _SHARES.put(state, {cluster: 100.0 * gb / total for cluster, gb in local.items()})

    def score(self, state: CycleState, cluster: ClusterView) -> float:
        shares: dict[str, float] | None = state.data[_SHARES.name]  # per candidate: indexing
        return 100.0 if shares is None else shares.get(cluster.spec.name, 0.0)

    def normalize(self, raw: Sequence[float]) -> list[float]:
        return _absolute(raw)

    def score_all(self, state: CycleState, batch: Batch, positions: Positions) -> Floats:
        import numpy as np

        shares: dict[str, float] | None = state.data[_SHARES.name]
        if shares is None:
            return np.full(len(positions), 100.0)
        everywhere = np.zeros(batch.spec.count, np.float64)
        for cluster, share in shares.items():
            everywhere[batch.spec.positions[cluster]] = share
        return everywhere[positions]

    def normalize_all(self, raw: Floats) -> Floats:
        return _absolute_all(raw)


_REGION_GROUP = DataKey[dict[str, str]]("Proximity")


class Proximity(ScorePlugin):
    """100 in the preferred region, 50 in its proximity group (or the preferred group), else 0."""

    name: ClassVar[str] = "Proximity"

    def prepare(self, state: CycleState) -> None:
        _REGION_GROUP.put(state, state.spec.region_groups)

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

    def score_all(self, state: CycleState, batch: Batch, positions: Positions) -> Floats:
        import numpy as np

        request, spec = state.request, batch.spec
        groups = spec.group_ids[positions]
        near = np.zeros(len(positions), np.bool_)
        near_groups = [request.prefer_group]
        if request.prefer_region is not None:
            near_groups.append(_REGION_GROUP.get(state).get(request.prefer_region))
        for group in near_groups:
            if group is not None and group in spec.groups:
                near |= groups == spec.groups.index(group)
        score = np.where(near, 50.0, 0.0)
        if request.prefer_region is not None and request.prefer_region in spec.regions:
            score[spec.region_ids[positions] == spec.regions.index(request.prefer_region)] = 100.0
        return score

    def normalize_all(self, raw: Floats) -> Floats:
        return _absolute_all(raw)


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

    def score_all(self, state: CycleState, batch: Batch, positions: Positions) -> Floats | None:
        """Where the totals and the request are exact as floats and nothing is in flight, as
        :meth:`score` computes it; elsewhere by :meth:`score`."""
        import numpy as np

        from airflow_provider_fedsched.federation.columns import EXACT_FLOAT

        items = state.request_items or ((CPU, 0), (MEMORY, 0))
        if any(amount >= EXACT_FLOAT for _, amount in items):
            return None
        columns = batch.columns
        zeros = np.zeros(len(positions), np.int64)
        scarcest = np.ones(len(positions), np.float64)
        empty = np.zeros(len(positions), np.bool_)
        for name, amount in items:
            total = columns.total_allocatable[name][positions] if name in columns.total_allocatable else zeros
            free = columns.total_free[name][positions] if name in columns.total_free else zeros
            counted = total > 0
            empty |= ~counted
            ratio = np.divide(free - amount, total, out=np.ones(len(positions)), where=counted)
            scarcest = np.minimum(scarcest, ratio)
        score = np.where(empty, 0.0, 100.0 * np.where(scarcest > 0.0, scarcest, 0.0))
        exact = columns.totals_exact[positions] & columns.has_snapshot[positions] & ~batch.reserved[positions]
        for at in np.flatnonzero(~exact).tolist():
            score[at] = self.score(state, batch.view(int(positions[at])))
        return score

    def normalize_all(self, raw: Floats) -> Floats:
        return _absolute_all(raw)


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

    def score_all(self, state: CycleState, batch: Batch, positions: Positions) -> Floats | None:
        import numpy as np

        if state.forecast is None:
            return np.full(len(positions), self.neutral)
        forecast, names = state.forecast, batch.spec.names
        values = [forecast.get(names[p]) for p in positions.tolist()]
        if not all(type(value) is float or value is None for value in values):
            return None  # ints, numpy scalars...: float() of each, by score()
        predicted = np.array([np.nan if value is None else value for value in values], np.float64)
        above = np.where(predicted > 0.0, predicted, 0.0)
        return np.where(np.isnan(predicted), self.neutral, 100.0 * np.where(above < 1.0, above, 1.0))

    def normalize_all(self, raw: Floats) -> Floats:
        return _absolute_all(raw)
