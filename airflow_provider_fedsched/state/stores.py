"""Typed stores over one backend: snapshots, cooldowns, reservations, leases, orphans, history, plans.

Keys are ``fedsched/<federation>/<kind>/<cluster>[/<id>]``. Items that many writers add concurrently
(reservations, orphans, history samples) get a key each, so that no read-modify-write can lose one; so do
plans, under ``fedsched/<federation>/plan/<dag_id>/<task_id>/<logical date>``.
"""

from __future__ import annotations

import base64
import binascii
import itertools
import json
import os
import time
import uuid
import zlib
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar

from airflow_provider_fedsched.federation.cycle import Pending, in_flight_of
from airflow_provider_fedsched.federation.plan import Plan
from airflow_provider_fedsched.federation.resources import ResourceList
from airflow_provider_fedsched.federation.snapshot import ClusterSnapshot
from airflow_provider_fedsched.state.backend import StateBackend
from airflow_provider_fedsched.state.base import Store, mapping, read_stored
from airflow_provider_fedsched.state.cleanup import DeferredStore, OrphanStore
from airflow_provider_fedsched.state.tenants import SpendStore, WaitingStore
from airflow_provider_fedsched.validation.stored import (
    MAX_STORED_BYTES,
    Amount,
    StoredCooldown,
    StoredLease,
    StoredReservation,
    StoredSample,
    loads_bounded,
    parse_as,
    parse_model,
    parse_snapshot,
    stored_time,
)

HISTORY_LIMIT = 200
"""Samples kept per cluster and kind (utilization, start latency, outcomes)."""
_HISTORY_SLACK = 20
"""Pruning starts this many samples past the limit, so that not every append deletes."""
RESERVATION_TTL = timedelta(minutes=10)
"""A reservation older than this is dropped even if no snapshot has shown its pod (a lost worker)."""


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat()


_cooldown = parse_model(StoredCooldown)
_reservation = parse_model(StoredReservation)
_lease = parse_model(StoredLease)
_sample = parse_model(StoredSample)
_plan = parse_model(Plan)
_quota_limits = parse_as(dict[str, dict[str, Amount]])
_models = parse_as(dict[str, dict[str, Any]])


def _dict(raw: Any) -> dict[str, Any]:
    return dict(raw) if isinstance(raw, dict) else {}


class SnapshotStore(Store):
    """Each cluster's newest snapshot, an index of when each was observed, a bundle (small federations)."""

    # Decoded snapshots by (state prefix, cluster), shared by every hook in the process: decoding and
    # indexing a snapshot costs more than reading it.
    _decoded: ClassVar[dict[tuple[str, str], ClusterSnapshot]] = {}
    # The index's entries as read (each cluster's observed_at text and its time), parsed once each.
    _times: ClassVar[dict[tuple[str, str], tuple[Any, datetime | None]]] = {}

    def __init__(self, backend: StateBackend, prefix: str) -> None:
        super().__init__(backend, prefix)
        self.embed = False
        """Keep snapshots in a bundle too (one read for all); the hook turns it on for small federations."""

    def put(self, snapshots: Iterable[ClusterSnapshot]) -> None:
        """Store snapshots: each under its own key (the truth), then once in the index readers poll.

        Two workers updating the index or the bundle at the same instant may drop one entry; that cluster
        then looks older than it is and is read from its own key or refreshed again: a wasted call, never
        a wrong decision.
        """
        snapshots = list(snapshots)
        documents = {s.cluster: s.model_dump(mode="json") for s in snapshots}
        for cluster, document in documents.items():
            self.backend.set(self._key("snapshot", cluster), document)
        index = _dict(self.backend.get(f"{self.prefix}/snapshot-index"))  # a corrupted index is rebuilt
        for snapshot in snapshots:
            index[snapshot.cluster] = snapshot.observed_at.isoformat()
            self._decoded[(self.prefix, snapshot.cluster)] = snapshot
        self.backend.set(f"{self.prefix}/snapshot-index", index)
        if self.embed:
            key = f"{self.prefix}/snapshot-bundle"
            bundle = read_stored(key, self.backend.get(key) or None, _unpacked) or {}
            bundle.update(documents)
            self.backend.set(key, _packed(bundle))

    def get(self, cluster: str) -> ClusterSnapshot | None:
        key = self._key("snapshot", cluster)
        return read_stored(key, self.backend.get(key) or None, parse_snapshot)

    def newest(self, clusters: Iterable[str]) -> dict[str, ClusterSnapshot]:
        """The newest snapshot of each cluster; only the ones that changed are read and decoded."""
        index_key = f"{self.prefix}/snapshot-index"
        index = self.backend.get(index_key) or {}
        if not isinstance(index, dict):
            index = read_stored(index_key, index, mapping) or {}
        result: dict[str, ClusterSnapshot] = {}
        outdated: dict[str, datetime] = {}
        times = self._times
        for name in clusters:
            raw = index.get(name)
            known = times.get((self.prefix, name))
            if known is not None and known[0] == raw:
                at = known[1]
            else:
                at = read_stored(f"{index_key}[{name}]", raw, stored_time)
                times[(self.prefix, name)] = (raw, at)
            if at is None:
                continue
            cached = self._decoded.get((self.prefix, name))
            if cached is not None and cached.observed_at == at:
                result[name] = cached
            else:
                outdated[name] = at
        bundle_key = f"{self.prefix}/snapshot-bundle"
        stored = self.backend.get(bundle_key) if outdated and self.embed else None
        bundle = read_stored(bundle_key, stored or None, _unpacked)
        for name, at in outdated.items():
            document = (bundle or {}).get(name)
            snapshot = read_stored(f"{bundle_key}[{name}]", document or None, parse_snapshot)
            if snapshot is None or snapshot.observed_at != at:
                snapshot = self.get(name)  # the bundle lost this one: its own key is the truth
            if snapshot is not None:
                self._decoded[(self.prefix, name)] = snapshot
                result[name] = snapshot
        return result


