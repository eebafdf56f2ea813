"""Placement records as the operator writes them, and a fast way to store them as XCom rows.

Shared by the API tests and ``benchmarks/bench_history_api.py``. Rows are inserted into the ``xcom`` table
directly (foreign-key checks off for that connection, so no DAG run or task instance rows are needed),
with the value stored the way Airflow 3 stores it: a JSON string holding the record.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from airflow_provider_fedsched.federation.decision import Candidate, Decision, Rejection, ScoreTerm
from airflow_provider_fedsched.federation.record import XCOM_KEY, Attempt, PlacementRecord

BASE_TIME = datetime(2026, 1, 1, tzinfo=UTC)


def decision(cluster: str, others: Iterable[str] = ("west-general",)) -> dict[str, Any]:
    candidates = [
        Candidate(
            cluster=name,
            score=90.0 - 10 * rank,
            breakdown={
                "Cost": ScoreTerm(
                    raw=1.5 + rank, normalized=100.0 - 20 * rank, weight=2.0, weighted=50.0 - rank
                ),
                "Locality": ScoreTerm(raw=0.0, normalized=50.0, weight=1.0, weighted=40.0 - 10 * rank),
            },
        )
        for rank, name in enumerate([cluster, *others])
    ]
    return Decision(
        outcome="placed",
        cluster=cluster,
        candidates=candidates,
        rejected=[Rejection("north-gpu", "Sovereignty", "dataset eu-customers must stay in eu-west-1", True)],
        snapshot_age_seconds={c.cluster: 3.0 for c in candidates},
        reason=f"{cluster}: best score",
        decided_at=BASE_TIME,
    ).to_dict()


def record(
    dag_id: str = "etl",
    run_id: str = "manual__1",
    task_id: str = "load",
    *,
    clusters: Iterable[str] = ("east-cpu",),
    left_outcome: str = "insufficient",
    outcome: str = "succeeded",
    map_index: int = -1,
    try_number: int = 1,
) -> dict[str, Any]:
    """A record whose task tried ``clusters`` in order: every one but the last was left (a failover)."""
    names = list(clusters)
    attempts = [
        Attempt(
            number=number,
            cluster=name,
            namespace="default",
            pod=f"{task_id}-{number}",
            placement_id=f"p{number}",
            outcome=outcome if number == len(names) else left_outcome,  # type: ignore[arg-type]
            reason="" if number == len(names) else f"quota exceeded on {name}",
            started_at=BASE_TIME,
            ended_at=BASE_TIME + timedelta(seconds=5),
            decision=f"{name}: best score",
        )
        for number, name in enumerate(names, start=1)
    ]
    return PlacementRecord(
        dag_id=dag_id,
        run_id=run_id,
        task_id=task_id,
        map_index=map_index,
        try_number=try_number,
        cluster=names[-1] if names else None,
        outcome=outcome,  # type: ignore[arg-type]
        reason="",
        decisions=[decision(name) for name in names],
        attempts=attempts,
        excluded={name: f"{left_outcome}: quota" for name in names[:-1]},
        waited_seconds=0.0,
        failover_seconds=1.25 * (len(names) - 1),
        started_at=BASE_TIME,
        ended_at=BASE_TIME + timedelta(seconds=10),
    ).model_dump(mode="json")


def insert_xcoms(rows: Iterable[Mapping[str, Any]], key: str = XCOM_KEY) -> None:
    """Insert XCom rows (``dag_id, run_id, task_id, map_index, timestamp, value``), stored as Airflow 3 does.

    ``dag_run_id`` is derived from ``run_id`` so that runs group as in Airflow. A ``raw_value`` item is
    stored verbatim (for malformed values).
    """
    from airflow.models.xcom import XComModel
    from airflow.settings import engine

    run_ids: dict[str, int] = {}
    payload = []
    for row in rows:
        value = row["raw_value"] if "raw_value" in row else json.dumps(row["value"])
        payload.append(
            {
                "dag_run_id": run_ids.setdefault(f"{row['dag_id']}/{row['run_id']}", len(run_ids) + 1),
                "dag_id": row["dag_id"],
                "run_id": row["run_id"],
                "task_id": row["task_id"],
                "map_index": row.get("map_index", -1),
                "key": key,
                "timestamp": row["timestamp"],
                "value": value,
            }
        )
    with engine.connect() as connection:
        # Outside a transaction (pysqlite begins one only before DML), so the PRAGMA takes effect.
        connection.exec_driver_sql("PRAGMA foreign_keys=OFF")
        try:
            connection.execute(XComModel.__table__.insert(), payload)
            connection.commit()
        finally:
            connection.exec_driver_sql("PRAGMA foreign_keys=ON")


def clear_xcoms() -> None:
    from airflow.models.xcom import XComModel
    from airflow.settings import engine

    with engine.begin() as connection:
        connection.execute(XComModel.__table__.delete())
