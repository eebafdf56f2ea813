"""Validation of what clients send, with the apiserver's messages (422 Invalid naming every field at fault).

Every field a controller later reads is checked for its type here, so hostile input ends as a 4xx at the
door and never as an exception inside the scheduler, the kubelet or a list handler.
"""

from __future__ import annotations

import re
from typing import Any

from airflow_provider_fedsched.federation.resources import QuantityError, parse_resource_list
from airflow_provider_fedsched.sim.util import ApiError, quantity_too_large

Cause = tuple[str, str, str]  # field, reason, message
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
_SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")


def invalid(kind: str, name: str, causes: list[Cause]) -> ApiError:
    """422 Invalid with the apiserver's aggregated message (``Pod "x" is invalid: field: msg``)."""
    text = ", ".join(f"{field}: {msg}" for field, _, msg in causes)
    if len(causes) > 1:
        text = "[" + text + "]"
    return ApiError(
        422,
        f'{kind} "{name}" is invalid: {text}',
        "Invalid",
        {
            "name": name,
            "kind": kind,
            "causes": [{"reason": reason, "message": msg, "field": field} for field, reason, msg in causes],
        },
    )


def _type(value: Any, expected: type | tuple[type, ...], at: str, causes: list[Cause], what: str) -> bool:
    """Record a cause unless ``value`` (when present) is of the expected type; True when usable."""
    if value is None:
        return False
    if not isinstance(value, expected) or (isinstance(value, bool) and expected is not bool):
        causes.append((at, "FieldValueTypeInvalid", f"Invalid value: must be {what}"))
        return False
    return True


def _string_map(value: Any, at: str, causes: list[Cause]) -> None:
    if _type(value, dict, at, causes, "a map of string to string") and not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        causes.append((at, "FieldValueTypeInvalid", "Invalid value: must be a map of string to string"))


def quantity_causes(values: Any, at: str) -> list[Cause]:
    """A resource list (``{"cpu": "500m"}``): a map of valid, bounded Kubernetes quantities."""
    causes: list[Cause] = []
    if not _type(values, dict, at, causes, "a map of resource name to quantity"):
        return causes
    for name, raw in values.items():
        too_large = quantity_too_large(raw)
        if too_large:
            causes.append((f"{at}[{name}]", "FieldValueInvalid", f"Invalid value: {too_large}"))
            continue
        try:
            parse_resource_list({name: raw})
        except QuantityError as exc:
            causes.append((f"{at}[{name}]", "FieldValueInvalid", f"Invalid value: {exc}"))
    return causes


def name_causes(meta: dict[str, Any], label: bool = False) -> list[Cause]:
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        return [("metadata.name", "FieldValueRequired", "Required value: name or generateName is required")]
    pattern, limit = (DNS_LABEL, 63) if label else (DNS_SUBDOMAIN, 253)
    if len(name) > limit or not pattern.match(name):
        kind = "RFC 1123 label" if label else "RFC 1123 subdomain"
        return [
            (
                "metadata.name",
                "FieldValueInvalid",
                f'Invalid value: "{name[:300]}": a lowercase {kind} must consist of lower case alphanumeric '
                "characters, '-' or '.', and must start and end with an alphanumeric character",
            )
        ]
    return []


def _node_selector_terms(affinity: Any, causes: list[Cause]) -> None:
    at = "spec.affinity"
    if not _type(affinity, dict, at, causes, "an object"):
        return
    node = affinity.get("nodeAffinity")
    if not _type(node, dict, f"{at}.nodeAffinity", causes, "an object"):
        return
    required = node.get("requiredDuringSchedulingIgnoredDuringExecution")
    at = f"{at}.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
    if not _type(required, dict, at, causes, "an object"):
        return
    terms = required.get("nodeSelectorTerms")
    if not _type(terms, list, f"{at}.nodeSelectorTerms", causes, "a list"):
        return
    for i, term in enumerate(terms):
        where = f"{at}.nodeSelectorTerms[{i}]"
        if not _type(term, dict, where, causes, "an object"):
            continue
        for key in ("matchExpressions", "matchFields"):
            exprs = term.get(key)
            if not _type(exprs, list, f"{where}.{key}", causes, "a list"):
                continue
            for j, expr in enumerate(exprs):
                spot = f"{where}.{key}[{j}]"
                if not _type(expr, dict, spot, causes, "an object"):
                    continue
                if not isinstance(expr.get("key"), str) or expr.get("operator") not in _SELECTOR_OPERATORS:
                    causes.append(
                        (
                            f"{spot}.operator",
                            "FieldValueNotSupported",
                            "Unsupported value: "
                            f'"{expr.get("operator")}": supported values: {", ".join(_SELECTOR_OPERATORS)}',
                        )
                    )
                values = expr.get("values")
                if values is not None and not (
                    isinstance(values, list) and all(isinstance(v, str) for v in values)
                ):
                    causes.append(
                        (
                            f"{spot}.values",
                            "FieldValueTypeInvalid",
                            "Invalid value: must be a list of strings",
                        )
                    )


