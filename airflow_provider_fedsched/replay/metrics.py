"""What a replay measures, per policy, and the physical lower bound on the makespan.

- makespan: from time 0 (the first arrival) to the last completion of batch work (online services are
  excluded: they serve for as long as they are wanted, not until a job is done);
- utilization (cpu, gpu): resources in use integrated over the makespan, over capacity x makespan. In use
  means the requests of regular and borrowing pods and, for online services, their current usage (the
  tide), so an online service's idle requests do not count as used;
- waits: from arrival to the first start of each placed task (mean and 95th percentile);
- cost: compute price x requests x run time of every attempt (an evicted attempt was paid for too) plus
  egress for each attempt reading a dataset from another cluster;
- sovereignty violations: tasks with an attempt in a region one of their datasets forbids;
- unplaced: tasks never started (impossible, or still waiting when nothing else could happen);
- failovers: attempts that left a cluster (unschedulable after the grace period, or evicted).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from airflow_provider_fedsched.replay.topology import Federation
from airflow_provider_fedsched.replay.workload import Task

if TYPE_CHECKING:
    from airflow_provider_fedsched.replay.cluster import ClusterState, Running
    from airflow_provider_fedsched.replay.policies import Pricing

__all__ = ["Ledger", "PolicyResult", "lower_bound"]

TIMELINE_POINTS = 400


@dataclass(slots=True)
class PolicyResult:
    policy: str
    makespan_s: float
    utilization: dict[str, float]
    mean_wait_s: float
    p95_wait_s: float
    cost: float
    egress_gb: float
    sovereignty_violations: int
    unplaced: int
    failovers: int
    decisions: int
    timeline: list[tuple[float, float, float]] = field(repr=False)
    """(time, cpu used share, gpu used share), evenly resampled."""
    waits: list[float] = field(repr=False)
    replay_seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "makespan_s": round(self.makespan_s, 1),
            "utilization": {name: round(value, 4) for name, value in self.utilization.items()},
            "mean_wait_s": round(self.mean_wait_s, 1),
            "p95_wait_s": round(self.p95_wait_s, 1),
            "cost": round(self.cost, 2),
            "egress_gb": round(self.egress_gb, 1),
            "sovereignty_violations": self.sovereignty_violations,
            "unplaced": self.unplaced,
            "failovers": self.failovers,
        }


def _percentile(values: list[float], share: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(0, math.ceil(share * len(ordered)) - 1)
    return ordered[rank]


class Ledger:
    """Accumulates one policy's replay as it runs."""

    def __init__(
        self,
        federation: Federation,
        policy: str,
        clusters: Mapping[str, ClusterState],
        pricing: Pricing,
    ) -> None:
        self.policy = policy
        self.pricing = pricing
        self.capacity_cpu = sum(c.capacity[0] for c in clusters.values())
        self.capacity_gpu = sum(c.capacity[2] for c in clusters.values())
        self.usage = {name: 1.0 for name in clusters}
        self.online_cpu = dict.fromkeys(clusters, 0)
        self.online_gpu = dict.fromkeys(clusters, 0)
        self.used_cpu = 0
        self.used_gpu = 0
        self.last = 0.0
        self.points: list[tuple[float, float, float]] = []
        self.arrival: dict[str, float] = {}
        self.first_start: dict[str, float] = {}
        self.done: set[str] = set()
        self.unplaced: set[str] = set()
        self.violations: set[str] = set()
        self.cost = 0.0
        self.egress_gb = 0.0
        self.failovers = 0
        self.decisions = 0
        self.decisions_skipped = 0
        self.makespan = 0.0
        self.only_online = all(task.online for task in federation.tasks)

    def _in_use(self) -> tuple[float, float]:
        cpu, gpu = float(self.used_cpu), float(self.used_gpu)
        for name, usage in self.usage.items():
            cpu += self.online_cpu[name] * usage
            gpu += self.online_gpu[name] * usage
        return cpu, gpu

    def advance(self, now: float) -> None:
        self.last = now

    def _sample(self) -> None:
        cpu, gpu = self._in_use()
        self.points.append(
            (self.last, cpu / self.capacity_cpu, gpu / self.capacity_gpu if self.capacity_gpu else 0.0)
        )

    def tide(self, usage: Mapping[str, float]) -> None:
        self.usage.update(usage)
        self._sample()

    def arrived(self, task: Task) -> None:
        self.arrival[task.name] = task.arrival

    def impossible(self, task: Task) -> None:
        self.unplaced.add(task.name)

    def failover(self, task: Task) -> None:
        self.failovers += 1

    def started(self, running: Running) -> None:
        task = running.task
        self.first_start.setdefault(task.name, running.start)
        if task.online and not running.borrowing:
            self.online_cpu[running.cluster] += task.cpu
            self.online_gpu[running.cluster] += task.gpu_milli
        else:
            self.used_cpu += task.cpu
            self.used_gpu += task.gpu_milli
        gigabytes, egress = self.pricing.egress(running.cluster, task)
        self.egress_gb += gigabytes
        self.cost += egress
        if self.pricing.violates(running.cluster, task):
            self.violations.add(task.name)
        self._sample()

    def ended(self, running: Running, now: float, evicted: bool = False) -> None:
        task = running.task
        if task.online and not running.borrowing:
            self.online_cpu[running.cluster] -= task.cpu
            self.online_gpu[running.cluster] -= task.gpu_milli
        else:
            self.used_cpu -= task.cpu
            self.used_gpu -= task.gpu_milli
        self.cost += self.pricing.compute(running.cluster, task, now - running.start)
        if evicted:
            self.failovers += 1
        self._sample()

    def finished(self, running: Running, now: float) -> None:
        self.ended(running, now)
        self.done.add(running.task.name)
        if not running.task.online or self.only_online:
            self.makespan = max(self.makespan, now)

    def close(self, waiting: Iterable[Task], pending: Iterable[Task]) -> None:
        for task in [*waiting, *pending]:
            self.unplaced.add(task.name)

    def result(self) -> PolicyResult:
        makespan = self.makespan
        waits = [start - self.arrival[name] for name, start in self.first_start.items()]
        if makespan > 0:
            area_cpu = area_gpu = 0.0
            for (at, cpu, gpu), (following, _, _) in zip(
                self.points, [*self.points[1:], (makespan, 0, 0)], strict=True
            ):
                span = max(0.0, min(following, makespan) - at)
                area_cpu, area_gpu = area_cpu + cpu * span, area_gpu + gpu * span
            utilization = {
                "cpu": area_cpu / makespan,
                "gpu": area_gpu / makespan if self.capacity_gpu else 0.0,
            }
        else:
            utilization = {"cpu": 0.0, "gpu": 0.0}
        return PolicyResult(
            policy=self.policy,
            makespan_s=makespan,
            utilization=utilization,
            mean_wait_s=sum(waits) / len(waits) if waits else 0.0,
            p95_wait_s=_percentile(waits, 0.95),
            cost=self.cost,
            egress_gb=self.egress_gb,
            sovereignty_violations=len(self.violations),
            unplaced=len(self.unplaced - self.done),
            failovers=self.failovers,
            decisions=self.decisions,
            timeline=_resample(self.points, makespan),
            waits=waits,
        )


