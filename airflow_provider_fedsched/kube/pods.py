"""Pod I/O in one member cluster: observe, create, find, and remove-and-confirm (the one deletion path).

:class:`FederatedPodManager` is the cncf.kubernetes ``PodManager`` the operator runs with, so that every pod
read of KubernetesPodOperator's own flow (start-up, log following, completion) goes through
:meth:`FederatedPodManager.read_pod`: a single bounded call that keeps the delivery contract while a
cluster or a node stops answering (see :class:`Watch`). The async functions below serve the triggerer and
the snapshot refresh (orphans) with the same rules: a 404 means gone (:func:`is_gone`), a delete is only
done once it is confirmed.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from airflow.providers.cncf.kubernetes.utils.pod_manager import (
    PodLoggingStatus,
    PodManager,
    XComRetrievalError,
    parse_log_line,
)
from kubernetes.client import models as k8s

from airflow_provider_fedsched.federation._errors import TemporaryError
from airflow_provider_fedsched.kube import failures
from airflow_provider_fedsched.kube.failures import ClusterFailure, is_connection_error, node_not_ready
from airflow_provider_fedsched.kube.labels import PLACEMENT_LABEL, TASK_LABEL

LOG_READ_TIMEOUT = 60.0
"""Seconds a log stream may stay silent before it is reopened (and the pod read again)."""
T = TypeVar("T")

CONFIRM_INTERVAL = 0.5
STOP_GRACE_SECONDS = 1
"""The grace period of the deletions that must be confirmed (a pod left behind, fenced, or of an earlier
try). Not 0: a delete with no grace period removes the pod from the API at once (a force deletion) while
its container may still run on its node, for ever on a node that is NotReady; with a grace period, the
pod stays (terminating) until its kubelet says the container stopped, so a 404 proves it. An unbound pod
is removed at once either way, and a kubelet never starts a terminating pod."""
"""Seconds between reads while confirming a deletion or watching a pod start."""


def is_gone(exc: BaseException) -> bool:
    """The one 404 rule: the object does not exist (sync and async clients alike)."""
    return getattr(exc, "status", None) == 404


def read_document(call: Callable[..., Any], *args: Any, **kwargs: Any) -> dict[str, Any]:
    """A call of the sync client, answered as the API's JSON document and never parsed into the client's
    models: for a document read as a dict anyway, building the models (every timestamp through dateutil)
    and turning them back cost more CPU than the call itself. Errors raise as from the typed call."""
    response = call(*args, _preload_content=False, **kwargs)
    try:
        document = json.loads(response.data)
    finally:
        response.release_conn()
    return document if isinstance(document, dict) else {}


def as_dict(obj: Any) -> dict[str, Any]:
    """The API's JSON shape of a client model (what :mod:`.failures` reads)."""
    if obj is None:
        return {}
    if isinstance(obj, dict):
        return obj
    import kubernetes

    return kubernetes.client.ApiClient().sanitize_for_serialization(obj) or {}


@dataclass
class Observation:
    """A fresh read of one pod: the pod (None when it does not exist), its events, its node's readiness."""

    pod: dict[str, Any] | None
    events: list[dict[str, Any]] = field(default_factory=list)
    node_ready: bool | None = None
    error: BaseException | None = None
    """Set when the cluster did not answer: then nothing else is known."""

    @property
    def answered(self) -> bool:
        return self.error is None

    @property
    def phase(self) -> str | None:
        return ((self.pod or {}).get("status") or {}).get("phase")


class ClusterLost(TemporaryError):
    """The pod's cluster or node stopped answering for longer than the task may wait (or at all, for a
    preemptible task): carries the failure to record."""

    def __init__(self, failure: ClusterFailure) -> None:
        super().__init__(failure.reason)
        self.failure = failure


