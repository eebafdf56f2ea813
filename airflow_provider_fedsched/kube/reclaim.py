"""The I/O of giving borrowed capacity back (``federation/reclaim.py`` decides): list the running
preemptible pods of some tenants in one cluster, and evict pods through the Eviction API (so that
PodDisruptionBudgets hold and the pod's operator sees an eviction, ``DisruptionTarget``, and moves it)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

from airflow_provider_fedsched.federation.reclaim import BorrowingPod
from airflow_provider_fedsched.federation.resources import QuantityError, ResourceList, pod_requests
from airflow_provider_fedsched.kube.access import ClusterAccess
from airflow_provider_fedsched.kube.clients import api_client
from airflow_provider_fedsched.kube.labels import PREEMPTIBLE_LABEL, TENANT_LABEL

__all__ = ["aborrowing_pods", "aevict"]

BOUND = "status.phase=Running"


def _requests(spec: dict[str, object]) -> ResourceList:
    try:
        return pod_requests(spec)
    except QuantityError:  # a pod of ours the API accepted: cannot be; counted as holding nothing
        return {}


async def aborrowing_pods(
    access: ClusterAccess, tenants: Iterable[str], timeout: float
) -> list[BorrowingPod]:
    """The running preemptible pods of ``tenants`` in ``access``'s cluster (one list call, by label)."""
    from kubernetes_asyncio import client

    names = sorted(set(tenants))
    if not names:
        return []
    api = client.CoreV1Api(await api_client(access))
    selector = f"{TENANT_LABEL} in ({','.join(names)}),{PREEMPTIBLE_LABEL}=true"
    call = api.list_pod_for_all_namespaces(
        label_selector=selector, field_selector=BOUND, _preload_content=False
    )
    response: Any = await asyncio.wait_for(call, timeout)  # unparsed: an aiohttp response
    try:
        body = await response.json()
    finally:
        response.release()
    found: list[BorrowingPod] = []
    for pod in body.get("items") or []:
        metadata, spec = pod.get("metadata") or {}, pod.get("spec") or {}
        node = spec.get("nodeName")
        if not node:
            continue
        found.append(
            BorrowingPod(
                cluster=access.cluster,
                namespace=str(metadata.get("namespace")),
                name=str(metadata.get("name")),
                node=str(node),
                tenant=str((metadata.get("labels") or {}).get(TENANT_LABEL)),
                resources=_requests(spec),
                started=_epoch(metadata.get("creationTimestamp")),
                leaving=metadata.get("deletionTimestamp") is not None,
            )
        )
    return found


def _epoch(stamp: object) -> float:
    from datetime import datetime

    try:
        return datetime.fromisoformat(str(stamp).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0


async def aevict(access: ClusterAccess, namespace: str, name: str, timeout: float) -> str | None:
    """Evict one pod; None when the API accepted it (or the pod is gone), else why not (a disruption
    budget's 429, no answer)."""
    from kubernetes_asyncio import client
    from kubernetes_asyncio.client.exceptions import ApiException

    api = client.CoreV1Api(await api_client(access))
    body = client.V1Eviction(metadata=client.V1ObjectMeta(name=name, namespace=namespace))
    try:
        await asyncio.wait_for(api.create_namespaced_pod_eviction(name, namespace, body), timeout)
    except ApiException as exc:
        if exc.status == 404:
            return None
        return f"{exc.status} {exc.reason}"
    except TimeoutError:
        return f"no answer within {timeout:g}s"
    except Exception as exc:  # a connection refused: the cluster is silent
        return str(exc) or type(exc).__name__
    return None
