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
the real :class:`FederationEngine` (``replay/fragmentation_engine.py``). ``replay/fragmentation_run.py``
runs every policy over every seed and sums them up.
"""

from __future__ import annotations

import math
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
from airflow_provider_fedsched.replay.workload import Node, Task, read_pods

__all__ = [
    "FEDERATION_POLICIES",
    "FIRST_SEED",
    "NODE_POLICIES",
    "PUBLISHED",
    "Federated",
    "MemberInfo",
    "PodList",
    "Protocol",
    "Recorder",
    "SeedRun",
    "arrivals",
    "federate",
    "fragmentation_ratio",
    "read_pod_list",
    "run_baseline",
    "run_binder",
]

FIRST_SEED = 42
PUBLISHED = {
    "Random": (86.30, 87.47),
    "DotProd": (90.62, 90.85),
    "GpuClustering": (91.65, 91.88),
    "GpuPacking": (91.78, 92.00),
    "BestFit": (92.86, 93.08),
    "FGD": (95.23, 95.39),
}
"""The FGD paper's authors' expected results, the yardstick the binders reproduce: GPU allocation in %
at 100 % and 130 % load (mean of seeds 42-51, default pod list, the GPU-node list, one cluster)."""
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


class Recorder:
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


def fragmentation_ratio(members: Sequence[Member]) -> float:
    fragmented = sum(float(m.view.fragmentation.sum()) for m in members)
    free = sum(float(m.view.free_gpu.sum()) for m in members)
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
    recorder = Recorder(len(order), int(member.gpus.sum()), load)
    ratio = lambda: fragmentation_ratio((member,))  # noqa: E731
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
    recorder = Recorder(len(order), int(sum(int(m.gpus.sum()) for m in members)), protocol.load)
    observed: dict[str, _Observed] = {}
    ratio = lambda: fragmentation_ratio(members)  # noqa: E731
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
