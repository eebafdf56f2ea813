"""Resolving a member cluster from a connection's extras or a kubeconfig file."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
import yaml

from airflow_provider_fedsched.kube.access import (
    ClusterAccessError,
    access_from_extras,
    access_from_kubeconfig_file,
)

SECRET = "s3cr3t-token-value"


def kubeconfig(*contexts: str, current: str | None = None) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": c, "cluster": {"server": f"https://{c}.example:6443"}} for c in contexts],
        "users": [{"name": c, "user": {"token": SECRET}} for c in contexts],
        "contexts": [
            {"name": c, "context": {"cluster": c, "user": c, "namespace": "team"}} for c in contexts
        ],
        **({"current-context": current} if current else {}),
    }


def test_inline_kubeconfig_resolves_context_namespace_and_server() -> None:
    extras = {"kube_config": json.dumps(kubeconfig("a", "b", current="b"))}
    access = access_from_extras("east", "k8s_east", "kubernetes", extras, None)
    assert (access.context, access.namespace, access.server) == ("b", "team", "https://b.example:6443")
    assert access.verify_ssl is True
    assert SECRET not in repr(access)


def test_prefixed_extras_and_explicit_context_and_namespace() -> None:
    extras = {
        "extra__kubernetes__kube_config": yaml.safe_dump(kubeconfig("a", "b")),
        "extra__kubernetes__cluster_context": "a",
        "namespace": "jobs",
        "disable_verify_ssl": "true",
    }
    access = access_from_extras("east", "k8s_east", "kubernetes", extras, None)
    assert (access.context, access.namespace, access.verify_ssl) == ("a", "jobs", False)


def test_kubeconfig_path(tmp_path: Path) -> None:
    path = tmp_path / "config"
    path.write_text(yaml.safe_dump(kubeconfig("only")))
    access = access_from_extras("east", "k8s_east", "kubernetes", {"kube_config_path": str(path)}, "spec-ns")
    assert (access.context, access.namespace) == ("only", "spec-ns")


@pytest.mark.parametrize(
    ("conn_type", "extras", "problem"),
    [
        ("http", {"kube_config": "{}"}, "connection type is 'http'; expected 'kubernetes'"),
        ("kubernetes", {}, "neither kube_config nor kube_config_path"),
        (
            "kubernetes",
            {"kube_config": f"token: {SECRET}\n  bad: [yaml"},
            "kubeconfig is not valid YAML or JSON",
        ),
        ("kubernetes", {"kube_config": json.dumps({"token": SECRET})}, "kubeconfig is malformed"),
        (
            "kubernetes",
            {"kube_config": json.dumps(kubeconfig("a")), "cluster_context": "nope"},
            "kubeconfig context 'nope' does not exist (contexts: a)",
        ),
        (
            "kubernetes",
            {"kube_config_path": "/no/such/file"},
            "kube_config_path '/no/such/file' cannot be read",
        ),
        ("kubernetes", {"in_cluster": True}, "in_cluster connections cannot be federation members"),
        (
            "kubernetes",
            {"kube_config": json.dumps(kubeconfig("a", "b"))},
            "kubeconfig has no current-context; name one of: a, b",
        ),
    ],
)
def test_bad_connections_name_cluster_and_connection_without_secrets(
    conn_type: str, extras: dict, problem: str
) -> None:
    with pytest.raises(ClusterAccessError) as caught:
        access_from_extras("east-cpu", "k8s_east_cpu", conn_type, extras, None)
    message = str(caught.value)
    assert message.startswith("cluster 'east-cpu' (connection 'k8s_east_cpu'): ")
    assert problem in message
    assert SECRET not in message


def test_kubeconfig_file_context_per_cluster(tmp_path: Path) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(kubeconfig("east-cpu", "north-gpu")))
    access = access_from_kubeconfig_file("north-gpu", "north-gpu", path)
    assert access.server == "https://north-gpu.example:6443"
    with pytest.raises(ClusterAccessError, match="context 'west' does not exist"):
        access_from_kubeconfig_file("west", "west", path)


def test_each_member_gets_its_own_client_configuration() -> None:
    extras_a = {"kube_config": json.dumps(kubeconfig("a", current="a"))}
    extras_b = {"kube_config": json.dumps(kubeconfig("b", current="b"))}
    config_a = asyncio.run(access_from_extras("a", "ca", "kubernetes", extras_a, None).async_configuration())
    config_b = asyncio.run(access_from_extras("b", "cb", "kubernetes", extras_b, None).async_configuration())
    assert (config_a.host, config_b.host) == ("https://a.example:6443", "https://b.example:6443")
    assert config_a is not config_b
