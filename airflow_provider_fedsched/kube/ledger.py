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
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from airflow_provider_fedsched.federation.resources import ResourceList, add

ANNOTATION = "fedsched.io/placements"
MAX_CONFLICTS = 32
"""Compare-and-set rounds before a placement stops waiting for a busy ledger (each conflict means another
worker changed it meanwhile: progress, not failure). Then the cluster is judged to have no room for now,
and the placement is decided again without it; the ledger is not given up on."""
CONFLICT_PAUSE = 1.0
"""After a conflict, a random pause of up to this many times the last round's duration (read, check,
write), times the round (at most 4): racing workers spread out over the time a round takes instead of
all reading and writing again at once (a loaded API server makes rounds, and so pauses, longer)."""


class LedgerUnavailable(Exception):
    """The cluster cannot keep a ledger (no Lease API, no permission, no answer)."""


@dataclass(frozen=True)
class Entry:
    requests: dict[str, int]
    at: float
    """Epoch seconds when the placement was reserved."""


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
        why = {404: "serves no Leases", 403: "forbids Leases"}.get(status or 0, f"answered {status}")
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
                requests={str(k): int(v) for k, v in (e.get("requests") or {}).items()}, at=float(e["at"])
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
                {pid: {"requests": e.requests, "at": round(e.at, 3)} for pid, e in entries.items()},
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
        fits: Callable[[ResourceList], bool],
        landed: Callable[[str, float], bool],
        ttl: float,
    ) -> bool:
        """Hold ``requests`` for ``placement_id`` if ``fits(held)`` says the cluster still has room with
        everything the ledger holds; True when held. Entries whose pod ``landed`` (a snapshot taken after
        them shows it) or older than ``ttl`` are dropped on the way. False when there is no room, or when
        :data:`MAX_CONFLICTS` rounds in a row lost the race to other workers."""
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
            held: ResourceList = {}
            for entry in kept.values():
                held = add(held, entry.requests)
            if not fits(held):
                if len(kept) != len(current):
                    self._replace(lease, kept)  # prune for the next reader; a conflict is harmless
                return False
            if self._replace(lease, {**kept, placement_id: Entry(dict(requests), now)}):
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


def _pause(attempt: int, round_seconds: float) -> None:
    time.sleep(random.uniform(0.0, CONFLICT_PAUSE * round_seconds * min(attempt, 4)))
