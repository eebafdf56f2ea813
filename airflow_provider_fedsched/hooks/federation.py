"""FederationHook: the member clusters of a federation, their live snapshots and the shared state.

Sensing is separate from deciding: snapshots are collected concurrently, each cluster within its own
timeout, and kept in shared federation state with the policy's time-to-live; a decision reads them and
takes milliseconds. A cluster that does not answer in time is unavailable, with the reason, not guessed.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from functools import cached_property
from pathlib import Path
from typing import Any

from airflow.sdk import BaseHook

from airflow_provider_fedsched.federation.cycle import FederationView, PlacementCycle, in_flight_of
from airflow_provider_fedsched.federation.decision import Decision
from airflow_provider_fedsched.federation.engine import FederationEngine
from airflow_provider_fedsched.federation.forecast import ForecastModel
from airflow_provider_fedsched.federation.plan import Plan
from airflow_provider_fedsched.federation.request import TaskRequest
from airflow_provider_fedsched.federation.snapshot import ClusterSnapshot
from airflow_provider_fedsched.federation.spec import FederationSpec, PolicySpec, SpecError, load_spec
from airflow_provider_fedsched.hooks import ledgers, metrics, planning, ports, sensing, tenancy
from airflow_provider_fedsched.kube.access import (
    ClusterAccess,
    ClusterAccessError,
    MalformedConnection,
    MissingConnection,
    access_from_extras,
    access_from_kubeconfig_file,
)
from airflow_provider_fedsched.kube.clients import run_in_background
from airflow_provider_fedsched.state import (
    AirflowVariableStateBackend,
    BackendChoice,
    FederationState,
    StateBackend,
    open_backend,
)
from airflow_provider_fedsched.state.process import placement_lock
from airflow_provider_fedsched.validation.connection import extra_problem

VARIABLE_PREFIX = "variable:"
EMBED_LIMIT = 100
"""Federations up to this many clusters keep all snapshots in the one index key (about 15 KB each)."""
ORPHAN_SWEEP_SECONDS = 5.0
"""At a try's end, a cluster with pods written down is refreshed unless its snapshot is this recent."""
DEFAULT_SNAPSHOT_TIMEOUT = 2.0
"""Seconds a cluster has to answer the three list calls of a snapshot before it counts as unavailable."""
POLL_INTERVAL_BOUNDS = (2.0, 120.0)
"""Status polling and health checks: never more often than every 2 s, never less than every 2 min."""


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
    :param state: shared federation state: a :class:`FederationState`, a backend, ``"memory"`` or
        ``"airflow"``; default Airflow Variables (shared by every worker), or memory with ``kubeconfig``.
    :param kubeconfig: outside Airflow, resolve each member's ``conn_id`` to the context of this
        kubeconfig file named after the cluster (as ``fedsched sim up`` writes it).
    :param snapshot_timeout: seconds each cluster has to answer a snapshot.
    """

    hook_name = "Kubernetes federation"

    def __init__(
        self,
        federation: str | Path | Mapping[str, Any] | FederationSpec | None = None,
        *,
        state: FederationState | StateBackend | BackendChoice | None = None,
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
    def serializable_source(self) -> dict[str, Any]:
        """The spec as a JSON document (for trigger kwargs: the triggerer reads no file or Variable, and
        the spec holds connection ids only, never credentials)."""
        return self.spec.model_dump(mode="json", by_alias=True)

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
            default: BackendChoice = "memory" if self.kubeconfig else "airflow"
            state = FederationState(open_backend(self._state_arg or default), federation=self.spec.name)
        # Up to EMBED_LIMIT clusters, a fresh worker reads every snapshot with the index, in one call.
        state.snapshots.embed = len(self.spec.clusters) <= EMBED_LIMIT
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

    # Snapshots (see hooks/sensing.py) ---------------------------------------------------------------
    async def acollect(self, clusters: Iterable[str] | None = None) -> dict[str, ClusterSnapshot]:
        """Collect fresh snapshots from the clusters now (concurrently) and store them in shared state."""
        return await sensing.acollect(self, clusters)

    def collect(self, clusters: Iterable[str] | None = None) -> dict[str, ClusterSnapshot]:
        """Synchronous :meth:`acollect` (not from inside a running event loop: use ``acollect``)."""
        return run_in_background(self.acollect(clusters))

    def snapshots(
        self,
        clusters: Iterable[str] | None = None,
        now: datetime | None = None,
        fresh_after: Mapping[str, datetime] | None = None,
        wait: bool = True,
    ) -> dict[str, ClusterSnapshot]:
        """Snapshots no older than half the policy's TTL, refreshing stale ones single-flight (and those
        observed before their cluster's moment in ``fresh_after``); ``wait`` False: never wait for
        another worker's refresh (see hooks/sensing.py)."""
        return sensing.snapshots(self, clusters, now, fresh_after, wait)

    # Decisions ---------------------------------------------------------------------------------------
    def decide(
        self,
        request: TaskRequest,
        *,
        exclude: Mapping[str, str] | None = None,
        excluded_at: Mapping[str, datetime] | None = None,
        impossible: Mapping[str, str] | None = None,
        policy: PolicySpec | None = None,
        forecast: Mapping[str, float] | None = None,
        now: datetime | None = None,
    ) -> Decision:
        """Score ``request`` against fresh (or single-flight refreshed) snapshots and shared state.

        ``exclude``: clusters left in this try (considered again once a snapshot taken after
        ``excluded_at`` shows them answering); ``impossible``: clusters found never to fit it (see
        the placement cycle, federation/cycle.py)."""
        return self.cycle.decide(
            request,
            exclude=exclude,
            excluded_at=excluded_at,
            impossible=impossible,
            policy=policy,
            forecast=forecast,
            now=now,
        )

    @cached_property
    def cycle(self) -> PlacementCycle:
        """The placement cycle over this hook's ports: shared state, the members' ledgers, reclaim."""
        return PlacementCycle(
            self.engine, ports.HookState(self), ports.HookLedger(self), ports.HookReclaimer(self)
        )

    def view(
        self, clusters: Iterable[str], namespace: str | None, now: datetime | None = None
    ) -> FederationView:
        """What a decision for a pod of ``namespace`` needs from shared state about ``clusters`` (with
        ``namespace`` None, whole-cluster cooldowns only)."""
        names = list(clusters)
        snapshots = self.snapshots(names, now=now)
        now = datetime.now(UTC) if now is None else now  # a refresh may have taken a moment
        # Oldest first: the engine charges them in the order they were placed.
        reservations, in_flight, by_tenant = in_flight_of(self.state.reservations.holds(snapshots, now))
        return FederationView(
            snapshots=snapshots,
            cooldowns=self.state.cooldowns.in_force(names, now, namespace=namespace),
            reservations=reservations,
            now=now,
            tenancy=tenancy.inputs(self, snapshots, by_tenant, now),
            in_flight=in_flight,
        )

    def place(
        self,
        request: TaskRequest,
        placement_id: str,
        *,
        exclude: Mapping[str, str] | None = None,
        excluded_at: Mapping[str, datetime] | None = None,
        impossible: Mapping[str, str] | None = None,
        policy: PolicySpec | None = None,
        forecast: Mapping[str, float] | None = None,
    ) -> Decision:
        """Decide and, when placed, hold the request on the chosen cluster: in that cluster's ledger
        (compare-and-set, across threads, processes and hosts), and in shared state for the next decisions.
        A cluster whose ledger has no room left (other workers took it) is left out and the decision made
        again. Without ledgers, deciding and reserving are one step per process."""
        started = time.perf_counter()
        decision = self._place(request, placement_id, exclude, excluded_at, impossible, policy, forecast)
        metrics.decision(decision, time.perf_counter() - started)
        return decision

    def _place(
        self,
        request: TaskRequest,
        placement_id: str,
        exclude: Mapping[str, str] | None,
        excluded_at: Mapping[str, datetime] | None,
        impossible: Mapping[str, str] | None,
        policy: PolicySpec | None,
        forecast: Mapping[str, float] | None,
    ) -> Decision:
        with placement_lock if not ledgers.enabled() else contextlib.nullcontext():
            return self.cycle.place(
                request,
                placement_id,
                exclude=exclude,
                excluded_at=excluded_at,
                impossible=impossible,
                policy=policy,
                forecast=forecast,
            )

    def reserve(
        self,
        cluster: str,
        request: TaskRequest,
        placement_id: str,
        now: datetime | None = None,
        policy: PolicySpec | None = None,
    ) -> bool:
        """Hold ``request`` on ``cluster`` until its snapshot shows the pod with ``placement_id``: in the
        cluster's ledger when it keeps one (False when the room is gone), and in shared state."""
        return self.cycle.ledger.reserve(cluster, request, placement_id, policy, now)

    def release(self, cluster: str, placement_id: str) -> None:
        """Drop the reservation of ``placement_id`` (its pod ended or left the cluster)."""
        self.cycle.ledger.release(cluster, placement_id)

    def cool_down(
        self, cluster: str, reason: str, now: datetime | None = None, namespace: str | None = None
    ) -> datetime:
        """Keep ``cluster`` (or only its ``namespace``) out of decisions for the policy's cooldown."""
        until = (now or datetime.now(UTC)) + timedelta(seconds=self.spec.policy.cooldown_seconds)
        self.state.cooldowns.set(cluster, until, reason, namespace=namespace)
        metrics.cooldown(cluster)
        return until

    def clear_cooldown(self, cluster: str, namespace: str | None = None) -> None:
        self.state.cooldowns.clear(cluster, namespace)

    def cooldown(
        self, cluster: str, now: datetime | None = None, namespace: str | None = None
    ) -> tuple[datetime, str] | None:
        """``(until, reason)`` while ``cluster`` (or only its ``namespace``) is cooling down."""
        return self.state.cooldowns.get(cluster, now or datetime.now(UTC), namespace)

    def cooldowns(
        self, clusters: Iterable[str], now: datetime | None = None, namespace: str | None = None
    ) -> dict[str, datetime]:
        """``cluster -> until`` for those cooling down for pods of ``namespace`` (one read for all)."""
        return self.state.cooldowns.in_force(clusters, now or datetime.now(UTC), namespace)

    def cooldown_details(
        self, cluster: str, now: datetime | None = None
    ) -> list[tuple[str | None, datetime, str]]:
        """Every cooldown of ``cluster`` in force: ``(namespace or None, until, reason)``, cluster first."""
        return self.state.cooldowns.details(cluster, now or datetime.now(UTC))

    # Shared records --------------------------------------------------------------------------------
    def stored_snapshot(self, cluster: str) -> ClusterSnapshot | None:
        """The newest snapshot of ``cluster`` in shared state, however old (no refresh)."""
        return self.state.snapshots.get(cluster)

    def stored_snapshots(self, clusters: Iterable[str]) -> dict[str, ClusterSnapshot]:
        """The newest snapshot in shared state of each of ``clusters`` that has one (no refresh)."""
        return self.state.snapshots.newest(clusters)

    def store_snapshots(self, snapshots: Iterable[ClusterSnapshot]) -> None:
        """Snapshots taken elsewhere (files given to the CLI) become the shared ones."""
        self.state.snapshots.put(snapshots)

    def quota_limits(self, cluster: str) -> dict[str, dict[str, int]]:
        """The ResourceQuota limits the last refresh of ``cluster`` read, if any."""
        return self.state.quota_limits.get(cluster)

    def record(self, cluster: str, kind: str, sample: Mapping[str, Any]) -> None:
        """Add a history sample (``kind``: utilization, start_latency, outcome, wait) for the page and
        forecast."""
        self.state.history.append(cluster, kind, sample)

    def history(self, cluster: str, kind: str) -> list[dict[str, Any]]:
        return self.state.history.samples(cluster, kind)

    def add_orphan(self, cluster: str, namespace: str, pod: str, kind: str = "pod") -> None:
        """A pod (or a Job, ``kind="job"``) not confirmed gone: the next snapshot of ``cluster`` that
        answers deletes it (a Job with its pods)."""
        self.state.orphans.add(cluster, namespace, pod, kind)

    def orphans(self, cluster: str, kind: str = "pod") -> list[tuple[str, str]]:
        return self.state.orphans.of(cluster, kind)

    def sweep_orphans(self) -> list[str]:
        """Refresh the snapshots of members where pods or Jobs are written down, unless one was taken
        within :data:`ORPHAN_SWEEP_SECONDS` and answered: each refresh that reaches its cluster deletes
        them. Returns the members refreshed. Every try calls this at its end, so a cluster that answers
        again is cleaned up even when no later decision needs its snapshot."""
        written = self.state.orphans.clusters()  # one listing, not a read per member
        left = [c.name for c in self.spec.clusters if c.name in written]
        newest = self.state.snapshots.newest(left) if left else {}
        now = datetime.now(UTC)
        due = [
            name
            for name in left
            if name not in newest
            or not newest[name].reachable
            or (now - newest[name].observed_at).total_seconds() > ORPHAN_SWEEP_SECONDS
        ]
        if due:
            self.collect(due)
        return due

    def forget_orphan(self, cluster: str, namespace: str, pod: str, kind: str = "pod") -> None:
        """Taken off the list: a later try watches it again (it adopted it)."""
        self.state.orphans.forget(cluster, namespace, pod, kind)

    def swept_success(self, cluster: str, namespace: str, name: str, kind: str = "pod") -> bool:
        """Whether the snapshot that deleted this orphan pod (a Job: ``kind="job"``) saw it end well."""
        return self.state.orphans.was_swept_succeeded(cluster, namespace, name, kind)

    def forget_swept_success(self, cluster: str, namespace: str, name: str, kind: str = "pod") -> None:
        """The task took that success: the note goes."""
        self.state.orphans.forget_swept(cluster, namespace, name, kind)

    # Deferred tries (swept by hooks/sensing.py when a try ends with no trigger watching) --------------
    def note_deferral(
        self, cluster: str, namespace: str, name: str, task_instance: Any, kind: str = "pod"
    ) -> None:
        """A try defers while its pod (a Job: ``kind="job"``) runs: written down with its task instance."""
        ids = {
            "dag_id": task_instance.dag_id,
            "run_id": task_instance.run_id,
            "task_id": task_instance.task_id,
            "map_index": task_instance.map_index,
        }
        self.state.deferred.add(cluster, namespace, name, ids, kind=kind)

    def deferral(self, cluster: str, namespace: str, name: str, kind: str = "pod") -> dict[str, Any] | None:
        """The deferral's entry (with ``ended`` once its trigger saw the pod end), if written down."""
        return self.state.deferred.get(cluster, namespace, name, kind)

    def note_deferred_pod_ended(self, cluster: str, namespace: str, name: str, phase: str) -> None:
        """The pod trigger saw the deferred pod end in ``phase``."""
        self.state.deferred.ended(cluster, namespace, name, phase)

    def forget_deferral(self, cluster: str, namespace: str, name: str, kind: str = "pod") -> None:
        self.state.deferred.forget(cluster, namespace, name, kind)

    # Tenants (see hooks/tenancy.py) -------------------------------------------------------------------
    def tenants(self, now: datetime | None = None) -> list[dict[str, Any]]:
        """Per tenant: quota, use, borrowed, waiting tasks and spend this period (human quantities)."""
        return tenancy.summary(self, now or datetime.now(UTC))

    def charge(self, placement_id: str, charge: Mapping[str, Any]) -> None:
        """Record what one cluster attempt cost (``tenant``, ``cost``, ``egress_gb``, ``at``, ...)."""
        self.state.spend.charge(placement_id, charge)

    def charges(self, since: datetime | None = None) -> list[dict[str, Any]]:
        """Every attempt's charge since ``since`` (the cost report), oldest first."""
        return self.state.spend.charges(since)

    # Plans and forecasts (see hooks/planning.py) -----------------------------------------------------
    def planned_decision(
        self,
        request: TaskRequest,
        *,
        dag_id: str,
        task_id: str,
        logical_date: datetime | None,
        exclude: dict[str, str],
        policy: PolicySpec | None,
    ) -> tuple[Decision | None, str]:
        """A decision from a valid precomputed plan for this run, or ``(None, why no plan was used)``."""
        return planning.planned_decision(
            self,
            request,
            dag_id=dag_id,
            task_id=task_id,
            logical_date=logical_date,
            exclude=exclude,
            policy=policy,
        )

    def forecast_idle(
        self, start: datetime, end: datetime, resources: Iterable[str] | None = None
    ) -> dict[str, float] | None:
        """Predicted idle fraction per cluster over ``[start, end)`` from the planner's stored models."""
        return planning.forecast_idle(self, start, end, resources)

    def fold_profiles(self) -> dict[str, ForecastModel]:
        """Fold new utilization history into the stored profiles and store the fitted models."""
        return planning.fold_profiles(self)

    def put_plan(self, plan: Plan) -> None:
        """Store ``plan`` under its own key (one per DAG, task and logical date): replaces only itself."""
        self.state.plans.put(plan)

    def get_plan(self, dag_id: str, task_id: str, logical_date: datetime) -> Plan | None:
        """The stored plan for this run of the task; ``ValueError`` if what is stored is not a plan."""
        return self.state.plans.get(dag_id, task_id, logical_date)

    def plans(self, dag_id: str | None = None) -> list[Plan]:
        return self.state.plans.all(dag_id)

    def delete_plan(self, plan: Plan) -> None:
        self.state.plans.delete(plan)


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
        raise _not_found(cluster, conn_id) from None
    except Exception as exc:  # the secrets backend's own failure: name it, never dump the connection
        raise MalformedConnection(
            cluster, conn_id, f"connection cannot be read ({type(exc).__name__})"
        ) from None
    # Checked before Airflow reads it: Airflow logs a traceback and reads no extras at all.
    problem = extra_problem(connection.extra)
    if problem is not None:
        raise MalformedConnection(cluster, conn_id, problem)
    return access_from_extras(cluster, conn_id, connection.conn_type, connection.extra_dejson, namespace)


