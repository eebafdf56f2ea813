"""Every ``fedsched`` verb finds members where the operator does: connections in Airflow's metadata
database and secrets backends, and ``AIRFLOW_CONN_*`` variables, in Airflow's own order.

A user's setup, by docs/deploy.md: a fresh Airflow home (``airflow db migrate``), members added with
``airflow connections add`` (one also in a secrets backend), then ``fedsched`` run as separate processes
with no ``AIRFLOW_CONN_*`` variable set, against the simulated federation.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography.fernet import Fernet

from airflow_provider_fedsched.sim import SimFederation
from airflow_provider_fedsched.sim.config import conn_id

pytestmark = pytest.mark.airflow  # `airflow db migrate`, `airflow connections add`: Airflow processes

BIN = Path(sys.executable).parent
DEAD_SERVER = "http://127.0.0.1:9"
"""Nothing listens there: a connection pointing at it makes its member unreachable, naming the server."""
IN_BACKEND = "west-general"
"""The member whose good connection is in the secrets backend (the database holds a dead one for it)."""


@dataclass
class Deployment:
    fed: SimFederation
    env: dict[str, str]
    federation: Path
    secrets: list[str]

    def fedsched(self, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [str(BIN / "fedsched"), *args],
            env=env or self.env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        for secret in self.secrets:
            assert secret not in done.stdout + done.stderr, f"a member's token was printed by {args}"
        return done

    def json(self, *args: str) -> Any:
        done = self.fedsched(*args, "--json")
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout[done.stdout.index("{") :])


def kubernetes_extra(fed: SimFederation, cluster: str, server: str | None = None) -> dict[str, Any]:
    """A connection's extras as docs/deploy.md builds them: the kubeconfig inline, the task namespace."""
    kubeconfig = fed.kubeconfig(cluster)
    if server is not None:
        kubeconfig["clusters"][0]["cluster"]["server"] = server
    return {"kube_config": json.dumps(kubeconfig), "namespace": "default"}


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    home = tmp_path_factory.mktemp("airflow-home")
    with SimFederation(time_scale=0.05) as fed:
        # The user's shell: none of the test session's Airflow settings, no connection variable.
        env = {
            key: value
            for key, value in os.environ.items()
            if not key.startswith(("AIRFLOW_", "AIRFLOW__", "_AIRFLOW_"))
        }
        backend_file = home / "connections.json"
        backend_file.write_text(
            json.dumps(
                {
                    conn_id(IN_BACKEND): {
                        "conn_type": "kubernetes",
                        "extra_dejson": kubernetes_extra(fed, IN_BACKEND),
                    }
                }
            )
        )
        env.update(
            {
                "AIRFLOW_HOME": str(home),
                "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
                "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
                "AIRFLOW__CORE__FERNET_KEY": Fernet.generate_key().decode(),
                "AIRFLOW__SECRETS__BACKEND": "airflow.secrets.local_filesystem.LocalFilesystemBackend",
                "AIRFLOW__SECRETS__BACKEND_KWARGS": json.dumps({"connections_file_path": str(backend_file)}),
            }
        )

        def airflow(*args: str) -> None:
            done = subprocess.run(
                [str(BIN / "airflow"), *args], env=env, capture_output=True, text=True, timeout=300
            )
            assert done.returncode == 0, f"airflow {args[:2]}: {done.stderr[-2000:]}"

        airflow("db", "migrate")
        for name in fed.clusters:
            # The database's connection for the backend's member is dead: the backend is read first.
            server = DEAD_SERVER if name == IN_BACKEND else None
            airflow(
                "connections", "add", conn_id(name),
                "--conn-type", "kubernetes",
                "--conn-extra", json.dumps(kubernetes_extra(fed, name, server)),
            )  # fmt: skip
        spec = fed.federation_spec()
        spec["tenants"] = [{"name": "team-ml", "quota": {"cpu": "8"}, "budget": {"max_cost": 100}}]
        federation = home / "federation.yaml"
        federation.write_text(yaml.safe_dump(spec, sort_keys=False))
        fed["east-cpu"].create_pod(
            "default",
            {
                "metadata": {
                    "name": "team-ml-work",
                    "labels": {"fedsched.io/tenant": "team-ml"},
                    "annotations": {"sim.fedsched.io/duration": "3600"},
                },
                "spec": {
                    "containers": [{"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "3"}}}]
                },
            },
        )
        fed["east-cpu"].wait_for_phase("default", "team-ml-work", "Running")
        yield Deployment(fed, env, federation, [fed[name].token for name in fed.clusters])


def test_snapshot_and_place_live_read_members_from_the_database_and_secrets_backend(
    deployment: Deployment, tmp_path: Path
) -> None:
    assert not any(key.startswith("AIRFLOW_CONN_") for key in deployment.env)
    federation = str(deployment.federation)
    snapshot_file = tmp_path / "snapshots.yaml"

    rows = {
        row["cluster"]: row
        for row in deployment.json("snapshot", "--federation", federation, "--out", str(snapshot_file))[
            "clusters"
        ]
    }

    assert set(rows) == set(deployment.fed.clusters)
    for name, row in rows.items():
        nodes = len(deployment.fed[name].nodes())
        assert row["reachable"], (name, row["reason"])
        assert row["ready_nodes"] == row["nodes"] == nodes > 0
    decision = deployment.json("place", "--live", "--federation", federation, "--cpu", "1")
    assert decision["outcome"] == "placed" and decision["cluster"] in deployment.fed.clusters
    assert decision["rejected"] == []
    assert {c["cluster"] for c in decision["candidates"]} == set(deployment.fed.clusters)
    table = deployment.fedsched("place", "--live", "--federation", federation, "--cpu", "1")
    assert table.returncode == 0 and f"PLACED -> {decision['cluster']}" in table.stdout

    # tenants: usage counted from the members' pods, in the snapshot the connections read.
    tenants = deployment.json("tenants", "--federation", federation, "--snapshots", str(snapshot_file))
    (team,) = tenants["tenants"]
    assert team["tenant"] == "team-ml" and team["used"] == {"cpu": "3", "pods": "1"}
    assert team["quota"] == {"cpu": "8"}


def test_tenants_and_cost_read_the_deployments_database(deployment: Deployment) -> None:
    """Spend is what the operator wrote in the deployment's shared state (Airflow Variables)."""
    federation = str(deployment.federation)
    # What the operator writes when an attempt ends, in the deployment's own database.
    record = (
        "from datetime import UTC, datetime\n"
        "from airflow_provider_fedsched.hooks.federation import FederationHook\n"
        f"FederationHook({federation!r}, state='airflow').charge('p1', {{'tenant': 'team-ml', "
        "'dag_id': 'train', 'cost': 2.5, 'egress_gb': 1.0, 'at': datetime.now(UTC).isoformat(), "
        "'outcome': 'succeeded', 'cluster': 'east-cpu'})\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", record], env=deployment.env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr

    (team,) = deployment.json("tenants", "--federation", federation)["tenants"]
    assert team["tenant"] == "team-ml" and team["cost"] == 2.5 and team["max_cost"] == 100
    rows = deployment.json("cost", "--federation", federation)["rows"]
    assert rows == [{"tenant": "team-ml", "attempts": 1, "failed_attempts": 0, "cost": 2.5, "egress_gb": 1.0}]


def test_an_environment_variable_comes_before_the_database_as_in_airflow(deployment: Deployment) -> None:
    east = conn_id("east-cpu")
    value = json.dumps(
        {"conn_type": "kubernetes", "extra": kubernetes_extra(deployment.fed, "east-cpu", DEAD_SERVER)}
    )
    env = {**deployment.env, f"AIRFLOW_CONN_{east.upper()}": value}

    done = deployment.fedsched("snapshot", "--federation", str(deployment.federation), "--json", env=env)

    assert done.returncode == 0, done.stderr
    rows = {row["cluster"]: row for row in json.loads(done.stdout[done.stdout.index("{") :])["clusters"]}
    assert not rows["east-cpu"]["reachable"]
    assert DEAD_SERVER in rows["east-cpu"]["reason"] and repr(east) in rows["east-cpu"]["reason"]
    assert all(rows[name]["reachable"] for name in rows if name != "east-cpu")


def test_a_connection_that_exists_nowhere_is_a_one_line_error_naming_it(
    deployment: Deployment, tmp_path: Path
) -> None:
    spec = yaml.safe_load(deployment.federation.read_text())
    spec["clusters"][0]["conn_id"] = "k8s_nowhere"
    federation = tmp_path / "federation.yaml"
    federation.write_text(yaml.safe_dump(spec))
    cluster = spec["clusters"][0]["name"]

    for verb in (["snapshot"], ["place", "--live", "--cpu", "1"]):
        done = deployment.fedsched(*verb, "--federation", str(federation))
        assert done.returncode == 2, (verb, done.stdout, done.stderr)
        assert done.stdout == ""
        assert done.stderr.strip().splitlines() == [
            f"fedsched {verb[0]}: error: cluster {cluster!r} (connection 'k8s_nowhere'): connection does "
            "not exist (not in a secrets backend, AIRFLOW_CONN_K8S_NOWHERE or the metadata database)"
        ]


def test_the_lookup_context_lasts_the_verb_and_an_explicit_one_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow_provider_fedsched.cli._common import PROCESS_CONTEXT, airflow_lookup_context

    monkeypatch.delenv(PROCESS_CONTEXT, raising=False)
    with airflow_lookup_context():
        assert os.environ[PROCESS_CONTEXT] == "server"
    assert PROCESS_CONTEXT not in os.environ
    monkeypatch.setenv(PROCESS_CONTEXT, "client")
    with airflow_lookup_context():
        assert os.environ[PROCESS_CONTEXT] == "client"
    assert os.environ[PROCESS_CONTEXT] == "client"


def _no_json_broken(done: subprocess.CompletedProcess[str]) -> None:
    """What ``--json`` promises whatever happens: stdout is empty or one JSON document; no traceback."""
    if done.stdout.strip():
        json.loads(done.stdout)
    assert "Traceback" not in done.stdout + done.stderr, done.stdout + done.stderr


def test_a_connection_extra_that_is_not_json_is_one_line_naming_it(
    deployment: Deployment, tmp_path: Path
) -> None:
    """Airflow logs such an extra with a traceback (once on stdout, inside ``--json``) and reads it as no
    extras: the verbs name the connection and its extra instead, and keep Airflow's logs on stderr."""
    # In the metadata database: a row Airflow's own CLI refuses to write, left by a hand edit or older tools.
    bad = "k8s_bad_extra"
    done = subprocess.run(
        [str(BIN / "airflow"), "connections", "add", bad, "--conn-type", "kubernetes", "--conn-extra", "{}"],
        env=deployment.env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    database = deployment.env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].removeprefix("sqlite:///")
    with sqlite3.connect(database) as db:
        db.execute(
            "UPDATE connection SET extra = '{not json', is_extra_encrypted = 0 WHERE conn_id = ?", (bad,)
        )
    spec = yaml.safe_load(deployment.federation.read_text())
    cluster = spec["clusters"][0]["name"]
    spec["clusters"][0]["conn_id"] = bad
    in_database = tmp_path / "federation.yaml"
    in_database.write_text(yaml.safe_dump(spec))
    # In an environment variable, as docs/deploy.md shows them, with the extra typed by hand.
    east = conn_id("east-cpu")
    in_variable = {
        **deployment.env,
        f"AIRFLOW_CONN_{east.upper()}": json.dumps({"conn_type": "kubernetes", "extra": "{not json"}),
    }
    cases = [
        (in_database, deployment.env, cluster, bad, "MetastoreBackend: its extra is not valid JSON"),
        (deployment.federation, in_variable, "east-cpu", east, "connection extra is not valid JSON"),
    ]

    for federation, env, member, connection, problem in cases:
        for verb in (["snapshot"], ["place", "--live", "--cpu", "1"]):
            done = deployment.fedsched(*verb, "--federation", str(federation), "--json", env=env)

            assert done.returncode == 2, (verb, done.stdout, done.stderr)
            _no_json_broken(done)
            assert done.stdout == ""
            (line,) = [line for line in done.stderr.splitlines() if line.startswith("fedsched")]
            where = f"cluster {member!r} (connection {connection!r})"
            assert line.startswith(f"fedsched {verb[0]}: error: {where}")
            assert problem in line


def test_airflow_s_log_lines_stay_off_stdout(deployment: Deployment) -> None:
    """A connection URI with a one-letter password makes Airflow warn that it cannot mask it: on stderr,
    the JSON document alone on stdout."""
    east = conn_id("east-cpu")
    extra = json.dumps(kubernetes_extra(deployment.fed, "east-cpu"))
    env = {
        **deployment.env,
        f"AIRFLOW_CONN_{east.upper()}": json.dumps(
            {"conn_type": "kubernetes", "password": "x", "extra": extra}
        ),
    }

    done = deployment.fedsched("snapshot", "--federation", str(deployment.federation), "--json", env=env)

    assert done.returncode == 0, done.stderr
    _no_json_broken(done)
    assert {row["cluster"] for row in json.loads(done.stdout)["clusters"]} == set(deployment.fed.clusters)
    assert "mask" in done.stderr  # Airflow did log, on stderr
