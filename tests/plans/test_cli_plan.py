"""``fedsched plan``: the plan table from the DAGs folder, on the simulated federation."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest

from airflow_provider_fedsched.cli import main
from airflow_provider_fedsched.sim import SimFederation

EXAMPLES = Path(__file__).resolve().parents[2] / "example_dags"


@pytest.fixture
def dags_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "dags"
    folder.mkdir()
    for name in ("example_periodic_federated_dag.py", "fedsched_planner_dag.py", "example_federated_dag.py"):
        (folder / name).symlink_to(EXAMPLES / name)
    (folder / "broken_dag.py").write_text("from airflow.sdk import DAG\nraise RuntimeError('broken dag')\n")
    return folder


@pytest.fixture
def restored_environment() -> Iterator[None]:
    """``--kubeconfig`` defines connections in the process environment: drop them afterwards."""
    before = dict(os.environ)
    yield
    for key in set(os.environ) - set(before):
        del os.environ[key]


@pytest.mark.sim
def test_dry_run_prints_plans_for_the_scheduled_federated_dag_only(
    dags_folder: Path, capsys: pytest.CaptureFixture[str], restored_environment: None
) -> None:
    with SimFederation(time_scale=0.05) as fed:
        code = main(
            [
                "plan",
                "--dags-folder", str(dags_folder),
                "--federation", str(fed.state_dir / "federation.yaml"),
                "--kubeconfig", str(fed.kubeconfig_path),
                "--horizon", "3h",
                "--dry-run",
                "--json",
            ]
        )  # fmt: skip
    captured = capsys.readouterr()
    assert code == 0, captured.err
    document = json.loads(captured.out)
    assert document["dry_run"] is True
    # example_federated has no schedule, the planner DAG no federated task: only the periodic DAG.
    assert {run["dag_id"] for run in document["runs"]} == {"example_periodic_federated"}
    assert len(document["runs"]) in (4, 6)  # 2 tasks x the 2 or 3 runs due within 3 hours
    for run in document["runs"]:
        plan = run["plan"]
        assert plan is not None, run["note"]
        assert datetime.fromisoformat(plan["logical_date"]) == datetime.fromisoformat(run["logical_date"])
        if run["task_id"] == "hourly_rollup":
            assert "west-general" not in plan["clusters"]
    assert document["import_errors"] == [str(dags_folder / "broken_dag.py")]
    assert "broken_dag.py was not planned: RuntimeError: broken dag" in captured.err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--horizon", "soon"], "--horizon: 'soon' is not a duration"),
        (["--dags-folder", "/nonexistent"], "--dags-folder /nonexistent: no such file or directory"),
        (["--runs", "0"], "--runs: must be an integer in 1..10000 (got '0')"),
        (["--kubeconfig", __file__], "--kubeconfig: needs --federation"),
    ],
)
def test_bad_input_exits_2_naming_the_option(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    try:
        code = main(["plan", *argv])
    except SystemExit as exc:  # argparse usage errors (a bad --runs)
        code = int(exc.code or 0)
    assert code == 2
    assert message in capsys.readouterr().err


@pytest.mark.airflow  # two `fedsched plan` processes, each parsing DAG files with Airflow
def test_the_table_comes_without_airflows_log_unless_verbose(tmp_path: Path) -> None:
    """A fresh process, as from cron: Airflow logs every DAG file it parses unless told otherwise."""
    folder = tmp_path / "dags"
    folder.mkdir()
    (folder / "trivial_dag.py").symlink_to(Path(__file__).resolve().parents[1] / "dags" / "trivial_dag.py")
    env = {key: value for key, value in os.environ.items() if key != "AIRFLOW__LOGGING__LOGGING_LEVEL"}
    env["AIRFLOW_HOME"] = str(tmp_path / "home")
    command = [
        str(Path(sys.executable).with_name("fedsched")),
        "plan",
        "--dry-run",
        "--dags-folder",
        str(folder),
    ]

    quiet = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert quiet.returncode == 0, quiet.stderr
    assert quiet.stdout.startswith("Plans for 0 upcoming task run(s)")
    assert quiet.stderr == ""

    verbose = subprocess.run([*command, "--verbose"], env=env, capture_output=True, text=True, timeout=300)
    assert verbose.returncode == 0, verbose.stderr
    assert verbose.stdout == quiet.stdout
    assert "Filling up the DagBag" in verbose.stderr
