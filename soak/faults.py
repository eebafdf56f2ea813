"""Faults on a schedule while the soak runs, and the injector that applies them.

Times are seconds after the DAG run was triggered. A fault that needs a target (a running pod, a task
whose worker is attached) looks for one for up to a minute and is recorded as skipped if none shows up;
only applied faults count. Each fault that lasts (latency, a node NotReady, a filled quota, a stopped
worker) is undone by the injector at its end time; a cluster ``down`` comes back by itself (the sim's
``seconds`` argument).
"""

from __future__ import annotations

import functools
import heapq
import os
import random
import signal
import threading
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from soak.clusters import ClusterError, Clusters
from soak.deployment import Airflow
from soak.load import CLUSTERS, NAMESPACE, TASK_LABEL, VAULT_NAMESPACE, Manifest, Profile

if TYPE_CHECKING:
    from soak.testbed import TestbedGround

QUOTA_NAME = "soak-quota-fill"


@dataclass(frozen=True)
class Fault:
    at: float
    kind: str
    args: dict[str, Any] = field(default_factory=dict)
    patience: float = 60.0
    """Seconds to keep looking for a target (a Running pod, a running task) before the fault is skipped."""


@dataclass
class FaultRecord:
    kind: str
    scheduled: float
    applied_at: float | None = None
    ended_at: float | None = None
    target: str = ""
    detail: str = ""
    skipped: str = ""
    task: tuple[str, int] | None = None
    """The task instance the fault acted on directly (marked failed, its worker killed), if any."""

    def line(self) -> str:
        when = f"t={self.applied_at:.0f}s" if self.applied_at is not None else f"t={self.scheduled:.0f}s"
        what = f"skipped: {self.skipped}" if self.skipped else self.detail
        return f"fault {when} {self.kind} {self.target}: {what}"


def schedule(profile: Profile, executor: str, ground: str = "sim") -> list[Fault]:
    grace = profile.unreachable_grace
    if ground == "testbed":
        return testbed_schedule(profile, executor)
    if profile.faults == "ci":
        return [
            Fault(45, "down", {"cluster": "east-a", "seconds": round(grace * 2.5)}),
            Fault(70, "kill-supervisor"),
            Fault(95, "restart-triggerer"),
            Fault(120, "mark-failed"),
        ]
    faults = [
        Fault(0, "quota-fill", {"cluster": "south", "namespace": VAULT_NAMESPACE, "cpu": "2"}),
        Fault(50, "fail", {"cluster": "east-a", "status": 503, "times": 25}),
        Fault(65, "latency", {"cluster": "east-b", "seconds": 2.0, "duration": 40}),
        Fault(80, "down", {"cluster": "north", "seconds": round(grace * 0.4)}),
        Fault(110, "evict", {"preemptible": True}),
        Fault(125, "evict", {"preemptible": False}),
        Fault(140, "node-not-ready", {"cluster": "west", "duration": 90}),
        Fault(165, "kill-supervisor"),
        Fault(190, "restart-triggerer"),
        Fault(215, "mark-failed"),
        Fault(240, "down", {"cluster": "east-a", "seconds": round(grace * 2.5)}),
        Fault(275, "quota-fill", {"cluster": "east-b", "namespace": NAMESPACE, "duration": 80}),
        Fault(300, "fail", {"cluster": "west", "status": 500, "times": 15}),
        Fault(310, "latency", {"cluster": "north", "seconds": 1.5, "duration": 30}),
    ]
    if executor == "celery":
        faults.append(Fault(330, "kill-worker", {"worker": "worker-1", "pause": 20}))
    return faults


