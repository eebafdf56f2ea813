"""The federated operator's own arguments, checked before anything is reserved or created.

:func:`check_operator_arguments` takes the raw values a DAG author passed (or a template rendered) and
returns them normalized, or raises :class:`SpecError` naming the argument and what is allowed: a string
where a list of names belongs (``datasets="eu-customers"``), ``max_cluster_attempts="3"``, ``policy="cost"``,
``wait_timeout=nan``. The operator wraps the error in its ``FederationError``. Names are checked against the
spec afterwards by ``FederationSpec.check_references``; policy values by ``PolicySpec.merged``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from airflow_provider_fedsched.federation.limits import (
    MAX_CLUSTERS,
    MAX_DATASETS,
    MAX_SECONDS,
    check_int,
    check_seconds,
    describe,
)
from airflow_provider_fedsched.federation.spec import SpecError

__all__ = [
    "MAX_ANNOTATIONS_BYTES",
    "MAX_CLUSTER_ATTEMPTS",
    "MAX_GANG_PODS",
    "MAX_JOB_POLL_INTERVAL",
    "OperatorArguments",
    "check_annotations",
    "check_job_arguments",
    "check_names",
    "check_operator_arguments",
]

MAX_CLUSTER_ATTEMPTS = 100
MAX_NAME = 253
MAX_ANNOTATIONS_BYTES = 256 * 1024 - 16 * 1024
"""Kubernetes refuses an object whose annotations (keys and values) total more than 256 KiB; the provider
adds its own to the pod (the decision, up to 1 KB, and its ids): 16 KiB are kept for them."""
MAX_INT32 = 2**31 - 1
"""The Job API's integer fields (``backoffLimit``, ``ttlSecondsAfterFinished``) are 32-bit."""
MAX_GANG_PODS = 100_000
"""``parallelism`` and ``completions`` of a federated Job: the Job API's own bound for indexed Jobs."""
MAX_JOB_POLL_INTERVAL = 3600.0
COMPLETION_MODES = ("NonIndexed", "Indexed")
_QUALIFIED_NAME = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
"""A Kubernetes qualified name (an annotation's or label's key): an optional DNS-subdomain prefix and
``/``, then at most 63 letters, digits, ``-``, ``_`` and ``.``."""


@dataclass(frozen=True, slots=True)
class OperatorArguments:
    """The federation arguments, normalized (lists, floats of seconds)."""

    datasets: list[str] = field(default_factory=list)
    clusters: list[str] | None = None
    prefer_region: str | None = None
    prefer_group: str | None = None
    policy: dict[str, Any] = field(default_factory=dict)
    preemptible: bool = False
    checkpoint: str | None = None
    expected_duration_seconds: float | None = None
    max_cluster_attempts: int = 3
    unschedulable_grace_seconds: float = 30.0
    unreachable_grace_seconds: float = 300.0
    wait_timeout_seconds: float = 1800.0
    cluster_selector: dict[str, str] = field(default_factory=dict)


def check_names(value: Any, argument: str, *, limit: int, allow_none: bool = False) -> list[str] | None:
    """A list (or tuple, set) of non-empty names; a lone string is refused, never split into letters."""
    if value is None:
        if allow_none:
            return None
        raise SpecError(f"{argument}: expected a list of names, got None")
    if isinstance(value, str | bytes):
        text = value.decode(errors="replace") if isinstance(value, bytes) else value
        raise SpecError(
            f"{argument}: expected a list of names, got the string {describe(text)} "
            f"(write {argument}=[{describe(text)}])"
        )
    if not isinstance(value, Sequence | set | frozenset):
        raise SpecError(f"{argument}: expected a list of names, got {type(value).__name__}")
    names = list(value)
    if len(names) > limit:
        raise SpecError(f"{argument}: {len(names):,} names, more than the {limit:,} allowed")
    for position, name in enumerate(names):
        if not isinstance(name, str) or not name or len(name) > MAX_NAME:
            raise SpecError(
                f"{argument}[{position}]: expected a name (a non-empty string of at most {MAX_NAME} "
                f"characters), got {type(name).__name__} {describe(name)}"
            )
    return names


