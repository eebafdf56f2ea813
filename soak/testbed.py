"""The test bed as the soak's ground: real control planes (etcd, kube-apiserver, kube-scheduler,
kube-controller-manager, kwok nodes) per member, the shipped deploy/ manifests as the provider's only
permissions, and the members as connections in Airflow's metadata database.

It answers the calls the soak makes of the simulated clusters (``soak.clusters.Clusters``): the pods of
the load (as the admin, over HTTPS), each member's journal (rebuilt from its API server's audit log,
``soak.auditlog``), and faults on the real parts, run by the test bed's own fault code
(``fedsched testbed fault``: ``testbed/control.py``).
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from pathlib import Path
from typing import Any

import psutil
import yaml
from kubernetes import client

from airflow_provider_fedsched.testbed import TestbedFederation
from airflow_provider_fedsched.testbed.control import FaultRefused, FederationFaults
from soak import auditlog
from soak.clusters import ClusterError

SIGNALS = ("pause-apiserver", "resume-apiserver", "pause-scheduler", "resume-scheduler", "kill-etcd")
READ_TIMEOUT = (3.0, 10.0)
"""The soak's own reads (fault targets, what is left): a paused API server must not hang the soak."""


class TestbedGround:
    """Start with :meth:`start`, stop with :meth:`stop`; one member per cluster of ``config``."""

    __test__ = False
    ground = "testbed"

    def __init__(self, state_dir: Path, config: dict[str, Any]) -> None:
        self.state_dir = state_dir
        self.config = config
        self.fed: TestbedFederation | None = None
        self.faults: FederationFaults | None = None
        self.process = None
        self.urls: dict[str, str] = {}
        self._lock = threading.Lock()

    # -- lifecycle -------------------------------------------------------------------------------------
    def start(self) -> None:
        self.fed = TestbedFederation(self.config, state_dir=self.state_dir, time_scale=1.0).start()
        self.faults = FederationFaults(self.fed)
        self.urls = {name: c.url for name, c in self.fed.clusters.items()}
        # Every Airflow process's KUBECONFIG: the provider's own identity, never the admin's, so that
        # whatever read it could do no more than the manifests grant (members come from connections).
        self.kubeconfig.write_text(yaml.safe_dump(self.fed.kubeconfig(provider=True), sort_keys=False))
        self.kubeconfig.chmod(0o600)

    def stop(self) -> None:
        if self.fed is not None:
            self.fed.stop()

    @property
    def startup_seconds(self) -> float:
        return self.fed.startup_seconds if self.fed is not None else 0.0

    @property
    def kubeconfig(self) -> Path:
        return self.state_dir / "provider.kubeconfig"

    @property
    def federation(self) -> Path:
        return self.state_dir / "federation.yaml"

    def airflow_env(self) -> dict[str, str]:
        return {}  # the members are connections in the metadata database (:meth:`connect`)

    def connect(self, airflow: Any) -> list[str]:
        """Each member as a connection in Airflow's database, added with ``airflow connections add``."""
        from airflow_provider_fedsched.testbed.demo import add_connections

        assert self.fed is not None
        return add_connections(airflow, self.fed)

    @property
    def names(self) -> list[str]:
        return list(self.urls)

    def cpu_seconds(self) -> dict[str, float]:
        """CPU each member's control plane used (etcd, API server, scheduler, controllers, kwok)."""
        out = {}
        assert self.fed is not None
        for name, cluster in self.fed.clusters.items():
            total = 0.0
            for proc in cluster.processes.values():
                try:
                    times = psutil.Process(proc.pid).cpu_times()
                    total += times.user + times.system
                except psutil.Error:
                    continue
            out[f"member {name}"] = total
        return out

    # -- reads -------------------------------------------------------------------------------------------
    def _core(self, cluster: str) -> client.CoreV1Api:
        assert self.fed is not None
        return self.fed.handles[cluster].core

    def pods(
        self, cluster: str, namespace: str | None = None, selector: str | None = None
    ) -> list[dict[str, Any]]:
        core = self._core(cluster)
        args: dict[str, Any] = {"_request_timeout": READ_TIMEOUT}
        if selector:
            args["label_selector"] = selector
        try:
            listed = (
                core.list_namespaced_pod(namespace, **args)
                if namespace
                else core.list_pod_for_all_namespaces(**args)
            )
        except Exception as exc:  # refused, paused, 5xx: not answering now
            raise ClusterError(f"{cluster}: listing pods: {type(exc).__name__}: {exc}") from None
        return [core.api_client.sanitize_for_serialization(p) for p in listed.items]

    def jobs(self, cluster: str, selector: str) -> list[dict[str, Any]]:
        assert self.fed is not None
        batch = client.BatchV1Api(self.fed.handles[cluster].api)
        try:
            listed = batch.list_job_for_all_namespaces(label_selector=selector, _request_timeout=READ_TIMEOUT)
        except Exception as exc:
            raise ClusterError(f"{cluster}: listing jobs: {type(exc).__name__}: {exc}") from None
        return [batch.api_client.sanitize_for_serialization(j) for j in listed.items]

    def nodes(self, cluster: str) -> list[dict[str, Any]]:
        core = self._core(cluster)
        try:
            listed = core.list_node(_request_timeout=READ_TIMEOUT)
        except Exception as exc:
            raise ClusterError(f"{cluster}: listing nodes: {type(exc).__name__}: {exc}") from None
        return [core.api_client.sanitize_for_serialization(n) for n in listed.items]

    def journal(
        self, cluster: str, namespace: str | None = None, selector: str | None = None
    ) -> dict[str, Any]:
        """The member's pods as its API server's audit log recorded them (``soak.auditlog``); the pods
        still in the API are listed first, so that the log read afterwards holds everything before."""
        assert self.fed is not None
        present = {p["metadata"]["uid"] for p in self.pods(cluster, namespace)}
        observed = time.time()
        logs = self.fed.clusters[cluster].root / "logs"
        found = auditlog.journal(cluster, auditlog.events(auditlog.log_files(logs)), present, observed)
        if selector:
            key = selector.split("=", 1)[0]
            found["pods"] = [p for p in found["pods"] if key in (p.get("labels") or {})]
        if namespace:
            found["pods"] = [p for p in found["pods"] if p["namespace"] == namespace]
        return found

    def provider_denials(self, cluster: str) -> list[dict[str, str]]:
        assert self.fed is not None
        return self.fed.handles[cluster].provider_denials()

    # -- faults ------------------------------------------------------------------------------------------
    def fault(self, cluster: str, kind: str, **args: Any) -> str:
        """One of ``fedsched testbed fault``'s kinds (``testbed/control.py``), in force when it returns."""
        assert self.faults is not None and self.fed is not None
        if kind == "evict":  # kwok plays the kubelet's node-pressure eviction
            self.fed.handles[cluster].faults.evict_pod(args["namespace"], args["name"])
            return f"{cluster}: pod {args['namespace']}/{args['name']} evicted"
        # The test bed's faults expect one caller at a time (its state file is rewritten by some); a signal
        # to one process (a stop, a resume, a kill) may go at once, so that a resume is never held back.
        signal_only = kind in SIGNALS
        with contextlib.nullcontext() if signal_only else self._lock:
            try:
                return self.faults.apply(cluster, kind, {k: str(v) for k, v in args.items()})
            except FaultRefused as exc:
                raise ClusterError(str(exc)) from None

    def create(self, cluster: str, namespace: str, plural: str, body: dict[str, Any]) -> Any:
        """A ResourceQuota (returns once enforced) or a pod, as the admin (another team)."""
        assert self.fed is not None
        if plural == "resourcequotas":
            hard = {k: str(v) for k, v in body["spec"]["hard"].items()}
            return self.fault(cluster, "quota", namespace=namespace, name=body["metadata"]["name"], **hard)
        return self.fed.handles[cluster].create_pod(namespace, body)

    def delete(self, cluster: str, namespace: str, plural: str, name: str) -> Any:
        assert self.fed is not None
        if plural == "resourcequotas":
            return self.fault(cluster, "quota", namespace=namespace, name=name)
        return self.fed.handles[cluster].delete_pod(namespace, name, grace=0)

    def write_state(self, path: Path) -> None:
        assert self.fed is not None
        path.write_text(json.dumps({n: c.url for n, c in self.fed.clusters.items()}, indent=1))
