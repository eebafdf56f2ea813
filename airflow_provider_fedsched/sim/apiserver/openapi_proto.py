"""``/openapi/v2`` in protobuf: the swagger document encoded as gnostic's ``openapi.v2.Document``.

kubectl (client-go's ``OpenAPISchema``) only asks for this form. Only the messages and fields our generated
document uses are encoded (field numbers from gnostic's OpenAPIv2.proto); vendor extensions travel as YAML
in ``NamedAny.value.yaml``, as gnostic writes them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import yaml

# What kubectl asks for, and the (mime-parsable) type the apiserver answers with.
ACCEPT = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf"
CONTENT_TYPE = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited field (strings, bytes, embedded messages)."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _string(number: int, value: str | None) -> bytes:
    return _field(number, value.encode()) if value else b""


def _bool(number: int, value: bool) -> bytes:
    return _varint(number << 3) + b"\x01" if value else b""


def _strings(number: int, values: Iterable[str]) -> bytes:
    return b"".join(_field(number, v.encode()) for v in values)


def _extensions(number: int, obj: dict[str, Any]) -> bytes:
    out = b""
    for key in sorted(k for k in obj if k.startswith("x-")):
        text = yaml.safe_dump(obj[key], default_flow_style=False)
        if text.endswith("\n...\n"):
            text = text[: -len("...\n")]
        any_value = _string(2, text)  # Any.yaml
        out += _field(number, _string(1, key) + _field(2, any_value))
    return out


def schema(obj: dict[str, Any]) -> bytes:
    out = _string(1, obj.get("$ref")) + _string(4, obj.get("description"))
    out += _strings(19, obj.get("required") or [])
    if obj.get("type"):
        out += _field(22, _strings(1, [obj["type"]]))
    if obj.get("items"):
        out += _field(23, _field(1, schema(obj["items"])))
    if obj.get("properties"):
        named = b"".join(
            _field(1, _string(1, name) + _field(2, schema(value)))
            for name, value in obj["properties"].items()
        )
        out += _field(25, named)
    return out + _extensions(31, obj)


def _parameter(param: dict[str, Any]) -> bytes:
    if param["in"] == "body":
        body = (
            _string(1, param.get("description"))
            + _string(2, param["name"])
            + _string(3, "body")
            + _bool(4, bool(param.get("required")))
            + _field(5, schema(param["schema"]))
        )
        return _field(1, _field(1, body))  # ParametersItem.parameter -> Parameter.body_parameter
    common = (
        _bool(1, bool(param.get("required")))
        + _string(2, param["in"])
        + _string(3, param.get("description"))
        + _string(4, param["name"])
    )
    if param["in"] == "path":
        sub = _field(
            4, common + _string(5, param.get("type", "string")) + _bool(19, bool(param.get("uniqueItems")))
        )
    else:
        sub = _field(
            3, common + _string(6, param.get("type", "string")) + _bool(20, bool(param.get("uniqueItems")))
        )
    return _field(1, _field(2, sub))  # ParametersItem.parameter -> Parameter.non_body_parameter


def _operation(op: dict[str, Any]) -> bytes:
    out = (
        _strings(1, op.get("tags") or [])
        + _string(3, op.get("description"))
        + _string(5, op.get("operationId"))
    )
    out += _strings(7, op.get("consumes") or [])
    out += b"".join(_field(8, _parameter(p)) for p in op.get("parameters") or [])
    codes = b""
    for code, response in (op.get("responses") or {}).items():
        value = _string(1, response.get("description"))
        if response.get("schema"):
            value += _field(2, _field(1, schema(response["schema"])))
        codes += _field(1, _string(1, code) + _field(2, _field(1, value)))
    out += _field(9, codes)
    return out + _extensions(13, op)


_METHODS = {"get": 2, "put": 3, "post": 4, "delete": 5, "patch": 8}


def _path_item(item: dict[str, Any]) -> bytes:
    out = b""
    for method, number in _METHODS.items():
        if method in item:
            out += _field(number, _operation(item[method]))
    out += b"".join(_field(9, _parameter(p)) for p in item.get("parameters") or [])
    return out


def document(doc: dict[str, Any]) -> bytes:
    """Encode a swagger 2.0 document (as produced by ``openapi.v2_document``) as ``openapi.v2.Document``."""
    info = doc.get("info") or {}
    out = _string(1, doc.get("swagger", "2.0")) + _field(
        2, _string(1, info.get("title")) + _string(2, info.get("version"))
    )
    paths = b"".join(
        _field(2, _string(1, path) + _field(2, _path_item(item)))
        for path, item in sorted(doc["paths"].items())
    )
    out += _field(8, paths)
    definitions = b"".join(
        _field(1, _string(1, name) + _field(2, schema(value)))
        for name, value in sorted(doc["definitions"].items())
    )
    out += _field(9, definitions)
    return out
