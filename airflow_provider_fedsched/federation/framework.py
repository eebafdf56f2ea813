"""The plugin framework, after the kube-scheduler's, one level up (clusters rather than nodes).

One decision is one *cycle*. The engine builds a :class:`CycleState` from the decision's inputs, lets each
enabled plugin ``prepare`` its own precomputed data (stored under the plugin's own :class:`DataKey`, never
in a shared field), then runs the filters on each member cluster's :class:`ClusterView` in registry
order. A filter answers with a :class:`Status`; the first one that is not ``Success`` rejects the cluster
with its reason. ``UnschedulableAndUnresolvable`` means the cluster could never take the task (waiting
will not help), which is how the engine tells "impossible" from "wait". Score plugins measure a raw value
per surviving cluster and normalize the raw values of all survivors to 0..100 (higher is better).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from functools import reduce
from typing import TYPE_CHECKING, Any, ClassVar, Generic, NamedTuple, Protocol, TypeVar, runtime_checkable

from airflow_provider_fedsched.federation.resources import add

if TYPE_CHECKING:
    from airflow_provider_fedsched.federation.request import TaskRequest
    from airflow_provider_fedsched.federation.resources import ResourceList
    from airflow_provider_fedsched.federation.snapshot import ClusterIndex, ClusterSnapshot
    from airflow_provider_fedsched.federation.spec import (
        ClusterSpec,
        DatasetSpec,
        FederationSpec,
        PolicySpec,
    )
    from airflow_provider_fedsched.federation.tenancy import TenantInputs

__all__ = [
    "SUCCESS",
    "ClusterView",
    "Code",
    "CycleState",
    "DataKey",
    "Explains",
    "FilterPlugin",
    "Hints",
    "Plugin",
    "ScorePlugin",
    "Status",
    "error",
    "unresolvable",
    "unschedulable",
]

T = TypeVar("T")


class Code(StrEnum):
    """A filter's verdict on one cluster (the kube-scheduler's status codes)."""

    SUCCESS = "Success"
    UNSCHEDULABLE = "Unschedulable"
    """Not now: the cluster may take the task later (busy, stale, cooling down, over quota)."""
    UNSCHEDULABLE_AND_UNRESOLVABLE = "UnschedulableAndUnresolvable"
    """Never: nothing that changes with time makes the cluster able to take the task."""
    ERROR = "Error"
    """The plugin could not judge (inconsistent data): the cluster is rejected, not for good."""


class Status(NamedTuple):
    code: Code
    reason: str = ""
    """Why the cluster was rejected; every rejection has one."""


SUCCESS = Status(Code.SUCCESS)


def unschedulable(reason: str) -> Status:
    return Status(Code.UNSCHEDULABLE, reason)


def unresolvable(reason: str) -> Status:
    return Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, reason)


def error(reason: str) -> Status:
    return Status(Code.ERROR, reason)


@dataclass(slots=True)
class ClusterView:
    """One member cluster as the plugins see it during one decision."""

    spec: ClusterSpec
    snapshot: ClusterSnapshot | None
    index: ClusterIndex | None
    """The snapshot's index, looked up once per decision."""
    reservation: ResourceList
    """In-flight requests placed here but not yet visible in the snapshot."""
    namespace: str
    in_flight: tuple[ResourceList, ...] = ()
    """The same requests pod by pod, oldest first, when the caller knows them (empty: only the sum)."""

    @classmethod
    def of(
        cls,
        cluster: ClusterSpec,
        snapshot: ClusterSnapshot | None,
        namespace: str,
        reservation: ResourceList | None,
        in_flight: Sequence[ResourceList] | None,
    ) -> ClusterView:
        """The view of ``cluster`` for a task of ``namespace``: its reservation, else the sum of its pods
        in flight."""
        pods = tuple(in_flight or ())
        nothing: ResourceList = {}
        return cls(
            cluster,
            snapshot,
            snapshot.index if snapshot is not None else None,
            reservation or reduce(add, pods, nothing),
            cluster.namespace or namespace,
            pods,
        )


@dataclass(slots=True)
class CycleState:
    """The inputs of one decision, shared by every plugin, and each plugin's own data under its key."""

    spec: FederationSpec
    request: TaskRequest
    policy: PolicySpec
    now: datetime
    cooldowns: Mapping[str, datetime]
    """Cluster -> until when it takes no new work."""
    exclude: Mapping[str, str]
    """Cluster -> why this decision must not use it (failover)."""
    forecast: Mapping[str, float] | None
    """Cluster -> predicted idle fraction."""
    datasets: list[DatasetSpec]
    """The spec's datasets the request reads, resolved."""
    request_items: tuple[tuple[str, int], ...]
    """The request's resources, sorted: the form the fit checks iterate."""
    tenancy: TenantInputs | None = None
    """Federation-wide tenant usage, waiting tasks and spend (None: the spec has no tenants)."""
    data: dict[str, Any] = field(default_factory=dict)
    """Plugin data by :class:`DataKey` name; read and written only through the plugin's own key."""


class DataKey(Generic[T]):
    """A plugin's typed slot in :attr:`CycleState.data`, named after the plugin.

    Code that runs once per cluster may read ``state.data[KEY.name]`` into a variable of type ``T``
    instead of calling :meth:`get`: at a thousand clusters the call costs more than the lookup.
    """

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def put(self, state: CycleState, value: T) -> None:
        state.data[self.name] = value

    def get(self, state: CycleState) -> T:
        value: T = state.data[self.name]
        return value

    def present(self, state: CycleState) -> bool:
        return self.name in state.data


class Plugin(Protocol):
    name: ClassVar[str]

    def prepare(self, state: CycleState) -> None:
        """Once per decision, before any cluster: precompute this plugin's data under its own key."""


class FilterPlugin(Plugin, Protocol):
    def filter(self, state: CycleState, cluster: ClusterView) -> Status: ...


class ScorePlugin(Plugin, Protocol):
    def score(self, state: CycleState, cluster: ClusterView) -> float: ...

    def normalize(self, raw: Sequence[float]) -> list[float]:
        """The raw values of all candidates -> 0..100 each, higher is better."""
        ...


@runtime_checkable
class Skips(Protocol):
    """Optional, for filters: after ``prepare``, True when this decision gives the filter nothing to check
    (it would pass every cluster), so the engine does not call it per cluster. It must never be True when
    the filter could reject a cluster: a skipped rule is still a rule that held."""

    def skip(self, state: CycleState) -> bool: ...


@runtime_checkable
class Explains(Protocol):
    """Optional, for filters: say why when this filter rejected every cluster of the federation."""

    def explain_all(self, state: CycleState) -> str | None: ...


@runtime_checkable
class Hints(Protocol):
    """Optional, for scores: a node of the chosen cluster to prefer. Only a preference: the operator asks
    the member's scheduler for it with a preferred node affinity, and that scheduler still decides."""

    def hint(self, state: CycleState, cluster: str) -> str | None: ...
