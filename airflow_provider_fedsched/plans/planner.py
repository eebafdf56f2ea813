"""The planner: precompute placements for the upcoming runs of every scheduled federated DAG.

It reads DAGs the way Airflow does (a :class:`DagBag` over the DAGs folder), keeps the scheduled ones that
have federated tasks (any task with a ``placement_request(hook)`` method, such as
``FederatedKubernetesOperator``), asks each DAG's timetable (the scheduler's, from the serialized DAG) for
its next runs within a horizon, builds each task's placement request against the hook it is given,
decides with the idle forecast for that run's window (the placement cycle a task runs, holding nothing),
and stores one :class:`~airflow_provider_fedsched.federation.plan.Plan` per task and logical date through
the hook.

A plan is made against the snapshots of now: hard rules are checked again when the run starts
(:meth:`FederationHook.planned_decision`); a cooldown that ends before the run is ignored at planning time.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from airflow_provider_fedsched.federation.cycle import FederationView, FixedState
from airflow_provider_fedsched.federation.plan import Plan, plan_from_decision
from airflow_provider_fedsched.hooks.planning import idle_forecast

if TYPE_CHECKING:
    from airflow_provider_fedsched.federation.request import TaskRequest
    from airflow_provider_fedsched.federation.resources import ResourceList
    from airflow_provider_fedsched.federation.spec import PolicySpec
    from airflow_provider_fedsched.hooks.federation import FederationHook

log = logging.getLogger(__name__)

DEFAULT_HORIZON = timedelta(hours=24)
DEFAULT_RUNS_PER_DAG = 48
"""At most this many upcoming runs per DAG are planned (a ``* * * * *`` DAG does not flood state)."""
DEFAULT_VALID_FOR = timedelta(hours=1)
"""A plan stays usable this long after its run was due (a run may queue or start late)."""
DEFAULT_FALLBACKS = 2


@dataclass(slots=True)
class PlannedRun:
    """One task of one upcoming run, with its plan or why it has none."""

    dag_id: str
    task_id: str
    logical_date: datetime
    run_after: datetime
    plan: Plan | None
    note: str
    """The planning decision's reason (why there is no plan, when there is none)."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "dag_id": self.dag_id,
            "task_id": self.task_id,
            "logical_date": self.logical_date.isoformat(),
            "run_after": self.run_after.isoformat(),
            "plan": self.plan.model_dump(mode="json") if self.plan else None,
            "note": self.note,
        }


def load_dags(dags_folder: str | Path | None = None) -> tuple[dict[str, Any], dict[str, str]]:
    """``(dag_id -> DAG, file -> import error)`` parsed by Airflow's DagBag from the DAGs folder."""
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(dags_folder) if dags_folder is not None else None)
    return dict(bag.dags), dict(bag.import_errors)


@runtime_checkable
class PlannableTask(Protocol):
    """A task the planner can place ahead of its run (``FederatedKubernetesOperator`` is one)."""

    task_id: str
    federation: Any
    """Its federation spec source (what :class:`FederationHook` accepts)."""

    def placement_request(self, hook: FederationHook) -> tuple[TaskRequest, PolicySpec]:
        """Its validated placement request and effective policy, against ``hook``'s federation."""
        ...


def federated_tasks(dag: Any) -> list[PlannableTask]:
    return [task for task in dag.tasks if isinstance(task, PlannableTask)]


def hook_for(task: PlannableTask, hooks: dict[str, FederationHook]) -> FederationHook:
    """One hook per federation spec (one read of its snapshots for all of its tasks)."""
    from airflow_provider_fedsched.hooks.federation import FederationHook

    candidate = FederationHook(task.federation)
    return hooks.setdefault(candidate.engine.fingerprint, candidate)


def upcoming_runs(dag: Any, now: datetime, horizon: timedelta, limit: int) -> list[tuple[datetime, datetime]]:
    """``(logical_date, run_after)`` of the DAG's next runs due within ``horizon`` from ``now``, from its
    timetable as the scheduler evaluates it (start and end dates respected, no catch-up of the past)."""
    import pendulum
    from airflow.serialization.serialized_objects import DagSerialization
    from airflow.timetables.base import TimeRestriction

    timetable = DagSerialization.from_dict(DagSerialization.to_dict(dag)).timetable
    if not timetable.periodic or not timetable.can_be_scheduled:
        return []
    # Earliest is the DAG's start, not now: with catch-up off the timetable itself skips to the present,
    # and a data-interval timetable then still yields the interval that is running now (due soon).
    start = pendulum.instance(dag.start_date or now)
    end = pendulum.instance(now + horizon)
    if dag.end_date is not None:
        end = min(end, pendulum.instance(dag.end_date))
    restriction = TimeRestriction(earliest=start, latest=end, catchup=False)
    runs: list[tuple[datetime, datetime]] = []
    info = None
    while len(runs) < limit:
        info = timetable.next_dagrun_info_v2(last_dagrun_info=info, restriction=restriction)
        if info is None or info.run_after > now + horizon:
            break
        if info.run_after < now:
            continue  # already due: the scheduler has created that run
        logical = info.logical_date or info.run_after
        runs.append((_plain_utc(logical), _plain_utc(info.run_after)))
    return runs


def _plain_utc(moment: datetime) -> datetime:
    """A standard-library aware UTC datetime (pendulum's do not always keep their zone on conversion)."""
    return datetime.fromtimestamp(moment.timestamp(), UTC)


