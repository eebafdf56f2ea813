"""Watch: JSON-lines event streams resuming from a resourceVersion, with 410 Expired like the apiserver."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

from aiohttp import web

from airflow_provider_fedsched.sim.apiserver.selectors import parse_field_selector, parse_label_selector
from airflow_provider_fedsched.sim.apiserver.store import Obj, Store, Watcher, WatchEvent
from airflow_provider_fedsched.sim.util import ApiError, int_query


async def watch(
    request: web.Request,
    store: Store,
    plural: str,
    namespace: str,
    extra_field: str | None = None,
    transform: Callable[[Obj], Obj] | None = None,
) -> web.StreamResponse:
    """Stream watch events as JSON lines from the requested resourceVersion until timeout or a fault.

    ``transform`` turns each object into what the client asked for (a Table for ``kubectl get -w``).
    """
    query = request.query
    label = parse_label_selector(query.get("labelSelector"))
    fields = ",".join(f for f in (query.get("fieldSelector"), extra_field) if f)
    field = parse_field_selector(plural, fields)

    def matches(obj: Obj | None) -> bool:
        if obj is None:
            return False
        meta = obj["metadata"]
        if namespace and meta.get("namespace") != namespace:
            return False
        return label(meta.get("labels")) and field(obj)

    timeout = int_query(query, "timeoutSeconds", 0) or 1800
    rv = query.get("resourceVersion") or "0"
    watcher = Watcher(plural)
    initial: list[tuple[str, Obj]] = []
    error: ApiError | None = None
    # Registration and the initial snapshot happen without awaiting, so no event falls in between.
    if rv == "0":
        initial = [("ADDED", o) for o in store.list(plural, namespace or None) if matches(o)]
    else:
        try:
            for event in store.events_since(plural, int(rv)):
                converted = _convert(event, matches)
                if converted:
                    initial.append(converted)
        except ApiError as exc:
            error = exc
        except ValueError:
            raise ApiError(400, f"invalid resource version: {rv}") from None
    store.watchers.add(watcher)
    response = web.StreamResponse(
        headers={"Content-Type": "application/json", "Transfer-Encoding": "chunked"}
    )
    try:
        await response.prepare(request)
        if error is not None:
            await _send(response, "ERROR", error.status())
            return response
        agent = request.headers.get("User-Agent", "")
        for etype, obj in initial:
            store.served(plural, [obj], agent)
            await _send(response, etype, transform(obj) if transform else obj)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            try:
                item = await asyncio.wait_for(watcher.queue.get(), remaining)
            except TimeoutError:
                break
            if item == "drop":
                break
            if item == "expire":
                await _send(
                    response,
                    "ERROR",
                    ApiError(
                        410, f"too old resource version: {rv} ({store.compacted_rv})", "Expired"
                    ).status(),
                )
                break
            assert isinstance(item, WatchEvent)
            converted = _convert(item, matches)
            if converted:
                etype, obj = converted
                store.served(plural, [obj], agent)
                await _send(response, etype, transform(obj) if transform else obj)
        await response.write_eof()
        return response
    except ConnectionResetError:
        # The client went away mid-stream (or a fault closed it): nothing left to answer.
        return response
    finally:
        store.watchers.discard(watcher)


def _convert(event: WatchEvent, matches: Any) -> tuple[str, Obj] | None:
    now, before = matches(event.obj), matches(event.old)
    if event.type == "MODIFIED":
        if now and before:
            return ("MODIFIED", event.obj)
        if now:
            return ("ADDED", event.obj)
        if before:
            return ("DELETED", event.obj)
        return None
    return (event.type, event.obj) if now else None


async def _send(response: web.StreamResponse, etype: str, obj: Obj) -> None:
    await response.write(json.dumps({"type": etype, "object": obj}, separators=(",", ":")).encode() + b"\n")
