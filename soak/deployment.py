"""A real multi-process Airflow deployment for the soak, and a small client of its REST API.

api-server, scheduler, dag-processor and triggerer run as separate processes on one PostgreSQL metadata
database; with CeleryExecutor, two Celery workers take the tasks from a Redis broker. Every port is a free
loopback port, the home is private, and every process gets the same environment (including ``KUBECONFIG``,
as any kubectl user's processes have: the provider must not depend on it).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from cryptography.fernet import Fernet

from soak.services import Postgres, Redis, free_port, stop_process

T = TypeVar("T")
ADMIN = ("admin", "soak-admin")
REPO = Path(__file__).resolve().parent.parent
JOB_LOOP_ENDED = b"Exception when executing "
"""What an Airflow job runner logs when its main loop raised: the component no longer works."""
READ_PATIENCE = 180.0
"""How long the soak's reads of the REST API are asked again while it answers 5xx or not at all."""


class DeploymentError(RuntimeError):
    pass


class Api:
    """Airflow's public REST API (``/api/v2``) with a SimpleAuthManager token."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.token: str | None = None

    def request(self, method: str, path: str, body: Any = None, auth: bool = True) -> tuple[int, Any]:
        headers = {"Accept": "application/json", "Content-Type": "application/json"}
        if auth and self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.base + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                raw, status = response.read(), response.status
        except urllib.error.HTTPError as exc:
            raw, status = exc.read(), exc.code
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            return 0, None
        try:
            return status, json.loads(raw)
        except ValueError:
            return status, raw.decode(errors="replace")

    def get(self, path: str, patience: float = READ_PATIENCE) -> tuple[int, Any]:
        """A read, asked again (1 s, 2 s, 4 s ... apart) while the server does not answer or answers 5xx,
        for up to ``patience`` seconds: a starved API server runs out of database connections (its pool
        times out after 30 s and it answers 500), and the soak's own reads must outlast that."""
        deadline, delay = time.monotonic() + patience, 1.0
        while True:
            status, body = self.request("GET", path)
            if 0 < status < 500 or time.monotonic() + delay > deadline:
                return status, body
            time.sleep(delay)
            delay = min(delay * 2, 15.0)

    def login(self) -> None:
        status, body = self.request(
            "POST", "/auth/token", {"username": ADMIN[0], "password": ADMIN[1]}, auth=False
        )
        if status != 201:
            raise DeploymentError(f"login to the API server failed: {status} {body}")
        self.token = body["access_token"]

    def task_instances(self, dag_id: str, run_id: str) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        run = urllib.parse.quote(run_id, safe="")
        while True:
            status, body = self.get(
                f"/api/v2/dags/{dag_id}/dagRuns/{run}/taskInstances?limit=100&offset={len(out)}"
            )
            if status != 200:
                raise DeploymentError(f"listing task instances failed: {status} {body}")
            out.extend(body["task_instances"])
            if len(out) >= body["total_entries"] or not body["task_instances"]:
                return out

    def task_log(self, dag_id: str, run_id: str, task_id: str, map_index: int, try_number: int) -> str:
        """The try's log as ``LEVEL event`` lines (structured log lines; plain ones as they are)."""
        run = urllib.parse.quote(run_id, safe="")
        status, body = self.get(
            f"/api/v2/dags/{dag_id}/dagRuns/{run}/taskInstances/{task_id}/logs/{try_number}"
            f"?map_index={map_index}&full_content=true"
        )
        if status != 200 or not isinstance(body, dict):
            return f"(log not readable: {status})"
        content = body.get("content")
        if isinstance(content, list):
            return "\n".join(_log_line(line) for line in content)
        return str(content)


def _log_line(line: Any) -> str:
    """``[timestamp ]LEVEL event``, followed by the exception a failed try logged (``error_detail``: type
    and value). The timestamp (as the Task SDK wrote it) lets the auditor weigh a try against the faults."""
    if not isinstance(line, dict):
        return str(line)
    stamp = f"{line['timestamp']} " if line.get("timestamp") else ""
    text = f"{stamp}{str(line.get('level', '')).upper()} {line.get('event', '')}"
    for error in line.get("error_detail") or []:
        if isinstance(error, dict):
            value = str(error.get("exc_value", "")).split("\n", 1)[0][:400]
            text += f" | {error.get('exc_type', '')}: {value}"
    return text


