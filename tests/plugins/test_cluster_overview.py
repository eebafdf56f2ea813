"""The Federation page's clusters view against a simulated federation: while no task runs, nothing else
refreshes the snapshots, so a page load takes the stale ones again (briefly cached), and a member that
does not answer is shown unavailable with the reason and when it last answered."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from airflow_provider_fedsched.hooks.federation import FederationHook
from airflow_provider_fedsched.plugins.history import cluster_overview
from airflow_provider_fedsched.sim import SimFederation
from airflow_provider_fedsched.state import FederationState, MemoryStateBackend

pytestmark = pytest.mark.sim


@pytest.fixture(scope="module")
def fed() -> Iterator[SimFederation]:
    with SimFederation(time_scale=0.1) as federation:
        yield federation


@pytest.fixture
def hook(fed: SimFederation, tmp_path: Path) -> FederationHook:
    spec = yaml.safe_load((fed.state_dir / "federation.yaml").read_text())
    spec["policy"]["snapshot_ttl_seconds"] = 60  # a page load reuses a snapshot for 30 s
    path = tmp_path / "federation.yaml"
    path.write_text(yaml.safe_dump(spec))
    # The members answer within 30 s however loaded the machine (CI: the default timeout ran out under
    # a load of 20-47, and a member that answers late is rightly shown unavailable): what is asserted is
    # which snapshots a page load takes again, not how fast a member answers.
    return FederationHook(
        path,
        kubeconfig=fed.state_dir / "kubeconfig",
        state=FederationState(MemoryStateBackend()),
        snapshot_timeout=30.0,
    )


def counting_collects(hook: FederationHook, monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The members each snapshot the hook takes asks (the calls go on to the members as before)."""
    asked: list[list[str]] = []
    collect = hook.collect

    def counted(clusters: Any = None) -> Any:
        asked.append(sorted(clusters) if clusters is not None else sorted(c.name for c in hook.spec.clusters))
        return collect(clusters)

    monkeypatch.setattr(hook, "collect", counted)
    return asked


def age_snapshots(hook: FederationHook, minutes: float) -> None:
    """Shared state as an idle federation leaves it: the last snapshots, and the utilization samples
    they left, from minutes ago (taken with a hook of its own, so that nothing of now is left behind)."""
    old = datetime.now(UTC) - timedelta(minutes=minutes)
    taker = FederationHook(
        hook.federation_source, kubeconfig=hook.kubeconfig, state=FederationState(MemoryStateBackend())
    )
    snapshots = [s.model_copy(update={"observed_at": old}) for s in taker.collect().values()]
    hook.state.snapshots.put(snapshots)
    for snapshot in snapshots:
        hook.record(snapshot.cluster, "utilization", {"at": old.isoformat(), "used_fraction": {}})


def test_a_page_load_takes_stale_snapshots_again_and_reuses_fresh_ones(
    hook: FederationHook, monkeypatch: pytest.MonkeyPatch
) -> None:
    age_snapshots(hook, minutes=7)
    asked = counting_collects(hook, monkeypatch)

    rows = {row["name"]: row for row in cluster_overview(hook)}

    assert asked == [sorted(rows)]  # every stale member, in one concurrent collect
    seen = {
        name: (row["reachable"], row.get("reason"), row["snapshot_age_seconds"]) for name, row in rows.items()
    }
    assert all(reachable and age < 30 for reachable, _, age in seen.values()), seen
    assert {row["snapshot_note"] for row in rows.values()} == {"taken for this page load"}

    again = {row["name"]: row for row in cluster_overview(hook)}  # a second load, at once
    assert asked == [sorted(rows)]  # no member asked again
    assert all(
        row["snapshot_note"].endswith("a page load takes snapshots older than 30s again")
        for row in again.values()
    )


def test_a_silent_member_is_unavailable_with_the_reason_and_when_it_last_answered(
    fed: SimFederation, hook: FederationHook
) -> None:
    age_snapshots(hook, minutes=7)
    fed["east-cpu"].faults.down()
    try:
        rows = {row["name"]: row for row in cluster_overview(hook)}
    finally:
        fed["east-cpu"].faults.up()

    east = rows["east-cpu"]
    assert east["reachable"] is False and "connection refused" in east["reason"], east
    assert east["snapshot_note"] == "taken for this page load"
    # It last answered with the snapshot taken 7 minutes ago (the history sample that snapshot left).
    assert 7 * 60 <= east["last_answered_age_seconds"] < 8 * 60
    assert rows["west-general"]["reachable"] is True
    assert rows["west-general"]["last_answered_age_seconds"] < 30
