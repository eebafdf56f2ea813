"""What the apiserver asks of a node's kubelet (container logs, exec), as a protocol the kubelet implements.

The real apiserver proxies ``pods/log`` and ``pods/exec`` to the kubelet of the pod's node; here the
kubelet controller hands the apiserver an object with these methods, so neither imports the other.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass
class LogBuffer:
    """One container instance's output; ``changed`` wakes followers."""

    lines: list[tuple[float, str]] = field(default_factory=list)
    done: bool = False
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def append(self, line: str) -> None:
        self.lines.append((time.time(), line))
        self._notify()

    def finish(self) -> None:
        self.done = True
        self._notify()

    def _notify(self) -> None:
        self.changed.set()
        self.changed = asyncio.Event()


class ExecResult:
    """What one exec session wrote and how it ended."""

    def __init__(self) -> None:
        self.stdout = ""
        self.stderr = ""
        self.exit_code = 0
        self.killed_session = False


class NodeAgent(Protocol):
    def log_buffer(self, uid: str, container: str, previous: bool = False) -> LogBuffer | None:
        """The current (or previous, for a restarted container) instance's output, if any."""
        ...

    def exec_script(self, pod: dict[str, Any], container: str, script: str, result: ExecResult) -> None:
        """Run one shell line in the container (interactive ``sh`` sessions)."""
        ...

    def exec_argv(self, pod: dict[str, Any], container: str, argv: list[str], result: ExecResult) -> None:
        """Run one command in the container."""
        ...
