"""Small helpers shared by the simulator: timestamps, uids, Kubernetes ``Status`` errors and the clock."""

from __future__ import annotations

import asyncio
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
