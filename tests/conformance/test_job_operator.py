"""FederatedKubernetesJobOperator scenarios against the test bed (imported from tests/operators, not copied).

The gang's Job is run by the real Job controller (kube-controller-manager) and scheduled by the real
kube-scheduler; the Airflow connections carry the provider's service-account token, bound by exactly
deploy/rbac*.yaml, so a Job verb or a ledger Lease the manifests do not grant fails the test.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from tests.operators.test_federated_job import (  # noqa: F401 - collected here, against the test bed
    background,
    east_mostly_down,
    job_creates,
    path,
    run,
    test_a_gang_runs_whole_in_the_chosen_cluster_and_leaves_nothing,
    test_a_member_unschedulable_past_the_grace_moves_the_whole_gang,
    test_a_retry_takes_the_success_of_a_lost_try_s_job_that_completed_and_was_swept,
    test_a_retry_waits_for_a_dead_try_s_silent_cluster_and_adopts_its_complete_job,
    test_an_evicted_member_moves_the_gang_which_resumes_from_its_checkpoint,
    test_bad_parallelism_fails_at_the_start_naming_the_argument,
)


def _reservations_of(cluster: str) -> list[str]:
    from datetime import UTC, datetime

    from airflow_provider_fedsched.hooks.federation import FederationHook

    holds = FederationHook().state.reservations.holds({}, datetime.now(UTC))
    return [hold.placement_id for hold in holds if hold.cluster == cluster]


@pytest.fixture
def jobs_refused_in_east(sim_federation: Any) -> Iterator[Callable[[str], None]]:
    """east-cpu refuses the attempt's Job before it exists: by a ResourceQuota on Jobs (admission), or
    by the provider's Role losing ``create`` on Jobs (authorization)."""
    east = sim_federation["east-cpu"]
    admin = east.cluster.admin()
    rbac = client.RbacAuthorizationV1Api(admin)
    role = rbac.read_namespaced_role("fedsched-provider", "default")
    original = admin.sanitize_for_serialization(role.rules)  # the API's field names

    def refuse(how: str) -> None:
        if how == "quota":
            east.set_quota("default", {"count/jobs.batch": "0"}, name="no-jobs")
            return
        rules = [
            {**rule, "verbs": [v for v in rule["verbs"] if v != "create"]}
            if "jobs" in rule["resources"]
            else rule
            for rule in original
        ]
        rbac.patch_namespaced_role("fedsched-provider", "default", {"rules": rules})

    yield refuse
    rbac.patch_namespaced_role("fedsched-provider", "default", {"rules": original})
    for quota in east.core.list_namespaced_resource_quota("default").items:
        if quota.metadata.name == "no-jobs":
            east.core.delete_namespaced_resource_quota("no-jobs", "default")


@pytest.mark.provider_refused
@pytest.mark.parametrize("how", ["quota", "rbac"])
def test_a_job_refused_before_it_exists_ends_its_attempt_and_releases_the_reservation(
    sim_federation: Any, federation: Path, jobs_refused_in_east: Callable[[str], None], how: str
) -> None:
    """Issue 25, finding 4: a Job try that failed before its Job existed left its placement record
    "running" and its reservation (and its tenant's share) held for minutes."""
    jobs_refused_in_east(how)

    state, record = run("gang_runs_whole")

    assert record is not None
    if how == "quota":  # the cluster's refusal: the gang moves on, whole, in the same try
        assert state == "success"
        assert path(record) == [("east-cpu", "insufficient"), ("north-gpu", "succeeded")]
        assert "count/jobs.batch" in record["attempts"][0]["reason"]
    else:  # the provider's identity may not: the try fails, naming what was refused
        assert state == "failed"
        assert path(record) == [("east-cpu", "failed")]
        assert record["outcome"] == "failed"
        assert 'cannot create resource "jobs"' in record["attempts"][0]["reason"]
    assert all(attempt["ended_at"] is not None for attempt in record["attempts"])
    assert _reservations_of("east-cpu") == []
