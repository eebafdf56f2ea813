"""The pod agent: what a container prints while it runs, and what it leaves behind for ``exec``.

For each new pod it writes the XCom sidecar's ``return.json`` into the pod's directory, creates an ``Exec``
object named after the pod (owned by it, so the garbage collector removes it) and then marks the pod
prepared: only then does kwok start it. While a container runs, the agent writes its output (the
``sim.fedsched.io/logs`` annotation, spread over its ``duration`` as the simulator's runtime does) into
the buffer the node endpoint serves (:mod:`.node_endpoint`); when the container ends, the rest of its
output follows and its log ends, as a kubelet's does. kwok answers ``exec`` with a real shell in the pod's
directory, as an unprivileged user where the agent runs as root; the node endpoint runs the agent's
container shell (``bin/sh``) for ``/bin/sh``, which shows the pod's directory at ``/airflow/xcom``, and the
sidecar's ``kill`` reaches a ``pgrep`` that marks the sidecar killed, which a kwok Stage turns into its
termination. Everything the agent writes is under its ``root``, inside the test bed's state dir.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import websocket
from kubernetes import client, watch

from airflow_provider_fedsched.sim.apiserver.nodeagent import LogBuffer
from airflow_provider_fedsched.sim.controllers.runtime import annotation, float_annotation, log_lines
from airflow_provider_fedsched.sim.util import ApiError
from airflow_provider_fedsched.testbed.node_endpoint import NodeEndpoint
from airflow_provider_fedsched.testbed.stages import PREPARED, SIDECAR, SIDECAR_KILLED

log = logging.getLogger(__name__)
NOBODY = 65534
KWOK_EXEC_WAIT = 30.0
"""How long a pod waits for kwok to know its Exec before it starts anyway (with a warning)."""
PREPARERS = 8
"""Pods prepared at once: one pod's wait for kwok never holds up another's start."""
_PGREP = """#!/bin/sh
# The XCom sidecar is stopped with `kill -2 $(pgrep -u $(id -u) -f 'sh')`: mark it killed for the
# test bed (a kwok Stage ends the sidecar) and name this exec session's shell, which the kill ends too.
: > sidecar-killed
echo "$PPID"
"""
_CONTAINER_SHELL = """#!/bin/sh
# The container's /airflow/xcom is the pod's directory, this session's working directory: every command
# runs with that path put in (nothing is linked outside the test bed's state dir). `sh -c COMMAND` runs
# it; an interactive session's lines are run by this one shell, so that a kill of "this session's shell"
# ends the session, as in a container.
inside() { printf '%s\\n' "$1" | sed "s#/airflow/xcom#$PWD#g"; }
if [ "$1" = "-c" ]; then
  exec /bin/sh -c "$(inside "$2")"
fi
while IFS= read -r line; do
  eval "$(inside "$line")"
done
"""


@dataclass
class ContainerOutput:
    """One container's output: its buffer, and the task writing its lines while it runs."""

    lines: list[str]
    seconds: float
    buffer: LogBuffer = field(default_factory=LogBuffer)
    written: int = 0
    writer: asyncio.Task[None] | None = None


@dataclass
class PodOutput:
    uid: str
    containers: dict[str, ContainerOutput]
    states: dict[str, dict[str, Any]] = field(default_factory=dict)


