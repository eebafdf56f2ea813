"""One member cluster in virtual time: its nodes, what is bound where, in-cluster binding like the
kube-scheduler, colocation accounting, and the snapshots the engine sees.

Two kinds of pod share a node. *Regular* pods are bound by requests (``requested + pod <= allocatable``),
as Kubernetes does. Under colocation, *borrowing* pods (preemptible work) run on what online services
requested but do not use right now: a node's batch capacity is its allocatable less the regular pods'
requests less the online pods' current usage (with a margin) less the borrowing pods, the formula of
Koordinator's batch resources. When online usage rises, or a regular pod is bound over it, borrowing pods
are evicted (newest first) until the node is no longer over-committed.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

from airflow_provider_fedsched.federation import ClusterSnapshot, NodeSnapshot, Taint, TaskRequest
from airflow_provider_fedsched.federation.request import Toleration
from airflow_provider_fedsched.replay.topology import GPU_MILLI, GPU_SPEC_LABEL
from airflow_provider_fedsched.replay.workload import Node, Task

__all__ = ["MIB", "TAINTED", "ClusterState", "NodeState", "Running", "gpu_spec_selector", "node_labels"]

MIB = 2**20


def pod_requests(task: Task) -> dict[str, int]:
    """The task's pod requests as the engine and the snapshots count them (memory in bytes)."""
    amounts = (("cpu", task.cpu), ("memory", task.memory_mib * MIB), (GPU_MILLI, task.gpu_milli))
    return {name: amount for name, amount in amounts if amount}


GPU_TAINT = Taint(key="nvidia.com/gpu", value="present", effect="NoSchedule")
USAGE_MARGIN = 0.05
"""Added to the online usage fraction when computing batch capacity: room for a rise before the next
tide step."""


TAINTED = "replay.fedsched.io/gpu-taint"


def node_admits(task: Task, labels: dict[str, str]) -> bool:
    """The pod's GPU-type selector matches and, on a GPU-tainted node, the pod asks for a GPU."""
    if task.gpu_spec and GPU_SPEC_LABEL + task.gpu_spec not in labels:
        return False
    return bool(task.gpu_milli) or TAINTED not in labels


def node_labels(model: str, specs: Iterable[str]) -> dict[str, str]:
    """A node's labels: its GPU model, and for each pod ``gpu_spec`` (allowed GPU types) naming its model
    the label that spec's node selector asks for."""
    labels = {"gpu-model": model} if model else {}
    for spec in specs:
        if model and model in spec.split("|"):
            labels[GPU_SPEC_LABEL + spec] = "true"
    return labels


def gpu_spec_selector(spec: str) -> dict[str, str]:
    return {GPU_SPEC_LABEL + spec: "true"} if spec else {}


GPU_TOLERATION = Toleration(key="nvidia.com/gpu", operator="Exists")


def task_request(
    task: Task, resources: dict[str, int], *, clusters: list[str] | None, expected_seconds: float
) -> TaskRequest:
    """The request the engine judges for a replayed task (built without validation: the trace's values
    are checked when it is read). Every field with a default factory is given: ``model_construct`` looks
    up each missing one's signature, which was 40 % of a replay's time."""
    return TaskRequest.model_construct(
        resources=resources,
        node_selector=gpu_spec_selector(task.gpu_spec),
        cluster_selector={},
        tolerations=[GPU_TOLERATION] if task.gpu_milli else [],
        datasets=list(task.datasets),
        prefer_region=None,
        prefer_group=None,
        clusters=clusters,
        namespace="default",
        expected_duration_seconds=expected_seconds,
        preemptible=task.preemptible,
        assets=[],
    )


@dataclass(slots=True)
class Running:
    """A pod bound to a node: the attempt of a task."""

    task: Task
    cluster: str
    node: NodeState
    start: float
    end: float
    borrowing: bool
    attempt: int
    done: float
    """Seconds of the task's work done before this attempt (resumed from a checkpoint)."""
    cancelled: bool = False


