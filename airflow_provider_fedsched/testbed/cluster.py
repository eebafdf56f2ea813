"""One test-bed member: real etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok.

Everything listens on 127.0.0.1 only, behind the cluster's own CA: etcd and the kubelet endpoint (kwok)
with client certificates, the API server with client certificates (components), a static token (the
admin) and service-account tokens (the provider, bound by deploy/rbac*.yaml). RBAC is the authorizer.
"""

from __future__ import annotations

import secrets
import time
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client

import airflow_provider_fedsched.testbed.binaries as binaries
from airflow_provider_fedsched.federation.resources import parse_quantity
from airflow_provider_fedsched.sim.config import ClusterConfig
from airflow_provider_fedsched.testbed.pki import Authority, Pair
from airflow_provider_fedsched.testbed.processes import Process, free_port, wait_until
from airflow_provider_fedsched.testbed.stages import MANAGED_LABEL, kwok_stages

ADMIN_USER = "fedsched-admin"
PROVIDER_NAMESPACE = "fedsched-system"
PROVIDER_ACCOUNT = "fedsched-provider"
# Node leases expire after this; the node lifecycle controller notices within NODE_GRACE seconds.
NODE_LEASE_SECONDS = 4
NODE_GRACE_SECONDS = 6
_QUIET_USERS = ["system:kube-controller-manager", "system:kube-scheduler", "kwok", "system:apiserver"]


def _kubeconfig(server: str, ca: Path, user: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": server, "certificate-authority": str(ca)}}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "c",
    }


def _cert_user(pair: Pair) -> dict[str, Any]:
    return {"client-certificate": str(pair.cert), "client-key": str(pair.key)}


