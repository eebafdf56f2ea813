"""Node binders of the fragmentation protocol: one member cluster's nodes as arrays, and the rules that
pick a node (and a GPU device) for each pod.

Six binders from the FGD paper's definitions (Weng et al., USENIX ATC '23, section 6.1 and the authors'
simulator), each the kube-scheduler with that one score plugin: integer scores 0..100, the highest wins,
ties go to the node whose name sorts first (names carry a random prefix per seed, so ties break in a
random but reproducible order: :attr:`Member.rank`):

- ``Random``: a feasible node drawn uniformly; a GPU-sharing pod on a device drawn among those with room.
- ``DotProd`` (Tetris): ``100 x (1 - (free . request) / 2)``, free and request as (cpu / 128 cores, GPU /
  8 GPUs), the GPUs summed over the node.
- ``GpuClustering``: nodes already running pods of the same GPU kind first (75-100 when that is the only
  kind there, 50-75 among others), then empty nodes (25-50), then the rest (0-25); within a band, the
  fuller the node's GPUs the higher.
- ``GpuPacking``: a partially used device first (50-100, the fuller the better), then free devices on a
  node already in use (33-50), then an idle node (0-33, the fewer GPUs the better).
- ``BestFit``: ``100 x (1 - (cpu left / 128 cores + GPU left / 8 GPUs) / 2)`` after placement, rescaled
  to 0..100 over the feasible nodes.
- ``FGD``: ``100 x sigmoid(-fragmentation gradient / 1000)`` (:mod:`federation.fragmentation`); a sharing
  pod goes to the device where the gradient is smallest.

Pods without a GPU score 0 everywhere under the GPU-only rules (GpuClustering, GpuPacking): the tie-break
places them. A pod sharing a GPU goes to the device with the least room that holds it (the GPU-sharing
scheduler's "best fit") except under Random and FGD; whole GPUs are the first free devices.

The federation's members bind with the kube-scheduler's default instead (:func:`kube_default`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from airflow_provider_fedsched.federation.fragmentation import (
    MILLI,
    Bools,
    GpuView,
    Ints,
    TaskShape,
    Workload,
)
from airflow_provider_fedsched.replay.workload import Node

__all__ = ["BINDERS", "Binder", "Member", "Pod", "kube_default"]

MAX_CPU = 128_000
"""The reference's largest node: 128 cores (DotProd and BestFit divide by it)."""
MAX_GPU = 8 * MILLI
"""And 8 GPUs."""
MAX_SCORE = 100


@dataclass(frozen=True, slots=True)
class Pod:
    """One pod of the pod list as the binders see it."""

    shape: TaskShape
    memory: int
    """MiB."""
    kind: int
    """GpuClustering's GPU kind: 0 without GPU, 1 sharing a device, 1 + n for n whole devices."""

    @classmethod
    def of(cls, shape: TaskShape, memory: int) -> Pod:
        kind = 0 if not shape.gpus else (1 if shape.shares else 1 + shape.gpus)
        return cls(shape, memory, kind)


class Member:
    """One cluster's nodes (sorted by name) as arrays: capacities, what is free (a :class:`GpuView`), the
    tie-break order, and per node how many pods of each GPU kind run there."""

    def __init__(self, name: str, nodes: Sequence[Node], workload: Workload) -> None:
        ordered = sorted(nodes, key=lambda node: node.name)
        self.name = name
        self.names = [node.name for node in ordered]
        width = max((node.gpus for node in ordered), default=0)
        self.view = GpuView.of(
            [node.cpu for node in ordered],
            [node.memory_mib for node in ordered],
            [[MILLI] * node.gpus + [0] * (width - node.gpus) for node in ordered],
            [node.model if node.gpus else "" for node in ordered],
            workload,
        )
        self.cpu_capacity = np.array([node.cpu for node in ordered], np.int64)
        self.memory_capacity = np.array([node.memory_mib for node in ordered], np.int64)
        self.gpus = np.array([node.gpus for node in ordered], np.int64)
        self.gpu_capacity = self.gpus * MILLI
        self.rank = np.arange(len(ordered), dtype=np.int64)
        """Tie-break: the lowest rank wins (name order unless a seed shuffles it)."""
        self.kinds = np.zeros((len(ordered), 2 + width), np.int64)
        self._admits: dict[tuple[str, ...], Bools] = {}

    @property
    def size(self) -> int:
        return len(self.names)

    def admits(self, models: tuple[str, ...]) -> Bools:
        known = self._admits.get(models)
        if known is None:
            known = self._admits[models] = self.view.admits(models)
        return known

    def feasible(self, pod: Pod) -> Bools:
        """Nodes where the pod fits now: cpu, memory, enough devices with its share free, GPU model."""
        fits = self.view.fits(pod.shape, pod.memory)
        if pod.shape.gpus:
            fits &= self.gpus > 0
            if pod.shape.models:
                fits &= self.admits(pod.shape.models)
        return fits

    def could_fit(self, pod: Pod) -> bool:
        """Some node, empty, could hold the pod."""
        shape = pod.shape
        fits = (self.cpu_capacity >= shape.cpu) & (self.memory_capacity >= pod.memory)
        if shape.gpus:
            fits &= self.gpus >= shape.gpus
            if shape.models:
                fits &= self.admits(shape.models)
        return bool(fits.any())

    def bind(self, node: int, pod: Pod, device: int | None) -> None:
        self.view.place(node, pod.shape, pod.memory, device)
        if pod.kind:
            self.kinds[node, pod.kind] += 1

    def first(self, candidates: Bools) -> int:
        """The candidate with the lowest rank."""
        return int(np.argmin(np.where(candidates, self.rank, np.iinfo(np.int64).max)))

    def best(self, scores: Ints, feasible: Bools) -> int:
        """The highest score among feasible nodes, ties to the lowest rank."""
        top = scores[feasible].max()
        return self.first(feasible & (scores == top))

    def tightest_device(self, node: int, share: int) -> int:
        """The device with the least free that still holds ``share`` (the first such)."""
        row = self.view.devices[node]
        return int(np.argmin(np.where(row >= share, row, MILLI + 1)))


