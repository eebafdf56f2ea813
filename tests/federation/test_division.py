"""Divided jobs: an Indexed Job's indices split over members by room and score, and moved without running
an index twice (federation/division.py)."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_provider_fedsched.federation import FederationEngine, SpecError
from airflow_provider_fedsched.federation.division import (
    MAX_COMPLETIONS,
    Division,
    IndexSlice,
    Share,
    divide,
    divide_placement,
    parse_ranges,
    rebalance,
)
from airflow_provider_fedsched.federation.request import GangRole
from tests.federation.helpers import NOW, cluster, node, request, snapshot, spec

PROPERTY = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def share(name: str, weight: float, capacity: int = 1000) -> Share:
    return Share(cluster=name, weight=weight, capacity=capacity)


def sizes(division: Division) -> dict[str, int]:
    return {piece.cluster: len(piece.indices) for piece in division.slices}


# Dividing ---------------------------------------------------------------------------------------------------
def test_a_40_index_job_over_members_with_room_50_30_20_percent_gets_20_12_8() -> None:
    division = divide(40, [share("b", 30), share("a", 50), share("c", 20)])

    assert sizes(division) == {"a": 20, "b": 12, "c": 8}
    # Contiguous, the best-weighted member first, whatever the order the shares came in.
    assert [(p.cluster, p.ranges) for p in division.slices] == [("a", "0-19"), ("b", "20-31"), ("c", "32-39")]
    assert sum(p.parallelism for p in division.slices) == 40
    assert division.placed
    assert division.reasons["a"].startswith("20 of 40 indices: room for 1000 pod(s) now")


def test_no_member_gets_more_than_its_room_while_another_has_room_left() -> None:
    # a's weight asks for 20, its room is 10: the other 30 are split by weight between b and c (3:2).
    division = divide(40, [share("a", 50, 10), share("b", 30, 30), share("c", 20, 30)])

    assert sizes(division) == {"a": 10, "b": 18, "c": 12}


def test_once_every_member_is_full_the_rest_goes_by_weight_and_the_reason_says_so() -> None:
    division = divide(100, [share("a", 3, 10), share("b", 1, 10)])

    # 20 by room, the other 80 by weight 3:1.
    assert sizes(division) == {"a": 10 + 60, "b": 10 + 20}
    assert "60 beyond its room (every member is full)" in division.reasons["a"]


def test_a_member_of_weight_zero_gets_nothing_and_no_weight_at_all_means_every_index_waits() -> None:
    division = divide(10, [share("a", 1), Share(cluster="full", weight=0, capacity=0, reason="no room now")])
    assert sizes(division) == {"a": 10}
    assert division.reasons["full"] == "no indices: weight 0 (no room now)"

    waiting = divide(5, [Share(cluster="full", weight=0, capacity=0)], excluded={"eu": "Sovereignty: ..."})
    assert (waiting.slices, waiting.waiting, waiting.placed) == ((), (0, 1, 2, 3, 4), False)
    assert waiting.reasons["eu"] == "excluded: Sovereignty: ..."


def test_parallelism_is_split_in_proportion_and_bounds_how_many_members_take_part() -> None:
    division = divide(40, [share("a", 50), share("b", 30), share("c", 20)], parallelism=10)
    assert {p.cluster: p.parallelism for p in division.slices} == {"a": 5, "b": 3, "c": 2}

    two = divide(40, [share("a", 50), share("b", 30), share("c", 20)], parallelism=2)
    assert sizes(two) == {"a": 25, "b": 15}
    assert "parallelism 2 runs on at most 2 member(s)" in two.reasons["c"]


@pytest.mark.parametrize(
    ("completions", "parallelism", "message"),
    [
        (0, None, "completions: 0 is outside 1..100000"),
        (-3, None, "completions: -3 is outside 1..100000"),
        (True, None, "completions: expected an integer in 1..100000, got bool True"),
        (MAX_COMPLETIONS + 1, None, "completions: 100001 is outside 1..100000"),
        (2**200, None, "completions: "),
        ("40", None, "completions: expected an integer"),
        (40, 0, "parallelism: 0 is outside 1..40"),
        (40, 41, "parallelism: 41 is outside 1..40"),
        (40, 2.0, "parallelism: expected an integer"),
    ],
)
def test_bad_completions_or_parallelism_is_refused_naming_the_field(
    completions: Any, parallelism: Any, message: str
) -> None:
    with pytest.raises(SpecError) as caught:
        divide(completions, [share("a", 1)], parallelism=parallelism)
    assert str(caught.value).startswith(message)


@pytest.mark.parametrize(
    ("shares", "message"),
    [
        ([{"cluster": "a", "weight": math.nan, "capacity": 1}], "shares[0].weight: Input should be"),
        ([{"cluster": "a", "weight": math.inf, "capacity": 1}], "shares[0].weight: Input should be"),
        ([{"cluster": "a", "weight": -1, "capacity": 1}], "shares[0].weight: Input should be greater"),
        ([{"cluster": "a", "weight": True, "capacity": 1}], "shares[0].weight: expected a number"),
        ([{"cluster": "a", "weight": 1, "capacity": -1}], "shares[0].capacity: Input should be greater"),
        ([{"cluster": "", "weight": 1, "capacity": 1}], "shares[0].cluster: String should have at least"),
        ([{"cluster": "a", "weight": 1, "capacity": 1, "colour": "red"}], "shares[0].colour: Extra inputs"),
        ([share("a", 1), share("a", 2)], "shares[1].cluster: 'a' has two shares"),
        (["a"], "shares[0]: expected a share, got str"),
        ("a", "shares: expected a list of shares, got str"),
    ],
)
def test_bad_shares_are_refused_naming_the_field(shares: Any, message: str) -> None:
    with pytest.raises(SpecError) as caught:
        divide(10, shares)
    assert str(caught.value).startswith(message)


def test_a_division_that_is_not_a_partition_of_its_indices_is_refused() -> None:
    piece = {"cluster": "a", "indices": (0, 1), "parallelism": 1}
    with pytest.raises(ValueError, match=r"slices\[1\].indices: index 1 is in two slices"):
        Division(
            completions=3,
            parallelism=1,
            slices=(piece, {"cluster": "b", "indices": (1, 2), "parallelism": 1}),
        )
    with pytest.raises(ValueError, match=r"slices\[0\].indices: index 5 is outside 0..2"):
        Division(
            completions=3, parallelism=1, slices=({"cluster": "a", "indices": (0, 5), "parallelism": 1},)
        )
    with pytest.raises(ValueError, match="index 2 is in no slice and not waiting"):
        Division(completions=3, parallelism=1, slices=(piece,))


shares_strategy = st.lists(
    st.builds(
        Share,
        cluster=st.sampled_from([f"m{i}" for i in range(8)]),
        weight=st.one_of(st.just(0.0), st.floats(0.01, 1000)),
        capacity=st.integers(0, 60),
    ),
    max_size=8,
    unique_by=lambda s: s.cluster,
)


@PROPERTY
@given(completions=st.integers(1, 300), shares=shares_strategy, data=st.data())
def test_every_index_is_dealt_once_contiguously_within_room_when_room_suffices(
    completions: int, shares: list[Share], data: st.DataObject
) -> None:
    parallelism = data.draw(st.integers(1, completions))
    division = divide(completions, shares, parallelism=parallelism)
    again = divide(completions, list(reversed(shares)), parallelism=parallelism)

    assert division == again  # deterministic, whatever the order of the shares
    dealt = [i for piece in division.slices for i in piece.indices] + list(division.waiting)
    assert dealt == list(range(completions))  # each index exactly once, slices contiguous in order
    by_name = {s.cluster: s for s in shares}
    eligible = sorted((s for s in shares if s.weight > 0), key=lambda s: (-s.weight, s.cluster))
    eligible = eligible[:parallelism]
    for piece in division.slices:
        assert by_name[piece.cluster].weight > 0
        assert 1 <= piece.parallelism <= len(piece.indices)
        if sum(s.capacity for s in eligible) >= completions:
            assert len(piece.indices) <= by_name[piece.cluster].capacity
    assert sum(p.parallelism for p in division.slices) == (parallelism if division.slices else 0)
    assert bool(division.waiting) == (not eligible)


# Rebalancing ------------------------------------------------------------------------------------------------
def test_a_rejected_member_loses_only_its_unfinished_unfenced_indices() -> None:
    division = divide(40, [share("a", 50), share("b", 30), share("c", 20)])  # a 0-19, b 20-31, c 32-39

    moved = rebalance(
        division,
        succeeded={0, 1, 2, 25, 33},
        may_be_running={3, 4},
        rejected_cluster="a",
        shares=[share("b", 30, 6), share("c", 20, 100), share("a", 99)],
    )

    assert moved.kept == (0, 1, 2)
    assert moved.fenced == (3, 4)
    new = moved.division
    assert new.slice_of("a") is not None and new.slice_of("a").indices == (0, 1, 2, 3, 4)  # type: ignore[union-attr]
    # 15 unfinished indices: b has room for 6, c takes the other 9.
    assert [(p.cluster, p.ranges) for p in moved.moved] == [("b", "5-10"), ("c", "11-19")]
    assert new.slice_of("b").ranges == "5-10,20-31"  # type: ignore[union-attr]
    assert new.reasons["a"].startswith("rejected: 15 unfinished index(es) moved off, 0 waiting for room")


def test_with_nowhere_to_go_the_unfinished_indices_wait_and_a_later_rebalance_places_them() -> None:
    division = divide(10, [share("a", 1), share("b", 1)])  # a 0-4, b 5-9

    stuck = rebalance(
        division,
        succeeded={0},
        may_be_running=(),
        rejected_cluster="a",
        shares=[Share(cluster="b", weight=0, capacity=0)],
    )
    assert stuck.division.waiting == (1, 2, 3, 4)
    assert stuck.moved == ()

    later = rebalance(
        stuck.division, succeeded={0}, may_be_running=(), rejected_cluster=None, shares=[share("b", 1)]
    )
    assert later.division.waiting == ()
    assert later.division.slice_of("b").indices == tuple(range(1, 10))  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (
            {"rejected_cluster": "zz"},
            "rejected_cluster: 'zz' holds no slice of this division (holders: a, b)",
        ),
        ({"succeeded": {10}}, "succeeded: index 10 is outside 0..9"),
        ({"succeeded": [True]}, "succeeded: expected whole-number indices, got True"),
        ({"succeeded": "12"}, "succeeded: expected a collection of indices, got str"),
        ({"may_be_running": {-1}}, "may_be_running: index -1 is outside 0..9"),
        ({"succeeded": {3}, "may_be_running": {3}}, "may_be_running: index 3 also succeeded"),
        ({"shares": [{"cluster": "b", "weight": math.nan, "capacity": 1}]}, "shares[0].weight: "),
    ],
)
def test_bad_rebalance_input_is_refused_naming_the_field(fields: dict[str, Any], message: str) -> None:
    division = divide(10, [share("a", 1), share("b", 1)])
    arguments: dict[str, Any] = {
        "succeeded": (),
        "may_be_running": (),
        "rejected_cluster": "a",
        "shares": [share("b", 1)],
        **fields,
    }
    with pytest.raises(SpecError) as caught:
        rebalance(division, **arguments)
    assert str(caught.value).startswith(message)


@PROPERTY
@given(
    completions=st.integers(1, 120),
    shares=shares_strategy.filter(lambda shares: any(s.weight > 0 for s in shares)),
    later=shares_strategy,
    data=st.data(),
)
def test_rebalance_never_moves_a_succeeded_or_fenced_index_nor_assigns_one_twice(
    completions: int, shares: list[Share], later: list[Share], data: st.DataObject
) -> None:
    division = divide(completions, shares)
    if not division.slices:
        return
    source = data.draw(st.sampled_from([p.cluster for p in division.slices]))
    everything = list(range(completions))
    succeeded = set(data.draw(st.lists(st.sampled_from(everything), max_size=completions)))
    fenced = set(data.draw(st.lists(st.sampled_from(everything), max_size=completions))) - succeeded
    fenced &= set(division.cluster_of())
    before = division.cluster_of()

    result = rebalance(
        division, succeeded=succeeded, may_be_running=fenced, rejected_cluster=source, shares=later
    )

    after = result.division.cluster_of()
    dealt = sorted([i for p in result.division.slices for i in p.indices] + list(result.division.waiting))
    assert dealt == everything  # Division's own check, and here in the open: each index once
    for index in everything:
        if index in succeeded or index in fenced or before.get(index) != source:
            assert after.get(index) == before.get(index), index  # never moved
        elif index in after:
            assert after[index] != source  # an unfinished index of the rejected member left it
    for piece in result.moved:
        assert piece.cluster != source
        assert not set(piece.indices) & (succeeded | fenced)


# Through the engine ---------------------------------------------------------------------------------------
def room_nodes(prefix: str, free_pods: int, total_pods: int = 100) -> list[Any]:
    """Ten nodes holding ``total_pods`` one-cpu pods, ``free_pods`` of them free now."""
    nodes = []
    for i in range(10):
        per_node = total_pods // 10
        free = min(per_node, max(0, free_pods - i * per_node))
        nodes.append(
            node(f"{prefix}{i}", {"cpu": str(per_node), "memory": "64Gi"}, {"cpu": str(per_node - free)})
        )
    return nodes


def test_through_the_engine_the_slices_follow_each_members_free_room() -> None:
    fed = spec(
        [cluster("a"), cluster("b"), cluster("c")], policy={"scores": ["Cost"]}
    )  # equal prices: the room alone weighs
    snapshots = {
        "a": snapshot("a", room_nodes("a", 50)),
        "b": snapshot("b", room_nodes("b", 30)),
        "c": snapshot("c", room_nodes("c", 20)),
    }
    pod = request({"cpu": "1", "memory": "1Gi"})
    decision = FederationEngine(fed).decide(pod, snapshots, now=NOW)

    division = divide_placement(decision, pod, fed, snapshots, 40, parallelism=40)

    assert sizes(division) == {"a": 20, "b": 12, "c": 8}
    assert division.reasons["a"].startswith("20 of 40 indices: room for 50 pod(s) now")


def test_in_flight_reservations_count_against_a_members_room_and_a_full_member_gets_nothing() -> None:
    fed = spec([cluster("a"), cluster("b"), cluster("full")], policy={"scores": ["Cost"]})
    snapshots = {
        "a": snapshot("a", room_nodes("a", 20)),
        "b": snapshot("b", room_nodes("b", 20)),
        "full": snapshot("full", room_nodes("full", 0)),
    }
    pod = request({"cpu": "1", "memory": "1Gi"})
    in_flight = {"a": [{"cpu": 1000, "memory": 2**30}] * 10}  # ten pods sent to a, not in its snapshot yet
    decision = FederationEngine(fed).decide(pod, snapshots, now=NOW, in_flight=in_flight)

    division = divide_placement(decision, pod, fed, snapshots, 30, in_flight=in_flight)

    assert sizes(division) == {"b": 20, "a": 10}
    assert division.reasons["full"].startswith("no indices: weight 0 (no room now: 0/10 nodes fit")


def test_a_gang_request_cannot_be_divided() -> None:
    fed = spec([cluster("a")])
    snapshots = {"a": snapshot("a")}
    gang = request({"cpu": "2", "memory": "2Gi"}).model_copy(
        update={"gang": (GangRole(count=2, resources={"cpu": 1000, "memory": 2**30}),)}
    )
    decision = FederationEngine(fed).decide(request(), snapshots, now=NOW)
    with pytest.raises(SpecError, match=r"request\.gang: a divided job is judged for one of its pods"):
        divide_placement(decision, gang, fed, snapshots, 4)


@PROPERTY
@given(
    regions=st.lists(st.sampled_from(["eu", "us", "ap"]), min_size=1, max_size=6),
    completions=st.integers(1, 60),
)
def test_a_sovereign_job_never_gets_a_slice_outside_its_allowed_regions(
    regions: list[str], completions: int
) -> None:
    members = [cluster(f"m{i}", region) for i, region in enumerate(regions)]
    fed = spec(
        [*members, cluster("home", "eu")],
        [{"name": "records", "cluster": "home", "size_gb": 10, "allowed_regions": ["eu"]}],
    )
    snapshots = {
        c["name"]: snapshot(c["name"], room_nodes(c["name"], 25)) for c in [*members, {"name": "home"}]
    }
    pod = request({"cpu": "1", "memory": "1Gi"}, datasets=["records"])
    decision = FederationEngine(fed).decide(pod, snapshots, now=NOW)

    division = divide_placement(decision, pod, fed, snapshots, completions)

    region_of = {c.name: c.region for c in fed.clusters}
    assert division.slices
    assert all(region_of[p.cluster] == "eu" for p in division.slices)
    for name, region in region_of.items():
        if region != "eu":
            assert division.reasons[name].startswith("excluded: Sovereignty: ")


def test_without_overflow_the_indices_beyond_every_members_room_wait_and_rebalance_deals_them_later() -> None:
    division = divide(100, [share("a", 3, 10), share("b", 1, 10)], overflow=False)
    assert sizes(division) == {"a": 10, "b": 10}
    assert division.waiting == tuple(range(20, 100))

    later = rebalance(
        division,
        succeeded=range(20),
        may_be_running=(),
        rejected_cluster=None,
        shares=[share("b", 1, 30)],
        overflow=False,
    )
    assert [(p.cluster, p.ranges) for p in later.moved] == [("b", "20-49")]
    assert later.division.waiting == tuple(range(50, 100))
    assert later.division.slice_of("a").indices == tuple(range(10))  # type: ignore[union-attr]


# Index ranges (a slice's FEDSCHED_INDICES, a Job's completedIndexes) ------------------------------------
@given(st.sets(st.integers(min_value=0, max_value=300), min_size=1, max_size=60))
def test_parse_ranges_reads_back_what_a_slice_writes(indices: set[int]) -> None:
    piece = IndexSlice(cluster="a", indices=tuple(sorted(indices)), parallelism=1)
    assert parse_ranges(piece.ranges, "indices") == piece.indices


@pytest.mark.parametrize(
    ("text", "culprit"),
    [
        ("1-", "not an index"),
        ("a", "not an index"),
        ("5-3", "empty"),
        ("0-100000", "beyond 99999"),
        ("9" * 5000, "not an index"),
        ("-1", "not an index"),
    ],
)
def test_parse_ranges_refuses_what_is_not_ranges_naming_the_field(text: str, culprit: str) -> None:
    with pytest.raises(SpecError, match=f"^status.completedIndexes: .*{culprit}"):
        parse_ranges(text, "status.completedIndexes")
    assert parse_ranges("", "x") == ()


# What a slice costs ---------------------------------------------------------------------------------------
def test_a_slice_costs_its_pods_compute_and_its_share_of_the_data_it_moves() -> None:
    from airflow_provider_fedsched.federation.costs import estimate, slice_estimate

    fed = spec(
        [
            cluster("home"),
            cluster("away", prices={"cpu_hour": 0.08, "memory_gib_hour": 0.0, "egress_gb": 0.1}),
        ],
        [{"name": "shards", "cluster": "home", "size_gb": 40}],
    )
    pod = request({"cpu": "1"}, datasets=["shards"], expected_duration_seconds=1800)

    away = slice_estimate(fed, pod, "away", indices=10, completions=40, parallelism=5)
    one = estimate(fed, pod, "away")
    assert away.per_hour == pytest.approx(5 * one.per_hour)  # five pods at a time
    assert away.compute == pytest.approx(10 * one.compute)  # ten pods, each for the expected half hour
    assert (away.egress_gb, away.egress_cost) == pytest.approx((10.0, 10.0 * 0.1))  # a quarter of the 40 GB
    home = slice_estimate(fed, pod, "home", indices=30, completions=40, parallelism=30)
    assert (home.egress_gb, home.egress_cost) == (0.0, 0.0)  # the data is where the slice runs
    for bad in ({"indices": 41}, {"indices": -1}, {"completions": 0}, {"parallelism": -1}):
        args: dict[str, Any] = {"indices": 10, "completions": 40, "parallelism": 5, **bad}
        with pytest.raises(ValueError, match="a slice of"):
            slice_estimate(fed, pod, "away", **args)
