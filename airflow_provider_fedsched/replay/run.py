"""Replay one workload through several policies, each on a fresh copy of the federation."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from airflow_provider_fedsched.replay.cluster import ClusterState
from airflow_provider_fedsched.replay.metrics import PolicyResult, lower_bound
from airflow_provider_fedsched.replay.policies import POLICIES
from airflow_provider_fedsched.replay.simulator import Settings, simulate
from airflow_provider_fedsched.replay.topology import Federation
from airflow_provider_fedsched.replay.workload import ReplayInputError

__all__ = ["ReplayReport", "parse_policies", "replay"]


@dataclass(slots=True)
class ReplayReport:
    workload: str
    clusters: int
    nodes: int
    pods: int
    lower_bound_makespan_s: float
    results: dict[str, PolicyResult] = field(default_factory=dict)
    seconds: float = 0.0
    cpu_seconds: float = 0.0
    """CPU time of the process over the replays: what they cost whatever else the machine runs."""

    @property
    def pods_per_second(self) -> float:
        total = self.pods * len(self.results)
        return total / self.seconds if self.seconds > 0 else 0.0

    @property
    def pods_per_cpu_second(self) -> float:
        total = self.pods * len(self.results)
        return total / self.cpu_seconds if self.cpu_seconds > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "lower_bound_makespan_s": round(self.lower_bound_makespan_s, 1),
            "policies": {name: result.to_dict() for name, result in self.results.items()},
            "workload": {
                "name": self.workload,
                "clusters": self.clusters,
                "nodes": self.nodes,
                "pods": self.pods,
            },
        }


def parse_policies(text: str | None) -> list[str]:
    if not text:
        return list(POLICIES)
    names = [part.strip() for part in text.split(",") if part.strip()]
    unknown = [name for name in names if name not in POLICIES]
    if unknown or not names:
        raise ReplayInputError(
            f"--policies: unknown policy {', '.join(repr(n) for n in unknown) or '(none given)'} "
            f"(known: {', '.join(POLICIES)})"
        )
    return list(dict.fromkeys(names))


def replay(
    federation: Federation,
    policies: Sequence[str],
    settings: Settings,
    workload: str,
    progress: Callable[[str, int], None] | None = None,
) -> ReplayReport:
    """Run every policy in turn; ``progress(policy, finished)`` is called as tasks complete."""
    specs = {task.gpu_spec for task in federation.tasks}
    clusters = {
        name: ClusterState(name, federation.clusters[name], specs, federation.gpu_taint)
        for name in federation.names
    }
    report = ReplayReport(
        workload=workload,
        clusters=len(federation.names),
        nodes=sum(len(nodes) for nodes in federation.clusters.values()),
        pods=len(federation.tasks),
        lower_bound_makespan_s=lower_bound(federation, clusters),
    )
    started, cpu_started = time.perf_counter(), time.process_time()
    for policy in policies:
        tick = (lambda count, name=policy: progress(name, count)) if progress is not None else None
        began = time.perf_counter()
        result = simulate(federation, policy, settings, tick).result()
        result.replay_seconds = time.perf_counter() - began
        report.results[policy] = result
    report.seconds = time.perf_counter() - started
    report.cpu_seconds = time.process_time() - cpu_started
    return report
