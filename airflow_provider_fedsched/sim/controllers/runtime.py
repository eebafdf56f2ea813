"""The simulated container runtime: what a container prints, how long it runs, how it exits, and exec.

Annotations (prefix ``sim.fedsched.io/``; ``KEY.CONTAINER`` overrides ``KEY`` for one container):
``duration`` run seconds (default 1), ``exit-code`` (default 0), ``logs`` (JSON list or newline text),
``startup-delay`` seconds before containers start (default 0.2), ``image-pull-error`` (message; the pod stays
in ErrImagePull/ImagePullBackOff), ``xcom`` (what the xcom sidecar's ``return.json`` holds).
``${NAME}`` in log lines becomes the value of the container's env var ``NAME`` (literal ``value`` entries).
All durations are simulated seconds, scaled by the cluster clock.

Exec runs a handful of commands: enough for KubernetesPodOperator's xcom sidecar (``cat return.json`` or the
empty marker, then ``kill -2`` on stdin), plus ``echo``, ``cat``, ``true``, ``false``, ``exit N``,
``hostname`` and ``env``. Anything else ends with exit code 127.
"""

from __future__ import annotations

import asyncio
import json
import re
import shlex
from collections.abc import Iterable, Mapping
from typing import Any

from airflow_provider_fedsched.sim.apiserver.nodeagent import ExecResult, LogBuffer
from airflow_provider_fedsched.sim.apiserver.store import Obj
from airflow_provider_fedsched.sim.util import Clock

PREFIX = "sim.fedsched.io/"
SIDECAR = "airflow-xcom-sidecar"
XCOM_PATH = "/airflow/xcom/return.json"
EMPTY_XCOM = "__airflow_xcom_result_empty__"
_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def annotation(pod: Obj, key: str, container: str | None = None, default: Any = None) -> Any:
    annotations = pod["metadata"].get("annotations") or {}
    if container and f"{PREFIX}{key}.{container}" in annotations:
        return annotations[f"{PREFIX}{key}.{container}"]
    return annotations.get(PREFIX + key, default)


def float_annotation(pod: Obj, key: str, default: float, container: str | None = None) -> float:
    """A duration annotation; a value that is not a finite, non-negative number means the default."""
    try:
        value = float(annotation(pod, key, container, default))
    except (TypeError, ValueError):
        return default
    return value if 0 <= value < 10**9 else default


def container_env(pod: Obj, container: str) -> dict[str, str]:
    """The literal ``env`` values of one container; the last entry of a name wins, as in the runtime.

    An entry with neither ``value`` nor ``valueFrom`` is the empty string (as Kubernetes sets it);
    ``valueFrom`` entries (secrets, field refs...) are not resolved and so not substituted.
    """
    env: dict[str, str] = {}
    for spec in pod["spec"].get("containers") or []:
        if spec.get("name") != container:
            continue
        for entry in spec.get("env") or []:
            if isinstance(entry, dict) and entry.get("name") and entry.get("valueFrom") is None:
                env[str(entry["name"])] = str(entry.get("value") or "")
    return env


def expand_env(line: str, env: Mapping[str, str]) -> str:
    """Replace ``${NAME}`` with the container's env value; unknown names stay as written."""
    return _ENV_REF.sub(lambda m: env.get(m.group(1), m.group(0)), line)


def _split_lines(raw: Any) -> list[str]:
    if isinstance(raw, str) and raw.lstrip().startswith("["):
        try:
            return [str(line) for line in json.loads(raw)]
        except (ValueError, TypeError):
            pass  # not a JSON list after all: plain text
    return str(raw).splitlines()


def log_lines(pod: Obj, container: str) -> list[str]:
    raw = annotation(pod, "logs", container)
    if raw is None:
        name = pod["metadata"]["name"]
        return [f"sim: starting container {container} of pod {name}", f"sim: container {container} finished"]
    env = container_env(pod, container)
    return [expand_env(line, env) for line in _split_lines(raw)]


