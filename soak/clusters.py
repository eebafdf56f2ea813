"""The simulated federation as the soak sees it: a ``fedsched sim up`` process, its clusters' Kubernetes
APIs, its control endpoint (faults) and its execution journal (each cluster's own record of what ran).

The soak talks to the clusters over HTTP like any client, never through the provider.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from soak.audit import SOAK_AGENT
from soak.services import stop_process


class ClusterError(RuntimeError):
    pass


class Clusters:
    def __init__(self, state_dir: Path, config: dict[str, Any]) -> None:
        self.state_dir = state_dir
        self.config = config
        self.process: subprocess.Popen[bytes] | None = None
        self.urls: dict[str, str] = {}
        self.tokens: dict[str, str] = {}
        self.control_url = ""

    # -- lifecycle -------------------------------------------------------------------------------------
    def start(self, timeout: float = 60.0) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        config = self.state_dir / "sim-config.yaml"
        config.write_text(yaml.safe_dump(self.config, sort_keys=False))
        meta = self.state_dir / "sim.json"
        meta.unlink(missing_ok=True)
        fedsched = str(Path(sys.executable).with_name("fedsched"))
        log = (self.state_dir / "sim.log").open("wb")
        # The simulated clusters stand for remote API servers with CPUs of their own: as root they run at a
        # higher priority, so that the load they serve cannot starve them on this machine's two cores.
        self.process = subprocess.Popen(
            [fedsched, "sim", "up", "--state-dir", str(self.state_dir), "--config", str(config)],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=(lambda: os.nice(-5)) if os.geteuid() == 0 else None,
        )
        deadline = time.monotonic() + timeout
        while not (meta.exists() and "sim ready" in (self.state_dir / "sim.log").read_text()):
            if self.process.poll() is not None:
                raise ClusterError(f"fedsched sim up exited ({self.process.returncode}); see {log.name}")
            if time.monotonic() > deadline:
                raise ClusterError(f"the simulated federation did not start within {timeout:.0f}s")
            time.sleep(0.2)
        info = json.loads(meta.read_text())
        self.control_url = info["control_url"]
        self.urls = {name: c["url"] for name, c in info["clusters"].items()}
        kubeconfig = yaml.safe_load(self.kubeconfig.read_text())
        users = {u["name"]: u["user"]["token"] for u in kubeconfig["users"]}
        for context in kubeconfig["contexts"]:
            self.tokens[context["name"]] = users[context["context"]["user"]]

    def stop(self) -> None:
        if self.process is not None:
            stop_process(self.process)

    @property
    def kubeconfig(self) -> Path:
        return self.state_dir / "kubeconfig"

    @property
    def federation(self) -> Path:
        return self.state_dir / "federation.yaml"

    def airflow_env(self) -> dict[str, str]:
        out = {}
        for line in (self.state_dir / "airflow.env").read_text().splitlines():
            key, _, value = line.partition("=")
            out[key] = value.strip("'")
        return out

    @property
    def names(self) -> list[str]:
        return list(self.urls)

    # -- HTTP ------------------------------------------------------------------------------------------
    def _call(
        self, url: str, cluster: str, method: str = "GET", body: Any = None, timeout: float = 30
    ) -> Any:
        headers = {
            "Authorization": f"Bearer {self.tokens[cluster]}",
            "Accept": "application/json",
            "User-Agent": SOAK_AGENT,  # the auditor knows what the soak itself was sent
        }
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        request = urllib.request.Request(url, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                return json.loads(response.read() or b"null")
        except urllib.error.HTTPError as exc:
            raise ClusterError(f"{cluster}: {method} {url} -> {exc.code} {exc.read()[:300]!r}") from None
        except (urllib.error.URLError, ConnectionError, TimeoutError) as exc:
            raise ClusterError(f"{cluster}: {method} {url}: {exc}") from None

    def kube(self, cluster: str, path: str, method: str = "GET", body: Any = None) -> Any:
        """A call to the cluster's Kubernetes API (fails while the cluster is down or failing)."""
        return self._call(self.urls[cluster] + path, cluster, method, body)

    def fault(self, cluster: str, kind: str, **args: Any) -> Any:
        return self._call(
            f"{self.control_url}/sim/v1/clusters/{cluster}/faults",
            cluster,
            "POST",
            {"kind": kind, "args": args},
        )

    def journal(
        self, cluster: str, namespace: str | None = None, selector: str | None = None
    ) -> dict[str, Any]:
        """The cluster's execution journal: every pod that ran there and every node's load (control port,
        so it answers while the cluster's API is down)."""
        query = urllib.parse.urlencode(
            {k: v for k, v in (("namespace", namespace), ("labelSelector", selector)) if v}
        )
        url = f"{self.control_url}/sim/v1/clusters/{cluster}/journal" + (f"?{query}" if query else "")
        result: dict[str, Any] = self._call(url, cluster, timeout=120)
        return result

    # -- Kubernetes objects ------------------------------------------------------------------------------
    def pods(
        self, cluster: str, namespace: str | None = None, selector: str | None = None
    ) -> list[dict[str, Any]]:
        path = f"/api/v1/namespaces/{namespace}/pods" if namespace else "/api/v1/pods"
        if selector:
            path += "?" + urllib.parse.urlencode({"labelSelector": selector})
        return list(self.kube(cluster, path)["items"])

    def nodes(self, cluster: str) -> list[dict[str, Any]]:
        return list(self.kube(cluster, "/api/v1/nodes")["items"])

    def create(self, cluster: str, namespace: str, plural: str, body: dict[str, Any]) -> Any:
        return self.kube(cluster, f"/api/v1/namespaces/{namespace}/{plural}", "POST", body)

    def delete(self, cluster: str, namespace: str, plural: str, name: str) -> Any:
        return self.kube(
            cluster, f"/api/v1/namespaces/{namespace}/{plural}/{name}", "DELETE", {"gracePeriodSeconds": 0}
        )
