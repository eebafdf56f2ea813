"""The garbage collector and the namespace controller: what deleting an owner or a namespace takes along.

* Background deletion: once an owner is gone, every object whose ``ownerReferences`` name its uid is
  deleted (pods gracefully).
* Foreground deletion (``foregroundDeletion`` finalizer): the dependents are deleted first; the owner goes
  when none is left.
* Orphan (``orphan`` finalizer, the batch/v1 Job default): the dependents lose their owner reference and
  stay; then the owner goes.
* A terminating namespace is emptied, then removed.
"""

from __future__ import annotations

import asyncio
import contextlib

from airflow_provider_fedsched.sim.apiserver import pods, registry
from airflow_provider_fedsched.sim.apiserver.events import EventRecorder
from airflow_provider_fedsched.sim.apiserver.resources import NAMESPACED
from airflow_provider_fedsched.sim.apiserver.store import Obj, Store, WatchEvent
from airflow_provider_fedsched.sim.util import ApiError, Clock

# Kinds whose objects may own others (and kinds that may be owned) in this simulator.
DEPENDENT_KINDS = ("pods", "jobs")


def _owner_uids(obj: Obj) -> set[str]:
    return {ref.get("uid", "") for ref in obj["metadata"].get("ownerReferences") or []}


class GarbageCollector:
    def __init__(self, store: Store, events: EventRecorder, clock: Clock) -> None:
        self.store = store
        self.events = events
        self.clock = clock
        self._work: set[tuple[str, str, str, str]] = set()  # (plural, namespace, name, uid) to look at
        self._gone: set[str] = set()  # uids of owners removed, whose dependents must go
        self._scheduled = False
        self._terminating_owners: dict[str, tuple[str, str, str, str]] = {}
        self._orphans: set[tuple[str, str, str]] = set()  # pods on nodes that do not exist
        # owner uid -> dependents (plural, namespace, name), kept from the watch events.
        self._owned: dict[str, set[tuple[str, str, str]]] = {}
        store.listeners.append(self._on_event)

    def _index(self, event: WatchEvent) -> None:
        meta = event.obj["metadata"]
        ref = (event.plural, meta.get("namespace", ""), meta["name"])
        before = _owner_uids(event.old) if event.old is not None else set()
        after = set() if event.type == "DELETED" else _owner_uids(event.obj)
        for uid in before - after:
            self._owned.get(uid, set()).discard(ref)
            if not self._owned.get(uid, True):
                del self._owned[uid]
        for uid in after:
            self._owned.setdefault(uid, set()).add(ref)

    def _on_event(self, event: WatchEvent) -> None:
        meta = event.obj["metadata"]
        key = (event.plural, meta.get("namespace", ""), meta["name"], meta["uid"])
        if event.plural in DEPENDENT_KINDS:
            self._index(event)
        node = (event.obj.get("spec") or {}).get("nodeName") if event.plural == "pods" else None
        if (
            node
            and meta.get("deletionTimestamp")
            and event.type != "DELETED"
            and self.store.get("nodes", "", node) is None
        ):
            # PodGC: no kubelet will ever finish a pod bound to a node that does not exist.
            self._orphans.add((meta["namespace"], meta["name"], meta["uid"]))
            self._schedule()
        if event.type == "DELETED":
            if self._owned.get(meta["uid"]):
                self._gone.add(meta["uid"])
            for owner in _owner_uids(event.obj):
                self._wake_owner(owner)
            if event.plural in NAMESPACED:
                namespace = self.store.get("namespaces", "", meta.get("namespace", ""))
                if namespace is not None and namespace["metadata"].get("deletionTimestamp"):
                    self._queue(
                        ("namespaces", "", namespace["metadata"]["name"], namespace["metadata"]["uid"])
                    )
        elif meta.get("deletionTimestamp") and (
            event.plural == "namespaces"
            or set(meta.get("finalizers") or []) & {"orphan", "foregroundDeletion"}
        ):
            self._terminating_owners[meta["uid"]] = key
            self._queue(key)
        else:
            return
        if self._gone:
            self._schedule()

    def _wake_owner(self, uid: str) -> None:
        """A dependent went: an owner waiting in foreground deletion may go now."""
        key = self._terminating_owners.get(uid)
        if key is not None:
            self._queue(key)

    def _queue(self, key: tuple[str, str, str, str]) -> None:
        self._work.add(key)
        self._schedule()

    def _schedule(self) -> None:
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._sync)

    def _dependents(self, uid: str) -> list[tuple[str, Obj]]:
        found = []
        for plural, namespace, name in sorted(self._owned.get(uid, ())):
            obj = self.store.get(plural, namespace, name)
            if obj is not None:
                found.append((plural, obj))
        return found

    def _delete(self, plural: str, obj: Obj) -> None:
        meta = obj["metadata"]
        if meta.get("deletionTimestamp") and plural != "pods":
            return
        with contextlib.suppress(ApiError):
            registry.delete(
                self.store,
                plural,
                meta.get("namespace", ""),
                meta["name"],
                {"propagationPolicy": "Background"},
            )

    def _sync(self) -> None:
        self._scheduled = False
        orphans, self._orphans = self._orphans, set()
        for namespace, name, uid in sorted(orphans):
            pod = self.store.get("pods", namespace, name)
            if pod is not None and pod["metadata"]["uid"] == uid:
                with contextlib.suppress(ApiError):
                    pods.delete_pod(self.store, namespace, name, 0)
        gone, self._gone = self._gone, set()
        for uid in gone:
            for plural, dependent in self._dependents(uid):
                self._delete(plural, dependent)
        work, self._work = self._work, set()
        for plural, namespace, name, uid in sorted(work):
            obj = self.store.get(plural, namespace, name)
            if obj is None or obj["metadata"]["uid"] != uid:
                self._terminating_owners.pop(uid, None)
                continue
            if plural == "namespaces":
                self._empty_namespace(name)
                continue
            finalizers = list(obj["metadata"].get("finalizers") or [])
            dependents = self._dependents(uid)
            if "orphan" in finalizers:
                for dep_plural, dependent in dependents:
                    dep_meta = dependent["metadata"]

                    def drop(d: Obj, owner: str = uid) -> None:
                        refs = [
                            r for r in d["metadata"].get("ownerReferences") or [] if r.get("uid") != owner
                        ]
                        d["metadata"]["ownerReferences"] = refs
                        if not refs:
                            del d["metadata"]["ownerReferences"]

                    self.store.mutate(dep_plural, dep_meta.get("namespace", ""), dep_meta["name"], drop)
                self._remove_finalizer(plural, namespace, name, "orphan")
            elif "foregroundDeletion" in finalizers:
                if dependents:
                    for dep_plural, dependent in dependents:
                        self._delete(dep_plural, dependent)
                else:
                    self._remove_finalizer(plural, namespace, name, "foregroundDeletion")

    def _remove_finalizer(self, plural: str, namespace: str, name: str, finalizer: str) -> None:
        def apply(obj: Obj) -> None:
            obj["metadata"]["finalizers"] = [
                f for f in obj["metadata"].get("finalizers") or [] if f != finalizer
            ]

        self.store.mutate(plural, namespace, name, apply)

    def _empty_namespace(self, name: str) -> None:
        left = 0
        for plural in sorted(NAMESPACED):
            for obj in self.store.list(plural, name):
                left += 1
                if plural == "events":
                    self.store.remove("events", name, obj["metadata"]["name"])
                    left -= 1
                else:
                    self._delete(plural, obj)
        if not left and self.store.get("namespaces", "", name) is not None:
            self.store.remove("namespaces", "", name)
