"""Per-cluster request counters: how many API requests a cluster received, by method and path.

An audit-log-like view for tests and users (e.g. to prove that concurrent callers shared one refresh).
Counted in the outermost aiohttp middleware, so requests answered with an error (401, 404, an injected
fault) count too; the control endpoint and requests dropped while the cluster is ``down`` do not.
Lives on the simulator loop like the rest of the cluster state; the harness reads it through ``call``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

from aiohttp import web


class RequestCounter:
    def __init__(self) -> None:
        self.counts: Counter[tuple[str, str]] = Counter()

    def record(self, method: str, path: str) -> None:
        self.counts[(method.upper(), path)] += 1

    def count(self, method: str | None = None, path: str | None = None) -> int:
        """Requests matching ``method`` (any case) and ``path`` (exact, or a prefix if it ends with ``*``)."""
        wanted = method.upper() if method else None
        prefix = path[:-1] if path is not None and path.endswith("*") else None
        total = 0
        for (m, p), n in self.counts.items():
            if wanted is not None and m != wanted:
                continue
            if path is not None and (p != path if prefix is None else not p.startswith(prefix)):
                continue
            total += n
        return total

    def snapshot(self) -> dict[tuple[str, str], int]:
        return dict(self.counts)

    def reset(self) -> None:
        self.counts.clear()


def counting_middleware(counter: RequestCounter, skip: Callable[[], bool]) -> Any:
    """The outermost middleware: count every request unless ``skip()`` (the cluster is down)."""

    @web.middleware
    async def count(request: web.Request, handler: Any) -> web.StreamResponse:
        if not skip():
            counter.record(request.method, request.path)
        response: web.StreamResponse = await handler(request)
        return response

    return count
