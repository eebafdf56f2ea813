"""OpenAPI documents generated from the kind catalogue: ``/openapi/v3`` per group version, ``/openapi/v2``.

What clients read from them is served faithfully: every path and operation with its
``x-kubernetes-group-version-kind`` and ``x-kubernetes-action``, and the ``fieldValidation``, ``dryRun`` and
``fieldManager`` query parameters (kubectl's ``--validate`` checks that ``fieldValidation`` is supported,
then leaves validation to the server). The schemas are shallow: ``spec`` and ``status`` are open objects,
so kubectl computes strategic-merge patches from its compiled-in types, as it does when a schema has no
patch metadata. ``/openapi/v2`` is served as JSON, and as protobuf (what kubectl asks for).
"""

from __future__ import annotations

import functools
import hashlib
import json
from typing import Any

from aiohttp import web

from airflow_provider_fedsched.sim.apiserver import openapi_proto
from airflow_provider_fedsched.sim.apiserver.discovery import VERSION
from airflow_provider_fedsched.sim.apiserver.resources import RESOURCES, Resource, group_versions
from airflow_provider_fedsched.sim.util import ApiError

META = "io.k8s.apimachinery.pkg.apis.meta.v1"
_QUERY = {
    "dryRun": "When present, indicates that modifications should not be persisted.",
    "fieldManager": "A name associated with the actor or entity that is making these changes.",
    "fieldValidation": "Ignore, Warn or Strict: how the server treats unknown or duplicate fields.",
}
PATCH_TYPES = ("application/json-patch+json", "application/merge-patch+json", "application/apply-patch+yaml")


def schema_name(resource: Resource, kind: str | None = None) -> str:
    group = resource.group.split(".")[0] if resource.group else "core"
    return f"io.k8s.api.{group}.{resource.version}.{kind or resource.kind}"


def _gvk(resource: Resource, kind: str | None = None) -> dict[str, str]:
    return {"group": resource.group, "version": resource.version, "kind": kind or resource.kind}


def _ref(name: str, v3: bool) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}" if v3 else f"#/definitions/{name}"}


def _schemas(resources: list[Resource], v3: bool) -> dict[str, Any]:
    open_object = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    schemas: dict[str, Any] = {
        f"{META}.ObjectMeta": {**open_object, "description": "Standard object's metadata."},
        f"{META}.ListMeta": {**open_object, "description": "Standard list metadata."},
        f"{META}.Status": {**open_object, "description": "Status is a return value for calls that fail."},
        f"{META}.DeleteOptions": {**open_object, "description": "Options for a delete."},
        f"{META}.Patch": {**open_object, "description": "A patch document."},
    }
    for resource in resources:
        name = schema_name(resource)
        schemas[name] = {
            "type": "object",
            "description": f"{resource.kind} as served by the fedsched simulator.",
            "properties": {
                "apiVersion": {"type": "string"},
                "kind": {"type": "string"},
                "metadata": _ref(f"{META}.ObjectMeta", v3),
                "spec": dict(open_object),
                "status": dict(open_object),
            },
            "x-kubernetes-group-version-kind": [_gvk(resource)],
        }
        schemas[f"{name}List"] = {
            "type": "object",
            "required": ["items"],
            "properties": {
                "apiVersion": {"type": "string"},
                "kind": {"type": "string"},
                "metadata": _ref(f"{META}.ListMeta", v3),
                "items": {"type": "array", "items": _ref(name, v3)},
            },
            "x-kubernetes-group-version-kind": [_gvk(resource, f"{resource.kind}List")],
        }
    return schemas


def _param(name: str, where: str, v3: bool, description: str = "", required: bool = False) -> dict[str, Any]:
    param: dict[str, Any] = {"name": name, "in": where, "description": description}
    if required:
        param["required"] = True
    if v3:
        param["schema"] = {"type": "string", "uniqueItems": True}
    else:
        param.update(type="string", uniqueItems=True)
    return param


def _operation(
    resource: Resource, action: str, op_id: str, v3: bool, body: str | None = None, write: bool = False
) -> dict[str, Any]:
    name = schema_name(resource)
    ok: dict[str, Any] = {"description": "OK"}
    if v3:
        ok["content"] = {"application/json": {"schema": _ref(name, v3)}}
    else:
        ok["schema"] = _ref(name, v3)
    operation: dict[str, Any] = {
        "operationId": op_id,
        "description": f"{action} {resource.kind}",
        "tags": [resource.group or "core"],
        "responses": {"200": ok, "401": {"description": "Unauthorized"}},
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": _gvk(resource),
    }
    params = [_param(k, "query", v3, d) for k, d in _QUERY.items()] if write else []
    if body is not None:
        types = PATCH_TYPES if action == "patch" else ("application/json", "application/yaml")
        schema = _ref(f"{META}.Patch" if action == "patch" else name, v3)
        if v3:
            operation["requestBody"] = {"content": {t: {"schema": schema} for t in types}, "required": True}
        else:
            params.append({"name": "body", "in": "body", "required": True, "schema": schema})
            operation["consumes"] = list(types)
    if params:
        operation["parameters"] = params
    return operation


