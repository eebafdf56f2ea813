"""A work queue as client-go controllers use one: keys marked while handling watch events are synced
together on a later loop turn, each once, so no controller writes to the store inside another's callback."""

from __future__ import annotations

import asyncio
from collections.abc import Callable


class WorkQueue:
    def __init__(self, sync: Callable[[str], None]) -> None:
        self._sync = sync
        self._dirty: set[str] = set()

    def add(self, key: str) -> None:
        if not self._dirty:
            asyncio.get_running_loop().call_soon(self._drain)
        self._dirty.add(key)

    def _drain(self) -> None:
        dirty, self._dirty = self._dirty, set()
        for key in sorted(dirty):
            self._sync(key)
