"""Server-side printing: ``meta.k8s.io/v1`` Tables with the real apiserver's columns (kubectl get)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from airflow_provider_fedsched.sim.apiserver.resources import Resource
from airflow_provider_fedsched.sim.apiserver.selectors import selector_string
from airflow_provider_fedsched.sim.util import parse_time

Obj = dict[str, Any]
Column = tuple[str, str, int]  # name, type, priority (1 = only with -o wide)


def wants_table(accept: str) -> bool:
    return any("as=Table" in part and "g=meta.k8s.io" in part for part in accept.split(","))


def human_duration(seconds: float) -> str:
    """apimachinery's ``duration.HumanDuration``, the AGE column's format."""
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        return f"{minutes}m{s % 60}s" if s % 60 else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = s // 3600
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        return f"{hours // 24}d{hours % 24}h" if hours % 24 else f"{hours // 24}d"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        days = (hours // 24) % 365
        return f"{hours // 24 // 365}y{days}d" if days else f"{hours // 24 // 365}y"
    return f"{hours // 24 // 365}y"


def since(timestamp: str | None) -> str:
    if not timestamp:
        return "<unknown>"
    try:
        return human_duration(time.time() - parse_time(timestamp))
    except (ValueError, OverflowError):
        return "<invalid>"


def _age(obj: Obj) -> str:
    return since(obj["metadata"].get("creationTimestamp"))


def _condition(obj: Obj, ctype: str) -> Obj | None:
    return next(
        (c for c in (obj.get("status") or {}).get("conditions") or [] if c.get("type") == ctype), None
    )


# -- pods ------------------------------------------------------------------------------------------------
def pod_status(pod: Obj) -> tuple[str, int, int, int, str | None]:
    """kubectl's pod STATUS reason, ready and total containers, restarts, last restart time."""
    status = pod.get("status") or {}
    reason = status.get("reason") or status.get("phase") or "Unknown"
    statuses = status.get("containerStatuses") or []
    ready = restarts = 0
    running = False
    last_restart: str | None = None
    for cs in reversed(statuses):
        restarts += int(cs.get("restartCount") or 0)
        finished = ((cs.get("lastState") or {}).get("terminated") or {}).get("finishedAt")
        if finished and (last_restart is None or finished > last_restart):
            last_restart = finished
        state = cs.get("state") or {}
        waiting, terminated = state.get("waiting"), state.get("terminated")
        if waiting and waiting.get("reason"):
            reason = waiting["reason"]
        elif terminated and terminated.get("reason"):
            reason = terminated["reason"]
        elif terminated:
            signal = terminated.get("signal")
            reason = f"Signal:{signal}" if signal else f"ExitCode:{terminated.get('exitCode', 0)}"
        elif cs.get("ready") and state.get("running"):
            running = True
            ready += 1
    if reason == "Completed" and running:
        ready_cond = _condition(pod, "Ready")
        reason = "Running" if ready_cond and ready_cond.get("status") == "True" else "NotReady"
    if pod["metadata"].get("deletionTimestamp"):
        reason = "Unknown" if status.get("reason") == "NodeLost" else "Terminating"
    total = len((pod.get("spec") or {}).get("containers") or [])
    return reason, ready, total, restarts, last_restart


def _pod_cells(pod: Obj) -> list[Any]:
    reason, ready, total, restarts, last_restart = pod_status(pod)
    restart_cell = f"{restarts} ({since(last_restart)} ago)" if restarts and last_restart else str(restarts)
    status, spec = pod.get("status") or {}, pod.get("spec") or {}
    return [
        pod["metadata"]["name"],
        f"{ready}/{total}",
        reason,
        restart_cell,
        _age(pod),
        status.get("podIP") or "<none>",
        spec.get("nodeName") or "<none>",
        status.get("nominatedNodeName") or "<none>",
        "<none>",
    ]


