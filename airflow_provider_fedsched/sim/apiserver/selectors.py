"""Label and field selectors with the Kubernetes grammar (``=``, ``!=``, ``in``, ``notin``, ``!key``...)."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from airflow_provider_fedsched.sim.util import ApiError

Requirement = Callable[[Mapping[str, str]], bool]

_SET = re.compile(r"^\s*(!?)\s*([A-Za-z0-9_./-]+)\s+(in|notin)\s*\(([^)]*)\)\s*$")
_CMP = re.compile(r"^\s*([A-Za-z0-9_./-]+)\s*(==|!=|=)\s*([A-Za-z0-9_.-]*)\s*$")
_EXISTS = re.compile(r"^\s*(!?)\s*([A-Za-z0-9_./-]+)\s*$")


def _split_top(selector: str) -> list[str]:
    """Split on commas that are not inside ``in (...)`` value sets."""
    parts: list[str] = []
    current: list[str] = []
    depth = 0
    for char in selector:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    parts.append("".join(current))
    return [p for p in parts if p.strip()]


def _value_in(key: str, values: set[str]) -> Requirement:
    return lambda labels: labels.get(key) in values


def _value_not_in(key: str, values: set[str]) -> Requirement:
    return lambda labels: labels.get(key) not in values


def _value_equals(key: str, value: str) -> Requirement:
    return lambda labels: labels.get(key) == value


def _value_not_equals(key: str, value: str) -> Requirement:
    return lambda labels: labels.get(key) != value


def _exists(key: str) -> Requirement:
    return lambda labels: key in labels


def _absent(key: str) -> Requirement:
    return lambda labels: key not in labels


def parse_label_selector(selector: str | None) -> Callable[[Mapping[str, str] | None], bool]:
    """Compile a label selector into a predicate over a labels map. Bad syntax -> 400 BadRequest."""
    requirements: list[Requirement] = []
    for part in _split_top(selector or ""):
        if m := _SET.match(part):
            negate, key, op, raw = m.groups()
            if negate:
                raise ApiError(400, f"unable to parse requirement: {part!r}")
            values = {v.strip() for v in raw.split(",") if v.strip()}
            requirements.append(_value_in(key, values) if op == "in" else _value_not_in(key, values))
        elif m := _CMP.match(part):
            key, op, value = m.groups()
            requirements.append(_value_not_equals(key, value) if op == "!=" else _value_equals(key, value))
        elif m := _EXISTS.match(part):
            negate, key = m.groups()
            requirements.append(_absent(key) if negate else _exists(key))
        else:
            raise ApiError(400, f"unable to parse requirement: found '{part.strip()}', expected: identifier")

    def predicate(labels: Mapping[str, str] | None) -> bool:
        labels = labels or {}
        return all(req(labels) for req in requirements)

    return predicate


def _pod_fields(obj: Mapping[str, Any]) -> dict[str, str]:
    meta, spec, status = obj.get("metadata", {}), obj.get("spec", {}), obj.get("status", {})
    return {
        "metadata.name": meta.get("name", ""),
        "metadata.namespace": meta.get("namespace", ""),
        "spec.nodeName": spec.get("nodeName", "") or "",
        "spec.schedulerName": spec.get("schedulerName", ""),
        "spec.serviceAccountName": spec.get("serviceAccountName", "") or "",
        "spec.restartPolicy": spec.get("restartPolicy", ""),
        "status.phase": status.get("phase", ""),
        "status.podIP": status.get("podIP", "") or "",
        "status.nominatedNodeName": status.get("nominatedNodeName", "") or "",
    }


def _event_fields(obj: Mapping[str, Any]) -> dict[str, str]:
    inv, meta = obj.get("involvedObject", {}), obj.get("metadata", {})
    source = obj.get("source", {})
    fields = {
        f"involvedObject.{k}": str(inv.get(k, "") or "")
        for k in ("kind", "namespace", "name", "uid", "apiVersion", "resourceVersion", "fieldPath")
    }
    fields.update(
        {
            "metadata.name": meta.get("name", ""),
            "metadata.namespace": meta.get("namespace", ""),
            "reason": obj.get("reason", "") or "",
            "reportingComponent": obj.get("reportingComponent", "") or "",
            "source": source.get("component", "") or "",
            "type": obj.get("type", "") or "",
        }
    )
    return fields


def _node_fields(obj: Mapping[str, Any]) -> dict[str, str]:
    return {
        "metadata.name": obj.get("metadata", {}).get("name", ""),
        "spec.unschedulable": "true" if obj.get("spec", {}).get("unschedulable") else "false",
    }


def _meta_fields(obj: Mapping[str, Any]) -> dict[str, str]:
    meta = obj.get("metadata", {})
    return {"metadata.name": meta.get("name", ""), "metadata.namespace": meta.get("namespace", "") or ""}


FIELD_GETTERS: dict[str, Callable[[Mapping[str, Any]], dict[str, str]]] = {
    "pods": _pod_fields,
    "events": _event_fields,
    "nodes": _node_fields,
}


def parse_field_selector(plural: str, selector: str | None) -> Callable[[Mapping[str, Any]], bool]:
    """Compile a field selector for ``plural``; unknown fields -> 400 as the apiserver answers."""
    getter = FIELD_GETTERS.get(plural, _meta_fields)
    probe = getter({})
    checks: list[tuple[str, bool, str]] = []
    for part in _split_top(selector or ""):
        m = _CMP.match(part)
        if not m:
            raise ApiError(400, f"invalid selector: '{selector}'; can't understand '{part}'")
        field, op, value = m.groups()
        if field not in probe:
            raise ApiError(400, f"field label not supported: {field}")
        checks.append((field, op != "!=", value))

    def predicate(obj: Mapping[str, Any]) -> bool:
        if not checks:
            return True
        fields = getter(obj)
        return all((fields.get(f) == v) == eq for f, eq, v in checks)

    return predicate


def expression_matches(expr: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """One requirement of a label or node selector (``Gt``/``Lt`` compare integers, node selectors only)."""
    key, op, values = expr.get("key", ""), expr.get("operator", ""), expr.get("values") or []
    if op == "In":
        return key in labels and labels[key] in values
    if op == "NotIn":
        return labels.get(key) not in values
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    if op in ("Gt", "Lt") and key in labels and values:
        try:
            left, right = int(labels[key]), int(values[0])
        except ValueError:
            return False
        return left > right if op == "Gt" else left < right
    return False


def selector_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str] | None) -> bool:
    """A ``metav1.LabelSelector`` (matchLabels + matchExpressions); an empty selector matches everything."""
    if selector is None:
        return False  # a nil selector selects nothing (PDBs, Jobs)
    labels = labels or {}
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    return all(expression_matches(e, labels) for e in selector.get("matchExpressions") or [])


def selector_string(selector: Mapping[str, Any] | None) -> str:
    """Render a LabelSelector in the query grammar (``a=b,c in (d,e)``), as kubectl's Table shows it."""
    parts = [f"{k}={v}" for k, v in sorted(((selector or {}).get("matchLabels") or {}).items())]
    for expr in (selector or {}).get("matchExpressions") or []:
        key, op, values = expr.get("key", ""), expr.get("operator", ""), expr.get("values") or []
        if op in ("In", "NotIn"):
            parts.append(f"{key} {op.lower()} ({','.join(sorted(values))})")
        elif op == "Exists":
            parts.append(key)
        elif op == "DoesNotExist":
            parts.append(f"!{key}")
    return ",".join(parts)
