"""The what-if answer is the run-time answer: one placement cycle (``federation/cycle.py``).

For generated federations (members, prices, tenants with quotas and budgets), snapshots (nodes, tenant
pods, quota headroom, hard quota limits, unreachable members), reservations in flight, cooldowns (of a
cluster or of the task's namespace), waiting tasks and spend, ``fedsched place``'s computation
(:func:`cli.place.what_if` over the records as given) and the hook's (its placement cycle over shared
state it wrote them to, in memory, reservations in shared state only) answer the same: the cluster, the
verdict, the reason and every rejection with its reason.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_provider_fedsched.cli.place import what_if
from airflow_provider_fedsched.federation import ClusterSnapshot, TaskRequest, load_spec, parse_resource_list
from airflow_provider_fedsched.federation.cycle import FixedState, Pending
from airflow_provider_fedsched.federation.decision import Decision
from airflow_provider_fedsched.federation.tenancy import WaitingTask
from airflow_provider_fedsched.hooks.federation import FederationHook
from airflow_provider_fedsched.state import FederationState, MemoryStateBackend
from tests.federation.helpers import NOW, node

NAMESPACE = "default"
CPUS = ["500m", "1", "2", "4", "8", "16"]
TENANTS = ["team-a", "team-b"]


@pytest.fixture(autouse=True, scope="module")
def no_cluster_ledger() -> Iterator[None]:
    # These members do not run: the hook holds reservations in shared state only, as the what-if sees them.
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("AIRFLOW__FEDSCHED__PLACEMENT_LEDGER", "False")
        yield


@dataclass
class World:
    spec: dict[str, Any]
    snapshots: dict[str, ClusterSnapshot]
    hard: dict[str, dict[str, dict[str, int]]]
    holds: list[Pending]
    cooldowns: dict[str, tuple[datetime, str | None]]
    waiting: list[WaitingTask]
    charges: list[tuple[str, float]]
    request: TaskRequest


cpu = st.sampled_from(CPUS)


@st.composite
def worlds(draw: st.DrawFn) -> World:
    names = [f"c{i}" for i in range(draw(st.integers(1, 4)))]
    # Contended: team-a, using some of the federation, asks while team-b (using none) waits, so that fair
    # share and its permit have something to judge.
    contended = draw(st.booleans())
    tenants = []
    chosen = TENANTS if contended else draw(st.lists(st.sampled_from(TENANTS), unique=True, max_size=2))
    for name in chosen:
        tenant: dict[str, Any] = {"name": name, "weight": draw(st.sampled_from([1, 2]))}
        if draw(st.booleans()):
            tenant["quota"] = {"cpu": draw(st.sampled_from(["2", "8", "24"]))}
        if draw(st.booleans()):
            tenant["budget"] = {"period": "day", "max_cost": draw(st.sampled_from([0.5, 5.0, 100.0]))}
        tenant["reclaimable"] = draw(st.booleans())
        tenants.append(tenant)
    spec = {
        "name": "cycle",
        "clusters": [
            {
                "name": name,
                "conn_id": f"k8s_{name}",
                "region": draw(st.sampled_from(["r1", "r2"])),
                "prices": {"cpu_hour": draw(st.sampled_from([0.02, 0.04, 0.08]))},
            }
            for name in names
        ],
        "policy": {"snapshot_ttl_seconds": 3600},
        "tenants": tenants,
    }
    tenant_names = [t["name"] for t in tenants]
    snapshots: dict[str, ClusterSnapshot] = {}
    hard: dict[str, dict[str, dict[str, int]]] = {}
    for name in names:
        reachable = draw(st.integers(0, 9)) > 0
        nodes = [
            node(
                f"{name}-n{i}",
                {"cpu": draw(st.sampled_from(["4", "8", "16"])), "memory": "64Gi"},
                {"cpu": draw(cpu)},
            )
            for i in range(draw(st.integers(1, 3)))
        ]
        quota = {}
        if draw(st.booleans()):
            headroom = draw(st.sampled_from([0, 1000, 4000, 16000]))
            quota = {NAMESPACE: {"cpu": headroom}}
            hard[name] = {NAMESPACE: {"cpu": headroom + draw(st.sampled_from([0, 2000, 8000]))}}
        snapshots[name] = ClusterSnapshot(
            cluster=name,
            observed_at=NOW - timedelta(seconds=draw(st.integers(0, 60))),
            reachable=reachable,
            reason=None if reachable else "connection refused",
            nodes=nodes if reachable else [],
            quota_headroom=quota if reachable else {},
            tenants={
                t: {"cpu": 1000 * draw(st.integers(1 if contended else 0, 8)), "pods": 1}
                for t in tenant_names
                if (contended and t == "team-a") or (not contended and draw(st.booleans()))
            },
        )
    holds = sorted(
        (
            Pending(
                NOW - timedelta(seconds=draw(st.integers(0, 120))),
                f"r{index}",
                draw(st.sampled_from(names)),
                draw(st.sampled_from(["team-a", None] if contended else [None, *tenant_names])),
                {"cpu": 1000 * draw(st.integers(1, 8))},
            )
            for index in range(draw(st.integers(0, 3)))
        ),
        key=lambda hold: (hold.at, hold.placement_id),
    )
    cooldowns = {
        name: (NOW + timedelta(minutes=draw(st.integers(1, 30))), draw(st.sampled_from([None, NAMESPACE])))
        for name in draw(st.lists(st.sampled_from(names), unique=True))
    }
    waiting = [
        WaitingTask(
            f"w{index}",
            "team-b" if contended else draw(st.sampled_from(tenant_names)),
            {"cpu": 1000 * draw(st.integers(1, 8))},
            frozenset(draw(st.lists(st.sampled_from(names), unique=True, min_size=1))),
            NOW - timedelta(seconds=10 * index + 1),
        )
        for index in range(draw(st.integers(1 if contended else 0, 3)) if tenant_names else 0)
    ]
    charges = [(t, draw(st.sampled_from([0.1, 1.0, 10.0]))) for t in tenant_names if draw(st.booleans())]
    request = TaskRequest(
        resources=parse_resource_list({"cpu": draw(cpu), "memory": "2Gi"}),
        tenant="team-a" if contended else draw(st.sampled_from([None, *tenant_names])),
        namespace=NAMESPACE,
        preemptible=draw(st.booleans()),
        expected_duration_seconds=draw(st.sampled_from([60.0, 3600.0, 36000.0])),
    )
    return World(spec, snapshots, hard, holds, cooldowns, waiting, charges, request)


def answer(decision: Decision) -> tuple[Any, ...]:
    return (
        decision.outcome,
        decision.cluster,
        decision.reason,
        [(r.cluster, r.plugin, r.reason, r.permanent) for r in decision.rejected],
    )


def run_time(world: World) -> Decision:
    """The hook's answer: the records written to shared state, then its placement cycle."""
    spec = load_spec(world.spec)
    hook = FederationHook(spec, state=FederationState(MemoryStateBackend(), federation=spec.name))
    state = hook.state
    state.snapshots.put(world.snapshots.values())
    for cluster, limits in world.hard.items():
        state.quota_limits.put(cluster, limits)
    for hold in world.holds:
        state.reservations.hold(hold.cluster, hold.requests, hold.at, hold.placement_id, tenant=hold.tenant)
    for cluster, (until, namespace) in world.cooldowns.items():
        state.cooldowns.set(cluster, until, "generated", namespace=namespace)
    for task in world.waiting:
        state.waiting.put(task, NOW)
    for index, (tenant, cost) in enumerate(world.charges):
        state.spend.charge(
            f"p{index}", {"tenant": tenant, "cost": cost, "at": (NOW - timedelta(minutes=5)).isoformat()}
        )
    return hook.cycle.place(world.request, "task", now=NOW)


