"""Waiting for a compliant cluster: what a waiting try watches in shared state, and when it decides again.

A try told "wait" does not sleep a fixed interval. Every :func:`check_seconds` it reads two small items of
shared state (no cluster is asked): the snapshot index (when each candidate member was last observed) and
the marks of reservations released (a placement on that member ended or left it). It decides again, read
only, when one of its candidate members shows either since its last decision, or when a candidate's
snapshot is older than half the policy's TTL, as a decision judges it (nobody refreshed it while the
federation was idle: the decision refreshes it, single-flight, and so sees room freed outside the
federation too). A member where a
placement ended since its snapshot was taken is refreshed first, so that the decision sees the room. The
try wakes as soon as that decision is no longer "wait"; otherwise it waits on, silently, its deadline
unchanged. The sync operator runs :meth:`WaitWatch.wait`; a deferrable one defers to
``triggers/wait.py``, which runs the same :meth:`WaitWatch.check` in the triggerer.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from airflow_provider_fedsched.federation.request import TaskRequest
from airflow_provider_fedsched.federation.spec import PolicySpec
from airflow_provider_fedsched.hooks import tenancy

if TYPE_CHECKING:
    from airflow_provider_fedsched.hooks.federation import FederationHook

CHECK_SECONDS = 3.0
"""Seconds between two looks at shared state while a try waits (``[fedsched] wait_check_seconds``)."""
KEEP_LISTED = timedelta(minutes=2)
"""A waiting try decides again at least this often, so that its entry in the tenants' waiting list (fair
share, five minutes to live) stays current while nothing changes."""


def check_seconds() -> float:
    from airflow.configuration import conf

    return max(0.01, conf.getfloat("fedsched", "wait_check_seconds", fallback=CHECK_SECONDS))


@dataclass
class WaitFor:
    """What a waiting try decides again with, and what it has seen: plain JSON in trigger kwargs."""

    request: TaskRequest
    placement_id: str
    since: datetime
    """News is what shared state shows after this moment (the try's last decision)."""
    seen: dict[str, datetime] = field(default_factory=dict)
    """Candidate member -> when its snapshot the last decision used was observed."""
    exclude: dict[str, str] = field(default_factory=dict)
    excluded_at: dict[str, datetime] = field(default_factory=dict)
    impossible: dict[str, str] = field(default_factory=dict)
    policy: PolicySpec | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "request": self.request.model_dump(mode="json"),
            "placement_id": self.placement_id,
            "since": self.since.isoformat(),
            "seen": {name: at.isoformat() for name, at in self.seen.items()},
            "exclude": dict(self.exclude),
            "excluded_at": {name: at.isoformat() for name, at in self.excluded_at.items()},
            "impossible": dict(self.impossible),
            "policy": self.policy.model_dump(mode="json", by_alias=True) if self.policy is not None else None,
        }

    @classmethod
    def from_json(cls, document: Mapping[str, Any]) -> WaitFor:
        policy = document.get("policy")
        return cls(
            request=TaskRequest.model_validate(document["request"]),
            placement_id=str(document["placement_id"]),
            since=datetime.fromisoformat(document["since"]),
            seen={name: datetime.fromisoformat(at) for name, at in document.get("seen", {}).items()},
            exclude=dict(document.get("exclude", {})),
            excluded_at={
                name: datetime.fromisoformat(at) for name, at in document.get("excluded_at", {}).items()
            },
            impossible=dict(document.get("impossible", {})),
            policy=PolicySpec.model_validate(policy) if policy is not None else None,
        )


