"""Indexed Jobs in virtual time: each placed whole (a gang of ``parallelism`` pods on one member, as
``FederatedKubernetesJobOperator`` places a Job today) or divided over the members (issue 31,
:mod:`federation.division`), on the same federation and the same jobs.

The jobs come from a pod list (the Alibaba trace, shaped as the makespan replay shapes it): the pods, in
arrival order, are dealt into jobs of a seeded number of indices (:data:`JOB_SIZES`); a job arrives with its
first pod, every index asks that pod's shape (its requests, GPU types and datasets), and index ``i`` runs
as long as the ``i``-th pod of its group ran, so the work replayed is the trace's. A job wants all its
indices at once (``parallelism`` = ``completions``).

Both modes decide through the real engine on snapshots of the replay's own state, with the pods sent and
not yet bound as in-flight reservations. *Whole*: the engine's decision for the gang (``GangFit``: room
for every pod on one member now), else the job waits. *Divided*: the engine's decision for one pod, then
:func:`~federation.division.divide_placement`; the job waits only while no member has room for one pod,
and the indices beyond the members' room wait in the members, dealt by weight (``overflow``).
*Divided in room*: the same, but the indices beyond the room wait in the federation and are dealt
(:func:`~federation.division.rebalance`) as members free room, so a later job's pods are not queued
behind them.
Pods are bound by each member's scheduler (``ClusterState.pick_node``); a pod with no room yet waits in
its member, first come first bound. Waiting jobs are decided again ``retry_seconds`` after capacity
frees, in arrival order. No failovers (no member rejects a slice here), no tide.

Measured per mode: makespan (first arrival to last index done), each job's wait (arrival to its first
pod's start) and completion time (arrival to its last index done), the GPU allocation (GPUs requested by
running pods over the federation's GPUs, integrated over the makespan) and the decisions made.
"""

from __future__ import annotations

import heapq
import itertools
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any, Literal

from airflow_provider_fedsched.federation import ClusterSnapshot, FederationEngine, TaskRequest
from airflow_provider_fedsched.federation.division import (
    Division,
    IndexSlice,
    divide_placement,
    rebalance,
    shares_of,
)
from airflow_provider_fedsched.federation.request import GangRole
from airflow_provider_fedsched.replay.cluster import ClusterState, Running, pod_requests, task_request
from airflow_provider_fedsched.replay.simulator import EPOCH
from airflow_provider_fedsched.replay.topology import Federation
from airflow_provider_fedsched.replay.workload import Task

__all__ = ["JOB_SIZES", "MODES", "DividedResult", "Job", "jobs_from_pods", "replay_jobs"]

Mode = Literal["whole", "divided", "divided-in-room"]
MODES: tuple[Mode, ...] = ("whole", "divided", "divided-in-room")
JOB_SIZES = (4, 8, 16, 32)
"""Indices per job, drawn uniformly (seeded): the shards of a batch job."""

_ARRIVE, _FINISH, _RETRY = range(3)
_FRESH_SECONDS = 10.0
"""A member's snapshot is rebuilt when it changed or is this old (the engine's TTL is 15 s)."""


@dataclass(frozen=True, slots=True)
class Job:
    name: str
    arrival: float
    pod: Task
    """The shape every index asks (its run time is unused: see ``runs``)."""
    runs: tuple[float, ...]
    """Seconds each index runs."""

    @property
    def completions(self) -> int:
        return len(self.runs)


def jobs_from_pods(tasks: Sequence[Task], seed: int, sizes: Sequence[int] = JOB_SIZES) -> list[Job]:
    """The pods in arrival order dealt into jobs of ``sizes`` indices (the last may be smaller)."""
    rng = random.Random(seed)
    ordered = sorted(tasks, key=lambda task: task.arrival)
    jobs: list[Job] = []
    start = 0
    while start < len(ordered):
        group = ordered[start : start + rng.choice(sizes)]
        first = group[0]
        jobs.append(Job(f"job-{len(jobs)}", first.arrival, first, tuple(task.run for task in group)))
        start += len(group)
    return jobs


@dataclass(slots=True)
class DividedResult:
    mode: Mode
    makespan_s: float
    mean_wait_s: float
    p95_wait_s: float
    mean_completion_s: float
    p95_completion_s: float
    gpu_allocation: float
    """GPUs requested by running pods over the federation's GPUs, integrated over the makespan."""
    decisions: int
    jobs: int
    unplaced: int
    members_per_job: float
    """Mean members a placed job ran on (1 when whole)."""
    pods_run: dict[str, dict[str, int]] = field(default_factory=dict, repr=False)
    """Job -> member -> pods that ran there to completion (each index once: their sum is its completions)."""
    replay_seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            name: round(value, 4) if isinstance(value, float) else value
            for name, value in {
                "mode": self.mode,
                "makespan_s": self.makespan_s,
                "mean_wait_s": self.mean_wait_s,
                "p95_wait_s": self.p95_wait_s,
                "mean_completion_s": self.mean_completion_s,
                "p95_completion_s": self.p95_completion_s,
                "gpu_allocation": self.gpu_allocation,
                "decisions": self.decisions,
                "jobs": self.jobs,
                "unplaced": self.unplaced,
                "members_per_job": self.members_per_job,
            }.items()
        }


