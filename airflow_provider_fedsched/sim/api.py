"""The Kubernetes HTTP API of one simulated cluster: discovery, CRUD, list/watch, patch and subresources."""

from __future__ import annotations

import asyncio
import base64
import copy
import json
import logging
from typing import TYPE_CHECKING, Any

from aiohttp import web
from aiohttp.typedefs import Handler

from airflow_provider_fedsched.sim.exec import pod_exec
from airflow_provider_fedsched.sim.faults import CONTROL_PREFIX, fault_middleware
from airflow_provider_fedsched.sim.logs import pod_log
from airflow_provider_fedsched.sim.objects import make_node
from airflow_provider_fedsched.sim.patch import apply_patch
from airflow_provider_fedsched.sim.selectors import parse_field_selector, parse_label_selector
from airflow_provider_fedsched.sim.store import KINDS, NAMESPACED, Obj, Watcher, WatchEvent
from airflow_provider_fedsched.sim.util import ApiError, not_found

if TYPE_CHECKING:
    from airflow_provider_fedsched.sim.cluster import Cluster

log = logging.getLogger(__name__)

VERSION = {
    "major": "1",
    "minor": "31",
    "gitVersion": "v1.31.0-fedsched-sim",
    "gitCommit": "0000000000000000000000000000000000000000",
    "gitTreeState": "clean",
    "buildDate": "2024-08-13T00:00:00Z",
    "goVersion": "go1.22.5",
    "compiler": "gc",
    "platform": "linux/amd64",
}
PUBLIC = {"version", "healthz", "readyz", "livez"}
_VERBS = ["create", "delete", "get", "list", "patch", "update", "watch"]
CORE_RESOURCES: list[dict[str, Any]] = [
    {
        "name": "pods",
        "singularName": "pod",
        "namespaced": True,
        "kind": "Pod",
        "verbs": _VERBS,
        "shortNames": ["po"],
        "categories": ["all"],
    },
    {
        "name": "pods/status",
        "singularName": "",
        "namespaced": True,
        "kind": "Pod",
        "verbs": ["get", "patch", "update"],
    },
    {"name": "pods/log", "singularName": "", "namespaced": True, "kind": "Pod", "verbs": ["get"]},
    {"name": "pods/binding", "singularName": "", "namespaced": True, "kind": "Binding", "verbs": ["create"]},
    {
        "name": "pods/eviction",
        "singularName": "",
        "namespaced": True,
        "group": "policy",
        "version": "v1",
        "kind": "Eviction",
        "verbs": ["create"],
    },
    {
        "name": "pods/exec",
        "singularName": "",
        "namespaced": True,
        "kind": "PodExecOptions",
        "verbs": ["create", "get"],
    },
    {
        "name": "nodes",
        "singularName": "node",
        "namespaced": False,
        "kind": "Node",
        "verbs": _VERBS,
        "shortNames": ["no"],
    },
    {
        "name": "nodes/status",
        "singularName": "",
        "namespaced": False,
        "kind": "Node",
        "verbs": ["get", "patch", "update"],
    },
    {
        "name": "events",
        "singularName": "event",
        "namespaced": True,
        "kind": "Event",
        "verbs": _VERBS,
        "shortNames": ["ev"],
    },
    {
        "name": "namespaces",
        "singularName": "namespace",
        "namespaced": False,
        "kind": "Namespace",
        "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"],
        "shortNames": ["ns"],
    },
    {
        "name": "resourcequotas",
        "singularName": "resourcequota",
        "namespaced": True,
        "kind": "ResourceQuota",
        "verbs": _VERBS,
        "shortNames": ["quota"],
    },
    {
        "name": "resourcequotas/status",
        "singularName": "",
        "namespaced": True,
        "kind": "ResourceQuota",
        "verbs": ["get", "patch", "update"],
    },
]
GROUPS: dict[str, dict[str, list[dict[str, Any]]]] = {
    "scheduling.k8s.io": {
        "v1": [
            {
                "name": "priorityclasses",
                "singularName": "priorityclass",
                "namespaced": False,
                "kind": "PriorityClass",
                "verbs": _VERBS,
                "shortNames": ["pc"],
            },
        ]
    },
    "policy": {"v1": []},
}
# Which plural lives in which API group/version.
RESOURCE_GV: dict[str, tuple[str, str]] = {
    r["name"]: ("", "v1") for r in CORE_RESOURCES if "/" not in r["name"]
}
RESOURCE_GV["priorityclasses"] = ("scheduling.k8s.io", "v1")