@dataclass
class Watch:
    """How long one attempt may go without an answer about its pod.

    ``grace`` is the task's ``unreachable_grace`` (0 for a preemptible task: it moves at once). Within
    it, a read that gets no answer is tried again until one comes (the attempt reattaches to its pod);
    past it, :class:`ClusterLost` ends the attempt. The same holds for a pod whose node is NotReady.
    """

    grace: float
    unanswered_since: float | None = None
    node_unready_since: float | None = None
    last_pod: Any = None
    last_error: BaseException | None = None
    """The last known pod and the last error without an answer (for the record's reason)."""
    gave_up: bool = False
    """The grace ran out once: later reads in this attempt (cleanup) do not wait it out again."""
    result_grace: float = 0.0
    """How long to wait once the pod is known to have ended (the task's ``unreachable_grace`` even when
    it is preemptible: its work is done, so moving it could only run it twice)."""
    ended_phase: str | None = None
    """``Succeeded`` or ``Failed`` once a read (or the pod trigger) saw the pod end."""
    log_ended: str | None = None
    """The container whose followed log stream ended on its own: the kubelet ends it when the container
    exits, so its work is likely over and a silence is waited out as for a pod seen to end, until a read
    shows the container running still (the stream was cut short)."""

    def __post_init__(self) -> None:
        self.result_grace = max(self.grace, self.result_grace)  # a finished pod is waited for no less

    def reset(self, grace: float, result_grace: float | None = None) -> None:
        """A new attempt (or a new look at one): nothing seen yet."""
        self.grace = grace
        self.result_grace = max(grace, result_grace if result_grace is not None else grace)
        self.unanswered_since = self.node_unready_since = None
        self.last_pod = self.last_error = None
        self.gave_up = False
        self.ended_phase = None
        self.log_ended = None

    @property
    def limit(self) -> float:
        """Seconds a read may go without an answer now."""
        over = self.ended_phase is not None or self.log_ended is not None
        return self.result_grace if over else self.grace

    def seen(self, phase: str | None, running: Collection[str] = ()) -> None:
        """A read showed the pod in ``phase`` with the containers ``running``."""
        if phase in ("Succeeded", "Failed"):
            self.ended_phase = phase
        if self.log_ended is not None and self.log_ended in running:
            self.log_ended = None

    def answered(self) -> None:
        self.unanswered_since = None
        self.last_error = None

    def unanswered(self, error: BaseException) -> float:
        """Seconds without an answer, this one included."""
        now = time.monotonic()
        self.unanswered_since = self.unanswered_since or now
        self.last_error = error
        return now - self.unanswered_since

    def node(self, ready: bool | None) -> float:
        """Seconds the pod's node has not been Ready (0 while it is)."""
        if ready is not False:
            self.node_unready_since = None
            return 0.0
        now = time.monotonic()
        self.node_unready_since = self.node_unready_since or now
        return now - self.node_unready_since


class PodNotDeleted(TemporaryError):
    """A pod's delete was never accepted: its cluster did not answer (or refused)."""

    def __init__(self, cluster: str, namespace: str, name: str, reason: str) -> None:
        super().__init__(f"pod {namespace}/{name} in cluster {cluster} was not deleted: {reason}")
        self.cluster, self.namespace, self.name = cluster, namespace, name


