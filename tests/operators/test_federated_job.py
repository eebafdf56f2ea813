"""FederatedKubernetesJobOperator end to end: real Airflow (dag.test), the official client over real HTTP,
the simulated federation's Job controller. A gang runs whole in one cluster or moves whole."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from airflow_provider_fedsched.hooks.federation import FederationHook
from airflow_provider_fedsched.sim import SimFederation, wait_for
from tests import airflow_harness
from tests.operators import test_federated_operator as pod_tests

DAG_FILE = Path(__file__).parent / "dags" / "federated_job_dags.py"
pytestmark = [pytest.mark.airflow, pytest.mark.integration]
xcom = pod_tests.xcom
background = pod_tests.background  # the fixture, shared with the pod operator's tests


def run(dag_id: str) -> tuple[str, dict[str, Any] | None]:
    dag_run = airflow_harness.run_dag(DAG_FILE, dag_id)
    state = airflow_harness.task_states(dag_run)["work"]
    record = xcom(dag_run, "fedsched_placement")
    return state, (json.loads(record) if isinstance(record, str) else record)


def path(record: dict[str, Any]) -> list[tuple[str, str]]:
    return [(a["cluster"], a["outcome"]) for a in record["attempts"]]


def left_behind(fed: SimFederation, dag_id: str) -> list[str]:
    """Every Job and pod of the DAG still in any cluster."""
    found = []
    for name, handle in fed.handles.items():
        for plural, items in (("jobs", handle.jobs()), ("pods", handle.pods())):
            for item in items:
                if (item["metadata"].get("labels") or {}).get("dag_id") == dag_id:
                    found.append(f"{name}/{plural}/{item['metadata']['name']}")
    return found


@pytest.fixture
def east_mostly_down(sim_federation: SimFederation, federation: Path) -> Iterator[None]:
    """After the federation's snapshot, two of east-cpu's three nodes go NotReady: its one ready node takes
    two 3-cpu workers, not the gang's three.

    The snapshot stays valid for the whole test (however slow the machine): the federation decides on
    what it saw, and the cluster's scheduler tells otherwise at run time."""
    spec = yaml.safe_load(federation.read_text())
    spec["policy"]["snapshot_ttl_seconds"] = 3600
    federation.write_text(yaml.safe_dump(spec))

    def roomy_snapshot() -> bool:
        # On a loaded machine a collection may time out (the cluster is then "unreachable"): ask again.
        seen = FederationHook().collect()["east-cpu"]
        return seen.reachable and seen.index.total_free.get("cpu", 0) >= 3 * 3000

    wait_for(roomy_snapshot, timeout=120, interval=1.0)
    east = sim_federation["east-cpu"]
    down = [node["metadata"]["name"] for node in east.nodes()][1:]
    for name in down:
        east.faults.node_not_ready(name)
    yield
    for name in down:
        east.faults.node_ready(name)


def test_a_gang_runs_whole_in_the_chosen_cluster_and_leaves_nothing(
    sim_federation: SimFederation, federation: Path
) -> None:
    state, record = run("gang_runs_whole")

    assert state == "success" and record is not None
    assert path(record) == [("east-cpu", "succeeded")]
    assert record["attempts"][0]["running_at"] is not None  # all 3 pods were scheduled together
    assert left_behind(sim_federation, "gang_runs_whole") == []


@pytest.mark.parametrize("dag_id", ["gang_unschedulable_moves", "gang_deferrable_unschedulable_moves"])
def test_a_member_unschedulable_past_the_grace_moves_the_whole_gang(
    sim_federation: SimFederation, federation: Path, east_mostly_down: None, dag_id: str
) -> None:
    state, record = run(dag_id)

    assert state == "success" and record is not None
    assert path(record) == [("east-cpu", "insufficient"), ("north-gpu", "succeeded")]
    first = record["attempts"][0]
    assert first["reason"].startswith("2 of 3 pods of the gang scheduled together within 3s: ")
    assert "1 Insufficient cpu" in first["reason"]
    # The whole Job left east-cpu, the two members already placed with it; nothing is left anywhere.
    assert left_behind(sim_federation, dag_id) == []


def test_an_evicted_member_moves_the_gang_which_resumes_from_its_checkpoint(
    sim_federation: SimFederation,
    federation: Path,
    background: Callable[[Callable[[], None]], None],
    capfd: pytest.CaptureFixture[str],
) -> None:
    def evict_one_member_once_all_run() -> None:
        def running_members() -> tuple[str, list[dict[str, Any]]] | None:
            for name, handle in sim_federation.handles.items():
                members = [
                    pod
                    for pod in handle.pods()
                    if (pod["metadata"].get("labels") or {}).get("dag_id") == "gang_evicted_resumes"
                    and pod["metadata"]["labels"].get("fedsched.io/cluster-attempt") == "1"
                    and pod["status"].get("phase") == "Running"
                ]
                if len(members) == 3:
                    return name, members
            return None

        cluster, members = wait_for(running_members, timeout=60)
        member = members[1]["metadata"]
        sim_federation[cluster].faults.evict_pod(member["namespace"], member["name"])

    background(evict_one_member_once_all_run)
    state, record = run("gang_evicted_resumes")

    assert state == "success" and record is not None
    assert path(record) == [("east-cpu", "evicted"), ("north-gpu", "succeeded")]
    assert record["attempts"][1]["resumed_from_checkpoint"] is True
    assert "attempt 2 resume=true" in capfd.readouterr().out
    assert left_behind(sim_federation, "gang_evicted_resumes") == []


def test_bad_parallelism_fails_at_the_start_naming_the_argument(
    sim_federation: SimFederation, federation: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    state, _ = run("gang_bad_parallelism")

    assert state == "failed"
    assert "parallelism must be a whole number of pods, at least 1 (got 0)" in capfd.readouterr().out
    assert left_behind(sim_federation, "gang_bad_parallelism") == []
