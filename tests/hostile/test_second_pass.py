"""Hostile input, second pass: the surfaces added since the first round.

* Tenant state (charges, waiting entries) written by anyone: a malformed entry is skipped with a warning
  naming its key; it never stops a decision, ``fedsched tenants``/``cost`` or the Federation page, never
  lowers a tenant's spend, and ``--json`` never prints Infinity.
* The Job operator's own arguments and the task's annotations: a ``FederationError`` naming the argument
  before anything is reserved or created.
* A careless new user: the commands that read the metadata database before ``airflow db migrate``, and
  ``fedsched sim up`` on a file or on a state folder a running simulator serves: one line, exit 2.
* Booleans where numbers belong (spec, simulator config), an infinite price or unknown region in the
  simulator's config: refused naming the field.
"""

from __future__ import annotations

import json
import logging
import math
import os
import stat
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from airflow_provider_fedsched.federation import SpecError, TaskRequest, load_spec
from airflow_provider_fedsched.federation.costs import cost_report
from airflow_provider_fedsched.hooks.federation import FederationHook
from airflow_provider_fedsched.state import FederationState, MemoryStateBackend
from airflow_provider_fedsched.state.base import forget_logged
from airflow_provider_fedsched.validation import stored
from tests.federation.helpers import node
from tests.hostile.harness import check, cli_outcome, raised, run_bounded
from tests.hostile.test_files_and_cli import SPEC

TEAMS: dict[str, Any] = {
    "name": "hostile-teams",
    "clusters": [
        {"name": "a", "conn_id": "k8s_a", "region": "r1", "prices": {"cpu_hour": 0.1}},
        {"name": "b", "conn_id": "k8s_b", "region": "r1", "prices": {"cpu_hour": 0.2}},
    ],
    "policy": {"snapshot_ttl_seconds": 3600},
    "tenants": [
        {"name": "team-a", "quota": {"cpu": "8"}, "budget": {"period": "day", "max_cost": 100}},
        {"name": "team-b", "quota": {"cpu": "64"}},
    ],
}
PREFIX = "fedsched/hostile-teams"


@pytest.fixture(autouse=True)
def no_cluster_ledger(monkeypatch: pytest.MonkeyPatch) -> None:
    # The clusters of these specs do not run: reservations live in shared state only.
    monkeypatch.setenv("AIRFLOW__FEDSCHED__PLACEMENT_LEDGER", "False")


def teams_hook(backend: Any, now: datetime) -> FederationHook:
    from airflow_provider_fedsched.federation import ClusterSnapshot

    hook = FederationHook(TEAMS, state=FederationState(backend, federation="hostile-teams"))
    hook.state.snapshots.put(
        ClusterSnapshot(cluster=name, observed_at=now, nodes=[node(f"{name}-n", {"cpu": "32"})])
        for name in ("a", "b")
    )
    return hook


def over_budget(hook: FederationHook, now: datetime) -> None:
    """team-a spent 99.60 of its daily 100 today (valid charges)."""
    for index in range(3):
        hook.charge(f"c{index}", {"tenant": "team-a", "cost": 33.2, "at": now.isoformat()})


EXPENSIVE = TaskRequest(resources={"cpu": 5000}, tenant="team-a", expected_duration_seconds=7200)
"""1.00 on a, 2.00 on b for two hours: either goes over team-a's budget after :func:`over_budget`."""

