"""What is to be deleted, or taken over, once a cluster answers: orphans (pods and Jobs not confirmed
deleted), the pods of deferred tries (swept when a try ends with no trigger watching), and what the sweep
found of an orphan before deleting it (a pod that Succeeded meanwhile: its task does not run it again).
The sweep itself is ``hooks/sensing.py``."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from airflow_provider_fedsched.state.base import Store, read_stored
from airflow_provider_fedsched.validation.stored import (
    StoredDeferred,
    StoredOrphan,
    StoredSwept,
    parse_model,
)

ORPHAN_KINDS = ("pod", "job")
"""What an orphan can be: a pod, or a batch/v1 Job (deleted with its pods)."""

_orphan = parse_model(StoredOrphan)
_deferred = parse_model(StoredDeferred)
_swept = parse_model(StoredSwept)


class OrphanStore(Store):
    """Pods and Jobs that could not be confirmed deleted (their cluster stopped answering): deleted when it
    answers. A pod's key and entry are those of earlier releases; a Job's key is ``job:<namespace>.<name>``
    (``:`` is never in a namespace's name) and its entry says ``"kind": "job"``."""

    def _orphan_key(self, cluster: str, namespace: str, name: str, kind: str) -> str:
        return self._key("orphan", cluster, ("" if kind == "pod" else f"{kind}:") + f"{namespace}.{name}")

    def add(self, cluster: str, namespace: str, pod: str, kind: str = "pod") -> None:
        if kind not in ORPHAN_KINDS:
            raise ValueError(f"kind: expected one of {list(ORPHAN_KINDS)}, got {kind!r}")
        entry = {"namespace": namespace, "pod": pod, **({"kind": kind} if kind != "pod" else {})}
        self.backend.set(self._orphan_key(cluster, namespace, pod, kind), entry)

    def of(self, cluster: str, kind: str = "pod") -> list[tuple[str, str]]:
        """``(namespace, name)`` of the orphans of ``kind`` in ``cluster``."""
        return self.by_kind(cluster)[kind]

    def by_kind(self, cluster: str) -> dict[str, list[tuple[str, str]]]:
        """Every orphan of ``cluster`` (one read), as ``(namespace, name)`` per kind."""
        found = self.backend.get_many(self._key("orphan", cluster) + "/")
        entries = [read_stored(key, raw or None, _orphan) for key, raw in found.items()]
        kinds: dict[str, list[tuple[str, str]]] = {kind: [] for kind in ORPHAN_KINDS}
        for entry in entries:
            if entry is not None:
                kinds[entry.kind].append((entry.namespace, entry.pod))
        return kinds

    def forget(self, cluster: str, namespace: str, pod: str, kind: str = "pod") -> None:
        self.backend.delete(self._orphan_key(cluster, namespace, pod, kind))

    def clusters(self) -> set[str]:
        """The clusters with any orphan, from one listing of keys (no entry is read)."""
        prefix = f"{self.prefix}/orphan/"
        return {key[len(prefix) :].split("/", 1)[0] for key in self.backend.keys(prefix)}

    # A pod left behind in a silent cluster may have run to the end meanwhile: the sweep that deletes it
    # writes that down first, so that its task never runs the work again (see hooks/sensing.py). One small
    # key per such pod, removed when the task takes the result.
    def _swept_key(self, cluster: str, namespace: str, pod: str, kind: str = "pod") -> str:
        return self._key("swept", cluster, ("" if kind == "pod" else f"{kind}:") + f"{namespace}.{pod}")

    def swept_succeeded(self, cluster: str, namespace: str, pod: str, kind: str = "pod") -> None:
        """The sweep is about to delete this orphan pod, which it found Succeeded (a Job, ``kind="job"``:
        found complete)."""
        key = self._swept_key(cluster, namespace, pod, kind)
        self.backend.set(key, {"phase": "Succeeded", "at": time.time()})

    def was_swept_succeeded(self, cluster: str, namespace: str, pod: str, kind: str = "pod") -> bool:
        key = self._swept_key(cluster, namespace, pod, kind)
        return read_stored(key, self.backend.get(key) or None, _swept) is not None

    def forget_swept(self, cluster: str, namespace: str, pod: str, kind: str = "pod") -> None:
        self.backend.delete(self._swept_key(cluster, namespace, pod, kind))


class DeferredStore(Store):
    """Pods (and Jobs, ``kind="job"``) of deferred tries, with their task instance: one whose try ended
    while no trigger watched it (a triggerer down when a user failed the task, a trigger row cleaned up
    before it ran) is found here by the sweep (``hooks/sensing.py``) and deleted: no pod outlives its try."""

    def _deferred_key(self, cluster: str, namespace: str, name: str, kind: str) -> str:
        return self._key("deferred", cluster, ("" if kind == "pod" else f"{kind}:") + f"{namespace}.{name}")

    def add(
        self, cluster: str, namespace: str, pod: str, task_instance: Mapping[str, Any], kind: str = "pod"
    ) -> None:
        entry = {**task_instance, "namespace": namespace, "pod": pod, "since": time.time()}
        if kind != "pod":
            entry["kind"] = kind
        self.backend.set(self._deferred_key(cluster, namespace, pod, kind), entry)

    def of(self, cluster: str) -> list[dict[str, Any]]:
        """Every entry of ``cluster``, each with its ``kind`` (``"pod"`` when it was written without)."""
        found = self.backend.get_many(self._key("deferred", cluster) + "/")
        entries = [read_stored(key, raw or None, _deferred) for key, raw in found.items()]
        return [entry.model_dump() for entry in entries if entry is not None]

    def get(self, cluster: str, namespace: str, pod: str, kind: str = "pod") -> dict[str, Any] | None:
        key = self._deferred_key(cluster, namespace, pod, kind)
        entry = read_stored(key, self.backend.get(key) or None, _deferred)
        return None if entry is None else entry.model_dump()

    def ended(self, cluster: str, namespace: str, pod: str, phase: str) -> None:
        """The pod trigger saw the pod end: known to the operator even if that trigger never fires (a
        triggerer restarted) and the cluster has stopped answering since."""
        entry = self.get(cluster, namespace, pod)
        if entry is not None:
            self.backend.set(self._deferred_key(cluster, namespace, pod, "pod"), {**entry, "ended": phase})

    def forget(self, cluster: str, namespace: str, pod: str, kind: str = "pod") -> None:
        self.backend.delete(self._deferred_key(cluster, namespace, pod, kind))
