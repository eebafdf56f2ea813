"""The conformance suite's fixtures: the project's scenarios against real control planes (the test bed).

The simulator suites' fixture names are provided here with test-bed federations, so that their tests,
imported into this folder's modules, run unchanged against kube-apiserver, kube-scheduler and
kube-controller-manager v1.36 with kwok nodes. Needs `make testbed`.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from airflow_provider_fedsched.sim import wait_for
from airflow_provider_fedsched.testbed import TestbedFederation
from airflow_provider_fedsched.testbed.handles import TestbedClusterHandle
from airflow_provider_fedsched.testbed.stages import MANAGED_LABEL
from tests.operators.conftest import federation  # noqa: F401 - the operator scenarios' spec fixture
from tests.sim.conftest import east, solo  # noqa: F401 - clients of this folder's fed and small_fed

# Pod run and start durations run 4x faster than written (Kubernetes' own timers stay real).
TIME_SCALE = 0.25
HERE = Path(__file__).parent
# What the suite started, for run.py's summary line: (cluster name, /version gitVersion).
STARTED: list[tuple[str, str]] = []


@contextlib.contextmanager
def running(fed: TestbedFederation) -> Iterator[TestbedFederation]:
    with fed:
        for name, cluster in fed.clusters.items():
            STARTED.append((name, client.VersionApi(cluster.admin()).get_code().git_version))
        yield fed


def _source_order(item: pytest.Item) -> tuple[str, str, int]:
    """Imported tests run in the order of the file they come from, as in their own suite."""
    function = getattr(item, "function", None)
    code = getattr(function, "__code__", None)
    return (str(item.fspath), code.co_filename if code else "", code.co_firstlineno if code else 0)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    ours = [i for i, item in enumerate(items) if Path(str(item.fspath)).is_relative_to(HERE)]
    for index in ours:
        items[index].add_marker(pytest.mark.conformance)
    for index, item in zip(ours, sorted((items[i] for i in ours), key=_source_order), strict=True):
        items[index] = item


@pytest.fixture(scope="session")
def testbed() -> Iterator[TestbedFederation]:
    """The simulator's default three clusters, each a real control plane; shared by the whole suite."""
    with running(TestbedFederation(time_scale=TIME_SCALE)) as fed:
        fed.create_namespace("etl")
        yield fed


@pytest.fixture(scope="session")
def fed(testbed: TestbedFederation) -> TestbedFederation:
    """The simulator suites' shared federation."""
    return testbed


@pytest.fixture(scope="session")
def sim_federation(testbed: TestbedFederation, airflow_db: None) -> Iterator[TestbedFederation]:
    """The operator scenarios' federation: one Airflow connection per member, least-privilege identity."""
    saved = {key: os.environ.get(key) for key in testbed.airflow_env_vars()}
    os.environ.update(testbed.airflow_env_vars())
    yield testbed
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@pytest.fixture
def pods_ran() -> Callable[[TestbedFederation], dict[str, list[dict[str, Any]]]]:
    """Every pod each member ran, as the member itself recorded it: its API server's audit log (every pod
    write, whoever sent it: the Job controller, kwok as the kubelet), read as the simulator's journal by
    the soak's reader (``soak.auditlog``)."""
    from soak import auditlog

    def journals(fed: TestbedFederation) -> dict[str, list[dict[str, Any]]]:
        out = {}
        for name, handle in fed.handles.items():
            present = [str(pod["metadata"]["uid"]) for pod in handle.pods()]
            events = auditlog.events(auditlog.log_files(handle.cluster.root / "logs"))
            out[name] = list(auditlog.journal(name, events, present, time.time())["pods"])
        return out

    return journals


@pytest.fixture(scope="session")
def solo_testbed() -> Iterator[TestbedFederation]:
    """One small one-cluster federation for the tests that break nodes or fill the cluster: a control
    plane starts once (about 15-30 s of two cores each), and :func:`small_fed` resets it before each test."""
    cfg = {
        "time_scale": TIME_SCALE,
        "clusters": [
            {"name": "solo", "node_pools": [{"name": "p", "count": 2, "cpu": "2", "memory": "4Gi"}]}
        ],
    }
    with running(TestbedFederation(cfg)) as solo_federation:
        yield solo_federation


@pytest.fixture
def small_fed(solo_testbed: TestbedFederation) -> TestbedFederation:
    """The simulator suite's private one-cluster federation: here the shared one, as a fresh cluster
    would be (whatever the previous test left): scheduler running, every node Ready and untainted,
    no pods, no quotas."""
    reset(solo_testbed["solo"])
    return solo_testbed


def reset(handle: TestbedClusterHandle, timeout: float = 120.0) -> None:
    core = handle.core
    handle.scheduler.resume()
    for node in handle.nodes():
        if (node["metadata"].get("labels") or {}).get(MANAGED_LABEL) == "false":
            handle.faults.node_ready(node["metadata"]["name"], timeout=timeout)
    for quota in core.list_namespaced_resource_quota("default").items:
        core.delete_namespaced_resource_quota(quota.metadata.name, "default")
    for pod in handle.pods("default"):
        handle.delete_pod("default", pod["metadata"]["name"], grace=0)

    def fresh() -> bool:
        nodes = handle.nodes()
        return (
            not handle.pods("default")
            and not core.list_namespaced_resource_quota("default").items
            and all(
                not (node["spec"].get("taints") or [])
                and any(
                    c["type"] == "Ready" and c["status"] == "True"
                    for c in node["status"].get("conditions") or []
                )
                for node in nodes
            )
        )

    wait_for(fresh, timeout, interval=0.2, message="the shared solo cluster back to a fresh state")


def granted_by_the_manifests(request: dict[str, str]) -> bool:
    """Whether deploy/rbac*.yaml grant ``request`` (a denial from :meth:`provider_denials`): the Role in
    the task namespaces, the ClusterRole anywhere."""
    from airflow_provider_fedsched.kube.permissions import grants
    from airflow_provider_fedsched.testbed.rbac import CLUSTER_MANIFEST, NAMESPACED_MANIFEST, manifest

    def rules(path: Path, kind: str) -> list[dict[str, Any]]:
        return list(next(doc for doc in manifest(path) if doc["kind"] == kind)["rules"])

    applicable = rules(CLUSTER_MANIFEST, "ClusterRole")
    if request["namespace"]:
        applicable += rules(NAMESPACED_MANIFEST, "Role")
    return grants(applicable, request["group"], request["resource"], request["verb"])


@pytest.fixture(autouse=True)
def only_what_the_manifests_grant(request: pytest.FixtureRequest) -> Iterator[None]:
    """Every test on the shared federations fails when the provider asked a member for something
    deploy/rbac*.yaml do not grant (a 403 to the provider's identity in an API server's audit log, for a
    request no rule of the manifests covers). A 403 for what they do grant is the API server's, not the
    manifests' (an API server that has just restarted refuses until its authorizer's caches fill)."""
    if request.node.get_closest_marker("provider_refused"):
        yield
        return
    federations = [
        request.getfixturevalue(name) for name in ("testbed", "solo_testbed") if name in request.fixturenames
    ]
    handles = [handle for members in federations for handle in members]
    marks = {id(handle): handle.audit_size() for handle in handles}
    yield
    denied = {
        handle.cluster.name: [
            f"{d['verb']} {d['uri']}"
            for d in handle.provider_denials(since=marks[id(handle)])
            if not granted_by_the_manifests(d)
        ]
        for handle in handles
    }
    denied = {name: requests for name, requests in denied.items() if requests}
    assert not denied, f"the provider asked for what the shipped manifests do not grant: {denied}"
