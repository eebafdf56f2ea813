"""Per-cluster object store: one global resourceVersion counter, watch history and live watchers.

Everything runs on the simulator's event loop, so the store needs no locks. Stored objects are never
mutated in place (``mutate`` copies first), which lets watch history hold plain references as snapshots.
"""

from __future__ import annotations

import asyncio
import copy
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from airflow_provider_fedsched.sim.apiserver.resources import BY_PLURAL, NAMESPACED
from airflow_provider_fedsched.sim.util import ApiError, new_uid, not_found, now_iso

Obj = dict[str, Any]
Key = tuple[str, str]  # (namespace or "", name)


@dataclass(eq=False)
class WatchEvent:
    rv: int
    plural: str
    type: str  # ADDED, MODIFIED, DELETED
    obj: Obj
    old: Obj | None = None


@dataclass(eq=False)
class Watcher:
    plural: str
    queue: asyncio.Queue[WatchEvent | str] = field(default_factory=asyncio.Queue)


Listener = Callable[[WatchEvent], None]
ReadListener = Callable[[str, Iterable[Obj], str], None]
"""Told of every object the API sends a client: its plural, the objects, the client's User-Agent."""


class Store:
    def __init__(self, history: int = 10000) -> None:
        self.rv = 0
        self.objects: dict[str, dict[Key, Obj]] = {plural: {} for plural in BY_PLURAL}
        self.history: deque[WatchEvent] = deque(maxlen=history)
        # Oldest resourceVersion a watch may resume from; raised by compaction.
        self.compacted_rv = 0
        self.watchers: set[Watcher] = set()
        self.listeners: list[Listener] = []
        self.read_listeners: list[ReadListener] = []

    # -- reads -------------------------------------------------------------------------------------
    def get(self, plural: str, namespace: str, name: str) -> Obj | None:
        return self.objects[plural].get((namespace if plural in NAMESPACED else "", name))

    def require(self, plural: str, namespace: str, name: str) -> Obj:
        obj = self.get(plural, namespace, name)
        if obj is None:
            raise not_found(plural, name, BY_PLURAL[plural].group)
        return obj

    def list(self, plural: str, namespace: str | None = None) -> list[Obj]:
        items = self.objects[plural].values()
        if namespace:
            return [o for o in items if o["metadata"].get("namespace") == namespace]
        return list(items)

    def served(self, plural: str, objs: Iterable[Obj], agent: str) -> None:
        """The API sent ``objs`` to a client (an answer or a watch event): tell who audits reads."""
        for listener in self.read_listeners:
            listener(plural, objs, agent)

    # -- writes ------------------------------------------------------------------------------------
    def _next_rv(self) -> int:
        self.rv += 1
        return self.rv

    def _emit(self, event: WatchEvent) -> None:
        self.history.append(event)
        for watcher in self.watchers:
            if watcher.plural == event.plural:
                watcher.queue.put_nowait(event)
        for listener in self.listeners:
            listener(event)

    def create(self, plural: str, obj: Obj, uid: str | None = None) -> Obj:
        meta = obj.setdefault("metadata", {})
        if plural not in NAMESPACED:
            meta.pop("namespace", None)
        key = (meta.get("namespace", "") if plural in NAMESPACED else "", meta["name"])
        resource = BY_PLURAL[plural]
        if key in self.objects[plural]:
            raise ApiError(
                409,
                f'{resource.qualified} "{meta["name"]}" already exists',
                "AlreadyExists",
                {"name": meta["name"], "kind": plural, "group": resource.group or None},
            )
        obj["kind"] = resource.kind
        obj["apiVersion"] = resource.api_version
        meta["uid"] = uid or new_uid()
        meta["creationTimestamp"] = now_iso()
        meta["generation"] = 1
        rv = self._next_rv()
        meta["resourceVersion"] = str(rv)
        self.objects[plural][key] = obj
        self._emit(WatchEvent(rv, plural, "ADDED", obj))
        return obj

    def update(self, plural: str, obj: Obj, expected_rv: str | None = None) -> Obj:
        """Replace a stored object; ``expected_rv`` enables optimistic concurrency (409 Conflict)."""
        meta = obj["metadata"]
        current = self.require(plural, meta.get("namespace", ""), meta["name"])
        if expected_rv and expected_rv != current["metadata"]["resourceVersion"]:
            raise ApiError(
                409,
                f'Operation cannot be fulfilled on {BY_PLURAL[plural].qualified} "{meta["name"]}": the '
                "object has been modified; please apply your changes to the latest version and try again",
                "Conflict",
                {"name": meta["name"], "kind": plural, "group": BY_PLURAL[plural].group or None},
            )
        # Immutable server-owned fields survive any client write.
        for name in ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds"):
            if name in current["metadata"]:
                meta[name] = current["metadata"][name]
            else:
                meta.pop(name, None)
        generation = int(current["metadata"].get("generation") or 1)
        meta["generation"] = generation + (obj.get("spec") != current.get("spec"))
        obj["kind"], obj["apiVersion"] = current.get("kind"), current.get("apiVersion")
        rv = self._next_rv()
        meta["resourceVersion"] = str(rv)
        key = (meta.get("namespace", "") if plural in NAMESPACED else "", meta["name"])
        self.objects[plural][key] = obj
        self._emit(WatchEvent(rv, plural, "MODIFIED", obj, current))
        # Finalizers gate removal of an object being deleted; a pod still in its grace period stays, and
        # a terminating namespace goes when the namespace controller has emptied it.
        if (
            meta.get("deletionTimestamp")
            and not meta.get("finalizers")
            and not meta.get("deletionGracePeriodSeconds")
            and plural != "namespaces"
        ):
            self.remove(plural, meta.get("namespace", ""), meta["name"])
        return obj

    def mutate(self, plural: str, namespace: str, name: str, fn: Callable[[Obj], Any]) -> Obj | None:
        """Copy, change with ``fn`` and store; ``None`` when the object is gone."""
        current = self.get(plural, namespace, name)
        if current is None:
            return None
        obj = copy.deepcopy(current)
        fn(obj)
        return self.update(plural, obj)

    def set_deletion(
        self, plural: str, namespace: str, name: str, grace: int, finalizers: Iterable[str] = ()
    ) -> Obj:
        """Mark an object as terminating (``deletionTimestamp`` + grace) without removing it."""
        current = self.require(plural, namespace, name)
        obj = copy.deepcopy(current)
        held = obj["metadata"].setdefault("finalizers", [])
        held.extend(f for f in finalizers if f not in held)
        if not held:
            del obj["metadata"]["finalizers"]
        obj["metadata"]["deletionTimestamp"] = current["metadata"].get("deletionTimestamp") or now_iso()
        obj["metadata"]["deletionGracePeriodSeconds"] = grace
        rv = self._next_rv()
        obj["metadata"]["resourceVersion"] = str(rv)
        key = (namespace if plural in NAMESPACED else "", name)
        self.objects[plural][key] = obj
        self._emit(WatchEvent(rv, plural, "MODIFIED", obj, current))
        return obj

    def remove(self, plural: str, namespace: str, name: str) -> Obj:
        key = (namespace if plural in NAMESPACED else "", name)
        current = self.objects[plural].pop(key, None)
        if current is None:
            raise not_found(plural, name, BY_PLURAL[plural].group)
        obj = copy.deepcopy(current)
        rv = self._next_rv()
        obj["metadata"]["resourceVersion"] = str(rv)
        self._emit(WatchEvent(rv, plural, "DELETED", obj, current))
        return obj

    # -- watch -------------------------------------------------------------------------------------
    def events_since(self, plural: str, rv: int) -> Iterable[WatchEvent]:
        """History after ``rv``; 410 Expired when that history is gone."""
        oldest = self.history[0].rv if self.history else self.rv + 1
        if rv < self.compacted_rv or (rv + 1 < oldest and rv < self.rv):
            raise ApiError(
                410, f"too old resource version: {rv} ({max(oldest - 1, self.compacted_rv)})", "Expired"
            )
        return [e for e in self.history if e.rv > rv and e.plural == plural]

    def compact(self) -> None:
        """Forget watch history, so resuming from any older resourceVersion answers 410."""
        self.history.clear()
        self.compacted_rv = self.rv
