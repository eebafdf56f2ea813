"""Plan validation at run time: every hard rule of the engine, over the plan's clusters only."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_provider_fedsched.federation import FederationEngine, TaskRequest
from airflow_provider_fedsched.federation.plan import (
    Plan,
    plan_from_decision,
    request_fingerprint,
    validate_plan,
)
from tests.federation.helpers import NOW, cluster, node, request, snapshot, spec

SPEC = spec(
    [
        cluster("east", region="cn-east-1", prices={"cpu_hour": 0.01}),
        cluster("north", region="cn-north-1", prices={"cpu_hour": 0.02}),
        cluster("west", region="eu-west-1", prices={"cpu_hour": 0.03}),
    ],
    [{"name": "cn-data", "cluster": "east", "size_gb": 1, "allowed_regions": ["cn-east-1", "cn-north-1"]}],
)
ENGINE = FederationEngine(SPEC)
REQUEST = request({"cpu": "2", "memory": "4Gi"})
SNAPSHOTS = {name: snapshot(name) for name in ("east", "north", "west")}


def planned(req: TaskRequest = REQUEST, *, clusters: list[str] | None = None, **changes: object) -> Plan:
    """A plan made by the engine now (or naming ``clusters`` by hand, with correct fingerprints)."""
    decision = ENGINE.decide(req, SNAPSHOTS, now=NOW)
    plan = plan_from_decision(
        decision,
        dag_id="d",
        task_id="t",
        logical_date=NOW + timedelta(hours=1),
        run_after=NOW + timedelta(hours=1),
        valid_until=NOW + timedelta(hours=2),
        request=req,
        policy=None,
        forecast={"east": 0.5},
    )
    assert plan is not None
    if clusters is not None:
        changes["clusters"] = clusters
    return plan.model_copy(update=changes)


def check(plan: Plan, req: TaskRequest = REQUEST, **kwargs: object) -> tuple[object, str]:
    kwargs.setdefault("now", NOW)
    kwargs.setdefault("snapshots", SNAPSHOTS)
    snapshots = kwargs.pop("snapshots")
    engine = kwargs.pop("engine", ENGINE)
    return validate_plan(plan, engine, req, snapshots, **kwargs)  # type: ignore[arg-type]


def test_a_plan_ranks_the_engines_best_candidates() -> None:
    plan = planned()
    assert plan.clusters == ["east", "north", "west"]
    assert plan.forecast == {"east": 0.5}
    assert plan.spec_fingerprint == ENGINE.fingerprint


def test_a_valid_plan_places_on_its_primary_and_says_so() -> None:
    decision, why = check(planned())
    assert why == ""
    assert decision.cluster == "east"  # type: ignore[attr-defined]
    assert decision.reason.startswith("placed on east from plan computed at")  # type: ignore[attr-defined]
    assert decision.extra["plan"]["clusters"] == ["east", "north", "west"]  # type: ignore[attr-defined]


def test_primary_cooling_down_falls_back_to_the_next_planned_cluster() -> None:
    decision, _ = check(planned(), cooldowns={"east": NOW + timedelta(minutes=5)})
    assert decision.cluster == "north"  # type: ignore[attr-defined]
    assert "fallback #1" in decision.reason and "east: Cooldown" in decision.reason  # type: ignore[attr-defined]


def test_full_stale_excluded_or_unreachable_primaries_are_set_aside() -> None:
    full = {**SNAPSHOTS, "east": snapshot("east", [node("e0", requested={"cpu": "16", "memory": "1Gi"})])}
    stale = {**SNAPSHOTS, "east": snapshot("east", age_seconds=3600)}
    down = {**SNAPSHOTS, "east": snapshot("east", reachable=False)}
    for kwargs, plugin in (
        ({"snapshots": full}, "NodeFit"),
        ({"snapshots": stale}, "Freshness"),
        ({"snapshots": down}, "Reachable"),
        ({"exclude": {"east": "failed there"}}, "Excluded"),
    ):
        decision, _ = check(planned(), **kwargs)
        assert decision.cluster == "north", plugin  # type: ignore[attr-defined]
        assert f"east: {plugin}" in decision.reason  # type: ignore[attr-defined]


def test_no_valid_planned_cluster_returns_why() -> None:
    decision, why = check(planned(clusters=["east"]), cooldowns={"east": NOW + timedelta(minutes=5)})
    assert decision is None
    assert why.startswith("no planned cluster passes the rules now (east: Cooldown: cooling down until")


def test_versions_expiry_and_unknown_clusters_set_the_plan_aside() -> None:
    changed_spec = spec([cluster("east", region="cn-east-1"), cluster("north", region="cn-north-1")])
    assert check(planned(), engine=FederationEngine(changed_spec))[1] == (
        "the federation spec changed since the plan was computed"
    )
    bigger = request({"cpu": "4", "memory": "4Gi"})
    assert (
        check(planned(), bigger)[1] == "the task's requirements or policy changed since the plan was computed"
    )
    policy = SPEC.policy.merged({"weights": {"cost": 5}})
    assert check(planned(), policy=policy)[1].startswith("the task's requirements or policy changed")
    assert check(planned(), now=NOW + timedelta(hours=3))[1].startswith("the plan expired at")
    assert check(planned(clusters=["mars"]))[1] == "the plan names unknown cluster(s) mars"


def test_a_plan_naming_a_forbidden_cluster_never_breaks_sovereignty() -> None:
    sovereign = request({"cpu": "1"}, datasets=["cn-data"])
    forged = planned(sovereign, clusters=["west"])  # hand-written: right fingerprints, wrong region
    decision, why = check(forged, sovereign)
    assert decision is None
    assert "west: Sovereignty: region 'eu-west-1' is not allowed by dataset 'cn-data'" in why
    mixed = planned(sovereign, clusters=["west", "north"])
    decision, _ = check(mixed, sovereign)
    assert decision.cluster == "north"  # type: ignore[attr-defined]


def test_a_plan_respects_the_tasks_cluster_list() -> None:
    only_west = request({"cpu": "1"}, clusters=["west"])
    decision, why = check(planned(only_west, clusters=["east"]), only_west)
    assert decision is None and why == "none of the plan's clusters is in the task's cluster list"


def test_plans_need_aware_times_and_at_least_one_cluster() -> None:
    with pytest.raises(ValueError):
        Plan.model_validate({**planned().model_dump(), "clusters": []})
    with pytest.raises(ValueError):
        Plan.model_validate({**planned().model_dump(), "computed_at": datetime(2025, 1, 1)})


def test_request_fingerprint_changes_with_any_requirement() -> None:
    assert request_fingerprint(REQUEST) == request_fingerprint(request({"cpu": "2", "memory": "4Gi"}))
    assert request_fingerprint(REQUEST) != request_fingerprint(
        request({"cpu": "2", "memory": "4Gi"}, namespace="x")
    )


CLUSTERS = ("east", "north", "west")
NODE_STATES = st.sampled_from(["free", "full", "stale", "down"])


@settings(max_examples=150, deadline=None)
@given(
    states=st.fixed_dictionaries({name: NODE_STATES for name in CLUSTERS}),
    cooling=st.sets(st.sampled_from(CLUSTERS)),
    sovereign=st.booleans(),
    forecast=st.dictionaries(
        st.sampled_from(CLUSTERS),
        st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-(10**6), 10**6)),
    ),
)
def test_any_forecast_changes_rankings_never_hard_rule_outcomes(
    states: dict[str, str], cooling: set[str], sovereign: bool, forecast: dict[str, float]
) -> None:
    """A wrong (even absurd) forecast never places a task where a rule forbids it, never turns a
    placement into a wait or impossible, and the planned cluster still passes every rule."""
    snapshots = {}
    for name, state in states.items():
        if state == "free":
            snapshots[name] = snapshot(name)
        elif state == "full":
            snapshots[name] = snapshot(name, [node(f"{name}0", requested={"cpu": "16"})])
        elif state == "stale":
            snapshots[name] = snapshot(name, age_seconds=3600)
        else:
            snapshots[name] = snapshot(name, reachable=False)
    req = request({"cpu": "2"}, datasets=["cn-data"] if sovereign else [])
    cooldowns = {name: NOW + timedelta(minutes=1) for name in cooling}
    plain = ENGINE.decide(req, snapshots, now=NOW, cooldowns=cooldowns)
    biased = ENGINE.decide(req, snapshots, now=NOW, cooldowns=cooldowns, forecast=forecast)
    assert biased.outcome == plain.outcome
    assert {c.cluster for c in biased.candidates} == {c.cluster for c in plain.candidates}
    assert [(r.cluster, r.plugin) for r in biased.rejected] == [(r.cluster, r.plugin) for r in plain.rejected]
    # A plan made with that forecast, checked now, lands only on a cluster the unbiased engine allows.
    plan = plan_from_decision(
        biased,
        dag_id="d",
        task_id="t",
        logical_date=NOW,
        run_after=NOW,
        valid_until=NOW + timedelta(hours=1),
        request=req,
        policy=None,
        forecast=forecast,
    )
    if plan is None:
        assert not plain.placed
        return
    decision, _ = validate_plan(plan, ENGINE, req, snapshots, now=NOW, cooldowns=cooldowns)
    assert decision is not None and decision.cluster in {c.cluster for c in plain.candidates}
