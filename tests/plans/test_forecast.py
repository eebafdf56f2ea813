"""The forecast: a seasonal profile by hour of week plus a decaying recent anomaly."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

from airflow_provider_fedsched.federation.forecast import (
    MIN_SAMPLES,
    SeasonalProfile,
    UtilizationSample,
    fit,
    parse_samples,
)

MONDAY = datetime(2025, 6, 2, 0, 0, tzinfo=UTC)


def tidal(moment: datetime) -> float:
    """Busy working days (85% 08:00-20:00), quiet nights (20%), quieter weekends (10%)."""
    if moment.weekday() >= 5:
        return 0.10
    return 0.85 if 8 <= moment.hour < 20 else 0.20


def week_of_samples(step: timedelta = timedelta(minutes=30), weeks: int = 2) -> list[UtilizationSample]:
    samples = []
    moment = MONDAY
    while moment < MONDAY + timedelta(weeks=weeks):
        samples.append(UtilizationSample(moment, {"cpu": tidal(moment), "memory": tidal(moment) * 0.8}))
        moment += step
    return samples


def test_too_little_history_gives_no_forecast() -> None:
    samples = week_of_samples()[: MIN_SAMPLES - 1]
    assert fit(samples) is None


def test_seasonal_profile_predicts_idle_nights_and_busy_days() -> None:
    model = fit(week_of_samples())
    assert model is not None
    # Next Monday: the night is idle, the day busy; cpu is the scarcest resource.
    night = MONDAY + timedelta(weeks=2, hours=2)
    day = MONDAY + timedelta(weeks=2, hours=10)
    night_idle = model.idle_fraction(night, night + timedelta(minutes=30))
    day_idle = model.idle_fraction(day, day + timedelta(minutes=30))
    assert night_idle is not None and day_idle is not None
    assert math.isclose(night_idle, 0.80, abs_tol=0.05)
    assert math.isclose(day_idle, 0.15, abs_tol=0.05)
    # Asking for memory only: memory runs at 80% of cpu's level.
    memory_day = model.idle_fraction(day, day + timedelta(minutes=30), ["memory"])
    assert memory_day is not None and math.isclose(memory_day, 1 - 0.85 * 0.8, abs_tol=0.05)


def test_fit_error_is_reported_and_beats_persistence_on_seasonal_data() -> None:
    model = fit(week_of_samples())
    assert model is not None and model.mae is not None and model.persistence_mae is not None
    assert model.mae < 0.05
    assert model.mae <= model.persistence_mae


def test_recent_anomaly_biases_the_near_future_and_fades() -> None:
    samples = week_of_samples()
    # The last two hours run 30 points busier than usual.
    end = samples[-1].at
    bumped = [
        UtilizationSample(s.at, {r: min(1.0, v + 0.3) for r, v in s.used.items()})
        if s.at > end - timedelta(hours=2)
        else s
        for s in samples
    ]
    usual = fit(samples)
    busy = fit(bumped)
    assert usual is not None and busy is not None
    soon = end + timedelta(minutes=15)
    later = end + timedelta(hours=12)
    assert busy.used("cpu", soon) > usual.used("cpu", soon) + 0.1  # type: ignore[operator]
    assert abs(busy.used("cpu", later) - usual.used("cpu", later)) < 0.01  # type: ignore[operator]


def test_profile_round_trips_and_folds_each_sample_once() -> None:
    samples = week_of_samples(weeks=1)
    profile = SeasonalProfile()
    assert profile.fold(samples) == len(samples)
    again = SeasonalProfile.from_dict(profile.to_dict())
    assert again.fold(samples) == 0  # already folded
    assert again.observations == profile.observations
    assert again.expected("cpu", MONDAY + timedelta(hours=10)) == profile.expected(
        "cpu", MONDAY + timedelta(hours=10)
    )


def test_an_unseen_hour_falls_back_to_the_same_hour_of_other_days() -> None:
    profile = SeasonalProfile()
    profile.fold([s for s in week_of_samples(weeks=1) if s.at.weekday() == 0])  # Mondays only
    tuesday_ten = MONDAY + timedelta(days=8, hours=10)
    assert profile.expected("cpu", tuesday_ten) == profile.expected("cpu", MONDAY + timedelta(hours=10))


def test_malformed_history_entries_are_skipped_and_profiles_reset() -> None:
    raw = [
        {"at": "2025-06-02T00:00:00+00:00", "used_fraction": {"cpu": 0.5}},
        {"at": "not a time", "used_fraction": {"cpu": 0.5}},
        {"used_fraction": {"cpu": 0.5}},
        {"at": "2025-06-02T00:10:00", "used_fraction": {"cpu": "x"}},
        {"at": "2025-06-02T00:20:00", "used_fraction": {"cpu": 7}},
    ]
    samples = parse_samples(raw)
    assert [s.used["cpu"] for s in samples] == [0.5, 1.0]
    assert SeasonalProfile.from_dict({"resources": {"cpu": {"mean": [1], "count": "x"}}}).observations == 0
