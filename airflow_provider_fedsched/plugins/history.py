"""Data access for the Federation page: placement records from XComs, member clusters from shared state.

Placement history is read straight from the ``xcom`` table with SQL, because it must stay fast with
10,000 recorded tries: filters, ordering and pagination happen in the database, over narrow rows (no
``value`` column), and only the page's values are then fetched and parsed. Airflow keeps one XCom per task
instance and key and clears a task's XComs when it runs again, so there is one record per task instance:
the latest try's.

Airflow 3 stores an XCom value as a JSON *string* holding the JSON document (the Task SDK serializes
before sending; the column type is JSON), so the SQL filters on fields of the record unwrap it first. Any
value under our key that is not a readable record (malformed JSON, another shape, a newer or foreign
writer) becomes an "unreadable" row, never an error.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from pydantic import ValidationError
from sqlalchemy import Text, and_, case, cast, exists, func, literal, literal_column, or_, select, tuple_
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import Session
from sqlalchemy.sql.elements import ColumnElement

from airflow_provider_fedsched.federation._errors import PermanentError
from airflow_provider_fedsched.federation.assets import AssetDataset
from airflow_provider_fedsched.federation.decision import Decision
from airflow_provider_fedsched.federation.record import FAILURE_KINDS, XCOM_KEY, PlacementRecord
from airflow_provider_fedsched.federation.spec import SpecError
from airflow_provider_fedsched.validation.stored import check_depth, loads_bounded

MAX_PAGE_SIZE = 200
DEFAULT_PAGE_SIZE = 50
LEFT_OUTCOMES = FAILURE_KINDS
"""Attempt outcomes that moved the task to another cluster: a try with one of these failed over (the
failure vocabulary of ``federation/record.py``, so that a new kind of failure is never missing here)."""
OUTCOME_FILTERS = ("succeeded", "failed", "running", "waiting", "failover")
"""``outcome=`` values: a record's outcome, or ``failover`` for tries that left at least one cluster."""
RECENT_SAMPLES = 20
"""History samples per cluster summarized on the clusters view."""
LARGE_EGRESS_GB = 100.0
"""A try that moved at least this much data between clusters is highlighted on the page."""


@dataclass(frozen=True, slots=True)
class PlacementFilter:
    dag_id: str | None = None
    run_id: str | None = None
    task_id: str | None = None
    cluster: str | None = None
    """Tries that ran on or attempted this cluster."""
    outcome: str | None = None
    dag_ids: frozenset[str] | None = None
    """DAGs the caller may read (None: no restriction)."""


# --- Links -------------------------------------------------------------------------------------------
def task_instance_path(dag_id: str, run_id: str, task_id: str, map_index: int, ui_root: str = "") -> str:
    """The task instance's page in the Airflow 3 UI (react router: ``dags/:dagId/runs/:runId/tasks/...``)."""
    dag, run, task = (quote(part, safe="") for part in (dag_id, run_id, task_id))
    path = f"{ui_root}/dags/{dag}/runs/{run}/tasks/{task}"
    return path + (f"/mapped/{map_index}" if map_index >= 0 else "")


# --- SQL over the xcom table ---------------------------------------------------------------------------
def _xcom() -> Any:
    from airflow.models.xcom import XComModel

    return XComModel


def _value_text() -> Any:
    """The stored value as text, parsed by :func:`parse_record`: a malformed value cannot break a query."""
    return _xcom().value.cast(Text()).label("value")


