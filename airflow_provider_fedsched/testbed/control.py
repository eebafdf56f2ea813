"""Real faults by name, and the control socket through which ``fedsched testbed fault`` asks for them.

``fedsched testbed up`` owns its members' processes (a restarted etcd must be its child, so that ``down``
and the end of ``up`` stop it), so faults run there: ``up`` serves ``control.sock`` in the state dir (a unix
socket, mode 0600: whoever may read the state dir's keys may disturb the test bed, nobody else), one JSON
request per connection, ``{"member": NAME, "kind": KIND, "args": {KEY: VALUE}}``, answered with
``{"ok": true, "message": ...}`` or ``{"ok": false, "error": ..., "bad_input": bool}``. Faults run one at a
time. Each returns once it is in force (a node tainted, a quota enforced, a binding gone from the
authorizer's answers), as the simulator's do.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import socketserver
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client

from airflow_provider_fedsched.federation.resources import QuantityError, parse_quantity
from airflow_provider_fedsched.sim.handles import wait_for
from airflow_provider_fedsched.testbed import rbac
from airflow_provider_fedsched.testbed.federation import TestbedFederation

SOCKET = "control.sock"
MAX_REQUEST_BYTES = 64 * 1024


@dataclass(frozen=True)
class FaultKind:
    help: str
    required: tuple[str, ...] = ()
    optional: tuple[str, ...] = ()
    resources: bool = False
    """Takes RESOURCE=QUANTITY arguments besides its named ones (``quota``)."""


TESTBED_FAULTS: dict[str, FaultKind] = {
    "pause-apiserver": FaultKind(
        "SIGSTOP kube-apiserver: connections are accepted and never answered (a hung control plane)"
    ),
    "resume-apiserver": FaultKind("SIGCONT kube-apiserver"),
    "down": FaultKind("end kube-apiserver: connections are refused (as `sim fault down`)"),
    "up": FaultKind("start kube-apiserver again on the same port and etcd; returns once /readyz is ok"),
    "kill-etcd": FaultKind("SIGKILL etcd: kube-apiserver stays up with no storage (reads and writes fail)"),
    "restart-etcd": FaultKind("start etcd again over its data; returns once kube-apiserver is ready"),
    "pause-scheduler": FaultKind("SIGSTOP kube-scheduler: new pods stay Pending, no events"),
    "resume-scheduler": FaultKind("SIGCONT kube-scheduler"),
    "node-not-ready": FaultKind(
        "node=NAME: kwok stops its kubelet; returns once NotReady with the unreachable taints",
        required=("node",),
    ),
    "node-ready": FaultKind(
        "node=NAME: kwok plays its kubelet again; returns once Ready", required=("node",)
    ),
    "delete-node": FaultKind(
        "node=NAME: delete the Node object (its pods are garbage-collected)", required=("node",)
    ),
    "quota": FaultKind(
        "[namespace=NS] [name=compute] RESOURCE=QUANTITY...: set that ResourceQuota's hard limits, returns "
        "once enforced (e.g. requests.cpu=2 pods=5); no RESOURCE removes it",
        optional=("namespace", "name"),
        resources=True,
    ),
    "revoke-rbac": FaultKind(
        "delete the provider identity's bindings of deploy/rbac-cluster.yaml and deploy/rbac.yaml; "
        "returns once its requests are denied"
    ),
    "restore-rbac": FaultKind("bind the provider identity again; returns once its requests are allowed"),
}


class FaultRefused(Exception):
    """Bad input (an unknown member, kind, node or argument) or a fault the member's state rules out."""


class ControlUnavailable(Exception):
    """Nothing answers on the state dir's control socket."""


def check_fault(members: list[str], member: str, kind: str, args: dict[str, str]) -> None:
    """What can be refused without the member's help: names and argument keys."""
    if member not in members:
        raise FaultRefused(f"unknown member {member!r}; members: {', '.join(members)}")
    if kind not in TESTBED_FAULTS:
        raise FaultRefused(f"unknown fault kind {kind!r}; known: {', '.join(TESTBED_FAULTS)}")
    spec = TESTBED_FAULTS[kind]
    missing = [key for key in spec.required if not args.get(key)]
    if missing:
        raise FaultRefused(f"fault {kind} needs {', '.join(f'{key}=...' for key in missing)}")
    if spec.resources:
        for key, value in args.items():
            if key in spec.optional:
                continue
            try:
                parse_quantity(value)
            except QuantityError as exc:
                raise FaultRefused(f"fault {kind}: {key}={value!r}: {exc}") from None
        return
    extra = sorted(set(args) - set(spec.required) - set(spec.optional))
    if extra:
        takes = ", ".join(spec.required + spec.optional) or "no argument"
        raise FaultRefused(f"fault {kind}: unexpected argument {extra[0]!r} (it takes {takes})")


