"""API faults of one cluster: latency, outages, error bursts and watch disruptions, in a middleware.

Controller faults (nodes, evictions, the scheduler) are operations on the controllers; ``control.py`` names
both kinds. Everything runs on the simulator loop; the harness and the control endpoint call in.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from airflow_provider_fedsched.sim.apiserver.server import ApiServer
from airflow_provider_fedsched.sim.apiserver.store import Store
from airflow_provider_fedsched.sim.util import ApiError

CONTROL_PREFIX = "/sim/v1/"
DROP = "drop"
EXPIRE = "expire"


@dataclass
class FailRule:
    status: int
    remaining: int
    route: re.Pattern[str] | None
    retry_after: int | None
    method: str | None


class FaultPlan:
    def __init__(self, server: ApiServer, store: Store) -> None:
        self.server = server
        self.store = store
        self.latency_seconds = 0.0
        self.rules: list[FailRule] = []
        self.is_down = False
        self.injected = 0

    # -- API faults ----------------------------------------------------------------------------------
    def latency(self, seconds: float) -> None:
        """Add ``seconds`` (real, not scaled) before every API answer; 0 turns it off."""
        self.latency_seconds = max(0.0, float(seconds))

    def fail(
        self,
        status: int = 503,
        times: int = 1,
        route: str | None = None,
        retry_after: int | None = None,
        method: str | None = None,
    ) -> None:
        """Answer the next ``times`` matching requests with ``status`` (a Kubernetes Status body)."""
        self.rules.append(
            FailRule(
                int(status),
                int(times),
                re.compile(route) if route else None,
                retry_after,
                method.upper() if method else None,
            )
        )

    async def down(self) -> None:
        """Stop listening on the cluster's port: clients get ECONNREFUSED until :meth:`up`."""
        self.is_down = True
        await self.server.unbind()

    async def up(self) -> None:
        if self.server.site is None:
            await self.server.bind()
        self.is_down = False

    def drop_watches(self) -> int:
        """End every open watch stream cleanly (clients resume from their last resourceVersion)."""
        return self._signal_watchers(DROP)

    def expire_watches(self) -> int:
        """Send a 410 Expired ERROR event on every open watch, and forget history so resumes 410 too."""
        self.store.compact()
        return self._signal_watchers(EXPIRE)

    def compact(self) -> None:
        self.store.compact()

    def _signal_watchers(self, signal: str) -> int:
        watchers = list(self.store.watchers)
        for watcher in watchers:
            watcher.queue.put_nowait(signal)
        return len(watchers)

    def clear(self) -> None:
        self.latency_seconds = 0.0
        self.rules.clear()

    # -- middleware ----------------------------------------------------------------------------------
    def match(self, request: web.Request) -> FailRule | None:
        for rule in self.rules:
            if rule.remaining <= 0:
                continue
            if rule.method and rule.method != request.method:
                continue
            if rule.route and not rule.route.search(request.path_qs):
                continue
            rule.remaining -= 1
            self.rules = [r for r in self.rules if r.remaining > 0]
            return rule
        return None


def fault_middleware(plan: FaultPlan) -> Any:
    @web.middleware
    async def middleware(request: web.Request, handler: Any) -> web.StreamResponse:
        if request.path.startswith(CONTROL_PREFIX):
            response: web.StreamResponse = await handler(request)
            return response
        if plan.is_down:
            # A keep-alive connection that survived the listener stop: behave like a dead server.
            if request.transport is not None:
                request.transport.close()
            raise ConnectionResetError("cluster is down")
        if plan.latency_seconds:
            await asyncio.sleep(plan.latency_seconds)
        rule = plan.match(request)
        if rule is not None:
            plan.injected += 1
            headers = {"Retry-After": str(rule.retry_after)} if rule.retry_after is not None else {}
            message = {
                429: "Too many requests, please try again later.",
                500: "Internal error occurred: injected fault",
                503: "The server is currently unable to handle the request",
                504: "Timeout: request did not complete within the allowed duration",
            }.get(rule.status, "injected fault")
            raise ApiError(rule.status, message, headers=headers)
        result: web.StreamResponse = await handler(request)
        return result

    return middleware
