"""Create, replace, patch and delete of every kind: the generic registry with each kind's strategy.

The HTTP API and the controllers both write through here, so an object is admitted, defaulted, validated
and deleted (finalizers, grace, propagation) the same way whoever writes it.
"""

from __future__ import annotations

import copy
from datetime import datetime
from typing import Any

from airflow_provider_fedsched.sim.apiserver import jobs, pods
from airflow_provider_fedsched.sim.apiserver.objects import assign_name, make_node
from airflow_provider_fedsched.sim.apiserver.patch import apply_patch
from airflow_provider_fedsched.sim.apiserver.resources import BY_PLURAL, NAMESPACED, STATUS_SUBRESOURCE
from airflow_provider_fedsched.sim.apiserver.store import Obj, Store
from airflow_provider_fedsched.sim.apiserver.validation import (
    invalid,
    name_causes,
    quantity_causes,
    taint_causes,
)
from airflow_provider_fedsched.sim.util import ApiError, new_uid

PROPAGATION = ("Orphan", "Background", "Foreground")
ORPHAN_FINALIZER = "orphan"
FOREGROUND_FINALIZER = "foregroundDeletion"


def success_status(code: int = 200, details: dict[str, Any] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"}
    if details is not None:
        body["details"] = details
    else:
        body["code"] = code
    return body


def _require_object(body: Any) -> Obj:
    if not isinstance(body, dict):
        raise ApiError(400, "the body of the request must be a JSON object", "BadRequest")
    meta = body.get("metadata")
    if meta is not None and not isinstance(meta, dict):
        raise ApiError(400, "metadata: must be an object", "BadRequest")
    for key in ("labels", "annotations"):
        values = (meta or {}).get(key)
        if values is not None and (
            not isinstance(values, dict) or not all(isinstance(v, str) for v in values.values())
        ):
            raise ApiError(400, f"metadata.{key}: must be a map of string to string", "BadRequest")
    finalizers = (meta or {}).get("finalizers")
    if finalizers is not None and not (
        isinstance(finalizers, list) and all(isinstance(f, str) for f in finalizers)
    ):
        raise ApiError(400, "metadata.finalizers: must be a list of strings", "BadRequest")
    for key in ("spec", "status"):
        if body.get(key) is not None and not isinstance(body[key], dict):
            raise ApiError(400, f"{key}: must be an object", "BadRequest")
    return body


# -- per-kind checks -------------------------------------------------------------------------------------
def _micro_time(value: Any, field: str) -> None:
    if value is None:
        return
    try:
        datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        raise ApiError(400, f'{field}: unable to parse "{value}" as a time', "BadRequest") from None


def _validate(plural: str, obj: Obj) -> None:
    name = obj["metadata"].get("name", "")
    kind = BY_PLURAL[plural].kind
    spec = obj.get("spec") or {}
    causes = name_causes(obj["metadata"], label=plural == "namespaces")
    if causes:
        raise invalid(kind, str(name), causes)
    if plural == "nodes":
        causes = taint_causes(spec.get("taints"))
        status = obj.get("status") or {}
        for key in ("capacity", "allocatable"):
            causes += quantity_causes(status.get(key), f"status.{key}")
        if causes:
            raise invalid(kind, name, causes)
    elif plural == "leases":
        for key in ("acquireTime", "renewTime"):
            _micro_time(spec.get(key), f"spec.{key}")
        for key, minimum in (("leaseDurationSeconds", 1), ("leaseTransitions", 0)):
            value = spec.get(key)
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or value < minimum
            ):
                raise invalid(
                    kind,
                    name,
                    [
                        (
                            f"spec.{key}",
                            "FieldValueInvalid",
                            f"Invalid value: {value!r}: must be an integer >= {minimum}",
                        )
                    ],
                )
    elif plural == "poddisruptionbudgets":
        if spec.get("minAvailable") is not None and spec.get("maxUnavailable") is not None:
            raise invalid(
                kind,
                name,
                [
                    (
                        "spec",
                        "FieldValueInvalid",
                        "Invalid value: minAvailable and maxUnavailable cannot be both set",
                    )
                ],
            )
    elif plural == "resourcequotas":
        hard = spec.get("hard") or {}
        if not isinstance(hard, dict):
            raise invalid(
                kind, name, [("spec.hard", "FieldValueTypeInvalid", "Invalid value: must be a map")]
            )
        causes = [c for k, v in hard.items() for c in quantity_causes({str(k): v}, "spec.hard")]
        if causes:
            raise invalid(kind, name, causes)
    elif plural == "priorityclasses" and not isinstance(obj.get("value"), int):
        raise invalid(kind, name, [("value", "FieldValueRequired", "Required value: an integer")])


