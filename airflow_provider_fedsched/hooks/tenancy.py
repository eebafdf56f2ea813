"""The tenant rules' inputs from shared state, and what a placement leaves there for the next decisions.

* Usage: each tenant's pods in the members' snapshots (``fedsched.io/tenant`` label, bound pods) plus its
  reservations not yet seen in a snapshot: the federation's own records, read the same by every worker.
* Admission across workers: two workers deciding at the same instant both read the same usage. Each
  hold names the holds its writer saw just before writing it. After holding its reservation, a worker
  lets concurrent holds land (the backend's settle time), reads the reservations back and keeps its own
  only if the tenant stays within its quota counting every hold but those written after it that saw it
  (``federation/cycle.counted_holds``): of holds kept at once, the last written counted all the others,
  however slow a write, so they never over-admit. Holds written at about the same time count each other;
  a refused one is written again after a random pause, having seen them, before the placement waits.
* Waiting tasks (fair share) and each attempt's charge (budgets, the cost report), in ``state/tenants.py``.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from airflow_provider_fedsched.federation.cycle import (
    Pending,
    budget_periods,
    concurrent_holds,
    permit_checks,
    tenant_inputs,
    tenant_permit,
)
from airflow_provider_fedsched.federation.reclaim import (
    ROOM_REFUSED_BY,
    BorrowingPod,
    entitled_by,
    plan_reclaim,
)
from airflow_provider_fedsched.federation.resources import ResourceList
from airflow_provider_fedsched.federation.tenancy import TenantInputs, WaitingTask, period_start
from airflow_provider_fedsched.hooks import metrics
from airflow_provider_fedsched.kube.clients import run_in_background
from airflow_provider_fedsched.kube.reclaim import aborrowing_pods, aevict

if TYPE_CHECKING:
    from airflow_provider_fedsched.federation.decision import Decision
    from airflow_provider_fedsched.federation.request import TaskRequest
    from airflow_provider_fedsched.federation.snapshot import ClusterSnapshot
    from airflow_provider_fedsched.hooks.parts import HookParts

PendingByTenant = Mapping[str, list[tuple[datetime, str, ResourceList]]]


def _stored(hook: HookParts) -> dict[str, ClusterSnapshot]:
    """The newest stored snapshot of every member, however old (usage is counted from them)."""
    return {c.name: s for c in hook.spec.clusters if (s := hook.stored_snapshot(c.name)) is not None}


def inputs(
    hook: HookParts,
    snapshots: Mapping[str, ClusterSnapshot],
    pending: PendingByTenant,
    now: datetime,
    waiting: Sequence[WaitingTask] | None = None,
) -> TenantInputs | None:
    """Everything the tenant rules read, or None when the spec has no tenants (nothing is read);
    ``waiting``: the waiting list when the caller has read it already."""
    spec = hook.spec
    if not spec.tenants:
        return None
    starts = budget_periods(spec, now)
    spent, moved = hook.state.spend.totals(starts, now) if starts else ({}, {})
    return tenant_inputs(
        spec,
        snapshots,
        pending,
        waiting=hook.state.waiting.current(now) if waiting is None else waiting,
        spent=spent,
        egress_gb=moved,
    )


def note_decision(
    hook: HookParts, request: TaskRequest, placement_id: str, decision: Decision, now: datetime
) -> None:
    """A waiting task of a tenant is listed for fair share; placed or impossible, it is not any more."""
    if request.tenant is None or not hook.spec.tenants:
        return
    if decision.outcome != "wait":
        hook.state.waiting.remove(placement_id)
        return
    clusters = frozenset(r.cluster for r in decision.rejected if not r.permanent)
    hook.state.waiting.put(
        WaitingTask(placement_id, request.tenant, dict(request.resources), clusters, now), now
    )


ADMISSION_ROUNDS = 3
"""Reads back of one hold at most: a hold refused only because others were written at about the same
time is written again (each round a little later, at random) before the placement gives up and waits."""


def seen_before_hold(hook: HookParts, request: TaskRequest, cluster: str, now: datetime) -> list[str]:
    """Right before a hold of ``request`` on ``cluster`` is written: the ``write`` tokens of the holds it
    comes after (those its admission counts), of its tenant or on that cluster; none without tenants."""
    if request.tenant is None or not hook.spec.tenants:
        return []
    return _tokens(hook.state.reservations.holds({}, now), request, cluster)


def _tokens(holds: Iterable[Pending], request: TaskRequest, cluster: str) -> list[str]:
    """The ``write`` tokens of ``holds`` a hold of ``request`` on ``cluster`` is judged with."""
    return [h.write for h in holds if h.write and (h.tenant == request.tenant or h.cluster == cluster)]


def admitted(
    hook: HookParts, request: TaskRequest, placement_id: str, cluster: str, now: datetime
) -> str | None:
    """After holding ``placement_id`` on ``cluster``: the placement cycle's permit
    (``federation/cycle.py``, :func:`tenant_permit`) over every hold read back from shared state once
    concurrent holds of other workers had the backend's settle time to land. Holds written at about the
    same time count each other, so all of them may be refused: the hold is then written again after a
    random pause, having seen them, up to :data:`ADMISSION_ROUNDS` reads."""
    if request.tenant is None or not hook.spec.tenants:
        return None
    waiting = hook.state.waiting.current(now)
    check_quota, check_share = permit_checks(hook.spec, request, cluster, waiting)
    if not (check_quota or check_share):
        return None
    settle = hook.state.backend.consistency.settle_seconds
    starts = budget_periods(hook.spec, now) if check_share else {}
    spent, moved = hook.state.spend.totals(starts, now) if starts else ({}, {})
    for round_ in range(1, ADMISSION_ROUNDS + 1):
        if settle:
            time.sleep(settle)  # let holds made at the same instant by other workers land
        snapshots = _stored(hook)
        holds = hook.state.reservations.holds(snapshots, now)
        refused = tenant_permit(
            hook.spec,
            request,
            placement_id,
            cluster,
            snapshots,
            holds,
            waiting=waiting,
            spent=spent,
            egress_gb=moved,
        )
        own = next((h for h in holds if h.placement_id == placement_id and h.cluster == cluster), None)
        if refused is None or own is None or round_ == ADMISSION_ROUNDS:
            return refused
        if not any(
            hold.tenant == request.tenant or hold.cluster == cluster for hold in concurrent_holds(holds, own)
        ):
            return refused
        time.sleep(random.uniform(1.0, 3.0) * max(settle, 0.01))
        hook.state.reservations.hold(
            cluster,
            request.resources,
            now,
            placement_id,
            tenant=request.tenant,
            after=_tokens((h for h in holds if h is not own), request, cluster),  # read before this write
        )
    return None  # pragma: no cover - the last round returns


RECLAIM_TIMEOUT = 5.0
"""Seconds for listing one cluster's borrowing pods, and for each eviction."""