def dump(obj: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(
        body=json.dumps(obj, separators=(",", ":")).encode(),
        status=status,
        content_type="application/json",
        headers=headers,
    )


def success_status(code: int = 201) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": code}


def build_app(cluster: Cluster) -> web.Application:
    @web.middleware
    async def count(request: web.Request, handler: Handler) -> web.StreamResponse:
        if not cluster.faults.is_down and not request.path.startswith(CONTROL_PREFIX):
            cluster.requests.record(request.method, request.path)
        return await handler(request)

    @web.middleware
    async def errors(request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            return await handler(request)
        except ApiError as exc:
            return dump(exc.status(), exc.code, exc.headers)
        except (web.HTTPException, asyncio.CancelledError, ConnectionResetError):
            raise
        except Exception as exc:
            log.exception("sim %s: %s %s failed", cluster.name, request.method, request.path)
            return dump(ApiError(500, f"Internal error occurred: {exc!r}").status(), 500)

    @web.middleware
    async def auth(request: web.Request, handler: Handler) -> web.StreamResponse:
        first = request.path.strip("/").split("/", 1)[0]
        if first not in PUBLIC:
            header = request.headers.get("Authorization")
            # client-go (kubectl) never sends bearer tokens over plain http, so a request without
            # credentials is served as anonymous; a wrong token is always rejected.
            if header is not None and header != f"Bearer {cluster.token}":
                raise ApiError(401, "Unauthorized", "Unauthorized")
        return await handler(request)

    app = web.Application(
        middlewares=[count, errors, auth, fault_middleware(cluster.faults)], client_max_size=16 * 2**20
    )
    api = Api(cluster)
    app.router.add_route("*", "/{tail:.*}", api.dispatch)
    return app


class Api:
    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.store = cluster.store

    # -- routing -------------------------------------------------------------------------------------
    async def dispatch(self, request: web.Request) -> web.StreamResponse:
        parts = [p for p in request.path.split("/") if p]
        method = request.method
        if not parts:
            return dump({"paths": ["/api", "/api/v1", "/apis", "/healthz", "/livez", "/readyz", "/version"]})
        if parts[0] in ("healthz", "readyz", "livez") and method == "GET":
            return web.Response(text="ok")
        if parts == ["version"]:
            return dump(VERSION)
        if parts == ["api"]:
            return dump(
                {
                    "kind": "APIVersions",
                    "versions": ["v1"],
                    "serverAddressByClientCIDRs": [
                        {"clientCIDR": "0.0.0.0/0", "serverAddress": f"127.0.0.1:{self.cluster.port}"}
                    ],
                }
            )
        if parts == ["api", "v1"]:
            return dump(
                {
                    "kind": "APIResourceList",
                    "apiVersion": "v1",
                    "groupVersion": "v1",
                    "resources": CORE_RESOURCES,
                }
            )
        if parts == ["apis"]:
            return dump(
                {"kind": "APIGroupList", "apiVersion": "v1", "groups": [self._group(g) for g in GROUPS]}
            )
        if parts[0] == "apis" and len(parts) == 2:
            if parts[1] not in GROUPS:
                raise ApiError(404, "the server could not find the requested resource")
            return dump({"kind": "APIGroup", "apiVersion": "v1", **self._group(parts[1])})
        if parts[0] == "apis" and len(parts) == 3:
            if parts[1] not in GROUPS or parts[2] not in GROUPS[parts[1]]:
                raise ApiError(404, "the server could not find the requested resource")
            return dump(
                {
                    "kind": "APIResourceList",
                    "apiVersion": "v1",
                    "groupVersion": f"{parts[1]}/{parts[2]}",
                    "resources": GROUPS[parts[1]][parts[2]],
                }
            )
        if parts[:2] == ["api", "v1"]:
            return await self._resource(request, "", parts[2:])
        if parts[0] == "apis" and len(parts) > 3 and parts[1] in GROUPS:
            return await self._resource(request, parts[1], parts[3:])
        raise ApiError(404, "the server could not find the requested resource")

    @staticmethod
    def _group(name: str) -> dict[str, Any]:
        versions = [{"groupVersion": f"{name}/{v}", "version": v} for v in GROUPS[name]]
        return {"name": name, "versions": versions, "preferredVersion": versions[0]}

    async def _resource(self, request: web.Request, group: str, rest: list[str]) -> web.StreamResponse:
        watch = False
        if rest and rest[0] == "watch":
            watch, rest = True, rest[1:]
        namespace = ""
        if len(rest) >= 3 and rest[0] == "namespaces":
            namespace, rest = rest[1], rest[2:]
        if not rest or rest[0] not in RESOURCE_GV or RESOURCE_GV[rest[0]][0] != group:
            raise ApiError(404, "the server could not find the requested resource")
        plural = rest[0]
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        if namespace and plural not in NAMESPACED:
            raise ApiError(404, "the server could not find the requested resource")
        query = request.query
        method = request.method
        if watch or (query.get("watch", "").lower() in ("true", "1") and method == "GET"):
            if name:
                # Legacy /watch/.../{name} means a watch filtered to that object.
                return await self.watch(request, plural, namespace, f"metadata.name={name}")
            return await self.watch(request, plural, namespace)
        if name is None:
            if method == "GET":
                return dump(self.list(plural, namespace, query))
            if method == "POST":
                return dump(self.create(plural, namespace, await self._body(request)), 201)
            raise ApiError(
                405,
                f"the server does not allow this method on the requested resource ({method})",
                "MethodNotAllowed",
            )
        if sub is None:
            return await self._item(request, plural, namespace, name)
        return await self._subresource(request, plural, namespace, name, sub)

    async def _body(self, request: web.Request) -> Any:
        raw = await request.read()
        if not raw:
            return {}
        try:
            return json.loads(raw)
        except ValueError:
            try:
                import yaml

                return yaml.safe_load(raw)
            except Exception:
                raise ApiError(400, "the body of the request could not be decoded") from None

    # -- collection ----------------------------------------------------------------------------------
    def list(self, plural: str, namespace: str, query: Any) -> dict[str, Any]:
        label = parse_label_selector(query.get("labelSelector"))
        field = parse_field_selector(plural, query.get("fieldSelector"))
        items = [
            o
            for o in self.store.list(plural, namespace or None)
            if label(o["metadata"].get("labels")) and field(o)
        ]
        items.sort(key=lambda o: (o["metadata"].get("namespace", ""), o["metadata"]["name"]))
        meta: dict[str, Any] = {"resourceVersion": str(self.store.rv)}
        if query.get("continue"):
            try:
                token = json.loads(base64.urlsafe_b64decode(query["continue"]))
                start = (token["ns"], token["name"])
            except (ValueError, KeyError, TypeError):
                raise ApiError(
                    400,
                    "continue key is not valid: incorrect encoded start resourceVersion "
                    "(version meta.k8s.io/v1)",
                ) from None
            items = [o for o in items if (o["metadata"].get("namespace", ""), o["metadata"]["name"]) > start]
        limit = int(query.get("limit") or 0)
        if limit and len(items) > limit:
            last = items[limit - 1]["metadata"]
            token = {"ns": last.get("namespace", ""), "name": last["name"], "rv": self.store.rv}
            meta["continue"] = base64.urlsafe_b64encode(json.dumps(token).encode()).decode()
            meta["remainingItemCount"] = len(items) - limit
            items = items[:limit]
        group, version = RESOURCE_GV[plural]
        return {
            "kind": f"{KINDS[plural]}List",
            "apiVersion": f"{group}/{version}" if group else version,
            "metadata": meta,
            "items": items,
        }

    def create(self, plural: str, namespace: str, body: Any) -> Obj:
        if not isinstance(body, dict):
            raise ApiError(400, "the body of the request must be an object")
        if plural == "pods":
            return self.cluster.create_pod(namespace, body)
        obj = copy.deepcopy(body)
        meta = obj.setdefault("metadata", {})
        if plural in NAMESPACED:
            if self.store.get("namespaces", "", namespace) is None:
                raise ApiError(
                    404,
                    f'namespaces "{namespace}" not found',
                    "NotFound",
                    {"name": namespace, "kind": "namespaces"},
                )
            meta["namespace"] = namespace
        if not meta.get("name") and meta.get("generateName"):
            from airflow_provider_fedsched.sim.objects import assign_name

            assign_name(obj, KINDS[plural])
        if not meta.get("name"):
            raise ApiError(
                422,
                f'{KINDS[plural]} "" is invalid: metadata.name: Required value: name or '
                "generateName is required",
                "Invalid",
            )
        if plural == "namespaces":
            obj.setdefault("spec", {"finalizers": ["kubernetes"]})
            obj["status"] = {"phase": "Active"}
            meta.setdefault("labels", {})["kubernetes.io/metadata.name"] = meta["name"]
        elif plural == "nodes":
            base = make_node(meta["name"], "4", "16Gi")
            base["metadata"].update(meta)
            base["spec"].update(obj.get("spec") or {})
            base["status"].update(obj.get("status") or {})
            obj = base
        created = self.store.create(plural, obj)
        if plural == "resourcequotas":
            self.cluster.quota.refresh(namespace)
        elif plural == "nodes":
            self.cluster.scheduler.kick()
        return self.store.get(plural, namespace, meta["name"]) or created

    # -- single object -------------------------------------------------------------------------------
    async def _item(self, request: web.Request, plural: str, namespace: str, name: str) -> web.StreamResponse:
        method = request.method
        if method == "GET":
            return dump(self.store.require(plural, namespace, name))
        if method == "DELETE":
            body = await self._body(request)
            grace = request.query.get("gracePeriodSeconds")
            grace_value = int(grace) if grace is not None else (body or {}).get("gracePeriodSeconds")
            if plural == "pods":
                return dump(
                    self.cluster.delete_pod(namespace, name, grace_value, (body or {}).get("preconditions"))
                )
            self.store.require(plural, namespace, name)
            removed = self.store.remove(plural, namespace, name)
            if plural == "resourcequotas":
                self.cluster.quota.refresh(namespace)
            if plural == "nodes":
                self.cluster.scheduler.kick()
            return dump(
                removed
                if plural == "namespaces"
                else {**success_status(200), "details": {"name": name, "kind": plural}}
            )
        if method in ("PUT", "PATCH"):
            return dump(await self._write(request, plural, namespace, name, status_only=False))
        raise ApiError(405, "method not allowed", "MethodNotAllowed")

    async def _write(
        self, request: web.Request, plural: str, namespace: str, name: str, status_only: bool
    ) -> Obj:
        current = self.store.require(plural, namespace, name)
        body = await self._body(request)
        if request.method == "PUT":
            if not isinstance(body, dict):
                raise ApiError(400, "the body of the request must be an object")
            new = copy.deepcopy(body)
            expected = (new.get("metadata") or {}).get("resourceVersion")
        else:
            new = apply_patch(current, body, request.headers.get("Content-Type", "application/json"))
            expected = (body.get("metadata") or {}).get("resourceVersion") if isinstance(body, dict) else None
        meta = new.setdefault("metadata", {})
        if meta.get("name", name) != name:
            raise ApiError(
                400,
                f"the name of the object ({meta.get('name')}) does not match the name on the URL ({name})",
            )
        meta["name"] = name
        if plural in NAMESPACED:
            meta["namespace"] = namespace
        if status_only:
            merged = copy.deepcopy(current)
            merged["status"] = new.get("status", {})
            new = merged
        elif "status" in current and plural in ("pods", "nodes", "resourcequotas"):
            new["status"] = copy.deepcopy(current["status"])
        new.setdefault("kind", current.get("kind"))
        new.setdefault("apiVersion", current.get("apiVersion"))
        result = self.store.update(plural, new, expected)
        if plural == "resourcequotas":
            self.cluster.quota.refresh(namespace)
        return result

    async def _subresource(
        self, request: web.Request, plural: str, namespace: str, name: str, sub: str
    ) -> web.StreamResponse:
        method = request.method
        if sub == "status" and plural in ("pods", "nodes", "resourcequotas"):
            if method == "GET":
                return dump(self.store.require(plural, namespace, name))
            return dump(await self._write(request, plural, namespace, name, status_only=True))
        if plural == "pods":
            if sub == "log" and method == "GET":
                return await pod_log(request, self.cluster, namespace, name)
            if sub == "exec" and method in ("GET", "POST"):
                return await pod_exec(request, self.cluster, namespace, name)
            if sub == "binding" and method == "POST":
                return dump(self._bind(namespace, name, await self._body(request)), 201)
            if sub == "eviction" and method == "POST":
                self.cluster.evict(namespace, name, await self._body(request))
                return dump(success_status(201), 201)
        raise ApiError(404, "the server could not find the requested resource")

    def _bind(self, namespace: str, name: str, body: Any) -> dict[str, Any]:
        pod = self.store.require("pods", namespace, name)
        target = ((body or {}).get("target") or {}).get("name")
        if not target:
            raise ApiError(422, f'Binding "{name}" is invalid: target.name: Required value', "Invalid")
        if pod["spec"].get("nodeName"):
            raise ApiError(
                409,
                f'Operation cannot be fulfilled on pods/binding "{name}": pod {name} is already '
                f'assigned to node "{pod["spec"]["nodeName"]}"',
                "Conflict",
                {"name": name, "kind": "pods/binding"},
            )
        self.store.require("nodes", "", target)
        self.cluster.scheduler.bind(pod, target)
        return success_status(201)

    # -- watch ---------------------------------------------------------------------------------------
    async def watch(
        self, request: web.Request, plural: str, namespace: str, extra_field: str | None = None
    ) -> web.StreamResponse:
        query = request.query
        label = parse_label_selector(query.get("labelSelector"))
        fields = ",".join(f for f in (query.get("fieldSelector"), extra_field) if f)
        field = parse_field_selector(plural, fields)

        def matches(obj: Obj | None) -> bool:
            if obj is None:
                return False
            meta = obj["metadata"]
            if namespace and meta.get("namespace") != namespace:
                return False
            return label(meta.get("labels")) and field(obj)

        timeout = float(query.get("timeoutSeconds") or 1800)
        rv = query.get("resourceVersion") or "0"
        watcher = Watcher(plural)
        initial: list[tuple[str, Obj]] = []
        error: ApiError | None = None
        # Registration and the initial snapshot happen without awaiting, so no event falls in between.
        if rv == "0":
            initial = [("ADDED", o) for o in self.store.list(plural, namespace or None) if matches(o)]
        else:
            try:
                for event in self.store.events_since(plural, int(rv)):
                    converted = self._convert(event, matches)
                    if converted:
                        initial.append(converted)
            except ApiError as exc:
                error = exc
            except ValueError:
                raise ApiError(400, f"invalid resource version: {rv}") from None
        self.store.watchers.add(watcher)
        response = web.StreamResponse(
            headers={"Content-Type": "application/json", "Transfer-Encoding": "chunked"}
        )
        try:
            await response.prepare(request)
            if error is not None:
                await self._send(response, "ERROR", error.status())
                return response
            for etype, obj in initial:
                await self._send(response, etype, obj)
            loop = asyncio.get_running_loop()
            deadline = loop.time() + timeout
            while True:
                remaining = deadline - loop.time()
                if remaining <= 0:
                    break
                try:
                    item = await asyncio.wait_for(watcher.queue.get(), remaining)
                except TimeoutError:
                    break
                if item == "drop":
                    break
                if item == "expire":
                    await self._send(
                        response,
                        "ERROR",
                        ApiError(
                            410, f"too old resource version: {rv} ({self.store.compacted_rv})", "Expired"
                        ).status(),
                    )
                    break
                assert isinstance(item, WatchEvent)
                converted = self._convert(item, matches)
                if converted:
                    await self._send(response, *converted)
            await response.write_eof()
            return response
        except ConnectionResetError:
            # The client went away mid-stream (or a fault closed it): nothing left to answer.
            return response
        finally:
            self.store.watchers.discard(watcher)

    @staticmethod
    def _convert(event: WatchEvent, matches: Any) -> tuple[str, Obj] | None:
        now, before = matches(event.obj), matches(event.old)
        if event.type == "MODIFIED":
            if now and before:
                return ("MODIFIED", event.obj)
            if now:
                return ("ADDED", event.obj)
            if before:
                return ("DELETED", event.obj)
            return None
        return (event.type, event.obj) if now else None

    @staticmethod
    async def _send(response: web.StreamResponse, etype: str, obj: Obj) -> None:
        await response.write(
            json.dumps({"type": etype, "object": obj}, separators=(",", ":")).encode() + b"\n"
        )


__all__ = ["Api", "build_app", "not_found"]
