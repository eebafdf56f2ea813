"""The simulator's controller, fault and client tests, run against the real control planes (imported).

Here the scheduler is kube-scheduler, quota admission is the real ResourceQuota plugin, taint eviction is
kube-controller-manager's, and kwok plays the kubelet from the same pod stages as the simulator's
(image pulls, exits, restarts and graceful deletion included). Left out: what reaches into the simulator
(latency and error-burst injection, dropped watches, log follow internals), and what the real parts answer
otherwise (docs/simulator.md, "Fidelity"): kube-scheduler's FailedScheduling wording and event source, kwok
serving logs before a container starts and kwok's exec of an unknown command (an internal error, not exit
code 127).
"""

from __future__ import annotations

from tests.sim.test_clients import test_kubectl_against_every_context, test_kubernetes_asyncio  # noqa: F401
from tests.sim.test_controllers import (  # noqa: F401 - collected here, against the test bed
    test_exit_code_and_restart_on_failure,
    test_graceful_delete,
    test_image_pull_failure,
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
