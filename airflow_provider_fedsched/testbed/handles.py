"""Handles on test-bed clusters with the simulator handles' calls, answered by the real control plane.

Faults are real events: ``down`` ends the API server process (``up`` starts it again),
``node_not_ready`` takes the node away from kwok so its lease expires, ``evict_pod`` has kwok play a
node-pressure eviction, and ``scheduler.pause`` stops kube-scheduler. Request counts come from the API
server's audit log.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from kubernetes import client

from airflow_provider_fedsched.sim.handles import MemberHandle, wait_for
from airflow_provider_fedsched.testbed.cluster import (
    ADMIN_USER,
    PROVIDER_ACCOUNT,
    PROVIDER_NAMESPACE,
    TestbedCluster,
    api_dict,
)
from airflow_provider_fedsched.testbed.stages import EVICT, MANAGED_LABEL

_VERBS = {
    "create": "POST",
    "update": "PUT",
    "patch": "PATCH",
    "delete": "DELETE",
    "deletecollection": "DELETE",
    "get": "GET",
    "list": "GET",
    "watch": "GET",
}


class TestbedFaults:
    __test__ = False

    def __init__(self, handle: TestbedClusterHandle) -> None:
        self._handle = handle
        self._cluster = handle.cluster

    def down(self) -> None:
        self._cluster.stop_apiserver()

    def up(self, timeout: float = 120.0) -> None:
        """The API server again; returns once the cluster schedules pods again, as the simulator's does at
        once: after an API server restart kube-scheduler's watches come back only after their backoff
        (seconds), and a pod created meanwhile stays Pending."""
        self._cluster.start_apiserver()
        self._probe_scheduling(timeout)

    def _probe_scheduling(self, timeout: float) -> None:
        core = self._handle.core
        name = f"fedsched-probe-{uuid.uuid4().hex[:8]}"
        core.create_namespaced_pod(
            "kube-system",
            {
                "metadata": {"name": name},
                "spec": {
                    "containers": [
                        {"name": "probe", "image": "probe", "resources": {"requests": {"cpu": "1m"}}}
                    ],
                    "tolerations": [{"operator": "Exists"}],
                },
            },
        )
        try:

            def bound() -> bool:
                pod = self._handle.pod("kube-system", name) or {}
                return bool((pod.get("spec") or {}).get("nodeName"))

            wait_for(bound, timeout, interval=0.2, message=f"{self._cluster.name} scheduling pods again")
        finally:
            core.delete_namespaced_pod(name, "kube-system", grace_period_seconds=0)

    def node_not_ready(self, node: str, timeout: float = 60.0) -> None:
        """kwok stops playing this node's kubelet (no lease renewals, no pod updates); returns once the
        node lifecycle controller has marked it unknown and tainted it, as the simulator's fault does at once.
        """
        self._handle.core.patch_node(node, {"metadata": {"labels": {MANAGED_LABEL: "false"}}})

        def tainted() -> bool:
            found = self._handle.node(node) or {}
            ready = [c for c in found.get("status", {}).get("conditions") or [] if c["type"] == "Ready"]
            taints = {(t["key"], t["effect"]) for t in found.get("spec", {}).get("taints") or []}
            return bool(ready and ready[0]["status"] == "Unknown") and (
                ("node.kubernetes.io/unreachable", "NoExecute") in taints
            )

        wait_for(tainted, timeout, interval=0.2, message=f"node {node} not ready and tainted")

    def node_ready(self, node: str, timeout: float = 60.0) -> None:
        self._handle.core.patch_node(node, {"metadata": {"labels": {MANAGED_LABEL: "true"}}})

        def ready() -> bool:
            # Ready and untainted again, as the simulator's node is at once: the node lifecycle controller
            # lifts the not-ready taints a few seconds after the condition.
            found = self._handle.node(node) or {}
            conditions = found.get("status", {}).get("conditions") or []
            return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions) and not any(
                t["key"].startswith("node.kubernetes.io/") for t in found.get("spec", {}).get("taints") or []
            )

        wait_for(ready, timeout, interval=0.2, message=f"node {node} ready and untainted")

    def evict_pod(self, namespace: str, name: str, resource: str = "memory") -> None:
        self._handle.core.patch_namespaced_pod(
            name, namespace, {"metadata": {"annotations": {EVICT: resource}}}
        )
        self._handle.wait_for_phase(namespace, name, "Failed", timeout=30)

    def api_evict(self, namespace: str, name: str) -> None:
        self._handle.core.create_namespaced_pod_eviction(
            name, namespace, client.V1Eviction(metadata=client.V1ObjectMeta(name=name, namespace=namespace))
        )

    def apply(self, kind: str, **args: Any) -> dict[str, Any]:
        actions: dict[str, Callable[..., Any]] = {
            "down": self.down,
            "up": self.up,
            "node-not-ready": self.node_not_ready,
            "node-ready": self.node_ready,
            "evict": self.evict_pod,
            "api-evict": self.api_evict,
        }
        if kind not in actions:
            raise ValueError(
                f"fault {kind!r} has no test-bed equivalent; test-bed faults: {', '.join(actions)}"
            )
        actions[kind](**args)
        return {"applied": kind}


class TestbedScheduler:
    __test__ = False

    def __init__(self, cluster: TestbedCluster) -> None:
        self._cluster = cluster

    def pause(self) -> None:
        self._cluster.processes["kube-scheduler"].pause()

    def resume(self) -> None:
        self._cluster.processes["kube-scheduler"].resume()


class TestbedClusterHandle(MemberHandle[TestbedCluster]):
    """Thread-safe (each call is an HTTPS request) handle on one test-bed member."""

    __test__ = False
    wait_timeout = 30.0
    wait_interval = 0.1

    def __init__(self, cluster: TestbedCluster) -> None:
        super().__init__(cluster)
        self.api = client.ApiClient(cluster.client_config())
        self.core = client.CoreV1Api(self.api)
        self.faults = TestbedFaults(self)
        self.scheduler = TestbedScheduler(cluster)
        self._audit_offset = 0

    @property
    def tokens(self) -> list[str]:
        """Every credential of this member: none may reach a log or an XCom."""
        return [self.cluster.token, self.cluster.provider_token]

    def _plain(self, obj: Any) -> Any:
        return api_dict(self.api, obj)

    def pods(self, namespace: str | None = None) -> list[dict[str, Any]]:
        listed = (
            self.core.list_namespaced_pod(namespace) if namespace else self.core.list_pod_for_all_namespaces()
        )
        return [self._plain(p) for p in listed.items]

    def jobs(self, namespace: str | None = None) -> list[dict[str, Any]]:
        batch = client.BatchV1Api(self.api)
        listed = batch.list_namespaced_job(namespace) if namespace else batch.list_job_for_all_namespaces()
        return [self._plain(j) for j in listed.items]

    def pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return dict(self._plain(self.core.read_namespaced_pod(name, namespace)))
        except client.ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def nodes(self) -> list[dict[str, Any]]:
        return [self._plain(n) for n in self.core.list_node().items]

    def node(self, name: str) -> dict[str, Any] | None:
        try:
            return dict(self._plain(self.core.read_node(name)))
        except client.ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def events(self, namespace: str | None = None, involved: str | None = None) -> list[dict[str, Any]]:
        selector = f"involvedObject.name={involved}" if involved else None
        listed = (
            self.core.list_namespaced_event(namespace, field_selector=selector)
            if namespace
            else self.core.list_event_for_all_namespaces(field_selector=selector)
        )
        return [self._plain(e) for e in listed.items]

    def create_pod(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        return dict(self._plain(self.core.create_namespaced_pod(namespace, body)))

    def delete_pod(self, namespace: str, name: str, grace: int | None = None) -> None:
        try:
            self.core.delete_namespaced_pod(name, namespace, grace_period_seconds=grace)
        except client.ApiException as exc:
            if exc.status != 404:
                raise

    def label_pod(self, namespace: str, name: str, labels: dict[str, str]) -> None:
        """Add labels to a pod (a merge patch, as the simulator handle's call)."""
        self.core.patch_namespaced_pod(name, namespace, {"metadata": {"labels": labels}})

    def priority_pod(
        self,
        name: str,
        namespace: str = "default",
        cpu: str = "1",
        memory: str = "1Gi",
        priority: int = 1000000,
    ) -> dict[str, Any]:
        """A pod of a real PriorityClass that preempts lower-priority pods (kube-scheduler's preemption)."""
        scheduling = client.SchedulingV1Api(self.api)
        pc = f"fedsched-testbed-{priority}"
        try:
            scheduling.create_priority_class(
                client.V1PriorityClass(metadata=client.V1ObjectMeta(name=pc), value=priority)
            )
        except client.ApiException as exc:
            if exc.status != 409:
                raise
        body = {
            "metadata": {"name": name, "annotations": {"sim.fedsched.io/duration": "3600"}},
            "spec": {
                "priorityClassName": pc,
                "containers": [
                    {
                        "name": "base",
                        "image": "busybox",
                        "resources": {"requests": {"cpu": cpu, "memory": memory}},
                    }
                ],
            },
        }

        def admitted() -> dict[str, Any]:
            # The Priority admission plugin reads PriorityClasses from an informer cache, so a class created
            # a moment ago can still be unknown to it (a 403 naming the class) on a loaded machine.
            try:
                return self.create_pod(namespace, body)
            except client.ApiException as exc:
                if exc.status == 403 and f"no PriorityClass with name {pc} was found" in str(exc.body):
                    return {}
                raise

        return wait_for(admitted, timeout=30.0, interval=0.2, message=f"PriorityClass {pc} admitted")

    def set_quota(self, namespace: str, hard: dict[str, str], name: str = "compute") -> dict[str, Any]:
        return self.cluster.set_quota(namespace, hard, name)

    def logs(self, namespace: str, name: str, container: str = "base") -> list[str]:
        try:
            # The raw body: this client version gives a text/plain answer as the repr of its bytes.
            response = self.core.read_namespaced_pod_log(
                name, namespace, container=container, _preload_content=False
            )
        except client.ApiException as exc:
            if exc.status in (400, 404):
                return []
            raise
        return str(response.data.decode("utf-8", errors="replace")).splitlines()

    # -- request counts, from the audit log ------------------------------------------------------------
    def _audit_events(self, since: int | None = None) -> list[dict[str, Any]]:
        """The audit log's events from byte ``since`` (default: since the last reset of the counts)."""
        path = self.cluster.root / "logs" / "audit.log"
        try:
            with path.open("rb") as fh:
                fh.seek(self._audit_offset if since is None else since)
                data = fh.read()
        except OSError:
            return []
        lines = data.decode(errors="replace").splitlines()
        return [json.loads(line) for line in lines if line.startswith("{")]

    def request_counts(self) -> dict[tuple[str, str], int]:
        counts: dict[tuple[str, str], int] = {}
        people = {ADMIN_USER, f"system:serviceaccount:{PROVIDER_NAMESPACE}:{PROVIDER_ACCOUNT}"}
        for event in self._audit_events():
            if event.get("stage") not in ("ResponseComplete", "Panic"):
                continue
            if event.get("user", {}).get("username") not in people:
                continue  # the components' pod writes, audited for the soak, are no client's requests
            if event.get("objectRef", {}).get("resource") == "leases":
                continue  # the placement ledger's bookkeeping, which the simulator does not count either
            key = (
                _VERBS.get(event.get("verb", ""), event.get("verb", "").upper()),
                urlsplit(event.get("requestURI", "")).path,
            )
            counts[key] = counts.get(key, 0) + 1
        return counts

    def request_count(self, method: str | None = None, path: str | None = None) -> int:
        """Requests of the admin and the provider (components are not audited), as in the simulator."""
        total = 0
        for (verb, seen), count in self.request_counts().items():
            if method and verb != method.upper():
                continue
            if path and not (seen.startswith(path[:-1]) if path.endswith("*") else seen == path):
                continue
            total += count
        return total

    def audit_size(self) -> int:
        """Where the audit log ends now: :meth:`provider_denials` reads from such a point."""
        path = self.cluster.root / "logs" / "audit.log"
        return path.stat().st_size if path.exists() else 0

    def provider_denials(self, since: int = 0) -> list[dict[str, str]]:
        """The provider identity's requests the API server refused (403) since byte ``since`` of the
        audit log: ``verb``, ``uri``, and what was asked (``group``, ``resource`` with its subresource,
        ``namespace``; empty when cluster-wide)."""
        user = f"system:serviceaccount:{PROVIDER_NAMESPACE}:{PROVIDER_ACCOUNT}"
        denied = []
        for event in self._audit_events(since):
            if event.get("stage") != "ResponseComplete" or event.get("user", {}).get("username") != user:
                continue
            if event.get("responseStatus", {}).get("code") != 403:
                continue
            ref = event.get("objectRef") or {}
            resource = ref.get("resource", "")
            denied.append(
                {
                    "verb": event.get("verb", ""),
                    "uri": event.get("requestURI", ""),
                    "group": ref.get("apiGroup", ""),
                    "resource": f"{resource}/{ref['subresource']}" if ref.get("subresource") else resource,
                    "namespace": ref.get("namespace", ""),
                }
            )
        return denied

    def reset_request_counts(self) -> None:
        self._audit_offset = self.audit_size()
