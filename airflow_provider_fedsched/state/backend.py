"""The shared-state backend protocol, what each backend promises about consistency, and the in-memory one.

A backend is a small key-value store of JSON values. Backends differ in who shares them and in what a
concurrent writer may see, so each declares its :class:`Consistency`; the stores above it read that
declaration (never the backend's class) to decide, for instance, how long concurrent lease claims need
to land before they are read back.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Literal, Protocol


@dataclass(frozen=True)
class Consistency:
    """What a backend guarantees to concurrent readers and writers."""

    shared_by: Literal["process", "deployment"]
    """``process``: one Python process only; ``deployment``: every Airflow process on every host."""
    settle_seconds: float
    """How long a write may take to become visible to another writer's read (0: at once)."""
    compare_and_set: bool
    """Whether a write can be made conditional on the value read (none of ours can: last writer wins)."""
    note: str = ""


class StateBackend(Protocol):
    """A small key-value store of JSON values shared by every worker process."""

    consistency: Consistency

    def get(self, key: str) -> Any | None: ...

    def set(self, key: str, value: Any) -> None: ...

    def delete(self, key: str) -> None: ...

    def keys(self, prefix: str) -> list[str]: ...

    def get_many(self, prefix: str) -> dict[str, Any]:
        """Every key under ``prefix`` with its value, in as few round trips as the backend allows."""
        ...


class MemoryStateBackend:
    """Process-local state, for unit tests and the CLI outside Airflow."""

    consistency = Consistency(
        shared_by="process",
        settle_seconds=0.0,
        compare_and_set=False,
        note="one lock per process: every write is visible to the next read in that process",
    )

    def __init__(self) -> None:
        self._values: dict[str, Any] = {}
        self._lock = threading.Lock()

    def get(self, key: str) -> Any | None:
        with self._lock:
            return self._values.get(key)

    def set(self, key: str, value: Any) -> None:
        with self._lock:
            self._values[key] = value

    def delete(self, key: str) -> None:
        with self._lock:
            self._values.pop(key, None)

    def keys(self, prefix: str) -> list[str]:
        with self._lock:
            return sorted(k for k in self._values if k.startswith(prefix))

    def get_many(self, prefix: str) -> dict[str, Any]:
        with self._lock:
            return {k: v for k, v in self._values.items() if k.startswith(prefix)}
