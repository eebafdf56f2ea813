"""The federation queue's order (policy.queue_order): longest expected remaining duration first."""

from __future__ import annotations

import copy

import pytest

from airflow_provider_fedsched.federation import FederationEngine, SpecError, TaskRequest, load_spec
from tests.federation.test_spec import BASE


def waiting(*durations: float) -> list[tuple[TaskRequest, float]]:
    return [
        (TaskRequest(expected_duration_seconds=duration), float(arrival))
        for arrival, duration in enumerate(durations)
    ]


def test_longest_first_is_the_default_and_ties_go_by_arrival() -> None:
    engine = FederationEngine(load_spec(BASE))
    assert engine.spec.policy.queue_order == "longest-first"
    assert engine.order(waiting(60, 3600, 600, 3600)) == [1, 3, 2, 0]


def test_arrival_order_on_request_and_per_task_policy() -> None:
    document = copy.deepcopy(BASE)
    document["policy"]["queue_order"] = "arrival"
    engine = FederationEngine(load_spec(document))
    entries = [(request, -arrival) for request, arrival in waiting(60, 3600, 600)]  # last arrived first
    assert engine.order(entries) == [2, 1, 0]
    assert engine.order(entries, engine.spec.policy.merged({"queue_order": "longest-first"})) == [1, 2, 0]


def test_unknown_queue_order_names_the_field() -> None:
    document = copy.deepcopy(BASE)
    document["policy"]["queue_order"] = "shortest-first"
    with pytest.raises(SpecError, match=r"policy\.queue_order"):
        load_spec(document)
