"""Node fit: could any node of the cluster ever hold the pod, and does one have room for it now?

One walk of the cluster's index answers both, at two points of the filter order: ``Capacity`` among the
hard rules (no node, even empty, could ever fit: ``UnschedulableAndUnresolvable``, so waiting will not
help) and ``NodeFit`` last (no ready node has room now, counting in-flight reservations:
``Unschedulable``). The walk's result is kept per cluster in this plugin's data until ``NodeFit`` asks.
A node fits when it matches the node selector, has only tolerated ``NoSchedule``/``NoExecute`` taints and
has the whole request free; the reason counts nodes the way the kube-scheduler does
("0/3 nodes fit: 3 Insufficient nvidia.com/gpu").
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterable, Mapping
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
from airflow_provider_fedsched.federation.request import Toleration, tolerates_all
from airflow_provider_fedsched.federation.resources import ResourceList, format_quantity

if TYPE_CHECKING:
    from airflow_provider_fedsched.federation.columns import Batch, Bools, Ints
    from airflow_provider_fedsched.federation.snapshot import ClusterIndex, IndexedNode
    from airflow_provider_fedsched.federation.spec import Taint

__all__ = ["Capacity", "NodeFit"]


# What one walk of a cluster's index found.
_NEVER = 0
"""No node, even empty, could hold the pod."""
_LATER = 1
"""Some node could, but no ready, schedulable node has room now."""
_NOW = 2
"""Some ready, schedulable node has room now."""


@dataclass(slots=True)
class _NodeFitData:
    items: tuple[tuple[str, int], ...]
    selector: Mapping[str, str]
    tolerations: tuple[Toleration, ...]
    tolerated_taints: dict[tuple[Taint, ...], bool] = field(default_factory=dict)
    walks: dict[str, int] = field(default_factory=dict)
    """Cluster -> what the one walk of its index found, for the point that asks second."""
    selected: tuple[tuple[str, str], ...] = field(init=False, default=())
    """The node selector as sorted pairs: the key of the index's per-selector node lists."""
    columns: _ColumnarFit | None = None
    """Over the columnar index (:meth:`columnar`): which clusters have a node with room, and could ever."""

    def __post_init__(self) -> None:
        self.selected = tuple(sorted(self.selector.items())) if self.selector else ()

    def tolerated(self, taints: tuple[Taint, ...]) -> bool:
        if not taints:
            return True
        known = self.tolerated_taints.get(taints)
        if known is None:
            known = self.tolerated_taints[taints] = tolerates_all(self.tolerations, taints)
        return known

    def walk(self, cluster: ClusterView, index: ClusterIndex) -> int:
        name = cluster.spec.name
        found = self.walks.get(name)
        if found is None:
            found = self.walks[name] = _walk(self, cluster, index)
        return found

    def columnar(self, batch: Batch) -> _ColumnarFit:
        """The walk's answers for every cluster at once, from the columns (made by whichever point asks
        first; in-flight reservations not counted: a cluster with some is walked)."""
        if self.columns is None:
            columns = batch.columns
            tolerated = [n for n, taints in enumerate(columns.taint_sets) if self.tolerated(taints)]
            admitted = columns.taint_mask(tolerated)
            if self.selected:
                matching = columns.matching(self.selected)
                admitted = matching if admitted is None else admitted & matching
            self.columns = _ColumnarFit(
                tolerated, admitted, _clusters_fitting(self.items, batch, tolerated, admitted)
            )
        return self.columns


@dataclass(slots=True)
class _ColumnarFit:
    tolerated: list[int]
    """The federation's node taint sets (their numbers in the columns) the request tolerates."""
    admitted: Bools | None
    """The nodes of those taint sets that match the node selector (None: every node)."""
    now: Bools
    """Per cluster: a schedulable admitted node has the request free (reservations not counted)."""
    ever: Bools | None = None
    """Per cluster: an admitted node could hold the request empty (computed when asked)."""


def _clusters_fitting(
    items: tuple[tuple[str, int], ...], batch: Batch, tolerated: list[int], admitted: Bools | None
) -> Bools:
    """Per cluster, whether a schedulable admitted node has ``items`` free: the clusters the per-cluster
    maxima already rule out are not looked at node by node (nor at all when none is left)."""
    columns = batch.columns
    maybe = columns.maxima_fit(items, tolerated, free=True)
    if not maybe.any():
        return maybe
    return maybe & columns.per_cluster(columns.nodes_fitting(items, True, admitted))


_DATA = DataKey[_NodeFitData]("NodeFit")


def _fits(items: tuple[tuple[str, int], ...], free: Mapping[str, int]) -> bool:
    # A plain loop: this is the hot path, and all() over a generator costs about twice as much here.
    for name, amount in items:  # noqa: SIM110
        if amount > free.get(name, 0):
            return False
    return True


