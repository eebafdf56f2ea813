"""Shared federation state: snapshots, cooldowns, reservations and per-cluster history.

Every worker process of an Airflow deployment must see the same cooldowns and snapshots, without an extra
service. The default backend keeps them in Airflow Variables (through the Task SDK inside a task, through
the metadata database elsewhere: the API server, the CLI, tests); an in-memory backend serves unit tests
and the CLI outside Airflow. Values are JSON.

Keys are ``fedsched/<federation>/<kind>/<cluster>[/<id>]``. Items that many writers add concurrently
(reservations) get a key each, so that no read-modify-write can lose one; so do plans, under
``fedsched/<federation>/plan/<dag_id>/<task_id>/<logical date>``.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from airflow_provider_fedsched.federation.plan import Plan
from airflow_provider_fedsched.federation.resources import ResourceList, add
from airflow_provider_fedsched.federation.snapshot import ClusterSnapshot

HISTORY_LIMIT = 200
"""Samples kept per cluster and kind (utilization, start latency, outcomes)."""
RESERVATION_TTL = timedelta(minutes=10)
"""A reservation older than this is dropped even if no snapshot has shown its pod (a lost worker)."""


class StateBackend(Protocol):
    """A small key-value store of JSON values shared by every worker process."""

    def get(self, key: str) -> Any | None: ...

    def set(self, key: str, value: Any) -> None: ...

    def delete(self, key: str) -> None: ...

    def keys(self, prefix: str) -> list[str]: ...

    def get_many(self, prefix: str) -> dict[str, Any]:
        """Every key under ``prefix`` with its value, in as few round trips as the backend allows."""
        ...


class MemoryStateBackend:
    """Process-local state, for unit tests and the CLI outside Airflow."""

    def __init__(self) -> None:
        self._values: dict[str, Any] = {}
        self._lock = threading.Lock()

    def get(self, key: str) -> Any | None:
        with self._lock:
            return self._values.get(key)

    def set(self, key: str, value: Any) -> None:
        with self._lock:
            self._values[key] = value

    def delete(self, key: str) -> None:
        with self._lock:
            self._values.pop(key, None)

    def keys(self, prefix: str) -> list[str]:
        with self._lock:
            return sorted(k for k in self._values if k.startswith(prefix))

    def get_many(self, prefix: str) -> dict[str, Any]:
        with self._lock:
            return {k: v for k, v in self._values.items() if k.startswith(prefix)}


def _in_task_runner() -> bool:
    try:
        from airflow.sdk.execution_time import task_runner
    except ImportError:  # pragma: no cover - Airflow is a dependency
        return False
    return getattr(task_runner, "SUPERVISOR_COMMS", None) is not None


class AirflowVariableStateBackend:
    """Airflow Variables: the Task SDK inside a running task, the metadata database elsewhere."""

    def get(self, key: str) -> Any | None:
        return self._read(key, deserialize_json=True)

    def get_raw(self, key: str) -> str | None:
        """A Variable's text as stored (for values that are not ours, like a federation spec)."""
        value = self._read(key, deserialize_json=False)
        return None if value is None else str(value)

    def _read(self, key: str, deserialize_json: bool) -> Any | None:
        if _in_task_runner():
            from airflow.sdk import Variable as SdkVariable

            return SdkVariable.get(key, default=None, deserialize_json=deserialize_json)
        # Straight from the metadata database: outside a task and outside the API server, Variable.get
        # only consults environment and external secrets backends.
        from airflow.models import Variable
        from airflow.utils.session import create_session

        with create_session() as session:
            row = session.query(Variable).filter(Variable.key == key).one_or_none()
            text = None if row is None else row.val
        if text is None or not deserialize_json:
            return text
        return json.loads(text)

    def set(self, key: str, value: Any) -> None:
        if _in_task_runner():
            from airflow.sdk import Variable as SdkVariable

            SdkVariable.set(key, value, serialize_json=True)
            return
        from airflow.models import Variable

        Variable.set(key, value, serialize_json=True)

    def delete(self, key: str) -> None:
        if _in_task_runner():
            from airflow.sdk import Variable as SdkVariable

            SdkVariable.delete(key)
            return
        from airflow.models import Variable

        Variable.delete(key)

    def keys(self, prefix: str) -> list[str]:
        if _in_task_runner():
            from airflow.sdk import Variable as SdkVariable

            return sorted(SdkVariable.keys(prefix=prefix))
        from airflow.models import Variable
        from airflow.utils.session import create_session

        with create_session() as session:
            rows = session.query(Variable.key).filter(Variable.key.startswith(prefix)).all()
        return sorted(row[0] for row in rows)

    def get_many(self, prefix: str) -> dict[str, Any]:
        if _in_task_runner():
            return {key: self.get(key) for key in self.keys(prefix)}
        from airflow.models import Variable
        from airflow.utils.session import create_session

        with create_session() as session:
            rows = session.query(Variable).filter(Variable.key.startswith(prefix)).all()
            return {row.key: json.loads(row.val) for row in rows if row.val is not None}


