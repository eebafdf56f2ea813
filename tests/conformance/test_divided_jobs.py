"""Divided Indexed Jobs (issue 31) against the test bed (imported from tests/operators, not copied).

Each slice is an Indexed Job run by the member's real Job controller, its pods scheduled by the real
kube-scheduler and played by kwok; the Airflow connections carry the provider's service-account token,
bound by exactly deploy/rbac*.yaml. "Every index ran exactly once" is judged from the members' own
records: each API server's audit log of every pod write (the Job controller's creates, kwok's status
updates), read as a journal (``pods_ran`` in conftest.py), never from the operator's placement record.
The imported outage is the member's kube-apiserver process ending mid-run (connections refused) and
starting again over the same etcd; the one below SIGSTOPs it (connections hang, as in a partition).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from airflow_provider_fedsched.hooks.federation import FederationHook
from airflow_provider_fedsched.sim import wait_for
from airflow_provider_fedsched.testbed import TestbedFederation
from tests.operators import test_federated_job as divided
from tests.operators.test_federated_job import (  # noqa: F401 - collected here, against the test bed
    test_a_divided_job_runs_each_index_exactly_once_in_slices_that_follow_the_room,
    test_a_divided_retry_never_runs_again_an_index_an_earlier_try_saw_succeed,
    test_a_sovereign_divided_job_never_places_a_slice_outside_its_regions,
)

# The simulator suite's fixtures, here against the test bed.
background = divided.background
job_creates = divided.job_creates
room_50_30_20 = divided.room_50_30_20


def test_a_member_whose_api_server_hangs_past_the_grace_has_its_slice_fenced_and_no_index_runs_elsewhere(
    sim_federation: TestbedFederation,
    federation: Path,
    room_50_30_20: None,
    job_creates: Callable[[], int],
    background: Callable[[Callable[[], None]], None],
    pods_ran: Callable[[Any], dict[str, list[dict[str, Any]]]],
) -> None:
    """east-cpu's kube-apiserver is SIGSTOPped once its slice's pods run (150 s pods, a 3 s grace): past the
    grace its slice is fenced and the try fails; none of its indices starts in another member, and once it
    answers again the next snapshot deletes its Job with its pods."""
    dag_id = "divided_outage_lost"
    east = sim_federation["east-cpu"]
    apiserver = east.cluster.processes["kube-apiserver"]
    stopped: list[bool] = []

    def stop_once_east_runs_its_slice() -> None:
        def running() -> bool:
            return any(
                (pod["metadata"].get("labels") or {}).get("dag_id") == dag_id
                and pod["status"].get("phase") == "Running"
                for pod in east.pods()
            )

        wait_for(running, timeout=120, interval=0.2)
        apiserver.pause()
        stopped.append(True)

    with divided.watching_slices(sim_federation, dag_id, background) as jobs:
        background(stop_once_east_runs_its_slice)
        try:
            state, record = divided.run(dag_id)
        finally:
            if apiserver.paused():
                apiserver.resume()

    assert stopped, "east-cpu's slice never ran"
    assert state == "failed" and record is not None
    outcomes = {a["cluster"]: a["outcome"] for a in record["attempts"]}
    assert outcomes == {"east-cpu": "lost", "west-general": "cancelled", "north-gpu": "cancelled"}
    assert "may still run there, so they are not started elsewhere" in record["reason"]
    assert job_creates() == 3  # east's indices were never dealt again
    east_slice = next(a for a in record["attempts"] if a["cluster"] == "east-cpu")
    assert FederationHook().orphans("east-cpu", kind="job") == [(east_slice["namespace"], east_slice["pod"])]

    def swept() -> bool:
        # The first snapshot that finds east-cpu answering deletes the Job with its pods; one taken while
        # the resumed API server still catches up (its watches, its authorizer) finds it silent.
        divided.sweep_orphans()
        return FederationHook().orphans("east-cpu", kind="job") == []

    wait_for(swept, timeout=90, interval=1.0)
    wait_for(lambda: divided.left_behind(sim_federation, dag_id) == [], timeout=60, interval=0.5)
    # From the members' own records: every pod of the Job ran in the member its slice was dealt to.
    ran = divided._runs_by_index(pods_ran(sim_federation), dag_id, jobs)
    from airflow_provider_fedsched.federation.division import parse_ranges

    dealt = {i: a["cluster"] for a in record["attempts"] for i in parse_ranges(a["indices"], "indices")}
    assert sorted(dealt) == list(range(40))
    assert ran and all(run["cluster"] == dealt[index] for index, runs in ran.items() for run in runs), ran
    assert all(len(runs) == 1 for runs in ran.values()), ran