def testbed_schedule(profile: Profile, executor: str) -> list[Fault]:
    """Faults on the test bed's real parts (``fedsched testbed fault`` kinds) and on Airflow's processes."""
    grace = profile.unreachable_grace
    if profile.faults == "ci":
        # Faults are applied one at a time and some take seconds to be in force (a restarted etcd, a
        # tainted node): the ones that need a running or deferred task come first, while the load runs.
        return [
            Fault(35, "stop-apiserver", {"seconds": round(grace * 0.6), "deferrable": False}),
            Fault(55, "kill-supervisor"),
            Fault(65, "mark-failed"),
            Fault(75, "restart-triggerer"),
            Fault(90, "node-not-ready", {"duration": 40}),
            Fault(105, "kill-etcd", {"seconds": 20}),
            Fault(120, "restart-database", {"pause": 10}),
        ]
    faults = [
        Fault(0, "quota-fill", {"cluster": "south", "namespace": VAULT_NAMESPACE, "cpu": "2"}),
        Fault(40, "stop-apiserver", {"seconds": round(grace * 0.4), "deferrable": False}),
        Fault(70, "kill-etcd", {"seconds": 25}),
        Fault(100, "stop-scheduler", {"cluster": "east-b", "seconds": 120}),
        # A Running preemptible pod can be scarce here: east-b's scheduler is stopped and east-a's etcd has
        # just come back (two full runs at 747d7f9 and c4f7ae4 found none between 125 and 185 s).
        Fault(125, "evict", {"preemptible": True}, patience=300.0),
        Fault(140, "node-not-ready", {"duration": 90}),
        Fault(165, "kill-supervisor"),
        Fault(190, "restart-triggerer"),
        Fault(215, "mark-failed"),
        Fault(240, "stop-apiserver", {"cluster": "east-a", "seconds": round(grace * 2.5)}),
        Fault(275, "quota-fill", {"cluster": "east-b", "namespace": NAMESPACE, "duration": 80}),
        Fault(300, "revoke-rbac", {"cluster": "west", "seconds": 40}),
        Fault(330, "delete-node"),
        Fault(360, "restart-database", {"pause": 10}),
    ]
    if executor == "celery":
        faults.append(Fault(390, "kill-worker", {"worker": "worker-1", "pause": 20}))
    return faults


SILENCING = ("down", "node-not-ready", "stop-apiserver", "kill-etcd", "revoke-rbac", "delete-node")
"""The faults that keep a cluster's API (target ``cluster``) or a node (``cluster/node``) from answering
the provider while they last."""


def find_task_process(ti_id: str) -> int | None:
    """The task process of a task instance (its title is ``airflow worker -- <ti id>``)."""
    wanted = f"airflow worker -- {ti_id}".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if (entry / "cmdline").read_bytes().replace(b"\0", b" ").strip().startswith(wanted):
                return int(entry.name)
        except OSError:
            continue
    return None


def parent_pid(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[1])


