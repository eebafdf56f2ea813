"""Fixtures for the simulator tests: a shared fast federation and per-test clients."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest
from kubernetes import client, config

from airflow_provider_fedsched.sim import SimFederation

if TYPE_CHECKING:
    from airflow_provider_fedsched.testbed import TestbedFederation

# Everything simulated runs 50x faster: 1 s pod runs take 20 ms, 30 s grace periods 0.6 s.
TIME_SCALE = 0.02
_names = itertools.count()


@pytest.fixture(scope="session")
def fed() -> Iterator[SimFederation]:
    """The default three-cluster federation, shared (tests use unique pod names and leave nodes alone)."""
    with SimFederation(time_scale=TIME_SCALE) as federation:
        yield federation


@pytest.fixture
def small_fed() -> Iterator[SimFederation]:
    """A private one-cluster federation for tests that break nodes or the API."""
    cfg = {
        "time_scale": TIME_SCALE,
        "clusters": [
            {"name": "solo", "node_pools": [{"name": "p", "count": 2, "cpu": "2", "memory": "4Gi"}]}
        ],
    }
    with SimFederation(cfg) as federation:
        yield federation


def core_api(federation: SimFederation | TestbedFederation, context: str) -> client.CoreV1Api:
    """A client of one context of the federation's kubeconfig (tests/conformance uses these fixtures too)."""
    return client.CoreV1Api(config.new_client_from_config(str(federation.kubeconfig_path), context=context))


@pytest.fixture
def east(fed: SimFederation) -> Iterator[client.CoreV1Api]:
    api = core_api(fed, "east-cpu")
    yield api
    api.api_client.close()


@pytest.fixture
def solo(small_fed: SimFederation) -> Iterator[client.CoreV1Api]:
    api = core_api(small_fed, "solo")
    yield api
    api.api_client.close()


def unique(prefix: str = "p") -> str:
    return f"{prefix}-{next(_names)}"


def pod_body(
    name: str,
    cpu: str = "100m",
    memory: str = "64Mi",
    annotations: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    restart: str = "Never",
    **spec: Any,
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {}, "annotations": annotations or {}},
        "spec": {
            "restartPolicy": restart,
            "containers": [
                {
                    "name": "base",
                    "image": "busybox:1.36",
                    "resources": {"requests": {"cpu": cpu, "memory": memory}},
                }
            ],
            **spec,
        },
    }
