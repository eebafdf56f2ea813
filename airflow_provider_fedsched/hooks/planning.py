"""Planning at run time: the stored plan for a task's run, and the idle-capacity forecast.

The planner (``plans/``) writes plans and fits forecast models through the hook; a task reads them here,
through the same hook, so that plans stand on hooks and never on the operator.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from airflow_provider_fedsched.federation.forecast import ForecastModel, SeasonalProfile, fit, parse_samples
from airflow_provider_fedsched.federation.plan import validate_plan, version_problem

if TYPE_CHECKING:
    from airflow_provider_fedsched.federation.decision import Decision
    from airflow_provider_fedsched.federation.request import TaskRequest
    from airflow_provider_fedsched.federation.spec import PolicySpec
    from airflow_provider_fedsched.hooks.parts import HookParts

UTILIZATION = "utilization"


def planned_decision(
    hook: HookParts,
    request: TaskRequest,
    *,
    dag_id: str,
    task_id: str,
    logical_date: datetime | None,
    exclude: dict[str, str],
    policy: PolicySpec | None,
) -> tuple[Decision | None, str]:
    """A decision from a valid precomputed plan, or ``(None, why no plan was used)``.

    Cheap checks first (is there a plan, same spec and request, not expired), then the plan's clusters
    only are read and put through every hard rule of the engine.
    """
    if logical_date is None:
        return None, "the run has no logical date"
    plan = hook.state.plans.get(dag_id, task_id, logical_date)
    if plan is None:
        if hook.state.plans.present(dag_id, task_id, logical_date):
            key = hook.state.plans.key(dag_id, task_id, logical_date)
            return None, f"the stored plan is unreadable (see the warning naming {key})"
        return None, "no plan for this task and logical date"
    now = datetime.now(UTC)
    problem = version_problem(plan, hook.engine, request, policy, now)
    if problem is not None:
        return None, problem
    members = {cluster.name for cluster in hook.spec.clusters}
    names = [name for name in plan.clusters if name in members]
    view = hook.view(names, request.namespace)
    return validate_plan(
        plan,
        hook.engine,
        request,
        view.snapshots,
        now=view.now,
        cooldowns=view.cooldowns,
        reservations=view.reservations,
        exclude=exclude,
        policy=policy,
    )


def fold_profiles(hook: HookParts) -> dict[str, ForecastModel]:
    """Fold each cluster's new history into its stored seasonal profile (the raw history keeps only the
    newest samples); returns the fitted models. The planner calls this on every run."""
    models: dict[str, ForecastModel] = {}
    forecasts = hook.state.forecasts
    for cluster in hook.spec.clusters:
        profile = SeasonalProfile.from_dict(forecasts.get_profile(cluster.name))
        before = profile.folded_until
        model = fit(parse_samples(hook.state.history.samples(cluster.name, UTILIZATION)), profile)
        if profile.folded_until != before:
            forecasts.put_profile(cluster.name, profile.to_dict())
        if model is not None:
            models[cluster.name] = model
    forecasts.put_models({name: model.to_dict() for name, model in models.items()})
    return models


def idle_forecast(
    models: dict[str, ForecastModel], start: datetime, end: datetime, resources: Iterable[str] | None = None
) -> dict[str, float] | None:
    """Predicted idle fraction per cluster over ``[start, end)``; None when no cluster has a forecast."""
    wanted = list(resources or ())
    forecast = {
        name: value
        for name, model in models.items()
        if (value := model.idle_fraction(start, end, wanted)) is not None
    }
    return forecast or None


def forecast_idle(
    hook: HookParts, start: datetime, end: datetime, resources: Iterable[str] | None = None
) -> dict[str, float] | None:
    """Predicted idle fraction per cluster over ``[start, end)`` for ``resources``, from the models the
    planner last fitted (one read of shared state); None when there are none."""
    try:
        stored = hook.state.forecasts.get_models()
        models = {name: m for name, raw in stored.items() if (m := ForecastModel.from_dict(raw)) is not None}
        return idle_forecast(models, start, end, resources)
    except Exception:  # a bias must never fail a task: no forecast is neutral
        return None
