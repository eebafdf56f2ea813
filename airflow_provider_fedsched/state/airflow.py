"""Shared state in Airflow Variables: the Task SDK inside a running task, the metadata database elsewhere.

Every process of a deployment (workers on any host, the triggerer, the API server) reads and writes the
same rows, without an extra service. Variables have no compare-and-set: the last writer wins, which is
why items many writers add get a key each (see :mod:`.stores`).
"""

from __future__ import annotations

from typing import Any

from airflow_provider_fedsched.state.backend import Consistency
from airflow_provider_fedsched.validation.stored import loads_bounded, read_stored


def _in_task_runner() -> bool:
    try:
        from airflow.sdk.execution_time import task_runner
    except ImportError:  # pragma: no cover - Airflow is a dependency
        return False
    return getattr(task_runner, "SUPERVISOR_COMMS", None) is not None


class AirflowVariableStateBackend:
    """Airflow Variables: the Task SDK inside a running task, the metadata database elsewhere."""

    consistency = Consistency(
        shared_by="deployment",
        settle_seconds=0.05,
        compare_and_set=False,
        note=(
            "each write is one committed row; a read right after another process's write sees it, but "
            "two writers of one key race (last writer wins), so claims settle 50 ms before read-back"
        ),
    )

    def get(self, key: str) -> Any | None:
        # Untrusted: a value that is not bounded JSON is logged once with its key and read as absent.
        return read_stored(key, self._read(key, deserialize_json=False), loads_bounded)

    def get_raw(self, key: str) -> str | None:
        """A Variable's text as stored (for values that are not ours, like a federation spec)."""
        value = self._read(key, deserialize_json=False)
        return None if value is None else str(value)

    def _read(self, key: str, deserialize_json: bool = False) -> Any | None:
        if _in_task_runner():
            from airflow.sdk import Variable as SdkVariable

            return SdkVariable.get(key, default=None, deserialize_json=deserialize_json)
        # Straight from the metadata database: outside a task and outside the API server, Variable.get
        # only consults environment and external secrets backends.
        from airflow.models import Variable
        from airflow.utils.session import create_session

        with create_session() as session:
            row = session.query(Variable).filter(Variable.key == key).one_or_none()
            text = None if row is None else row.val
        return text

    def set(self, key: str, value: Any) -> None:
        if _in_task_runner():
            from airflow.sdk import Variable as SdkVariable

            SdkVariable.set(key, value, serialize_json=True)
            return
        from airflow.models import Variable

        Variable.set(key, value, serialize_json=True)

    def delete(self, key: str) -> None:
        if _in_task_runner():
            from airflow.sdk import Variable as SdkVariable

            SdkVariable.delete(key)
            return
        from airflow.models import Variable

        Variable.delete(key)

    def keys(self, prefix: str) -> list[str]:
        if _in_task_runner():
            from airflow.sdk import Variable as SdkVariable

            return sorted(SdkVariable.keys(prefix=prefix))
        from airflow.models import Variable
        from airflow.utils.session import create_session

        with create_session() as session:
            rows = session.query(Variable.key).filter(Variable.key.startswith(prefix)).all()
        return sorted(row[0] for row in rows)

    def get_many(self, prefix: str) -> dict[str, Any]:
        if _in_task_runner():
            found = {key: self.get(key) for key in self.keys(prefix)}
            return {key: value for key, value in found.items() if value is not None}
        from airflow.models import Variable
        from airflow.utils.session import create_session

        with create_session() as session:
            rows = session.query(Variable).filter(Variable.key.startswith(prefix)).all()
            found = {row.key: read_stored(row.key, row.val, loads_bounded) for row in rows}
        return {key: value for key, value in found.items() if value is not None}