def _optional_name(value: Any, argument: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value or len(value) > MAX_NAME:
        raise SpecError(f"{argument}: expected a name or None, got {type(value).__name__} {describe(value)}")
    return value


def check_operator_arguments(
    *,
    datasets: Any = (),
    clusters: Any = None,
    prefer_region: Any = None,
    prefer_group: Any = None,
    policy: Any = None,
    preemptible: Any = False,
    checkpoint: Any = None,
    expected_duration: Any = None,
    max_cluster_attempts: Any = 3,
    unschedulable_grace_seconds: Any = 30.0,
    unreachable_grace: Any = timedelta(minutes=5),
    wait_timeout: Any = timedelta(minutes=30),
    cluster_selector: Any = None,
) -> OperatorArguments:
    """Every federation argument of the operator, checked; raises :class:`SpecError` naming the first bad one.

    Call it in ``__init__`` on the values as given (before turning anything into a list) and again in
    ``prepare()`` once templates have rendered, before any reservation.
    """
    names = check_names(datasets, "datasets", limit=MAX_DATASETS) or []
    members = check_names(clusters, "clusters", limit=MAX_CLUSTERS, allow_none=True)
    if members is not None and not members:
        raise SpecError("clusters: the cluster subset is empty; name at least one member (or pass None)")
    if policy is not None and not isinstance(policy, Mapping):
        raise SpecError(
            f"policy: expected a mapping of policy overrides (e.g. {{'weights': {{'cost': 1.0}}}}), got "
            f"{type(policy).__name__} {describe(policy)}"
        )
    overrides = dict(policy or {})
    for key in overrides:
        if not isinstance(key, str):
            raise SpecError(f"policy: keys are policy field names (strings), got {describe(key)}")
    if not isinstance(preemptible, bool):
        raise SpecError(
            f"preemptible: expected True or False, got {type(preemptible).__name__} {describe(preemptible)}"
        )
    if checkpoint is not None and not isinstance(checkpoint, str):
        raise SpecError(f"checkpoint: expected a string (a path or URL), got {type(checkpoint).__name__}")
    expected = None if expected_duration is None else check_seconds(expected_duration, "expected_duration")
    if cluster_selector is not None and not isinstance(cluster_selector, Mapping):
        raise SpecError(
            f"cluster_selector: expected a mapping of label to value, got {type(cluster_selector).__name__} "
            f"{describe(cluster_selector)}"
        )
    selector = dict(cluster_selector or {})
    for key, value in selector.items():
        if not isinstance(key, str) or not key or not isinstance(value, str):
            raise SpecError(f"cluster_selector: labels are strings (got {describe(key)}: {describe(value)})")
    return OperatorArguments(
        datasets=names,
        clusters=members,
        prefer_region=_optional_name(prefer_region, "prefer_region"),
        prefer_group=_optional_name(prefer_group, "prefer_group"),
        policy=overrides,
        preemptible=preemptible,
        checkpoint=checkpoint,
        expected_duration_seconds=expected,
        max_cluster_attempts=check_int(
            max_cluster_attempts, "max_cluster_attempts", minimum=1, maximum=MAX_CLUSTER_ATTEMPTS
        ),
        unschedulable_grace_seconds=check_seconds(unschedulable_grace_seconds, "unschedulable_grace_seconds"),
        unreachable_grace_seconds=check_seconds(unreachable_grace, "unreachable_grace"),
        wait_timeout_seconds=check_seconds(wait_timeout, "wait_timeout", maximum=MAX_SECONDS),
        cluster_selector=selector,
    )


def check_annotations(value: Any, argument: str = "annotations") -> None:
    """Annotations as Kubernetes accepts them: a mapping of qualified names to strings, at most
    :data:`MAX_ANNOTATIONS_BYTES` in all (a 50 MB annotation is refused here, not by the API server after
    the placement)."""
    if value is None:
        return
    if not isinstance(value, Mapping):
        raise SpecError(
            f"{argument}: expected a mapping of names to strings, "
            f"got {type(value).__name__} {describe(value)}"
        )
    total = 0
    for key, item in value.items():
        if not isinstance(key, str) or len(key) > MAX_NAME + 64 or not _QUALIFIED_NAME.match(key):
            raise SpecError(
                f"{argument}: {describe(key)} is not a Kubernetes annotation name (an optional DNS-subdomain "
                "prefix and '/', then at most 63 letters, digits, '-', '_' or '.')"
            )
        if not isinstance(item, str):
            raise SpecError(
                f"{argument}.{key}: expected a string, got {type(item).__name__} {describe(item)}"
            )
        total += len(key.encode()) + len(item.encode())
        if total > MAX_ANNOTATIONS_BYTES:
            raise SpecError(
                f"{argument}: more than {MAX_ANNOTATIONS_BYTES:,} bytes of keys and values (at {key}); "
                "Kubernetes accepts 256 KiB in all, and the provider adds its own"
            )


def check_job_arguments(
    *,
    job_poll_interval: Any,
    backoff_limit: Any,
    ttl_seconds_after_finished: Any,
    parallelism: Any,
    completions: Any,
    completion_mode: Any,
) -> None:
    """The Job operator's own arguments; raises :class:`SpecError` naming the first bad one. Checked before
    the placement: the API server would refuse them only once the Job is created (or the poll loop would
    fail after it was)."""
    poll = check_seconds(job_poll_interval, "job_poll_interval", maximum=MAX_JOB_POLL_INTERVAL)
    if poll <= 0:
        raise SpecError(
            f"job_poll_interval: {describe(job_poll_interval)} must be above 0 seconds (the Job is read "
            "once per interval)"
        )
    for name, value in (
        ("backoff_limit", backoff_limit),
        ("ttl_seconds_after_finished", ttl_seconds_after_finished),
    ):
        if value is not None:
            check_int(value, name, minimum=0, maximum=MAX_INT32)
    for name, value in (("parallelism", parallelism), ("completions", completions)):
        if value is not None:
            check_int(value, name, minimum=1, maximum=MAX_GANG_PODS)
    if completion_mode is not None and completion_mode not in COMPLETION_MODES:
        raise SpecError(
            f"completion_mode: expected one of {', '.join(COMPLETION_MODES)} or None, "
            f"got {describe(completion_mode)}"
        )
