"""The provider's metrics reach a real StatsD listener (a UDP socket on loopback) through Airflow's own
metrics, configured the way a deployment configures them (``[metrics] statsd_on``)."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from airflow_provider_fedsched.federation.record import PlacementRecord
from airflow_provider_fedsched.hooks import metrics
from airflow_provider_fedsched.operators import attempts, records
from airflow_provider_fedsched.state import MemoryStateBackend
from tests.hooks.test_tenancy_hook import cpu, hook_on


@pytest.fixture
def listener(monkeypatch: pytest.MonkeyPatch) -> Iterator[socket.socket]:
    from airflow.observability.metrics.stats_utils import get_stats_factory
    from airflow.sdk.observability import stats

    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    sock.settimeout(0.2)
    for key, value in {
        "STATSD_ON": "True",
        "STATSD_HOST": "127.0.0.1",
        "STATSD_PORT": str(sock.getsockname()[1]),
        "STATSD_PREFIX": "airflow",
    }.items():
        monkeypatch.setenv(f"AIRFLOW__METRICS__{key}", value)
    monkeypatch.setenv("AIRFLOW__FEDSCHED__PLACEMENT_LEDGER", "False")
    stats.initialize(factory=get_stats_factory(), export_legacy_names=False)  # as the task runner does
    yield sock
    from airflow._shared.observability.metrics.base_stats_logger import NoStatsLogger

    stats.initialize(factory=NoStatsLogger, export_legacy_names=False)
    sock.close()


def received(sock: socket.socket, names: set[str], timeout: float = 10.0) -> dict[str, str]:
    """Name -> ``value|type`` of each packet, until every name in ``names`` arrived (or the timeout)."""
    seen: dict[str, str] = {}
    deadline = time.monotonic() + timeout
    while not names <= set(seen) and time.monotonic() < deadline:
        try:
            data = sock.recv(65536).decode()
        except TimeoutError:
            continue
        for line in data.splitlines():
            name, _, rest = line.partition(":")
            seen[name] = rest
    return seen


def test_decisions_latency_waits_failovers_cooldowns_cost_and_egress_reach_statsd(
    listener: socket.socket,
) -> None:
    now = datetime.now(UTC)
    hook = hook_on(MemoryStateBackend(), now, {"team-a": {"cpu": 8000}})
    record = PlacementRecord(dag_id="d", run_id="r", task_id="t", try_number=1, started_at=now)
    placed = hook.place(cpu("1", "team-b"), record.placement_id(1))
    assert placed.placed
    assert hook.place(cpu("1"), "over-quota").outcome == "wait"
    hook.cool_down("b", "insufficient: quota")
    attempt = attempts.new_attempt(record, placed, str(placed.cluster), "default", "pod")
    record.attempts.append(attempt)
    attempt.running_at = datetime.now(UTC) - timedelta(minutes=30)
    records.end_attempt(hook, record, attempt, "evicted", "node drained")
    metrics.reclaimed(2, "a", "team-a")  # what hooks/tenancy.reclaim emits (end to end: test_reclaim.py)

    seen = received(
        listener,
        {
            "airflow.fedsched.decisions.placed",
            "airflow.fedsched.decisions.wait",
            "airflow.fedsched.decision_latency",
            "airflow.fedsched.waits.TenantQuota",
            "airflow.fedsched.cooldowns.b",
            "airflow.fedsched.failovers.evicted",
            "airflow.fedsched.attempt_cost",
            "airflow.fedsched.attempt_egress_gb",
            "airflow.fedsched.tenant_cost.team-b",
            "airflow.fedsched.reclaims.team-a",
        },
    )
    assert seen.get("airflow.fedsched.decisions.placed") == "1|c"
    assert seen.get("airflow.fedsched.waits.TenantQuota") == "1|c"
    assert seen.get("airflow.fedsched.cooldowns.b") == "1|c"
    assert seen.get("airflow.fedsched.failovers.evicted") == "1|c"
    assert seen.get("airflow.fedsched.decision_latency", "").endswith("|ms")
    # One cpu on a at 0.1/h for half an hour: 0.05.
    assert seen.get("airflow.fedsched.attempt_cost") == "0.05|g"
    assert seen.get("airflow.fedsched.attempt_egress_gb") == "0.0|g"
    assert seen.get("airflow.fedsched.tenant_cost.team-b") == "0.05|g"
    assert seen.get("airflow.fedsched.reclaims.team-a") == "2|c"
