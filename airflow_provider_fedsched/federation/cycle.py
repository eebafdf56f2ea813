"""One placement cycle: where a task goes, decided the same way by a task, ``fedsched place``, the replay
and the planner.

The engine (:class:`FederationEngine`) filters and scores the members against one set of inputs. A
placement is more than that, as the kube-scheduler's framework is more than its filter and score points:

1. **Filter and score** against what the state shows now (:class:`StateView`): snapshots, cooldowns,
   reservations in flight (pod by pod), tenant usage.
2. **Run-time rules on top**:

   * a cluster left earlier in the try (``exclude``) is considered again once a snapshot taken after it
     was left shows it answering: then the rules judge its room afresh;
   * a cluster found at run time never to fit the task (``impossible``) stays out;
   * a cooldown steers work elsewhere but never makes a task wait: when every compliant cluster with
     room is cooling down, the best of them is chosen, and the reason says so;
   * a namespace quota whose *hard* limit is below the request can never admit it: such a rejection is
     "never", and when only "never" rejections remain the verdict is ``impossible``, not a wait.

3. **Reserve** the request on the chosen cluster (:class:`Ledger`); a cluster whose ledger has no room
   left (other workers took it) is left out and the cycle runs again.
4. **Permit**: the tenant rules judged again with the reservations of other workers made at the same
   moment; a refusal releases the reservation and turns the decision into a wait.
5. **Post-filter** (:class:`Reclaimer`): a wait may get borrowed capacity back (preemption of borrowing
   pods) for the next cycle.

Pure: the ports are protocols; the hook implements them over shared state and the member clusters'
ledgers (``hooks/ports.py``), the what-if over given records (:class:`FixedState`, holding nothing).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Protocol

from airflow_provider_fedsched.federation.costs import decision_costs
from airflow_provider_fedsched.federation.decision import Decision, Rejection
from airflow_provider_fedsched.federation.engine import FederationEngine
from airflow_provider_fedsched.federation.plugins.tenancy import (
    fair_share_text,
    room_taken,
    tenant_demand,
    waiting_ahead,
)
from airflow_provider_fedsched.federation.request import TaskRequest
from airflow_provider_fedsched.federation.resources import ResourceList, add, subtract
from airflow_provider_fedsched.federation.snapshot import ClusterSnapshot
from airflow_provider_fedsched.federation.spec import FederationSpec, PolicySpec
from airflow_provider_fedsched.federation.tenancy import TenantInputs, TenantSpec, WaitingTask, period_start

__all__ = [
    "COOLDOWN_PLUGIN",
    "LEDGER_FULL",
    "QUOTA_PLUGIN",
    "FederationView",
    "FixedState",
    "Ledger",
    "Pending",
    "PlacementCycle",
    "Reclaimer",
    "StateView",
    "answered_since",
    "budget_periods",
    "concurrent_holds",
    "counted_holds",
    "in_flight_of",
    "permit_checks",
    "snapshot_usage",
    "taken",
    "tenant_inputs",
    "tenant_permit",
]

COOLDOWN_PLUGIN = "Cooldown"
QUOTA_PLUGIN = "Quota"
TENANT_QUOTA_PLUGIN = "TenantQuota"
LEDGER_FULL = "its ledger is full: placements of other workers took the room"


@dataclass(frozen=True)
class FederationView:
    """Snapshots, cooldowns and in-flight reservations as of ``now``: the engine's inputs from state."""

    snapshots: dict[str, ClusterSnapshot]
    cooldowns: dict[str, datetime]
    reservations: dict[str, ResourceList]
    now: datetime
    tenancy: TenantInputs | None = None
    """Tenant usage, waiting tasks and spend (None: the spec has no tenants)."""
    in_flight: dict[str, list[ResourceList]] = field(default_factory=dict)
    """``reservations`` placement by placement, oldest first (the node fit charges them one by one)."""


