"""Condense one live cluster into a :class:`ClusterSnapshot`, and many clusters concurrently.

Three list calls per cluster (nodes, non-terminal pods, resource quotas) through ``kubernetes_asyncio``,
each cluster within its own timeout. A cluster that does not answer in time, refuses the connection,
rejects the credentials or fails TLS verification becomes an *unreachable* snapshot whose reason says
so; the others are not held up by it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from airflow_provider_fedsched.federation.resources import (
    PODS,
    QuantityError,
    ResourceList,
    add,
    parse_resource_list,
    pod_requests,
    subtract,
)
from airflow_provider_fedsched.federation.snapshot import ClusterSnapshot, NodeSnapshot
from airflow_provider_fedsched.federation.spec import Taint
from airflow_provider_fedsched.kube.access import ClusterAccess
from airflow_provider_fedsched.kube.clients import api_client, discard_client
from airflow_provider_fedsched.kube.labels import PLACEMENT_LABEL, TASK_LABEL, TENANT_LABEL
from airflow_provider_fedsched.kube.permissions import missing_permissions

log = logging.getLogger(__name__)

NON_TERMINAL = "status.phase!=Succeeded,status.phase!=Failed"
ENDED = "status.phase!=Pending,status.phase!=Running,status.phase!=Unknown"
_QUOTA_KEYS = {
    "requests.cpu": "cpu",
    "requests.memory": "memory",
    "requests.ephemeral-storage": "ephemeral-storage",
}


def _quota_resource(key: str) -> str | None:
    """Map a ResourceQuota key to the pod request it limits (``limits.*`` do not bound requests)."""
    if key in _QUOTA_KEYS:
        return _QUOTA_KEYS[key]
    if key.startswith("requests."):
        return key.removeprefix("requests.")
    if key in ("cpu", "memory", "ephemeral-storage", PODS):
        return key
    return None


def quota_headroom(quotas: Iterable[Mapping[str, Any]]) -> dict[str, ResourceList]:
    """Per namespace, the smallest remaining ``hard - used`` over its quotas, per request resource."""
    headroom: dict[str, ResourceList] = {}
    for quota in quotas:
        namespace = quota["metadata"]["namespace"]
        status = quota.get("status") or {}
        hard = status.get("hard") or (quota.get("spec") or {}).get("hard") or {}
        used = status.get("used") or {}
        remaining = headroom.setdefault(namespace, {})
        for key, limit in hard.items():
            resource = _quota_resource(key)
            if resource is None:
                continue
            left = subtract(
                parse_resource_list({resource: limit}), parse_resource_list({resource: used.get(key, 0)})
            )
            remaining[resource] = max(0, min(remaining.get(resource, left[resource]), left[resource]))
    return headroom


def quota_limits(quotas: Iterable[Mapping[str, Any]]) -> dict[str, ResourceList]:
    """Per namespace, the smallest ``hard`` limit over its quotas, per request resource: a request above
    it can never be admitted there, however long one waits."""
    limits: dict[str, ResourceList] = {}
    for quota in quotas:
        namespace = quota["metadata"]["namespace"]
        status = quota.get("status") or {}
        hard = status.get("hard") or (quota.get("spec") or {}).get("hard") or {}
        found = limits.setdefault(namespace, {})
        for key, limit in hard.items():
            resource = _quota_resource(key)
            if resource is None:
                continue
            amount = parse_resource_list({resource: limit})[resource]
            found[resource] = min(found.get(resource, amount), amount)
    return {namespace: found for namespace, found in limits.items() if found}


NOT_READY_TAINTS = frozenset({"node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"})
CORDON_TAINT = "node.kubernetes.io/unschedulable"
"""Taints the node lifecycle controller adds while a node is not ready or cordoned. They mirror a state
(kept as ``ready`` and ``unschedulable``), not what the node is: kept as taints, a gang or pod whose only
fitting nodes are briefly NotReady would be judged "never fits" there (and fail) instead of "not now"."""


def _node_snapshot(node: Mapping[str, Any], requested: ResourceList) -> NodeSnapshot:
    metadata, spec, status = node["metadata"], node.get("spec") or {}, node.get("status") or {}
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or []
    )
    taints = spec.get("taints") or []
    keys = {t["key"] for t in taints}
    return NodeSnapshot(
        name=metadata["name"],
        allocatable=parse_resource_list(status.get("allocatable") or status.get("capacity")),
        requested=requested,
        labels=metadata.get("labels") or {},
        taints=[
            Taint(key=t["key"], value=t.get("value") or "", effect=t["effect"])
            for t in taints
            if t["key"] not in NOT_READY_TAINTS and t["key"] != CORDON_TAINT
        ],
        # Until the controller lifts the taint the scheduler still keeps pods off: not schedulable now.
        ready=ready and not keys & NOT_READY_TAINTS,
        unschedulable=bool(spec.get("unschedulable")) or CORDON_TAINT in keys,
    )


def _node_snapshots(
    cluster: str, nodes: list[Mapping[str, Any]], requested: Mapping[str, ResourceList]
) -> list[NodeSnapshot]:
    """Every node that reads as a node; one advertising what no Kubernetes node can (``cpu: 1e999999999``,
    a malformed taint) is left out with a warning naming it, never hiding the rest of its cluster."""
    found = []
    for node in nodes:
        name = str((node.get("metadata") or {}).get("name"))
        try:
            found.append(_node_snapshot(node, requested.get(name, {})))
        except (QuantityError, ValueError, KeyError, TypeError, AttributeError) as exc:
            log.warning("cluster %s: node %s left out of the snapshot: %s", cluster, name, str(exc)[:200])
    return found


def condense(
    cluster: str,
    nodes: list[Mapping[str, Any]],
    pods: list[Mapping[str, Any]],
    quotas: list[Mapping[str, Any]],
    observed_at: datetime,
) -> ClusterSnapshot:
    """Build a snapshot from the API's JSON lists (pods already filtered to non-terminal ones)."""
    requested: dict[str, ResourceList] = {}
    placements: list[str] = []
    tenants: dict[str, ResourceList] = {}
    for pod in pods:
        node_name = (pod.get("spec") or {}).get("nodeName")
        if not node_name:
            continue  # Pending and unbound: not on any node yet (reservations cover it)
        try:
            requests = pod_requests(pod["spec"])
        except QuantityError:
            continue  # the API server would not have admitted it; never let one pod hide a cluster
        requested[node_name] = add(requested.get(node_name, {}), {**requests, PODS: 1})
        labels = (pod.get("metadata") or {}).get("labels") or {}
        placement = labels.get(PLACEMENT_LABEL)
        if placement:
            placements.append(placement)
        tenant = labels.get(TENANT_LABEL)
        if tenant:
            tenants[tenant] = add(tenants.get(tenant, {}), {**requests, PODS: 1})
    return ClusterSnapshot(
        cluster=cluster,
        observed_at=observed_at,
        nodes=_node_snapshots(cluster, nodes, requested),
        quota_headroom=quota_headroom(quotas),
        placements=sorted(placements),
        tenants=tenants,
    )


