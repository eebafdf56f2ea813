"""``GET .../pods/{name}/log``: kubelet-style container logs with follow, timestamps and filters."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
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


@dataclass(frozen=True)
class LogOptions:
    """A log request's options, as the kubelet reads them (``sinceSeconds``, ``sinceTime``, ``tailLines``,
    ``limitBytes``, ``timestamps``, ``follow``, ``previous``); a bad value is a 400 naming the option."""

    since: float | None
    limit: int | None
    tail: int | None
    timestamps: bool
    follow: bool
    previous: bool

    @classmethod
    def from_query(cls, query: MultiMapping[str]) -> LogOptions:
        since_seconds = int_query(query, "sinceSeconds", 1)
        since_time = time_query(query, "sinceTime")
        return cls(
            since=time.time() - since_seconds if since_seconds is not None else since_time,
            limit=int_query(query, "limitBytes", 1),
            tail=int_query(query, "tailLines", 0),
            timestamps=_true(query.get("timestamps")),
            follow=_true(query.get("follow")),
            previous=_true(query.get("previous")),
        )


def waiting_to_start(container: str, pod: str, state: dict[str, Any] | None) -> ApiError:
    """The kubelet's answer for a container with no output yet."""
    reason = ((state or {}).get("waiting") or {}).get("reason", "ContainerCreating")
    return ApiError(400, f'container "{container}" in pod "{pod}" is waiting to start: {reason}')


def log_body(buffer: LogBuffer, options: LogOptions) -> bytes:
    """What a read that does not follow answers: the selected lines, cut at ``limitBytes``."""
    body = b"".join(_format(line, options.timestamps) for line in _selected(buffer, options))
    return body[: options.limit] if options.limit is not None else body


def _selected(buffer: LogBuffer, options: LogOptions) -> list[tuple[float, str]]:
    lines = [ln for ln in buffer.lines if options.since is None or ln[0] >= options.since]
    if options.tail is not None:
        lines = lines[-options.tail :] if options.tail else []
    return lines


async def follow_log(
    buffer: LogBuffer,
    options: LogOptions,
    write: Callable[[bytes], Awaitable[None]],
    stopped: Callable[[], bool],
) -> None:
    """Send the selected lines, then what the container writes, until it can write no more (``buffer``
    done, or ``stopped()``: its pod gone or its container terminated) or ``limitBytes`` is reached: the
    stream then ends cleanly, as a kubelet's does. The simulator's API server and the test bed's node
    endpoint both serve follows with this."""
    position = len(buffer.lines)  # where following picks up after the initial lines
    sent = 0

    async def send(chunk: bytes) -> bool:
        nonlocal sent
        if options.limit is not None:
            chunk = chunk[: max(0, options.limit - sent)]
        if chunk:
            await write(chunk)
            sent += len(chunk)
        return options.limit is None or sent < options.limit

    for line in _selected(buffer, options):
        if not await send(_format(line, options.timestamps)):
            return
    while True:
        while position < len(buffer.lines):
            line = buffer.lines[position]
            position += 1
            if not await send(_format(line, options.timestamps)):
                return
        # No await between the last flush and these checks, so no line can be missed.
        if buffer.done or stopped():
            return
        changed = buffer.changed
        # Wake on new output, or look again: no termination path may leave a follower hanging.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(changed.wait(), _RECHECK_SECONDS)


async def pod_log(
    request: web.Request, store: Store, agent: NodeAgent, namespace: str, name: str
) -> web.StreamResponse:
    # Options are decoded (400 on a bad one) before the pod is looked up, as the apiserver does.
    options = LogOptions.from_query(request.query)
    pod = store.require("pods", namespace, name)
    container = _select_container(pod, request.query)
    uid = pod["metadata"]["uid"]
    statuses = {cs["name"]: cs for cs in (pod.get("status") or {}).get("containerStatuses") or []}
    status = statuses.get(container)
    buffer: LogBuffer | None
    if options.previous:
        buffer = agent.log_buffer(uid, container, previous=True)
        if buffer is None:
            raise ApiError(400, f'previous terminated container "{container}" in pod "{name}" not found')
    else:
        buffer = agent.log_buffer(uid, container)
        if buffer is None:
            state = (status or {}).get("state") or {"waiting": {"reason": "ContainerCreating"}}
            if "waiting" in state:
                raise waiting_to_start(container, name, state)
            buffer = LogBuffer(done=True)
    if not options.follow:
        return web.Response(body=log_body(buffer, options), content_type="text/plain")
    response = web.StreamResponse(headers={"Content-Type": "text/plain"})
    response.enable_chunked_encoding()
    await response.prepare(request)
    try:
        await follow_log(
            buffer, options, response.write, lambda: _stopped(store, namespace, name, uid, container)
        )
        await response.write_eof()
    except ConnectionResetError:
        pass  # the client stopped following
    return response
