"""Idle-capacity forecast per cluster: a seasonal profile by hour of week plus a decaying recent anomaly.

Method (documented in ``docs/plans.md``):

1. **Seasonal profile.** Every utilization sample (``{"at": iso, "used_fraction": {resource: 0..1}}``)
   is folded into one of 168 hour-of-week buckets per resource as a running mean whose weight is capped
   (:data:`BUCKET_MEMORY`), so old weeks fade and a changed workload shows within a few weeks. The
   folded profile is small (168 numbers per resource) and is kept in shared state, because the raw
   history holds only the newest samples.
2. **Recent anomaly.** The residual of each sample against its bucket (actual - seasonal) is smoothed by
   an exponentially weighted mean (:data:`ANOMALY_WEIGHT`); the residual decays towards 0 with the
   time since it was observed (:data:`ANOMALY_DECAY`): a cluster busier than usual right now is predicted
   busier than usual in the next half hour, not next week.
3. **Prediction** of the used fraction at time ``t``: seasonal(t) + anomaly x exp(-(t - last sample) /
   decay), clamped to 0..1, averaged over a window. A bucket never observed falls back to the mean of the
   same hour of day over the other days, then to the overall mean.
4. **Idle fraction** of a cluster over a window: 1 - the predicted used fraction of its scarcest resource
   among those asked for (cpu and memory when nothing is named).

:func:`fit` also reports the model's mean absolute error on the history it was fitted on (one step ahead:
each sample predicted from the profile and the anomaly of the samples before it) next to a persistence
baseline (the previous sample), so the docs can say how good the forecast is.

Pure: no Airflow import and no I/O; callers pass the samples and the stored profile in.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

__all__ = [
    "ANOMALY_DECAY",
    "MIN_SAMPLES",
    "ForecastModel",
    "SeasonalProfile",
    "UtilizationSample",
    "fit",
    "parse_samples",
]

HOURS_PER_WEEK = 168
BUCKET_MEMORY = 8
"""A bucket's running mean weighs a new sample at least 1/8: about the last two months of that hour."""
ANOMALY_WEIGHT = 0.3
"""Weight of the newest residual in the smoothed anomaly."""
ANOMALY_DECAY = timedelta(hours=1)
"""How fast the recent anomaly fades into the seasonal profile as the forecast looks further ahead."""
MIN_SAMPLES = 6
"""Fewer samples than this (folded and new together) give no forecast: the cluster stays neutral."""
WINDOW_STEP = timedelta(minutes=15)
DEFAULT_RESOURCES = ("cpu", "memory")


@dataclass(frozen=True, slots=True)
class UtilizationSample:
    at: datetime
    used: Mapping[str, float]
    """Resource -> requested / allocatable over the schedulable nodes, 0..1."""


def parse_samples(raw: Iterable[Mapping[str, Any]]) -> list[UtilizationSample]:
    """History entries as recorded by the hook, oldest first; malformed entries are skipped."""
    samples: list[UtilizationSample] = []
    for entry in raw:
        try:
            at = datetime.fromisoformat(str(entry["at"]))
            used = {str(k): _clamp(float(v)) for k, v in dict(entry["used_fraction"]).items()}
        except (KeyError, TypeError, ValueError):
            continue
        if at.tzinfo is None:
            at = at.replace(tzinfo=UTC)
        if used and all(math.isfinite(v) for v in used.values()):
            samples.append(UtilizationSample(at.astimezone(UTC), used))
    samples.sort(key=lambda s: s.at)
    return samples


def _clamp(value: float) -> float:
    return min(1.0, max(0.0, value))


def hour_of_week(moment: datetime) -> int:
    moment = moment.astimezone(UTC)
    return moment.weekday() * 24 + moment.hour


@dataclass(slots=True)
class _Buckets:
    mean: list[float] = field(default_factory=lambda: [0.0] * HOURS_PER_WEEK)
    count: list[int] = field(default_factory=lambda: [0] * HOURS_PER_WEEK)