def describe_failure(access: ClusterAccess, exc: BaseException, timeout: float) -> str:
    """A one-line reason naming the cluster's connection; never the kubeconfig or a token."""
    from aiohttp import ClientConnectorCertificateError, ClientConnectorError, ClientSSLError
    from kubernetes_asyncio.client.exceptions import ApiException

    source = f"connection {access.conn_id!r}" if access.conn_id else f"context {access.context!r}"
    server = access.server
    if isinstance(exc, TimeoutError | asyncio.TimeoutError):
        return f"no answer from {server} within {timeout:g}s ({source})"
    if isinstance(exc, ClientConnectorCertificateError | ClientSSLError | ssl.SSLError):
        return f"TLS verification failed for {server} ({source})"
    if isinstance(exc, ClientConnectorError):
        if isinstance(exc.os_error, ConnectionRefusedError):
            return f"connection refused at {server} ({source})"
        return f"API server {server} unreachable: {exc.os_error.strerror or exc.os_error} ({source})"
    if isinstance(exc, ApiException):
        if exc.status == 401:
            return f"API server {server} rejected the credentials (401 Unauthorized) ({source})"
        if exc.status == 403:
            denied = _status_message(exc.body) or "listing nodes, pods or quotas"
            return f"API server {server} forbids it (403 Forbidden): {denied} ({source})"
        return f"API server {server} answered {exc.status} {exc.reason} ({source})"
    return f"{type(exc).__name__} while reading {server} ({source})"