class Runtime:
    """Container processes of one cluster's nodes, their output, and exec into them."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.logs: dict[tuple[str, str], LogBuffer] = {}  # (uid, container) current instance
        self.previous_logs: dict[tuple[str, str], LogBuffer] = {}
        self.kill_events: dict[tuple[str, str], asyncio.Event] = {}

    async def run(self, pod: Obj, container: str) -> int:
        """Run one container instance to its exit; returns the exit code."""
        key = (pod["metadata"]["uid"], container)
        buffer = self.logs.setdefault(key, LogBuffer())
        if container == SIDECAR:
            await self.kill_events.setdefault(key, asyncio.Event()).wait()
            buffer.finish()
            return 0
        lines = log_lines(pod, container)
        duration = float_annotation(pod, "duration", 1.0, container)
        try:
            exit_code = int(float(annotation(pod, "exit-code", container, 0)))
        except (TypeError, ValueError, OverflowError):
            exit_code = 0
        step = duration / (len(lines) + 1) if lines else duration
        for line in lines:
            await self.clock.sleep(step)
            buffer.append(line)
        await self.clock.sleep(step if lines else duration)
        buffer.finish()
        return exit_code

    def restarted(self, uid: str, container: str) -> None:
        """A new instance of the container starts: the old output becomes ``previous``."""
        key = (uid, container)
        if key in self.logs:
            self.previous_logs[key] = self.logs.pop(key)

    def kill(self, uid: str, container: str) -> bool:
        """Stop a sidecar-style container (what the xcom ``kill -2`` does)."""
        event = self.kill_events.get((uid, container))
        if event is None:
            return False
        event.set()
        return True

    def end_logs(self, uid: str, containers: Iterable[str] | None = None) -> None:
        """The containers produce no more output: their follow streams end."""
        for key, buffer in self.logs.items():
            if key[0] == uid and (containers is None or key[1] in containers) and not buffer.done:
                buffer.finish()

    def forget(self, uid: str) -> None:
        for key in [k for k in self.logs if k[0] == uid]:
            self.logs.pop(key).finish()
        for table in (self.previous_logs, self.kill_events):
            for key in [k for k in table if k[0] == uid]:
                table.pop(key)

    # -- the node agent: what the apiserver proxies to the kubelet ----------------------------------------
    def log_buffer(self, uid: str, container: str, previous: bool = False) -> LogBuffer | None:
        return (self.previous_logs if previous else self.logs).get((uid, container))

    def exec_script(self, pod: Obj, container: str, script: str, result: ExecResult) -> None:
        """Interpret one shell command line the way the sidecar's /bin/sh would, for the commands we model."""
        script = script.strip()
        if not script:
            return
        if XCOM_PATH in script and "cat" in script:
            value = str(annotation(pod, "xcom", default="") or "")
            if value:
                result.stdout += value
            elif EMPTY_XCOM in script:
                result.stdout += EMPTY_XCOM + "\n"
            else:
                result.stderr += f"cat: can't open '{XCOM_PATH}': No such file or directory\n"
                result.exit_code = 1
            return
        if script.startswith("kill") or "/proc/[0-9]*/comm" in script:
            self.kill(pod["metadata"]["uid"], container)
            # The sidecar's shell (and this exec session's own shell) die with the signal.
            result.killed_session = True
            return
        try:
            argv = shlex.split(script)
        except ValueError:
            result.stderr += f"sh: syntax error: {script}\n"
            result.exit_code = 2
            return
        self.exec_argv(pod, container, argv, result)

    def exec_argv(self, pod: Obj, container: str, argv: list[str], result: ExecResult) -> None:
        if not argv:
            return
        program = argv[0].rsplit("/", 1)[-1]
        if program in ("sh", "bash") and len(argv) >= 3 and argv[1] == "-c":
            self.exec_script(pod, container, argv[2], result)
        elif program == "echo":
            result.stdout += " ".join(argv[1:]) + "\n"
        elif program == "cat" and argv[1:] == [XCOM_PATH]:
            self.exec_script(pod, container, f"cat {XCOM_PATH}", result)
        elif program == "true":
            pass
        elif program == "false":
            result.exit_code = 1
        elif program == "exit":
            result.exit_code = int(argv[1]) % 256 if len(argv) > 1 and argv[1].isdigit() else 0
        elif program == "hostname":
            result.stdout += pod["metadata"]["name"] + "\n"
        elif program == "env":
            result.stdout += f"HOSTNAME={pod['metadata']['name']}\n"
        elif program == "kill":
            self.exec_script(pod, container, " ".join(argv), result)
        else:
            result.stderr += f"sh: {argv[0]}: not found\n"
            result.exit_code = 127
