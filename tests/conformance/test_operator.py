"""FederatedKubernetesOperator scenarios against the test bed (imported from tests/operators, not copied).

The Airflow connections carry the provider's service-account token, bound by exactly deploy/rbac*.yaml.
Quotas are enforced by the real ResourceQuota admission, Unschedulable comes from the real kube-scheduler,
evictions are played by kwok as the kubelet, logs and XCom are served by kwok's Logs and Exec.
"""

from __future__ import annotations

from tests.operators.test_federated_operator import (  # noqa: F401 - collected here, against the test bed
    background,
    test_a_member_whose_hard_quota_is_below_the_request_is_rejected_as_never_when_placed_elsewhere,
    test_a_preemptible_retry_waits_for_a_dead_try_s_silent_cluster_and_adopts_its_finished_pod,
    test_bad_input_fails_at_the_start_naming_the_argument,
    test_deferrable_mode_runs_in_the_chosen_cluster_and_returns_xcom,
    test_deferrable_quota_failover,
    test_deferrable_run_records_pod_start_latency,
    test_deferrable_unschedulable_failover_through_the_pod_trigger,
    test_evicted_task_resumes_from_checkpoint_on_another_cluster,
    test_gpu_task_lands_on_gpu_pool_with_logs_xcom_and_labels,
    test_killed_worker_then_restarted_try_reattaches_to_the_same_pod,
    test_on_kill_deletes_the_pod_in_the_cluster_where_it_runs,
    test_quota_exhausted_since_the_snapshot_fails_over_in_the_same_try,
    test_sovereign_data_stays_in_its_region_although_another_is_cheaper,
    test_task_failure_is_not_retried_elsewhere,
    test_unschedulable_pod_is_deleted_before_moving_on,
    test_waits_for_a_compliant_cluster_then_fails_with_the_reasons,
)
