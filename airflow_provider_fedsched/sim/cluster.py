"""One simulated cluster, assembled: a store, an event recorder and a clock shared by the controllers and
the HTTP API. The few operations here are what a client or an operator of the cluster would do (create
nodes and quotas, break a node); they call the registry or a controller.
"""

from __future__ import annotations

import asyncio
import secrets
from typing import Any

from airflow_provider_fedsched.sim.apiserver import pods, registry
from airflow_provider_fedsched.sim.apiserver.api import Api
from airflow_provider_fedsched.sim.apiserver.events import EventRecorder
from airflow_provider_fedsched.sim.apiserver.objects import BUILTIN_PRIORITY_CLASSES, make_node
from airflow_provider_fedsched.sim.apiserver.server import (
    ApiServer,
    SimPortInUse,
    auth_middleware,
    errors_middleware,
)
from airflow_provider_fedsched.sim.apiserver.store import Obj, Store
from airflow_provider_fedsched.sim.config import ClusterConfig
from airflow_provider_fedsched.sim.controllers.disruption import (
    DisruptionController,
    TaintEvictionController,
    evict_for_node_pressure,
)
from airflow_provider_fedsched.sim.controllers.garbagecollector import GarbageCollector
from airflow_provider_fedsched.sim.controllers.job import JobController
from airflow_provider_fedsched.sim.controllers.journal import Journal
from airflow_provider_fedsched.sim.controllers.kubelet import Kubelet
from airflow_provider_fedsched.sim.controllers.nodelifecycle import NodeLifecycleController
from airflow_provider_fedsched.sim.controllers.quota import QuotaController
from airflow_provider_fedsched.sim.controllers.runtime import SIDECAR
from airflow_provider_fedsched.sim.controllers.scheduler import Scheduler
from airflow_provider_fedsched.sim.counters import RequestCounter, counting_middleware
from airflow_provider_fedsched.sim.faults import FaultPlan, fault_middleware
from airflow_provider_fedsched.sim.util import Clock

__all__ = ["Cluster", "SimPortInUse"]


class Cluster:
    def __init__(self, config: ClusterConfig, clock: Clock, preferred_port: int = 0) -> None:
        self.config = config
        self.name = config.name
        self.clock = clock
        self.token = config.token or secrets.token_hex(16)
        self.store = Store()
        self.events = EventRecorder(self.store)
        parts = (self.store, self.events, clock)
        # The journal listens first: it records each change before any controller reacts to it.
        self.journal = Journal(self.name, self.store, clock, sidecars=(SIDECAR,))
        self.quota = QuotaController(*parts)
        self.scheduler = Scheduler(*parts)
        self.kubelet = Kubelet(*parts)
        self.node_lifecycle = NodeLifecycleController(*parts)
        self.taint_eviction = TaintEvictionController(*parts)
        self.disruption = DisruptionController(*parts)
        self.garbage_collector = GarbageCollector(*parts)
        self.jobs = JobController(*parts)
        self.server = ApiServer(self.name, config.port or preferred_port, fallback=not config.port)
        self.faults = FaultPlan(self.server, self.store)
        self.requests = RequestCounter()
        self._tasks: list[asyncio.Task[Any]] = []
        self._node_seq = 0
        self._bootstrap()

    # -- setup ---------------------------------------------------------------------------------------
    def _bootstrap(self) -> None:
        for ns in ["kube-system", "kube-public", "kube-node-lease", *self.config.all_namespaces]:
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
        return registry.create(self.store, "namespaces", "", {"metadata": {"name": name}})

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
        """Create or replace a ResourceQuota (its status is current when this returns)."""
        if self.store.get("namespaces", "", namespace) is None:
            self.create_namespace(namespace)
        body = {"metadata": {"name": name, "namespace": namespace}, "spec": {"hard": dict(hard)}}
        if self.store.get("resourcequotas", namespace, name) is None:
            registry.create(self.store, "resourcequotas", namespace, body)
        else:
            registry.write(self.store, "resourcequotas", namespace, name, body, None)
        self.quota.refresh(namespace)
        return self.store.require("resourcequotas", namespace, name)

    def remove_quota(self, namespace: str, name: str = "compute") -> None:
        if self.store.get("resourcequotas", namespace, name) is not None:
            registry.delete(self.store, "resourcequotas", namespace, name)

    # -- what clients do -----------------------------------------------------------------------------
    def create_pod(self, namespace: str, body: Obj) -> Obj:
        return pods.create_pod(self.store, namespace, body)

    def delete_pod(self, namespace: str, name: str, grace: int | None = None) -> Obj:
        return pods.delete_pod(self.store, namespace, name, grace)

    def evict(self, namespace: str, name: str, body: Obj | None = None) -> None:
        """API-initiated eviction (``POST .../eviction``)."""
        pods.evict(self.store, namespace, name, body)

    # -- what breaks ---------------------------------------------------------------------------------
    def evict_node_pressure(self, namespace: str, name: str, resource: str = "memory") -> Obj:
        return evict_for_node_pressure(self.store, self.events, namespace, name, resource)

    def node_not_ready(self, node: str) -> Obj:
        """The node's kubelet stops; past the grace period the node lifecycle controller notices."""
        self.kubelet.freeze(node)
        return self.node_lifecycle.heartbeat_lost(node)

    def node_ready(self, node: str) -> Obj:
        """The node's kubelet is back (it posts Ready; the controllers untaint and stop evicting)."""
        return self.kubelet.thaw(node)

    # -- serving -------------------------------------------------------------------------------------
    async def start(self) -> None:
        self._tasks.append(asyncio.ensure_future(self.scheduler.run()))
        api = Api(self.store, self.kubelet.runtime, lambda: self.server.port)
        middlewares = [
            counting_middleware(self.requests, lambda: self.faults.is_down),
            errors_middleware(self.name),
            auth_middleware(self.token),
            fault_middleware(self.faults),
        ]
        await self.server.start(api.dispatch, middlewares)

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        self.kubelet.stop()
        self.taint_eviction.stop()
        self.jobs.stop()
        self.faults.drop_watches()
        await self.server.stop()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    @property
    def port(self) -> int:
        return self.server.port

    @property
    def url(self) -> str:
        return self.server.url
