"""What one process keeps for itself, beside the state every worker shares (:mod:`.backend`).

Everything here lives as long as the process and is never seen by another: locks that order this process's
threads, and memos of what it has already asked or said. This module and the Kubernetes client cache
(``kube/clients.py``) are the only holders of process-wide mutable state in the provider
(``tests/test_architecture.py`` keeps it so): a reader finds here all a process remembers between tasks.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import OrderedDict
from collections.abc import Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)


class KeyedLocks(Generic[K]):
    """One lock per key, made on first use."""

    def __init__(self) -> None:
        self._locks: dict[K, threading.Lock] = {}
        self._guard = threading.Lock()

    def __call__(self, key: K) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(key, threading.Lock())


class Until(Generic[K]):
    """Keys marked until a moment of the monotonic clock (a member not asked again for a while)."""

    def __init__(self) -> None:
        self._until: dict[K, float] = {}
        self._guard = threading.Lock()

    def mark(self, key: K, seconds: float) -> None:
        with self._guard:
            self._until[key] = time.monotonic() + seconds

    def marked(self, key: K) -> bool:
        with self._guard:
            return time.monotonic() < self._until.get(key, 0.0)


class FirstTimes(Generic[K]):
    """Whether a key is seen for the first time (a warning given once), remembering at most ``limit`` keys:
    the oldest is forgotten first, so memory stays bounded."""

    def __init__(self, limit: int) -> None:
        self._seen: OrderedDict[K, None] = OrderedDict()
        self._limit = limit
        self._guard = threading.Lock()

    def first(self, key: K) -> bool:
        with self._guard:
            if key in self._seen:
                self._seen.move_to_end(key)
                return False
            self._seen[key] = None
            if len(self._seen) > self._limit:
                self._seen.popitem(last=False)
            return True

    def clear(self) -> None:
        with self._guard:
            self._seen.clear()


refresh_locks: KeyedLocks[tuple[str, str]] = KeyedLocks()
"""(federation, cluster) -> the lock of its snapshot refresh: the in-process half of single-flight refresh
(the other half is the shared refresh lease)."""

placement_lock = threading.Lock()
"""Without placement ledgers ([fedsched] placement_ledger = False), deciding and reserving happen under this
lock, so that concurrent placements in a process (threads) each see the reservations of the ones before.
With them, the ledger's compare-and-set arbitrates between threads as between processes."""

ledgers_unavailable: Until[tuple[str, str]] = Until()
"""(federation, cluster) whose placement ledger could not be used: not asked again for a while."""

stored_value_reports: FirstTimes[str] = FirstTimes(10_000)
"""Stored keys whose unreadable value was already logged (once per key)."""

tls_warnings: FirstTimes[tuple[str, str]] = FirstTimes(10_000)
"""(cluster, reason) whose TLS verification was found off and already warned of."""

permission_reviews: dict[tuple[str, str, int], tuple[float, list[str]]] = {}
"""(cluster, namespace, client id) -> (monotonic time, what the member's RBAC does not grant): a member's
permissions are reviewed at most every few minutes per client (``kube/permissions.py``)."""

background_cleanups: set[asyncio.Future[None]] = set()
"""Clean-ups a trigger started and does not wait for (the event loop keeps only a weak reference to a
task: these hold them until they are done)."""

janitor_stop = threading.Event()
"""Set when the process hosting the janitor thread stops (``plugins/janitor.py``): the thread ends."""