class TestbedCluster:
    """Start with :meth:`start`, end with :meth:`stop`; ``admin()`` is a client with system:masters."""

    __test__ = False  # not a pytest class

    def __init__(self, config: ClusterConfig, root: Path, time_scale: float = 1.0) -> None:
        self.config = config
        self.name = config.name
        self.root = root
        self.time_scale = time_scale
        self.token = config.token or secrets.token_hex(16)  # the admin's static token
        self.provider_token = ""
        self.port = config.port or 0
        self.processes: dict[str, Process] = {}
        self.startup_seconds: dict[str, float] = {}
        self._api: client.ApiClient | None = None
        self.ca: Authority | None = None
        self.node_port = self.kwok_port = 0
        self.kwok_serving: Pair | None = None
        # Every port this member listens on, by what listens there: `fedsched testbed down` checks them.
        self.ports: dict[str, int] = {}
        self.version = ""  # what its API server answers on /version

    # -- files -------------------------------------------------------------------------------------
    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def ca_path(self) -> Path:
        return self.root / "pki" / "ca.crt"

    def _write(self, name: str, data: Any) -> Path:
        path = self.root / name
        path.write_text(data if isinstance(data, str) else yaml.safe_dump(data, sort_keys=False))
        path.chmod(0o600)
        return path

    # -- lifecycle -----------------------------------------------------------------------------------
    def start(self) -> TestbedCluster:
        began = time.monotonic()
        (self.root / "logs").mkdir(parents=True, exist_ok=True)
        (self.root / "etcd").mkdir(exist_ok=True, mode=0o700)
        ca = self.ca = Authority(self.root / "pki", self.name)
        serving = ca.issue("apiserver", "kube-apiserver", server=True)
        etcd_serving = ca.issue("etcd", "etcd", server=True)
        etcd_client = ca.issue("apiserver-etcd-client", "kube-apiserver-etcd-client")
        kubelet_client = ca.issue("apiserver-kubelet-client", "kube-apiserver-kubelet-client")
        kwok_serving = ca.issue("kwok-serving", "kwok", server=True)
        sa = ca.service_account_keys()
        if not self.port:
            self.port = free_port()
        etcd_port, etcd_peer, self.kwok_port = free_port(), free_port(), free_port()
        # The port the nodes report for their kubelet: the pod agent's node endpoint, in front of kwok.
        self.node_port = free_port()
        self.kwok_serving = kwok_serving
        self.ports = {
            "kube-apiserver": self.port,
            "etcd": etcd_port,
            "etcd-peer": etcd_peer,
            "kwok": self.kwok_port,
            "node-endpoint": self.node_port,
            "kube-controller-manager": free_port(),
            "kube-scheduler": free_port(),
        }
        tokens = self._write("tokens.csv", f"{self.token},{ADMIN_USER},{ADMIN_USER},system:masters\n")
        audit_policy = self._write("audit-policy.yaml", self._audit_policy())

        self._spawn(
            "etcd",
            [
                str(binaries.binary("etcd")),
                f"--name={self.name}",
                f"--data-dir={self.root / 'etcd'}",
                f"--listen-client-urls=https://127.0.0.1:{etcd_port}",
                f"--advertise-client-urls=https://127.0.0.1:{etcd_port}",
                f"--listen-peer-urls=http://127.0.0.1:{etcd_peer}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{etcd_peer}",
                f"--initial-cluster={self.name}=http://127.0.0.1:{etcd_peer}",
                f"--cert-file={etcd_serving.cert}",
                f"--key-file={etcd_serving.key}",
                f"--trusted-ca-file={ca.cert_path}",
                "--client-cert-auth",
                "--listen-metrics-urls=",
                "--quota-backend-bytes=4294967296",
                "--log-level=warn",
            ],
        )
        self._spawn(
            "kube-apiserver",
            [
                str(binaries.binary("kube-apiserver")),
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={self.port}",
                f"--tls-cert-file={serving.cert}",
                f"--tls-private-key-file={serving.key}",
                f"--client-ca-file={ca.cert_path}",
                f"--token-auth-file={tokens}",
                "--authorization-mode=RBAC",
                "--anonymous-auth=false",
                f"--etcd-servers=https://127.0.0.1:{etcd_port}",
                f"--etcd-cafile={ca.cert_path}",
                f"--etcd-certfile={etcd_client.cert}",
                f"--etcd-keyfile={etcd_client.key}",
                f"--kubelet-client-certificate={kubelet_client.cert}",
                f"--kubelet-client-key={kubelet_client.key}",
                f"--kubelet-certificate-authority={ca.cert_path}",
                "--kubelet-preferred-address-types=InternalIP",
                f"--service-account-key-file={sa.cert}",
                f"--service-account-signing-key-file={sa.key}",
                "--service-account-issuer=https://kubernetes.default.svc",
                "--service-cluster-ip-range=10.96.0.0/16",
                f"--audit-policy-file={audit_policy}",
                f"--audit-log-path={self.root / 'logs' / 'audit.log'}",
                "--audit-log-maxsize=200",
                "--endpoint-reconciler-type=none",  # a loopback address is no valid endpoint
                "--profiling=false",
                "--v=1",
            ],
        )
        api = self.admin()
        wait_until(lambda: self._readyz(api), f"{self.name} kube-apiserver /readyz", 120, self._procs())
        self.startup_seconds["apiserver_ready"] = time.monotonic() - began
        self._install_crds(api)
        controller = ca.issue("controller-manager", "system:kube-controller-manager")
        scheduler = ca.issue("scheduler", "system:kube-scheduler")
        kwok_client = ca.issue("kwok-client", "kwok", groups=("system:masters",))
        kcm_config = self._write(
            "controller-manager.kubeconfig", _kubeconfig(self.url, ca.cert_path, _cert_user(controller))
        )
        sched_config = self._write(
            "scheduler.kubeconfig", _kubeconfig(self.url, ca.cert_path, _cert_user(scheduler))
        )
        kwok_config = self._write(
            "kwok.kubeconfig", _kubeconfig(self.url, ca.cert_path, _cert_user(kwok_client))
        )
        self._spawn(
            "kube-controller-manager",
            [
                str(binaries.binary("kube-controller-manager")),
                f"--kubeconfig={kcm_config}",
                f"--authentication-kubeconfig={kcm_config}",
                f"--authorization-kubeconfig={kcm_config}",
                "--bind-address=127.0.0.1",
                f"--secure-port={self.ports['kube-controller-manager']}",
                "--leader-elect=false",
                f"--service-account-private-key-file={sa.key}",
                f"--root-ca-file={ca.cert_path}",
                "--use-service-account-credentials=true",  # one RBAC identity per controller, as kubeadm
                "--controllers=*,-bootstrap-signer-controller,-token-cleaner-controller",
                "--node-monitor-period=1s",
                f"--node-monitor-grace-period={NODE_GRACE_SECONDS}s",
                "--v=1",
            ],
        )
        self._spawn(
            "kube-scheduler",
            [
                str(binaries.binary("kube-scheduler")),
                f"--kubeconfig={sched_config}",
                f"--authentication-kubeconfig={sched_config}",
                f"--authorization-kubeconfig={sched_config}",
                "--bind-address=127.0.0.1",
                f"--secure-port={self.ports['kube-scheduler']}",
                "--leader-elect=false",
                "--v=1",
            ],
        )
        stages = self._write(
            "kwok.yaml",
            "---\n".join(yaml.safe_dump(s, sort_keys=False) for s in kwok_stages(self.time_scale)),
        )
        self._spawn(
            "kwok",
            [
                str(binaries.binary("kwok")),
                f"--kubeconfig={kwok_config}",
                f"--config={stages}",
                f"--manage-nodes-with-label-selector={MANAGED_LABEL}=true",
                f"--node-lease-duration-seconds={NODE_LEASE_SECONDS}",
                "--enable-crds=Exec",
                "--node-ip=127.0.0.1",
                f"--node-port={self.node_port}",
                f"--server-address=127.0.0.1:{self.kwok_port}",
                f"--tls-cert-file={kwok_serving.cert}",
                f"--tls-private-key-file={kwok_serving.key}",
                "--cidr=10.244.0.0/16",
            ],
        )
        core = client.CoreV1Api(api)
        for ns in self.config.all_namespaces:
            self.ensure_namespace(ns)
        for ns, hard in self.config.quotas.items():
            self.set_quota(ns, hard)
        self._bootstrap_provider_identity(api)
        for pool in self.config.node_pools:
            for _ in range(pool.count):
                self.add_node(pool)
        wait_until(lambda: self._nodes_ready(core), f"{self.name} nodes Ready", 120, self._procs())
        self.version = str(client.VersionApi(api).get_code().git_version)
        self.startup_seconds["ready"] = time.monotonic() - began
        return self

    def stop(self) -> None:
        # The reverse of the start order: nothing writes to a stopped API server or etcd.
        for name in ("kwok", "kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd"):
            proc = self.processes.pop(name, None)
            if proc is not None:
                proc.stop()
        if self._api is not None:
            self._api.close()
            self._api = None

    def process_pid(self, name: str) -> int:
        """The pid of this member's process ``name`` (e.g. ``kwok``) as it runs now."""
        return self.processes[name].pid

    def _spawn(self, name: str, argv: list[str]) -> Process:
        self.processes[name] = proc = Process(name, argv, self.root / "logs" / f"{name}.log")
        return proc

    def stop_apiserver(self) -> None:
        """The cluster stops answering: its API server process ends (connections are refused)."""
        self.processes["kube-apiserver"].stop()

    def start_apiserver(self) -> None:
        """The same API server again, on the same port, over the same etcd; back once /readyz is ok."""
        proc = self.processes["kube-apiserver"]
        if not proc.alive():
            self._spawn(proc.name, proc.argv)
        self._wait_apiserver_ready()

    def kill_etcd(self) -> None:
        """etcd crashes (SIGKILL): the API server stays up with no storage behind it."""
        self.processes["etcd"].kill()

    def start_etcd(self) -> None:
        """The same etcd again, on the same ports, over the same data; back once the API server's /readyz
        (which checks its etcd) is ok, unless the API server is itself down or paused."""
        proc = self.processes["etcd"]
        if not proc.alive():
            self._spawn(proc.name, proc.argv)
        apiserver = self.processes["kube-apiserver"]
        if apiserver.alive() and not apiserver.paused():
            self._wait_apiserver_ready()

    def _wait_apiserver_ready(self) -> None:
        api = self.admin()
        wait_until(lambda: self._readyz(api), f"{self.name} kube-apiserver /readyz", 120, self._procs())

    def _procs(self) -> list[Process]:
        return list(self.processes.values())

    def memory_bytes(self) -> dict[str, int]:
        return {name: proc.rss_bytes() for name, proc in self.processes.items()}

    # -- clients -------------------------------------------------------------------------------------
    def client_config(self, token: str | None = None) -> client.Configuration:
        configuration = client.Configuration()
        configuration.host = self.url
        configuration.ssl_ca_cert = str(self.ca_path)
        configuration.api_key = {"authorization": f"Bearer {token or self.token}"}
        return configuration

    def admin(self) -> client.ApiClient:
        if self._api is None:
            self._api = client.ApiClient(self.client_config())
        return self._api

    @staticmethod
    def _readyz(api: client.ApiClient) -> bool:
        response = api.call_api("/readyz", "GET", auth_settings=["BearerToken"], _preload_content=False)
        return bool(response.status == 200)

    def _nodes_ready(self, core: client.CoreV1Api) -> bool:
        nodes = core.list_node().items
        expected = sum(p.count for p in self.config.node_pools)
        ready = [
            n
            for n in nodes
            if any(c.type == "Ready" and c.status == "True" for c in n.status.conditions or [])
        ]
        return len(ready) >= expected

    # -- objects ------------------------------------------------------------------------------------
    def _audit_policy(self) -> dict[str, Any]:
        """One line per finished request of the admin and the provider: what request_count reads, and
        the provider's denied requests (its Leases too: a ledger the manifests forbid must show). Every
        write of a pod or its status, whoever sends it (kwok playing the kubelet, the Job controller, the
        scheduler's binding), with the object as it then was, and every delete of a pod with the pod as
        the delete found it: the pod's life as the cluster recorded it, which the soak's auditor reads
        (``soak/auditlog.py``)."""
        return {
            "apiVersion": "audit.k8s.io/v1",
            "kind": "Policy",
            "omitStages": ["RequestReceived", "ResponseStarted"],
            "rules": [
                {
                    "level": "RequestResponse",
                    "resources": [{"group": "", "resources": ["pods", "pods/status"]}],
                    "verbs": ["create", "update", "patch"],
                },
                {
                    # With the pod as the delete found it: a status write answered 504 may have landed.
                    "level": "RequestResponse",
                    "resources": [{"group": "", "resources": ["pods"]}],
                    "verbs": ["delete", "deletecollection"],
                },
                {"level": "None", "users": _QUIET_USERS},
                {"level": "None", "nonResourceURLs": ["/readyz", "/healthz", "/livez"]},
                {"level": "Metadata"},
            ],
        }

    def _install_crds(self, api: client.ApiClient) -> None:
        ext = client.ApiextensionsV1Api(api)
        names = []
        for path in sorted(binaries.kwok_crds().glob("*.yaml")):
            body = yaml.safe_load(path.read_text())
            names.append(body["metadata"]["name"])
            ext.create_custom_resource_definition(body)

        def established() -> bool:
            for name in names:
                crd = ext.read_custom_resource_definition(name)
                if not any(
                    c.type == "Established" and c.status == "True" for c in crd.status.conditions or []
                ):
                    return False
            return True

        wait_until(established, f"{self.name} kwok CRDs established", 60, self._procs())

    def ensure_namespace(self, name: str) -> None:
        """The namespace, its default service account (pods need it) and the provider's Role in it."""
        core = client.CoreV1Api(self.admin())
        try:
            core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
        except client.ApiException as exc:
            if exc.status != 409:
                raise
        from airflow_provider_fedsched.testbed.rbac import apply_namespaced

        apply_namespaced(self.admin(), name)

        def has_default_account() -> bool:
            core.read_namespaced_service_account("default", name)
            return True

        wait_until(has_default_account, f"{self.name} serviceaccount {name}/default", 60, self._procs())

    def _bootstrap_provider_identity(self, api: client.ApiClient) -> None:
        from airflow_provider_fedsched.testbed.rbac import apply_cluster, provider_token

        apply_cluster(api)
        self.provider_token = provider_token(
            api, lambda what, check: wait_until(check, what, 60, self._procs())
        )

    def set_quota(self, namespace: str, hard: dict[str, str], name: str = "compute") -> dict[str, Any]:
        core = client.CoreV1Api(self.admin())
        body = {"metadata": {"name": name, "namespace": namespace}, "spec": {"hard": dict(hard)}}
        try:
            quota = core.create_namespaced_resource_quota(namespace, body)
        except client.ApiException as exc:
            if exc.status != 409:
                raise
            quota = core.patch_namespaced_resource_quota(name, namespace, {"spec": {"hard": dict(hard)}})

        # Admission reads status.hard: wait until the quota controller has filled it in (in canonical
        # form: "1000" reads back as "1k").
        def in_force() -> bool:
            status = core.read_namespaced_resource_quota(name, namespace).status.hard or {}
            wanted = {k: parse_quantity(v) for k, v in hard.items()}
            return all(k in status and parse_quantity(status[k]) == q for k, q in wanted.items())

        wait_until(in_force, f"quota {namespace}/{name} in force", 60, self._procs())
        return dict(api_dict(self.admin(), quota))

    _node_seq = 0

    def add_node(self, pool: Any) -> dict[str, Any]:
        self._node_seq += 1
        name = f"{self.name}-{pool.name}-{self._node_seq}"
        capacity = {
            "cpu": pool.cpu,
            "memory": pool.memory,
            "pods": str(pool.pods),
            "ephemeral-storage": "100Gi",
        }
        capacity.update(pool.extra)
        body = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "labels": {
                    "kubernetes.io/hostname": name,
                    "kubernetes.io/os": "linux",
                    "kubernetes.io/arch": "amd64",
                    "type": "kwok",
                    MANAGED_LABEL: "true",
                    **pool.labels,
                    "fedsched.io/node-pool": pool.name,
                    "topology.kubernetes.io/region": self.config.region,
                },
                "annotations": {"node.alpha.kubernetes.io/ttl": "0"},
            },
            "spec": {"taints": [t.model_dump() for t in pool.taints]},
            "status": {"capacity": capacity, "allocatable": dict(capacity)},
        }
        core = client.CoreV1Api(self.admin())
        node = core.create_node(body)
        if not (node.status and node.status.capacity):
            node = core.patch_node_status(name, {"status": body["status"]})
        return dict(api_dict(self.admin(), node))


def api_dict(api: client.ApiClient, obj: Any) -> Any:
    """A client model as the plain JSON-shaped dict the simulator's handles return."""
    return api.sanitize_for_serialization(obj)
