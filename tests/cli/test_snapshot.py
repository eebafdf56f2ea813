"""``fedsched snapshot`` through the real entry point, against the simulated federation."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from airflow_provider_fedsched import cli
from airflow_provider_fedsched.sim import SimFederation

pytestmark = pytest.mark.sim


@pytest.fixture(scope="module")
def fed() -> Iterator[SimFederation]:
    with SimFederation(time_scale=0.05) as federation:
        yield federation


def test_a_cluster_the_kubeconfig_cannot_reach_is_shown_unreachable_with_the_reason(
    fed: SimFederation, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kubeconfig = yaml.safe_load(fed.kubeconfig_path.read_text())
    kubeconfig["contexts"] = [c for c in kubeconfig["contexts"] if c["name"] != "north-gpu"]
    partial = tmp_path / "kubeconfig"
    partial.write_text(yaml.safe_dump(kubeconfig))
    federation = str(fed.state_dir / "federation.yaml")

    code = cli.main(["snapshot", "--federation", federation, "--kubeconfig", str(partial), "--json"])

    rows = {row["cluster"]: row for row in json.loads(capsys.readouterr().out)["clusters"]}
    assert code == cli.EXIT_OK and set(rows) == set(fed.clusters)
    assert not rows["north-gpu"]["reachable"]
    assert rows["north-gpu"]["reason"].startswith("kubeconfig context 'north-gpu' does not exist")
    assert all(rows[name]["reachable"] for name in fed.clusters if name != "north-gpu")
    code = cli.main(["snapshot", "--federation", federation, "--kubeconfig", str(partial)])
    table = capsys.readouterr().out
    assert code == cli.EXIT_OK and "Member clusters" in table and "no: kubeconfig" in table


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--kubeconfig", "/nonexistent/kubeconfig"],
            "fedsched snapshot: error: --kubeconfig /nonexistent/kubeconfig: No such file or directory",
        ),
        (["--timeout", "0"], "argument --timeout: must be a finite number in (0, 600] (got '0')"),
        (["--timeout", "inf"], "argument --timeout: must be a finite number in (0, 600] (got 'inf')"),
    ],
)
def test_bad_options_exit_2(
    fed: SimFederation, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    federation = str(fed.state_dir / "federation.yaml")
    try:
        code = cli.main(["snapshot", "--federation", federation, *argv])
    except SystemExit as exc:  # argparse usage errors
        code = int(exc.code or 0)
    assert code == cli.EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
