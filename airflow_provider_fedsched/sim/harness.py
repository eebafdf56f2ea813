"""``SimFederation``: every simulated cluster in one background thread with its own event loop.

The loop thread owns all simulator state. Handles marshal calls onto it, so tests and sync clients
(which must never run on the server's loop) can drive clusters from any thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import tempfile
import threading
import time
from collections.abc import Callable, Coroutine, Mapping
from pathlib import Path
from typing import Any, TypeVar

import yaml
from aiohttp import web

from airflow_provider_fedsched.sim.cluster import Cluster, SimPortInUse
from airflow_provider_fedsched.sim.config import SimConfig, default_config, load_config, parse_config
from airflow_provider_fedsched.sim.control import (
    apply_fault,
    build_control_app,
    journal_report,
    submit_priority_pod,
)
from airflow_provider_fedsched.sim.util import Clock

T = TypeVar("T")
DEFAULT_POLICY = {
    "weights": {"cost": 0.35, "locality": 0.25, "proximity": 0.15, "headroom": 0.15, "forecast": 0.10},
    "snapshot_ttl_seconds": 15,
    "cooldown_seconds": 60,
}


class SimTimeout(AssertionError):
    """``wait_for`` gave up."""


def wait_for(
    predicate: Callable[[], T], timeout: float = 10.0, interval: float = 0.02, message: str = ""
) -> T:
    """Poll ``predicate`` until it returns something truthy; return that value, or raise SimTimeout."""
    deadline = time.monotonic() + timeout
    last: T = predicate()
    while not last:
        if time.monotonic() > deadline:
            raise SimTimeout(f"condition not met within {timeout}s{': ' + message if message else ''}")
        time.sleep(interval)
        last = predicate()
    return last


def conn_id(cluster: str) -> str:
    return "k8s_" + cluster.replace("-", "_")


class FaultsHandle:
    def __init__(self, fed: SimFederation, cluster: Cluster) -> None:
        self._fed, self._cluster = fed, cluster

    def apply(self, kind: str, **args: Any) -> dict[str, Any]:
        return self._fed.run(apply_fault(self._cluster, kind, args))

    def latency(self, seconds: float) -> None:
        self.apply("latency", seconds=seconds)

    def down(self) -> None:
        self.apply("down")

    def up(self) -> None:
        self.apply("up")

    def fail(
        self,
        status: int = 503,
        times: int = 1,
        route: str | None = None,
        retry_after: int | None = None,
        method: str | None = None,
    ) -> None:
        self.apply("fail", status=status, times=times, route=route, retry_after=retry_after, method=method)

    def drop_watches(self) -> int:
        return int(self.apply("drop-watches")["watches"])

    def expire_watches(self) -> int:
        return int(self.apply("expire-watches")["watches"])

    def node_not_ready(self, node: str) -> None:
        self.apply("node-not-ready", node=node)

    def node_ready(self, node: str) -> None:
        self.apply("node-ready", node=node)

    def evict_pod(self, namespace: str, name: str, resource: str = "memory") -> None:
        self.apply("evict", namespace=namespace, name=name, resource=resource)

    def api_evict(self, namespace: str, name: str) -> None:
        self.apply("api-evict", namespace=namespace, name=name)

    def clear(self) -> None:
        self.apply("clear")


class SchedulerHandle:
    def __init__(self, fed: SimFederation, cluster: Cluster) -> None:
        self._fed, self._cluster = fed, cluster

    def pause(self) -> None:
        self._fed.call(self._cluster.scheduler.pause)

    def resume(self) -> None:
        self._fed.call(self._cluster.scheduler.resume)


class ClusterHandle:
    """Thread-safe handle on one simulated cluster."""

    def __init__(self, fed: SimFederation, cluster: Cluster) -> None:
        self._fed = fed
        self.cluster = cluster
        self.name = cluster.name
        self.config = cluster.config
        self.faults = FaultsHandle(fed, cluster)
        self.scheduler = SchedulerHandle(fed, cluster)

    @property
    def store(self) -> Any:
        """The raw store; read it through :meth:`call` (it belongs to the simulator thread)."""
        return self.cluster.store

    @property
    def url(self) -> str:
        return self.cluster.url

    @property
    def port(self) -> int:
        return self.cluster.port

    @property
    def token(self) -> str:
        return self.cluster.token

    @property
    def conn_id(self) -> str:
        return conn_id(self.name)

    def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        return self._fed.call(fn, *args, **kwargs)

    def _snapshot(self, plural: str, namespace: str | None = None) -> list[dict[str, Any]]:
        return self.call(lambda: copy.deepcopy(self.cluster.store.list(plural, namespace)))

    def pods(self, namespace: str | None = None) -> list[dict[str, Any]]:
        return self._snapshot("pods", namespace)

    def pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.call(lambda: copy.deepcopy(self.cluster.store.get("pods", namespace, name)))

    def nodes(self) -> list[dict[str, Any]]:
        return self._snapshot("nodes")

    def node(self, name: str) -> dict[str, Any] | None:
        return self.call(lambda: copy.deepcopy(self.cluster.store.get("nodes", "", name)))

    def events(self, namespace: str | None = None, involved: str | None = None) -> list[dict[str, Any]]:
        events = self._snapshot("events", namespace)
        return [e for e in events if involved is None or e["involvedObject"]["name"] == involved]

    def create_pod(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        return self.call(lambda: copy.deepcopy(self.cluster.create_pod(namespace, body)))

    def delete_pod(self, namespace: str, name: str, grace: int | None = None) -> None:
        self.call(self.cluster.delete_pod, namespace, name, grace)

    def priority_pod(
        self,
        name: str,
        namespace: str = "default",
        cpu: str = "1",
        memory: str = "1Gi",
        priority: int = 1000000,
    ) -> dict[str, Any]:
        return self.call(
            lambda: copy.deepcopy(submit_priority_pod(self.cluster, name, namespace, cpu, memory, priority))
        )

    def add_node(
        self,
        name: str | None = None,
        cpu: str = "4",
        memory: str = "16Gi",
        pods: int = 110,
        extra: dict[str, str] | None = None,
        labels: dict[str, str] | None = None,
        taints: list[dict[str, str]] | None = None,
    ) -> dict[str, Any]:
        return self.call(
            lambda: copy.deepcopy(self.cluster.add_node(name, cpu, memory, pods, extra, labels, taints))
        )

    def set_quota(self, namespace: str, hard: dict[str, str], name: str = "compute") -> dict[str, Any]:
        return self.call(lambda: copy.deepcopy(self.cluster.set_quota(namespace, hard, name)))

    def request_count(self, method: str | None = None, path: str | None = None) -> int:
        """API requests this cluster received since start (or the last reset).

        ``method`` matches any case; ``path`` (no query string) matches exactly, or as a prefix when it
        ends with ``*``: ``request_count("GET", "/api/v1/nodes")``, ``request_count(path="/api/v1/*")``.
        Requests answered with errors or injected faults count; control-endpoint calls and requests
        dropped while the cluster is down do not.
        """
        return self.call(self.cluster.requests.count, method, path)

    def request_counts(self) -> dict[tuple[str, str], int]:
        """Every ``(METHOD, path)`` seen and its count."""
        return self.call(self.cluster.requests.snapshot)

    def reset_request_counts(self) -> None:
        self.call(self.cluster.requests.reset)

    def journal(
        self, namespace: str | None = None, label_selector: str | None = None
    ) -> list[dict[str, Any]]:
        """Every pod run this cluster has seen (deleted pods included); see docs/simulator.md."""
        pods: list[dict[str, Any]] = self.journal_report(namespace, label_selector)["pods"]
        return pods

    def journal_report(
        self, namespace: str | None = None, label_selector: str | None = None
    ) -> dict[str, Any]:
        """``{"cluster", "observed_at", "dropped", "pods": [...], "nodes": {name: load}}``."""
        return self.call(journal_report, self.cluster, namespace, label_selector)

    def node_loads(self) -> dict[str, dict[str, Any]]:
        """Per node: allocatable, used now, peak, and every over-commit seen (none on a sound cluster)."""
        return self.call(self.cluster.journal.node_loads)

    def logs(self, namespace: str, name: str, container: str = "base") -> list[str]:
        def read() -> list[str]:
            pod = self.cluster.store.get("pods", namespace, name)
            if pod is None:
                return []
            buf = self.cluster.kubelet.logs.get((pod["metadata"]["uid"], container))
            return [line for _, line in buf.lines] if buf else []

        return self.call(read)

    def wait_for_pod(
        self, namespace: str, name: str, predicate: Callable[[dict[str, Any]], bool], timeout: float = 10.0
    ) -> dict[str, Any]:
        def check() -> dict[str, Any]:
            pod = self.pod(namespace, name)
            return pod if pod is not None and predicate(pod) else {}

        return wait_for(check, timeout, message=f"pod {namespace}/{name} on {self.name}")

    def wait_for_phase(self, namespace: str, name: str, phase: str, timeout: float = 10.0) -> dict[str, Any]:
        return self.wait_for_pod(
            namespace, name, lambda p: p.get("status", {}).get("phase") == phase, timeout
        )

    def wait_for_gone(self, namespace: str, name: str, timeout: float = 10.0) -> None:
        wait_for(
            lambda: self.pod(namespace, name) is None, timeout, message=f"pod {namespace}/{name} deleted"
        )


class SimFederation:
    """Start every configured cluster on 127.0.0.1; use as a context manager.

    ``config``: a :class:`SimConfig`, a mapping, a YAML path, or ``None`` for the default three clusters.
    ``state_dir``: where ``kubeconfig``, ``federation.yaml``, ``airflow.env`` and ``sim.json`` go
    (a temporary directory when ``None``). ``time_scale`` overrides the config's.
    """

    def __init__(
        self,
        config: SimConfig | Mapping[str, Any] | str | Path | None = None,
        state_dir: str | Path | None = None,
        time_scale: float | None = None,
    ) -> None:
        if config is None:
            cfg = default_config()
        elif isinstance(config, SimConfig):
            cfg = config
        elif isinstance(config, Mapping):
            cfg = parse_config(dict(config))
        else:
            cfg = load_config(config)
        if time_scale is not None:
            cfg = cfg.model_copy(update={"time_scale": time_scale})
        self.config = cfg
        self.clock = Clock(cfg.time_scale)
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        if state_dir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="fedsched-sim-")
            state_dir = self._tmp.name
        self.state_dir = Path(state_dir)
        self.clusters: dict[str, Cluster] = {}
        self.handles: dict[str, ClusterHandle] = {}
        self.loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._control: web.AppRunner | None = None
        self.control_url = ""

    # -- lifecycle -----------------------------------------------------------------------------------
    def __enter__(self) -> SimFederation:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> SimFederation:
        ready = threading.Event()
        failure: list[BaseException] = []
        self.loop = asyncio.new_event_loop()

        def main() -> None:
            assert self.loop is not None
            asyncio.set_event_loop(self.loop)
            try:
                self.loop.run_until_complete(self._astart())
            except BaseException as exc:
                failure.append(exc)
                self.loop.run_until_complete(self._astop())
                ready.set()
                self.loop.close()
                return
            ready.set()
            self.loop.run_forever()
            self.loop.run_until_complete(self._astop())
            self.loop.run_until_complete(self.loop.shutdown_asyncgens())
            self.loop.close()

        self._thread = threading.Thread(target=main, name="fedsched-sim", daemon=True)
        self._thread.start()
        ready.wait()
        if failure:
            self._thread.join()
            self._thread = None
            raise failure[0]
        self.handles = {name: ClusterHandle(self, c) for name, c in self.clusters.items()}
        self.write_files()
        return self

    async def _astart(self) -> None:
        for cfg in self.config.clusters:
            cluster = Cluster(cfg, self.clock)
            self.clusters[cfg.name] = cluster
            await cluster.start()
        self._control = web.AppRunner(build_control_app(self.clusters), handle_signals=False, access_log=None)
        await self._control.setup()
        site = web.TCPSite(self._control, "127.0.0.1", 0)
        await site.start()
        server = site._server
        sockets = getattr(server, "sockets", None)
        port = int(sockets[0].getsockname()[1]) if sockets else 0
        self.control_url = f"http://127.0.0.1:{port}"

    async def _astop(self) -> None:
        for cluster in self.clusters.values():
            await cluster.stop()
        if self._control is not None:
            await self._control.cleanup()
            self._control = None
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def stop(self) -> None:
        if self._thread is None or self.loop is None:
            return
        # Best effort: the state folder may be gone already.
        with contextlib.suppress(OSError, TimeoutError, RuntimeError):
            self.write_journals()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=30)
        self._thread = None
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    # -- marshalling ---------------------------------------------------------------------------------
    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 30.0) -> T:
        assert self.loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        async def invoke() -> T:
            return fn(*args, **kwargs)

        return self.run(invoke())

    def __getitem__(self, name: str) -> ClusterHandle:
        return self.handles[name]

    def __iter__(self) -> Any:
        return iter(self.handles.values())

    # -- generated files -----------------------------------------------------------------------------
    def write_journals(self) -> None:
        """``state_dir/journal/{cluster}.json``: each cluster's journal as the control endpoint answers it."""
        folder = self.state_dir / "journal"
        folder.mkdir(parents=True, exist_ok=True)
        for name, handle in self.handles.items():
            (folder / f"{name}.json").write_text(json.dumps(handle.journal_report()))

    @property
    def kubeconfig_path(self) -> Path:
        return self.state_dir / "kubeconfig"

    def kubeconfig(self, only: str | None = None) -> dict[str, Any]:
        names = [only] if only else list(self.clusters)
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "preferences": {},
            "current-context": names[0],
            "clusters": [{"name": n, "cluster": {"server": self.clusters[n].url}} for n in names],
            "users": [{"name": f"{n}-user", "user": {"token": self.clusters[n].token}} for n in names],
            "contexts": [
                {"name": n, "context": {"cluster": n, "user": f"{n}-user", "namespace": "default"}}
                for n in names
            ],
        }

    def federation_spec(self) -> dict[str, Any]:
        cfg = self.config
        return {
            "clusters": [
                {
                    "name": c.name,
                    "conn_id": conn_id(c.name),
                    "region": c.region,
                    "group": c.group,
                    "labels": dict(c.labels),
                    "taints": [t.model_dump() for t in c.taints],
                    "prices": c.prices.model_dump(),
                }
                for c in cfg.clusters
            ],
            "datasets": [{k: v for k, v in d.model_dump().items() if v is not None} for d in cfg.datasets],
            "policy": cfg.policy or DEFAULT_POLICY,
        }

    def airflow_env(self) -> str:
        lines = []
        for name in self.clusters:
            extra = {"kube_config": json.dumps(self.kubeconfig(name)), "namespace": "default"}
            value = json.dumps({"conn_type": "kubernetes", "extra": extra})
            lines.append(f"AIRFLOW_CONN_{conn_id(name).upper()}='{value}'")
        return "\n".join(lines) + "\n"

    def airflow_env_vars(self) -> dict[str, str]:
        out = {}
        for line in self.airflow_env().splitlines():
            key, _, value = line.partition("=")
            out[key] = value.strip("'")
        return out

    def write_files(self) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.kubeconfig_path.write_text(yaml.safe_dump(self.kubeconfig(), sort_keys=False))
        self.kubeconfig_path.chmod(0o600)
        (self.state_dir / "federation.yaml").write_text(
            yaml.safe_dump(self.federation_spec(), sort_keys=False)
        )
        env = self.state_dir / "airflow.env"
        env.write_text(self.airflow_env())
        env.chmod(0o600)
        (self.state_dir / "sim.json").write_text(
            json.dumps(
                {
                    "control_url": self.control_url,
                    "time_scale": self.config.time_scale,
                    "clusters": {n: {"url": c.url, "conn_id": conn_id(n)} for n, c in self.clusters.items()},
                },
                indent=2,
            )
        )


__all__ = ["ClusterHandle", "SimFederation", "SimPortInUse", "SimTimeout", "conn_id", "wait_for"]
