"""The Federation plugin: a page in the Airflow 3 UI and a JSON API, served from the API server."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from airflow.plugins_manager import AirflowPlugin

from airflow_provider_fedsched.plugins import janitor
from airflow_provider_fedsched.plugins.paths import URL_PREFIX


class FederationApp:
    """The Federation page's ASGI app (:mod:`.app`), built on its first request: Airflow imports plugins
    in every process (each task's, the scheduler's), and only the API server ever serves it, so the
    others are spared building it (about 0.6 s of CPU for each task)."""

    def __init__(self) -> None:
        self._app: Callable[..., Awaitable[None]] | None = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if self._app is None:
            from airflow_provider_fedsched.plugins.app import app

            self._app = app
        await self._app(scope, receive, send)


class FederationPlugin(AirflowPlugin):
    """Adds **Federation** to the UI navigation, shown in the UI's iframe (``/plugin/federation``), and
    the triggerer's janitor (:mod:`.janitor`)."""

    name = "fedsched"
    fastapi_apps = [{"app": FederationApp(), "url_prefix": URL_PREFIX, "name": "Federation"}]
    listeners = [janitor]
    external_views = [
        {
            "name": "Federation",
            "href": f"{URL_PREFIX}/ui",
            "destination": "nav",
            "url_route": "federation",
            "category": "browse",
        }
    ]
