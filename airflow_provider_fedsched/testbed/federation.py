"""``TestbedFederation``: N real member clusters from a simulator config, with the simulator's files.

It writes what ``SimFederation`` writes (``kubeconfig``, ``federation.yaml``, ``airflow.env``) plus
``testbed.json`` (what ``fedsched testbed status`` and ``down`` read: every process id, port and URL) and
holds ``testbed.lock`` while it runs (one test bed per state dir); its handles answer the simulator
handles' calls that a real cluster can answer, so the operator and hook scenarios run unchanged against
either.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import airflow_provider_fedsched.testbed.binaries as binaries
from airflow_provider_fedsched.federation.documents import read_text_file
from airflow_provider_fedsched.sim.config import SimConfig, federation_spec, resolve_config
from airflow_provider_fedsched.sim.harness import (
    KubeconfigMember,
    conn_id,
    federation_kubeconfig,
    write_federation_files,
)
from airflow_provider_fedsched.testbed.agent import PodAgent
from airflow_provider_fedsched.testbed.cluster import TestbedCluster
from airflow_provider_fedsched.testbed.handles import TestbedClusterHandle
from airflow_provider_fedsched.testbed.processes import process_state

STATE_FILE = "testbed.json"
LOCK_FILE = "testbed.lock"


class StateDirInUse(RuntimeError):
    """Another test bed holds the state dir: starting here would wipe its etcd data and certificates."""


def owner(state_dir: Path) -> dict[str, Any] | None:
    """The process that holds ``state_dir`` (``pid``, ``create_time``) if it still runs, else ``None``."""
    try:
        found = json.loads(read_text_file(state_dir / LOCK_FILE, "test bed lock") or "null")
        pid, created = int(found["pid"]), float(found["create_time"])
    except (OSError, ValueError, TypeError, KeyError):
        return None
    return found if process_state(pid, created) != "dead" else None


def read_state(state_dir: Path) -> dict[str, Any] | None:
    """``testbed.json`` as the running (or last) test bed wrote it, or ``None`` when there is none."""
    try:
        found = json.loads(read_text_file(state_dir / STATE_FILE, "test bed state"))  # a FIFO would block
    except (OSError, ValueError):
        return None
    return found if isinstance(found, dict) and isinstance(found.get("clusters"), dict) else None


def _lock(state_dir: Path) -> int:
    """Hold ``state_dir`` for this process (released when it ends, however it ends)."""
    import psutil

    fd = os.open(state_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        holder = owner(state_dir)
        raise StateDirInUse(
            f"a test bed already serves {state_dir}" + (f" (pid {holder['pid']})" if holder else "")
        ) from None
    me = {"pid": os.getpid(), "create_time": psutil.Process().create_time()}
    os.ftruncate(fd, 0)
    os.write(fd, json.dumps(me).encode())
    return fd


def _write_atomically(path: Path, text: str) -> None:
    """Readers (``fedsched testbed status``) see the old file or the new one, never half of one."""
    part = path.with_name(f".{path.name}.part")
    part.write_text(text)
    part.replace(path)


class TestbedFederation:
    """Start every configured cluster (in parallel) on 127.0.0.1; use as a context manager.

    ``config``: a :class:`SimConfig`, a mapping, a YAML path, or ``None`` for the simulator's default
    three clusters. ``state_dir``: where the files go (a temporary directory when ``None``).
    ``time_scale`` multiplies pod run and start durations (Kubernetes' own timers stay real).
    """

    __test__ = False

    def __init__(
        self,
        config: SimConfig | Mapping[str, Any] | str | Path | None = None,
        state_dir: str | Path | None = None,
        time_scale: float | None = None,
    ) -> None:
        self.config = resolve_config(config, time_scale)
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        if state_dir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="fedsched-testbed-")
            state_dir = self._tmp.name
        self.state_dir = Path(state_dir)
        self.clusters: dict[str, TestbedCluster] = {}
        self.agents: dict[str, PodAgent] = {}
        self.handles: dict[str, TestbedClusterHandle] = {}
        self.startup_seconds = 0.0
        self._lock_fd: int | None = None

    def __enter__(self) -> TestbedFederation:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> TestbedFederation:
        binaries.check()
        began = time.monotonic()
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self._lock_fd = _lock(self.state_dir)
        # The exec user (nobody) must reach each pod's directory under pods/: search, not read, for others.
        self.state_dir.chmod(0o711)
        (self.state_dir / STATE_FILE).unlink(missing_ok=True)  # a previous run's processes and ports
        for cfg in self.config.clusters:
            root = self.state_dir / "clusters" / cfg.name
            if root.exists():
                shutil.rmtree(root)  # a previous run's etcd and certificates: start clean
            self.clusters[cfg.name] = TestbedCluster(cfg, root, self.config.time_scale)
        try:
            with ThreadPoolExecutor(max_workers=len(self.clusters)) as pool:
                list(pool.map(lambda c: c.start(), self.clusters.values()))
            for name, cluster in self.clusters.items():
                assert cluster.kwok_serving is not None and cluster.ca is not None
                self.agents[name] = PodAgent(
                    cluster.admin(),
                    self.state_dir / "pods" / name,
                    node_port=cluster.node_port,
                    kwok_port=cluster.kwok_port,
                    serving=(cluster.kwok_serving.cert, cluster.kwok_serving.key),
                    client_ca=cluster.ca.cert_path,
                    time_scale=self.config.time_scale,
                ).start()
                self.handles[name] = TestbedClusterHandle(cluster)
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - began
        self.write_files()
        return self

    def stop(self) -> None:
        for agent in self.agents.values():
            agent.stop()
        self.agents.clear()
        for cluster in self.clusters.values():
            cluster.stop()
        shutil.rmtree(self.state_dir / "pods", ignore_errors=True)
        if self._lock_fd is not None:
            with contextlib.suppress(OSError):
                os.ftruncate(self._lock_fd, 0)
            os.close(self._lock_fd)
            self._lock_fd = None
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def __getitem__(self, name: str) -> TestbedClusterHandle:
        return self.handles[name]

    def __iter__(self) -> Iterator[TestbedClusterHandle]:
        return iter(self.handles.values())

    def create_namespace(self, name: str) -> None:
        """In every member: the namespace, its default service account and the provider's Role."""
        for cluster in self.clusters.values():
            cluster.ensure_namespace(name)

    def memory_bytes(self) -> dict[str, dict[str, int]]:
        return {name: cluster.memory_bytes() for name, cluster in self.clusters.items()}

    # -- generated files (the shapes of SimFederation's) -------------------------------------------
    @property
    def kubeconfig_path(self) -> Path:
        return self.state_dir / "kubeconfig"

    def kubeconfig(self, only: str | None = None, provider: bool = False) -> dict[str, Any]:
        """Contexts named after the clusters; the admin's token, or the provider's (``provider=True``)."""
        names = [only] if only else list(self.clusters)
        members = []
        for n in names:
            cluster = self.clusters[n]
            token = cluster.provider_token if provider else cluster.token
            namespace = cluster.config.task_namespace
            members.append(KubeconfigMember(n, cluster.url, token, namespace, cluster.ca_path.read_bytes()))
        return federation_kubeconfig(members, user="provider" if provider else "user")

    def federation_spec(self) -> dict[str, Any]:
        return federation_spec(self.config)

    def airflow_env_vars(self) -> dict[str, str]:
        """One Airflow connection per member, with the provider's least-privilege identity."""
        out = {}
        for name, cluster in self.clusters.items():
            extra = {
                "kube_config": json.dumps(self.kubeconfig(name, provider=True)),
                "namespace": cluster.config.task_namespace,
            }
            out[f"AIRFLOW_CONN_{conn_id(name).upper()}"] = json.dumps(
                {"conn_type": "kubernetes", "extra": extra}
            )
        return out

    def airflow_env(self) -> str:
        return "".join(f"{key}='{value}'\n" for key, value in self.airflow_env_vars().items())

    def write_files(self) -> None:
        write_federation_files(self.state_dir, self.kubeconfig(), self.federation_spec(), self.airflow_env())
        self.write_state()

    def write_state(self) -> None:
        """``testbed.json``: again whenever a process is started anew (a restarted etcd has a new id)."""
        state = {
            "kubernetes": binaries.KUBERNETES_VERSION,
            "time_scale": self.config.time_scale,
            "clusters": {
                n: {
                    "url": c.url,
                    "conn_id": conn_id(n),
                    "kubernetes": c.version,
                    "processes": {
                        p: {"pid": proc.pid, "create_time": proc.create_time}
                        for p, proc in c.processes.items()
                    },
                    "ports": c.ports,
                    "logs": str(c.root / "logs"),
                }
                for n, c in self.clusters.items()
            },
        }
        _write_atomically(self.state_dir / STATE_FILE, json.dumps(state, indent=2))
