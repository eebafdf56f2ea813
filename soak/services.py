"""PostgreSQL and Redis for the soak, from Debian's packages, each a private instance on loopback.

A package is installed with apt-get only when its server binary is absent (root required then). Each
instance gets its own data directory, a free port on 127.0.0.1 and a random password, so that it cannot
collide with a system service or with other deployments on the same machine; it is stopped and its data
removed when the soak ends.
"""

from __future__ import annotations

import contextlib
import glob
import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path


class ServiceError(RuntimeError):
    """A service could not be installed or started; the message says which and why."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def apt_install(package: str) -> None:
    """``apt-get install`` one Debian package (refreshing the package lists once if it is unknown)."""
    if os.geteuid() != 0:
        raise ServiceError(f"{package} is not installed; as root: apt-get install {package}")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    command = ["apt-get", "install", "-y", "-q", "-o", "DPkg::Lock::Timeout=600", package]
    if subprocess.run(command, env=env, capture_output=True).returncode != 0:
        subprocess.run(["apt-get", "update", "-q"], env=env, capture_output=True)
        result = subprocess.run(command, env=env, capture_output=True, text=True)
        if result.returncode != 0:
            raise ServiceError(f"apt-get install {package} failed: {result.stderr.strip()[-500:]}")


def wait_until(
    what: str, check: Callable[[], bool], timeout: float, process: subprocess.Popen[bytes] | None = None
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        if process is not None and process.poll() is not None:
            raise ServiceError(f"{what}: the server exited ({process.returncode})")
        time.sleep(0.2)
    raise ServiceError(f"{what}: not ready within {timeout:.0f}s")


def stop_process(process: subprocess.Popen[bytes], timeout: float = 20.0) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=timeout)


# PostgreSQL ------------------------------------------------------------------------------------------
class PostgresServer:
    """The soak's PostgreSQL server process: stopped and started again by the ``restart-database`` fault
    (same data, same port)."""

    def __init__(self, command: list[str], log: Path) -> None:
        self.command, self.log = command, log
        self.process: subprocess.Popen[bytes] | None = None

    def start_server(self) -> None:
        out = self.log.open("ab")
        self.process = subprocess.Popen(self.command, stdout=out, stderr=subprocess.STDOUT)

    def stop_server(self) -> None:
        """SIGTERM: PostgreSQL's smart shutdown would wait for Airflow's sessions, so a fast one (SIGINT)
        ends them, as a database failover does."""
        if self.process is not None and self.process.poll() is None:
            import psutil

            # As root the server runs under runuser, which would turn a signal into SIGTERM then SIGKILL:
            # the postmaster itself is told.
            children = psutil.Process(self.process.pid).children()
            postmaster = children[0].pid if self.command[0] == "runuser" and children else self.process.pid
            os.kill(postmaster, signal.SIGINT)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=20)


@dataclass(frozen=True)
class Postgres:
    host: str
    port: int
    user: str
    password: str
    database: str
    server: PostgresServer | None = field(default=None, compare=False, repr=False)

    @property
    def sqlalchemy_url(self) -> str:
        return f"postgresql+psycopg2://{self.user}:{self.password}@{self.host}:{self.port}/{self.database}"

    @property
    def celery_result_backend(self) -> str:
        return f"db+postgresql+psycopg2://{self.user}:{self.password}@{self.host}:{self.port}/{self.database}"


def postgres_bin() -> Path:
    """The newest installed PostgreSQL server's bin directory, installing Debian's package if none is."""
    for attempt in range(2):
        found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
        if found:
            return Path(found[-1]).parent
        if attempt == 0:
            apt_install("postgresql")
    raise ServiceError("PostgreSQL: no /usr/lib/postgresql/*/bin/initdb after apt-get install postgresql")


def _as_server_user(command: list[str]) -> list[str]:
    """PostgreSQL refuses to run as root: as root, run it as Debian's ``postgres`` user."""
    if os.geteuid() != 0:
        return command
    return ["runuser", "-u", "postgres", "--", *command]