def compute_plans(
    dags: Iterable[Any],
    *,
    now: datetime | None = None,
    horizon: timedelta = DEFAULT_HORIZON,
    runs_per_dag: int = DEFAULT_RUNS_PER_DAG,
    valid_for: timedelta = DEFAULT_VALID_FOR,
    fallbacks: int = DEFAULT_FALLBACKS,
    hook: FederationHook | None = None,
    hooks: dict[str, FederationHook] | None = None,
) -> list[PlannedRun]:
    """Plans for the next runs of every scheduled DAG with federated tasks.

    Each task decides with the hook of its own federation (its ``federation`` argument; tasks of one
    federation share one) unless ``hook`` is given (the CLI's ``--federation``/``--kubeconfig``), which
    then serves every task. ``hooks`` collects the hooks used, by spec fingerprint.
    """
    now = now or datetime.now(UTC)
    planned: list[PlannedRun] = []
    context: dict[int, _HookView] = {}
    shared_hooks: dict[str, FederationHook] = {} if hooks is None else hooks
    for dag in sorted(dags, key=lambda d: d.dag_id):
        tasks = federated_tasks(dag)
        if not tasks:
            continue
        runs = upcoming_runs(dag, now, horizon, runs_per_dag)
        for task in tasks:
            try:
                task_hook = hook or hook_for(task, shared_hooks)
                request, policy = task.placement_request(task_hook)
            except Exception as exc:
                for logical, run_after in runs:
                    planned.append(PlannedRun(dag.dag_id, task.task_id, logical, run_after, None, str(exc)))
                continue
            view = context.get(id(task_hook))
            if view is None:
                view = context[id(task_hook)] = _HookView.read(task_hook, now)
            # Whole-cluster cooldowns plus those of this task's namespace (a quota is per namespace).
            names = list(view.inputs.snapshots)
            cooldowns = {
                **view.inputs.cooldowns,
                **view.hook.cooldowns(names, now, namespace=request.namespace),
            }
            for logical, run_after in runs:
                end = run_after + timedelta(seconds=max(request.expected_duration_seconds, 60.0))
                forecast = idle_forecast(view.models, run_after, end, request.resources)
                # The placement cycle a task runs, over the federation as it is now with the cooldowns
                # still in force when the run is due; nothing is held.
                inputs = replace(
                    view.inputs,
                    cooldowns={c: until for c, until in cooldowns.items() if until > run_after},
                )
                cycle = FixedState(view.hook.spec, inputs, view.quotas).cycle(view.hook.engine)
                decision = cycle.decide(request, forecast=forecast, policy=policy)
                plan = plan_from_decision(
                    decision,
                    dag_id=dag.dag_id,
                    task_id=task.task_id,
                    logical_date=logical,
                    run_after=run_after,
                    valid_until=run_after + valid_for,
                    request=request,
                    policy=policy,
                    forecast=forecast,
                    fallbacks=fallbacks,
                )
                planned.append(
                    PlannedRun(dag.dag_id, task.task_id, logical, run_after, plan, decision.reason)
                )
    return planned


@dataclass(slots=True)
class _HookView:
    """What one federation looks like now, read once per planner run."""

    hook: FederationHook
    inputs: FederationView
    """Snapshots, whole-cluster cooldowns, reservations in flight and tenant usage, as a task reads them."""
    quotas: dict[str, Mapping[str, ResourceList]]
    """Cluster -> namespace -> hard quota limits."""
    models: dict[str, Any]

    @classmethod
    def read(cls, hook: FederationHook, now: datetime) -> _HookView:
        names = [c.name for c in hook.spec.clusters]
        return cls(
            hook=hook,
            inputs=hook.view(names, namespace=None, now=now),
            quotas={name: hook.quota_limits(name) for name in names},
            models=hook.fold_profiles(),
        )


def store_plans(planned: Iterable[PlannedRun], hooks: Iterable[FederationHook], now: datetime) -> int:
    """Store every plan (replacing the one for the same run) and delete expired ones; returns how many
    were stored."""
    stored = 0
    plans = [run.plan for run in planned if run.plan is not None]
    for hook in _unique(hooks):
        fingerprint = hook.engine.fingerprint
        for plan in plans:
            if plan.spec_fingerprint == fingerprint:
                hook.put_plan(plan)
                stored += 1
        for old in hook.plans():
            if old.valid_until < now:
                hook.delete_plan(old)
    return stored


def _unique(hooks: Iterable[FederationHook]) -> list[FederationHook]:
    seen: dict[int, FederationHook] = {}
    for hook in hooks:
        seen.setdefault(id(hook), hook)
    return list(seen.values())


def run_planner(
    *,
    dags_folder: str | Path | None = None,
    hook: FederationHook | None = None,
    horizon: timedelta = DEFAULT_HORIZON,
    runs_per_dag: int = DEFAULT_RUNS_PER_DAG,
    valid_for: timedelta = DEFAULT_VALID_FOR,
    fallbacks: int = DEFAULT_FALLBACKS,
    dry_run: bool = False,
    now: datetime | None = None,
) -> tuple[list[PlannedRun], dict[str, str]]:
    """Parse the DAGs folder, compute plans and (unless ``dry_run``) store them.

    Returns the planned runs and the DAG files that failed to import (reported, not fatal: one broken
    DAG must not stop the planning of the others)."""
    now = now or datetime.now(UTC)
    log.info("Planning runs due from %s to %s", now.isoformat(), (now + horizon).isoformat())
    dags, errors = load_dags(dags_folder)
    used: dict[str, FederationHook] = {}
    planned = compute_plans(
        dags.values(),
        now=now,
        horizon=horizon,
        runs_per_dag=runs_per_dag,
        valid_for=valid_for,
        fallbacks=fallbacks,
        hook=hook,
        hooks=used,
    )
    if not dry_run:
        stored = store_plans(planned, [hook] if hook is not None else list(used.values()), now)
        log.info("Stored %d plan(s) for %d planned task run(s)", stored, len(planned))
    return planned, errors
