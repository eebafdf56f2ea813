"""The columnar snapshot index: the member clusters' nodes as arrays, so that one decision over many clusters
is a few array operations instead of a loop of plugin calls per cluster.

Three levels, each built once for as long as its inputs live:

- :class:`NodeColumns`, per snapshot (kept on its :class:`~.snapshot.ClusterIndex`): each node's free and
  allocatable amount per resource, readiness and taint group, in the index's node order; per node selector,
  on first use, the nodes it admits.
- :class:`FederationColumns`, per engine and set of snapshot objects: those columns end to end in the spec's
  cluster order, with per-cluster facts (reachable, observed at, totals) and the per-cluster maxima per
  taint set that reject a cluster that cannot fit without touching its nodes. The spec's own columns
  (regions, labels, prices) are :class:`SpecColumns`, built once per engine.
- :class:`Batch`, per decision: the clusters still in the running, the decision's reservations, and a
  cluster's :class:`~.framework.ClusterView`, made only when a plugin asks for one.

Amounts are int64 (every amount is at most 2^63-1, :data:`~.limits.MAX_QUANTITY`), so comparisons are exact.
Arithmetic that must give the per-cluster path's floats bit for bit is done in float64 only where both
operands are below 2^53 (exact as floats); the plugins fall back to their per-cluster methods elsewhere.
numpy is imported by this module and the plugins' ``filter_all``/``score_all`` only; the engine loads it
for federations of :data:`~.engine.COLUMNAR_MIN_CLUSTERS` clusters or more.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import reduce
from operator import is_
from typing import TypeVar, cast

import numpy as np
import numpy.typing as npt

from airflow_provider_fedsched.federation.framework import ClusterView
from airflow_provider_fedsched.federation.resources import ResourceList, add
from airflow_provider_fedsched.federation.snapshot import ClusterIndex, ClusterSnapshot
from airflow_provider_fedsched.federation.spec import ClusterSpec, Taint

__all__ = [
    "EXACT_FLOAT",
    "Batch",
    "Bools",
    "FederationColumns",
    "Floats",
    "Ints",
    "NodeColumns",
    "Positions",
    "SpecColumns",
    "rounded",
]

EXACT_FLOAT = 2**53
"""Integers below this in magnitude are exact as float64: arithmetic on them gives Python's floats."""

Bools = npt.NDArray[np.bool_]
Ints = npt.NDArray[np.int64]
Floats = npt.NDArray[np.float64]
Positions = npt.NDArray[np.intp]
Selector = tuple[tuple[str, str], ...]
_T = TypeVar("_T")
_D = TypeVar("_D", bound=np.generic)

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


def _microseconds(moment: datetime) -> int:
    """Exact microseconds since the epoch: differences of these are exactly ``timedelta`` differences."""
    return (moment - _EPOCH) // _MICROSECOND


@dataclass(slots=True)
class NodeColumns:
    """One snapshot's nodes as arrays, in its index's order (groups in order, each group's nodes)."""

    index: ClusterIndex
    free: dict[str, Ints]
    allocatable: dict[str, Ints]
    schedulable: Bools
    group: Positions
    """Each node's group position in the index (its hard taints)."""
    selected: dict[Selector, Bools] = field(default_factory=dict)

    def matching(self, selector: Selector) -> Bools:
        """The nodes whose labels match ``selector`` (sorted label pairs), matched once per snapshot."""
        mask = self.selected.get(selector)
        if mask is None:
            nodes = [node for group in self.index.groups for node in group.nodes]
            mask = self.selected[selector] = np.fromiter(
                (all(node.labels.get(k) == v for k, v in selector) for node in nodes), np.bool_, len(nodes)
            )
        return mask


