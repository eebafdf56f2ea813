"""Cluster snapshots: what each member cluster's nodes had free when last observed.

Models hold scheduler units (see :mod:`resources`); the snapshot *file* uses human quantities and is read by
:func:`load_snapshots` and written by :func:`dump_snapshots`. Each :class:`ClusterSnapshot` builds a
:class:`ClusterIndex` the first time the engine looks at it, so a decision never re-scans a cluster whose
nodes cannot matter. Snapshots are frozen; build a new one rather than mutating lists in place (the
index would go stale).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator

from airflow_provider_fedsched.federation._loading import SpecError, join_path, spec_error
from airflow_provider_fedsched.federation.documents import load_document
from airflow_provider_fedsched.federation.limits import (
    MAX_CLUSTERS,
    MAX_NODES_PER_CLUSTER,
    MAX_QUANTITY,
    SNAPSHOT_LIMITS,
    check_time,
)
from airflow_provider_fedsched.federation.resources import (
    CPU,
    GPU,
    MEMORY,
    QuantityError,
    ResourceList,
    format_quantity,
    parse_resource_list,
)
from airflow_provider_fedsched.federation.spec import Taint

__all__ = [
    "ClusterIndex",
    "ClusterSnapshot",
    "NodeGpus",
    "NodeGroup",
    "NodeSnapshot",
    "WorkloadShape",
    "dump_snapshots",
    "load_snapshots",
    "summarize",
]

HARD_EFFECTS = frozenset({"NoSchedule", "NoExecute"})


def _non_negative(value: ResourceList) -> ResourceList:
    for name, amount in value.items():
        if amount < 0:
            raise ValueError(f"{name}: {amount} is negative")
        if amount > MAX_QUANTITY:
            raise ValueError(f"{name}: {amount} is beyond Kubernetes' quantity range (2^63-1)")
    return value


_FIELDS_SETS: dict[frozenset[str], set[str]] = {}
"""One set per distinct set of field names given to a :class:`NodeSnapshot` (at most 2^8)."""


MAX_GPU_DEVICES = 64
"""GPU devices one node may report."""
GPU_DEVICE_MILLI = 1000
"""Thousandths of a GPU in one device."""


class NodeGpus(BaseModel):
    """A node's GPU devices, where the member reports how much of each is free (GPU sharing): what the
    ``Fragmentation`` score reads. Without it, whole devices are derived from ``nvidia.com/gpu``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str = ""
    """The GPU model (type), as pods select it."""
    free: Annotated[
        list[Annotated[int, Field(ge=0, le=GPU_DEVICE_MILLI)]], Field(max_length=MAX_GPU_DEVICES)
    ] = Field(default_factory=list)
    """Thousandths of each device that are free (1000: the whole device), in device order."""


