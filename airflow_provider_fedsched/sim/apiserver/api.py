"""The Kubernetes HTTP API of one simulated cluster: routing, CRUD, list, patch and subresources.

Every answer is JSON (a Table when the client asks for one); every error a ``Status`` with a 4xx code for
what the client sent wrong. Writes go through :mod:`registry`, so the API and the controllers agree.
"""

from __future__ import annotations

import base64
import binascii
import functools
import json
from typing import Any

import yaml
from aiohttp import web

from airflow_provider_fedsched.sim.apiserver import discovery, openapi, pods, registry, tables
from airflow_provider_fedsched.sim.apiserver.exec import pod_exec
from airflow_provider_fedsched.sim.apiserver.logs import pod_log
from airflow_provider_fedsched.sim.apiserver.nodeagent import NodeAgent
from airflow_provider_fedsched.sim.apiserver.resources import BY_PLURAL, Resource, lookup
from airflow_provider_fedsched.sim.apiserver.selectors import parse_field_selector, parse_label_selector
from airflow_provider_fedsched.sim.apiserver.store import Obj, Store
from airflow_provider_fedsched.sim.apiserver.watch import watch
from airflow_provider_fedsched.sim.util import ApiError, int_query

PUBLIC = {"version", "healthz", "readyz", "livez", "openapi"}
NOT_FOUND = "the server could not find the requested resource"
# Deeper documents than any Kubernetes object: refused before they reach recursive code (merges, tables).
MAX_DEPTH = 100
LIST_LIMIT_MAX = 10_000_000


