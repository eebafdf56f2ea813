"""``pods/{name}/exec`` over the Kubernetes websocket channel protocol (v4/v5.channel.k8s.io).

The commands themselves run in the node's (simulated) container runtime, reached through the node agent.
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp import WSMsgType, web

from airflow_provider_fedsched.sim.apiserver.nodeagent import ExecResult, NodeAgent
from airflow_provider_fedsched.sim.apiserver.store import Store
from airflow_provider_fedsched.sim.util import ApiError

STDIN, STDOUT, STDERR, ERROR, RESIZE, CLOSE = 0, 1, 2, 3, 4, 255
PROTOCOLS = ("v5.channel.k8s.io", "v4.channel.k8s.io", "channel.k8s.io")


def _status(result: ExecResult, argv: list[str]) -> dict[str, Any]:
    if result.exit_code == 0:
        return {"metadata": {}, "status": "Success"}
    return {
        "metadata": {},
        "status": "Failure",
        "message": f"command terminated with non-zero exit code: error executing command {argv}, "
        f"exit code {result.exit_code}",
        "reason": "NonZeroExitCode",
        "details": {"causes": [{"reason": "ExitCode", "message": str(result.exit_code)}]},
    }


async def pod_exec(
    request: web.Request, store: Store, agent: NodeAgent, namespace: str, name: str
) -> web.StreamResponse:
    pod = store.require("pods", namespace, name)
    query = request.query
    argv = query.getall("command", [])
    names = [c["name"] for c in pod["spec"].get("containers") or []]
    container = query.get("container") or names[0]
    if container not in names:
        raise ApiError(400, f"container {container} is not valid for pod {name}")
    if request.headers.get("Upgrade", "").lower() != "websocket":
        raise ApiError(400, "Upgrade request required")
    statuses = {cs["name"]: cs for cs in (pod.get("status") or {}).get("containerStatuses") or []}
    if "running" not in ((statuses.get(container) or {}).get("state") or {}):
        raise ApiError(400, f'unable to upgrade connection: container not found ("{container}")')
    ws = web.WebSocketResponse(protocols=PROTOCOLS)
    await ws.prepare(request)
    result = ExecResult()
    wants_stdin = query.get("stdin", "").lower() in ("true", "1")
    if wants_stdin and [a.rsplit("/", 1)[-1] for a in argv] in (["sh"], ["bash"]):
        # An interactive shell: run each line written on stdin until the session is killed or closed.
        pending = ""
        async for msg in ws:
            if msg.type not in (WSMsgType.BINARY, WSMsgType.TEXT):
                break
            data = msg.data if isinstance(msg.data, bytes) else msg.data.encode()
            if not data:
                continue
            if data[0] == CLOSE:
                break
            if data[0] != STDIN:
                continue
            pending += data[1:].decode(errors="replace")
            while "\n" in pending:
                line, pending = pending.split("\n", 1)
                agent.exec_script(pod, container, line, result)
                await _flush(ws, result)
                if result.killed_session:
                    break
            if result.killed_session:
                break
    else:
        agent.exec_argv(pod, container, argv, result)
    await _flush(ws, result)
    if not ws.closed:
        await ws.send_bytes(bytes([ERROR]) + json.dumps(_status(result, argv)).encode())
        await ws.close()
    return ws


async def _flush(ws: web.WebSocketResponse, result: ExecResult) -> None:
    if ws.closed:
        return
    if result.stdout:
        await ws.send_bytes(bytes([STDOUT]) + result.stdout.encode())
        result.stdout = ""
    if result.stderr:
        await ws.send_bytes(bytes([STDERR]) + result.stderr.encode())
        result.stderr = ""