def node_columns(index: ClusterIndex) -> NodeColumns:
    """The snapshot's columns, built on first use and kept on its index."""
    if index.columns is not None:
        return cast(NodeColumns, index.columns)
    nodes = [node for group in index.groups for node in group.nodes]
    count = len(nodes)
    names: set[str] = set()
    for node in nodes:
        names.update(node.allocatable)
    free = {r: np.fromiter((n.free.get(r, 0) for n in nodes), np.int64, count) for r in sorted(names)}
    allocatable = {
        r: np.fromiter((n.allocatable.get(r, 0) for n in nodes), np.int64, count) for r in sorted(names)
    }
    schedulable = np.fromiter((n.schedulable for n in nodes), np.bool_, count)
    group = np.repeat(np.arange(len(index.groups), dtype=np.intp), [len(g.nodes) for g in index.groups])
    columns = NodeColumns(index, free, allocatable, schedulable, group)
    index.columns = columns
    return columns


class SpecColumns:
    """The spec's clusters as columns: names, regions, proximity groups, labels, taints and prices."""

    def __init__(self, clusters: Sequence[ClusterSpec]) -> None:
        self.specs = list(clusters)
        self.names = [c.name for c in self.specs]
        self.positions = {name: position for position, name in enumerate(self.names)}
        self.count = len(self.names)
        rank = np.empty(self.count, np.int64)
        rank[np.argsort(np.array(self.names, dtype=object), kind="stable")] = np.arange(self.count)
        self.name_rank = rank
        """Each cluster's place in name order (the last tie-break of the ranking)."""
        self.regions, self.region_ids = _ids(c.region for c in self.specs)
        self.groups, self.group_ids = _ids(c.proximity_group for c in self.specs)
        self.taint_sets, self.taint_ids = _ids(tuple(c.taints) for c in self.specs)
        self.cpu_hour = np.array([c.prices.cpu_hour for c in self.specs], np.float64)
        self.memory_gib_hour = np.array([c.prices.memory_gib_hour for c in self.specs], np.float64)
        self.gpu_hour = np.array([c.prices.gpu_hour for c in self.specs], np.float64)
        self._extended: dict[str, Floats] = {}
        self._labels: dict[str, tuple[dict[str, int], Ints]] = {}

    def extended_price(self, resource: str) -> Floats:
        prices = self._extended.get(resource)
        if prices is None:
            prices = self._extended[resource] = np.array(
                [c.prices.extended.get(resource, 0.0) for c in self.specs], np.float64
            )
        return prices

    def label(self, key: str) -> tuple[dict[str, int], Ints]:
        """(value -> id, each cluster's value id, -1 where the label is absent)."""
        known = self._labels.get(key)
        if known is None:
            values: dict[str, int] = {}
            ids = np.array(
                [
                    values.setdefault(c.labels[key], len(values)) if key in c.labels else -1
                    for c in self.specs
                ],
                np.int64,
            )
            known = self._labels[key] = (values, ids)
        return known

    def among(self, names: Iterable[str]) -> Bools:
        mask = np.zeros(self.count, np.bool_)
        mask[[self.positions[n] for n in names if n in self.positions]] = True
        return mask


def _ids(values: Iterable[_T]) -> tuple[list[_T], Ints]:
    """The distinct values in order of first appearance, and each value's id."""
    seen: dict[_T, int] = {}
    ids = [seen.setdefault(value, len(seen)) for value in values]
    return list(seen), np.array(ids, np.int64)