@contextlib.contextmanager
def postgres(log_dir: Path, database: str = "airflow") -> Iterator[Postgres]:
    """A private PostgreSQL cluster on a free loopback port, with one database; its log in ``log_dir``.

    The data directory is a fresh temporary directory (owned by ``postgres`` when run as root, since the
    server may not run as root and must reach it), removed afterwards."""
    bindir = postgres_bin()
    root = Path(tempfile.mkdtemp(prefix="fedsched-soak-pg-"))
    data, sockets = root / "data", root / "sockets"
    sockets.mkdir()
    password = secrets.token_hex(16)
    pwfile = root / "pwfile"
    pwfile.write_text(password + "\n")
    if os.geteuid() == 0:
        for path in (root, sockets, pwfile):
            shutil.chown(path, "postgres")
    user = "soak"
    init = subprocess.run(
        _as_server_user(
            [
                *(str(bindir / "initdb"), "-D", str(data), "-U", user, f"--pwfile={pwfile}"),
                *("--auth=scram-sha-256", "--encoding=UTF8", "--locale=C"),
            ]
        ),
        capture_output=True,
        text=True,
    )
    pwfile.unlink()
    if init.returncode != 0:
        raise ServiceError(f"PostgreSQL initdb failed: {init.stderr.strip()[-500:]}")
    port = free_port()
    log_dir.mkdir(parents=True, exist_ok=True)
    (log_dir / "postgres.log").write_bytes(b"")
    # Durability is not what a soak measures: no fsync keeps the 2-core machine's disk out of the figures.
    control = PostgresServer(
        _as_server_user(
            [
                *(str(bindir / "postgres"), "-D", str(data), "-p", str(port), "-k", str(sockets)),
                *("-c", "listen_addresses=127.0.0.1", "-c", "max_connections=400", "-c", "fsync=off"),
                *("-c", "synchronous_commit=off", "-c", "full_page_writes=off"),
            ]
        ),
        log_dir / "postgres.log",
    )
    control.start_server()
    server = control.process
    assert server is not None
    try:
        env = {**os.environ, "PGPASSWORD": password}

        def ready() -> bool:
            probe = [str(bindir / "pg_isready"), "-q", "-h", "127.0.0.1", "-p", str(port), "-U", user]
            return subprocess.run(probe, env=env, capture_output=True).returncode == 0

        wait_until(f"PostgreSQL on 127.0.0.1:{port} (log {log_dir / 'postgres.log'})", ready, 60, server)
        create = subprocess.run(
            [str(bindir / "createdb"), "-h", "127.0.0.1", "-p", str(port), "-U", user, database],
            env=env,
            capture_output=True,
            text=True,
        )
        if create.returncode != 0:
            raise ServiceError(f"PostgreSQL createdb {database} failed: {create.stderr.strip()}")
        yield Postgres("127.0.0.1", port, user, password, database, control)
    finally:
        control.stop_server()
        shutil.rmtree(root, ignore_errors=True)


# Redis -----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Redis:
    host: str
    port: int
    password: str

    @property
    def url(self) -> str:
        return f"redis://:{self.password}@{self.host}:{self.port}/0"


def redis_server() -> str:
    for attempt in range(2):
        found = shutil.which("redis-server") or (
            "/usr/bin/redis-server" if Path("/usr/bin/redis-server").exists() else None
        )
        if found:
            return found
        if attempt == 0:
            apt_install("redis-server")
    raise ServiceError("Redis: no redis-server after apt-get install redis-server")


@contextlib.contextmanager
def redis(work: Path) -> Iterator[Redis]:
    """A private, memory-only Redis on a free loopback port with a password."""
    binary = redis_server()
    work.mkdir(parents=True, exist_ok=True)
    port, password = free_port(), secrets.token_hex(16)
    config = work / "redis.conf"
    config.write_text(
        f'port {port}\nbind 127.0.0.1\nrequirepass {password}\nsave ""\nappendonly no\n'
        f"dir {work}\nprotected-mode yes\ndaemonize no\n"
    )
    config.chmod(0o600)
    log = (work / "redis.log").open("wb")
    server = subprocess.Popen([binary, str(config)], stdout=log, stderr=subprocess.STDOUT)
    try:

        def ready() -> bool:
            answer = b""
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
                    sock.sendall(f"AUTH {password}\r\nPING\r\n".encode())
                    while b"+PONG" not in answer and (chunk := sock.recv(64)):
                        answer += chunk
            except OSError:
                return False
            return b"+PONG" in answer

        wait_until(f"Redis on 127.0.0.1:{port}", ready, 30, server)
        yield Redis("127.0.0.1", port, password)
    finally:
        stop_process(server)
