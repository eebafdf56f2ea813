"""The deployment artefacts: the Dockerfile passes hadolint, the RBAC manifests grant no wildcard."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def test_dockerfile_passes_hadolint() -> None:
    hadolint = Path(sys.executable).with_name("hadolint")
    result = subprocess.run(
        [str(hadolint), str(ROOT / "docker" / "Dockerfile")], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_rbac_manifests_name_every_resource_and_verb() -> None:
    docs = [
        doc
        for name in ("rbac-cluster.yaml", "rbac.yaml")
        for doc in yaml.safe_load_all((ROOT / "deploy" / name).read_text())
        if doc
    ]
    roles = [doc for doc in docs if doc["kind"] in ("Role", "ClusterRole")]
    assert {r["kind"] for r in roles} == {"Role", "ClusterRole"}
    for role in roles:
        for rule in role["rules"]:
            assert "*" not in rule["verbs"] and "*" not in rule["resources"] and "*" not in rule["apiGroups"]
            assert set(rule["apiGroups"]) <= {"", "batch", "coordination.k8s.io"}
    cluster_writes = {
        verb
        for role in roles
        if role["kind"] == "ClusterRole"
        for rule in role["rules"]
        for verb in rule["verbs"]
    } - {"get", "list", "watch"}
    assert cluster_writes == set()  # nothing cluster-wide but reads
    bindings = [doc for doc in docs if doc["kind"].endswith("Binding")]
    assert {b["roleRef"]["name"] for b in bindings} == {r["metadata"]["name"] for r in roles}
    assert all("namespace" not in doc["metadata"] for doc in docs if doc["kind"] in ("Role", "RoleBinding"))
