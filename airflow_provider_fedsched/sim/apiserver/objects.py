"""Builders, defaulting and validation of the kinds the simulator serves, and status conditions."""

from __future__ import annotations

import secrets

from airflow_provider_fedsched.sim.apiserver.store import Obj, Store
from airflow_provider_fedsched.sim.apiserver.validation import invalid
from airflow_provider_fedsched.sim.util import ApiError, now_iso

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


def assign_name(obj: Obj, kind: str) -> None:
    meta = obj.setdefault("metadata", {})
    generate = meta.get("generateName")
    if not meta.get("name") and generate and (not isinstance(generate, str) or len(generate) > 253):
        raise invalid(
            kind, "", [("metadata.generateName", "FieldValueInvalid", "Invalid value: must be a name prefix")]
        )
    if not meta.get("name") and meta.get("generateName"):
        alphabet = "bcdfghjklmnpqrstvwxz2456789"
        meta["name"] = meta["generateName"] + "".join(secrets.choice(alphabet) for _ in range(5))
    if not meta.get("name"):
        raise invalid(
            kind,
            "",
            [("metadata.name", "FieldValueRequired", "Required value: name or generateName is required")],
        )


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
    provided = spec.get("priority")
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
    if provided is not None and provided != spec["priority"]:
        raise ApiError(
            403,
            f'pods "{pod["metadata"]["name"]}" is forbidden: the integer value of priority ({provided}) '
            "must not be provided in pod spec; priority admission controller computed "
            f"{spec['priority']} from the given PriorityClass name",
            "Forbidden",
            {"name": pod["metadata"]["name"], "kind": "pods"},
        )
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
