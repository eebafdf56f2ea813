"""A kwok-like kubelet: pod stages Pending -> Running -> Succeeded/Failed, driven by pod annotations.

Annotations (prefix ``sim.fedsched.io/``; ``KEY.CONTAINER`` overrides ``KEY`` for one container):
``duration`` run seconds (default 1), ``exit-code`` (default 0), ``logs`` (JSON list or newline text),
``startup-delay`` seconds before containers start (default 0.2), ``image-pull-error`` (message; the pod stays
in ErrImagePull/ImagePullBackOff), ``xcom`` (what the xcom sidecar's ``return.json`` holds).
``${NAME}`` in log lines becomes the value of the container's env var ``NAME`` (literal ``value`` entries).
All durations are simulated seconds, scaled by the cluster clock.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from airflow_provider_fedsched.sim.objects import TERMINAL, set_condition
from airflow_provider_fedsched.sim.store import Obj, WatchEvent
from airflow_provider_fedsched.sim.util import now_iso

if TYPE_CHECKING:
    from airflow_provider_fedsched.sim.cluster import Cluster

PREFIX = "sim.fedsched.io/"
SIDECAR = "airflow-xcom-sidecar"
COMPONENT = "kubelet"


def annotation(pod: Obj, key: str, container: str | None = None, default: Any = None) -> Any:
    annotations = pod["metadata"].get("annotations") or {}
    if container and f"{PREFIX}{key}.{container}" in annotations:
        return annotations[f"{PREFIX}{key}.{container}"]
    return annotations.get(PREFIX + key, default)


def _float(value: Any, default: float) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return default


_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def container_env(pod: Obj, container: str) -> dict[str, str]:
    """The literal ``env`` values of one container; the last entry of a name wins, as in the runtime.

    An entry with neither ``value`` nor ``valueFrom`` is the empty string (as Kubernetes sets it);
    ``valueFrom`` entries (secrets, field refs...) are not resolved and so not substituted.
    """
    env: dict[str, str] = {}
    for spec in pod["spec"].get("containers") or []:
        if spec.get("name") != container:
            continue
        for entry in spec.get("env") or []:
            if isinstance(entry, dict) and entry.get("name") and entry.get("valueFrom") is None:
                env[str(entry["name"])] = str(entry.get("value") or "")
    return env


def expand_env(line: str, env: Mapping[str, str]) -> str:
    """Replace ``${NAME}`` with the container's env value; unknown names stay as written."""
    return _ENV_REF.sub(lambda m: env.get(m.group(1), m.group(0)), line)


def _split_lines(raw: Any) -> list[str]:
    if isinstance(raw, str) and raw.lstrip().startswith("["):
        try:
            return [str(line) for line in json.loads(raw)]
        except ValueError:
            pass  # not JSON after all: plain text
    return str(raw).splitlines()


def log_lines(pod: Obj, container: str) -> list[str]:
    raw = annotation(pod, "logs", container)
    if raw is None:
        name = pod["metadata"]["name"]
        return [f"sim: starting container {container} of pod {name}", f"sim: container {container} finished"]
    env = container_env(pod, container)
    return [expand_env(line, env) for line in _split_lines(raw)]


@dataclass
class LogBuffer:
    """One container instance's output; ``changed`` wakes followers."""

    lines: list[tuple[float, str]] = field(default_factory=list)
    done: bool = False
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def append(self, line: str) -> None:
        self.lines.append((time.time(), line))
        self._notify()

    def finish(self) -> None:
        self.done = True
        self._notify()

    def _notify(self) -> None:
        self.changed.set()
        self.changed = asyncio.Event()