class FederatedPodManager(PodManager):
    """A PodManager for one member cluster whose reads are bounded and keep the attempt's :class:`Watch`."""

    def __init__(
        self,
        kube_client: Any,
        callbacks: Any = None,
        *,
        cluster: str,
        server: str,
        watch: Watch | None = None,
        describe: Any = None,
    ) -> None:
        super().__init__(kube_client=kube_client, callbacks=callbacks or [])
        self.cluster = cluster
        self.server = server
        self.watch = watch or Watch(grace=0.0)
        self._describe = describe  # (exc) -> human reason naming the server
        self.removed: set[tuple[str, str]] = set()
        self.phase_when_removed: dict[tuple[str, str], str] = {}
        """The last phase :meth:`remove` saw of each pod it deleted (the delete's answer, a read after it)."""
        """Pods this manager deleted (a later 404 is ours, not a vanished pod)."""
        self._read_through: Any = None  # the timestamp of the last log line read, while reading the rest
        self._stages: dict[str, dict[str, int]] = {}  # pod uid -> the latest stage read (see _lifecycle)
        self._known: set[tuple[str, str]] = set()  # (namespace, name) of pods created or read here
        self.logs_interrupted = False
        """While following logs (:meth:`fetch_container_logs`), a stream ended in an error or the cluster
        went silent: the stream may have ended before the container did."""

    def know(self, namespace: str, name: str) -> None:
        """Note a pod that its attempt created (in an earlier process: a deferred task resumed, a try
        reattached): a refusal of its reads (401, 403) is then waited for as silence, never a verdict."""
        self._known.add((namespace, name))

    def extract_xcom_json(self, pod: k8s.V1Pod) -> str:
        """The provider's read of the XCom sidecar's ``return.json``, failing with the pod, the cluster and
        what came back when that is not JSON. The sidecar always prints the file or the provider's
        empty-result marker, so no output at all is an exec that did not run (the provider would parse it
        and fail with only "Expecting value")."""
        name = f"{pod.metadata.namespace}/{pod.metadata.name}"
        try:
            result = str(super().extract_xcom_json(pod))
        except json.JSONDecodeError as exc:
            raise XComRetrievalError(
                f"the XCom of pod {name} in cluster {self.cluster} is "
                f"not JSON ({exc.msg} at char {exc.pos}): {exc.doc[:200]!r}"
                f"{' (first 200 of ' + str(len(exc.doc)) + ' characters)' if len(exc.doc) > 200 else ''}"
            ) from exc
        if not result.strip():
            raise XComRetrievalError(
                f"the XCom sidecar of pod {name} in cluster {self.cluster} answered nothing (it prints the "
                "result or an empty-result marker, so the exec did not run)"
            )
        return result

    # Reads -------------------------------------------------------------------------------------------
    def observe(self, namespace: str, name: str, *, events: bool = True, node: bool = False) -> Observation:
        """Read the pod now (and its events, and its node's readiness); never raises."""
        try:
            pod = read_document(self._client.read_namespaced_pod, name, namespace)
        except Exception as exc:
            if not is_gone(exc):
                return Observation(pod=None, error=exc)
            pod = None
        found = Observation(pod=pod)
        if events:
            try:
                listed = read_document(
                    self._client.list_namespaced_event,
                    namespace,
                    field_selector=f"involvedObject.name={name}",
                )
                found.events = list(listed.get("items") or [])
            except Exception:
                found.events = []
        node_name = ((pod or {}).get("spec") or {}).get("nodeName")
        if node and node_name:
            found.node_ready = self._node_ready(str(node_name))
        return found

    def _node_ready(self, node_name: str) -> bool | None:
        try:
            return not node_not_ready(read_document(self._client.read_node, node_name))
        except Exception:
            return None  # no permission or no answer: the pod's own status must do

    def read_pod(self, pod: k8s.V1Pod) -> k8s.V1Pod:
        """One bounded read; while the cluster does not answer, read again until it does (reattach) or
        the watch's grace runs out (:class:`ClusterLost`). A read older than one already seen (the pod
        back in an earlier stage of its life: a lagging API server or cache) is no answer either: read
        again. KubernetesPodOperator's own loops (start-up, logs, completion) all read through here."""
        name, namespace = pod.metadata.name, pod.metadata.namespace
        stale_since: float | None = None
        while True:
            # Once this pod was created or read, a refusal (401, 403) is no verdict on it: an API server
            # that restarts answers them until its authorizer's caches fill, and a revoked permission
            # says nothing about whether the pod still runs. Waited for as silence, within the grace.
            remote = self._answered(
                lambda: self._client.read_namespaced_pod(name, namespace),
                f"pod {name}",
                refusals=(namespace, name) in self._known,
            )
            self._known.add((namespace, name))
            if not self._older_than_seen(remote):
                break
            now = time.monotonic()
            if stale_since is None:
                stale_since = now
                self.log.warning(
                    "Cluster %s answered with an older state of pod %s (%s): reading it again",
                    self.cluster,
                    name,
                    _stage(remote),
                )
            if now - stale_since >= self.watch.limit:
                self.watch.gave_up = True
                raise ClusterLost(
                    failures.unreachable(
                        f"{self.cluster} answered only with older states of pod {name} for "
                        f"{now - stale_since:.0f}s"
                    )
                )
            time.sleep(CONFIRM_INTERVAL)
        self.watch.last_pod = remote
        self.watch.seen(remote.status.phase if remote.status else None, _running_containers(remote))
        self._check_node(remote)
        return remote

    def _older_than_seen(self, remote: k8s.V1Pod) -> bool:
        """Whether ``remote`` shows its pod at an earlier stage than a read already seen (and notes the
        latest stage of each pod this manager read)."""
        uid = remote.metadata.uid if remote.metadata else None
        if not uid:
            return False
        now = _lifecycle(remote)
        seen = self._stages.get(uid)
        if seen is not None and any(now.get(key, -1) < rank for key, rank in seen.items()):
            return True
        self._stages[uid] = {key: max(rank, (seen or {}).get(key, -1)) for key, rank in now.items()}
        return False

    def _answered(
        self, call: Callable[[], T], about: str, *, server_errors: bool = True, refusals: bool = False
    ) -> T:
        """``call()`` until the cluster answers it; :class:`ClusterLost` once the watch's limit passes
        without an answer. Any answer other than silence (a 404, a 403, the result) ends the wait; with
        ``server_errors=False`` a 5xx is an answer too (a log read: the node's kubelet failed, not the
        cluster, whose pod reads judge the pod); with ``refusals`` a 401 or 403 is silence too."""
        noted = 0.0
        while True:
            try:
                result = call()
                break
            except Exception as exc:
                refused = refusals and getattr(exc, "status", None) in (401, 403)
                if is_gone(exc) or not (refused or unanswered(exc, server_errors=server_errors)):
                    raise
                waited = self.watch.unanswered(exc)
                self.logs_interrupted = True
                if waited >= self.watch.limit or self.watch.gave_up:
                    self.watch.gave_up = True
                    raise ClusterLost(self.unreachable(exc, waited)) from exc
                if waited - noted >= 10 or not noted:
                    noted = waited or 0.001
                    self.log.warning(
                        "Cluster %s does not answer about %s (%.0fs, waiting up to %.0fs): %s",
                        self.cluster,
                        about,
                        waited,
                        self.watch.limit,
                        self.reason(exc),
                    )
                time.sleep(min(2.0, max(0.05, self.watch.limit - waited)))
        if self.watch.unanswered_since is not None:
            self.log.info("Cluster %s answers again: reattached to %s", self.cluster, about)
        self.watch.answered()
        return result

    def _check_node(self, remote: k8s.V1Pod) -> None:
        """A running pod whose node stopped reporting is waited for within the grace, then given up."""
        status = remote.status
        node_name = remote.spec.node_name if remote.spec else None
        if status is None or status.phase not in ("Running", "Pending") or not node_name:
            return
        ready = next((c for c in status.conditions or [] if c.type == "Ready"), None)
        if ready is None or ready.status == "True":
            self.watch.node(True)
            return
        unready_for = self.watch.node(self._node_ready(node_name))
        if unready_for >= self.watch.grace and self.watch.node_unready_since is not None:
            self.watch.gave_up = True
            raise ClusterLost(
                failures.unreachable(
                    f"node {node_name} of {self.cluster} is NotReady: no word of pod "
                    f"{remote.metadata.name} for {unready_for:.0f}s"
                )
            )

    def find(self, task: str, namespaces: Iterable[str] = ()) -> list[k8s.V1Pod]:
        """Every pod of the task instance ``task`` (a :func:`task_digest`) here, whatever its other
        labels; in ``namespaces`` when given, else in all."""
        selector = f"{TASK_LABEL}={task}"
        wanted = sorted(set(namespaces))
        if not wanted:
            return list(self._client.list_pod_for_all_namespaces(label_selector=selector).items)
        found: list[k8s.V1Pod] = []
        for namespace in wanted:
            found.extend(self._client.list_namespaced_pod(namespace, label_selector=selector).items)
        return found

    def read_pod_logs(self, pod: k8s.V1Pod, container_name: str, *args: Any, **kwargs: Any) -> Any:
        """Log streams get a bounded read timeout too: a silent, dead connection is given up within
        :data:`LOG_READ_TIMEOUT`. A cluster that does not answer is waited for within the attempt's grace,
        as for pod reads, in place of the provider's retry with backoff (15 s and more), which would hide
        it from the grace and from a preemptible task's failover."""
        connect, read = kwargs.get("_request_timeout") or (None, None)
        kwargs["_request_timeout"] = (
            min(connect or 30.0, 30.0),
            min(read or LOG_READ_TIMEOUT, LOG_READ_TIMEOUT),
        )
        once = getattr(PodManager.read_pod_logs, "__wrapped__", PodManager.read_pod_logs)
        stream = self._answered(
            lambda: once(self, pod, container_name, *args, **kwargs),
            f"the logs of pod {pod.metadata.name}",
            server_errors=False,
        )
        return self._noting_breaks(stream, container_name if kwargs.get("follow") else None)

    def _noting_breaks(self, stream: Iterable[bytes], followed: str | None = None) -> Iterator[bytes]:
        """``stream``, noting an error that ends it early, without the lines already read in this follow
        (:attr:`_read_through`): a resumed read starts at a whole second at or before the last line read,
        so its first lines would be printed twice. A followed stream of container ``followed`` that ends
        without an error is noted on the watch (:attr:`Watch.log_ended`)."""
        read_through, skipping = self._read_through, False
        try:
            for raw in stream:
                stamp, _ = parse_log_line(raw.decode("utf-8", errors="backslashreplace"))
                if stamp is not None:
                    skipping = read_through is not None and stamp <= read_through
                if skipping:
                    continue  # a continuation line goes with the line it continues
                if stamp is not None:
                    self._read_through = stamp
                yield raw
        except Exception:
            self.logs_interrupted = True
            raise
        if followed is not None:
            self.watch.log_ended = followed

    def fetch_container_logs(
        self, pod: k8s.V1Pod, container_name: str, *, follow: bool = False, **kwargs: Any
    ) -> Any:
        """KubernetesPodOperator's log following, where a log stream is never a verdict on the pod.

        The provider resumes a stream that breaks while the container runs; every resumed read skips the
        lines already printed. A log read that fails (a 400 or 500 from the node, a refused stream) is
        logged, not raised: the container is then waited for from fresh reads of the pod (within the
        attempt's grace, as every read), and the pod is judged by KubernetesPodOperator's own completion
        step from a fresh read too, never from the stream or a read older than its end. When a stream
        broke or failed and the container has ended, what it wrote meanwhile is read once more (the
        task's last lines would be lost otherwise)."""
        self.logs_interrupted = False
        self._read_through = None
        try:
            try:
                status = super().fetch_container_logs(pod, container_name, follow=follow, **kwargs)
            except ClusterLost:
                raise
            except Exception as exc:
                if not follow or _credentials_refused(exc):
                    raise  # a plain read's caller decides; a 401 is KubernetesPodOperator's to refresh
                self.log.warning(
                    "The log stream of %s (pod %s) failed: %s. The logs are not a verdict on the pod: "
                    "waiting for the container to end, from fresh reads of the pod",
                    container_name,
                    pod.metadata.name,
                    _first_line(exc),
                )
                self.logs_interrupted = True
                self.await_container_completion(pod, container_name)
                status = PodLoggingStatus(running=False, last_log_time=None)
            if follow and self.logs_interrupted and not status.running:
                self._read_rest(pod, container_name, **kwargs)
            return status
        finally:
            self._read_through = None

    def _read_rest(self, pod: k8s.V1Pod, container_name: str, **kwargs: Any) -> None:
        """One plain read of what the container wrote after the last line printed; a failure is logged."""
        self.log.info("Reading the rest of the logs of pod %s: its stream was interrupted", pod.metadata.name)
        kwargs["since_time"] = self._read_through
        try:
            super().fetch_container_logs(pod, container_name, follow=False, **kwargs)
        except ClusterLost:
            raise
        except Exception as exc:
            self.log.warning(
                "Could not read the rest of the logs of %s (pod %s): %s; the pod is judged all the same",
                container_name,
                pod.metadata.name,
                _first_line(exc),
            )

    # Writes ------------------------------------------------------------------------------------------
    def create_pod(self, pod: k8s.V1Pod) -> k8s.V1Pod:
        """Create once: a create that timed out may still have landed, so a 409 for the same placement
        is that pod (never a second one)."""
        try:
            created = self.run_pod_async(pod)
            self._known.add((pod.metadata.namespace, pod.metadata.name))
            return created
        except Exception as exc:
            if getattr(exc, "status", None) != 409:
                raise
            existing = self._client.read_namespaced_pod(pod.metadata.name, pod.metadata.namespace)
            mine = (pod.metadata.labels or {}).get(PLACEMENT_LABEL)
            if mine and (existing.metadata.labels or {}).get(PLACEMENT_LABEL) == mine:
                return existing
            raise

    def delete_pod(self, pod: k8s.V1Pod) -> None:
        """KubernetesPodOperator's cleanup deletes through the one deletion path too, retrying within the
        attempt's grace while the cluster does not answer; raises :class:`PodNotDeleted` if it never did
        (the operator then writes the pod down as an orphan: no pod outlives its try)."""
        namespace, name = pod.metadata.namespace, pod.metadata.name
        self.removed.add((namespace, name))
        try:
            self._answered(
                lambda: self._client.delete_namespaced_pod(name, namespace, grace_period_seconds=0),
                f"the deletion of pod {name}",
            )
        except Exception as exc:
            if is_gone(exc):
                return
            cause = exc.__cause__ if isinstance(exc, ClusterLost) and exc.__cause__ else exc
            raise PodNotDeleted(self.cluster, namespace, name, self.reason(cause)) from exc

    def remove(self, namespace: str, name: str, *, within: float) -> bool:
        """Delete the pod and confirm it is gone within ``within`` seconds; True once confirmed (a 404
        counts: its kubelet stopped it, :data:`STOP_GRACE_SECONDS`)."""
        deadline = time.monotonic() + within
        deleted = False
        self.removed.add((namespace, name))
        while True:
            try:
                if not deleted:
                    answer = self._client.delete_namespaced_pod(
                        name, namespace, grace_period_seconds=STOP_GRACE_SECONDS
                    )
                    deleted = True
                    self._note_phase(namespace, name, answer)
                self._note_phase(namespace, name, self._client.read_namespaced_pod(name, namespace))
            except Exception as exc:
                if is_gone(exc):
                    return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(CONFIRM_INTERVAL)

    def _note_phase(self, namespace: str, name: str, pod: Any) -> None:
        # A pod may end in the very moment it is deleted: its last phase tells whether its work was done.
        phase = getattr(getattr(pod, "status", None), "phase", None)
        if isinstance(phase, str) and phase:
            self.phase_when_removed[(namespace, name)] = phase

    # Reasons -----------------------------------------------------------------------------------------
    def reason(self, exc: BaseException) -> str:
        return self._describe(exc) if self._describe is not None else f"{type(exc).__name__} at {self.server}"

    def unreachable(self, exc: BaseException, waited: float) -> ClusterFailure:
        held = f" for {waited:.0f}s" if waited >= 1 else ""
        return failures.unreachable(f"{self.reason(exc)}{held}")