def _resample(points: list[tuple[float, float, float]], end: float) -> list[tuple[float, float, float]]:
    """The step function ``points`` read at evenly spaced times up to ``end``."""
    if not points or end <= 0:
        return []
    out = []
    index = 0
    current = (0.0, 0.0, 0.0)
    for step in range(TIMELINE_POINTS + 1):
        at = end * step / TIMELINE_POINTS
        while index < len(points) and points[index][0] <= at:
            current = points[index]
            index += 1
        out.append((at, current[1], current[2]))
    return out


def lower_bound(federation: Federation, clusters: Mapping[str, ClusterState]) -> float:
    """The smallest makespan physics allows: at least the latest batch arrival plus its run time, and long
    enough that capacity x makespan covers the batch work plus what the online services really use (the
    tide) until then, per resource, with every task starting the moment it arrives."""
    tide, offsets = federation.tide, federation.offsets
    capacity = [sum(c.capacity[r] for c in clusters.values()) for r in range(3)]
    only_online = all(task.online for task in federation.tasks)
    batch = [0.0, 0.0, 0.0]
    online: list[tuple[Task, float]] = []
    latest = 0.0
    for task in federation.tasks:
        if task.online and not only_online:
            online.append((task, offsets.get(task.home or "", 0)))
            continue
        batch[0] += task.cpu * task.run
        batch[1] += task.memory_mib * task.run
        batch[2] += task.gpu_milli * task.run
        latest = max(latest, task.arrival + task.run)
    horizon = max([latest, *(task.arrival + task.run for task, _ in online)], default=0.0)
    integral = _TideIntegral(tide, sorted({offset for _, offset in online}), horizon)

    def short(resource: int, until: float) -> bool:
        """Does the work due by ``until`` exceed the capacity of [0, until] for ``resource``?"""
        work = batch[resource]
        for task, offset in online:
            start, end = task.arrival, min(task.arrival + task.run, until)
            if end > start:
                amount = (task.cpu, task.memory_mib, task.gpu_milli)[resource]
                mean = integral.mean(offset, start, end) if resource != 1 else 1.0
                work += amount * (end - start) * mean
        return work > capacity[resource] * until

    bound = latest
    for resource in range(3):
        if not capacity[resource] or not short(resource, bound):
            continue
        low, high = bound, max(bound, 1.0) * 2
        while short(resource, high):
            low, high = high, high * 2
        for _ in range(40):
            middle = (low + high) / 2
            low, high = (middle, high) if short(resource, middle) else (low, middle)
        bound = high
    return bound


class _TideIntegral:
    """Prefix integrals of the tide per UTC offset at one-minute resolution."""

    def __init__(self, tide: Any, offsets: list[float], horizon: float) -> None:
        self.steps = int(horizon // 60) + 2
        self.prefix: dict[float, list[float]] = {}
        for offset in offsets:
            total, prefix = 0.0, [0.0]
            for minute in range(self.steps):
                total += tide.usage(minute * 60.0 + 30.0, offset) * 60.0
                prefix.append(total)
            self.prefix[offset] = prefix

    def _at(self, offset: float, seconds: float) -> float:
        prefix = self.prefix[offset]
        minute = min(int(seconds // 60), self.steps - 1)
        fraction = (seconds - minute * 60.0) / 60.0
        return prefix[minute] + (prefix[minute + 1] - prefix[minute]) * fraction

    def mean(self, offset: float, start: float, end: float) -> float:
        return (self._at(offset, end) - self._at(offset, start)) / (end - start)
