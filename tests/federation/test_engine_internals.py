from __future__ import annotations

import gc

import pytest

from airflow_provider_fedsched.federation import FederationEngine
from tests.federation.helpers import GPU, NOW, cluster, node, request, snapshot, spec


def test_snapshot_index_is_built_once_and_not_carried_into_updated_copies() -> None:
    snap = snapshot(
        "c", [node("n0", {"cpu": "4", GPU: "2"}, {GPU: "1"}), node("n1", {"cpu": "8"}, ready=False)]
    )
    index = snap.index
    assert snap.index is index
    assert index.total_free == {"cpu": 4000, GPU: 1}  # the not-ready node does not count
    assert snap.model_copy().index is index
    grown = snap.model_copy(update={"nodes": [node("big", {"cpu": "64"})]})
    assert grown.index is not index and grown.index.total_free == {"cpu": 64000}


def test_decide_leaves_the_host_process_s_garbage_collector_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """The engine runs inside Airflow workers, the scheduler's DAG parsing and the API server: how the
    process collects garbage is the host's choice (docs/benchmarks.md: freeze large snapshots)."""

    def refuse() -> None:
        raise AssertionError("the engine switched the process's garbage collector")

    fed = spec([cluster("c")])
    engine = FederationEngine(fed)
    for name in ("disable", "enable", "freeze", "unfreeze"):
        monkeypatch.setattr(gc, name, refuse)
    decision = engine.decide(request(), {"c": snapshot("c")}, now=NOW)
    assert decision.cluster == "c" and gc.isenabled()
