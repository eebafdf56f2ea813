"""The Alibaba GPU trace, read where it is kept (``shared/traces`` beside the checkout; never copied)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from airflow_provider_fedsched.replay import Settings, replay
from airflow_provider_fedsched.replay.topology import build_federation
from airflow_provider_fedsched.replay.workload import TraceShaping, read_nodes, read_pods, shape_trace


def _origin_checkout() -> Path | None:
    """The local repository this checkout was cloned from (``git clone . /tmp/c``), if any."""
    try:
        url = subprocess.run(
            ["git", "config", "--get", "remote.origin.url"],
            cwd=Path(__file__).parent,
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    path = Path(url.removeprefix("file://"))
    return path.resolve() if url and path.is_absolute() and path.is_dir() else None


def trace_folder() -> Path:
    """``$FEDSCHED_TRACES``, else the first ``shared/traces`` beside the checkout or a parent of it, or
    beside the local repository a fresh clone was made from."""
    if os.environ.get("FEDSCHED_TRACES"):
        return Path(os.environ["FEDSCHED_TRACES"]) / "alibaba-gpu-v2023"
    roots = [Path(__file__).resolve()]
    origin = _origin_checkout()
    if origin is not None:
        roots.append(origin / "tests")
    for root in roots:
        for parent in root.parents:
            candidate = parent / "shared" / "traces" / "alibaba-gpu-v2023"
            if candidate.is_dir():
                return candidate
    pytest.fail("the Alibaba trace is not in shared/traces beside the checkout (or set FEDSCHED_TRACES)")


def test_every_pod_list_of_the_trace_is_read() -> None:
    folder = trace_folder()
    nodes = read_nodes(folder / "openb_node_list_all_node.csv")
    assert len(nodes) == 1523
    assert sum(node.gpus for node in nodes) == 6212
    default = read_pods(folder / "openb_pod_list_default.csv")
    assert len(default) == 8152
    assert [task.arrival for task in default] == sorted(task.arrival for task in default)
    assert sum(task.online for task in default) == 4647
    specs = read_pods(folder / "openb_pod_list_gpuspec33.csv")
    assert {"V100M16|V100M32", "T4"} <= {task.gpu_spec for task in specs}
    untimed = read_pods(folder / "openb_pod_list_multigpu20.csv")
    shaped = shape_trace(untimed, TraceShaping(), seed=0)
    assert all(task.run >= 1 for task in shaped)


def test_a_slice_of_the_trace_through_fedsched_and_home() -> None:
    folder = trace_folder()
    tasks = read_pods(folder / "openb_pod_list_gpuspec33.csv")[:800]
    federation = build_federation(
        read_nodes(folder / "openb_node_list_all_node.csv"),
        shape_trace(tasks, TraceShaping(window=600), seed=0),
        clusters=4,
        seed=0,
    )
    report = replay(federation, ["home", "fedsched"], Settings(), "slice")
    fedsched = report.results["fedsched"]
    assert fedsched.sovereignty_violations == 0 and fedsched.unplaced == 0
    assert fedsched.makespan_s >= report.lower_bound_makespan_s
    assert fedsched.makespan_s <= report.results["home"].makespan_s
