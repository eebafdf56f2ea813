"""The base of every store: a backend and the federation's key prefix (``<prefix>/<kind>/<cluster>/...``)."""

from __future__ import annotations

from typing import Any

from airflow_provider_fedsched.state.backend import StateBackend


def mapping(raw: Any) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise ValueError(f"expected a JSON object, got {type(raw).__name__}")
    return raw


class Store:
    def __init__(self, backend: StateBackend, prefix: str) -> None:
        self.backend = backend
        self.prefix = prefix

    def _key(self, kind: str, cluster: str, item: str | None = None) -> str:
        return f"{self.prefix}/{kind}/{cluster}" + (f"/{item}" if item else "")
