"""The dev tools' wheel takes its files from the provider's tree: ``airflow_provider_fedsched/`` one
folder up, the parts the provider's wheel excludes (pyproject.toml beside this file and the one above).

Added for a built wheel only: hatchling copies forced files into an editable wheel too, which would leave
stale copies in site-packages behind the provider's editable install (which exposes the whole tree).
"""

from __future__ import annotations

from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

PACKAGE = "airflow_provider_fedsched"
DEV_TOOLS = ("sim", "testbed", "replay", "demo.py")
"""Every part of the package that is a dev tool; the provider's wheel excludes exactly these."""


class DevToolsBuildHook(BuildHookInterface):
    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if version == "editable":
            return
        for part in DEV_TOOLS:
            build_data["force_include"][f"../{PACKAGE}/{part}"] = f"{PACKAGE}/{part}"