def _packed(bundle: Mapping[str, Any]) -> dict[str, str]:
    """The bundle as stored: its JSON compressed (zlib, base64). Snapshots repeat the same names on every
    node: 150 KB for 10 clusters of 50 nodes shrinks about tenfold, and a fresh worker reads it through
    the Task SDK, which copies and scans every Variable it returns (some 80 ms for the 150 KB)."""
    text = json.dumps(bundle, separators=(",", ":"), sort_keys=True).encode()
    return {"zlib": base64.b64encode(zlib.compress(text, 6)).decode("ascii")}


def _unpacked(stored: Any) -> dict[str, Any]:
    """The bundle's documents from what is stored: the packed form, or a plain mapping (written before
    the bundle was packed). Raises ``ValueError`` for anything else, or a document that unpacks to more
    than :data:`MAX_STORED_BYTES`: the snapshots are then read from their own keys."""
    if isinstance(stored, dict) and set(stored) == {"zlib"} and isinstance(stored["zlib"], str):
        inflate = zlib.decompressobj()
        try:
            text = inflate.decompress(base64.b64decode(stored["zlib"], validate=True), MAX_STORED_BYTES + 1)
        except (zlib.error, binascii.Error) as exc:
            raise ValueError(f"not a packed snapshot bundle ({exc})") from None
        if len(text) > MAX_STORED_BYTES or inflate.unconsumed_tail:
            raise ValueError(f"a packed snapshot bundle unpacks to more than {MAX_STORED_BYTES:,} bytes")
        stored = loads_bounded(text)
    return dict(mapping(stored))  # a copy: backends may hand out the values they keep


class QuotaLimitStore(Store):
    """Per cluster, each namespace's hard quota limits (from the latest snapshot that answered)."""

    def put(self, cluster: str, limits: Mapping[str, Mapping[str, int]]) -> None:
        key = self._key("quota-limits", cluster)
        document = {ns: dict(values) for ns, values in limits.items()}
        if self.backend.get(key) != document:  # written only when a quota changed
            self.backend.set(key, document)

    def get(self, cluster: str) -> dict[str, dict[str, int]]:
        key = self._key("quota-limits", cluster)
        limits: dict[str, dict[str, int]] | None = read_stored(
            key, self.backend.get(key) or None, _quota_limits
        )
        return limits or {}


