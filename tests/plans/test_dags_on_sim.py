"""The planner DAG and the periodic example DAG, run with Airflow's ``dag.test()`` on the simulator."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_fedsched.hooks.federation import FederationHook
from airflow_provider_fedsched.sim import SimFederation
from tests import airflow_harness

EXAMPLES = Path(__file__).resolve().parents[2] / "example_dags"
PERIODIC = EXAMPLES / "example_periodic_federated_dag.py"
PLANNER = EXAMPLES / "fedsched_planner_dag.py"
pytestmark = [pytest.mark.airflow]


@pytest.fixture(scope="module")
def fed() -> Iterator[SimFederation]:
    with SimFederation(time_scale=0.05) as federation:
        yield federation


@pytest.fixture
def airflow_fed(fed: SimFederation, monkeypatch: pytest.MonkeyPatch, airflow_db: None) -> Iterator[Path]:
    for key, value in fed.airflow_env_vars().items():
        monkeypatch.setenv(key, value)
    spec = fed.state_dir / "federation.yaml"
    monkeypatch.setenv("AIRFLOW__FEDSCHED__FEDERATION_SPEC", str(spec))
    yield spec
    clear_state()


def clear_state() -> None:
    from airflow.models import Variable
    from airflow.utils.session import create_session

    with create_session() as session:
        session.query(Variable).filter(Variable.key.startswith("fedsched/")).delete()


def placement(dag_run: Any, task_id: str) -> dict[str, Any]:
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        row = (
            session.query(XComModel)
            .filter_by(
                dag_id=dag_run.dag_id, run_id=dag_run.run_id, task_id=task_id, key="fedsched_placement"
            )
            .one()
        )
        value = XComModel.deserialize_value(row)
    return value if isinstance(value, dict) else __import__("json").loads(value)


def test_planner_dag_plans_the_periodic_dag_and_its_run_uses_the_plan(
    airflow_fed: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    airflow_harness.load_dag(PERIODIC, "example_periodic_federated")  # into the DAGs folder
    planner_run = airflow_harness.run_dag(PLANNER, "fedsched_planner")
    assert airflow_harness.task_states(planner_run) == {"plan": "success"}
    plans = FederationHook().plans("example_periodic_federated")
    # Hourly at :05, every run due within 24 hours (23 or 24 of them, depending on whether the cron
    # timetable runs at its logical date or at the end of its data interval), both tasks planned.
    dates = sorted({p.logical_date for p in plans})
    assert len(plans) == 2 * len(dates) and len(dates) in (23, 24)
    assert all(d.minute == 5 and d.second == 0 for d in dates)
    assert all(b - a == timedelta(hours=1) for a, b in itertools.pairwise(dates))
    assert all(p.run_after > datetime.now(UTC) - timedelta(minutes=5) for p in plans)
    first = dates[0]
    rollups = [p for p in plans if p.task_id == "hourly_rollup"]
    assert all(p.primary in {"east-cpu", "north-gpu"} and "west-general" not in p.clusters for p in rollups)

    dag_run = airflow_harness.run_dag(PERIODIC, "example_periodic_federated", logical_date=first)
    assert airflow_harness.task_states(dag_run) == {"hourly_rollup": "success", "refresh_features": "success"}
    for task_id in ("hourly_rollup", "refresh_features"):
        record = placement(dag_run, task_id)
        plan = next(p for p in plans if p.task_id == task_id and p.logical_date == first)
        assert record["plan_used"] is True, record
        assert record["cluster"] == plan.primary
        assert record["decisions"][0]["reason"].startswith(f"placed on {plan.primary} from plan computed at")
    assert "Using the precomputed plan" in capfd.readouterr().out


def plan_next_runs(fallbacks: int = 2) -> datetime:
    """Plan the periodic DAG's next three hours; returns its first planned logical date."""
    from airflow_provider_fedsched.plans.planner import run_planner

    airflow_harness.load_dag(PERIODIC, "example_periodic_federated")
    planned, errors = run_planner(horizon=timedelta(hours=3), fallbacks=fallbacks)
    assert not errors
    return min(run.logical_date for run in planned if run.dag_id == "example_periodic_federated")


