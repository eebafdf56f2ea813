"""The fragmentation protocol's runs and results: every policy over every seed (in worker processes:
each run is independent, so the result does not depend on how many), each summed up per load as the FGD
authors' analysis script does, and the report ``fedsched replay --protocol fragmentation`` prints.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from airflow_provider_fedsched.federation.fragmentation import MILLI, Floats, Ints
from airflow_provider_fedsched.replay.fragmentation import (
    FEDERATION_POLICIES,
    FIRST_SEED,
    NODE_POLICIES,
    PodList,
    Protocol,
    SeedRun,
    arrivals,
    run_baseline,
    run_binder,
)
from airflow_provider_fedsched.replay.fragmentation_engine import run_fedsched
from airflow_provider_fedsched.replay.workload import Node, ReplayInputError

__all__ = [
    "FragmentationReport",
    "PolicySummary",
    "by_load",
    "default_jobs",
    "load_points",
    "policies_for",
    "run_protocol",
    "summarize",
]


def load_points(arrived: Ints, gpus: int) -> Ints:
    """Each arrival's load in whole percent, as the authors' script computes and rounds it (half to
    even): thousandths arrived / GPUs / 10."""
    return np.round(arrived / gpus / 10).astype(np.int64)


def by_load(points: Ints, values: Floats, at: Sequence[int]) -> dict[int, float]:
    """The mean of ``values`` (NaN: not measured) over the arrivals at each load of ``at`` (percent), or
    over those within one point when none is exactly there."""
    out: dict[int, float] = {}
    measured = ~np.isnan(values)
    for load in at:
        chosen = measured & (points == load)
        if not chosen.any():
            chosen = measured & (np.abs(points - load) <= 1)
        if chosen.any():
            out[load] = float(values[chosen].mean())
    return out


@dataclass(slots=True)
class PolicySummary:
    allocation: dict[int, float]
    """Load (percent) -> mean allocation over the seeds (fraction)."""
    std: dict[int, float]
    fragmentation: dict[int, float]
    fragmentation_std: dict[int, float]
    curve: dict[int, float]
    """Every whole percent of load -> mean allocation: the plot's line."""
    sovereignty_violations: int
    seconds: float
    """CPU seconds of this policy's runs, summed over the seeds."""


@dataclass(slots=True)
class FragmentationReport:
    workload: str
    nodes: int
    clusters: int
    gpus: int
    seeds: list[int]
    load: float
    policies: dict[str, PolicySummary] = field(default_factory=dict)
    seconds: float = 0.0
    """Wall time of the whole run."""

    @property
    def loads(self) -> list[int]:
        return list(range(10, round(self.load * 100) + 1, 10))

    def to_dict(self) -> dict[str, Any]:
        def keyed(values: dict[int, float]) -> dict[str, float]:
            return {f"{load / 100:.1f}": round(value, 6) for load, value in values.items()}

        return {
            "policies": {
                name: {
                    "allocation": keyed(summary.allocation),
                    "fragmentation": keyed(summary.fragmentation),
                    "std": keyed(summary.std),
                    "sovereignty_violations": summary.sovereignty_violations,
                }
                for name, summary in self.policies.items()
            },
            "gpus": self.gpus,
            "clusters": self.clusters,
        }


def summarize(runs: Sequence[SeedRun], gpus: int, loads: Sequence[int], seconds: float) -> PolicySummary:
    curves: list[dict[int, float]] = []
    allocations: list[dict[int, float]] = []
    fragmentations: list[dict[int, float]] = []
    for run in runs:
        points = load_points(run.arrived, gpus)
        # The authors' script rounds each arrival's allocation to 0.01 % before averaging.
        percent = np.round(run.allocated / gpus / 10, 2)
        curve = by_load(points, percent, range(0, max(loads) + 1))
        curves.append(curve)
        allocations.append({load: curve[load] for load in loads if load in curve})
        fragmentations.append(by_load(points, run.fragmentation, loads))

    def mean_std(per_seed: list[dict[int, float]], scale: float) -> tuple[dict[int, float], dict[int, float]]:
        means: dict[int, float] = {}
        stds: dict[int, float] = {}
        for load in sorted({key for values in per_seed for key in values}):
            values = [values[load] / scale for values in per_seed if load in values]
            means[load] = float(np.mean(values))
            stds[load] = float(np.std(values, ddof=1)) if len(values) > 1 else 0.0
        return means, stds

    allocation, std = mean_std(allocations, 100.0)
    fragmentation, fragmentation_std = mean_std(fragmentations, 1.0)
    curve, _ = mean_std(curves, 100.0)
    return PolicySummary(
        allocation,
        std,
        fragmentation,
        fragmentation_std,
        curve,
        sum(run.violations for run in runs),
        seconds,
    )