class WorkloadShape(BaseModel):
    """How many of a cluster's pods have one shape: the ``Fragmentation`` score's target workload."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    cpu: Annotated[int, Field(ge=0, le=MAX_QUANTITY)]
    """Millicores."""
    gpus: Annotated[int, Field(ge=0, le=MAX_GPU_DEVICES)] = 0
    gpu_milli: Annotated[int, Field(ge=0, le=GPU_DEVICE_MILLI)] = 0
    """Thousandths of each device (1000: whole devices)."""
    models: list[str] = Field(default_factory=list, max_length=MAX_GPU_DEVICES)
    """GPU models the pods may use (empty: any)."""
    count: Annotated[float, Field(gt=0, le=MAX_QUANTITY, allow_inf_nan=False)]


class NodeSnapshot(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    allocatable: ResourceList
    requested: ResourceList = Field(default_factory=dict)
    labels: dict[str, str] = Field(default_factory=dict)
    taints: list[Taint] = Field(default_factory=list)
    ready: bool = True
    unschedulable: bool = False
    gpus: NodeGpus | None = None
    """Per-device GPU room, when the member reports it (GPU sharing)."""

    @field_validator("allocatable", "requested")
    @classmethod
    def _check_non_negative(cls, value: ResourceList) -> ResourceList:
        return _non_negative(value)

    def model_post_init(self, context: Any, /) -> None:
        # pydantic keeps, per instance, the set of the field names it was given: 728 bytes a node, 36 MB of
        # a worker holding 50,000 nodes. A node is frozen, so pydantic never adds to that set in place (a
        # copy copies it first): nodes given the same fields share one.
        names = self.__pydantic_fields_set__
        object.__setattr__(self, "__pydantic_fields_set__", _FIELDS_SETS.setdefault(frozenset(names), names))

    @property
    def free(self) -> ResourceList:
        """Allocatable minus requested, per allocatable resource, never below zero."""
        requested = self.requested
        return {name: max(0, amount - requested.get(name, 0)) for name, amount in self.allocatable.items()}

    @property
    def schedulable(self) -> bool:
        return self.ready and not self.unschedulable

    def hard_taints(self) -> tuple[Taint, ...]:
        """The taints that keep a pod off unless tolerated (PreferNoSchedule only lowers preference)."""
        return tuple(taint for taint in self.taints if taint.effect in HARD_EFFECTS)


@dataclass(slots=True)
class IndexedNode:
    name: str
    labels: dict[str, str]
    allocatable: ResourceList
    free: ResourceList
    schedulable: bool


@dataclass(slots=True)
class NodeGroup:
    """Nodes sharing the same hard taints: tolerating them is decided once per group, not per node."""

    taints: tuple[Taint, ...]
    nodes: list[IndexedNode]
    """Every node, schedulable ones first, each part in descending free cpu (fit checks stop early)."""
    max_allocatable: ResourceList
    max_free: ResourceList
    """Largest free amount per resource over the schedulable nodes."""
    schedulable_count: int
    sorted_free: dict[str, list[int]]
    """Per resource, the schedulable nodes' free amounts in ascending order (bisect counts shortfalls)."""
    sorted_allocatable: dict[str, list[int]]
    """Per resource, every node's allocatable amount in ascending order."""


@dataclass(slots=True)
class NodeSelection:
    """The nodes of one group that a node selector admits, with their maxima (as :class:`NodeGroup`)."""

    nodes: list[IndexedNode]
    """In the group's order: schedulable nodes first, each part in descending free cpu."""
    max_allocatable: ResourceList
    max_free: ResourceList
    """Over the schedulable ones."""


def _maxima(nodes: list[IndexedNode]) -> tuple[ResourceList, ResourceList]:
    """Largest allocatable per resource over ``nodes``, largest free over the schedulable ones."""
    max_allocatable: ResourceList = {}
    max_free: ResourceList = {}
    for node in nodes:
        for name, amount in node.allocatable.items():
            max_allocatable[name] = max(max_allocatable.get(name, 0), amount)
        if node.schedulable:
            for name, amount in node.free.items():
                max_free[name] = max(max_free.get(name, 0), amount)
    return max_allocatable, max_free


@dataclass(slots=True)
class ClusterIndex:
    groups: list[NodeGroup]
    node_count: int
    total_allocatable: ResourceList
    """Over schedulable nodes."""
    total_free: ResourceList
    """Over schedulable nodes."""
    most_free_first: dict[tuple[str, tuple[int, ...], tuple[tuple[str, str], ...]], list[IndexedNode]] = (
        field(default_factory=dict)
    )
    """(resource, groups, node selector) -> those groups' schedulable nodes matching the selector, by
    descending free amount of the resource (then name). Filled on first use by the reservation charge:
    sorted once per snapshot and kind of request, not once per decision."""
    selected: dict[tuple[int, tuple[tuple[str, str], ...]], NodeSelection] = field(default_factory=dict)
    """(group position, node selector) -> the group's nodes matching the selector. Filled on first use by
    the fit checks: a selector is matched against each node once per snapshot, not once per decision."""
    charged: dict[Hashable, tuple[tuple[ResourceList, ...], dict[str, ResourceList]]] = field(
        default_factory=dict
    )
    """(the nodes a kind of request may use, the cluster's scoring strategy) -> the pods in flight
    charged one by one and the nodes' free amounts after them. Kept for the snapshot's life: the next
    decision charges only the pods sent since (the list it is given starts with the ones charged)."""
    columns: object | None = None
    """The nodes as arrays (:class:`~.columns.NodeColumns`), built on first use by the columnar index;
    typed loosely so that this module does not import numpy."""

    def matching(self, position: int, selector: tuple[tuple[str, str], ...]) -> NodeGroup | NodeSelection:
        """The nodes of group ``position`` whose labels match ``selector`` (sorted label pairs); without a
        selector, the group itself."""
        if not selector:
            return self.groups[position]
        key = (position, selector)
        chosen = self.selected.get(key)
        if chosen is None:
            nodes = [n for n in self.groups[position].nodes if all(n.labels.get(k) == v for k, v in selector)]
            chosen = self.selected[key] = NodeSelection(nodes, *_maxima(nodes))
        return chosen

    def by_free(
        self, resource: str, groups: tuple[int, ...], selector: tuple[tuple[str, str], ...]
    ) -> list[IndexedNode]:
        key = (resource, groups, selector)
        order = self.most_free_first.get(key)
        if order is None:
            nodes = [
                node
                for position in groups
                for node in self.groups[position].nodes
                if node.schedulable and all(node.labels.get(k) == v for k, v in selector)
            ]
            order = sorted(nodes, key=lambda n: (-n.free.get(resource, 0), n.name))
            self.most_free_first[key] = order
        return order