def test_primary_cooling_down_runs_on_the_planned_fallback(
    airflow_fed: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    first = plan_next_runs()
    hook = FederationHook()
    plan = hook.get_plan("example_periodic_federated", "hourly_rollup", first)
    assert plan is not None and plan.clusters == ["east-cpu", "north-gpu"]
    hook.cool_down("east-cpu", "test: a pod failed there")
    dag_run = airflow_harness.run_dag(PERIODIC, "example_periodic_federated", logical_date=first)
    assert airflow_harness.task_states(dag_run) == {"hourly_rollup": "success", "refresh_features": "success"}
    record = placement(dag_run, "hourly_rollup")
    assert record["plan_used"] is True and record["cluster"] == "north-gpu"
    assert "fallback #1; east-cpu: Cooldown" in record["decisions"][0]["reason"]


@pytest.mark.parametrize("incident", ["cooling down", "unreachable"])
def test_plan_set_aside_when_its_only_cluster_cannot_run_it_now(
    airflow_fed: Path, fed: SimFederation, capfd: pytest.CaptureFixture[str], incident: str
) -> None:
    first = plan_next_runs(fallbacks=0)
    hook = FederationHook()
    assert hook.get_plan("example_periodic_federated", "hourly_rollup", first).clusters == ["east-cpu"]  # type: ignore[union-attr]
    if incident == "cooling down":
        hook.cool_down("east-cpu", "test: a pod failed there")
        expected = "east-cpu: Cooldown: cooling down until"
    else:
        # Its snapshot is older than the TTL allows and the cluster stopped answering: the refresh at
        # validation finds it unreachable.
        snapshot = hook.stored_snapshot("east-cpu")
        assert snapshot is not None
        stale = snapshot.model_copy(update={"observed_at": snapshot.observed_at - timedelta(hours=1)})
        hook.state.snapshots.put([stale])
        fed["east-cpu"].faults.down()
        expected = "east-cpu: Reachable: unreachable"
    try:
        dag_run = airflow_harness.run_dag(PERIODIC, "example_periodic_federated", logical_date=first)
    finally:
        fed["east-cpu"].faults.up()
    out = capfd.readouterr().out
    assert f"Scoring afresh: no planned cluster passes the rules now ({expected}" in out
    assert airflow_harness.task_states(dag_run) == {"hourly_rollup": "success", "refresh_features": "success"}
    rollup = placement(dag_run, "hourly_rollup")
    # Scored afresh, and still where its sovereign data may go, away from the broken cluster.
    assert rollup["plan_used"] is False and rollup["cluster"] == "north-gpu"


def test_plan_set_aside_when_the_spec_changes(airflow_fed: Path, capfd: pytest.CaptureFixture[str]) -> None:
    import yaml

    first = plan_next_runs()
    original = airflow_fed.read_text()
    spec = yaml.safe_load(original)
    spec["policy"]["weights"]["cost"] = 2.0
    airflow_fed.write_text(yaml.safe_dump(spec, sort_keys=False))
    try:
        dag_run = airflow_harness.run_dag(PERIODIC, "example_periodic_federated", logical_date=first)
    finally:
        airflow_fed.write_text(original)
    out = capfd.readouterr().out
    assert "Scoring afresh: the federation spec changed since the plan was computed" in out
    assert airflow_harness.task_states(dag_run) == {"hourly_rollup": "success", "refresh_features": "success"}
    rollup = placement(dag_run, "hourly_rollup")
    assert rollup["plan_used"] is False and rollup["cluster"] in {"east-cpu", "north-gpu"}


def test_a_forged_plan_never_breaks_sovereignty(airflow_fed: Path, capfd: pytest.CaptureFixture[str]) -> None:
    first = plan_next_runs()
    hook = FederationHook()
    plan = hook.get_plan("example_periodic_federated", "hourly_rollup", first)
    assert plan is not None
    hook.put_plan(plan.model_copy(update={"clusters": ["west-general"]}))  # EU: forbidden for user-events
    dag_run = airflow_harness.run_dag(PERIODIC, "example_periodic_federated", logical_date=first)
    out = capfd.readouterr().out
    assert "west-general: Sovereignty: region 'eu-west-1' is not allowed by dataset 'user-events'" in out
    rollup = placement(dag_run, "hourly_rollup")
    assert rollup["plan_used"] is False and rollup["cluster"] in {"east-cpu", "north-gpu"}