_PHASES = {"Pending": 0, "Running": 1, "Succeeded": 2, "Failed": 2}
_STATES = ("waiting", "running", "terminated")


def _lifecycle(pod: k8s.V1Pod) -> dict[str, int]:
    """How far a pod read shows its pod: its phase, and each container's restarts and state, as ranks
    that never go down in a pod's life (a restarted container counts its restarts first)."""
    status = pod.status
    if status is None:
        return {}
    ranks = {"phase": _PHASES.get(status.phase or "", -1)}
    for cs in (status.init_container_statuses or []) + (status.container_statuses or []):
        state = next((i for i, name in enumerate(_STATES) if getattr(cs.state, name, None)), 0)
        ranks[f"container/{cs.name}"] = (cs.restart_count or 0) * len(_STATES) + state
    return ranks


def _running_containers(pod: k8s.V1Pod) -> list[str]:
    """The names of the pod's containers a read shows running."""
    statuses = (pod.status.container_statuses if pod.status else None) or []
    return [c.name for c in statuses if c.state is not None and c.state.running is not None]


def _stage(pod: k8s.V1Pod) -> str:
    status = pod.status
    states = [
        f"{cs.name} {next((n for n in _STATES if getattr(cs.state, n, None)), 'unknown')}"
        for cs in (status.container_statuses or [] if status else [])
    ]
    return ", ".join([status.phase if status and status.phase else "no phase", *states])


