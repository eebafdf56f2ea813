"""Property-based hostile input (hypothesis): arbitrary YAML documents never crash the spec loader;
arbitrary JSON in shared state never crashes a decision or widens sovereignty, nor a tenant decision,
``fedsched tenants`` or ``fedsched cost``, nor widens a budget; arbitrary JSON under the placement XCom key
never crashes the history API's rows and pages."""

from __future__ import annotations

import contextlib
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_provider_fedsched.federation import FederationEngine, SpecError, TaskRequest, load_spec
from airflow_provider_fedsched.federation.costs import REPORT_GROUPS, cost_report
from airflow_provider_fedsched.plugins import history
from airflow_provider_fedsched.state import FederationState, MemoryStateBackend
from tests.federation.helpers import node, snapshot

NOW = datetime(2025, 6, 1, 8, 0, tzinfo=UTC)
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
    st.sampled_from(["eu-west-1", "cn-east-1", "1e999999999", "NaN", "{pod:>99999}", "javascript:x", "500m"]),
)
documents = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=5),
        st.dictionaries(
            st.sampled_from(
                [
                    "name",
                    "clusters",
                    "datasets",
                    "policy",
                    "regions",
                    "allowed_regions",
                    "region",
                    "conn_id",
                    "cluster",
                    "size_gb",
                    "weights",
                    "cooldown_seconds",
                    "dashboard_url",
                    "x",
                ]
            )
            | st.text(max_size=8),
            children,
            max_size=6,
        ),
    ),
    max_leaves=40,
)


@SETTINGS
@given(documents)
def test_any_yaml_document_is_a_spec_or_a_spec_error(document: Any) -> None:
    text = yaml.safe_dump(document, allow_unicode=True)
    try:
        spec = load_spec(text)
    except SpecError as exc:
        assert str(exc)  # a message, naming a path
        return
    assert spec.clusters


@SETTINGS
@given(st.text(max_size=300))
def test_any_text_is_a_spec_or_a_spec_error(text: str) -> None:
    with contextlib.suppress(SpecError):  # anything else (a crash) fails the test
        load_spec(text if "\n" in text else text + "\n")


REGIONS = ["eu-west-1", "eu-central-1", "cn-east-1", "us-east-1"]
clusters_strategy = st.lists(st.sampled_from(REGIONS), min_size=1, max_size=5)
allowed_strategy = st.lists(st.sampled_from(REGIONS), min_size=1, max_size=3, unique=True)
stored_kinds = st.sampled_from(["cooldown", "reservation", "snapshot", "lease", "snapshot-index", "orphan"])
json_values = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**70), 2**70),
        st.floats(allow_nan=False),
        st.text(max_size=30),
    ),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(
            st.sampled_from(
                ["until", "reason", "requests", "at", "cluster", "observed_at", "nodes", "cpu", "owner"]
            )
            | st.text(max_size=6),
            children,
            max_size=5,
        )
    ),
    max_leaves=25,
)


@SETTINGS
@given(
    regions=clusters_strategy,
    allowed=allowed_strategy,
    garbage=st.lists(st.tuples(stored_kinds, st.integers(0, 4), json_values), max_size=6),
    duplicate=st.booleans(),
)
def test_any_stored_json_never_crashes_a_decision_or_places_outside_allowed_regions(
    regions: list[str], allowed: list[str], garbage: list[tuple[str, int, Any]], duplicate: bool
) -> None:
    names = [f"c{i}" for i in range(len(regions))]
    text = (
        "name: prop\nclusters:\n"
        + "".join(
            f"  - {{name: {n}, conn_id: k_{n}, region: {r}}}\n" for n, r in zip(names, regions, strict=True)
        )
        + f"regions: {REGIONS}\ndatasets:\n  - name: d\n    cluster: c0\n    size_gb: 1\n"
    )
    text += f"    allowed_regions: {allowed}\n"
    if duplicate:  # a second list must never replace (widen) the first
        text += f"    allowed_regions: {REGIONS}\n"
    try:
        spec = load_spec(text)
    except SpecError as exc:
        assert duplicate and "duplicate key" in str(exc)
        return
    assert not duplicate
    backend = MemoryStateBackend()
    state = FederationState(backend, "prop")
    state.snapshots.put([snapshot(n, [node(f"{n}-n")]) for n in names])
    for kind, position, value in garbage:
        cluster = names[position % len(names)]
        key = {
            "snapshot-index": "fedsched/prop/snapshot-index",
            "reservation": f"fedsched/prop/reservation/{cluster}/x",
            "orphan": f"fedsched/prop/orphan/{cluster}/ns.p",
        }.get(kind, f"fedsched/prop/{kind}/{cluster}")
        backend.set(key, value)
    state.snapshots._decoded.clear()
    snapshots = state.snapshots.newest(names)
    now = NOW + timedelta(seconds=2)
    decision = FederationEngine(spec).decide(
        TaskRequest(resources={"cpu": 1000}, datasets=["d"]),
        snapshots,
        now=now,
        cooldowns=state.cooldowns.in_force(names, now, "default"),
        reservations=state.reservations.pending(snapshots, now),
    )
    state.orphans.of(names[0])
    state.leases.claim(names, "me", now, timedelta(seconds=5))
    if decision.cluster is not None:
        assert spec.cluster(decision.cluster).region in allowed