def _record_fields(dialect: str) -> tuple[Any, Any, Any]:
    """SQL expressions for the record's ``cluster``, ``outcome`` and a ``failed over`` flag.

    The value is unwrapped when it is a JSON string holding the record (how Airflow 3 stores it) and
    guarded with ``json_valid`` so that a malformed value yields NULLs instead of a query error.
    """
    xcom = _xcom()
    if dialect == "sqlite":
        inner = case(
            (func.json_type(xcom.value) == "text", func.json_extract(xcom.value, "$")),
            else_=xcom.value,
        )
        document = case((func.json_valid(xcom.value) & func.json_valid(inner), inner), else_=None)

        def field(path: str) -> Any:
            return func.json_extract(document, path)

        return field("$.cluster"), field("$.outcome"), document
    if dialect == "postgresql":
        # JSONB: a record stored as a JSON string is unwrapped with #>> and re-parsed when it looks
        # like an object; anything else yields NULL fields.
        as_text = xcom.value.op("#>>")(literal_column("'{}'"))
        document = case(
            (func.jsonb_typeof(xcom.value) == "object", xcom.value),
            (
                and_(func.jsonb_typeof(xcom.value) == "string", as_text.op("~")(r"^\s*\{.*\}\s*$")),
                cast(as_text, JSONB),
            ),
            else_=None,
        )
        return document.op("->>")("cluster"), document.op("->>")("outcome"), document
    raise NotImplementedError(dialect)


def _where(session: Session, flt: PlacementFilter) -> list[ColumnElement[bool]]:
    xcom = _xcom()
    conditions: list[ColumnElement[bool]] = [xcom.key == XCOM_KEY]
    if flt.dag_ids is not None:
        conditions.append(xcom.dag_id.in_(sorted(flt.dag_ids)))
    for column, wanted in ((xcom.dag_id, flt.dag_id), (xcom.run_id, flt.run_id), (xcom.task_id, flt.task_id)):
        if wanted:
            conditions.append(column == wanted)
    if not (flt.cluster or flt.outcome):
        return conditions
    dialect = session.get_bind().dialect.name
    cluster, outcome, document = _record_fields(dialect)
    if flt.cluster:
        if dialect == "sqlite":
            attempts = func.json_each(document, "$.attempts").table_valued("value").alias("attempt")
            attempted: ColumnElement[bool] = exists(
                select(literal_column("1"))
                .select_from(attempts)
                .where(func.json_extract(attempts.c.value, "$.cluster") == flt.cluster)
            )
        else:
            attempted = document.op("->")("attempts").op("@>")(
                cast(literal(json.dumps([{"cluster": flt.cluster}])), JSONB)
            )
        # A cheap substring test first, so the JSON is parsed only for rows that mention the cluster.
        conditions.append(xcom.value.cast(Text()).contains(flt.cluster, autoescape=True))
        conditions.append(or_(cluster == flt.cluster, attempted))
    if flt.outcome == "failover":
        if dialect == "sqlite":
            attempts = func.json_each(document, "$.attempts").table_valued("value").alias("left_attempt")
            left: ColumnElement[bool] = exists(
                select(literal_column("1"))
                .select_from(attempts)
                .where(func.json_extract(attempts.c.value, "$.outcome").in_(sorted(LEFT_OUTCOMES)))
            )
        else:
            left = or_(
                *(
                    document.op("->")("attempts").op("@>")(
                        cast(literal(json.dumps([{"outcome": name}])), JSONB)
                    )
                    for name in sorted(LEFT_OUTCOMES)
                )
            )
        # Substring prefilter as for clusters: only records naming a leaving outcome are parsed.
        value_text = xcom.value.cast(Text())
        conditions.append(or_(*(value_text.contains(name) for name in sorted(LEFT_OUTCOMES))))
        conditions.append(left)
    elif flt.outcome:
        conditions.append(outcome == flt.outcome)
    return conditions


def count_placements(session: Session, flt: PlacementFilter) -> int:
    xcom = _xcom()
    return int(
        session.execute(select(func.count()).select_from(xcom).where(*_where(session, flt))).scalar_one()
    )