# -- nodes -----------------------------------------------------------------------------------------------
def _node_cells(node: Obj) -> list[Any]:
    ready = _condition(node, "Ready")
    states = ["Unknown"] if ready is None else ["Ready" if ready.get("status") == "True" else "NotReady"]
    if (node.get("spec") or {}).get("unschedulable"):
        states.append("SchedulingDisabled")
    labels = node["metadata"].get("labels") or {}
    roles = sorted(
        {k.split("/", 1)[1] for k in labels if k.startswith("node-role.kubernetes.io/") and "/" in k}
        | ({labels["kubernetes.io/role"]} if labels.get("kubernetes.io/role") else set())
    )
    status = node.get("status") or {}
    info = status.get("nodeInfo") or {}
    addresses = {a.get("type"): a.get("address") for a in status.get("addresses") or []}
    return [
        node["metadata"]["name"],
        ",".join(states),
        ",".join(roles) or "<none>",
        _age(node),
        info.get("kubeletVersion", ""),
        addresses.get("InternalIP") or "<none>",
        addresses.get("ExternalIP") or "<none>",
        info.get("osImage", ""),
        info.get("kernelVersion", ""),
        info.get("containerRuntimeVersion", ""),
    ]


# -- events ----------------------------------------------------------------------------------------------
def _event_cells(event: Obj) -> list[Any]:
    last = since(event.get("lastTimestamp") or event.get("eventTime"))
    first = since(event.get("firstTimestamp") or event.get("eventTime"))
    count = int(event.get("count") or 1)
    interval = f"{last} (x{count} over {first})" if count > 1 else last
    involved = event.get("involvedObject") or {}
    source = event.get("source") or {}
    return [
        interval,
        event.get("type", ""),
        event.get("reason", ""),
        f"{str(involved.get('kind', '')).lower()}/{involved.get('name', '')}",
        involved.get("fieldPath", ""),
        ", ".join(v for v in (source.get("component"), source.get("host")) if v),
        event.get("message", ""),
        first,
        count,
        event["metadata"]["name"],
    ]


# -- the rest --------------------------------------------------------------------------------------------
def _job_cells(job: Obj) -> list[Any]:
    spec, status = job.get("spec") or {}, job.get("status") or {}
    succeeded = int(status.get("succeeded") or 0)
    if spec.get("completions") is not None:
        completions = f"{succeeded}/{spec['completions']}"
    else:
        parallelism = int(spec.get("parallelism") or 0)
        completions = f"{succeeded}/1 of {parallelism}" if parallelism > 1 else f"{succeeded}/1"
    start, end = status.get("startTime"), status.get("completionTime")
    duration = ""
    if start:
        duration = human_duration(parse_time(end) - parse_time(start)) if end else since(start)

    def true(ctype: str) -> bool:
        cond = _condition(job, ctype)
        return bool(cond and cond.get("status") == "True")

    if true("Complete"):
        state = "Complete"
    elif true("Failed"):
        state = "Failed"
    elif job["metadata"].get("deletionTimestamp"):
        state = "Terminating"
    elif true("Suspended"):
        state = "Suspended"
    elif true("FailureTarget"):
        state = "FailureTarget"
    else:
        state = "Running"
    containers = ((spec.get("template") or {}).get("spec") or {}).get("containers") or []
    return [
        job["metadata"]["name"],
        state,
        completions,
        duration,
        _age(job),
        ",".join(c.get("name", "") for c in containers),
        ",".join(c.get("image", "") for c in containers),
        selector_string(spec.get("selector")),
    ]


def _quota_cells(quota: Obj) -> list[Any]:
    status = quota.get("status") or {}
    hard, used = status.get("hard") or {}, status.get("used") or {}
    requests = [
        f"{k}: {used.get(k, '0')}/{v}" for k, v in sorted(hard.items()) if not k.startswith("limits.")
    ]
    limits = [f"{k}: {used.get(k, '0')}/{v}" for k, v in sorted(hard.items()) if k.startswith("limits.")]
    return [quota["metadata"]["name"], _age(quota), ", ".join(requests), ", ".join(limits)]


def _pdb_cells(pdb: Obj) -> list[Any]:
    spec, status = pdb.get("spec") or {}, pdb.get("status") or {}
    return [
        pdb["metadata"]["name"],
        str(spec["minAvailable"]) if spec.get("minAvailable") is not None else "N/A",
        str(spec["maxUnavailable"]) if spec.get("maxUnavailable") is not None else "N/A",
        int(status.get("disruptionsAllowed") or 0),
        _age(pdb),
    ]


