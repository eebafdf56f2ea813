"""``${NAME}`` in ``sim.fedsched.io/logs`` lines becomes the container's env value (demo tasks print the
FEDSCHED_* variables the provider sets: "attempt 2 on east-cpu, resume=true")."""

from __future__ import annotations

import json
from typing import Any

from kubernetes import client

from airflow_provider_fedsched.sim import SimFederation
from airflow_provider_fedsched.sim.controllers.runtime import container_env, expand_env, log_lines
from tests.sim.conftest import pod_body, unique

FEDSCHED_ENV = [
    {"name": "FEDSCHED_CLUSTER", "value": "east-cpu"},
    {"name": "FEDSCHED_CLUSTER_ATTEMPT", "value": "2"},
    {"name": "FEDSCHED_RESUME", "value": "true"},
    {"name": "FEDSCHED_CHECKPOINT", "value": "s3://ckpt/run-1/step-40"},
]


def _pod(logs: str, env: list[dict[str, Any]], **extra_annotations: str) -> dict[str, Any]:
    body = pod_body("p", annotations={"sim.fedsched.io/logs": logs, **extra_annotations})
    body["spec"]["containers"][0]["env"] = env
    body["spec"]["containers"].append(
        {"name": "other", "image": "busybox", "env": [{"name": "X", "value": "o"}]}
    )
    return body


def test_expand_env() -> None:
    env = {"A": "1", "B_2": "two", "EMPTY": ""}
    assert expand_env("${A}-${B_2}-${EMPTY}|", env) == "1-two-|"
    assert expand_env("${MISSING} $A ${A ${ } $${A}", env) == "${MISSING} $A ${A ${ } $1"
    assert expand_env("no refs", {}) == "no refs"


def test_container_env_takes_literal_values_of_that_container() -> None:
    env = [
        {"name": "A", "value": "first"},
        {"name": "A", "value": "last"},  # the runtime keeps the last one
        {"name": "NOVALUE"},  # Kubernetes sets it to ""
        {"name": "SECRET", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
    ]
    pod = _pod("x", env)
    assert container_env(pod, "base") == {"A": "last", "NOVALUE": ""}
    assert container_env(pod, "other") == {"X": "o"}
    assert container_env(pod, "absent") == {}


def test_log_lines_substitute_both_formats_and_per_container() -> None:
    text = "attempt ${FEDSCHED_CLUSTER_ATTEMPT} on ${FEDSCHED_CLUSTER}\nsecret=${SECRET} x=${X}"
    pod = _pod(text, [*FEDSCHED_ENV, {"name": "SECRET", "valueFrom": {"fieldRef": {"fieldPath": "x"}}}])
    assert log_lines(pod, "base") == ["attempt 2 on east-cpu", "secret=${SECRET} x=${X}"]
    assert log_lines(pod, "other") == [
        "attempt ${FEDSCHED_CLUSTER_ATTEMPT} on ${FEDSCHED_CLUSTER}",
        "secret=${SECRET} x=o",
    ]
    as_json = _pod(json.dumps(["resume=${FEDSCHED_RESUME}", "from ${FEDSCHED_CHECKPOINT}"]), FEDSCHED_ENV)
    assert log_lines(as_json, "base") == ["resume=true", "from s3://ckpt/run-1/step-40"]


def test_substituted_lines_through_the_api(east: client.CoreV1Api, fed: SimFederation) -> None:
    name = unique("envlogs")
    lines = [
        "attempt ${FEDSCHED_CLUSTER_ATTEMPT} on ${FEDSCHED_CLUSTER}, resume=${FEDSCHED_RESUME}",
        "checkpoint ${FEDSCHED_CHECKPOINT} ${UNSET}",
    ]
    body = pod_body(name, annotations={"sim.fedsched.io/logs": json.dumps(lines)})
    body["spec"]["containers"][0]["env"] = FEDSCHED_ENV
    east.create_namespaced_pod("default", body)
    fed["east-cpu"].wait_for_phase("default", name, "Succeeded")
    text = east.read_namespaced_pod_log(
        name, "default", container="base", _preload_content=False
    ).data.decode()
    assert text.splitlines() == [
        "attempt 2 on east-cpu, resume=true",
        "checkpoint s3://ckpt/run-1/step-40 ${UNSET}",
    ]
