"""Data for the Federation page's Tenants view and plots, from the hook's shared state.

Nothing is computed here that the command line computes elsewhere: the tenant rows are
``FederationHook.tenants()`` (what ``fedsched tenants`` prints), the cost rows ``cost_report()`` over
``FederationHook.charges()`` (what ``fedsched cost`` prints), and utilization the history samples each
snapshot leaves (``hooks/sensing.py``), as stored.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from airflow_provider_fedsched.federation._errors import PermanentError
from airflow_provider_fedsched.federation.costs import REPORT_GROUPS, cost_report, report_key

MAX_COST_DAYS = 62
"""How far back the cost plots may look: charges older than this are pruned (``state/tenants.py``)."""
DEFAULT_COST_DAYS = 14


class BadParameter(PermanentError, ValueError):
    """A query parameter the page's API refuses (a 4xx naming it)."""

    def __init__(self, parameter: str, problem: str) -> None:
        super().__init__(f"{parameter}: {problem}")
        self.parameter = parameter


def costs(hook: Any, now: datetime, *, by: str, split: str | None, days: int) -> dict[str, Any]:
    """``cost_report`` of the charges of the last ``days`` days grouped ``by``, and, with ``split``, one
    such report per ``split`` group (cost per day per tenant: ``by=day, split=tenant``)."""
    if by not in REPORT_GROUPS:
        raise BadParameter("by", f"unknown group '{by}' (choose {', '.join(REPORT_GROUPS)})")
    if split is not None and (split not in REPORT_GROUPS or split == by):
        choices = ", ".join(g for g in REPORT_GROUPS if g != by)
        raise BadParameter("split", f"unknown group '{split}' (choose {choices})")
    since = now - timedelta(days=days)
    charges: list[Mapping[str, Any]] = hook.charges(since)
    result: dict[str, Any] = {
        "since": since.isoformat(),
        "by": by,
        "split": split,
        "charges": len(charges),
        "rows": cost_report(charges, by),
    }
    if split is not None:
        groups: dict[str, list[Mapping[str, Any]]] = {}
        for charge in charges:
            groups.setdefault(report_key(charge, split), []).append(charge)
        result["series"] = [{split: name, "rows": cost_report(groups[name], by)} for name in sorted(groups)]
    return result


def utilization(hook: Any, cluster: str | None, limit: int) -> list[dict[str, Any]]:
    """Each member's utilization samples (``{"at", "used_fraction": {resource: 0..1}}``), oldest
    first, the newest ``limit`` of them."""
    names = [member.name for member in hook.spec.clusters]
    if cluster is not None and cluster not in names:
        raise BadParameter("cluster", f"no member cluster '{cluster}' (members: {', '.join(names)})")
    rows = []
    for name in names if cluster is None else [cluster]:
        samples = [
            {"at": s["at"], "used_fraction": dict(s["used_fraction"])}
            for s in hook.history(name, "utilization")
            if isinstance(s.get("at"), str) and isinstance(s.get("used_fraction"), Mapping)
        ]
        rows.append({"cluster": name, "samples": samples[-limit:]})
    return rows


WAIT_BUCKETS: tuple[tuple[str, float], ...] = (
    ("none", 1.0),
    ("1-10 s", 10.0),
    ("10 s-1 min", 60.0),
    ("1-10 min", 600.0),
    ("10 min-1 h", 3600.0),
    ("over 1 h", float("inf")),
)
"""Wait-time buckets (label, upper bound in seconds, exclusive): "none" is a try placed at once."""
NO_TENANT = "(no tenant)"


def waits(hook: Any, now: datetime, days: int) -> dict[str, Any]:
    """How long tries waited for their first placement, counted per bucket and tenant, over the ``wait``
    samples of the last ``days`` days (each member keeps its newest ones, ``state.HISTORY_LIMIT``)."""
    since = now - timedelta(days=days)
    counts: dict[str, dict[str, int]] = {}
    samples = 0
    for member in hook.spec.clusters:
        for sample in hook.history(member.name, "wait"):
            try:
                at = datetime.fromisoformat(str(sample["at"]))
                seconds = float(sample["seconds"])
            except (KeyError, TypeError, ValueError):
                continue  # not a sample this release wrote
            if at < since or seconds != seconds:
                continue
            label = next(name for name, bound in WAIT_BUCKETS if seconds < bound)
            tenant = str(sample.get("tenant") or "") or NO_TENANT
            per_tenant = counts.setdefault(tenant, {})
            per_tenant[label] = per_tenant.get(label, 0) + 1
            samples += 1
    return {
        "since": since.isoformat(),
        "samples": samples,
        "buckets": [name for name, _ in WAIT_BUCKETS],
        "series": [{"tenant": name, "counts": counts[name]} for name in sorted(counts)],
    }
