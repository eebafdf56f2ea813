"""The order in which tasks waiting at the federation are decided again when capacity frees up.

The kube-scheduler has a QueueSort extension point for the same question inside one cluster. At the
federation it decides the makespan: a burst of work that does not fit waits, and if the longest tasks
wait longest they finish last, long after the rest (the classic longest-processing-time-first result:
within 4/3 of the optimal makespan on identical machines, against up to 2x for arrival order).

Set by ``policy.queue_order`` in the spec:

* ``arrival``: first come, first served.
* ``longest-first``: the longest expected remaining duration first (``TaskRequest.expected_duration_seconds``,
  which the caller lowers as work is checkpointed), ties by arrival. Short tasks still start at once
  wherever they fit; only the order among waiting tasks changes.
"""

from __future__ import annotations

from collections.abc import Sequence

from airflow_provider_fedsched.federation.request import TaskRequest
from airflow_provider_fedsched.federation.spec import QueueOrder

__all__ = ["queue_order"]


def queue_order(waiting: Sequence[tuple[TaskRequest, float]], order: QueueOrder) -> list[int]:
    """Positions of ``waiting`` in the order its tasks should be decided. Each entry pairs a request with
    when it arrived (any clock, smaller is earlier); ties go by arrival, then position (deterministic)."""
    if order == "arrival":
        return sorted(range(len(waiting)), key=lambda i: (waiting[i][1], i))
    return sorted(
        range(len(waiting)),
        key=lambda i: (-waiting[i][0].expected_duration_seconds, waiting[i][1], i),
    )
