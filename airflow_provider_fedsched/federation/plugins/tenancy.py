"""Tenant rules: budgets, federation-wide tenant quotas (with borrowing) and fair share among waiting tasks.

They run after the hard rules (sovereignty, taints, capacity), so no cluster a task may not use or could
never fit is ever made acceptable by them: they only reject. Their inputs are the decision's
:class:`~federation.tenancy.TenantInputs` (usage, waiting tasks and spend from shared state). A task of no
tenant, or a spec without tenants, passes them untouched.

* ``Budget``: the task's ``max_cost`` / ``max_egress_gb`` against the cluster's estimate (prices do not
  change with time, so a cluster over them is out for good), and its tenant's budget for the period
  (spent + estimate over it: wait for the next period; the estimate alone over it: never).
* ``TenantQuota``: usage + request over the tenant's quota: wait, "team-ml uses 60/64 nvidia.com/gpu"; a
  request above the quota itself can never be admitted. A ``reclaimable`` tenant's preemptible task may
  go over its quota by borrowing what other tenants' quotas leave idle.
* ``FairShare``: when a task of a tenant further below its weighted share waits for room that this
  cluster has, a task of a tenant further above takes only what those waiting tasks leave free
  (dominant-resource shares over the federation's capacity, divided by weight; ties go to the tenant
  named first).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from airflow_provider_fedsched.federation.costs import compute_per_hour
from airflow_provider_fedsched.federation.framework import (
    SUCCESS,
    ClusterView,
    CycleState,
    DataKey,
    FilterPlugin,
    Status,
    unresolvable,
    unschedulable,
)
from airflow_provider_fedsched.federation.resources import PODS, ResourceList, format_quantity
from airflow_provider_fedsched.federation.tenancy import TenantInputs, dominant_share, quota_text

if TYPE_CHECKING:
    from airflow_provider_fedsched.federation.spec import FederationSpec
    from airflow_provider_fedsched.federation.tenancy import TenantSpec

__all__ = [
    "Budget",
    "FairShare",
    "TenantQuota",
    "fair_share_text",
    "room_taken",
    "tenant_demand",
    "waiting_ahead",
]


def tenant_demand(resources: ResourceList) -> ResourceList:
    """What one task counts against its tenant: its requests and one pod."""
    return {**resources, PODS: resources.get(PODS, 0) + 1}


def _tenant_of(state: CycleState) -> tuple[TenantSpec, TenantInputs] | None:
    name = state.request.tenant
    if name is None:
        return None
    return state.spec.tenant(name), state.tenancy or TenantInputs()


@dataclass(frozen=True, slots=True)
class _BudgetData:
    tenant: TenantSpec | None
    spent: float
    moved_gb: float
    hours: float
    egress_gb: float
    """GB moved if no dataset were local to the cluster."""
    egress_cost: float
    local: dict[str, tuple[float, float]]
    """Cluster -> (GB, egress cost) not moved because those datasets live there."""


_BUDGET = DataKey[_BudgetData | None]("Budget")


class Budget(FilterPlugin):
    name: ClassVar[str] = "Budget"

    def prepare(self, state: CycleState) -> None:
        request = state.request
        found = _tenant_of(state)
        budget_tenant = found[0] if found is not None and found[0].budget is not None else None
        if request.max_cost is None and request.max_egress_gb is None and budget_tenant is None:
            _BUDGET.put(state, None)
            return
        inputs = found[1] if found is not None else TenantInputs()
        name = budget_tenant.name if budget_tenant is not None else ""
        # Egress per cluster from one pass over the datasets (as the Cost score does), not per cluster.
        local: dict[str, tuple[float, float]] = {}
        total_gb = total_cost = 0.0
        for dataset in state.datasets:
            if dataset.cluster is None:
                continue
            cost = dataset.size_gb * state.spec.cluster(dataset.cluster).prices.egress_gb
            total_gb, total_cost = total_gb + dataset.size_gb, total_cost + cost
            gb_here, cost_here = local.get(dataset.cluster, (0.0, 0.0))
            local[dataset.cluster] = (gb_here + dataset.size_gb, cost_here + cost)
        _BUDGET.put(
            state,
            _BudgetData(
                budget_tenant,
                inputs.spent.get(name, 0.0),
                inputs.egress_gb.get(name, 0.0),
                request.expected_duration_seconds / 3600.0,
                total_gb,
                total_cost,
                local,
            ),
        )

    def skip(self, state: CycleState) -> bool:
        """Nothing to check: no budget, or a tenant budget that even the priciest member, moving every
        dataset, would stay within (no per-task cap: those are judged per cluster)."""
        data: _BudgetData | None = state.data[_BUDGET.name]
        if data is None:
            return True
        request, tenant = state.request, data.tenant
        if request.max_cost is not None or request.max_egress_gb is not None:
            return False
        if tenant is None or tenant.budget is None:
            return True
        budget = tenant.budget
        most = (
            compute_per_hour(state.spec.highest_prices, state.request_items) * data.hours + data.egress_cost
        )
        return (budget.max_cost is None or data.spent + most <= budget.max_cost) and (
            budget.max_egress_gb is None or data.moved_gb + data.egress_gb <= budget.max_egress_gb
        )

    def filter(self, state: CycleState, cluster: ClusterView) -> Status:
        data: _BudgetData | None = state.data[_BUDGET.name]
        if data is None:
            return SUCCESS
        request = state.request
        gb_here, cost_here = data.local.get(cluster.spec.name, (0.0, 0.0))
        gb, egress_cost = max(0.0, data.egress_gb - gb_here), max(0.0, data.egress_cost - cost_here)
        cost = compute_per_hour(cluster.spec.prices, state.request_items) * data.hours + egress_cost
        if request.max_cost is not None and cost > request.max_cost:
            return unresolvable(
                f"estimated cost {cost:.2f} is above the task's max_cost {request.max_cost:g}"
            )
        if request.max_egress_gb is not None and gb > request.max_egress_gb:
            return unresolvable(
                f"it would move {gb:g} GB of data, above the task's max_egress_gb {request.max_egress_gb:g}"
            )
        tenant = data.tenant
        if tenant is None or tenant.budget is None:
            return SUCCESS
        budget, period = tenant.budget, tenant.budget.period
        if budget.max_cost is not None and data.spent + cost > budget.max_cost:
            reason = (
                f"{tenant.name} spent {data.spent:.2f} of its {budget.max_cost:g} budget this {period}; "
                f"this task would cost ~{cost:.2f} here"
            )
            return unresolvable(reason) if cost > budget.max_cost else unschedulable(reason)
        if budget.max_egress_gb is not None and data.moved_gb + gb > budget.max_egress_gb:
            reason = (
                f"{tenant.name} moved {data.moved_gb:g} of its {budget.max_egress_gb:g} GB egress budget "
                f"this {period}; this task would move {gb:g} GB here"
            )
            return unresolvable(reason) if gb > budget.max_egress_gb else unschedulable(reason)
        return SUCCESS


_QUOTA = DataKey[Status]("TenantQuota")


class TenantQuota(FilterPlugin):
    name: ClassVar[str] = "TenantQuota"

    def prepare(self, state: CycleState) -> None:
        # The verdict is federation-wide: judged once, the same for every cluster.
        _QUOTA.put(state, self._verdict(state))

    @staticmethod
    def _verdict(state: CycleState) -> Status:
        found = _tenant_of(state)
        if found is None:
            return SUCCESS
        tenant, inputs = found
        quota = tenant.quota_units
        if not quota:
            return SUCCESS
        demand = tenant_demand(state.request.resources)
        used = inputs.usage.get(tenant.name, {})
        borrows = tenant.reclaimable and state.request.preemptible
        for name in sorted(quota):
            need, limit, have = demand.get(name, 0), quota[name], used.get(name, 0)
            if need == 0 or have + need <= limit:
                continue
            if borrows:
                over = have + need - limit
                idle = _idle_elsewhere(state, tenant.name, name, inputs)
                if over <= idle:
                    continue
            elif need > limit:
                return unresolvable(
                    f"the task asks {format_quantity(name, need)} {name}, above {tenant.name}'s quota "
                    f"of {format_quantity(name, limit)}"
                )
            return unschedulable(quota_text(tenant.name, name, have, limit))
        return SUCCESS

    def skip(self, state: CycleState) -> bool:
        """The verdict is federation-wide: admitted, there is nothing to check per cluster."""
        return state.data[_QUOTA.name] is SUCCESS

    def filter(self, state: CycleState, cluster: ClusterView) -> Status:
        verdict: Status = state.data[_QUOTA.name]
        return verdict

    def explain_all(self, state: CycleState) -> str | None:
        verdict = _QUOTA.get(state)
        return verdict.reason or None


def _idle_elsewhere(state: CycleState, borrower: str, resource: str, inputs: TenantInputs) -> int:
    """What the other tenants' quotas of ``resource`` leave unused, less what others already borrow."""
    idle = 0
    for other in state.spec.tenants:
        if other.name == borrower or resource not in other.quota_units:
            continue
        idle += max(0, other.quota_units[resource] - inputs.usage.get(other.name, {}).get(resource, 0))
    borrowed = sum(amounts.get(resource, 0) for name, amounts in inputs.borrowed.items() if name != borrower)
    return max(0, idle - borrowed)


