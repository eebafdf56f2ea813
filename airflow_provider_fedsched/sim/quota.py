"""ResourceQuota admission (403 ``exceeded quota``) and ``status.used`` bookkeeping."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from airflow_provider_fedsched.federation.resources import (
    add,
    format_quantity,
    parse_resource_list,
    pod_requests,
)
from airflow_provider_fedsched.sim.objects import TERMINAL
from airflow_provider_fedsched.sim.store import Obj, Store
from airflow_provider_fedsched.sim.util import ApiError


def _set_status(status: Obj) -> Callable[[Obj], None]:
    def apply(quota: Obj) -> None:
        quota["status"] = status

    return apply


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


def _resource_of(quota_key: str) -> str:
    return quota_key.split(".", 1)[1] if quota_key.startswith(("requests.", "limits.")) else quota_key


def _fmt(key: str, amount: int) -> str:
    return f"{key}={format_quantity(_resource_of(key), amount)}"


def _parse_hard(hard: dict[str, Any] | None) -> dict[str, int]:
    """Quota keys like ``requests.cpu`` use the units of the resource they name."""
    return {k: parse_resource_list({_resource_of(k): v})[_resource_of(k)] for k, v in (hard or {}).items()}


class QuotaController:
    def __init__(self, store: Store) -> None:
        self.store = store

    def used(self, namespace: str, exclude: str | None = None) -> dict[str, int]:
        total: dict[str, int] = {}
        for pod in self.store.list("pods", namespace):
            if (pod.get("status") or {}).get("phase") in TERMINAL or pod["metadata"]["name"] == exclude:
                continue
            total = add(total, pod_usage(pod))
        return total

    def admit(self, pod: Obj) -> None:
        """Raise 403 Forbidden when creating ``pod`` would exceed any quota of its namespace."""
        namespace, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        quotas = sorted(self.store.list("resourcequotas", namespace), key=lambda q: q["metadata"]["name"])
        if not quotas:
            return
        requested = pod_usage(pod)
        used = self.used(namespace)
        for quota in quotas:
            hard = _parse_hard((quota.get("spec") or {}).get("hard"))
            exceeded = sorted(
                k
                for k, limit in hard.items()
                if requested.get(k, 0) and used.get(k, 0) + requested[k] > limit
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
                and _resource_of(k) in ("cpu", "memory")
            )
            if missing:
                raise ApiError(
                    403,
                    f'pods "{name}" is forbidden: failed quota: {quota["metadata"]["name"]}: '
                    f"must specify {','.join(missing)}",
                    "Forbidden",
                    {"name": name, "kind": "pods"},
                )

    def refresh(self, namespace: str) -> None:
        """Recompute ``status.hard``/``status.used`` of every quota in ``namespace``."""
        quotas = self.store.list("resourcequotas", namespace)
        if not quotas:
            return
        used = self.used(namespace)
        for quota in quotas:
            hard_raw: dict[str, Any] = (quota.get("spec") or {}).get("hard") or {}
            hard = _parse_hard(hard_raw)
            status = {
                "hard": {k: str(v) for k, v in hard_raw.items()},
                "used": {k: format_quantity(_resource_of(k), used.get(k, 0)) for k in hard},
            }
            if quota.get("status") != status:
                self.store.mutate("resourcequotas", namespace, quota["metadata"]["name"], _set_status(status))
