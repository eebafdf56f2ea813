"""The fragmentation protocol (``fedsched replay --protocol fragmentation``): GPU allocation under
fragmentation, measured as the FGD paper measures it (Weng et al., USENIX ATC '23, and its authors'
simulator), in one cluster or in a federation.

Per seed (42, 43, ... as the authors' runs): the pod list, sorted by name, is shuffled; then pods drawn
uniformly with replacement are appended until the next one would take the GPU request that has arrived
past ``load`` x the GPU capacity (the check adds the drawn pod's share of one device, as the reference
does; a list that already asks for more is cut down instead, pods removed at random). Every row of the
list is used whatever its ``pod_phase``; ``gpu_milli`` is capped at 1000. The pods arrive one by one;
nothing departs and the trace's times are ignored. A pod that cannot be placed on arrival is dropped,
its request still counted as arrived. After each arrival the allocation is the GPU share allocated
(thousandths of a GPU placed / capacity), and the fragmentation ratio the fragmented share of the free
GPUs (:mod:`federation.fragmentation`, against the list's target workload). The value at x % load is the
mean over the arrivals whose arrived request rounds to x % of the capacity (the neighbours' within one
point if none), as the authors' analysis script computes it; reported at every 10 %, mean and standard
deviation over the seeds.

With one cluster the policies are the paper's node binders (``replay/binders.py``). With K clusters the
nodes are dealt to K members with regions, prices and sovereign datasets as ``replay/topology.py``
makes them for any replay (per seed), and the policies are the federation's: the baselines route each
pod to a member (``replay/policies.py``), which binds it with the kube-scheduler's default; fedsched asks
the real :class:`FederationEngine` (``replay/fragmentation_engine.py``).
"""

from __future__ import annotations

import math
import os
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from airflow_provider_fedsched.federation.fragmentation import MILLI, Floats, Ints, TaskShape, Workload
from airflow_provider_fedsched.replay.binders import BINDERS, Member, Pod, kube_default
from airflow_provider_fedsched.replay.policies import BASELINES, ClusterInfo, Pricing, make_router
from airflow_provider_fedsched.replay.topology import build_federation
from airflow_provider_fedsched.replay.workload import Node, ReplayInputError, Task, read_pods

__all__ = [
    "FEDERATION_POLICIES",
    "FIRST_SEED",
    "NODE_POLICIES",
    "FragmentationReport",
    "PodList",
    "Protocol",
    "arrivals",
    "read_pod_list",
    "run_protocol",
]

FIRST_SEED = 42
NODE_POLICIES = tuple(BINDERS)
FEDERATION_POLICIES = (*BASELINES, "fedsched")
EXPECTED_HOURS = 1.0
"""Every pod's expected duration: the protocol ignores times, so cost-aware choices price one hour."""


@dataclass(frozen=True, slots=True)
class PodList:
    """A pod list, sorted by name, as the protocol reads it."""

    name: str
    tasks: tuple[Task, ...]
    pods: tuple[Pod, ...]
    gpu_total: Ints
    """Thousandths of a GPU each pod asks for in all."""
    gpu_share: Ints
    """Thousandths on each of its devices: what the load's stopping rule adds."""
    workload: Workload
    """The target workload: the list's most common shapes covering 95 % of its pods."""


def _shape(task: Task) -> TaskShape:
    devices = math.ceil(task.gpu_milli / MILLI) if task.gpu_milli else 0
    share = task.gpu_milli // devices if devices else 0
    models = tuple(part for part in task.gpu_spec.split("|") if part) if devices else ()
    return TaskShape(task.cpu, devices, share, models)


def read_pod_list(path: str | Path) -> PodList:
    tasks = sorted(read_pods(path, cap_gpu_milli=True), key=lambda task: task.name)
    tasks = [replace(task, arrival=0.0, run=EXPECTED_HOURS * 3600.0) for task in tasks]
    shapes = [_shape(task) for task in tasks]
    pods = tuple(Pod.of(shape, task.memory_mib) for shape, task in zip(shapes, tasks, strict=True))
    return PodList(
        name=Path(path).name,
        tasks=tuple(tasks),
        pods=pods,
        gpu_total=np.array([shape.gpu_total for shape in shapes], np.int64),
        gpu_share=np.array([shape.gpu_milli for shape in shapes], np.int64),
        workload=Workload.typical(Counter(shapes)),
    )


