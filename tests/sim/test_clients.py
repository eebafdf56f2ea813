"""Contract tests through kubernetes_asyncio and two kubectl versions, against every generated context."""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path

import pytest
import yaml
from kubernetes_asyncio import client as aclient
from kubernetes_asyncio import config as aconfig
from kubernetes_asyncio import watch as awatch

from airflow_provider_fedsched.sim import SimFederation
from tests.sim.conftest import pod_body, unique

KUBECTL = Path("/usr/lib/google-cloud-sdk/bin")
VERSIONS = ("1.27", "1.33")  # two minor versions shipped with the machine's Google Cloud SDK


def test_kubernetes_asyncio(fed: SimFederation) -> None:
    async def scenario() -> None:
        api_client = await aconfig.new_client_from_config(str(fed.kubeconfig_path), context="west-general")
        async with api_client:
            api = aclient.CoreV1Api(api_client)
            name = unique("async")
            await api.create_namespaced_pod(
                "default", pod_body(name, annotations={"sim.fedsched.io/logs": "one\ntwo"})
            )
            seen = []
            w = awatch.Watch()
            async for event in w.stream(
                api.list_namespaced_pod, "default", field_selector=f"metadata.name={name}", timeout_seconds=10
            ):
                seen.append(event["object"].status.phase)
                if event["object"].status.phase == "Succeeded":
                    w.stop()
            assert seen[-1] == "Succeeded"
            logs = await api.read_namespaced_pod_log(name, "default")
            assert logs.splitlines() == ["one", "two"]
            events = await api.list_namespaced_event("default", field_selector=f"involvedObject.name={name}")
            assert "Scheduled" in {e.reason for e in events.items}
            await api.delete_namespaced_pod(name, "default")

    asyncio.run(scenario())


def _kubectl(version: str, kubeconfig: Path, *args: str, stdin: str | None = None) -> str:
    result = subprocess.run(
        [str(KUBECTL / f"kubectl.{version}"), "--kubeconfig", str(kubeconfig), *args],
        capture_output=True,
        text=True,
        input=stdin,
        timeout=60,
    )
    assert result.returncode == 0, f"kubectl {version} {args}: {result.stderr}"
    return result.stdout


@pytest.mark.parametrize("version", VERSIONS)
def test_kubectl_against_every_context(fed: SimFederation, version: str, tmp_path: Path) -> None:
    assert (KUBECTL / f"kubectl.{version}").exists(), f"kubectl {version} is not installed under {KUBECTL}"
    kubeconfig = fed.kubeconfig_path
    for handle in fed:
        ctx = ["--context", handle.name]
        nodes = json.loads(_kubectl(version, kubeconfig, *ctx, "get", "nodes", "-o", "json"))
        assert len(nodes["items"]) == len(handle.nodes())
        assert handle.name in _kubectl(version, kubeconfig, *ctx, "get", "nodes")
        name = unique(f"kctl{version.replace('.', '')}")
        manifest = tmp_path / f"{name}.yaml"
        manifest.write_text(
            yaml.safe_dump(
                pod_body(
                    name,
                    annotations={"sim.fedsched.io/logs": "hello kubectl", "sim.fedsched.io/duration": "5"},
                )
            )
        )
        # No flags: kubectl reads the OpenAPI documents (v2 protobuf, v3) and validates on the server.
        assert f"pod/{name} created" in _kubectl(version, kubeconfig, *ctx, "apply", "-f", str(manifest))
        relabelled = yaml.safe_load(manifest.read_text())
        relabelled["metadata"]["labels"] = {"applied": "again"}
        manifest.write_text(yaml.safe_dump(relabelled))
        assert f"pod/{name} configured" in _kubectl(version, kubeconfig, *ctx, "apply", "-f", str(manifest))
        _kubectl(
            version,
            kubeconfig,
            *ctx,
            "wait",
            f"pod/{name}",
            "--for=jsonpath={.status.phase}=Succeeded",
            "--timeout=20s",
        )
        assert _kubectl(version, kubeconfig, *ctx, "logs", name).strip() == "hello kubectl"
        described = _kubectl(version, kubeconfig, *ctx, "describe", "pod", name)
        assert "Successfully assigned default/" in described and "Succeeded" in described
        assert name in _kubectl(version, kubeconfig, *ctx, "get", "pods", "-l", "applied=again")
        # Server-side printing: the columns of a real cluster.
        pods = _kubectl(version, kubeconfig, *ctx, "get", "pods", name).splitlines()
        assert pods[0].split() == ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
        assert pods[1].split()[:4] == [name, "0/1", "Completed", "0"]
        header = _kubectl(version, kubeconfig, *ctx, "get", "nodes").splitlines()[0]
        assert header.split() == ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]
        events = _kubectl(
            version, kubeconfig, *ctx, "get", "events", "--field-selector", f"involvedObject.name={name}"
        )
        assert events.splitlines()[0].split() == ["LAST", "SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"]
        assert f"pod/{name}" in events and "Successfully assigned" in events
        _kubectl(version, kubeconfig, *ctx, "delete", "pod", name, "--wait=true", "--timeout=20s")
        assert name not in _kubectl(version, kubeconfig, *ctx, "get", "pods")
    # Complete discovery: every served resource, policy/v1 included, and Leases usable from kubectl.
    resources = _kubectl(version, kubeconfig, "api-resources", "--no-headers").splitlines()
    names = {line.split()[0] for line in resources}
    assert {"pods", "nodes", "events", "leases", "jobs", "poddisruptionbudgets", "priorityclasses"} <= names
    lease = tmp_path / "lease.yaml"
    lease.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": f"kctl-lease-{version}"},
                "spec": {"holderIdentity": "kubectl", "leaseDurationSeconds": 30},
            }
        )
    )
    _kubectl(version, kubeconfig, "apply", "-f", str(lease))
    leases = _kubectl(version, kubeconfig, "get", "leases", f"kctl-lease-{version}").splitlines()
    assert leases[0].split() == ["NAME", "HOLDER", "AGE"] and leases[1].split()[:2] == [
        f"kctl-lease-{version}",
        "kubectl",
    ]
