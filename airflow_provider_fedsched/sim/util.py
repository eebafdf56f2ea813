"""Small helpers shared by the simulator: timestamps, uids, Kubernetes ``Status`` errors and the clock."""

from __future__ import annotations

import asyncio
import re
import time
import uuid
from datetime import UTC, datetime
from typing import Any


def now_iso(ts: float | None = None) -> str:
    """RFC 3339 with second precision, as Kubernetes renders ``metav1.Time``."""
    return datetime.fromtimestamp(time.time() if ts is None else ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def now_micro(ts: float | None = None) -> str:
    """RFC 3339 with microseconds (``metav1.MicroTime``)."""
    return datetime.fromtimestamp(time.time() if ts is None else ts, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def rfc3339nano(ts: float) -> str:
    """The kubelet's log timestamp prefix (RFC 3339 with nanoseconds)."""
    dt = datetime.fromtimestamp(ts, UTC)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{dt.microsecond:06d}000Z"


def parse_time(value: str) -> float:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def new_uid() -> str:
    return str(uuid.uuid4())


class ApiError(Exception):
    """An error the API answers with a Kubernetes ``Status`` object."""

    REASONS = {
        400: "BadRequest",
        401: "Unauthorized",
        403: "Forbidden",
        404: "NotFound",
        405: "MethodNotAllowed",
        409: "AlreadyExists",
        410: "Expired",
        415: "UnsupportedMediaType",
        422: "Invalid",
        429: "TooManyRequests",
        500: "InternalError",
        503: "ServiceUnavailable",
        504: "Timeout",
    }

    def __init__(
        self,
        code: int,
        message: str,
        reason: str | None = None,
        details: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.reason = reason or self.REASONS.get(code, "Unknown")
        self.details = details
        self.headers = headers or {}

    def status(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details is not None:
            body["details"] = self.details
        return body


def not_found(plural: str, name: str, group: str = "") -> ApiError:
    resource = f"{plural}.{group}" if group else plural
    return ApiError(
        404,
        f'{resource} "{name}" not found',
        "NotFound",
        {"name": name, "kind": plural, "group": group or None},
    )


class Clock:
    """Scales every simulated duration by ``time_scale`` (0.1 = ten times faster). Wall time stays real."""

    def __init__(self, time_scale: float = 1.0) -> None:
        self.time_scale = time_scale

    @staticmethod
    def now() -> float:
        """Wall-clock time (epoch seconds): the scale stretches durations, not the calendar."""
        return time.time()

    def real(self, sim_seconds: float) -> float:
        return max(0.0, sim_seconds * self.time_scale)

    async def sleep(self, sim_seconds: float) -> None:
        await asyncio.sleep(self.real(sim_seconds))


# Query parameters bounded as a real cluster never needs, so that no value costs time or memory.
MAX_QUERY_INT = 2**53


def int_query(query: Any, name: str, minimum: int | None = None) -> int | None:
    """An integer query parameter, or None when absent; a bad value is a 400 naming the parameter."""
    raw = query.get(name)
    if raw is None or raw == "":
        return None
    try:
        value = int(raw)
    except ValueError:
        raise ApiError(
            400, f'{name}: Invalid value: "{raw}": strconv.ParseInt: parsing "{raw}": invalid syntax'
        ) from None
    if minimum is not None and value < minimum:
        raise ApiError(400, f"{name}: Invalid value: {value}: must be greater than or equal to {minimum}")
    if abs(value) > MAX_QUERY_INT:
        raise ApiError(400, f"{name}: Invalid value: {raw}: out of range")
    return value


def time_query(query: Any, name: str) -> float | None:
    """An RFC 3339 query parameter (``sinceTime``) as epoch seconds; a bad value is a 400."""
    raw = query.get(name)
    if not raw:
        return None
    try:
        return parse_time(raw)
    except (ValueError, OverflowError):
        raise ApiError(400, f'{name}: Invalid value: "{raw}": not an RFC 3339 time') from None


_QUANTITY_SHAPE = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)(([eE][+-]?\d+)|[A-Za-z]*)$")
# Kubernetes quantities fit in 63 bits of milli-units; far larger numbers (1e999999999) would cost
# unbounded time and memory to compute exactly, so they are refused before anything parses them.
MAX_QUANTITY_DIGITS = 40
MAX_QUANTITY_EXPONENT = 30


def quantity_too_large(value: Any) -> str | None:
    """Why ``value`` is beyond any Kubernetes quantity (a message), or None when it may be parsed."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return None if abs(value) < 10**MAX_QUANTITY_EXPONENT else f"{value!r}: quantity too large"
    if not isinstance(value, str):
        return None  # the parser names what is wrong with it
    text = value.strip()
    match = _QUANTITY_SHAPE.match(text)
    if match is None:
        return None
    if len(match.group(1)) > MAX_QUANTITY_DIGITS:
        return f"{value!r}: quantity too large (more than {MAX_QUANTITY_DIGITS} digits)"
    exponent = match.group(4)
    if exponent and abs(int(exponent[1:])) > MAX_QUANTITY_EXPONENT:
        return f"{value!r}: quantity too large (exponent beyond {MAX_QUANTITY_EXPONENT})"
    return None
