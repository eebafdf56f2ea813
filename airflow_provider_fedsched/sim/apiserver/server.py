"""The HTTP server of one cluster: the aiohttp app, errors as Status objects, bearer auth, the socket."""

from __future__ import annotations

import asyncio
import errno
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Handler

from airflow_provider_fedsched.sim.apiserver.api import PUBLIC, dump
from airflow_provider_fedsched.sim.util import ApiError

log = logging.getLogger(__name__)
# The real apiserver's limit on a request body (etcd would refuse larger objects anyway).
MAX_BODY_BYTES = 3 * 2**20
Middleware = Callable[[web.Request, Handler], Awaitable[web.StreamResponse]]


class SimPortInUse(RuntimeError):
    """An explicitly configured port is already taken."""


def errors_middleware(name: str) -> Middleware:
    @web.middleware
    async def errors(request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            return await handler(request)
        except ApiError as exc:
            return dump(exc.status(), exc.code, exc.headers)
        except web.HTTPRequestEntityTooLarge:
            message = f"Request entity too large: limit is {MAX_BODY_BYTES}"
            return dump(ApiError(413, message, "RequestEntityTooLarge").status(), 413)
        except (web.HTTPException, asyncio.CancelledError, ConnectionResetError):
            raise
        except Exception as exc:
            log.exception("sim %s: %s %s failed", name, request.method, request.path)
            return dump(ApiError(500, f"Internal error occurred: {exc!r}").status(), 500)

    return errors


def auth_middleware(token: str) -> Middleware:
    @web.middleware
    async def auth(request: web.Request, handler: Handler) -> web.StreamResponse:
        first = request.path.strip("/").split("/", 1)[0]
        if first not in PUBLIC:
            header = request.headers.get("Authorization")
            # client-go (kubectl) never sends bearer tokens over plain http, so a request without
            # credentials is served as anonymous; a wrong token is always rejected.
            if header is not None and header != f"Bearer {token}":
                raise ApiError(401, "Unauthorized", "Unauthorized")
        return await handler(request)

    return auth


class ApiServer:
    """Listens on 127.0.0.1; ``unbind``/``bind`` drop and restore the socket on the same port."""

    def __init__(self, name: str, port: int, fallback: bool = False) -> None:
        """``fallback``: when ``port`` is taken, take a free one instead of failing (a remembered port)."""
        self.name = name
        self.port = port
        self.fallback = fallback
        self.runner: web.AppRunner | None = None
        self.site: web.TCPSite | None = None

    async def start(self, handler: Callable[[web.Request], Any], middlewares: Sequence[Any]) -> None:
        app = web.Application(middlewares=list(middlewares), client_max_size=MAX_BODY_BYTES)
        app.router.add_route("*", "/{tail:.*}", handler)
        self.runner = web.AppRunner(app, handle_signals=False, access_log=None, shutdown_timeout=0.5)
        await self.runner.setup()
        await self.bind()

    async def bind(self) -> None:
        assert self.runner is not None
        site = web.TCPSite(self.runner, "127.0.0.1", self.port, reuse_address=True)
        try:
            await site.start()
        except OSError as exc:
            in_use = exc.errno == errno.EADDRINUSE or "address already in use" in str(exc).lower()
            if in_use and self.fallback and self.port:
                log.warning("sim %s: port %s is taken; using a free one", self.name, self.port)
                self.port = 0
                await self.bind()
                return
            if in_use:
                raise SimPortInUse(
                    f"cluster {self.name!r}: port {self.port} on 127.0.0.1 is already in use "
                    "(choose another port, or port: 0 for a free one)"
                ) from None
            raise
        self.site = site
        self.fallback = False  # once serving, ``up`` after ``down`` must come back on this very port
        sockets = getattr(site._server, "sockets", None)
        if self.port == 0 and sockets:
            self.port = int(sockets[0].getsockname()[1])

    async def unbind(self) -> None:
        """Stop listening and drop open connections (clients then get ECONNREFUSED)."""
        if self.site is not None:
            await self.site.stop()
            self.site = None
        if self.runner is not None and self.runner.server is not None:
            for handler in list(self.runner.server.connections):
                handler.force_close()
                transport = handler.transport
                if transport is not None:
                    transport.close()

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()
            self.runner = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"
