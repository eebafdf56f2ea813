"""Shared state in Airflow Variables: the Task SDK inside a running task, the metadata database elsewhere.

Every process of a deployment (workers on any host, the triggerer, the API server) reads and writes the
same rows, without an extra service. Variables have no compare-and-set: the last writer wins, which is
why items many writers add get a key each (see :mod:`.stores`).
"""

from __future__ import annotations

import logging
from typing import Any, ClassVar

from airflow_provider_fedsched.state.backend import Consistency
from airflow_provider_fedsched.state.base import read_stored
from airflow_provider_fedsched.validation.stored import loads_bounded

log = logging.getLogger(__name__)


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

    # Outside the Task SDK, each key's stored text (as in the table: encrypted or not) and its decoded
    # value, shared by every instance in the process: a decision reads every reservation in flight, and
    # decrypting and decoding the unchanged ones again each time cost more than the decision.
    _decoded: ClassVar[dict[str, tuple[str, Any]]] = {}

    def get(self, key: str) -> Any | None:
        if _in_task_runner():
            # Untrusted: a value that is not bounded JSON is logged once with its key and read as absent.
            return read_stored(key, self._read(key, deserialize_json=False), loads_bounded)
        rows = self._rows(key, exact=True)
        if not rows:
            self._decoded.pop(key, None)
            return None
        return self._value(*rows[0])

    def _rows(self, key: str, exact: bool) -> list[tuple[str, str | None, bool]]:
        """``(key, stored text, encrypted)`` of the Variable ``key`` or of every key under a prefix, read
        as plain columns: loading Variable objects would register each value with the log masker."""
        from airflow.models import Variable
        from airflow.utils.session import create_session
        from sqlalchemy import select

        wanted = Variable.key == key if exact else Variable.key.startswith(key)
        with create_session() as session:
            found = session.execute(select(Variable.key, Variable._val, Variable.is_encrypted).where(wanted))
            return [(str(k), v, bool(e)) for k, v, e in found]

    def _value(self, key: str, stored: str | None, encrypted: bool) -> Any | None:
        if stored is None:
            return None
        known = self._decoded.get(key)
        if known is not None and known[0] == stored:
            return known[1]
        text = _decrypted(key, stored) if encrypted else stored
        value = read_stored(key, text, loads_bounded)
        self._decoded[key] = (stored, value)
        return value

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
        found = {
            key: self._value(key, stored, encrypted) for key, stored, encrypted in self._rows(prefix, False)
        }
        for gone in [key for key in self._decoded if key.startswith(prefix) and key not in found]:
            self._decoded.pop(gone, None)
        return {key: value for key, value in found.items() if value is not None}


def _decrypted(key: str, stored: str) -> str | None:
    """The Variable's text decrypted with the deployment's Fernet key (as ``Variable.get_val``)."""
    from airflow.models.crypto import get_fernet

    try:
        return str(get_fernet().decrypt(bytes(stored, "utf-8")).decode())
    except Exception as exc:  # an invalid token or a missing key: read as absent, as Airflow does
        log.error("Cannot decrypt the Variable %s (%s): read as absent", key, type(exc).__name__)
        return None
