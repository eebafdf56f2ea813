"""The Federation plugin: a page in the Airflow 3 UI and a JSON API, served from the API server."""

from __future__ import annotations

from typing import Any

from airflow.plugins_manager import AirflowPlugin

from airflow_provider_fedsched.plugins import janitor
from airflow_provider_fedsched.plugins.paths import URL_PREFIX


def _fastapi_apps() -> list[dict[str, Any]]:
    from airflow_provider_fedsched.plugins.app import app

    return [{"app": app, "url_prefix": URL_PREFIX, "name": "Federation"}]


class FederationPlugin(AirflowPlugin):
    """Adds **Federation** to the UI navigation, shown in the UI's iframe (``/plugin/federation``), and
    the triggerer's janitor (:mod:`.janitor`)."""

    name = "fedsched"
    fastapi_apps = _fastapi_apps()
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