# (id, key under PREFIX, stored value): a malformed tenant entry, skipped with a warning naming its key
MALFORMED_TENANT_STATE: list[tuple[str, str, Any]] = [
    ("charge at soon", "spend/x", {"tenant": "team-a", "cost": 1.0, "at": "soon"}),
    ("charge cost lots", "spend/x", {"tenant": "team-a", "cost": "lots", "at": "{now}"}),
    ("charge cost -1e9", "spend/x", {"tenant": "team-a", "cost": -1e9, "at": "{now}"}),
    ("charge cost 1e308", "spend/x", {"tenant": "team-a", "cost": 1e308, "at": "{now}"}),
    ("charge cost NaN", "spend/x", {"tenant": "team-a", "cost": math.nan, "at": "{now}"}),
    ("charge cost -inf", "spend/x", {"tenant": "team-a", "cost": -math.inf, "at": "{now}"}),
    ("charge cost true", "spend/x", {"tenant": "team-a", "cost": True, "at": "{now}"}),
    ("charge egress -5", "spend/x", {"tenant": "team-a", "egress_gb": -5, "at": "{now}"}),
    ("charge a list", "spend/x", [1, 2]),
    ("charge a string", "spend/x", "lots"),
    ("charge at year 9999", "spend/x", {"tenant": "team-a", "cost": 1.0, "at": "9999-12-31T00:00:00"}),
    (
        "waiting seen_at soon",
        "waiting/w",
        {"placement_id": "w", "tenant": "team-b", "resources": {}, "since": "{now}", "seen_at": "soon"},
    ),
    (
        "waiting cpu true",
        "waiting/w",
        {
            "placement_id": "w",
            "tenant": "team-b",
            "resources": {"cpu": True},
            "since": "{now}",
            "seen_at": "{now}",
        },
    ),
    (
        "waiting cpu 2^70",
        "waiting/w",
        {
            "placement_id": "w",
            "tenant": "team-b",
            "resources": {"cpu": 2**70},
            "since": "{now}",
            "seen_at": "{now}",
        },
    ),
    ("waiting without tenant", "waiting/w", {"placement_id": "w", "since": "{now}", "seen_at": "{now}"}),
    ("waiting a number", "waiting/w", 7),
]


def _filled(value: Any, now: datetime) -> Any:
    if isinstance(value, str):
        return value.replace("{now}", now.isoformat())
    if isinstance(value, dict):
        return {key: _filled(item, now) for key, item in value.items()}
    return value


