"""Thread-safe handles on simulated clusters: read objects, inject faults, wait for conditions.

Every call is marshalled onto the simulator's loop thread through a :class:`Marshal` (the federation), so
tests and sync clients may use them from any thread. :class:`MemberHandle` is what they share with the
test bed's handles (``testbed/handles.py``): each backend reads and writes its cluster its own way.
"""

from __future__ import annotations

import abc
import copy
import time
from collections.abc import Callable, Coroutine
from typing import Any, Generic, Protocol, TypeVar

from airflow_provider_fedsched.sim.cluster import Cluster
from airflow_provider_fedsched.sim.config import ClusterConfig, conn_id
from airflow_provider_fedsched.sim.control import apply_fault, journal_report, submit_priority_pod

T = TypeVar("T")


class Marshal(Protocol):
    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 30.0) -> T: ...

    def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T: ...


class SimTimeout(AssertionError):
    """``wait_for`` gave up."""


def wait_for(
    predicate: Callable[[], T], timeout: float = 10.0, interval: float = 0.02, message: str = ""
) -> T:
    """Poll ``predicate`` until it returns something truthy; return that value, or raise SimTimeout."""
    deadline = time.monotonic() + timeout
    last: T = predicate()
    while not last:
        if time.monotonic() > deadline:
            raise SimTimeout(f"condition not met within {timeout}s{': ' + message if message else ''}")
        time.sleep(interval)
        last = predicate()
    return last


class Member(Protocol):
    """What a handle reads of the cluster it stands for, in either backend."""

    name: str
    config: ClusterConfig

    @property
    def url(self) -> str: ...

    @property
    def port(self) -> int: ...

    @property
    def token(self) -> str: ...


M = TypeVar("M", bound=Member)


class MemberHandle(abc.ABC, Generic[M]):
    """The calls every backend's cluster handle answers alike: the member's address, credentials and
    Airflow connection, and waits on its pods. A backend reads pods its own way (:meth:`pod`) and sets how
    long a wait may take by default and how often it looks (a real API server is slower to answer)."""

    wait_timeout = 10.0
    wait_interval = 0.02

    def __init__(self, cluster: M) -> None:
        self.cluster = cluster
        self.name = cluster.name
        self.config = cluster.config

    @property
    def url(self) -> str:
        return self.cluster.url

    @property
    def port(self) -> int:
        return self.cluster.port

    @property
    def token(self) -> str:
        return self.cluster.token

    @property
    def conn_id(self) -> str:
        return conn_id(self.name)

    @abc.abstractmethod
    def pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The pod as the API answers it, or None when there is none."""

    def wait_for_pod(
        self,
        namespace: str,
        name: str,
        predicate: Callable[[dict[str, Any]], bool],
        timeout: float | None = None,
    ) -> dict[str, Any]:
        """Poll the pod until ``predicate`` holds; ``timeout`` defaults to the backend's ``wait_timeout``."""

        def check() -> dict[str, Any]:
            pod = self.pod(namespace, name)
            return pod if pod is not None and predicate(pod) else {}

        return wait_for(
            check,
            self.wait_timeout if timeout is None else timeout,
            interval=self.wait_interval,
            message=f"pod {namespace}/{name} on {self.name}",
        )

    def wait_for_phase(
        self, namespace: str, name: str, phase: str, timeout: float | None = None
    ) -> dict[str, Any]:
        return self.wait_for_pod(
            namespace, name, lambda p: p.get("status", {}).get("phase") == phase, timeout
        )

    def wait_for_gone(self, namespace: str, name: str, timeout: float | None = None) -> None:
        wait_for(
            lambda: self.pod(namespace, name) is None,
            self.wait_timeout if timeout is None else timeout,
            interval=self.wait_interval,
            message=f"pod {namespace}/{name} deleted",
        )


class FaultsHandle:
    def __init__(self, fed: Marshal, cluster: Cluster) -> None:
        self._fed, self._cluster = fed, cluster

    def apply(self, kind: str, **args: Any) -> dict[str, Any]:
        return self._fed.run(apply_fault(self._cluster, kind, args))

    def latency(self, seconds: float) -> None:
        self.apply("latency", seconds=seconds)

    def down(self) -> None:
        self.apply("down")

    def up(self) -> None:
        self.apply("up")

    def fail(
        self,
        status: int = 503,
        times: int = 1,
        route: str | None = None,
        retry_after: int | None = None,
        method: str | None = None,
    ) -> None:
        self.apply("fail", status=status, times=times, route=route, retry_after=retry_after, method=method)

    def drop_watches(self) -> int:
        return int(self.apply("drop-watches")["watches"])

    def expire_watches(self) -> int:
        return int(self.apply("expire-watches")["watches"])

    def node_not_ready(self, node: str) -> None:
        self.apply("node-not-ready", node=node)

    def node_ready(self, node: str) -> None:
        self.apply("node-ready", node=node)

    def evict_pod(self, namespace: str, name: str, resource: str = "memory") -> None:
        self.apply("evict", namespace=namespace, name=name, resource=resource)

    def api_evict(self, namespace: str, name: str) -> None:
        self.apply("api-evict", namespace=namespace, name=name)

    def clear(self) -> None:
        self.apply("clear")