# Ports ---------------------------------------------------------------------------------------------------
class StateView(Protocol):
    """What a cycle reads of the federation: its inputs now, and each namespace's hard quota limits."""

    def view(self, clusters: Sequence[str], namespace: str | None, now: datetime | None) -> FederationView:
        """The inputs for a pod of ``namespace`` on ``clusters`` as of ``now`` (None: the state's now)."""
        ...

    def hard_quotas(self, cluster: str) -> Mapping[str, ResourceList]:
        """Namespace -> the hard limits of its ResourceQuota in ``cluster`` (empty: none known)."""
        ...


class Ledger(Protocol):
    """Where a cycle holds what it placed, so that the next decisions (of any worker) see it."""

    def reserve(
        self,
        cluster: str,
        request: TaskRequest,
        placement_id: str,
        policy: PolicySpec | None,
        now: datetime | None,
    ) -> bool:
        """Hold ``request`` on ``cluster``; False when the room is gone (others took it since)."""
        ...

    def permit(
        self, request: TaskRequest, placement_id: str, cluster: str, now: datetime | None
    ) -> str | None:
        """After the hold: None when the tenant rules still admit it next to the holds of other workers
        made at the same moment, else the reason (the cycle releases the hold and waits)."""
        ...

    def release(self, cluster: str, placement_id: str) -> None: ...

    def record(self, request: TaskRequest, placement_id: str, decision: Decision) -> None:
        """Keep the verdict for the next decisions (a waiting task of a tenant counts for fair share)."""
        ...


class Reclaimer(Protocol):
    """The post-filter: what a task that waits can get back (borrowed capacity) for its next cycle."""

    def reclaim(self, request: TaskRequest, decision: Decision) -> str | None:
        """What was done, for the decision's record; None when nothing was."""
        ...


@dataclass(frozen=True, slots=True)
class Pending:
    """A reservation not yet seen in its cluster's snapshot: what shared state holds (``state``'s stores
    read them back as these) and what a what-if holds for its own placement."""

    at: datetime
    placement_id: str
    cluster: str
    tenant: str | None
    requests: ResourceList
    write: str = ""
    """A token of this hold's latest write: a hold written after it, which saw it, lists it in ``after``."""
    after: frozenset[str] = frozenset()
    """The ``write`` tokens of the holds visible just before this one was written (a hold without them,
    written by an earlier release or a what-if, saw nothing and so counts every other hold)."""


# The cycle -----------------------------------------------------------------------------------------------
def answered_since(snapshot: ClusterSnapshot | None, moment: datetime | None) -> bool:
    """A snapshot taken after ``moment`` shows the cluster answering."""
    return (
        snapshot is not None and snapshot.reachable and moment is not None and snapshot.observed_at > moment
    )


