"""``SimFederation``: every simulated cluster in one background thread with its own event loop.

The loop thread owns all simulator state. Handles marshal calls onto it, so tests and sync clients
(which must never run on the server's loop) can drive clusters from any thread.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import fcntl
import json
import logging
import os
import tempfile
import threading
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, TypeVar

import yaml
from aiohttp import web

from airflow_provider_fedsched.federation.documents import read_text_file
from airflow_provider_fedsched.sim.cluster import Cluster, SimPortInUse
from airflow_provider_fedsched.sim.config import SimConfig, conn_id, federation_spec, resolve_config
from airflow_provider_fedsched.sim.control import build_control_app
from airflow_provider_fedsched.sim.handles import ClusterHandle, SimTimeout, wait_for
from airflow_provider_fedsched.sim.util import Clock

log = logging.getLogger(__name__)

T = TypeVar("T")
CONTROL = "__control__"
LOCK_FILE = "sim.lock"
"""Held (``flock``) by the simulator serving a state folder, for as long as it runs: the kernel releases it
when that process ends, however it ends."""


STATE_FILES = (LOCK_FILE, "kubeconfig", "federation.yaml", "airflow.env", "sim.json")
"""The files a simulator writes in its state folder."""


class SimStateDirInUse(RuntimeError):
    """The state folder is not a folder, cannot be created, or another running simulator serves it."""


def claim_state_dir(state_dir: Path) -> IO[str]:
    """Lock ``state_dir`` for this simulator (creating it), before any file in it is written: a second
    simulator on the same folder would overwrite the kubeconfig and env files of the first."""
    if state_dir.exists() and not state_dir.is_dir():
        raise SimStateDirInUse(f"{state_dir}: not a directory")
    # Opening or writing a named pipe or a device blocks or writes nowhere: only regular files are replaced.
    for name in STATE_FILES:
        path = state_dir / name
        if (path.exists() or path.is_symlink()) and not path.is_file():
            raise SimStateDirInUse(f"{path}: not a regular file; remove it or choose another state folder")
    try:
        state_dir.mkdir(parents=True, exist_ok=True)
        handle = open(state_dir / LOCK_FILE, "a+")  # noqa: SIM115 - held until stop()
    except OSError as exc:
        problem = exc.strerror or exc
        raise SimStateDirInUse(f"{state_dir}: cannot use it as a state folder: {problem}") from None
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.seek(0)
        holder = handle.read(32).strip()
        handle.close()
        raise SimStateDirInUse(
            f"{state_dir}: already served by a running simulator{f' (pid {holder})' if holder else ''}; "
            "stop it first or choose another state folder"
        ) from None
    handle.seek(0)
    handle.truncate()
    handle.write(str(os.getpid()))
    handle.flush()
    return handle


@dataclass(frozen=True)
class KubeconfigMember:
    """One member of a generated kubeconfig: a context named after the cluster, in its task namespace."""

    name: str
    server: str
    token: str
    namespace: str
    ca_pem: bytes | None = None
    """The API server's CA (the test bed's); none for the simulator's plain HTTP."""


def federation_kubeconfig(members: list[KubeconfigMember], user: str = "user") -> dict[str, Any]:
    """The kubeconfig both backends write: one cluster, user (``NAME-{user}``) and context per member."""

    def cluster(m: KubeconfigMember) -> dict[str, Any]:
        if m.ca_pem is None:
            return {"server": m.server}
        return {"server": m.server, "certificate-authority-data": base64.b64encode(m.ca_pem).decode()}

    return {
        "apiVersion": "v1",
        "kind": "Config",
        "preferences": {},
        "current-context": members[0].name,
        "clusters": [{"name": m.name, "cluster": cluster(m)} for m in members],
        "users": [{"name": f"{m.name}-{user}", "user": {"token": m.token}} for m in members],
        "contexts": [
            {
                "name": m.name,
                "context": {"cluster": m.name, "user": f"{m.name}-{user}", "namespace": m.namespace},
            }
            for m in members
        ],
    }


def write_federation_files(
    state_dir: Path, kubeconfig: dict[str, Any], spec: dict[str, Any], airflow_env: str
) -> None:
    """``kubeconfig``, ``federation.yaml`` and ``airflow.env`` in ``state_dir``, as both backends write them
    (the two that hold credentials readable by their owner only)."""
    state_dir.mkdir(parents=True, exist_ok=True)
    kubeconfig_path = state_dir / "kubeconfig"
    kubeconfig_path.write_text(yaml.safe_dump(kubeconfig, sort_keys=False))
    kubeconfig_path.chmod(0o600)
    (state_dir / "federation.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    env = state_dir / "airflow.env"
    env.write_text(airflow_env)
    env.chmod(0o600)


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
        cfg = self.config = resolve_config(config, time_scale)
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
        self._lock: IO[str] | None = None
        self.control_url = ""

    # -- lifecycle -----------------------------------------------------------------------------------
    def __enter__(self) -> SimFederation:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> SimFederation:
        self._lock = claim_state_dir(self.state_dir)
        try:
            return self._start()
        except BaseException:
            self._release()
            raise

    def _release(self) -> None:
        if self._lock is not None:
            self._lock.close()  # closing the file releases the lock
            self._lock = None

    def _start(self) -> SimFederation:
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

    def remembered_ports(self) -> dict[str, int]:
        """Ports of the last run in this state folder (``sim.json``), to serve on again: cluster -> port."""
        if self._tmp is not None:
            return {}
        try:
            meta = json.loads(read_text_file(self.state_dir / "sim.json", "simulator state"))
            ports = {name: int(c["url"].rsplit(":", 1)[1]) for name, c in meta["clusters"].items()}
            ports[CONTROL] = int(meta["control_url"].rsplit(":", 1)[1])
        except (OSError, ValueError, KeyError, TypeError, AttributeError, IndexError):
            return {}
        return {k: v for k, v in ports.items() if 0 < v < 65536}

    async def _astart(self) -> None:
        remembered = self.remembered_ports()
        for cfg in self.config.clusters:
            # An explicit ``port:`` must be free; a remembered one is used when it still is.
            cluster = Cluster(cfg, self.clock, preferred_port=0 if cfg.port else remembered.get(cfg.name, 0))
            self.clusters[cfg.name] = cluster
            await cluster.start()
        self._control = web.AppRunner(build_control_app(self.clusters), handle_signals=False, access_log=None)
        await self._control.setup()
        for port in dict.fromkeys((remembered.get(CONTROL, 0), 0)):
            site = web.TCPSite(self._control, "127.0.0.1", port, reuse_address=True)
            try:
                await site.start()
            except OSError:
                log.warning("sim: control port %s is taken; using a free one", port)
                continue
            break
        sockets = getattr(site._server, "sockets", None)
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
        self._release()
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
        return federation_kubeconfig(
            [
                KubeconfigMember(
                    n, self.clusters[n].url, self.clusters[n].token, self.clusters[n].config.task_namespace
                )
                for n in names
            ]
        )

    def federation_spec(self) -> dict[str, Any]:
        return federation_spec(self.config)

    def airflow_env(self) -> str:
        lines = []
        for name, cluster in self.clusters.items():
            namespace = cluster.config.task_namespace
            extra = {"kube_config": json.dumps(self.kubeconfig(name)), "namespace": namespace}
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
        write_federation_files(self.state_dir, self.kubeconfig(), self.federation_spec(), self.airflow_env())
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


__all__ = [
    "ClusterHandle",
    "SimFederation",
    "SimPortInUse",
    "SimStateDirInUse",
    "SimTimeout",
    "conn_id",
    "wait_for",
    "write_federation_files",
]