class CooldownStore(Store):
    """Clusters (or one namespace of a cluster) that take no new work until a moment."""

    def _cooldown_key(self, cluster: str, namespace: str | None) -> str:
        return self._key("cooldown", cluster if namespace is None else f"{cluster}@{namespace}")

    def set(self, cluster: str, until: datetime, reason: str, namespace: str | None = None) -> None:
        """Keep ``cluster`` out of decisions until ``until``; only for pods of ``namespace`` when given
        (a namespace's quota says nothing about the cluster's other namespaces)."""
        self.backend.set(self._cooldown_key(cluster, namespace), {"until": _iso(until), "reason": reason})

    def clear(self, cluster: str, namespace: str | None = None) -> None:
        self.backend.delete(self._cooldown_key(cluster, namespace))

    def get(self, cluster: str, now: datetime, namespace: str | None = None) -> tuple[datetime, str] | None:
        """``(until, reason)`` while ``cluster`` (or its ``namespace``) is cooling down at ``now``."""
        key = self._cooldown_key(cluster, namespace)
        stored = read_stored(key, self.backend.get(key) or None, _cooldown)
        if stored is None:
            return None
        return (stored.until, stored.reason) if stored.until > now else None

    def details(self, cluster: str, now: datetime) -> list[tuple[str | None, datetime, str]]:
        """Every cooldown of ``cluster`` in force at ``now``: ``(namespace or None, until, reason)``,
        the whole-cluster one first."""
        found: list[tuple[str | None, datetime, str]] = []
        for key, raw in self.backend.get_many(self._key("cooldown", cluster)).items():
            name, _, scope = key.rsplit("/", 1)[-1].partition("@")
            stored = read_stored(key, raw or None, _cooldown) if name == cluster else None
            if stored is not None and stored.until > now:
                found.append((scope or None, stored.until, stored.reason))
        return sorted(found, key=lambda entry: (entry[0] is not None, entry[0] or ""))

    def in_force(
        self, clusters: Iterable[str], now: datetime, namespace: str | None = None
    ) -> dict[str, datetime]:
        """``cluster -> until`` for the clusters cooling down at ``now`` for pods of ``namespace``:
        whole-cluster cooldowns and those of that namespace (one read for all)."""
        wanted = set(clusters)
        result: dict[str, datetime] = {}
        for key, raw in self.backend.get_many(f"{self.prefix}/cooldown/").items():
            name, _, scope = key.rsplit("/", 1)[-1].partition("@")
            stored = read_stored(key, raw or None, _cooldown) if name in wanted else None
            until = None if stored is None else stored.until
            if name not in wanted or until is None or until <= now or (scope and scope != namespace):
                continue
            result[name] = max(until, result.get(name, until))
        return result


class ReservationStore(Store):
    """Requests placed on a cluster but not yet visible in its snapshot (one key per placement)."""

    def hold(
        self,
        cluster: str,
        requests: Mapping[str, int],
        now: datetime,
        placement_id: str | None = None,
        tenant: str | None = None,
        after: Iterable[str] = (),
    ) -> str:
        """Hold ``requests`` on ``cluster`` until a snapshot taken after ``now`` shows the pod bound
        (counted against ``tenant`` meanwhile, when given). ``after``: the ``write`` tokens of the holds
        read just before (each write of a hold gets a new token: ``federation/cycle.counted_holds``)."""
        placement_id = placement_id or uuid.uuid4().hex
        value: dict[str, Any] = {
            "requests": dict(requests),
            "at": _iso(now),
            "placement_id": placement_id,
            "write": uuid.uuid4().hex[:16],
        }
        if tenant is not None:
            value["tenant"] = tenant
        seen = sorted(set(after))
        if seen:
            value["after"] = seen
        self.backend.set(self._key("reservation", cluster, placement_id), value)
        return placement_id

    def release(self, cluster: str, placement_id: str) -> None:
        """Drop the reservation, and mark the cluster's room freed now (a placement there ended or left
        it): the tries waiting for a cluster read the marks to decide again (``hooks/waiting.py``).

        The marks are one index, so that a waiting try reads them all in one call however large the
        federation; two releases at the same instant may drop one mark (as for the snapshot index): the
        tries waiting for that cluster then see its room at their next snapshot refresh instead."""
        self.backend.delete(self._key("reservation", cluster, placement_id))
        key = f"{self.prefix}/freed-index"
        marks = _dict(self.backend.get(key))  # a corrupted index is rebuilt
        marks[cluster] = _iso(datetime.now(UTC))
        self.backend.set(key, marks)

    def freed(self, clusters: Iterable[str]) -> dict[str, datetime]:
        """When a reservation on each of ``clusters`` was last released (one read for all)."""
        key = f"{self.prefix}/freed-index"
        marks = self.backend.get(key) or {}
        if not isinstance(marks, dict):
            marks = read_stored(key, marks, mapping) or {}
        found: dict[str, datetime] = {}
        for cluster in clusters:
            at = read_stored(f"{key}[{cluster}]", marks.get(cluster), stored_time)
            if at is not None:
                found[cluster] = at
        return found

    def pending(self, snapshots: Mapping[str, ClusterSnapshot], now: datetime) -> dict[str, ResourceList]:
        """Per cluster, the requests reserved but not yet visible in that cluster's snapshot."""
        return self.pending_by(snapshots, now)[0]

    def pending_by(
        self, snapshots: Mapping[str, ClusterSnapshot], now: datetime
    ) -> tuple[dict[str, ResourceList], dict[str, list[tuple[datetime, str, ResourceList]]]]:
        """:meth:`pending` per cluster, and per tenant each pending reservation as ``(at, placement id,
        requests)``, oldest first (one read for both)."""
        summed, _, tenants = in_flight_of(self.holds(snapshots, now))
        return summed, tenants

    # Per key, the stored value and the hold it was read as (None: unreadable), shared in the process: a
    # decision reads every reservation in flight, and most were read as they are by the decision before.
    _read: ClassVar[dict[str, tuple[Any, Pending | None]]] = {}

    def holds(self, snapshots: Mapping[str, ClusterSnapshot], now: datetime) -> list[Pending]:
        """Every reservation not yet seen in its cluster's snapshot nor expired (those are deleted on the
        way), oldest first (by time, then placement id)."""
        found: list[Pending] = []
        listed = self.backend.get_many(f"{self.prefix}/reservation/")
        for key in [key for key in self._read if key.startswith(self.prefix) and key not in listed]:
            self._read.pop(key, None)
        for key, raw in listed.items():
            known = self._read.get(key)
            if known is not None and known[0] == raw:
                hold = known[1]
            else:
                cluster, placement_id = key.rsplit("/", 2)[-2:]
                stored = read_stored(key, raw or None, _reservation)
                hold = None
                if stored is not None:
                    hold = Pending(
                        stored.at,
                        placement_id,
                        cluster,
                        stored.tenant,
                        dict(stored.requests),
                        stored.write,
                        frozenset(stored.after),
                    )
                self._read[key] = (raw, hold)
            if hold is None:
                continue
            snapshot = snapshots.get(hold.cluster)
            at = hold.at
            seen = (
                snapshot is not None
                and snapshot.observed_at > at
                and hold.placement_id in snapshot.placements
            )
            if seen or now - at > RESERVATION_TTL:
                self.backend.delete(key)
                continue
            found.append(hold)
        found.sort(key=lambda hold: (hold.at, hold.placement_id))
        return found


