"""The ``outcome=failover`` filter covers every kind of cluster failure in the one failure vocabulary."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import get_args

import pytest

from airflow_provider_fedsched.federation.record import FAILURE_KINDS, FailureKind
from airflow_provider_fedsched.kube import failures
from airflow_provider_fedsched.plugins import history
from tests.plugins import records

pytestmark = pytest.mark.airflow


def test_one_failure_vocabulary() -> None:
    assert failures.FailureKind is FailureKind
    assert history.LEFT_OUTCOMES == FAILURE_KINDS == frozenset(get_args(FailureKind))
    assert "misconfigured" in FAILURE_KINDS


@pytest.fixture
def one_row_per_failure_kind(airflow_db: None) -> Iterator[list[str]]:
    kinds = sorted(FAILURE_KINDS)
    rows = [
        {
            "dag_id": "kinds",
            "run_id": "manual__1",
            "task_id": kind,
            "value": records.record(
                dag_id="kinds", task_id=kind, clusters=("east-cpu", "west-general"), left_outcome=kind
            ),
            "timestamp": records.BASE_TIME + timedelta(minutes=minute),
        }
        for minute, kind in enumerate(kinds)
    ]
    rows.append(
        {
            "dag_id": "kinds",
            "run_id": "manual__1",
            "task_id": "stayed",
            "value": records.record(dag_id="kinds", task_id="stayed"),
            "timestamp": records.BASE_TIME + timedelta(hours=1),
        }
    )
    records.clear_xcoms()
    records.insert_xcoms(rows)
    yield kinds
    records.clear_xcoms()


def test_failover_filter_includes_every_failure_kind(one_row_per_failure_kind: list[str]) -> None:
    """A missing-namespace failover (``misconfigured``) is a failover too."""
    from airflow.utils.session import create_session

    flt = history.PlacementFilter(dag_id="kinds", outcome="failover")
    with create_session() as session:
        rows = history.list_placements(session, flt, limit=50)
        total = history.count_placements(session, flt)
    assert total == len(one_row_per_failure_kind)
    assert sorted(row["task_id"] for row in rows) == one_row_per_failure_kind
    assert all(row["failover"] for row in rows)


def test_a_waiting_or_running_try_is_live_and_an_ended_one_is_not() -> None:
    from datetime import UTC, datetime

    from airflow_provider_fedsched.federation.record import PlacementRecord

    now = datetime.now(UTC)
    why = "west-general: Reachable: unreachable: connection refused at https://w:6443"
    waiting = PlacementRecord(
        dag_id="d", run_id="r", task_id="t", try_number=1, started_at=now, outcome="waiting", reason=why,
        waiting_since=now,
    )  # fmt: skip
    row = history.placement_row(
        waiting.model_dump(mode="json"), dag_id="d", run_id="r", task_id="t", map_index=-1, recorded_at=now
    )
    assert row["live"] == {"state": "waiting", "since": now.isoformat(), "why": waiting.reason}
    ended = waiting.model_copy(update={"outcome": "failed", "ended_at": now})
    row = history.placement_row(
        ended.model_dump(mode="json"), dag_id="d", run_id="r", task_id="t", map_index=-1, recorded_at=now
    )
    assert row["live"] is None
