"""The provider's metrics, through Airflow's own (``[metrics]``: StatsD, Datadog or OpenTelemetry, as the
deployment configures them; nothing is sent when none is on).

Plain StatsD has no tags, so the dimension that matters is part of the name; the same values go as tags
for backends that take them. Every name is listed in ``docs/tenants.md`` ("Metrics"). A metric never fails
the work: an emitting error is logged and dropped.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow_provider_fedsched.federation.decision import Decision

log = logging.getLogger(__name__)

PREFIX = "fedsched"
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


def _part(value: str) -> str:
    """A name part StatsD accepts (cluster and tenant names are already safe; anything else is made so)."""
    return _UNSAFE.sub("_", value) or "none"


def _emit(kind: str, name: str, value: float, tags: Mapping[str, Any] | None = None) -> None:
    try:
        from airflow.sdk.observability import stats

        stat = f"{PREFIX}.{name}"
        if kind == "incr":
            stats.incr(stat, count=int(value), tags=dict(tags or {}))
        elif kind == "timing":
            stats.timing(stat, value, tags=dict(tags or {}))
        else:
            stats.gauge(stat, value, tags=dict(tags or {}))
    except Exception as exc:  # metrics are never the reason a task fails
        log.debug("metric %s not emitted: %s", name, exc)


def decision(made: Decision, seconds: float) -> None:
    """``fedsched.decisions.<outcome>``, ``fedsched.decision_latency`` (ms), ``fedsched.waits.<plugin>``
    (the plugin that rejected the most clusters) on a wait."""
    _emit("incr", f"decisions.{made.outcome}", 1, {"outcome": made.outcome})
    _emit("timing", "decision_latency", seconds * 1000.0, {"outcome": made.outcome})
    if made.outcome == "wait" and made.rejected:
        counts: dict[str, int] = {}
        for rejection in made.rejected:
            counts[rejection.plugin] = counts.get(rejection.plugin, 0) + 1
        plugin = min(counts, key=lambda name: (-counts[name], name))
        _emit("incr", f"waits.{_part(plugin)}", 1, {"plugin": plugin})


def failover(kind: str, cluster: str) -> None:
    """``fedsched.failovers.<kind>``: a cluster could not run a pod (insufficient, evicted, ...)."""
    _emit("incr", f"failovers.{_part(kind)}", 1, {"reason": kind, "cluster": cluster})


def cooldown(cluster: str) -> None:
    """``fedsched.cooldowns.<cluster>``: the cluster takes no new work for the policy's cooldown."""
    _emit("incr", f"cooldowns.{_part(cluster)}", 1, {"cluster": cluster})


def attempt_cost(cost: float, egress_gb: float, cluster: str, tenant: str | None) -> None:
    """``fedsched.attempt_cost`` and ``fedsched.attempt_egress_gb``: one ended cluster attempt's estimated
    cost and the data it moved (gauges: the last attempt's value; sum them over time for spend)."""
    tags = {"cluster": cluster, "tenant": tenant or "none"}
    _emit("gauge", "attempt_cost", cost, tags)
    _emit("gauge", "attempt_egress_gb", egress_gb, tags)
    if tenant is not None:
        _emit("gauge", f"tenant_cost.{_part(tenant)}", cost, tags)


def reclaimed(pods: int, cluster: str, tenant: str) -> None:
    """``fedsched.reclaims.<tenant>``: borrowing pods evicted so that a waiting task of ``tenant`` fits."""
    _emit("incr", f"reclaims.{_part(tenant)}", pods, {"cluster": cluster, "tenant": tenant})
