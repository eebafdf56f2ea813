"""In-flight placements kept in the member cluster itself: a ``coordination.k8s.io`` Lease per federation.

Airflow Variables have no compare-and-set, so reservations written there cannot stop two workers (or two
hosts) that read "room for one" at the same moment from both placing. The API server can: every object
has a ``resourceVersion`` and a replace that names an older one fails with 409 Conflict. The ledger is one
Lease in the cluster's namespace whose annotation lists the placements not yet visible in a snapshot;
reserving reads it, checks that the request still fits with everything listed, and replaces it with the
version it read. Two workers racing for the last slot: one wins, the other re-reads and finds no room.

A cluster that serves no Leases (or forbids them) raises :class:`LedgerUnavailable`; the hook then falls
back to reservations in shared state, and says so.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from airflow_provider_fedsched.federation._errors import TemporaryError
from airflow_provider_fedsched.federation.resources import ResourceList

ANNOTATION = "fedsched.io/placements"
MAX_CONFLICTS = 32
"""Compare-and-set rounds before a placement stops waiting for a busy ledger (each conflict means another
worker changed it meanwhile: progress, not failure). Then the cluster is judged to have no room for now,
and the placement is decided again without it; the ledger is not given up on."""
CONFLICT_PAUSE = 1.0
"""After a conflict, a random pause of up to this many times the last round's duration (read, check,
write), times the round (at most 4): racing workers spread out over the time a round takes instead of
all reading and writing again at once (a loaded API server makes rounds, and so pauses, longer)."""


class LedgerUnavailable(TemporaryError):
    """The cluster cannot keep a ledger (no Lease API, no permission, no answer)."""


MAX_GANG_PODS = 10_000
"""Pods of one held gang that its entry is read as (beyond: read as one pod of the gang's sum)."""


@dataclass(frozen=True)
class Entry:
    requests: dict[str, int]
    at: float
    """Epoch seconds when the placement was reserved."""
    roles: tuple[tuple[int, dict[str, int]], ...] = ()
    """A gang's pods as (count, one pod's requests) per role; empty: one pod of ``requests``."""

    def pods(self) -> list[dict[str, int]]:
        """The placement's pods, each with its requests (where each can land is what the check needs)."""
        if not self.roles:
            return [self.requests]
        return [requests for count, requests in self.roles for _ in range(count)]

    def to_json(self) -> dict[str, Any]:
        document: dict[str, Any] = {"requests": self.requests, "at": round(self.at, 3)}
        if self.roles:
            document["roles"] = [[count, requests] for count, requests in self.roles]
        return document


def _roles(raw: Any) -> tuple[tuple[int, dict[str, int]], ...]:
    """A gang's roles as written by :meth:`Entry.to_json`; anything else (a ledger written before gangs
    were recorded, a hand edit) is read as none: the entry then counts as one pod of its sum."""
    if not isinstance(raw, list):
        return ()
    roles: list[tuple[int, dict[str, int]]] = []
    try:
        for count, requests in raw:
            roles.append((int(count), {str(k): int(v) for k, v in dict(requests).items()}))
    except (TypeError, ValueError):
        return ()
    if any(count < 1 for count, _ in roles) or sum(count for count, _ in roles) > MAX_GANG_PODS:
        return ()
    return tuple(roles)


def lease_name(federation: str) -> str:
    """A DNS-1123 name for the federation's ledger (at most 63 characters)."""
    cleaned = "".join(c if c.isalnum() else "-" for c in federation.lower()).strip("-") or "default"
    return f"fedsched-{cleaned}"[:63].rstrip("-")


class PlacementLedger:
    """One federation's in-flight placements on one member cluster (a sync ``kubernetes`` ApiClient)."""

    def __init__(self, api_client: Any, namespace: str, federation: str) -> None:
        from kubernetes import client

        self.api = client.CoordinationV1Api(api_client)
        self.namespace = namespace
        self.name = lease_name(federation)

    # Reading and writing the Lease ---------------------------------------------------------------------
    def _read(self) -> Any:
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        try:
            return self.api.read_namespaced_lease(self.name, self.namespace)
        except ApiException as exc:
            if exc.status != 404:
                raise self._unavailable(exc) from exc
        body = client.V1Lease(
            metadata=client.V1ObjectMeta(name=self.name, annotations={ANNOTATION: "{}"}),
            spec=client.V1LeaseSpec(holder_identity="fedsched"),
        )
        try:
            return self.api.create_namespaced_lease(self.namespace, body)
        except ApiException as exc:
            if exc.status == 409:  # another worker created it first
                return self.api.read_namespaced_lease(self.name, self.namespace)
            raise self._unavailable(exc) from exc

    def _unavailable(self, exc: Any) -> LedgerUnavailable:
        status = getattr(exc, "status", None)
        why = {
            404: "serves no Leases",
            403: "forbids Leases: deploy/rbac.yaml's rule on coordination.k8s.io leases (get, create, "
            "update) is missing",
        }.get(status or 0, f"answered {status}")
        return LedgerUnavailable(f"the cluster {why} in namespace {self.namespace!r}")

    @staticmethod
    def entries(lease: Any) -> dict[str, Entry]:
        raw = (lease.metadata.annotations or {}).get(ANNOTATION) or "{}"
        try:
            document = json.loads(raw)
        except ValueError:
            return {}
        return {
            str(pid): Entry(
                requests={str(k): int(v) for k, v in (e.get("requests") or {}).items()},
                at=float(e["at"]),
                roles=_roles(e.get("roles")),
            )
            for pid, e in document.items()
            if isinstance(e, dict) and "at" in e
        }

    def _replace(self, lease: Any, entries: Mapping[str, Entry]) -> bool:
        """Write ``entries`` over the version of ``lease`` that was read; False on a conflict."""
        from kubernetes.client.exceptions import ApiException

        lease.metadata.annotations = {
            **(lease.metadata.annotations or {}),
            ANNOTATION: json.dumps(
                {pid: e.to_json() for pid, e in entries.items()},
                sort_keys=True,
            ),
        }
        try:
            self.api.replace_namespaced_lease(self.name, self.namespace, lease)
        except ApiException as exc:
            if exc.status == 409:
                return False
            raise self._unavailable(exc) from exc
        return True

    # Placements ------------------------------------------------------------------------------------------
    def reserve(
        self,
        placement_id: str,
        requests: Mapping[str, int],
        *,
        fits: Callable[[list[ResourceList]], bool],
        landed: Callable[[str, float], bool],
        ttl: float,
        roles: Sequence[tuple[int, Mapping[str, int]]] = (),
    ) -> bool:
        """Hold ``requests`` (a gang: its ``roles``, (count, one pod's requests) each) for ``placement_id``
        if ``fits(held)`` says the cluster still has room with everything the ledger holds (``held``: the
        pods of its placements, oldest placement first); True when held. Entries whose pod ``landed`` (a
        snapshot taken after them shows it) or older than ``ttl`` are dropped on the way. False when there
        is no room, or when :data:`MAX_CONFLICTS` rounds in a row lost the race to other workers."""
        entry_roles = tuple((count, dict(pod)) for count, pod in roles)
        spent = 0.0
        for attempt in range(MAX_CONFLICTS):
            if attempt:
                _pause(attempt, spent)
            began = time.monotonic()
            lease = self._read()
            now = time.time()
            current = self.entries(lease)
            if placement_id in current:
                return True
            kept = {p: e for p, e in current.items() if now - e.at < ttl and not landed(p, e.at)}
            # Pod by pod, as the decision that chose the cluster saw them: where each one can land matters
            # (a held GPU pod takes no room on the CPU node a CPU pod needs).
            ordered = sorted(kept.items(), key=lambda item: (item[1].at, item[0]))
            held = [pod for _, entry in ordered for pod in entry.pods()]
            if not fits(held):
                if len(kept) != len(current):
                    self._replace(lease, kept)  # prune for the next reader; a conflict is harmless
                return False
            if self._replace(lease, {**kept, placement_id: Entry(dict(requests), now, entry_roles)}):
                return True
            spent = time.monotonic() - began
        return False

    def release(self, placement_id: str) -> None:
        """Drop ``placement_id`` (its pod ended, left, or shows in a snapshot); left to expire (``ttl``)
        when :data:`MAX_CONFLICTS` rounds in a row lost the race to other workers."""
        spent = 0.0
        for attempt in range(MAX_CONFLICTS):
            if attempt:
                _pause(attempt, spent)
            began = time.monotonic()
            lease = self._read()
            current = self.entries(lease)
            if placement_id not in current:
                return
            current.pop(placement_id)
            if self._replace(lease, current):
                return
            spent = time.monotonic() - began

    def held(self) -> dict[str, Entry]:
        return self.entries(self._read())

    def peek(self) -> dict[str, Entry] | None:
        """What the ledger holds, read without creating it (the audit writes nothing): None when the cluster
        keeps no ledger for this federation; :class:`LedgerUnavailable` when it cannot be read, or its
        annotation is not the ledger's JSON (then nothing it holds can be told)."""
        from kubernetes.client.exceptions import ApiException

        try:
            lease = self.api.read_namespaced_lease(self.name, self.namespace)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise self._unavailable(exc) from exc
        raw = (lease.metadata.annotations or {}).get(ANNOTATION)
        try:
            document = json.loads(raw) if raw is not None else {}
        except ValueError:
            document = None
        if not isinstance(document, dict):
            raise LedgerUnavailable(f"its Lease {self.name}'s {ANNOTATION} annotation is not a JSON object")
        return self.entries(lease)


def _pause(attempt: int, round_seconds: float) -> None:
    time.sleep(random.uniform(0.0, CONFLICT_PAUSE * round_seconds * min(attempt, 4)))