class WaitWatch:
    """The checks of one waiting try (see the module docstring)."""

    def __init__(self, hook: FederationHook, wait_for: WaitFor) -> None:
        self.hook = hook
        self.wait_for = wait_for
        self.clusters = list(wait_for.request.clusters or [c.name for c in hook.spec.clusters])
        self.decided = 0
        """Read-only decisions made (each one a change seen, or a stale snapshot refreshed)."""
        self._last_decision = time.monotonic()

    @classmethod
    def start(
        cls,
        hook: FederationHook,
        request: TaskRequest,
        placement_id: str,
        decided_at: datetime,
        *,
        exclude: Mapping[str, str] | None = None,
        excluded_at: Mapping[str, datetime] | None = None,
        impossible: Mapping[str, str] | None = None,
        policy: PolicySpec | None = None,
    ) -> WaitWatch:
        """The watch of a try whose decision at ``decided_at`` said "wait": news is what comes after it."""
        clusters = list(request.clusters or [c.name for c in hook.spec.clusters])
        seen = {name: s.observed_at for name, s in hook.state.snapshots.newest(clusters).items()}
        wait_for = WaitFor(
            request=request,
            placement_id=placement_id,
            since=decided_at,
            seen=seen,
            exclude=dict(exclude or {}),
            excluded_at=dict(excluded_at or {}),
            impossible=dict(impossible or {}),
            policy=policy,
        )
        return cls(hook, wait_for)

    def describe(self) -> str:
        """What the try waits for, in a sentence for its log."""
        ttl = self.hook.spec.policy.snapshot_ttl_seconds
        return (
            f"deciding again as soon as shared state shows room on {', '.join(self.clusters)}: a placement "
            f"there ends or a new snapshot changes the decision (looked at every {check_seconds():g}s; "
            f"a snapshot older than {ttl / 2:g}s is taken again)"
        )

    def check(self) -> str | None:
        """What changed for this try, once its decision is no longer "wait"; None while it still is."""
        wait_for, state = self.wait_for, self.hook.state
        now = datetime.now(UTC)
        freed = {c: at for c, at in state.reservations.freed(self.clusters).items() if at > wait_for.since}
        newest = state.snapshots.newest(self.clusters)
        ttl = self.hook.spec.policy.snapshot_ttl_seconds
        news = [f"a placement on {c} ended" for c in sorted(freed)]
        news += [
            f"a new snapshot of {c}"
            for c, snapshot in sorted(newest.items())
            if c not in freed and (c not in wait_for.seen or snapshot.observed_at > wait_for.seen[c])
        ]
        stale = [  # as a decision judges them: older than half the TTL
            c
            for c in self.clusters
            if c not in newest or (now - newest[c].observed_at).total_seconds() > ttl / 2
        ]
        listed = time.monotonic() - self._last_decision < KEEP_LISTED.total_seconds()
        if not news and not stale and listed:
            return None
        outdated = {c: at for c, at in freed.items() if c not in newest or newest[c].observed_at < at}
        if outdated:  # its snapshot cannot show the room the placement left yet
            self.hook.snapshots(list(outdated), fresh_after=outdated)
        decision = self.hook.decide(
            wait_for.request,
            exclude=wait_for.exclude,
            excluded_at=wait_for.excluded_at,
            impossible=wait_for.impossible,
            policy=wait_for.policy,
        )
        self.decided += 1
        self._last_decision = time.monotonic()
        wait_for.since = now
        wait_for.seen = {n: s.observed_at for n, s in state.snapshots.newest(self.clusters).items()}
        if decision.outcome == "wait":
            tenancy.note_decision(self.hook, wait_for.request, wait_for.placement_id, decision, now)
            return None
        what = "; ".join(news) or (
            f"the snapshots of {', '.join(stale)} were refreshed" if stale else "decided again"
        )
        return f"{what}: the decision is now {decision.outcome!r} ({decision.reason})"

    def wait(self, seconds: float, sleep: Callable[[float], None] = time.sleep) -> str | None:
        """Check every :func:`check_seconds` for up to ``seconds``: what changed, or None at the end."""
        interval = check_seconds()
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            sleep(min(interval, left))
            try:
                news = self.check()
            except Exception as exc:  # shared state unreadable for a moment: the deadline still holds
                self.hook.log.warning("Could not check shared state while waiting: %s", exc)
                continue
            if news is not None:
                return news
        return None