def _charge_reservation(
    data: _NodeFitData, index: ClusterIndex, reservation: ResourceList
) -> dict[str, ResourceList]:
    """Node name -> free after charging the in-flight reservation.

    Where the in-flight pods land is unknown, so each resource is charged to the nodes this request could
    use (tolerated taints, matching node selector) with the most of it free first: the pessimistic guess
    for the next pod (better to wait than to leave a pod Pending). Charging nodes the request cannot use
    (say, in-flight CPU on tainted GPU nodes for a CPU pod) would hide the pods that took its room.
    """
    adjusted: dict[str, ResourceList] = {}
    groups = tuple(position for position, group in enumerate(index.groups) if data.tolerated(group.taints))
    for name, amount in reservation.items():
        left = amount
        for node in index.by_free(name, groups, data.selected):
            if left <= 0:
                break
            free = adjusted.setdefault(node.name, dict(node.free))
            take = min(left, free.get(name, 0))
            if take > 0:
                free[name] -= take
                left -= take
    return adjusted


def _charge_pods(data: _NodeFitData, index: ClusterIndex, cluster: ClusterView) -> dict[str, ResourceList]:
    """Node name -> free after charging the pods in flight one by one, each whole (cpu and memory with
    its GPU) to the node the cluster's scheduler would give it (``scoring_strategy``) among the nodes this
    request could use; a pod no such node holds stays pending and takes nothing. The same pessimism as
    :func:`_charge_reservation` for where those pods may go, without losing which node each one took.
    """
    groups = tuple(position for position, group in enumerate(index.groups) if data.tolerated(group.taints))
    strategy = cluster.spec.scoring_strategy
    key = (groups, data.selected, strategy)
    pods = cluster.in_flight
    charged = index.charged.get(key)
    if charged is not None and charged[0] == pods[: len(charged[0])]:
        done, adjusted = charged
    else:
        done, adjusted = (), {}
    if len(done) < len(pods):
        nodes = index.by_free("cpu", groups, data.selected)
        for pod in pods[len(done) :]:
            node = _landing(pod, nodes, adjusted, strategy.type == "MostAllocated", strategy.resources)
            if node is not None:
                free = adjusted.setdefault(node.name, dict(node.free))
                for name, amount in pod.items():
                    free[name] = free.get(name, 0) - amount
        index.charged[key] = (pods, adjusted)
    return adjusted


_DEFAULT_SCORED = ("cpu", "memory")


def _landing(
    pod: ResourceList,
    nodes: list[IndexedNode],
    adjusted: Mapping[str, ResourceList],
    packs: bool,
    resources: tuple[str, ...],
) -> IndexedNode | None:
    """The node the kube-scheduler's ``NodeResourcesFit`` would score highest for ``pod`` among ``nodes``
    that fit it (ties: the first in ``nodes``)."""
    scored = tuple(name for name in resources if pod.get(name, 0) or name in _DEFAULT_SCORED)
    if not scored:
        scored, packs = _DEFAULT_SCORED, False
    items = tuple((name, amount) for name, amount in pod.items() if amount > 0)
    best: IndexedNode | None = None
    best_score = -1.0
    for node in nodes:
        free = adjusted.get(node.name) or node.free
        for name, amount in items:  # _fits, inlined: this loop runs once per node per pod in flight
            if amount > free.get(name, 0):
                break
        else:
            allocatable = node.allocatable
            share = 0.0
            for name in scored:
                total = allocatable.get(name, 0)
                if total > 0:
                    share += (free.get(name, 0) - pod.get(name, 0)) / total
            score = -share if packs else share
            if best is None or score > best_score:
                best, best_score = node, score
    return best


def _charged(data: _NodeFitData, index: ClusterIndex, cluster: ClusterView) -> dict[str, ResourceList] | None:
    """Node name -> free once the in-flight reservation is charged (None: nothing in flight)."""
    if cluster.in_flight:
        return _charge_pods(data, index, cluster)
    reservation = _in_flight(cluster)
    return _charge_reservation(data, index, reservation) if reservation else None


def _in_flight(cluster: ClusterView) -> ResourceList:
    return {name: amount for name, amount in cluster.reservation.items() if amount > 0}


def _walk(data: _NodeFitData, cluster: ClusterView, index: ClusterIndex) -> int:
    """One pass over the index answering both questions; stops at the first node with room now."""
    items, selected = data.items, data.selected
    adjusted: dict[str, ResourceList] | None = None
    charged = False
    ever = False
    for position, group in enumerate(index.groups):
        if not data.tolerated(group.taints):
            continue
        # The nodes the selector admits, and their maxima.
        chosen = index.matching(position, selected) if selected else group
        if not _fits(items, chosen.max_allocatable):
            continue
        may_fit_now = _fits(items, chosen.max_free)
        if ever and not may_fit_now:
            continue
        if may_fit_now and not charged:
            # In-flight reservations only matter where something may fit now: charge them once, here.
            charged = True
            adjusted = _charged(data, index, cluster) if cluster.reservation else None
        for node in chosen.nodes:
            if may_fit_now and node.schedulable:
                free = adjusted.get(node.name, node.free) if adjusted else node.free
                if _fits(items, free):
                    return _NOW
            elif ever:
                break  # schedulable nodes come first: nothing left in this group fits now
            if not ever and _fits(items, node.allocatable):
                ever = True
    return _LATER if ever else _NEVER


