"""Builders, defaulting and validation of the kinds the simulator serves, and status conditions."""

from __future__ import annotations

import re
import secrets
from typing import Any

from airflow_provider_fedsched.federation.resources import QuantityError, parse_resource_list
from airflow_provider_fedsched.sim.apiserver.store import Obj, Store
from airflow_provider_fedsched.sim.util import ApiError, now_iso

_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DEFAULT_TOLERATIONS = [
    {
        "key": "node.kubernetes.io/not-ready",
        "operator": "Exists",
        "effect": "NoExecute",
        "tolerationSeconds": 300,
    },
    {
        "key": "node.kubernetes.io/unreachable",
        "operator": "Exists",
        "effect": "NoExecute",
        "tolerationSeconds": 300,
    },
]
BUILTIN_PRIORITY_CLASSES = {"system-cluster-critical": 2000000000, "system-node-critical": 2000001000}
TERMINAL = ("Succeeded", "Failed")


def invalid(kind: str, name: str, causes: list[tuple[str, str, str]]) -> ApiError:
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


def assign_name(obj: Obj, kind: str) -> None:
    meta = obj.setdefault("metadata", {})
    if not meta.get("name") and meta.get("generateName"):
        alphabet = "bcdfghjklmnpqrstvwxz2456789"
        meta["name"] = meta["generateName"] + "".join(secrets.choice(alphabet) for _ in range(5))
    if not meta.get("name"):
        raise invalid(
            kind,
            "",
            [("metadata.name", "FieldValueRequired", "Required value: name or generateName is required")],
        )


def validate_pod(pod: Obj) -> None:
    name = pod["metadata"]["name"]
    causes: list[tuple[str, str, str]] = []
    if len(name) > 253 or not _DNS_SUBDOMAIN.match(name):
        causes.append(
            (
                "metadata.name",
                "FieldValueInvalid",
                f'Invalid value: "{name}": a lowercase RFC 1123 subdomain must consist of lower case '
                "alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character",
            )
        )
    spec = pod.get("spec") or {}
    containers = spec.get("containers") or []
    if not containers:
        causes.append(("spec.containers", "FieldValueRequired", "Required value"))
    seen: set[str] = set()
    for key in ("initContainers", "containers"):
        for i, container in enumerate(spec.get(key) or []):
            cname = container.get("name") or ""
            if not cname:
                causes.append((f"spec.{key}[{i}].name", "FieldValueRequired", "Required value"))
            elif not _DNS_LABEL.match(cname):
                causes.append((f"spec.{key}[{i}].name", "FieldValueInvalid", f'Invalid value: "{cname}"'))
            elif cname in seen:
                causes.append((f"spec.{key}[{i}].name", "FieldValueDuplicate", f'Duplicate value: "{cname}"'))
            seen.add(cname)
            if not container.get("image"):
                causes.append((f"spec.{key}[{i}].image", "FieldValueRequired", "Required value"))
            resources = container.get("resources") or {}
            for part in ("requests", "limits"):
                try:
                    parse_resource_list(resources.get(part))
                except QuantityError as exc:
                    causes.append((f"spec.{key}[{i}].resources.{part}", "FieldValueInvalid", str(exc)))
    causes += toleration_causes(spec.get("tolerations"))
    if causes:
        raise invalid("Pod", name, causes)


_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


