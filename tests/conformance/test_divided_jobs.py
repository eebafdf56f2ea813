"""Divided Indexed Jobs (issue 31) against the test bed (imported from tests/operators, not copied).

Each slice is an Indexed Job run by the member's real Job controller, its pods scheduled by the real
kube-scheduler and played by kwok; the Airflow connections carry the provider's service-account token,
bound by exactly deploy/rbac*.yaml. "Every index ran exactly once" is judged from the members' own
records: each API server's audit log of every pod write (the Job controller's creates, kwok's status
updates), read as a journal (``pods_ran`` in conftest.py), never from the operator's placement record.
The outage is real: the member's kube-apiserver process ends mid-run and starts again over the same etcd.
"""

from __future__ import annotations

from tests.operators.test_federated_job import (  # noqa: F401 - collected here, against the test bed
    background,
    job_creates,
    room_50_30_20,
    test_a_divided_job_runs_each_index_exactly_once_in_slices_that_follow_the_room,
    test_a_divided_retry_never_runs_again_an_index_an_earlier_try_saw_succeed,
    test_a_sovereign_divided_job_never_places_a_slice_outside_its_regions,
)