def _status_message(body: Any) -> str:
    """The ``message`` of a Kubernetes Status body (it names the user, verb and resource denied)."""
    try:
        message = json.loads(body).get("message") if body else None
    except (TypeError, ValueError, AttributeError):
        return ""
    return str(message or "")


async def _list_all(api: Any) -> tuple[list[Any], list[Any], list[Any]]:
    nodes_call = api.list_node(_preload_content=False)
    pods_call = api.list_pod_for_all_namespaces(field_selector=NON_TERMINAL, _preload_content=False)
    quotas_call = api.list_resource_quota_for_all_namespaces(_preload_content=False)
    from kubernetes_asyncio.client.exceptions import ApiException

    responses = await asyncio.gather(nodes_call, pods_call, quotas_call)
    try:
        for response in responses:
            # Unparsed responses (fast for large lists) are not checked by the client: check here.
            if response.status >= 400:
                error = ApiException(status=response.status, reason=response.reason)
                error.body = await response.text()  # the Status message names a missing permission
                raise error
        bodies = [await response.json() for response in responses]
    finally:
        for response in responses:
            response.release()
    return bodies[0]["items"], bodies[1]["items"], bodies[2]["items"]


STARVED_PREFIX = "this worker was short of CPU"
STARVED_FRACTION = 0.5
"""A timeout while this process's event loop ran that late (a fraction of the timeout) is the worker's
own fault (CPU starvation), not the cluster's: such a snapshot is never shared."""


class _LoopLag:
    """How late this event loop wakes up while snapshots are collected (CPU starvation of the worker)."""

    def __init__(self, tick: float = 0.05) -> None:
        self.tick = tick
        self.worst = 0.0
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            before = loop.time()
            await asyncio.sleep(self.tick)
            self.worst = max(self.worst, loop.time() - before - self.tick)

    def __enter__(self) -> _LoopLag:
        self._task = asyncio.get_running_loop().create_task(self._run())
        return self

    def __exit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()


async def collect_snapshot(
    access: ClusterAccess,
    timeout: float,
    clock: Callable[[], datetime] | None = None,
    lag: _LoopLag | None = None,
    limits: dict[str, dict[str, ResourceList]] | None = None,
) -> ClusterSnapshot | None:
    """Snapshot one cluster within ``timeout`` seconds; failures become an unreachable snapshot.

    The client is built before the clock starts (a fresh process pays for that, not the cluster). A
    timeout while this process was starved of CPU (``lag``) is this worker's own: the snapshot says so
    (:func:`self_inflicted`), so that it is never shared with the others."""
    from kubernetes_asyncio import client

    now = clock or (lambda: datetime.now(UTC))
    try:
        shared = await api_client(access)
        api = client.CoreV1Api(shared)
    except Exception as exc:
        return ClusterSnapshot(
            cluster=access.cluster,
            observed_at=now(),
            reachable=False,
            reason=describe_failure(access, exc, timeout),
        )

    async def read() -> ClusterSnapshot:
        nodes, pods, quotas = await _list_all(api)
        if limits is not None:
            limits[access.cluster] = quota_limits(quotas)
        snapshot = condense(access.cluster, nodes, pods, quotas, observed_at=now())
        missing = await missing_permissions(shared, access.cluster, access.namespace or "default")
        return snapshot.model_copy(update={"missing_permissions": missing}) if missing else snapshot

    try:
        return await asyncio.wait_for(read(), timeout)
    except Exception as exc:
        await discard_client(access)
        timed_out = isinstance(exc, TimeoutError | asyncio.TimeoutError)
        if timed_out and lag is not None and lag.worst >= timeout * STARVED_FRACTION:
            return ClusterSnapshot(
                cluster=access.cluster,
                observed_at=now(),
                reachable=False,
                reason=f"{STARVED_PREFIX} (its event loop ran {lag.worst:.1f}s late): no answer within "
                f"{timeout:g}s says nothing about {access.server}",
            )
        return ClusterSnapshot(
            cluster=access.cluster,
            observed_at=now(),
            reachable=False,
            reason=describe_failure(access, exc, timeout),
        )