class LeaseStore(Store):
    """Single-flight refresh: one worker refreshes each cluster while the others read its snapshot."""

    def claim(self, clusters: Iterable[str], owner: str, now: datetime, ttl: timedelta) -> list[str]:
        """The clusters whose refresh lease ``owner`` won.

        Without compare-and-set a worker writes its claims, lets the other workers that read "no lease" at
        the same moment write theirs (the backend's settle time), then reads back and keeps only the
        clusters whose lease still names it: the last writer wins, once. A claim slower than the settle
        time can still make two workers refresh, which costs one extra API call and breaks nothing.
        """
        claimed = []
        for cluster in clusters:
            key = self._key("lease", cluster)
            current = self.backend.get(key)
            held = read_stored(key, current or None, _lease)
            if held is not None and held.owner != owner and held.until > now:
                continue
            self.backend.set(key, {"owner": owner, "until": _iso(now + ttl)})
            claimed.append(cluster)
        settle = self.backend.consistency.settle_seconds
        if claimed and settle:
            time.sleep(settle)
        won = []
        for cluster in claimed:
            key = self._key("lease", cluster)
            confirmed = read_stored(key, self.backend.get(key) or None, _lease)
            if confirmed is not None and confirmed.owner == owner:
                won.append(cluster)
        return won

    def end(self, cluster: str, owner: str) -> None:
        key = self._key("lease", cluster)
        current = read_stored(key, self.backend.get(key) or None, _lease)
        if current is not None and current.owner == owner:
            self.backend.delete(key)


class HistoryStore(Store):
    """Per cluster and kind (utilization, start_latency, outcome), the newest samples.

    Each sample is a key of its own, named so that keys sort by time: concurrent writers never overwrite
    each other's samples (a read-modify-write of one list would lose some). A writer that finds more than
    the limit deletes the oldest.
    """

    _sequence = itertools.count()

    def append(self, cluster: str, kind: str, sample: Mapping[str, Any]) -> None:
        folder = self._key(f"history-{kind}", cluster)
        name = f"{time.time_ns():020d}-{next(self._sequence):08d}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self.backend.set(f"{folder}/{name}", dict(sample))
        keys = self.backend.keys(folder + "/")
        if len(keys) > HISTORY_LIMIT + _HISTORY_SLACK:
            for old in keys[: len(keys) - HISTORY_LIMIT]:
                self.backend.delete(old)

    def samples(self, cluster: str, kind: str) -> list[dict[str, Any]]:
        """The newest :data:`HISTORY_LIMIT` samples, oldest first, as stored (``at`` checked; the other
        fields are the readers' to check, by kind)."""
        found = self.backend.get_many(self._key(f"history-{kind}", cluster) + "/")
        samples = []
        for key in sorted(found)[-HISTORY_LIMIT:]:
            if read_stored(key, found[key] or None, _sample) is not None:
                samples.append(dict(found[key]))
        return samples