@dataclass(slots=True)
class _Ahead:
    """The waiting tasks of one more under-served tenant that could use the same clusters."""

    tenant: str
    share: float
    clusters: frozenset[str]
    smallest: dict[str, int]
    """Per resource, the least any of these tasks asks: with less free, none of them fits now."""
    total: dict[str, int]
    """What all of them ask together: the room this decision must leave them."""
    smallest_items: tuple[tuple[str, int], ...] = ()
    leave: tuple[tuple[str, int], ...] = ()
    """Per resource this task asks: what it takes plus what they ask together (the room it needs free)."""
    rejection: Status | None = None
    """The verdict where this task would take their room (it names no cluster: built once per decision)."""


_FAIR = DataKey[tuple[_Ahead, ...]]("FairShare")


def waiting_ahead(
    spec: FederationSpec, tenant: TenantSpec, inputs: TenantInputs, request_items: tuple[tuple[str, int], ...]
) -> tuple[_Ahead, ...]:
    """The waiting tasks of tenants further below their weighted share than ``tenant`` that ask for a
    resource this request takes, grouped by tenant and clusters, the most under-served first."""
    if not inputs.waiting:
        return ()
    capacity = inputs.capacity
    mine = dict(request_items)

    def key(name: str, weight: float) -> tuple[float, str]:
        return (round(dominant_share(inputs.usage.get(name, {}), capacity) / weight, 12), name)

    own = key(tenant.name, tenant.weight)
    keys: dict[str, tuple[float, str]] = {}
    groups: dict[tuple[str, frozenset[str]], _Ahead] = {}
    # Plain loops: this runs over every waiting task for every decision of an over-served tenant.
    for task in inputs.waiting:
        name = task.tenant
        if name == tenant.name:
            continue
        theirs = keys.get(name)
        if theirs is None:
            theirs = keys[name] = key(name, spec.tenant(name).weight)
        # Only a tenant further below its share, and only a request this one takes room from, matter.
        if not theirs < own:
            continue
        resources = task.resources
        for resource, amount in resources.items():
            if amount and mine.get(resource, 0):
                break
        else:
            continue
        group = groups.get((name, task.clusters))
        if group is None:
            needs = {r: a for r, a in resources.items() if a}
            groups[(name, task.clusters)] = _Ahead(name, theirs[0], task.clusters, needs, dict(needs))
            continue
        smallest, total = group.smallest, group.total
        for resource in smallest:
            if not resources.get(resource, 0):
                smallest[resource] = 0  # a task that needs none of it: the smallest need is none
        for resource, amount in resources.items():
            if amount:
                smallest[resource] = min(smallest.get(resource, 0), amount)
                total[resource] = total.get(resource, 0) + amount
    for group in groups.values():  # the per-cluster checks as flat tuples: they run for every cluster
        group.smallest_items = tuple(group.smallest.items())
        group.leave = tuple((r, a + group.total.get(r, 0)) for r, a in request_items)
    return tuple(sorted(groups.values(), key=lambda a: (a.share, a.tenant)))