@dataclass(slots=True)
class _Slice:
    """One member's Job of a placed job: its indices not yet started, and pods alive."""

    job: Job
    cluster: str
    todo: list[int]
    parallelism: int
    alive: int = 0


@dataclass(slots=True)
class _JobState:
    job: Job
    started: float | None = None
    done: int = 0
    finished: float | None = None
    members: int = 0
    pod: TaskRequest | None = None
    """One index's request."""
    request: TaskRequest | None = None
    """What the engine judges: the pod's request (divided) or the gang's (whole)."""
    division: Division | None = None
    """Divided: which member runs which indices, and which wait for room in the federation."""


@dataclass(slots=True)
class _PendingPod:
    piece: _Slice
    index: int
    task: Task


@dataclass(slots=True)
class _Replay:
    federation: Federation
    mode: Mode
    retry_seconds: float
    engine: FederationEngine = field(init=False)
    clusters: dict[str, ClusterState] = field(init=False)
    events: list[tuple[float, int, int, object]] = field(default_factory=list)
    sequence: itertools.count[int] = field(default_factory=itertools.count)
    waiting: list[_JobState] = field(default_factory=list)
    pending: dict[str, list[_PendingPod]] = field(default_factory=dict)
    states: dict[str, _JobState] = field(default_factory=dict)
    snapshots: dict[str, tuple[tuple[int, float], ClusterSnapshot]] = field(default_factory=dict)
    retry_at: float | None = None
    freed: bool = False
    now: float = 0.0
    decisions: int = 0
    gpu_in_use: int = 0
    gpu_seconds: float = 0.0
    last: float = 0.0
    pods_run: dict[str, dict[str, int]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        spec = self.federation.spec
        self.engine = FederationEngine(spec)
        specs = {task.gpu_spec for task in self.federation.tasks}
        self.clusters = {
            c.name: ClusterState(c.name, self.federation.clusters[c.name], specs, self.federation.gpu_taint)
            for c in spec.clusters
        }
        self.pending = {name: [] for name in self.clusters}

    def push(self, at: float, kind: int, payload: object) -> None:
        heapq.heappush(self.events, (at, next(self.sequence), kind, payload))

    def run(self, jobs: Sequence[Job]) -> None:
        for job in jobs:
            self.push(job.arrival, _ARRIVE, job)
        while self.events:
            at, _, kind, payload = heapq.heappop(self.events)
            self.gpu_seconds += self.gpu_in_use * (at - self.last)
            self.last = self.now = at
            if kind == _ARRIVE:
                assert isinstance(payload, Job)
                state = self.states[payload.name] = _JobState(payload)
                if not self.place(state):
                    self.waiting.append(state)
            elif kind == _FINISH:
                assert isinstance(payload, tuple)
                self.finish(*payload)
            else:
                self.retry()
            if self.freed and self.retry_at is None and self.waiting:
                self.retry_at = at + self.retry_seconds
                self.push(self.retry_at, _RETRY, None)
            self.freed = False

    # ------------------------------------------------------------------ deciding
    def snapshot(self, name: str) -> ClusterSnapshot:
        cluster = self.clusters[name]
        known = self.snapshots.get(name)
        if known is None or known[0] != (cluster.version, self.now // _FRESH_SECONDS):
            # Fresh to the engine's Freshness rule (policy.snapshot_ttl_seconds, 15 s) as a refreshed one is.
            known = self.snapshots[name] = (
                (cluster.version, self.now // _FRESH_SECONDS),
                cluster.snapshot(EPOCH + timedelta(seconds=self.now), False),
            )
        return known[1]

    def place(self, state: _JobState) -> bool:
        """Decide for the job now; True when it left the queue (placed, or never placeable)."""
        job = state.job
        if state.request is None:
            state.pod = task_request(
                job.pod, pod_requests(job.pod), clusters=None, expected_seconds=max(job.runs)
            )
            state.request = state.pod
            if self.mode == "whole":  # the Job operator's request: a gang of `parallelism` pods
                fields = state.pod.model_dump(exclude={"resources", "gang"})
                role = GangRole(count=job.completions, resources=state.pod.resources)
                state.request = TaskRequest.for_gang([role], **fields)
        pod, request = state.pod, state.request
        assert pod is not None
        snapshots = {name: self.snapshot(name) for name in self.clusters}
        in_flight = {
            name: [pod_requests(p.task) for p in queue] for name, queue in self.pending.items() if queue
        }
        now = EPOCH + timedelta(seconds=self.now)
        decision = self.engine.decide(request, snapshots, now=now, in_flight=in_flight)
        self.decisions += 1
        if decision.outcome == "impossible":
            return True
        if decision.outcome != "placed":
            return False
        if self.mode == "whole":
            assert decision.cluster is not None
            pieces = [
                IndexSlice(
                    cluster=decision.cluster, indices=tuple(range(job.completions)), parallelism=len(job.runs)
                )
            ]
            left, state.members = False, 1
        else:
            overflow = self.mode == "divided"
            if state.division is None:
                state.division = divide_placement(
                    decision,
                    pod,
                    self.federation.spec,
                    snapshots,
                    job.completions,
                    in_flight=in_flight,
                    overflow=overflow,
                )
                pieces = list(state.division.slices)
            else:  # placed in part: its waiting indices, as members have room
                shares, _ = shares_of(decision, pod, self.federation.spec, snapshots, in_flight=in_flight)
                moved = rebalance(
                    state.division,
                    succeeded=(),
                    may_be_running=(),
                    rejected_cluster=None,
                    shares=shares,
                    overflow=overflow,
                )
                state.division, pieces = moved.division, list(moved.moved)
            left = bool(state.division.waiting)
            state.members = len(state.division.slices)
        for placed in pieces:
            piece = _Slice(job, placed.cluster, list(placed.indices), placed.parallelism)
            while piece.todo and piece.alive < piece.parallelism:
                self.create(piece)
        return not left

    def create(self, piece: _Slice) -> None:
        """The member's Job controller creates its next index's pod; the scheduler binds it or it waits."""
        index = piece.todo.pop(0)
        piece.alive += 1
        task = replace(piece.job.pod, name=f"{piece.job.name}-{index}", run=piece.job.runs[index])
        pod = _PendingPod(piece, index, task)
        if not self.bind(pod):
            self.pending[piece.cluster].append(pod)

    def bind(self, pod: _PendingPod) -> bool:
        cluster = self.clusters[pod.piece.cluster]
        node = cluster.pick_node(pod.task, False)
        if node is None:
            return False
        running = Running(pod.task, cluster.name, node, self.now, self.now + pod.task.run, False, 1, 0.0)
        cluster.bind(node, running)
        self.gpu_in_use += pod.task.gpu_milli
        state = self.states[pod.piece.job.name]
        if state.started is None:
            state.started = self.now
        self.push(running.end, _FINISH, (pod.piece, running))
        return True

    # ------------------------------------------------------------------ outcomes
    def finish(self, piece: _Slice, running: Running) -> None:
        self.clusters[running.cluster].unbind(running)
        self.gpu_in_use -= running.task.gpu_milli
        self.freed = True
        state = self.states[piece.job.name]
        state.done += 1
        ran = self.pods_run.setdefault(piece.job.name, {})
        ran[running.cluster] = ran.get(running.cluster, 0) + 1
        if state.done == piece.job.completions:
            state.finished = self.now
        piece.alive -= 1
        if piece.todo:
            self.create(piece)
        queue, self.pending[running.cluster] = self.pending[running.cluster], []
        for pod in queue:  # the member's scheduler tries every pending pod; what does not fit waits
            if not self.bind(pod):
                self.pending[running.cluster].append(pod)

    def retry(self) -> None:
        self.retry_at = None
        waiting, self.waiting = self.waiting, []
        for state in waiting:
            if not self.place(state):
                self.waiting.append(state)


def _percentile(values: Sequence[float], share: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def replay_jobs(
    federation: Federation, jobs: Sequence[Job], mode: Mode, *, retry_seconds: float = 10.0
) -> DividedResult:
    """Replay ``jobs`` on ``federation``, each placed whole or divided (module docstring)."""
    began = time.perf_counter()
    replay = _Replay(federation, mode, retry_seconds)
    replay.run(jobs)
    states = list(replay.states.values())
    placed = [s for s in states if s.finished is not None]
    first = min((job.arrival for job in jobs), default=0.0)
    end = max((s.finished for s in placed if s.finished is not None), default=first)
    makespan = end - first
    waits = [s.started - s.job.arrival for s in placed if s.started is not None]
    completions = [s.finished - s.job.arrival for s in placed if s.finished is not None]
    gpus = sum(c.capacity[2] for c in replay.clusters.values())
    return DividedResult(
        mode=mode,
        makespan_s=makespan,
        mean_wait_s=sum(waits) / len(waits) if waits else 0.0,
        p95_wait_s=_percentile(waits, 0.95),
        mean_completion_s=sum(completions) / len(completions) if completions else 0.0,
        p95_completion_s=_percentile(completions, 0.95),
        gpu_allocation=replay.gpu_seconds / (gpus * makespan) if gpus and makespan > 0 else 0.0,
        decisions=replay.decisions,
        jobs=len(jobs),
        unplaced=len(states) - len(placed),
        members_per_job=sum(s.members for s in placed) / len(placed) if placed else 0.0,
        pods_run=replay.pods_run,
        replay_seconds=time.perf_counter() - began,
    )