def _build_index(nodes: list[NodeSnapshot]) -> ClusterIndex:
    by_taints: dict[tuple[Taint, ...], list[IndexedNode]] = {}
    total_allocatable: ResourceList = {}
    total_free: ResourceList = {}
    for node in nodes:
        free = node.free
        indexed = IndexedNode(node.name, node.labels, node.allocatable, free, node.schedulable)
        by_taints.setdefault(node.hard_taints(), []).append(indexed)
        if node.schedulable:
            for name, amount in node.allocatable.items():
                total_allocatable[name] = total_allocatable.get(name, 0) + amount
            for name, amount in free.items():
                total_free[name] = total_free.get(name, 0) + amount
    groups: list[NodeGroup] = []
    for taints, members in by_taints.items():
        members.sort(key=lambda n: (not n.schedulable, -n.free.get("cpu", 0), n.name))
        max_allocatable, max_free = _maxima(members)
        schedulable = [member for member in members if member.schedulable]
        sorted_free = {name: sorted(m.free.get(name, 0) for m in schedulable) for name in max_allocatable}
        sorted_allocatable = {
            name: sorted(m.allocatable.get(name, 0) for m in members) for name in max_allocatable
        }
        groups.append(
            NodeGroup(
                taints, members, max_allocatable, max_free, len(schedulable), sorted_free, sorted_allocatable
            )
        )
    # Untainted nodes first: most tasks tolerate nothing, and they are where fits are usually found.
    groups.sort(key=lambda g: (len(g.taints), [str(t) for t in g.taints]))
    return ClusterIndex(groups, len(nodes), total_allocatable, total_free)


