"""Hostile Airflow Assets on a task: bad ``extra["fedsched"]`` fields, an unknown cluster or region, an asset
matched by two spec entries, an extra widening its entry's rule. Each is a ``FederationError`` naming the
asset and the field, raised as a try starts, before anything is reserved or created."""

from __future__ import annotations

from typing import Any

import pytest
from airflow.sdk import Asset

from airflow_provider_fedsched.state import MemoryStateBackend
from tests.hostile.harness import check, raised, run_bounded

SPEC = """\
name: hostile-assets
clusters:
  - {name: eu-a, conn_id: k8s_eu_a, region: eu-west-1}
  - {name: cn-a, conn_id: k8s_cn_a, region: cn-east-1}
datasets:
  - name: eu-customers
    cluster: eu-a
    size_gb: 10
    allowed_regions: [eu-west-1]
    assets: ["s3://eu-lake/customers/*", "s3://shared/*"]
  - name: events
    cluster: cn-a
    size_gb: 10
    assets: ["s3://shared/events/*"]
"""


def fedsched(**fields: Any) -> dict[str, Any]:
    return {"fedsched": fields}


# (id, inlets, outlets, culprit): every culprit names the asset's URI and the field
ASSET_CASES: list[tuple[str, list[Any], list[Any], list[str]]] = [
    (
        "size_gb negative",
        [Asset("s3://x/a", extra=fedsched(size_gb=-1))],
        [],
        ["inlets[0] (inlet 's3://x/a')", "extra.fedsched.size_gb"],
    ),
    (
        "size_gb a string",
        [Asset("s3://x/a", extra=fedsched(size_gb="big"))],
        [],
        ["'s3://x/a'", "extra.fedsched.size_gb"],
    ),
    (
        "misspelt field",
        [],
        [Asset("s3://x/a", extra=fedsched(allowed_region=["eu-west-1"]))],
        ["outlets[0] (outlet 's3://x/a')", "extra.fedsched.allowed_region"],
    ),
    (
        "fedsched not a mapping",
        [Asset("s3://x/a", extra={"fedsched": ["eu-west-1"]})],
        [],
        ["'s3://x/a'", "extra.fedsched must be a mapping"],
    ),
    (
        "allowed_regions a string",
        [Asset("s3://x/a", extra=fedsched(allowed_regions="eu-west-1"))],
        [],
        ["'s3://x/a'", "extra.fedsched.allowed_regions"],
    ),
    (
        "allowed_regions empty",
        [Asset("s3://x/a", extra=fedsched(allowed_regions=[]))],
        [],
        ["'s3://x/a'", "extra.fedsched.allowed_regions"],
    ),
    (
        "unknown cluster",
        [Asset("s3://x/a", extra=fedsched(cluster="moon-base"))],
        [],
        ["'s3://x/a'", "extra.fedsched.cluster: unknown cluster 'moon-base' (known: cn-a, eu-a)"],
    ),
    (
        "unknown region",
        [],
        [Asset("s3://x/a", extra=fedsched(region="mars-1"))],
        ["(outlet 's3://x/a')", "extra.fedsched.region: unknown region 'mars-1'"],
    ),
    (
        "unknown allowed region",
        [Asset("s3://x/a", extra=fedsched(allowed_regions=["eu-west-1", "mars-1"]))],
        [],
        ["'s3://x/a'", "extra.fedsched.allowed_regions[1]: unknown region 'mars-1'"],
    ),
    (
        "matched by two entries",
        [Asset("s3://shared/events/day=1")],
        [],
        ["'s3://shared/events/day=1'", "matched by spec datasets 'eu-customers', 'events'"],
    ),
    (
        "extra widens the entry",
        [Asset("s3://eu-lake/customers/all", extra=fedsched(allowed_regions=["eu-west-1", "cn-east-1"]))],
        [],
        [
            "'s3://eu-lake/customers/all'",
            "extra.fedsched.allowed_regions: ['cn-east-1'] widen spec dataset 'eu-customers'",
        ],
    ),
    (
        "extra moves the data",
        [Asset("s3://eu-lake/customers/all", extra=fedsched(cluster="cn-a"))],
        [],
        ["'s3://eu-lake/customers/all'", "extra.fedsched.cluster: 'cn-a' contradicts spec dataset"],
    ),
    (
        "uri of 1400 characters with a bad extra",
        [Asset("s3://x/" + "a" * 1400, extra=fedsched(size_gb=-1))],
        [],
        ["'s3://x/aaaa", "extra.fedsched.size_gb"],
    ),
]