class PodAgent:
    """One cluster's agent: a pod watch on a daemon thread, and its node endpoint (the kubelet's port).

    ``root`` (inside the state dir) must be traversable by the exec user; ``node_port`` is what the
    cluster's nodes report, ``kwok_port`` where kwok listens; ``time_scale`` scales container run times.
    """

    def __init__(
        self,
        api: client.ApiClient,
        root: Path,
        *,
        node_port: int,
        kwok_port: int,
        serving: tuple[Path, Path],
        client_ca: Path,
        time_scale: float = 1.0,
    ) -> None:
        self.api = api
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.root = root
        self.kwok_port = kwok_port
        self.time_scale = time_scale
        self.shims = root / "bin"
        self.root.mkdir(parents=True, exist_ok=True)
        self.root.chmod(0o711)
        self.shims.mkdir(exist_ok=True)
        for name, script in (("pgrep", _PGREP), ("sh", _CONTAINER_SHELL)):
            (self.shims / name).write_text(script)
            (self.shims / name).chmod(0o755)
        self.as_root = os.geteuid() == 0 and _traversable_by_others(root)
        self._stop = threading.Event()
        self._watch: watch.Watch | None = None
        self._sidecars: dict[str, tuple[str, str]] = {}  # uid -> (namespace, name) still running a sidecar
        self._outputs: dict[tuple[str, str], PodOutput] = {}  # (namespace, name): only on the endpoint loop
        # uid -> set once the pod is deleted, for each pod being prepared (single dict operations only)
        self._preparing: dict[str, threading.Event] = {}
        self._preparers = ThreadPoolExecutor(PREPARERS, thread_name_prefix=f"testbed-prepare-{root.name}")
        self.endpoint = NodeEndpoint(
            self,
            port=node_port,
            kwok_port=kwok_port,
            cert=serving[0],
            key=serving[1],
            client_ca=client_ca,
            container_shell=self.shims / "sh",
        )
        self._thread = threading.Thread(target=self._run, name=f"testbed-agent-{root.name}", daemon=True)
        self._poller = threading.Thread(
            target=self._poll_kills, name=f"testbed-kills-{root.name}", daemon=True
        )

    def start(self) -> PodAgent:
        self.endpoint.start()
        self._thread.start()
        self._poller.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._watch is not None:
            self._watch.stop()
        self._thread.join(timeout=10)
        self._poller.join(timeout=10)
        self._preparers.shutdown(wait=True, cancel_futures=True)
        self.endpoint.stop()
        shutil.rmtree(self.root, ignore_errors=True)

    # -- the node endpoint's questions (on its loop) ------------------------------------------------------
    def output(self, namespace: str, pod: str, container: str) -> LogBuffer | None:
        found = self._outputs.get((namespace, pod))
        if found is None or container not in found.containers:
            raise ApiError(404, f'container "{container}" of pod "{namespace}/{pod}" is not on this node')
        output = found.containers[container]
        return output.buffer if output.writer is not None or output.buffer.done else None

    def state(self, namespace: str, pod: str, container: str) -> dict[str, Any] | None:
        found = self._outputs.get((namespace, pod))
        return found.states.get(container) if found is not None else None

    # -- the watch -----------------------------------------------------------------------------------
    def _run(self) -> None:
        resource_version = ""
        while not self._stop.is_set():
            try:
                if not resource_version:
                    listed = self.core.list_pod_for_all_namespaces()
                    pods = [self.api.sanitize_for_serialization(pod) for pod in listed.items]
                    self.endpoint.call(self._forget_all_but, {_key(pod) for pod in pods})
                    for pod in pods:
                        self._on_pod("ADDED", pod)
                    resource_version = listed.metadata.resource_version
                self._watch = watch.Watch()
                for event in self._watch.stream(
                    self.core.list_pod_for_all_namespaces,
                    resource_version=resource_version,
                    timeout_seconds=60,
                    _request_timeout=90,
                ):
                    obj = event["raw_object"]
                    resource_version = obj["metadata"].get("resourceVersion", resource_version)
                    self._on_pod(event["type"], obj)
                    if self._stop.is_set():
                        break
            except client.ApiException as exc:
                if exc.status == 410:
                    resource_version = ""
                elif not self._stop.is_set():
                    log.warning("test bed agent %s: %s", self.root.name, exc)
                    self._stop.wait(0.5)
            except Exception as exc:
                if not self._stop.is_set():
                    log.warning("test bed agent %s: %s", self.root.name, exc)
                    self._stop.wait(0.5)

    def _on_pod(self, kind: str, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        uid = meta["uid"]
        if kind == "DELETED":
            self._sidecars.pop(uid, None)
            gone = self._preparing.pop(uid, None)
            if gone is not None:
                gone.set()
            self.endpoint.call(self._forget, _key(pod), uid)
            shutil.rmtree(self.root / uid, ignore_errors=True)
            return
        if kind == "ERROR":
            return
        self.endpoint.call(self._follow_states, pod)
        annotations = meta.get("annotations") or {}
        containers = [c["name"] for c in pod["spec"].get("containers") or []]
        if SIDECAR in containers and annotations.get(SIDECAR_KILLED) != "true":
            self._sidecars[uid] = (meta["namespace"], meta["name"])
        if annotations.get(PREPARED) == "true" or meta.get("deletionTimestamp"):
            gone = self._preparing.pop(uid, None)
            if gone is not None and meta.get("deletionTimestamp"):
                gone.set()
            return
        if uid in self._preparing:
            return
        gone = self._preparing[uid] = threading.Event()
        self._preparers.submit(self._prepare_logged, pod, gone)

    def _prepare_logged(self, pod: dict[str, Any], gone: threading.Event) -> None:
        meta = pod["metadata"]
        try:
            self._prepare(pod, gone)
        except Exception as exc:
            if not (isinstance(exc, client.ApiException) and exc.status in (404, 409)):
                log.warning("test bed agent: preparing %s/%s: %s", meta["namespace"], meta["name"], exc)
            # The pod's next event prepares it again.
            self._preparing.pop(meta["uid"], None)

    # -- what the containers print (on the endpoint's loop) -----------------------------------------------
    def _follow_states(self, pod: dict[str, Any]) -> None:
        """Start writing a container's output when it runs; when it ends (or its pod is going), write
        the rest and end its log."""
        key, uid = _key(pod), pod["metadata"]["uid"]
        found = self._outputs.get(key)
        if found is None or found.uid != uid:
            if found is not None:
                self._end(found)
            found = self._outputs[key] = PodOutput(uid, _outputs(pod, self.time_scale))
        status = pod.get("status") or {}
        for cs in (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or []):
            state = cs.get("state") or {}
            found.states[cs["name"]] = state
            output = found.containers.get(cs["name"])
            if output is None:
                continue
            if ("running" in state or "terminated" in state) and output.writer is None:
                output.writer = asyncio.create_task(_write_while_running(output))
            if "terminated" in state:
                _finish(output)
        if pod["metadata"].get("deletionTimestamp"):
            self._end(found)

    def _forget(self, key: tuple[str, str], uid: str) -> None:
        found = self._outputs.get(key)
        if found is not None and found.uid == uid:
            self._end(self._outputs.pop(key))

    def _forget_all_but(self, keys: set[tuple[str, str]]) -> None:
        """After a relist: pods deleted while the watch was away end their logs too."""
        for key in [k for k in self._outputs if k not in keys]:
            self._end(self._outputs.pop(key))

    @staticmethod
    def _end(found: PodOutput) -> None:
        for output in found.containers.values():
            _finish(output)

    # -- what the containers leave (exec) -----------------------------------------------------------------
    def _prepare(self, pod: dict[str, Any], gone: threading.Event) -> None:
        meta = pod["metadata"]
        namespace, name, uid = meta["namespace"], meta["name"], meta["uid"]
        directory = self.root / uid
        directory.mkdir(exist_ok=True)
        xcom = annotation(pod, "xcom", default=None)
        if xcom:
            (directory / "return.json").write_text(str(xcom))
        if self.as_root:
            for path in [directory, *directory.iterdir()]:
                os.chown(path, NOBODY, NOBODY)
        owner = [{"apiVersion": "v1", "kind": "Pod", "name": name, "uid": uid}]
        local: dict[str, Any] = {
            "workDir": str(directory),
            "envs": [{"name": "PATH", "value": f"{self.shims}:/usr/local/bin:/usr/bin:/bin"}],
        }
        if self.as_root:
            local["securityContext"] = {"runAsUser": NOBODY, "runAsGroup": NOBODY}
        body = {
            "apiVersion": "kwok.x-k8s.io/v1alpha1",
            "kind": "Exec",
            "metadata": {"name": name, "namespace": namespace, "ownerReferences": owner},
            "spec": {"execs": [{"local": local}]},
        }
        try:
            self.custom.create_namespaced_custom_object("kwok.x-k8s.io", "v1alpha1", namespace, "execs", body)
        except client.ApiException as exc:
            if exc.status != 409:
                raise
        if self._wait_for_kwok_exec(namespace, name, pod["spec"]["containers"][0]["name"], gone):
            self._annotate(namespace, name, uid, PREPARED)

    def _wait_for_kwok_exec(self, namespace: str, name: str, container: str, gone: threading.Event) -> bool:
        """Until kwok can exec in the pod: it reads Exec objects from an informer cache, and on a loaded
        machine a pod whose container ends at once was asked for its XCom before kwok had seen its Exec
        ("no exec found", on the exec's error channel: the client read no output at all). A kubelet
        can exec in a container as soon as it runs, so the pod starts only once kwok can. False when the
        pod was deleted meanwhile (kwok never learns of an Exec whose pod is gone: no wait for it)."""
        url = (
            f"ws://127.0.0.1:{self.kwok_port}/exec/{quote(namespace)}/{quote(name)}/{quote(container)}"
            "?command=true&output=1&error=1"
        )
        deadline = time.monotonic() + KWOK_EXEC_WAIT
        while not self._stop.is_set() and not gone.is_set():
            answer = _exec_error(url)
            if not any(marker in answer for marker in ("no exec found", "exec target not found")):
                return True
            if time.monotonic() > deadline:
                log.warning(
                    "test bed agent: kwok has no exec for %s/%s after %ss", namespace, name, KWOK_EXEC_WAIT
                )
                return True
            gone.wait(0.1)
        return False

    def _annotate(self, namespace: str, name: str, uid: str, key: str) -> None:
        # The uid in the patch is a precondition: a newer pod of the same name is never marked.
        self.core.patch_namespaced_pod(
            name, namespace, {"metadata": {"uid": uid, "annotations": {key: "true"}}}
        )

    def _poll_kills(self) -> None:
        while not self._stop.wait(0.1):
            for uid, (namespace, name) in list(self._sidecars.items()):
                if (self.root / uid / "sidecar-killed").exists():
                    self._sidecars.pop(uid, None)
                    try:
                        self._annotate(namespace, name, uid, SIDECAR_KILLED)
                    except client.ApiException as exc:
                        if exc.status != 404:  # gone already: its task deleted it once XCom was read
                            log.warning(
                                "test bed agent: sidecar of %s/%s: %s %s",
                                namespace,
                                name,
                                exc.status,
                                exc.reason,
                            )


def _exec_error(url: str) -> str:
    """What one exec through kwok's streaming protocol says on its error channel ("" when it says nothing
    or the connection fails: only kwok's own "no exec found" answer means "not yet")."""
    try:
        session = websocket.create_connection(url, subprotocols=["v4.channel.k8s.io"], timeout=5)
    except (OSError, websocket.WebSocketException):
        return ""
    errors = b""
    try:
        while True:
            frame = session.recv()
            data = frame.encode() if isinstance(frame, str) else frame
            if data[:1] == b"\x03":
                errors += data[1:]
    except (OSError, websocket.WebSocketException):
        pass
    finally:
        session.close()
    return errors.decode(errors="replace")


def _key(pod: dict[str, Any]) -> tuple[str, str]:
    return pod["metadata"]["namespace"], pod["metadata"]["name"]


def _outputs(pod: dict[str, Any], time_scale: float) -> dict[str, ContainerOutput]:
    spec = pod["spec"]
    names = [c["name"] for c in (spec.get("initContainers") or []) + (spec.get("containers") or [])]
    return {
        name: ContainerOutput(
            lines=[] if name == SIDECAR else log_lines(pod, name),
            seconds=float_annotation(pod, "duration", 1.0) * time_scale,  # the run stage's: the pod's
        )
        for name in names
    }


async def _write_while_running(output: ContainerOutput) -> None:
    """The container's lines at even steps over its run time, as the simulator's runtime prints them."""
    step = output.seconds / (len(output.lines) + 1)
    started = time.monotonic()
    while output.written < len(output.lines) and not output.buffer.done:
        due = started + step * (output.written + 1)
        await asyncio.sleep(max(0.0, due - time.monotonic()))
        if output.buffer.done:
            return
        output.buffer.append(output.lines[output.written])
        output.written += 1


def _finish(output: ContainerOutput) -> None:
    """The container can print no more: what it had left to print, then the end of its log."""
    if output.buffer.done:
        return
    if output.writer is not None:
        output.writer.cancel()
    for line in output.lines[output.written :]:
        output.buffer.append(line)
    output.written = len(output.lines)
    output.buffer.finish()


def _traversable_by_others(path: Path) -> bool:
    """Whether an unprivileged exec user can reach ``path`` (every ancestor searchable by others)."""
    with contextlib.suppress(OSError):
        return all(os.stat(p).st_mode & 0o001 for p in [path, *path.parents])
    return False