def toleration_causes(tolerations: Any) -> list[tuple[str, str, str]]:
    """The apiserver's toleration validation (so that every admitted toleration has K8s semantics)."""
    if tolerations is None:
        return []
    if not isinstance(tolerations, list):
        return [("spec.tolerations", "FieldValueInvalid", "Invalid value: must be a list")]
    causes: list[tuple[str, str, str]] = []
    for i, tol in enumerate(tolerations):
        at = f"spec.tolerations[{i}]"
        if not isinstance(tol, dict):
            causes.append((at, "FieldValueInvalid", "Invalid value: must be an object"))
            continue
        key, op = tol.get("key") or "", tol.get("operator") or "Equal"
        effect, value = tol.get("effect") or "", tol.get("value") or ""
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
                    f'Invalid value: "{op}": operator must be Exists when '
                    '`key` is empty, which means "match all values and all keys"',
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
        if effect and effect not in _EFFECTS:
            causes.append(
                (
                    f"{at}.effect",
                    "FieldValueNotSupported",
                    f'Unsupported value: "{effect}": supported values: '
                    '"NoSchedule", "PreferNoSchedule", "NoExecute"',
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
            elif isinstance(seconds, bool) or not isinstance(seconds, int):
                causes.append(
                    (
                        f"{at}.tolerationSeconds",
                        "FieldValueInvalid",
                        f"Invalid value: {seconds!r}: must be an integer",
                    )
                )
    return causes


def taint_causes(taints: Any, at: str = "spec.taints") -> list[tuple[str, str, str]]:
    """Node taint validation: a key and one of the three effects."""
    if taints is None:
        return []
    if not isinstance(taints, list):
        return [(at, "FieldValueInvalid", "Invalid value: must be a list")]
    causes: list[tuple[str, str, str]] = []
    for i, taint in enumerate(taints):
        if not isinstance(taint, dict) or not taint.get("key"):
            causes.append((f"{at}[{i}].key", "FieldValueRequired", "Required value"))
        elif taint.get("effect") not in _EFFECTS:
            causes.append(
                (
                    f"{at}[{i}].effect",
                    "FieldValueNotSupported",
                    f'Unsupported value: "{taint.get("effect")}": '
                    'supported values: "NoSchedule", "PreferNoSchedule", "NoExecute"',
                )
            )
    return causes


def qos_class(spec: Obj) -> str:
    containers = (spec.get("containers") or []) + (spec.get("initContainers") or [])
    any_set, guaranteed = False, True
    for container in containers:
        resources = container.get("resources") or {}
        requests, limits = resources.get("requests") or {}, resources.get("limits") or {}
        if requests or limits:
            any_set = True
        for res in ("cpu", "memory"):
            limit = limits.get(res)
            request = requests.get(res, limit)
            if limit is None or str(request) != str(limit):
                guaranteed = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


def default_pod(pod: Obj, store: Store) -> None:
    """Apply the apiserver's defaults and admission plugins (priority, default tolerations)."""
    spec = pod.setdefault("spec", {})
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("securityContext", {})
    spec.setdefault("enableServiceLinks", True)
    spec.setdefault("serviceAccountName", "default")
    spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
    for container in spec.get("containers") or []:
        container.setdefault(
            "imagePullPolicy",
            "Always"
            if str(container.get("image", "")).endswith(":latest")
            or ":" not in str(container.get("image", ""))
            else "IfNotPresent",
        )
        container.setdefault("terminationMessagePath", "/dev/termination-log")
        container.setdefault("terminationMessagePolicy", "File")
        container.setdefault("resources", {})
        resources = container["resources"]
        if resources.get("limits") and not resources.get("requests"):
            resources["requests"] = dict(resources["limits"])
    tolerations = spec.setdefault("tolerations", [])
    for default in DEFAULT_TOLERATIONS:
        if not any(t.get("key") == default["key"] and t.get("effect") == "NoExecute" for t in tolerations):
            tolerations.append(dict(default))
    class_name = spec.get("priorityClassName")
    if class_name:
        pc = store.get("priorityclasses", "", class_name)
        if pc is None:
            raise ApiError(
                403,
                f'pods "{pod["metadata"]["name"]}" is forbidden: '
                f"no PriorityClass with name {class_name} was found",
                "Forbidden",
                {"name": pod["metadata"]["name"], "kind": "pods"},
            )
        spec["priority"] = pc.get("value", 0)
        spec["preemptionPolicy"] = pc.get("preemptionPolicy", spec["preemptionPolicy"])
    else:
        default_pc = next((p for p in store.list("priorityclasses") if p.get("globalDefault")), None)
        spec["priority"] = default_pc.get("value", 0) if default_pc else 0
        if default_pc:
            spec["priorityClassName"] = default_pc["metadata"]["name"]
    pod["status"] = {"phase": "Pending", "qosClass": qos_class(spec)}


def make_node(
    name: str,
    cpu: str,
    memory: str,
    pods: int = 110,
    extra: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    taints: list[dict[str, str]] | None = None,
    ip: str = "10.0.0.1",
) -> Obj:
    capacity = {"cpu": str(cpu), "memory": str(memory), "pods": str(pods), "ephemeral-storage": "100Gi"}
    capacity.update({k: str(v) for k, v in (extra or {}).items()})
    now = now_iso()
    node_labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "type": "sim",
        **(labels or {}),
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": node_labels,
            "annotations": {"node.alpha.kubernetes.io/ttl": "0"},
        },
        "spec": {"taints": [dict(t) for t in taints or []]},
        "status": {
            "capacity": capacity,
            "allocatable": dict(capacity),
            "conditions": [
                _node_condition(
                    "MemoryPressure",
                    "False",
                    "KubeletHasSufficientMemory",
                    "kubelet has sufficient memory available",
                    now,
                ),
                _node_condition(
                    "DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure", now
                ),
                _node_condition(
                    "PIDPressure",
                    "False",
                    "KubeletHasSufficientPID",
                    "kubelet has sufficient PID available",
                    now,
                ),
                _node_condition("Ready", "True", "KubeletReady", "kubelet is posting ready status", now),
            ],
            "addresses": [{"type": "InternalIP", "address": ip}, {"type": "Hostname", "address": name}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "architecture": "amd64",
                "operatingSystem": "linux",
                "kubeletVersion": "v1.31.0-fedsched-sim",
                "kubeProxyVersion": "v1.31.0-fedsched-sim",
                "containerRuntimeVersion": "sim://1.0",
                "kernelVersion": "6.1.0",
                "osImage": "fedsched simulated node",
                "machineID": name,
                "systemUUID": name,
                "bootID": name,
            },
            "phase": "Running",
        },
    }


def _node_condition(ctype: str, status: str, reason: str, message: str, now: str) -> Obj:
    return {
        "type": ctype,
        "status": status,
        "reason": reason,
        "message": message,
        "lastHeartbeatTime": now,
        "lastTransitionTime": now,
    }


def set_condition(
    obj: Obj,
    ctype: str,
    status: str,
    reason: str | None = None,
    message: str | None = None,
    probe_times: bool = True,
) -> None:
    """Upsert a status condition, moving lastTransitionTime only when the status flips."""
    conditions = obj.setdefault("status", {}).setdefault("conditions", [])
    now = now_iso()
    current = next((c for c in conditions if c.get("type") == ctype), None)
    if current is None:
        current = {"type": ctype}
        conditions.append(current)
    if current.get("status") != status:
        current["lastTransitionTime"] = now
    current["status"] = status
    if probe_times:
        current["lastProbeTime"] = None
    for key, value in (("reason", reason), ("message", message)):
        if value is None:
            current.pop(key, None)
        else:
            current[key] = value


def get_condition(obj: Obj, ctype: str) -> Obj | None:
    return next(
        (c for c in (obj.get("status") or {}).get("conditions") or [] if c.get("type") == ctype), None
    )