@pytest.fixture(scope="module")
def operator_class() -> Any:
    from airflow_provider_fedsched.operators.federated_pod import FederatedKubernetesOperator

    return FederatedKubernetesOperator


@pytest.mark.parametrize(
    ("inlets", "outlets", "culprits"), [c[1:] for c in ASSET_CASES], ids=[c[0] for c in ASSET_CASES]
)
def test_a_bad_asset_is_a_federation_error_naming_it_before_anything_is_reserved(
    operator_class: Any, inlets: list[Any], outlets: list[Any], culprits: list[str]
) -> None:
    from airflow_provider_fedsched.hooks.federation import FederationHook
    from airflow_provider_fedsched.operators.arguments import FederationError

    backend = MemoryStateBackend()
    hook = FederationHook(SPEC, state=backend)
    operator = operator_class(
        task_id="hostile", image="busybox", federation=SPEC, inlets=inlets, outlets=outlets
    )
    outcome = run_bounded(lambda: raised(lambda: operator.prepare(None, hook), FederationError))
    for culprit in culprits:
        check(*outcome, "raised", "FederationError", culprit)
    assert len(outcome[0].message) < 1000  # a 1400-character URI is cut, not echoed whole
    assert backend.keys("") == []  # nothing reserved, no snapshot taken


def test_a_glob_matching_nothing_and_an_unknown_asset_are_no_error(operator_class: Any) -> None:
    """``s3://shared/*`` matches none of this task's assets, and a URI no entry matches with no fedsched
    extra is not a restricted dataset: the task goes on to resolve its members (none reachable here)."""
    from airflow_provider_fedsched.hooks.federation import FederationHook
    from airflow_provider_fedsched.operators.arguments import FederationError

    hook = FederationHook(SPEC, state=MemoryStateBackend())
    operator = operator_class(
        task_id="fine", image="busybox", federation=SPEC, inlets=[Asset("file:///tmp/scratch.csv")]
    )
    with pytest.raises(FederationError, match="no member cluster can be reached"):
        operator.prepare(None, hook)


class Events:
    """What a try's ``context["inlet_events"]`` answers: each inlet's latest event, with this ``extra``
    (or an error when the API server cannot be read)."""

    def __init__(self, extra: Any) -> None:
        self.extra = extra

    def __getitem__(self, inlet: Any) -> Events:
        return self

    def ascending(self, ascending: bool) -> Events:
        return self

    def limit(self, count: int) -> list[Events]:
        if isinstance(self.extra, Exception):
            raise self.extra
        return [self]


# (id, the inlet's latest event's extra, culprit): the writer's report is hostile input too
EVENT_CASES: list[tuple[str, Any, list[str]]] = [
    (
        "event size_gb negative",
        fedsched(cluster="eu-a", size_gb=-1),
        ["inlets[0] (inlet 's3://x/a')", "latest asset event's extra.fedsched.size_gb", "-1"],
    ),
    ("event size_gb a string", fedsched(size_gb="big"), ["'s3://x/a'", "event's extra.fedsched.size_gb"]),
    ("event size_gb a bool", fedsched(size_gb=True), ["'s3://x/a'", "event's extra.fedsched.size_gb"]),
    (
        "event allowed_regions a string",
        fedsched(allowed_regions="eu-west-1"),
        ["'s3://x/a'", "event's extra.fedsched.allowed_regions"],
    ),
    (
        "event allowed_regions empty",
        fedsched(allowed_regions=[]),
        ["'s3://x/a'", "event's extra.fedsched.allowed_regions"],
    ),
    (
        "event region a list",
        fedsched(cluster="eu-a", region=["eu-west-1"]),
        ["'s3://x/a'", "event's extra.fedsched.region"],
    ),
    (
        "event region contradicts its cluster",
        fedsched(cluster="eu-a", region="cn-east-1"),
        [
            "'s3://x/a'",
            "event's extra.fedsched.region: 'cn-east-1' contradicts cluster 'eu-a', which is in 'eu-west-1'",
        ],
    ),
    (
        "event allowed region unknown",
        fedsched(cluster="eu-a", allowed_regions=["mars-1"]),
        ["'s3://x/a'", "latest asset event's extra.fedsched.allowed_regions[0]: unknown region 'mars-1'"],
    ),
]