def _container_causes(key: str, i: int, container: Any, seen: set[str]) -> list[Cause]:
    at = f"spec.{key}[{i}]"
    causes: list[Cause] = []
    if not _type(container, dict, at, causes, "an object"):
        return causes
    cname = container.get("name")
    if not cname:
        causes.append((f"{at}.name", "FieldValueRequired", "Required value"))
    elif not isinstance(cname, str) or not DNS_LABEL.match(cname) or len(cname) > 63:
        causes.append((f"{at}.name", "FieldValueInvalid", f'Invalid value: "{str(cname)[:100]}"'))
    elif cname in seen:
        causes.append((f"{at}.name", "FieldValueDuplicate", f'Duplicate value: "{cname}"'))
    else:
        seen.add(cname)
    if not container.get("image"):
        causes.append((f"{at}.image", "FieldValueRequired", "Required value"))
    else:
        _type(container["image"], str, f"{at}.image", causes, "a string")
    resources = container.get("resources")
    if _type(resources, dict, f"{at}.resources", causes, "an object"):
        for part in ("requests", "limits"):
            causes += quantity_causes(resources.get(part), f"{at}.resources.{part}")
    env = container.get("env")
    if _type(env, list, f"{at}.env", causes, "a list"):
        for j, entry in enumerate(env):
            if not isinstance(entry, dict) or not isinstance(entry.get("name"), str) or not entry["name"]:
                causes.append((f"{at}.env[{j}].name", "FieldValueRequired", "Required value"))
    for field in ("command", "args"):
        values = container.get(field)
        if values is not None and not (isinstance(values, list) and all(isinstance(v, str) for v in values)):
            causes.append(
                (f"{at}.{field}", "FieldValueTypeInvalid", "Invalid value: must be a list of strings")
            )
    return causes


def validate_pod(pod: dict[str, Any]) -> None:
    meta = pod["metadata"]
    causes = name_causes(meta)
    name = meta["name"] if isinstance(meta.get("name"), str) else ""
    for key in ("labels", "annotations"):
        _string_map(meta.get(key), f"metadata.{key}", causes)
    refs = meta.get("ownerReferences")
    if _type(refs, list, "metadata.ownerReferences", causes, "a list") and not all(
        isinstance(r, dict) for r in refs
    ):
        causes.append(
            ("metadata.ownerReferences", "FieldValueTypeInvalid", "Invalid value: must be a list of objects")
        )
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        raise invalid("Pod", name, [*causes, ("spec", "FieldValueRequired", "Required value")])
    containers = spec.get("containers")
    if not containers:
        causes.append(("spec.containers", "FieldValueRequired", "Required value"))
    seen: set[str] = set()
    for key in ("initContainers", "containers"):
        items = spec.get(key)
        if _type(items, list, f"spec.{key}", causes, "a list") and isinstance(items, list):
            for i, container in enumerate(items):
                causes += _container_causes(key, i, container, seen)
    causes += toleration_causes(spec.get("tolerations"))
    _string_map(spec.get("nodeSelector"), "spec.nodeSelector", causes)
    if spec.get("affinity") is not None:
        _node_selector_terms(spec["affinity"], causes)
    for field in ("nodeName", "schedulerName", "priorityClassName", "serviceAccountName"):
        _type(spec.get(field), str, f"spec.{field}", causes, "a string")
    for field in ("terminationGracePeriodSeconds", "activeDeadlineSeconds"):
        value = spec.get(field)
        if _type(value, int, f"spec.{field}", causes, "an integer") and isinstance(value, int) and value < 0:
            causes.append((f"spec.{field}", "FieldValueInvalid", f"Invalid value: {value}: must be >= 0"))
    for field, allowed in (
        ("restartPolicy", ("Always", "OnFailure", "Never")),
        ("preemptionPolicy", ("PreemptLowerPriority", "Never")),
    ):
        value = spec.get(field)
        if value is not None and value not in allowed:
            supported = ", ".join(f'"{a}"' for a in allowed)
            causes.append(
                (
                    f"spec.{field}",
                    "FieldValueNotSupported",
                    f'Unsupported value: "{value}": supported values: {supported}',
                )
            )
    if causes:
        raise invalid("Pod", name, causes)


