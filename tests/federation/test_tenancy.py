"""Tenant rules through the engine: quota waits with the reason, borrowing, fair share, budgets, and that
no sovereignty or fit rule is ever traded for any of them."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_provider_fedsched.federation import FederationEngine, SpecError
from airflow_provider_fedsched.federation.costs import attempt_cost, decision_costs, estimate
from airflow_provider_fedsched.federation.tenancy import TenantInputs, WaitingTask, period_start
from tests.federation.helpers import GPU, NOW, cluster, node, request, snapshot, spec

TENANTS: list[dict[str, Any]] = [
    {"name": "team-ml", "quota": {GPU: 64, "cpu": "256", "pods": 10}, "weight": 3},
    {"name": "team-bi", "quota": {"cpu": "64"}, "weight": 1},
]


def gpu_federation(**extra: Any) -> Any:
    return spec(
        [cluster("north-gpu", "eu"), cluster("south", "us")],
        [{"name": "eu-data", "cluster": "north-gpu", "size_gb": 100, "allowed_regions": ["eu"]}],
        tenants=extra.pop("tenants", TENANTS),
        **extra,
    )


def snapshots() -> dict[str, Any]:
    big = {"cpu": "96", "memory": "256Gi", GPU: "8"}
    return {
        "north-gpu": snapshot("north-gpu", [node(f"n{i}", big) for i in range(4)]),
        "south": snapshot("south", [node(f"s{i}", big) for i in range(4)]),
    }


def test_over_quota_waits_with_the_tenants_use_in_the_reason() -> None:
    engine = FederationEngine(gpu_federation())
    inputs = TenantInputs(usage={"team-ml": {GPU: 60, "cpu": 10_000, "pods": 5}})
    decision = engine.decide(
        request({"cpu": "1", GPU: "8"}, tenant="team-ml"), snapshots(), now=NOW, tenancy=inputs
    )
    assert decision.outcome == "wait"
    assert {r.plugin for r in decision.rejected} == {"TenantQuota"}
    assert "team-ml uses 60/64 nvidia.com/gpu" in decision.reason

    # Four GPUs still fit the quota: placed.
    fits = engine.decide(
        request({"cpu": "1", GPU: "4"}, tenant="team-ml"), snapshots(), now=NOW, tenancy=inputs
    )
    assert fits.outcome == "placed"


def test_concurrent_pods_are_a_quota_too() -> None:
    engine = FederationEngine(gpu_federation())
    inputs = TenantInputs(usage={"team-ml": {"pods": 10}})
    decision = engine.decide(request(tenant="team-ml"), snapshots(), now=NOW, tenancy=inputs)
    assert decision.outcome == "wait"
    assert "team-ml uses 10/10 pods" in decision.reason


def test_a_request_above_the_quota_itself_is_impossible_not_a_wait() -> None:
    engine = FederationEngine(gpu_federation())
    decision = engine.decide(request({"cpu": "65"}, tenant="team-bi"), snapshots(), now=NOW)
    assert decision.outcome == "impossible"
    assert "the task asks 65 cpu, above team-bi's quota of 64" in decision.rejected[0].reason


def test_a_task_of_no_tenant_and_an_unknown_tenant() -> None:
    engine = FederationEngine(gpu_federation())
    inputs = TenantInputs(usage={"team-ml": {GPU: 64}})
    assert engine.decide(request({GPU: "8"}), snapshots(), now=NOW, tenancy=inputs).outcome == "placed"
    with pytest.raises(
        SpecError, match=r"request.tenant: unknown tenant 'team-x' \(known: team-bi, team-ml\)"
    ):
        engine.decide(request(tenant="team-x"), snapshots(), now=NOW)


def test_quota_never_trades_sovereignty_or_fit() -> None:
    engine = FederationEngine(gpu_federation())
    # eu-data may only be processed in eu: south stays out for good, whatever the quota says.
    decision = engine.decide(
        request({GPU: "8"}, tenant="team-ml", datasets=["eu-data"]),
        snapshots(),
        now=NOW,
        tenancy=TenantInputs(usage={"team-ml": {GPU: 60}}),
    )
    by_cluster = {r.cluster: r for r in decision.rejected}
    assert by_cluster["south"].plugin == "Sovereignty" and by_cluster["south"].permanent
    assert by_cluster["north-gpu"].plugin == "TenantQuota" and not by_cluster["north-gpu"].permanent
    # Within quota, a request no node could ever hold is still impossible.
    never = engine.decide(request({GPU: "9"}, tenant="team-ml"), snapshots(), now=NOW)
    assert never.outcome == "impossible"
    assert {r.plugin for r in never.rejected} == {"Capacity"}


def test_a_policy_cannot_turn_the_tenant_rules_off() -> None:
    fed = gpu_federation()
    for name in ("TenantQuota", "Budget", "FairShare"):
        with pytest.raises(SpecError, match="mandatory"):
            fed.policy.merged({"filters": [f for f in fed.policy.filters if f != name]})


def test_reclaimable_preemptible_tasks_borrow_idle_quota_of_others() -> None:
    tenants = [
        {"name": "team-ml", "quota": {GPU: 16}, "reclaimable": True},
        {"name": "team-cv", "quota": {GPU: 16}, "guaranteed": {GPU: 8}},
    ]
    engine = FederationEngine(gpu_federation(tenants=tenants))
    inputs = TenantInputs(usage={"team-ml": {GPU: 16}, "team-cv": {GPU: 4}})
    borrow = request({GPU: "8"}, tenant="team-ml", preemptible=True)
    assert engine.decide(borrow, snapshots(), now=NOW, tenancy=inputs).outcome == "placed"
    # A non-preemptible task never borrows: it could not be given back.
    solid = request({GPU: "8"}, tenant="team-ml")
    assert "team-ml uses 16/16" in engine.decide(solid, snapshots(), now=NOW, tenancy=inputs).reason
    # What team-cv leaves idle (12) minus what others borrow already bounds the borrowing.
    more = TenantInputs(usage={"team-ml": {GPU: 24}, "team-cv": {GPU: 4}}, borrowed={"team-ml": {GPU: 8}})
    assert engine.decide(borrow, snapshots(), now=NOW, tenancy=more).outcome == "wait"
    # team-cv itself is never held back by what team-ml borrowed: its own quota has room.
    lender = request({GPU: "8"}, tenant="team-cv")
    assert engine.decide(lender, snapshots(), now=NOW, tenancy=more).outcome == "placed"


def waiting(tenant: str, gpus: int, clusters: tuple[str, ...] = ("north-gpu", "south")) -> WaitingTask:
    return WaitingTask(
        f"p-{tenant}-{gpus}", tenant, {GPU: gpus}, frozenset(clusters), NOW - timedelta(minutes=1)
    )


def one_free_slot() -> dict[str, Any]:
    """North has 8 GPUs free on one node, south none."""
    busy = {GPU: "8"}
    shape = {"cpu": "64", "memory": "256Gi", GPU: "8"}
    return {
        "north-gpu": snapshot("north-gpu", [node("n0", shape), node("n1", shape, busy)]),
        "south": snapshot("south", [node("s0", shape, busy)]),
    }


def test_fair_share_the_most_under_served_tenant_by_weight_goes_first() -> None:
    tenants = [{"name": "team-a", "weight": 3}, {"name": "team-b", "weight": 1}]
    engine = FederationEngine(gpu_federation(tenants=tenants))
    capacity = {GPU: 24}
    # team-a holds 12/24 = 0.5 (/3 = 0.167); team-b holds 6/24 = 0.25 (/1 = 0.25): team-a is further below.
    inputs = TenantInputs(
        usage={"team-a": {GPU: 12}, "team-b": {GPU: 6}}, waiting=(waiting("team-a", 8),), capacity=capacity
    )
    b = engine.decide(request({GPU: "8"}, tenant="team-b"), one_free_slot(), now=NOW, tenancy=inputs)
    assert b.outcome == "wait"
    (north,) = [r for r in b.rejected if r.cluster == "north-gpu"]
    assert north.plugin == "FairShare" and "team-a is further below its weighted share" in north.reason
    # team-a's own waiting task takes the room.
    a = engine.decide(request({GPU: "8"}, tenant="team-a"), one_free_slot(), now=NOW, tenancy=inputs)
    assert a.cluster == "north-gpu"
    # Once team-a is above its weighted share, team-b goes first.
    flipped = TenantInputs(
        usage={"team-a": {GPU: 20}, "team-b": {GPU: 2}}, waiting=(waiting("team-a", 8),), capacity=capacity
    )
    assert engine.decide(
        request({GPU: "8"}, tenant="team-b"), one_free_slot(), now=NOW, tenancy=flipped
    ).placed


def test_fair_share_yields_only_room_the_waiting_task_could_take() -> None:
    tenants = [{"name": "team-a", "weight": 3}, {"name": "team-b", "weight": 1}]
    engine = FederationEngine(gpu_federation(tenants=tenants))
    usage = {"team-a": {GPU: 1}, "team-b": {GPU: 6}}
    # team-a waits for south only (sovereignty, say): north's room is not its to take.
    elsewhere = TenantInputs(usage=usage, waiting=(waiting("team-a", 8, ("south",)),), capacity={GPU: 24})
    assert engine.decide(
        request({GPU: "8"}, tenant="team-b"), one_free_slot(), now=NOW, tenancy=elsewhere
    ).placed
    # team-a waits for 16 GPUs that north does not have free: team-b's 8 take nothing from it.
    too_big = TenantInputs(usage=usage, waiting=(waiting("team-a", 16),), capacity={GPU: 24})
    assert engine.decide(
        request({GPU: "8"}, tenant="team-b"), one_free_slot(), now=NOW, tenancy=too_big
    ).placed
    # A small task that leaves room for team-a's waiting one goes ahead too.
    small = TenantInputs(usage=usage, waiting=(waiting("team-a", 4),), capacity={GPU: 24})
    assert engine.decide(request({GPU: "4"}, tenant="team-b"), one_free_slot(), now=NOW, tenancy=small).placed


def test_task_budgets_are_hard_and_say_why() -> None:
    engine = FederationEngine(gpu_federation())
    # 8 GPUs x 2.0/h x 1 h = 16.00 of compute on either cluster.
    cheap = engine.decide(request({GPU: "8"}, max_cost=10.0), snapshots(), now=NOW)
    assert cheap.outcome == "impossible"
    assert all(r.plugin == "Budget" for r in cheap.rejected)
    assert "estimated cost 16.00 is above the task's max_cost 10" in cheap.rejected[0].reason
    moved = spec([cluster("a"), cluster("b")], [{"name": "big", "cluster": "a", "size_gb": 1000}])
    decision = FederationEngine(moved).decide(
        request(datasets=["big"], max_egress_gb=10), {"a": snapshot("a"), "b": snapshot("b")}, now=NOW
    )
    assert decision.cluster == "a"
    (b,) = decision.rejected
    assert (b.plugin, b.permanent) == ("Budget", True)
    assert "it would move 1000 GB of data, above the task's max_egress_gb 10" in b.reason


def test_tenant_period_budget_waits_for_the_next_period_or_is_impossible() -> None:
    tenants = [{"name": "team-bi", "budget": {"period": "day", "max_cost": 20.0, "max_egress_gb": 50}}]
    engine = FederationEngine(gpu_federation(tenants=tenants))
    spent = TenantInputs(spent={"team-bi": 15.0})
    task = request({"cpu": "1", GPU: "4"}, tenant="team-bi")  # 4 x 2.0 + 0.04 = 8.04
    decision = engine.decide(task, snapshots(), now=NOW, tenancy=spent)
    assert decision.outcome == "wait"
    assert "team-bi spent 15.00 of its 20 budget this day; this task would cost ~8.04 here" in decision.reason
    assert engine.decide(task, snapshots(), now=NOW, tenancy=TenantInputs(spent={"team-bi": 5.0})).placed
    never = engine.decide(
        request({GPU: "8"}, tenant="team-bi", expected_duration_seconds=7200), snapshots(), now=NOW
    )
    assert never.outcome == "impossible"


def test_cost_figures_against_a_hand_computed_example() -> None:
    fed = spec(
        [
            cluster(
                "a", prices={"cpu_hour": 0.05, "memory_gib_hour": 0.01, "gpu_hour": 2.5, "egress_gb": 0.09}
            ),
            cluster(
                "b", prices={"cpu_hour": 0.03, "memory_gib_hour": 0.004, "gpu_hour": 1.8, "egress_gb": 0.12}
            ),
        ],
        [{"name": "logs", "cluster": "a", "size_gb": 200}],
    )
    task = request(
        {"cpu": "4", "memory": "16Gi", GPU: "1"}, datasets=["logs"], expected_duration_seconds=1800
    )
    # On a: (4 x 0.05 + 16 x 0.01 + 2.5) x 0.5 h = 1.43; no egress (the data is on a).
    on_a = estimate(fed, task, "a")
    assert (round(on_a.compute, 6), on_a.egress_gb, on_a.egress_cost) == (1.43, 0.0, 0.0)
    # On b: (4 x 0.03 + 16 x 0.004 + 1.8) x 0.5 = 0.992 compute; 200 GB leave a at 0.09 = 18.00 egress.
    on_b = estimate(fed, task, "b")
    assert (round(on_b.compute, 6), on_b.egress_gb, round(on_b.egress_cost, 6)) == (0.992, 200.0, 18.0)
    # A failed attempt of 10 minutes on b: compute for 10 minutes, the data moved all the same.
    assert attempt_cost(fed, task, "b", 600) == {
        "cost": round(0.992 / 3 + 18.0, 6),
        "compute_cost": round(0.992 / 3, 6),
        "egress_gb": 200.0,
        "egress_cost": 18.0,
    }
    gpu_node = {"cpu": "16", "memory": "64Gi", GPU: "1"}
    both = {name: snapshot(name, [node(f"{name}0", gpu_node)]) for name in ("a", "b")}
    decision = FederationEngine(fed).decide(task, both, now=NOW)
    assert len(decision.candidates) == 2
    costs = decision_costs(fed, task, decision)
    assert costs["estimate"]["cluster"] == decision.cluster
    assert costs["cheapest_compliant"] == {**on_a.to_dict(), "cluster": "a"}


def test_budget_periods_start_in_utc() -> None:
    moment = NOW.replace(day=12, hour=15)  # Thursday 12 June 2025
    assert period_start("day", moment).isoformat() == "2025-06-12T00:00:00+00:00"
    assert period_start("week", moment).isoformat() == "2025-06-09T00:00:00+00:00"
    assert period_start("month", moment).isoformat() == "2025-06-01T00:00:00+00:00"


def test_tenant_spec_errors_name_the_field() -> None:
    base = [cluster("a")]
    with pytest.raises(SpecError, match=r"tenants\[1\].name: duplicate tenant name 'x'"):
        spec(base, tenants=[{"name": "x"}, {"name": "x"}])
    with pytest.raises(SpecError, match=r"tenant_mapping.owners.alice: unknown tenant 'y' \(known: x\)"):
        spec(base, tenants=[{"name": "x"}], tenant_mapping={"owners": {"alice": "y"}})
    with pytest.raises(SpecError, match=r"tenants\[0\].weight"):
        spec(base, tenants=[{"name": "x", "weight": 0}])
    with pytest.raises(SpecError, match=r"tenants\[0\].quota: .*'lots' is not a Kubernetes quantity"):
        spec(base, tenants=[{"name": "x", "quota": {"cpu": "lots"}}])
    mapped = spec(
        base,
        tenants=[{"name": "x"}, {"name": "y"}],
        tenant_mapping={"owners": {"al": "x"}, "tags": {"ml": "y"}, "default": "x"},
    )
    assert mapped.tenant_mapping.tenant_for("al", ["ml"]) == "x"
    assert mapped.tenant_mapping.tenant_for("bo", ["etl", "ml"]) == "y"
    assert mapped.tenant_mapping.tenant_for(None, []) == "x"


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    spent=st.floats(0, 40),
    max_cost=st.one_of(st.none(), st.floats(0, 40)),
    moved=st.floats(0, 200),
    max_egress=st.one_of(st.none(), st.floats(0, 200)),
    gpus=st.integers(0, 8),
    hours=st.floats(0.1, 4),
    used_gpus=st.integers(0, 70),
    task_cap=st.one_of(st.none(), st.floats(0, 40)),
    reads=st.booleans(),
    waiting=st.integers(0, 3),
)
def test_skipped_tenant_rules_never_change_a_decision(
    spent: float,
    max_cost: float | None,
    moved: float,
    max_egress: float | None,
    gpus: int,
    hours: float,
    used_gpus: int,
    task_cap: float | None,
    reads: bool,
    waiting: int,
) -> None:
    """The engine does not call a tenant rule per cluster when its ``skip`` says there is nothing to
    check (federation/framework.py ``Skips``): the decisions are exactly those of calling it everywhere."""
    import dataclasses

    budget: dict[str, Any] = {"period": "day"}
    if max_cost is not None:
        budget["max_cost"] = max_cost
    if max_egress is not None:
        budget["max_egress_gb"] = max_egress
    tenants = [
        {"name": "team-ml", "quota": {GPU: 64}, "weight": 3, "budget": budget},
        {"name": "team-bi", "quota": {"cpu": "64"}},
    ]
    skipping = FederationEngine(gpu_federation(tenants=tenants))
    calling = FederationEngine(gpu_federation(tenants=tenants))
    calling._profile = dataclasses.replace(calling._profile, skippers=frozenset())
    clusters = frozenset({"north-gpu", "south"})
    inputs = TenantInputs(
        usage={"team-ml": {GPU: used_gpus}, "team-bi": {"cpu": 1000}},
        spent={"team-ml": spent},
        egress_gb={"team-ml": moved},
        waiting=tuple(
            WaitingTask(f"w{i}", "team-bi", {"cpu": 1000 * (i + 1)}, clusters, NOW) for i in range(waiting)
        ),
        capacity={GPU: 64, "cpu": 768_000},
    )
    task = request(
        {"cpu": "1", GPU: str(gpus)},
        tenant="team-ml",
        expected_duration_seconds=hours * 3600,
        max_cost=task_cap,
        datasets=["eu-data"] if reads else [],
    )
    one = skipping.decide(task, snapshots(), now=NOW, tenancy=inputs).to_dict()
    other = calling.decide(task, snapshots(), now=NOW, tenancy=inputs).to_dict()
    assert one == other
