"""What the hook's helper modules (ledgers, planning, ports, sensing, tenancy) see of the hook.

The helpers are functions of a hook; they name this protocol, never ``FederationHook`` itself, so the
hook module imports its helpers and no helper imports it back (tests/test_architecture.py).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any, Protocol

from airflow_provider_fedsched.federation.cycle import FederationView
from airflow_provider_fedsched.federation.engine import FederationEngine
from airflow_provider_fedsched.federation.snapshot import ClusterSnapshot
from airflow_provider_fedsched.federation.spec import FederationSpec
from airflow_provider_fedsched.kube.access import ClusterAccess
from airflow_provider_fedsched.state import FederationState


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
