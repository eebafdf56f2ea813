"""ResourceQuota admission: a pod that would exceed a quota of its namespace is refused (403)."""

from __future__ import annotations

from typing import Any

from airflow_provider_fedsched.federation.resources import (
    add,
    format_quantity,
    parse_resource_list,
    pod_requests,
)
from airflow_provider_fedsched.sim.apiserver.objects import TERMINAL
from airflow_provider_fedsched.sim.apiserver.store import Obj, Store
from airflow_provider_fedsched.sim.util import ApiError


def _limits(spec: Obj) -> dict[str, int]:
    total: dict[str, int] = {}
    for container in spec.get("containers") or []:
        total = add(total, parse_resource_list((container.get("resources") or {}).get("limits")))
    return total


def pod_usage(pod: Obj) -> dict[str, int]:
    """What one pod charges against a quota, keyed by quota resource names."""
    spec = pod.get("spec") or {}
    requests = pod_requests(spec)
    limits = _limits(spec)
    usage = {"pods": 1, "count/pods": 1}
    for name, amount in requests.items():
        usage[f"requests.{name}"] = amount
        if name in ("cpu", "memory", "ephemeral-storage"):
            usage[name] = amount
    for name, amount in limits.items():
        usage[f"limits.{name}"] = amount
    return usage


def resource_of(quota_key: str) -> str:
    return quota_key.split(".", 1)[1] if quota_key.startswith(("requests.", "limits.")) else quota_key


def _fmt(key: str, amount: int) -> str:
    return f"{key}={format_quantity(resource_of(key), amount)}"


def parse_hard(hard: dict[str, Any] | None) -> dict[str, int]:
    """Quota keys like ``requests.cpu`` use the units of the resource they name."""
    return {k: parse_resource_list({resource_of(k): v})[resource_of(k)] for k, v in (hard or {}).items()}


def namespace_usage(store: Store, namespace: str) -> dict[str, int]:
    """What the live pods of a namespace charge against its quotas."""
    total: dict[str, int] = {}
    for pod in store.list("pods", namespace):
        if (pod.get("status") or {}).get("phase") in TERMINAL:
            continue
        total = add(total, pod_usage(pod))
    return total


def admit(store: Store, pod: Obj) -> None:
    """Raise 403 Forbidden when creating ``pod`` would exceed any quota of its namespace."""
    namespace, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
    quotas = sorted(store.list("resourcequotas", namespace), key=lambda q: q["metadata"]["name"])
    if not quotas:
        return
    requested = pod_usage(pod)
    used = namespace_usage(store, namespace)
    for quota in quotas:
        hard = parse_hard((quota.get("spec") or {}).get("hard"))
        exceeded = sorted(
            k for k, limit in hard.items() if requested.get(k, 0) and used.get(k, 0) + requested[k] > limit
        )
        if exceeded:
            message = (
                f'pods "{name}" is forbidden: exceeded quota: {quota["metadata"]["name"]}, '
                f"requested: {','.join(_fmt(k, requested[k]) for k in exceeded)}, "
                f"used: {','.join(_fmt(k, used.get(k, 0)) for k in exceeded)}, "
                f"limited: {','.join(_fmt(k, hard[k]) for k in exceeded)}"
            )
            raise ApiError(403, message, "Forbidden", {"name": name, "kind": "pods"})
        missing = sorted(
            k
            for k in hard
            if k.startswith(("requests.", "limits."))
            and k not in requested
            and resource_of(k) in ("cpu", "memory")
        )
        if missing:
            raise ApiError(
                403,
                f'pods "{name}" is forbidden: failed quota: {quota["metadata"]["name"]}: '
                f"must specify {','.join(missing)}",
                "Forbidden",
                {"name": name, "kind": "pods"},
            )