def list_placements(
    session: Session, flt: PlacementFilter, limit: int = DEFAULT_PAGE_SIZE, offset: int = 0, ui_root: str = ""
) -> list[dict[str, Any]]:
    """One page of rows, newest first. Only this page's values are loaded and parsed."""
    xcom = _xcom()
    # Narrow rows for the sort (no value column), then the values of just this page.
    page = session.execute(
        select(xcom.dag_run_id, xcom.task_id, xcom.map_index, xcom.dag_id, xcom.run_id, xcom.timestamp)
        .where(*_where(session, flt))
        .order_by(xcom.timestamp.desc(), xcom.dag_run_id.desc(), xcom.task_id, xcom.map_index)
        .limit(limit)
        .offset(offset)
    ).all()
    if not page:
        return []
    keys = [(row.dag_run_id, row.task_id, row.map_index) for row in page]
    values = {
        (row.dag_run_id, row.task_id, row.map_index): row.value
        for row in session.execute(
            select(xcom.dag_run_id, xcom.task_id, xcom.map_index, _value_text()).where(
                xcom.key == XCOM_KEY, tuple_(xcom.dag_run_id, xcom.task_id, xcom.map_index).in_(keys)
            )
        )
    }
    return [
        placement_row(
            values.get((row.dag_run_id, row.task_id, row.map_index)),
            dag_id=row.dag_id,
            run_id=row.run_id,
            task_id=row.task_id,
            map_index=row.map_index,
            recorded_at=row.timestamp,
            ui_root=ui_root,
        )
        for row in page
    ]


def get_placement_value(session: Session, dag_id: str, run_id: str, task_id: str, map_index: int) -> Any:
    """The stored value of one task instance's record, or ``KeyError`` when there is none."""
    xcom = _xcom()
    row = session.execute(
        select(_value_text(), xcom.timestamp).where(
            xcom.key == XCOM_KEY,
            xcom.dag_id == dag_id,
            xcom.run_id == run_id,
            xcom.task_id == task_id,
            xcom.map_index == map_index,
        )
    ).first()
    if row is None:
        raise KeyError((dag_id, run_id, task_id, map_index))
    return row.value, row.timestamp


# --- Parsing ---------------------------------------------------------------------------------------------
class UnreadableRecord(PermanentError, ValueError):
    """A value under our XCom key that is not a placement record this version can read."""


def parse_record(value: Any) -> PlacementRecord:
    """The record in a stored XCom value (a JSON string, a JSON document, or already a mapping)."""
    try:
        for _ in range(3):  # a JSON string holding JSON (double-encoded), not more
            if not isinstance(value, str | bytes):
                break
            value = loads_bounded(value)
        check_depth(value)  # a deeply nested value is a row that says so, never a RecursionError (a 500)
    except SpecError as exc:
        raise UnreadableRecord(f"not a placement record ({exc})") from None
    except (ValueError, TypeError, RecursionError) as exc:
        raise UnreadableRecord(f"not JSON ({exc.__class__.__name__})") from None
    if not isinstance(value, Mapping):
        raise UnreadableRecord(f"not a placement record (a JSON {type(value).__name__})")
    try:
        return PlacementRecord.model_validate(value)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first.get("loc", ())) or "record"
        raise UnreadableRecord(f"not a placement record ({where}: {first.get('msg', 'invalid')})") from None


@dataclass(frozen=True)
class RecordsRead:
    """The records of a window (:func:`records_between`), oldest first, and the values that were not."""

    records: list[PlacementRecord]
    unreadable: list[tuple[str, str, str, int, str]]
    """``(dag_id, run_id, task_id, map_index, why)`` of each value under the key that is not a record."""


def records_between(
    session: Session,
    since: datetime | None = None,
    until: datetime | None = None,
    dag_id: str | None = None,
    dag_ids: frozenset[str] | None = None,
) -> RecordsRead:
    """Every stored record whose try started in ``[since, until)`` (``fedsched history export``, the audit),
    of ``dag_id`` or ``dag_ids`` when given; an unreadable value is kept by name, since when its try started
    cannot be told."""
    xcom = _xcom()
    query = select(xcom.dag_id, xcom.run_id, xcom.task_id, xcom.map_index, xcom.value).where(
        xcom.key == XCOM_KEY
    )
    if dag_id is not None:
        query = query.where(xcom.dag_id == dag_id)
    if dag_ids is not None:
        query = query.where(xcom.dag_id.in_(sorted(dag_ids)))
    found = RecordsRead([], [])
    for row in session.execute(query.order_by(xcom.timestamp)):
        try:
            record = parse_record(row.value)
        except UnreadableRecord as exc:
            found.unreadable.append((row.dag_id, row.run_id, row.task_id, row.map_index, str(exc)))
            continue
        if (since is None or record.started_at >= since) and (until is None or record.started_at < until):
            found.records.append(record)
    return found


