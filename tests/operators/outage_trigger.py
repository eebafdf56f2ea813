"""A pod trigger whose cluster stops answering right after it saw the pod end (test_contract.py): the
window in which a deferred task knows its pod's result but has not read it yet. The trigger and the
Kubernetes client are the real ones; only the moment of the outage is chosen here."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable, Iterator

from airflow.triggers.base import TriggerEvent

from airflow_provider_fedsched.triggers.events import Unschedulable
from airflow_provider_fedsched.triggers.pod import FederatedPodTrigger

AFTER_DONE: Callable[[str], None] | None = None
"""Set by the test: called with the cluster's name once the trigger fires ``done``, before the task
resumes."""


class OutageAfterDoneTrigger(FederatedPodTrigger):
    async def run(self) -> AsyncIterator[TriggerEvent]:
        async for event in super().run():
            if event.payload.get("status") == "done" and AFTER_DONE is not None:
                AFTER_DONE(self.cluster)
            yield event


class RestartedAfterDoneTrigger(FederatedPodTrigger):
    """Its first watch sees the pod end (and notes it), then the cluster goes silent and the event is
    lost, as when a triggerer is restarted before it fired; the second watch, a restarted triggerer's,
    finds only a silent cluster and fires what it sees."""

    async def run(self) -> AsyncIterator[TriggerEvent]:
        first = await self._watch()
        assert first.payload["status"] == "done", first.payload
        if AFTER_DONE is not None:
            AFTER_DONE(self.cluster)
        yield await self._watch()


SILENCE_ONCE: tuple[Callable[[str], None], Callable[[str], None]] | None = None
"""Set by the test: (down, up), used by the first :class:`SilentOnceTrigger` that runs, then cleared."""


class SilentOnceTrigger(FederatedPodTrigger):
    """The first one to run finds its cluster silent (a preemptible task's trigger fires ``lost`` at
    once); the cluster answers again before the task resumes. Later ones are the real trigger."""

    async def run(self) -> AsyncIterator[TriggerEvent]:
        global SILENCE_ONCE
        silence, SILENCE_ONCE = SILENCE_ONCE, None
        if silence is None:
            async for event in super().run():
                yield event
            return
        down, up = silence
        down(self.cluster)
        event = await self._watch()
        up(self.cluster)
        yield event


BEFORE_FIRST_READ: Callable[[str, str, str], None] | None = None
"""Set by the test: called with (cluster, namespace, pod) before the trigger's first read."""


class LateFirstReadTrigger(FederatedPodTrigger):
    """A busy triggerer's trigger: it starts watching only after whatever the test does first (the pod
    ends, another worker's snapshot sees it, the cluster goes silent)."""

    async def run(self) -> AsyncIterator[TriggerEvent]:
        if BEFORE_FIRST_READ is not None:
            await asyncio.to_thread(BEFORE_FIRST_READ, self.cluster, self.pod_namespace, self.pod_name)
        async for event in super().run():
            yield event


class StartedLateTrigger(LateFirstReadTrigger):
    """A restarted triggerer's trigger: it starts watching only once its first read counts as late
    (:data:`~airflow_provider_fedsched.triggers.pod.LATE_START` after the deferral)."""

    async def run(self) -> AsyncIterator[TriggerEvent]:
        from airflow_provider_fedsched.triggers.pod import LATE_START

        await asyncio.sleep(max(0.0, self.deferred_at + LATE_START + self.poll_interval + 0.5 - time.time()))
        async for event in super().run():
            yield event


BEFORE_LOOKING_FOR_EARLIER: Callable[[int], None] | None = None
"""Set by the test: called with the try number before a try looks for an earlier try's pod."""


@contextlib.contextmanager
def before_looking_for_earlier(callback: Callable[[int], None]) -> Iterator[None]:
    """:data:`BEFORE_LOOKING_FOR_EARLIER` is ``callback`` inside the block, None again after it."""
    global BEFORE_LOOKING_FOR_EARLIER
    BEFORE_LOOKING_FOR_EARLIER = callback
    try:
        yield
    finally:
        BEFORE_LOOKING_FOR_EARLIER = None


UNSCHEDULABLE_ONCE: Callable[[str, str, str], None] | None = None
"""Set by the test: the next :class:`UnschedulableOnceTrigger` calls it with (cluster, namespace, pod),
then fires ``unschedulable``; cleared once used."""


class UnschedulableOnceTrigger(FederatedPodTrigger):
    """Fires ``unschedulable`` once whatever the test waited for happened (the pod runs), as the test-bed
    soak's triggers did while a member's kube-scheduler was stopped and started again before their tasks
    resumed; later ones are the real trigger."""

    async def run(self) -> AsyncIterator[TriggerEvent]:
        global UNSCHEDULABLE_ONCE
        first, UNSCHEDULABLE_ONCE = UNSCHEDULABLE_ONCE, None
        if first is not None:
            await asyncio.to_thread(first, self.cluster, self.pod_namespace, self.pod_name)
            yield self._event(Unschedulable, "not scheduled within 20s")
            return
        async for event in super().run():
            yield event
