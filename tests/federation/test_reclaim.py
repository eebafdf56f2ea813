"""Giving borrowed capacity back (federation/reclaim.py): whom a waiting lender may move, and whom never."""

from __future__ import annotations

from typing import Any

from airflow_provider_fedsched.federation import FederationEngine
from airflow_provider_fedsched.federation.reclaim import BorrowingPod, plan_reclaim
from airflow_provider_fedsched.federation.tenancy import TenantInputs
from tests.federation.helpers import NOW, cluster, node, request, snapshot, spec

TENANTS: list[dict[str, Any]] = [
    {"name": "team-a", "quota": {"cpu": "8"}, "guaranteed": {"cpu": "8"}},
    {"name": "team-b", "quota": {"cpu": "4"}, "reclaimable": True},
    {"name": "team-c", "quota": {"cpu": "8"}},
]
FEDERATION = spec(
    [cluster("east"), cluster("eu", "eu")],
    [{"name": "eu-only", "cluster": "eu", "size_gb": 1, "allowed_regions": ["eu"]}],
    tenants=TENANTS,
)


def full_snapshots() -> dict[str, Any]:
    """Two 4-cpu nodes per cluster, every cpu requested (by team-b's borrowing pods on east)."""
    return {
        name: snapshot(name, [node(f"{name}-n{i}", {"cpu": "4"}, {"cpu": "4"}) for i in range(2)])
        for name in ("east", "eu")
    }


def borrowing(
    count: int, node_name: str = "east-n0", tenant: str = "team-b", **extra: Any
) -> list[BorrowingPod]:
    return [
        BorrowingPod(
            "east",
            "default",
            f"{tenant}-{node_name}-{i}",
            node_name,
            tenant,
            {"cpu": 1000},
            100.0 + i,
            **extra,
        )
        for i in range(count)
    ]


TEAM_B_BORROWS = TenantInputs(usage={"team-b": {"cpu": 8000, "pods": 8}}, borrowed={"team-b": {"cpu": 4000}})


def plan(task: Any, inputs: TenantInputs = TEAM_B_BORROWS, pods: list[BorrowingPod] | None = None) -> Any:
    snapshots = full_snapshots()
    decision = FederationEngine(FEDERATION).decide(task, snapshots, now=NOW, tenancy=inputs)
    found = borrowing(4) + borrowing(4, "east-n1") if pods is None else pods
    return decision, plan_reclaim(FEDERATION, task, decision, inputs, snapshots, found)


def test_a_lender_within_its_guarantee_gets_the_newest_borrowed_pods_of_one_node_back() -> None:
    decision, reclaim = plan(request({"cpu": "2"}, tenant="team-a"))
    assert decision.outcome == "wait" and {r.plugin for r in decision.rejected} == {"NodeFit"}
    assert reclaim is not None and (reclaim.cluster, reclaim.node) == ("east", "east-n0")
    assert [p.name for p in reclaim.pods] == ["team-b-east-n0-3", "team-b-east-n0-2"]  # newest first
    assert "team-a is within its guaranteed cpu" in reclaim.reason and "team-b" in reclaim.reason


def test_never_more_of_a_tenant_than_it_borrows() -> None:
    """team-b borrows 1 cpu only: one pod may go, which is not room enough for 2 cpu."""
    inputs = TenantInputs(usage={"team-b": {"cpu": 5000}}, borrowed={"team-b": {"cpu": 1000}})
    assert plan(request({"cpu": "2"}, tenant="team-a"), inputs)[1] is None
    one = plan(request({"cpu": "1"}, tenant="team-a"), inputs)[1]
    assert one is not None and len(one.pods) == 1


def test_nothing_for_a_tenant_beyond_its_guarantee_or_without_one() -> None:
    over = TenantInputs(
        usage={"team-a": {"cpu": 7000}, "team-b": {"cpu": 8000}}, borrowed={"team-b": {"cpu": 4000}}
    )
    assert plan(request({"cpu": "2"}, tenant="team-a"), over)[1] is None
    assert plan(request({"cpu": "2"}, tenant="team-c"))[1] is None  # no guaranteed share
    assert plan(request({"cpu": "2"}))[1] is None  # no tenant


def test_no_rule_is_traded_for_it_and_no_one_else_is_moved() -> None:
    # Sovereign data on eu only: east is refused by Sovereignty, not by room, so nothing moves there.
    sovereign = plan(request({"cpu": "2"}, tenant="team-a", datasets=["eu-only"]))
    assert {r.plugin for r in sovereign[0].rejected} >= {"Sovereignty"} and sovereign[1] is None
    # Pods of a tenant within its quota (team-c) are never given back.
    assert plan(request({"cpu": "2"}, tenant="team-a"), pods=borrowing(4, tenant="team-c"))[1] is None


def test_no_second_wave_while_pods_given_back_are_leaving() -> None:
    leaving = borrowing(2, leaving=True) + borrowing(2, "east-n1")
    assert plan(request({"cpu": "2"}, tenant="team-a"), pods=leaving)[1] is None