def dump(obj: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(
        body=json.dumps(obj, separators=(",", ":")).encode(),
        status=status,
        content_type="application/json",
        headers=headers,
    )


class _NoAliasLoader(yaml.SafeLoader):
    """Request bodies in YAML may not use anchors and aliases (no alias bombs)."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            raise yaml.YAMLError("YAML aliases are not allowed in a request body")
        return super().compose_node(parent, index)


def _depth(value: Any, limit: int = MAX_DEPTH) -> None:
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            raise ApiError(400, f"the body of the request is nested deeper than {limit} levels", "BadRequest")
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)


async def read_body(request: web.Request) -> Any:
    """The decoded JSON (or YAML) body; ``{}`` when empty; 400 when it cannot be decoded."""
    raw = await request.read()
    if not raw.strip():
        return {}
    ctype = request.headers.get("Content-Type", "")
    try:
        if "yaml" in ctype and "json" not in ctype:
            body = yaml.load(raw, Loader=_NoAliasLoader)
        else:
            body = json.loads(raw)
    except (ValueError, yaml.YAMLError, RecursionError) as exc:
        detail = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
        raise ApiError(400, f"the body of the request could not be decoded: {detail}", "BadRequest") from None
    _depth(body)
    return body


class Api:
    def __init__(self, store: Store, agent: NodeAgent, port: Any) -> None:
        self.store = store
        self.agent = agent
        self._port = port  # a callable: the port is known only once bound

    # -- routing -------------------------------------------------------------------------------------
    async def dispatch(self, request: web.Request) -> web.StreamResponse:
        parts = [p for p in request.path.split("/") if p]
        method = request.method
        if not parts:
            return dump({"paths": discovery.ROOT_PATHS})
        if parts[0] in ("healthz", "readyz", "livez") and method == "GET":
            return web.Response(text="ok")
        if parts == ["version"]:
            return dump(discovery.VERSION)
        if parts[0] == "openapi":
            return openapi.serve(request, parts[1:])
        if parts == ["api"]:
            return dump(discovery.core_versions(self._port()))
        if parts == ["api", "v1"]:
            return dump(discovery.resource_list("", "v1"))
        if parts == ["apis"]:
            return dump(discovery.group_list())
        if parts[0] == "apis" and len(parts) == 2:
            group = discovery.api_group(parts[1])
            if group is None:
                raise ApiError(404, NOT_FOUND)
            return dump({"kind": "APIGroup", "apiVersion": "v1", **group})
        if parts[0] == "apis" and len(parts) == 3:
            listing = discovery.resource_list(parts[1], parts[2])
            if listing is None:
                raise ApiError(404, NOT_FOUND)
            return dump(listing)
        if parts[:2] == ["api", "v1"]:
            return await self._resource(request, "", "v1", parts[2:])
        if parts[0] == "apis" and len(parts) > 3:
            return await self._resource(request, parts[1], parts[2], parts[3:])
        raise ApiError(404, NOT_FOUND)

    async def _resource(
        self, request: web.Request, group: str, version: str, rest: list[str]
    ) -> web.StreamResponse:
        watching = False
        if rest and rest[0] == "watch":
            watching, rest = True, rest[1:]
        namespace = ""
        if len(rest) >= 3 and rest[0] == "namespaces":
            namespace, rest = rest[1], rest[2:]
        resource = lookup(group, version, rest[0]) if rest else None
        if resource is None or len(rest) > 3 or (namespace and not resource.namespaced):
            raise ApiError(404, NOT_FOUND)
        plural = resource.plural
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        query, method = request.query, request.method
        if watching or (query.get("watch", "").lower() in ("true", "1") and method == "GET"):
            extra = f"metadata.name={name}" if name else None  # legacy /watch/.../{name}: that object only
            transform = None
            if tables.wants_table(request.headers.get("Accept", "")):
                transform = functools.partial(tables.to_table, resource, query=query)
            return await watch(request, self.store, plural, namespace, extra, transform)
        if name is None:
            if method == "GET":
                listed = self.list(plural, namespace, query)
                self._served(request, plural, listed["items"])
                return self._answer(request, resource, listed)
            if method == "POST":
                created = registry.create(self.store, plural, namespace, await read_body(request))
                return dump(created, 201)
            if method == "DELETE":
                return dump(
                    self.delete_collection(plural, namespace, query, await self._delete_options(request))
                )
            raise ApiError(
                405,
                f"the server does not allow this method on the requested resource ({method})",
                "MethodNotAllowed",
            )
        if sub is None:
            return await self._item(request, resource, namespace, name)
        return await self._subresource(request, resource, namespace, name, sub)

    def _served(self, request: web.Request, plural: str, objs: list[Obj]) -> None:
        self.store.served(plural, objs, request.headers.get("User-Agent", ""))

    def _sent(self, request: web.Request, plural: str, obj: Obj) -> Obj:
        """``obj``, once the store is told that this client is sent it."""
        self._served(request, plural, [obj])
        return obj

    @staticmethod
    def _answer(request: web.Request, resource: Resource, body: Obj) -> web.Response:
        """JSON, or a ``meta.k8s.io/v1`` Table when the client's Accept header asks for one (kubectl get)."""
        if tables.wants_table(request.headers.get("Accept", "")):
            return dump(tables.to_table(resource, body, request.query))
        return dump(body)

    # -- collection ----------------------------------------------------------------------------------
    def list(self, plural: str, namespace: str, query: Any) -> dict[str, Any]:
        label = parse_label_selector(query.get("labelSelector"))
        field = parse_field_selector(plural, query.get("fieldSelector"))
        limit = int_query(query, "limit", 0) or 0
        items = [
            o
            for o in self.store.list(plural, namespace or None)
            if label(o["metadata"].get("labels")) and field(o)
        ]
        items.sort(key=lambda o: (o["metadata"].get("namespace", ""), o["metadata"]["name"]))
        meta: dict[str, Any] = {"resourceVersion": str(self.store.rv)}
        if query.get("continue"):
            start = _decode_continue(query["continue"])
            items = [o for o in items if (o["metadata"].get("namespace", ""), o["metadata"]["name"]) > start]
        if limit and len(items) > limit:
            last = items[limit - 1]["metadata"]
            token = {"v": "meta.k8s.io/v1", "ns": last.get("namespace", ""), "name": last["name"]}
            token["rv"] = self.store.rv
            meta["continue"] = base64.urlsafe_b64encode(json.dumps(token).encode()).decode()
            meta["remainingItemCount"] = len(items) - limit
            items = items[:limit]
        resource = BY_PLURAL[plural]
        return {
            "kind": f"{resource.kind}List",
            "apiVersion": resource.api_version,
            "metadata": meta,
            "items": items,
        }

    def delete_collection(self, plural: str, namespace: str, query: Any, options: Obj) -> dict[str, Any]:
        """``DELETE`` on a collection: every object the selectors match, deleted one by one."""
        listed = self.list(
            plural, namespace, {k: v for k, v in query.items() if k not in ("limit", "continue")}
        )
        deleted = []
        for obj in listed["items"]:
            meta = obj["metadata"]
            try:
                registry.delete(self.store, plural, meta.get("namespace", ""), meta["name"], options)
            except ApiError as exc:
                if exc.code != 404:
                    raise
            deleted.append(obj)
        return {**listed, "items": deleted}

    @staticmethod
    async def _delete_options(request: web.Request) -> Obj:
        options = await read_body(request)
        if not isinstance(options, dict):
            raise ApiError(400, "the body of a DELETE must be DeleteOptions (a JSON object)", "BadRequest")
        options = dict(options)
        grace = int_query(request.query, "gracePeriodSeconds", 0)
        if grace is not None:
            options["gracePeriodSeconds"] = grace
        if request.query.get("propagationPolicy"):
            options["propagationPolicy"] = request.query["propagationPolicy"]
        return options

    # -- single object -------------------------------------------------------------------------------
    async def _item(
        self, request: web.Request, resource: Resource, namespace: str, name: str
    ) -> web.StreamResponse:
        method, plural = request.method, resource.plural
        if method == "GET":
            obj = self._sent(request, plural, self.store.require(plural, namespace, name))
            return self._answer(request, resource, obj)
        if method == "DELETE":
            options = await self._delete_options(request)
            return dump(
                self._sent(request, plural, registry.delete(self.store, plural, namespace, name, options))
            )
        if method in ("PUT", "PATCH"):
            ctype = None if method == "PUT" else request.headers.get("Content-Type", "application/json")
            body = await read_body(request)
            return dump(
                self._sent(request, plural, registry.write(self.store, plural, namespace, name, body, ctype))
            )
        raise ApiError(405, "method not allowed", "MethodNotAllowed")

    async def _subresource(
        self, request: web.Request, resource: Resource, namespace: str, name: str, sub: str
    ) -> web.StreamResponse:
        method, plural = request.method, resource.plural
        if sub not in {s.name for s in resource.subresources}:
            raise ApiError(404, NOT_FOUND)
        if sub == "status":
            if method == "GET":
                return dump(self._sent(request, plural, self.store.require(plural, namespace, name)))
            if method in ("PUT", "PATCH"):
                ctype = None if method == "PUT" else request.headers.get("Content-Type", "application/json")
                body = await read_body(request)
                written = registry.write(self.store, plural, namespace, name, body, ctype, status_only=True)
                return dump(self._sent(request, plural, written))
        elif sub == "log" and method == "GET":
            return await pod_log(request, self.store, self.agent, namespace, name)
        elif sub == "exec" and method in ("GET", "POST"):
            return await pod_exec(request, self.store, self.agent, namespace, name)
        elif sub == "binding" and method == "POST":
            body = await read_body(request)
            target = ((body if isinstance(body, dict) else {}).get("target") or {}).get("name")
            if not target or not isinstance(target, str):
                raise ApiError(422, f'Binding "{name}" is invalid: target.name: Required value', "Invalid")
            pods.bind(self.store, namespace, name, target)
            return dump(registry.success_status(201), 201)
        elif sub == "eviction" and method == "POST":
            body = await read_body(request)
            if not isinstance(body, dict):
                raise ApiError(400, "the body of an eviction must be an Eviction object", "BadRequest")
            pods.evict(self.store, namespace, name, body)
            return dump(registry.success_status(201), 201)
        raise ApiError(
            405, f"the server does not allow this method on {plural}/{sub} ({method})", "MethodNotAllowed"
        )


def _decode_continue(token: str) -> tuple[str, str]:
    try:
        data = json.loads(base64.urlsafe_b64decode(token.encode() + b"=" * (-len(token) % 4)))
        start = (data["ns"], data["name"])
        if not all(isinstance(part, str) for part in start):
            raise TypeError
        return start
    except (ValueError, KeyError, TypeError, RecursionError, binascii.Error, UnicodeError):
        raise ApiError(
            400, "continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)"
        ) from None
