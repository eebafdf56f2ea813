"""A kube-scheduler stand-in: filter -> score (least allocated) -> bind, FailedScheduling and preemption."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from typing import Any

from airflow_provider_fedsched.federation.resources import (
    add,
    fits,
    insufficient,
    parse_resource_list,
    pod_requests,
    subtract,
)
from airflow_provider_fedsched.sim.apiserver import pods
from airflow_provider_fedsched.sim.apiserver.events import EventRecorder
from airflow_provider_fedsched.sim.apiserver.objects import TERMINAL, get_condition, set_condition
from airflow_provider_fedsched.sim.apiserver.selectors import expression_matches
from airflow_provider_fedsched.sim.apiserver.store import Obj, Store, WatchEvent
from airflow_provider_fedsched.sim.controllers.taints import untolerated
from airflow_provider_fedsched.sim.util import ApiError, Clock

COMPONENT = "default-scheduler"
log = logging.getLogger(__name__)
RESOURCE_REASONS = ("Insufficient ", "Too many pods")


def matches_node(pod_spec: Obj, node: Obj) -> bool:
    labels = node["metadata"].get("labels") or {}
    for key, value in (pod_spec.get("nodeSelector") or {}).items():
        if labels.get(key) != value:
            return False
    required = ((pod_spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    terms = required.get("nodeSelectorTerms") or []
    if not terms:
        return True
    fields = {"metadata.name": node["metadata"]["name"]}
    return any(
        all(expression_matches(e, labels) for e in term.get("matchExpressions") or [])
        and all(expression_matches(e, fields) for e in term.get("matchFields") or [])
        for term in terms
    )


def node_ready(node: Obj) -> bool:
    cond = get_condition(node, "Ready")
    return cond is not None and cond.get("status") == "True"


def _no_victims(total: int) -> str:
    return f"preemption: 0/{total} nodes are available: {total} No preemption victims found for incoming pod."


class Scheduler:
    def __init__(self, store: Store, events: EventRecorder, clock: Clock) -> None:
        self.store = store
        self.events = events
        self.clock = clock
        self.paused = False
        self._wake = asyncio.Event()
        # Bumped by changes that can make an unschedulable pod fit (node change, pod gone or finished).
        self._generation = 0
        self._pending: dict[str, tuple[str, str]] = {}  # uid -> (ns, name)
        self._retry: dict[str, tuple[int, float, float]] = {}  # uid -> (generation, due, backoff)
        self._requests: dict[str, dict[str, int]] = {}
        self.backoff_initial = 1.0
        self.backoff_max = 10.0
        self.cycles = 0
        self.store.listeners.append(self._on_event)

    # -- change tracking ----------------------------------------------------------------------------
    def _on_event(self, event: WatchEvent) -> None:
        if event.plural == "nodes":
            self._bump()
        elif event.plural == "pods":
            obj, meta = event.obj, event.obj["metadata"]
            uid = meta["uid"]
            spec = obj.get("spec") or {}
            if event.type == "DELETED":
                self._pending.pop(uid, None)
                self._retry.pop(uid, None)
                self._requests.pop(uid, None)
                self._bump()
            elif not spec.get("nodeName") and spec.get("schedulerName", "default-scheduler") == COMPONENT:
                if meta.get("deletionTimestamp"):
                    self._pending.pop(uid, None)
                elif uid not in self._pending:
                    self._pending[uid] = (meta["namespace"], meta["name"])
                    self._wake.set()
            else:
                self._pending.pop(uid, None)
                old_phase = ((event.old or {}).get("status") or {}).get("phase")
                if obj.get("status", {}).get("phase") in TERMINAL and old_phase not in TERMINAL:
                    self._bump()

    def _bump(self) -> None:
        self._generation += 1
        self._wake.set()

    def pause(self) -> None:
        self.paused = True

    def resume(self) -> None:
        self.paused = False
        self._wake.set()

    def kick(self) -> None:
        self._bump()

    # -- loop --------------------------------------------------------------------------------------
    async def run(self) -> None:
        while True:
            due = [d for _, d, _ in self._retry.values()]
            timeout = max(0.0, min(due) - time.monotonic()) if due else None
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout)
            self._wake.clear()
            if self.paused:
                continue
            self.cycle()
            await asyncio.sleep(0)

    def _requests_of(self, pod: Obj) -> dict[str, int]:
        uid = pod["metadata"]["uid"]
        cached = self._requests.get(uid)
        if cached is None:
            cached = {**pod_requests(pod.get("spec") or {}), "pods": 1}
            self._requests[uid] = cached
        return cached

    def node_usage(self) -> dict[str, dict[str, int]]:
        usage: dict[str, dict[str, int]] = {}
        for pod in self.store.objects["pods"].values():
            node = (pod.get("spec") or {}).get("nodeName")
            if node and (pod.get("status") or {}).get("phase") not in TERMINAL:
                usage[node] = add(usage.get(node, {}), self._requests_of(pod))
        return usage

    def cycle(self) -> None:
        self.cycles += 1
        now = time.monotonic()
        todo = []
        for uid, (ns, name) in list(self._pending.items()):
            retry = self._retry.get(uid)
            if retry is not None and retry[0] == self._generation and retry[1] > now:
                continue
            pod = self.store.get("pods", ns, name)
            if pod is None:
                self._pending.pop(uid, None)
                continue
            todo.append(pod)
        if not todo:
            return
        todo.sort(key=lambda p: (-(p["spec"].get("priority") or 0), int(p["metadata"]["resourceVersion"])))
        nodes = sorted(self.store.list("nodes"), key=lambda n: n["metadata"]["name"])
        usage = self.node_usage()
        for pod in todo:
            try:
                self.schedule_one(pod, nodes, usage)
            except Exception:  # one pod the scheduler cannot handle must not stop it for all others
                log.exception(
                    "scheduler: pod %s/%s skipped", pod["metadata"]["namespace"], pod["metadata"]["name"]
                )
                self._pending.pop(pod["metadata"]["uid"], None)

    def schedule_one(self, pod: Obj, nodes: list[Obj], usage: dict[str, dict[str, int]]) -> None:
        spec, uid = pod["spec"], pod["metadata"]["uid"]
        request = self._requests_of(pod)
        reasons: Counter[str] = Counter()
        resource_only: list[Obj] = []
        best: tuple[float, str] | None = None
        for node in nodes:
            failures = self._filter(spec, node, request, usage.get(node["metadata"]["name"], {}))
            if failures:
                reasons.update(failures)
                if all(f.startswith(RESOURCE_REASONS) for f in failures):
                    resource_only.append(node)
                continue
            score = self._score(node, request, usage.get(node["metadata"]["name"], {}))
            if best is None or score > best[0]:
                best = (score, node["metadata"]["name"])
        if best is not None:
            node_name = best[1]
            usage[node_name] = add(usage.get(node_name, {}), request)
            self.bind(pod, node_name)
            return
        preemption = self._preempt(pod, request, nodes, resource_only, usage)
        message = self._message(len(nodes), reasons, preemption)
        self._mark_unschedulable(pod, message)
        previous = self._retry.get(uid)
        backoff = min(self.backoff_max, previous[2] * 2) if previous else self.backoff_initial
        self._retry[uid] = (self._generation, time.monotonic() + self.clock.real(backoff), backoff)

    def _filter(self, spec: Obj, node: Obj, request: dict[str, int], used: dict[str, int]) -> list[str]:
        # Default plugin order: NodeUnschedulable, TaintToleration, NodeAffinity, NodeResourcesFit.
        if (node.get("spec") or {}).get("unschedulable"):
            return ["node(s) were unschedulable"]
        taint = untolerated(spec, node)
        if taint is not None:
            return [f"node(s) had untolerated taint {{{taint.get('key')}: {taint.get('value', '')}}}"]
        if not matches_node(spec, node):
            return ["node(s) didn't match Pod's node affinity/selector"]
        free = subtract(parse_resource_list(node["status"].get("allocatable")), used)
        return ["Too many pods" if r == "pods" else f"Insufficient {r}" for r in insufficient(request, free)]

    def _score(self, node: Obj, request: dict[str, int], used: dict[str, int]) -> float:
        alloc = parse_resource_list(node["status"].get("allocatable"))
        score = 0.0
        for res in ("cpu", "memory"):
            total = alloc.get(res, 0)
            if total:
                score += (total - used.get(res, 0) - request.get(res, 0)) / total
        return score

    @staticmethod
    def _message(total: int, reasons: Counter[str], preemption: str) -> str:
        parts = sorted(f"{count} {reason}" for reason, count in reasons.items())
        return f"0/{total} nodes are available: {', '.join(parts)}. {preemption}".rstrip()

    def _preempt(
        self,
        pod: Obj,
        request: dict[str, int],
        nodes: list[Obj],
        candidates: list[Obj],
        usage: dict[str, dict[str, int]],
    ) -> str:
        spec = pod["spec"]
        total = len(nodes)
        if not nodes:
            return ""
        if spec.get("preemptionPolicy") == "Never":
            return "preemption: not eligible due to preemptionPolicy=Never."
        priority = spec.get("priority") or 0
        nominated = (pod.get("status") or {}).get("nominatedNodeName")
        if nominated and any(
            p["spec"].get("nodeName") == nominated and p["metadata"].get("deletionTimestamp")
            for p in self.store.objects["pods"].values()
        ):
            # Victims are still terminating: wait for them instead of preempting more pods.
            return _no_victims(total)
        best: tuple[tuple[int, int], Obj, list[Obj]] | None = None
        no_victims = 0
        for node in candidates:
            name = node["metadata"]["name"]
            victims = sorted(
                (
                    p
                    for p in self.store.objects["pods"].values()
                    if p["spec"].get("nodeName") == name
                    and (p.get("status") or {}).get("phase") not in TERMINAL
                    and not p["metadata"].get("deletionTimestamp")
                    and (p["spec"].get("priority") or 0) < priority
                ),
                key=lambda p: (p["spec"].get("priority") or 0, -int(p["metadata"]["resourceVersion"])),
            )
            alloc = parse_resource_list(node["status"].get("allocatable"))
            used = dict(usage.get(name, {}))
            chosen: list[Obj] = []
            for victim in victims:
                if fits(request, subtract(alloc, used)):
                    break
                used = subtract(used, self._requests_of(victim))
                chosen.append(victim)
            if not chosen or not fits(request, subtract(alloc, used)):
                no_victims += 1
                continue
            rank = (max(p["spec"].get("priority") or 0 for p in chosen), len(chosen))
            if best is None or rank < best[0]:
                best = (rank, node, chosen)
        if best is None:
            fragments = []
            if total - no_victims:
                fragments.append(f"{total - no_victims} Preemption is not helpful for scheduling")
            if no_victims:
                fragments.append(f"{no_victims} No preemption victims found for incoming pod")
            return f"preemption: 0/{total} nodes are available: {', '.join(sorted(fragments))}."
        _, node, victims = best
        node_name = node["metadata"]["name"]
        for victim in victims:
            self._preempt_victim(victim, pod, node_name)
        self.store.mutate(
            "pods",
            pod["metadata"]["namespace"],
            pod["metadata"]["name"],
            lambda p: p.setdefault("status", {}).__setitem__("nominatedNodeName", node_name),
        )
        return _no_victims(total)

    def _mark_unschedulable(self, pod: Obj, message: str) -> None:
        ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        cond = get_condition(pod, "PodScheduled")
        if not cond or cond.get("status") != "False" or cond.get("message") != message:
            self.store.mutate(
                "pods",
                ns,
                name,
                lambda p: set_condition(p, "PodScheduled", "False", "Unschedulable", message),
            )
        self.events.record(pod, "Warning", "FailedScheduling", message, COMPONENT)

    def _preempt_victim(self, victim: Obj, preemptor: Obj, node: str) -> None:
        updated = pods.add_disruption(
            self.store,
            victim,
            "PreemptionByScheduler",
            f"{COMPONENT}: preempting to accommodate a higher priority pod",
        )
        if updated is None:
            return
        self.events.record(
            updated,
            "Normal",
            "Preempted",
            f"Preempted by pod {preemptor['metadata']['uid']} on node {node}",
            COMPONENT,
        )
        pods.delete_pod(self.store, updated["metadata"]["namespace"], updated["metadata"]["name"])

    def bind(self, pod: Obj, node_name: str) -> Obj | None:
        ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        self._retry.pop(pod["metadata"]["uid"], None)
        try:
            bound = pods.bind(self.store, ns, name, node_name)
        except ApiError:
            return None  # bound meanwhile by someone else, or gone
        self.events.record(
            bound, "Normal", "Scheduled", f"Successfully assigned {ns}/{name} to {node_name}", COMPONENT
        )
        return bound

    def stats(self) -> dict[str, Any]:
        return {"pending": len(self._pending), "cycles": self.cycles, "paused": self.paused}
