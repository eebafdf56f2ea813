"""The three patch types the apiserver accepts: strategic merge, JSON merge (RFC 7386) and JSON patch."""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch

from airflow_provider_fedsched.sim.util import ApiError

# Lists merged by key in a strategic-merge patch (the patchMergeKey tags of the core/v1 types we serve).
MERGE_KEYS: dict[str, str] = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "containerStatuses": "name",
    "initContainerStatuses": "name",
    "ephemeralContainerStatuses": "name",
    "conditions": "type",
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "ports": "containerPort",
    "imagePullSecrets": "name",
    "taints": "key",
    "addresses": "type",
    "ownerReferences": "uid",
    "podIPs": "ip",
    "hostIPs": "ip",
}

STRATEGIC = "application/strategic-merge-patch+json"
MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
APPLY = "application/apply-patch+yaml"


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge recursively, ``null`` deletes, everything else (lists too) replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def strategic_merge(target: Any, patch: Any, key: str | None = None) -> Any:
    """Strategic merge patch: like merge patch, but keyed lists merge element by element."""
    if isinstance(patch, dict):
        if patch.get("$patch") == "replace":
            return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
        if patch.get("$patch") == "delete":
            return None
        result = dict(target) if isinstance(target, dict) else {}
        for name, value in patch.items():
            if name.startswith("$"):
                continue
            if value is None:
                result.pop(name, None)
                continue
            merged = strategic_merge(result.get(name), value, name)
            if merged is None and isinstance(value, dict):
                result.pop(name, None)
            else:
                result[name] = merged
        return result
    if isinstance(patch, list) and key in MERGE_KEYS and isinstance(target, list):
        return _merge_keyed_list(target, patch, MERGE_KEYS[key])
    return copy.deepcopy(patch)


def _merge_keyed_list(target: list[Any], patch: list[Any], merge_key: str) -> list[Any]:
    result = [copy.deepcopy(item) for item in target]
    for item in patch:
        if not isinstance(item, dict) or merge_key not in item:
            if isinstance(item, dict) and item.get("$patch") == "replace":
                return [p for p in patch if not (isinstance(p, dict) and "$patch" in p)]
            continue
        index = next(
            (
                i
                for i, cur in enumerate(result)
                if isinstance(cur, dict) and cur.get(merge_key) == item[merge_key]
            ),
            None,
        )
        if item.get("$patch") == "delete":
            if index is not None:
                result.pop(index)
            continue
        if index is None:
            result.append({k: v for k, v in item.items() if k != "$patch"})
        else:
            result[index] = strategic_merge(result[index], item)
    return result


def apply_patch(obj: dict[str, Any], body: Any, content_type: str) -> dict[str, Any]:
    """Apply ``body`` of ``content_type`` to a copy of ``obj``; bad patches -> 4xx ``Status``."""
    ctype = content_type.split(";")[0].strip().lower()
    if ctype == JSON_PATCH:
        if not isinstance(body, list):
            raise ApiError(400, "json patch must be a list of operations")
        try:
            result = jsonpatch.apply_patch(obj, body, in_place=False)
        except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as exc:
            raise ApiError(
                422, f"the server rejected our request due to an error in our request: {exc}"
            ) from None
        return dict(result)
    if not isinstance(body, dict):
        raise ApiError(400, "patch body must be a JSON object")
    if ctype == MERGE:
        return dict(merge_patch(obj, body))
    if ctype in (STRATEGIC, APPLY, "application/json"):
        return dict(strategic_merge(obj, body))
    raise ApiError(
        415,
        f"the body of the request was in an unknown format - accepted media types include: "
        f"{JSON_PATCH}, {MERGE}, {STRATEGIC}",
    )
