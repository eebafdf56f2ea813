"""Taints and tolerations with the federation's one matcher (``federation.request.Toleration``)."""

from __future__ import annotations

from collections.abc import Iterable
from functools import lru_cache
from typing import Any

from pydantic import ValidationError

from airflow_provider_fedsched.federation.request import Toleration
from airflow_provider_fedsched.federation.spec import Taint

Obj = dict[str, Any]


@lru_cache(maxsize=4096)
def _toleration(key: str, operator: str, value: str, effect: str) -> Toleration | None:
    try:
        return Toleration.from_k8s({"key": key, "operator": operator, "value": value, "effect": effect})
    except (ValidationError, ValueError):
        return None  # the apiserver admits no such toleration; it tolerates nothing


@lru_cache(maxsize=4096)
def _taint(key: str, value: str, effect: str) -> Taint | None:
    try:
        return Taint(key=key, value=value, effect=effect)
    except (ValidationError, ValueError):
        return None


def tolerates(toleration: Obj, taint: Obj) -> bool:
    tol = _toleration(
        str(toleration.get("key") or ""),
        str(toleration.get("operator") or "Equal"),
        str(toleration.get("value") or ""),
        str(toleration.get("effect") or ""),
    )
    parsed = _taint(
        str(taint.get("key") or ""), str(taint.get("value") or ""), str(taint.get("effect") or "")
    )
    return tol is not None and parsed is not None and tol.tolerates(parsed)


def node_taints(node: Obj, effects: Iterable[str]) -> list[Obj]:
    wanted = set(effects)
    return [dict(t) for t in (node.get("spec") or {}).get("taints") or [] if t.get("effect") in wanted]


def untolerated(
    pod_spec: Obj, node: Obj, effects: tuple[str, ...] = ("NoSchedule", "NoExecute")
) -> Obj | None:
    """The first taint of ``node`` with one of ``effects`` that no toleration of the pod tolerates."""
    tolerations = pod_spec.get("tolerations") or []
    for taint in node_taints(node, effects):
        if not any(tolerates(t, taint) for t in tolerations):
            return taint
    return None


def eviction_delay(pod_spec: Obj, taints: list[Obj]) -> float | None:
    """Seconds until the taint manager evicts a pod from a node with these NoExecute taints.

    0 when a taint is not tolerated; the smallest ``tolerationSeconds`` of the tolerations used; None
    (never) when none of them sets one, as the upstream taint manager computes it.
    """
    tolerations = pod_spec.get("tolerations") or []
    used: list[Obj] = []
    for taint in taints:
        matching = [t for t in tolerations if tolerates(t, taint)]
        if not matching:
            return 0.0
        used.extend(matching)
    seconds = [float(t["tolerationSeconds"]) for t in used if t.get("tolerationSeconds") is not None]
    if not seconds:
        return None
    return max(0.0, min(seconds))
