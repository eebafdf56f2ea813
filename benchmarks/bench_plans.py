"""Precomputed plans and the idle forecast: run-time decision latency, and what the forecast buys.

Run: ``.venv/bin/python benchmarks/bench_plans.py [--quick]``

1. **Latency at run time, with a valid plan vs without**, at 100 and 1,000 clusters of 50 nodes (the
   federations of ``bench_engine.py``, imported from it). Both paths read shared state as the operator
   does (``FederationState`` over the in-memory backend, snapshots stored as JSON and validated on read,
   as with Airflow Variables minus the database round trips):
   - *without a plan*: ``forecast_idle`` + ``FederationHook.decide`` (every cluster's snapshot, cooldowns
     and reservations read, every cluster filtered and scored);
   - *with a plan*: ``planned_decision`` (the plan read, only its 3 clusters' snapshots read and put
     through every hard rule by the engine).
   The engine alone (snapshots already in memory) is shown too: ``decide`` vs ``validate_plan``.
2. **A week of tidal utilization.** Four clusters a quarter of a day apart (follow the sun), each busy
   on working days (about 92% of cpu requested from 08:00 to 20:00 local), idle at night (about 25%)
   and at weekends, with noise. The forecast is fitted on two weeks of 15-minute samples, then learns
   online. Every 20 minutes of the following week, a task (4 cpu, 1 h) is planned 30 minutes before it
   runs, from the snapshots of the planning time, once with the forecast for its run window (default
   policy, forecast weight 0.2) and once without. The task *starts without waiting* when its planned
   cluster has a node with 4 cpu free when it runs.
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_engine import generate, percentile, requests

from airflow_provider_fedsched.federation import (
    ClusterSnapshot,
    FederationEngine,
    FederationSpec,
    NodeSnapshot,
    TaskRequest,
    load_spec,
)
from airflow_provider_fedsched.federation.forecast import (
    SeasonalProfile,
    UtilizationSample,
    fit,
)
from airflow_provider_fedsched.federation.plan import plan_from_decision, validate_plan
from airflow_provider_fedsched.hooks.federation import FederationHook
from airflow_provider_fedsched.state import FederationState, MemoryStateBackend

GIB = 2**30


# ----------------------------------------------------------------------------- 1. run-time latency
def timed(call: Callable[[], Any], repeat: int) -> list[float]:
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        call()
        samples.append(time.perf_counter() - start)
    return samples


def latency(clusters: int, repeat: int, seed: int) -> dict[str, float]:
    spec, generated = generate(clusters, seed)
    # Snapshots observed "now" and a long TTL: the hook must never try to refresh a generated cluster.
    policy = spec.policy.model_copy(update={"snapshot_ttl_seconds": 86400})
    spec = FederationSpec.model_validate({**spec.model_dump(), "policy": policy.model_dump()})
    now = datetime.now(UTC)
    snapshots = {n: s.model_copy(update={"observed_at": now}) for n, s in generated.items()}
    state = FederationState(MemoryStateBackend(), federation=spec.name)
    for snapshot in snapshots.values():
        state.snapshots.put([snapshot])
    hook = FederationHook(spec, state=state)
    engine = hook.engine
    request = next(
        r for r in requests(seed + 1, 50) if engine.decide(r, snapshots, now=now).placed and not r.datasets
    )
    decision = engine.decide(request, snapshots, now=now)
    logical = now + timedelta(minutes=30)
    plan = plan_from_decision(
        decision,
        dag_id="bench",
        task_id="task",
        logical_date=logical,
        run_after=logical,
        valid_until=now + timedelta(days=1),
        request=request,
        policy=None,
        forecast=None,
    )
    assert plan is not None
    hook.put_plan(plan)

    def with_plan() -> None:
        found, why = hook.planned_decision(
            request, dag_id="bench", task_id="task", logical_date=logical, exclude={}, policy=None
        )
        assert found is not None, why

    def without_plan() -> None:
        at = datetime.now(UTC)
        forecast = hook.forecast_idle(at, at + timedelta(seconds=request.expected_duration_seconds))
        assert hook.decide(request, forecast=forecast).placed

    with_plan()
    without_plan()  # warm: every snapshot index built once
    planned = timed(with_plan, repeat)
    fresh = timed(without_plan, max(3, repeat // 4))
    engine_full = timed(lambda: engine.decide(request, snapshots, now=now), repeat)
    engine_plan = timed(lambda: validate_plan(plan, engine, request, snapshots, now=now), repeat)
    return {
        "clusters": clusters,
        "plan_p50": statistics.median(planned) * 1000,
        "plan_p99": percentile(planned, 0.99) * 1000,
        "fresh_p50": statistics.median(fresh) * 1000,
        "fresh_p99": percentile(fresh, 0.99) * 1000,
        "engine_full_p50": statistics.median(engine_full) * 1000,
        "engine_plan_p50": statistics.median(engine_plan) * 1000,
    }


# ----------------------------------------------------------------------------- 2. tidal week
TIDAL_CLUSTERS = {"sun-0": 0, "sun-6": 6, "sun-12": 12, "sun-18": 18}
"""Cluster -> hours its local time is ahead of UTC."""
NODES = 10
NODE_CPU = 16_000
TASK = TaskRequest(resources={"cpu": 4000, "memory": 4 * GIB}, expected_duration_seconds=3600)
START = datetime(2025, 6, 2, 0, 0, tzinfo=UTC)  # a Monday
SAMPLE_EVERY = timedelta(minutes=15)
LEAD = timedelta(minutes=30)


def tidal_level(offset_hours: int, moment: datetime) -> float:
    """Expected fraction of cpu requested: busy working days, idle nights, quiet weekends."""
    local = moment + timedelta(hours=offset_hours)
    hour = local.hour + local.minute / 60
    if local.weekday() >= 5:
        return 0.15
    # Batch work lands at the start of the working day: the step is what a snapshot cannot see coming.
    return 0.92 if 8.0 <= hour < 20.0 else 0.25


def tidal_spec() -> FederationSpec:
    clusters = [
        {"name": name, "conn_id": f"k8s_{name}", "region": f"tz{offset}", "prices": {"cpu_hour": 0.04}}
        for name, offset in TIDAL_CLUSTERS.items()
    ]
    return load_spec({"clusters": clusters})


class TidalWorld:
    """Per cluster and 15-minute step: the utilization actually observed (level plus noise)."""

    def __init__(self, seed: int, weeks: int) -> None:
        rng = random.Random(seed)
        self.steps = int(timedelta(weeks=weeks) / SAMPLE_EVERY)
        self.used: dict[str, list[list[float]]] = {}
        for name, offset in TIDAL_CLUSTERS.items():
            per_step = []
            for step in range(self.steps):
                level = tidal_level(offset, START + step * SAMPLE_EVERY)
                per_step.append([min(0.99, max(0.0, level + rng.gauss(0, 0.05))) for _ in range(NODES)])
            self.used[name] = per_step

    def step_of(self, moment: datetime) -> int:
        return int((moment - START) / SAMPLE_EVERY)

    def sample(self, name: str, step: int) -> UtilizationSample:
        nodes = self.used[name][step]
        return UtilizationSample(START + step * SAMPLE_EVERY, {"cpu": sum(nodes) / len(nodes)})

    def snapshot(self, name: str, step: int) -> ClusterSnapshot:
        return ClusterSnapshot(
            cluster=name,
            observed_at=START + step * SAMPLE_EVERY,
            nodes=[
                NodeSnapshot(
                    name=f"{name}-{i}",
                    allocatable={"cpu": NODE_CPU, "memory": 64 * GIB},
                    requested={"cpu": int(NODE_CPU * used), "memory": int(64 * GIB * used * 0.5)},
                )
                for i, used in enumerate(self.used[name][step])
            ],
        )

    def fits(self, name: str, step: int) -> bool:
        return any(NODE_CPU * (1 - used) >= TASK.resources["cpu"] for used in self.used[name][step])


def tidal_week(seed: int, every: timedelta) -> dict[str, Any]:
    history_weeks = 2
    world = TidalWorld(seed, history_weeks + 1)
    spec = tidal_spec()
    engine = FederationEngine(spec)
    history_steps = int(timedelta(weeks=history_weeks) / SAMPLE_EVERY)
    profiles = {name: SeasonalProfile() for name in TIDAL_CLUSTERS}
    fit_errors = {}
    for name in TIDAL_CLUSTERS:
        model = fit([world.sample(name, s) for s in range(history_steps)], profiles[name])
        assert model is not None
        fit_errors[name] = (model.mae, model.persistence_mae)
    started = {"biased": 0, "unbiased": 0}
    same = 0
    tasks = 0
    run_at = START + timedelta(weeks=history_weeks, minutes=10) + LEAD  # runs at :00, :20, :40
    end = START + timedelta(weeks=history_weeks + 1)
    while run_at < end:
        planned_at = run_at - LEAD
        step = world.step_of(planned_at)
        snapshots = {name: world.snapshot(name, step) for name in TIDAL_CLUSTERS}
        forecast = {}
        for name in TIDAL_CLUSTERS:
            recent = [world.sample(name, s) for s in range(max(0, step - 199), step + 1)]
            model = fit(recent, profiles[name])  # folds only samples it has not seen: online learning
            idle = model.idle_fraction(run_at, run_at + timedelta(hours=1), ["cpu"]) if model else None
            if idle is not None:
                forecast[name] = idle
        at = START + step * SAMPLE_EVERY
        biased = engine.decide(TASK, snapshots, now=at, forecast=forecast)
        unbiased = engine.decide(TASK, snapshots, now=at)
        run_step = world.step_of(run_at)
        tasks += 1
        same += biased.cluster == unbiased.cluster
        for label, decision in (("biased", biased), ("unbiased", unbiased)):
            if decision.cluster is not None and world.fits(decision.cluster, run_step):
                started[label] += 1
        run_at += every
    maes = [e[0] for e in fit_errors.values() if e[0] is not None]
    naive = [e[1] for e in fit_errors.values() if e[1] is not None]
    return {
        "tasks": tasks,
        "biased": started["biased"],
        "unbiased": started["unbiased"],
        "same": same,
        "mae": statistics.mean(maes),
        "persistence_mae": statistics.mean(naive),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="fewer repetitions (a smoke run)")
    parser.add_argument("--seed", type=int, default=20250601)
    args = parser.parse_args()
    started = time.perf_counter()
    sizes = [(100, 10 if args.quick else 40), (1000, 4 if args.quick else 12)]
    rows = [latency(clusters, repeat, args.seed) for clusters, repeat in sizes]
    week = tidal_week(args.seed, timedelta(minutes=20))
    command = "python benchmarks/bench_plans.py" + (" --quick" if args.quick else "")
    print(f"Command: `{command}` (seed {args.seed}, Python {sys.version.split()[0]})\n")
    print("Decision latency at run time (50 nodes per cluster; shared state in memory):\n")
    print(
        "| clusters | with a valid plan p50 / p99 | without a plan p50 / p99 | speed-up (p50) "
        "| engine only: decide p50 | engine only: validate plan p50 |"
    )
    print("|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        print(
            f"| {row['clusters']:,.0f} | {row['plan_p50']:.2f} / {row['plan_p99']:.2f} ms "
            f"| {row['fresh_p50']:.1f} / {row['fresh_p99']:.1f} ms "
            f"| {row['fresh_p50'] / row['plan_p50']:.0f}x "
            f"| {row['engine_full_p50']:.2f} ms | {row['engine_plan_p50']:.2f} ms |"
        )
    print(
        f"\nA tidal week (4 clusters a quarter-day apart; a 4-cpu, 1 h task planned {LEAD.seconds // 60} min "
        f"ahead, {week['tasks']} tasks):\n"
    )
    print("| placement | tasks that started without waiting | share |")
    print("|---|---:|---:|")
    for label, key in (("forecast-biased (weight 0.2)", "biased"), ("unbiased", "unbiased")):
        print(f"| {label} | {week[key]} / {week['tasks']} | {week[key] / week['tasks']:.0%} |")
    print(
        f"\nThe two placements differ for {week['tasks'] - week['same']} task(s). Forecast error on the two "
        f"weeks it was fitted on (cpu used fraction, one step ahead): MAE {week['mae']:.3f} "
        f"(persistence baseline {week['persistence_mae']:.3f}). "
        f"Total run time {time.perf_counter() - started:.0f} s."
    )
    return 0 if math.isfinite(week["mae"]) else 1


if __name__ == "__main__":
    sys.exit(main())