def arrivals(pods: PodList, capacity: int, load: float, seed: int) -> Ints:
    """The positions (in ``pods``) of one seed's arrivals, in order."""
    rng = np.random.default_rng(seed)
    order = [int(position) for position in rng.permutation(len(pods.tasks))]
    target = load * capacity
    total = int(pods.gpu_total.sum())
    if total > target:
        while total > target and order:
            total -= int(pods.gpu_total[order.pop(int(rng.integers(len(order))))])
        return np.array(order, np.int64)
    while True:
        drawn = int(rng.integers(len(pods.tasks)))
        if total + int(pods.gpu_share[drawn]) > target:
            return np.array(order, np.int64)
        total += int(pods.gpu_total[drawn])
        order.append(drawn)


@dataclass(frozen=True, slots=True)
class Protocol:
    load: float = 1.3
    seeds: int = 10
    staleness: float = 10.0
    """fedsched's snapshots are at most this many seconds old, the arrivals spread over ``window``."""
    window: float = 3600.0


@dataclass(slots=True)
class SeedRun:
    """One policy over one seed's arrivals: per arrival, GPU thousandths arrived and allocated so far,
    and the fragmentation ratio where it is reported."""

    arrived: Ints
    allocated: Ints
    fragmentation: Floats
    """NaN where not measured."""
    violations: int = 0
    decisions: int = 0


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


class _Recorder:
    def __init__(self, count: int, gpus: int, load: float) -> None:
        self.gpus = gpus
        self.top = round(load * 100) + 1
        self.arrived = np.zeros(count, np.int64)
        self.allocated = np.zeros(count, np.int64)
        self.fragmentation = np.full(count, np.nan)
        self._arrived = 0
        self._allocated = 0

    def record(self, position: int, gpu: int, placed: bool, ratio: Callable[[], float]) -> None:
        self._arrived += gpu
        if placed:
            self._allocated += gpu
        self.arrived[position] = self._arrived
        self.allocated[position] = self._allocated
        # Fragmentation is measured only where it is reported: within one point of every 10 %.
        point = round(self._arrived / self.gpus / 10)
        if (point + 1) % 10 <= 2 and point <= self.top:
            self.fragmentation[position] = ratio()

    def run(self, violations: int = 0, decisions: int = 0) -> SeedRun:
        return SeedRun(self.arrived, self.allocated, self.fragmentation, violations, decisions)


def _fragmentation_ratio(members: Sequence[Member]) -> float:
    fragmented = sum(float(m.view.fragmentation.sum()) for m in members)
    free = sum(float(m.view.devices.sum()) for m in members)
    return fragmented / free if free > 0 else 0.0


def run_binder(
    policy: str, nodes: Sequence[Node], pods: PodList, order: Ints, seed: int, load: float
) -> SeedRun:
    """One of the paper's binders over one cluster of ``nodes``."""
    binder = BINDERS[policy]
    member = Member("cluster", nodes, pods.workload)
    # The reference prefixes each node's name with a random number per seed: ties go to the lowest.
    member.rank = np.random.default_rng([seed, 1]).permutation(member.size).astype(np.int64)
    rng = np.random.default_rng([seed, 2])
    recorder = _Recorder(len(order), int(member.gpus.sum()), load)
    ratio = lambda: _fragmentation_ratio((member,))  # noqa: E731
    for position, index in enumerate(order):
        pod = pods.pods[index]
        feasible = member.feasible(pod)
        placed = bool(feasible.any())
        if placed:
            node, device = binder(member, pod, feasible, rng)
            member.bind(node, pod, device)
        recorder.record(position, int(pods.gpu_total[index]), placed, ratio)
    return recorder.run()


@dataclass(slots=True)
class _Observed:
    """A member as a baseline last saw it (its snapshot, refreshed with fedsched's)."""

    cpu: Ints
    memory: Ints
    devices: Ints


@dataclass(slots=True)
class MemberInfo(ClusterInfo):
    """A baseline's view of a member (``ClusterInfo``) with GPU devices: whether the pod fits a node of the
    snapshot now, and how many copies the snapshot's free totals hold."""

    member: Member | None = None
    observed: _Observed | None = None
    pod: Pod | None = None

    def fits_now(self, task: Task) -> bool:
        assert self.member is not None and self.observed is not None and self.pod is not None
        shape, observed = self.pod.shape, self.observed
        fits = (observed.cpu >= shape.cpu) & (observed.memory >= self.pod.memory)
        if shape.gpus:
            fits &= (observed.devices >= shape.gpu_milli).sum(axis=1) >= shape.gpus
            if shape.models:
                fits &= self.member.admits(shape.models)
        return bool(fits.any())

    def available_replicas(self, task: Task) -> float:
        assert self.observed is not None
        totals = (
            float(self.observed.cpu.sum()),
            float(self.observed.memory.sum()),
            float(self.observed.devices.sum()),
        )
        asks = (task.cpu, task.memory_mib, task.gpu_milli)
        return min((total / ask for total, ask in zip(totals, asks, strict=True) if ask), default=0.0)


