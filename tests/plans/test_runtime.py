"""Plan storage, the run-time lookup and the forecast read from shared state (no cluster, no Airflow DB)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pendulum
import pytest

from airflow_provider_fedsched.federation import FederationEngine
from airflow_provider_fedsched.federation.plan import Plan, plan_from_decision
from airflow_provider_fedsched.hooks.federation import FederationHook
from airflow_provider_fedsched.state import FederationState, MemoryStateBackend
from tests.federation.helpers import cluster, request, snapshot, spec

SPEC = spec([cluster("east", prices={"cpu_hour": 0.01}), cluster("west", prices={"cpu_hour": 0.02})])
REQUEST = request({"cpu": "1"})
LOGICAL = datetime(2030, 1, 1, 6, 0, tzinfo=UTC)


@pytest.fixture
def hook() -> FederationHook:
    state = FederationState(MemoryStateBackend(), federation=SPEC.name)
    now = datetime.now(UTC)
    for name in ("east", "west"):
        state.snapshots.put([snapshot(name).model_copy(update={"observed_at": now})])
    return FederationHook(SPEC, state=state)


def make_plan(hook: FederationHook, logical: datetime = LOGICAL, **changes: object) -> Plan:
    now = datetime.now(UTC)
    decision = FederationEngine(SPEC).decide(REQUEST, hook.state.snapshots.newest(["east", "west"]), now=now)
    plan = plan_from_decision(
        decision, dag_id="d", task_id="t", logical_date=logical, run_after=logical,
        valid_until=now + timedelta(hours=1), request=REQUEST, policy=None, forecast=None,
    )  # fmt: skip
    assert plan is not None
    return plan.model_copy(update=changes)


def test_plans_get_one_key_per_run_and_list_by_dag(hook: FederationHook) -> None:
    first, second = make_plan(hook), make_plan(hook, LOGICAL + timedelta(hours=1))
    other = make_plan(hook, dag_id="d2")
    for plan in (first, second, other):
        hook.put_plan(plan)
    assert hook.get_plan("d", "t", LOGICAL) == first
    # The same instant in another zone is the same run.
    assert hook.get_plan("d", "t", pendulum.instance(LOGICAL).in_timezone("Asia/Shanghai")) == first
    assert hook.plans("d") == [first, second]
    assert len(hook.plans()) == 3
    assert hook.plans("d2") == [other] and hook.plans("d2x") == []
    hook.delete_plan(first)
    assert hook.get_plan("d", "t", LOGICAL) is None


def test_a_valid_stored_plan_is_used(hook: FederationHook) -> None:
    hook.put_plan(make_plan(hook))
    decision, why = hook.planned_decision(
        REQUEST, dag_id="d", task_id="t", logical_date=LOGICAL, exclude={}, policy=None
    )
    assert why == "" and decision is not None and decision.cluster == "east"
    assert "from plan computed at" in decision.reason


def test_why_no_plan_is_used(hook: FederationHook) -> None:
    def ask(logical: datetime | None = LOGICAL, **kwargs: object) -> str:
        args = {
            "dag_id": "d",
            "task_id": "t",
            "logical_date": logical,
            "exclude": {},
            "policy": None,
            **kwargs,
        }
        decision, why = hook.planned_decision(REQUEST, **args)  # type: ignore[arg-type]
        assert decision is None
        return why

    assert ask(None) == "the run has no logical date"
    assert ask() == "no plan for this task and logical date"
    hook.put_plan(make_plan(hook, valid_until=datetime.now(UTC) - timedelta(seconds=1)))
    assert ask().startswith("the plan expired at")
    hook.put_plan(make_plan(hook))
    assert ask(exclude={"east": "x", "west": "y"}).startswith("no planned cluster passes the rules now")
    hook.state.backend.set(hook.state.plans.key("d", "t", LOGICAL), {"clusters": "nonsense"})
    assert ask().startswith("the stored plan is unreadable")


def test_forecast_is_neutral_without_history_and_biases_with_it(hook: FederationHook) -> None:
    now = datetime.now(UTC)
    assert hook.forecast_idle(now, now + timedelta(hours=1)) is None
    for step in range(12):
        at = (now - timedelta(minutes=15 * (12 - step))).isoformat()
        hook.record("east", "utilization", {"at": at, "used_fraction": {"cpu": 0.9, "memory": 0.5}})
        hook.record("west", "utilization", {"at": at, "used_fraction": {"cpu": 0.2, "memory": 0.1}})
    # History alone is not read at run time (one read per cluster is too slow for a task's start): the
    # planner fits the models and stores them together.
    assert hook.forecast_idle(now, now + timedelta(minutes=30)) is None
    hook.fold_profiles()
    forecast = hook.forecast_idle(now, now + timedelta(minutes=30))
    assert forecast is not None
    assert forecast["east"] == pytest.approx(0.1, abs=0.05)
    assert forecast["west"] == pytest.approx(0.8, abs=0.05)


def test_profiles_are_folded_into_state_once(hook: FederationHook) -> None:
    now = datetime.now(UTC)
    for step in range(8):
        at = (now - timedelta(hours=8 - step)).isoformat()
        hook.record("east", "utilization", {"at": at, "used_fraction": {"cpu": 0.5}})
    models = hook.fold_profiles()
    assert set(models) == {"east"}
    stored = hook.state.forecasts.get_profile("east")
    assert stored is not None and sum(stored["resources"]["cpu"]["count"]) == 8
    hook.fold_profiles()  # the same history again: nothing folded twice
    stored = hook.state.forecasts.get_profile("east")
    assert stored is not None and sum(stored["resources"]["cpu"]["count"]) == 8
