"""The pod agent: what a container would have printed or left behind, served by kwok's Logs and Exec.

For each new pod it writes the container logs (the ``sim.fedsched.io/logs`` annotation, as the simulator's
kubelet renders it) in the CRI log format kwok reads, and the XCom sidecar's ``return.json``; it creates a
``Logs`` and an ``Exec`` object named after the pod (owned by it, so the garbage collector removes them),
and then marks the pod prepared: only then does kwok start it. kwok answers ``exec`` with a real
``/bin/sh`` in the pod's directory as an unprivileged user; ``/airflow/xcom`` resolves to that directory
(a link to ``/proc/self/cwd``) and the sidecar's ``kill`` reaches a ``pgrep`` that marks the sidecar
killed, which a kwok Stage turns into its termination.
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import os
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kubernetes import client, watch

from airflow_provider_fedsched.sim.controllers.runtime import annotation, log_lines
from airflow_provider_fedsched.testbed.stages import PREPARED, SIDECAR, SIDECAR_KILLED

log = logging.getLogger(__name__)
XCOM_DIR = Path("/airflow/xcom")
NOBODY = 65534
ENDED = ".ended"  # a folder of an ended container's log generations (see PodAgent._end_late_followers)
FOLLOWER_SCAN_INTERVAL = 0.5
LOG_SWAP_TRIES = 6
"""Times the agent offers kwok the final log file (waiting 0.3 s, then twice as long each time)."""
_PGREP = """#!/bin/sh
# The XCom sidecar is stopped with `kill -2 $(pgrep -u $(id -u) -f 'sh')`: mark it killed for the
# test bed (a kwok Stage ends the sidecar) and name this exec session's shell, which the kill ends too.
: > sidecar-killed
echo "$PPID"
"""


class XComUnavailable(RuntimeError):
    """``/airflow/xcom`` exists on this machine and is not the test bed's link."""


def ensure_xcom_link() -> None:
    """``/airflow/xcom`` -> ``/proc/self/cwd``: the sidecar's absolute path lands in each pod's directory."""
    target = "/proc/self/cwd"
    if XCOM_DIR.is_symlink() and os.readlink(XCOM_DIR) == target:
        return
    if XCOM_DIR.exists() or XCOM_DIR.is_symlink():
        raise XComUnavailable(
            f"{XCOM_DIR} exists and is not a link to {target}: the test bed's XCom needs it"
        )
    XCOM_DIR.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        XCOM_DIR.symlink_to(target)


def _cri_lines(lines: list[str]) -> str:
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return "".join(f"{now} stdout F {line}\n" for line in lines)


