"""A preemptible try's fenced pods, watched while its work runs elsewhere (docs/reliability.md).

A preemptible task moves at once when its pod's cluster stops answering; the pod it leaves is fenced
(deleted, or written down and deleted once the cluster answers). In a short outage the fenced pod may
run to the end. While the next copy runs, :class:`FenceWatch` reads the fenced pods every
:data:`FENCE_POLL` seconds: once one is seen Succeeded (by its own read, or by the snapshot that deleted
it), its result is taken and the copy running now is stopped, so the work is not finished a second time.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from airflow_provider_fedsched.kube.clients import READ_TIMEOUT, sync_api_client
from airflow_provider_fedsched.kube.pods import FederatedPodManager

if TYPE_CHECKING:
    from airflow_provider_fedsched.federation.record import Attempt
    from airflow_provider_fedsched.hooks.federation import FederationHook

FENCE_POLL = 2.0
"""Seconds between two reads of the fenced pods."""

log = logging.getLogger(__name__)


def own_pod_manager(
    hook: FederationHook, cluster: str, read_timeout: float = READ_TIMEOUT
) -> FederatedPodManager:
    """A pod manager of its own for ``cluster`` (this thread's client, the cluster's bounded timeouts)."""
    import kubernetes

    access = hook.access(cluster)
    client = kubernetes.client.CoreV1Api(sync_api_client(access, read_timeout=read_timeout))
    return FederatedPodManager(kube_client=client, cluster=cluster, server=access.server)


class FenceWatch:
    """Reads ``fenced`` attempts' pods in a thread until one is seen Succeeded (then ``took`` is that
    attempt and ``on_taken`` runs, once) or every one is known gone or failed, or :meth:`stop`; or once,
    with :meth:`look_once` (before a copy is created)."""

    def __init__(
        self,
        hook: FederationHook,
        fenced: list[Attempt],
        on_taken: Callable[[Attempt], None] | None = None,
        read_timeout: float = READ_TIMEOUT,
    ) -> None:
        self.hook = hook
        self.took: Attempt | None = None
        self._pending = list(fenced)
        self._on_taken = on_taken
        self._read_timeout = read_timeout
        self._stopped = threading.Event()
        self._managers: dict[str, FederatedPodManager] = {}
        self._thread = threading.Thread(target=self._run, name="fedsched-fenced-pods", daemon=True)

    def start(self) -> FenceWatch:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopped.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=30)

    def look_once(self) -> Attempt | None:
        """One read of each fenced pod still pending: the first seen Succeeded, if any (those seen Failed
        or gone leave the list; a cluster that does not answer is asked again next time)."""
        for attempt in list(self._pending):
            try:
                phase = self._phase(attempt)
            except Exception as exc:  # a broken member: the sweep deletes its pod in time
                log.debug("Cannot read fenced pod %s in %s: %s", attempt.pod, attempt.cluster, exc)
                continue
            if phase == "Succeeded":
                return attempt
            if phase in ("Failed", "gone"):
                self._pending.remove(attempt)
        return None

    def _run(self) -> None:
        while self._pending and not self._stopped.wait(FENCE_POLL):
            done = self.look_once()
            if done is not None:
                if not self._stopped.is_set():
                    self.took = done
                    if self._on_taken is not None:
                        self._on_taken(done)
                return

    def _phase(self, attempt: Attempt) -> str | None:
        """The fenced pod's phase; ``gone`` once it no longer exists (``Succeeded`` if the snapshot that
        deleted it saw it Succeeded); None while its cluster does not answer."""
        manager = self._managers.get(attempt.cluster)
        if manager is None:
            manager = self._managers[attempt.cluster] = own_pod_manager(
                self.hook, attempt.cluster, self._read_timeout
            )
        seen = manager.observe(attempt.namespace, attempt.pod, events=False)
        if not seen.answered:
            return None
        if seen.pod is None:
            swept = self.hook.swept_success(attempt.cluster, attempt.namespace, attempt.pod)
            return "Succeeded" if swept else "gone"
        return seen.phase