# Decoded snapshots by (state prefix, cluster), shared by every hook in the process.
_decoded: dict[tuple[str, str], ClusterSnapshot] = {}


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat()


def _parse(moment: str) -> datetime:
    return datetime.fromisoformat(moment).astimezone(UTC)


class FederationState:
    """Typed access to the shared state of one federation."""

    def __init__(self, backend: StateBackend, federation: str = "default") -> None:
        self.backend = backend
        self.prefix = f"fedsched/{federation}"
        # Only a store shared between processes needs time for concurrent lease claims to land.
        self.lease_settle = 0.0 if isinstance(backend, MemoryStateBackend) else 0.05
        self.embed_snapshots = False
        """Keep snapshots in the index too (one read for all); the hook turns it on for small federations."""

    def _key(self, kind: str, cluster: str, item: str | None = None) -> str:
        return f"{self.prefix}/{kind}/{cluster}" + (f"/{item}" if item else "")

    # Snapshots --------------------------------------------------------------------------------------
    def put_snapshot(self, snapshot: ClusterSnapshot) -> None:
        self.put_snapshots([snapshot])

    def put_snapshots(self, snapshots: Iterable[ClusterSnapshot]) -> None:
        """Store snapshots: each under its own key (the truth), then once in the index readers poll.

        The small index maps each cluster to when it was observed; with :attr:`embed_snapshots` (small
        federations) a bundle key holds every snapshot too, so that a fresh worker reads them all in one
        call. Two workers updating the index or the bundle at the same instant may drop one entry; that
        cluster then looks older than it is and is read from its own key or refreshed again: a wasted
        call, never a wrong decision.
        """
        snapshots = list(snapshots)
        documents = {s.cluster: s.model_dump(mode="json") for s in snapshots}
        for cluster, document in documents.items():
            self.backend.set(self._key("snapshot", cluster), document)
        index = dict(self.backend.get(f"{self.prefix}/snapshot-index") or {})
        for snapshot in snapshots:
            index[snapshot.cluster] = snapshot.observed_at.isoformat()
            _decoded[(self.prefix, snapshot.cluster)] = snapshot
        self.backend.set(f"{self.prefix}/snapshot-index", index)
        if self.embed_snapshots:
            bundle = dict(self.backend.get(f"{self.prefix}/snapshot-bundle") or {})
            bundle.update(documents)
            self.backend.set(f"{self.prefix}/snapshot-bundle", bundle)

    def get_snapshot(self, cluster: str) -> ClusterSnapshot | None:
        raw = self.backend.get(self._key("snapshot", cluster))
        return ClusterSnapshot.model_validate(raw) if raw else None

    def snapshots(self, clusters: Iterable[str]) -> dict[str, ClusterSnapshot]:
        """The newest snapshot of each cluster; only the ones that changed are read and decoded.

        Every worker reads the small snapshot index in one call and keeps decoded snapshots (with their
        fit indexes) in memory, so a decision against cached state costs one small read.
        """
        index = self.backend.get(f"{self.prefix}/snapshot-index") or {}
        result: dict[str, ClusterSnapshot] = {}
        outdated: dict[str, datetime] = {}
        for name in clusters:
            at = index.get(name)
            if not isinstance(at, str):
                continue
            cached = _decoded.get((self.prefix, name))
            if cached is not None and cached.observed_at == _parse(at):
                result[name] = cached
            else:
                outdated[name] = _parse(at)
        bundle = (
            self.backend.get(f"{self.prefix}/snapshot-bundle") if outdated and self.embed_snapshots else None
        )
        for name, at in outdated.items():
            document = (bundle or {}).get(name)
            snapshot = ClusterSnapshot.model_validate(document) if document else None
            if snapshot is None or snapshot.observed_at != at:
                snapshot = self.get_snapshot(name)  # the bundle lost this one: its own key is the truth
            if snapshot is not None:
                _decoded[(self.prefix, name)] = snapshot
                result[name] = snapshot
        return result

    # Cooldowns --------------------------------------------------------------------------------------
    def _cooldown_key(self, cluster: str, namespace: str | None) -> str:
        return self._key("cooldown", cluster if namespace is None else f"{cluster}@{namespace}")

    def cool_down(self, cluster: str, until: datetime, reason: str, namespace: str | None = None) -> None:
        """Keep ``cluster`` out of decisions until ``until``; only for pods of ``namespace`` when given
        (a namespace's quota says nothing about the cluster's other namespaces)."""
        self.backend.set(self._cooldown_key(cluster, namespace), {"until": _iso(until), "reason": reason})

    def clear_cooldown(self, cluster: str, namespace: str | None = None) -> None:
        self.backend.delete(self._cooldown_key(cluster, namespace))

    def cooldown(
        self, cluster: str, now: datetime, namespace: str | None = None
    ) -> tuple[datetime, str] | None:
        """``(until, reason)`` while ``cluster`` (or its ``namespace``) is cooling down at ``now``."""
        raw = self.backend.get(self._cooldown_key(cluster, namespace))
        if not raw:
            return None
        until = _parse(raw["until"])
        return (until, str(raw.get("reason", ""))) if until > now else None

    def cooldown_details(self, cluster: str, now: datetime) -> list[tuple[str | None, datetime, str]]:
        """Every cooldown of ``cluster`` in force at ``now``: ``(namespace or None, until, reason)``,
        the whole-cluster one first."""
        found: list[tuple[str | None, datetime, str]] = []
        for key, raw in self.backend.get_many(self._key("cooldown", cluster)).items():
            name, _, scope = key.rsplit("/", 1)[-1].partition("@")
            if name == cluster and raw and (until := _parse(raw["until"])) > now:
                found.append((scope or None, until, str(raw.get("reason", ""))))
        return sorted(found, key=lambda entry: (entry[0] is not None, entry[0] or ""))

    def cooldowns(
        self, clusters: Iterable[str], now: datetime, namespace: str | None = None
    ) -> dict[str, datetime]:
        """``cluster -> until`` for the clusters cooling down at ``now`` for pods of ``namespace``:
        whole-cluster cooldowns and those of that namespace (one read for all)."""
        wanted = set(clusters)
        result: dict[str, datetime] = {}
        for key, raw in self.backend.get_many(f"{self.prefix}/cooldown/").items():
            name, _, scope = key.rsplit("/", 1)[-1].partition("@")
            until = _parse(raw["until"]) if raw else None
            if name not in wanted or until is None or until <= now or (scope and scope != namespace):
                continue
            result[name] = max(until, result.get(name, until))
        return result

    # In-flight reservations -------------------------------------------------------------------------
    def reserve(
        self, cluster: str, requests: Mapping[str, int], now: datetime, placement_id: str | None = None
    ) -> str:
        """Hold ``requests`` on ``cluster`` until a snapshot taken after ``now`` shows the pod bound."""
        placement_id = placement_id or uuid.uuid4().hex
        self.backend.set(
            self._key("reservation", cluster, placement_id),
            {"requests": dict(requests), "at": _iso(now), "placement_id": placement_id},
        )
        return placement_id

    def release(self, cluster: str, placement_id: str) -> None:
        self.backend.delete(self._key("reservation", cluster, placement_id))

    def reservations(
        self, snapshots: Mapping[str, ClusterSnapshot], now: datetime
    ) -> dict[str, ResourceList]:
        """Per cluster, the requests reserved but not yet visible in that cluster's snapshot."""
        result: dict[str, ResourceList] = {}
        for key, raw in self.backend.get_many(f"{self.prefix}/reservation/").items():
            cluster, placement_id = key.rsplit("/", 2)[-2:]
            if not raw:
                continue
            at = _parse(raw["at"])
            snapshot = snapshots.get(cluster)
            seen = snapshot is not None and snapshot.observed_at > at and placement_id in snapshot.placements
            if seen or now - at > RESERVATION_TTL:
                self.backend.delete(key)
                continue
            result[cluster] = add(result.get(cluster, {}), raw["requests"])
        return result

    # Single-flight refresh lease --------------------------------------------------------------------
    def try_leases(self, clusters: Iterable[str], owner: str, now: datetime, ttl: timedelta) -> list[str]:
        """Leases so that one worker refreshes each cluster while the others read its snapshot.

        Variables have no compare-and-set: a worker writes its claims, lets the other workers that read
        "no lease" at the same moment write theirs (:attr:`lease_settle` seconds), then reads back and keeps
        only the clusters whose lease still names it: the last writer wins, once. A claim slower than the
        settle time can still make two workers refresh, which costs one extra API call and breaks nothing.
        """
        claimed = []
        for cluster in clusters:
            key = self._key("lease", cluster)
            current = self.backend.get(key)
            if current and current.get("owner") != owner and _parse(current["until"]) > now:
                continue
            self.backend.set(key, {"owner": owner, "until": _iso(now + ttl)})
            claimed.append(cluster)
        if claimed and self.lease_settle:
            time.sleep(self.lease_settle)
        won = []
        for cluster in claimed:
            confirmed = self.backend.get(self._key("lease", cluster))
            if confirmed is not None and confirmed.get("owner") == owner:
                won.append(cluster)
        return won

    def end_lease(self, cluster: str, owner: str) -> None:
        key = self._key("lease", cluster)
        current = self.backend.get(key)
        if current and current.get("owner") == owner:
            self.backend.delete(key)

    # Pods to delete when their cluster answers again ------------------------------------------------
    def add_orphan(self, cluster: str, namespace: str, pod: str) -> None:
        """Remember a pod that could not be confirmed deleted (its cluster stopped answering)."""
        self.backend.set(
            self._key("orphan", cluster, f"{namespace}.{pod}"), {"namespace": namespace, "pod": pod}
        )

    def orphans(self, cluster: str) -> list[tuple[str, str]]:
        found = (self.backend.get(key) for key in self.backend.keys(self._key("orphan", cluster) + "/"))
        return [(raw["namespace"], raw["pod"]) for raw in found if raw]

    def forget_orphan(self, cluster: str, namespace: str, pod: str) -> None:
        self.backend.delete(self._key("orphan", cluster, f"{namespace}.{pod}"))

    # History ----------------------------------------------------------------------------------------
    def record(self, cluster: str, kind: str, sample: Mapping[str, Any]) -> None:
        """Append a history sample (``kind``: utilization, start_latency, outcome), keeping the newest."""
        key = self._key(f"history-{kind}", cluster)
        samples = list(self.backend.get(key) or [])
        samples.append(dict(sample))
        self.backend.set(key, samples[-HISTORY_LIMIT:])

    def history(self, cluster: str, kind: str) -> list[dict[str, Any]]:
        return list(self.backend.get(self._key(f"history-{kind}", cluster)) or [])

    # Forecast profiles ------------------------------------------------------------------------------
    def put_forecast_profile(self, cluster: str, profile: Mapping[str, Any]) -> None:
        """The cluster's folded seasonal utilization profile (``federation.forecast.SeasonalProfile``)."""
        self.backend.set(self._key("forecast-profile", cluster), dict(profile))

    def get_forecast_profile(self, cluster: str) -> dict[str, Any] | None:
        raw = self.backend.get(self._key("forecast-profile", cluster))
        return dict(raw) if raw else None

    def put_forecast_models(self, models: Mapping[str, Mapping[str, Any]]) -> None:
        """Every cluster's fitted forecast in one key, so that a task reads them with one call."""
        self.backend.set(f"{self.prefix}/forecast-models", {name: dict(m) for name, m in models.items()})

    def get_forecast_models(self) -> dict[str, dict[str, Any]]:
        raw = self.backend.get(f"{self.prefix}/forecast-models")
        return dict(raw) if isinstance(raw, dict) else {}

    # Precomputed plans ------------------------------------------------------------------------------
    def _plan_key(self, dag_id: str, task_id: str, logical_date: datetime) -> str:
        stamp = logical_date.astimezone(UTC).strftime("%Y%m%dT%H%M%S.%fZ")
        return f"{self.prefix}/plan/{dag_id}/{task_id}/{stamp}"

    def put_plan(self, plan: Plan) -> None:
        """Store ``plan`` under its own key (one per DAG, task and logical date): replaces only itself."""
        self.backend.set(
            self._plan_key(plan.dag_id, plan.task_id, plan.logical_date), plan.model_dump(mode="json")
        )

    def get_plan(self, dag_id: str, task_id: str, logical_date: datetime) -> Plan | None:
        """The plan for this run of the task; raises ``ValueError`` if what is stored is not a plan."""
        raw = self.backend.get(self._plan_key(dag_id, task_id, logical_date))
        return Plan.model_validate(raw) if raw else None

    def delete_plan(self, plan: Plan) -> None:
        self.backend.delete(self._plan_key(plan.dag_id, plan.task_id, plan.logical_date))

    def plans(self, dag_id: str | None = None) -> list[Plan]:
        """Every stored plan (of ``dag_id``), by DAG, task and logical date; unreadable ones skipped."""
        prefix = f"{self.prefix}/plan/" + (f"{dag_id}/" if dag_id is not None else "")
        found: list[Plan] = []
        for key in self.backend.keys(prefix):
            raw = self.backend.get(key)
            if not raw:
                continue
            try:
                found.append(Plan.model_validate(raw))
            except ValueError:
                continue
        return sorted(found, key=lambda p: (p.dag_id, p.task_id, p.logical_date))