class FederationColumns:
    """The member clusters' snapshots as columns, in the spec's cluster order (``None``: no snapshot)."""

    def __init__(self, spec: SpecColumns, snapshots: list[ClusterSnapshot | None]) -> None:
        self.spec = spec
        self.snapshots = snapshots
        self.indexes: list[ClusterIndex | None] = [s.index if s is not None else None for s in snapshots]
        nodes = [node_columns(index) if index is not None else None for index in self.indexes]
        count = spec.count
        self.has_snapshot = np.array([s is not None for s in snapshots], np.bool_)
        self.reachable = np.array([s is not None and s.reachable for s in snapshots], np.bool_)
        self.observed_us = np.array(
            [_microseconds(s.observed_at) if s is not None else 0 for s in snapshots], np.int64
        )
        self.with_snapshot = [spec.names[p] for p in range(count) if snapshots[p] is not None]
        self.node_count = np.array([i.node_count if i is not None else 0 for i in self.indexes], np.int64)
        starts = np.zeros(count + 1, np.int64)
        np.cumsum(self.node_count, out=starts[1:])
        self.starts = starts
        self.nonempty: Positions = np.flatnonzero(self.node_count)
        """The clusters with nodes, and where each one's nodes start (reduceat needs non-empty runs)."""
        self.nonempty_starts = starts[self.nonempty]
        self.nodes = int(starts[-1])
        self.with_quota = [p for p, s in enumerate(snapshots) if s is not None and s.quota_headroom]
        self.all_reachable = bool(self.reachable.all())
        resources = sorted({r for n in nodes if n is not None for r in n.free})
        self.free = {r: self._concatenate(nodes, r, True) for r in resources}
        self.allocatable = {r: self._concatenate(nodes, r, False) for r in resources}
        self.schedulable = self._joined(
            [n.schedulable if n is not None else np.zeros(0, np.bool_) for n in nodes], np.bool_
        )
        # Node taint sets, numbered over the federation (0: no hard taint), and per taint set the
        # clusters' largest free (schedulable nodes) and allocatable amounts: the pre-filter.
        self.taint_sets: list[tuple[Taint, ...]] = [()]
        numbers: dict[tuple[Taint, ...], int] = {(): 0}
        taint_parts: list[Positions] = []
        max_free: dict[tuple[int, str], list[int]] = {}
        max_allocatable: dict[tuple[int, str], list[int]] = {}
        for position, (index, columns) in enumerate(zip(self.indexes, nodes, strict=True)):
            if index is None or columns is None:
                continue
            lookup = np.empty(len(index.groups), np.intp)
            for number, group in enumerate(index.groups):
                taint = numbers.get(group.taints)
                if taint is None:
                    taint = numbers[group.taints] = len(self.taint_sets)
                    self.taint_sets.append(group.taints)
                lookup[number] = taint
                for r, amount in group.max_free.items():
                    _raise(max_free, (taint, r), count, position, amount)
                for r, amount in group.max_allocatable.items():
                    _raise(max_allocatable, (taint, r), count, position, amount)
            taint_parts.append(lookup[columns.group])
        self.taint = self._joined(taint_parts, np.intp)
        self.max_free = {key: np.array(v, np.int64) for key, v in max_free.items()}
        self.max_allocatable = {key: np.array(v, np.int64) for key, v in max_allocatable.items()}
        # Cluster totals over schedulable nodes (the Headroom score), where exact as floats.
        self.total_free: dict[str, Ints] = {}
        self.total_allocatable: dict[str, Ints] = {}
        exact = np.ones(count, np.bool_)
        for name, totals in (("free", self.total_free), ("allocatable", self.total_allocatable)):
            for r in resources:
                values = [getattr(i, f"total_{name}").get(r, 0) if i is not None else 0 for i in self.indexes]
                big = np.array([v >= EXACT_FLOAT for v in values], np.bool_)
                exact &= ~big
                totals[r] = np.array([0 if v >= EXACT_FLOAT else v for v in values], np.int64)
        self.totals_exact = exact
        self._selected: dict[Selector, Bools] = {}

    def _concatenate(self, nodes: list[NodeColumns | None], resource: str, free: bool) -> Ints:
        parts = []
        for columns in nodes:
            if columns is None:
                continue
            values = (columns.free if free else columns.allocatable).get(resource)
            parts.append(values if values is not None else np.zeros(len(columns.schedulable), np.int64))
        return self._joined(parts, np.int64)

    @staticmethod
    def _joined(parts: list[npt.NDArray[_D]], dtype: type[_D]) -> npt.NDArray[_D]:
        return np.concatenate(parts) if parts else np.zeros(0, dtype)

    def current(self, snapshots: list[ClusterSnapshot | None]) -> bool:
        """True when these are the very snapshot objects the columns were built from."""
        return len(snapshots) == len(self.snapshots) and all(map(is_, snapshots, self.snapshots))

    def matching(self, selector: Selector) -> Bools:
        """The federation's nodes whose labels match ``selector``."""
        mask = self._selected.get(selector)
        if mask is None:
            parts = [node_columns(i).matching(selector) for i in self.indexes if i is not None]
            mask = self._selected[selector] = self._joined(parts, np.bool_)
        return mask

    def taint_mask(self, tolerated: Sequence[int]) -> Bools | None:
        """The nodes whose taint set is among ``tolerated`` (None: every node's is)."""
        if len(tolerated) == len(self.taint_sets):
            return None
        mask = np.zeros(self.nodes, np.bool_)
        for number in tolerated:
            mask |= self.taint == number
        return mask

    def per_cluster(self, nodes: Bools) -> Bools:
        """For each cluster, whether any of its nodes is set in ``nodes``."""
        found = np.zeros(self.spec.count, np.bool_)
        if len(self.nonempty):
            found[self.nonempty] = np.logical_or.reduceat(nodes, self.nonempty_starts)
        return found

    def count_per_cluster(self, nodes: Bools) -> Ints:
        """For each cluster, how many of its nodes are set in ``nodes``."""
        counts = np.zeros(self.spec.count, np.int64)
        if len(self.nonempty):
            counts[self.nonempty] = np.add.reduceat(nodes.astype(np.int64), self.nonempty_starts)
        return counts

    def maxima_fit(self, items: Sequence[tuple[str, int]], tolerated: Sequence[int], free: bool) -> Bools:
        """The pre-filter: clusters where some tolerated taint set's largest free (schedulable nodes) or
        allocatable amounts cover every item. A cluster outside it has no node that fits."""
        maxima = self.max_free if free else self.max_allocatable
        found = np.zeros(self.spec.count, np.bool_)
        for taint in tolerated:
            fits = np.ones(self.spec.count, np.bool_)
            for name, amount in items:
                largest = maxima.get((taint, name))
                if largest is None:
                    fits[:] = False
                    break
                fits &= largest >= amount
            found |= fits
        return found

    def nodes_fitting(self, items: Sequence[tuple[str, int]], free: bool, admitted: Bools | None) -> Bools:
        """The nodes (schedulable, with ``items`` free, if ``free``; else with ``items`` allocatable)
        among ``admitted`` (None: all)."""
        fits = self.schedulable.copy() if free else np.ones(self.nodes, np.bool_)
        if admitted is not None:
            fits &= admitted
        amounts = self.free if free else self.allocatable
        for name, amount in items:
            column = amounts.get(name)
            if column is None:
                fits[:] = False
                break
            fits &= column >= amount
        return fits


