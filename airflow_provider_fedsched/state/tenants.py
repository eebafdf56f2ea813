"""Shared tenant state: the tasks waiting for a cluster (fair share) and what each attempt cost (budgets).

One key per item, as for reservations: many workers add them at once, and no read-modify-write may lose
one. A charge's key is its placement id, so recording the same attempt twice never counts it twice. Every
entry is read back through its typed model (``validation/stored.py``): a malformed one is logged once with
its key and skipped; it never stops a decision and never lowers a tenant's spend (a negative or
non-finite cost is malformed).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from airflow_provider_fedsched.federation.tenancy import WaitingTask
from airflow_provider_fedsched.state.backend import StateBackend
from airflow_provider_fedsched.state.base import read_stored
from airflow_provider_fedsched.validation.stored import StoredCharge, StoredWaiting, parse_model

WAITING_TTL = timedelta(minutes=5)
"""A waiting task not seen again within this long is gone (its worker died or it gave up)."""
SPEND_KEPT = timedelta(days=62)
"""Charges older than this are pruned: the longest budget period is a month."""

_waiting = parse_model(StoredWaiting)
_charge = parse_model(StoredCharge)


class WaitingStore:
    """Tasks waiting for a cluster, by placement id, refreshed on each of their decisions."""

    def __init__(self, backend: StateBackend, prefix: str) -> None:
        self.backend = backend
        self.prefix = f"{prefix}/waiting/"

    def put(self, task: WaitingTask, now: datetime) -> None:
        """List ``task`` as waiting, seen at ``now``; a task listed already keeps its first wait."""
        key = self.prefix + task.placement_id
        listed = read_stored(key, self.backend.get(key) or None, _waiting)
        document = {**task.to_dict(), "seen_at": now.isoformat()}
        if listed is not None:
            document["since"] = listed.since.isoformat()
        self.backend.set(key, document)

    def remove(self, placement_id: str) -> None:
        self.backend.delete(self.prefix + placement_id)

    def current(self, now: datetime) -> list[WaitingTask]:
        """Every task seen waiting within :data:`WAITING_TTL`, oldest wait first (stale ones pruned)."""
        found = []
        for key, raw in self.backend.get_many(self.prefix).items():
            entry = read_stored(key, raw or None, _waiting)
            if entry is None:
                continue
            if now - entry.seen_at > WAITING_TTL:
                self.backend.delete(key)
                continue
            found.append(
                WaitingTask(
                    entry.placement_id,
                    entry.tenant,
                    dict(entry.resources),
                    frozenset(entry.clusters),
                    entry.since,
                )
            )
        return sorted(found, key=lambda task: (task.since, task.placement_id))


class SpendStore:
    """One charge per cluster attempt: its estimated cost and egress, for budgets and the cost report."""

    def __init__(self, backend: StateBackend, prefix: str) -> None:
        self.backend = backend
        self.prefix = f"{prefix}/spend/"

    def charge(self, placement_id: str, charge: Mapping[str, Any]) -> None:
        """Record (or update, for the same attempt) a charge: ``tenant``, ``cost``, ``egress_gb``,
        ``at`` (ISO time) and what it was for (``dag_id``, ``task_id``, ``cluster``)."""
        self.backend.set(self.prefix + placement_id, dict(charge))

    def read(self, since: datetime | None = None, now: datetime | None = None) -> list[StoredCharge]:
        """Every readable charge at or after ``since``, oldest first (charges past :data:`SPEND_KEPT`
        pruned; malformed ones logged with their key and skipped)."""
        now = now or datetime.now(UTC)
        found = []
        for key, raw in self.backend.get_many(self.prefix).items():
            charge = read_stored(key, raw or None, _charge)
            if charge is None:
                continue
            if now - charge.at > SPEND_KEPT:
                self.backend.delete(key)
                continue
            if since is None or charge.at >= since:
                found.append(charge)
        return sorted(found, key=lambda charge: charge.at)

    def charges(self, since: datetime | None = None, now: datetime | None = None) -> list[dict[str, Any]]:
        """:meth:`read` as documents (``at`` an ISO time in UTC), for the cost report."""
        return [charge.model_dump(mode="json") for charge in self.read(since, now)]

    def totals(
        self, since: Mapping[str, datetime], now: datetime
    ) -> tuple[dict[str, float], dict[str, float]]:
        """Per tenant, ``(cost, egress GB)`` charged since that tenant's period start (one read)."""
        cost: dict[str, float] = {}
        egress: dict[str, float] = {}
        earliest = min(since.values(), default=None)
        for charge in self.read(earliest, now) if since else ():
            tenant = charge.tenant or ""
            start = since.get(tenant)
            if start is None or charge.at < start:
                continue
            cost[tenant] = cost.get(tenant, 0.0) + charge.cost
            egress[tenant] = egress.get(tenant, 0.0) + charge.egress_gb
        return cost, egress