class SchedulerHandle:
    def __init__(self, fed: Marshal, cluster: Cluster) -> None:
        self._fed, self._cluster = fed, cluster

    def pause(self) -> None:
        self._fed.call(self._cluster.scheduler.pause)

    def resume(self) -> None:
        self._fed.call(self._cluster.scheduler.resume)


class ClusterHandle(MemberHandle[Cluster]):
    """Thread-safe handle on one simulated cluster."""

    def __init__(self, fed: Marshal, cluster: Cluster) -> None:
        super().__init__(cluster)
        self._fed = fed
        self.faults = FaultsHandle(fed, cluster)
        self.scheduler = SchedulerHandle(fed, cluster)

    @property
    def store(self) -> Any:
        """The raw store; read it through :meth:`call` (it belongs to the simulator thread)."""
        return self.cluster.store

    def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        return self._fed.call(fn, *args, **kwargs)

    def _snapshot(self, plural: str, namespace: str | None = None) -> list[dict[str, Any]]:
        return self.call(lambda: copy.deepcopy(self.cluster.store.list(plural, namespace)))

    def pods(self, namespace: str | None = None) -> list[dict[str, Any]]:
        return self._snapshot("pods", namespace)

    def jobs(self, namespace: str | None = None) -> list[dict[str, Any]]:
        return self._snapshot("jobs", namespace)

    def pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.call(lambda: copy.deepcopy(self.cluster.store.get("pods", namespace, name)))

    def nodes(self) -> list[dict[str, Any]]:
        return self._snapshot("nodes")

    def node(self, name: str) -> dict[str, Any] | None:
        return self.call(lambda: copy.deepcopy(self.cluster.store.get("nodes", "", name)))

    def events(self, namespace: str | None = None, involved: str | None = None) -> list[dict[str, Any]]:
        events = self._snapshot("events", namespace)
        return [e for e in events if involved is None or e["involvedObject"]["name"] == involved]

    def create_pod(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        return self.call(lambda: copy.deepcopy(self.cluster.create_pod(namespace, body)))

    def delete_pod(self, namespace: str, name: str, grace: int | None = None) -> None:
        self.call(self.cluster.delete_pod, namespace, name, grace)

    def label_pod(self, namespace: str, name: str, labels: dict[str, str]) -> None:
        """Add labels to a pod, as a client's patch would (e.g. what an orphaned task process left)."""
        self.call(
            self.cluster.store.mutate,
            "pods",
            namespace,
            name,
            lambda pod: pod["metadata"].setdefault("labels", {}).update(labels),
        )

    def priority_pod(
        self,
        name: str,
        namespace: str = "default",
        cpu: str = "1",
        memory: str = "1Gi",
        priority: int = 1000000,
    ) -> dict[str, Any]:
        return self.call(
            lambda: copy.deepcopy(submit_priority_pod(self.cluster, name, namespace, cpu, memory, priority))
        )

    def add_node(
        self,
        name: str | None = None,
        cpu: str = "4",
        memory: str = "16Gi",
        pods: int = 110,
        extra: dict[str, str] | None = None,
        labels: dict[str, str] | None = None,
        taints: list[dict[str, str]] | None = None,
    ) -> dict[str, Any]:
        return self.call(
            lambda: copy.deepcopy(self.cluster.add_node(name, cpu, memory, pods, extra, labels, taints))
        )

    def set_quota(self, namespace: str, hard: dict[str, str], name: str = "compute") -> dict[str, Any]:
        return self.call(lambda: copy.deepcopy(self.cluster.set_quota(namespace, hard, name)))

    def request_count(self, method: str | None = None, path: str | None = None) -> int:
        """API requests this cluster received since start (or the last reset).

        ``method`` matches any case; ``path`` (no query string) matches exactly, or as a prefix when it
        ends with ``*``: ``request_count("GET", "/api/v1/nodes")``, ``request_count(path="/api/v1/*")``.
        Requests answered with errors or injected faults count; control-endpoint calls and requests
        dropped while the cluster is down do not.
        """
        return self.call(self.cluster.requests.count, method, path)

    def request_counts(self) -> dict[tuple[str, str], int]:
        """Every ``(METHOD, path)`` seen and its count."""
        return self.call(self.cluster.requests.snapshot)

    def reset_request_counts(self) -> None:
        self.call(self.cluster.requests.reset)

    def journal(
        self, namespace: str | None = None, label_selector: str | None = None
    ) -> list[dict[str, Any]]:
        """Every pod run this cluster has seen (deleted pods included); see docs/simulator.md."""
        pods: list[dict[str, Any]] = self.journal_report(namespace, label_selector)["pods"]
        return pods

    def journal_report(
        self, namespace: str | None = None, label_selector: str | None = None
    ) -> dict[str, Any]:
        """``{"cluster", "observed_at", "dropped", "pods": [...], "nodes": {name: load}}``."""
        return self.call(journal_report, self.cluster, namespace, label_selector)

    def node_loads(self) -> dict[str, dict[str, Any]]:
        """Per node: allocatable, used now, peak, and every over-commit seen (none on a sound cluster)."""
        return self.call(self.cluster.journal.node_loads)

    def logs(self, namespace: str, name: str, container: str = "base") -> list[str]:
        def read() -> list[str]:
            pod = self.cluster.store.get("pods", namespace, name)
            if pod is None:
                return []
            buf = self.cluster.kubelet.runtime.log_buffer(pod["metadata"]["uid"], container)
            return [line for _, line in buf.lines] if buf else []

        return self.call(read)