def _raise(
    maxima: dict[tuple[int, str], list[int]], key: tuple[int, str], count: int, at: int, value: int
) -> None:
    column = maxima.get(key)
    if column is None:
        column = maxima[key] = [0] * count
    if value > column[at]:
        column[at] = value


def rounded(values: Floats, digits: int) -> list[float]:
    """``[round(v, digits) for v in values]`` with Python's ``round`` (correctly rounded), computed as
    numpy's ``round`` where that gives the same float and by Python's elsewhere.

    numpy scales by 10**digits, rounds half to even and divides back. The division of two exact floats is
    correctly rounded, so the result is Python's whenever the scaled value rounds to the integer the exact
    product does: when it is below 2^52 and further than two of its ulps from a half-integer.
    """
    if len(values) < 64:  # fewer than this: a dozen array operations cost more than Python's round
        return [round(value, digits) for value in values.tolist()]
    scale = 10.0**digits
    with np.errstate(over="ignore"):  # beyond 1e299: inf, left to Python's round below
        scaled = values * scale
    finite = np.isfinite(scaled)
    scaled_finite = np.where(finite, scaled, 0.0)
    distance = np.abs(np.abs(scaled_finite - np.floor(scaled_finite)) - 0.5)
    magnitude = np.abs(scaled_finite)
    safe = finite & (magnitude < 2.0**52) & (distance > 2 * np.spacing(magnitude))
    result: list[float] = (np.rint(scaled) / scale).tolist()
    if not safe.all():
        originals: list[float] = values.tolist()
        for at in np.flatnonzero(~safe).tolist():
            result[at] = round(originals[at], digits)
    return result


