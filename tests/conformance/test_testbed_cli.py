"""``fedsched testbed up | status | fault | down`` as a user runs them: separate processes, one real member.

``up`` runs in the background with HOME, TMPDIR and its working directory in a private folder; every
other verb is its own process. Each fault is checked where it shows (the process table, the API server's
answers, the provider's own token), hostile arguments get one line and exit 2, and after ``down`` no
process ``up`` started runs, no port it used is taken, and nothing was written outside the state dir.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest
import yaml
from kubernetes import client

from airflow_provider_fedsched.testbed.processes import port_free
from tests.conformance.conftest import STARTED

FEDSCHED = str(Path(sys.executable).with_name("fedsched"))
MEMBER = "tb"
CONFIG = {
    "time_scale": 0.25,
    "clusters": [
        {
            "name": MEMBER,
            "namespace": "etl",
            "node_pools": [{"name": "p", "count": 2, "cpu": "2", "memory": "4Gi"}],
        }
    ],
}
NODE_1, NODE_2 = f"{MEMBER}-p-1", f"{MEMBER}-p-2"


@dataclass
class Bed:
    root: Path
    state: Path
    env: dict[str, str]
    up: subprocess.Popen[bytes]
    root_entries: list[str]
    """The root's entries before ``up`` started."""

    def run(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [FEDSCHED, "testbed", *args[:1], "--state-dir", str(self.state), *args[1:]],
            env=self.env,
            cwd=self.root / "work",
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def fault(self, kind: str, *args: str) -> str:
        done = self.run("fault", MEMBER, kind, *args)
        assert done.returncode == 0, done.stderr
        return done.stdout

    def status(self) -> dict[str, Any]:
        done = self.run("status", "--json")
        document: dict[str, Any] = json.loads(done.stdout)
        assert done.returncode == (0 if document["serving"] else 1)
        return document

    def processes(self) -> dict[str, dict[str, Any]]:
        found: dict[str, dict[str, Any]] = self.status()["clusters"][MEMBER]["processes"]
        return found

    def api(self, token: str | None = None) -> client.ApiClient:
        """A client of the member as the admin (the kubeconfig's token) or with ``token``."""
        kubeconfig = yaml.safe_load((self.state / "kubeconfig").read_text())
        configuration = client.Configuration()
        configuration.host = kubeconfig["clusters"][0]["cluster"]["server"]
        configuration.ssl_ca_cert = str(self.state / "clusters" / MEMBER / "pki" / "ca.crt")
        admin = kubeconfig["users"][0]["user"]["token"]
        configuration.api_key = {"authorization": f"Bearer {token or admin}"}
        return client.ApiClient(configuration)

    def provider_token(self) -> str:
        """The token of the member's Airflow connection (airflow.env): the provider's identity."""
        line = (self.state / "airflow.env").read_text().splitlines()[0]
        connection = json.loads(line.split("=", 1)[1].strip("'"))
        kubeconfig = json.loads(connection["extra"]["kube_config"])
        return str(kubeconfig["users"][0]["user"]["token"])


def _root_entries() -> list[str]:
    """Where the test bed once wrote outside its state dir: a global /airflow link."""
    return sorted(p.name for p in Path("/").iterdir())


def _private(root: Path) -> dict[str, list[str]]:
    """Everything in the HOME, TMPDIR and working directory the test bed ran with."""
    return {name: sorted(str(p) for p in (root / name).rglob("*")) for name in ("home", "tmp", "work")}


@pytest.fixture
def bed(tmp_path: Path) -> Iterator[Bed]:
    for name in ("home", "tmp", "work"):
        (tmp_path / name).mkdir()
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(CONFIG))
    env = {**os.environ, "HOME": str(tmp_path / "home"), "TMPDIR": str(tmp_path / "tmp")}
    state = tmp_path / "state"
    log = (tmp_path / "up.log").open("wb")
    root_entries = _root_entries()
    up = subprocess.Popen(
        [FEDSCHED, "testbed", "up", "--config", str(config), "--state-dir", str(state)],
        env=env,
        cwd=tmp_path / "work",
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 120
        while b"testbed ready" not in (tmp_path / "up.log").read_bytes():
            assert up.poll() is None, (tmp_path / "up.log").read_text()
            assert time.monotonic() < deadline, "fedsched testbed up not ready within 120 s"
            time.sleep(0.2)
        yield Bed(tmp_path, state, env, up, root_entries)
    finally:
        if up.poll() is None:  # the test failed before `down`: stop it as a user would
            up.terminate()
            up.wait(60)
        log.close()


def _node_ready(api: client.ApiClient, name: str) -> str:
    node = client.CoreV1Api(api).read_node(name)
    return next(c.status for c in node.status.conditions if c.type == "Ready")


def _status_code(call: Any) -> int:
    try:
        call()
    except client.ApiException as exc:
        return int(exc.status)
    return 200


@pytest.mark.timeout(240)
def test_up_status_every_fault_and_down_leave_nothing_behind(bed: Bed) -> None:
    # status: the member, its version and URL, every process with its id, all running.
    text = bed.run("status")
    assert text.returncode == 0, text.stderr
    status = bed.status()
    member = status["clusters"][MEMBER]
    assert status["serving"] and status["pid"] == bed.up.pid
    assert member["kubernetes"] == "v1.36.3" and member["url"].startswith("https://127.0.0.1:")
    assert member["url"] in text.stdout and "v1.36.3" in text.stdout
    processes = member["processes"]
    assert set(processes) == {"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok"}
    for name, proc in processes.items():
        assert proc["state"] == "running" and str(proc["pid"]) in text.stdout
        assert Path(psutil.Process(proc["pid"]).cmdline()[0]).name == name
    STARTED.append((MEMBER, member["kubernetes"]))  # for the suite's summary line
    started = {name: proc["pid"] for name, proc in processes.items()}
    ports = set(member["ports"].values())
    api = bed.api()
    core = client.CoreV1Api(api)

    # A second `up` on the same state dir is refused before it touches anything.
    again = subprocess.run(
        [FEDSCHED, "testbed", "up", "--state-dir", str(bed.state)],
        env=bed.env,
        cwd=bed.root / "work",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert again.returncode == 2 and again.stdout == ""
    assert again.stderr.count("\n") == 1 and f"already serves {bed.state} (pid {bed.up.pid})" in again.stderr
    assert bed.processes()["etcd"]["pid"] == started["etcd"] and len(core.list_node().items) == 2

    # Hostile arguments: one line naming what is wrong, exit 2, nothing done.
    for args, named in [
        (("nowhere", "pause-apiserver"), "unknown member 'nowhere'; members: tb"),
        ((MEMBER, "explode"), "unknown fault kind 'explode'"),
        ((MEMBER, "node-not-ready"), "fault node-not-ready needs node=..."),
        (
            (MEMBER, "node-not-ready", "node=ghost"),
            f"no node 'ghost' in member tb; nodes: {NODE_1}, {NODE_2}",
        ),
        ((MEMBER, "quota", "requests.cpu=lots"), "requests.cpu='lots'"),
        ((MEMBER, "quota", "namespace=nope", "pods=1"), 'namespaces "nope" not found'),
        ((MEMBER, "pause-scheduler", "seconds=5"), "unexpected argument 'seconds'"),
        ((MEMBER, "quota", "pods"), "'pods' is not of the form key=value"),
    ]:
        refused = bed.run("fault", *args)
        assert refused.returncode == 2 and refused.stdout == "", (args, refused.stderr)
        assert refused.stderr.count("\n") == 1 and named in refused.stderr, (args, refused.stderr)
    assert all(proc["state"] == "running" for proc in bed.processes().values())

    # kube-apiserver paused (SIGSTOP): faults that need it are refused instead of hanging; resumed.
    bed.fault("pause-apiserver")
    assert bed.processes()["kube-apiserver"]["state"] == "paused"
    refused = bed.run("fault", MEMBER, "quota", "pods=3")
    assert refused.returncode == 2 and "kube-apiserver is paused" in refused.stderr
    bed.fault("resume-apiserver")
    assert bed.processes()["kube-apiserver"]["state"] == "running" and len(core.list_node().items) == 2

    # etcd killed: dead in the status; restarted over its data, with a new id; the API answers again.
    bed.fault("kill-etcd")
    assert bed.processes()["etcd"]["state"] == "dead"
    bed.fault("restart-etcd")
    etcd = bed.processes()["etcd"]
    assert etcd["state"] == "running" and etcd["pid"] != started["etcd"]
    assert {n.metadata.name for n in core.list_node().items} == {NODE_1, NODE_2}

    # kube-apiserver ended (connections refused) and started again, on the same URL.
    bed.fault("down")
    assert bed.processes()["kube-apiserver"]["state"] == "dead"
    bed.fault("up")
    assert bed.processes()["kube-apiserver"]["state"] == "running" and len(core.list_node().items) == 2

    # kube-scheduler paused and resumed.
    bed.fault("pause-scheduler")
    assert bed.processes()["kube-scheduler"]["state"] == "paused"
    bed.fault("resume-scheduler")
    assert bed.processes()["kube-scheduler"]["state"] == "running"

    # Nodes: NotReady (the lease expires: Unknown), Ready again, deleted.
    bed.fault("node-not-ready", f"node={NODE_1}")
    assert _node_ready(api, NODE_1) == "Unknown"
    bed.fault("node-ready", f"node={NODE_1}")
    assert _node_ready(api, NODE_1) == "True"
    bed.fault("delete-node", f"node={NODE_2}")
    assert {n.metadata.name for n in core.list_node().items} == {NODE_1}

    # A quota set, enforced, removed.
    bed.fault("quota", "namespace=etl", "requests.cpu=1", "pods=3")
    quota = core.read_namespaced_resource_quota("compute", "etl")
    assert quota.status.hard == {"requests.cpu": "1", "pods": "3"}
    bed.fault("quota", "namespace=etl")
    assert not core.list_namespaced_resource_quota("etl").items

    # RBAC: the provider's own token is refused once its bindings are revoked, and allowed once restored.
    provider = client.CoreV1Api(bed.api(bed.provider_token()))
    assert _status_code(provider.list_node) == 200
    assert _status_code(lambda: provider.list_namespaced_pod("etl")) == 200
    bed.fault("revoke-rbac")
    assert _status_code(provider.list_node) == 403
    assert _status_code(lambda: provider.list_namespaced_pod("etl")) == 403
    bed.fault("restore-rbac")
    assert _status_code(provider.list_node) == 200
    assert _status_code(lambda: provider.list_namespaced_pod("etl")) == 200
    api.close()

    # down: `up` ends cleanly, every process it started has ended, every port is free.
    recorded = bed.processes()
    down = bed.run("down")
    assert down.returncode == 0, down.stderr
    assert down.stdout.startswith("testbed stopped: 5 processes of 1 member ended")
    assert bed.up.wait(10) == 0
    assert "testbed stopped" in (bed.root / "up.log").read_text()
    for name, proc in recorded.items():
        assert not psutil.pid_exists(proc["pid"]) or psutil.Process(proc["pid"]).status() == "zombie", name
    assert all(port_free(port) for port in ports), ports
    assert not (bed.state / "control.sock").exists()
    stopped = bed.run("status")
    assert stopped.returncode == 1 and stopped.stdout.startswith("testbed: not running")
    assert all(proc["state"] == "dead" for proc in bed.processes().values())
    refused = bed.run("fault", MEMBER, "pause-apiserver")
    assert refused.returncode == 2 and "the test bed is not running" in refused.stderr

    # Nothing written outside the state dir: no /airflow, HOME, TMPDIR and the working directory empty.
    assert not Path("/airflow").exists() and _root_entries() == bed.root_entries
    assert _private(bed.root) == {"home": [], "tmp": [], "work": []}
