"""Every plain-text table the provider prints: a decision, the member clusters, plans, where tasks ran.

Plain text (``rich`` with no colour system and no terminal codes), because these tables end up in Airflow
task logs, in files and in pipes as often as on a terminal. ``rich`` is imported on first use: a command
that prints JSON never pays for it.
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol

from airflow_provider_fedsched.federation.resources import CPU, GPU, MEMORY

if TYPE_CHECKING:
    from airflow_provider_fedsched.federation.decision import Decision
    from airflow_provider_fedsched.federation.plan import Plan

__all__ = [
    "audit_table",
    "cost_table",
    "decision_table",
    "placement_summary",
    "plan_table",
    "snapshot_table",
    "tenants_table",
]


def _text(width: int, *renderables: Any) -> str:
    from rich.console import Console

    console = Console(file=io.StringIO(), width=width, color_system=None, force_terminal=False)
    for renderable in renderables:
        if isinstance(renderable, str):
            console.print(renderable, highlight=False, markup=False)
        else:
            console.print(renderable)
    file = console.file
    assert isinstance(file, io.StringIO)
    return file.getvalue()


def decision_table(decision: Decision, width: int = 120) -> str:
    """The outcome, its reason, the ranked candidates with each score term, and every rejection."""
    from rich.table import Table

    title = f"Decision: {decision.outcome.upper()}" + (f" -> {decision.cluster}" if decision.cluster else "")
    parts: list[Any] = [title, decision.reason]
    if decision.candidates:
        plugins = list(decision.candidates[0].breakdown)
        table = Table(title="Candidates (best first)", title_justify="left")
        table.add_column("#", justify="right")
        table.add_column("cluster")
        table.add_column("score", justify="right")
        for plugin in plugins:
            table.add_column(plugin.lower(), justify="right")
        table.add_column("est. cost", justify="right")
        table.add_column("age", justify="right")
        for rank, candidate in enumerate(decision.candidates, start=1):
            terms = candidate.breakdown
            cost = terms.get("Cost")
            age = decision.snapshot_age_seconds.get(candidate.cluster)
            table.add_row(
                str(rank),
                candidate.cluster,
                f"{candidate.score:.1f}",
                *(f"{terms[p].weighted:.1f}" if p in terms else "-" for p in plugins),
                f"{cost.raw:.2f}" if cost else "-",
                f"{age:.0f}s" if age is not None else "-",
            )
        parts.append(table)
    if decision.rejected:
        table = Table(title="Rejected", title_justify="left")
        table.add_column("cluster")
        table.add_column("plugin")
        table.add_column("reason", overflow="fold")
        for rejection in decision.rejected:
            kind = " (never)" if rejection.permanent else ""
            table.add_row(rejection.cluster, rejection.plugin + kind, rejection.reason)
        parts.append(table)
    return _text(width, *parts)


def snapshot_table(rows: Sequence[Mapping[str, Any]], width: int = 160) -> str:
    """Member clusters, one row per :func:`federation.snapshot.summarize` result."""
    from rich.table import Table

    table = Table(title="Member clusters", show_lines=False)
    for column in (
        "cluster",
        "reachable",
        "age",
        "ready nodes",
        "free cpu",
        "free memory",
        "free gpu",
        "largest free node",
    ):
        table.add_column(column)
    for row in rows:
        free = row["free"]
        missing = row.get("missing_permissions") or []
        reachable = "yes" if row["reachable"] else f"no: {row['reason']}"
        if missing:  # deploy/rbac.yaml not all granted there: named with what is lost
            reachable += "".join(f"\nnot granted: {line}" for line in missing)
        table.add_row(
            row["cluster"],
            reachable,
            f"{row['age_seconds']:.1f}s",
            f"{row['ready_nodes']}/{row['nodes']}",
            f"{free.get(CPU, '0')}/{row['total'].get(CPU, '0')}",
            f"{free.get(MEMORY, '0')}/{row['total'].get(MEMORY, '0')}",
            f"{free.get(GPU, '0')}/{row['total'].get(GPU, '0')}",
            row["largest_free_node"],
        )
    return _text(width, table)


class PlannedRun(Protocol):
    """What :func:`plan_table` reads of a planned run (``plans.planner.PlannedRun``)."""

    @property
    def dag_id(self) -> str: ...
    @property
    def task_id(self) -> str: ...
    @property
    def logical_date(self) -> datetime: ...
    @property
    def plan(self) -> Plan | None: ...
    @property
    def note(self) -> str: ...


def _short(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M")


def plan_table(planned: Sequence[PlannedRun], width: int = 140) -> str:
    """Planned runs: primary cluster, fallbacks, forecast idle fraction and until when each plan holds."""
    from rich.table import Table

    table = Table(title=f"Plans for {len(planned)} upcoming task run(s)", title_justify="left")
    for column in ("dag", "task", "logical date", "primary", "fallbacks", "forecast idle", "valid until"):
        table.add_column(column, overflow="fold")
    for run in planned:
        plan = run.plan
        if plan is None:
            table.add_row(
                run.dag_id, run.task_id, _short(run.logical_date), "-", f"no plan: {run.note}", "", ""
            )
            continue
        forecast = ", ".join(
            f"{c} {plan.forecast[c]:.0%}" for c in plan.clusters if plan.forecast and c in plan.forecast
        )
        table.add_row(
            run.dag_id,
            run.task_id,
            _short(run.logical_date),
            plan.primary,
            ", ".join(plan.clusters[1:]) or "-",
            forecast or "none",
            _short(plan.valid_until),
        )
    return _text(width, table)


def placement_summary(records: Sequence[Mapping[str, Any]], width: int = 160) -> str:
    """Where each task ran and why, from placement records (the ``fedsched_placement`` XComs)."""
    from rich.table import Table

    table = Table(title="Where each task ran, and why")
    for column in ("task", "ran on", "attempts", "why"):
        table.add_column(column, overflow="fold")
    for record in records:
        attempts = " -> ".join(f"{a['cluster']} ({a['outcome']})" for a in record["attempts"])
        last = record["attempts"][-1] if record["attempts"] else {}
        why = last.get("decision", "")
        left = [
            f"{a['cluster']}: {a['reason']}"
            for a in record["attempts"]
            if a["outcome"] not in ("succeeded", "running")
        ]
        if left:
            why += "; left " + "; ".join(left)
        if last.get("resumed_from_checkpoint"):
            why += "; resumed from checkpoint"
        table.add_row(record["task_id"], record.get("cluster") or "-", attempts, why)
    return _text(width, table)


def tenants_table(rows: Sequence[Mapping[str, Any]], width: int = 160) -> str:
    """Tenants: quota and use per resource, borrowed, waiting tasks, spend this period (``hook.tenants``)."""
    from rich.table import Table

    table = Table(title="Tenants", show_lines=False)
    for column in ("tenant", "weight", "use / quota", "borrowed", "waiting", "cost this period", "egress GB"):
        table.add_column(column)
    for row in rows:
        names = sorted(set(row["quota"]) | set(row["used"]))
        use = ", ".join(
            f"{name} {row['used'].get(name, '0')}/{row['quota'].get(name, '-')}" for name in names
        )
        budget = f" / {row['max_cost']:g}" if row.get("max_cost") is not None else ""
        table.add_row(
            row["tenant"],
            f"{row['weight']:g}",
            use or "-",
            ", ".join(f"{k} {v}" for k, v in row["borrowed"].items()) or "-",
            str(row["waiting"]),
            f"{row['cost']:.2f}{budget} ({row['period']})",
            f"{row['egress_gb']:g}",
        )
    return _text(width, table)


def cost_table(rows: Sequence[Mapping[str, Any]], by: str, width: int = 120) -> str:
    """The cost report: one row per group (``federation.costs.cost_report``)."""
    from rich.table import Table

    table = Table(title=f"Cost by {by}", show_lines=False)
    for column in (by, "attempts", "failed attempts", "cost", "egress GB"):
        table.add_column(column)
    for row in rows:
        table.add_row(
            str(row[by]),
            str(row["attempts"]),
            str(row["failed_attempts"]),
            f"{row['cost']:.2f}",
            f"{row['egress_gb']:g}",
        )
    return _text(width, table)


def audit_table(report: Mapping[str, Any], width: int = 160) -> str:
    """The sovereignty audit (``federation/audit.py``): one row per cluster a try placed work in, then the
    totals and each member ledger that could not be read."""
    from rich.table import Table
    from rich.text import Text

    header = report["header"]
    table = Table(title=f"Sovereignty audit of federation {header['federation']}", show_lines=False)
    for column in ("#", "verdict", "task", "try", "cluster", "region", "allowed", "seen in", "why"):
        table.add_column(column, overflow="fold")
    for entry in report["entries"]:
        allowed = entry["allowed_regions"]
        table.add_row(
            *(
                Text(str(cell))  # plain text: a region list in brackets is not rich markup
                for cell in (
                    entry["number"],
                    entry["verdict"],
                    f"{entry['dag_id']}.{entry['task_id']} @ {entry['run_id']}"
                    + (f" [{entry['map_index']}]" if entry["map_index"] not in (None, -1) else ""),
                    entry["try_number"] if entry["try_number"] is not None else "?",
                    entry["cluster"] or "?",
                    entry["region"] or "?",
                    ", ".join(allowed) if allowed is not None else "?",
                    "+".join(entry["seen_in"]) or "-",
                    entry["reason"],
                )
            )
        )
    counts = header["verdicts"]
    lines = [
        f"{header['entries']} entries: {counts['compliant']} compliant, {counts['violation']} violation(s), "
        f"{counts['unverifiable']} unverifiable; {header['records']['read']} record(s) read, "
        f"{header['records']['unreadable']} unreadable"
    ]
    lines.extend(
        f"ledger of {cluster} not read: {state}"
        for cluster, state in header["ledgers"].items()
        if state != "read"
    )
    return _text(width, table, *lines)
