"""FederatedPodTrigger: watches one federated pod from the triggerer, keeping the delivery contract.

Unlike KubernetesPodTrigger it is given a cluster of the federation and its connection id, never a
kubeconfig, token or certificate (its kwargs are stored in the metadata database), and it builds its
client from that connection alone, so a ``KUBECONFIG``, ``~/.kube/config`` or in-cluster configuration
of the triggerer process plays no part. It fires only with news the operator must act on: the pod ended,
was evicted, stayed unschedulable past its grace, disappeared, its cluster (or node) did not answer
for longer than the task's ``unreachable_grace``, or a pod the preemptible try fenced when it moved
turned out to have Succeeded (``fenced_done``: the operator stops this copy and takes that result).
Each event is a kind of ``triggers/events.py``, the model the operator decodes it with.
A timer alone never judges an attempt: the operator reads the pod again when it resumes. It never fires
sooner than :data:`MIN_DEFERRAL_SECONDS` after it started, so that the scheduler has seen the task
deferred before the event resumes it.

When a user ends the deferred task (mark failed or success), :meth:`on_kill` deletes the pod, confirms
it is gone and records the outcome in the task's placement record. A trigger started (by a triggerer
that was down or restarting) after its task instance left ``deferred``, or that finds it so before it
fires, does the same: no pod outlives its try.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_provider_fedsched.hooks.tries import state_if_over
from airflow_provider_fedsched.kube.failures import (
    describe_error,
    disruption,
    node_not_ready,
    scheduled,
    unschedulable_message,
)
from airflow_provider_fedsched.kube.pods import aremove, is_gone
from airflow_provider_fedsched.state.process import background_cleanups
from airflow_provider_fedsched.triggers.events import (
    Cancelled,
    Done,
    Error,
    Evicted,
    FencedDone,
    Gone,
    Lost,
    PodEvent,
    Timeout,
    Unschedulable,
)

_T = TypeVar("_T")

MIN_DEFERRAL_SECONDS = 15.0
"""No deferral resumes sooner (``[fedsched] min_deferral_seconds``): a shorter one races the scheduler
(the task instance is still ``queued`` when the event arrives, and the try is lost)."""


def min_deferral_seconds() -> float:
    from airflow.configuration import conf

    return max(0.0, conf.getfloat("fedsched", "min_deferral_seconds", fallback=MIN_DEFERRAL_SECONDS))


async def _off_the_loop(function: Callable[..., _T], *args: Any) -> _T:
    """Run a blocking SDK call (spec, connection, task state, XCom) in a thread of the pool.

    asgiref's default (thread-sensitive) runs every trigger's calls in one shared thread, one after the
    other: a triggerer starting many triggers at once read their first pods seconds late (soak: 15 s, by
    which time a pod had ended unseen and its cluster gone silent). The triggerer's comms channel takes
    requests from any thread."""
    from asgiref.sync import sync_to_async

    return await sync_to_async(function, thread_sensitive=False)(*args)


def _keep(future: asyncio.Future[None]) -> asyncio.Future[None]:
    """Hold a background clean-up until it is done (the event loop keeps only a weak reference)."""
    background_cleanups.add(future)
    future.add_done_callback(background_cleanups.discard)
    return future


READ_TIMEOUT = 5.0
CONNECT_TIMEOUT = 2.0
LATE_START = 10.0
"""Seconds after the deferral past which a trigger's first read comes late: the pod, unseen since the
deferral, may have ended meanwhile, so a cluster silent at that read is waited for even by a preemptible
task (up to ``result_grace``), as for a pod known to have ended."""


class FederatedPodTrigger(BaseTrigger):
    """Watch ``pod_namespace/pod_name`` in member ``cluster`` of ``federation`` until there is news."""

    def __init__(
        self,
        *,
        federation: Any,
        cluster: str,
        conn_id: str | None,
        pod_name: str,
        pod_namespace: str,
        base_container_name: str = "base",
        poll_interval: float = 2.0,
        unreachable_grace: float = 300.0,
        unschedulable_grace: float = 30.0,
        schedule_timeout: float = 120.0,
        execution_deadline: float | None = None,
        not_before: float | None = None,
        trigger_kwargs: dict[str, Any] | None = None,
        result_grace: float | None = None,
        deferred_at: float | None = None,
        fenced: list[dict[str, Any]] | None = None,
    ) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.federation = federation
        self.cluster = cluster
        self.conn_id = conn_id
        self.pod_name = pod_name
        self.pod_namespace = pod_namespace
        self.base_container_name = base_container_name
        self.poll_interval = float(poll_interval)
        self.unreachable_grace = float(unreachable_grace)
        self.unschedulable_grace = float(unschedulable_grace)
        self.schedule_timeout = float(schedule_timeout)
        self.execution_deadline = execution_deadline
        self.not_before = not_before if not_before is not None else time.time() + min_deferral_seconds()
        self.trigger_kwargs = dict(trigger_kwargs or {})
        self.result_grace = float(result_grace) if result_grace is not None else self.unreachable_grace
        self.deferred_at = float(deferred_at) if deferred_at is not None else time.time()
        self.fenced = [dict(entry) for entry in fenced or []]
        """Pods a preemptible try left in clusters that stopped answering (``cluster``, ``namespace``,
        ``pod``): one seen Succeeded fires ``fenced_done``, and the operator takes its result."""
        self._fenced_apis: dict[str, Any] = {}
        self._fired = False
        self._cleanup: asyncio.Future[None] | None = None
        self._federation_hook: Any = None

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "federation": self.federation,
                "cluster": self.cluster,
                "conn_id": self.conn_id,
                "pod_name": self.pod_name,
                "pod_namespace": self.pod_namespace,
                "base_container_name": self.base_container_name,
                "poll_interval": self.poll_interval,
                "unreachable_grace": self.unreachable_grace,
                "unschedulable_grace": self.unschedulable_grace,
                "schedule_timeout": self.schedule_timeout,
                "execution_deadline": self.execution_deadline,
                "not_before": self.not_before,
                "trigger_kwargs": self.trigger_kwargs,
                "result_grace": self.result_grace,
                "deferred_at": self.deferred_at,
                "fenced": self.fenced,
            },
        )

    # Access from the connection alone ------------------------------------------------------------------
    def _hook(self) -> Any:
        """One hook per trigger: its spec is validated and its member's access resolved once."""
        if self._federation_hook is None:
            from airflow_provider_fedsched.hooks.federation import FederationHook

            self._federation_hook = FederationHook(self.federation)
        return self._federation_hook

    async def _api(self) -> tuple[Any, str]:
        from kubernetes_asyncio import client

        from airflow_provider_fedsched.kube.clients import api_client

        # Reading the spec and the connection are SDK calls: off the event loop.
        access = await _off_the_loop(lambda: self._hook().access(self.cluster))
        return client.CoreV1Api(await api_client(access)), access.server

    # Watching ----------------------------------------------------------------------------------------
    def _event(self, kind: type[PodEvent], message: str, **extra: Any) -> TriggerEvent:
        """The event of ``kind`` about this trigger's pod (``triggers/events.py``), with the
        ``trigger_kwargs`` it was given."""
        self._fired = True
        where = {"name": self.pod_name, "namespace": self.pod_namespace, "fedsched_cluster": self.cluster}
        event = kind.model_validate({**where, "message": message, **extra, **self.trigger_kwargs})
        return TriggerEvent(event.dump())  # type: ignore[no-untyped-call]

    async def run(self) -> AsyncIterator[TriggerEvent]:
        try:
            async for event in self._run():
                yield event
        except asyncio.CancelledError:
            # Cancelled without on_kill (a starved triggerer's triggers are reassigned, then the row of a
            # try that is over is removed): while this process lives, check and clean up anyway.
            _keep(asyncio.ensure_future(self._clean_up_if_over()))
            raise

    async def _clean_up_if_over(self) -> None:
        if await self._try_ended() is not None:
            await self._clean_up()

    async def _run(self) -> AsyncIterator[TriggerEvent]:
        # A triggerer that was down while a user ended the task starts (or ends) the trigger of a try
        # that is over; nobody would act on its event, so the trigger itself deletes the pod.
        ended = await self._try_ended()
        if ended is None:
            try:
                event = await self._watch()
            except Exception as exc:  # a trigger that errors: the operator deletes the pod and fails the try
                self.log.exception("Watching pod %s/%s failed", self.pod_namespace, self.pod_name)
                event = self._event(Error, f"the trigger failed watching the pod: {exc!r}")
            wait = (self.not_before or 0) - time.time()
            if wait > 0:
                await asyncio.sleep(wait)
            ended = await self._try_ended()
            if ended is None:
                yield event
                return
        yield await self._end_over_try(ended)

    async def _try_ended(self) -> str | None:
        """The state of this trigger's task instance when it is no longer deferred, else None."""
        try:
            return await _off_the_loop(self._task_state_if_not_deferred)
        except Exception:  # no answer from the triggerer's API: watch on, on_kill still applies
            self.log.warning("Could not read the state of the task instance", exc_info=True)
            return None

    def _task_state_if_not_deferred(self) -> str | None:
        ti = self.task_instance
        if ti is None or getattr(ti, "dag_id", None) is None:
            return None
        return state_if_over(ti.dag_id, ti.run_id, ti.task_id, ti.map_index)

    async def _end_over_try(self, state: str) -> TriggerEvent:
        self.log.info(
            "The task instance is %s, no longer deferred: its try is over, deleting pod %s/%s",
            state,
            self.pod_namespace,
            self.pod_name,
        )
        await self._clean_up()
        return self._event(Cancelled, f"the task instance was {state} while its trigger waited")

    async def _clean_up(self) -> None:
        """Delete the pod and record it, once, to the end even if the trigger is cancelled meanwhile (the
        triggerer cancels a trigger whose task instance left ``deferred`` as soon as it notices)."""
        if self._cleanup is None:
            self._cleanup = _keep(asyncio.ensure_future(self._delete_and_record()))
        await asyncio.shield(self._cleanup)

    async def _watch(self) -> TriggerEvent:
        try:
            api, server = await self._api()
        except Exception as exc:  # a missing connection or spec: the operator fails the try with it
            return self._event(Error, f"cannot reach cluster {self.cluster}: {exc}")
        started = time.monotonic()
        # Unseen since the deferral for too long, the pod may have ended: a silent first read is waited
        # out within the result grace, never taken for a pod lost while it ran.
        grace = self.unreachable_grace
        if time.time() - self.deferred_at > LATE_START + self.poll_interval:
            grace = max(grace, self.result_grace)
        unanswered_since: float | None = None
        unschedulable_since: float | None = None
        unready_since: float | None = None
        timeout = (CONNECT_TIMEOUT, READ_TIMEOUT)
        while True:
            now = time.monotonic()
            if self.execution_deadline is not None and time.time() >= self.execution_deadline:
                return self._event(Timeout, "the task's execution_timeout passed")
            try:
                raw = await api.read_namespaced_pod(
                    self.pod_name, self.pod_namespace, _preload_content=False, _request_timeout=timeout
                )
                try:
                    if raw.status >= 400:
                        from kubernetes_asyncio.client.exceptions import ApiException

                        raise ApiException(status=raw.status, reason=raw.reason)
                    pod = await raw.json()
                finally:
                    raw.release()
            except Exception as exc:
                if is_gone(exc):
                    return self._event(Gone, f"pod {self.pod_namespace}/{self.pod_name} no longer exists")
                unanswered_since = unanswered_since or now
                waited = now - unanswered_since
                if waited >= grace:
                    return self._event(
                        Lost,
                        f"{describe_error(exc, server, READ_TIMEOUT)}"
                        + (f" for {waited:.0f}s" if waited else ""),
                        unanswered_seconds=waited,
                    )
                await asyncio.sleep(min(self.poll_interval, 2.0))
                continue
            unanswered_since, grace = None, self.unreachable_grace
            done = await self._fenced_succeeded() if self.fenced else None
            if done is not None:
                return self._event(
                    FencedDone,
                    f"pod {done['pod']}, left in {done['cluster']} when it stopped answering, Succeeded",
                    fenced_pod=done["pod"],
                    fenced_cluster=done["cluster"],
                )
            status = pod.get("status") or {}
            phase = status.get("phase")
            found = disruption(pod)
            if found is not None:
                return self._event(Evicted, found.reason)
            if phase in ("Succeeded", "Failed") or _base_terminated(pod, self.base_container_name):
                if phase in ("Succeeded", "Failed"):
                    await self._note_ended(str(phase))
                return self._event(Done, f"pod {phase or 'ended'}", phase=phase)
            message = unschedulable_message(pod)
            if message is not None:
                unschedulable_since = unschedulable_since or now
                if now - unschedulable_since >= self.unschedulable_grace:
                    return self._event(Unschedulable, f"unschedulable: {message}")
            elif not scheduled(pod) and now - started >= self.schedule_timeout:
                return self._event(Unschedulable, f"not scheduled within {self.schedule_timeout:g}s")
            unready = await self._node_unready(api, pod)
            unready_since = (unready_since or now) if unready else None
            if unready_since is not None and now - unready_since >= self.unreachable_grace:
                node = (pod.get("spec") or {}).get("nodeName")
                silent = now - unready_since
                message = f"node {node} of {self.cluster} is NotReady: no word of the pod for {silent:.0f}s"
                return self._event(Lost, message)
            await asyncio.sleep(self.poll_interval)

    async def _fenced_succeeded(self) -> dict[str, Any] | None:
        """A fenced pod seen Succeeded (by a read, or by the snapshot that deleted it), if any; fenced pods
        seen Failed or gone leave the list. A cluster that does not answer is asked again next time."""
        for entry in list(self.fenced):
            cluster, namespace, name = entry["cluster"], entry["namespace"], entry["pod"]
            try:
                api = self._fenced_apis.get(cluster)
                if api is None:
                    from kubernetes_asyncio import client

                    from airflow_provider_fedsched.kube.clients import api_client

                    access = await _off_the_loop(lambda c=cluster: self._hook().access(c))
                    api = self._fenced_apis[cluster] = client.CoreV1Api(await api_client(access))
                pod = await api.read_namespaced_pod(
                    name, namespace, _request_timeout=(CONNECT_TIMEOUT, READ_TIMEOUT)
                )
                phase = pod.status.phase if pod.status else None
            except Exception as exc:
                if not is_gone(exc):
                    continue  # silent (or refusing) for now
                swept = await _off_the_loop(self._hook().swept_success, cluster, namespace, name)
                phase = "Succeeded" if swept else "gone"
            if phase == "Succeeded":
                return entry
            if phase in ("Failed", "gone"):
                self.fenced.remove(entry)
        return None

    async def _note_ended(self, phase: str) -> None:
        """Write down that the pod ended, for the operator, before the event is held back or lost."""

        def note() -> None:
            self._hook().note_deferred_pod_ended(self.cluster, self.pod_namespace, self.pod_name, phase)

        try:
            await _off_the_loop(note)
        except Exception:
            self.log.warning("Could not note that pod %s ended", self.pod_name, exc_info=True)

    async def _node_unready(self, api: Any, pod: dict[str, Any]) -> bool:
        status = pod.get("status") or {}
        node = (pod.get("spec") or {}).get("nodeName")
        ready = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), None)
        if not node or ready is None or ready.get("status") == "True":
            return False
        try:
            raw = await api.read_node(node, _preload_content=False, _request_timeout=READ_TIMEOUT)
            try:
                return raw.status < 400 and node_not_ready(await raw.json())
            finally:
                raw.release()
        except Exception:
            return False

    # A user ended the task ------------------------------------------------------------------------------
    async def on_kill(self) -> None:
        """The task was ended from the UI or the API while deferred: delete the pod and record it."""
        if self._fired and self._cleanup is None:
            return
        await self._clean_up()

    async def _delete_and_record(self) -> None:
        gone = False
        try:
            api, _ = await self._api()
            gone = await aremove(api, self.pod_namespace, self.pod_name, within=20.0)
        except Exception:
            self.log.exception("Could not delete pod %s/%s", self.pod_namespace, self.pod_name)
        self.log.info(
            "Task ended by a user: pod %s/%s in %s %s",
            self.pod_namespace,
            self.pod_name,
            self.cluster,
            "deleted" if gone else "not confirmed deleted (it is deleted when the cluster answers)",
        )
        try:
            await _off_the_loop(self._record_cancelled, gone)
        except Exception:
            self.log.exception("Could not record the cancelled attempt in the placement record")

    def _record_cancelled(self, gone: bool) -> None:
        """The try's record (its XCom) says how it ended; the cluster's history counts it."""
        from airflow.sdk.execution_time.xcom import XCom

        from airflow_provider_fedsched.federation.record import XCOM_KEY, PlacementRecord

        hook = self._hook()
        if not gone:
            hook.add_orphan(self.cluster, self.pod_namespace, self.pod_name)
        hook.record(self.cluster, "outcome", {"at": datetime.now(UTC).isoformat(), "outcome": "cancelled"})
        ti = self.task_instance
        if ti is None:
            return
        where = {"dag_id": ti.dag_id, "task_id": ti.task_id, "run_id": ti.run_id, "map_index": ti.map_index}
        raw = XCom.get_one(key=XCOM_KEY, **where)
        try:
            record = PlacementRecord.model_validate(json.loads(raw) if isinstance(raw, str) else raw)
        except (TypeError, ValueError) as exc:
            self.log.warning("The placement record %s of %s could not be read: %s", XCOM_KEY, where, exc)
            return
        now = datetime.now(UTC)
        reason = "the task was ended from the UI or the API while deferred: " + (
            "its pod was deleted" if gone else "its pod is deleted when its cluster answers again"
        )
        for attempt in record.attempts:
            if attempt.outcome == "running" and attempt.pod == self.pod_name:
                attempt.outcome, attempt.reason, attempt.ended_at = "cancelled", reason, now
        record.outcome, record.reason, record.ended_at = "failed", reason, now
        XCom.set(XCOM_KEY, record.model_dump(mode="json"), **where)


def _base_terminated(pod: dict[str, Any], container: str) -> bool:
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        if status.get("name") == container and (status.get("state") or {}).get("terminated"):
            return True
    return False
