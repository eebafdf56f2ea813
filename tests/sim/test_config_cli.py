"""Config validation, port conflicts, generated files and the ``fedsched sim`` CLI."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from airflow_provider_fedsched.sim import SimConfigError, SimFederation, SimPortInUse, parse_config, wait_for

# Through the real entry point (``python -m ...cli`` would make UsageError a different class in __main__).
FEDSCHED = [
    sys.executable,
    "-c",
    "import sys; from airflow_provider_fedsched.cli import main; sys.exit(main())",
]


def test_bad_config_names_the_field(tmp_path: Path) -> None:
    with pytest.raises(
        SimConfigError, match=r"clusters\[1\]\.node_pools\[0\]\.cpu: .*not a Kubernetes quantity"
    ):
        parse_config({"clusters": [{"name": "a"}, {"name": "b", "node_pools": [{"cpu": "lots"}]}]})
    with pytest.raises(SimConfigError, match=r"clusters\[0\]\.name"):
        parse_config({"clusters": [{"name": "Bad_Name"}]})
    bad = tmp_path / "sim.yaml"
    bad.write_text("clusters:\n  - name: a\n    colour: red\n")
    result = subprocess.run(
        [*FEDSCHED, "sim", "up", "--config", str(bad), "--state-dir", str(tmp_path / "s")],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2 and "clusters[0].colour: Extra inputs are not permitted" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.sim  # starts a simulator of its own
def test_port_in_use_is_reported() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(SimPortInUse, match=f"cluster 'busy': port {port} on 127.0.0.1 is already in use"):
            SimFederation({"clusters": [{"name": "busy", "port": port}]}).start()


@pytest.mark.sim  # starts a simulator of its own
def test_ports_are_stable_across_restarts(tmp_path: Path) -> None:
    config = {"time_scale": 0.02, "clusters": [{"name": "a"}, {"name": "b"}]}
    with SimFederation(config, state_dir=tmp_path) as first:
        ports = {h.name: h.port for h in first}
        control = first.control_url
        kubeconfig = first.kubeconfig_path.read_text()
    with SimFederation(config, state_dir=tmp_path) as again:
        assert {h.name: h.port for h in again} == ports and again.control_url == control
        # The kubeconfig's servers (and so Airflow connections made from it) stay valid.
        servers = [
            c["cluster"]["server"] for c in yaml.safe_load(again.kubeconfig_path.read_text())["clusters"]
        ]
        assert servers == [c["cluster"]["server"] for c in yaml.safe_load(kubeconfig)["clusters"]]
    # A remembered port someone else took meanwhile: a free one instead, not a failure.
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", ports["a"]))
        taken.listen()
        with SimFederation(config, state_dir=tmp_path) as moved:
            assert moved["a"].port != ports["a"] and moved["b"].port == ports["b"]


@pytest.mark.sim  # starts a simulator of its own
def test_explicit_port_is_honoured() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with SimFederation({"clusters": [{"name": "fixed", "port": port}]}) as fed:
        assert fed["fixed"].port == port and fed["fixed"].url == f"http://127.0.0.1:{port}"


def test_generated_files(fed: SimFederation) -> None:
    kubeconfig = yaml.safe_load(fed.kubeconfig_path.read_text())
    assert [c["name"] for c in kubeconfig["contexts"]] == ["east-cpu", "north-gpu", "west-general"]
    spec = yaml.safe_load((fed.state_dir / "federation.yaml").read_text())
    assert [c["conn_id"] for c in spec["clusters"]] == ["k8s_east_cpu", "k8s_north_gpu", "k8s_west_general"]
    assert set(spec["clusters"][0]) == {"name", "conn_id", "region", "group", "labels", "taints", "prices"}
    assert set(spec["clusters"][0]["prices"]) == {"cpu_hour", "memory_gib_hour", "gpu_hour", "egress_gb"}
    assert {d["name"]: d["cluster"] for d in spec["datasets"]} == {
        "user-events": "east-cpu",
        "eu-customers": "west-general",
        "clickstream-archive": "north-gpu",
    }
    assert set(spec["policy"]["weights"]) == {"cost", "locality", "proximity", "headroom", "forecast"}
    env = (fed.state_dir / "airflow.env").read_text().splitlines()
    assert len(env) == 3 and env[0].startswith("AIRFLOW_CONN_K8S_EAST_CPU='")
    conn = json.loads(env[0].split("=", 1)[1].strip("'"))
    inner = yaml.safe_load(conn["extra"]["kube_config"])
    assert conn["conn_type"] == "kubernetes" and [c["name"] for c in inner["contexts"]] == ["east-cpu"]
    gpu_nodes = [n for n in fed["north-gpu"].nodes() if "nvidia.com/gpu" in n["status"]["allocatable"]]
    assert len(gpu_nodes) == 4 and gpu_nodes[0]["spec"]["taints"][0]["key"] == "nvidia.com/gpu"


@pytest.mark.sim  # starts a simulator of its own
def test_a_member_s_namespace_is_its_spec_s_connection_s_and_kubeconfig_s(tmp_path: Path) -> None:
    config = {
        "time_scale": 0.02,
        "clusters": [
            {"name": "quota-d", "namespace": "team-a", "quotas": {"team-a": {"cpu": "3"}}},
            {"name": "plain"},
        ],
    }
    with SimFederation(config, state_dir=tmp_path) as fed:
        spec = yaml.safe_load((fed.state_dir / "federation.yaml").read_text())
        assert [c.get("namespace") for c in spec["clusters"]] == ["team-a", None]
        env = fed.airflow_env_vars()
        extras = [json.loads(env[f"AIRFLOW_CONN_K8S_{n}"])["extra"] for n in ("QUOTA_D", "PLAIN")]
        assert [e["namespace"] for e in extras] == ["team-a", "default"]
        contexts = yaml.safe_load(fed.kubeconfig_path.read_text())["contexts"]
        assert [c["context"]["namespace"] for c in contexts] == ["team-a", "default"]
        assert fed["quota-d"].store.get("namespaces", "", "team-a") is not None
    with pytest.raises(SimConfigError, match=r"clusters\[0\]\.namespace"):
        parse_config({"clusters": [{"name": "a", "namespace": "Team_A"}]})


@pytest.mark.sim  # `fedsched sim up` in a process of its own
def test_cli_up_fault_and_clean_stop(tmp_path: Path) -> None:
    state = tmp_path / "state"
    proc = subprocess.Popen(
        [*FEDSCHED, "sim", "up", "--state-dir", str(state), "--time-scale", "0.02"],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert proc.stdout is not None
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if "ready" in line:
                break
        assert (state / "kubeconfig").exists() and (state / "airflow.env").exists()
        meta = json.loads((state / "sim.json").read_text())
        node = "east-cpu-cpu-1"
        fault = subprocess.run(
            [
                *FEDSCHED,
                "sim",
                "fault",
                "--state-dir",
                str(state),
                "east-cpu",
                "node-not-ready",
                f"node={node}",
            ],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert fault.returncode == 0, fault.stderr
        from kubernetes import client, config

        api = client.CoreV1Api(config.new_client_from_config(str(state / "kubeconfig"), context="east-cpu"))
        ready = wait_for(lambda: next(c for c in api.read_node(node).status.conditions if c.type == "Ready"))
        assert ready.status == "Unknown" and meta["clusters"]["east-cpu"]["conn_id"] == "k8s_east_cpu"
        bad = subprocess.run(
            [*FEDSCHED, "sim", "fault", "--state-dir", str(state), "east-cpu", "node-not-ready"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert bad.returncode == 2 and "needs argument 'node'" in bad.stderr
        quota = subprocess.run(
            [
                *FEDSCHED,
                "sim",
                "fault",
                "--state-dir",
                str(state),
                "north-gpu",
                "quota",
                "requests.cpu=2",
                "pods=5",
            ],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert quota.returncode == 0, quota.stderr
        assert json.loads(quota.stdout)["status"]["hard"] == {"requests.cpu": "2", "pods": "5"}
        north = client.CoreV1Api(
            config.new_client_from_config(str(state / "kubeconfig"), context="north-gpu")
        )
        assert north.read_namespaced_resource_quota("compute", "default").spec.hard == {
            "requests.cpu": "2",
            "pods": "5",
        }
        status = subprocess.run(
            [*FEDSCHED, "sim", "status", "--state-dir", str(state)], capture_output=True, text=True
        )
        assert status.returncode == 0, status.stderr
        assert f"control {meta['control_url']}" in status.stdout
        east_line = next(line for line in status.stdout.splitlines() if line.strip().startswith("east-cpu:"))
        assert "nodes 2/3 ready" in east_line and f"not ready: {node}" in east_line
        data = json.loads(
            subprocess.run(
                [*FEDSCHED, "sim", "status", "--state-dir", str(state), "--json"],
                capture_output=True,
                text=True,
            ).stdout
        )
        assert data["clusters"]["north-gpu"]["nodes"] == {"total": 5, "ready": 5, "not_ready": []}
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
    stopped = subprocess.run(
        [*FEDSCHED, "sim", "status", "--state-dir", str(state)], capture_output=True, text=True
    )
    assert stopped.returncode == 1 and stopped.stdout.startswith("sim: not running")
    missing = subprocess.run(
        [*FEDSCHED, "sim", "status", "--state-dir", str(tmp_path / "nowhere")], capture_output=True, text=True
    )
    assert missing.returncode == 2 and "no simulator state found" in missing.stderr
    assert "Traceback" not in stopped.stderr + missing.stderr
