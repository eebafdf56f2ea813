"""Hostile input to a divided Job (``FederatedKubernetesJobOperator(divide=True)``, issue 31): each a
``FederationError`` naming the argument at fault, raised by ``prepare`` before anything is reserved or
created (no snapshot, no reservation in shared state)."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes.client import models as k8s

from airflow_provider_fedsched.hooks.federation import FederationHook
from airflow_provider_fedsched.state import MemoryStateBackend
from tests.hostile.harness import check, raised, run_bounded
from tests.hostile.test_files_and_cli import SPEC
from tests.hostile.test_neighbours import members  # noqa: F401  (the fixture: connections for SPEC's members)

INDEXED: dict[str, Any] = {"divide": True, "completions": 40, "parallelism": 10, "completion_mode": "Indexed"}


def _job_spec(**template_metadata: Any) -> k8s.V1Job:
    return k8s.V1Job(
        spec=k8s.V1JobSpec(
            template=k8s.V1PodTemplateSpec(metadata=k8s.V1ObjectMeta(**template_metadata)),
            completion_mode="NonIndexed",
        )
    )


CASES: list[tuple[str, dict[str, Any], str]] = [
    ('divide="yes"', {**INDEXED, "divide": "yes"}, "divide: expected True or False"),
    ("divide=1", {**INDEXED, "divide": 1}, "divide: expected True or False"),
    ("completions=None", {**INDEXED, "completions": None}, "completions: a divided job needs completions"),
    ("completions=0", {**INDEXED, "completions": 0}, "completions: 0 is outside"),
    ("completions=-4", {**INDEXED, "completions": -4}, "completions: -4 is outside"),
    ("parallelism > completions", {**INDEXED, "parallelism": 41}, "parallelism: 41 is more than completions"),
    ("completion_mode=None", {**INDEXED, "completion_mode": None}, "completion_mode: a divided job"),
    ("completion_mode=NonIndexed", {**INDEXED, "completion_mode": "NonIndexed"}, "completion_mode"),
    (
        "a NonIndexed full_job_spec",
        {**INDEXED, "completion_mode": None, "full_job_spec": _job_spec()},
        "completion_mode: a divided job must be Indexed (its pods are told their global index), "
        "got 'NonIndexed'",
    ),
    (
        "a coscheduling pod group label",
        {**INDEXED, "labels": {"scheduling.x-k8s.io/pod-group": "trainers"}},
        "labels.scheduling.x-k8s.io/pod-group",
    ),
    (
        "a Volcano group annotation",
        {**INDEXED, "annotations": {"scheduling.k8s.io/group-name": "trainers"}},
        "annotations.scheduling.k8s.io/group-name",
    ),
    (
        "a minAvailable annotation",
        {**INDEXED, "annotations": {"example.com/min-available": "3"}},
        "annotations.example.com/min-available",
    ),
    ("deferrable=True", {**INDEXED, "deferrable": True}, "deferrable: not available yet for a divided Job"),
    (
        "preemptible=True",
        {**INDEXED, "preemptible": True},
        "preemptible: not available yet for a divided Job",
    ),
    (
        "a pod group in full_job_spec's template",
        {**INDEXED, "full_job_spec": _job_spec(labels={"pod-group.scheduling.sigs.k8s.io": "g"})},
        "full_job_spec.spec.template.metadata.labels.pod-group.scheduling.sigs.k8s.io",
    ),
]


def _prepare(arguments: dict[str, Any]) -> tuple[Any, MemoryStateBackend]:
    from airflow_provider_fedsched.operators.federated_job import FederatedKubernetesJobOperator

    backend = MemoryStateBackend()
    operator = FederatedKubernetesJobOperator(
        task_id="hostile", image="busybox", federation=SPEC, **arguments
    )
    return lambda: operator.prepare(None, FederationHook(SPEC, state=backend)), backend


@pytest.mark.parametrize(("arguments", "culprit"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_bad_divided_job_is_a_federation_error_before_anything_is_reserved(
    arguments: dict[str, Any], culprit: str
) -> None:
    prepare, backend = _prepare(arguments)
    check(*run_bounded(lambda: raised(prepare, Exception)), "raised", "FederationError", culprit)
    assert backend.keys("") == []  # nothing reserved, no snapshot taken


@pytest.mark.usefixtures("members")
def test_a_gang_marker_or_parallelism_above_completions_is_no_error_without_divide() -> None:
    arguments = {
        **INDEXED,
        "divide": False,
        "parallelism": 41,
        "labels": {"scheduling.x-k8s.io/pod-group": "g"},
    }
    prepare, _ = _prepare(arguments)
    _, request = prepare()
    assert request.gang_size == 40  # the whole Job, one gang in one member, as before


@pytest.mark.usefixtures("members")
def test_a_valid_divided_job_is_judged_for_one_of_its_pods() -> None:
    prepare, backend = _prepare(INDEXED)
    _, request = prepare()
    assert request.gang == () and request.gang_size == 1  # every member's room is counted in such pods
    assert backend.keys("") == []
