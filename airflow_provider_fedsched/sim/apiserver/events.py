"""Writes core/v1 Events as client-go's recorder does, aggregating repeats into ``count``."""

from __future__ import annotations

import time
from typing import Any

from airflow_provider_fedsched.sim.apiserver.store import Obj, Store
from airflow_provider_fedsched.sim.util import now_iso


class EventRecorder:
    """Writes core/v1 Events, aggregating repeats (same object, reason, message, source) into ``count``."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._index: dict[tuple[str, str, str, str], tuple[str, str]] = {}
        self._seq = 0

    def record(
        self, obj: Obj, etype: str, reason: str, message: str, component: str, host: str | None = None
    ) -> Obj:
        meta = obj["metadata"]
        namespace = meta.get("namespace") or "default"
        key = (meta.get("uid", ""), reason, message, component)
        now = now_iso()
        existing = self._index.get(key)
        if existing is not None:
            updated = self.store.mutate("events", existing[0], existing[1], _bump(now))
            if updated is not None:
                return updated
        self._seq += 1
        name = f"{meta['name']}.{int(time.time() * 1e9) + self._seq:x}"
        source = {"component": component}
        if host:
            source["host"] = host
        event: Obj = {
            "metadata": {"name": name, "namespace": namespace},
            "involvedObject": {
                "kind": obj.get("kind", "Pod"),
                "namespace": meta.get("namespace"),
                "name": meta["name"],
                "uid": meta.get("uid"),
                "apiVersion": obj.get("apiVersion", "v1"),
                "resourceVersion": meta.get("resourceVersion"),
            },
            "reason": reason,
            "message": message,
            "source": source,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
            "type": etype,
            "eventTime": None,
            "reportingComponent": component,
            "reportingInstance": host or "",
        }
        if obj.get("kind") == "Node":
            event["involvedObject"].pop("namespace")
        self.store.create("events", event)
        self._index[key] = (namespace, name)
        return event


def _bump(now: str) -> Any:
    def fn(event: Obj) -> None:
        event["count"] = int(event.get("count", 1)) + 1
        event["lastTimestamp"] = now

    return fn
