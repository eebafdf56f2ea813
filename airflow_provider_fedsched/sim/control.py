"""Fault operations by name, shared by the Python handles and the HTTP control endpoint.

Control endpoint (its own port, so it survives a cluster's ``down``):
``POST /sim/v1/clusters/{cluster}/faults`` with ``Authorization: Bearer <that cluster's token>``
and a JSON body ``{"kind": KIND, "args": {...}}``; ``GET /sim/v1/clusters/{cluster}/journal``
(same header, optional ``namespace`` and ``labelSelector``) answers the execution journal, and
``GET /sim/v1/clusters/{cluster}/status`` what ``fedsched sim status`` prints.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from aiohttp import web

from airflow_provider_fedsched.sim.apiserver.selectors import parse_label_selector
from airflow_provider_fedsched.sim.util import ApiError

if TYPE_CHECKING:
    from airflow_provider_fedsched.sim.cluster import Cluster

HIGH_PRIORITY_CLASS = "fedsched-sim-high"

FAULT_KINDS: dict[str, str] = {
    "latency": "seconds=S: add S real seconds before every API answer (0 = off)",
    "down": "[seconds=S]: stop listening (ECONNREFUSED); back up after S seconds if given",
    "up": "listen again on the same port",
    "fail": "status=503 times=1 [route=REGEX] [retry_after=S] [method=M]: error burst",
    "drop-watches": "end every open watch stream",
    "expire-watches": "send 410 Expired on every open watch and compact history",
    "node-not-ready": "node=NAME: kubelet stops reporting; unreachable taints; taint-manager eviction",
    "node-ready": "node=NAME: the node recovers",
    "evict": "namespace=NS name=POD [resource=memory]: node-pressure eviction by the kubelet",
    "api-evict": "namespace=NS name=POD: API-initiated eviction",
    "priority-pod": "name=POD [namespace=default] [cpu=1] [memory=1Gi] [priority=1000000]: submit a "
    "high-priority pod that may preempt",
    "pause-scheduler": "stop scheduling (pods stay Pending, no events)",
    "resume-scheduler": "resume scheduling",
    "quota": "[namespace=default] [name=compute] RESOURCE=QUANTITY...: set that ResourceQuota's hard limits "
    "(e.g. requests.cpu=2 pods=5); no RESOURCE removes it",
    "clear": "remove latency and pending error bursts",
}


def set_quota_fault(cluster: Cluster, args: dict[str, Any]) -> dict[str, Any]:
    namespace = str(args.pop("namespace", "default"))
    name = str(args.pop("name", "compute"))
    hard = {str(k): str(v) for k, v in args.items()}
    if not hard:
        cluster.remove_quota(namespace, name)
        return {"ok": True, "removed": f"{namespace}/{name}"}
    quota = cluster.set_quota(namespace, hard, name)
    return {"ok": True, "quota": f"{namespace}/{name}", "status": quota.get("status", {})}


FAULT_ARGS: dict[str, frozenset[str]] = {
    "latency": frozenset({"seconds"}),
    "down": frozenset({"seconds"}),
    "fail": frozenset({"status", "times", "route", "retry_after", "method"}),
    "node-not-ready": frozenset({"node"}),
    "node-ready": frozenset({"node"}),
    "evict": frozenset({"namespace", "name", "resource"}),
    "api-evict": frozenset({"namespace", "name"}),
    "priority-pod": frozenset({"name", "namespace", "cpu", "memory", "priority"}),
}
"""The arguments each fault takes (``quota`` takes any RESOURCE=QUANTITY; the others none)."""
MAX_FAULT_SECONDS = 3600.0


def _number(kind: str, a: Mapping[str, Any], key: str, default: float, low: float, high: float) -> float:
    """``a[key]`` as a finite number in ``low..high`` (not a boolean), else a 400 naming it."""
    value = a.get(key, default)
    try:
        if isinstance(value, bool):
            raise ValueError
        number = float(value)
    except (TypeError, ValueError):
        raise ApiError(400, f"fault {kind!r}: {key}={value!r} is not a number") from None
    if not (low <= number <= high):  # NaN fails both
        raise ApiError(400, f"fault {kind!r}: {key}={value!r} must be a finite number in {low:g}..{high:g}")
    return number


def _whole(kind: str, a: Mapping[str, Any], key: str, default: int, low: int, high: int) -> int:
    number = _number(kind, a, key, default, low, high)
    if number != int(number):
        raise ApiError(400, f"fault {kind!r}: {key}={a.get(key)!r} must be a whole number")
    return int(number)


def _check_args(kind: str, a: Mapping[str, Any]) -> None:
    if kind == "quota" or kind not in FAULT_KINDS:
        return
    unknown = sorted(str(k) for k in a if k not in FAULT_ARGS.get(kind, frozenset()))
    if unknown:
        takes = ", ".join(sorted(FAULT_ARGS.get(kind, frozenset()))) or "no arguments"
        raise ApiError(400, f"fault {kind!r}: unknown argument {unknown[0]!r} (it takes {takes})")


async def apply_fault(cluster: Cluster, kind: str, args: Mapping[str, Any]) -> dict[str, Any]:
    faults = cluster.faults
    if not isinstance(args, Mapping):
        raise ApiError(400, f"fault {kind!r}: args must be a JSON object")
    a = dict(args)
    _check_args(kind, a)
    try:
        if kind == "latency":
            faults.latency(_number(kind, a, "seconds", 0, 0, MAX_FAULT_SECONDS))
        elif kind == "down":
            back_after = (
                _number(kind, a, "seconds", 0, 0, MAX_FAULT_SECONDS) if a.get("seconds") is not None else None
            )
            await faults.down()
            if back_after is not None:
                loop = asyncio.get_running_loop()
                loop.call_later(back_after, lambda: asyncio.ensure_future(faults.up()))
        elif kind == "up":
            await faults.up()
        elif kind == "fail":
            route = a.get("route")
            if route is not None:
                try:
                    re.compile(str(route))
                except re.error as exc:
                    raise ApiError(
                        400, f"fault 'fail': route={route!r} is not a regular expression: {exc}"
                    ) from None
            faults.fail(
                _whole(kind, a, "status", 503, 400, 599),
                _whole(kind, a, "times", 1, 1, 1_000_000),
                route,
                _whole(kind, a, "retry_after", 0, 0, int(MAX_FAULT_SECONDS))
                if a.get("retry_after") is not None
                else None,
                a.get("method"),
            )
        elif kind == "drop-watches":
            return {"watches": faults.drop_watches()}
        elif kind == "expire-watches":
            return {"watches": faults.expire_watches()}
        elif kind == "node-not-ready":
            cluster.node_not_ready(str(a["node"]))
        elif kind == "node-ready":
            cluster.node_ready(str(a["node"]))
        elif kind == "evict":
            cluster.evict_node_pressure(
                str(a.get("namespace", "default")), str(a["name"]), str(a.get("resource", "memory"))
            )
        elif kind == "api-evict":
            cluster.evict(str(a.get("namespace", "default")), str(a["name"]))
        elif kind == "priority-pod":
            submit_priority_pod(
                cluster,
                str(a["name"]),
                str(a.get("namespace", "default")),
                str(a.get("cpu", "1")),
                str(a.get("memory", "1Gi")),
                int(a.get("priority", 1000000)),
            )
        elif kind == "pause-scheduler":
            cluster.scheduler.pause()
        elif kind == "resume-scheduler":
            cluster.scheduler.resume()
        elif kind == "quota":
            return set_quota_fault(cluster, a)
        elif kind == "clear":
            faults.clear()
        else:
            raise ApiError(400, f"unknown fault kind {kind!r}; known: {', '.join(sorted(FAULT_KINDS))}")
    except KeyError as exc:
        raise ApiError(400, f"fault {kind!r} needs argument {exc.args[0]!r}") from None
    except (TypeError, ValueError) as exc:
        raise ApiError(400, f"fault {kind!r}: bad argument: {exc}") from None
    return {"ok": True}


def submit_priority_pod(
    cluster: Cluster, name: str, namespace: str, cpu: str, memory: str, priority: int
) -> dict[str, Any]:
    class_name = f"{HIGH_PRIORITY_CLASS}-{priority}"
    if cluster.store.get("priorityclasses", "", class_name) is None:
        cluster.store.create(
            "priorityclasses",
            {
                "metadata": {"name": class_name},
                "value": priority,
                "preemptionPolicy": "PreemptLowerPriority",
                "globalDefault": False,
            },
        )
    return cluster.create_pod(
        namespace,
        {
            "metadata": {"name": name},
            "spec": {
                "priorityClassName": class_name,
                "restartPolicy": "Never",
                "containers": [
                    {
                        "name": "base",
                        "image": "busybox:1.36",
                        "resources": {"requests": {"cpu": cpu, "memory": memory}},
                    }
                ],
            },
        },
    )


def journal_report(cluster: Cluster, namespace: str | None, label_selector: str | None) -> dict[str, Any]:
    """The execution journal of one cluster (see ``controllers/journal.py``), optionally filtered."""
    matches = parse_label_selector(label_selector)
    report = cluster.journal.report(namespace or None)
    report["pods"] = [p for p in report["pods"] if matches(p["labels"])]
    return report


def cluster_status(cluster: Cluster) -> dict[str, Any]:
    """What ``fedsched sim status`` shows for one cluster: serving, faults, nodes and pods."""
    nodes = cluster.store.list("nodes")
    ready = [
        n["metadata"]["name"]
        for n in nodes
        if any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in n["status"].get("conditions") or []
        )
    ]
    phases: dict[str, int] = {}
    for pod in cluster.store.list("pods"):
        phase = (pod.get("status") or {}).get("phase") or "Unknown"
        phase = "Terminating" if pod["metadata"].get("deletionTimestamp") else phase
        phases[phase] = phases.get(phase, 0) + 1
    faults = cluster.faults
    return {
        "cluster": cluster.name,
        "url": cluster.url,
        "serving": not faults.is_down,
        "latency_seconds": faults.latency_seconds,
        "pending_error_bursts": sum(rule.remaining for rule in faults.rules),
        "scheduler_paused": cluster.scheduler.paused,
        "nodes": {
            "total": len(nodes),
            "ready": len(ready),
            "not_ready": sorted(set(n["metadata"]["name"] for n in nodes) - set(ready)),
        },
        "pods": dict(sorted(phases.items())),
        "jobs": len(cluster.store.objects["jobs"]),
        "requests": cluster.requests.count(),
    }


def build_control_app(clusters: Mapping[str, Cluster]) -> web.Application:
    def authorized(request: web.Request) -> Cluster:
        name = request.match_info["cluster"]
        cluster = clusters.get(name)
        if cluster is None:
            raise ApiError(404, f"unknown cluster {name!r}")
        if request.headers.get("Authorization") != f"Bearer {cluster.token}":
            raise ApiError(401, "Unauthorized")
        return cluster

    async def faults(request: web.Request) -> web.Response:
        try:
            cluster = authorized(request)
            body = json.loads(await request.read() or b"{}")
            if not isinstance(body, dict):
                raise ValueError("not an object")
            result = await apply_fault(cluster, str(body.get("kind", "")), body.get("args") or {})
        except ApiError as exc:
            return web.json_response(exc.status(), status=exc.code)
        except ValueError:
            return web.json_response(ApiError(400, "body must be a JSON object").status(), status=400)
        return web.json_response(result)

    async def journal(request: web.Request) -> web.Response:
        try:
            cluster = authorized(request)
            query = request.query
            report = journal_report(cluster, query.get("namespace"), query.get("labelSelector"))
        except ApiError as exc:
            return web.json_response(exc.status(), status=exc.code)
        return web.json_response(report)

    async def status(request: web.Request) -> web.Response:
        try:
            cluster = authorized(request)
        except ApiError as exc:
            return web.json_response(exc.status(), status=exc.code)
        return web.json_response(cluster_status(cluster))

    async def health(request: web.Request) -> web.Response:
        return web.json_response({"clusters": {n: c.url for n, c in clusters.items()}})

    app = web.Application()
    app.router.add_post("/sim/v1/clusters/{cluster}/faults", faults)
    app.router.add_get("/sim/v1/clusters/{cluster}/journal", journal)
    app.router.add_get("/sim/v1/clusters/{cluster}/status", status)
    app.router.add_get("/sim/v1/clusters", health)
    return app
