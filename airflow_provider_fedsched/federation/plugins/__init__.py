"""The plugins of the registry, loaded: one :class:`Profile` per set of enabled plugins.

``filters`` (cluster-wide rules), ``nodefit`` (node-level fit, two points of the filter order) and
``scores``. Which plugins exist, in what order, is :mod:`federation.registry`'s to say.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import cast

from airflow_provider_fedsched.federation.framework import (
    CycleState,
    Explains,
    FilterPlugin,
    Hints,
    Plugin,
    ScorePlugin,
    Skips,
)
from airflow_provider_fedsched.federation.registry import PLUGINS, Registered, weight_key

__all__ = ["Profile", "load", "profile"]


@cache
def load(entry: Registered) -> Plugin:
    """The registered plugin's one instance (plugins keep no state between decisions)."""
    module_name, _, class_name = entry.implementation.partition(":")
    module = importlib.import_module(f"{__name__}.{module_name}")
    plugin = cast(Plugin, getattr(module, class_name)())
    if plugin.name != entry.name:
        raise RuntimeError(f"registry entry {entry.name!r} loads a plugin named {plugin.name!r}")
    return plugin


@dataclass(frozen=True, slots=True)
class Profile:
    """The enabled plugins of one policy, in registry order."""

    filters: tuple[FilterPlugin, ...]
    scores: tuple[tuple[ScorePlugin, str], ...]
    """Each enabled score plugin with its ``policy.weights`` key."""
    tie_break: ScorePlugin | None
    """Between equal scores, the lower raw value of this plugin wins (the registry's tie-breaker)."""
    preparers: tuple[Plugin, ...]
    """The plugins with data to prepare among the enabled ones and the tie-breaker."""
    explainers: Mapping[str, Callable[[CycleState], str | None]]
    """Filter name -> its ``explain_all``, for the filters that have one."""
    skippers: frozenset[str] = frozenset()
    """The filters that may say, after ``prepare``, that a decision gives them nothing to check."""
    hinters: tuple[Hints, ...] = ()
    """The enabled scores that may name a node of the chosen cluster to prefer."""


@cache
def _profile(filters: frozenset[str], scores: frozenset[str]) -> Profile:
    enabled_filters = tuple(
        cast(FilterPlugin, load(e)) for e in PLUGINS if e.point == "filter" and e.name in filters
    )
    enabled_scores = tuple(
        (cast(ScorePlugin, load(e)), weight_key(e.name))
        for e in PLUGINS
        if e.point == "score" and e.name in scores
    )
    tie_break = next((cast(ScorePlugin, load(e)) for e in PLUGINS if e.tie_break), None)
    needed: list[Plugin] = [*enabled_filters, *(plugin for plugin, _ in enabled_scores)]
    if tie_break is not None and tie_break not in needed:
        needed.append(tie_break)
    # Only plugins with data to prepare, each way of preparing once (the node-fit points share theirs):
    # a decision at 10 clusters takes a few hundred microseconds, and this runs for every one.
    preparers: list[Plugin] = []
    seen = {Plugin.prepare}
    for plugin in needed:
        if type(plugin).prepare not in seen:
            seen.add(type(plugin).prepare)
            preparers.append(plugin)
    explainers = {p.name: p.explain_all for p in enabled_filters if isinstance(p, Explains)}
    skippers = frozenset(p.name for p in enabled_filters if isinstance(p, Skips))
    hinters = tuple(plugin for plugin, _ in enabled_scores if isinstance(plugin, Hints))
    return Profile(
        enabled_filters, enabled_scores, tie_break, tuple(preparers), explainers, skippers, hinters
    )


def profile(filters: Sequence[str], scores: Sequence[str]) -> Profile:
    """The profile enabling these filter and score names (validated by the policy already)."""
    return _profile(frozenset(filters), frozenset(scores))
