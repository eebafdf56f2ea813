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
from collections.abc import AsyncIterator, Coroutine
from typing import Any, TypeVar

from airflow_provider_fedsched.kube.access import ClusterAccess

T = TypeVar("T")

# Per event loop, (cluster, kubeconfig fingerprint) -> ApiClient; a changed kubeconfig gets a new client.
# A loop's entry goes when the loop ends (below): a client's session refers to its loop, so a weak key
# alone would never let it go.
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

    loop = asyncio.get_running_loop()
    if loop not in _clients:
        await _close_at_loop_end(loop)
    clients = _clients.setdefault(loop, {})
    key = (access.cluster, _fingerprint(access))
    found = clients.get(key)
    if found is None:
        found = client.ApiClient(configuration=await access.async_configuration())
        clients[key] = found
    return found


# Per event loop, an async generator parked at its first ``yield``: the loop's clients are closed when the
# loop shuts its async generators down (``asyncio.run`` does, as a triggerer's loop and ``dag.test``'s
# inline trigger runs end), not left to the garbage collector, which warns of each unclosed session.
_closers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Any] = weakref.WeakKeyDictionary()


async def _close_at_loop_end(loop: asyncio.AbstractEventLoop) -> None:
    closer = _closes_clients()
    await closer.__anext__()
    _closers[loop] = closer


async def _closes_clients() -> AsyncIterator[None]:
    try:
        yield
    finally:  # the loop is shutting its async generators down
        loop = asyncio.get_running_loop()
        _closers.pop(loop, None)
        for found in _clients.pop(loop, {}).values():
            with contextlib.suppress(Exception):
                await found.close()


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


# Synchronous clients (the operator's pod I/O) --------------------------------------------------------
CONNECT_TIMEOUT = 2.0
"""Seconds to open a connection to a member's API server: a dead one is known within a few seconds."""
READ_TIMEOUT = 10.0
"""Seconds to wait for an answer once connected (log streams set their own)."""
CONNECT_RETRIES = 1
"""urllib3 retries a failed connect this many times (never a request that was sent), then gives up."""


def sync_api_client(
    access: ClusterAccess, *, connect_timeout: float = CONNECT_TIMEOUT, read_timeout: float = READ_TIMEOUT
) -> Any:
    """A ``kubernetes`` ApiClient for this cluster only: its own configuration (never the process-wide
    default, never ``KUBECONFIG`` or ``~/.kube/config``), bounded timeouts and one quick connect retry."""
    import urllib3
    from kubernetes import client, config

    configuration = client.Configuration()
    config.load_kube_config_from_dict(
        dict(access.kubeconfig), context=access.context, client_configuration=configuration
    )
    if not access.verify_ssl and configuration.verify_ssl:
        import logging

        logging.getLogger(__name__).warning(
            "TLS verification is off for cluster %s (its connection sets disable_verify_ssl)", access.cluster
        )
    configuration.verify_ssl = access.verify_ssl and configuration.verify_ssl
    configuration.retries = urllib3.Retry(
        total=CONNECT_RETRIES,
        connect=CONNECT_RETRIES,
        read=0,
        redirect=0,
        status=0,
        other=0,
        backoff_factor=0,
        raise_on_status=False,
    )
    timeout = (connect_timeout, read_timeout)

    class BoundedApiClient(client.ApiClient):  # type: ignore[misc]
        def call_api(self, *args: Any, **kwargs: Any) -> Any:
            # Generated methods pass _request_timeout=None explicitly: None would wait forever.
            if kwargs.get("_request_timeout") is None:
                kwargs["_request_timeout"] = timeout
            return super().call_api(*args, **kwargs)

    return BoundedApiClient(configuration=configuration)


_sync_clients: dict[tuple[str, str], Any] = {}
_sync_clients_guard = threading.Lock()


def shared_sync_client(access: ClusterAccess) -> Any:
    """This process's bounded sync ApiClient for ``access``'s cluster (one per kubeconfig fingerprint)."""
    key = (access.cluster, _fingerprint(access))
    with _sync_clients_guard:
        found = _sync_clients.get(key)
        if found is None:
            found = _sync_clients[key] = sync_api_client(access)
        return found