def wait_for(what: str, check: Callable[[], T], timeout: float, alive: Callable[[], None]) -> T:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = check()
        if result:
            return result
        alive()
        time.sleep(1.0)
    raise DeploymentError(f"timed out after {timeout:.0f}s waiting for {what}")


@dataclass
class Process:
    name: str
    command: list[str]
    env: dict[str, str]
    log: Path
    popen: subprocess.Popen[bytes] | None = None
    restarts: int = 0
    log_offset: int = 0
    """Where this start's output begins in ``log``."""

    def start(self) -> None:
        self.log_offset = self.log.stat().st_size if self.log.exists() else 0
        out = self.log.open("ab")
        # Its own session, so that stopping it reaches the processes it forks (task supervisors).
        self.popen = subprocess.Popen(
            self.command, env=self.env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )

    @property
    def pid(self) -> int:
        assert self.popen is not None
        return self.popen.pid

    def running(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def terminate(self) -> None:
        """SIGTERM to the whole group (the process and the task processes it forked)."""
        if self.popen is not None and self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, signal.SIGTERM)

    def stop(self, timeout: float = 30.0) -> None:
        if self.popen is None:
            return
        self.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(timeout=timeout)
        with contextlib.suppress(ProcessLookupError):  # whatever the group left (orphaned task processes)
            os.killpg(self.popen.pid, signal.SIGKILL)
        stop_process(self.popen, timeout=5)


