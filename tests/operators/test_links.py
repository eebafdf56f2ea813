"""The operator's extra link points at the dashboard of the cluster the try ran on."""

from __future__ import annotations

from datetime import UTC, datetime
from types import SimpleNamespace

from airflow_provider_fedsched.federation.record import Attempt, PlacementRecord
from airflow_provider_fedsched.federation.spec import load_spec
from airflow_provider_fedsched.operators.links import FederatedClusterLink

SPEC = load_spec(
    {
        "clusters": [
            {
                "name": "east",
                "conn_id": "k8s_east",
                "region": "r1",
                "dashboard_url": "https://dash.example/{cluster}/ns/{namespace}/pods/{pod}",
            },
            {"name": "west", "conn_id": "k8s_west", "region": "r2"},
        ]
    }
)


def record(cluster: str) -> PlacementRecord:
    now = datetime.now(UTC)
    attempt = Attempt(
        number=1, cluster=cluster, namespace="etl", pod="work-1", placement_id="p-1", started_at=now
    )
    return PlacementRecord(
        dag_id="d", run_id="r", task_id="t", try_number=1, started_at=now, attempts=[attempt], cluster=cluster
    )


def operator(cluster: str) -> SimpleNamespace:
    return SimpleNamespace(placement=record(cluster), federation_hook=SimpleNamespace(spec=SPEC))


def test_link_to_the_cluster_dashboard() -> None:
    link = FederatedClusterLink().get_link(operator("east"), ti_key=None)
    assert link == "https://dash.example/east/ns/etl/pods/work-1"


def test_no_link_without_a_dashboard_template() -> None:
    assert FederatedClusterLink().get_link(operator("west"), ti_key=None) == ""
