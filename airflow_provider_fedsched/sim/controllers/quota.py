"""The resource quota controller: keeps ``status.hard`` / ``status.used`` of every ResourceQuota current."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from airflow_provider_fedsched.federation.resources import format_quantity
from airflow_provider_fedsched.sim.apiserver.events import EventRecorder
from airflow_provider_fedsched.sim.apiserver.objects import TERMINAL
from airflow_provider_fedsched.sim.apiserver.quota import namespace_usage, parse_hard, resource_of
from airflow_provider_fedsched.sim.apiserver.store import Obj, Store, WatchEvent
from airflow_provider_fedsched.sim.controllers.workqueue import WorkQueue
from airflow_provider_fedsched.sim.util import Clock


def _set_status(status: Obj) -> Callable[[Obj], None]:
    def apply(quota: Obj) -> None:
        quota["status"] = status

    return apply


class QuotaController:
    """Recomputes a namespace's quotas soon after a pod there starts, ends or goes, or a quota changes."""

    def __init__(self, store: Store, events: EventRecorder, clock: Clock) -> None:
        self.store = store
        self.events = events
        self.clock = clock
        self.queue = WorkQueue(self.refresh)
        store.listeners.append(self._on_event)

    def _on_event(self, event: WatchEvent) -> None:
        if event.plural == "pods":
            old_phase = ((event.old or {}).get("status") or {}).get("phase")
            new_phase = (event.obj.get("status") or {}).get("phase")
            if event.type != "MODIFIED" or (new_phase in TERMINAL) != (old_phase in TERMINAL):
                self._mark(event.obj["metadata"]["namespace"])
        elif event.plural == "resourcequotas":
            spec_changed = event.obj.get("spec") != (event.old or {}).get("spec")
            if event.type == "ADDED" or (event.type == "MODIFIED" and spec_changed):
                self._mark(event.obj["metadata"]["namespace"])

    def _mark(self, namespace: str) -> None:
        if self.store.objects["resourcequotas"]:
            self.queue.add(namespace)

    def refresh(self, namespace: str) -> None:
        """Recompute ``status.hard``/``status.used`` of every quota in ``namespace`` now."""
        quotas = self.store.list("resourcequotas", namespace)
        if not quotas:
            return
        used = namespace_usage(self.store, namespace)
        for quota in quotas:
            hard_raw: dict[str, Any] = (quota.get("spec") or {}).get("hard") or {}
            hard = parse_hard(hard_raw)
            status = {
                "hard": {k: str(v) for k, v in hard_raw.items()},
                "used": {k: format_quantity(resource_of(k), used.get(k, 0)) for k in hard},
            }
            if quota.get("status") != status:
                self.store.mutate("resourcequotas", namespace, quota["metadata"]["name"], _set_status(status))
