"""Disruptions: the taint eviction controller, PodDisruptionBudget status, and node-pressure eviction.

* Taint eviction (``DeletionByTaintManager``): a pod on a node with a NoExecute taint it does not tolerate
  is deleted at once; one that tolerates it for ``tolerationSeconds`` is deleted when that time is up.
* The disruption controller keeps each PodDisruptionBudget's status (``currentHealthy``,
  ``desiredHealthy``, ``disruptionsAllowed``), which the Eviction API checks.
* ``evict_for_node_pressure`` is the kubelet's eviction manager: the pod fails with reason Evicted and
  stays in the API.
"""

from __future__ import annotations

import asyncio
import math
from typing import Any

from airflow_provider_fedsched.sim.apiserver import pods
from airflow_provider_fedsched.sim.apiserver.events import EventRecorder
from airflow_provider_fedsched.sim.apiserver.objects import TERMINAL, set_condition
from airflow_provider_fedsched.sim.apiserver.selectors import selector_matches
from airflow_provider_fedsched.sim.apiserver.store import Obj, Store, WatchEvent
from airflow_provider_fedsched.sim.controllers.taints import eviction_delay, node_taints
from airflow_provider_fedsched.sim.controllers.workqueue import WorkQueue
from airflow_provider_fedsched.sim.util import Clock, now_iso


class TaintEvictionController:
    COMPONENT = "taint-eviction-controller"

    def __init__(self, store: Store, events: EventRecorder, clock: Clock) -> None:
        self.store = store
        self.events = events
        self.clock = clock
        self._timers: dict[str, asyncio.TimerHandle] = {}
        store.listeners.append(self._on_event)

    def _on_event(self, event: WatchEvent) -> None:
        if event.plural == "nodes":
            name = event.obj["metadata"]["name"]
            for pod in list(self.store.objects["pods"].values()):
                if (pod.get("spec") or {}).get("nodeName") == name:
                    self._evaluate(pod, None if event.type == "DELETED" else event.obj)
        elif event.plural == "pods":
            if event.type == "DELETED":
                self._cancel(event.obj["metadata"]["uid"])
                return
            node = (event.obj.get("spec") or {}).get("nodeName")
            if node or event.obj["metadata"]["uid"] in self._timers:
                self._evaluate(event.obj, self.store.get("nodes", "", node or ""))

    def stop(self) -> None:
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()

    def _cancel(self, uid: str) -> None:
        timer = self._timers.pop(uid, None)
        if timer is not None:
            timer.cancel()

    def _evaluate(self, pod: Obj, node: Obj | None) -> None:
        uid = pod["metadata"]["uid"]
        taints = node_taints(node, ("NoExecute",)) if node is not None else []
        done = pod["metadata"].get("deletionTimestamp") or (pod.get("status") or {}).get("phase") in TERMINAL
        delay = eviction_delay(pod.get("spec") or {}, taints) if taints and not done else None
        if delay is None:
            self._cancel(uid)
            return
        if uid in self._timers:
            return  # already counting down since the taint appeared
        meta = pod["metadata"]
        self._timers[uid] = asyncio.get_running_loop().call_later(
            self.clock.real(delay), self._evict, meta["namespace"], meta["name"], uid
        )

    def _evict(self, namespace: str, name: str, uid: str) -> None:
        self._timers.pop(uid, None)
        pod = self.store.get("pods", namespace, name)
        if pod is None or pod["metadata"]["uid"] != uid or pod["metadata"].get("deletionTimestamp"):
            return
        updated = pods.add_disruption(
            self.store, pod, "DeletionByTaintManager", "Taint manager: deleting due to NoExecute taint"
        )
        if updated is None:
            return
        self.events.record(
            updated,
            "Normal",
            "TaintManagerEviction",
            f"Marking for deletion Pod {namespace}/{name}",
            self.COMPONENT,
        )
        pods.delete_pod(self.store, namespace, name)