class PlacementCycle:
    """Filter, score, reserve, permit and post-filter one task, over the given ports."""

    def __init__(
        self,
        engine: FederationEngine,
        state: StateView,
        ledger: Ledger,
        reclaimer: Reclaimer | None = None,
    ) -> None:
        self.engine = engine
        self.spec = engine.spec
        self.state = state
        self.ledger = ledger
        self.reclaimer = reclaimer

    def decide(
        self,
        request: TaskRequest,
        *,
        exclude: Mapping[str, str] | None = None,
        excluded_at: Mapping[str, datetime] | None = None,
        impossible: Mapping[str, str] | None = None,
        policy: PolicySpec | None = None,
        forecast: Mapping[str, float] | None = None,
        now: datetime | None = None,
    ) -> Decision:
        """The decision, reserving nothing: the engine's, with the run-time rules (module docstring).

        ``exclude``: clusters left in this try (considered again once a snapshot taken after
        ``excluded_at`` shows them answering); ``impossible``: clusters found never to fit it."""
        impossible = impossible or {}
        excluded_at = excluded_at or {}
        names = request.clusters or [c.name for c in self.spec.clusters]
        view = self.state.view(names, request.namespace, now)
        active = {
            cluster: reason
            for cluster, reason in (exclude or {}).items()
            if not answered_since(view.snapshots.get(cluster), excluded_at.get(cluster))
        }
        active.update(impossible)

        def run(cooldowns: Mapping[str, datetime]) -> Decision:
            return self.engine.decide(
                request,
                view.snapshots,
                now=view.now,
                cooldowns=dict(cooldowns),
                reservations=view.reservations,
                forecast=forecast,
                exclude=active,
                policy=policy,
                tenancy=view.tenancy,
                in_flight=view.in_flight,
            )

        decision = self._never_above_hard_quota(request, run(view.cooldowns))
        if decision.outcome != "wait":
            return decision
        cooling = {r.cluster for r in decision.rejected if r.plugin == COOLDOWN_PLUGIN}
        if cooling:
            retry = run({c: until for c, until in view.cooldowns.items() if c not in cooling})
            if retry.outcome == "placed":
                retry.reason += (
                    f"; {retry.cluster} is cooling down, but every compliant cluster with room is: "
                    "a cooldown is not a reason to wait"
                )
                return self._never_above_hard_quota(request, retry)
        if all(r.permanent or r.cluster in impossible for r in decision.rejected) and decision.rejected:
            for rejection in decision.rejected:
                rejection.permanent = True
            decision.outcome = "impossible"
            never = "; ".join(f"{r.cluster}: {r.plugin}: {r.reason}" for r in decision.rejected)
            decision.reason = f"no member cluster can ever run this task: {never}"
        return decision

    def place(
        self,
        request: TaskRequest,
        placement_id: str,
        *,
        exclude: Mapping[str, str] | None = None,
        excluded_at: Mapping[str, datetime] | None = None,
        impossible: Mapping[str, str] | None = None,
        policy: PolicySpec | None = None,
        forecast: Mapping[str, float] | None = None,
        now: datetime | None = None,
    ) -> Decision:
        """Decide and, when placed, reserve and permit; when not, post-filter. A cluster whose ledger has
        no room left is left out and the decision made again."""
        full: dict[str, str] = {}
        while True:
            decision = self.decide(
                request,
                exclude={**(exclude or {}), **full},
                excluded_at=excluded_at,
                impossible=impossible,
                policy=policy,
                forecast=forecast,
                now=now,
            )
            if decision.outcome != "placed" or decision.cluster is None:
                self.ledger.record(request, placement_id, decision)
                if self.reclaimer is not None:
                    reclaimed = self.reclaimer.reclaim(request, decision)
                    if reclaimed is not None:
                        decision.extra["reclaim"] = reclaimed
                return decision
            if not self.ledger.reserve(decision.cluster, request, placement_id, policy, now):
                full[decision.cluster] = LEDGER_FULL
                continue
            refused = self.ledger.permit(request, placement_id, decision.cluster, now)
            if refused is not None:
                self.ledger.release(decision.cluster, placement_id)
                decision = taken(decision, refused)
            else:
                decision.extra["cost"] = decision_costs(self.spec, request, decision)
                if request.tenant is not None:
                    decision.extra["tenant"] = request.tenant
            self.ledger.record(request, placement_id, decision)
            return decision

    def _never_above_hard_quota(self, request: TaskRequest, decision: Decision) -> Decision:
        """A quota rejection is "never" (not "not now") where the request alone exceeds the namespace's
        hard limit, whatever the outcome: the explanation of a task placed elsewhere says so too."""
        for rejection in decision.rejected:
            if rejection.plugin == QUOTA_PLUGIN and not rejection.permanent:
                above = self._above_hard_quota(rejection.cluster, request)
                if above:
                    rejection.permanent = True
                    rejection.reason += (
                        f" (above the namespace's hard quota for {', '.join(above)}: it can never fit)"
                    )
        return decision

    def _above_hard_quota(self, cluster: str, request: TaskRequest) -> list[str]:
        """Resources whose request alone exceeds the hard quota of the task's namespace in ``cluster``."""
        namespace = self.spec.cluster(cluster).namespace or request.namespace
        hard = self.state.hard_quotas(cluster).get(namespace, {})
        return sorted(
            name for name, amount in request.resources.items() if name in hard and amount > hard[name]
        )


def taken(decision: Decision, reason: str) -> Decision:
    """The placed ``decision`` turned into a wait: the tenant's quota went to concurrent placements."""
    chosen = str(decision.cluster)
    return replace(
        decision,
        outcome="wait",
        cluster=None,
        candidates=[],
        rejected=[*decision.rejected, Rejection(chosen, TENANT_QUOTA_PLUGIN, reason)],
        reason=f"wait: {reason}",
    )