@pytest.mark.parametrize(("extra", "culprits"), [c[1:] for c in EVENT_CASES], ids=[c[0] for c in EVENT_CASES])
def test_a_bad_field_in_an_inlet_s_latest_event_is_a_federation_error_naming_it(
    operator_class: Any, extra: Any, culprits: list[str]
) -> None:
    from airflow_provider_fedsched.hooks.federation import FederationHook
    from airflow_provider_fedsched.operators.arguments import FederationError

    backend = MemoryStateBackend()
    hook = FederationHook(SPEC, state=backend)
    operator = operator_class(task_id="hostile", image="busybox", federation=SPEC, inlets=[Asset("s3://x/a")])
    context = {"inlet_events": Events(extra)}
    outcome = run_bounded(lambda: raised(lambda: operator.prepare(context, hook), FederationError))
    for culprit in culprits:
        check(*outcome, "raised", "FederationError", culprit)
    assert backend.keys("") == []


def test_an_inherited_rule_disjoint_from_the_spec_s_is_an_error_never_a_widening(operator_class: Any) -> None:
    """EU data derived from China-only inputs: the two rules have no region in common; the task fails
    naming both, before anything is reserved (neither rule is dropped)."""
    from airflow_provider_fedsched.hooks.federation import FederationHook
    from airflow_provider_fedsched.operators.arguments import FederationError

    backend = MemoryStateBackend()
    hook = FederationHook(SPEC, state=backend)
    operator = operator_class(
        task_id="derived", image="busybox", federation=SPEC, inlets=[Asset("s3://eu-lake/customers/x")]
    )
    context = {"inlet_events": Events(fedsched(cluster="cn-a", allowed_regions=["cn-east-1"]))}
    with pytest.raises(FederationError) as raised_error:
        operator.prepare(context, hook)
    assert (
        "(inlet 's3://eu-lake/customers/x'): the rule it inherited from the data it was derived from "
        "(allowed: cn-east-1) and spec dataset 'eu-customers' (allowed: eu-west-1) have no region in common"
    ) in str(raised_error.value)
    assert backend.keys("") == []


def test_an_unreadable_event_fails_the_try_before_anything_is_reserved(operator_class: Any) -> None:
    """The event may carry an inherited rule: placing without it could widen it. The try fails (one Airflow
    may retry: not a FederationError), naming the inlet."""
    from airflow.sdk.exceptions import AirflowException

    from airflow_provider_fedsched.hooks.federation import FederationHook
    from airflow_provider_fedsched.operators.arguments import FederationError

    backend = MemoryStateBackend()
    hook = FederationHook(SPEC, state=backend)
    operator = operator_class(task_id="unread", image="busybox", federation=SPEC, inlets=[Asset("s3://x/a")])
    with pytest.raises(AirflowException) as raised_error:
        operator.prepare({"inlet_events": Events(ConnectionError("API server gone"))}, hook)
    assert not isinstance(raised_error.value, FederationError)
    assert "inlets[0] (inlet 's3://x/a'): cannot read the latest event" in str(raised_error.value)
    assert "API server gone" in str(raised_error.value)
    assert backend.keys("") == []