class Injector:
    """Applies a fault schedule in a background thread, relative to ``t0`` (monotonic)."""

    def __init__(
        self,
        faults: list[Fault],
        clusters: Clusters | TestbedGround,
        airflow: Airflow,
        manifest: Manifest,
        run_id: str,
        t0: float,
        seed: int = 7,
        database: Any = None,
    ) -> None:
        self.clusters, self.airflow, self.manifest, self.run_id, self.t0 = (
            clusters,
            airflow,
            manifest,
            run_id,
            t0,
        )
        self.database = database
        """The metadata database's server (``soak.services.PostgresServer``), for ``restart-database``."""
        self.records: list[FaultRecord] = []
        self._undos: list[tuple[threading.Timer, Callable[[], None]]] = []
        self.silent: set[str] = set()
        """Clusters whose API server a fault holds stopped (or whose etcd is dead): not read for targets."""
        self._queue: list[tuple[float, int, Callable[[], None]]] = []
        self._counter = 0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._rng = random.Random(seed)
        self._thread = threading.Thread(target=self._loop, name="soak-faults", daemon=True)
        for fault in faults:
            record = FaultRecord(fault.kind, fault.at)
            self.records.append(record)
            self._at(fault.at, functools.partial(self._apply, fault, record, fault.at + fault.patience))
        self.errors: list[str] = []

    # -- timeline ----------------------------------------------------------------------------------------
    def now(self) -> float:
        return time.monotonic() - self.t0

    def _at(self, when: float, action: Callable[[], None]) -> None:
        with self._lock:
            self._counter += 1
            heapq.heappush(self._queue, (when, self._counter, action))

    def start(self) -> None:
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                due = self._queue[0][0] <= self.now() if self._queue else False
                action = heapq.heappop(self._queue)[2] if due else None
            if action is None:
                self._stop.wait(0.5)
                continue
            try:
                action()
            except Exception as exc:  # a fault that breaks must not stop the others
                self.errors.append(f"{type(exc).__name__}: {exc}")

    def finish(self) -> None:
        """Undo whatever is still in effect (run every pending end action now) and stop the thread."""
        self._stop.set()
        self._thread.join(timeout=30)
        with self._lock:
            pending = [a for _, _, a in sorted(self._queue)]
            self._queue.clear()
        for action in pending:
            try:
                action()
            except Exception as exc:
                self.errors.append(f"{type(exc).__name__}: {exc}")
        for timer, undo in self._undos:
            timer.cancel()
            undo()  # once only: a timer that already ran it left it done

    @property
    def applied(self) -> list[FaultRecord]:
        return [r for r in self.records if r.applied_at is not None]

    # -- faults ------------------------------------------------------------------------------------------
    def _apply(self, fault: Fault, record: FaultRecord, give_up: float) -> None:
        if self._stop.is_set():
            record.skipped = "the run ended first"
            return
        handler = getattr(self, "_" + fault.kind.replace("-", "_"))
        outcome = handler(record, **fault.args)
        if outcome is False:  # refused: the record says why
            return
        if outcome is None:  # no target yet: try again shortly
            if self.now() < give_up:
                self._at(self.now() + 3, lambda: self._apply(fault, record, give_up))
            else:
                record.skipped = record.skipped or "no target showed up"
            return
        record.applied_at = self.now()
        print(record.line(), flush=True)

    def _end(self, record: FaultRecord, after: float, undo: Callable[[], object]) -> None:
        """Undo the fault ``after`` seconds from now, on a timer of its own: a fault that looks for a
        target (and may wait on a silent cluster) must not hold a stopped API server stopped longer."""
        done = threading.Event()

        def run() -> None:
            with self._lock:
                if done.is_set():
                    return
                done.set()
            try:
                undo()
            except Exception as exc:
                self.errors.append(f"undoing {record.kind} {record.target}: {type(exc).__name__}: {exc}")
            record.ended_at = self.now()

        timer = threading.Timer(after, run)
        timer.daemon = True
        self._undos.append((timer, run))
        timer.start()

    def _fail(self, record: FaultRecord, cluster: str, status: int, times: int) -> bool:
        self.clusters.fault(cluster, "fail", status=status, times=times)
        record.target, record.detail = cluster, f"the next {times} API requests answer {status}"
        return True

    def _latency(self, record: FaultRecord, cluster: str, seconds: float, duration: float) -> bool:
        self.clusters.fault(cluster, "latency", seconds=seconds)
        self._end(record, duration, lambda: self.clusters.fault(cluster, "latency", seconds=0))
        record.target, record.detail = cluster, f"{seconds:g}s added to every API answer for {duration:g}s"
        return True

    def _down(self, record: FaultRecord, cluster: str, seconds: float) -> bool:
        self.clusters.fault(cluster, "down", seconds=seconds)
        record.ended_at = self.now() + seconds
        grace = self.manifest.unreachable_grace
        relation = "shorter" if seconds < grace else "longer"
        record.target = cluster
        record.detail = f"API refuses connections for {seconds:g}s ({relation} than the {grace:g}s grace)"
        return True

    def _quota_fill(
        self,
        record: FaultRecord,
        cluster: str,
        namespace: str,
        cpu: str | None = None,
        duration: float | None = None,
    ) -> bool:
        """Another tenant's job takes the namespace's quota: ``cpu`` given, a filler pod takes that much of
        a quota of that size; otherwise the quota is set to 1 cpu, below what the namespace already uses."""
        hard = cpu or "1"
        self.clusters.create(
            cluster,
            namespace,
            "resourcequotas",
            {"metadata": {"name": QUOTA_NAME}, "spec": {"hard": {"requests.cpu": hard, "pods": "50"}}},
        )
        if cpu:
            self.clusters.create(
                cluster,
                namespace,
                "pods",
                {
                    "metadata": {
                        "name": "other-team-job",
                        "annotations": {"sim.fedsched.io/duration": "36000"},
                    },
                    "spec": {
                        "restartPolicy": "Never",
                        "containers": [
                            {"name": "main", "image": "busybox", "resources": {"requests": {"cpu": cpu}}}
                        ],
                    },
                },
            )

        def release() -> None:
            if cpu:
                self.clusters.delete(cluster, namespace, "pods", "other-team-job")
            self.clusters.delete(cluster, namespace, "resourcequotas", QUOTA_NAME)

        self._end(record, duration if duration is not None else 10**6, release)
        record.target = f"{cluster}/{namespace}"
        held = f"for {duration:g}s" if duration is not None else "for the whole run"
        record.detail = (
            f"another team's {cpu}-cpu job fills the {cpu}-cpu quota {held}"
            if cpu
            else f"quota lowered to {hard} cpu, below what the namespace uses, {held}"
        )
        return True

    def _running_pods(
        self, predicate: Callable[[dict[str, Any]], bool] = lambda _: True
    ) -> list[tuple[str, dict[str, Any]]]:
        out = []
        for cluster in self.clusters.names:
            if cluster in self.silent:
                continue
            try:
                pods = self.clusters.pods(cluster, selector=TASK_LABEL)
            except ClusterError:
                continue  # down or failing right now: not a target
            for pod in pods:
                deleting = pod["metadata"].get("deletionTimestamp")
                if pod.get("status", {}).get("phase") == "Running" and not deleting and predicate(pod):
                    out.append((cluster, pod))
        return out

    def _group_of(self, pod: dict[str, Any]) -> dict[str, Any]:
        return self.manifest.group(pod["metadata"]["labels"][TASK_LABEL].rsplit(".", 1)[0])

    def _evict(self, record: FaultRecord, preemptible: bool) -> bool | None:
        candidates = self._running_pods(lambda p: self._group_of(p)["preemptible"] == preemptible)
        if not candidates:
            return None
        cluster, pod = self._rng.choice(candidates)
        meta = pod["metadata"]
        self.clusters.fault(cluster, "evict", namespace=meta["namespace"], name=meta["name"])
        kind = "preemptible" if preemptible else "non-preemptible"
        record.target = f"{cluster}/{meta['namespace']}/{meta['name']}"
        record.detail = f"node-pressure eviction of a Running {kind} pod ({meta['labels'][TASK_LABEL]})"
        return True

    def _node_not_ready(
        self, record: FaultRecord, duration: float, cluster: str | None = None
    ) -> bool | None:
        """The busiest node (of ``cluster``, or of any) stops reporting for ``duration`` seconds."""
        found = self._busiest(cluster, shared=True)
        if found is None:
            return None
        cluster, node, count = found
        try:
            self.clusters.fault(cluster, "node-not-ready", node=node)
        except Exception:  # not in force in time: the node is played again, and the fault counts as failed
            self.clusters.fault(cluster, "node-ready", node=node)
            raise
        self._end(record, duration, lambda: self.clusters.fault(cluster, "node-ready", node=node))
        record.target = f"{cluster}/{node}"
        record.detail = f"kubelet stops reporting for {duration:g}s with {count} soak pod(s) Running on it"
        return True

    def _running_task(self, deferrable: bool | None) -> tuple[dict[str, Any], str, dict[str, Any]] | None:
        """A task instance in state running whose pod is Running (its worker attached, for sync tasks)."""
        pods = {p["metadata"]["labels"][TASK_LABEL]: (c, p) for c, p in self._running_pods()}
        tis = [
            ti
            for ti in self.airflow.api.task_instances(self.manifest.dag_id, self.run_id)
            if ti["state"] in ("running", "deferred")
            and f"{ti['task_id']}.{ti['map_index']}" in pods
            and self.manifest.group(ti["task_id"])["expect"] == "succeed"
            and (deferrable is None or self.manifest.group(ti["task_id"])["deferrable"] == deferrable)
            and (deferrable is not False or ti["state"] == "running")
        ]
        if not tis:
            return None
        ti = self._rng.choice(tis)
        cluster, pod = pods[f"{ti['task_id']}.{ti['map_index']}"]
        return ti, cluster, pod

    def _kill_supervisor(self, record: FaultRecord) -> bool | None:
        found = self._running_task(deferrable=False)
        if found is None:
            return None
        ti, cluster, pod = found
        task_pid = find_task_process(ti["id"])
        supervisor = parent_pid(task_pid) if task_pid else None
        if supervisor is None:
            return None
        os.kill(supervisor, signal.SIGKILL)
        record.task = (ti["task_id"], ti["map_index"])
        record.target = f"{ti['task_id']}[{ti['map_index']}] try {ti['try_number']}"
        record.detail = (
            f"SIGKILL to its supervisor (pid {supervisor}; task process {task_pid} orphaned) while its pod "
            f"{cluster}/{pod['metadata']['name']} runs"
        )
        return True

    def _kill_worker(self, record: FaultRecord, worker: str, pause: float) -> bool:
        process = self.airflow.processes[worker]
        assert process.popen is not None
        os.killpg(process.popen.pid, signal.SIGKILL)
        process.popen.wait(timeout=30)

        def restart() -> None:
            process.restarts += 1
            process.start()

        self._end(record, pause, restart)
        record.target = worker
        record.detail = f"SIGKILL to the whole Celery worker (main and pool processes), back after {pause:g}s"
        return True

    def _restart_triggerer(self, record: FaultRecord) -> bool | None:
        deferred = sum(
            ti["state"] == "deferred"
            for ti in self.airflow.api.task_instances(self.manifest.dag_id, self.run_id)
        )
        if not deferred:  # a restart with nothing deferred tests nothing: wait for deferred tasks
            return None
        self.airflow.restart("triggerer")
        record.target = "triggerer"
        record.detail = f"SIGTERM, then started again ({deferred} task(s) deferred at the time)"
        return True

    def _mark_failed(self, record: FaultRecord) -> bool | None:
        found = self._running_task(deferrable=None)
        if found is None:
            return None
        ti, cluster, pod = found
        run = urllib.parse.quote(self.run_id, safe="")
        path = (
            f"/api/v2/dags/{self.manifest.dag_id}/dagRuns/{run}/taskInstances/"
            f"{ti['task_id']}/{ti['map_index']}"
        )
        status, body = self.airflow.api.request("PATCH", path, {"new_state": "failed"})
        if status != 200:
            record.skipped = f"PATCH answered {status}: {str(body)[:200]}"
            return False
        record.task = (ti["task_id"], ti["map_index"])
        record.target = f"{ti['task_id']}[{ti['map_index']}] try {ti['try_number']} ({ti['state']})"
        record.detail = (
            f"marked failed through the REST API while its pod {cluster}/{pod['metadata']['name']} runs"
        )
        return True

    # -- the test bed's real parts -------------------------------------------------------------------------
    def _busiest(self, cluster: str | None = None, shared: bool = False) -> tuple[str, str, int] | None:
        """(cluster, node, running pods of the load) of the node with most Running pods of the load;
        ``shared``: only in clusters of more than one node. (A cluster whose every node stops reporting is
        in full disruption: its node lifecycle controller, as Kubernetes does, taints no node for eviction
        and assumes its own side is cut off, so a one-node cluster's node never becomes a lost node.)"""
        nodes = {c["name"]: c["nodes"] for c in CLUSTERS}
        busy: dict[tuple[str, str], int] = {}
        for c, pod in self._running_pods():
            node = pod["spec"].get("nodeName")
            if shared and nodes.get(c, 2) < 2:
                continue
            if node and (cluster is None or c == cluster):
                busy[(c, node)] = busy.get((c, node), 0) + 1
        if not busy:
            return None
        (c, node), count = max(busy.items(), key=lambda item: item[1])
        return c, node, count

    def _relation(self, seconds: float) -> str:
        grace = self.manifest.unreachable_grace
        return f"{'shorter' if seconds < grace else 'longer'} than the {grace:g}s grace"

    def _stop_apiserver(
        self, record: FaultRecord, seconds: float, cluster: str | None = None, deferrable: bool | None = None
    ) -> bool | None:
        """SIGSTOP a member's kube-apiserver for ``seconds`` (connections hang, as in a partition): the
        member where a running task (of that kind) has its pod Running, or ``cluster``."""
        why = ""
        if cluster is None:
            found = self._running_task(deferrable=deferrable)
            if found is None:
                return None
            ti, cluster, pod = found
            record.task = (ti["task_id"], ti["map_index"])
            kind = {None: "", False: "non-deferrable ", True: "deferrable "}[deferrable]
            why = (
                f"; {kind}task {ti['task_id']}[{ti['map_index']}]'s pod {pod['metadata']['name']} runs there"
            )
        self._silence(record, cluster, seconds, "pause-apiserver", "resume-apiserver")
        record.detail = f"kube-apiserver SIGSTOPped for {seconds:g}s ({self._relation(seconds)}){why}"
        return True

    def _kill_etcd(self, record: FaultRecord, seconds: float, cluster: str | None = None) -> bool | None:
        """SIGKILL a member's etcd (the busiest member's, unless ``cluster``), started again after
        ``seconds``: its API server stays up with no storage behind it."""
        if cluster is None:
            found = self._busiest()
            if found is None:
                return None
            cluster = found[0]
        self._silence(record, cluster, seconds, "kill-etcd", "restart-etcd")
        record.detail = f"etcd SIGKILLed, started again over its data after {seconds:g}s"
        return True

    def _silence(self, record: FaultRecord, cluster: str, seconds: float, start: str, stop: str) -> None:
        """Fault ``start`` on ``cluster``'s control plane, undone by ``stop`` after ``seconds``; the member is
        not read for targets meanwhile (a read of a stopped member would hold the fault's end)."""
        self.clusters.fault(cluster, start)
        self.silent.add(cluster)

        def undo() -> None:
            self.clusters.fault(cluster, stop)
            self.silent.discard(cluster)

        self._end(record, seconds, undo)
        record.target = cluster

    def _stop_scheduler(self, record: FaultRecord, cluster: str, seconds: float) -> bool:
        self.clusters.fault(cluster, "pause-scheduler")
        self._end(record, seconds, lambda: self.clusters.fault(cluster, "resume-scheduler"))
        record.target = cluster
        record.detail = f"kube-scheduler SIGSTOPped for {seconds:g}s (new pods stay Pending)"
        return True

    def _delete_node(self, record: FaultRecord, cluster: str | None = None) -> bool | None:
        found = self._busiest(cluster, shared=True)
        if found is None:
            return None
        cluster, node, count = found
        self.clusters.fault(cluster, "delete-node", node=node)
        record.target = f"{cluster}/{node}"
        record.detail = f"Node object deleted with {count} soak pod(s) Running on it"
        return True

    def _revoke_rbac(self, record: FaultRecord, cluster: str, seconds: float) -> bool:
        self.clusters.fault(cluster, "revoke-rbac")
        self._end(record, seconds, lambda: self.clusters.fault(cluster, "restore-rbac"))
        record.target = cluster
        record.detail = f"the provider's bindings (deploy/ manifests) deleted for {seconds:g}s, then restored"
        return True

    def _restart_database(self, record: FaultRecord, pause: float) -> bool:
        assert self.database is not None, "restart-database needs the soak's PostgreSQL"
        self.database.stop_server()
        self._end(record, pause, self.database.start_server)
        record.target = "metadata database"
        record.detail = f"PostgreSQL stopped (fast shutdown), started again after {pause:g}s"
        return True
