"""Whether a task instance's try is over, asked from wherever the provider runs: a task or a trigger
(the Task SDK's supervisor answers) or a process with the metadata database (the CLI, the tests)."""

from __future__ import annotations

TRY_OVER = frozenset(
    {"success", "failed", "skipped", "upstream_failed", "removed", "up_for_retry", "restarting"}
)
"""Task instance states in which a deferred try is over (a user or the scheduler ended it). Not
``queued``/``scheduled``: that is a resumption in progress (and ``dag.test`` runs triggers while queued)."""


def state_if_over(dag_id: str, run_id: str, task_id: str, map_index: int | None) -> str | None:
    """The task instance's state when its try is over (:data:`TRY_OVER`), else None. Raises when this
    process can ask no one."""
    from airflow.sdk.execution_time import task_runner

    mapped = map_index if map_index is not None and map_index >= 0 else None
    if hasattr(task_runner, "SUPERVISOR_COMMS"):
        states = task_runner.RuntimeTaskInstance.get_task_states(
            dag_id=dag_id, map_index=mapped, task_ids=[task_id], run_ids=[run_id]
        )
        key = task_id if mapped is None else f"{task_id}_{mapped}"
        state = (states.get(run_id) or {}).get(key)
    else:
        state = _state_from_the_database(dag_id, run_id, task_id, -1 if mapped is None else mapped)
    return str(state) if state is not None and str(state) in TRY_OVER else None


def _state_from_the_database(dag_id: str, run_id: str, task_id: str, map_index: int) -> str | None:
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session

    with create_session() as session:
        found = (
            session.query(TaskInstance.state)
            .filter_by(dag_id=dag_id, run_id=run_id, task_id=task_id, map_index=map_index)
            .one_or_none()
        )
    return None if found is None or found[0] is None else str(found[0])