class ForecastStore(Store):
    """Folded seasonal profiles per cluster, and every cluster's fitted model in one key."""

    def put_profile(self, cluster: str, profile: Mapping[str, Any]) -> None:
        self.backend.set(self._key("forecast-profile", cluster), dict(profile))

    def get_profile(self, cluster: str) -> dict[str, Any] | None:
        """The stored profile as a JSON object (``SeasonalProfile.from_dict`` checks the rest)."""
        key = self._key("forecast-profile", cluster)
        return read_stored(key, self.backend.get(key) or None, mapping)

    def put_models(self, models: Mapping[str, Mapping[str, Any]]) -> None:
        """One key for all, so that a task reads them with one call."""
        self.backend.set(f"{self.prefix}/forecast-models", {name: dict(m) for name, m in models.items()})

    def get_models(self) -> dict[str, dict[str, Any]]:
        """Cluster -> its fitted model as a JSON object (``ForecastModel.from_dict`` checks the rest)."""
        key = f"{self.prefix}/forecast-models"
        models = read_stored(key, self.backend.get(key) or None, _models)
        return models or {}


class PlanStore(Store):
    """Precomputed placements, one key per DAG, task and logical date."""

    def key(self, dag_id: str, task_id: str, logical_date: datetime) -> str:
        stamp = logical_date.astimezone(UTC).strftime("%Y%m%dT%H%M%S.%fZ")
        return f"{self.prefix}/plan/{dag_id}/{task_id}/{stamp}"

    def put(self, plan: Plan) -> None:
        self.backend.set(self.key(plan.dag_id, plan.task_id, plan.logical_date), plan.model_dump(mode="json"))

    def get(self, dag_id: str, task_id: str, logical_date: datetime) -> Plan | None:
        """The plan for this run of the task; None when there is none or what is stored is not a plan
        (logged with its key)."""
        key = self.key(dag_id, task_id, logical_date)
        return read_stored(key, self.backend.get(key) or None, _plan)

    def present(self, dag_id: str, task_id: str, logical_date: datetime) -> bool:
        """Whether anything is stored for this run of the task (readable or not)."""
        return bool(self.backend.get(self.key(dag_id, task_id, logical_date)))

    def delete(self, plan: Plan) -> None:
        self.backend.delete(self.key(plan.dag_id, plan.task_id, plan.logical_date))

    def all(self, dag_id: str | None = None) -> list[Plan]:
        """Every stored plan (of ``dag_id``), by DAG, task and logical date; unreadable ones skipped."""
        prefix = f"{self.prefix}/plan/" + (f"{dag_id}/" if dag_id is not None else "")
        found: list[Plan] = []
        for key, raw in self.backend.get_many(prefix).items():
            plan = read_stored(key, raw or None, _plan)
            if plan is not None:
                found.append(plan)
        return sorted(found, key=lambda p: (p.dag_id, p.task_id, p.logical_date))


class FederationState:
    """The shared state of one federation: one store per kind of item, over one backend."""

    def __init__(self, backend: StateBackend, federation: str = "default") -> None:
        self.backend = backend
        self.prefix = f"fedsched/{federation}"
        self.snapshots = SnapshotStore(backend, self.prefix)
        self.quota_limits = QuotaLimitStore(backend, self.prefix)
        self.cooldowns = CooldownStore(backend, self.prefix)
        self.reservations = ReservationStore(backend, self.prefix)
        self.leases = LeaseStore(backend, self.prefix)
        self.orphans = OrphanStore(backend, self.prefix)
        self.deferred = DeferredStore(backend, self.prefix)
        self.history = HistoryStore(backend, self.prefix)
        self.forecasts = ForecastStore(backend, self.prefix)
        self.plans = PlanStore(backend, self.prefix)
        self.waiting = WaitingStore(backend, self.prefix)
        self.spend = SpendStore(backend, self.prefix)
