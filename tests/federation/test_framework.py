"""The plugin framework: the registry is the one list, status codes decide "wait" versus "impossible",
and each plugin's data stays under its own key."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import pytest

from airflow_provider_fedsched.federation import FederationEngine, PolicySpec, SpecError
from airflow_provider_fedsched.federation import engine as engine_module
from airflow_provider_fedsched.federation.framework import (
    ClusterView,
    Code,
    CycleState,
    DataKey,
    FilterPlugin,
    Status,
    error,
    unresolvable,
    unschedulable,
)
from airflow_provider_fedsched.federation.plugins import load, profile
from airflow_provider_fedsched.federation.registry import (
    FILTER_PLUGINS,
    MANDATORY_FILTERS,
    PLUGINS,
    SCORE_PLUGINS,
    default_weights,
    weight_key,
)
from tests.federation.helpers import NOW, cluster, node, request, snapshot, spec


def test_every_registered_plugin_loads_under_its_name_and_implements_its_point() -> None:
    for entry in PLUGINS:
        plugin = load(entry)
        assert plugin.name == entry.name
        if entry.point == "filter":
            assert callable(getattr(plugin, "filter", None)), entry.name
        else:
            assert callable(getattr(plugin, "score", None)) and callable(getattr(plugin, "normalize", None))
    assert len({entry.name for entry in PLUGINS}) == len(PLUGINS)
    assert [e for e in PLUGINS if e.tie_break] == [next(e for e in PLUGINS if e.name == "Cost")]


def test_the_policy_defaults_and_checks_come_from_the_registry() -> None:
    policy = PolicySpec()
    assert tuple(policy.filters) == FILTER_PLUGINS and tuple(policy.scores) == SCORE_PLUGINS
    assert policy.weights.model_dump() == default_weights()
    assert {weight_key(name) for name in SCORE_PLUGINS} == set(default_weights())
    for mandatory in MANDATORY_FILTERS:
        with pytest.raises(SpecError, match="mandatory"):
            policy.merged({"filters": [name for name in FILTER_PLUGINS if name != mandatory]})
    optional = sorted(set(FILTER_PLUGINS) - MANDATORY_FILTERS)
    assert optional == ["ClusterLabels", "Cooldown", "Freshness", "Quota"]


def test_a_profile_keeps_the_registry_order_whatever_the_policy_order() -> None:
    enabled = profile(list(reversed(FILTER_PLUGINS)), ["Headroom", "Cost"])
    assert [p.name for p in enabled.filters] == list(FILTER_PLUGINS)
    assert [p.name for p, _ in enabled.scores] == ["Cost", "Headroom"]
    assert enabled.tie_break is not None and enabled.tie_break.name == "Cost"
    # The tie-breaker prepares its data even when its score is disabled.
    without_cost = profile(FILTER_PLUGINS, ["Headroom"])
    assert "Cost" in {p.name for p in without_cost.preparers}
    assert "Headroom" not in {p.name for p in without_cost.preparers}  # nothing to prepare


def test_rejections_are_named_and_never_empty() -> None:
    assert unschedulable("busy") == Status(Code.UNSCHEDULABLE, "busy")
    assert unresolvable("never").code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert error("bad data").code is Code.ERROR


class _Broken(FilterPlugin):
    """A plugin that cannot judge one cluster and gives no reason for another."""

    name: ClassVar[str] = "Broken"
    seen = DataKey[list[str]]("Broken")

    def prepare(self, state: CycleState) -> None:
        self.seen.put(state, [])

    def filter(self, state: CycleState, cluster: ClusterView) -> Status:
        self.seen.get(state).append(cluster.spec.name)
        if cluster.spec.name == "a":
            return error("index disagrees with the snapshot")
        if cluster.spec.name == "b":
            return Status(Code.UNSCHEDULABLE)
        return Status(Code.SUCCESS)


def test_error_and_reasonless_statuses_reject_not_for_good(monkeypatch: pytest.MonkeyPatch) -> None:
    real = profile(FILTER_PLUGINS, SCORE_PLUGINS)
    broken = _Broken()
    patched = dataclasses.replace(real, filters=(*real.filters, broken), preparers=(*real.preparers, broken))
    monkeypatch.setattr(engine_module, "profile", lambda filters, scores: patched)
    fed = spec([cluster("a"), cluster("b"), cluster("c")])
    decision = FederationEngine(fed).decide(request(), {n: snapshot(n, [node("n")]) for n in "abc"}, now=NOW)
    assert decision.cluster == "c"
    rejected = {r.cluster: r for r in decision.rejected}
    assert (rejected["a"].reason, rejected["a"].permanent) == ("index disagrees with the snapshot", False)
    assert rejected["b"].reason == "rejected by Broken (no reason given)"
    only_a = FederationEngine(spec([cluster("a")])).decide(
        request(), {"a": snapshot("a", [node("n")])}, now=NOW
    )
    assert only_a.outcome == "wait"  # an Error is not a "never"