def audit_report(
    session: Session,
    hook: Any,
    *,
    now: datetime,
    since: datetime | None = None,
    until: datetime | None = None,
    dataset: str | None = None,
    dag_ids: frozenset[str] | None = None,
) -> dict[str, Any]:
    """The sovereignty audit (``federation/audit.py``) of the records in the window, each member's ledger
    read now through ``hook``: what ``fedsched audit`` prints and the page's Audit tab shows. ``dag_ids``:
    only those DAGs' records (the DAGs the page's user may read), said in the report's scope."""
    from airflow_provider_fedsched.federation.audit import UnreadableTry, build_report
    from airflow_provider_fedsched.hooks import ledgers

    spec = hook.spec
    read = records_between(session, since, until, dag_ids=dag_ids)
    return build_report(
        spec,
        read.records,
        ledgers.readings(hook, [member.name for member in spec.clusters]),
        generated_at=now,
        unreadable=[UnreadableTry(*row) for row in read.unreadable],
        since=since,
        until=until,
        dataset=dataset,
        scope=None if dag_ids is None else "the DAGs the requesting user may read",
    )


def failed_over(record: PlacementRecord) -> bool:
    return any(attempt.outcome in LEFT_OUTCOMES for attempt in record.attempts)


def live_state(record: PlacementRecord) -> dict[str, Any] | None:
    """For a try still waiting or running: since when and why (None once it ended)."""
    if record.ended_at is not None or record.outcome not in ("waiting", "running"):
        return None
    current = record.current
    if record.outcome == "waiting":
        since = record.waiting_since or record.started_at
        why = record.reason or "no compliant cluster has room now"
    elif current is not None and current.outcome == "running":
        since = current.started_at
        left = [a for a in record.attempts if a.outcome in LEFT_OUTCOMES]
        why = current.decision
        if left:
            why = f"failed over from {left[-1].cluster} ({left[-1].outcome}): {current.decision}"
    else:
        since, why = record.started_at, record.reason
    return {"state": record.outcome, "since": since.isoformat(), "why": why}


def placement_row(
    value: Any,
    *,
    dag_id: str,
    run_id: str,
    task_id: str,
    map_index: int,
    recorded_at: datetime | None,
    ui_root: str = "",
) -> dict[str, Any]:
    """The JSON row of one task try; an unreadable value gives a row that says so."""
    row: dict[str, Any] = {
        "dag_id": dag_id,
        "run_id": run_id,
        "task_id": task_id,
        "map_index": map_index,
        "recorded_at": recorded_at.isoformat() if recorded_at else None,
        "task_instance_url": task_instance_path(dag_id, run_id, task_id, map_index, ui_root),
    }
    try:
        record = parse_record(value)
    except UnreadableRecord as exc:
        return {**row, "readable": False, "error": str(exc), "try_number": None}
    now = datetime.now(UTC)
    attempts = []
    for attempt in record.attempts:
        # The record's own accounting (Attempt.accrued_cost): nothing for a pod that never ran; a
        # running attempt's compute so far.
        accrued, moved = attempt.accrued_cost(record.ended_at or now)
        cost = attempt.cost if attempt.cost is not None else accrued
        attempts.append((attempt, round(cost, 6), round(moved, 6)))
    egress_gb = round(sum(moved for _, _, moved in attempts), 6)
    return {
        **row,
        "readable": True,
        "try_number": record.try_number,
        "cluster": record.cluster,
        "outcome": record.outcome,
        "reason": record.reason,
        "plan_used": record.plan_used,
        "failover": failed_over(record),
        "live": live_state(record),
        "attempts": [
            {
                "number": attempt.number,
                "cluster": attempt.cluster,
                "namespace": attempt.namespace,
                "pod": attempt.pod,
                "outcome": attempt.outcome,
                "reason": attempt.reason,
                "decision": attempt.decision,
                "started_at": attempt.started_at.isoformat(),
                "ended_at": attempt.ended_at.isoformat() if attempt.ended_at else None,
                "resumed_from_checkpoint": attempt.resumed_from_checkpoint,
                "price_per_hour": attempt.price_per_hour,
                "cost": cost,
                "egress_gb": moved,
                "egress_cost": attempt.egress_cost if moved else 0.0,
                "indices": attempt.indices,
            }
            for attempt, cost, moved in attempts
        ],
        "cost": round(sum(cost for _, cost, _ in attempts), 6),
        "egress_gb": egress_gb,
        "large_egress": egress_gb >= LARGE_EGRESS_GB,
        "decisions": len(record.decisions),
        "excluded": record.excluded,
        "waited_seconds": round(record.waited(now), 3),
        "failover_seconds": round(record.failover_seconds, 3),
        "started_at": record.started_at.isoformat(),
        "ended_at": record.ended_at.isoformat() if record.ended_at else None,
    }