# -- create ----------------------------------------------------------------------------------------------
def create(store: Store, plural: str, namespace: str, body: Any) -> Obj:
    body = _require_object(body)
    if plural == "pods":
        return pods.create_pod(store, namespace, body)
    obj = copy.deepcopy(body)
    meta = obj.setdefault("metadata", {})
    kind = BY_PLURAL[plural].kind
    if plural in NAMESPACED:
        if meta.get("namespace") and meta["namespace"] != namespace:
            raise ApiError(
                400, "the namespace of the provided object does not match the namespace sent on the request"
            )
        pods.require_namespace(store, namespace)
        meta["namespace"] = namespace
    for server_field in ("uid", "resourceVersion", "creationTimestamp", "deletionTimestamp", "generation"):
        meta.pop(server_field, None)
    assign_name(obj, kind)
    uid = new_uid()
    if plural == "namespaces":
        obj["spec"] = {"finalizers": ["kubernetes"]}
        obj["status"] = {"phase": "Active"}
        meta.setdefault("labels", {})["kubernetes.io/metadata.name"] = meta["name"]
    elif plural == "nodes":
        base = make_node(meta["name"], "4", "16Gi")
        base["metadata"].update(meta)
        base["spec"].update(obj.get("spec") or {})
        base["status"].update(obj.get("status") or {})
        obj = base
    elif plural == "jobs":
        obj.pop("status", None)
        jobs.prepare_job(obj, uid)
        obj["status"] = {}
    _validate(plural, obj)
    return store.create(plural, obj, uid)


# -- replace and patch -----------------------------------------------------------------------------------
def write(
    store: Store,
    plural: str,
    namespace: str,
    name: str,
    body: Any,
    content_type: str | None,
    status_only: bool = False,
) -> Obj:
    """PUT (``content_type`` None) or PATCH one object; ``status_only`` for the status subresource."""
    current = store.require(plural, namespace, name)
    if content_type is None:
        new = copy.deepcopy(_require_object(body))
        expected = (new.get("metadata") or {}).get("resourceVersion")
    else:
        new = apply_patch(current, body, content_type)
        _require_object(new)
        expected = (body.get("metadata") or {}).get("resourceVersion") if isinstance(body, dict) else None
    if expected is not None and not isinstance(expected, str):
        raise ApiError(400, "metadata.resourceVersion: must be a string", "BadRequest")
    meta = new.setdefault("metadata", {})
    if meta.get("name", name) != name:
        raise ApiError(
            400, f"the name of the object ({meta.get('name')}) does not match the name on the URL ({name})"
        )
    meta["name"] = name
    if plural in NAMESPACED:
        meta["namespace"] = namespace
    else:
        meta.pop("namespace", None)
    if status_only:
        merged = copy.deepcopy(current)
        merged["status"] = new.get("status", {})
        merged["metadata"]["resourceVersion"] = meta.get("resourceVersion")
        new = merged
    elif plural in STATUS_SUBRESOURCE and "status" in current:
        new["status"] = copy.deepcopy(current["status"])
    if plural == "jobs" and not status_only:
        jobs.check_update(current, new)
    if not status_only or plural == "nodes":
        _validate(plural, new)
    return store.update(plural, new, expected)


# -- delete ----------------------------------------------------------------------------------------------
def _propagation(plural: str, options: Obj) -> str:
    policy = options.get("propagationPolicy")
    if policy is None and options.get("orphanDependents") is not None:
        policy = "Orphan" if options["orphanDependents"] else "Background"
    if policy is None:
        return jobs.DEFAULT_PROPAGATION if plural == "jobs" else "Background"
    if policy not in PROPAGATION:
        raise ApiError(
            400,
            f'DeleteOptions.propagationPolicy: Unsupported value: "{policy}": supported values: '
            '"Foreground", "Background", "Orphan"',
            "BadRequest",
        )
    return str(policy)


def delete(store: Store, plural: str, namespace: str, name: str, options: Obj | None = None) -> Obj:
    """Delete one object the way the apiserver does; the answer is what it would send back."""
    options = options or {}
    grace = options.get("gracePeriodSeconds")
    if grace is not None and (isinstance(grace, bool) or not isinstance(grace, int) or grace < 0):
        raise ApiError(400, f"gracePeriodSeconds: invalid value {grace!r}: must be a non-negative integer")
    policy = _propagation(plural, options)
    if plural == "pods":
        return pods.delete_pod(store, namespace, name, grace, options.get("preconditions"))
    current = store.require(plural, namespace, name)
    pods.check_preconditions(current, options.get("preconditions"), plural)
    if plural == "namespaces":
        if current["metadata"].get("deletionTimestamp"):
            return current
        store.mutate(
            "namespaces", "", name, lambda ns: ns.setdefault("status", {}).update(phase="Terminating")
        )
        return store.set_deletion("namespaces", "", name, 0)
    finalizers = {"Orphan": [ORPHAN_FINALIZER], "Foreground": [FOREGROUND_FINALIZER]}.get(policy, [])
    if current["metadata"].get("finalizers") or finalizers:
        return store.set_deletion(plural, namespace, name, 0, finalizers)
    store.remove(plural, namespace, name)
    resource = BY_PLURAL[plural]
    return success_status(
        200,
        {"name": name, "group": resource.group or None, "kind": plural, "uid": current["metadata"]["uid"]},
    )
