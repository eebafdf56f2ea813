"""The provider runs with exactly deploy/rbac-cluster.yaml + deploy/rbac.yaml, and fails clearly,
naming the missing permission, with less."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from airflow_provider_fedsched.sim import wait_for
from airflow_provider_fedsched.testbed import TestbedFederation
from airflow_provider_fedsched.testbed.rbac import (
    CLUSTER_MANIFEST,
    NAMESPACED_MANIFEST,
    manifest,
    provider_token,
)


def rules(path: Path, kind: str) -> list[dict[str, Any]]:
    return next(doc for doc in manifest(path) if doc["kind"] == kind)["rules"]


def test_the_provider_identity_holds_exactly_the_manifests_rules(fed: TestbedFederation) -> None:
    cluster = fed["east-cpu"].cluster
    api = client.ApiClient(cluster.client_config(token=cluster.provider_token))
    review = client.AuthorizationV1Api(api).create_self_subject_rules_review({"spec": {"namespace": "etl"}})
    granted = {
        (resource, verb)
        for rule in review.status.resource_rules
        for resource in rule.resources or []
        for verb in rule.verbs
        if "selfsubject" not in resource  # every authenticated user may ask what it may do
    }
    wanted = {
        (resource, verb)
        for rule in rules(NAMESPACED_MANIFEST, "Role") + rules(CLUSTER_MANIFEST, "ClusterRole")
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    assert granted == wanted


@pytest.fixture(scope="module")
def reduced(fed: TestbedFederation) -> Iterator[Any]:
    """Make an identity like the provider's, with one rule of the manifests removed."""
    cluster = fed["east-cpu"].cluster
    api = cluster.admin()
    rbac, core = client.RbacAuthorizationV1Api(api), client.CoreV1Api(api)

    def make(drop_resource: str, drop_verb: str) -> str:
        name = f"fedsched-less-{drop_resource.replace('/', '-')}-{drop_verb}"
        subject = [{"kind": "ServiceAccount", "name": name, "namespace": "fedsched-system"}]
        core.create_namespaced_service_account("fedsched-system", {"metadata": {"name": name}})
        core.create_namespaced_secret(
            "fedsched-system",
            {
                "metadata": {"name": name, "annotations": {"kubernetes.io/service-account.name": name}},
                "type": "kubernetes.io/service-account-token",
            },
        )

        def without(kept: list[dict[str, Any]]) -> list[dict[str, Any]]:
            out = []
            for rule in kept:
                verbs = [
                    v for v in rule["verbs"] if not (drop_resource in rule["resources"] and v == drop_verb)
                ]
                if verbs:
                    out.append({**rule, "verbs": verbs})
            return out

        rbac.create_cluster_role(
            {"metadata": {"name": name}, "rules": without(rules(CLUSTER_MANIFEST, "ClusterRole"))}
        )
        rbac.create_cluster_role_binding(
            {
                "metadata": {"name": name},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
                "subjects": subject,
            }
        )
        for namespace in ("default", "etl"):
            rbac.create_namespaced_role(
                namespace, {"metadata": {"name": name}, "rules": without(rules(NAMESPACED_MANIFEST, "Role"))}
            )
            rbac.create_namespaced_role_binding(
                namespace,
                {
                    "metadata": {"name": name},
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
                    "subjects": subject,
                },
            )
        return provider_token(
            api, lambda what, check: wait_for(check, 60, message=what), ("fedsched-system", name)
        )

    yield make


def kubeconfig_with(fed: TestbedFederation, token: str, tmp_path: Path) -> Path:
    config = fed.kubeconfig("east-cpu", provider=True)
    config["users"][0]["user"]["token"] = token
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return path


def east_snapshot(
    fed: TestbedFederation, kubeconfig: Path, capsys: pytest.CaptureFixture[str]
) -> dict[str, Any]:
    """east-cpu's row of `fedsched snapshot --json` with ``kubeconfig`` (exit 0 whatever the member says)."""
    from airflow_provider_fedsched import cli

    federation = str(fed.state_dir / "federation.yaml")
    code = cli.main(["snapshot", "--federation", federation, "--kubeconfig", str(kubeconfig), "--json"])
    assert code == 0
    shown = json.loads(capsys.readouterr().out)
    return dict(next(r for r in shown["clusters"] if r["cluster"] == "east-cpu"))


def test_snapshot_without_listing_nodes_names_the_permission(
    fed: TestbedFederation, reduced: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:

    token = reduced("nodes", "list")
    row = east_snapshot(fed, kubeconfig_with(fed, token, tmp_path), capsys)

    assert row["reachable"] is False
    assert 'cannot list resource "nodes"' in row["reason"] and token not in row["reason"]


def test_task_without_creating_pods_fails_naming_the_permission(
    sim_federation: TestbedFederation, federation: Path, reduced: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The task's only member connection lacks `create` on pods: the try fails (no pod anywhere), and its
    record says which permission is missing, never the token."""
    from tests import airflow_harness
    from tests.operators.test_federated_operator import pods_of, xcom

    token = reduced("pods", "create")
    config = sim_federation.kubeconfig("east-cpu", provider=True)
    config["users"][0]["user"]["token"] = token
    extra = {"kube_config": json.dumps(config), "namespace": "default"}
    monkeypatch.setenv("AIRFLOW_CONN_K8S_EAST_CPU", json.dumps({"conn_type": "kubernetes", "extra": extra}))

    dag_run = airflow_harness.run_dag(Path(__file__).parent / "dags" / "testbed_dags.py", "fed_east_only")
    state = airflow_harness.task_states(dag_run)["work"]
    record = xcom(dag_run, "fedsched_placement")
    shown = json.dumps(record).replace('\\"', '"')  # the reasons as a person reads them

    assert state == "failed" and record is not None
    assert 'cannot create resource "pods"' in shown, shown[-2000:]
    assert token not in shown
    assert pods_of(sim_federation, "fed_east_only") == []


def test_a_member_without_the_ledger_s_rule_is_reported_naming_it(
    fed: TestbedFederation, reduced: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 25: with an older deploy/rbac.yaml (no Leases) every task silently ran without the ledger.
    The member's snapshot now names the missing rule and what is lost (the Federation page and each task
    log show it); with the shipped manifests it names nothing."""

    less = east_snapshot(fed, kubeconfig_with(fed, reduced("leases", "create"), tmp_path), capsys)
    assert less["reachable"] is True
    assert less["missing_permissions"] == [
        "coordination.k8s.io leases: create (no placement ledger: reservations in shared state only, where "
        "two workers may take the same room)"
    ]
    shipped = tmp_path / "shipped"
    shipped.mkdir()
    full = east_snapshot(fed, kubeconfig_with(fed, fed["east-cpu"].cluster.provider_token, shipped), capsys)
    assert full["reachable"] is True and full["missing_permissions"] == []
