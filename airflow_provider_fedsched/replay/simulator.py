"""The replay of one policy over one federation in virtual time: a discrete-event loop, deterministic.

Events, in time order (ties in the order they were scheduled): a task arrives; an attempt finishes; the
tide moves (every ``tide_step`` seconds, online usage follows the curve and borrowing pods may be
evicted); a pod the engine placed is still unschedulable after the grace period (failover); a retry
tick (pending work is tried again ``retry_seconds`` after capacity was freed, as the operator's wait loop
polls and the kube-scheduler's queue re-activates pods). Snapshots are rebuilt from the replay's own
state when older than ``staleness`` seconds, so decisions see the federation as it was up to that long
ago.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from airflow_provider_fedsched.federation import ClusterSnapshot, FederationEngine, TaskRequest
from airflow_provider_fedsched.federation.cycle import FederationView, FixedState
from airflow_provider_fedsched.replay.cluster import (
    USAGE_MARGIN,
    ClusterState,
    Running,
    node_admits,
    pod_requests,
    task_request,
)
from airflow_provider_fedsched.replay.metrics import Ledger
from airflow_provider_fedsched.replay.policies import ClusterInfo, Pricing, make_router
from airflow_provider_fedsched.replay.topology import GPU_MILLI, Federation
from airflow_provider_fedsched.replay.workload import Task

__all__ = ["EPOCH", "Settings", "simulate"]

EPOCH = datetime(2025, 6, 1, tzinfo=UTC)
"""Virtual time 0 as a timestamp (the engine wants aware datetimes)."""

ARRIVE, FINISH, TIDE, GRACE, RETRY = range(5)


@dataclass(frozen=True, slots=True)
class Settings:
    staleness: float = 10.0
    """Seconds a snapshot may be old (the hook refreshes snapshots older than this)."""
    retry_seconds: float = 10.0
    grace_seconds: float = 30.0
    """The operator's ``unschedulable_grace_seconds``."""
    tide_step: float = 300.0
    checkpoint_seconds: float = 300.0
    """A preemptible task checkpoints this often; an eviction loses the work since the last one."""
    seed: int = 0


@dataclass(slots=True)
class _View:
    observed: float
    version: tuple[int, float]
    info: ClusterInfo
    snapshot: ClusterSnapshot | None = None


@dataclass(slots=True)
class _Pending:
    """A pod sent to a cluster that does not fit there yet."""

    task: Task
    cluster: str
    sent: float
    borrowing: bool
    attempt: int
    done: float
    gone: bool = False


@dataclass(slots=True)
class _TaskState:
    attempts: int = 0
    done: float = 0.0
    excluded: dict[str, str] = field(default_factory=dict)
    excluded_at: dict[str, float] = field(default_factory=dict)