def reclaim(hook: HookParts, request: TaskRequest, decision: Decision) -> str | None:
    """A waiting task of a tenant within its ``guaranteed`` share gets borrowed capacity back: the
    borrowing pods ``federation/reclaim.py`` picks are evicted (their preemptible tasks move). Returns what
    was done, for the decision's record; None when nothing was."""
    if decision.outcome != "wait" or request.tenant is None or not hook.spec.tenants:
        return None
    if not hook.spec.tenant(request.tenant).guaranteed_units:
        return None
    clusters = sorted(
        {r.cluster for r in decision.rejected if r.plugin == ROOM_REFUSED_BY and not r.permanent}
    )
    if not clusters:
        return None
    view = hook.view(clusters, request.namespace)
    inputs = view.tenancy
    borrowers = set(inputs.borrowed) - {request.tenant} if inputs is not None else set()
    if inputs is None or not borrowers or entitled_by(hook.spec, request, inputs) is None:
        return None
    # Judged on fresh snapshots, as the pods are listed now: a stale snapshot still showing pods given
    # back earlier would have more of them moved.
    hook.collect(clusters)
    view = hook.view(clusters, request.namespace)
    inputs = view.tenancy
    if inputs is None:
        return None

    async def listed() -> list[BorrowingPod]:
        found: list[BorrowingPod] = []
        for cluster in clusters:
            try:
                found += await aborrowing_pods(hook.access(cluster), borrowers, RECLAIM_TIMEOUT)
            except Exception as exc:  # a cluster that does not answer gives nothing back now
                hook.log.info("Cannot list borrowing pods in %s: %s", cluster, exc)
        return found

    plan = plan_reclaim(hook.spec, request, decision, inputs, view.snapshots, run_in_background(listed()))
    if plan is None:
        return None
    access = hook.access(plan.cluster)

    async def evicted() -> list[str | None]:
        return [await aevict(access, p.namespace, p.name, RECLAIM_TIMEOUT) for p in plan.pods]

    refused = [
        f"{pod.namespace}/{pod.name}: {why}"
        for pod, why in zip(plan.pods, run_in_background(evicted()), strict=True)
        if why is not None
    ]
    metrics.reclaimed(len(plan.pods) - len(refused), plan.cluster, request.tenant)
    done = plan.reason + (f" (not evicted: {'; '.join(refused)})" if refused else "")
    hook.log.warning("Reclaim: %s", done)
    return done


def summary(hook: HookParts, now: datetime) -> list[dict[str, Any]]:
    """Per tenant: quota, guaranteed, use, borrowed, waiting tasks, weight and spend this period (the
    Tenants view and ``fedsched tenants``), in human quantities."""
    from airflow_provider_fedsched.federation.resources import format_quantity

    spec = hook.spec
    snapshots = _stored(hook)
    _, pending = hook.state.reservations.pending_by(snapshots, now)
    found = inputs(hook, snapshots, pending, now) or TenantInputs()
    waiting: dict[str, int] = {}
    for task in found.waiting:
        waiting[task.tenant] = waiting.get(task.tenant, 0) + 1
    starts = {t.name: period_start(t.budget.period if t.budget else "month", now) for t in spec.tenants}
    spent, moved = hook.state.spend.totals(starts, now)

    def human(values: Mapping[str, int]) -> dict[str, str]:
        return {name: format_quantity(name, amount) for name, amount in sorted(values.items())}

    rows = []
    for tenant in spec.tenants:
        budget = tenant.budget
        rows.append(
            {
                "tenant": tenant.name,
                "weight": tenant.weight,
                "reclaimable": tenant.reclaimable,
                "quota": human(tenant.quota_units),
                "guaranteed": human(tenant.guaranteed_units),
                "used": human(found.usage.get(tenant.name, {})),
                "borrowed": human(found.borrowed.get(tenant.name, {})),
                "waiting": waiting.get(tenant.name, 0),
                "period": budget.period if budget else "month",
                "cost": round(spent.get(tenant.name, 0.0), 6),
                "egress_gb": round(moved.get(tenant.name, 0.0), 6),
                "max_cost": budget.max_cost if budget else None,
                "max_egress_gb": budget.max_egress_gb if budget else None,
            }
        )
    return rows