def toleration_causes(tolerations: Any) -> list[Cause]:
    """The apiserver's toleration validation (so that every admitted toleration has K8s semantics)."""
    causes: list[Cause] = []
    if not _type(tolerations, list, "spec.tolerations", causes, "a list"):
        return causes
    for i, tol in enumerate(tolerations):
        at = f"spec.tolerations[{i}]"
        if not _type(tol, dict, at, causes, "an object"):
            continue
        key, op = tol.get("key") or "", tol.get("operator") or "Equal"
        effect, value = tol.get("effect") or "", tol.get("value") or ""
        if not all(isinstance(v, str) for v in (key, op, effect, value)):
            causes.append(
                (at, "FieldValueTypeInvalid", "Invalid value: key, operator, value and effect are strings")
            )
            continue
        if op not in ("Equal", "Exists"):
            causes.append(
                (
                    f"{at}.operator",
                    "FieldValueNotSupported",
                    f'Unsupported value: "{op}": supported values: "Equal", "Exists"',
                )
            )
        elif not key and op != "Exists":
            causes.append(
                (
                    f"{at}.operator",
                    "FieldValueInvalid",
                    f'Invalid value: "{op}": operator must be '
                    'Exists when `key` is empty, which means "match all values and all keys"',
                )
            )
        elif op == "Exists" and value:
            causes.append(
                (
                    f"{at}.operator",
                    "FieldValueInvalid",
                    f"Invalid value: \"{op}\": value must be empty when `operator` is 'Exists'",
                )
            )
        if effect and effect not in EFFECTS:
            causes.append(
                (
                    f"{at}.effect",
                    "FieldValueNotSupported",
                    f'Unsupported value: "{effect}": supported '
                    'values: "NoSchedule", "PreferNoSchedule", "NoExecute"',
                )
            )
        seconds = tol.get("tolerationSeconds")
        if seconds is not None:
            if effect != "NoExecute":
                causes.append(
                    (
                        f"{at}.effect",
                        "FieldValueInvalid",
                        f'Invalid value: "{effect}": effect must be '
                        "'NoExecute' when `tolerationSeconds` is set",
                    )
                )
            elif isinstance(seconds, bool) or not isinstance(seconds, int) or abs(seconds) > 2**53:
                causes.append(
                    (
                        f"{at}.tolerationSeconds",
                        "FieldValueInvalid",
                        f"Invalid value: {seconds!r}: must be an integer",
                    )
                )
    return causes


def taint_causes(taints: Any, at: str = "spec.taints") -> list[Cause]:
    """Node taint validation: a key and one of the three effects."""
    causes: list[Cause] = []
    if not _type(taints, list, at, causes, "a list"):
        return causes
    for i, taint in enumerate(taints):
        if not isinstance(taint, dict) or not isinstance(taint.get("key"), str) or not taint.get("key"):
            causes.append((f"{at}[{i}].key", "FieldValueRequired", "Required value"))
        elif taint.get("effect") not in EFFECTS:
            causes.append(
                (
                    f"{at}[{i}].effect",
                    "FieldValueNotSupported",
                    f'Unsupported value: "{taint.get("effect")}": supported values: '
                    '"NoSchedule", "PreferNoSchedule", "NoExecute"',
                )
            )
        elif not isinstance(taint.get("value", ""), str):
            causes.append((f"{at}[{i}].value", "FieldValueTypeInvalid", "Invalid value: must be a string"))
    return causes
