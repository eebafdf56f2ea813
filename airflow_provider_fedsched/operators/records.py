"""The placement record of a try: kept in the task state store (so that a deferral or a restart continues
it), published as an XCom while the try runs (the Federation page shows waiting and failing-over tries
live) and when it ends; bounded in size and written only when it changes."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from airflow_provider_fedsched.federation.record import FAILURE_KINDS, XCOM_KEY, Attempt, PlacementRecord
from airflow_provider_fedsched.hooks import metrics

if TYPE_CHECKING:
    from airflow_provider_fedsched.hooks.federation import FederationHook

STATE_STORE_KEY = "fedsched_placement"
"""Task state store key holding the try's :class:`PlacementRecord` (cluster, namespace and pod included)."""
KEPT_DECISIONS = 8
"""Decisions kept in full: the try's first and the latest ones (each lists every candidate's scores)."""
REASON_LIMIT = 500


def new_record(context: Any) -> PlacementRecord:
    ti = context["ti"]
    map_index = getattr(ti, "map_index", -1)
    return PlacementRecord(
        dag_id=ti.dag_id,
        run_id=ti.run_id,
        task_id=ti.task_id,
        map_index=map_index if map_index is not None else -1,
        try_number=ti.try_number,
        started_at=datetime.now(UTC),
    )


def stored_record(context: Any) -> PlacementRecord | None:
    """The record in the task state store, of this try or an earlier one (None if unreadable)."""
    store = context.get("task_state_store")
    raw = store.get(STATE_STORE_KEY) if store is not None else None
    if not isinstance(raw, dict):
        return None
    try:
        return PlacementRecord.model_validate(raw)
    except ValueError:
        return None


def add_decision(record: PlacementRecord, decision: dict[str, Any]) -> None:
    """Append a decision, keeping the first and the latest :data:`KEPT_DECISIONS` - 1 in full."""
    record.decisions.append(decision)
    extra = len(record.decisions) - KEPT_DECISIONS
    if extra > 0:
        del record.decisions[1 : 1 + extra]
        record.decisions_dropped += extra


def short(text: str) -> str:
    return text if len(text) <= REASON_LIMIT else text[: REASON_LIMIT - 1] + "…"


class RecordKeeper:
    """Writes the record to the task state store and the XCom, each only when its content changed."""

    def __init__(self) -> None:
        self._saved: str | None = None
        self._published: str | None = None

    def save(self, context: Any, record: PlacementRecord, *, publish: bool = True) -> None:
        document = record.model_dump(mode="json")
        text = json.dumps(document, sort_keys=True)
        store = context.get("task_state_store")
        if store is not None and text != self._saved:
            store.set(STATE_STORE_KEY, document)
            self._saved = text
        if publish and text != self._published:
            context["ti"].xcom_push(key=XCOM_KEY, value=document)
            self._published = text


def end_attempt(
    hook: FederationHook, record: PlacementRecord, attempt: Attempt, outcome: str, reason: str
) -> None:
    """Close ``attempt``: its outcome, the cluster's reservation released, history samples written."""
    attempt.outcome = outcome  # type: ignore[assignment]
    attempt.reason = short(reason)
    attempt.ended_at = datetime.now(UTC)
    hook.release(attempt.cluster, attempt.placement_id)
    charge(hook, record, attempt)
    if outcome in FAILURE_KINDS:
        metrics.failover(outcome, attempt.cluster)
    sample: dict[str, Any] = {"at": attempt.ended_at.isoformat(), "outcome": outcome}
    if outcome in ("succeeded", "failed"):
        sample["duration"] = (attempt.ended_at - attempt.started_at).total_seconds()
    hook.record(attempt.cluster, "outcome", sample)
    if attempt.running_at is not None and not attempt.adopted:
        hook.record(
            attempt.cluster,
            "start_latency",
            {
                "at": attempt.running_at.isoformat(),
                # Container start times have whole-second resolution: never report below zero.
                "seconds": max(0.0, (attempt.running_at - attempt.started_at).total_seconds()),
            },
        )


def charge(hook: FederationHook, record: PlacementRecord, attempt: Attempt) -> None:
    """The ended attempt's cost on it, and as a charge in shared state (budgets, the cost report)."""
    if attempt.ended_at is None:
        return
    attempt.cost, moved = attempt.accrued_cost(attempt.ended_at)
    if attempt.tenant is not None:
        record.tenant = attempt.tenant
    try:
        hook.charge(
            attempt.placement_id,
            {
                "tenant": attempt.tenant,
                "cost": attempt.cost,
                "egress_gb": moved,
                "at": attempt.ended_at.isoformat(),
                "dag_id": record.dag_id,
                "task_id": record.task_id,
                "run_id": record.run_id,
                "cluster": attempt.cluster,
                "outcome": attempt.outcome,
            },
        )
    except Exception as exc:  # accounting never fails a try: the record still holds the cost
        hook.log.warning("Charge of attempt %s not recorded: %s", attempt.placement_id, exc)
    metrics.attempt_cost(attempt.cost, moved, attempt.cluster, attempt.tenant)


def succeed_with(record: PlacementRecord, attempt: Attempt, reason: str) -> None:
    """End the try in success with the known result of ``attempt``'s pod (an earlier try's, or one this
    try left in a silent cluster), added as an adopted attempt: the attempt itself keeps how it was left."""
    adopted = attempt.model_copy(
        update={
            "number": len(record.attempts) + 1,
            "adopted": True,
            "outcome": "succeeded",
            "decision": reason,
            # Its cost was counted when it ran (by the attempt or try that left it), never twice.
            "cost": 0.0,
            "price_per_hour": 0.0,
            "egress_gb": 0.0,
            "egress_cost": 0.0,
        }
    )
    record.attempts.append(adopted)
    record.cluster = adopted.cluster
    end_try(record, "succeeded", reason)


def end_try(record: PlacementRecord, outcome: str, reason: str) -> None:
    record.outcome = "succeeded" if outcome == "succeeded" else "failed"
    record.reason = short(reason)
    stop_waiting(record)
    record.ended_at = datetime.now(UTC)


def start_waiting(record: PlacementRecord, reason: str) -> float:
    """Mark the try waiting (once: the clock survives deferrals); returns seconds waited so far."""
    now = datetime.now(UTC)
    record.outcome = "waiting"
    record.reason = short(reason)
    if record.waiting_since is None:
        record.waiting_since = now
    return (now - record.waiting_since).total_seconds()


def note_placed(hook: FederationHook, record: PlacementRecord, cluster: str, tenant: str | None) -> None:
    """The try's first placement: how long it waited for it (0 when it did not), as a ``wait`` history
    sample of the cluster it went to (the Tenants view's wait-time plot, ``plugins/usage.waits``)."""
    hook.record(
        cluster,
        "wait",
        {
            "at": datetime.now(UTC).isoformat(),
            "seconds": round(record.waited_seconds, 3),
            "tenant": tenant or "",
            "dag_id": record.dag_id,
        },
    )


def stop_waiting(record: PlacementRecord) -> None:
    if record.waiting_since is not None:
        record.waited_seconds += (datetime.now(UTC) - record.waiting_since).total_seconds()
        record.waiting_since = None
