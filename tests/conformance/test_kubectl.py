"""kubectl as the escape hatch, with no extra flags, against a test-bed member (newest shipped kubectl)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml

from airflow_provider_fedsched.testbed import TestbedFederation
from tests.sim.conftest import pod_body, unique

KUBECTL = Path("/usr/lib/google-cloud-sdk/bin/kubectl.1.33")


def kubectl(fed: TestbedFederation, *args: str) -> str:
    assert KUBECTL.exists(), f"{KUBECTL} is not installed"
    result = subprocess.run(
        [str(KUBECTL), "--kubeconfig", str(fed.kubeconfig_path), "--context", "west-general", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, f"kubectl {args}: {result.stderr}"
    return result.stdout


def test_apply_get_describe_logs_exec_delete(fed: TestbedFederation, tmp_path: Path) -> None:
    name = unique("kubectl")
    manifest = tmp_path / "pod.yaml"
    annotations = {"sim.fedsched.io/logs": "hello from kwok", "sim.fedsched.io/duration": "8"}
    manifest.write_text(yaml.safe_dump(pod_body(name, annotations=annotations)))

    assert f"pod/{name} created" in kubectl(fed, "apply", "-f", str(manifest))
    kubectl(fed, "wait", f"pod/{name}", "--for=condition=Ready", "--timeout=60s")
    table = kubectl(fed, "get", "pods", name).splitlines()
    assert table[0].split() == ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    assert table[1].split()[:3] == [name, "1/1", "Running"]
    assert kubectl(fed, "exec", name, "--", "echo", "exec answered").strip() == "exec answered"
    kubectl(fed, "wait", f"pod/{name}", "--for=jsonpath={.status.phase}=Succeeded", "--timeout=60s")
    assert kubectl(fed, "logs", name).strip() == "hello from kwok"
    # As from a kubelet, following the log of a container that has ended returns at the end of the log
    # (a task reattaching to a pod that finished while no worker watched follows it).
    assert kubectl(fed, "logs", "--follow", name).strip().startswith("hello from kwok")
    described = kubectl(fed, "describe", "pod", name)
    assert f"Successfully assigned default/{name} to west-general-" in described
    assert "Status:           Succeeded" in described and "Completed" in described
    events = kubectl(fed, "get", "events", "--field-selector", f"involvedObject.name={name}")
    assert "Scheduled" in events and "Started" in events
    nodes = kubectl(fed, "get", "nodes").splitlines()
    assert nodes[0].split()[:2] == ["NAME", "STATUS"] and all(" Ready " in row for row in nodes[1:])
    assert "policy/v1" in kubectl(fed, "api-resources")
    assert f'pod "{name}" deleted' in kubectl(fed, "delete", "pod", name)
    assert name not in kubectl(fed, "get", "pods")
