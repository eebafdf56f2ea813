"""One simulated cluster: store, controllers (scheduler, kubelet, quota, node lifecycle) and its HTTP site."""

from __future__ import annotations

import asyncio
import copy
import errno
import secrets
from typing import Any

from aiohttp import web

from airflow_provider_fedsched.sim.config import ClusterConfig
from airflow_provider_fedsched.sim.controllers.journal import Journal
from airflow_provider_fedsched.sim.counters import RequestCounter
from airflow_provider_fedsched.sim.faults import FaultPlan
from airflow_provider_fedsched.sim.kubelet import SIDECAR, Kubelet
from airflow_provider_fedsched.sim.objects import (
    BUILTIN_PRIORITY_CLASSES,
    TERMINAL,
    EventRecorder,
    assign_name,
    default_pod,
    make_node,
    set_condition,
    validate_pod,
)
from airflow_provider_fedsched.sim.quota import QuotaController
from airflow_provider_fedsched.sim.scheduler import Scheduler, tolerates
from airflow_provider_fedsched.sim.store import Obj, Store, WatchEvent
from airflow_provider_fedsched.sim.util import ApiError, Clock, now_iso


class SimPortInUse(RuntimeError):
    """An explicitly configured port is already taken."""


class Cluster:
    def __init__(self, config: ClusterConfig, clock: Clock) -> None:
        self.config = config
        self.name = config.name
        self.clock = clock
        self.token = config.token or secrets.token_hex(16)
        self.store = Store()
        # First listener: it records each change before any controller reacts to it.
        self.journal = Journal(self.name, self.store, clock, sidecars=(SIDECAR,))
        self.events = EventRecorder(self.store)
        self.quota = QuotaController(self.store)
        self.scheduler = Scheduler(self)
        self.kubelet = Kubelet(self)
        self.faults = FaultPlan(self)
        self.requests = RequestCounter()
        self.port = config.port
        self.runner: web.AppRunner | None = None
        self.site: web.TCPSite | None = None
        self._tasks: list[asyncio.Task[Any]] = []
        self._quota_dirty: set[str] = set()
        self._deletion_done: set[str] = set()
        self._node_seq = 0
        self._taint_timers: dict[str, asyncio.TimerHandle] = {}
        self.store.listeners.append(self._on_event)
        self._bootstrap()

    # -- setup ---------------------------------------------------------------------------------------
    def _bootstrap(self) -> None:
        for ns in ["default", "kube-system", "kube-public", "kube-node-lease", *self.config.namespaces]:
            if self.store.get("namespaces", "", ns) is None:
                self.create_namespace(ns)
        for name, value in BUILTIN_PRIORITY_CLASSES.items():
            self.store.create(
                "priorityclasses",
                {
                    "metadata": {"name": name},
                    "value": value,
                    "globalDefault": False,
                    "preemptionPolicy": "PreemptLowerPriority",
                    "description": "Used for system critical pods.",
                },
            )
        for pool in self.config.node_pools:
            for _ in range(pool.count):
                self.add_node(
                    cpu=pool.cpu,
                    memory=pool.memory,
                    pods=pool.pods,
                    extra=pool.extra,
                    labels={
                        **pool.labels,
                        "fedsched.io/node-pool": pool.name,
                        "topology.kubernetes.io/region": self.config.region,
                    },
                    taints=[t.model_dump() for t in pool.taints],
                    pool=pool.name,
                )
        for ns, hard in self.config.quotas.items():
            self.set_quota(ns, hard)

    def create_namespace(self, name: str) -> Obj:
        return self.store.create(
            "namespaces",
            {
                "metadata": {"name": name, "labels": {"kubernetes.io/metadata.name": name}},
                "spec": {"finalizers": ["kubernetes"]},
                "status": {"phase": "Active"},
            },
        )

    def add_node(
        self,
        name: str | None = None,
        cpu: str = "4",
        memory: str = "16Gi",
        pods: int = 110,
        extra: dict[str, str] | None = None,
        labels: dict[str, str] | None = None,
        taints: list[dict[str, str]] | None = None,
        pool: str = "pool",
    ) -> Obj:
        self._node_seq += 1
        name = name or f"{self.name}-{pool}-{self._node_seq}"
        ip = f"10.{(sum(map(ord, self.name)) % 200) + 1}.0.{self._node_seq}"
        return self.store.create("nodes", make_node(name, cpu, memory, pods, extra, labels, taints, ip))

    def set_quota(self, namespace: str, hard: dict[str, str], name: str = "compute") -> Obj:
        if self.store.get("namespaces", "", namespace) is None:
            self.create_namespace(namespace)
        existing = self.store.get("resourcequotas", namespace, name)
        if existing is None:
            obj = self.store.create(
                "resourcequotas",
                {"metadata": {"name": name, "namespace": namespace}, "spec": {"hard": dict(hard)}},
            )
        else:
            obj = (
                self.store.mutate(
                    "resourcequotas", namespace, name, lambda q: q.__setitem__("spec", {"hard": dict(hard)})
                )
                or existing
            )
        self.quota.refresh(namespace)
        return obj

    # -- reactions -----------------------------------------------------------------------------------
    def _on_event(self, event: WatchEvent) -> None:
        if event.plural == "pods":
            ns = event.obj["metadata"]["namespace"]
            old_phase = ((event.old or {}).get("status") or {}).get("phase")
            new_phase = (event.obj.get("status") or {}).get("phase")
            if event.type != "MODIFIED" or (new_phase in TERMINAL) != (old_phase in TERMINAL):
                self._schedule_quota_refresh(ns)
            meta = event.obj["metadata"]
            if (
                event.type == "MODIFIED"
                and meta.get("deletionTimestamp")
                and not meta.get("finalizers")
                and (event.old or {}).get("metadata", {}).get("finalizers")
                and meta["uid"] in self._deletion_done
            ):
                asyncio.get_running_loop().call_soon(self._remove_if, ns, meta["name"], meta["uid"])
        elif event.plural == "resourcequotas" and event.type == "ADDED":
            self._schedule_quota_refresh(event.obj["metadata"]["namespace"])

    def _schedule_quota_refresh(self, namespace: str) -> None:
        if not self.store.objects["resourcequotas"]:
            return
        if not self._quota_dirty:
            asyncio.get_running_loop().call_soon(self._refresh_quotas)
        self._quota_dirty.add(namespace)

    def _refresh_quotas(self) -> None:
        dirty, self._quota_dirty = self._quota_dirty, set()
        for ns in dirty:
            self.quota.refresh(ns)

    # -- pods ----------------------------------------------------------------------------------------
    def create_pod(self, namespace: str, body: Obj) -> Obj:
        pod = copy.deepcopy(body)
        meta = pod.setdefault("metadata", {})
        if meta.get("namespace") and meta["namespace"] != namespace:
            raise ApiError(
                400,
                "the namespace of the provided object does not match the namespace sent on the request",
                "BadRequest",
            )
        meta["namespace"] = namespace
        if self.store.get("namespaces", "", namespace) is None:
            raise ApiError(
                404,
                f'namespaces "{namespace}" not found',
                "NotFound",
                {"name": namespace, "kind": "namespaces"},
            )
        assign_name(pod, "Pod")
        for server_field in ("uid", "resourceVersion", "creationTimestamp", "deletionTimestamp"):
            meta.pop(server_field, None)
        validate_pod(pod)
        default_pod(pod, self.store)
        if self.store.get("pods", namespace, meta["name"]) is not None:
            raise ApiError(
                409,
                f'pods "{meta["name"]}" already exists',
                "AlreadyExists",
                {"name": meta["name"], "kind": "pods"},
            )
        self.quota.admit(pod)
        if pod["spec"].get("nodeName"):
            set_condition(pod, "PodScheduled", "True")
        return self.store.create("pods", pod)

    def delete_pod(
        self, namespace: str, name: str, grace: int | None = None, preconditions: Obj | None = None
    ) -> Obj:
        pod = self.store.require("pods", namespace, name)
        if preconditions:
            uid = preconditions.get("uid")
            if uid and uid != pod["metadata"]["uid"]:
                raise ApiError(
                    409,
                    f"Precondition failed: UID in precondition: {uid}, UID in object meta: "
                    f"{pod['metadata']['uid']}",
                    "Conflict",
                    {"name": name, "kind": "pods"},
                )
        if grace is None:
            grace = int(pod["spec"].get("terminationGracePeriodSeconds", 30))
        meta = pod["metadata"]
        if meta.get("deletionTimestamp"):
            if grace == 0 and not meta.get("finalizers"):
                return self.store.remove("pods", namespace, name)
            return pod
        unbound = not pod["spec"].get("nodeName")
        terminal = (pod.get("status") or {}).get("phase") in TERMINAL
        if grace == 0 or unbound or terminal:
            if meta.get("finalizers"):
                self._deletion_done.add(meta["uid"])
                return self.store.set_deletion("pods", namespace, name, 0)
            return self.store.remove("pods", namespace, name)
        return self.store.set_deletion("pods", namespace, name, grace)

    def finalize_deletion(self, namespace: str, name: str, uid: str) -> None:
        """The kubelet is done with a terminating pod: remove it unless finalizers hold it."""
        self._deletion_done.add(uid)
        self._remove_if(namespace, name, uid)

    def _remove_if(self, namespace: str, name: str, uid: str) -> None:
        pod = self.store.get("pods", namespace, name)
        if pod is not None and pod["metadata"]["uid"] == uid and not pod["metadata"].get("finalizers"):
            self._deletion_done.discard(uid)
            self.store.remove("pods", namespace, name)

    def add_disruption(self, pod: Obj, reason: str, message: str) -> Obj | None:
        ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        return self.store.mutate(
            "pods", ns, name, lambda p: set_condition(p, "DisruptionTarget", "True", reason, message)
        )

    def preempt(self, victim: Obj, preemptor: Obj, node: str) -> None:
        updated = self.add_disruption(
            victim,
            "PreemptionByScheduler",
            "default-scheduler: preempting to accommodate a higher priority pod",
        )
        if updated is None:
            return
        self.events.record(
            updated,
            "Normal",
            "Preempted",
            f"Preempted by pod {preemptor['metadata']['uid']} on node {node}",
            "default-scheduler",
        )
        self.delete_pod(updated["metadata"]["namespace"], updated["metadata"]["name"])

    def evict(self, namespace: str, name: str, body: Obj | None = None) -> None:
        """API-initiated eviction (``POST .../eviction``)."""
        pod = self.store.require("pods", namespace, name)
        grace = ((body or {}).get("deleteOptions") or {}).get("gracePeriodSeconds")
        if (pod.get("status") or {}).get("phase") not in TERMINAL:
            pod = self.add_disruption(pod, "EvictionByEvictionAPI", "Eviction API: evicting") or pod
        self.delete_pod(namespace, name, grace)

    def evict_node_pressure(self, namespace: str, name: str, resource: str = "memory") -> Obj:
        """Kubelet node-pressure eviction: the pod fails with reason Evicted and stays in the API."""
        pod = self.store.require("pods", namespace, name)
        self.kubelet.stop_pod(pod["metadata"]["uid"])
        container = (pod["spec"].get("containers") or [{"name": "base"}])[0]["name"]
        request = ((pod["spec"]["containers"][0].get("resources") or {}).get("requests") or {}).get(
            resource, "0"
        )
        message = (
            f"The node was low on resource: {resource}. Threshold quantity: 100Mi, available: 50Mi. "
            f"Container {container} was using 1Gi, request is {request}, "
            f"has larger consumption of {resource}. "
        )
        finished = now_iso()

        def apply(p: Obj) -> None:
            status = p.setdefault("status", {})
            status.update(phase="Failed", reason="Evicted", message=message)
            set_condition(p, "DisruptionTarget", "True", "TerminationByKubelet", message)
            set_condition(p, "Ready", "False", "PodFailed")
            set_condition(p, "ContainersReady", "False", "PodFailed")
            for cs in status.get("containerStatuses") or []:
                if "terminated" not in cs["state"]:
                    started = (cs["state"].get("running") or {}).get("startedAt", finished)
                    cs["state"] = {
                        "terminated": {
                            "exitCode": 137,
                            "reason": "ContainerStatusUnknown",
                            "message": "The container could not be located when the pod was terminated",
                            "startedAt": started,
                            "finishedAt": finished,
                        }
                    }
                    cs.update(ready=False, started=False)

        updated = self.store.mutate("pods", namespace, name, apply)
        assert updated is not None
        self.events.record(
            updated, "Warning", "Evicted", message.rstrip(), "kubelet", pod["spec"].get("nodeName")
        )
        node = self.store.get("nodes", "", pod["spec"].get("nodeName") or "")
        if node is not None:
            self.events.record(
                node,
                "Warning",
                "EvictionThresholdMet",
                f"Attempting to reclaim {resource}",
                "kubelet",
                node["metadata"]["name"],
            )
        return updated

    # -- node lifecycle ------------------------------------------------------------------------------
    def node_not_ready(self, node_name: str) -> Obj:
        """The kubelet stops posting status: Ready=Unknown, unreachable taints, taint-manager eviction."""
        self.store.require("nodes", "", node_name)
        self.kubelet.frozen_nodes.add(node_name)
        now = now_iso()

        def apply(node: Obj) -> None:
            for cond in node["status"]["conditions"]:
                cond.update(
                    status="Unknown",
                    reason="NodeStatusUnknown",
                    message="Kubelet stopped posting node status.",
                    lastTransitionTime=now,
                )
            taints = [
                t for t in node["spec"].get("taints") or [] if t["key"] != "node.kubernetes.io/unreachable"
            ]
            taints += [
                {"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule", "timeAdded": now},
                {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute", "timeAdded": now},
            ]
            node["spec"]["taints"] = taints

        node = self.store.mutate("nodes", "", node_name, apply)
        assert node is not None
        self.events.record(
            node, "Normal", "NodeNotReady", f"Node {node_name} status is now: NodeNotReady", "node-controller"
        )
        loop = asyncio.get_running_loop()
        for pod in list(self.store.objects["pods"].values()):
            if pod["spec"].get("nodeName") != node_name or pod["status"].get("phase") in TERMINAL:
                continue
            self.kubelet.stop_pod(pod["metadata"]["uid"])
            ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
            self.store.mutate("pods", ns, name, lambda p: set_condition(p, "Ready", "False"))
            taint = {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}
            matching = [t for t in pod["spec"].get("tolerations") or [] if tolerates(t, taint)]
            if matching and any(t.get("tolerationSeconds") is None for t in matching):
                continue  # tolerated forever
            seconds = min((float(t["tolerationSeconds"]) for t in matching), default=0.0)
            handle = loop.call_later(
                self.clock.real(seconds), self._taint_evict, ns, name, pod["metadata"]["uid"]
            )
            self._taint_timers[pod["metadata"]["uid"]] = handle
        return node

    def _taint_evict(self, namespace: str, name: str, uid: str) -> None:
        self._taint_timers.pop(uid, None)
        pod = self.store.get("pods", namespace, name)
        if pod is None or pod["metadata"]["uid"] != uid or pod["metadata"].get("deletionTimestamp"):
            return
        updated = self.add_disruption(
            pod, "DeletionByTaintManager", "Taint manager: deleting due to NoExecute taint"
        )
        if updated is not None:
            self.events.record(
                updated,
                "Normal",
                "TaintManagerEviction",
                f"Marking for deletion Pod {namespace}/{name}",
                "taint-eviction-controller",
            )
            self.delete_pod(namespace, name)

    def node_ready(self, node_name: str) -> Obj:
        """Heartbeats resume: Ready=True, taints removed, terminating pods finish, others run on."""
        now = now_iso()
        defaults = {
            "MemoryPressure": (
                "False",
                "KubeletHasSufficientMemory",
                "kubelet has sufficient memory available",
            ),
            "DiskPressure": ("False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
            "PIDPressure": ("False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
            "Ready": ("True", "KubeletReady", "kubelet is posting ready status"),
        }

        def apply(node: Obj) -> None:
            for cond in node["status"]["conditions"]:
                status, reason, message = defaults.get(cond["type"], ("False", "", ""))
                cond.update(
                    status=status,
                    reason=reason,
                    message=message,
                    lastTransitionTime=now,
                    lastHeartbeatTime=now,
                )
            node["spec"]["taints"] = [
                t
                for t in node["spec"].get("taints") or []
                if t["key"] not in ("node.kubernetes.io/unreachable", "node.kubernetes.io/not-ready")
            ]

        node = self.store.mutate("nodes", "", node_name, apply)
        if node is None:
            raise ApiError(404, f'nodes "{node_name}" not found', "NotFound")
        for pod in list(self.store.objects["pods"].values()):
            if pod["spec"].get("nodeName") == node_name:
                timer = self._taint_timers.pop(pod["metadata"]["uid"], None)
                if timer is not None:
                    timer.cancel()
                self.kubelet.terminating.pop(pod["metadata"]["uid"], None)
        self.kubelet.resume_node(node_name)
        self.events.record(
            node, "Normal", "NodeReady", f"Node {node_name} status is now: NodeReady", "kubelet", node_name
        )
        return node

    # -- serving -------------------------------------------------------------------------------------
    async def start(self) -> None:
        from airflow_provider_fedsched.sim.api import build_app

        self._tasks.append(asyncio.ensure_future(self.scheduler.run()))
        self.runner = web.AppRunner(
            build_app(self), handle_signals=False, access_log=None, shutdown_timeout=0.5
        )
        await self.runner.setup()
        await self.bind()

    async def bind(self) -> None:
        assert self.runner is not None
        site = web.TCPSite(self.runner, "127.0.0.1", self.port, reuse_address=True)
        try:
            await site.start()
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE or "address already in use" in str(exc).lower():
                raise SimPortInUse(
                    f"cluster {self.name!r}: port {self.port} on 127.0.0.1 is already in use "
                    "(choose another port, or port: 0 for a free one)"
                ) from None
            raise
        self.site = site
        server = site._server
        sockets = getattr(server, "sockets", None)
        if self.port == 0 and sockets:
            self.port = int(sockets[0].getsockname()[1])

    async def unbind(self) -> None:
        """Stop listening and drop open connections (clients then get ECONNREFUSED)."""
        if self.site is not None:
            await self.site.stop()
            self.site = None
        if self.runner is not None and self.runner.server is not None:
            for handler in list(self.runner.server.connections):
                handler.force_close()
                transport = handler.transport
                if transport is not None:
                    transport.close()

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in list(self.kubelet.tasks.values()) + list(self.kubelet.terminating.values()):
            task.cancel()
        for timer in self._taint_timers.values():
            timer.cancel()
        self.faults.drop_watches()
        if self.runner is not None:
            await self.runner.cleanup()
            self.runner = None
        await asyncio.gather(
            *self._tasks,
            *self.kubelet.tasks.values(),
            *self.kubelet.terminating.values(),
            return_exceptions=True,
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"
