"""``GET .../pods/{name}/log``: kubelet-style container logs with follow, timestamps and filters."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

from aiohttp import web
from multidict import MultiMapping

from airflow_provider_fedsched.sim.apiserver.nodeagent import LogBuffer, NodeAgent
from airflow_provider_fedsched.sim.apiserver.store import Store
from airflow_provider_fedsched.sim.util import ApiError, int_query, rfc3339nano, time_query

# How often a follow stream re-reads the pod's status besides waking on new output.
_RECHECK_SECONDS = 0.5


def _true(value: str | None) -> bool:
    return (value or "").lower() in ("true", "1")


def _select_container(pod: dict[str, Any], query: MultiMapping[str]) -> str:
    name = pod["metadata"]["name"]
    spec = pod["spec"]
    names: list[str] = [str(c["name"]) for c in spec.get("containers") or []]
    init_names: list[str] = [str(c["name"]) for c in spec.get("initContainers") or []]
    container = query.get("container")
    if not container:
        if len(names) == 1:
            return names[0]
        raise ApiError(
            400,
            f"a container name must be specified for pod {name}, choose one of: [{' '.join(names)}]"
            + (f" or one of the init containers: [{' '.join(init_names)}]" if init_names else ""),
        )
    if container not in names + init_names:
        raise ApiError(400, f"container {container} is not valid for pod {name}")
    return container


def _format(line: tuple[float, str], timestamps: bool) -> bytes:
    ts, text = line
    return ((rfc3339nano(ts) + " " if timestamps else "") + text + "\n").encode()


def _stopped(store: Store, namespace: str, name: str, uid: str, container: str) -> bool:
    """Whether the followed container can produce no more output (terminated, or its pod gone)."""
    pod = store.get("pods", namespace, name)
    if pod is None or pod["metadata"]["uid"] != uid:
        return True
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        if cs["name"] == container:
            return "terminated" in (cs.get("state") or {})
    return False


async def pod_log(
    request: web.Request, store: Store, agent: NodeAgent, namespace: str, name: str
) -> web.StreamResponse:
    query = request.query
    # Options are decoded (400 on a bad one) before the pod is looked up, as the apiserver does.
    since_seconds = int_query(query, "sinceSeconds", 1)
    since_time = time_query(query, "sinceTime")
    limit = int_query(query, "limitBytes", 1)
    tail = int_query(query, "tailLines", 0)
    pod = store.require("pods", namespace, name)
    container = _select_container(pod, query)
    uid = pod["metadata"]["uid"]
    statuses = {cs["name"]: cs for cs in (pod.get("status") or {}).get("containerStatuses") or []}
    status = statuses.get(container)
    buffer: LogBuffer | None
    if _true(query.get("previous")):
        buffer = agent.log_buffer(uid, container, previous=True)
        if buffer is None:
            raise ApiError(400, f'previous terminated container "{container}" in pod "{name}" not found')
    else:
        buffer = agent.log_buffer(uid, container)
        if buffer is None:
            state = (status or {}).get("state") or {"waiting": {"reason": "ContainerCreating"}}
            if "waiting" in state:
                reason = state["waiting"].get("reason", "ContainerCreating")
                raise ApiError(400, f'container "{container}" in pod "{name}" is waiting to start: {reason}')
            buffer = LogBuffer(done=True)
    timestamps = _true(query.get("timestamps"))
    follow = _true(query.get("follow"))
    since = time.time() - since_seconds if since_seconds is not None else since_time
    lines = [ln for ln in buffer.lines if since is None or ln[0] >= since]
    if tail is not None:
        lines = lines[-tail:] if tail else []
    position = len(buffer.lines)  # where following picks up after the initial lines
    if not follow:
        body = b"".join(_format(ln, timestamps) for ln in lines)
        return web.Response(body=body[:limit] if limit is not None else body, content_type="text/plain")
    response = web.StreamResponse(headers={"Content-Type": "text/plain"})
    response.enable_chunked_encoding()
    await response.prepare(request)
    sent = 0

    async def write(chunk: bytes) -> bool:
        nonlocal sent
        if limit is not None:
            chunk = chunk[: max(0, limit - sent)]
        if chunk:
            await response.write(chunk)
            sent += len(chunk)
        return limit is None or sent < limit

    async def flush() -> bool:
        """Send what the container wrote since the last flush; False once limitBytes is reached."""
        nonlocal position
        while position < len(buffer.lines):
            line = buffer.lines[position]
            position += 1
            if not await write(_format(line, timestamps)):
                return False
        return True

    try:
        for line in lines:
            if not await write(_format(line, timestamps)):
                return response
        while True:
            if not await flush():
                return response
            # No await between the last flush and these checks, so no line can be missed.
            if buffer.done or _stopped(store, namespace, name, uid, container):
                break
            changed = buffer.changed
            # Wake on new output, or re-read the pod: no termination path may leave a follower hanging.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), _RECHECK_SECONDS)
        await response.write_eof()
    except ConnectionResetError:
        pass  # the client stopped following
    return response