def _api_message(exc: client.ApiException) -> str:
    try:
        return str(json.loads(exc.body).get("message") or exc.reason)
    except (TypeError, ValueError, AttributeError):
        return str(exc.reason)


class FederationFaults:
    """The faults of one running test bed; :meth:`apply` runs one (callers serialize): the control socket's,
    and the soak's (which owns its test bed)."""

    def __init__(self, fed: TestbedFederation) -> None:
        self.fed = fed

    def apply(self, member: str, kind: str, args: dict[str, str]) -> str:
        check_fault(list(self.fed.clusters), member, kind, args)
        cluster = self.fed.clusters[member]
        processes = cluster.processes
        if kind in ("pause-apiserver", "resume-apiserver", "pause-scheduler", "resume-scheduler"):
            verb, component = kind.split("-", 1)
            proc = processes[f"kube-{component}"]
            if not proc.alive():
                raise FaultRefused(f"member {member}: {proc.name} is not running")
            if verb == "pause":
                proc.pause()
                return f"{member}: {proc.name} paused (SIGSTOP to pid {proc.pid})"
            proc.resume()
            return f"{member}: {proc.name} resumed (SIGCONT to pid {proc.pid})"
        if kind == "down":
            cluster.stop_apiserver()
            return f"{member}: kube-apiserver ended; {cluster.url} refuses connections"
        if kind == "up":
            self._needs_running(member, "etcd")
            cluster.start_apiserver()
            self.fed.write_state()
            return f"{member}: kube-apiserver ready at {cluster.url} (pid {processes['kube-apiserver'].pid})"
        if kind == "kill-etcd":
            pid = processes["etcd"].pid
            cluster.kill_etcd()
            return f"{member}: etcd killed (SIGKILL to pid {pid})"
        if kind == "restart-etcd":
            cluster.start_etcd()
            self.fed.write_state()
            return f"{member}: etcd running again (pid {processes['etcd'].pid})"
        # The rest talks to the API server: refuse at once rather than hang on a stopped one.
        self._needs_running(member, "etcd")
        self._needs_running(member, "kube-apiserver")
        try:
            return self._through_the_api(member, kind, args)
        except client.ApiException as exc:
            if exc.status in (400, 404, 422):
                raise FaultRefused(f"fault {kind} on {member}: {_api_message(exc)}") from None
            raise

    def _needs_running(self, member: str, name: str) -> None:
        proc = self.fed.clusters[member].processes[name]
        if not proc.alive():
            fix = "restart-etcd" if name == "etcd" else "up"
            raise FaultRefused(f"member {member}: {name} is not running (fault {fix} first)")
        if proc.paused():
            fix = "resume-apiserver" if name == "kube-apiserver" else "resume"
            raise FaultRefused(f"member {member}: {name} is paused (fault {fix} first)")

    def _through_the_api(self, member: str, kind: str, args: dict[str, str]) -> str:
        cluster, handle = self.fed.clusters[member], self.fed.handles[member]
        if kind in ("node-not-ready", "node-ready", "delete-node"):
            node = args["node"]
            if handle.node(node) is None:
                names = ", ".join(n["metadata"]["name"] for n in handle.nodes()) or "none"
                raise FaultRefused(f"fault {kind}: no node {node!r} in member {member}; nodes: {names}")
            if kind == "node-not-ready":
                handle.faults.node_not_ready(node)
                return f"{member}: node {node} NotReady and tainted unreachable"
            if kind == "node-ready":
                handle.faults.node_ready(node)
                return f"{member}: node {node} Ready"
            handle.core.delete_node(node)
            wait_for(lambda: handle.node(node) is None, 30, interval=0.2, message=f"node {node} gone")
            return f"{member}: node {node} deleted"
        if kind == "quota":
            hard = dict(args)
            namespace = hard.pop("namespace", "default")
            name = hard.pop("name", "compute")
            handle.core.read_namespace(namespace)  # 404: refused, naming the namespace
            if not hard:
                handle.core.delete_namespaced_resource_quota(name, namespace)
                return f"{member}: quota {namespace}/{name} removed"
            cluster.set_quota(namespace, hard, name)
            limits = " ".join(f"{key}={value}" for key, value in hard.items())
            return f"{member}: quota {namespace}/{name} enforced: {limits}"
        api, namespace = cluster.admin(), cluster.config.task_namespace
        if kind == "revoke-rbac":
            removed = rbac.revoke_bindings(api)
            wait_for(
                lambda: (
                    not rbac.provider_may(api, "list", "nodes")
                    and not rbac.provider_may(api, "create", "pods", namespace)
                ),
                30,
                interval=0.2,
                message="the provider's requests denied",
            )
            return f"{member}: provider identity unbound ({', '.join(removed) or 'no binding was left'})"
        namespaces = rbac.restore_bindings(api)
        wait_for(
            lambda: (
                rbac.provider_may(api, "list", "nodes")
                and rbac.provider_may(api, "create", "pods", namespace)
            ),
            30,
            interval=0.2,
            message="the provider's requests allowed",
        )
        return f"{member}: provider identity bound again (cluster-wide and in {', '.join(namespaces)})"


