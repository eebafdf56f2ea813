"""The pod registry: what the apiserver does on create, delete, bind and evict of a pod.

Functions over the store, used by the HTTP API and by the controllers alike (as real controllers call the
apiserver): admission (defaults, validation, priority, quota), graceful deletion, and the eviction and
binding subresources.
"""

from __future__ import annotations

import copy

from airflow_provider_fedsched.sim.apiserver import quota
from airflow_provider_fedsched.sim.apiserver.objects import TERMINAL, assign_name, default_pod, set_condition
from airflow_provider_fedsched.sim.apiserver.selectors import selector_matches
from airflow_provider_fedsched.sim.apiserver.store import Obj, Store
from airflow_provider_fedsched.sim.apiserver.validation import validate_pod
from airflow_provider_fedsched.sim.util import ApiError


def require_namespace(store: Store, namespace: str) -> None:
    ns = store.get("namespaces", "", namespace)
    if ns is None:
        raise ApiError(
            404, f'namespaces "{namespace}" not found', "NotFound", {"name": namespace, "kind": "namespaces"}
        )
    if ns["metadata"].get("deletionTimestamp"):
        raise ApiError(
            403,
            f"unable to create new content in namespace {namespace} because it is being terminated",
            "Forbidden",
            {"name": namespace, "kind": "namespaces"},
        )


def create_pod(store: Store, namespace: str, body: Obj) -> Obj:
    pod = copy.deepcopy(body)
    meta = pod.setdefault("metadata", {})
    if meta.get("namespace") and meta["namespace"] != namespace:
        raise ApiError(
            400,
            "the namespace of the provided object does not match the namespace sent on the request",
            "BadRequest",
        )
    meta["namespace"] = namespace
    require_namespace(store, namespace)
    assign_name(pod, "Pod")
    for server_field in ("uid", "resourceVersion", "creationTimestamp", "deletionTimestamp"):
        meta.pop(server_field, None)
    validate_pod(pod)
    default_pod(pod, store)
    if store.get("pods", namespace, meta["name"]) is not None:
        raise ApiError(
            409,
            f'pods "{meta["name"]}" already exists',
            "AlreadyExists",
            {"name": meta["name"], "kind": "pods"},
        )
    quota.admit(store, pod)
    if pod["spec"].get("nodeName"):
        set_condition(pod, "PodScheduled", "True")
    return store.create("pods", pod)


def check_preconditions(obj: Obj, preconditions: Obj | None, plural: str) -> None:
    meta = obj["metadata"]
    for key, label in (("uid", "UID"), ("resourceVersion", "ResourceVersion")):
        wanted = (preconditions or {}).get(key)
        if wanted and wanted != meta.get(key):
            raise ApiError(
                409,
                f"Precondition failed: {label} in precondition: {wanted}, {label} in object meta: "
                f"{meta.get(key)}",
                "Conflict",
                {"name": meta["name"], "kind": plural},
            )


def delete_pod(
    store: Store, namespace: str, name: str, grace: int | None = None, preconditions: Obj | None = None
) -> Obj:
    """Graceful deletion: a running pod is marked terminating and its kubelet removes it later."""
    pod = store.require("pods", namespace, name)
    check_preconditions(pod, preconditions, "pods")
    if grace is None:
        grace = int(pod["spec"].get("terminationGracePeriodSeconds", 30))
    meta = pod["metadata"]
    unbound = not pod["spec"].get("nodeName")
    terminal = (pod.get("status") or {}).get("phase") in TERMINAL
    if grace == 0 or unbound or terminal:
        grace = 0
    if meta.get("deletionTimestamp"):
        current = meta.get("deletionGracePeriodSeconds")
        if current is not None and grace >= current:
            return pod  # a second delete may only shorten the grace period
    if grace == 0 and not meta.get("finalizers"):
        return store.remove("pods", namespace, name)
    return store.set_deletion("pods", namespace, name, grace)


def add_disruption(store: Store, pod: Obj, reason: str, message: str) -> Obj | None:
    ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
    return store.mutate(
        "pods", ns, name, lambda p: set_condition(p, "DisruptionTarget", "True", reason, message)
    )


def healthy(pod: Obj) -> bool:
    """Running, Ready and not terminating: what a disruption budget counts."""
    status = pod.get("status") or {}
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or []
    )
    return status.get("phase") == "Running" and ready and not pod["metadata"].get("deletionTimestamp")


def _blocking_budget(store: Store, pod: Obj) -> Obj | None:
    """A PodDisruptionBudget that allows no disruption of this (healthy) pod now."""
    if not healthy(pod):
        return None  # unhealthy pods may always be evicted (the default unhealthyPodEvictionPolicy)
    labels = pod["metadata"].get("labels") or {}
    for budget in store.list("poddisruptionbudgets", pod["metadata"]["namespace"]):
        if not selector_matches((budget.get("spec") or {}).get("selector"), labels):
            continue
        if int((budget.get("status") or {}).get("disruptionsAllowed") or 0) < 1:
            return budget
    return None


def evict(store: Store, namespace: str, name: str, body: Obj | None = None) -> None:
    """The eviction subresource: a graceful deletion that respects PodDisruptionBudgets (429 otherwise)."""
    pod = store.require("pods", namespace, name)
    options = (body or {}).get("deleteOptions") or {}
    budget = _blocking_budget(store, pod)
    if budget is not None:
        raise ApiError(
            429,
            "Cannot evict pod as it would violate the pod's disruption budget.",
            "TooManyRequests",
            {
                "causes": [
                    {
                        "reason": "DisruptionBudget",
                        "message": f"The disruption budget {budget['metadata']['name']} needs "
                        f"{(budget.get('status') or {}).get('desiredHealthy', 0)} healthy pods and has "
                        f"{(budget.get('status') or {}).get('currentHealthy', 0)} currently",
                    }
                ]
            },
        )
    if (pod.get("status") or {}).get("phase") not in TERMINAL:
        pod = add_disruption(store, pod, "EvictionByEvictionAPI", "Eviction API: evicting") or pod
    delete_pod(store, namespace, name, options.get("gracePeriodSeconds"), options.get("preconditions"))


def bind(store: Store, namespace: str, name: str, node: str) -> Obj:
    """Set ``spec.nodeName`` once (the binding subresource); 409 if the pod is already bound."""
    pod = store.require("pods", namespace, name)
    if pod["spec"].get("nodeName"):
        raise ApiError(
            409,
            f'Operation cannot be fulfilled on pods/binding "{name}": pod {name} is already assigned to node '
            f'"{pod["spec"]["nodeName"]}"',
            "Conflict",
            {"name": name, "kind": "pods/binding"},
        )
    store.require("nodes", "", node)

    def apply(p: Obj) -> None:
        p["spec"]["nodeName"] = node
        p.setdefault("status", {}).pop("nominatedNodeName", None)
        set_condition(p, "PodScheduled", "True")

    bound = store.mutate("pods", namespace, name, apply)
    assert bound is not None
    return bound