@dataclass(slots=True, eq=False)
class NodeState:
    name: str
    cpu: int
    memory: int
    """MiB."""
    gpu: int
    """Thousandths of a GPU."""
    labels: dict[str, str]
    tainted: bool = False
    """Carries the GPU taint: only pods asking for a GPU (which tolerate it) may bind here."""
    req_cpu: int = 0
    req_memory: int = 0
    req_gpu: int = 0
    """Requests of the regular pods, online ones included."""
    online_cpu: int = 0
    online_gpu: int = 0
    """Requests of the online pods (part of ``req_*``)."""
    borrow_cpu: int = 0
    borrow_memory: int = 0
    borrow_gpu: int = 0
    borrowers: list[Running] = field(default_factory=list)
    version: int = 0
    view_labels: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.view_labels = {**self.labels, TAINTED: "true"} if self.tainted else self.labels

    def fits(self, task: Task) -> bool:
        return (
            self.req_cpu + task.cpu <= self.cpu
            and self.req_memory + task.memory_mib <= self.memory
            and self.req_gpu + task.gpu_milli <= self.gpu
        )

    def batch_free(self, usage: float) -> tuple[int, int, int]:
        """What a borrowing pod may still take here when online pods use ``usage`` of their requests."""
        share = min(1.0, usage + USAGE_MARGIN)
        cpu = self.cpu - (self.req_cpu - self.online_cpu) - int(self.online_cpu * share) - self.borrow_cpu
        gpu = self.gpu - (self.req_gpu - self.online_gpu) - int(self.online_gpu * share) - self.borrow_gpu
        memory = self.memory - self.req_memory - self.borrow_memory
        return cpu, memory, gpu

    def over_committed(self, usage: float) -> bool:
        cpu, memory, gpu = self.batch_free(usage)
        return cpu < 0 or memory < 0 or gpu < 0


