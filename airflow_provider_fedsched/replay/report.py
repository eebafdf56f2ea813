"""A replay's tables (plain text) and plots: utilization over time and the wait-time CDF per policy
(makespan), GPU allocation against load per policy (fragmentation protocol)."""

from __future__ import annotations

import io
from pathlib import Path

from airflow_provider_fedsched.replay.fragmentation_run import FragmentationReport
from airflow_provider_fedsched.replay.run import ReplayReport

__all__ = ["plot", "plot_fragmentation", "render_fragmentation", "render_table"]


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


def render_fragmentation(report: FragmentationReport, width: int = 220) -> str:
    """Allocation and fragmentation per policy at every 10 % of load (mean, and the standard deviation
    over the seeds), then what the run cost."""
    from rich.console import Console
    from rich.table import Table

    console = Console(file=io.StringIO(), width=width, color_system=None, force_terminal=False)
    loads = report.loads
    members = "one cluster" if report.clusters == 1 else f"{report.clusters} clusters"
    seeds = (
        f"seeds {report.seeds[0]}-{report.seeds[-1]}" if len(report.seeds) > 1 else f"seed {report.seeds[0]}"
    )
    title = (
        f"{report.workload} on {report.nodes:,} nodes ({report.gpus:,} GPUs) in {members}, {seeds}: "
        "GPU allocation % by arrived load (mean ± std)"
    )
    for what, title_text in (
        ("allocation", title),
        ("fragmentation", "fragmentation ratio % of the free GPUs by arrived load (mean)"),
    ):
        table = Table(title=title_text, title_justify="left")
        table.add_column("policy")
        for load in loads:
            table.add_column(f"{load} %", justify="right")
        if what == "allocation":
            table.add_column("sovereignty", justify="right")
        for name, summary in report.policies.items():
            if what == "allocation":
                cells = [
                    f"{100 * summary.allocation[load]:.2f}±{100 * summary.std[load]:.2f}"
                    if load in summary.allocation
                    else "-"
                    for load in loads
                ]
                cells.append(str(summary.sovereignty_violations))
            else:
                cells = [
                    f"{100 * summary.fragmentation[load]:.1f}" if load in summary.fragmentation else "-"
                    for load in loads
                ]
            table.add_row(name, *cells)
        console.print(table)
    cpu = ", ".join(f"{name} {summary.seconds:.1f}" for name, summary in report.policies.items())
    console.print(
        f"{report.seconds:.1f} s of wall time; CPU s per policy over the seeds: {cpu}", highlight=False
    )
    return console.file.getvalue()  # type: ignore[attr-defined,no-any-return]


def plot_fragmentation(report: FragmentationReport, path: str | Path) -> None:
    """GPU allocation against arrived load, one line per policy (mean over the seeds), with y = x for
    reference (everything that arrived allocated)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(8, 5.2))
    top = max(report.loads)
    axes.plot([0, 100], [0, 100], color="grey", linestyle=":", linewidth=0.8)
    for name, summary in report.policies.items():
        loads = sorted(summary.curve)
        axes.plot(loads, [100 * summary.curve[load] for load in loads], label=name, linewidth=1.2)
    members = "one cluster" if report.clusters == 1 else f"{report.clusters} clusters"
    axes.set_xlim(0, top)
    axes.set_xlabel("arrived GPU request, % of the GPU capacity")
    axes.set_ylabel("GPUs allocated, %")
    axes.set_title(f"{report.workload}, {members}, {len(report.seeds)} seed(s)")
    axes.legend(fontsize=8, loc="lower right")
    axes.grid(alpha=0.3)
    inset = axes.inset_axes((0.08, 0.5, 0.38, 0.42))
    for summary in report.policies.values():
        loads = [load for load in sorted(summary.curve) if load >= 90]
        inset.plot(loads, [100 * summary.curve[load] for load in loads], linewidth=1.0)
    inset.set_title("90 % and up", fontsize=8)
    inset.tick_params(labelsize=7)
    inset.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(str(path), dpi=110)
    plt.close(figure)