class _Replay:
    def __init__(
        self,
        federation: Federation,
        policy: str,
        settings: Settings,
        progress: Callable[[int], None] | None,
    ) -> None:
        self.federation = federation
        self.policy = policy
        self.settings = settings
        self.progress = progress
        self.spec = federation.spec
        specs = {task.gpu_spec for task in federation.tasks}
        self.clusters = {
            cluster.name: ClusterState(
                cluster.name,
                federation.clusters[cluster.name],
                specs,
                federation.gpu_taint,
                packs_gpu=cluster.scoring_strategy.packs(GPU_MILLI),
            )
            for cluster in self.spec.clusters
        }
        self.names = federation.names
        self.pricing = Pricing(self.spec)
        self.engine_based = policy.startswith("fedsched")
        self.colocation = policy == "fedsched+colocation"
        self.engine = FederationEngine(self.spec) if self.engine_based else None
        self.router = (
            None if self.engine_based else make_router(policy, self.spec, self.pricing, settings.seed)
        )
        self.ledger = Ledger(federation, policy, self.clusters, self.pricing)
        self.events: list[tuple[float, int, int, object]] = []
        self.sequence = itertools.count()
        self.views: dict[tuple[str, bool], _View] = {}
        self.waiting: list[Task] = []
        """Tasks the engine said "wait" for, in arrival order."""
        self.pending: dict[str, list[_Pending]] = {name: [] for name in self.names}
        self.cooldowns: dict[str, float] = {}
        self.sent_since: dict[str, list[tuple[float, Task]]] = {name: [] for name in self.names}
        self.state: dict[str, _TaskState] = {}
        self.could_fit: dict[tuple[str, str], bool] = {}
        self.pod_requests: dict[str, dict[str, int]] = {}
        self.retry_at: float | None = None
        self.freed = False
        self.now = 0.0
        self.finished = 0
        self.running = 0
        self.arrivals_left = len(federation.tasks)

    # ------------------------------------------------------------------ event loop
    def push(self, at: float, kind: int, payload: object) -> None:
        heapq.heappush(self.events, (at, next(self.sequence), kind, payload))

    def run(self) -> Ledger:
        for task in self.federation.tasks:
            self.push(task.arrival, ARRIVE, task)
        if self.colocation or any(task.online for task in self.federation.tasks):
            self.push(0.0, TIDE, None)
        while self.events:
            at, _, kind, payload = heapq.heappop(self.events)
            self.ledger.advance(at)
            self.now = at
            if kind == ARRIVE:
                assert isinstance(payload, Task)
                self.state[payload.name] = _TaskState()
                self.arrivals_left -= 1
                self.ledger.arrived(payload)
                if not self.place(payload):
                    self.waiting.append(payload)
            elif kind == FINISH:
                assert isinstance(payload, Running)
                self.finish(payload)
            elif kind == TIDE:
                self.tide()
            elif kind == GRACE:
                assert isinstance(payload, _Pending)
                self.grace(payload)
            else:
                self.retry()
            if self.freed and self.retry_at is None and (self.waiting or any(self.pending.values())):
                self.retry_at = at + self.settings.retry_seconds
                self.push(self.retry_at, RETRY, None)
            self.freed = False
        self.ledger.close(self.waiting, [p.task for ps in self.pending.values() for p in ps if not p.gone])
        return self.ledger

    def tide(self) -> None:
        for name, cluster in self.clusters.items():
            usage = self.federation.tide.usage(self.now, self.federation.offsets[name])
            for victim in cluster.set_usage(usage) if self.colocation else ():
                self.evicted(victim)
            if not self.colocation:
                cluster.usage = usage
            self.freed = True
        self.ledger.tide({name: c.usage for name, c in self.clusters.items()})
        # The tide matters while something runs or is still to arrive; after that nothing can change.
        if self.running or self.arrivals_left:
            self.push(self.now + self.settings.tide_step, TIDE, None)

    # ------------------------------------------------------------------ views of the clusters
    def view(self, name: str, borrowing: bool) -> _View:
        cluster = self.clusters[name]
        key = (name, borrowing)
        current = self.views.get(key)
        version = (cluster.version, cluster.usage if borrowing else 0.0)
        if current is not None and (self.now - current.observed < self.settings.staleness):
            return current
        if current is not None and current.version == version:
            current.observed = self.now
            current.snapshot = None
            return current
        info = ClusterInfo(name, cluster.free_list(borrowing), cluster.capacity, True)
        fresh = _View(self.now, version, info)
        self.views[key] = fresh
        self.sent_since[name] = [(t, task) for t, task in self.sent_since[name] if t >= self.now]
        return fresh

    def could_ever_fit(self, name: str, task: Task) -> bool:
        key = (name, task.name)
        known = self.could_fit.get(key)
        if known is None:
            known = self.could_fit[key] = self.clusters[name].could_ever_fit(task)
        return known

    # ------------------------------------------------------------------ placing
    def place(self, task: Task) -> bool:
        """Decide for ``task`` now; True when it left the federation queue (sent, or impossible)."""
        borrowing = self.colocation and task.preemptible
        if self.router is not None:
            infos = []
            for name in self.names:
                info = self.view(name, False).info
                info.could_fit = self.could_ever_fit(name, task)
                infos.append(info)
            if task.pinned:
                infos = [info for info in infos if info.name == task.home]
            target = self.router.route(task, infos)
            if target is None:
                self.ledger.impossible(task)
            else:
                self.send(task, target, borrowing=False)
            return True
        if borrowing and self.lent_capacity_shrinks(task) and self.decide(task, False):
            return True  # online load will rise within the run: regular capacity first, it stays
        return self.decide(task, borrowing)

    def lent_capacity_shrinks(self, task: Task) -> bool:
        """The tide forecast says online usage rises past the lending margin during the task's run: what
        it would borrow now is likely reclaimed before it ends."""
        tide, remaining = self.federation.tide, max(60.0, task.run - self.state[task.name].done)
        steps = [self.now + remaining * k / 4 for k in range(1, 5)]
        for name in self.names:
            offset = self.federation.offsets[name]
            now = tide.usage(self.now, offset)
            if any(tide.usage(at, offset) > now + USAGE_MARGIN for at in steps):
                return True
        return False

    def decide(self, task: Task, borrowing: bool) -> bool:
        assert self.engine is not None
        state = self.state[task.name]
        # Cheap necessary condition first: the engine's NodeFit needs a node whose snapshot has room.
        snapshots: dict[str, ClusterSnapshot] = {}
        any_room = False
        excluded = self.active_exclusions(state, borrowing)
        for name in self.names:
            view = self.view(name, borrowing)
            if task.pinned and name != task.home:
                continue
            if not any_room and name not in excluded:
                any_room = any(
                    task.cpu <= cpu
                    and task.memory_mib <= memory
                    and task.gpu_milli <= gpu
                    and node_admits(task, labels)
                    for cpu, memory, gpu, labels in view.info.free
                )
        if not any_room and all(self.could_ever_fit(name, task) is False for name in self.names):
            self.ledger.impossible(task)
            return True
        if not any_room:
            self.ledger.decisions_skipped += 1
            return False
        for name in self.names:
            view = self.view(name, borrowing)
            if view.snapshot is None:
                view.snapshot = self.clusters[name].snapshot(
                    EPOCH + timedelta(seconds=view.observed), borrowing
                )
            snapshots[name] = view.snapshot
        now = EPOCH + timedelta(seconds=self.now)
        request = self.request(task, borrowing)
        in_flight = self.in_flight(borrowing)
        forecast = self.forecast(task) if self.colocation else None
        cooling = {n: EPOCH + timedelta(seconds=u) for n, u in self.cooldowns.items() if u > self.now}
        # The placement cycle a task runs (cooldown retry, the impossible verdict), over the replay's view.
        inputs = FederationView(snapshots, cooling, {}, now, in_flight=in_flight)
        decision = (
            FixedState(self.spec, inputs)
            .cycle(self.engine)
            .decide(request, exclude=excluded, forecast=forecast)
        )
        self.ledger.decisions += 1
        if decision.outcome == "placed":
            assert decision.cluster is not None
            self.send(task, decision.cluster, borrowing)
            return True
        if decision.outcome == "impossible":
            self.ledger.impossible(task)
            return True
        return False

    def active_exclusions(self, state: _TaskState, borrowing: bool) -> dict[str, str]:
        """The clusters this try left that have not answered since: as the placement cycle does
        (``answered_since``), a cluster is excluded until a snapshot taken after it was left."""
        return {
            name: reason
            for name, reason in state.excluded.items()
            if self.views[(name, borrowing)].observed <= state.excluded_at[name]
        }

    def request(self, task: Task, borrowing: bool) -> TaskRequest:
        return task_request(
            task,
            dict(self.requests_of(task)),
            clusters=[task.home] if task.pinned and task.home else None,
            expected_seconds=max(0.0, task.run - self.state[task.name].done),
        )

    def in_flight(self, borrowing: bool) -> dict[str, list[dict[str, int]]]:
        """Per cluster, the requests sent there and not in its snapshot yet, pod by pod: still pending
        from before it was observed (oldest first), then sent since. The hook's reservations, one per
        placement."""
        out: dict[str, list[dict[str, int]]] = {}
        for name in self.names:
            observed = self.views[(name, borrowing)].observed
            tasks = [p.task for p in self.pending[name] if not p.gone and p.sent < observed]
            tasks.extend(task for sent, task in self.sent_since[name] if sent >= observed)
            if tasks:
                out[name] = [self.requests_of(task) for task in tasks]
        return out

    def requests_of(self, task: Task) -> dict[str, int]:
        known = self.pod_requests.get(task.name)
        if known is None:
            known = self.pod_requests[task.name] = pod_requests(task)
        return known

    def forecast(self, task: Task) -> dict[str, float]:
        """Predicted idle share of each cluster's online requests over the task's run: what a seasonal
        forecaster fitted on the tide's history (``plans.runtime``) would report."""
        tide, horizon = self.federation.tide, max(60.0, task.run)
        steps = [self.now + horizon * k / 4 for k in range(5)]
        return {
            name: 1.0 - sum(tide.usage(t, self.federation.offsets[name]) for t in steps) / len(steps)
            for name in self.names
        }

    def send(self, task: Task, cluster: str, borrowing: bool) -> None:
        state = self.state[task.name]
        state.attempts += 1
        self.sent_since[cluster].append((self.now, task))
        pending = _Pending(task, cluster, self.now, borrowing, state.attempts, state.done)
        if not self.bind(pending):
            self.pending[cluster].append(pending)
            if self.engine_based:
                self.push(self.now + self.settings.grace_seconds, GRACE, pending)

    def bind(self, pending: _Pending) -> bool:
        cluster = self.clusters[pending.cluster]
        node = cluster.pick_node(pending.task, pending.borrowing)
        if node is None:
            return False
        remaining = pending.task.run - pending.done
        running = Running(
            pending.task,
            pending.cluster,
            node,
            self.now,
            self.now + remaining,
            pending.borrowing,
            pending.attempt,
            pending.done,
        )
        for victim in cluster.bind(node, running):
            self.evicted(victim)
        self.ledger.started(running)
        self.running += 1
        self.push(running.end, FINISH, running)
        return True

    # ------------------------------------------------------------------ outcomes
    def finish(self, running: Running) -> None:
        if running.cancelled:
            return
        self.clusters[running.cluster].unbind(running)
        self.running -= 1
        self.ledger.finished(running, self.now)
        self.freed = True
        self.finished += 1
        if self.progress is not None:
            self.progress(1)

    def evicted(self, running: Running) -> None:
        """Online load reclaimed a borrowing pod: fail over, resuming from the last checkpoint."""
        running.cancelled = True
        self.running -= 1
        elapsed = self.now - running.start
        kept = elapsed - elapsed % self.settings.checkpoint_seconds
        state = self.state[running.task.name]
        state.done = running.done + kept
        self.ledger.ended(running, self.now, evicted=True)
        # As the operator does: an eviction is about one pod or node, not the cluster; no cooldown.
        self.leave(running.task, running.cluster, "evicted: online load reclaimed its capacity", cool=False)
        self.freed = True

    def grace(self, pending: _Pending) -> None:
        if pending.gone or pending not in self.pending[pending.cluster]:
            return
        # Still unschedulable after the grace period: delete it, cool the cluster down, decide again.
        pending.gone = True
        self.pending[pending.cluster].remove(pending)
        self.ledger.failover(pending.task)
        self.leave(pending.task, pending.cluster, "insufficient: pod unschedulable")

    def leave(self, task: Task, cluster: str, reason: str, cool: bool = True) -> None:
        if cool:
            self.cooldowns[cluster] = self.now + self.spec.policy.cooldown_seconds
            self.push(self.cooldowns[cluster], RETRY, None)  # work waiting on this cluster may go again
        state = self.state[task.name]
        state.excluded[cluster] = reason
        state.excluded_at[cluster] = self.now
        usable = [
            name
            for name in self.names
            if self.could_ever_fit(name, task)
            and not (self.engine_based and self.pricing.violates(name, task))
        ]
        if all(name in state.excluded for name in usable):
            state.excluded.clear()  # every cluster left: the try fails and Airflow's retry starts afresh
            state.excluded_at.clear()
        if not self.place(task):
            self.waiting.append(task)

    def retry(self) -> None:
        if self.retry_at is not None and self.now >= self.retry_at:
            self.retry_at = None
        for name in self.names:
            queue = self.pending[name]
            if not queue:
                continue
            cluster = self.clusters[name]
            room = {False: cluster.max_free(False), True: cluster.max_free(True)}
            still = []
            queued = len(queue)
            for pending in queue[:queued]:
                if pending.gone:
                    continue
                task, most = pending.task, room[pending.borrowing]
                if task.cpu > most[0] or task.memory_mib > most[1] or task.gpu_milli > most[2]:
                    still.append(pending)  # no node has that much free: binding cannot succeed
                    continue
                if self.bind(pending):
                    room = {False: cluster.max_free(False), True: cluster.max_free(True)}
                else:
                    still.append(pending)
            # Evictions caused by these binds may have sent work here meanwhile: keep it queued.
            self.pending[name] = still + queue[queued:]
        if self.waiting:
            waiting, self.waiting = self.waiting, []
            if self.engine is not None:
                # The federation queue in the engine's order (policy.queue_order).
                entries = [
                    (self.request(task, self.colocation and task.preemptible), task.arrival)
                    for task in waiting
                ]
                waiting = [waiting[i] for i in self.engine.order(entries)]
            for task in waiting:
                if not self.place(task):
                    self.waiting.append(task)


def simulate(
    federation: Federation,
    policy: str,
    settings: Settings,
    progress: Callable[[int], None] | None = None,
) -> Ledger:
    return _Replay(federation, policy, settings, progress).run()