def _amount(value: Any, total: int, round_up: bool) -> int:
    if isinstance(value, str) and value.endswith("%"):
        try:
            share = float(value[:-1]) / 100 * total
        except ValueError:
            return 0
        return math.ceil(share) if round_up else math.floor(share)
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def budget_status(budget: Obj, candidates: list[Obj]) -> Obj:
    spec = budget.get("spec") or {}
    selected = [
        p
        for p in candidates
        if selector_matches(spec.get("selector"), p["metadata"].get("labels"))
        and (p.get("status") or {}).get("phase") not in TERMINAL
    ]
    expected = len(selected)
    healthy = sum(1 for p in selected if pods.healthy(p))
    if spec.get("maxUnavailable") is not None:
        desired = max(0, expected - _amount(spec["maxUnavailable"], expected, round_up=True))
    else:
        desired = _amount(spec.get("minAvailable", 1), expected, round_up=True)
    allowed = max(0, healthy - desired)
    status = {
        "observedGeneration": budget["metadata"].get("generation", 1),
        "currentHealthy": healthy,
        "desiredHealthy": desired,
        "expectedPods": expected,
        "disruptionsAllowed": allowed,
    }
    return status


class DisruptionController:
    """Keeps PodDisruptionBudget status current (on the next loop turn after a change)."""

    def __init__(self, store: Store, events: EventRecorder, clock: Clock) -> None:
        self.store = store
        self.events = events
        self.clock = clock
        self.queue = WorkQueue(self._sync)
        store.listeners.append(self._on_event)

    def _on_event(self, event: WatchEvent) -> None:
        if (
            event.plural not in ("pods", "poddisruptionbudgets")
            or not self.store.objects["poddisruptionbudgets"]
        ):
            return
        if (
            event.plural == "poddisruptionbudgets"
            and event.type == "MODIFIED"
            and (event.obj.get("spec") == (event.old or {}).get("spec"))
        ):
            return  # our own status write
        self.queue.add(event.obj["metadata"]["namespace"])

    def _sync(self, namespace: str) -> None:
        candidates = self.store.list("pods", namespace)
        for budget in self.store.list("poddisruptionbudgets", namespace):
            status = budget_status(budget, candidates)
            current = {k: v for k, v in (budget.get("status") or {}).items() if k != "conditions"}
            if current == status:
                continue

            def apply(b: Obj, s: Obj = status) -> None:
                b["status"] = {**s, "conditions": (b.get("status") or {}).get("conditions") or []}
                allowed = s["disruptionsAllowed"] > 0
                set_condition(
                    b,
                    "DisruptionAllowed",
                    "True" if allowed else "False",
                    "SufficientPods" if allowed else "InsufficientPods",
                    "",
                    probe_times=False,
                )

            self.store.mutate("poddisruptionbudgets", namespace, budget["metadata"]["name"], apply)


def evict_for_node_pressure(
    store: Store, events: EventRecorder, namespace: str, name: str, resource: str
) -> Obj:
    """The kubelet's eviction manager: the pod fails with reason Evicted and stays in the API."""
    pod = store.require("pods", namespace, name)
    containers = pod["spec"].get("containers") or [{"name": "base"}]
    container = containers[0]["name"]
    request = ((containers[0].get("resources") or {}).get("requests") or {}).get(resource, "0")
    message = (
        f"The node was low on resource: {resource}. Threshold quantity: 100Mi, available: 50Mi. "
        f"Container {container} was using 1Gi, request is {request}, has larger consumption of {resource}. "
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

    updated = store.mutate("pods", namespace, name, apply)
    assert updated is not None
    node_name = pod["spec"].get("nodeName")
    events.record(updated, "Warning", "Evicted", message.rstrip(), "kubelet", node_name)
    node = store.get("nodes", "", node_name or "")
    if node is not None:
        events.record(
            node, "Warning", "EvictionThresholdMet", f"Attempting to reclaim {resource}", "kubelet", node_name
        )
    return updated
