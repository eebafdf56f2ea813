"""The placement cycle's ports (``federation/cycle.py``) over the hook: shared state and the member
clusters' placement ledgers (``hooks/ledgers.py``), the tenant rules' records and reclaim
(``hooks/tenancy.py``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from airflow_provider_fedsched.hooks import ledgers, tenancy

if TYPE_CHECKING:
    from airflow_provider_fedsched.federation.cycle import FederationView
    from airflow_provider_fedsched.federation.decision import Decision
    from airflow_provider_fedsched.federation.request import TaskRequest
    from airflow_provider_fedsched.federation.resources import ResourceList
    from airflow_provider_fedsched.federation.spec import PolicySpec
    from airflow_provider_fedsched.hooks.parts import HookParts


class HookState:
    """:class:`~airflow_provider_fedsched.federation.cycle.StateView` over the hook's shared state
    (snapshots refreshed single-flight when stale)."""

    def __init__(self, hook: HookParts) -> None:
        self.hook = hook

    def view(self, clusters: Sequence[str], namespace: str | None, now: datetime | None) -> FederationView:
        return self.hook.view(clusters, namespace, now)

    def hard_quotas(self, cluster: str) -> Mapping[str, ResourceList]:
        return self.hook.state.quota_limits.get(cluster)


class HookLedger:
    """:class:`~airflow_provider_fedsched.federation.cycle.Ledger`: the chosen cluster's own ledger
    (compare-and-set, across workers) where it keeps one, and the reservations in shared state."""

    def __init__(self, hook: HookParts) -> None:
        self.hook = hook

    def reserve(
        self,
        cluster: str,
        request: TaskRequest,
        placement_id: str,
        policy: PolicySpec | None,
        now: datetime | None,
    ) -> bool:
        if ledgers.hold(self.hook, cluster, request, placement_id, policy) is False:
            return False
        now = now or datetime.now(UTC)
        self.hook.state.reservations.hold(
            cluster,
            request.resources,
            now,
            placement_id,
            tenant=request.tenant,
            after=tenancy.seen_before_hold(self.hook, request, cluster, now),
        )
        return True

    def permit(
        self, request: TaskRequest, placement_id: str, cluster: str, now: datetime | None
    ) -> str | None:
        return tenancy.admitted(self.hook, request, placement_id, cluster, now or datetime.now(UTC))

    def release(self, cluster: str, placement_id: str) -> None:
        self.hook.state.reservations.release(cluster, placement_id)
        ledgers.release(self.hook, cluster, placement_id)

    def record(self, request: TaskRequest, placement_id: str, decision: Decision) -> None:
        tenancy.note_decision(self.hook, request, placement_id, decision, decision.decided_at)


class HookReclaimer:
    """:class:`~airflow_provider_fedsched.federation.cycle.Reclaimer`: borrowing pods evicted from the
    members (``hooks/tenancy.py``, planned by ``federation/reclaim.py``)."""

    def __init__(self, hook: HookParts) -> None:
        self.hook = hook

    def reclaim(self, request: TaskRequest, decision: Decision) -> str | None:
        return tenancy.reclaim(self.hook, request, decision)
