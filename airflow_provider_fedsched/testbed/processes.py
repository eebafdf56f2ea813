"""Child processes of the test bed: one log file each, ended with their parent, stopped by their id."""

from __future__ import annotations

import contextlib
import ctypes
import os
import random
import signal
import socket
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil

_PR_SET_PDEATHSIG = 1
# The death signal follows the thread that forked the child, not the process: every child is started
# from this one long-lived thread, so it ends with the process and not with a short-lived caller thread.
_SPAWNER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="testbed-spawner")


def _die_with_parent() -> None:
    # A shell's background job inherits SIGINT ignored; the sidecar's `kill -2` must reach kwok's shells.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    # A test run or `fedsched testbed up` that is killed must not leave control planes behind.
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


LOWEST_PORT = 20000


def ephemeral_low(path: Path = Path("/proc/sys/net/ipv4/ip_local_port_range")) -> int:
    """The lowest port the kernel hands to outgoing connections (32768 when it cannot be read)."""
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port() -> int:
    """A free port on 127.0.0.1 below the kernel's ephemeral range, for a component that binds it later.

    A port the kernel hands out (``bind(0)``) is in that range, where any outgoing connection may be given
    it before the component binds it: a full soak's test bed failed to start so ("address already in
    use" for a node endpoint). Below the range only another server can take it."""
    low = ephemeral_low()
    rng = random.SystemRandom()
    for _ in range(200):
        port = rng.randrange(LOWEST_PORT, low) if low > LOWEST_PORT + 100 else 0
        if port and port_free(port):
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def port_free(port: int) -> bool:
    """Nothing listens on 127.0.0.1:``port``: a server could bind it now (as servers do, with
    SO_REUSEADDR, so that the closed connections' TIME_WAIT does not count)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def process_state(pid: int, create_time: float) -> str:
    """``running``, ``paused`` (SIGSTOP) or ``dead`` for the process that had this id and start time (an
    id the kernel gave to another process since is ``dead``: the start times differ)."""
    try:
        proc = psutil.Process(pid)
        if abs(proc.create_time() - create_time) > 0.05:
            return "dead"
        status = proc.status()
    except psutil.Error:
        return "dead"
    if status in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD):
        return "dead"
    return "paused" if status == psutil.STATUS_STOPPED else "running"


class Process:
    """One component: started with its log file, stopped with SIGTERM then SIGKILL."""

    def __init__(self, name: str, argv: list[str], log: Path) -> None:
        self.name, self.argv, self.log = name, argv, log
        self._out = log.open("ab")
        self.popen = _SPAWNER.submit(
            subprocess.Popen,
            argv,
            stdin=subprocess.DEVNULL,
            stdout=self._out,
            stderr=subprocess.STDOUT,
            preexec_fn=_die_with_parent,
            close_fds=True,
        ).result()
        # With the id, what tells this process from a later one given the same id (see process_state).
        try:
            self.create_time = psutil.Process(self.pid).create_time()
        except psutil.Error:  # already gone: alive() says so
            self.create_time = 0.0

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def rss_bytes(self) -> int:
        try:
            return int(psutil.Process(self.pid).memory_info().rss)
        except psutil.Error:
            return 0

    def pause(self) -> None:
        os.kill(self.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.pid, signal.SIGCONT)

    def paused(self) -> bool:
        return self.alive() and process_state(self.pid, self.create_time) == "paused"

    def kill(self) -> None:
        """SIGKILL, as a crash: no shutdown of its own."""
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                self.popen.kill()
            self.popen.wait()
        self._out.close()

    def stop(self, timeout: float = 10.0) -> None:
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGCONT)
                self.popen.terminate()
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(timeout)
        self._out.close()


class StartupError(RuntimeError):
    """A component did not come up; the message carries the end of its log."""


def wait_until(check: object, what: str, timeout: float, processes: list[Process]) -> None:
    """Poll ``check()`` until truthy; fail early, with the log tail, if a component died meanwhile."""
    deadline = time.monotonic() + timeout
    while True:
        for proc in processes:
            if not proc.alive():
                raise StartupError(
                    f"{proc.name} exited ({proc.popen.returncode}) while waiting for {what}:\n{proc.tail()}"
                )
        try:
            if check():  # type: ignore[operator]
                return
        except Exception:
            pass
        if time.monotonic() > deadline:
            tails = "\n".join(f"--- {p.name} ({p.log})\n{p.tail()}" for p in processes)
            raise StartupError(f"timed out after {timeout:.0f}s waiting for {what}\n{tails}")
        time.sleep(0.1)
