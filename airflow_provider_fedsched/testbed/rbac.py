"""Applies the project's RBAC manifests (deploy/rbac-cluster.yaml, deploy/rbac.yaml) through the API."""

from __future__ import annotations

import base64
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client, utils

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
CLUSTER_MANIFEST = DEPLOY / "rbac-cluster.yaml"
NAMESPACED_MANIFEST = DEPLOY / "rbac.yaml"
TOKEN_SECRET = ("fedsched-system", "fedsched-provider-token")


def manifest(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def _apply(api: client.ApiClient, docs: list[dict[str, Any]], namespace: str | None) -> None:
    for doc in docs:
        try:
            utils.create_from_dict(api, doc, namespace=namespace)
        except utils.FailToCreateError as exc:
            if any(e.status != 409 for e in exc.api_exceptions):
                raise


def apply_cluster(api: client.ApiClient) -> None:
    _apply(api, manifest(CLUSTER_MANIFEST), None)


def apply_namespaced(api: client.ApiClient, namespace: str, docs: list[dict[str, Any]] | None = None) -> None:
    _apply(api, docs if docs is not None else manifest(NAMESPACED_MANIFEST), namespace)


def provider_token(
    api: client.ApiClient,
    wait: Callable[[str, Callable[[], bool]], None],
    secret: tuple[str, str] = TOKEN_SECRET,
) -> str:
    """A service-account token Secret's token (the provider's by default), once the token controller
    has filled it in."""
    core = client.CoreV1Api(api)
    found: list[str] = []

    def filled() -> bool:
        found_secret = core.read_namespaced_secret(secret[1], secret[0])
        token = (found_secret.data or {}).get("token")
        if token:
            found.append(base64.b64decode(token).decode())
        return bool(token)

    wait(f"token of {secret[0]}/{secret[1]}", filled)
    return found[-1]