class Kubelet:
    """Plays the kubelet of every node of one cluster."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.store = cluster.store
        self.tasks: dict[str, asyncio.Task[None]] = {}
        self.terminating: dict[str, asyncio.Task[None]] = {}
        self.logs: dict[tuple[str, str], LogBuffer] = {}  # (uid, container) current instance
        self.previous_logs: dict[tuple[str, str], LogBuffer] = {}
        self.kill_events: dict[tuple[str, str], asyncio.Event] = {}
        self.frozen_nodes: set[str] = set()
        self._ip = 0
        self.store.listeners.append(self._on_event)

    # -- reacting to the store ---------------------------------------------------------------------
    def _on_event(self, event: WatchEvent) -> None:
        if event.plural != "pods":
            return
        pod, meta = event.obj, event.obj["metadata"]
        uid = meta["uid"]
        node = (pod.get("spec") or {}).get("nodeName")
        if event.type == "DELETED":
            self._forget(uid)
            return
        self._end_terminated_logs(pod)
        if meta.get("deletionTimestamp"):
            if node in self.frozen_nodes:
                # The kubelet is unreachable and will never stream again: end every follower now.
                self._end_logs(uid, [c["name"] for c in (pod.get("spec") or {}).get("containers") or []])
            if uid not in self.terminating:
                self.terminating[uid] = asyncio.ensure_future(
                    self._terminate(meta["namespace"], meta["name"], uid)
                )
            return
        if node and uid not in self.tasks and node not in self.frozen_nodes:
            if (pod.get("status") or {}).get("phase") in TERMINAL:
                return
            self.tasks[uid] = asyncio.ensure_future(self._run(meta["namespace"], meta["name"], uid))

    def _forget(self, uid: str) -> None:
        for tasks in (self.tasks, self.terminating):
            task = tasks.pop(uid, None)
            if task is not None and task is not asyncio.current_task():
                task.cancel()
        for key in [k for k in self.logs if k[0] == uid]:
            self.logs.pop(key).finish()
            self.previous_logs.pop(key, None)
            self.kill_events.pop(key, None)

    def _end_logs(self, uid: str, containers: Iterable[str]) -> None:
        """Mark the current log buffers of these containers done: their follow streams end."""
        for container in containers:
            buffer = self.logs.get((uid, container))
            if buffer is not None and not buffer.done:
                buffer.finish()

    def _end_terminated_logs(self, pod: Obj) -> None:
        """A container whose status says terminated produces no more output, whoever stopped it.

        The kubelet's own run loop finishes buffers on a normal exit; this catches every other path
        (node-pressure eviction, graceful deletion of any origin: preemption, API eviction, taint manager).
        """
        statuses = (pod.get("status") or {}).get("containerStatuses") or []
        terminated = {cs["name"] for cs in statuses if "terminated" in (cs.get("state") or {})}
        if terminated:
            self._end_logs(pod["metadata"]["uid"], terminated)

    def stop_pod(self, uid: str) -> None:
        """Stop driving a pod (node unreachable, evicted): its status freezes where it is."""
        task = self.tasks.pop(uid, None)
        if task is not None:
            task.cancel()

    def resume_node(self, node: str) -> None:
        self.frozen_nodes.discard(node)
        for pod in list(self.store.objects["pods"].values()):
            if pod["spec"].get("nodeName") == node:
                self._on_event(WatchEvent(0, "pods", "MODIFIED", pod))

    # -- helpers -----------------------------------------------------------------------------------
    def _pod(self, ns: str, name: str, uid: str) -> Obj | None:
        pod = self.store.get("pods", ns, name)
        return pod if pod is not None and pod["metadata"]["uid"] == uid else None

    def _event(self, pod: Obj, etype: str, reason: str, message: str) -> None:
        self.cluster.events.record(pod, etype, reason, message, COMPONENT, pod["spec"].get("nodeName"))

    def _next_ip(self) -> str:
        self._ip += 1
        return f"10.244.{(self._ip // 250) % 250}.{self._ip % 250 + 2}"

    def _node_ip(self, node_name: str) -> str:
        node = self.store.get("nodes", "", node_name)
        for addr in ((node or {}).get("status") or {}).get("addresses") or []:
            if addr.get("type") == "InternalIP":
                return str(addr["address"])
        return "10.0.0.1"

    def _patch(self, ns: str, name: str, uid: str, fn: Any) -> Obj | None:
        if self._pod(ns, name, uid) is None:
            return None
        return self.store.mutate("pods", ns, name, fn)

    # -- the pod lifecycle -------------------------------------------------------------------------
    async def _run(self, ns: str, name: str, uid: str) -> None:
        clock = self.cluster.clock
        pod = self._pod(ns, name, uid)
        if pod is None:
            return
        containers = [c["name"] for c in pod["spec"].get("containers") or []]
        images = {c["name"]: c.get("image", "") for c in pod["spec"].get("containers") or []}
        node = pod["spec"]["nodeName"]
        already_running = pod.get("status", {}).get("phase") == "Running"
        if not already_running:
            host_ip = self._node_ip(node)

            def creating(p: Obj) -> None:
                status = p.setdefault("status", {})
                status["hostIP"] = host_ip
                status["hostIPs"] = [{"ip": host_ip}]
                status["startTime"] = now_iso()
                set_condition(p, "PodReadyToStartContainers", "False")
                set_condition(p, "Initialized", "True")
                unready = f"containers with unready status: [{' '.join(containers)}]"
                set_condition(p, "Ready", "False", "ContainersNotReady", unready)
                set_condition(p, "ContainersReady", "False", "ContainersNotReady", unready)
                status["containerStatuses"] = [
                    {
                        "name": c,
                        "image": images[c],
                        "imageID": "",
                        "ready": False,
                        "restartCount": 0,
                        "started": False,
                        "state": {"waiting": {"reason": "ContainerCreating"}},
                        "lastState": {},
                    }
                    for c in containers
                ]

            pod = self._patch(ns, name, uid, creating)
            if pod is None:
                return
            pull_error = annotation(pod, "image-pull-error")
            for c in containers:
                self._event(pod, "Normal", "Pulling", f'Pulling image "{images[c]}"')
            if pull_error:
                await self._image_pull_failure(
                    ns, name, uid, containers[0], images[containers[0]], str(pull_error)
                )
                return
            await clock.sleep(_float(annotation(pod, "startup-delay"), 0.2))
            pod = self._pod(ns, name, uid)
            if pod is None:
                return
            for c in containers:
                self._event(
                    pod,
                    "Normal",
                    "Pulled",
                    f'Successfully pulled image "{images[c]}" in 512ms (512ms including waiting)',
                )
                self._event(pod, "Normal", "Created", f"Created container {c}")
                self._event(pod, "Normal", "Started", f"Started container {c}")
            pod_ip = self._next_ip()
            started = now_iso()

            def running(p: Obj) -> None:
                status = p["status"]
                status["phase"] = "Running"
                status["podIP"] = pod_ip
                status["podIPs"] = [{"ip": pod_ip}]
                set_condition(p, "PodReadyToStartContainers", "True")
                set_condition(p, "Ready", "True")
                set_condition(p, "ContainersReady", "True")
                for cs in status["containerStatuses"]:
                    cs.update(
                        ready=True,
                        started=True,
                        state={"running": {"startedAt": started}},
                        imageID=f"sim://{cs['image']}",
                        containerID=f"sim://{uid[:8]}-{cs['name']}",
                    )

            if self._patch(ns, name, uid, running) is None:
                return
        await asyncio.gather(*(self._container(ns, name, uid, c) for c in containers))

    async def _image_pull_failure(
        self, ns: str, name: str, uid: str, container: str, image: str, message: str
    ) -> None:
        backoff = 10.0
        while True:
            for reason in ("ErrImagePull", "ImagePullBackOff"):
                text = message if reason == "ErrImagePull" else f'Back-off pulling image "{image}": {message}'

                def waiting(p: Obj, r: str = reason, t: str = text) -> None:
                    for cs in p["status"]["containerStatuses"]:
                        if cs["name"] == container:
                            cs["state"] = {"waiting": {"reason": r, "message": t}}

                pod = self._patch(ns, name, uid, waiting)
                if pod is None:
                    return
                if reason == "ErrImagePull":
                    self._event(pod, "Warning", "Failed", f'Failed to pull image "{image}": {message}')
                    self._event(pod, "Warning", "Failed", "Error: ErrImagePull")
                else:
                    self._event(pod, "Normal", "BackOff", f'Back-off pulling image "{image}"')
                    self._event(pod, "Warning", "Failed", "Error: ImagePullBackOff")
                await self.cluster.clock.sleep(backoff if reason == "ImagePullBackOff" else 1.0)
            backoff = min(backoff * 2, 300.0)

    async def _container(self, ns: str, name: str, uid: str, container: str) -> None:
        """Run one container until it exits (or is killed), honouring the pod's restartPolicy."""
        clock = self.cluster.clock
        restarts = 0
        while True:
            pod = self._pod(ns, name, uid)
            if pod is None:
                return
            key = (uid, container)
            buffer = self.logs.setdefault(key, LogBuffer())
            if container == SIDECAR:
                kill = self.kill_events.setdefault(key, asyncio.Event())
                await kill.wait()
                exit_code = 0
            else:
                lines = log_lines(pod, container)
                duration = _float(annotation(pod, "duration", container), 1.0)
                exit_code = int(_float(annotation(pod, "exit-code", container), 0))
                step = duration / (len(lines) + 1) if lines else duration
                for line in lines:
                    await clock.sleep(step)
                    buffer.append(line)
                await clock.sleep(step if lines else duration)
            buffer.finish()
            policy = pod["spec"].get("restartPolicy", "Always")
            restart = policy == "Always" or (policy == "OnFailure" and exit_code != 0)
            pod = self._finish_container(ns, name, uid, container, exit_code, restart)
            if pod is None or not restart:
                return
            restarts += 1
            backoff = min(10.0 * 2 ** (restarts - 1), 300.0)
            self._event(
                pod,
                "Warning",
                "BackOff",
                f"Back-off restarting failed container {container} in pod {name}_{ns}({uid})",
            )
            await clock.sleep(backoff)
            self.previous_logs[key] = self.logs.pop(key)
            started = now_iso()

            def restarted(p: Obj, c: str = container, s: str = started) -> None:
                for cs in p["status"]["containerStatuses"]:
                    if cs["name"] == c:
                        cs.update(state={"running": {"startedAt": s}}, ready=True, started=True)
                self._recompute(p)

            if self._patch(ns, name, uid, restarted) is None:
                return
            pod = self._pod(ns, name, uid)
            if pod is not None:
                self._event(pod, "Normal", "Started", f"Started container {container}")

    def _finish_container(
        self, ns: str, name: str, uid: str, container: str, exit_code: int, restart: bool
    ) -> Obj | None:
        finished = now_iso()

        def apply(p: Obj) -> None:
            for cs in p["status"]["containerStatuses"]:
                if cs["name"] != container:
                    continue
                started = (cs["state"].get("running") or {}).get("startedAt", finished)
                terminated = {
                    "exitCode": exit_code,
                    "reason": "Completed" if exit_code == 0 else "Error",
                    "startedAt": started,
                    "finishedAt": finished,
                    "containerID": cs.get("containerID", ""),
                }
                if restart:
                    cs["lastState"] = {"terminated": terminated}
                    cs["restartCount"] = cs.get("restartCount", 0) + 1
                    cs["state"] = {
                        "waiting": {
                            "reason": "CrashLoopBackOff",
                            "message": f"back-off 10s restarting failed container={container} "
                            f"pod={name}_{ns}({uid})",
                        }
                    }
                else:
                    cs["state"] = {"terminated": terminated}
                cs.update(ready=False, started=False)
            self._recompute(p)

        return self._patch(ns, name, uid, apply)

    @staticmethod
    def _recompute(pod: Obj) -> None:
        """Derive phase and Ready/ContainersReady from the container states."""
        statuses = pod["status"]["containerStatuses"]
        unready = [cs["name"] for cs in statuses if not cs.get("ready")]
        if unready:
            msg = f"containers with unready status: [{' '.join(unready)}]"
            reason = (
                "PodCompleted"
                if all("terminated" in cs["state"] for cs in statuses)
                else "ContainersNotReady"
            )
            set_condition(pod, "Ready", "False", reason, None if reason == "PodCompleted" else msg)
            set_condition(pod, "ContainersReady", "False", reason, None if reason == "PodCompleted" else msg)
        else:
            set_condition(pod, "Ready", "True")
            set_condition(pod, "ContainersReady", "True")
        if all("terminated" in cs["state"] for cs in statuses):
            failed = any(cs["state"]["terminated"]["exitCode"] != 0 for cs in statuses)
            pod["status"]["phase"] = "Failed" if failed else "Succeeded"
            set_condition(pod, "PodReadyToStartContainers", "False")

    def kill_container(self, uid: str, container: str) -> bool:
        """Stop a sidecar-style container (what the xcom ``kill -2`` does)."""
        event = self.kill_events.get((uid, container))
        if event is None:
            return False
        event.set()
        return True

    # -- deletion ----------------------------------------------------------------------------------
    async def _terminate(self, ns: str, name: str, uid: str) -> None:
        """Graceful deletion: Killing events, containers stop, object removed after the grace period."""
        self.stop_pod(uid)
        pod = self._pod(ns, name, uid)
        if pod is None:
            return
        grace = pod["metadata"].get("deletionGracePeriodSeconds")
        grace = pod["spec"].get("terminationGracePeriodSeconds", 30) if grace is None else grace
        node = pod["spec"].get("nodeName")
        if node in self.frozen_nodes:
            # An unreachable kubelet never confirms; the pod stays Terminating until the node returns.
            return
        finished = now_iso()
        running = [
            cs["name"] for cs in pod["status"].get("containerStatuses") or [] if "running" in cs["state"]
        ]
        for c in running:
            self._event(pod, "Normal", "Killing", f"Stopping container {c}")
        if running:

            def stop(p: Obj) -> None:
                for cs in p["status"]["containerStatuses"]:
                    state = cs["state"]
                    if "terminated" not in state:
                        cs["state"] = {
                            "terminated": {
                                "exitCode": 137,
                                "reason": "Error",
                                "startedAt": (state.get("running") or {}).get("startedAt", finished),
                                "finishedAt": finished,
                                "containerID": cs.get("containerID", ""),
                            }
                        }
                        cs.update(ready=False, started=False)
                self._recompute(p)

            self._patch(ns, name, uid, stop)
            await self.cluster.clock.sleep(float(grace))
        for key in [k for k in self.logs if k[0] == uid]:
            self.logs[key].finish()
        self.cluster.finalize_deletion(ns, name, uid)
