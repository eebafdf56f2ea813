"""``pods/{name}/exec`` over the Kubernetes websocket channel protocol (v4/v5.channel.k8s.io).

Commands are simulated: enough for KubernetesPodOperator's xcom sidecar (``cat return.json`` or the empty
marker, then ``kill -2`` on stdin), plus ``echo``, ``cat``, ``true``, ``false``, ``exit N``, ``hostname`` and
``env``. Anything else ends with exit code 127 (a NonZeroExitCode Status).
"""

from __future__ import annotations

import json
import shlex
from typing import TYPE_CHECKING, Any

from aiohttp import WSMsgType, web

from airflow_provider_fedsched.sim.kubelet import annotation
from airflow_provider_fedsched.sim.util import ApiError

if TYPE_CHECKING:
    from airflow_provider_fedsched.sim.cluster import Cluster

STDIN, STDOUT, STDERR, ERROR, RESIZE, CLOSE = 0, 1, 2, 3, 4, 255
PROTOCOLS = ("v5.channel.k8s.io", "v4.channel.k8s.io", "channel.k8s.io")
XCOM_PATH = "/airflow/xcom/return.json"
EMPTY_XCOM = "__airflow_xcom_result_empty__"


class Result:
    def __init__(self) -> None:
        self.stdout = ""
        self.stderr = ""
        self.exit_code = 0
        self.killed_session = False


def _xcom(pod: dict[str, Any]) -> str:
    return str(annotation(pod, "xcom", default="") or "")


def run_script(cluster: Cluster, pod: dict[str, Any], container: str, script: str, result: Result) -> None:
    """Interpret one shell command line the way the sidecar's /bin/sh would, for the commands we model."""
    script = script.strip()
    if not script:
        return
    if XCOM_PATH in script and "cat" in script:
        value = _xcom(pod)
        if value:
            result.stdout += value
        elif EMPTY_XCOM in script:
            result.stdout += EMPTY_XCOM + "\n"
        else:
            result.stderr += f"cat: can't open '{XCOM_PATH}': No such file or directory\n"
            result.exit_code = 1
        return
    if script.startswith("kill") or "/proc/[0-9]*/comm" in script:
        cluster.kubelet.kill_container(pod["metadata"]["uid"], container)
        # The sidecar's shell (and this exec session's own shell) die with the signal.
        result.killed_session = True
        return
    try:
        argv = shlex.split(script)
    except ValueError:
        result.stderr += f"sh: syntax error: {script}\n"
        result.exit_code = 2
        return
    run_argv(cluster, pod, container, argv, result)


def run_argv(cluster: Cluster, pod: dict[str, Any], container: str, argv: list[str], result: Result) -> None:
    if not argv:
        return
    program = argv[0].rsplit("/", 1)[-1]
    if program in ("sh", "bash") and len(argv) >= 3 and argv[1] == "-c":
        run_script(cluster, pod, container, argv[2], result)
    elif program == "echo":
        result.stdout += " ".join(argv[1:]) + "\n"
    elif program == "cat" and argv[1:] == [XCOM_PATH]:
        run_script(cluster, pod, container, f"cat {XCOM_PATH}", result)
    elif program == "true":
        pass
    elif program == "false":
        result.exit_code = 1
    elif program == "exit":
        result.exit_code = int(argv[1]) if len(argv) > 1 and argv[1].isdigit() else 0
    elif program == "hostname":
        result.stdout += pod["metadata"]["name"] + "\n"
    elif program == "env":
        result.stdout += f"HOSTNAME={pod['metadata']['name']}\n"
    elif program == "kill":
        run_script(cluster, pod, container, " ".join(argv), result)
    else:
        result.stderr += f"sh: {argv[0]}: not found\n"
        result.exit_code = 127


def _status(result: Result, argv: list[str]) -> dict[str, Any]:
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


async def pod_exec(request: web.Request, cluster: Cluster, namespace: str, name: str) -> web.StreamResponse:
    pod = cluster.store.require("pods", namespace, name)
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
    result = Result()
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
                run_script(cluster, pod, container, line, result)
                await _flush(ws, result)
                if result.killed_session:
                    break
            if result.killed_session:
                break
    else:
        run_argv(cluster, pod, container, argv, result)
    await _flush(ws, result)
    if not ws.closed:
        await ws.send_bytes(bytes([ERROR]) + json.dumps(_status(result, argv)).encode())
        await ws.close()
    return ws


async def _flush(ws: web.WebSocketResponse, result: Result) -> None:
    if ws.closed:
        return
    if result.stdout:
        await ws.send_bytes(bytes([STDOUT]) + result.stdout.encode())
        result.stdout = ""
    if result.stderr:
        await ws.send_bytes(bytes([STDERR]) + result.stderr.encode())
        result.stderr = ""