def _credentials_refused(exc: BaseException) -> bool:
    return getattr(exc, "status", None) == 401


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return (text.splitlines()[0] if text else type(exc).__name__)[:300]


def unanswered(exc: BaseException, *, server_errors: bool = True) -> bool:
    """No answer from the cluster (connection refused, reset, timeout) or, unless ``server_errors`` is
    False, a 5xx from its API server."""
    status = getattr(exc, "status", None)
    if isinstance(status, int) and status >= 500 and server_errors:
        return True
    return is_connection_error(exc)


# Async (triggerer, snapshot refresh) ------------------------------------------------------------------
async def aremove(api: Any, namespace: str, name: str, *, within: float) -> bool:
    """:meth:`FederatedPodManager.remove` for a ``kubernetes_asyncio`` CoreV1Api."""
    import asyncio

    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    deleted = False
    while True:
        try:
            if not deleted:
                await api.delete_namespaced_pod(name, namespace, grace_period_seconds=STOP_GRACE_SECONDS)
                deleted = True
            await api.read_namespaced_pod(name, namespace)
        except Exception as exc:
            if is_gone(exc):
                return True
        if loop.time() >= deadline:
            return False
        await asyncio.sleep(CONFIRM_INTERVAL)


async def aremove_all(api: Any, pods: Iterable[tuple[str, str]], *, within: float) -> list[tuple[str, str]]:
    """Remove ``(namespace, name)`` pods; return those confirmed gone."""
    gone = []
    for namespace, name in pods:
        if await aremove(api, namespace, name, within=within):
            gone.append((namespace, name))
    return gone


def pod_labels(pod: Mapping[str, Any] | None) -> dict[str, str]:
    return dict(((pod or {}).get("metadata") or {}).get("labels") or {})
