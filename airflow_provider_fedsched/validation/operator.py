"""The federated operator's own arguments, checked before anything is reserved or created.

:func:`check_operator_arguments` takes the raw values a DAG author passed (or a template rendered) and
returns them normalized, or raises :class:`SpecError` naming the argument and what is allowed: a string
where a list of names belongs (``datasets="eu-customers"``), ``max_cluster_attempts="3"``, ``policy="cost"``,
``wait_timeout=nan``. The operator wraps the error in its ``FederationError``. Names are checked against the
spec afterwards by ``FederationSpec.check_references``; policy values by ``PolicySpec.merged``.
"""

from __future__ import annotations

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

__all__ = ["MAX_CLUSTER_ATTEMPTS", "OperatorArguments", "check_names", "check_operator_arguments"]

MAX_CLUSTER_ATTEMPTS = 100
MAX_NAME = 253


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
