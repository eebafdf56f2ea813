"""A replay's table (plain text) and plots (utilization over time, wait-time CDF per policy)."""

from __future__ import annotations

import io
from pathlib import Path

from airflow_provider_fedsched.replay.run import ReplayReport

__all__ = ["plot", "render_table"]


def render_table(report: ReplayReport, width: int = 150) -> str:
    from rich.console import Console
    from rich.table import Table

    console = Console(file=io.StringIO(), width=width, color_system=None, force_terminal=False)
    bound = report.lower_bound_makespan_s
    title = (
        f"{report.workload}: {report.pods} pods on {report.nodes} nodes in {report.clusters} clusters; "
        f"makespan lower bound {bound:,.0f} s"
    )
    table = Table(title=title, title_justify="left")
    for column in (
        "policy",
        "makespan s",
        "x bound",
        "util cpu",
        "util gpu",
        "mean wait s",
        "p95 wait s",
        "cost",
        "egress GB",
        "sovereignty",
        "unplaced",
        "failovers",
    ):
        table.add_column(column, justify="left" if column == "policy" else "right")
    for name, result in report.results.items():
        table.add_row(
            name,
            f"{result.makespan_s:,.0f}",
            f"{result.makespan_s / bound:.3f}" if bound else "-",
            f"{result.utilization['cpu']:.1%}",
            f"{result.utilization['gpu']:.1%}",
            f"{result.mean_wait_s:,.0f}",
            f"{result.p95_wait_s:,.0f}",
            f"{result.cost:,.2f}",
            f"{result.egress_gb:,.0f}",
            str(result.sovereignty_violations),
            str(result.unplaced),
            str(result.failovers),
        )
    console.print(table)
    console.print(
        f"replayed {report.pods * len(report.results):,} pod placements in {report.seconds:.1f} s "
        f"({report.pods_per_second:,.0f} pods/s; {report.cpu_seconds:.1f} s of CPU, "
        f"{report.pods_per_cpu_second:,.0f} pods per CPU second)",
        highlight=False,
    )
    file = console.file
    assert isinstance(file, io.StringIO)
    return file.getvalue()


def plot(report: ReplayReport, path: str | Path) -> None:
    """Two panels: GPU utilization over time (CPU dashed), and the CDF of waits, one line per policy."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (left, right) = plt.subplots(1, 2, figsize=(13, 4.8))
    for name, result in report.results.items():
        if not result.timeline:
            continue
        minutes = [point[0] / 60 for point in result.timeline]
        (line,) = left.plot(minutes, [100 * point[2] for point in result.timeline], label=name, linewidth=1.2)
        left.plot(
            minutes,
            [100 * point[1] for point in result.timeline],
            color=line.get_color(),
            linestyle=":",
            linewidth=0.8,
        )
        waits = sorted(result.waits)
        if waits:
            right.plot(
                [w / 60 for w in waits], [100 * (k + 1) / len(waits) for k in range(len(waits))], label=name
            )
    left.axvline(report.lower_bound_makespan_s / 60, color="black", linestyle="--", linewidth=0.8)
    left.set_xlabel("minutes (dashed: makespan lower bound)")
    left.set_ylabel("utilization % (solid GPU, dotted CPU)")
    left.set_title(f"{report.workload}: utilization over time")
    left.legend(fontsize=7)
    right.set_xlabel("wait from arrival to start, minutes")
    right.set_ylabel("% of tasks")
    right.set_xscale("symlog", linthresh=1.0)
    right.set_title("wait-time CDF")
    right.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(str(path), dpi=110)
    plt.close(figure)