def _job(args: tuple[str, list[Node], PodList, int, int, Protocol]) -> tuple[str, int, SeedRun, float]:
    policy, nodes, pods, seed, clusters, protocol = args
    started = time.process_time()
    capacity = sum(node.gpus for node in nodes) * MILLI
    order = arrivals(pods, capacity, protocol.load, seed)
    if clusters == 1:
        run = run_binder(policy, nodes, pods, order, seed, protocol.load)
    elif policy == "fedsched":
        run = run_fedsched(nodes, pods, order, seed, clusters, protocol)
    else:
        run = run_baseline(policy, nodes, pods, order, seed, clusters, protocol)
    return policy, seed, run, time.process_time() - started


def policies_for(clusters: int, names: Sequence[str] | None) -> list[str]:
    known = NODE_POLICIES if clusters == 1 else FEDERATION_POLICIES
    if not names:
        return list(known)
    unknown = [name for name in names if name not in known]
    if unknown:
        what = "one cluster" if clusters == 1 else f"{clusters} clusters"
        raise ReplayInputError(
            f"--policies: {', '.join(repr(n) for n in unknown)} not a policy of the fragmentation protocol "
            f"with {what} (known: {', '.join(known)})"
        )
    return list(dict.fromkeys(names))


def run_protocol(
    nodes: Sequence[Node],
    pods: PodList,
    *,
    clusters: int,
    protocol: Protocol,
    policies: Sequence[str],
    jobs: int = 1,
    progress: Callable[[str, int, SeedRun, float], None] | None = None,
) -> FragmentationReport:
    """Every policy over every seed; ``jobs`` worker processes (each seed x policy is independent, so the
    result does not depend on it)."""
    capacity = sum(node.gpus for node in nodes) * MILLI
    if capacity <= 0:
        raise ReplayInputError(
            "--nodes: no node has a GPU: the fragmentation protocol measures GPU allocation"
        )
    seeds = [FIRST_SEED + k for k in range(protocol.seeds)]
    report = FragmentationReport(
        workload=pods.name,
        nodes=len(nodes),
        clusters=clusters,
        gpus=capacity // MILLI,
        seeds=seeds,
        load=protocol.load,
    )
    work = [(policy, list(nodes), pods, seed, clusters, protocol) for policy in policies for seed in seeds]
    results: dict[str, list[tuple[int, SeedRun]]] = {policy: [] for policy in policies}
    seconds: dict[str, float] = dict.fromkeys(policies, 0.0)
    started = time.perf_counter()

    def take(policy: str, seed: int, run: SeedRun, cpu: float) -> None:
        results[policy].append((seed, run))
        seconds[policy] += cpu
        if progress is not None:
            progress(policy, seed, run, cpu)

    if jobs <= 1 or len(work) == 1:
        for item in work:
            take(*_job(item))
    else:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor, as_completed

        context = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(max_workers=jobs, mp_context=context) as pool:
            futures = [pool.submit(_job, item) for item in work]
            for future in as_completed(futures):
                take(*future.result())
    loads = report.loads
    for policy in policies:
        runs = [run for _, run in sorted(results[policy], key=lambda item: item[0])]
        report.policies[policy] = summarize(runs, report.gpus, loads, seconds[policy])
    report.seconds = time.perf_counter() - started
    return report


def default_jobs() -> int:
    """Worker processes: two at most (the machine is shared), fewer on fewer cores."""
    return max(1, min(2, os.cpu_count() or 1))