Choice = tuple[int, int | None]
Binder = Callable[[Member, Pod, Bools, np.random.Generator], Choice]


def _device(member: Member, node: int, pod: Pod) -> Choice:
    return node, member.tightest_device(node, pod.shape.gpu_milli) if pod.shape.shares else None


def _random(member: Member, pod: Pod, feasible: Bools, rng: np.random.Generator) -> Choice:
    nodes = np.flatnonzero(feasible)
    node = int(nodes[rng.integers(nodes.size)])
    if not pod.shape.shares:
        return node, None
    devices = np.flatnonzero(member.view.devices[node] >= pod.shape.gpu_milli)
    return node, int(devices[rng.integers(devices.size)])


def _dot_product(member: Member, pod: Pod, feasible: Bools, rng: np.random.Generator) -> Choice:
    shape, view = pod.shape, member.view
    dot = (view.cpu / MAX_CPU) * (shape.cpu / MAX_CPU) + (view.free_gpu / MAX_GPU) * (
        shape.gpu_total / MAX_GPU
    )
    scores = (MAX_SCORE * (1.0 - dot / 2.0)).astype(np.int64)
    return _device(member, member.best(scores, feasible), pod)


def _gpu_clustering(member: Member, pod: Pod, feasible: Bools, rng: np.random.Generator) -> Choice:
    if not pod.kind:
        return _device(member, member.first(feasible), pod)
    fullness = (MAX_SCORE // 4) * (MAX_GPU - member.view.free_gpu) // MAX_GPU
    kinds = (member.kinds > 0).sum(axis=1)
    same = member.kinds[:, pod.kind] > 0
    band = np.where(same, np.where(kinds == 1, 3, 2), np.where(kinds == 0, 1, 0))
    scores = fullness + band * (MAX_SCORE // 4)
    return _device(member, member.best(scores, feasible), pod)


def _gpu_packing(member: Member, pod: Pod, feasible: Bools, rng: np.random.Generator) -> Choice:
    shape = pod.shape
    if not shape.gpus:
        return _device(member, member.first(feasible), pod)
    devices = member.view.devices
    fully_free = (devices == MILLI).sum(axis=1)
    ascending = np.sort(devices, axis=1)
    room = ascending >= shape.gpu_milli
    used = room & (np.cumsum(room, axis=1) <= shape.gpus)
    whole_used = (used & (ascending == MILLI)).sum(axis=1)
    left = (used * (ascending * 100 // MILLI)).sum(axis=1)
    idle = np.maximum(MAX_SCORE // 3 - fully_free, fully_free)
    fresh = np.maximum(MAX_SCORE // 2 - whole_used, MAX_SCORE // 3)
    shared = np.maximum(MAX_SCORE - left // 10, MAX_SCORE // 2)
    scores = np.where(fully_free == member.gpus, idle, np.where(whole_used > 0, fresh, shared))
    return _device(member, member.best(scores, feasible), pod)


def _best_fit(member: Member, pod: Pod, feasible: Bools, rng: np.random.Generator) -> Choice:
    shape, view = pod.shape, member.view
    left = (view.cpu - shape.cpu) / MAX_CPU * 0.5 + (view.free_gpu - shape.gpu_total) / MAX_GPU * 0.5
    raw = ((1.0 - left) * MAX_SCORE).astype(np.int64)
    low, high = raw[feasible].min(), raw[feasible].max()
    scores = (raw - low) * MAX_SCORE // (high - low) if high > low else np.zeros_like(raw)
    return _device(member, member.best(scores, feasible), pod)


def _fgd(member: Member, pod: Pod, feasible: Bools, rng: np.random.Generator) -> Choice:
    scores, devices = member.view.fgd(pod.shape)
    node = member.best(scores, feasible)
    return node, int(devices[node]) if pod.shape.shares else None


BINDERS: dict[str, Binder] = {
    "Random": _random,
    "DotProd": _dot_product,
    "GpuClustering": _gpu_clustering,
    "GpuPacking": _gpu_packing,
    "BestFit": _best_fit,
    "FGD": _fgd,
}
"""The paper's six binders, in its order."""


def kube_default(member: Member, pod: Pod, feasible: Bools, packs_gpu: bool, preferred: int | None) -> Choice:
    """The kube-scheduler's default in a member: a feasible preferred node (a preferred node affinity, whose
    score, 100 x the plugin's weight 2, outweighs the resource score's at most 100) wins; otherwise a GPU
    pod goes to the node with the least GPU left after it (``MostAllocated`` on the GPU) when the cluster
    packs GPUs, any other pod to the least allocated (free cpu share + free memory share after it); ties to
    the first by name. As in ``replay/cluster.py``'s binder, with devices: a GPU-sharing pod on the
    tightest device that holds it, whole GPUs on the first free devices."""
    if preferred is not None and feasible[preferred]:
        return _device(member, preferred, pod)
    shape, view = pod.shape, member.view
    if shape.gpus and packs_gpu:
        capacity = np.maximum(member.gpu_capacity, 1)
        scores = -(view.free_gpu - shape.gpu_total) / capacity
    else:
        scores = (view.cpu - shape.cpu) / member.cpu_capacity + (view.memory - pod.memory) / np.maximum(
            member.memory_capacity, 1
        )
    scores = np.where(feasible, scores, -np.inf)
    return _device(member, int(np.argmax(scores)), pod)
