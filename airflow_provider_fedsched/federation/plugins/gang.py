"""Gang fit: do all the pods of a gang (a Job's workers, a launcher and its workers) fit real nodes of one
cluster at the same time?

Aggregate free capacity is not enough: 8 free GPUs spread 2 per node cannot hold two 4-GPU workers. Each
pod is packed onto a node, the largest role first, each role's pods onto the nodes with the least room for
them first (best fit, so the larger nodes stay for what follows), charging what it takes. Two points of
the filter order, as for one pod (:mod:`.nodefit`): ``GangCapacity`` among the hard rules (not even empty
nodes could hold the gang: ``UnschedulableAndUnresolvable``) and ``GangFit`` last (the ready nodes have no
room for the whole gang now, counting in-flight reservations: ``Unschedulable``, so the gang waits whole,
never split). Both answer ``Success`` for a request that is not a gang: :mod:`.nodefit` judges one pod;
and :mod:`.nodefit` leaves a gang to these.

Best-fit-decreasing packing is exact for a gang of equal pods (the counts per node add up) and a
heuristic across roles of different shapes, where it may say "wait" for a gang an exhaustive search
would place; it never places a gang that does not fit.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

from airflow_provider_fedsched.federation.framework import (
    SUCCESS,
    ClusterView,
    CycleState,
    DataKey,
    FilterPlugin,
    Status,
    unresolvable,
    unschedulable,
)
from airflow_provider_fedsched.federation.plugins.nodefit import (
    _charge_reservation,
    _charged,
    _in_flight,
    _NodeFitData,
)
from airflow_provider_fedsched.federation.resources import CPU, GPU, MEMORY, ResourceList, format_quantity

if TYPE_CHECKING:
    from airflow_provider_fedsched.federation.columns import Batch
    from airflow_provider_fedsched.federation.request import GangRole, TaskRequest
    from airflow_provider_fedsched.federation.snapshot import ClusterIndex

__all__ = ["GangCapacity", "GangFit", "pack", "pods_fitting"]

_UNLIMITED = 1 << 30


@dataclass(slots=True)
class _Role:
    name: str
    count: int
    items: tuple[tuple[str, int], ...]


@dataclass(slots=True)
class _GangData:
    roles: tuple[_Role, ...]
    """Largest first (GPUs, then cpu, then memory): the hardest to place go first."""
    constraints: _NodeFitData
    """The shared node selector and tolerations (the node-fit plugin's matcher, reused)."""
    smallest: tuple[tuple[str, int], ...]
    """Per resource, the smallest amount any role's pod asks (a node without it can hold no pod)."""
    verdicts: dict[tuple[str, bool], str | None] = field(default_factory=dict)
    """(cluster, now?) -> None when the gang fits, else why not."""


_DATA = DataKey[_GangData]("GangFit")


def _role_size(role: GangRole) -> tuple[int, int, int, int]:
    resources = role.resources
    return (resources.get(GPU, 0), resources.get(CPU, 0), resources.get(MEMORY, 0), sum(resources.values()))


def _how_many(items: tuple[tuple[str, int], ...], free: Mapping[str, int]) -> int:
    most = _UNLIMITED
    for name, amount in items:
        most = min(most, free.get(name, 0) // amount)
        if not most:
            return 0
    return most


def pack(roles: tuple[_Role, ...], nodes: list[ResourceList]) -> tuple[_Role, int, list[ResourceList]] | None:
    """Place every pod of every role on ``nodes`` (free resources, charged in place as pods land).

    None when the whole gang fits; else the first role that does not fit whole, how many of its pods
    did, and what the nodes have left."""
    for role in roles:
        left = role.count
        fitting = [
            (count, position) for position, free in enumerate(nodes) if (count := _how_many(role.items, free))
        ]
        fitting.sort()  # best fit: the nodes with room for the fewest of these pods first
        for count, position in fitting:
            take = min(left, count)
            _charge(nodes[position], role.items, take)
            left -= take
            if not left:
                break
        if left:
            return role, role.count - left, nodes
    return None


def _charge(free: ResourceList, items: tuple[tuple[str, int], ...], pods: int) -> None:
    for name, amount in items:
        free[name] = free.get(name, 0) - amount * pods


def _count_equal(
    role: _Role, nodes: Iterable[Mapping[str, int]]
) -> tuple[_Role, int, list[ResourceList]] | None:
    """One role (equal pods): the counts per node add up, in any order, so stop as soon as they cover
    the gang (walking no further); copy the nodes only to explain a shortfall."""
    placed = 0
    seen: list[tuple[Mapping[str, int], int]] = []
    for free in nodes:
        count = _how_many(role.items, free)
        placed += count
        if placed >= role.count:
            return None
        seen.append((free, count))
    left = []
    for free, count in seen:
        remaining = dict(free)
        _charge(remaining, role.items, count)
        left.append(remaining)
    return role, placed, left


def _shortfall(role: _Role, placed: int, nodes: list[ResourceList], free_word: str) -> str:
    """ "3 of 4 worker pods fit: the largest free node left has 2 nvidia.com/gpu (each asks 4)"."""
    what = f"{placed} of {role.count} {role.name} pod(s) fit"
    if not nodes:
        return f"{what}: no node matches the node selector with only tolerated taints (and, now, is ready)"
    if not role.items:
        return what
    # The scarcest resource: where the roomiest node left is furthest from one more pod.
    name, amount = min(role.items, key=lambda item: max(n.get(item[0], 0) for n in nodes) / item[1])
    largest = max(n.get(name, 0) for n in nodes)
    return (
        f"{what}: the largest {free_word} node left has {format_quantity(name, max(largest, 0))} {name} "
        f"(each {role.name} asks {format_quantity(name, amount)})"
    )


def _eligible(
    data: _GangData,
    index: ClusterIndex,
    adjusted: dict[str, ResourceList] | None,
    now: bool,
    *,
    skip_small: bool,
) -> Iterator[Mapping[str, int]]:
    """The free (now) or allocatable (ever) resources of the nodes the gang's pods may use."""
    constraints = data.constraints
    for position, group in enumerate(index.groups):
        if not constraints.tolerated(group.taints):
            continue
        # A group none of whose nodes could hold even the smallest pod adds nothing.
        most = group.max_free if now and adjusted is None else group.max_allocatable
        if skip_small and not _how_many(data.smallest, most):
            continue
        for node in index.matching(position, constraints.selected).nodes:  # the nodes the selector admits
            if now and not node.schedulable:
                break  # schedulable nodes come first
            if now:
                yield adjusted.get(node.name, node.free) if adjusted else node.free
            else:
                yield node.allocatable


def pods_fitting(request: TaskRequest, cluster: ClusterView) -> int:
    """How many pods of ``request`` (one pod's, not a gang's) the cluster's ready, schedulable nodes have
    room for now, counting its in-flight reservations as the node fit does: the counts per node add up,
    as for a gang of equal pods (:func:`_count_equal`). A divided job's room on a member."""
    index = cluster.index
    if index is None:
        return 0
    items = tuple(sorted(request.resources.items()))
    if not items:
        return _UNLIMITED
    constraints = _NodeFitData(items, request.node_selector, tuple(request.tolerations))
    data = _GangData((_Role("pod", _UNLIMITED, items),), constraints, items)
    adjusted = _charged(constraints, index, cluster) if cluster.reservation else None
    return sum(_how_many(items, free) for free in _eligible(data, index, adjusted, True, skip_small=True))


def _verdict(data: _GangData, cluster: ClusterView, index: ClusterIndex, now: bool) -> str | None:
    key = (cluster.spec.name, now)
    if key in data.verdicts:
        return data.verdicts[key]
    constraints = data.constraints
    adjusted: dict[str, ResourceList] | None = None
    if now and cluster.reservation:
        reservation = _in_flight(cluster)
        adjusted = _charge_reservation(constraints, index, reservation) if reservation else None
    nodes = _eligible(data, index, adjusted, now, skip_small=True)
    if len(data.roles) == 1:
        missing = _count_equal(data.roles[0], nodes)
    else:
        missing = pack(data.roles, [dict(free) for free in nodes])
    if missing is not None and not missing[2]:
        # Every node was set aside as too small: explain with all of them.
        role, placed, _ = missing
        missing = (
            role,
            placed,
            [dict(free) for free in _eligible(data, index, adjusted, now, skip_small=False)],
        )
    verdict = None if missing is None else _shortfall(*missing, free_word="free" if now else "empty")
    data.verdicts[key] = verdict
    return verdict


class _GangPoint(FilterPlugin):
    """Both points share the plugin's data; whichever is prepared first makes it."""

    def prepare(self, state: CycleState) -> None:
        request = state.request
        if not request.gang or _DATA.present(state):
            return
        roles = tuple(
            _Role(role.name, role.count, tuple(sorted(role.resources.items())))
            for role in sorted(request.gang, key=_role_size, reverse=True)
        )
        constraints = _NodeFitData((), request.node_selector, tuple(request.tolerations))
        asked = [dict(role.items) for role in roles]
        common = set.intersection(*(set(items) for items in asked))
        smallest = tuple(sorted((name, min(items[name] for items in asked)) for name in common))
        _DATA.put(state, _GangData(roles, constraints, smallest))

    def filter_all(self, state: CycleState, batch: Batch) -> list[tuple[int, Status]] | None:
        """Over the columnar index: a pod task passes both gang points everywhere; a gang is judged
        cluster by cluster (None)."""
        return None if state.request.gang else []


class GangCapacity(_GangPoint):
    """Could the cluster's nodes, even empty, ever hold the whole gang at once? If not, waiting won't help."""

    name: ClassVar[str] = "GangCapacity"

    def filter(self, state: CycleState, cluster: ClusterView) -> Status:
        index = cluster.index
        if not state.request.gang or index is None or not index.node_count:
            return SUCCESS
        verdict = _verdict(_DATA.get(state), cluster, index, now=False)
        if verdict is None:
            return SUCCESS
        return unresolvable(f"gang never fits, even on empty nodes: {verdict}")


class GangFit(_GangPoint):
    """The ready, schedulable nodes have room for every pod of the gang now (in-flight reservations
    counted): else the gang waits, whole."""

    name: ClassVar[str] = "GangFit"

    def filter(self, state: CycleState, cluster: ClusterView) -> Status:
        if not state.request.gang:
            return SUCCESS
        index = cluster.index
        if index is None:
            return unschedulable("no snapshot of this cluster")
        verdict = _verdict(_DATA.get(state), cluster, index, now=True)
        return SUCCESS if verdict is None else unschedulable(f"gang of {state.request.gang_size}: {verdict}")
