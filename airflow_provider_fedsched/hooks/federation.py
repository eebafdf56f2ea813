"""FederationHook: the member clusters of a federation, their live snapshots and the shared state.

Sensing is separate from deciding: snapshots are collected concurrently, each cluster within its own
timeout, and kept in shared federation state with the policy's time-to-live; a decision reads them and
takes milliseconds. A cluster that does not answer in time is unavailable, with the reason, not guessed.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import cached_property
from pathlib import Path
from typing import Any

from airflow.sdk import BaseHook

from airflow_provider_fedsched.federation.decision import Decision
from airflow_provider_fedsched.federation.engine import FederationEngine
from airflow_provider_fedsched.federation.request import TaskRequest
from airflow_provider_fedsched.federation.resources import ResourceList
from airflow_provider_fedsched.federation.snapshot import ClusterSnapshot
from airflow_provider_fedsched.federation.spec import FederationSpec, PolicySpec, SpecError, load_spec
from airflow_provider_fedsched.kube.access import (
    ClusterAccess,
    ClusterAccessError,
    access_from_extras,
    access_from_kubeconfig_file,
)
from airflow_provider_fedsched.kube.clients import run_in_background
from airflow_provider_fedsched.kube.snapshots import collect_snapshots, delete_pods
from airflow_provider_fedsched.state import (
    AirflowVariableStateBackend,
    FederationState,
    MemoryStateBackend,
    StateBackend,
)

VARIABLE_PREFIX = "variable:"
EMBED_LIMIT = 100
"""Federations up to this many clusters keep all snapshots in the one index key (about 15 KB each)."""
DEFAULT_SNAPSHOT_TIMEOUT = 2.0
"""Seconds a cluster has to answer the three list calls of a snapshot before it counts as unavailable."""
POLL_INTERVAL_BOUNDS = (2.0, 120.0)
"""Status polling and health checks: never more often than every 2 s, never less than every 2 min."""

# Deciding and reserving happen under one lock per process, so that concurrent placements in a process
# (threads, triggers) each see the reservations of the ones before.
_placement_lock = threading.Lock()

# One lock per (federation, cluster) and process: the in-process half of single-flight refresh.
_refresh_locks: dict[tuple[str, str], threading.Lock] = {}
_refresh_locks_guard = threading.Lock()


def _refresh_lock(federation: str, cluster: str) -> threading.Lock:
    with _refresh_locks_guard:
        return _refresh_locks.setdefault((federation, cluster), threading.Lock())


def poll_interval(expected_duration_seconds: float | None, observed_durations: Iterable[float] = ()) -> float:
    """How often to check a task's pod and its cluster: tied to how long the task takes.

    About 1/30 of the expected duration (or, without one, of the median observed duration), within
    :data:`POLL_INTERVAL_BOUNDS`: seconds for short tasks, minutes for long ones.
    """
    duration = expected_duration_seconds
    observed = sorted(observed_durations)
    if duration is None and observed:
        duration = observed[len(observed) // 2]
    low, high = POLL_INTERVAL_BOUNDS
    if duration is None:
        return low
    return max(low, min(high, duration / 30.0))


class FederationHook(BaseHook):
    """Members of a federation as Airflow connections, their snapshots and the shared state.

    :param federation: the federation spec: a path to a YAML file, YAML text, a mapping, a
        :class:`FederationSpec`, ``"variable:NAME"`` (an Airflow Variable holding the YAML), or None for
        the ``[fedsched] federation_spec`` option.
    :param state: shared federation state; default Airflow Variables (shared by every worker).
    :param kubeconfig: outside Airflow, resolve each member's ``conn_id`` to the context of this
        kubeconfig file named after the cluster (as ``fedsched sim up`` writes it).
    :param snapshot_timeout: seconds each cluster has to answer a snapshot.
    """

    hook_name = "Kubernetes federation"

    def __init__(
        self,
        federation: str | Path | Mapping[str, Any] | FederationSpec | None = None,
        *,
        state: FederationState | StateBackend | None = None,
        kubeconfig: str | Path | None = None,
        snapshot_timeout: float = DEFAULT_SNAPSHOT_TIMEOUT,
    ) -> None:
        super().__init__()
        self.federation_source = federation
        self.kubeconfig = kubeconfig
        self.snapshot_timeout = snapshot_timeout
        self._state_arg = state
        self._accesses: dict[str, ClusterAccess | ClusterAccessError] = {}

    # Inventory ---------------------------------------------------------------------------------------
    @cached_property
    def spec(self) -> FederationSpec:
        source = self.federation_source
        if isinstance(source, FederationSpec):
            return source
        if source is None:
            source = _configured_spec_source()
        if isinstance(source, str) and source.startswith(VARIABLE_PREFIX):
            name = source.removeprefix(VARIABLE_PREFIX)
            text = _read_variable(name)
            if text is None:
                raise SpecError(f"federation: Airflow Variable {name!r} does not exist")
            try:
                return load_spec(text if isinstance(text, str) else dict(text))
            except SpecError as exc:
                raise SpecError(f"federation (Variable {name!r}): {exc}") from None
        return load_spec(source)

    @cached_property
    def state(self) -> FederationState:
        if isinstance(self._state_arg, FederationState):
            state = self._state_arg
        else:
            backend = self._state_arg or (
                MemoryStateBackend() if self.kubeconfig else AirflowVariableStateBackend()
            )
            state = FederationState(backend, federation=self.spec.name)
        # Up to EMBED_LIMIT clusters, a fresh worker reads every snapshot with the index, in one call.
        state.embed_snapshots = len(self.spec.clusters) <= EMBED_LIMIT
        return state

    @cached_property
    def engine(self) -> FederationEngine:
        return FederationEngine(self.spec)

    def _resolve(self, name: str) -> ClusterAccess | ClusterAccessError:
        """Resolve a member's connection once (on first use: a task touches only the clusters it uses)."""
        if name in self._accesses:
            return self._accesses[name]
        self._accesses[name] = found = self._read_access(name)
        return found

    def _read_access(self, name: str) -> ClusterAccess | ClusterAccessError:
        cluster = self.spec.cluster(name)  # raises SpecError naming an unknown cluster
        try:
            if self.kubeconfig is not None:
                return access_from_kubeconfig_file(name, name, self.kubeconfig, cluster.namespace)
            return _access_from_connection(name, cluster.conn_id, cluster.namespace)
        except ClusterAccessError as exc:
            return exc

    def access(self, cluster: str) -> ClusterAccess:
        """How to reach ``cluster``; raises :class:`ClusterAccessError` naming cluster and connection."""
        resolved = self._resolve(cluster)
        if isinstance(resolved, ClusterAccessError):
            raise resolved
        return resolved

    # Snapshots ---------------------------------------------------------------------------------------
    def _unavailable(self, cluster: str, reason: str) -> ClusterSnapshot:
        return ClusterSnapshot(cluster=cluster, observed_at=datetime.now(UTC), reachable=False, reason=reason)

    async def acollect(self, clusters: Iterable[str] | None = None) -> dict[str, ClusterSnapshot]:
        """Collect fresh snapshots from the clusters now (concurrently) and store them in shared state."""
        names = list(clusters) if clusters is not None else [c.name for c in self.spec.clusters]
        reachable: list[ClusterAccess] = []
        results: dict[str, ClusterSnapshot] = {}
        for name in names:
            try:
                reachable.append(self.access(name))
            except ClusterAccessError as exc:
                results[name] = self._unavailable(
                    name, exc.problem + (f" (connection {exc.conn_id!r})" if exc.conn_id else "")
                )
        results.update(await collect_snapshots(reachable, self.snapshot_timeout))
        for access in reachable:
            orphans = self.state.orphans(access.cluster)
            if orphans and results[access.cluster].reachable:
                for namespace, pod in await delete_pods(access, orphans, self.snapshot_timeout):
                    self.state.forget_orphan(access.cluster, namespace, pod)
        self.state.put_snapshots(results.values())
        for snapshot in results.values():
            if snapshot.reachable:
                self.state.record(snapshot.cluster, "utilization", _utilization_sample(snapshot))
        return results

    def collect(self, clusters: Iterable[str] | None = None) -> dict[str, ClusterSnapshot]:
        """Synchronous :meth:`acollect` (not from inside a running event loop: use ``acollect``)."""
        return run_in_background(self.acollect(clusters))

    def snapshots(
        self, clusters: Iterable[str] | None = None, now: datetime | None = None
    ) -> dict[str, ClusterSnapshot]:
        """Snapshots no older than the policy's TTL, refreshing stale ones single-flight.

        For each stale cluster, one worker (the lease holder) refreshes it while the others wait briefly
        for the fresh snapshot in shared state; if it does not come, the stale one is returned and the
        engine's freshness filter marks the cluster unavailable.
        """
        names = list(clusters) if clusters is not None else [c.name for c in self.spec.clusters]
        ttl = self.spec.policy.snapshot_ttl_seconds
        now = now or datetime.now(UTC)
        found = self.state.snapshots(names)
        stale = [n for n in names if n not in found or _age(found[n], now) > ttl / 2]
        if not stale:
            return found
        owner = f"{socket.gethostname()}:{os.getpid()}:{threading.get_ident()}"
        lease_ttl = timedelta(seconds=self.snapshot_timeout * 2 + 1)
        locks: list[threading.Lock] = []
        candidates: list[str] = []
        mine: list[str] = []
        for name in stale:
            lock = _refresh_lock(self.spec.name, name)
            if not lock.acquire(blocking=False):
                continue  # another thread of this process is refreshing it
            locks.append(lock)
            candidates.append(name)
        try:
            mine = self.state.try_leases(candidates, owner, now, lease_ttl) if candidates else []
            # A worker that refreshed just before our claim has left a fresh snapshot: use it.
            current = self.state.snapshots(mine) if mine else {}
            fresh = {n: s for n, s in current.items() if _age(s, datetime.now(UTC)) <= ttl / 2}
            found.update(fresh)
            if to_refresh := [n for n in mine if n not in fresh]:
                found.update(self.collect(to_refresh))
        finally:
            for name in mine:
                self.state.end_lease(name, owner)
            for lock in locks:
                lock.release()
        waiting = [n for n in stale if n not in mine]
        if waiting:
            found.update(self._await_refresh(waiting, now))
        return found

    def _await_refresh(self, clusters: list[str], since: datetime) -> dict[str, ClusterSnapshot]:
        """Wait (polling shared state) for another worker's refresh of ``clusters`` after ``since``."""
        deadline = time.monotonic() + self.snapshot_timeout * 2 + 1
        result: dict[str, ClusterSnapshot] = {}
        pending = list(clusters)
        while pending and time.monotonic() < deadline:
            for name, snapshot in self.state.snapshots(pending).items():
                if snapshot.observed_at >= since - timedelta(seconds=1):
                    result[name] = snapshot
                    pending.remove(name)
            if pending:
                time.sleep(0.05)
        result.update(self.state.snapshots(pending))  # stale ones: the freshness filter decides
        return result

    # Decisions ---------------------------------------------------------------------------------------
    def decide(
        self,
        request: TaskRequest,
        *,
        exclude: Mapping[str, str] | None = None,
        policy: PolicySpec | None = None,
        forecast: Mapping[str, float] | None = None,
        now: datetime | None = None,
    ) -> Decision:
        """Score ``request`` against fresh (or single-flight refreshed) snapshots and shared state."""
        view = self.view(request.clusters or [c.name for c in self.spec.clusters], request.namespace, now)
        return self.engine.decide(
            request,
            view.snapshots,
            now=view.now,
            cooldowns=view.cooldowns,
            reservations=view.reservations,
            forecast=forecast,
            exclude=exclude or {},
            policy=policy,
        )

    def view(self, clusters: Iterable[str], namespace: str, now: datetime | None = None) -> FederationView:
        """What a decision for a pod of ``namespace`` needs from shared state about ``clusters``."""
        names = list(clusters)
        snapshots = self.snapshots(names, now=now)
        now = datetime.now(UTC) if now is None else now  # a refresh may have taken a moment
        return FederationView(
            snapshots=snapshots,
            cooldowns=self.state.cooldowns(names, now, namespace=namespace),
            reservations=self.state.reservations(snapshots, now),
            now=now,
        )

    def place(
        self,
        request: TaskRequest,
        placement_id: str,
        *,
        exclude: Mapping[str, str] | None = None,
        policy: PolicySpec | None = None,
        forecast: Mapping[str, float] | None = None,
    ) -> Decision:
        """Decide and, when placed, reserve the request on the chosen cluster, as one step per process."""
        with _placement_lock:
            decision = self.decide(request, exclude=exclude, policy=policy, forecast=forecast)
            if decision.outcome == "placed" and decision.cluster is not None:
                self.reserve(decision.cluster, request, placement_id)
        return decision

    def reserve(
        self, cluster: str, request: TaskRequest, placement_id: str, now: datetime | None = None
    ) -> None:
        """Hold ``request`` on ``cluster`` until its snapshot shows the pod with ``placement_id``."""
        self.state.reserve(cluster, request.resources, now or datetime.now(UTC), placement_id)

    def cool_down(
        self, cluster: str, reason: str, now: datetime | None = None, namespace: str | None = None
    ) -> datetime:
        """Keep ``cluster`` (or only its ``namespace``) out of decisions for the policy's cooldown."""
        until = (now or datetime.now(UTC)) + timedelta(seconds=self.spec.policy.cooldown_seconds)
        self.state.cool_down(cluster, until, reason, namespace=namespace)
        return until