@dataclass(slots=True)
class Federated:
    """One seed's federation: the members (arrays), the spec, the tasks with homes and datasets."""

    members: dict[str, Member]
    spec: Any
    tasks: list[Task]
    packs_gpu: dict[str, bool]
    refresh_every: int
    """Arrivals between two snapshots (staleness x arrival rate)."""
    could_fit: dict[tuple[str, int], bool] = field(default_factory=dict)


def federate(
    nodes: Sequence[Node], pods: PodList, order: Ints, clusters: int, seed: int, protocol: Protocol
) -> Federated:
    from airflow_provider_fedsched.replay.topology import GPU_MILLI

    tasks: list[Task] = []
    seen: Counter[int] = Counter()
    for position, index in enumerate(order):
        task = pods.tasks[index]
        copy = seen[int(index)]
        seen[int(index)] += 1
        tasks.append(
            replace(task, name=task.name if not copy else f"{task.name}~{copy}", arrival=float(position))
        )
    federation = build_federation(nodes, tasks, clusters=clusters, seed=seed)
    members = {name: Member(name, federation.clusters[name], pods.workload) for name in federation.names}
    packs = {c.name: c.scoring_strategy.packs(GPU_MILLI) for c in federation.spec.clusters}
    rate = len(order) / protocol.window
    refresh = max(1, round(protocol.staleness * rate))
    return Federated(members, federation.spec, federation.tasks, packs, refresh)


def run_baseline(
    policy: str,
    nodes: Sequence[Node],
    pods: PodList,
    order: Ints,
    seed: int,
    clusters: int,
    protocol: Protocol,
) -> SeedRun:
    """A baseline router over ``clusters`` members, each binding with the kube-scheduler's default."""
    federated = federate(nodes, pods, order, clusters, seed, protocol)
    pricing = Pricing(federated.spec)
    router = make_router(policy, federated.spec, pricing, seed)
    members = list(federated.members.values())
    recorder = _Recorder(len(order), int(sum(int(m.gpus.sum()) for m in members)), protocol.load)
    observed: dict[str, _Observed] = {}
    ratio = lambda: _fragmentation_ratio(members)  # noqa: E731
    violations = 0
    for position, index in enumerate(order):
        if position % federated.refresh_every == 0:
            observed = {
                m.name: _Observed(m.view.cpu.copy(), m.view.memory.copy(), m.view.devices.copy())
                for m in members
            }
        pod, task = pods.pods[index], federated.tasks[position]
        infos = [
            MemberInfo(
                m.name, [], (0, 0, 0), _could_fit(federated, m, pod, int(index)), m, observed[m.name], pod
            )
            for m in members
        ]
        target = router.route(task, infos)
        placed = False
        if target is not None:
            member = federated.members[target]
            feasible = member.feasible(pod)
            if feasible.any():
                node, device = kube_default(member, pod, feasible, federated.packs_gpu[target], None)
                member.bind(node, pod, device)
                placed = True
                violations += pricing.violates(target, task)
        recorder.record(position, int(pods.gpu_total[index]), placed, ratio)
    return recorder.run(violations)


def _could_fit(federated: Federated, member: Member, pod: Pod, index: int) -> bool:
    key = (member.name, index)
    known = federated.could_fit.get(key)
    if known is None:
        known = federated.could_fit[key] = member.could_fit(pod)
    return known


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


def _summarize(runs: Sequence[SeedRun], gpus: int, loads: Sequence[int], seconds: float) -> PolicySummary:
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
        from airflow_provider_fedsched.replay.fragmentation_engine import run_fedsched

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
        report.policies[policy] = _summarize(runs, report.gpus, loads, seconds[policy])
    report.seconds = time.perf_counter() - started
    return report


def default_jobs() -> int:
    """Worker processes: two at most (the machine is shared), fewer on fewer cores."""
    return max(1, min(2, os.cpu_count() or 1))