def room_taken(
    ahead: tuple[_Ahead, ...], cluster: str, free: ResourceList, room: ResourceList | None = None
) -> _Ahead | None:
    """The first group of ``ahead`` whose room on ``cluster`` (``free``, cluster-wide) this request
    would take: the smallest of its tasks fits there now (in ``room``, when that is judged apart), and
    this request does not leave all of them the room they ask for."""
    room = free if room is None else room
    for other in ahead:
        if cluster not in other.clusters:
            continue
        fits = True  # does the smallest of them fit here now?
        for resource, amount in other.smallest_items:
            if room.get(resource, 0) < amount:
                fits = False
                break
        if not fits:
            continue  # none of them fits here now: this room is not theirs to take
        leaves = True  # does this task leave them all the room they ask for?
        for resource, amount in other.leave:
            if free.get(resource, 0) < amount:
                leaves = False
                break
        if not leaves:
            return other
    return None


def fair_share_text(other: _Ahead) -> str:
    return (
        f"fair share: {other.tenant} is further below its weighted share ({other.share:.3f}) "
        f"and has tasks waiting for this room"
    )


class FairShare(FilterPlugin):
    name: ClassVar[str] = "FairShare"

    def prepare(self, state: CycleState) -> None:
        found = _tenant_of(state)
        ahead = () if found is None else waiting_ahead(state.spec, found[0], found[1], state.request_items)
        _FAIR.put(state, ahead)

    def skip(self, state: CycleState) -> bool:
        """No tenant further below its share waits: nothing to leave room for."""
        return not state.data[_FAIR.name]

    def filter(self, state: CycleState, cluster: ClusterView) -> Status:
        ahead: tuple[_Ahead, ...] = state.data[_FAIR.name]
        if not ahead or cluster.index is None:
            return SUCCESS
        # Cluster-wide free room (not per node): the waiting tasks' node fit is judged by their decisions.
        free = cluster.index.total_free
        reserved = cluster.reservation
        if reserved:  # in-flight placements hold part of the room
            free = {r: free.get(r, 0) - reserved.get(r, 0) for r in free.keys() | reserved.keys()}
        other = room_taken(ahead, cluster.spec.name, free)
        if other is None:
            return SUCCESS
        if other.rejection is None:
            other.rejection = unschedulable(fair_share_text(other))
        return other.rejection