def decision_detail(raw: Mapping[str, Any]) -> dict[str, Any]:
    """One decision in the shape the page renders; a decision this version cannot read says so."""
    try:
        decision = Decision.from_dict(dict(raw)).to_dict()
    except (KeyError, TypeError, ValueError, AttributeError, RecursionError) as exc:
        return {"readable": False, "error": f"unreadable decision ({exc.__class__.__name__})"}
    plugins: list[str] = []
    for candidate in decision["candidates"]:
        plugins.extend(name for name in candidate["breakdown"] if name not in plugins)
    return {"readable": True, "plugins": plugins, **decision}


def placement_detail(
    value: Any,
    *,
    dag_id: str,
    run_id: str,
    task_id: str,
    map_index: int,
    recorded_at: datetime | None,
    ui_root: str = "",
) -> dict[str, Any]:
    row = placement_row(
        value,
        dag_id=dag_id,
        run_id=run_id,
        task_id=task_id,
        map_index=map_index,
        recorded_at=recorded_at,
        ui_root=ui_root,
    )
    if not row["readable"]:
        return {**row, "decisions": []}
    record = parse_record(value)
    return {
        **row,
        "data": data_detail(record.request),
        "decisions": [decision_detail(raw) for raw in record.decisions],
    }


def data_detail(request: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """The try's Airflow Assets as its request recorded them: for an inlet, where its latest event says it
    was written (cluster, region), the size its writer reported and the rule it inherited. An item this
    version cannot read is left out (the decisions still say what placed the try)."""
    raw = request.get("assets") if isinstance(request, Mapping) else None
    shown = []
    for item in raw if isinstance(raw, list) else []:
        try:
            asset = AssetDataset.model_validate(item)
        except ValidationError:
            continue
        shown.append(
            asset.model_dump(
                include={
                    "uri",
                    "name",
                    "role",
                    "written_on",
                    "written_region",
                    "written_size_gb",
                    "inherited_regions",
                }
            )
        )
    return shown


# --- Member clusters ----------------------------------------------------------------------------------
def _median(values: Sequence[float]) -> float | None:
    return round(statistics.median(values), 3) if values else None


def refresh_for_page(hook: Any) -> tuple[datetime, str | None]:
    """Take again the snapshots older than half the policy's TTL (the page's cache: a page load within
    that time asks no member), concurrently, each member within the hook's snapshot timeout, single-flight
    with every worker; a member another process is refreshing right now is not waited for. Returns when
    the refresh started, and why it failed (None when it did not)."""
    started = datetime.now(UTC)
    try:
        hook.snapshots(wait=False)
    except Exception as exc:  # the page still shows what is stored, saying why it is not newer
        return started, f"{type(exc).__name__}: {exc}"
    return started, None


def snapshot_note(
    snapshot: Any, refreshed_since: datetime, refresh_error: str | None, ttl: float, now: datetime
) -> str:
    """Why the snapshot shown is as old as it is, in a sentence for the page."""
    if snapshot is None:
        return "no snapshot yet: " + (refresh_error or "another process is taking the first one")
    age = max(0.0, (now - snapshot.observed_at).total_seconds())
    if snapshot.observed_at >= refreshed_since:
        return "taken for this page load"
    if age <= ttl / 2:
        return f"taken {age:.0f}s ago; a page load takes snapshots older than {ttl / 2:g}s again"
    if refresh_error is not None:
        return f"{age:.0f}s old: could not be taken again ({refresh_error})"
    return f"{age:.0f}s old: another process is taking it again right now"


def cluster_overview(hook: Any, now: datetime | None = None) -> list[dict[str, Any]]:
    """Every member of the hook's federation: spec, latest snapshot (refreshed when stale), cooldown and
    recent history; a member that does not answer is unavailable, with the reason and when it last did."""
    from airflow_provider_fedsched.federation.snapshot import summarize

    refreshed_since, refresh_error = refresh_for_page(hook)
    now = max(now or datetime.now(UTC), datetime.now(UTC))  # after the refresh
    ttl = float(hook.spec.policy.snapshot_ttl_seconds)
    rows: list[dict[str, Any]] = []
    for member in hook.spec.clusters:
        snapshot = hook.stored_snapshot(member.name)
        summary = summarize(snapshot, now) if snapshot is not None else None
        answered = [
            s["at"] for s in hook.history(member.name, "utilization")[-1:] if isinstance(s.get("at"), str)
        ]
        last_answered = datetime.fromisoformat(answered[0]) if answered else None
        cooldowns = hook.cooldown_details(member.name, now)
        cooldown = cooldowns[0] if cooldowns else None
        latency = [
            float(s["seconds"])
            for s in hook.history(member.name, "start_latency")[-RECENT_SAMPLES:]
            if isinstance(s.get("seconds"), int | float)
        ]
        outcomes = hook.history(member.name, "outcome")[-RECENT_SAMPLES:]
        durations = [float(s["duration"]) for s in outcomes if isinstance(s.get("duration"), int | float)]
        counts: dict[str, int] = {}
        for sample in outcomes:
            name = str(sample.get("outcome", "unknown"))
            counts[name] = counts.get(name, 0) + 1
        rows.append(
            {
                "name": member.name,
                "region": member.region,
                "group": member.proximity_group,
                "snapshot": summary is not None,
                "reachable": summary["reachable"] if summary else None,
                "reason": (summary["reason"] if summary else "no snapshot yet") or "",
                "observed_at": snapshot.observed_at.isoformat() if snapshot else None,
                "snapshot_age_seconds": summary["age_seconds"] if summary else None,
                "snapshot_note": snapshot_note(snapshot, refreshed_since, refresh_error, ttl, now),
                "last_answered_at": last_answered.isoformat() if last_answered else None,
                "last_answered_age_seconds": (
                    round(max(0.0, (now - last_answered).total_seconds()), 3) if last_answered else None
                ),
                "nodes": summary["nodes"] if summary else 0,
                "ready_nodes": summary["ready_nodes"] if summary else 0,
                "free": summary["free"] if summary else {},
                "total": summary["total"] if summary else {},
                "largest_free_node": summary["largest_free_node"] if summary else None,
                "missing_permissions": summary["missing_permissions"] if summary else [],
                "cooldown": (
                    {
                        "until": cooldown[1].isoformat(),
                        "reason": (f"namespace {cooldown[0]} only: " if cooldown[0] else "") + cooldown[2],
                        "namespace": cooldown[0],
                    }
                    if cooldown
                    else None
                ),
                "start_latency": {
                    "samples": len(latency),
                    "median_seconds": _median(latency),
                    "last_seconds": round(latency[-1], 3) if latency else None,
                },
                "outcomes": {
                    "samples": len(outcomes),
                    "counts": counts,
                    "recent": [str(s.get("outcome", "unknown")) for s in outcomes[-10:]],
                    "median_duration_seconds": _median(durations),
                },
            }
        )
    return rows
