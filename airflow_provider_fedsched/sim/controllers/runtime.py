"""The simulated container runtime: what a container prints over its run, and exec into it.

How long a container runs, how it exits and restarts is the pod stages' (``pod-stages.yaml``); the runtime
writes a running container's output and answers exec. Annotations (prefix ``sim.fedsched.io/``):
``duration`` run seconds (default 1; the output is spread over it), ``logs`` (JSON list or newline text;
``logs.CONTAINER`` for one container) and ``xcom`` (what the xcom sidecar's ``return.json`` holds).
``${NAME}`` in log lines becomes the value of the container's env var ``NAME`` (literal ``value`` entries).
All durations are simulated seconds, scaled by the cluster clock.

Exec runs a handful of commands: enough for KubernetesPodOperator's xcom sidecar (``cat return.json`` or the
empty marker, then ``kill -2`` on stdin, which marks the pod ``sidecar-killed`` for its stage), plus
``echo``, ``cat``, ``true``, ``false``, ``exit N``, ``hostname`` and ``env``. Anything else ends with exit
code 127.
"""

from __future__ import annotations

import asyncio
import json
import re
import shlex
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from airflow_provider_fedsched.sim.apiserver.nodeagent import ExecResult, LogBuffer
from airflow_provider_fedsched.sim.apiserver.store import Obj
from airflow_provider_fedsched.sim.util import Clock

PREFIX = "sim.fedsched.io/"
SIDECAR = "airflow-xcom-sidecar"
SIDECAR_KILLED = PREFIX + "sidecar-killed"
"""Set on a pod once its XCom sidecar's kill reached it (here by exec, on the test bed by its agent)."""
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

    def __init__(self, clock: Clock, on_kill: Callable[[str, str], None] | None = None) -> None:
        self.clock = clock
        self.on_kill = on_kill
        self.logs: dict[tuple[str, str], LogBuffer] = {}  # (uid, container) current instance
        self.previous_logs: dict[tuple[str, str], LogBuffer] = {}
        self.kill_events: dict[tuple[str, str], asyncio.Event] = {}
        # Lines not written yet, with the loop time each is due: a container that ends writes those
        # due by then, however late a busy loop ran its writer (its end is a stage's timer, not this).
        self._due: dict[tuple[str, str], list[tuple[float, str]]] = {}

    async def run(self, pod: Obj, container: str, started: float | None = None) -> None:
        """Write one running container instance's output over its ``duration`` from ``started`` (the
        loop's time the kubelet saw it start); its end is the stages'."""
        key = (pod["metadata"]["uid"], container)
        buffer = self.logs.setdefault(key, LogBuffer())
        loop = asyncio.get_running_loop()
        if container == SIDECAR:
            await self.kill_events.setdefault(key, asyncio.Event()).wait()
            buffer.finish()
            await loop.create_future()  # killed: it is the stage that ends it
        lines = log_lines(pod, container)
        step = float_annotation(pod, "duration", 1.0) / (len(lines) + 1)
        start = loop.time() if started is None else started
        due = self._due[key] = [
            (start + self.clock.real(step * (i + 1)), line) for i, line in enumerate(lines)
        ]
        while due:
            await asyncio.sleep(max(0.0, due[0][0] - loop.time()))
            if not due or buffer.done:
                return  # the container ended meanwhile and its end wrote what was due
            buffer.append(due.pop(0)[1])
        # Said all it says: the instance runs on, silent, until its end (a stage) stops this writer.
        await loop.create_future()

    def restarted(self, uid: str, container: str) -> None:
        """A new instance of the container starts: the old output becomes ``previous``."""
        key = (uid, container)
        self._due.pop(key, None)
        if key in self.logs:
            self.previous_logs[key] = self.logs.pop(key)

    def kill(self, uid: str, container: str) -> bool:
        """Stop a sidecar-style container (what the xcom ``kill -2`` does); its stage ends it."""
        event = self.kill_events.get((uid, container))
        if event is None:
            return False
        event.set()
        if self.on_kill is not None:
            self.on_kill(uid, container)
        return True

    def end_logs(self, uid: str, containers: Iterable[str] | None = None) -> None:
        """The containers produce no more output: their follow streams end."""
        for key, buffer in self.logs.items():
            if key[0] == uid and (containers is None or key[1] in containers) and not buffer.done:
                due = self._due.pop(key, [])
                if due:
                    now = asyncio.get_running_loop().time()
                    for at, line in due:
                        if at <= now:
                            buffer.append(line)
                    due.clear()  # the writer, if it still runs, has nothing left
                buffer.finish()

    def forget(self, uid: str) -> None:
        for key in [k for k in self.logs if k[0] == uid]:
            self.logs.pop(key).finish()
        for table in (self.previous_logs, self.kill_events, self._due):
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