def _explain(
    data: _NodeFitData,
    index: ClusterIndex,
    available: Mapping[str, ResourceList] | None,
    check_status: bool,
) -> str:
    """Kubernetes-style "0/3 nodes fit: 3 Insufficient nvidia.com/gpu" over every node of the cluster.

    Each node counts once under the first check it fails (status, taints, selector), or once per
    resource it lacks. ``available`` overrides nodes' free resources (reservations); ``check_status``
    False compares requests with allocatable and ignores readiness (the "could it ever fit" question).
    """
    counts: dict[str, int] = {}

    def count(reason: str, times: int) -> None:
        if times:
            counts[reason] = counts.get(reason, 0) + times

    selector = data.selector
    items = data.items
    for position, group in enumerate(index.groups):
        considered = len(group.nodes)
        if check_status:
            count("node(s) were unschedulable or not ready", considered - group.schedulable_count)
            considered = group.schedulable_count
        if not data.tolerated(group.taints):
            first = next(t for t in group.taints if not tolerates_all(data.tolerations, (t,)))
            count("node(s) had untolerated taint {" + f"{first.key}: {first.value}" + "}", considered)
            continue
        if not selector and available is None:
            # No per-node condition left: count shortfalls per resource by bisecting the sorted amounts.
            columns = group.sorted_free if check_status else group.sorted_allocatable
            for name, amount in items:
                column = columns.get(name)
                count(
                    f"Insufficient {name}", bisect_left(column, amount) if column is not None else considered
                )
            continue
        matched = index.matching(position, data.selected).nodes if selector else group.nodes
        if selector:
            admitted = sum(1 for node in matched if node.schedulable) if check_status else len(matched)
            count("node(s) didn't match Pod's node affinity/selector", considered - admitted)
        lacking = dict.fromkeys((name for name, _ in items), 0)
        for node in matched:
            if check_status and not node.schedulable:
                continue  # counted above
            if not check_status:
                free = node.allocatable
            elif available is not None and node.name in available:
                free = available[node.name]
            else:
                free = node.free
            for name, amount in items:
                if amount > free.get(name, 0):
                    lacking[name] += 1
        for name, times in lacking.items():
            count(f"Insufficient {name}", times)
    details = ", ".join(f"{times} {reason}" for reason, times in sorted(counts.items()))
    return f"0/{index.node_count} nodes fit: {details}" if details else f"0/{index.node_count} nodes fit"


def _explain_columns(data: _NodeFitData, batch: Batch, positions: list[int], check_status: bool) -> list[str]:
    """:func:`_explain` without reservations for each of ``positions`` at once: the same counts, from the
    columns (each node counts once under the first check it fails, or once per resource it lacks)."""
    if not positions:
        return []
    import numpy as np

    columns = batch.columns
    fit = data.columnar(batch)
    counts: dict[str, Ints] = {}

    def count(reason: str, nodes: Bools) -> None:
        found = columns.count_per_cluster(nodes)[positions]
        counts[reason] = counts[reason] + found if reason in counts else found

    considered = columns.schedulable if check_status else np.ones(columns.nodes, np.bool_)
    if check_status:
        count("node(s) were unschedulable or not ready", ~columns.schedulable)
    for number, taints in enumerate(columns.taint_sets):
        if number not in fit.tolerated:
            first = next(t for t in taints if not tolerates_all(data.tolerations, (t,)))
            reason = "node(s) had untolerated taint {" + f"{first.key}: {first.value}" + "}"
            count(reason, considered & (columns.taint == number))
    tolerated = columns.taint_mask(fit.tolerated)
    eligible = considered if tolerated is None else considered & tolerated
    if data.selected:
        count(
            "node(s) didn't match Pod's node affinity/selector", eligible & ~columns.matching(data.selected)
        )
        eligible = eligible & columns.matching(data.selected)
    amounts = columns.free if check_status else columns.allocatable
    for name, amount in data.items:
        column = amounts.get(name)
        count(f"Insufficient {name}", eligible if column is None else eligible & (column < amount))
    named = sorted(counts)
    totals: list[int] = columns.node_count[positions].tolist()
    # Clusters alike (50 nodes, 50 lacking the GPU) share one text: written once per distinct count.
    written: dict[tuple[int, ...], str] = {}
    reasons = []
    for key in zip(totals, *(counts[reason].tolist() for reason in named), strict=True):
        text = written.get(key)
        if text is None:
            details = ", ".join(
                f"{times} {reason}" for reason, times in zip(named, key[1:], strict=True) if times
            )
            text = written[key] = f"0/{key[0]} nodes fit: {details}" if details else f"0/{key[0]} nodes fit"
        reasons.append(text)
    return reasons