@contextlib.contextmanager
def _address(path: Path) -> Iterator[str]:
    """A unix socket's path holds at most 107 bytes: a longer one is reached through its folder's
    descriptor (Linux resolves /proc/self/fd/N as the folder)."""
    if len(os.fsencode(path)) < 100:
        yield str(path)
        return
    fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        yield f"/proc/self/fd/{fd}/{path.name}"
    finally:
        os.close(fd)


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    faults: FederationFaults
    lock: threading.Lock


class _Handler(socketserver.StreamRequestHandler):
    server: _Server

    def handle(self) -> None:
        try:
            request = json.loads(self.rfile.readline(MAX_REQUEST_BYTES))
            member, kind, args = request["member"], request["kind"], request.get("args") or {}
            if not (isinstance(member, str) and isinstance(kind, str) and isinstance(args, dict)):
                raise TypeError("member and kind are strings, args an object")
            args = {str(key): str(value) for key, value in args.items()}
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            self._answer({"ok": False, "error": f"malformed request: {exc}", "bad_input": True})
            return
        with self.server.lock:
            try:
                message = self.server.faults.apply(member, kind, args)
            except FaultRefused as exc:
                self._answer({"ok": False, "error": str(exc), "bad_input": True})
                return
            except Exception as exc:  # the server's boundary: every failure is an answer, not a traceback
                text = _api_message(exc) if isinstance(exc, client.ApiException) else str(exc)
                self._answer({"ok": False, "error": f"fault {kind} on {member} failed: {text}"})
                return
        self._answer({"ok": True, "message": message})

    def _answer(self, body: dict[str, Any]) -> None:
        with contextlib.suppress(OSError):  # the asking process went away: the fault stands
            self.wfile.write(json.dumps(body).encode() + b"\n")


class ControlServer:
    """``control.sock`` in the state dir, served on daemon threads until :meth:`stop`."""

    def __init__(self, fed: TestbedFederation) -> None:
        self.path = fed.state_dir / SOCKET
        self.path.unlink(missing_ok=True)  # a previous run's
        with _address(self.path) as address:
            old_umask = os.umask(0o177)  # created 0600, never readable by others even for a moment
            try:
                self._server = _Server(address, _Handler)
            finally:
                os.umask(old_umask)
        self._server.faults = FederationFaults(fed)
        self._server.lock = threading.Lock()
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="testbed-control", daemon=True
        )

    def start(self) -> ControlServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self.path.unlink(missing_ok=True)


def ask(state_dir: Path, member: str, kind: str, args: dict[str, str], timeout: float) -> dict[str, Any]:
    """Send one fault to the ``up`` serving ``state_dir`` and wait for its answer."""
    path = state_dir / SOCKET
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        try:
            with _address(path) as address:
                sock.connect(address)
        except (FileNotFoundError, ConnectionRefusedError, NotADirectoryError) as exc:
            raise ControlUnavailable(f"no control socket answers at {path} ({exc.strerror})") from None
        sock.sendall(json.dumps({"member": member, "kind": kind, "args": args}).encode() + b"\n")
        data = b""
        while not data.endswith(b"\n"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    try:
        answer = json.loads(data)
    except ValueError:
        raise ControlUnavailable(f"the test bed at {path} ended without answering") from None
    return dict(answer)