# The permit rule ------------------------------------------------------------------------------------------
def permit_checks(
    spec: FederationSpec, request: TaskRequest, cluster: str, waiting: Sequence[WaitingTask]
) -> tuple[bool, bool]:
    """Whether a placement on ``cluster`` must be permitted by the tenant's quota and by fair share:
    ``(False, False)`` needs no read-back of the holds."""
    if request.tenant is None or not spec.tenants:
        return False, False
    tenant = spec.tenant(request.tenant)
    # Borrowing is judged by the decision; a borrowed pod is given back when needed.
    check_quota = bool(tenant.quota_units) and not (tenant.reclaimable and request.preemptible)
    check_share = any(w.tenant != tenant.name and cluster in w.clusters for w in waiting)
    return check_quota, check_share


def tenant_permit(
    spec: FederationSpec,
    request: TaskRequest,
    placement_id: str,
    cluster: str,
    snapshots: Mapping[str, ClusterSnapshot],
    holds: Sequence[Pending],
    *,
    waiting: Sequence[WaitingTask] = (),
    spent: Mapping[str, float] | None = None,
    egress_gb: Mapping[str, float] | None = None,
) -> str | None:
    """After holding ``placement_id`` on ``cluster``, with every hold now visible (``holds``, this one
    among them): None when, counting every hold it must count (:func:`counted_holds`), the tenant stays
    within its quota and the request still leaves a more under-served tenant's waiting tasks their room
    there; else the reason (the cycle releases the hold and waits)."""
    check_quota, check_share = permit_checks(spec, request, cluster, waiting)
    if not (check_quota or check_share):
        return None
    counted = counted_holds(holds, cluster, placement_id)
    if counted is None:
        return None  # our hold is not visible: seen in a snapshot and released, nothing to judge against
    tenant = spec.tenant(str(request.tenant))
    _, _, pending = in_flight_of(counted)
    if check_quota:
        over = _over_quota(tenant, pending, snapshots)
        if over is not None:
            return over
    if check_share:
        earlier = [hold for hold in counted if hold.cluster == cluster and hold.placement_id != placement_id]
        # Shares as the decision judged them (without this placement's own hold), next to the holds of
        # the others: counting its own hold, a tenant level with a waiting one would fall behind it and
        # be refused by the very placement its decision allowed, at every try.
        others = {name: [e for e in held if e[1] != placement_id] for name, held in pending.items()}
        tenancy = tenant_inputs(spec, snapshots, others, waiting=waiting, spent=spent, egress_gb=egress_gb)
        return _room_taken(spec, tenant, request, cluster, snapshots.get(cluster), earlier, tenancy)
    return None


def counted_holds(holds: Sequence[Pending], cluster: str, placement_id: str) -> list[Pending] | None:
    """The holds the hold ``placement_id`` on ``cluster`` must count, itself included, in their order;
    None when it is not among ``holds``.

    Every hold but those written after it that saw it (its latest write is in their ``after``): each of
    those counts it in turn. So of any set of holds kept at once, the one written last counted all the
    others, whatever the clocks of the workers that wrote them and however late a write landed: the
    ordering by time alone let a hold taken early but written late be counted by no one.
    """
    own = next((h for h in holds if h.placement_id == placement_id and h.cluster == cluster), None)
    if own is None:
        return None
    return [hold for hold in holds if hold is own or not own.write or own.write not in hold.after]


def concurrent_holds(holds: Sequence[Pending], own: Pending) -> list[Pending]:
    """The holds ``own`` counts although it did not see them before its write: written at about the same
    time (each of two such holds counts the other, and both may give up; a retry written later sees them)."""
    return [
        hold
        for hold in holds
        if hold is not own and hold.write not in own.after and (not own.write or own.write not in hold.after)
    ]