def asked(world: World) -> Decision:
    """``fedsched place``'s answer over the same records, as given."""
    spec = load_spec(world.spec)
    spent: dict[str, float] = {}  # this period's, of the tenants with a budget
    budgeted = {t.name for t in spec.tenants if t.budget is not None}
    for tenant, cost in world.charges:
        if tenant in budgeted:
            spent[tenant] = spent.get(tenant, 0.0) + cost
    state = FixedState.of(
        spec,
        world.snapshots,
        NOW,
        cooldowns={name: until for name, (until, _) in world.cooldowns.items()},
        holds=world.holds,
        waiting=world.waiting,
        spent=spent,
        egress_gb=dict.fromkeys(spent, 0.0),
        quotas=world.hard,
    )
    return what_if(world.request, state)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(world=worlds())
def test_the_what_if_answer_is_the_run_time_answer(world: World) -> None:
    assert answer(asked(world)) == answer(run_time(world))


def test_the_permit_judges_shares_as_the_decision_did_without_the_placement_itself() -> None:
    """team-a and team-b use nothing; team-b waits for 7 CPUs on c0 (which no node of c0 has). The
    decision places team-a's half CPU there (team-b is not further below its share). The permit used to
    count team-a's own hold in team-a's share, put team-b ahead of it and refuse the placement its
    decision allowed, at every try: the task waited as long as team-b's did."""
    spec = load_spec(
        {
            "name": "cycle",
            "clusters": [{"name": "c0", "conn_id": "k8s_c0", "region": "r1"}],
            "tenants": [{"name": "team-a"}, {"name": "team-b"}],
        }
    )
    nodes = [node(f"c0-n{i}", {"cpu": "4", "memory": "64Gi"}, {"cpu": "500m"}) for i in range(2)]
    waiting = [WaitingTask("w0", "team-b", {"cpu": 7000}, frozenset({"c0"}), NOW - timedelta(seconds=1))]
    state = FixedState.of(
        spec, {"c0": ClusterSnapshot(cluster="c0", observed_at=NOW, nodes=nodes)}, NOW, waiting=waiting
    )
    request = TaskRequest(resources={"cpu": 500}, tenant="team-a")
    decision = what_if(request, state)
    assert (decision.outcome, decision.cluster) == ("placed", "c0"), decision.reason
