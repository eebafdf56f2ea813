"""GPU fragmentation and its gradient, as Weng et al. define them ("Beware of Fragmentation: Scheduling
GPU-Sharing Workloads with Fragmentation Gradient Descent", USENIX ATC '23), computed over arrays of nodes.

The *target workload* is the set of task shapes (cpu, GPU devices, thousandths of a GPU per device, GPU
models allowed) that make up most of the tasks, each with its popularity. A node's *fragmentation* is the
free GPU capacity (in thousandths) that a task drawn from the target workload could not use there:
all of it when the task does not fit the node at all (a GPU model it may not use, too little cpu, too few
devices with enough free), else the free part of the devices too small for the task; weighted by
popularity. A task without a GPU can use none of the free GPUs: to it they are all fragments (so the
ratio never falls below those tasks' popularity), but a GPU task it leaves without cpu counts all of
them too. The *gradient* of a placement is how much it changes the node's fragmentation; FGD places a
task where the gradient is smallest (for a task sharing a GPU, on the device where it is smallest).

Everything is numpy over all nodes at once. A :class:`GpuView` keeps the nodes' free resources, their
fragmentation and, per task shape, the gradient on every node, recomputing only the nodes that changed
since (a placement changes one node). Used by the engine's ``Fragmentation`` score plugin and by the
replay's node binders (``replay/binders.py``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

__all__ = [
    "COVERAGE",
    "MILLI",
    "GpuView",
    "TaskShape",
    "Workload",
    "fgd_scores",
]

Ints = npt.NDArray[np.int64]
Floats = npt.NDArray[np.float64]
Bools = npt.NDArray[np.bool_]

MILLI = 1000
"""Thousandths of a GPU in one device."""
COVERAGE = 0.95
"""The target workload is the most common shapes covering this share of the tasks (the paper's 95 %)."""
_UNFIT = np.inf
"""The gradient where the task cannot go (its device, or the node, lacks the GPU room)."""


@dataclass(frozen=True, slots=True)
class TaskShape:
    """What fragmentation looks at in a task: its cpu and its GPUs (memory only decides whether it fits)."""

    cpu: int
    """Millicores."""
    gpus: int = 0
    """GPU devices."""
    gpu_milli: int = 0
    """Thousandths of a GPU on each device, 1..1000 (0 without GPUs)."""
    models: tuple[str, ...] = ()
    """GPU models the task may use; empty: any."""

    @property
    def shares(self) -> bool:
        """Takes part of one device (a GPU-sharing task)."""
        return self.gpus == 1 and 0 < self.gpu_milli < MILLI

    @property
    def gpu_total(self) -> int:
        return self.gpus * self.gpu_milli


@dataclass(frozen=True, slots=True, eq=False)
class Workload:
    """The target workload: task shapes and their popularity (summing to 1)."""

    shapes: tuple[TaskShape, ...]
    popularity: tuple[float, ...]

    @classmethod
    def typical(cls, counts: Mapping[TaskShape, float], coverage: float = COVERAGE) -> Workload:
        """The most common shapes until they cover ``coverage`` of the tasks, popularity renormalised
        among them. Order: most common first; between equal counts, larger cpu, then larger GPU share,
        more devices, models (the reference simulator's order)."""
        total = float(sum(counts.values()))
        if total <= 0:
            raise ValueError("a target workload needs at least one task")
        ordered = sorted(
            counts.items(),
            key=lambda item: (
                item[1],
                item[0].cpu,
                item[0].gpu_milli,
                item[0].gpus,
                "|".join(item[0].models),
            ),
            reverse=True,
        )
        chosen: list[tuple[TaskShape, float]] = []
        covered = 0.0
        for shape, count in ordered:
            if covered >= coverage * total:
                break
            chosen.append((shape, count))
            covered += count
        return cls(tuple(s for s, _ in chosen), tuple(c / covered for _, c in chosen))


@dataclass(slots=True)
class _Compiled:
    """A workload as arrays against one list of GPU models (codes 0..M-1; code M is "no GPU model")."""

    cpu: Ints
    """(W,) each shape's cpu."""
    access: Bools
    """(M+1, W) whether a node of each model code may run each shape (always, for shapes without GPU)."""
    thresholds: Ints
    """(J,) the distinct per-device GPU shares of the shapes with GPUs."""
    group_slot: Ints
    """(Q,) for each group of GPU shapes with the same share and device count: its threshold position."""
    group_need: Ints
    """(Q,) the group's device count."""
    to_group: Floats
    """(W, Q) popularity of each GPU shape, in its group's column."""


def _compile(workload: Workload, models: Sequence[str]) -> _Compiled:
    shapes = workload.shapes
    popularity = np.asarray(workload.popularity, np.float64)
    width = len(shapes)
    codes = {model: code for code, model in enumerate(models)}
    access = np.ones((len(models) + 1, width), np.bool_)
    for position, shape in enumerate(shapes):
        if shape.gpus and shape.models:
            access[:, position] = False
            for model in shape.models:
                code = codes.get(model)
                if code is not None:
                    access[code, position] = True
    thresholds = np.unique(np.array([s.gpu_milli for s in shapes if s.gpus], np.int64))
    groups: dict[tuple[int, int], int] = {}
    to_group_entries: list[tuple[int, int, float]] = []
    for position, shape in enumerate(shapes):
        if shape.gpus:
            slot = int(np.searchsorted(thresholds, shape.gpu_milli))
            group = groups.setdefault((slot, shape.gpus), len(groups))
            to_group_entries.append((position, group, float(popularity[position])))
    to_group = np.zeros((width, len(groups)), np.float64)
    for position, group, weight in to_group_entries:
        to_group[position, group] = weight
    keys = list(groups)
    return _Compiled(
        cpu=np.array([s.cpu for s in shapes], np.int64),
        access=access,
        thresholds=thresholds,
        group_slot=np.array([slot for slot, _ in keys], np.int64),
        group_need=np.array([need for _, need in keys], np.int64),
        to_group=to_group,
    )


def _shares(compiled: _Compiled, cpu: Ints, model: Ints) -> Floats:
    """For nodes with ``cpu`` free: per group of GPU shapes (B, Q), the popularity of the group's shapes
    each node may run cpu- and model-wise."""
    runs = (cpu[:, None] >= compiled.cpu[None, :]) & compiled.access[model]
    return runs.astype(np.float64) @ compiled.to_group


def _fragmentation(compiled: _Compiled, cpu: Ints, devices: Ints, model: Ints) -> Floats:
    """(B,) fragmentation of nodes with ``cpu`` and ``devices`` (B, D) free: all the free GPU capacity
    but what the workload's GPU shapes that fit could use (a shape without GPU uses none of it)."""
    total: Floats = devices.sum(axis=1).astype(np.float64)
    if not compiled.group_slot.size:
        return total
    group = _shares(compiled, cpu, model)
    big_enough = devices[:, :, None] >= compiled.thresholds[None, None, :]
    count = big_enough.sum(axis=1)
    usable = (devices[:, :, None] * big_enough).sum(axis=1)
    slot = compiled.group_slot
    fits = count[:, slot] >= compiled.group_need[None, :]
    used: Floats = (usable[:, slot] * fits * group).sum(axis=1)
    return total - used


def _sharing_fragmentation(compiled: _Compiled, cpu: Ints, devices: Ints, model: Ints, share: int) -> Floats:
    """(B, D) fragmentation of each node after ``share`` thousandths are taken from each of its devices
    in turn (and the task's cpu already taken from ``cpu``): one device changes, so each count and sum
    over the devices is corrected for it alone instead of recomputed."""
    after = devices - share
    total: Floats = (devices.sum(axis=1)[:, None] - share).astype(np.float64)
    if not compiled.group_slot.size:
        return np.repeat(total, devices.shape[1], axis=1)
    group = _shares(compiled, cpu, model)
    thresholds = compiled.thresholds[None, None, :]
    was = devices[:, :, None] >= thresholds
    now = after[:, :, None] >= thresholds
    count = was.sum(axis=1)[:, None, :] - was + now
    usable = (
        (devices[:, :, None] * was).sum(axis=1)[:, None, :]
        - devices[:, :, None] * was
        + after[:, :, None] * now
    )
    slot = compiled.group_slot
    fits = count[:, :, slot] >= compiled.group_need[None, None, :]
    used: Floats = (usable[:, :, slot] * fits * group[:, None, :]).sum(axis=2)
    return total - used


def take_devices(devices: Ints, shape: TaskShape) -> tuple[Ints, Bools]:
    """Devices (B, D) after a task of ``shape`` that does not share a GPU takes its devices on each node,
    and whether each node had them: the ``gpus`` devices with the least free that still hold
    ``gpu_milli`` (for whole GPUs: the first fully free ones), as the reference simulator packs them."""
    if not shape.gpus:
        return devices, np.ones(devices.shape[0], np.bool_)
    room = devices >= shape.gpu_milli
    order = np.argsort(np.where(room, devices, MILLI + 1), axis=1, kind="stable")[:, : shape.gpus]
    rows = np.arange(devices.shape[0])[:, None]
    had = room.sum(axis=1) >= shape.gpus
    taken = devices.copy()
    taken[rows, order] -= np.where(had[:, None] & room[rows, order], shape.gpu_milli, 0)
    return taken, had


@dataclass(slots=True)
class _Gradient:
    versions: Ints
    values: Floats
    """(N, D) or (N, 1): the gradient per device or per node."""
    node_scores: Ints
    """(N,) the node's FGD score: its best device's, -1 where the task cannot go."""
    devices: Ints
    """(N,) the device with that score (the first such)."""


@dataclass(slots=True, eq=False)
class GpuView:
    """Nodes' free cpu, memory and GPU devices, their fragmentation under a target workload, and the
    gradient of placing each task shape, recomputed per node only where the node changed."""

    cpu: Ints
    """(N,) free millicores."""
    memory: Ints
    """(N,) free memory (any unit; requests are compared in the same)."""
    devices: Ints
    """(N, D) free thousandths of each GPU device (0 past a node's own devices)."""
    model: Ints
    """(N,) GPU model code, an index into ``models`` (``len(models)``: none)."""
    models: tuple[str, ...]
    workload: Workload
    versions: Ints = field(init=False)
    """(N,) how many times each node changed: what the cached gradients are checked against."""
    _compiled: _Compiled = field(init=False)
    _gradients: dict[TaskShape, _Gradient] = field(init=False, default_factory=dict)
    _node_fragmentation: Floats = field(init=False)
    _dirty: Bools = field(init=False)
    """Nodes changed since their fragmentation was last computed (it is computed when read)."""
    _largest: Ints = field(init=False)
    """(N,) the most any one device has free."""
    _whole: Ints = field(init=False)
    """(N,) devices wholly free."""
    _free: Ints = field(init=False)
    """(N,) free thousandths over all the node's devices."""

    def __post_init__(self) -> None:
        self._compiled = _compile(self.workload, self.models)
        self.versions = np.zeros(self.cpu.shape[0], np.int64)
        self._node_fragmentation = _fragmentation(self._compiled, self.cpu, self.devices, self.model)
        self._dirty = np.zeros(self.cpu.shape[0], np.bool_)
        self._largest = self.devices.max(axis=1)
        self._whole = (self.devices == MILLI).sum(axis=1)
        self._free = self.devices.sum(axis=1)

    @property
    def free_gpu(self) -> Ints:
        """(N,) free thousandths over all each node's devices (kept per changed node, not summed per
        read: binders read it for every task)."""
        return self._free

    @property
    def fragmentation(self) -> Floats:
        """(N,) each node's fragmentation now."""
        if self._dirty.any():
            rows = np.flatnonzero(self._dirty)
            self._node_fragmentation[rows] = _fragmentation(
                self._compiled, self.cpu[rows], self.devices[rows], self.model[rows]
            )
            self._dirty[rows] = False
        return self._node_fragmentation

    @classmethod
    def of(
        cls,
        cpu: Sequence[int],
        memory: Sequence[int],
        devices: Sequence[Sequence[int]],
        models: Sequence[str],
        workload: Workload,
    ) -> GpuView:
        """From per-node lists: free cpu, free memory, free thousandths per device, GPU model ("" none)."""
        count = len(cpu)
        width = max((len(row) for row in devices), default=0) or 1
        table = np.zeros((count, width), np.int64)
        for position, row in enumerate(devices):
            table[position, : len(row)] = row
        names = tuple(sorted({m for m in models if m}))
        codes = {model: code for code, model in enumerate(names)}
        model = np.array([codes.get(m, len(names)) for m in models], np.int64)
        return cls(np.array(cpu, np.int64), np.array(memory, np.int64), table, model, names, workload)

    @property
    def size(self) -> int:
        return int(self.cpu.shape[0])

    def model_code(self, model: str) -> int:
        return self.models.index(model) if model in self.models else len(self.models)

    def admits(self, models: Sequence[str]) -> Bools:
        """(N,) nodes whose GPU model is one of ``models`` (all nodes when empty)."""
        if not models:
            return np.ones(self.size, np.bool_)
        codes = [self.models.index(m) for m in models if m in self.models]
        return np.isin(self.model, np.array(codes, np.int64))

    def fits(self, shape: TaskShape, memory: int) -> Bools:
        """(N,) nodes with the task's cpu, memory and GPU room free now (GPU model not checked)."""
        fits = (self.cpu >= shape.cpu) & (self.memory >= memory)
        if shape.gpus == 1:
            fits &= self._largest >= shape.gpu_milli
        elif shape.gpus and shape.gpu_milli == MILLI:
            fits &= self._whole >= shape.gpus
        elif shape.gpus:
            fits &= (self.devices >= shape.gpu_milli).sum(axis=1) >= shape.gpus
        return fits

    def gradient(self, shape: TaskShape) -> Floats:
        """Per node, how placing a task of ``shape`` there changes its fragmentation: (N, D), one column
        per device, for a GPU-sharing task; (N, 1) otherwise. ``inf`` where the device or node lacks the
        GPU room (cpu and memory are not checked: see :meth:`fits`)."""
        return self._current(shape).values

    def fgd(self, shape: TaskShape) -> tuple[Ints, Ints]:
        """Per node, the FGD score plugin's integer score of placing a task of ``shape`` there (its best
        device's for a sharing task; -1 where the GPU room lacks) and that device (the first best)."""
        current = self._current(shape)
        return current.node_scores, current.devices

    def _current(self, shape: TaskShape) -> _Gradient:
        cached = self._gradients.get(shape)
        if cached is None:
            width = self.devices.shape[1] if shape.shares else 1
            cached = _Gradient(
                np.full(self.size, -1, np.int64),
                np.empty((self.size, width), np.float64),
                np.empty(self.size, np.int64),
                np.empty(self.size, np.int64),
            )
            self._gradients[shape] = cached
        stale = np.flatnonzero(cached.versions != self.versions)
        if stale.size:
            values = self._gradient_rows(shape, stale)
            scores = fgd_scores(values)
            cached.values[stale] = values
            cached.node_scores[stale] = scores.max(axis=1)
            cached.devices[stale] = scores.argmax(axis=1)
            cached.versions[stale] = self.versions[stale]
        return cached

    def _gradient_rows(self, shape: TaskShape, rows: Ints) -> Floats:
        compiled = self._compiled
        cpu = self.cpu[rows] - shape.cpu
        devices = self.devices[rows]
        model = self.model[rows]
        before = self.fragmentation[rows][:, None]
        if shape.shares:
            after = _sharing_fragmentation(compiled, cpu, devices, model, shape.gpu_milli)
            return np.where(devices >= shape.gpu_milli, after - before, _UNFIT)
        taken, had = take_devices(devices, shape)
        after = _fragmentation(compiled, cpu, taken, model)[:, None]
        return np.where(had[:, None], after - before, _UNFIT)

    def place(self, node: int, shape: TaskShape, memory: int, device: int | None = None) -> None:
        """Account a task of ``shape`` on ``node``: on ``device`` when it shares a GPU, else on the
        devices :func:`take_devices` picks."""
        self.cpu[node] -= shape.cpu
        self.memory[node] -= memory
        if shape.gpus:
            if shape.shares:
                assert device is not None and self.devices[node, device] >= shape.gpu_milli
                self.devices[node, device] -= shape.gpu_milli
            else:
                taken, had = take_devices(self.devices[node : node + 1], shape)
                assert bool(had[0]), "the node lacks the devices"
                self.devices[node] = taken[0]
        self._changed(np.array([node], np.int64))

    def update(self, cpu: Ints, memory: Ints, devices: Ints) -> None:
        """Take newly observed free amounts (same nodes, same order): only the rows that differ change."""
        width = self.devices.shape[1]
        if devices.shape[1] != width:
            padded = np.zeros((devices.shape[0], width), np.int64)
            padded[:, : min(width, devices.shape[1])] = devices[:, :width]
            devices = padded
        changed = np.flatnonzero(
            (cpu != self.cpu) | (memory != self.memory) | (devices != self.devices).any(axis=1)
        )
        if changed.size:
            self.cpu[changed] = cpu[changed]
            self.memory[changed] = memory[changed]
            self.devices[changed] = devices[changed]
            self._changed(changed)

    def _changed(self, rows: Ints) -> None:
        self.versions[rows] += 1
        self._dirty[rows] = True
        devices = self.devices[rows]
        self._largest[rows] = devices.max(axis=1)
        self._whole[rows] = (devices == MILLI).sum(axis=1)
        self._free[rows] = devices.sum(axis=1)

    def fragmentation_ratio(self) -> float:
        """Fragmented share of the free GPU capacity (0 when no GPU is free)."""
        free = float(self._free.sum())
        return float(self.fragmentation.sum()) / free if free > 0 else 0.0


def fgd_scores(gradient: Floats) -> Ints:
    """The FGD score plugin's integer node scores, ``int(100 x sigmoid(-gradient / 1000))`` (the
    kube-scheduler's integer score range; ``-1`` where the task cannot go)."""
    finite = np.isfinite(gradient)
    safe = np.where(finite, gradient, 0.0)
    # In the reference's order of operations: sigmoid first, then x 100, then truncation.
    scores = ((1.0 / (1.0 + np.exp(np.clip(safe / MILLI, -700, 700)))) * 100.0).astype(np.int64)
    return np.where(finite, scores, -1)