class ClusterSnapshot(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    cluster: str
    observed_at: datetime
    reachable: bool = True
    reason: str | None = None
    """Why the cluster was unreachable, when it was."""
    nodes: Annotated[list[NodeSnapshot], Field(max_length=MAX_NODES_PER_CLUSTER)] = Field(
        default_factory=list
    )
    quota_headroom: dict[str, ResourceList] = Field(default_factory=dict)
    """Namespace -> what its ResourceQuota still allows; a namespace absent here has no quota."""
    placements: list[str] = Field(default_factory=list)
    """Placement ids (``fedsched.io/placement`` label) of pods bound to a node when observed: an
    in-flight reservation is released once its placement shows up here."""
    tenants: dict[str, ResourceList] = Field(default_factory=dict)
    """Tenant (``fedsched.io/tenant`` label) -> requests of its pods bound to a node, ``pods`` their
    count: the cluster's part of each tenant's federation-wide usage."""
    workload: list[WorkloadShape] = Field(default_factory=list, max_length=MAX_NODES_PER_CLUSTER)
    """The shapes of the pods the cluster runs, counted: the ``Fragmentation`` score's target workload
    (its most common shapes)."""
    missing_permissions: Annotated[list[Annotated[str, Field(max_length=500)]], Field(max_length=32)] = Field(
        default_factory=list
    )
    """What the provider needs in its task namespace there and the member does not grant, one line per
    rule with what is lost without it (``kube/permissions.py``)."""

    _index: ClusterIndex | None = PrivateAttr(default=None)

    @field_validator("observed_at")
    @classmethod
    def _utc(cls, value: datetime) -> datetime:
        # A naive timestamp is taken as UTC: snapshots are written by machines, in UTC.
        aware = value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
        try:
            return check_time(aware, "observed_at")
        except SpecError as exc:
            raise ValueError(str(exc).partition(": ")[2]) from None

    @field_validator("quota_headroom")
    @classmethod
    def _quota_non_negative(cls, value: dict[str, ResourceList]) -> dict[str, ResourceList]:
        for headroom in value.values():
            _non_negative(headroom)
        return value

    @property
    def index(self) -> ClusterIndex:
        """Per-cluster precomputation for the fit checks, built once on first use."""
        # Read the private slot directly: pydantic's attribute hook costs microseconds per access, which
        # adds up over 1,000 clusters per decision.
        private = self.__pydantic_private__
        index: ClusterIndex | None = private.get("_index") if private is not None else None
        if index is None:
            index = _build_index(self.nodes)
            self._index = index
        return index

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> ClusterSnapshot:
        """A copy; with ``update`` the copy rebuilds its own index (the nodes may differ)."""
        copy = super().model_copy(update=update, deep=deep)
        if update:
            copy._index = None
        return copy

    def age_seconds(self, now: datetime) -> float:
        return (now - self.observed_at).total_seconds()


def _parse_quantities(values: Any, path: str) -> ResourceList:
    if values is None:
        return {}
    if not isinstance(values, Mapping):
        raise SpecError(f"{path}: expected a mapping of resource name to quantity")
    try:
        return parse_resource_list(values)
    except QuantityError as exc:
        # parse_resource_list prefixes the resource name: "cpu: '-1' is negative".
        name, _, message = str(exc).partition(": ")
        raise SpecError(f"{path}.{name}: {message}") from None


def _snapshot_from_file(raw: Any, path: str) -> ClusterSnapshot:
    if not isinstance(raw, Mapping):
        raise SpecError(f"{path}: expected a mapping")
    document = dict(raw)
    nodes = document.get("nodes") or []
    if not isinstance(nodes, list):
        raise SpecError(f"{path}.nodes: expected a list")
    if len(nodes) > MAX_NODES_PER_CLUSTER:
        raise SpecError(
            f"{path}.nodes: {len(nodes):,} nodes, more than the {MAX_NODES_PER_CLUSTER:,} allowed"
        )
    parsed_nodes = []
    for position, node in enumerate(nodes):
        node_path = f"{path}.nodes[{position}]"
        if not isinstance(node, Mapping):
            raise SpecError(f"{node_path}: expected a mapping")
        node = dict(node)
        for key in ("allocatable", "requested"):
            if key in node:
                node[key] = _parse_quantities(node[key], f"{node_path}.{key}")
        parsed_nodes.append(node)
    document["nodes"] = parsed_nodes
    quota = document.get("quota_headroom") or {}
    if not isinstance(quota, Mapping):
        raise SpecError(f"{path}.quota_headroom: expected a mapping of namespace to resources")
    document["quota_headroom"] = {
        str(ns): _parse_quantities(values, f"{path}.quota_headroom.{ns}") for ns, values in quota.items()
    }
    tenants = document.get("tenants") or {}
    if not isinstance(tenants, Mapping):
        raise SpecError(f"{path}.tenants: expected a mapping of tenant to resources")
    document["tenants"] = {
        str(name): _parse_quantities(values, f"{path}.tenants.{name}") for name, values in tenants.items()
    }
    try:
        return ClusterSnapshot.model_validate(document)
    except ValidationError as exc:
        raise spec_error(exc, path) from None


def load_snapshots(
    source: str | Path | Mapping[str, Any],
) -> dict[str, ClusterSnapshot]:
    """Read a snapshot file (path, YAML/JSON text or mapping with a ``clusters`` list), keyed by cluster."""
    document = load_document(source, "snapshot", SNAPSHOT_LIMITS)
    unknown = sorted(set(document) - {"clusters"})
    if unknown:
        raise SpecError(f"{unknown[0]}: unknown key (a snapshot file has only 'clusters')")
    clusters = document.get("clusters") or []
    if not isinstance(clusters, list):
        raise SpecError("clusters: expected a list")
    if len(clusters) > MAX_CLUSTERS:
        raise SpecError(f"clusters: {len(clusters):,} snapshots, more than the {MAX_CLUSTERS:,} allowed")
    snapshots: dict[str, ClusterSnapshot] = {}
    for position, raw in enumerate(clusters):
        path = f"clusters[{position}]"
        snapshot = _snapshot_from_file(raw, path)
        if snapshot.cluster in snapshots:
            raise SpecError(
                f"{join_path(path, 'cluster')}: duplicate snapshot for cluster '{snapshot.cluster}'"
            )
        snapshots[snapshot.cluster] = snapshot
    return snapshots


def _format_resources(values: Mapping[str, int]) -> dict[str, str]:
    return {name: format_quantity(name, amount) for name, amount in values.items()}


def dump_snapshots(snapshots: Mapping[str, ClusterSnapshot]) -> dict[str, Any]:
    """The snapshot file document (human quantities); :func:`load_snapshots` reads it back unchanged."""
    clusters = []
    for name in sorted(snapshots):
        snapshot = snapshots[name]
        entry: dict[str, Any] = {
            "cluster": snapshot.cluster,
            "observed_at": snapshot.observed_at.isoformat(),
            "reachable": snapshot.reachable,
        }
        if snapshot.reason is not None:
            entry["reason"] = snapshot.reason
        entry["nodes"] = [
            {
                "name": node.name,
                "allocatable": _format_resources(node.allocatable),
                "requested": _format_resources(node.requested),
                "labels": dict(node.labels),
                "taints": [taint.model_dump() for taint in node.taints],
                "ready": node.ready,
                "unschedulable": node.unschedulable,
                **({"gpus": node.gpus.model_dump()} if node.gpus is not None else {}),
            }
            for node in snapshot.nodes
        ]
        if snapshot.quota_headroom:
            entry["quota_headroom"] = {
                ns: _format_resources(values) for ns, values in snapshot.quota_headroom.items()
            }
        if snapshot.tenants:
            entry["tenants"] = {name: _format_resources(v) for name, v in snapshot.tenants.items()}
        if snapshot.workload:
            entry["workload"] = [shape.model_dump() for shape in snapshot.workload]
        clusters.append(entry)
    return {"clusters": clusters}


def _largest_free_node(snapshot: ClusterSnapshot) -> str:
    best = max(
        (node for node in snapshot.nodes if node.schedulable),
        key=lambda node: (node.free.get(GPU, 0), node.free.get(CPU, 0), node.free.get(MEMORY, 0)),
        default=None,
    )
    if best is None:
        return "-"
    free = best.free
    parts = [f"{format_quantity(r, free[r])} {r}" for r in (CPU, MEMORY, GPU) if free.get(r)]
    return f"{best.name} ({', '.join(parts) or 'nothing free'})"


def summarize(snapshot: ClusterSnapshot, now: datetime) -> dict[str, Any]:
    """One cluster's headline numbers (free/total over ready, schedulable nodes), in human quantities:
    what ``fedsched snapshot`` and the Federation page show."""
    index = snapshot.index
    return {
        "cluster": snapshot.cluster,
        "reachable": snapshot.reachable,
        "reason": snapshot.reason,
        "age_seconds": round(snapshot.age_seconds(now), 3),
        "nodes": len(snapshot.nodes),
        "ready_nodes": sum(1 for node in snapshot.nodes if node.schedulable),
        "free": {r: format_quantity(r, a) for r, a in sorted(index.total_free.items())},
        "total": {r: format_quantity(r, a) for r, a in sorted(index.total_allocatable.items())},
        "largest_free_node": _largest_free_node(snapshot),
        "missing_permissions": list(snapshot.missing_permissions),
    }
