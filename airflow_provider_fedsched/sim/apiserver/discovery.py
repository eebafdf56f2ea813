"""Discovery documents (``/version``, ``/api``, ``/apis``, resource lists), built from the kind catalogue."""

from __future__ import annotations

from typing import Any

from airflow_provider_fedsched.sim.apiserver.resources import RESOURCES, Resource, group_versions, served

VERSION = {
    "major": "1",
    "minor": "31",
    "gitVersion": "v1.31.0-fedsched-sim",
    "gitCommit": "0000000000000000000000000000000000000000",
    "gitTreeState": "clean",
    "buildDate": "2024-08-13T00:00:00Z",
    "goVersion": "go1.22.5",
    "compiler": "gc",
    "platform": "linux/amd64",
}
ROOT_PATHS = [
    "/api",
    "/api/v1",
    "/apis",
    *(f"/apis/{g}" for g in group_versions()),
    *(f"/apis/{g}/{v}" for g, versions in group_versions().items() for v in versions),
    "/healthz",
    "/livez",
    "/openapi/v2",
    "/openapi/v3",
    "/readyz",
    "/version",
]


def _entry(resource: Resource) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "name": resource.plural,
        "singularName": resource.singular,
        "namespaced": resource.namespaced,
        "kind": resource.kind,
        "verbs": list(resource.verbs),
    }
    if resource.short_names:
        entry["shortNames"] = list(resource.short_names)
    if resource.categories:
        entry["categories"] = list(resource.categories)
    return entry


def resource_list(group: str, version: str) -> dict[str, Any] | None:
    """The APIResourceList of one group version, subresources included; None if not served."""
    resources: list[dict[str, Any]] = []
    for resource in served(group, version):
        resources.append(_entry(resource))
        for sub in resource.subresources:
            if sub.group is None:
                resources.append(
                    {
                        "name": f"{resource.plural}/{sub.name}",
                        "singularName": "",
                        "namespaced": resource.namespaced,
                        "kind": sub.kind,
                        "verbs": list(sub.verbs),
                    }
                )
    # Subresources served from another group (pods/eviction is policy/v1 on the core pods resource).
    for resource in RESOURCES:
        for sub in resource.subresources:
            if sub.group is not None and resource.group == group and resource.version == version:
                resources.append(
                    {
                        "name": f"{resource.plural}/{sub.name}",
                        "singularName": "",
                        "namespaced": resource.namespaced,
                        "group": sub.group,
                        "version": sub.version,
                        "kind": sub.kind,
                        "verbs": list(sub.verbs),
                    }
                )
    if not resources and not (group and version in group_versions().get(group, [])):
        return None
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group}/{version}" if group else version,
        "resources": resources,
    }


def api_group(name: str) -> dict[str, Any] | None:
    versions = group_versions().get(name)
    if not versions:
        return None
    entries = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]
    return {"name": name, "versions": entries, "preferredVersion": entries[0]}


def group_list() -> dict[str, Any]:
    return {
        "kind": "APIGroupList",
        "apiVersion": "v1",
        "groups": [api_group(g) for g in group_versions()],
    }


def core_versions(port: int) -> dict[str, Any]:
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": f"127.0.0.1:{port}"}],
    }
