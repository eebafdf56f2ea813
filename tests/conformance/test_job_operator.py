"""FederatedKubernetesJobOperator scenarios against the test bed (imported from tests/operators, not copied).

The gang's Job is run by the real Job controller (kube-controller-manager) and scheduled by the real
kube-scheduler; the Airflow connections carry the provider's service-account token, bound by exactly
deploy/rbac*.yaml, so a Job verb or a ledger Lease the manifests do not grant fails the test.
"""

from __future__ import annotations

import pytest

from tests.operators.test_federated_job import (  # noqa: F401 - collected here, against the test bed
    background,
    east_mostly_down,
    test_a_gang_runs_whole_in_the_chosen_cluster_and_leaves_nothing,
    test_a_member_unschedulable_past_the_grace_moves_the_whole_gang,
    test_an_evicted_member_moves_the_gang_which_resumes_from_its_checkpoint,
    test_bad_parallelism_fails_at_the_start_naming_the_argument,
)

pytestmark = [pytest.mark.airflow, pytest.mark.integration]