@dataclass(frozen=True)
class FederationView:
    """Snapshots, cooldowns and in-flight reservations as of ``now``: the engine's inputs from state."""

    snapshots: dict[str, ClusterSnapshot]
    cooldowns: dict[str, datetime]
    reservations: dict[str, ResourceList]
    now: datetime


def _age(snapshot: ClusterSnapshot, now: datetime) -> float:
    return (now - snapshot.observed_at).total_seconds()


def _utilization_sample(snapshot: ClusterSnapshot) -> dict[str, Any]:
    allocatable: dict[str, int] = {}
    requested: dict[str, int] = {}
    for node in snapshot.nodes:
        if not node.schedulable:
            continue
        for name, amount in node.allocatable.items():
            allocatable[name] = allocatable.get(name, 0) + amount
            requested[name] = requested.get(name, 0) + node.requested.get(name, 0)
    return {
        "at": snapshot.observed_at.isoformat(),
        "used_fraction": {n: requested[n] / a for n, a in allocatable.items() if a},
    }


def _configured_spec_source() -> str:
    from airflow.configuration import conf

    value = conf.get("fedsched", "federation_spec", fallback="")
    if not value:
        raise SpecError(
            "federation: no spec given; pass federation=... or set [fedsched] federation_spec "
            "(AIRFLOW__FEDSCHED__FEDERATION_SPEC)"
        )
    return value


def _read_variable(name: str) -> Any:
    return AirflowVariableStateBackend().get_raw(name)


def _access_from_connection(cluster: str, conn_id: str, namespace: str | None) -> ClusterAccess:
    from airflow.sdk.exceptions import AirflowNotFoundException

    try:
        connection = BaseHook.get_connection(conn_id)
    except AirflowNotFoundException:
        raise ClusterAccessError(cluster, conn_id, "connection does not exist") from None
    except Exception as exc:  # the secrets backend's own failure: name it, never dump the connection
        raise ClusterAccessError(
            cluster, conn_id, f"connection cannot be read ({type(exc).__name__})"
        ) from None
    try:
        extras = connection.extra_dejson
    except Exception:
        raise ClusterAccessError(cluster, conn_id, "connection extras are not valid JSON") from None
    return access_from_extras(cluster, conn_id, connection.conn_type, extras, namespace)