def _over_quota(
    tenant: TenantSpec,
    pending: Mapping[str, Sequence[tuple[datetime, str, ResourceList]]],
    snapshots: Mapping[str, ClusterSnapshot],
) -> str | None:
    quota = tenant.quota_units
    usage = snapshot_usage(snapshots).get(tenant.name, {})
    for _, _, requests in pending.get(tenant.name, []):
        usage = add(usage, tenant_demand(requests))
    over = sorted(name for name, limit in quota.items() if usage.get(name, 0) > limit)
    if not over:
        return None
    name = over[0]
    return (
        f"{tenant.name}'s quota of {quota[name]} {name} was taken by placements of other workers "
        f"made at the same time"
    )


def _room_taken(
    spec: FederationSpec,
    tenant: TenantSpec,
    request: TaskRequest,
    cluster: str,
    snapshot: ClusterSnapshot | None,
    earlier: Sequence[Pending],
    tenancy: TenantInputs | None,
) -> str | None:
    """Fair share judged again with the holds of other placements on ``cluster`` this one counts
    (``earlier``). This tenant's own earlier holds are no reason the waiting tasks no longer fit (they may
    be the very placements that took their room at the same time); every earlier hold counts against the
    room left."""
    if snapshot is None or tenancy is None:
        return None  # nothing to judge against
    free = room = snapshot.index.total_free
    for hold in earlier:
        free = subtract(free, hold.requests)
        if hold.tenant != tenant.name:
            room = subtract(room, hold.requests)
    items = tuple(sorted(request.resources.items()))
    other = room_taken(waiting_ahead(spec, tenant, tenancy, items), cluster, free, room)
    if other is None:
        return None
    return f"{fair_share_text(other)}; placements of other workers made at the same time took the rest"


# The inputs, from records --------------------------------------------------------------------------------
ByTenant = dict[str, list[tuple[datetime, str, ResourceList]]]
"""Tenant -> its pending reservations as ``(at, placement id, requests)``, oldest first."""


def in_flight_of(
    holds: Iterable[Pending],
) -> tuple[dict[str, ResourceList], dict[str, list[ResourceList]], ByTenant]:
    """From the pending reservations (oldest first): per cluster their sum and each of them in order,
    and per tenant ``(at, placement id, requests)`` in order."""
    summed: dict[str, ResourceList] = {}
    pods: dict[str, list[ResourceList]] = {}
    tenants: ByTenant = {}
    for hold in holds:
        total = summed.setdefault(hold.cluster, {})
        for name, amount in hold.requests.items():  # in place: one sum per cluster, not a copy per hold
            total[name] = total.get(name, 0) + amount
        pods.setdefault(hold.cluster, []).append(hold.requests)
        if hold.tenant:
            tenants.setdefault(hold.tenant, []).append((hold.at, hold.placement_id, hold.requests))
    return summed, pods, tenants


def snapshot_usage(snapshots: Mapping[str, ClusterSnapshot]) -> dict[str, ResourceList]:
    """Per tenant, the requests of its pods the snapshots show."""
    usage: dict[str, ResourceList] = {}
    for snapshot in snapshots.values():
        for tenant, amounts in snapshot.tenants.items():
            usage[tenant] = add(usage.get(tenant, {}), amounts)
    return usage


def tenant_inputs(
    spec: FederationSpec,
    snapshots: Mapping[str, ClusterSnapshot],
    pending: Mapping[str, Sequence[tuple[datetime, str, ResourceList]]],
    *,
    waiting: Sequence[WaitingTask] = (),
    spent: Mapping[str, float] | None = None,
    egress_gb: Mapping[str, float] | None = None,
) -> TenantInputs | None:
    """Everything the tenant rules read (None when the spec has no tenants): usage from the snapshots'
    tenant-labelled pods plus the tenants' pending reservations, what each borrows above its quota, the
    waiting tasks, the spend this period and the federation's capacity."""
    if not spec.tenants:
        return None
    usage = snapshot_usage(snapshots)
    for name, held in pending.items():
        for _, _, requests in held:
            usage[name] = add(usage.get(name, {}), tenant_demand(requests))
    borrowed: dict[str, ResourceList] = {}
    for tenant in spec.tenants:
        over = {
            name: used - tenant.quota_units[name]
            for name, used in usage.get(tenant.name, {}).items()
            if name in tenant.quota_units and used > tenant.quota_units[name]
        }
        if over:
            borrowed[tenant.name] = over
    capacity: ResourceList = {}
    for snapshot in snapshots.values():
        if snapshot.reachable:
            capacity = add(capacity, snapshot.index.total_allocatable)
    return TenantInputs(
        usage=usage,
        borrowed=borrowed,
        waiting=tuple(waiting),
        spent=dict(spent or {}),
        egress_gb=dict(egress_gb or {}),
        capacity=capacity,
    )


