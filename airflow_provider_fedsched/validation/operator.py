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
    label_key_problem,
    label_value_problem,
)
from airflow_provider_fedsched.federation.spec import SpecError

__all__ = [
    "GANG_MARKERS",
    "MAX_ANNOTATIONS_BYTES",
    "MAX_CLUSTER_ATTEMPTS",
    "MAX_GANG_PODS",
    "MAX_JOB_POLL_INTERVAL",
    "OperatorArguments",
    "check_annotations",
    "check_divided_job",
    "check_job_arguments",
    "check_labels",
    "check_names",
    "check_operator_arguments",
    "check_pod_arguments",
    "check_pod_labels",
    "check_pod_name",
    "check_pod_size",
    "gang_marker",
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
MAX_LABELS = 1_000
"""Labels on a pod or in a selector: far beyond use, bounding what one argument costs to check."""


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
    check_labels(selector, "cluster_selector")
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


def check_labels(value: Any, argument: str = "labels") -> None:
    """Labels or a label selector as Kubernetes accepts them (keys qualified names, values at most 63
    characters of the label alphabet): refused here, naming the argument and key, instead of a 422 from
    the API server once the task is placed."""
    if value is None:
        return
    if not isinstance(value, Mapping):
        raise SpecError(
            f"{argument}: expected a mapping of label to value, got {type(value).__name__} {describe(value)}"
        )
    if len(value) > MAX_LABELS:
        raise SpecError(f"{argument}: {len(value):,} labels, more than the {MAX_LABELS:,} allowed")
    for key, item in value.items():
        problem = label_key_problem(key)
        if problem is not None:
            raise SpecError(f"{argument}: {problem}")
        problem = label_value_problem(item)
        if problem is not None:
            raise SpecError(f"{argument}.{key}: {problem}")


def check_pod_labels(*, labels: Any, node_selector: Any, tolerations: Any, full_pod_spec: Any) -> None:
    """The label keys and values a pod operator's arguments carry (``labels``, ``node_selector``, the keys
    and values of ``tolerations``, a ``full_pod_spec``'s labels), checked before a member is resolved;
    a ``pod_template_file``'s are checked on the built pod (:func:`check_labels`)."""
    check_labels(labels, "labels")
    check_labels(node_selector, "node_selector")
    metadata = getattr(full_pod_spec, "metadata", None)
    check_labels(getattr(metadata, "labels", None), "full_pod_spec.metadata.labels")
    from pydantic import ValidationError

    from airflow_provider_fedsched.federation._loading import spec_error
    from airflow_provider_fedsched.federation.request import Toleration

    for position, toleration in enumerate(tolerations or ()):
        fields = {
            name: toleration.get(name) if isinstance(toleration, Mapping) else getattr(toleration, name, None)
            for name in ("key", "operator", "value", "effect")
        }
        try:  # the rules the placement applies to it (an empty key needs Exists; label syntax)
            Toleration.model_validate({name: item for name, item in fields.items() if item is not None})
        except ValidationError as exc:
            raise spec_error(exc, f"tolerations[{position}]") from None


MAX_INT64 = 2**63 - 1
MAX_POLL_INTERVAL = 3600.0
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_SUBDOMAIN_ARGUMENTS = ("priority_class_name", "service_account_name", "runtime_class_name", "schedulername")
"""Pod operator arguments that name a Kubernetes object: DNS subdomains, as the API server checks them."""


def check_pod_arguments(arguments: Mapping[str, Any]) -> None:
    """The pod operator's own arguments that the API server, or the wait for the pod, would otherwise
    refuse only after the placement: intervals and timeouts finite and in range (``poll_interval=nan``
    failed in the triggerer once the pod ran; ``startup_timeout_seconds=nan`` never timed out), the
    integers the pod spec takes (``termination_grace_period``, ``active_deadline_seconds``), and the
    names of objects the pod refers to. ``None`` is always allowed (Kubernetes' default)."""
    for name in ("poll_interval", "startup_check_interval_seconds", "base_container_status_polling_interval"):
        value = arguments.get(name)
        if value is not None and check_seconds(value, name, maximum=MAX_POLL_INTERVAL) <= 0:
            raise SpecError(f"{name}: {describe(value)} must be above 0 seconds")
    for name in ("startup_timeout_seconds", "logging_interval"):
        if arguments.get(name) is not None:
            check_seconds(arguments[name], name)
    if arguments.get("termination_grace_period") is not None:
        check_int(
            arguments["termination_grace_period"], "termination_grace_period", minimum=0, maximum=MAX_INT64
        )
    if arguments.get("active_deadline_seconds") is not None:
        check_int(
            arguments["active_deadline_seconds"], "active_deadline_seconds", minimum=1, maximum=MAX_INT64
        )
    for name in _SUBDOMAIN_ARGUMENTS:
        value = arguments.get(name)
        if value is not None and not _is_subdomain(value):
            raise SpecError(
                f"{name}: {describe(value)} is not a Kubernetes object name (lowercase letters, digits, '-' "
                f"and '.', at most {MAX_NAME} characters)"
            )


MAX_POD_BYTES = 1024 * 1024
"""A pod as sent to the API server: etcd stores at most 1.5 MiB per object (its default request limit),
and the API server refuses a larger request with a 413; the provider adds its own annotations."""


def check_pod_size(document: Any) -> None:
    """The pod (as its JSON is sent) within :data:`MAX_POD_BYTES`: a 50 MB argument, environment variable
    or command is refused before the placement, not by the API server after it. Counted by walking the
    document (strings by their UTF-8 length), stopping once past the limit."""
    total = 0
    stack = [document]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            total += len(item) + 2 if item.isascii() else len(item.encode()) + 2
        elif isinstance(item, Mapping):
            for key, value in item.items():
                total += len(str(key)) + 4
                stack.append(value)
        elif isinstance(item, list | tuple):
            total += 2
            stack.extend(item)
        else:
            total += 8
        if total > MAX_POD_BYTES:
            raise SpecError(
                f"pod: more than {MAX_POD_BYTES:,} bytes once serialized (arguments, commands, environment "
                "variables, volumes); Kubernetes stores at most 1.5 MiB per object: pass large inputs "
                "through a volume or object storage"
            )


def check_pod_name(name: Any) -> None:
    """The pod's name once built (``name=`` with the random suffix): a DNS subdomain, as the API server
    checks it when the pod is created."""
    if not _is_subdomain(name):
        raise SpecError(
            f"name: the pod would be named {describe(name)}, which Kubernetes refuses (lowercase letters, "
            f"digits, '-' and '.', at most {MAX_NAME} characters)"
        )


def _is_subdomain(value: Any) -> bool:
    return (
        isinstance(value, str) and 0 < len(value) <= MAX_NAME and _DNS_SUBDOMAIN.fullmatch(value) is not None
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
        if label_key_problem(key) is not None:
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


GANG_MARKERS = (
    "scheduling.x-k8s.io/pod-group",
    "pod-group.scheduling.sigs.k8s.io",
    "scheduling.k8s.io/group-name",
    "kueue.x-k8s.io/pod-group-name",
)
"""Labels and annotations by which the gang schedulers (scheduler-plugins' coscheduling, Volcano, Kueue's pod
groups) make pods start together or not at all: a Job carrying one is a gang, never divided. So is any key
naming a ``minAvailable`` (``.../min-available``)."""


def gang_marker(sources: Sequence[tuple[str, Any]]) -> str | None:
    """``where.key`` of the first gang marker among ``(where, labels or annotations)``, or None."""
    for where, values in sources:
        if not isinstance(values, Mapping):
            continue
        for key in values:
            name = str(key).lower()
            if name in GANG_MARKERS or name.rsplit("/", 1)[-1].replace("-", "") == "minavailable":
                return f"{where}.{key}"
    return None


def check_divided_job(
    *, divide: Any, completions: Any, parallelism: Any, completion_mode: Any, gang: str | None
) -> None:
    """A divided Job's arguments (``divide=True``), as the Job would run them (``full_job_spec`` filling what
    the operator's arguments leave unset); raises :class:`SpecError` naming the first bad one. ``gang``: where
    the Job is marked a gang (:func:`gang_marker`), if it is."""
    if not isinstance(divide, bool):
        raise SpecError(f"divide: expected True or False, got {type(divide).__name__} {describe(divide)}")
    if not divide:
        return
    if completions is None:
        raise SpecError(
            "completions: a divided job needs completions, the number of its indices "
            f"(a whole number in 1..{MAX_GANG_PODS})"
        )
    check_int(completions, "completions", minimum=1, maximum=MAX_GANG_PODS)
    pods = (
        1 if parallelism is None else check_int(parallelism, "parallelism", minimum=1, maximum=MAX_GANG_PODS)
    )
    if pods > completions:
        raise SpecError(
            f"parallelism: {pods} is more than completions {completions}: a divided job runs at most one pod "
            "per index at a time"
        )
    if completion_mode != "Indexed":
        raise SpecError(
            f"completion_mode: a divided job must be Indexed (its pods are told their global index), got "
            f"{describe(completion_mode)}"
        )
    if gang is not None:
        raise SpecError(
            f"divide: the job is a gang ({gang} makes its pods start together), and a gang is never divided: "
            "drop divide=True, or the gang marker if its pods do not need each other"
        )
