"""Hostile input to ``fedsched replay``: its files and options are bounded like the YAML inputs (exit 2, one
line naming the option, file, row and column; no traceback; under 2 s and bounded memory)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from airflow_provider_fedsched.replay import workload
from tests.hostile.harness import check, cli_outcome, run_bounded
from tests.replay.fixture import write_trace


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return write_trace(tmp_path_factory.mktemp("trace"), pods=20)


def _replay(nodes: Path | str, pods: Path | str, *options: str) -> list[str]:
    return ["replay", "--nodes", str(nodes), "--pods", str(pods), "--no-progress", "--json", *options]


# (id, options, the culprit the message must name)
OPTION_CASES = [
    ("--window nan", ["--window", "nan"], "--window: nan"),
    ("--window inf", ["--window", "inf"], "--window: inf"),
    ("--window 1e308", ["--window", "1e308"], "--window: 1e+308"),
    ("--window -1", ["--window", "-1"], "--window: -1.0"),
    ("--max-run nan", ["--max-run", "nan"], "--max-run: nan"),
    ("--max-run 0", ["--max-run", "0"], "--max-run: 0.0"),
    ("--staleness nan", ["--staleness", "nan"], "--staleness: nan"),
    ("--staleness 4,000 digits", ["--staleness", "9" * 4000], "--staleness: inf"),
    ("--copies 1000000000", ["--copies", "1000000000"], "--copies: must be 1..1,000"),
    ("--copies -1", ["--copies", "-1"], "--copies: must be 1..1,000"),
    ("--clusters 1000000", ["--clusters", "1000000"], "--clusters: must be 1..1,000"),
    ("--clusters 4,000 digits", ["--clusters", "9" * 4000], "--clusters: must be 1..1,000"),
    ("--clusters 5,000 digits", ["--clusters", "9" * 5000], "--clusters"),
    ("--seed 10**30", ["--seed", str(10**30)], "--seed: must fit 64 bits"),
    ("--plot /dev/null", ["--plot", "/dev/null"], "--plot /dev/null: the file name must end in .png"),
    ("--plot a device named .png", ["--plot", "/dev/null/x.png"], "--plot /dev/null/x.png"),
    ("--plot a folder", ["--plot", "/tmp"], "--plot /tmp"),
    ("--plot a missing folder", ["--plot", "/nonexistent/x.png"], "its folder does not exist"),
]


@pytest.mark.parametrize(
    ("options", "culprit"), [c[1:] for c in OPTION_CASES], ids=[c[0] for c in OPTION_CASES]
)
def test_bad_options(trace: tuple[Path, Path], options: list[str], culprit: str) -> None:
    nodes, pods = trace
    outcome = run_bounded(lambda: cli_outcome(_replay(nodes, pods, *options)))
    check(*outcome, "exit", 2, culprit)
    assert outcome[0].message.count("\n") <= 1 or outcome[0].message.startswith("usage:")


def test_plot_to_a_folder_named_png_or_a_fifo(trace: tuple[Path, Path], tmp_path: Path) -> None:
    nodes, pods = trace
    folder = tmp_path / "out.png"
    folder.mkdir()
    fifo = tmp_path / "fifo.png"
    os.mkfifo(fifo)
    for target in (folder, fifo):
        outcome = run_bounded(lambda target=target: cli_outcome(_replay(nodes, pods, "--plot", str(target))))
        check(*outcome, "exit", 2, f"--plot {target}: exists and is not a regular file")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fifo.png", "out.png"]  # nothing written beside


def _special_files(tmp_path: Path) -> list[tuple[str, str]]:
    fifo = tmp_path / "pods.fifo"
    os.mkfifo(fifo)
    huge = tmp_path / "huge.csv"
    with huge.open("wb") as handle:  # sparse: the size is checked before anything is read
        handle.truncate(workload.MAX_CSV_BYTES + 1)
    return [
        ("/dev/zero", "character device"),
        (str(fifo), "named pipe"),
        (str(tmp_path), "directory"),
        (str(huge), f"more than the {workload.MAX_CSV_BYTES:,} allowed"),
        (str(tmp_path / "missing.csv"), "No such file"),
    ]


def test_special_and_oversized_files_as_pods_or_nodes(trace: tuple[Path, Path], tmp_path: Path) -> None:
    nodes, pods = trace
    for path, problem in _special_files(tmp_path):
        for argv, kind in ((_replay(nodes, path), "pods"), (_replay(path, pods), "nodes")):
            outcome = run_bounded(lambda argv=argv: cli_outcome(argv))
            check(*outcome, "exit", 2, problem)
            assert f"{kind} file" in outcome[0].message and path in outcome[0].message


def _pods_with(trace: tuple[Path, Path], tmp_path: Path, column: str, value: str) -> Path:
    _, pods = trace
    lines = pods.read_text().splitlines()
    header = lines[0].split(",")
    row = lines[3].split(",")
    row[header.index(column)] = value
    lines[3] = ",".join(row)
    broken = tmp_path / "pods.csv"
    broken.write_text("\n".join(lines) + "\n")
    return broken


# (id, column, value, the problem the message must name)
ROW_CASES = [
    ("cpu_milli 1e308", "cpu_milli", "1e308", "cpu_milli: 1e308 is more than 1,000,000,000,000"),
    ("cpu_milli 4,000 digits", "cpu_milli", "9" * 4000, "cpu_milli: '99999999999999999999'... is over 32"),
    ("cpu_milli nan", "cpu_milli", "nan", "cpu_milli: 'nan' is not a whole number"),
    ("cpu_milli inf", "cpu_milli", "inf", "cpu_milli: 'inf' is not a whole number"),
    ("memory_mib -1", "memory_mib", "-1", "memory_mib: -1 is negative"),
    ("creation_time 1e20", "creation_time", "1e20", "creation_time: 1e20 is more than"),
]


@pytest.mark.parametrize(
    ("column", "value", "problem"), [c[1:] for c in ROW_CASES], ids=[c[0] for c in ROW_CASES]
)
def test_bad_numbers_in_a_row_name_file_line_and_column(
    trace: tuple[Path, Path], tmp_path: Path, column: str, value: str, problem: str
) -> None:
    nodes, _ = trace
    broken = _pods_with(trace, tmp_path, column, value)
    outcome = run_bounded(lambda: cli_outcome(_replay(nodes, broken)))
    check(*outcome, "exit", 2, problem)
    assert f"pods file {broken} line 4: {column}:" in outcome[0].message


def test_rows_are_counted_while_reading(
    trace: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    nodes, pods = trace
    monkeypatch.setattr(workload, "MAX_POD_ROWS", 5)
    outcome = run_bounded(lambda: cli_outcome(_replay(nodes, pods)))
    check(*outcome, "exit", 2, f"pods file {pods} line 7: more than the 5 rows allowed")
    monkeypatch.setattr(workload, "MAX_NODE_ROWS", 3)
    outcome = run_bounded(lambda: cli_outcome(_replay(nodes, pods)))
    check(*outcome, "exit", 2, f"nodes file {nodes} line 5: more than the 3 rows allowed")


def test_copies_of_a_long_list_are_bounded(
    trace: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    nodes, pods = trace
    monkeypatch.setattr(workload, "MAX_TASKS", 100)
    outcome = run_bounded(lambda: cli_outcome(_replay(nodes, pods, "--copies", "6")))
    check(*outcome, "exit", 2, "--copies: 6 copies of 20 pods are more than 100 tasks")


def test_a_file_that_is_not_utf8_or_not_csv(trace: tuple[Path, Path], tmp_path: Path) -> None:
    nodes, pods = trace
    binary = tmp_path / "binary.csv"
    binary.write_bytes(pods.read_bytes()[:200] + b"\xff\xfe\x00" * 10)
    outcome = run_bounded(lambda: cli_outcome(_replay(nodes, binary)))
    check(*outcome, "exit", 2, f"pods file {binary}: not UTF-8 text")
    quoted = tmp_path / "quoted.csv"
    quoted.write_text(pods.read_text().splitlines()[0] + '\n"a' + "b" * 200_000 + "\n")
    outcome = run_bounded(lambda: cli_outcome(_replay(nodes, quoted)))
    check(*outcome, "exit", 2, f"pods file {quoted}: not CSV: field larger than field limit")
