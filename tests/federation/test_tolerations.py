"""The one toleration matcher: Kubernetes' validation and ``ToleratesTaint`` semantics."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_provider_fedsched.federation import SpecError, Taint, TaskRequest, Toleration

NO_SCHEDULE = Taint(key="dedicated", value="batch", effect="NoSchedule")
NO_EXECUTE = Taint(key="dedicated", value="batch", effect="NoExecute")
OTHER_KEY = Taint(key="gpu", value="batch", effect="NoSchedule")


@pytest.mark.parametrize(
    ("toleration", "taint", "tolerated"),
    [
        (
            {"key": "dedicated", "operator": "Equal", "value": "batch", "effect": "NoSchedule"},
            NO_SCHEDULE,
            True,
        ),
        ({"key": "dedicated", "value": "batch", "effect": "NoSchedule"}, NO_SCHEDULE, True),  # "" = Equal
        ({"key": "dedicated", "operator": "", "value": "batch"}, NO_EXECUTE, True),  # no effect: every effect
        ({"key": "dedicated", "operator": "Equal", "value": "other"}, NO_SCHEDULE, False),
        ({"key": "dedicated", "operator": "Equal"}, NO_SCHEDULE, False),  # value "" != "batch"
        ({"key": "dedicated", "operator": "Exists"}, NO_SCHEDULE, True),  # any value
        ({"key": "dedicated", "operator": "Exists", "effect": "NoExecute"}, NO_SCHEDULE, False),
        ({"key": "dedicated", "operator": "Exists"}, OTHER_KEY, False),
        ({"operator": "Exists"}, OTHER_KEY, True),  # empty key + Exists: every key
        ({"operator": "Exists", "effect": "NoSchedule"}, NO_EXECUTE, False),  # ... of that effect only
        ({"operator": "Exists", "effect": "NoExecute"}, NO_EXECUTE, True),
    ],
)
def test_matching_follows_kubernetes(toleration: dict[str, Any], taint: Taint, tolerated: bool) -> None:
    assert Toleration.from_k8s(toleration).tolerates(taint) is tolerated


@pytest.mark.parametrize(
    ("toleration", "message"),
    [
        # The API server rejects these pods; so does the matcher, naming the field.
        ({"operator": "Equal", "value": "batch"}, "spec.tolerations[2].operator: an empty key requires"),
        ({"value": "batch"}, "spec.tolerations[2].operator: an empty key requires operator 'Exists'"),
        ({"key": "k", "operator": "Exists", "value": "v"}, "spec.tolerations[2].value: operator 'Exists'"),
        ({"key": "k", "operator": "In"}, "spec.tolerations[2].operator: Input should be 'Equal' or 'Exists'"),
        ({"key": "k", "operator": "Exists", "effect": "Never"}, "spec.tolerations[2].effect:"),
        ("k=v", "spec.tolerations[2]: expected a mapping, got str"),
    ],
)
def test_invalid_tolerations_are_spec_errors_naming_the_field(toleration: Any, message: str) -> None:
    with pytest.raises(SpecError) as info:
        Toleration.from_k8s(toleration, "spec.tolerations[2]")
    assert str(info.value).startswith(message)


def test_pod_spec_tolerations_in_either_case_and_errors_name_the_request_field() -> None:
    pod = {
        "containers": [{"name": "main", "resources": {"requests": {"cpu": "1"}}}],
        "tolerations": [{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}],
    }
    request = TaskRequest.from_pod_spec(pod)
    assert request.tolerations == [Toleration(key="dedicated", operator="Exists", effect="NoSchedule")]
    pod["tolerations"] = [*pod["tolerations"], {"operator": "Equal"}]
    with pytest.raises(SpecError, match=r"^request\.tolerations\[1\]\.operator: an empty key requires"):
        TaskRequest.from_pod_spec(pod)
