"""The execution journal: the cluster's own record of every pod that ran, and of every node's load.

It plays no part in the API: like an audit sink it only watches the store and writes down, for each pod
(by uid), where it ran, when its containers started and stopped and how the run ended. Entries outlive
the pod object, so an auditor can check after the fact that no work ran twice at once or outlived its try,
and that no node ever held more than its allocatable.

When the containers stop is the simulated truth, not what the API last said: a pod removed from the API
(force deletion) while its node is unreachable keeps running on that node until the node is back and its
kubelet kills it, as on a real cluster. Its entry stays ``running`` until then.

It also writes down when each client (by User-Agent) was first sent the pod in a terminal phase
(``end_seen``): whether anybody could know, at a given moment, that a pod had already ended.

Outcomes: ``succeeded``, ``failed`` (a container exited non-zero), ``evicted`` (node pressure, the
Eviction API or the taint manager; ``reason`` says which), ``preempted`` (by the scheduler) and
``deleted`` (deleted by a client before it finished); ``null`` while the pod is live and unfinished.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from airflow_provider_fedsched.federation.resources import (
    QuantityError,
    add,
    format_quantity,
    parse_resource_list,
    pod_requests,
    subtract,
)
from airflow_provider_fedsched.sim.apiserver.store import Obj, Store, WatchEvent
from airflow_provider_fedsched.sim.util import Clock

TERMINAL = ("Succeeded", "Failed")
# DisruptionTarget condition reasons -> outcome of a pod deleted or failed because of it.
DISRUPTIONS = {
    "PreemptionByScheduler": "preempted",
    "EvictionByEvictionAPI": "evicted",
    "DeletionByTaintManager": "evicted",
    "TerminationByKubelet": "evicted",
}
OUTCOMES = ("succeeded", "failed", "evicted", "preempted", "deleted")
# Older entries are dropped beyond this many (the count is reported); a soak run stays far below.
MAX_ENTRIES = 200_000


@dataclass
class PodRun:
    """One pod's life on this cluster. Times are wall-clock epoch seconds (``time.time()``)."""

    cluster: str
    namespace: str
    name: str
    uid: str
    labels: dict[str, str]
    requests: dict[str, str]
    created_at: float
    node: str | None = None
    bound_at: float | None = None
    started_at: float | None = None  # containers started (phase Running)
    ended_at: float | None = None  # containers stopped (or the pod ended without ever running)
    deletion_requested_at: float | None = None
    removed_at: float | None = None  # the object left the API
    phase: str = "Pending"
    exit_code: int | None = None  # the first non-sidecar container's
    exit_codes: dict[str, int] = field(default_factory=dict)
    restarts: int = 0
    outcome: str | None = None
    reason: str | None = None  # e.g. Evicted, PreemptionByScheduler, DeletionByTaintManager
    running: bool = False  # containers may be running now
    end_seen: dict[str, float] = field(default_factory=dict)  # User-Agent -> first sent it ended

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class NodeLoad:
    """What the pods a node's kubelet admitted (and not yet stopped) request, against its allocatable."""

    allocatable: dict[str, int] = field(default_factory=dict)
    used: dict[str, int] = field(default_factory=dict)
    peak: dict[str, int] = field(default_factory=dict)
    overcommits: list[dict[str, Any]] = field(default_factory=list)
    over: bool = False

    def to_dict(self) -> dict[str, Any]:
        def fmt(values: Mapping[str, int]) -> dict[str, str]:
            return {k: format_quantity(k, v) for k, v in sorted(values.items())}

        return {
            "allocatable": fmt(self.allocatable),
            "used": fmt(self.used),
            "peak": fmt(self.peak),
            "overcommitted": self.over,
            "overcommits": copy.deepcopy(self.overcommits),
        }


def _requests(pod: Obj) -> dict[str, int]:
    try:
        return {**pod_requests(pod.get("spec") or {}), "pods": 1}
    except QuantityError:
        return {"pods": 1}


def _disruption(pod: Obj) -> str | None:
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "DisruptionTarget" and cond.get("status") == "True":
            return str(cond.get("reason") or "")
    return None