@pytest.mark.parametrize(
    ("key", "value"), [c[1:] for c in MALFORMED_TENANT_STATE], ids=[c[0] for c in MALFORMED_TENANT_STATE]
)
def test_a_malformed_tenant_entry_never_stops_a_decision_nor_widens_a_budget(
    key: str, value: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """Decided, summarized (``fedsched tenants``) and reported (``fedsched cost``) with the entry skipped
    and its key named; team-a, over its budget, still waits (a negative charge never gives money back)."""
    forget_logged()
    now = datetime.now(UTC)
    backend = MemoryStateBackend()
    hook = teams_hook(backend, now)
    over_budget(hook, now)
    backend.set(f"{PREFIX}/{key}", _filled(value, now))

    def decide() -> Any:
        with caplog.at_level(logging.WARNING):
            decision = hook.place(EXPENSIVE, "t1")
            rows = hook.tenants(now)
            report = cost_report(hook.charges(now - timedelta(days=1)), "tenant")
        text = json.dumps({"tenants": rows, "rows": report}, allow_nan=False)  # never Infinity or NaN
        lines = [r.getMessage() for r in caplog.records if f"{PREFIX}/{key}" in r.getMessage()]
        assert len(lines) == 1, lines  # logged once, however often it is read
        spent = {row["tenant"]: row["cost"] for row in rows}["team-a"]
        return decision.outcome, lines[0], spent, text

    def outcome() -> Any:
        from tests.hostile.harness import Outcome

        found, line, spent, _ = decide()
        return Outcome("decided", (found, spent), line)

    check(
        *run_bounded(outcome),
        "decided",
        ("wait", 99.6),
        f"Ignoring unreadable stored value under {PREFIX}/{key}",
    )


def test_charges_at_the_stored_bound_sum_to_a_finite_total() -> None:
    now = datetime.now(UTC)
    hook = teams_hook(MemoryStateBackend(), now)
    for index in range(3):
        hook.charge(
            f"big{index}", {"tenant": "team-b", "cost": stored.MAX_STORED_AMOUNT, "at": now.isoformat()}
        )
    rows = {row["tenant"]: row for row in hook.tenants(now)}
    assert rows["team-b"]["cost"] == 3 * stored.MAX_STORED_AMOUNT
    json.dumps(cost_report(hook.charges(), "tenant"), allow_nan=False)


def test_the_federation_page_shows_rows_despite_malformed_entries_and_never_exception_text(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from airflow_provider_fedsched.plugins import app, usage

    now = datetime.now(UTC)
    backend = MemoryStateBackend()
    hook = teams_hook(backend, now)
    over_budget(hook, now)
    for name, key, value in MALFORMED_TENANT_STATE:
        backend.set(f"{PREFIX}/{key}-{len(name)}", _filled(value, now))
    monkeypatch.setattr(app, "_federation_hook", lambda: hook)
    tenants = app._from_federation("tenants", lambda h, at: h.tenants(at))
    costs = app._from_federation("rows", lambda h, at: usage.costs(h, at, by="day", split="tenant", days=14))
    assert tenants["error"] is None and costs["error"] is None
    assert {row["tenant"]: row["cost"] for row in tenants["tenants"]}["team-a"] == 99.6
    assert costs["rows"]["charges"] == 3
    json.dumps([tenants, costs], allow_nan=False)

    def broken(_: Any, __: Any) -> Any:
        raise RuntimeError("secret internals")

    failed = app._from_federation("tenants", broken)
    assert failed["tenants"] == [] and "secret internals" not in failed["error"]
    assert "log" in failed["error"]


# -- the Job operator's own arguments, and annotations -------------------------------------------------------
HUGE = "x" * (50 * 2**20)
JOB_CASES: list[tuple[str, dict[str, Any], str]] = [
    ("job_poll_interval=nan", {"job_poll_interval": math.nan}, "job_poll_interval"),
    ("job_poll_interval=-5", {"job_poll_interval": -5}, "job_poll_interval"),
    ("job_poll_interval=0", {"job_poll_interval": 0}, "job_poll_interval"),
    ("job_poll_interval=inf", {"job_poll_interval": math.inf}, "job_poll_interval"),
    ('job_poll_interval="2"', {"job_poll_interval": "2"}, "job_poll_interval"),
    ("job_poll_interval=True", {"job_poll_interval": True}, "job_poll_interval"),
    ("backoff_limit=-1", {"backoff_limit": -1}, "backoff_limit"),
    ("backoff_limit=True", {"backoff_limit": True}, "backoff_limit"),
    ("backoff_limit=2^40", {"backoff_limit": 2**40}, "backoff_limit"),
    ('backoff_limit="3"', {"backoff_limit": "3"}, "backoff_limit"),
    ("ttl_seconds_after_finished=-1", {"ttl_seconds_after_finished": -1}, "ttl_seconds_after_finished"),
    ("ttl_seconds_after_finished=1.5", {"ttl_seconds_after_finished": 1.5}, "ttl_seconds_after_finished"),
    ("parallelism=0", {"parallelism": 0}, "parallelism"),
    ("parallelism=10^9", {"parallelism": 10**9}, "parallelism"),
    ("completions=True", {"completions": True}, "completions"),
    ('completion_mode="Sideways"', {"completion_mode": "Sideways"}, "completion_mode"),
    ("a 50 MB annotation", {"annotations": {"note": HUGE}}, "annotations"),
    ("an annotation name with a space", {"annotations": {"bad key": "v"}}, "annotations"),
    ("an annotation value 5", {"annotations": {"note": 5}}, "annotations.note"),
    ('annotations="x"', {"annotations": "x"}, "annotations"),
]
POD_ANNOTATION_CASES = [case for case in JOB_CASES if "annotation" in case[0]]


def _prepared(operator_class: Any, arguments: dict[str, Any]) -> tuple[Any, MemoryStateBackend]:
    backend = MemoryStateBackend()
    operator = operator_class(task_id="hostile", image="busybox", federation=SPEC, **arguments)
    return lambda: operator.prepare(None, FederationHook(SPEC, state=backend)), backend


@pytest.mark.parametrize(("arguments", "culprit"), [c[1:] for c in JOB_CASES], ids=[c[0] for c in JOB_CASES])
def test_bad_job_argument_is_a_federation_error_before_anything_is_reserved(
    arguments: dict[str, Any], culprit: str
) -> None:
    from airflow_provider_fedsched.operators.federated_job import FederatedKubernetesJobOperator

    prepare, backend = _prepared(FederatedKubernetesJobOperator, arguments)
    check(*run_bounded(lambda: raised(prepare, Exception)), "raised", "FederationError", culprit)
    assert backend.keys("") == []  # nothing reserved, no snapshot taken


@pytest.mark.parametrize(
    ("arguments", "culprit"), [c[1:] for c in POD_ANNOTATION_CASES], ids=[c[0] for c in POD_ANNOTATION_CASES]
)
def test_bad_pod_annotations_are_a_federation_error_before_anything_is_reserved(
    arguments: dict[str, Any], culprit: str
) -> None:
    from airflow_provider_fedsched.operators.federated_pod import FederatedKubernetesOperator

    prepare, backend = _prepared(FederatedKubernetesOperator, arguments)
    check(*run_bounded(lambda: raised(prepare, Exception)), "raised", "FederationError", culprit)
    assert backend.keys("") == []


# -- booleans where numbers belong ---------------------------------------------------------------------------
BOOLEAN_SPEC_CASES: list[tuple[str, dict[str, Any], str]] = [
    ("weights.cost: true", {"policy": {"weights": {"cost": True}}}, "weights.cost"),
    ("snapshot_ttl_seconds: true", {"policy": {"snapshot_ttl_seconds": True}}, "snapshot_ttl_seconds"),
    ("cooldown_seconds: false", {"policy": {"cooldown_seconds": False}}, "cooldown_seconds"),
    ("tenant weight: true", {"tenants": [{"name": "t", "weight": True}]}, "tenants[0].weight"),
    ("max_cost: true", {"tenants": [{"name": "t", "budget": {"max_cost": True}}]}, "budget.max_cost"),
    ("quota cpu: true", {"tenants": [{"name": "t", "quota": {"cpu": True}}]}, "tenants[0].quota.cpu"),
    (
        "guaranteed pods: true",
        {"tenants": [{"name": "t", "quota": {"pods": 4}, "guaranteed": {"pods": True}}]},
        "tenants[0].guaranteed.pods",
    ),
    (
        "max_egress_gb: true",
        {"tenants": [{"name": "t", "budget": {"max_egress_gb": True}}]},
        "budget.max_egress_gb",
    ),
    (
        "prices.cpu_hour: true",
        {"clusters": [{"name": "a", "conn_id": "k", "region": "r", "prices": {"cpu_hour": True}}]},
        "prices.cpu_hour",
    ),
    (
        "size_gb: true",
        {"datasets": [{"name": "d", "cluster": "a", "size_gb": True}]},
        "datasets[0].size_gb",
    ),
]


@pytest.mark.parametrize(
    ("override", "culprit"), [c[1:] for c in BOOLEAN_SPEC_CASES], ids=[c[0] for c in BOOLEAN_SPEC_CASES]
)
def test_a_boolean_where_the_spec_takes_a_number_is_refused(override: dict[str, Any], culprit: str) -> None:
    document = {"name": "bools", "clusters": [{"name": "a", "conn_id": "k", "region": "r"}], **override}
    text = yaml.safe_dump(document)
    check(*run_bounded(lambda: raised(lambda: load_spec(text), SpecError)), "raised", "SpecError", culprit)


def test_a_boolean_where_a_request_takes_a_number_is_refused() -> None:
    for field in ("max_cost", "max_egress_gb", "expected_duration_seconds"):
        with pytest.raises(ValueError, match=field):
            TaskRequest(resources={"cpu": 1000}, **{field: True})


# -- the command line: a careless new user -------------------------------------------------------------------
SIM_CONFIG_CASES: list[tuple[str, dict[str, Any], str]] = [
    ("an infinite price", {"clusters": [{"name": "a", "prices": {"cpu_hour": math.inf}}]}, "prices.cpu_hour"),
    ("a price true", {"clusters": [{"name": "a", "prices": {"gpu_hour": True}}]}, "prices.gpu_hour"),
    ("a pool count true", {"clusters": [{"name": "a", "node_pools": [{"count": True}]}]}, "count"),
    (
        "an unknown region",
        {
            "clusters": [{"name": "a", "region": "eu-1"}],
            "datasets": [{"name": "d", "cluster": "a", "size_gb": 1, "allowed_regions": ["mars"]}],
        },
        "allowed_regions",
    ),
    (
        "a weight the spec refuses",
        {"clusters": [{"name": "a"}], "policy": {"weights": {"cost": 1e300}}},
        "weights.cost",
    ),
]


@pytest.mark.parametrize(
    ("config", "culprit"), [c[1:] for c in SIM_CONFIG_CASES], ids=[c[0] for c in SIM_CONFIG_CASES]
)
def test_sim_up_refuses_a_config_whose_spec_the_provider_would_refuse(
    tmp_path: Path, config: dict[str, Any], culprit: str
) -> None:
    path = tmp_path / "sim.yaml"
    path.write_text(yaml.safe_dump(config))
    state = tmp_path / "state"
    argv = ["sim", "up", "--config", str(path), "--state-dir", str(state)]
    check(*run_bounded(lambda: cli_outcome(argv)), "exit", 2, culprit)
    assert not state.exists()  # nothing written


def test_sim_up_refuses_a_state_dir_that_is_a_file(tmp_path: Path) -> None:
    path = tmp_path / "a-file"
    path.write_text("mine\n")
    argv = ["sim", "up", "--state-dir", str(path)]
    check(*run_bounded(lambda: cli_outcome(argv)), "exit", 2, "not a directory")
    assert path.read_text() == "mine\n"


@pytest.mark.parametrize("name", ["sim.lock", "kubeconfig", "federation.yaml", "airflow.env", "sim.json"])
def test_sim_up_refuses_a_state_dir_holding_a_named_pipe_where_it_writes(tmp_path: Path, name: str) -> None:
    state = tmp_path / "state"
    state.mkdir()
    os.mkfifo(state / name)
    argv = ["sim", "up", "--state-dir", str(state)]
    check(*run_bounded(lambda: cli_outcome(argv)), "exit", 2, f"{name}: not a regular file")
    assert stat.S_ISFIFO((state / name).stat().st_mode)  # left as it was


@pytest.mark.sim  # starts a simulator of its own
def test_sim_up_refuses_a_state_dir_a_running_simulator_serves(tmp_path: Path) -> None:
    from airflow_provider_fedsched.sim import SimFederation

    state = tmp_path / "state"
    config = {"clusters": [{"name": "solo", "node_pools": [{"count": 1}]}]}
    with SimFederation(config, state_dir=state):
        files = {name: (state / name).read_bytes() for name in ("kubeconfig", "airflow.env", "sim.json")}
        argv = ["sim", "up", "--state-dir", str(state)]
        check(*run_bounded(lambda: cli_outcome(argv)), "exit", 2, "already served by a running simulator")
        assert {name: (state / name).read_bytes() for name in files} == files  # the first one's files
    with SimFederation(config, state_dir=state):  # once the first one stopped, the folder is free again
        pass


def test_cost_on_a_spec_without_tenants_exits_2(tmp_path: Path) -> None:
    path = tmp_path / "bare.yaml"
    path.write_text(SPEC)
    check(*run_bounded(lambda: cli_outcome(["cost", "--federation", str(path)])), "exit", 2, "no tenants")


@pytest.mark.airflow  # four `fedsched` processes, each loading Airflow
def test_commands_before_airflow_db_migrate_say_so_in_one_line(tmp_path: Path) -> None:
    """A fresh Airflow home, never migrated: one line naming `airflow db migrate`, exit 2, no traceback."""
    spec = tmp_path / "fed.yaml"
    spec.write_text(yaml.safe_dump(TEAMS))
    env = {  # the user's shell: none of the test session's Airflow settings (its unit test mode logs)
        **{key: value for key, value in os.environ.items() if not key.startswith(("AIRFLOW_", "_AIRFLOW_"))},
        "AIRFLOW_HOME": str(tmp_path),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{tmp_path / 'airflow.db'}",
    }
    fedsched = str(Path(sys.executable).with_name("fedsched"))
    commands = [
        ["tenants", "--federation", str(spec)],
        ["cost", "--federation", str(spec)],
        ["history", "export", "--out", str(tmp_path / "pods.csv")],
        ["plan", "--federation", str(spec), "--dags-folder", str(tmp_path)],
    ]
    for argv in commands:
        done = subprocess.run([fedsched, *argv], env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 2, (argv, done.stderr)
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and "airflow db migrate" in lines[0], (argv, done.stderr)
        assert "Traceback" not in done.stdout + done.stderr
    assert not (tmp_path / "pods.csv").exists()


def raw_charge(cost: str, now: datetime) -> str:
    """A charge's JSON text with ``cost`` written as given (1e999: beyond a float)."""
    return '{"tenant": "team-b", "cost": ' + cost + f', "at": "{now.isoformat()}"}}'


def test_tenants_and_cost_commands_skip_malformed_variables_naming_them(
    airflow_db: None, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """In the deployment's Airflow Variables (as any DAG author can write them): both commands exit 0,
    print JSON without Infinity, count the valid charges only and log each malformed key."""
    from airflow.models import Variable

    forget_logged()
    now = datetime.now(UTC)
    spec = tmp_path / "fed.yaml"
    spec.write_text(yaml.safe_dump(TEAMS))
    hook = FederationHook(str(spec), state="airflow")
    for key in hook.state.backend.keys(PREFIX + "/"):
        hook.state.backend.delete(key)
    over_budget(hook, now)
    texts = {
        "spend/soon": json.dumps({"tenant": "team-a", "cost": 1, "at": "soon"}),
        "spend/lots": json.dumps({"tenant": "team-a", "cost": "lots", "at": now.isoformat()}),
        "spend/negative": json.dumps({"tenant": "team-a", "cost": -1e9, "at": now.isoformat()}),
        "spend/big1": raw_charge("1e308", now),
        "spend/big2": raw_charge("1e308", now),
        "spend/infinite": raw_charge("1e999", now),
        "spend/not-json": "{",
        "waiting/w": json.dumps({"placement_id": "w", "tenant": "team-b", "seen_at": "soon"}),
    }
    for key, text in texts.items():
        Variable.set(f"{PREFIX}/{key}", text)
    with caplog.at_level(logging.WARNING):
        cost = cli_outcome(["cost", "--federation", str(spec), "--json"])
        tenants = cli_outcome(["tenants", "--federation", str(spec), "--json"])
    for outcome in (cost, tenants):
        assert outcome.value == 0 and "Traceback" not in outcome.message, outcome.message
        assert "Infinity" not in outcome.message and "NaN" not in outcome.message
    report = json.loads(cost.message[cost.message.index("{") :])
    assert {row["tenant"]: row["cost"] for row in report["rows"]} == {"team-a": 99.6}
    rows = json.loads(tenants.message[tenants.message.index("{") :])["tenants"]
    assert {row["tenant"]: row["cost"] for row in rows} == {"team-a": 99.6, "team-b": 0.0}
    logged = "\n".join(record.getMessage() for record in caplog.records)
    for key in texts:
        assert f"Ignoring unreadable stored value under {PREFIX}/{key}" in logged, key
