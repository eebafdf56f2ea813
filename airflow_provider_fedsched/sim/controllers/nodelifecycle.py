"""The node lifecycle controller: a node whose kubelet stopped posting goes Unknown and gets tainted.

``heartbeat_lost`` is what the controller does once the node-monitor grace period has passed without a
heartbeat (the ``node-not-ready`` fault calls it right away): Ready and the pressure conditions become
Unknown, the ``node.kubernetes.io/unreachable`` NoSchedule and NoExecute taints are added and the node's
pods are marked not Ready. When the kubelet posts Ready again, the controller removes the taints. The
taint eviction controller (``disruption.py``) evicts what does not tolerate them.
"""

from __future__ import annotations

import asyncio

from airflow_provider_fedsched.sim.apiserver.events import EventRecorder
from airflow_provider_fedsched.sim.apiserver.objects import TERMINAL, get_condition, set_condition
from airflow_provider_fedsched.sim.apiserver.store import Obj, Store, WatchEvent
from airflow_provider_fedsched.sim.util import Clock, now_iso

COMPONENT = "node-controller"
UNREACHABLE = "node.kubernetes.io/unreachable"
NOT_READY = "node.kubernetes.io/not-ready"


class NodeLifecycleController:
    def __init__(self, store: Store, events: EventRecorder, clock: Clock) -> None:
        self.store = store
        self.events = events
        self.clock = clock
        store.listeners.append(self._on_event)

    def _on_event(self, event: WatchEvent) -> None:
        if event.plural != "nodes" or event.type == "DELETED":
            return
        ready = get_condition(event.obj, "Ready")
        tainted = any(
            t.get("key") in (UNREACHABLE, NOT_READY)
            for t in (event.obj.get("spec") or {}).get("taints") or []
        )
        if ready is not None and ready.get("status") == "True" and tainted:
            asyncio.get_running_loop().call_soon(self._untaint, event.obj["metadata"]["name"])

    def _untaint(self, node: str) -> None:
        current = self.store.get("nodes", "", node)
        ready = get_condition(current or {}, "Ready")
        if current is None or ready is None or ready.get("status") != "True":
            return

        def apply(n: Obj) -> None:
            n["spec"]["taints"] = [
                t for t in n["spec"].get("taints") or [] if t.get("key") not in (UNREACHABLE, NOT_READY)
            ]

        self.store.mutate("nodes", "", node, apply)

    def heartbeat_lost(self, node_name: str) -> Obj:
        self.store.require("nodes", "", node_name)
        now = now_iso()

        def apply(node: Obj) -> None:
            for cond in node["status"]["conditions"]:
                cond.update(
                    status="Unknown",
                    reason="NodeStatusUnknown",
                    message="Kubelet stopped posting node status.",
                    lastTransitionTime=now,
                )
            taints = [t for t in node["spec"].get("taints") or [] if t.get("key") != UNREACHABLE]
            taints += [
                {"key": UNREACHABLE, "effect": "NoSchedule", "timeAdded": now},
                {"key": UNREACHABLE, "effect": "NoExecute", "timeAdded": now},
            ]
            node["spec"]["taints"] = taints

        node = self.store.mutate("nodes", "", node_name, apply)
        assert node is not None
        self.events.record(
            node, "Normal", "NodeNotReady", f"Node {node_name} status is now: NodeNotReady", COMPONENT
        )
        for pod in list(self.store.objects["pods"].values()):
            if pod["spec"].get("nodeName") != node_name or (pod.get("status") or {}).get("phase") in TERMINAL:
                continue
            meta = pod["metadata"]
            self.store.mutate(
                "pods", meta["namespace"], meta["name"], lambda p: set_condition(p, "Ready", "False")
            )
        return node
