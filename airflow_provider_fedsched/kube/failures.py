"""Why a pod did not run to completion in its cluster, and whether that is the federation's business.

The operator moves a task to another cluster only for reasons that belong to the cluster, never for the
task's own failure (a non-zero exit code fails the try as KubernetesPodOperator would):

* ``insufficient``: the cluster cannot take the pod (quota 403 on create; Unschedulable past the grace).
* ``evicted``: the pod was evicted or preempted (reason ``Evicted``, a ``DisruptionTarget`` condition,
  a ``Preempted``/``Evicted``/``TaintManagerEviction`` event).
* ``unreachable``: the API server (or the pod's node) did not answer.
* ``misconfigured``: the cluster lacks what the pod needs from it (its namespace does not exist).

The kinds are the failure vocabulary of ``federation/record.py``. :func:`classify` is the one place that
judges how an attempt ended: from the errors raised and a fresh read of the pod and its events (never
from a stale state or a timer alone). The functions read the API's JSON (dicts), so they are shared by
the sync and deferrable paths. A :class:`ClusterFailure` is built in this module only: a step that has
judged for itself (a pod that disappeared, a node silent past the grace, a gang not placed in time) names
what it saw through :func:`unreachable`, :func:`insufficient`, :func:`unschedulable` or
:func:`disappeared`, so every failure of a cluster reads alike wherever it was found.
"""

from __future__ import annotations

import json
import socket
import ssl
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from airflow_provider_fedsched.federation.record import FailureKind

DISRUPTION_EVENTS = frozenset({"Preempted", "Evicted", "TaintManagerEviction"})


@dataclass(frozen=True)
class ClusterFailure:
    """A reason to leave a cluster: what happened there, in the cluster's words."""

    kind: FailureKind
    reason: str
    namespace_only: bool = False
    """The problem is the namespace's (its quota, or it does not exist), not the whole cluster's."""
    permanent: bool = False
    """Waiting cannot help: this cluster can never take the pod (a request above a hard quota)."""

    @property
    def resumable(self) -> bool:
        """Evictions and preemptions interrupt work in progress: the next pod may resume a checkpoint."""
        return self.kind == "evicted"

    def of(self, part: str) -> ClusterFailure:
        """The same failure, said of ``part`` of the workload (a member pod of a Job's gang)."""
        return replace(self, reason=f"{part}: {self.reason}")


def unreachable(reason: str) -> ClusterFailure:
    """The cluster (its API server, or the pod's node) did not answer, or the pod vanished unseen."""
    return ClusterFailure("unreachable", reason)


def insufficient(reason: str) -> ClusterFailure:
    """The cluster cannot take the workload now (not scheduled in time, a gang not placed together)."""
    return ClusterFailure("insufficient", reason)


def unschedulable(message: str) -> ClusterFailure:
    """The scheduler's ``Unschedulable`` message, held past the grace."""
    return insufficient(f"unschedulable: {message}")


def disappeared(what: str) -> ClusterFailure:
    """``what`` (``pod NAME``, ``job NAME``) is gone before it ended: evicted or deleted, its fate unknown."""
    return unreachable(f"{what} disappeared before it ended")


