"""FederationWaitTrigger: a deferred try waiting for a compliant cluster, watched from the triggerer.

The same watch as the sync operator's (``hooks/waiting.py``): every few seconds it looks at shared state
and decides again, read only, when a candidate member shows news; it fires as soon as that decision is
no longer "wait", or at the wait's deadline, and never sooner than ``[fedsched] min_deferral_seconds``
after the deferral (a sooner event races the scheduler). The task then decides for real. Its kwargs
hold the federation spec (connection ids, no credentials), the task's request and what it has seen.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_provider_fedsched.triggers.pod import _off_the_loop, min_deferral_seconds


class FederationWaitTrigger(BaseTrigger):
    """Fire when the waiting try's decision changes (``status: changed``) or at ``deadline`` (epoch
    seconds, ``status: deadline``)."""

    def __init__(
        self,
        *,
        federation: Any,
        wait_for: dict[str, Any],
        deadline: float,
        not_before: float | None = None,
    ) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.federation = federation
        self.wait_for = dict(wait_for)
        self.deadline = float(deadline)
        self.not_before = not_before if not_before is not None else time.time() + min_deferral_seconds()

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "federation": self.federation,
                "wait_for": self.wait_for,
                "deadline": self.deadline,
                "not_before": self.not_before,
            },
        )

    def _watch(self) -> Any:
        from airflow_provider_fedsched.hooks.federation import FederationHook
        from airflow_provider_fedsched.hooks.waiting import WaitFor, WaitWatch

        return WaitWatch(FederationHook(self.federation), WaitFor.from_json(self.wait_for))

    async def run(self) -> AsyncIterator[TriggerEvent]:
        from airflow_provider_fedsched.hooks.waiting import check_seconds

        watch = await _off_the_loop(self._watch)
        interval = await _off_the_loop(check_seconds)
        news: str | None = None
        while news is None and (left := self.deadline - time.time()) > 0:
            await asyncio.sleep(min(interval, left))
            try:
                news = await _off_the_loop(watch.check)
            except Exception as exc:  # shared state unreadable for a moment: the deadline still holds
                self.log.warning("Could not check shared state while waiting: %s", exc)
        if (early := self.not_before - time.time()) > 0:
            await asyncio.sleep(early)
        status = "deadline" if news is None else "changed"
        yield TriggerEvent({"status": status, "message": news or "the wait's deadline"})  # type: ignore[no-untyped-call]
