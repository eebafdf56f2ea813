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


# -- revoking the provider's access (`fedsched testbed fault MEMBER revoke-rbac`) ----------------------
PROVIDER_USER = "system:serviceaccount:fedsched-system:fedsched-provider"
_PROVIDER_GROUPS = [
    "system:serviceaccounts",
    "system:serviceaccounts:fedsched-system",
    "system:authenticated",
]


def _named(path: Path, kind: str) -> list[dict[str, Any]]:
    return [doc for doc in manifest(path) if doc["kind"] == kind]


def revoke_bindings(api: client.ApiClient) -> list[str]:
    """Delete the manifests' bindings (the ClusterRoleBinding, and the RoleBinding in every namespace):
    the identity, its token and its roles stay, as when an administrator unbinds it. Returns what went."""
    rbac = client.RbacAuthorizationV1Api(api)
    removed = []
    for doc in _named(CLUSTER_MANIFEST, "ClusterRoleBinding"):
        name = doc["metadata"]["name"]
        try:
            rbac.delete_cluster_role_binding(name)
            removed.append(f"clusterrolebinding/{name}")
        except client.ApiException as exc:
            if exc.status != 404:
                raise
    for doc in _named(NAMESPACED_MANIFEST, "RoleBinding"):
        name = doc["metadata"]["name"]
        for binding in rbac.list_role_binding_for_all_namespaces(
            field_selector=f"metadata.name={name}"
        ).items:
            namespace = binding.metadata.namespace
            try:
                rbac.delete_namespaced_role_binding(name, namespace)
                removed.append(f"{namespace}/rolebinding/{name}")
            except client.ApiException as exc:
                if exc.status != 404:
                    raise
    return removed


def restore_bindings(api: client.ApiClient) -> list[str]:
    """The manifests' bindings again: cluster-wide, and in every namespace that holds the provider's Role
    (deploy/rbac.yaml was applied there). Returns the namespaces."""
    rbac = client.RbacAuthorizationV1Api(api)
    _apply(api, _named(CLUSTER_MANIFEST, "ClusterRoleBinding"), None)
    namespaces = []
    for role in _named(NAMESPACED_MANIFEST, "Role"):
        listed = rbac.list_role_for_all_namespaces(field_selector=f"metadata.name={role['metadata']['name']}")
        namespaces += [r.metadata.namespace for r in listed.items]
    for namespace in sorted(set(namespaces)):
        apply_namespaced(api, namespace, _named(NAMESPACED_MANIFEST, "RoleBinding"))
    return sorted(set(namespaces))


def provider_may(api: client.ApiClient, verb: str, resource: str, namespace: str | None = None) -> bool:
    """What the API server's authorizer answers for the provider's identity now (a SubjectAccessReview)."""
    review = client.V1SubjectAccessReview(
        spec=client.V1SubjectAccessReviewSpec(
            user=PROVIDER_USER,
            groups=_PROVIDER_GROUPS,
            resource_attributes=client.V1ResourceAttributes(
                verb=verb, resource=resource, namespace=namespace
            ),
        )
    )
    answer = client.AuthorizationV1Api(api).create_subject_access_review(review)
    return bool(answer.status.allowed)
