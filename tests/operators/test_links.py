"""The operator's extra links: "Ran on <cluster>" to the try's decision detail on the Federation page (one
link per member cluster, only the one the try ran on has a URL), and the cluster's dashboard."""

from __future__ import annotations

from datetime import UTC, datetime
from types import SimpleNamespace
from urllib.parse import parse_qs, urlsplit

import pytest

from airflow_provider_fedsched.federation.record import Attempt, PlacementRecord
from airflow_provider_fedsched.federation.spec import load_spec
from airflow_provider_fedsched.operators.links import (
    GENERIC_NAME,
    ClusterDashboardLink,
    FederatedClusterLink,
    FederationLinks,
)

SPEC_DOC = {
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
SPEC = load_spec(SPEC_DOC)


def record(cluster: str, map_index: int = -1) -> PlacementRecord:
    now = datetime.now(UTC)
    attempt = Attempt(
        number=1, cluster=cluster, namespace="etl", pod="work-1", placement_id="p-1", started_at=now
    )
    return PlacementRecord(
        dag_id="d",
        run_id="manual__2026-01-01T00:00:00+00:00",
        task_id="t",
        map_index=map_index,
        try_number=2,
        started_at=now,
        attempts=[attempt],
        cluster=cluster,
    )


def operator(cluster: str, map_index: int = -1) -> SimpleNamespace:
    return SimpleNamespace(placement=record(cluster, map_index), federation_hook=SimpleNamespace(spec=SPEC))


def test_the_link_names_the_cluster_and_opens_the_decision_detail(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW__API__BASE_URL", "https://airflow.example/team-a/")
    link = FederatedClusterLink("east")
    assert link.name == "Ran on east" and link.xcom_key == "_link_FederatedClusterLink_east"
    url = urlsplit(link.get_link(operator("east", map_index=3), ti_key=None))
    assert url.path == "/team-a/fedsched/ui" and url.fragment == "placements"
    assert parse_qs(url.query) == {
        "dag_id": ["d"],
        "run_id": ["manual__2026-01-01T00:00:00+00:00"],
        "task_id": ["t"],
        "map_index": ["3"],
        "try_number": ["2"],
    }
    # The other members' links have no URL, so the UI shows only "Ran on east".
    assert FederatedClusterLink("west").get_link(operator("east"), ti_key=None) == ""
    assert FederatedClusterLink().name == GENERIC_NAME
    assert FederatedClusterLink().get_link(operator("west"), ti_key=None).startswith("/team-a/fedsched/ui?")


def test_one_link_per_member_on_a_task_and_generic_ones_on_the_class() -> None:
    class Task:
        operator_extra_links = FederationLinks()

        def __init__(self, federation: object) -> None:
            self.federation = federation

    names = [link.name for link in Task(SPEC_DOC).operator_extra_links]
    assert names == ["Ran on east", "Ran on west", "Cluster dashboard"]
    # No readable spec where the DAG is parsed, and a mapped task's class-level view: the generic link.
    assert [link.name for link in Task("/no/such/spec.yaml").operator_extra_links] == [
        GENERIC_NAME,
        "Cluster dashboard",
    ]
    assert [link.name for link in Task.operator_extra_links] == [GENERIC_NAME, "Cluster dashboard"]


def test_link_to_the_cluster_dashboard() -> None:
    link = ClusterDashboardLink().get_link(operator("east"), ti_key=None)
    assert link == "https://dash.example/east/ns/etl/pods/work-1"


def test_no_dashboard_link_without_a_dashboard_template() -> None:
    assert ClusterDashboardLink().get_link(operator("west"), ti_key=None) == ""


def test_airflow_serializes_one_named_link_per_member_and_generic_ones_for_a_mapped_task() -> None:
    import pendulum
    from airflow.sdk import DAG
    from airflow.serialization.serialized_objects import DagSerialization

    from airflow_provider_fedsched.operators.federated_pod import FederatedKubernetesOperator

    with DAG("links", schedule=None, start_date=pendulum.datetime(2026, 1, 1)) as dag:
        FederatedKubernetesOperator(task_id="single", image="busybox", federation=SPEC_DOC)
        FederatedKubernetesOperator.partial(task_id="mapped", image="busybox", federation=SPEC_DOC).expand(
            cmds=[["a"], ["b"]]
        )
    tasks = {task.task_id: task for task in DagSerialization.from_dict(DagSerialization.to_dict(dag)).tasks}
    assert tasks["single"].extra_links == ["Cluster dashboard", "Ran on east", "Ran on west"]
    assert tasks["mapped"].extra_links == ["Cluster dashboard", GENERIC_NAME]
