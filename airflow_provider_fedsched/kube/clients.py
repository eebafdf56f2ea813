"""Long-lived API clients per member cluster, and the one event loop that owns them in a process.

Building a ``kubernetes_asyncio`` client costs ~20 ms (it loads the system CA bundle into a new SSL
context) and an aiohttp session belongs to the event loop that created it. Sensing runs every few seconds,
so each process keeps one background loop with one client per cluster and reuses them.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import hashlib
import json
import threading
import weakref
from collections.abc import Coroutine
from typing import Any, TypeVar

from airflow_provider_fedsched.kube.access import ClusterAccess

T = TypeVar("T")

# Per event loop (weakly: a finished loop takes its clients with it), (cluster, kubeconfig fingerprint)
# -> ApiClient; a changed kubeconfig gets a new client.
_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[tuple[str, str], Any]] = (
    weakref.WeakKeyDictionary()
)
_loop: asyncio.AbstractEventLoop | None = None
_loop_guard = threading.Lock()


def _fingerprint(access: ClusterAccess) -> str:
    document = json.dumps(dict(access.kubeconfig), sort_keys=True, default=str)
    return hashlib.sha256(f"{access.context}|{access.verify_ssl}|{document}".encode()).hexdigest()


async def api_client(access: ClusterAccess) -> Any:
    """This loop's client for ``access``'s cluster (created on first use, then reused)."""
    from kubernetes_asyncio import client

    clients = _clients.setdefault(asyncio.get_running_loop(), {})
    key = (access.cluster, _fingerprint(access))
    found = clients.get(key)
    if found is None:
        found = client.ApiClient(configuration=await access.async_configuration())
        clients[key] = found
    return found


async def discard_client(access: ClusterAccess) -> None:
    """Drop a cluster's client after a failure, so that the next call starts from a new connection."""
    clients = _clients.get(asyncio.get_running_loop(), {})
    found = clients.pop((access.cluster, _fingerprint(access)), None)
    if found is not None:
        await found.close()


def _background_loop() -> asyncio.AbstractEventLoop:
    global _loop
    with _loop_guard:
        if _loop is None:
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="fedsched-sensing", daemon=True).start()
            atexit.register(_shutdown, loop)
            _loop = loop
        return _loop


def run_in_background(coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
    """Run ``coro`` on the process's sensing loop and wait for it (never call from that loop)."""
    return asyncio.run_coroutine_threadsafe(coro, _background_loop()).result(timeout)


def _shutdown(loop: asyncio.AbstractEventLoop) -> None:
    async def close_all() -> None:
        for found in _clients.pop(loop, {}).values():
            await found.close()

    with contextlib.suppress(Exception):  # interpreter shutdown: nothing left to protect
        asyncio.run_coroutine_threadsafe(close_all(), loop).result(5)
    loop.call_soon_threadsafe(loop.stop)
