"""Giving borrowed capacity back: which borrowing pods to move so that a lender's waiting task fits.

The kube-scheduler's answer to "nothing fits" is its PostFilter point (preemption); this is the
federation's, for tenants. A ``reclaimable`` tenant's preemptible tasks may borrow the idle quota of
others (``TenantQuota``); when a tenant within its ``guaranteed`` share then waits because a member has no
room, pods of the tenants over their quota are evicted from one node of one cluster, just enough for the
waiting task to fit there. The evicted tasks are preemptible: their operators move them and resume from
their checkpoints (an eviction, not a failure of the cluster).

The rules, so that giving back never becomes a way around the others:

* only for a task whose tenant stays within its ``guaranteed`` resources with it (``guaranteed`` is what a
  lender is entitled to get back; a tenant without one reclaims nothing);
* only on a cluster that every other rule accepted and only node fit refused (no sovereignty, taint,
  quota or budget rule is traded for it);
* only preemptible pods of another tenant, and never more of a tenant than the part of its usage above
  its own quota; the newest first (the least work since its start);
* nothing while pods given back earlier are still leaving and already make the room: no second wave.

Pure: the caller lists the pods (``kube/pods.py``) and evicts them (``hooks/tenancy.py``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from airflow_provider_fedsched.federation.decision import Decision
from airflow_provider_fedsched.federation.request import TaskRequest
from airflow_provider_fedsched.federation.resources import ResourceList, fits, format_quantity
from airflow_provider_fedsched.federation.snapshot import ClusterSnapshot
from airflow_provider_fedsched.federation.spec import FederationSpec
from airflow_provider_fedsched.federation.tenancy import TenantInputs

__all__ = ["ROOM_REFUSED_BY", "BorrowingPod", "Reclaim", "entitled_by", "plan_reclaim"]

ROOM_REFUSED_BY = "NodeFit"
"""The one rejection a reclaim can answer: no node has room now (every rule before it accepted)."""


@dataclass(frozen=True, slots=True)
class BorrowingPod:
    """A running preemptible pod of a tenant, as listed from its cluster."""

    cluster: str
    namespace: str
    name: str
    node: str
    tenant: str
    resources: ResourceList
    started: float
    """When it was created (epoch seconds): the newest are given back first."""
    leaving: bool = False
    """Already being deleted: its room is on its way."""


@dataclass(frozen=True, slots=True)
class Reclaim:
    cluster: str
    node: str
    pods: tuple[BorrowingPod, ...]
    reason: str


def entitled_by(spec: FederationSpec, request: TaskRequest, inputs: TenantInputs) -> str | None:
    """The resource the tenant reclaims by (for the reason), when it is entitled to reclaim at all."""
    if request.tenant is None:
        return None
    tenant = spec.tenant(request.tenant)
    guaranteed = tenant.guaranteed_units
    used = inputs.usage.get(tenant.name, {})
    named = [name for name, amount in request.resources.items() if amount > 0 and name in guaranteed]
    if not named:
        return None
    for name in named:
        if used.get(name, 0) + request.resources[name] > guaranteed[name]:
            return None
    return named[0]


def plan_reclaim(
    spec: FederationSpec,
    request: TaskRequest,
    decision: Decision,
    inputs: TenantInputs,
    snapshots: Mapping[str, ClusterSnapshot],
    pods: Sequence[BorrowingPod],
) -> Reclaim | None:
    """The fewest borrowing pods to move, all on one node, for ``request`` to fit there; None when the
    rules above allow none, or when pods given back already make the room."""
    if decision.outcome != "wait" or request.gang:
        return None
    resource = entitled_by(spec, request, inputs)
    if resource is None:
        return None
    tenant = str(request.tenant)
    candidates = [r.cluster for r in decision.rejected if r.plugin == ROOM_REFUSED_BY and not r.permanent]
    borrowed = {name: dict(amounts) for name, amounts in inputs.borrowed.items() if name != tenant}
    if not candidates or not borrowed:
        return None
    needed = {name: amount for name, amount in request.resources.items() if amount > 0}
    best: Reclaim | None = None
    for cluster in sorted(candidates):
        snapshot = snapshots.get(cluster)
        if snapshot is None or not snapshot.reachable:
            continue
        on_node: dict[str, list[BorrowingPod]] = {}
        for pod in pods:
            if pod.cluster == cluster:
                on_node.setdefault(pod.node, []).append(pod)
        for node in sorted(snapshot.nodes, key=lambda n: n.name):
            here = on_node.get(node.name, [])
            if not node.schedulable or not here:
                continue
            free = dict(node.free)
            for pod in here:
                if pod.leaving:
                    for name, amount in pod.resources.items():
                        free[name] = free.get(name, 0) + amount
            if fits(needed, free):
                return None  # pods given back earlier are making the room: wait for them
            left = {name: dict(amounts) for name, amounts in borrowed.items()}
            chosen: list[BorrowingPod] = []
            for pod in sorted(here, key=lambda p: (-p.started, p.name)):
                over = left.get(pod.tenant)
                if pod.leaving or over is None:
                    continue
                # Never more of a tenant than it borrows: a pod counts only while its tenant is still over
                # its quota in a resource the pod holds.
                if not any(over.get(name, 0) > 0 for name, amount in pod.resources.items() if amount > 0):
                    continue
                chosen.append(pod)
                for name, amount in pod.resources.items():
                    free[name] = free.get(name, 0) + amount
                    if name in over:
                        over[name] -= amount
                if fits(needed, free):
                    break
            if not chosen or not fits(needed, free):
                continue
            if best is None or len(chosen) < len(best.pods):
                owners = sorted({pod.tenant for pod in chosen})
                asked = format_quantity(resource, request.resources[resource])
                best = Reclaim(
                    cluster,
                    node.name,
                    tuple(chosen),
                    f"{tenant} is within its guaranteed {resource} with this task ({asked}) and waits for "
                    f"room: giving back {len(chosen)} pod(s) of {', '.join(owners)} borrowed beyond their "
                    f"quota on {cluster}/{node.name}",
                )
    return best
