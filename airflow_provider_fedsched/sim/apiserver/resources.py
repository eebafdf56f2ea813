"""The kinds the simulated apiserver serves: one list that the store, routing, discovery and OpenAPI read."""

from __future__ import annotations

from dataclasses import dataclass, field

VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")


@dataclass(frozen=True)
class Subresource:
    name: str
    kind: str
    verbs: tuple[str, ...]
    group: str | None = None  # when served from another group (pods/eviction is policy/v1)
    version: str | None = None


@dataclass(frozen=True)
class Resource:
    plural: str
    kind: str
    group: str = ""
    version: str = "v1"
    namespaced: bool = True
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    subresources: tuple[Subresource, ...] = field(default_factory=tuple)
    verbs: tuple[str, ...] = VERBS

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def singular(self) -> str:
        return self.kind.lower()

    @property
    def qualified(self) -> str:
        """``pods``, ``jobs.batch``: how the apiserver names a resource in messages."""
        return f"{self.plural}.{self.group}" if self.group else self.plural


_STATUS = ("get", "patch", "update")
RESOURCES: tuple[Resource, ...] = (
    Resource(
        "pods",
        "Pod",
        short_names=("po",),
        categories=("all",),
        subresources=(
            Subresource("status", "Pod", _STATUS),
            Subresource("log", "Pod", ("get",)),
            Subresource("binding", "Binding", ("create",)),
            Subresource("eviction", "Eviction", ("create",), "policy", "v1"),
            Subresource("exec", "PodExecOptions", ("create", "get")),
        ),
    ),
    Resource(
        "nodes",
        "Node",
        namespaced=False,
        short_names=("no",),
        subresources=(Subresource("status", "Node", _STATUS),),
    ),
    Resource("events", "Event", short_names=("ev",)),
    Resource(
        "namespaces",
        "Namespace",
        namespaced=False,
        short_names=("ns",),
        verbs=tuple(v for v in VERBS if v != "deletecollection"),
        subresources=(Subresource("status", "Namespace", _STATUS),),
    ),
    Resource(
        "resourcequotas",
        "ResourceQuota",
        short_names=("quota",),
        subresources=(Subresource("status", "ResourceQuota", _STATUS),),
    ),
    Resource("priorityclasses", "PriorityClass", "scheduling.k8s.io", namespaced=False, short_names=("pc",)),
    Resource("leases", "Lease", "coordination.k8s.io"),
    Resource(
        "jobs",
        "Job",
        "batch",
        categories=("all",),
        subresources=(Subresource("status", "Job", _STATUS),),
    ),
    Resource(
        "poddisruptionbudgets",
        "PodDisruptionBudget",
        "policy",
        short_names=("pdb",),
        subresources=(Subresource("status", "PodDisruptionBudget", _STATUS),),
    ),
)
BY_PLURAL: dict[str, Resource] = {r.plural: r for r in RESOURCES}
NAMESPACED = frozenset(r.plural for r in RESOURCES if r.namespaced)
# Kinds whose status only the status subresource (or a controller) writes.
STATUS_SUBRESOURCE = frozenset(r.plural for r in RESOURCES if any(s.name == "status" for s in r.subresources))


def group_versions() -> dict[str, list[str]]:
    """Every named API group and its versions (the core group "" excluded), in serving order."""
    groups: dict[str, list[str]] = {}
    for resource in RESOURCES:
        for sub in resource.subresources:
            if sub.group:
                groups.setdefault(sub.group, [])
                if sub.version and sub.version not in groups[sub.group]:
                    groups[sub.group].append(sub.version)
        if resource.group:
            versions = groups.setdefault(resource.group, [])
            if resource.version not in versions:
                versions.append(resource.version)
    return groups


def served(group: str, version: str) -> list[Resource]:
    return [r for r in RESOURCES if r.group == group and r.version == version]


def lookup(group: str, version: str, plural: str) -> Resource | None:
    resource = BY_PLURAL.get(plural)
    if resource is None or resource.group != group or resource.version != version:
        return None
    return resource
