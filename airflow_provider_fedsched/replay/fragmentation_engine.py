"""fedsched in the fragmentation protocol: the placement cycle a task runs (``federation/cycle.py``, over
the real :class:`FederationEngine` with the production policy, its ``Fragmentation`` score included)
decides the member for each pod from member snapshots, and the member binds it with the kube-scheduler's
default, preferring the decision's node hint.

What the engine sees, as it would from live members: each member's snapshot (every node's allocatable and
requested cpu, memory and GPU thousandths, its labels, and the free thousandths of each GPU device with
the GPU model, ``NodeSnapshot.gpus``; the cluster's pod shapes as its ``workload``, here the pod list's,
as a member that has run this workload would report), at most ``staleness`` seconds old with the
arrivals spread evenly over ``window`` (default 10 s over an hour: about 30 arrivals), and the pods sent
to each member since its snapshot, pod by pod, as the hook passes them. When the engine waits although a
member has room, the snapshots are refreshed and it decides again (the operator waits for the next
snapshot); when the chosen member cannot bind the pod, that member's snapshot is refreshed and the pod
decided again without it (the operator's failover). A pod that fits no member is dropped without a
decision, as an engine asked would find no room either.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from datetime import timedelta

from airflow_provider_fedsched.federation import (
    ClusterSnapshot,
    Decision,
    FederationEngine,
    NodeSnapshot,
    TaskRequest,
)
from airflow_provider_fedsched.federation.cycle import FederationView, FixedState
from airflow_provider_fedsched.federation.fragmentation import Ints
from airflow_provider_fedsched.federation.resources import ResourceList
from airflow_provider_fedsched.federation.snapshot import NodeGpus, WorkloadShape
from airflow_provider_fedsched.replay.binders import Member, kube_default
from airflow_provider_fedsched.replay.cluster import MIB, node_labels, pod_requests, task_request
from airflow_provider_fedsched.replay.fragmentation import (
    Federated,
    PodList,
    Protocol,
    Recorder,
    SeedRun,
    federate,
    fragmentation_ratio,
)
from airflow_provider_fedsched.replay.policies import Pricing
from airflow_provider_fedsched.replay.simulator import EPOCH
from airflow_provider_fedsched.replay.topology import GPU_MILLI
from airflow_provider_fedsched.replay.workload import Node, Task

__all__ = ["run_fedsched", "workload_of"]


def workload_of(pods: PodList) -> list[WorkloadShape]:
    """The pod list's shapes, counted: what every member reports as the workload it runs."""
    counts = Counter(pod.shape for pod in pods.pods)
    return [
        WorkloadShape.model_construct(
            cpu=shape.cpu, gpus=shape.gpus, gpu_milli=shape.gpu_milli, models=list(shape.models), count=count
        )
        for shape, count in sorted(counts.items(), key=lambda item: (-item[1], repr(item[0])))
    ]


class _Snapshots:
    """Each member's snapshot, rebuilt from its arrays (only the nodes that changed), and the pods sent
    to it since."""

    def __init__(
        self, members: dict[str, Member], specs: Sequence[str], workload: list[WorkloadShape]
    ) -> None:
        self.members = members
        self.workload = workload
        self.specs = specs
        self.nodes = {
            name: [self._node(member, row) for row in range(member.size)] for name, member in members.items()
        }
        self.versions = {name: m.view.versions.copy() for name, m in members.items()}
        self.snapshots: dict[str, ClusterSnapshot] = {}
        self.in_flight: dict[str, list[ResourceList]] = {name: [] for name in members}

    def _node(self, member: Member, row: int) -> NodeSnapshot:
        view = member.view
        count = int(member.gpus[row])
        model = view.models[view.model[row]] if view.model[row] < len(view.models) else ""
        gpu = int(member.gpu_capacity[row])
        free = view.devices[row, :count]
        return NodeSnapshot.model_construct(
            name=member.names[row],
            allocatable={
                "cpu": int(member.cpu_capacity[row]),
                "memory": int(member.memory_capacity[row]) * MIB,
                GPU_MILLI: gpu,
            },
            requested={
                "cpu": int(member.cpu_capacity[row] - view.cpu[row]),
                "memory": int(member.memory_capacity[row] - view.memory[row]) * MIB,
                GPU_MILLI: gpu - int(free.sum()),
            },
            labels=node_labels(model, self.specs),
            taints=[],
            ready=True,
            unschedulable=False,
            gpus=NodeGpus.model_construct(model=model, free=free.tolist()) if count else None,
        )

    def refresh(self, name: str, seconds: float) -> None:
        member = self.members[name]
        nodes, versions = self.nodes[name], self.versions[name]
        for position in (member.view.versions != versions).nonzero()[0]:
            row = int(position)
            nodes[row] = self._node(member, row)
            versions[row] = member.view.versions[row]
        self.snapshots[name] = ClusterSnapshot.model_construct(
            cluster=name,
            observed_at=EPOCH + timedelta(seconds=seconds),
            reachable=True,
            reason=None,
            nodes=list(nodes),
            quota_headroom={},
            placements=[],
            tenants={},
            workload=self.workload,
            missing_permissions=[],
        )
        self.in_flight[name] = []

    def stale(self) -> list[str]:
        return [name for name, m in self.members.items() if (m.view.versions != self.versions[name]).any()]


