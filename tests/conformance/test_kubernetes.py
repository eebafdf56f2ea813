"""The simulator's controller, fault and client tests, run against the real control planes (imported).

Here the scheduler is kube-scheduler, quota admission is the real ResourceQuota plugin, taint eviction is
kube-controller-manager's, and kwok plays the kubelet. Left out: what reaches into the simulator (latency
and error-burst injection, dropped watches, its image-pull and restart emulation, log follow internals).
"""

from __future__ import annotations

from tests.sim.test_clients import test_kubectl_against_every_context, test_kubernetes_asyncio  # noqa: F401
from tests.sim.test_controllers import (  # noqa: F401 - collected here, against the test bed
    test_exec_xcom_sidecar_protocol,
    test_failed_scheduling_message_and_aggregation,
    test_graceful_delete,
    test_logs_options_and_errors,
    test_pod_lifecycle_status_shapes,
    test_preemption,
    test_quota_admission_and_usage,
)
from tests.sim.test_faults import (  # noqa: F401
    test_api_eviction,
    test_node_not_ready_and_taint_manager_eviction,
    test_node_pressure_eviction,
    test_scheduler_pause_and_resume,
)
from tests.sim.test_log_env import test_substituted_lines_through_the_api  # noqa: F401