class Batch:
    """One decision over the columns: the clusters still in the running and their views, on demand."""

    def __init__(
        self,
        columns: FederationColumns,
        now: datetime,
        namespace: str,
        reservations: Mapping[str, ResourceList],
        in_flight: Mapping[str, Sequence[ResourceList]],
    ) -> None:
        self.columns = columns
        self.spec = columns.spec
        self.alive = np.ones(self.spec.count, np.bool_)
        """The clusters no filter has rejected yet (the engine clears a cluster's entry on rejection)."""
        self.namespace = namespace
        self._in_flight = in_flight
        self._views: dict[int, ClusterView] = {}
        # Each cluster's reservation as its view would hold it; only clusters with one are listed.
        self.reservations: dict[int, tuple[ResourceList, tuple[ResourceList, ...]]] = {}
        for name in {*reservations, *in_flight}:
            position = self.spec.positions.get(name)
            if position is None:
                continue
            pods = tuple(in_flight.get(name) or ())
            reservation = reservations.get(name) or reduce(add, pods, ResourceList())
            if reservation:
                self.reservations[position] = (reservation, pods)
        self.reserved = np.zeros(self.spec.count, np.bool_)
        self.reserved[list(self.reservations)] = True
        self.ages = self._ages(now)
        """Each cluster's snapshot age in seconds as ``(now - observed_at).total_seconds()`` (NaN: none)."""

    def _ages(self, now: datetime) -> Floats:
        columns = self.columns
        elapsed = _microseconds(now) - columns.observed_us
        if np.abs(elapsed[columns.has_snapshot]).max(initial=0) < EXACT_FLOAT:
            ages = elapsed / 1e6  # both exact as floats: the same correctly rounded quotient as timedelta's
        else:
            ages = np.array(
                [(now - s.observed_at).total_seconds() if s is not None else 0.0 for s in columns.snapshots],
                np.float64,
            )
        ages[~columns.has_snapshot] = np.nan
        return ages

    def snapshot_ages(self) -> dict[str, float]:
        """Cluster -> snapshot age, for the clusters with a snapshot, in the spec's order."""
        ages: list[float] = self.ages[self.columns.has_snapshot].tolist()
        return dict(zip(self.columns.with_snapshot, ages, strict=True))

    def alive_positions(self, among: Bools | None = None) -> list[int]:
        """The positions still in the running (and set in ``among``), in the spec's order."""
        mask = self.alive if among is None else self.alive & among
        positions: list[int] = mask.nonzero()[0].tolist()
        return positions

    def view(self, position: int) -> ClusterView:
        """The cluster as the per-cluster plugins see it (made once per decision)."""
        view = self._views.get(position)
        if view is None:
            spec = self.spec.specs[position]
            snapshot = self.columns.snapshots[position]
            reservation, pods = self.reservations.get(position) or ({}, ())
            if not reservation and spec.name in self._in_flight:
                pods = tuple(self._in_flight.get(spec.name) or ())
            view = self._views[position] = ClusterView(
                spec,
                snapshot,
                self.columns.indexes[position],
                reservation,
                spec.namespace or self.namespace,
                pods,
            )
        return view