def _not_found(cluster: str, conn_id: str) -> ClusterAccessError:
    """Why Airflow found no connection ``conn_id``. Airflow also says "not found" when a backend holds it
    but fails to read it (a database row whose extra is not JSON, logged only at debug level): ask each
    backend once more and name the one that fails and why; else the connection does not exist."""
    try:
        from airflow.sdk.execution_time.supervisor import ensure_secrets_backend_loaded

        backends = ensure_secrets_backend_loaded()
    except Exception:  # an Airflow without this lookup: what Airflow said stands
        return MissingConnection(cluster, conn_id)
    for backend in backends:
        where = f"connection cannot be read from {type(backend).__name__}"
        try:
            found = backend.get_connection(conn_id=conn_id)
            extra = None if found is None else found.extra  # a database row's extra is decrypted here
        except Exception as exc:
            # Airflow's own message for a stored extra that is not JSON names the field; any other
            # exception is named by its type only (its text may quote the connection).
            if type(exc).__module__.startswith("sqlalchemy"):  # no table yet, or no database at all
                return MissingConnection(
                    cluster,
                    conn_id,
                    f"connection is in no secrets backend nor AIRFLOW_CONN_{conn_id.upper()}, and the "
                    f"metadata database cannot be read ({type(exc).__name__}: before `airflow db migrate`?)",
                )
            if isinstance(exc, json.JSONDecodeError):  # its position, never the text around it
                reason = f"not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})"
            elif "non-JSON in `extra`" in str(exc):
                reason = "its extra is not valid JSON"
            else:
                reason = type(exc).__name__
            return MalformedConnection(cluster, conn_id, f"{where}: {reason}")
        if found is not None:
            problem = extra_problem(extra) or "Airflow fails on it"
            return MalformedConnection(cluster, conn_id, f"{where}: {problem}")
    return MissingConnection(cluster, conn_id)