async def collect_snapshots(
    accesses: Iterable[ClusterAccess],
    timeout: float,
    limits: dict[str, dict[str, ResourceList]] | None = None,
) -> dict[str, ClusterSnapshot]:
    """Snapshot every cluster concurrently, each within its own ``timeout``. ``limits`` receives each
    answering cluster's :func:`quota_limits`."""
    accesses = list(accesses)
    with _LoopLag() as lag:
        results = await asyncio.gather(
            *(collect_snapshot(access, timeout, lag=lag, limits=limits) for access in accesses)
        )
    return {snapshot.cluster: snapshot for snapshot in results if snapshot is not None}


def self_inflicted(snapshot: ClusterSnapshot) -> bool:
    """A snapshot that failed because of the worker that took it (never to be shared)."""
    return not snapshot.reachable and (snapshot.reason or "").startswith(STARVED_PREFIX)


async def ended_pods(access: ClusterAccess, timeout: float) -> dict[tuple[str, str], str] | None:
    """The federation's pods in this cluster that ended: ``(namespace, name)`` -> ``Succeeded`` or
    ``Failed``; None when the cluster did not answer within ``timeout``. One list call, by label."""
    from kubernetes_asyncio import client

    async def listed() -> list[Any]:
        api = client.CoreV1Api(await api_client(access))
        call = api.list_pod_for_all_namespaces(
            label_selector=TASK_LABEL, field_selector=ENDED, _preload_content=False
        )
        response: Any = await call  # unparsed: an aiohttp response
        try:
            if response.status >= 400:
                raise RuntimeError(f"{response.status} {response.reason}")
            items: list[Any] = (await response.json()).get("items") or []
            return items
        finally:
            response.release()

    try:
        # Unparsed (as the snapshot's lists): a starved worker parsing every pod into models timed out.
        items = await asyncio.wait_for(listed(), timeout)
    except Exception:
        return None
    ended: dict[tuple[str, str], str] = {}
    for pod in items:
        metadata, phase = pod.get("metadata") or {}, (pod.get("status") or {}).get("phase")
        if phase in ("Succeeded", "Failed"):
            ended[(str(metadata.get("namespace")), str(metadata.get("name")))] = str(phase)
    return ended


async def complete_jobs(
    access: ClusterAccess, jobs: Iterable[tuple[str, str]], timeout: float
) -> dict[tuple[str, str], bool]:
    """Of ``(namespace, name)`` Jobs in one cluster, whether each one's gang's work is done; a Job the
    cluster did not answer about within ``timeout`` is left out."""
    from kubernetes_asyncio import client

    from airflow_provider_fedsched.kube.jobs import ajobs_complete

    try:
        core = client.CoreV1Api(await api_client(access))
        batch = client.BatchV1Api(await api_client(access))
    except Exception:
        return {}
    return await ajobs_complete(batch, core, jobs, within=timeout)


async def delete_pods(
    access: ClusterAccess, pods: Iterable[tuple[str, str]], timeout: float, kind: str = "pod"
) -> list[tuple[str, str]]:
    """Delete ``(namespace, name)`` pods in one cluster (Jobs with their pods, when ``kind`` is
    ``"job"``); return those confirmed gone (deleted or 404)."""
    from kubernetes_asyncio import client

    from airflow_provider_fedsched.kube.jobs import aremove_jobs
    from airflow_provider_fedsched.kube.pods import aremove_all

    try:
        core = client.CoreV1Api(await api_client(access))
        if kind == "job":
            batch = client.BatchV1Api(await api_client(access))
            removing = aremove_jobs(batch, core, pods, within=timeout)
        else:
            removing = aremove_all(core, pods, within=timeout)
        return await asyncio.wait_for(removing, timeout * 2)
    except Exception:  # still unreachable: they stay on the list for the next snapshot
        return []