class ClusterState:
    def __init__(
        self,
        name: str,
        nodes: Iterable[Node],
        gpu_specs: Iterable[str],
        gpu_taint: bool = False,
        packs_gpu: bool = True,
    ) -> None:
        self.name = name
        self.packs_gpu = packs_gpu
        """The cluster's scheduler scores GPU pods ``MostAllocated`` on the GPU (its spec's
        ``scoring_strategy``); otherwise every pod goes to the least allocated node."""
        specs = sorted(set(gpu_specs) - {""})
        self.nodes: list[NodeState] = []
        for node in nodes:
            labels = node_labels(node.model, specs)
            tainted = gpu_taint and node.gpus > 0
            self.nodes.append(
                NodeState(node.name, node.cpu, node.memory_mib, node.gpus * 1000, labels, tainted)
            )
        self.capacity = (
            sum(n.cpu for n in self.nodes),
            sum(n.memory for n in self.nodes),
            sum(n.gpu for n in self.nodes),
        )
        shapes = {(n.cpu, n.memory, n.gpu, n.tainted, tuple(sorted(n.labels))): n.labels for n in self.nodes}
        self.shapes = [
            (cpu, memory, gpu, tainted, labels) for (cpu, memory, gpu, tainted, _), labels in shapes.items()
        ]
        """Distinct node shapes: whether a pod could ever fit is decided over these."""
        self.usage = 1.0
        """Current online usage fraction (the tide)."""
        self.version = 0
        self._node_cache: dict[tuple[str, bool], tuple[int, float, NodeSnapshot]] = {}

    # ---------------------------------------------------------------- fit and bind
    def could_ever_fit(self, task: Task) -> bool:
        label = GPU_SPEC_LABEL + task.gpu_spec if task.gpu_spec else None
        return any(
            task.cpu <= cpu
            and task.memory_mib <= memory
            and task.gpu_milli <= gpu
            and (label is None or label in labels)
            and (task.gpu_milli > 0 or not tainted)
            for cpu, memory, gpu, tainted, labels in self.shapes
        )

    def pick_node(self, task: Task, borrowing: bool) -> NodeState | None:
        """The kube-scheduler's choice among nodes that fit (resources, GPU taint and GPU-type selector):
        the least allocated (mean free share of cpu and memory after binding) for a pod without a GPU; for
        a GPU pod on a cluster that packs GPUs the node with the least GPU left that still fits
        (``MostAllocated`` on the GPU, as GPU clusters configure it, so whole nodes stay free for 8-GPU
        jobs). Ties go to the first by name."""
        packs = self.packs_gpu
        label = GPU_SPEC_LABEL + task.gpu_spec if task.gpu_spec else None
        cpu, memory, gpu = task.cpu, task.memory_mib, task.gpu_milli
        best: NodeState | None = None
        best_score = -float("inf")
        usage = self.usage
        for node in self.nodes:
            if gpu > node.gpu or cpu > node.cpu or (node.tainted and not gpu):
                continue
            if label is not None and label not in node.labels:
                continue
            if borrowing:
                free_cpu, free_memory, free_gpu = node.batch_free(usage)
            else:
                free_cpu = node.cpu - node.req_cpu
                free_memory = node.memory - node.req_memory
                free_gpu = node.gpu - node.req_gpu
            if cpu > free_cpu or memory > free_memory or gpu > free_gpu:
                continue
            if gpu and packs:
                score = -(free_gpu - gpu) / node.gpu
            else:
                score = (free_cpu - cpu) / node.cpu + (
                    (free_memory - memory) / node.memory if node.memory else 0
                )
            if score > best_score:
                best, best_score = node, score
        return best

    def bind(self, node: NodeState, running: Running) -> list[Running]:
        """Account ``running`` on ``node``; returns the borrowing pods this evicts (colocation)."""
        task = running.task
        if running.borrowing:
            node.borrow_cpu += task.cpu
            node.borrow_memory += task.memory_mib
            node.borrow_gpu += task.gpu_milli
            node.borrowers.append(running)
        else:
            node.req_cpu += task.cpu
            node.req_memory += task.memory_mib
            node.req_gpu += task.gpu_milli
            if task.online:
                node.online_cpu += task.cpu
                node.online_gpu += task.gpu_milli
        self._touch(node)
        return self.reclaim(node) if node.borrowers and not running.borrowing else []

    def unbind(self, running: Running) -> None:
        node, task = running.node, running.task
        if running.borrowing:
            node.borrow_cpu -= task.cpu
            node.borrow_memory -= task.memory_mib
            node.borrow_gpu -= task.gpu_milli
            node.borrowers.remove(running)
        else:
            node.req_cpu -= task.cpu
            node.req_memory -= task.memory_mib
            node.req_gpu -= task.gpu_milli
            if task.online:
                node.online_cpu -= task.cpu
                node.online_gpu -= task.gpu_milli
        self._touch(node)

    def reclaim(self, node: NodeState) -> list[Running]:
        """Evict borrowing pods, newest first, until the node is no longer over-committed."""
        evicted: list[Running] = []
        while node.borrowers and node.over_committed(self.usage):
            victim = node.borrowers[-1]
            self.unbind(victim)
            evicted.append(victim)
        return evicted

    def set_usage(self, usage: float) -> list[Running]:
        """A tide step: online usage changes; borrowing capacity shrinks or grows."""
        self.usage = usage
        self.version += 1
        evicted: list[Running] = []
        for node in self.nodes:
            if node.borrowers:
                evicted.extend(self.reclaim(node))
        return evicted

    def _touch(self, node: NodeState) -> None:
        node.version += 1
        self.version += 1

    # ---------------------------------------------------------------- what the engine sees
    def snapshot(self, observed_at: datetime, borrowing: bool) -> ClusterSnapshot:
        """The cluster as ``fedsched snapshot`` would report it; for borrowing decisions, each node's
        free resources are its batch capacity (as a colocation agent reports them)."""
        nodes = []
        cache = self._node_cache
        usage = self.usage
        for node in self.nodes:
            key = (node.name, borrowing)
            cached = cache.get(key)
            if cached is not None and cached[0] == node.version and (not borrowing or cached[1] == usage):
                nodes.append(cached[2])
                continue
            if borrowing:
                free_cpu, free_memory, free_gpu = node.batch_free(usage)
                requested = {
                    "cpu": node.cpu - max(0, free_cpu),
                    "memory": (node.memory - max(0, free_memory)) * MIB,
                    GPU_MILLI: node.gpu - max(0, free_gpu),
                }
            else:
                requested = {"cpu": node.req_cpu, "memory": node.req_memory * MIB, GPU_MILLI: node.req_gpu}
            built = NodeSnapshot.model_construct(
                name=node.name,
                allocatable={"cpu": node.cpu, "memory": node.memory * MIB, GPU_MILLI: node.gpu},
                requested=requested,
                labels=node.labels,
                taints=[GPU_TAINT] if node.tainted else [],
                ready=True,
                unschedulable=False,
            )
            cache[key] = (node.version, usage, built)
            nodes.append(built)
        return ClusterSnapshot.model_construct(
            cluster=self.name,
            observed_at=observed_at,
            reachable=True,
            reason=None,
            nodes=nodes,
            quota_headroom={},
            placements=[],
            tenants={},
            workload=[],
            missing_permissions=[],
        )

    # ---------------------------------------------------------------- aggregates for baselines
    def free_totals(self) -> tuple[int, int, int]:
        cpu = memory = gpu = 0
        for node in self.nodes:
            cpu += node.cpu - node.req_cpu
            memory += node.memory - node.req_memory
            gpu += node.gpu - node.req_gpu
        return cpu, memory, gpu

    def max_free(self, borrowing: bool) -> tuple[int, int, int]:
        """Per resource, the most any one node has free."""
        cpu = memory = gpu = 0
        for free_cpu, free_memory, free_gpu, _ in self.free_list(borrowing):
            cpu, memory, gpu = max(cpu, free_cpu), max(memory, free_memory), max(gpu, free_gpu)
        return cpu, memory, gpu

    def free_list(self, borrowing: bool) -> list[tuple[int, int, int, dict[str, str]]]:
        """Each node's free (cpu, memory MiB, gpu milli) and labels: what a snapshot would show. A
        tainted node's labels carry :data:`TAINTED` so that fit checks keep pods without a GPU off it."""
        usage = self.usage
        out = []
        for node in self.nodes:
            if borrowing:
                cpu, memory, gpu = node.batch_free(usage)
            else:
                cpu, memory, gpu = (
                    node.cpu - node.req_cpu,
                    node.memory - node.req_memory,
                    node.gpu - node.req_gpu,
                )
            out.append((cpu, memory, gpu, node.view_labels))
        return out