PRINTERS: dict[str, tuple[list[Column], Callable[[Obj], list[Any]]]] = {
    "pods": (
        [
            ("Name", "string", 0),
            ("Ready", "string", 0),
            ("Status", "string", 0),
            ("Restarts", "string", 0),
            ("Age", "string", 0),
            ("IP", "string", 1),
            ("Node", "string", 1),
            ("Nominated Node", "string", 1),
            ("Readiness Gates", "string", 1),
        ],
        _pod_cells,
    ),
    "nodes": (
        [
            ("Name", "string", 0),
            ("Status", "string", 0),
            ("Roles", "string", 0),
            ("Age", "string", 0),
            ("Version", "string", 0),
            ("Internal-IP", "string", 1),
            ("External-IP", "string", 1),
            ("OS-Image", "string", 1),
            ("Kernel-Version", "string", 1),
            ("Container-Runtime", "string", 1),
        ],
        _node_cells,
    ),
    "events": (
        [
            ("Last Seen", "string", 0),
            ("Type", "string", 0),
            ("Reason", "string", 0),
            ("Object", "string", 0),
            ("Subobject", "string", 1),
            ("Source", "string", 1),
            ("Message", "string", 0),
            ("First Seen", "string", 1),
            ("Count", "integer", 1),
            ("Name", "string", 1),
        ],
        _event_cells,
    ),
    "namespaces": (
        [("Name", "string", 0), ("Status", "string", 0), ("Age", "string", 0)],
        lambda ns: [ns["metadata"]["name"], (ns.get("status") or {}).get("phase", ""), _age(ns)],
    ),
    "resourcequotas": (
        [("Name", "string", 0), ("Age", "string", 0), ("Request", "string", 0), ("Limit", "string", 0)],
        _quota_cells,
    ),
    "priorityclasses": (
        [
            ("Name", "string", 0),
            ("Value", "integer", 0),
            ("Global-Default", "boolean", 0),
            ("Age", "string", 0),
            ("Preemption-Policy", "string", 0),
        ],
        lambda pc: [
            pc["metadata"]["name"],
            pc.get("value", 0),
            bool(pc.get("globalDefault")),
            _age(pc),
            pc.get("preemptionPolicy", "PreemptLowerPriority"),
        ],
    ),
    "leases": (
        [("Name", "string", 0), ("Holder", "string", 0), ("Age", "string", 0)],
        lambda lease: [
            lease["metadata"]["name"],
            (lease.get("spec") or {}).get("holderIdentity") or "",
            _age(lease),
        ],
    ),
    "jobs": (
        [
            ("Name", "string", 0),
            ("Status", "string", 0),
            ("Completions", "string", 0),
            ("Duration", "string", 0),
            ("Age", "string", 0),
            ("Containers", "string", 1),
            ("Images", "string", 1),
            ("Selector", "string", 1),
        ],
        _job_cells,
    ),
    "poddisruptionbudgets": (
        [
            ("Name", "string", 0),
            ("Min Available", "string", 0),
            ("Max Unavailable", "string", 0),
            ("Allowed Disruptions", "integer", 0),
            ("Age", "string", 0),
        ],
        _pdb_cells,
    ),
}


def _row_object(obj: Obj, include: str) -> Obj | None:
    if include == "None":
        return None
    if include == "Object":
        return obj
    return {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": obj["metadata"]}


def to_table(resource: Resource, body: Obj, query: Any) -> Obj:
    """A list (or one object) as a Table; ``includeObject`` = Metadata (default), Object or None."""
    columns, cells = PRINTERS.get(
        resource.plural,
        ([("Name", "string", 0), ("Age", "string", 0)], lambda o: [o["metadata"]["name"], _age(o)]),
    )
    include = query.get("includeObject") or "Metadata"
    items = body.get("items", [body])
    meta = {k: v for k, v in (body.get("metadata") or {}).items() if k in ("resourceVersion", "continue")}
    if "items" not in body:
        meta = {"resourceVersion": body["metadata"].get("resourceVersion", "")}
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": meta,
        "columnDefinitions": [
            {
                "name": name,
                "type": ctype,
                "format": "name" if name == "Name" and priority == 0 else "",
                "description": f"{resource.kind} {name.lower()}",
                "priority": priority,
            }
            for name, ctype, priority in columns
        ],
        "rows": [{"cells": cells(item), "object": _row_object(item, include)} for item in items],
    }
