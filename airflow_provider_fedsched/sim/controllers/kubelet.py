"""The simulated kubelet of one cluster's nodes: it plays the kwok Stages of ``pod-stages.yaml``.

It watches pods bound to its nodes and plays, for each, the stage whose selector matches (after its delay,
and again whenever the pod changes): start, image pulls, the end of the run by ``duration`` and
``exit-code``, restarts with back-off, the XCom sidecar's end, a graceful deletion and the removal. The
same file is what kwok plays on the test bed. What only this kubelet does, in code: admission (pods that do
not fit their node fail with ``OutOfcpu``, as the real kubelet rejects them) and the containers' output and
exec (:class:`Runtime`). A frozen (unreachable) node's kubelet does nothing until it is back.
"""

from __future__ import annotations

import asyncio
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
from airflow_provider_fedsched.sim.apiserver.objects import TERMINAL
from airflow_provider_fedsched.sim.apiserver.store import Obj, Store, WatchEvent
from airflow_provider_fedsched.sim.controllers import gotemplate
from airflow_provider_fedsched.sim.controllers import stages as st
from airflow_provider_fedsched.sim.controllers.runtime import SIDECAR_KILLED, Runtime
from airflow_provider_fedsched.sim.util import ApiError, Clock, now_iso

COMPONENT = "kubelet"
NODE_READY = {
    "MemoryPressure": ("False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
    "DiskPressure": ("False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
    "PIDPressure": ("False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
    "Ready": ("True", "KubeletReady", "kubelet is posting ready status"),
}


class Kubelet:
    def __init__(
        self, store: Store, events: EventRecorder, clock: Clock, stages: list[st.Stage] | None = None
    ) -> None:
        self.store = store
        self.events = events
        self.clock = clock
        self.stages = stages if stages is not None else st.load_stages()
        self.runtime = Runtime(clock, on_kill=self._sidecar_killed)
        self.frozen_nodes: set[str] = set()
        self._pending: dict[str, tuple[str, asyncio.TimerHandle]] = {}  # uid -> (stage, timer)
        self._processes: dict[tuple[str, str], asyncio.Task[None]] = {}
        self._pod_ips: dict[str, str] = {}
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
            self._pod_ips.pop(uid, None)
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
        self._sync_processes(pod)
        self._schedule_stage(pod)

    def _schedule_stage(self, pod: Obj) -> None:
        meta = pod["metadata"]
        uid = meta["uid"]
        document = st.document(pod)
        # kwok plays one of the matching stages at random; the file's stages exclude each other.
        stage = next((s for s in self.stages if s.matches(document)), None)
        pending = self._pending.get(uid)
        if pending is not None and (stage is None or pending[0] != stage.name):
            pending[1].cancel()
            self._pending.pop(uid, None)
        if stage is None or (pending is not None and pending[0] == stage.name):
            return
        delay = self.clock.real(stage.delay(document))
        timer = asyncio.get_running_loop().call_later(
            delay, self._fire, meta["namespace"], meta["name"], uid, stage
        )
        self._pending[uid] = (stage.name, timer)

    # -- stages ----------------------------------------------------------------------------------------
    def _pod(self, namespace: str, name: str, uid: str) -> Obj | None:
        pod = self.store.get("pods", namespace, name)
        return pod if pod is not None and pod["metadata"]["uid"] == uid else None

    def _fire(self, namespace: str, name: str, uid: str, stage: st.Stage) -> None:
        """Play a stage's steps in order, as kwok does: events, status patches, the deletion."""
        if self._pending.get(uid, ("",))[0] == stage.name:
            self._pending.pop(uid, None)
        pod = self._pod(namespace, name, uid)
        if (
            pod is None
            or pod["spec"].get("nodeName") in self.frozen_nodes
            or not stage.matches(st.document(pod))
        ):
            return
        node = pod["spec"].get("nodeName")
        funcs: dict[str, gotemplate.Func] = {"NodeIPWith": self._node_ip, "PodIPWith": self._pod_ip}
        deleted = False
        for step in stage.steps:
            event = step.get("event")
            if event is not None:
                self.events.record(
                    pod,
                    event.get("type") or "Normal",
                    event.get("reason") or "",
                    event.get("message") or "",
                    COMPONENT,
                    node,
                )
            if deleted:
                continue
            if step.get("delete"):
                deleted = True
                if self._pod(namespace, name, uid) is not None:
                    pods.delete_pod(self.store, namespace, name, 0)
                continue
            patch = step.get("patch")
            if patch is not None:
                rendered = st.render_patch(patch, pod, funcs)

                def apply(p: Obj, patch: Any = patch, rendered: Obj = rendered) -> None:
                    result = st.apply_patch(p, patch, rendered)
                    p.clear()
                    p.update(result)

                pod = self.store.mutate("pods", namespace, name, apply) or pod

    def _pod_ip(self, node: str, host_network: Any, uid: str, name: str = "", namespace: str = "") -> str:
        """kwok's ``PodIPWith``: the node's IP for a host-network pod, else one address per pod."""
        if host_network is True:
            return self._node_ip(node)
        if uid not in self._pod_ips:
            self._ip += 1
            self._pod_ips[uid] = f"10.244.{(self._ip // 250) % 250}.{self._ip % 250 + 2}"
        return self._pod_ips[uid]

    def _node_ip(self, node_name: str) -> str:
        node = self.store.get("nodes", "", node_name)
        for addr in ((node or {}).get("status") or {}).get("addresses") or []:
            if addr.get("type") == "InternalIP":
                return str(addr["address"])
        return "10.0.0.1"

    def _sidecar_killed(self, uid: str, container: str) -> None:
        """The sidecar's kill reached it: mark the pod, as the test bed's agent does, for its stage."""
        pod = next((p for p in self.store.objects["pods"].values() if p["metadata"]["uid"] == uid), None)
        if pod is None:
            return
        meta = pod["metadata"]

        def apply(p: Obj) -> None:
            if p["metadata"]["uid"] == uid:
                p["metadata"].setdefault("annotations", {})[SIDECAR_KILLED] = "true"

        asyncio.get_running_loop().call_soon(
            self.store.mutate, "pods", meta["namespace"], meta["name"], apply
        )

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
        """Every container the status says is running has a process writing its output (after a start,
        a restart or a thaw), and no other container has one."""
        uid = pod["metadata"]["uid"]
        running = set()
        if not pod["metadata"].get("deletionTimestamp"):
            for cs in (pod.get("status") or {}).get("containerStatuses") or []:
                if "running" in (cs.get("state") or {}):
                    running.add(cs["name"])
        for key in [k for k in self._processes if k[0] == uid and k[1] not in running]:
            task = self._processes.pop(key)
            if task is not asyncio.current_task():
                task.cancel()
        for container in running:
            key = (uid, container)
            if key not in self._processes:
                buffer = self.runtime.log_buffer(uid, container)
                if buffer is not None and buffer.done:
                    self.runtime.restarted(uid, container)  # a new instance: the old output is ``previous``
                meta = pod["metadata"]
                started = asyncio.get_running_loop().time()  # the run stage's delay starts now too
                self._processes[key] = asyncio.ensure_future(
                    self._process(meta["namespace"], meta["name"], uid, container, started)
                )

    async def _process(self, namespace: str, name: str, uid: str, container: str, started: float) -> None:
        key = (uid, container)
        try:
            pod = self._pod(namespace, name, uid)
            if pod is not None:
                await self.runtime.run(pod, container, started)
        finally:
            if self._processes.get(key) is asyncio.current_task():
                del self._processes[key]

    def _stop_processes(self, uid: str) -> None:
        for key in [k for k in self._processes if k[0] == uid]:
            task = self._processes.pop(key)
            if task is not asyncio.current_task():
                task.cancel()

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
        for uid in {k[0] for k in self._processes} | set(self._pending):
            self._stop(uid)

    def stats(self) -> dict[str, Any]:
        return {
            "processes": len(self._processes),
            "pending_stages": len(self._pending),
            "frozen": sorted(self.frozen_nodes),
        }
