from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from airflow_provider_fedsched.federation.resources import (
    QuantityError,
    format_quantity,
    parse_quantity,
    parse_resource_list,
    pod_requests,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("500m", Fraction(1, 2)),
        ("1.5", Fraction(3, 2)),
        ("4Gi", Fraction(4 * 2**30)),
        ("1e3", Fraction(1000)),
        ("2G", Fraction(2 * 10**9)),
        ("100Mi", Fraction(100 * 2**20)),
        ("0.1", Fraction(1, 10)),
        (".5", Fraction(1, 2)),
        (3, Fraction(3)),
        (0.25, Fraction(1, 4)),
    ],
)
def test_quantities_parse_exactly(text: str | int | float, expected: Fraction) -> None:
    assert parse_quantity(text) == expected


@pytest.mark.parametrize(
    "bad", ["", "abc", "1.5.5", "4GiB", "-1", "1e", "Gi", "1 Gi", True, float("inf"), None]
)
def test_bad_quantities_are_rejected(bad: object) -> None:
    with pytest.raises(QuantityError):
        parse_quantity(bad)  # type: ignore[arg-type]


def test_resource_list_uses_scheduler_units_and_names_the_bad_resource() -> None:
    assert parse_resource_list({"cpu": "1.5", "memory": "1Ki", "nvidia.com/gpu": 2}) == {
        "cpu": 1500,
        "memory": 1024,
        "nvidia.com/gpu": 2,
    }
    # Sub-millicore cpu rounds up, like resource.Quantity.MilliValue().
    assert parse_resource_list({"cpu": "0.0001"}) == {"cpu": 1}
    with pytest.raises(QuantityError, match=r"^memory: "):
        parse_resource_list({"cpu": "1", "memory": "-4Gi"})


@given(st.integers(min_value=0, max_value=2**50), st.sampled_from(["cpu", "memory", "nvidia.com/gpu"]))
def test_format_quantity_round_trips(amount: int, resource: str) -> None:
    assert parse_resource_list({resource: format_quantity(resource, amount)}) == {resource: amount}


def _container(
    requests: dict[str, str] | None = None, limits: dict[str, str] | None = None, **extra: str
) -> dict:
    return {"name": "c", "resources": {"requests": requests or {}, "limits": limits or {}}, **extra}


def test_pod_requests_sum_containers_against_the_largest_init_container() -> None:
    spec = {
        "containers": [_container({"cpu": "1", "memory": "1Gi"}), _container({"cpu": "500m"})],
        "initContainers": [_container({"cpu": "2"}), _container({"memory": "3Gi"})],
    }
    assert pod_requests(spec) == {"cpu": 2000, "memory": 3 * 2**30}


def test_pod_requests_add_sidecars_overhead_and_default_requests_to_limits() -> None:
    spec = {
        "containers": [_container(limits={"cpu": "1", "nvidia.com/gpu": "1"})],
        "init_containers": [
            _container({"cpu": "250m"}, restart_policy="Always"),  # sidecar, snake_case client form
            _container({"cpu": "1"}),
        ],
        "overhead": {"cpu": "100m"},
    }
    # containers 1 + sidecar 0.25 = 1.25; the init container runs beside the sidecar: 1.25; + overhead 0.1.
    assert pod_requests(spec) == {"cpu": 1350, "nvidia.com/gpu": 1}
