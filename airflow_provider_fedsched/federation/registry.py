"""The plugin registry: the only list of plugin names, their order, which filters are mandatory and the
default score weights.

Adding a plugin is one file in ``federation/plugins/`` and one line here. Filters run in the order listed,
hard rules first, so that a cluster's first rejection is its most decisive one and "impossible" can be told
from "wait". A policy (``policy.filters`` / ``policy.scores``) enables a subset; the mandatory filters
cannot be left out, so no policy can place a task where it must not run. A score's weight is set under
its name in lower case (``policy.weights.cost``).

This module is plain data, at the bottom of the package (the spec validates policies against it); the
implementations are named as ``module:Class`` under ``federation.plugins`` and loaded by
:mod:`federation.plugins`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = [
    "FILTER_PLUGINS",
    "MANDATORY_FILTERS",
    "PLUGINS",
    "SCORE_PLUGINS",
    "Registered",
    "default_weights",
    "weight_key",
]


@dataclass(frozen=True, slots=True)
class Registered:
    name: str
    """What policies list, what rejections and score breakdowns are labelled with."""
    point: Literal["filter", "score"]
    implementation: str
    """``module:Class`` under ``airflow_provider_fedsched.federation.plugins``."""
    mandatory: bool = False
    """Filters only: a policy may not disable it."""
    weight: float = 0.0
    """Scores only: the default weight."""
    tie_break: bool = False
    """Scores only: between equal scores, the lower raw value wins (computed even when disabled)."""


PLUGINS: tuple[Registered, ...] = (
    # Hard rules: a rejection here means the cluster could never take the task.
    Registered("ClusterSubset", "filter", "filters:ClusterSubset", mandatory=True),
    Registered("Sovereignty", "filter", "filters:Sovereignty", mandatory=True),
    Registered("ClusterTaints", "filter", "filters:ClusterTaints", mandatory=True),
    Registered("ClusterLabels", "filter", "filters:ClusterLabels"),
    Registered("Capacity", "filter", "nodefit:Capacity", mandatory=True),
    Registered("GangCapacity", "filter", "gang:GangCapacity", mandatory=True),
    # Tenant rules (plugins/tenancy.py): after the hard rules, so they only ever reject.
    Registered("Budget", "filter", "tenancy:Budget", mandatory=True),
    Registered("TenantQuota", "filter", "tenancy:TenantQuota", mandatory=True),
    # "Not now" rules.
    Registered("Excluded", "filter", "filters:Excluded", mandatory=True),
    Registered("Reachable", "filter", "filters:Reachable", mandatory=True),
    Registered("Freshness", "filter", "filters:Freshness"),
    Registered("Cooldown", "filter", "filters:Cooldown"),
    Registered("Quota", "filter", "filters:Quota"),
    Registered("NodeFit", "filter", "nodefit:NodeFit", mandatory=True),
    Registered("GangFit", "filter", "gang:GangFit", mandatory=True),
    Registered("FairShare", "filter", "tenancy:FairShare", mandatory=True),
    # Scores.
    Registered("Cost", "score", "scores:Cost", weight=1.5, tie_break=True),
    Registered("Locality", "score", "scores:Locality", weight=1.0),
    Registered("Proximity", "score", "scores:Proximity", weight=0.5),
    Registered("Headroom", "score", "scores:Headroom", weight=0.5),
    Registered("Forecast", "score", "scores:Forecast", weight=0.2),
    Registered("Fragmentation", "score", "fragmentation:Fragmentation", weight=2.0),
)

FILTER_PLUGINS: tuple[str, ...] = tuple(p.name for p in PLUGINS if p.point == "filter")
MANDATORY_FILTERS: frozenset[str] = frozenset(p.name for p in PLUGINS if p.point == "filter" and p.mandatory)
SCORE_PLUGINS: tuple[str, ...] = tuple(p.name for p in PLUGINS if p.point == "score")


def weight_key(score: str) -> str:
    """The ``policy.weights`` key of a score plugin: its name in lower case."""
    return score.lower()


def default_weights() -> dict[str, float]:
    return {weight_key(p.name): p.weight for p in PLUGINS if p.point == "score"}
