"""The delivery contract's outage scenarios against the test bed (imported from tests/operators, not copied).

The outage is real: the member's kube-apiserver process ends (connections refused) and starts again on the
same port over the same etcd; the pod keeps running on its kwok node meanwhile, as on a real cluster whose
control plane is down.
"""

from __future__ import annotations

from tests.operators.test_contract import (  # noqa: F401 - collected here, against the test bed
    creates,
    test_a_preemptible_task_moves_at_once_and_fences_its_old_pod,
    test_outage_longer_than_the_grace_fails_the_try_and_never_runs_the_work_twice,
    test_outage_while_running_shorter_than_the_grace_reattaches,
)