def _node_ready(node: Obj) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (node.get("status") or {}).get("conditions") or []
    )


class Journal:
    """Reacts to pod and node watch events of one cluster's store; never writes to the store."""

    def __init__(self, cluster: str, store: Store, clock: Clock, sidecars: tuple[str, ...] = ()) -> None:
        self.cluster = cluster
        self.store = store
        self.clock = clock
        self.sidecars = sidecars
        self.runs: dict[str, PodRun] = {}
        self.dropped = 0
        self.nodes: dict[str, NodeLoad] = {}
        self._unready: set[str] = set()
        # uid -> (node, requests) of every pod that holds resources on a node now.
        self._holding: dict[str, tuple[str, dict[str, int]]] = {}
        store.listeners.append(self._on_event)
        store.read_listeners.append(self._on_served)

    # -- reading ---------------------------------------------------------------------------------------
    def entries(self, namespace: str | None = None) -> list[dict[str, Any]]:
        runs = self.runs.values()
        return [r.to_dict() for r in runs if namespace is None or r.namespace == namespace]

    def node_loads(self) -> dict[str, dict[str, Any]]:
        return {name: load.to_dict() for name, load in sorted(self.nodes.items())}

    def report(self, namespace: str | None = None) -> dict[str, Any]:
        return {
            "cluster": self.cluster,
            "observed_at": self.clock.now(),
            "dropped": self.dropped,
            "pods": self.entries(namespace),
            "nodes": self.node_loads(),
        }

    # -- reacting --------------------------------------------------------------------------------------
    def _on_event(self, event: WatchEvent) -> None:
        if event.plural == "pods":
            self._on_pod(event)
        elif event.plural == "nodes":
            self._on_node(event)

    def _on_served(self, plural: str, objs: Iterable[Obj], agent: str) -> None:
        if plural != "pods":
            return
        now = None
        for obj in objs:
            if (obj.get("status") or {}).get("phase") not in TERMINAL:
                continue
            run = self.runs.get((obj.get("metadata") or {}).get("uid", ""))
            if run is not None and agent not in run.end_seen:
                now = self.clock.now() if now is None else now
                run.end_seen[agent] = now

    def _on_node(self, event: WatchEvent) -> None:
        name = event.obj["metadata"]["name"]
        if event.type == "DELETED":
            self._unready.discard(name)
            return
        load = self.nodes.setdefault(name, NodeLoad())
        try:
            load.allocatable = parse_resource_list((event.obj.get("status") or {}).get("allocatable"))
        except QuantityError:
            load.allocatable = {}
        if _node_ready(event.obj):
            if name in self._unready:
                self._unready.discard(name)
                self._node_back(name)
        else:
            self._unready.add(name)
        self._check(name)

    def _node_back(self, node: str) -> None:
        """The node's kubelet is back: it kills the containers of pods the API no longer has."""
        now = self.clock.now()
        for uid, run in self.runs.items():
            if run.running and run.removed_at is not None and run.node == node:
                run.running = False
                run.ended_at = now
                self._release(uid)

    def _on_pod(self, event: WatchEvent) -> None:
        pod, meta = event.obj, event.obj["metadata"]
        uid = meta["uid"]
        now = self.clock.now()
        run = self.runs.get(uid)
        if run is None:
            run = self._new_run(pod, now)
        spec, status = pod.get("spec") or {}, pod.get("status") or {}
        if spec.get("nodeName") and run.node is None:
            run.node, run.bound_at = spec["nodeName"], now
        phase = status.get("phase") or run.phase
        if phase == "Running" and run.started_at is None:
            run.started_at, run.running = now, True
        run.phase = phase
        self._read_containers(run, status)
        if event.type == "DELETED":
            run.removed_at = now
            if run.outcome is None:
                run.outcome, run.reason = self._ended_by_deletion(pod)
            if run.running and run.node in self._unready:
                pass  # still running on an unreachable node: ends when the node is back
            else:
                self._stop(run, now)
                self._release(uid)
            return
        if meta.get("deletionTimestamp") and run.deletion_requested_at is None:
            run.deletion_requested_at = now
            if run.outcome is None and phase not in TERMINAL:
                run.outcome, run.reason = self._ended_by_deletion(pod)
        if phase in TERMINAL:
            if run.outcome is None:
                reason = status.get("reason")
                disruption = _disruption(pod)
                if reason == "Evicted" or disruption in DISRUPTIONS:
                    run.outcome, run.reason = (
                        DISRUPTIONS.get(disruption or "", "evicted"),
                        reason or disruption,
                    )
                else:
                    run.outcome = "succeeded" if phase == "Succeeded" else "failed"
            self._stop(run, now)
            self._release(uid)
        elif run.node and (status.get("startTime") or phase == "Running"):
            # Admitted by the node's kubelet: from now on the pod holds its requests there.
            self._hold(uid, run.node, _requests(pod))

    def _new_run(self, pod: Obj, now: float) -> PodRun:
        meta = pod["metadata"]
        if len(self.runs) >= MAX_ENTRIES:
            oldest = next(iter(self.runs))
            del self.runs[oldest]
            self.dropped += 1
        requests = {k: format_quantity(k, v) for k, v in _requests(pod).items() if k != "pods"}
        run = PodRun(
            cluster=self.cluster,
            namespace=meta.get("namespace", ""),
            name=meta["name"],
            uid=meta["uid"],
            labels=dict(meta.get("labels") or {}),
            requests=requests,
            created_at=now,
        )
        self.runs[meta["uid"]] = run
        return run

    def _read_containers(self, run: PodRun, status: Obj) -> None:
        restarts = 0
        for cs in status.get("containerStatuses") or []:
            restarts += int(cs.get("restartCount") or 0)
            terminated = (cs.get("state") or {}).get("terminated")
            if terminated is not None and "exitCode" in terminated:
                run.exit_codes[cs["name"]] = int(terminated["exitCode"])
        run.restarts = restarts
        main = [c for c in run.exit_codes if c not in self.sidecars]
        if main:
            run.exit_code = run.exit_codes[main[0]]

    @staticmethod
    def _ended_by_deletion(pod: Obj) -> tuple[str, str | None]:
        disruption = _disruption(pod)
        if disruption in DISRUPTIONS:
            return DISRUPTIONS[disruption or ""], disruption
        return "deleted", None

    @staticmethod
    def _stop(run: PodRun, now: float) -> None:
        if run.ended_at is None:
            run.ended_at = now
        run.running = False

    # -- node load -------------------------------------------------------------------------------------
    def _hold(self, uid: str, node: str, requests: dict[str, int]) -> None:
        if uid in self._holding:
            return
        self._holding[uid] = (node, requests)
        load = self.nodes.setdefault(node, NodeLoad())
        load.used = add(load.used, requests)
        for resource, amount in load.used.items():
            load.peak[resource] = max(load.peak.get(resource, 0), amount)
        self._check(node)

    def _release(self, uid: str) -> None:
        held = self._holding.pop(uid, None)
        if held is None:
            return
        node, requests = held
        load = self.nodes.setdefault(node, NodeLoad())
        load.used = {k: v for k, v in subtract(load.used, requests).items() if v}
        self._check(node)

    def _check(self, node: str) -> None:
        load = self.nodes[node]
        if not load.allocatable:
            return
        exceeded = sorted(r for r, amount in load.used.items() if amount > load.allocatable.get(r, 0))
        if exceeded and not load.over:
            pods = sorted(
                f"{self.runs[uid].namespace}/{self.runs[uid].name}"
                for uid, (n, _) in self._holding.items()
                if n == node and uid in self.runs
            )
            load.overcommits.append(
                {
                    "at": self.clock.now(),
                    "resources": {
                        r: {
                            "used": format_quantity(r, load.used[r]),
                            "allocatable": format_quantity(r, load.allocatable.get(r, 0)),
                        }
                        for r in exceeded
                    },
                    "pods": pods,
                }
            )
        load.over = bool(exceeded)