@dataclass(slots=True)
class SeasonalProfile:
    """Per resource, a running mean used fraction for each hour of the week."""

    resources: dict[str, _Buckets] = field(default_factory=dict)
    folded_until: datetime | None = None
    """The newest sample folded in; older samples are never folded twice."""

    @property
    def observations(self) -> int:
        return max((sum(b.count) for b in self.resources.values()), default=0)

    def fold(self, samples: Sequence[UtilizationSample]) -> int:
        """Fold samples newer than :attr:`folded_until` in; returns how many were new."""
        folded = 0
        for sample in samples:
            if self.folded_until is not None and sample.at <= self.folded_until:
                continue
            bucket = hour_of_week(sample.at)
            for resource, used in sample.used.items():
                buckets = self.resources.setdefault(resource, _Buckets())
                count = min(buckets.count[bucket] + 1, BUCKET_MEMORY)
                buckets.mean[bucket] += (used - buckets.mean[bucket]) / count
                buckets.count[bucket] = min(buckets.count[bucket] + 1, 10**9)
            self.folded_until = sample.at
            folded += 1
        return folded

    def expected(self, resource: str, moment: datetime) -> float | None:
        """The seasonal used fraction at ``moment``: its hour of week, else that hour of day, else the
        overall mean; None for a resource never observed."""
        buckets = self.resources.get(resource)
        if buckets is None:
            return None
        bucket = hour_of_week(moment)
        if buckets.count[bucket]:
            return buckets.mean[bucket]
        same_hour = [h for h in range(bucket % 24, HOURS_PER_WEEK, 24) if buckets.count[h]]
        pool = same_hour or [h for h in range(HOURS_PER_WEEK) if buckets.count[h]]
        if not pool:
            return None
        weight = sum(min(buckets.count[h], BUCKET_MEMORY) for h in pool)
        return sum(buckets.mean[h] * min(buckets.count[h], BUCKET_MEMORY) for h in pool) / weight

    def to_dict(self) -> dict[str, Any]:
        return {
            "folded_until": self.folded_until.isoformat() if self.folded_until else None,
            "resources": {
                name: {"mean": [round(m, 6) for m in b.mean], "count": list(b.count)}
                for name, b in sorted(self.resources.items())
            },
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> SeasonalProfile:
        """The stored form back; anything malformed gives an empty profile (the forecast is a bias)."""
        profile = cls()
        if not data:
            return profile
        try:
            for name, raw in dict(data.get("resources") or {}).items():
                mean = [float(v) for v in raw["mean"]]
                count = [int(v) for v in raw["count"]]
                if len(mean) == len(count) == HOURS_PER_WEEK:
                    profile.resources[str(name)] = _Buckets(mean, count)
            until = data.get("folded_until")
            profile.folded_until = datetime.fromisoformat(until).astimezone(UTC) if until else None
        except (KeyError, TypeError, ValueError):
            return cls()
        return profile


@dataclass(slots=True)
class ForecastModel:
    """A fitted forecast for one cluster: the profile, the current anomaly and the fit error."""

    profile: SeasonalProfile
    anomaly: dict[str, float]
    """Resource -> smoothed residual (actual - seasonal) as of :attr:`last_at`."""
    last_at: datetime | None
    mae: float | None
    """Mean absolute error of one-step-ahead predictions of the used fraction on the fitted history."""
    persistence_mae: float | None
    """The same error for the naive forecast "as the previous sample"."""
    samples: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "profile": self.profile.to_dict(),
            "anomaly": dict(self.anomaly),
            "last_at": self.last_at.isoformat() if self.last_at else None,
            "mae": self.mae,
            "persistence_mae": self.persistence_mae,
            "samples": self.samples,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ForecastModel | None:
        """The stored form back; None when malformed (the forecast is a bias: missing means neutral)."""
        try:
            last_at = data.get("last_at")
            return cls(
                profile=SeasonalProfile.from_dict(data.get("profile")),
                anomaly={str(k): float(v) for k, v in dict(data.get("anomaly") or {}).items()},
                last_at=datetime.fromisoformat(last_at).astimezone(UTC) if last_at else None,
                mae=None if data.get("mae") is None else float(data["mae"]),
                persistence_mae=None
                if data.get("persistence_mae") is None
                else float(data["persistence_mae"]),
                samples=int(data.get("samples") or 0),
            )
        except (KeyError, TypeError, ValueError, AttributeError):
            return None

    def used(self, resource: str, moment: datetime) -> float | None:
        seasonal = self.profile.expected(resource, moment)
        if seasonal is None:
            return None
        anomaly = self.anomaly.get(resource, 0.0)
        if self.last_at is not None and anomaly:
            ahead = max(0.0, (moment - self.last_at).total_seconds())
            anomaly *= math.exp(-ahead / ANOMALY_DECAY.total_seconds())
        return _clamp(seasonal + anomaly)

    def idle_fraction(
        self, start: datetime, end: datetime, resources: Iterable[str] | None = None
    ) -> float | None:
        """Predicted idle fraction (1 - used) of the scarcest of ``resources`` over ``[start, end)``,
        averaged at :data:`WINDOW_STEP` points; None when none of them was ever observed."""
        wanted = [r for r in (resources or ()) if r in self.profile.resources]
        if not wanted:
            wanted = [r for r in DEFAULT_RESOURCES if r in self.profile.resources]
        if not wanted:
            wanted = sorted(self.profile.resources)
        points = _window_points(start, end)
        busiest: float | None = None
        for resource in wanted:
            values = [v for v in (self.used(resource, p) for p in points) if v is not None]
            if values:
                mean = sum(values) / len(values)
                busiest = mean if busiest is None else max(busiest, mean)
        return None if busiest is None else 1.0 - busiest


def _window_points(start: datetime, end: datetime) -> list[datetime]:
    points = [start]
    moment = start + WINDOW_STEP
    while moment < end:
        points.append(moment)
        moment += WINDOW_STEP
    return points


def fit(samples: Sequence[UtilizationSample], profile: SeasonalProfile | None = None) -> ForecastModel | None:
    """Fold ``samples`` (oldest first) into ``profile`` (a copy is not made: pass a fresh or stored one)
    and fit the anomaly; None when there is too little history to say anything."""
    profile = profile if profile is not None else SeasonalProfile()
    profile.fold(samples)
    if profile.observations < MIN_SAMPLES:
        return None
    anomaly: dict[str, float] = {}
    errors: list[float] = []
    naive_errors: list[float] = []
    previous: UtilizationSample | None = None
    for sample in samples:
        decay = 1.0
        if previous is not None:
            gap = (sample.at - previous.at).total_seconds()
            decay = math.exp(-max(0.0, gap) / ANOMALY_DECAY.total_seconds())
        for resource, actual in sample.used.items():
            seasonal = profile.expected(resource, sample.at)
            if seasonal is None:
                continue
            carried = anomaly.get(resource, 0.0) * decay
            if previous is not None:
                errors.append(abs(_clamp(seasonal + carried) - actual))
                if resource in previous.used:
                    naive_errors.append(abs(previous.used[resource] - actual))
            anomaly[resource] = ANOMALY_WEIGHT * (actual - seasonal) + (1 - ANOMALY_WEIGHT) * carried
        previous = sample
    return ForecastModel(
        profile=profile,
        anomaly=anomaly,
        last_at=samples[-1].at if samples else profile.folded_until,
        mae=sum(errors) / len(errors) if errors else None,
        persistence_mae=sum(naive_errors) / len(naive_errors) if naive_errors else None,
        samples=len(samples),
    )