class PodAgent:
    """One cluster's agent, on a daemon thread; ``root`` must be traversable by the exec user."""

    def __init__(
        self, api: client.ApiClient, root: Path, reader_pid: Callable[[], int] | None = None
    ) -> None:
        self.api = api
        self._reader_pid = reader_pid  # kwok's process: whose open log files tell a follower is waiting
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.root = root
        self.shims = root / "bin"
        self.root.mkdir(parents=True, exist_ok=True)
        self.root.chmod(0o711)
        self.shims.mkdir(exist_ok=True)
        pgrep = self.shims / "pgrep"
        pgrep.write_text(_PGREP)
        pgrep.chmod(0o755)
        self.as_root = os.geteuid() == 0
        self._stop = threading.Event()
        self._watch: watch.Watch | None = None
        self._ended: set[tuple[str, str]] = set()
        self._sidecars: dict[str, tuple[str, str]] = {}  # uid -> (namespace, name) still running a sidecar
        self._thread = threading.Thread(target=self._run, name=f"testbed-agent-{root.name}", daemon=True)
        self._poller = threading.Thread(
            target=self._poll_kills, name=f"testbed-kills-{root.name}", daemon=True
        )

    def start(self) -> PodAgent:
        self._thread.start()
        self._poller.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._watch is not None:
            self._watch.stop()
        self._thread.join(timeout=10)
        self._poller.join(timeout=10)
        shutil.rmtree(self.root, ignore_errors=True)

    # -- the watch -----------------------------------------------------------------------------------
    def _run(self) -> None:
        resource_version = ""
        while not self._stop.is_set():
            try:
                if not resource_version:
                    listed = self.core.list_pod_for_all_namespaces()
                    for pod in listed.items:
                        self._on_pod("ADDED", self.api.sanitize_for_serialization(pod))
                    resource_version = listed.metadata.resource_version
                self._watch = watch.Watch()
                for event in self._watch.stream(
                    self.core.list_pod_for_all_namespaces,
                    resource_version=resource_version,
                    timeout_seconds=60,
                    _request_timeout=90,
                ):
                    obj = event["raw_object"]
                    resource_version = obj["metadata"].get("resourceVersion", resource_version)
                    self._on_pod(event["type"], obj)
                    if self._stop.is_set():
                        break
            except client.ApiException as exc:
                if exc.status == 410:
                    resource_version = ""
                elif not self._stop.is_set():
                    log.warning("test bed agent %s: %s", self.root.name, exc)
                    self._stop.wait(0.5)
            except Exception as exc:
                if not self._stop.is_set():
                    log.warning("test bed agent %s: %s", self.root.name, exc)
                    self._stop.wait(0.5)

    def _on_pod(self, kind: str, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        uid = meta["uid"]
        if kind == "DELETED":
            self._sidecars.pop(uid, None)
            self._ended = {key for key in self._ended if key[0] != uid}
            shutil.rmtree(self.root / uid, ignore_errors=True)
            return
        if kind == "ERROR":
            return
        annotations = meta.get("annotations") or {}
        containers = [c["name"] for c in pod["spec"].get("containers") or []]
        statuses = (pod.get("status") or {}).get("containerStatuses") or []
        ended = [cs["name"] for cs in statuses if "terminated" in (cs.get("state") or {})]
        if meta.get("deletionTimestamp"):
            ended = containers
        for container in ended:
            self._end_logs(meta["namespace"], meta["name"], uid, container)
        if SIDECAR in containers and annotations.get(SIDECAR_KILLED) != "true":
            self._sidecars[uid] = (meta["namespace"], meta["name"])
        if annotations.get(PREPARED) == "true" or meta.get("deletionTimestamp"):
            return
        try:
            self._prepare(pod)
        except client.ApiException as exc:
            if exc.status not in (404, 409):
                log.warning("test bed agent: preparing %s/%s: %s", meta["namespace"], meta["name"], exc)

    # -- what the containers print and leave -----------------------------------------------------------
    def _prepare(self, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        namespace, name, uid = meta["namespace"], meta["name"], meta["uid"]
        directory = self.root / uid
        directory.mkdir(exist_ok=True)
        containers = [c["name"] for c in pod["spec"].get("containers") or []]
        containers += [c["name"] for c in pod["spec"].get("initContainers") or []]
        logs = []
        for container in containers:
            path = directory / f"{container}.log"
            path.write_text(_cri_lines([] if container == SIDECAR else log_lines(pod, container)))
            logs.append({"containers": [container], "logsFile": str(path), "follow": True})
        xcom = annotation(pod, "xcom", default=None)
        if xcom:
            (directory / "return.json").write_text(str(xcom))
        if self.as_root:
            for path in [directory, *directory.iterdir()]:
                os.chown(path, NOBODY, NOBODY)
        owner = [{"apiVersion": "v1", "kind": "Pod", "name": name, "uid": uid}]
        local: dict[str, Any] = {
            "workDir": str(directory),
            "envs": [{"name": "PATH", "value": f"{self.shims}:/usr/local/bin:/usr/bin:/bin"}],
        }
        if self.as_root:
            local["securityContext"] = {"runAsUser": NOBODY, "runAsGroup": NOBODY}
        for plural, kind, spec in (
            ("logs", "Logs", {"logs": logs}),
            ("execs", "Exec", {"execs": [{"local": local}]}),
        ):
            body = {
                "apiVersion": "kwok.x-k8s.io/v1alpha1",
                "kind": kind,
                "metadata": {"name": name, "namespace": namespace, "ownerReferences": owner},
                "spec": spec,
            }
            try:
                self.custom.create_namespaced_custom_object(
                    "kwok.x-k8s.io", "v1alpha1", namespace, plural, body
                )
            except client.ApiException as exc:
                if exc.status != 409:
                    raise
        self._annotate(namespace, name, uid, PREPARED)

    def _end_logs(self, namespace: str, name: str, uid: str, container: str) -> None:
        """End every follower of a container that can write no more (kwok cannot tell: it asks no runtime).

        The log moves to a final file that the pod's Logs object then names; where it was, a directory
        appears, which ends a follower's read (kwok's CRI log reader reopens the recreated path and fails).
        """
        path = self.root / uid / f"{container}.log"
        final = self.root / uid / f"{container}.final.log"
        if (uid, container) in self._ended or not path.is_file():
            return
        self._ended.add((uid, container))
        generations = self.root / uid / f"{container}{ENDED}"
        generations.mkdir(exist_ok=True)
        shutil.copyfile(path, generations / "0.log")
        final.symlink_to(generations / "0.log")
        try:
            logs = self.custom.get_namespaced_custom_object(
                "kwok.x-k8s.io", "v1alpha1", namespace, "logs", name
            )
            for entry in logs["spec"]["logs"]:
                if entry.get("logsFile") == str(path):
                    entry["logsFile"] = str(final)
            self.custom.replace_namespaced_custom_object(
                "kwok.x-k8s.io", "v1alpha1", namespace, "logs", name, logs
            )
        except client.ApiException as exc:
            if exc.status != 404:
                log.warning("test bed agent: logs of %s/%s: %s", namespace, name, exc)
        # kwok reads the Logs objects through a watch: the old file may go only once kwok names the final
        # one. A plain read of the log tells: if kwok still reads the old path, the file comes back and
        # kwok's watch is given longer (a fixed 0.3 s was once too short: "no logs found").
        wait = 0.3
        for _ in range(LOG_SWAP_TRIES):
            self._stop.wait(wait)
            path.unlink(missing_ok=True)
            path.mkdir(exist_ok=True)
            if self._log_readable(namespace, name, container):
                return
            path.rmdir()
            shutil.copyfile(final, path)
            wait *= 2
        log.warning("test bed agent: kwok still reads the first log of %s/%s %s", namespace, name, container)

    def _log_readable(self, namespace: str, name: str, container: str) -> bool:
        """A plain read of the container's log through the API server answers (400: kwok found no file)."""
        try:
            self.core.read_namespaced_pod_log(name, namespace, container=container, _request_timeout=5)
        except client.ApiException as exc:
            return bool(exc.status != 400)
        except Exception:  # no answer: nothing this agent can mend
            return True
        return True

    def _annotate(self, namespace: str, name: str, uid: str, key: str) -> None:
        # The uid in the patch is a precondition: a newer pod of the same name is never marked.
        self.core.patch_namespaced_pod(
            name, namespace, {"metadata": {"uid": uid, "annotations": {key: "true"}}}
        )

    def _end_late_followers(self) -> None:
        """A kubelet ends a log stream of a container that has ended once the log is read; kwok follows
        until the file is recreated (it asks no runtime). So whenever kwok holds an ended container's log
        open -- a follower that came after the end, e.g. a restarted task reattaching to a finished pod --
        the log moves to its next generation (the final link then names it) and the old one's path is
        recreated as a directory, which ends that read. A plain read has its data already: it is unharmed."""
        if self._reader_pid is None:
            return
        fds = Path(f"/proc/{self._reader_pid()}/fd")
        try:
            held = {os.readlink(fds / fd) for fd in os.listdir(fds)}
        except OSError:
            return  # kwok is restarting or gone
        for target in held:
            current = Path(target)
            ended = current.parent.name.endswith(ENDED) and current.is_relative_to(self.root)
            if ended and current.is_file():
                with contextlib.suppress(OSError, ValueError):
                    self._next_generation(current)

    @staticmethod
    def _next_generation(current: Path) -> None:
        following = current.with_name(f"{int(current.stem) + 1}.log")
        shutil.copyfile(current, following)
        link = current.parent.with_name(current.parent.name.removesuffix(ENDED) + ".final.log")
        staged = link.with_name(link.name + ".next")
        staged.unlink(missing_ok=True)
        staged.symlink_to(following)
        os.replace(staged, link)
        current.unlink()
        current.mkdir()

    def _poll_kills(self) -> None:
        last_scan = 0.0
        while not self._stop.wait(0.1):
            if time.monotonic() - last_scan >= FOLLOWER_SCAN_INTERVAL:
                last_scan = time.monotonic()
                self._end_late_followers()
            for uid, (namespace, name) in list(self._sidecars.items()):
                if (self.root / uid / "sidecar-killed").exists():
                    self._sidecars.pop(uid, None)
                    try:
                        self._annotate(namespace, name, uid, SIDECAR_KILLED)
                    except client.ApiException as exc:
                        log.warning("test bed agent: sidecar of %s/%s: %s", namespace, name, exc)