@dataclass
class Airflow:
    """The deployment: configuration, processes, and the REST API once it answers."""

    home: Path
    executor: str
    postgres: Postgres | None
    """The metadata database; None: SQLite in the home (LocalExecutor only)."""
    redis: Redis | None
    sim_env: dict[str, str]
    federation: Path
    kubeconfig: Path
    manifest: Path | None
    parallelism: int
    celery_concurrency: int
    dag_files: tuple[Path, ...] = (REPO / "soak" / "dags" / "fedsched_soak.py",)
    """Linked into the home's DAG folder."""
    preload: bool = True
    """Preload the Kubernetes clients in every process (``soak/airflow_local_settings.py``)."""
    processes: dict[str, Process] = field(default_factory=dict)
    port: int = 0
    api: Api = field(init=False)

    def __post_init__(self) -> None:
        self.port = free_port()
        self.api = Api(f"http://127.0.0.1:{self.port}")
        self.home.mkdir(parents=True, exist_ok=True)
        (self.home / "dags").mkdir(exist_ok=True)
        for dag_file in self.dag_files:
            link = self.home / "dags" / dag_file.name
            if not link.exists():
                link.symlink_to(dag_file)
        (self.home / "passwords.json").write_text(json.dumps({ADMIN[0]: ADMIN[1]}))
        (self.home / "logs").mkdir(exist_ok=True)
        if self.preload:
            (self.home / "config").mkdir(exist_ok=True)
            shutil.copy(REPO / "soak" / "airflow_local_settings.py", self.home / "config")
        self.env = self._environment()

    @property
    def airflow(self) -> str:
        return str(Path(sys.executable).with_name("airflow"))

    def _environment(self) -> dict[str, str]:
        base = f"http://127.0.0.1:{self.port}"
        env = {
            k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW") and k != "PYTEST_CURRENT_TEST"
        }
        env.update(self.sim_env)
        env.update(
            {
                "AIRFLOW_HOME": str(self.home),
                "KUBECONFIG": str(self.kubeconfig),
                **({"FEDSCHED_SOAK_MANIFEST": str(self.manifest)} if self.manifest is not None else {}),
                "PYTHONPATH": str(REPO),
                "AIRFLOW__CORE__DAGS_FOLDER": str(self.home / "dags"),
                "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
                "AIRFLOW__CORE__EXECUTOR": "CeleryExecutor" if self.executor == "celery" else "LocalExecutor",
                "AIRFLOW__CORE__PARALLELISM": str(self.parallelism),
                "AIRFLOW__CORE__MAX_ACTIVE_TASKS_PER_DAG": "512",
                "AIRFLOW__CORE__DAGBAG_IMPORT_TIMEOUT": "120",
                "AIRFLOW__CORE__FERNET_KEY": Fernet.generate_key().decode(),
                "AIRFLOW__CORE__AUTH_MANAGER": (
                    "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager"
                ),
                "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{ADMIN[0]}:admin",
                "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(self.home / "passwords.json"),
                "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{base}/execution/",
                "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": (
                    self.postgres.sqlalchemy_url
                    if self.postgres is not None
                    else f"sqlite:///{self.home / 'airflow.db'}"
                ),
                "AIRFLOW__API__BASE_URL": base,
                "AIRFLOW__API__PORT": str(self.port),
                "AIRFLOW__API__HOST": "127.0.0.1",
                "AIRFLOW__API_AUTH__JWT_SECRET": os.urandom(24).hex(),
                "AIRFLOW__API__SECRET_KEY": os.urandom(24).hex(),
                "AIRFLOW__FEDSCHED__FEDERATION_SPEC": str(self.federation),
                "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
                "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(free_port()),
                "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(free_port()),
                "AIRFLOW__SCHEDULER__ENABLE_HEALTH_CHECK": "False",
                # A dead worker's tasks are noticed within a minute (the default, 5 min, is a soak's length).
                "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": "60",
                "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "10",
                # The DAG file does not change during a soak: parse it once, not every 30 s.
                "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "600",
                "AIRFLOW__TRIGGERER__CAPACITY": "1000",
            }
        )
        if self.executor == "celery":
            assert self.redis is not None and self.postgres is not None
            env.update(
                {
                    "AIRFLOW__CELERY__BROKER_URL": self.redis.url,
                    "AIRFLOW__CELERY__RESULT_BACKEND": self.postgres.celery_result_backend,
                    "AIRFLOW__CELERY__WORKER_CONCURRENCY": str(self.celery_concurrency),
                    "AIRFLOW__CELERY__WORKER_PREFETCH_MULTIPLIER": "1",
                }
            )
        return env

    # -- lifecycle ---------------------------------------------------------------------------------------
    def cli(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        with (self.home / "setup.log").open("a") as out:
            return subprocess.run(
                [self.airflow, *args],
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                text=True,
                timeout=timeout,
                check=True,
            )

    def migrate(self) -> None:
        self.cli("db", "migrate")

    def add(self, name: str, *args: str, env: dict[str, str] | None = None) -> Process:
        process = Process(name, [self.airflow, *args], {**self.env, **(env or {})}, self.home / f"{name}.log")
        self.processes[name] = process
        process.start()
        return process

    def start(self) -> None:
        self.add("api-server", "api-server", "--port", str(self.port), "--host", "127.0.0.1")
        self.add("scheduler", "scheduler")
        self.add("dag-processor", "dag-processor")
        self.add("triggerer", "triggerer")
        if self.executor == "celery":
            for worker in ("worker-1", "worker-2"):
                self.start_celery_worker(worker)

    def start_celery_worker(self, name: str) -> Process:
        return self.add(
            name,
            "celery",
            "worker",
            "--celery-hostname",
            f"{name}@soak",
            "--concurrency",
            str(self.celery_concurrency),
            "--without-mingle",
            "--without-gossip",
            env={"AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(free_port())},
        )

    def restart(self, name: str, sig: int = signal.SIGTERM, pause: float = 0.0) -> None:
        """Stop one process (``sig`` to its whole group) and start it again after ``pause`` seconds."""
        process = self.processes[name]
        assert process.popen is not None
        if process.popen.poll() is None:
            os.killpg(process.popen.pid, sig)
            try:
                process.popen.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(process.popen.pid, signal.SIGKILL)
                process.popen.wait(timeout=10)
        time.sleep(pause)
        process.restarts += 1
        process.start()

    def revive(self) -> list[str]:
        """What a deployment's process supervisor and liveness probes do (systemd ``Restart=always``, the
        Helm chart's ``airflow jobs check``): every Airflow component whose process exited, or whose job
        loop ended (``Exception when executing ...``: Airflow's scheduler, dag-processor and triggerer end
        their loop when the metadata database goes away, and the scheduler then lingers, waiting for its
        executor), is killed with its group and started again. Celery workers are left to the fault that
        stopped them. Returns what it restarted and why."""
        revived = []
        for name, process in self.processes.items():
            if name.startswith("worker-") or process.popen is None:
                continue
            why = ""
            if process.popen.poll() is not None:
                why = f"exited ({process.popen.returncode})"
            else:
                with process.log.open("rb") as fh:
                    fh.seek(process.log_offset)
                    if JOB_LOOP_ENDED in fh.read():
                        why = "its job loop ended"
            if why:
                self.restart(name, signal.SIGKILL)
                revived.append(f"{name} ({why})")
        return revived

    def check_alive(self) -> None:
        for process in self.processes.values():
            if process.popen is not None and process.popen.poll() is not None:
                raise DeploymentError(
                    f"{process.name} exited ({process.popen.returncode}); see {process.log}"
                )

    def wait_ready(self, dag_id: str, timeout: float = 300) -> None:
        wait_for(
            "the API server",
            lambda: self.api.request("GET", "/api/v2/monitor/health", auth=False)[0] == 200,
            timeout,
            self.check_alive,
        )
        # The execution API builds its versioned routes on its first request, in the API server's event
        # loop (seconds of CPU, a minute at load 25): asked first by a task's start, whose tries (5 s each)
        # ran out, it failed a task that never ran (tests/plugins/test_ui_e2e.py).
        wait_for(
            "the execution API",
            lambda: self.api.request("GET", "/execution/health", auth=False)[0] == 200,
            timeout,
            self.check_alive,
        )
        self.api.login()
        wait_for(
            "the DAG to be parsed",
            lambda: self.api.get(f"/api/v2/dags/{dag_id}", patience=0)[0] == 200,
            timeout,
            self.check_alive,
        )

    def trigger(self, dag_id: str) -> str:
        status, body = self.api.request("PATCH", f"/api/v2/dags/{dag_id}", {"is_paused": False})
        if status != 200:
            raise DeploymentError(f"unpausing {dag_id} failed: {status} {body}")
        status, body = self.api.request("POST", f"/api/v2/dags/{dag_id}/dagRuns", {"logical_date": None})
        if status != 200:
            raise DeploymentError(f"triggering {dag_id} failed: {status} {body}")
        return str(body["dag_run_id"])

    def run_state(self, dag_id: str, run_id: str) -> str | None:
        run = urllib.parse.quote(run_id, safe="")
        status, body = self.api.get(f"/api/v2/dags/{dag_id}/dagRuns/{run}", patience=0)  # polled anyway
        return str(body["state"]) if status == 200 else None

    def cpu_seconds(self) -> dict[str, float]:
        """CPU time each process has used with everything it started (task processes included)."""
        return {name: session_cpu_seconds(p.pid) for name, p in self.processes.items() if p.popen}

    def stop(self, timeout: float = 30.0) -> None:
        """Stop every process: all are told at once, then waited for within one shared ``timeout`` (the
        ones that linger past it are killed), so that stopping takes at most ``timeout``, not one each."""
        for process in self.processes.values():
            process.terminate()
        deadline = time.monotonic() + timeout
        for process in reversed(list(self.processes.values())):
            process.stop(timeout=max(0.0, deadline - time.monotonic()))


def session_cpu_seconds(session: int) -> float:
    """User and system CPU of the live processes of a session, with the children they reaped."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        # Fields after the command: state ppid pgrp session ... utime(12) stime(13) cutime(14) cstime(15).
        if int(fields[3]) == session:
            total += sum(int(v) for v in fields[11:15])
    return total / ticks