def _verdicts(
    positions: list[int], reasons: list[str], verdict: Callable[[str], Status]
) -> list[tuple[int, Status]]:
    """(position, verdict) per cluster; one status per distinct reason."""
    made: dict[str, Status] = {}
    return [
        (position, made.get(reason) or made.setdefault(reason, verdict(reason)))
        for position, reason in zip(positions, reasons, strict=True)
    ]


def _format_resources(resources: Iterable[tuple[str, int]]) -> str:
    return ", ".join(f"{name} {format_quantity(name, amount)}" for name, amount in resources if amount)


class _NodeFitPoint(FilterPlugin):
    """Both points share the plugin's data (one walk per cluster); whichever is prepared first makes it."""

    def prepare(self, state: CycleState) -> None:
        if not _DATA.present(state):
            request = state.request
            _DATA.put(
                state, _NodeFitData(state.request_items, request.node_selector, tuple(request.tolerations))
            )


class Capacity(_NodeFitPoint):
    """Could any node, even empty, ever hold the pod? If not, waiting will not help."""

    name: ClassVar[str] = "Capacity"

    def filter_all(self, state: CycleState, batch: Batch) -> list[tuple[int, Status]]:
        if state.request.gang:
            return []
        data: _NodeFitData = state.data[_DATA.name]
        fit = data.columnar(batch)
        columns = batch.columns
        asked = batch.alive & (columns.node_count > 0) & ~fit.now
        if fit.ever is None:
            maybe = asked & columns.maxima_fit(data.items, fit.tolerated, free=False)
            ever = fit.now.copy()
            if maybe.any():
                ever |= maybe & columns.per_cluster(columns.nodes_fitting(data.items, False, fit.admitted))
            fit.ever = ever
        never = batch.alive_positions(asked & ~fit.ever)
        reasons = _explain_columns(data, batch, never, check_status=False)
        return _verdicts(
            never, reasons, lambda reason: unresolvable("no node could ever fit, even empty: " + reason)
        )

    def filter(self, state: CycleState, cluster: ClusterView) -> Status:
        index = cluster.index
        if index is None or not index.node_count or state.request.gang:
            # Nothing known about the nodes: not a reason to give up. A gang: GangCapacity packs its pods.
            return SUCCESS
        data: _NodeFitData = state.data[_DATA.name]  # per cluster: indexing, not a call
        if data.walk(cluster, index) != _NEVER:
            return SUCCESS
        return unresolvable("no node could ever fit, even empty: " + _explain(data, index, None, False))


class NodeFit(_NodeFitPoint):
    """At least one ready, schedulable node matches the selector, tolerates-wise, and has room now."""

    name: ClassVar[str] = "NodeFit"

    def filter(self, state: CycleState, cluster: ClusterView) -> Status:
        index = cluster.index
        if state.request.gang:
            return SUCCESS  # GangFit packs every pod of a gang; the request's resources are their sum
        if index is None:
            return unschedulable("no snapshot of this cluster")
        data: _NodeFitData = state.data[_DATA.name]  # per cluster: indexing, not a call
        if data.walk(cluster, index) == _NOW:
            return SUCCESS
        return _not_now(data, index, cluster)

    def filter_all(self, state: CycleState, batch: Batch) -> list[tuple[int, Status]]:
        if state.request.gang:
            return []
        data: _NodeFitData = state.data[_DATA.name]
        fit = data.columnar(batch)
        columns = batch.columns
        out: list[tuple[int, Status]] = []
        # A cluster with reservations in flight is walked as the per-cluster filter walks it.
        for position in batch.alive_positions(batch.reserved | ~columns.has_snapshot):
            status = self.filter(state, batch.view(position))
            if status is not SUCCESS:
                out.append((position, status))
        busy = batch.alive_positions(columns.has_snapshot & ~batch.reserved & ~fit.now)
        reasons = _explain_columns(data, batch, busy, check_status=True)
        out.extend(_verdicts(busy, reasons, unschedulable))
        return out


def _not_now(data: _NodeFitData, index: ClusterIndex, cluster: ClusterView) -> Status:
    reservation = _in_flight(cluster)
    adjusted = _charged(data, index, cluster) if reservation else None
    reason = _explain(data, index, adjusted, check_status=True)
    if reservation:
        reason += f" (counting in-flight reservations: {_format_resources(sorted(reservation.items()))})"
    return unschedulable(reason)
