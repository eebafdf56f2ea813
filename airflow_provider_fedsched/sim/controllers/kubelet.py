"""A kwok-like kubelet for every node of one cluster: pod stages from data, containers from the runtime.

It watches pods bound to its nodes and, as ``pod-stages.yaml`` says, moves them through creation, image
pulls, running, deletion and removal. Containers run in :class:`Runtime`; when one exits the kubelet
marks it terminated or restarts it (``restartPolicy``) and derives the pod's phase and Ready conditions.
Pods that do not fit their node are rejected at admission (``OutOfcpu``), as the real kubelet does.
A frozen (unreachable) node's kubelet does nothing until it is back.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from airflow_provider_fedsched.federation.resources import (
    QuantityError,
    add,
    insufficient,
    parse_resource_list,
    pod_requests,
    subtract,
)
from airflow_provider_fedsched.sim.apiserver import pods
from airflow_provider_fedsched.sim.apiserver.events import EventRecorder
from airflow_provider_fedsched.sim.apiserver.objects import TERMINAL, set_condition
from airflow_provider_fedsched.sim.apiserver.store import Obj, Store, WatchEvent
from airflow_provider_fedsched.sim.controllers import stages as st
from airflow_provider_fedsched.sim.controllers.runtime import Runtime
from airflow_provider_fedsched.sim.util import ApiError, Clock, now_iso

COMPONENT = "kubelet"
NODE_READY = {
    "MemoryPressure": ("False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
    "DiskPressure": ("False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
    "PIDPressure": ("False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
    "Ready": ("True", "KubeletReady", "kubelet is posting ready status"),
}


def recompute(pod: Obj) -> None:
    """Derive phase and Ready/ContainersReady from the container states."""
    statuses = pod["status"].get("containerStatuses") or []
    if not statuses:
        return
    unready = [cs["name"] for cs in statuses if not cs.get("ready")]
    done = all("terminated" in (cs.get("state") or {}) for cs in statuses)
    if unready:
        reason = "PodCompleted" if done else "ContainersNotReady"
        message = None if done else f"containers with unready status: [{' '.join(unready)}]"
        set_condition(pod, "Ready", "False", reason, message)
        set_condition(pod, "ContainersReady", "False", reason, message)
    else:
        set_condition(pod, "Ready", "True")
        set_condition(pod, "ContainersReady", "True")
    if done:
        failed = any(cs["state"]["terminated"].get("exitCode") != 0 for cs in statuses)
        pod["status"]["phase"] = "Failed" if failed else "Succeeded"
        set_condition(pod, "PodReadyToStartContainers", "False")


class Kubelet:
    def __init__(
        self, store: Store, events: EventRecorder, clock: Clock, stages: list[st.Stage] | None = None
    ) -> None:
        self.store = store
        self.events = events
        self.clock = clock
        self.stages = stages if stages is not None else st.load_stages()
        self.runtime = Runtime(clock)
        self.frozen_nodes: set[str] = set()
        self._pending: dict[str, tuple[str, asyncio.TimerHandle]] = {}  # uid -> (stage, timer)
        self._repeats: dict[tuple[str, str], int] = {}
        self._processes: dict[tuple[str, str], asyncio.Task[None]] = {}
        self._restarts: dict[tuple[str, str], asyncio.TimerHandle] = {}
        self._ip = 0
        # What the pods each node admitted request (admission looks here, not at every pod).
        self._admitted: dict[str, tuple[str, dict[str, int]]] = {}
        self._node_used: dict[str, dict[str, int]] = {}
        store.listeners.append(self._on_event)

    # -- reacting to the store -------------------------------------------------------------------------
    def _on_event(self, event: WatchEvent) -> None:
        if event.plural != "pods":
            return
        pod, meta = event.obj, event.obj["metadata"]
        uid = meta["uid"]
        if event.type == "DELETED":
            self._stop(uid)
            self._release(uid)
            self.runtime.forget(uid)
            self._repeats = {k: v for k, v in self._repeats.items() if k[0] != uid}
            return
        node = (pod.get("spec") or {}).get("nodeName")
        if not node or self.store.get("nodes", "", node) is None:
            return  # unscheduled, or bound to a node no kubelet runs: it stays Pending, as on a cluster
        statuses = (pod.get("status") or {}).get("containerStatuses") or []
        terminated = {cs["name"] for cs in statuses if "terminated" in (cs.get("state") or {})}
        if terminated:
            # A terminated container writes no more output, whoever stopped it.
            self.runtime.end_logs(uid, terminated)
        deleting = bool(meta.get("deletionTimestamp"))
        if node in self.frozen_nodes:
            if deleting:
                self.runtime.end_logs(uid)  # the kubelet will never stream again
            return
        phase = (pod.get("status") or {}).get("phase")
        if phase in TERMINAL:
            self._release(uid)
        elif not deleting:
            rejection = self._admit(pod, node)
            if rejection is not None:
                loop = asyncio.get_running_loop()
                loop.call_soon(self._reject, meta["namespace"], meta["name"], uid, *rejection)
                return
        if deleting or phase in TERMINAL:
            self._stop_processes(uid)
        else:
            self._sync_processes(pod)
        self._schedule_stage(pod)

    def _schedule_stage(self, pod: Obj) -> None:
        meta = pod["metadata"]
        uid = meta["uid"]
        stage = st.first_match(self.stages, pod)
        pending = self._pending.get(uid)
        if pending is not None and (stage is None or pending[0] != stage.name):
            pending[1].cancel()
            self._pending.pop(uid, None)
        if stage is None or (pending is not None and pending[0] == stage.name):
            return
        repeats = self._repeats.get((uid, stage.name), 0)
        delay = self.clock.real(st.delay_of(stage, pod, repeats))
        timer = asyncio.get_running_loop().call_later(
            delay, self._fire, meta["namespace"], meta["name"], uid, stage
        )
        self._pending[uid] = (stage.name, timer)

    # -- stages ----------------------------------------------------------------------------------------
    def _pod(self, namespace: str, name: str, uid: str) -> Obj | None:
        pod = self.store.get("pods", namespace, name)
        return pod if pod is not None and pod["metadata"]["uid"] == uid else None

    def _fire(self, namespace: str, name: str, uid: str, stage: st.Stage) -> None:
        if self._pending.get(uid, ("",))[0] == stage.name:
            self._pending.pop(uid, None)
        pod = self._pod(namespace, name, uid)
        if (
            pod is None
            or pod["spec"].get("nodeName") in self.frozen_nodes
            or not st.matches(pod, stage.selector)
        ):
            return
        key = (uid, stage.name)
        self._repeats[key] = self._repeats.get(key, 0) + 1
        lookup = self._lookup(pod)
        # Events are rendered against the pod before the stage (which containers were running).
        events = st.events_of(stage, pod, lookup)
        if stage.next.containers == "stop":
            self._stop_processes(uid)
        updated: Obj | None = pod
        if stage.next.status:

            def apply(p: Obj) -> None:
                st.apply_status(p, stage.next.status, lookup)
                recompute(p)

            updated = self.store.mutate("pods", namespace, name, apply)
        for etype, reason, message in events:
            self.events.record(updated or pod, etype, reason, message, COMPONENT, pod["spec"].get("nodeName"))
        if stage.next.delete and self._pod(namespace, name, uid) is not None:
            pods.delete_pod(self.store, namespace, name, 0)

    def _lookup(self, pod: Obj) -> Callable[[str], str | None]:
        cache: dict[str, str] = {}
        containers = pod["spec"].get("containers") or []

        def lookup(key: str) -> str | None:
            if key in cache:
                return cache[key]
            value: str | None
            if key == "now":
                value = now_iso()
            elif key == "node.ip":
                value = self._node_ip(pod["spec"].get("nodeName") or "")
            elif key == "pod.ip":
                value = self._next_ip()
            elif key == "pod.uid8":
                value = pod["metadata"]["uid"][:8]
            elif key == "containers":
                value = " ".join(c["name"] for c in containers)
            elif key.startswith("container0.") and containers:
                value = st.container_vars(pod, containers[0]["name"]).get(
                    key.replace("container0.", "container.")
                )
            else:
                value = st.annotation_var(pod, key)
            if value is not None:
                cache[key] = value
            return value

        return lookup

    def _next_ip(self) -> str:
        self._ip += 1
        return f"10.244.{(self._ip // 250) % 250}.{self._ip % 250 + 2}"

    def _node_ip(self, node_name: str) -> str:
        node = self.store.get("nodes", "", node_name)
        for addr in ((node or {}).get("status") or {}).get("addresses") or []:
            if addr.get("type") == "InternalIP":
                return str(addr["address"])
        return "10.0.0.1"

    # -- admission -------------------------------------------------------------------------------------
    def _admit(self, pod: Obj, node_name: str) -> tuple[str, str] | None:
        """Admit a pod to its node once; (reason, message) when the node cannot hold it next to the others."""
        uid = pod["metadata"]["uid"]
        if uid in self._admitted:
            return None
        try:
            request = {**pod_requests(pod["spec"]), "pods": 1}
        except QuantityError:
            request = {"pods": 1}
        status = pod.get("status") or {}
        node = self.store.get("nodes", "", node_name)
        used = self._node_used.get(node_name, {})
        if node is not None and status.get("phase") == "Pending" and not status.get("startTime"):
            try:
                allocatable = parse_resource_list((node.get("status") or {}).get("allocatable"))
            except QuantityError:
                allocatable = {}
            short = insufficient(request, subtract(allocatable, used)) if allocatable else []
            if short:
                resource = short[0]
                return (
                    f"OutOf{resource}",
                    f"Pod was rejected: Node didn't have enough resource: {resource}, requested: "
                    f"{request.get(resource, 0)}, used: {used.get(resource, 0)}, capacity: "
                    f"{allocatable.get(resource, 0)}",
                )
        self._admitted[uid] = (node_name, request)
        self._node_used[node_name] = add(used, request)
        return None

    def _release(self, uid: str) -> None:
        held = self._admitted.pop(uid, None)
        if held is not None:
            node, request = held
            self._node_used[node] = {
                k: v for k, v in subtract(self._node_used.get(node, {}), request).items() if v
            }

    def _reject(self, namespace: str, name: str, uid: str, reason: str, message: str) -> None:
        def apply(p: Obj) -> None:
            p["status"].update(phase="Failed", reason=reason, message=message, startTime=now_iso())

        pod = self._pod(namespace, name, uid)
        if pod is None or pod["status"].get("phase") != "Pending":
            return
        updated = self.store.mutate("pods", namespace, name, apply)
        if updated is not None:
            self.events.record(updated, "Warning", reason, message, COMPONENT, pod["spec"].get("nodeName"))

    # -- containers ------------------------------------------------------------------------------------
    def _sync_processes(self, pod: Obj) -> None:
        """Every container the status says is running has a process (after start, restart or a thaw)."""
        uid = pod["metadata"]["uid"]
        for cs in (pod.get("status") or {}).get("containerStatuses") or []:
            key = (uid, cs["name"])
            if (
                "running" in (cs.get("state") or {})
                and key not in self._processes
                and key not in self._restarts
            ):
                meta = pod["metadata"]
                self._processes[key] = asyncio.ensure_future(
                    self._process(meta["namespace"], meta["name"], uid, cs["name"])
                )

    async def _process(self, namespace: str, name: str, uid: str, container: str) -> None:
        key = (uid, container)
        try:
            pod = self._pod(namespace, name, uid)
            if pod is None:
                return
            exit_code = await self.runtime.run(pod, container)
        finally:
            if self._processes.get(key) is asyncio.current_task():
                del self._processes[key]
        pod = self._pod(namespace, name, uid)
        if pod is None or pod["metadata"].get("deletionTimestamp"):
            return
        policy = pod["spec"].get("restartPolicy", "Always")
        restart = policy == "Always" or (policy == "OnFailure" and exit_code != 0)
        restarts = next(
            (
                int(cs.get("restartCount") or 0)
                for cs in pod["status"].get("containerStatuses") or []
                if cs["name"] == container
            ),
            0,
        )
        updated = self.store.mutate("pods", namespace, name, _exited(container, exit_code, restart))
        if updated is None or not restart:
            return
        backoff = min(10.0 * 2**restarts, 300.0)
        self.events.record(
            updated,
            "Warning",
            "BackOff",
            f"Back-off restarting failed container {container} in pod {name}_{namespace}({uid})",
            COMPONENT,
            updated["spec"].get("nodeName"),
        )
        self._restarts[key] = asyncio.get_running_loop().call_later(
            self.clock.real(backoff), self._restart, namespace, name, uid, container
        )

    def _restart(self, namespace: str, name: str, uid: str, container: str) -> None:
        self._restarts.pop((uid, container), None)
        pod = self._pod(namespace, name, uid)
        if (
            pod is None
            or pod["metadata"].get("deletionTimestamp")
            or pod["spec"].get("nodeName") in self.frozen_nodes
        ):
            return
        self.runtime.restarted(uid, container)
        started = now_iso()

        def apply(p: Obj) -> None:
            for cs in p["status"]["containerStatuses"]:
                if cs["name"] == container:
                    cs.update(state={"running": {"startedAt": started}}, ready=True, started=True)
            recompute(p)

        updated = self.store.mutate("pods", namespace, name, apply)
        if updated is not None:
            self.events.record(
                updated,
                "Normal",
                "Started",
                f"Started container {container}",
                COMPONENT,
                pod["spec"]["nodeName"],
            )

    def _stop_processes(self, uid: str) -> None:
        for table in (self._processes, self._restarts):
            for key in [k for k in table if k[0] == uid]:
                item = table.pop(key)
                if item is not asyncio.current_task():
                    item.cancel()

    def _stop(self, uid: str) -> None:
        self._stop_processes(uid)
        pending = self._pending.pop(uid, None)
        if pending is not None:
            pending[1].cancel()

    # -- nodes -----------------------------------------------------------------------------------------
    def pods_on(self, node: str) -> list[Obj]:
        return [
            p for p in self.store.objects["pods"].values() if (p.get("spec") or {}).get("nodeName") == node
        ]

    def freeze(self, node: str) -> None:
        """The node's kubelet stops (unreachable): nothing it runs moves, its status is not posted."""
        self.store.require("nodes", "", node)
        self.frozen_nodes.add(node)
        for pod in self.pods_on(node):
            self._stop(pod["metadata"]["uid"])

    def thaw(self, node: str) -> Obj:
        """The kubelet is back: it posts a Ready status and picks up every pod of its node."""
        now = now_iso()

        def apply(n: Obj) -> None:
            for cond in n["status"]["conditions"]:
                status, reason, message = NODE_READY.get(cond["type"], ("False", "", ""))
                cond.update(
                    status=status,
                    reason=reason,
                    message=message,
                    lastTransitionTime=now,
                    lastHeartbeatTime=now,
                )

        updated = self.store.mutate("nodes", "", node, apply)
        if updated is None:
            raise ApiError(404, f'nodes "{node}" not found', "NotFound")
        self.frozen_nodes.discard(node)
        self.events.record(
            updated, "Normal", "NodeReady", f"Node {node} status is now: NodeReady", COMPONENT, node
        )
        for pod in self.pods_on(node):
            self._on_event(WatchEvent(0, "pods", "MODIFIED", pod))
        return updated

    def stop(self) -> None:
        for uid in {k[0] for k in self._processes} | {k[0] for k in self._restarts} | set(self._pending):
            self._stop(uid)

    def stats(self) -> dict[str, Any]:
        return {
            "processes": len(self._processes),
            "pending_stages": len(self._pending),
            "frozen": sorted(self.frozen_nodes),
        }


def _exited(container: str, exit_code: int, restart: bool) -> Callable[[Obj], None]:
    finished = now_iso()

    def apply(p: Obj) -> None:
        uid, name, namespace = p["metadata"]["uid"], p["metadata"]["name"], p["metadata"]["namespace"]
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
                        f"pod={name}_{namespace}({uid})",
                    }
                }
            else:
                cs["state"] = {"terminated": terminated}
            cs.update(ready=False, started=False)
        recompute(p)

    return apply
