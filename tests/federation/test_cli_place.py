"""``fedsched place`` through the real entry point: exit codes, JSON, and errors without tracebacks."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_fedsched import cli
from airflow_provider_fedsched.cli._common import parse_duration

EXAMPLES = Path(__file__).resolve().parents[2] / "example_dags"
BASE = [
    "place",
    "--federation",
    str(EXAMPLES / "federation.yaml"),
    "--snapshots",
    str(EXAMPLES / "snapshots.yaml"),
]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    try:
        code = cli.main([*BASE, *argv])
    except SystemExit as exc:  # argparse usage errors
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, out, err


def test_places_a_cpu_task_next_to_its_data_and_prints_a_table(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--cpu", "4", "--memory", "8Gi", "--dataset", "user-events")
    assert code == cli.EXIT_OK
    assert "Decision: PLACED -> east-cpu" in out
    assert "west-general" in out and "Sovereignty" in out
    assert "\x1b[" not in out


def test_json_output_has_the_documented_keys(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        capsys, "--gpu", "1", "--cpu", "2", "--toleration", "nvidia.com/gpu=present:NoSchedule", "--json"
    )
    assert code == cli.EXIT_OK
    data = json.loads(out)
    assert {"outcome", "cluster", "candidates", "rejected", "reason"} <= set(data)
    assert data["cluster"] == "north-gpu"
    assert {r["cluster"]: r["plugin"] for r in data["rejected"]} == {
        "east-cpu": "Capacity",
        "west-general": "Capacity",
    }


def test_gpu_without_toleration_is_impossible(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--gpu", "1", "--json")
    assert code == cli.EXIT_NOT_PLACED
    data = json.loads(out)
    assert data["outcome"] == "impossible" and data["cluster"] is None
    north = next(r for r in data["rejected"] if r["cluster"] == "north-gpu")
    assert "untolerated taint {nvidia.com/gpu: present}" in north["reason"]


def test_conflicting_sovereignty_is_impossible_and_a_cooldown_is_no_reason_to_wait(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = run(capsys, "--dataset", "user-events", "--dataset", "eu-customers", "--json")
    assert code == cli.EXIT_NOT_PLACED and json.loads(out)["outcome"] == "impossible"
    code, out, _ = run(capsys, "--json")
    best = json.loads(out)["cluster"]
    # As a task decides (the placement cycle): every compliant cluster with room cooling down, the best
    # of them is chosen and the reason says so; a cooldown on it alone sends the task elsewhere.
    code, out, _ = run(
        capsys, "--cooldown", "east-cpu", "--cooldown", "north-gpu", "--cooldown", "west-general", "--json"
    )
    decision = json.loads(out)
    assert code == cli.EXIT_OK and decision["cluster"] == best
    assert "is cooling down, but every compliant cluster with room is" in decision["reason"]
    code, out, _ = run(capsys, "--cooldown", best, "--json")
    decision = json.loads(out)
    assert code == cli.EXIT_OK and decision["cluster"] != best
    assert {(r["cluster"], r["plugin"]) for r in decision["rejected"]} >= {(best, "Cooldown")}


def test_now_defaults_to_the_newest_observation_and_can_make_snapshots_stale(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = run(capsys, "--json")
    assert code == cli.EXIT_OK
    assert max(json.loads(out)["snapshot_age_seconds"].values()) <= 15
    code, out, _ = run(capsys, "--now", "2025-06-01T09:00:00Z", "--json")
    assert code == cli.EXIT_NOT_PLACED
    assert {r["plugin"] for r in json.loads(out)["rejected"]} == {"Freshness"}


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--dataset", "nope"], "request.datasets[0]: unknown dataset 'nope'"),
        (["--cpu", "-4"], "request.resources.cpu: '-4' is negative"),
        (["--memory", "8GB"], "request.resources.memory:"),
        (["--resource", "example.com/fpga"], "--resource: 'example.com/fpga' is not of the form key=value"),
        (["--toleration", "k=v:Sometimes"], "--toleration: 'k=v:Sometimes' is not a valid toleration"),
        (
            ["--toleration", "=v:NoSchedule"],
            "valid toleration (key=value:Effect with Effect in NoSchedule, "
            "PreferNoSchedule, NoExecute): operator: an empty key requires operator 'Exists'",
        ),
        (["--duration", "forever"], "--duration: 'forever' is not a duration"),
        (["--now", "tomorrow"], "--now: 'tomorrow' is not an ISO 8601 timestamp"),
        (["--cooldown", "mars"], "--cooldown: unknown cluster 'mars'"),
        (["--cluster", "mars"], "request.clusters[0]: unknown cluster 'mars'"),
        (["--weight", "cost=-1"], "--weight: policy.weights.cost:"),
        (["--weight", "cost=nan"], "--weight: policy.weights.cost:"),
        (["--forecast", "east-cpu=high"], "--forecast: 'high' for east-cpu is not a number"),
        (["--forecast", "mars=0.5"], "--forecast: unknown cluster 'mars' (known: east-cpu, north-gpu,"),
        (["--prefer-region", "mars-1"], "request.prefer_region: unknown region 'mars-1' (known: "),
        (["--prefer-group", "mars"], "request.prefer_group: unknown group 'mars' (known: "),
        (["--weight", "speed=1"], "--weight: policy.weights.speed: Extra inputs are not permitted"),
    ],
)
def test_bad_arguments_exit_2_naming_the_field(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    code, _, err = run(capsys, *argv)
    assert code == cli.EXIT_BAD_INPUT
    assert message in err


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_bad_files_exit_2_naming_the_file_and_field(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    snapshots = str(EXAMPLES / "snapshots.yaml")
    federation = (EXAMPLES / "federation.yaml").read_text()
    cases: list[tuple[list[str], str]] = [
        (
            ["--federation", str(tmp_path / "missing.yaml"), "--snapshots", snapshots],
            "cannot read federation spec",
        ),
        (
            ["--federation", write(tmp_path, "bad.yaml", "clusters: [\n"), "--snapshots", snapshots],
            "malformed YAML",
        ),
        (
            [
                "--federation",
                write(tmp_path, "dup.yaml", federation.replace("name: west-general", "name: east-cpu")),
                "--snapshots",
                snapshots,
            ],
            "clusters[2].name: duplicate cluster name 'east-cpu'",
        ),
        (
            [
                "--federation",
                write(tmp_path, "region.yaml", federation.replace("[eu-west-1]", "[eu-west-9]")),
                "--snapshots",
                snapshots,
            ],
            "datasets[1].allowed_regions[0]: unknown region 'eu-west-9'",
        ),
        (
            [
                "--federation",
                write(
                    tmp_path,
                    "effect.yaml",
                    federation.replace('    labels: {gpu: "true"}', "    taints: [{key: a, effect: Never}]"),
                ),
                "--snapshots",
                snapshots,
            ],
            "clusters[1].taints[0].effect:",
        ),
        (
            [
                "--federation",
                str(EXAMPLES / "federation.yaml"),
                "--snapshots",
                write(
                    tmp_path,
                    "snap.yaml",
                    (EXAMPLES / "snapshots.yaml").read_text().replace("memory: 32Gi", "memory: 32GiB", 1),
                ),
            ],
            "clusters[0].nodes[0].allocatable.memory:",
        ),
    ]
    for files, message in cases:
        try:
            code = cli.main(["place", *files])
        except SystemExit as exc:
            code = int(exc.code or 0)
        out, err = capsys.readouterr()
        assert code == cli.EXIT_BAD_INPUT, (files, out, err)
        assert message in err and "Traceback" not in err
        assert err.startswith("fedsched place: error: --")


def test_missing_required_option_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["place", "--federation", "x.yaml"]) == 2
    assert "give either --snapshots SNAP.yaml or --live" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("text", "seconds"), [("3600", 3600), ("90m", 5400), ("1h30m", 5400), ("2d", 172800), ("45s", 45)]
)
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


def test_parser_registers_a_handler() -> None:
    from airflow_provider_fedsched.cli import place

    parser = argparse.ArgumentParser()
    subparsers = parser.add_subparsers()
    place.add_parser(subparsers)
    args: Any = parser.parse_args(["place", "--federation", "f", "--snapshots", "s"])
    assert args.handler is place.run_place


def test_place_imports_neither_airflow_nor_the_kubernetes_clients_nor_the_simulator() -> None:
    """Start-up cost: a verb loads what it needs (``place`` from a file needs the engine, not Airflow)."""
    heavy = [
        "airflow",
        "kubernetes",
        "kubernetes_asyncio",
        "aiohttp",
        "rich",
        "airflow_provider_fedsched.sim",
    ]
    code = (
        "import sys\n"
        "from airflow_provider_fedsched.cli import main\n"
        f"code = main({[*BASE, '--cpu', '1', '--json']!r})\n"
        f"loaded = sorted(h for h in {heavy!r} if any(m == h or m.startswith(h + '.') for m in sys.modules))"
        "\n"
        "print(code, loaded, file=sys.stderr)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stderr.strip().splitlines()[-1] == "0 []"
    assert json.loads(result.stdout)["outcome"] == "placed"


def test_help_lists_every_verb(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["--help"])
    assert exit_info.value.code == 0
    listed = capsys.readouterr().out
    assert all(verb in listed for verb in cli.VERBS)