def budget_periods(spec: FederationSpec, now: datetime) -> dict[str, datetime]:
    """Per tenant with a budget, the start of its current period (spend is summed from there)."""
    return {t.name: period_start(t.budget.period, now) for t in spec.tenants if t.budget is not None}


# The what-if ports ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class FixedState:
    """The ports of a what-if over given records (a snapshot file, the replay's own model, a plan's view):
    a :class:`StateView` of them, and a :class:`Ledger` that holds nothing and permits as the run-time
    ledger would with this placement held after ``holds``."""

    spec: FederationSpec
    inputs: FederationView
    quotas: Mapping[str, Mapping[str, ResourceList]] = field(default_factory=dict)
    """Cluster -> namespace -> hard quota limits."""
    holds: tuple[Pending, ...] = ()
    """The reservations still pending, oldest first (what the permit reads back)."""

    @classmethod
    def of(
        cls,
        spec: FederationSpec,
        snapshots: Mapping[str, ClusterSnapshot],
        now: datetime,
        *,
        cooldowns: Mapping[str, datetime] | None = None,
        holds: Iterable[Pending] = (),
        waiting: Sequence[WaitingTask] = (),
        spent: Mapping[str, float] | None = None,
        egress_gb: Mapping[str, float] | None = None,
        quotas: Mapping[str, Mapping[str, ResourceList]] | None = None,
    ) -> FixedState:
        """The inputs from records: ``holds`` are the reservations still pending (oldest first)."""
        holds = tuple(holds)
        reservations, in_flight, by_tenant = in_flight_of(holds)
        tenancy = tenant_inputs(spec, snapshots, by_tenant, waiting=waiting, spent=spent, egress_gb=egress_gb)
        view = FederationView(
            snapshots=dict(snapshots),
            cooldowns=dict(cooldowns or {}),
            reservations=reservations,
            now=now,
            tenancy=tenancy,
            in_flight=in_flight,
        )
        return cls(spec, view, dict(quotas or {}), holds)

    def cycle(self, engine: FederationEngine) -> PlacementCycle:
        """The placement cycle over these records, holding nothing."""
        return PlacementCycle(engine, self, self)

    # StateView
    def view(self, clusters: Sequence[str], namespace: str | None, now: datetime | None) -> FederationView:
        return self.inputs if now is None else replace(self.inputs, now=now)

    def hard_quotas(self, cluster: str) -> Mapping[str, ResourceList]:
        return self.quotas.get(cluster, {})

    # Ledger
    def reserve(
        self,
        cluster: str,
        request: TaskRequest,
        placement_id: str,
        policy: PolicySpec | None,
        now: datetime | None,
    ) -> bool:
        return True

    def permit(
        self, request: TaskRequest, placement_id: str, cluster: str, now: datetime | None
    ) -> str | None:
        inputs = self.inputs
        tenancy = inputs.tenancy or TenantInputs()
        held = Pending(now or inputs.now, placement_id, cluster, request.tenant, dict(request.resources))
        return tenant_permit(
            self.spec,
            request,
            placement_id,
            cluster,
            inputs.snapshots,
            sorted([*self.holds, held], key=lambda h: (h.at, h.placement_id)),
            waiting=tenancy.waiting,
            spent=tenancy.spent,
            egress_gb=tenancy.egress_gb,
        )

    def release(self, cluster: str, placement_id: str) -> None:
        return None

    def record(self, request: TaskRequest, placement_id: str, decision: Decision) -> None:
        return None
