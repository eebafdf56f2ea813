"""What the hook's helper modules (decisions, ledgers, planning, sensing) see of the hook.

The helpers are functions of a hook; they name this protocol, never ``FederationHook`` itself, so the
hook module imports its helpers and no helper imports it back (tests/test_architecture.py).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from airflow_provider_fedsched.federation.engine import FederationEngine
from airflow_provider_fedsched.federation.resources import ResourceList
from airflow_provider_fedsched.federation.snapshot import ClusterSnapshot
from airflow_provider_fedsched.federation.spec import FederationSpec
from airflow_provider_fedsched.federation.tenancy import TenantInputs
from airflow_provider_fedsched.kube.access import ClusterAccess
from airflow_provider_fedsched.state import FederationState


@dataclass(frozen=True)
class FederationView:
    """Snapshots, cooldowns and in-flight reservations as of ``now``: the engine's inputs from state."""

    snapshots: dict[str, ClusterSnapshot]
    cooldowns: dict[str, datetime]
    reservations: dict[str, ResourceList]
    now: datetime
    tenancy: TenantInputs | None = None
    """Tenant usage, waiting tasks and spend (None: the spec has no tenants)."""
    in_flight: dict[str, list[ResourceList]] = field(default_factory=dict)
    """``reservations`` placement by placement, oldest first (the node fit charges them one by one)."""


class HookParts(Protocol):
    """The attributes and methods of ``FederationHook`` its helper modules use."""

    snapshot_timeout: float

    @property
    def spec(self) -> FederationSpec: ...

    @property
    def state(self) -> FederationState: ...

    @property
    def engine(self) -> FederationEngine: ...

    @property
    def log(self) -> Any: ...

    def access(self, cluster: str) -> ClusterAccess: ...

    def stored_snapshot(self, cluster: str) -> ClusterSnapshot | None: ...

    def collect(self, clusters: Iterable[str] | None = None) -> dict[str, ClusterSnapshot]: ...

    def view(
        self, clusters: Iterable[str], namespace: str | None, now: datetime | None = None
    ) -> FederationView: ...