def _request(task: Task) -> TaskRequest:
    return task_request(task, pod_requests(task), clusters=None, expected_seconds=task.run)


def run_fedsched(
    nodes: Sequence[Node], pods: PodList, order: Ints, seed: int, clusters: int, protocol: Protocol
) -> SeedRun:
    federated: Federated = federate(nodes, pods, order, clusters, seed, protocol)
    engine = FederationEngine(federated.spec)
    pricing = Pricing(federated.spec)
    members = federated.members
    specs = sorted({task.gpu_spec for task in pods.tasks} - {""})
    views = _Snapshots(members, specs, workload_of(pods))
    positions = {name: {node: row for row, node in enumerate(m.names)} for name, m in members.items()}
    recorder = Recorder(len(order), int(sum(int(m.gpus.sum()) for m in members.values())), protocol.load)
    everyone = list(members.values())
    ratio = lambda: fragmentation_ratio(everyone)  # noqa: E731
    pace = protocol.window / max(1, len(order))
    violations = decisions = 0
    for position, index in enumerate(order):
        seconds = position * pace
        if position % federated.refresh_every == 0:
            for name in members:
                views.refresh(name, seconds)
        pod, task = pods.pods[index], federated.tasks[position]
        feasible = {name: m.feasible(pod) for name, m in members.items()}
        placed = False
        if any(mask.any() for mask in feasible.values()):
            request = _request(task)
            excluded: dict[str, str] = {}
            retried = False
            for _ in range(len(members) + 2):
                decisions += 1
                inputs = FederationView(
                    views.snapshots,
                    {},
                    {},
                    EPOCH + timedelta(seconds=seconds),
                    in_flight={n: views.in_flight[n] for n in members if views.in_flight[n]},
                )
                cycle = FixedState(federated.spec, inputs).cycle(engine)
                decision: Decision = cycle.decide(request, exclude=excluded)
                if decision.outcome == "placed" and decision.cluster is not None:
                    name = decision.cluster
                    member = members[name]
                    if feasible[name].any():
                        hinted = decision.extra.get("preferred_node")
                        preferred = positions[name].get(hinted) if isinstance(hinted, str) else None
                        node, device = kube_default(
                            member, pod, feasible[name], federated.packs_gpu[name], preferred
                        )
                        member.bind(node, pod, device)
                        views.in_flight[name].append(request.resources)
                        violations += pricing.violates(name, task)
                        placed = True
                        break
                    views.refresh(name, seconds)  # failover: the member could not bind it
                    excluded[name] = "insufficient: pod unschedulable"
                    continue
                if decision.outcome == "wait" and not retried:
                    retried = True  # the operator waits for fresher snapshots, then decides again
                    for name in views.stale():
                        views.refresh(name, seconds)
                    continue
                break
        recorder.record(position, int(pods.gpu_total[index]), placed, ratio)
    return recorder.run(violations, decisions)
