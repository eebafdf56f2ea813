"""The ``Fragmentation`` score: place GPU work where it fragments the GPUs least, and name the node.

For each candidate cluster, every node where the task fits now (cpu, memory, GPU devices with room, node
selector, tolerated taints, ready) is scored with the *fragmentation gradient* of Fragmentation Gradient
Descent (Weng et al., USENIX ATC '23; :mod:`federation.fragmentation`): how much placing the task there
(on the device where it fits best, for a task sharing a GPU) grows the GPU capacity that the cluster's
target workload could not use. The cluster's raw score is its best node's FGD score,
``100 x sigmoid(-gradient / 1000)`` (50: the placement fragments nothing; above 50 it removes
fragments), used as is (0..100). That node is the decision's hint (``preferred_node``): the operator asks
the member's scheduler for it as a *preferred* node affinity, so the member still decides. Between nodes
with the same integer score, the first by name (the reference scheduler's tie-break: a fixed order packs
tied tasks instead of spreading them).

What it reads from a snapshot: each node's free cpu and memory, its GPU devices (``NodeSnapshot.gpus``:
per-device free thousandths and the GPU model, where the member reports GPU sharing; else whole devices
from ``nvidia.com/gpu`` and the model from the ``nvidia.com/gpu.product`` label) and the cluster's
``workload`` (the shapes of the pods it runs: the target workload is the most common ones covering 95 %;
without one, the task's own shape). The task asks for GPUs as ``nvidia.com/gpu`` (whole devices) or
``fedsched.io/gpu-milli`` (thousandths: below 1000 a share of one device). Pods in flight to a cluster
(passed pod by pod) are charged first, each where this score would have hinted it.

A task without GPU still gets a gradient against a reported workload (its cpu may leave a GPU node's
GPUs without cpu for the workload). A gang, a task without GPU where the snapshot reports no workload
(its own shape, using no GPU, fragments nothing), or a cluster whose snapshot tells no GPU devices (no
GPUs, or only a ``fedsched.io/gpu-milli`` total per node) scores 50 and gets no hint.

The gradients are computed with numpy over all of a cluster's nodes and kept between decisions, per
cluster, for the nodes that did not change (a pure cache: a decision's result is the same with or
without it; the tests check so). Over the columnar index (``score_all``), the clusters with nothing to
measure are 50 at once and the rest scored one by one, as :meth:`Fragmentation.score` does.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

from airflow_provider_fedsched.federation.framework import ClusterView, CycleState, DataKey, ScorePlugin
from airflow_provider_fedsched.federation.request import Toleration, tolerates_all
from airflow_provider_fedsched.federation.resources import CPU, GPU, GPU_MILLI, MEMORY, ResourceList

if TYPE_CHECKING:
    from airflow_provider_fedsched.federation.columns import Batch, FederationColumns, Floats, Positions
    from airflow_provider_fedsched.federation.fragmentation import (
        Bools,
        GpuView,
        Ints,
        TaskShape,
        Workload,
    )
    from airflow_provider_fedsched.federation.snapshot import (
        ClusterIndex,
        ClusterSnapshot,
        NodeSnapshot,
        WorkloadShape,
    )

__all__ = ["MODEL_LABEL", "NEUTRAL", "Fragmentation", "forget", "request_shape"]

MODEL_LABEL = "nvidia.com/gpu.product"
"""The node label naming its GPU model when the snapshot has no per-device report (GPU feature
discovery's label)."""
NEUTRAL = 50.0
"""The score of a placement that changes no fragmentation (sigmoid(0) x 100)."""
_MILLI = 1000
_DIGITS = 6
"""Gradients are compared rounded to a millionth of a thousandth: float noise never decides a tie."""


def request_shape(resources: Mapping[str, int]) -> TaskShape:
    """The task shape of a request: ``nvidia.com/gpu`` whole devices, else ``fedsched.io/gpu-milli``
    thousandths (below 1000: a share of one device; else whole devices, ``ceil(t / 1000)`` of ``t /
    devices`` each)."""
    from airflow_provider_fedsched.federation.fragmentation import TaskShape

    cpu, devices = resources.get(CPU, 0), _gpu_devices(resources)
    if not devices:
        return TaskShape(cpu)
    if resources.get(GPU, 0):
        return TaskShape(cpu, devices, _MILLI)
    return TaskShape(cpu, devices, resources.get(GPU_MILLI, 0) // devices)


def _gpu_devices(resources: Mapping[str, int]) -> int:
    """The GPU devices a request takes (:func:`request_shape`'s ``gpus``), without building its shape:
    that needs :mod:`federation.fragmentation`, and with it numpy, which a decision with nothing to
    measure never loads."""
    return resources.get(GPU, 0) or math.ceil(resources.get(GPU_MILLI, 0) / _MILLI)


@dataclass(slots=True)
class _Columns:
    """One snapshot's nodes as the score reads them (built once per snapshot object)."""

    nodes: list[NodeSnapshot]
    names: tuple[str, ...]
    cpu: Ints
    memory: Ints
    devices: Ints
    """(N, D) free thousandths per device, 0 past a node's own devices."""
    models: tuple[str, ...]
    rank: Ints
    """Each node's place in name order (ties go to the first)."""
    masks: dict[tuple[object, ...], Bools] = field(default_factory=dict)
    """(node selector, tolerations) -> the ready nodes it admits."""


def _devices(node: NodeSnapshot) -> tuple[list[int], str]:
    """A node's free thousandths per GPU device and its GPU model."""
    if node.gpus is not None:
        return node.gpus.free, node.gpus.model
    total = node.allocatable.get(GPU, 0)
    free = max(0, total - node.requested.get(GPU, 0))
    return [_MILLI] * free + [0] * (total - free), node.labels.get(MODEL_LABEL, "") if total else ""


def _free(node: NodeSnapshot, resource: str) -> int:
    return max(0, node.allocatable.get(resource, 0) - node.requested.get(resource, 0))


def _admitted(
    node: NodeSnapshot, selector: tuple[tuple[str, str], ...], tolerations: Sequence[Toleration]
) -> bool:
    return (
        node.schedulable
        and all(node.labels.get(k) == v for k, v in selector)
        and tolerates_all(tolerations, node.hard_taints())
    )


def _columns(snapshot: ClusterSnapshot, previous: _Columns | None) -> _Columns:
    """The snapshot's columns; from ``previous`` (an earlier snapshot of the cluster) where the node
    objects are the same ones (a collector that keeps unchanged nodes' objects pays only for the rest)."""
    import numpy as np

    nodes = list(snapshot.nodes)
    names = tuple(node.name for node in nodes)
    if previous is not None and previous.names == names:
        changed = [
            i for i, (was, now) in enumerate(zip(previous.nodes, nodes, strict=True)) if was is not now
        ]
        rows = [_devices(nodes[i]) for i in changed]
        width = previous.devices.shape[1]
        if [model for _, model in rows] == [previous.models[i] for i in changed] and all(
            len(row) <= width for row, _ in rows
        ):
            cpu, memory, devices = previous.cpu.copy(), previous.memory.copy(), previous.devices.copy()
            masks = {key: mask.copy() for key, mask in previous.masks.items()}
            for position, (row, _) in zip(changed, rows, strict=True):
                node = nodes[position]
                cpu[position], memory[position] = _free(node, CPU), _free(node, MEMORY)
                devices[position] = 0
                devices[position, : len(row)] = row
                for (selector, tolerations), mask in masks.items():
                    mask[position] = _admitted(node, selector, tolerations)  # type: ignore[arg-type]
            return _Columns(nodes, names, cpu, memory, devices, previous.models, previous.rank, masks)
    rows = [_devices(node) for node in nodes]
    width = max((len(row) for row, _ in rows), default=0) or 1
    table = np.zeros((len(nodes), width), np.int64)
    for position, (row, _) in enumerate(rows):
        table[position, : len(row)] = row
    return _Columns(
        nodes,
        names,
        np.array([_free(node, CPU) for node in nodes], np.int64),
        np.array([_free(node, MEMORY) for node in nodes], np.int64),
        table,
        tuple(model for _, model in rows),
        np.argsort(np.argsort(np.array(names, dtype=object), kind="stable")).astype(np.int64),
    )


@dataclass(slots=True)
class _Synced:
    """A cluster's last view: the snapshot it was built from, the pods in flight charged on top of it."""

    snapshot: ClusterSnapshot
    columns: _Columns
    workload: Workload
    view: GpuView
    charged: tuple[ResourceList, ...] = ()
    admitted: dict[tuple[str, ...], Bools] = field(default_factory=dict)
    best: dict[tuple[object, ...], tuple[int, int | None, int] | None] = field(default_factory=dict)
    """(shape, memory, node selector, tolerations) -> :func:`_best` on this view as it stands: decisions
    between two changes of the cluster (a snapshot, a pod in flight) ask for the same shapes again."""

    def admits(self, models: tuple[str, ...]) -> Bools:
        known = self.admitted.get(models)
        if known is None:
            known = self.admitted[models] = self.view.admits(models)
        return known


_LOCK = threading.Lock()
_VIEWS: dict[tuple[str, TaskShape | None], _Synced] = {}
"""(cluster, the task's shape where it is the target workload, else None) -> its last view."""
_WORKLOADS: dict[int, tuple[object, Workload]] = {}
_OWN: dict[TaskShape, Workload] = {}
_REPORTS: dict[str, tuple[ClusterSnapshot, bool]] = {}
"""Cluster -> (its last snapshot, whether that snapshot reports GPU devices per node)."""
_MAX_CACHED = 100_000


def forget() -> None:
    """Drop the cached views (tests; a process that no longer decides)."""
    with _LOCK:
        _VIEWS.clear()
        _WORKLOADS.clear()
        _OWN.clear()
        _REPORTS.clear()
        _FLAGS.clear()


def _workload(shapes: Sequence[WorkloadShape], own: TaskShape) -> Workload:
    from airflow_provider_fedsched.federation.fragmentation import TaskShape, Workload

    if not shapes:
        workload = _OWN.get(own)
        if workload is None:
            if len(_OWN) > 64:
                _OWN.clear()
            workload = _OWN[own] = Workload((own,), (1.0,))
        return workload
    known = _WORKLOADS.get(id(shapes))
    if known is not None and known[0] is shapes:
        return known[1]
    counts: dict[TaskShape, float] = {}
    for entry in shapes:
        shape = TaskShape(entry.cpu, entry.gpus, entry.gpu_milli if entry.gpus else 0, tuple(entry.models))
        counts[shape] = counts.get(shape, 0.0) + entry.count
    workload = Workload.typical(counts)
    if len(_WORKLOADS) > 64:
        _WORKLOADS.clear()
    _WORKLOADS[id(shapes)] = (shapes, workload)
    return workload


def _synced(cluster: ClusterView, snapshot: ClusterSnapshot, own: TaskShape) -> _Synced:
    """The cluster's view (snapshot, then its pods in flight), reusing the last one's unchanged nodes."""
    from airflow_provider_fedsched.federation.fragmentation import GpuView

    key = (cluster.spec.name, None if snapshot.workload else own)
    workload = _workload(snapshot.workload, own)
    entry = _VIEWS.get(key)
    pods = cluster.in_flight
    if (
        entry is not None
        and entry.snapshot is snapshot
        and entry.workload is workload
        and pods[: len(entry.charged)] == entry.charged
    ):
        pods = pods[len(entry.charged) :]
    else:
        if entry is not None and entry.snapshot is snapshot:
            columns = entry.columns
        else:
            columns = _columns(snapshot, entry.columns if entry is not None else None)
        if (
            entry is not None
            and entry.workload is workload
            and entry.columns.names == columns.names
            and entry.columns.models == columns.models
            and entry.columns.devices.shape == columns.devices.shape
        ):
            entry.view.update(columns.cpu, columns.memory, columns.devices)
            entry.snapshot, entry.columns, entry.charged = snapshot, columns, ()
            entry.best.clear()
        else:
            view = GpuView(
                columns.cpu.copy(),
                columns.memory.copy(),
                columns.devices.copy(),
                *_model_codes(columns.models),
                workload,
            )
            if len(_VIEWS) > _MAX_CACHED:
                _VIEWS.clear()
            entry = _VIEWS[key] = _Synced(snapshot, columns, workload, view)
    if pods:
        entry.best.clear()
    for pod in pods:
        _charge(entry, pod)
    entry.charged = tuple(cluster.in_flight)
    return entry


def _model_codes(models: Sequence[str]) -> tuple[Ints, tuple[str, ...]]:
    import numpy as np

    names = tuple(sorted({model for model in models if model}))
    codes = {model: code for code, model in enumerate(names)}
    return np.array([codes.get(model, len(names)) for model in models], np.int64), names


def _static(
    columns: _Columns, selector: tuple[tuple[str, str], ...], tolerations: tuple[Toleration, ...]
) -> Bools:
    """Nodes that are ready, match the node selector and have only tolerated taints."""
    import numpy as np

    key = (selector, tolerations)
    mask = columns.masks.get(key)
    if mask is None:
        mask = columns.masks[key] = np.fromiter(
            (_admitted(node, selector, tolerations) for node in columns.nodes), np.bool_, len(columns.nodes)
        )
    return mask


def _best(
    entry: _Synced, shape: TaskShape, memory: int, allowed: Bools | None
) -> tuple[int, int | None, int] | None:
    """Where the task fits (and ``allowed``), the node with the highest FGD score, ties to the first by
    name, as FGD's scheduler breaks them (a fixed order packs tied tasks instead of spreading them); on
    the device with the highest score for a sharing task; with that score."""
    import numpy as np

    view = entry.view
    fits = view.fits(shape, memory)
    if shape.gpus and shape.models:
        fits &= entry.admits(shape.models)
    if allowed is not None:
        fits &= allowed
    if not fits.any():
        return None
    scores, devices = view.fgd(shape)
    per_node = np.where(fits, scores, -1)
    top = int(per_node.max())
    if top < 0:
        return None
    node = int(np.argmin(np.where(per_node == top, entry.columns.rank, len(per_node))))
    return node, int(devices[node]) if shape.shares else None, top


def _charge(entry: _Synced, pod: ResourceList) -> None:
    """A pod in flight: where this score would have hinted it (its selector is not known here)."""
    shape = request_shape(pod)
    memory = pod.get(MEMORY, 0)
    best = _best(entry, shape, memory, None)
    if best is not None:
        node, device, _ = best
        entry.view.place(node, shape, memory, device)


def _measurable(name: str, snapshot: ClusterSnapshot, index: ClusterIndex | None, gpus: int) -> bool:
    """Something to measure: the snapshot tells the cluster's GPU devices (nodes allocate
    ``nvidia.com/gpu``, whole devices, or report ``gpus``), and the task asks for GPUs or the snapshot
    reports a workload its cpu could get in the way of. Otherwise (no GPUs, only ``fedsched.io/gpu-milli``
    totals, or a task without GPU measured against its own shape, which uses no GPU) the score is neutral,
    and no numpy is loaded for it."""
    return bool(snapshot.nodes) and bool(gpus or snapshot.workload) and _tells_devices(name, snapshot, index)


def _tells_devices(name: str, snapshot: ClusterSnapshot, index: ClusterIndex | None) -> bool:
    if index is not None and index.total_allocatable.get(GPU, 0):
        return True
    known = _REPORTS.get(name)
    if known is None or known[0] is not snapshot:
        if len(_REPORTS) > _MAX_CACHED:
            _REPORTS.clear()
        known = _REPORTS[name] = (snapshot, any(node.gpus is not None for node in snapshot.nodes))
    return known[1]


_FLAGS: dict[int, tuple[object, Bools, Bools]] = {}


def _flags(columns: FederationColumns) -> tuple[Bools, Bools]:
    """Per cluster of these columns (built once per set of snapshot objects): whether its snapshot has
    nodes and tells GPU devices, and whether it reports a workload."""
    import numpy as np

    with _LOCK:
        known = _FLAGS.get(id(columns))
        if known is not None and known[0] is columns:
            return known[1], known[2]
        names, snapshots, indexes = columns.spec.names, columns.snapshots, columns.indexes
        devices = np.array(
            [
                snapshot is not None and bool(snapshot.nodes) and _tells_devices(name, snapshot, index)
                for name, snapshot, index in zip(names, snapshots, indexes, strict=True)
            ],
            np.bool_,
        )
        workload = np.array([s is not None and bool(s.workload) for s in snapshots], np.bool_)
        if len(_FLAGS) > 8:
            _FLAGS.clear()
        _FLAGS[id(columns)] = (columns, devices, workload)
        return devices, workload


@dataclass(slots=True)
class _FragmentationData:
    resources: Mapping[str, int] | None
    """The request's; None: nothing to score (a gang)."""
    gpus: int
    memory: int
    selector: tuple[tuple[str, str], ...]
    tolerations: tuple[Toleration, ...]
    hints: dict[str, str] = field(default_factory=dict)
    built: TaskShape | None = None

    def shape(self) -> TaskShape:
        """The request's shape, built when a cluster first has something to measure."""
        if self.built is None:
            assert self.resources is not None
            self.built = request_shape(self.resources)
        return self.built


_DATA = DataKey[_FragmentationData]("Fragmentation")


class Fragmentation(ScorePlugin):
    name: ClassVar[str] = "Fragmentation"

    def prepare(self, state: CycleState) -> None:
        request = state.request
        _DATA.put(
            state,
            _FragmentationData(
                None if request.gang else request.resources,
                _gpu_devices(request.resources),
                request.resources.get(MEMORY, 0),
                tuple(sorted(request.node_selector.items())),
                tuple(request.tolerations),
            ),
        )

    def score(self, state: CycleState, cluster: ClusterView) -> float:
        data: _FragmentationData = state.data[_DATA.name]
        snapshot = cluster.snapshot
        if data.resources is None or snapshot is None:
            return NEUTRAL
        with _LOCK:
            if not _measurable(cluster.spec.name, snapshot, cluster.index, data.gpus):
                return NEUTRAL
            shape = data.shape()
            entry = _synced(cluster, snapshot, shape)
            key = (shape, data.memory, data.selector, data.tolerations)
            if key in entry.best:
                best = entry.best[key]
            else:
                allowed = _static(entry.columns, data.selector, data.tolerations)
                best = entry.best[key] = _best(entry, shape, data.memory, allowed)
            if best is None:
                return 0.0
            node, _, score = best
            data.hints[cluster.spec.name] = entry.columns.names[node]
        return float(score)

    def normalize(self, raw: Sequence[float]) -> list[float]:
        return [min(100.0, max(0.0, value)) for value in raw]

    def score_all(self, state: CycleState, batch: Batch, positions: Positions) -> Floats:
        """50 for the clusters with nothing to measure (:func:`_measurable`, as columns), without a view
        each; the rest by :meth:`score`."""
        import numpy as np

        data: _FragmentationData = state.data[_DATA.name]
        raw = np.full(len(positions), NEUTRAL, np.float64)
        if data.resources is None:
            return raw
        devices, workload = _flags(batch.columns)
        measured = devices[positions] if data.gpus else devices[positions] & workload[positions]
        for i in np.flatnonzero(measured).tolist():
            raw[i] = self.score(state, batch.view(int(positions[i])))
        return raw

    def normalize_all(self, raw: Floats) -> Floats:
        import numpy as np

        return np.minimum(100.0, np.maximum(0.0, raw))

    def hint(self, state: CycleState, cluster: str) -> str | None:
        data: _FragmentationData = state.data[_DATA.name]
        return data.hints.get(cluster)
