"""A task process never outlives its supervisor: an orphan could label, delete or race the pod a later
try adopts. Real processes: a supervisor forks the task process, then is SIGKILLed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

SCRIPT = """
import os, socket, sys, time
from airflow.sdk.execution_time import task_runner
from airflow.sdk.execution_time.comms import CommsDecoder
from airflow_provider_fedsched.operators.attempts import die_with_supervisor

child = os.fork()
if child == 0:
    # The task process: connected to its supervisor as the Task SDK connects it.
    ours, _theirs = socket.socketpair()
    task_runner.SUPERVISOR_COMMS = CommsDecoder(socket=ours)
    die_with_supervisor()
    open(sys.argv[1], "w").write(str(os.getpid()))
    time.sleep(120)
    os._exit(0)
time.sleep(120)
"""


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return "State:\tZ" not in state


def test_the_task_process_dies_with_its_supervisor(tmp_path: Path) -> None:
    pid_file = tmp_path / "task.pid"
    supervisor = subprocess.Popen([sys.executable, "-c", SCRIPT, str(pid_file)])
    try:
        deadline = time.monotonic() + 120
        while not pid_file.exists() or not pid_file.read_text():
            assert time.monotonic() < deadline, "the task process never started"
            time.sleep(0.05)
        task = int(pid_file.read_text())
        assert alive(task)
        supervisor.send_signal(signal.SIGKILL)
        supervisor.wait(timeout=30)
        deadline = time.monotonic() + 30
        while alive(task):
            assert time.monotonic() < deadline, "the orphaned task process is still running"
            time.sleep(0.05)
    finally:
        if supervisor.poll() is None:
            supervisor.kill()
        if pid_file.exists() and pid_file.read_text() and alive(int(pid_file.read_text())):
            os.kill(int(pid_file.read_text()), signal.SIGKILL)