def _conditions(pod: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return list((pod.get("status") or {}).get("conditions") or [])


def unschedulable_message(pod: Mapping[str, Any]) -> str | None:
    """The scheduler's message while the pod is Pending with ``PodScheduled=False/Unschedulable``."""
    status = pod.get("status") or {}
    if status.get("phase") not in (None, "Pending"):
        return None
    for condition in _conditions(pod):
        if (
            condition.get("type") == "PodScheduled"
            and condition.get("status") == "False"
            and condition.get("reason") == "Unschedulable"
        ):
            return str(condition.get("message") or "Unschedulable")
    return None


def disruption(
    pod: Mapping[str, Any] | None, events: Iterable[Mapping[str, Any]] = ()
) -> ClusterFailure | None:
    """An eviction or preemption seen on the pod or in its events, else None."""
    if pod is not None:
        status = pod.get("status") or {}
        if str(status.get("reason") or "").lower() == "evicted":
            return ClusterFailure("evicted", f"evicted: {status.get('message') or 'Evicted'}".strip())
        for condition in _conditions(pod):
            if condition.get("type") == "DisruptionTarget" and condition.get("status") == "True":
                why = condition.get("reason") or "DisruptionTarget"
                return ClusterFailure("evicted", f"{why}: {condition.get('message') or ''}".strip(": "))
    for event in events:
        reason = event.get("reason")
        if reason in DISRUPTION_EVENTS:
            return ClusterFailure("evicted", f"{reason}: {event.get('message') or ''}".strip(": "))
    return None


def quota_exceeded(status: int | None, body: str | bytes | None) -> ClusterFailure | None:
    """A 403 from admission because a ResourceQuota would be exceeded."""
    if status != 403 or not body:
        return None
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
    if "exceeded quota" not in text and "failed quota" not in text:
        return None
    try:
        message = json.loads(text).get("message") or text
    except ValueError:
        message = text
    above = above_hard_limit(str(message))
    if above:
        return ClusterFailure(
            "insufficient",
            f"quota: {message} (the request is above the quota's hard limit for {', '.join(above)}: it can "
            "never fit in this namespace)",
            namespace_only=True,
            permanent=True,
        )
    return ClusterFailure("insufficient", f"quota: {message}", namespace_only=True)


def above_hard_limit(message: str) -> list[str]:
    """Resources whose request alone exceeds the quota's hard limit, read from the admission message
    ("requested: requests.cpu=2, used: ..., limited: requests.cpu=1")."""
    from airflow_provider_fedsched.federation.resources import QuantityError, parse_quantity

    def values(part: str) -> dict[str, str]:
        found = {}
        for item in part.split(","):
            name, _, value = item.strip().partition("=")
            if name and value:
                found[name] = value
        return found

    requested_at, limited_at = message.find("requested: "), message.find("limited: ")
    if requested_at < 0 or limited_at < 0:
        return []
    requested = values(message[requested_at + 11 :].split(", used: ")[0])
    limited = values(message[limited_at + 9 :])
    above = []
    for name, value in requested.items():
        if name not in limited:
            continue
        try:
            if parse_quantity(value) > parse_quantity(limited[name]):
                above.append(name)
        except QuantityError:
            continue
    return above


def missing_namespace(status: int | None, body: str | bytes | None) -> ClusterFailure | None:
    """A 404 on create because the namespace does not exist in this cluster."""
    if status != 404 or not body:
        return None
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
    if '"kind":"namespaces"' not in text.replace(" ", "") and "namespaces " not in text:
        return None
    try:
        message = json.loads(text).get("message") or text
    except ValueError:
        message = text
    return ClusterFailure("misconfigured", str(message), namespace_only=True)


def node_not_ready(node: Mapping[str, Any]) -> bool:
    """The node's Ready condition is not True (False or Unknown: its kubelet stopped reporting)."""
    for condition in (node.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return bool(condition.get("status") != "True")
    return True


def scheduled(pod: Mapping[str, Any]) -> bool:
    """The pod is bound to a node (or already past Pending)."""
    status = pod.get("status") or {}
    if status.get("phase") not in (None, "Pending", "Unknown"):
        return True
    return any(
        c.get("type") == "PodScheduled" and c.get("status") == "True" for c in status.get("conditions") or []
    )


# Errors without an answer ------------------------------------------------------------------------------
def chain(exc: BaseException) -> list[BaseException]:
    """The exception and those it masks or wraps: ``__cause__``/``__context__`` (KubernetesPodOperator's
    cleanup raises from a ``finally``), urllib3's ``MaxRetryError.reason`` and ``ProtocolError`` args."""
    seen: list[BaseException] = []
    pending: list[BaseException] = [exc]
    while pending:
        current = pending.pop(0)
        if current in seen:
            continue
        seen.append(current)
        nested = [current.__cause__, current.__context__, getattr(current, "reason", None), *current.args]
        pending.extend(e for e in nested if isinstance(e, BaseException) and e not in seen)
    return seen


def is_connection_error(exc: BaseException) -> bool:
    """The cluster did not answer: refused, reset, timed out, TLS or DNS failure (sync or async client)."""
    import urllib3.exceptions

    kinds: tuple[type[BaseException], ...] = (
        ConnectionError,
        TimeoutError,
        socket.gaierror,
        ssl.SSLError,
        urllib3.exceptions.HTTPError,
    )
    try:
        import aiohttp

        kinds = (*kinds, aiohttp.ClientConnectionError, aiohttp.ServerTimeoutError)
    except ImportError:  # pragma: no cover - a dependency
        pass
    return any(isinstance(error, kinds) for error in chain(exc))


def never_sent(exc: BaseException) -> bool:
    """The request never reached the API server (no connection was made), so it cannot have acted."""
    import urllib3.exceptions

    for error in chain(exc):
        if isinstance(error, urllib3.exceptions.NewConnectionError | ConnectionRefusedError):
            return True
        if isinstance(error, urllib3.exceptions.ConnectTimeoutError | socket.gaierror):
            return True
    return False


def describe_error(exc: BaseException, server: str, timeout: float | None = None) -> str:
    """A one-line reason a person understands, naming the API server; never credentials."""
    import urllib3.exceptions

    errors = chain(exc)
    for error in errors:
        status = getattr(error, "status", None)
        if isinstance(status, int) and not isinstance(error, urllib3.exceptions.HTTPError):
            if status == 401:
                return f"{server} rejected the credentials (401 Unauthorized)"
            if status == 403:
                return f"{server} forbids the request (403 Forbidden)"
            return f"{server} answered {status} {getattr(error, 'reason', '') or ''}".rstrip()
    for error in errors:
        if isinstance(error, ConnectionRefusedError):
            return f"connection refused at {server}"
        if isinstance(error, ssl.SSLError) or "CERTIFICATE_VERIFY_FAILED" in str(error):
            return f"TLS verification failed for {server}"
        if isinstance(error, socket.gaierror):
            return f"cannot resolve the host of {server}"
        if isinstance(error, ConnectionResetError):
            return f"connection reset by {server}"
    for error in errors:
        if isinstance(error, urllib3.exceptions.NewConnectionError) and "refused" in str(error).lower():
            return f"connection refused at {server}"
        if isinstance(error, urllib3.exceptions.ConnectTimeoutError):
            return f"no connection to {server}" + (f" within {timeout:g}s" if timeout else "")
        if isinstance(error, TimeoutError | urllib3.exceptions.ReadTimeoutError):
            return f"no answer from {server}" + (f" within {timeout:g}s" if timeout else "")
        if isinstance(error, urllib3.exceptions.ProtocolError):
            return f"connection to {server} broken ({_first_line(error)})"
    return f"{type(exc).__name__} talking to {server}: {_first_line(exc)}"


def api_refusal(exc: BaseException) -> str | None:
    """What the API server said when it refused a request (its Status message, e.g. RBAC's `... cannot
    create resource "pods" ...`), as ``"403 Forbidden: <message>"``; ``None`` when no answer carries one.
    The message names the identity and the permission, never a credential."""
    for error in chain(exc):
        status, body = getattr(error, "status", None), getattr(error, "body", None)
        if not isinstance(status, int) or not body:
            continue
        text = body.decode("utf-8", "replace") if isinstance(body, bytes) else str(body)
        try:
            document = json.loads(text)
        except ValueError:
            continue
        message = document.get("message") if isinstance(document, dict) else None
        if message:
            return f"{status} {document.get('reason') or getattr(error, 'reason', '') or ''}: {message}"[:500]
    return None


def _first_line(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return text[:200]


def classify(
    errors: Sequence[BaseException],
    seen: Mapping[str, Any] | None,
    events: Iterable[Mapping[str, Any]] = (),
    *,
    server: str = "the API server",
    schedule_timeout: float | None = None,
    timed_out: bool = False,
) -> ClusterFailure | None:
    """How an attempt ended: the cluster's failure (move on, or wait), or None for the task's own.

    ``errors``: what was raised (with what it masks); ``seen``: a fresh read of the pod (None when it
    does not exist or the cluster did not answer); ``events``: the pod's events; ``timed_out``: a timer
    (the pod trigger's schedule timeout) ran out, which on its own proves nothing: only a pod that is
    still unscheduled in the fresh read makes it ``insufficient``.
    """
    for error in (e for exc in errors for e in chain(exc)):
        status = getattr(error, "status", None)
        body = getattr(error, "body", None)
        found = quota_exceeded(status, body) or missing_namespace(status, body)
        if found is not None:
            return found
    found = disruption(seen, events)
    if found is not None:
        return found
    if seen is not None:
        message = unschedulable_message(seen)
        if message is not None:
            return unschedulable(message)
        if timed_out and not scheduled(seen):
            after = f" within {schedule_timeout:g}s" if schedule_timeout is not None else ""
            return insufficient(f"not scheduled{after}")
    for exc in errors:
        for error in chain(exc):
            status = getattr(error, "status", None)
            if (isinstance(status, int) and status >= 500) or is_connection_error(error):
                return unreachable(describe_error(exc, server))
    return None
