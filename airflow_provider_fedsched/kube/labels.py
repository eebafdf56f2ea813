"""Labels the federation puts on every pod it launches (read back by snapshots, adoption and the UI)."""

from __future__ import annotations

import hashlib

PLACEMENT_LABEL = "fedsched.io/placement"
"""The pod's placement id: a snapshot shows which in-flight reservations have landed."""
TASK_LABEL = "fedsched.io/task"
"""A digest of (dag, run, task, map index): every pod of every try of one task instance, in any cluster."""
TRY_LABEL = "fedsched.io/try"
CLUSTER_LABEL = "fedsched.io/cluster"
ATTEMPT_LABEL = "fedsched.io/cluster-attempt"
TENANT_LABEL = "fedsched.io/tenant"
"""The tenant a pod runs for: snapshots sum each tenant's requests from it (federation-wide usage)."""
PREEMPTIBLE_LABEL = "fedsched.io/preemptible"
"""``"true"`` on the pods of preemptible tasks: the only ones a lender's reclaim may move
(``federation/reclaim.py``)."""


def task_digest(dag_id: str, run_id: str, task_id: str, map_index: int) -> str:
    """The value of :data:`TASK_LABEL` (a label value: at most 63 characters, alphanumeric)."""
    text = f"{dag_id}\x00{run_id}\x00{task_id}\x00{map_index}"
    return hashlib.sha256(text.encode()).hexdigest()[:40]