def _paths(resource: Resource, v3: bool) -> dict[str, Any]:
    prefix = f"/apis/{resource.group}/{resource.version}" if resource.group else "/api/v1"
    base = (
        f"{prefix}/namespaces/{{namespace}}/{resource.plural}"
        if resource.namespaced
        else f"{prefix}/{resource.plural}"
    )
    kind = resource.kind
    scope = "Namespaced" if resource.namespaced else ""
    common = (
        [_param("namespace", "path", v3, "object name and auth scope", True)] if resource.namespaced else []
    )
    named = [_param("name", "path", v3, f"name of the {kind}", True), *common]
    paths: dict[str, Any] = {
        base: {
            "parameters": common,
            "get": _operation(resource, "list", f"list{scope}{kind}", v3),
            "post": _operation(resource, "post", f"create{scope}{kind}", v3, body=kind, write=True),
        },
        f"{base}/{{name}}": {
            "parameters": named,
            "get": _operation(resource, "get", f"read{scope}{kind}", v3),
            "put": _operation(resource, "put", f"replace{scope}{kind}", v3, body=kind, write=True),
            "patch": _operation(resource, "patch", f"patch{scope}{kind}", v3, body="patch", write=True),
            "delete": _operation(resource, "delete", f"delete{scope}{kind}", v3),
        },
    }
    for sub in resource.subresources:
        if sub.name == "status":
            paths[f"{base}/{{name}}/status"] = {
                "parameters": named,
                "get": _operation(resource, "get", f"read{scope}{kind}Status", v3),
                "patch": _operation(
                    resource, "patch", f"patch{scope}{kind}Status", v3, body="patch", write=True
                ),
            }
    if resource.namespaced:
        paths[f"{prefix}/{resource.plural}"] = {
            "get": _operation(resource, "list", f"list{kind}ForAllNamespaces", v3)
        }
    return paths


@functools.lru_cache(maxsize=32)
def v3_document(group: str, version: str) -> bytes:
    resources = [r for r in RESOURCES if r.group == group and r.version == version]
    if not resources:
        raise KeyError((group, version))
    paths: dict[str, Any] = {}
    for resource in resources:
        paths.update(_paths(resource, v3=True))
    doc = {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": VERSION["gitVersion"]},
        "paths": paths,
        "components": {"schemas": _schemas(resources, v3=True)},
    }
    return json.dumps(doc, separators=(",", ":"), sort_keys=True).encode()


def _v3_paths() -> dict[str, tuple[str, str]]:
    out = {"api/v1": ("", "v1")}
    for group, versions in group_versions().items():
        for version in versions:
            if any(r.group == group and r.version == version for r in RESOURCES):
                out[f"apis/{group}/{version}"] = (group, version)
    return out


@functools.lru_cache(maxsize=1)
def v3_root() -> bytes:
    paths = {}
    for path, (group, version) in _v3_paths().items():
        digest = hashlib.sha512(v3_document(group, version)).hexdigest()[:128].upper()
        paths[path] = {"serverRelativeURL": f"/openapi/v3/{path}?hash={digest}"}
    return json.dumps({"paths": paths}, separators=(",", ":")).encode()


@functools.lru_cache(maxsize=1)
def v2_document() -> bytes:
    paths: dict[str, Any] = {}
    for resource in RESOURCES:
        paths.update(_paths(resource, v3=False))
    doc = {
        "swagger": "2.0",
        "info": {"title": "Kubernetes", "version": VERSION["gitVersion"]},
        "paths": paths,
        "definitions": _schemas(list(RESOURCES), v3=False),
    }
    return json.dumps(doc, separators=(",", ":"), sort_keys=True).encode()


@functools.lru_cache(maxsize=1)
def v2_protobuf() -> bytes:
    return openapi_proto.document(json.loads(v2_document()))


def serve(request: web.Request, parts: list[str]) -> web.Response:
    headers = {"Cache-Control": "no-cache, private", "Vary": "Accept"}
    if parts == ["v2"]:
        accept = request.headers.get("Accept", "*/*")
        if "com.github.proto-openapi.spec.v2" in accept:
            proto_headers = {**headers, "Content-Type": openapi_proto.CONTENT_TYPE}
            return web.Response(body=v2_protobuf(), headers=proto_headers)
        if "json" not in accept and "*/*" not in accept:
            raise ApiError(406, f'media type "{accept}" is not served: use application/json', "NotAcceptable")
        return web.Response(body=v2_document(), content_type="application/json", headers=headers)
    if parts == ["v3"]:
        return web.Response(body=v3_root(), content_type="application/json", headers=headers)
    if len(parts) >= 2 and parts[0] == "v3":
        target = _v3_paths().get("/".join(parts[1:]))
        if target is not None:
            headers["Cache-Control"] = (
                "public, immutable" if request.query.get("hash") else headers["Cache-Control"]
            )
            return web.Response(body=v3_document(*target), content_type="application/json", headers=headers)
    raise ApiError(404, "the server could not find the requested resource")