@SETTINGS
@given(st.one_of(json_values, json_values.map(json.dumps), st.text(max_size=50)))
def test_any_placement_xcom_is_a_row_and_a_page(value: Any) -> None:
    where = {"dag_id": "d", "run_id": "r", "task_id": "t", "map_index": -1, "recorded_at": NOW}
    row = history.placement_row(value, **where)
    detail = history.placement_detail(value, **where)
    json.dumps(row, allow_nan=False)  # what the API sends: never a 500 from encoding
    json.dumps(detail, allow_nan=False)
    assert row["readable"] in (True, False)


TENANT_KEYS = [
    "spend/x",
    "spend/y",
    "waiting/w",
    "waiting/t1",
    "reservation/a/r",
    "lease/a",
    "cooldown/a",
    "quota-limits/a",
    "history-outcome/a/0001",
    "history-wait/a/0001",
    "orphan/a/ns.p",
    "deferred/a/ns.p",
    "swept/a/ns.p",
    "plan/d/t/20250601T080000.000000Z",
    "forecast-models",
    "forecast-profile/a",
    "snapshot-index",
]
"""Every store of the federation's shared state (``state/``), by key."""
tenant_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.sampled_from(["team-a", "team-b", "a", "b", "soon", "{now}", "{past}", "9999-12-31T00:00:00"]),
)
tenant_values = st.recursive(
    tenant_scalars,
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(
            st.sampled_from(
                [
                    "tenant",
                    "cost",
                    "egress_gb",
                    "at",
                    "placement_id",
                    "resources",
                    "requests",
                    "since",
                    "seen_at",
                    "clusters",
                    "owner",
                    "until",
                    "cpu",
                    "namespace",
                    "pod",
                    "kind",
                ]
            ),
            children,
            max_size=7,
        )
    ),
    max_leaves=20,
)


def _with_times(value: Any, now: datetime) -> Any:
    if value == "{now}":
        return now.isoformat()
    if value == "{past}":
        return (now - timedelta(hours=1)).isoformat()
    if isinstance(value, dict):
        return {key: _with_times(item, now) for key, item in value.items()}
    if isinstance(value, list):
        return [_with_times(item, now) for item in value]
    return value


@SETTINGS
@given(garbage=st.lists(st.tuples(st.sampled_from(TENANT_KEYS), tenant_values), max_size=8))
def test_any_stored_json_never_crashes_a_tenant_decision_nor_widens_a_budget(
    garbage: list[tuple[str, Any]],
) -> None:
    """Arbitrary JSON in every store: the decision, ``fedsched tenants`` and ``fedsched cost`` (every
    grouping) answer, their JSON has no Infinity or NaN, and a tenant over its budget stays over it."""
    from tests.hostile.test_second_pass import EXPENSIVE, PREFIX, over_budget, teams_hook

    now = datetime.now(UTC)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("AIRFLOW__FEDSCHED__PLACEMENT_LEDGER", "False")
        backend = MemoryStateBackend()
        hook = teams_hook(backend, now)
        over_budget(hook, now)
        for key, value in garbage:
            backend.set(f"{PREFIX}/{key}", _with_times(value, now))
        decision = hook.place(EXPENSIVE, "t1")
        rows = hook.tenants(now)
        charges = hook.charges(now - timedelta(days=1))
        reports = {by: cost_report(charges, by) for by in REPORT_GROUPS}
    json.dumps({"tenants": rows, "reports": reports}, allow_nan=False)
    assert decision.outcome == "wait", decision.reason  # over budget whatever else is stored
    assert {row["tenant"]: row["cost"] for row in rows}["team-a"] >= 99.6
