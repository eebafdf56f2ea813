"""Sensing: each member's snapshot collected on its own schedule and shared, refreshed single-flight.

For each stale cluster one worker (the lease holder) refreshes it while the others wait briefly for the
fresh snapshot in shared state; if it does not come, the stale one is returned and the engine's
freshness filter marks the cluster unavailable. A snapshot a worker could not judge (it was starved of
CPU) is never shared: it would blind every other worker for a whole TTL.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from airflow_provider_fedsched.federation.snapshot import ClusterSnapshot
from airflow_provider_fedsched.kube.access import ClusterAccess, ClusterAccessError
from airflow_provider_fedsched.kube.snapshots import (
    collect_snapshots,
    complete_jobs,
    delete_pods,
    ended_pods,
    self_inflicted,
)
from airflow_provider_fedsched.state.process import refresh_locks

if TYPE_CHECKING:
    from airflow_provider_fedsched.hooks.parts import HookParts


async def acollect(hook: HookParts, clusters: Iterable[str] | None) -> dict[str, ClusterSnapshot]:
    """Collect fresh snapshots now (concurrently), delete the orphans of those that answer, and store
    them in shared state with a utilization sample each."""
    names = list(clusters) if clusters is not None else [c.name for c in hook.spec.clusters]
    reachable: list[ClusterAccess] = []
    results: dict[str, ClusterSnapshot] = {}
    for name in names:
        try:
            reachable.append(hook.access(name))
        except ClusterAccessError as exc:
            reason = exc.problem + (f" (connection {exc.conn_id!r})" if exc.conn_id else "")
            results[name] = ClusterSnapshot(
                cluster=name, observed_at=datetime.now(UTC), reachable=False, reason=reason
            )
    limits: dict[str, dict[str, Any]] = {}
    results.update(await collect_snapshots(reachable, hook.snapshot_timeout, limits))
    for cluster, found_limits in limits.items():
        hook.state.quota_limits.put(cluster, found_limits)
    for access in reachable:
        found = results.get(access.cluster)
        if found is None or not found.reachable:
            continue
        await sweep(hook, access)
    shared = [snapshot for snapshot in results.values() if not self_inflicted(snapshot)]
    hook.state.snapshots.put(shared)
    for snapshot in shared:
        if snapshot.reachable:
            hook.state.history.append(snapshot.cluster, "utilization", _utilization_sample(snapshot))
    return results


ENDED_TRY_AGE = 30.0
"""Seconds a deferred try's entry is left to its trigger (which deletes the pod of a try a user ended)
before the sweep asks whether the try is over."""


async def sweep(hook: HookParts, access: ClusterAccess) -> None:
    """What a snapshot of a cluster that answers does besides condensing it: the pods of deferred tries
    that are over become orphans, the federation's pods that ended are written down (for the deferred
    tries still waiting on them, and for the orphans about to be deleted), then the orphans are deleted."""
    cluster = access.cluster
    deferred = hook.state.deferred.of(cluster)
    sweep_ended_tries(hook, cluster, deferred)
    orphans = hook.state.orphans.by_kind(cluster)
    unseen = [entry for entry in deferred if entry["kind"] == "pod" and not entry.get("ended")]
    ended: dict[tuple[str, str], str] | None = {}
    if unseen or orphans["pod"]:
        ended = await ended_pods(access, hook.snapshot_timeout)
    # A busy triggerer may start a trigger seconds after its task deferred; a pod that ends meanwhile, in
    # a cluster that then goes silent, would be seen by nobody, and a preemptible try would run its work
    # again elsewhere. Whoever sees the pod end first writes it down; the task then waits for the result.
    for entry in unseen:
        phase = (ended or {}).get((entry["namespace"], entry["pod"]))
        if phase is not None:
            hook.state.deferred.ended(cluster, entry["namespace"], entry["pod"], phase)
    if ended is None:
        orphans["pod"] = []  # how they ended is unknown: deleting them now would lose a result
    for namespace, name in orphans["pod"]:
        # A pod left in a silent cluster may have run to the end: its task must not run the work again.
        if (ended or {}).get((namespace, name)) == "Succeeded":
            hook.state.orphans.swept_succeeded(cluster, namespace, name)
    if orphans["job"]:
        # So may a Job: its gang's success is written down before it goes (the test-bed soak's
        # gang_job[1]: a finished Job deleted here unrecorded, and the retry ran the gang again).
        known = await complete_jobs(access, orphans["job"], hook.snapshot_timeout)
        # One the cluster did not answer about is kept: deleting it now could lose a result.
        orphans["job"] = [job for job in orphans["job"] if job in known]
        for namespace, name in orphans["job"]:
            if known[(namespace, name)]:
                hook.state.orphans.swept_succeeded(cluster, namespace, name, kind="job")
    for kind, items in orphans.items():
        for namespace, name in await delete_pods(access, items, hook.snapshot_timeout, kind) if items else []:
            hook.state.orphans.forget(cluster, namespace, name, kind)


def sweep_ended_tries(hook: HookParts, cluster: str, deferred: list[dict[str, Any]]) -> None:
    """Pods (and Jobs) of deferred tries that ended while no trigger watched them become orphans (deleted
    next).

    The pod trigger deletes the pod of a try that ends while it waits; this catches what no trigger ran
    for: a trigger row cleaned up before a restarted triggerer picked it up, and every deferred Job try (its
    timer trigger deletes nothing) a user ended. A try whose state nobody in
    this process can tell is left for a later sweep."""
    from airflow_provider_fedsched.hooks.tries import state_if_over

    now = time.time()
    for entry in deferred:
        if now - float(entry["since"]) < ENDED_TRY_AGE:
            continue
        try:
            state = state_if_over(entry["dag_id"], entry["run_id"], entry["task_id"], entry["map_index"])
        except Exception as exc:
            hook.log.debug("Cannot tell whether the try of pod %s ended: %s", entry["pod"], exc)
            return
        if state is None:
            continue
        hook.log.warning(
            "The try of pod %s/%s in %s is over (task instance %s) and no trigger deleted it: deleting it",
            entry["namespace"],
            entry["pod"],
            cluster,
            state,
        )
        if entry.get("ended") == "Succeeded":
            # Its trigger saw it Succeeded and the try ended before it resumed: the next try takes that
            # success even if the pod is gone by then (the test-bed soak: a try reset by a stalled
            # scheduler, its pod deleted with its node, and the retry ran the work again).
            hook.state.orphans.swept_succeeded(cluster, entry["namespace"], entry["pod"], entry["kind"])
        hook.state.orphans.add(cluster, entry["namespace"], entry["pod"], entry["kind"])
        hook.state.deferred.forget(cluster, entry["namespace"], entry["pod"], entry["kind"])


def snapshots(
    hook: HookParts,
    clusters: Iterable[str] | None,
    now: datetime | None,
    fresh_after: Mapping[str, datetime] | None = None,
    wait: bool = True,
) -> dict[str, ClusterSnapshot]:
    """Snapshots no older than half the policy's TTL, refreshing stale ones single-flight; a cluster in
    ``fresh_after`` also counts as stale while its snapshot was observed before that moment. With
    ``wait`` False, a cluster another worker is refreshing is not waited for (its stored snapshot is
    returned, however old): a caller that must answer at once, the Federation page."""
    names = list(clusters) if clusters is not None else [c.name for c in hook.spec.clusters]
    ttl = hook.spec.policy.snapshot_ttl_seconds
    now = now or datetime.now(UTC)
    after = dict(fresh_after or {})

    def usable(snapshot: ClusterSnapshot, moment: datetime) -> bool:
        newer = snapshot.cluster not in after or snapshot.observed_at >= after[snapshot.cluster]
        return newer and _age(snapshot, moment) <= ttl / 2

    found = hook.state.snapshots.newest(names)
    stale = [n for n in names if n not in found or not usable(found[n], now)]
    if not stale:
        return found
    owner = f"{socket.gethostname()}:{os.getpid()}:{threading.get_ident()}"
    lease_ttl = timedelta(seconds=_lease_seconds(hook))
    locks: list[threading.Lock] = []
    candidates: list[str] = []
    mine: list[str] = []
    for name in stale:
        lock = refresh_locks((hook.spec.name, name))
        if not lock.acquire(blocking=False):
            continue  # another thread of this process is refreshing it
        locks.append(lock)
        candidates.append(name)
    try:
        mine = hook.state.leases.claim(candidates, owner, now, lease_ttl) if candidates else []
        # A worker that refreshed just before our claim has left a fresh snapshot: use it.
        current = hook.state.snapshots.newest(mine) if mine else {}
        fresh = {n: s for n, s in current.items() if usable(s, datetime.now(UTC))}
        found.update(fresh)
        if to_refresh := [n for n in mine if n not in fresh]:
            found.update(hook.collect(to_refresh))
    finally:
        for name in mine:
            hook.state.leases.end(name, owner)
        for lock in locks:
            lock.release()
    waiting = [n for n in stale if n not in mine]
    if waiting and wait:
        found.update(_await_refresh(hook, waiting, usable))
    if (datetime.now(UTC) - now).total_seconds() > ttl / 4:
        # The refresh took a while: the snapshots that were fresh at the start may have aged past the TTL
        # meanwhile (a decision would then find them stale and wait); other workers have likely refreshed
        # them since: take the newest (one read of the index).
        for name, newer in hook.state.snapshots.newest(names).items():
            if name not in found or newer.observed_at > found[name].observed_at:
                found[name] = newer
    return found


AWAIT_POLL_FIRST = 0.05
AWAIT_POLL_MAX = 1.0
"""Seconds between two reads of shared state while another worker refreshes a snapshot (backing off)."""


def _await_refresh(
    hook: HookParts, clusters: list[str], usable: Callable[[ClusterSnapshot, datetime], bool]
) -> dict[str, ClusterSnapshot]:
    """Wait (polling shared state) for another worker's refresh of ``clusters``: the first stored snapshot
    that is ``usable`` now is taken.

    Usable, not "observed after I asked": a refresh reads the cluster, then sweeps it and stores the
    snapshot, and on a loaded machine a worker that asked in between (CI: more than a second) would
    refuse that fresh snapshot, wait out the lease and read the cluster itself.

    The polls back off (50 ms, doubling, at most :data:`AWAIT_POLL_MAX`): every poll is a read of shared
    state, through the API server for a task, and twenty workers polling every 50 ms while one refreshes
    kept a 2-core API server busy enough to slow that very refresh (the full soak: 21 s decisions)."""
    deadline = time.monotonic() + _lease_seconds(hook)
    result: dict[str, ClusterSnapshot] = {}
    pending = list(clusters)
    pause = AWAIT_POLL_FIRST
    while pending and time.monotonic() < deadline:
        for name, snapshot in hook.state.snapshots.newest(pending).items():
            if usable(snapshot, datetime.now(UTC)):
                result[name] = snapshot
                pending.remove(name)
        if pending:
            time.sleep(min(pause, max(0.0, deadline - time.monotonic())))
            pause = min(pause * 2, AWAIT_POLL_MAX)
    if pending:
        # The lease holder did not deliver in time (a starved or dead worker): never stay blind.
        result.update(hook.collect(pending))
    return result


def _lease_seconds(hook: HookParts) -> float:
    """How long a refresh lease holds, and how long the others wait for its snapshot: the snapshot's own
    timeout twice, plus room for a worker that is slow to start (a fresh process, a busy machine)."""
    return hook.snapshot_timeout * 2 + 10


def _age(snapshot: ClusterSnapshot, now: datetime) -> float:
    return (now - snapshot.observed_at).total_seconds()


def _utilization_sample(snapshot: ClusterSnapshot) -> dict[str, Any]:
    allocatable: dict[str, int] = {}
    requested: dict[str, int] = {}
    for node in snapshot.nodes:
        if not node.schedulable:
            continue
        for name, amount in node.allocatable.items():
            allocatable[name] = allocatable.get(name, 0) + amount
            requested[name] = requested.get(name, 0) + node.requested.get(name, 0)
    return {
        "at": snapshot.observed_at.isoformat(),
        "used_fraction": {n: requested[n] / a for n, a in allocatable.items() if a},
    }
