"""Kubernetes resource quantities and pod requests, computed the way Kubernetes computes them.

Quantities are parsed exactly (as :class:`fractions.Fraction`) and then converted to the integer units the
kube-scheduler compares: millicores for ``cpu``, whole units (bytes, devices) for everything else, rounding
up as ``resource.Quantity.MilliValue()`` / ``Value()`` do. A :data:`ResourceList` is a plain
``dict[str, int]`` in those units, so fit checks are integer comparisons.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from fractions import Fraction
from typing import Any

from airflow_provider_fedsched.federation.limits import MAX_QUANTITY, describe

ResourceList = dict[str, int]
"""Resource name -> amount in scheduler units (millicores for ``cpu``, bytes or units otherwise)."""

CPU = "cpu"
MEMORY = "memory"
EPHEMERAL_STORAGE = "ephemeral-storage"
PODS = "pods"
GPU = "nvidia.com/gpu"
GPU_MILLI = "fedsched.io/gpu-milli"
"""Thousandths of a GPU: how a task asks for part of one (GPU sharing), or for whole GPUs in thousandths."""

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 10**3),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}
_QUANTITY = re.compile(
    r"^(?P<sign>[+-]?)(?P<num>\d+(?:\.\d*)?|\.\d+)"
    r"(?:(?P<exp>[eE][+-]?\d+)|(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?)$"
)


class QuantityError(ValueError):
    """A value that is not a valid, non-negative Kubernetes quantity."""


_MAX_QUANTITY_TEXT = 64
"""Characters in a quantity string: ``9223372036854775807`` with a suffix is 21; 64 leaves room for
decimals and exponents while keeping the exact arithmetic below trivially cheap."""
_MAX_EXPONENT = 128
"""Decimal exponents are refused beyond +-128 (any such quantity of 64 characters is outside Kubernetes'
range or rounds up to the smallest unit); within it, exact arithmetic costs microseconds."""


def _out_of_range(value: object) -> QuantityError:
    return QuantityError(
        f"{describe(value)} is too large: Kubernetes quantities are at most 2^63-1 ({MAX_QUANTITY})"
    )


def parse_quantity(value: str | int | float | Fraction) -> Fraction:
    """Parse a Kubernetes quantity ("500m", "1.5", "4Gi", "1e3", "2G") exactly.

    Negative quantities are rejected: no resource amount in this product may be negative. So is anything
    beyond Kubernetes' own range (2^63-1), checked before any exact arithmetic: ``1e999999999`` is refused
    at once instead of computing a billion-digit number.
    """
    if isinstance(value, bool):
        raise QuantityError(f"{value!r} is not a quantity")
    if isinstance(value, Fraction):
        result = value
    elif isinstance(value, int):
        if abs(value) > MAX_QUANTITY:
            raise _out_of_range(value)
        result = Fraction(value)
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise QuantityError(f"{value!r} is not a finite quantity")
        if abs(value) > MAX_QUANTITY:
            raise _out_of_range(value)
        result = Fraction(str(value))
    elif isinstance(value, str):
        text = value.strip()
        if len(text) > _MAX_QUANTITY_TEXT:
            kind = "too large" if text.lstrip("+-")[:1].isdigit() else "not a Kubernetes quantity"
            raise QuantityError(
                f"{describe(value)} is {kind}: a quantity has at most {_MAX_QUANTITY_TEXT} characters"
            )
        match = _QUANTITY.match(text)
        if match is None:
            raise QuantityError(
                f"{describe(value)} is not a Kubernetes quantity "
                "(examples: '500m', '1.5', '4Gi', '1e3', '2G')"
            )
        if match["exp"]:
            exponent = int(match["exp"][1:])
            if exponent > _MAX_EXPONENT:
                raise _out_of_range(value)
            if exponent < -_MAX_EXPONENT:
                raise QuantityError(
                    f"{describe(value)} is too small: the exponent must be at least -{_MAX_EXPONENT}"
                )
            number = Fraction(match["num"]) * Fraction(10) ** exponent
        else:
            suffix = match["suffix"] or ""
            number = Fraction(match["num"]) * (_BINARY[suffix] if suffix in _BINARY else _DECIMAL[suffix])
        result = -number if match["sign"] == "-" else number
    else:
        raise QuantityError(f"{describe(value)} is not a quantity")
    if result < 0:
        raise QuantityError(f"{describe(value)} is negative")
    if result > MAX_QUANTITY:
        raise _out_of_range(value)
    return result


def to_units(resource: str, quantity: Fraction) -> int:
    """Convert an exact quantity to the scheduler's integer unit for ``resource`` (rounding up); raises
    :class:`QuantityError` when the amount in those units is beyond 2^63-1 (cpu above 9.2e15 cores)."""
    units = math.ceil(quantity * 1000) if resource == CPU else math.ceil(quantity)
    if units > MAX_QUANTITY:
        raise QuantityError(
            f"{float(quantity):g} is too large: at most 2^63-1 scheduler units ({MAX_QUANTITY}), "
            f"which for {resource} is {format_quantity(resource, MAX_QUANTITY)}"
        )
    return units


def parse_resource_list(values: Mapping[str, Any] | None) -> ResourceList:
    """Parse a Kubernetes resource map (``{"cpu": "500m", "memory": "1Gi"}``) into scheduler units.

    Raises :class:`QuantityError` whose message starts with the resource name at fault.
    """
    result: ResourceList = {}
    for name, raw in (values or {}).items():
        try:
            result[str(name)] = to_units(str(name), parse_quantity(raw))
        except QuantityError as exc:
            raise QuantityError(f"{name}: {exc}") from None
    return result


def format_quantity(resource: str, amount: int) -> str:
    """Render scheduler units back as a readable Kubernetes quantity ("1500m", "4Gi", "2")."""
    if resource == CPU:
        return f"{amount // 1000}" if amount % 1000 == 0 else f"{amount}m"
    if resource in (MEMORY, EPHEMERAL_STORAGE) and amount:
        for suffix in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
            if amount % _BINARY[suffix] == 0:
                return f"{amount // _BINARY[suffix]}{suffix}"
    return str(amount)


def add(a: Mapping[str, int], b: Mapping[str, int]) -> ResourceList:
    """Element-wise sum of two resource lists."""
    out = dict(a)
    for name, amount in b.items():
        out[name] = out.get(name, 0) + amount
    return out


def subtract(a: Mapping[str, int], b: Mapping[str, int]) -> ResourceList:
    """Element-wise ``a - b`` (may go negative: callers use it for headroom, not for requests)."""
    out = dict(a)
    for name, amount in b.items():
        out[name] = out.get(name, 0) - amount
    return out


def maximum(a: Mapping[str, int], b: Mapping[str, int]) -> ResourceList:
    """Element-wise maximum of two resource lists."""
    out = dict(a)
    for name, amount in b.items():
        out[name] = max(out.get(name, 0), amount)
    return out


def fits(request: Mapping[str, int], free: Mapping[str, int]) -> bool:
    """True when every requested amount is available in ``free``."""
    return all(amount <= free.get(name, 0) for name, amount in request.items() if amount)


def insufficient(request: Mapping[str, int], free: Mapping[str, int]) -> list[str]:
    """The sorted names of resources ``free`` cannot cover."""
    return sorted(name for name, amount in request.items() if amount and amount > free.get(name, 0))


def _container_requests(container: Mapping[str, Any]) -> ResourceList:
    resources = container.get("resources") or {}
    # Kubernetes defaults requests to limits when only limits are set.
    limits = parse_resource_list(resources.get("limits"))
    requests = parse_resource_list(resources.get("requests"))
    return {**limits, **requests}


def _containers(spec: Mapping[str, Any], key: str, snake: str) -> Iterable[Mapping[str, Any]]:
    return spec.get(key) or spec.get(snake) or []


def pod_requests(pod_spec: Mapping[str, Any]) -> ResourceList:
    """Effective requests of a pod spec (a dict in API camelCase or client snake_case).

    As the scheduler computes it: the larger of the sum over containers and each init container (a
    restartable "sidecar" init container is added to both), plus ``overhead``.
    """
    total: ResourceList = {}
    for container in _containers(pod_spec, "containers", "containers"):
        total = add(total, _container_requests(container))
    init_peak: ResourceList = {}
    sidecars: ResourceList = {}
    for container in _containers(pod_spec, "initContainers", "init_containers"):
        requests = _container_requests(container)
        policy = container.get("restartPolicy") or container.get("restart_policy")
        if policy == "Always":
            sidecars = add(sidecars, requests)
            continue
        init_peak = maximum(init_peak, add(sidecars, requests))
    total = maximum(add(total, sidecars), init_peak)
    overhead = parse_resource_list(pod_spec.get("overhead"))
    return {name: amount for name, amount in add(total, overhead).items() if amount}
