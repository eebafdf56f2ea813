"""Shared federation state behind the hook: snapshots, cooldowns, reservations, leases, history, plans.

Every worker process of an Airflow deployment must see the same cooldowns and snapshots, without an extra
service. :func:`open_backend` is the one place that chooses where they live: Airflow Variables by default
(:mod:`.airflow`), or process memory (:mod:`.backend`) for unit tests and the CLI outside Airflow. Values
are JSON. Only ``hooks/`` uses the stores; everything else asks the hook. :mod:`.process` is what one
process keeps for itself (locks, memos of what it asked or said), the one place besides the client cache
that holds process-wide state: any layer above the core uses it.
"""

from __future__ import annotations

from typing import Literal

from airflow_provider_fedsched.state.airflow import AirflowVariableStateBackend
from airflow_provider_fedsched.state.backend import Consistency, MemoryStateBackend, StateBackend
from airflow_provider_fedsched.state.stores import HISTORY_LIMIT, RESERVATION_TTL, FederationState

BackendChoice = Literal["memory", "airflow"]


def open_backend(choice: StateBackend | BackendChoice | None = None) -> StateBackend:
    """The backend for ``choice``: a backend as given, ``"memory"``, or ``"airflow"``/None (Variables)."""
    if choice is None or choice == "airflow":
        return AirflowVariableStateBackend()
    if choice == "memory":
        return MemoryStateBackend()
    if isinstance(choice, str):
        raise ValueError(f"state: unknown backend {choice!r} (choose 'airflow' or 'memory')")
    return choice


__all__ = [
    "HISTORY_LIMIT",
    "RESERVATION_TTL",
    "AirflowVariableStateBackend",
    "BackendChoice",
    "Consistency",
    "FederationState",
    "MemoryStateBackend",
    "StateBackend",
    "open_backend",
]
