"""Airflow Assets as datasets: matching against the spec's entries, and what an asset's extra may say."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_provider_fedsched.federation import SpecError, load_spec
from airflow_provider_fedsched.federation.assets import (
    AssetDataset,
    WrittenEvent,
    asset_dataset,
    size_reported,
    where_written,
    written_event,
)
from airflow_provider_fedsched.federation.engine import FederationEngine
from airflow_provider_fedsched.federation.spec import FederationSpec, ResolvedDataset
from tests.federation import helpers

SPEC: dict[str, Any] = {
    "clusters": [
        {"name": "eu", "conn_id": "k8s_eu", "region": "eu-west-1"},
        {"name": "eu2", "conn_id": "k8s_eu2", "region": "eu-central-1"},
        {"name": "us", "conn_id": "k8s_us", "region": "us-east-1"},
    ],
    "datasets": [
        {
            "name": "patients",
            "cluster": "eu",
            "size_gb": 40,
            "allowed_regions": ["eu-west-1", "eu-central-1"],
            "assets": ["s3://eu-lake/patients/*"],
        },
        {"name": "events", "cluster": "us", "size_gb": 5, "assets": ["s3://us-lake/events"]},
        {"name": "nowhere", "cluster": "us", "size_gb": 1, "assets": ["gs://nothing/*"]},
    ],
}


def spec(**changes: Any) -> FederationSpec:
    return load_spec({**SPEC, **changes})


def asset(uri: str, name: str | None = None, role: Any = "inlet", **fields: Any) -> AssetDataset:
    extra = {"fedsched": fields} if fields else {}
    return asset_dataset(uri, name or uri, extra, role, "assets[0]")


def resolve(federation: FederationSpec, *assets: AssetDataset) -> list[ResolvedDataset]:
    found = federation.check_references(assets=assets, where="request")
    assert all(isinstance(dataset, ResolvedDataset) for dataset in found)
    return found  # type: ignore[return-value]


def test_an_asset_matches_its_entry_by_glob_exact_uri_or_name() -> None:
    federation = spec()
    by_glob, by_uri, by_name = resolve(
        federation,
        asset("s3://eu-lake/patients/2026/admissions.parquet"),
        asset("s3://us-lake/events"),
        asset("s3://elsewhere/x", name="patients"),
    )
    assert (by_glob.entry, by_glob.cluster, by_glob.size_gb) == ("patients", "eu", 40)
    assert by_glob.allowed_regions == ["eu-west-1", "eu-central-1"]
    assert by_glob.asset == "s3://eu-lake/patients/2026/admissions.parquet"
    assert by_glob.label == "'patients' (asset 's3://eu-lake/patients/2026/admissions.parquet')"
    assert (by_uri.entry, by_uri.allowed_regions) == ("events", None)
    assert by_name.entry == "patients"
    # An exact pattern is not a prefix; a glob matching nothing in this DAG is fine.
    assert resolve(federation, asset("s3://us-lake/events/more")) == []


def test_an_unknown_asset_without_extra_is_not_a_restricted_dataset() -> None:
    assert resolve(spec(), asset("file:///tmp/scratch.csv")) == []


def test_an_extra_may_narrow_the_rule_and_refine_the_size() -> None:
    (found,) = resolve(
        spec(), asset("s3://eu-lake/patients/a", allowed_regions=["eu-west-1"], size_gb=2, region="eu-west-1")
    )
    assert (found.allowed_regions, found.size_gb, found.cluster) == (["eu-west-1"], 2, "eu")
    (free,) = resolve(spec(), asset("s3://us-lake/events", allowed_regions=["us-east-1"]))
    assert free.allowed_regions == ["us-east-1"]  # a rule where the spec had none is narrower too


def test_an_extra_alone_makes_a_dataset() -> None:
    (on_cluster,) = resolve(spec(), asset("s3://other/x", cluster="eu2", size_gb=3))
    assert (on_cluster.entry, on_cluster.name, on_cluster.cluster, on_cluster.size_gb) == (
        None,
        "s3://other/x",
        "eu2",
        3,
    )
    assert on_cluster.label == "'s3://other/x' (asset)"
    (in_region,) = resolve(spec(), asset("s3://other/y", region="us-east-1", allowed_regions=["us-east-1"]))
    assert (in_region.cluster, in_region.allowed_regions) == (None, ["us-east-1"])


@pytest.mark.parametrize(
    ("given", "message"),
    [
        (
            asset("s3://eu-lake/patients/a", allowed_regions=["eu-west-1", "us-east-1"]),
            "request.assets[0] (inlet 's3://eu-lake/patients/a'): extra.fedsched.allowed_regions: "
            "['us-east-1'] widen spec dataset 'patients' (allowed: eu-west-1, eu-central-1); an asset's "
            "extra may narrow a rule, never widen it",
        ),
        (
            asset("s3://other/x", role="outlet", cluster="mars"),
            "request.assets[0] (outlet 's3://other/x'): extra.fedsched.cluster: unknown cluster 'mars' "
            "(known: eu, eu2, us)",
        ),
        (
            asset("s3://other/x", region="mars-1"),
            "request.assets[0] (inlet 's3://other/x'): extra.fedsched.region: unknown region 'mars-1'",
        ),
        (
            asset("s3://other/x", allowed_regions=["eu-west-1", "mars-1"]),
            "extra.fedsched.allowed_regions[1]: unknown region 'mars-1'",
        ),
        (
            asset("s3://eu-lake/patients/a", cluster="us"),
            "extra.fedsched.cluster: 'us' contradicts spec dataset 'patients', which lives on 'eu'",
        ),
        (
            asset("s3://eu-lake/patients/a", region="us-east-1"),
            "extra.fedsched.region: 'us-east-1' contradicts spec dataset 'patients': cluster 'eu' is in "
            "'eu-west-1'",
        ),
        (
            asset("s3://other/x", cluster="eu", region="us-east-1"),
            "extra.fedsched.region: 'us-east-1' contradicts extra.fedsched.cluster: cluster 'eu' is in",
        ),
    ],
)
def test_conflicting_or_unknown_extra_fields_fail_naming_the_asset_and_field(
    given: AssetDataset, message: str
) -> None:
    with pytest.raises(SpecError) as info:
        spec().check_references(assets=[given], where="request")
    assert message in str(info.value), str(info.value)
    assert given.uri in str(info.value)


def test_an_asset_matched_by_two_entries_is_an_error() -> None:
    datasets = [
        *SPEC["datasets"],
        {"name": "all-eu", "cluster": "eu", "size_gb": 1, "assets": ["s3://eu-lake/*"]},
    ]
    with pytest.raises(SpecError) as info:
        spec(datasets=datasets).check_references(assets=[asset("s3://eu-lake/patients/a")], where="request")
    assert str(info.value) == (
        "request.assets[0] (inlet 's3://eu-lake/patients/a'): matched by spec datasets 'all-eu', 'patients'; "
        "an asset is one dataset: make the spec's `assets` patterns disjoint"
    )


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"fedsched": {"size_gb": -1}}, "assets[0] (inlet 's3://x/y') extra.fedsched.size_gb: "),
        ({"fedsched": {"regoin": "eu"}}, "assets[0] (inlet 's3://x/y') extra.fedsched.regoin: Extra inputs"),
        (
            {"fedsched": {"allowed_regions": []}},
            "extra.fedsched.allowed_regions: List should have at least 1",
        ),
        ({"fedsched": {"allowed_regions": "eu-west-1"}}, "extra.fedsched.allowed_regions: Input should be"),
        ({"fedsched": "eu"}, "assets[0] (inlet 's3://x/y'): extra.fedsched must be a mapping"),
        ({"fedsched": {"size_gb": True}}, "extra.fedsched.size_gb"),
    ],
)
def test_bad_extra_fields_fail_naming_the_asset_and_field(extra: Any, message: str) -> None:
    with pytest.raises(SpecError) as info:
        asset_dataset("s3://x/y", "s3://x/y", extra, "inlet", "assets[0]")
    assert message in str(info.value), str(info.value)


def test_the_engine_keeps_a_sovereign_asset_in_its_regions_and_names_it() -> None:
    federation = spec()
    request = helpers.request(assets=[asset("s3://eu-lake/patients/a", allowed_regions=["eu-central-1"])])
    snapshots = {c.name: helpers.snapshot(c.name) for c in federation.clusters}
    decision = FederationEngine(federation).decide(request, snapshots, now=helpers.NOW)
    assert decision.cluster == "eu2"
    rejected = {c.cluster: c.reason for c in decision.rejected}
    assert "dataset 'patients' (asset 's3://eu-lake/patients/a')" in rejected["us"]
    assert "dataset 'patients' (asset 's3://eu-lake/patients/a')" in rejected["eu"]


def test_a_spec_entry_needs_its_cluster() -> None:
    datasets = [{"name": "x", "cluster": None, "size_gb": 1}]
    with pytest.raises(SpecError, match=r"datasets\[0\]\.cluster: required"):
        spec(datasets=datasets)


def test_an_inlet_written_elsewhere_moves_its_locality_but_keeps_its_rule() -> None:
    federation = spec()
    moved = asset_dataset(
        "s3://eu-lake/patients/a", "s3://eu-lake/patients/a", {}, "inlet", "w", WrittenEvent(cluster="eu2")
    )
    (found,) = resolve(federation, moved)
    assert (found.cluster, found.written_on, found.entry) == ("eu2", "eu2", "patients")
    assert found.allowed_regions == ["eu-west-1", "eu-central-1"]  # where it was written changes no rule
    assert found.label == "'patients' (asset 's3://eu-lake/patients/a', written on 'eu2' (eu-central-1))"
    # An event naming a member the spec no longer has steers nothing; an outlet's is not read.
    gone = moved.model_copy(update={"written_on": "retired"})
    assert resolve(federation, gone)[0].cluster == "eu"
    outlet = moved.model_copy(update={"role": "outlet"})
    assert resolve(federation, outlet)[0].cluster == "eu"
    # With no entry and no rule, a written asset of known size is a dataset for locality alone.
    (scratch,) = resolve(
        federation,
        asset_dataset(
            "s3://s/f", "s3://s/f", {"fedsched": {"size_gb": 9}}, "inlet", "w", WrittenEvent(cluster="us")
        ),
    )
    assert (scratch.cluster, scratch.size_gb, scratch.allowed_regions) == ("us", 9, None)


@pytest.mark.parametrize(
    ("extra", "cluster"),
    [
        ({"fedsched": {"cluster": "eu", "region": "eu-west-1"}}, "eu"),
        ({"fedsched": {"cluster": 5}}, None),
        ({"fedsched": {"cluster": ""}}, None),
        ({"fedsched": {"cluster": "x" * 300}}, None),
        ({"fedsched": "eu"}, None),
        ({}, None),
        (None, None),
        ("not a mapping", None),
    ],
)
def test_an_event_s_extra_says_where_it_was_written_or_nothing(extra: Any, cluster: str | None) -> None:
    assert written_event(extra, "inlets[0]").cluster == cluster


def test_an_inlet_inherits_the_rule_its_writer_ran_under_and_only_narrows() -> None:
    """Derived data keeps its inputs' sovereignty: an inherited rule narrows the entry's, and makes an asset
    no entry names restricted; a size its writer reported replaces the others for locality and egress."""
    federation = spec()
    written = WrittenEvent(cluster="eu2", size_gb=7.5, allowed_regions=["eu-central-1"])
    (narrowed,) = resolve(
        federation, asset_dataset("s3://eu-lake/patients/b", "b", {}, "inlet", "w", written)
    )
    assert narrowed.allowed_regions == ["eu-central-1"]  # the entry allows eu-west-1 too: narrower wins
    assert (narrowed.cluster, narrowed.size_gb, narrowed.written_region) == ("eu2", 7.5, "eu-central-1")
    assert narrowed.label == (
        "'patients' (asset 's3://eu-lake/patients/b', written on 'eu2' (eu-central-1), 7.5 GB, "
        "inherited rule: eu-central-1)"
    )
    (derived,) = resolve(
        federation,
        asset_dataset(
            "s3://scratch/r", "s3://scratch/r", {}, "inlet", "w", WrittenEvent(allowed_regions=["eu-west-1"])
        ),
    )
    assert (derived.entry, derived.allowed_regions, derived.cluster) == (None, ["eu-west-1"], None)
    # An inherited rule wider than the entry's lifts nothing; one of another place is an error.
    wide = WrittenEvent(allowed_regions=["eu-west-1", "eu-central-1", "us-east-1"])
    (kept,) = resolve(federation, asset_dataset("s3://eu-lake/patients/c", "c", {}, "inlet", "w", wide))
    assert kept.allowed_regions == ["eu-west-1", "eu-central-1"]
    with pytest.raises(SpecError, match="have no region in common"):
        resolve(
            federation,
            asset_dataset(
                "s3://eu-lake/patients/d", "d", {}, "inlet", "w", WrittenEvent(allowed_regions=["us-east-1"])
            ),
        )
    # An outlet's event is not read (it is what the task writes, not what it read).
    outlet = asset_dataset(
        "s3://scratch/r", "s3://scratch/r", {}, "outlet", "w", WrittenEvent(allowed_regions=["us-east-1"])
    )
    assert resolve(federation, outlet) == []


def test_the_rule_a_task_runs_under_is_every_dataset_s_at_once() -> None:
    federation = spec()
    found = federation.check_references(
        datasets=["events"],
        assets=[
            asset("s3://eu-lake/patients/a"),
            asset("s3://x", allowed_regions=["eu-central-1", "us-east-1"]),
        ],
    )
    assert FederationSpec.rule_of(found) == ["eu-central-1"]
    assert FederationSpec.rule_of(federation.check_references(datasets=["events"])) is None


@pytest.mark.parametrize(
    ("result", "size"),
    [
        ({"fedsched_size_gb": 12.5}, 12.5),
        ({"fedsched_size_gb": {"s3://a": 3}}, 3.0),
        ({"fedsched_size_gb": {"s3://other": 3}}, None),
        ({"accuracy": 0.9}, None),
        ([1, 2], None),
        (None, None),
    ],
)
def test_a_pod_reports_the_size_it_wrote_in_its_result(result: Any, size: float | None) -> None:
    assert size_reported(result, "s3://a") == size


@pytest.mark.parametrize("bad", [-1, "big", True, float("nan"), {"s3://a": "x"}])
def test_a_reported_size_that_is_no_size_names_the_field(bad: Any) -> None:
    with pytest.raises(SpecError, match=r"the pod's result fedsched_size_gb"):
        size_reported({"fedsched_size_gb": bad}, "s3://a")


def test_a_writer_marks_where_and_under_which_rule() -> None:
    assert where_written("eu", "eu-west-1") == {"cluster": "eu", "region": "eu-west-1"}
    assert where_written("eu", "eu-west-1", ["eu-west-1"]) == {
        "cluster": "eu",
        "region": "eu-west-1",
        "allowed_regions": ["eu-west-1"],
    }


def test_a_size_its_writer_reported_is_what_egress_costs() -> None:
    """The same inlet, written on ``us``: reported at 1000 GB its egress to any other member costs more than
    reported at 1 GB (its extra's 9 GB replaced either way), and nothing on ``us`` itself."""
    priced = [{**cluster, "prices": {"egress_gb": 0.1}} for cluster in SPEC["clusters"]]
    federation = spec(clusters=priced)
    snapshots = {c.name: helpers.snapshot(c.name) for c in federation.clusters}

    def cost_raw(size: float) -> dict[str, float]:
        written = WrittenEvent(cluster="us", size_gb=size)
        inlet = asset_dataset("s3://s/f", "s3://s/f", {"fedsched": {"size_gb": 9}}, "inlet", "w", written)
        decision = FederationEngine(federation).decide(
            helpers.request(assets=[inlet]), snapshots, now=helpers.NOW
        )
        return {c.cluster: c.breakdown["Cost"].raw for c in decision.candidates}

    small, large = cost_raw(1), cost_raw(1000)
    assert large["us"] == small["us"]
    assert large["eu"] > small["eu"] and large["eu2"] > small["eu2"]
