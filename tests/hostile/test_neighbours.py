"""Hostile input, the sweep after issue 27: neighbours of its families that were not yet clean.

* The pod operators' own arguments inherited from KubernetesPodOperator (intervals, timeouts, the pod
  spec's integers, the names of objects the pod refers to, the pod's name) were checked by the API server
  after the placement, or by the wait for the pod (``poll_interval=nan`` in the triggerer,
  ``startup_timeout_seconds=nan`` never timing out): now a ``FederationError`` naming the argument before
  anything is reserved, as the Job operator's own arguments.
* An integer of more than 4,300 digits where a number belongs had no ``repr`` for the error message.
* State files in a ``--state-dir`` (``sim.json``, ``testbed.json``) were read whole and blocking: a named
  pipe there hung ``fedsched sim status|fault`` and ``fedsched testbed status|down``.
* ``--out`` of ``snapshot`` and ``history export``: a folder was refused only after the work; a named
  pipe nothing reads blocked for ever.
* A pod larger than Kubernetes stores was a raw 413 after the placement.
* ``fedsched replay --scenario`` silently ignored the options that shape a trace.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_fedsched.hooks.federation import FederationHook
from airflow_provider_fedsched.state import MemoryStateBackend
from tests.hostile.harness import check, cli_outcome, raised, run_bounded
from tests.hostile.test_files_and_cli import SPEC

# (id, arguments, culprit): both operators raise FederationError at prepare(), nothing reserved
POD_ARGUMENT_CASES: list[tuple[str, dict[str, Any], str]] = [
    ("poll_interval=nan", {"poll_interval": math.nan}, "poll_interval"),
    ("poll_interval=-1", {"poll_interval": -1}, "poll_interval"),
    ("poll_interval=0", {"poll_interval": 0}, "poll_interval"),
    ("poll_interval=True", {"poll_interval": True}, "poll_interval"),
    ('poll_interval="2"', {"poll_interval": "2"}, "poll_interval"),
    ("startup_timeout_seconds=nan", {"startup_timeout_seconds": math.nan}, "startup_timeout_seconds"),
    ("startup_timeout_seconds=-1", {"startup_timeout_seconds": -1}, "startup_timeout_seconds"),
    ("startup_timeout_seconds=1e308", {"startup_timeout_seconds": 1e308}, "startup_timeout_seconds"),
    (
        "startup_check_interval_seconds=inf",
        {"startup_check_interval_seconds": math.inf},
        "startup_check_interval_seconds",
    ),
    ("termination_grace_period=-1", {"termination_grace_period": -1}, "termination_grace_period"),
    ("termination_grace_period=nan", {"termination_grace_period": math.nan}, "termination_grace_period"),
    ("termination_grace_period=True", {"termination_grace_period": True}, "termination_grace_period"),
    ("active_deadline_seconds=0", {"active_deadline_seconds": 0}, "active_deadline_seconds"),
    ("active_deadline_seconds=2^70", {"active_deadline_seconds": 2**70}, "active_deadline_seconds"),
    ("active_deadline_seconds=10^5000", {"active_deadline_seconds": 10**5000}, "active_deadline_seconds"),
    ("logging_interval=nan", {"logging_interval": math.nan}, "logging_interval"),
    ("priority_class_name='Bad Name'", {"priority_class_name": "Bad Name"}, "priority_class_name"),
    ("service_account_name='A'", {"service_account_name": "A"}, "service_account_name"),
    ("runtime_class_name='x'*300", {"runtime_class_name": "x" * 300}, "runtime_class_name"),
    ("schedulername='my scheduler'", {"schedulername": "my scheduler"}, "schedulername"),
]
JOB_HUGE_CASES: list[tuple[str, dict[str, Any], str]] = [
    ("backoff_limit=10^5000", {"backoff_limit": 10**5000}, "backoff_limit"),
    ("parallelism=-10^5000", {"parallelism": -(10**5000)}, "parallelism"),
]
IDS = [case[0] for case in POD_ARGUMENT_CASES]


@pytest.fixture(scope="module")
def operators() -> dict[str, Any]:
    from airflow_provider_fedsched.operators.federated_job import FederatedKubernetesJobOperator
    from airflow_provider_fedsched.operators.federated_pod import FederatedKubernetesOperator

    return {"pod": FederatedKubernetesOperator, "job": FederatedKubernetesJobOperator}


def _refused_before_anything(operator_class: Any, arguments: dict[str, Any], culprit: str) -> None:
    backend = MemoryStateBackend()
    operator = operator_class(task_id="hostile", image="busybox", federation=SPEC, **arguments)

    def prepare() -> Any:
        return operator.prepare(None, FederationHook(SPEC, state=backend))

    outcome = run_bounded(lambda: raised(prepare, Exception))
    check(*outcome, "raised", "FederationError", f"{culprit}: ")
    assert backend.keys("") == []  # nothing reserved, no snapshot taken


@pytest.mark.parametrize(("arguments", "culprit"), [c[1:] for c in POD_ARGUMENT_CASES], ids=IDS)
def test_a_bad_pod_argument_is_refused_before_anything_is_reserved(
    operators: dict[str, Any], arguments: dict[str, Any], culprit: str
) -> None:
    for operator_class in operators.values():
        _refused_before_anything(operator_class, arguments, culprit)


@pytest.mark.parametrize(
    ("arguments", "culprit"), [c[1:] for c in JOB_HUGE_CASES], ids=[c[0] for c in JOB_HUGE_CASES]
)
def test_an_integer_of_thousands_of_digits_is_named_not_printed(
    operators: dict[str, Any], arguments: dict[str, Any], culprit: str
) -> None:
    _refused_before_anything(operators["job"], arguments, culprit)


@pytest.fixture
def members(monkeypatch: pytest.MonkeyPatch) -> None:
    """Connections for SPEC's members (a server nothing answers at): the pod is built from one."""
    kubeconfig = {
        "apiVersion": "v1",
        "clusters": [{"name": "a", "cluster": {"server": "https://127.0.0.1:1"}}],
        "contexts": [{"name": "a", "context": {"cluster": "a", "user": "u"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "current-context": "a",
    }
    extra = {"kube_config": json.dumps(kubeconfig), "namespace": "default"}
    for conn_id in ("K8S_EU_A", "K8S_CN_A"):
        monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id}", json.dumps({"conn_type": "kubernetes", "extra": extra}))
    monkeypatch.setenv("AIRFLOW__FEDSCHED__PLACEMENT_LEDGER", "False")


@pytest.mark.usefixtures("members")
def test_a_pod_name_kubernetes_refuses_is_named_before_anything_is_reserved(
    operators: dict[str, Any],
) -> None:
    """The pod's name is known once the pod is built from a member's connection: still before the
    placement."""
    for operator_class in operators.values():
        _refused_before_anything(operator_class, {"name": "My Task"}, "name")


BIG = "x" * (5 * 2**20)


@pytest.mark.usefixtures("members")
@pytest.mark.parametrize(
    "arguments",
    [{"arguments": [BIG]}, {"cmds": ["sh", "-c", BIG]}, {"env_vars": {"INPUT": BIG}}],
    ids=["arguments", "cmds", "env_vars"],
)
def test_a_pod_larger_than_kubernetes_stores_is_refused_before_anything_is_reserved(
    operators: dict[str, Any], arguments: dict[str, Any]
) -> None:
    """A 50 MB annotation was a raw 413 after the placement; so was any other part of the pod."""
    for operator_class in operators.values():
        _refused_before_anything(operator_class, arguments, "pod")


@contextlib.contextmanager
def at_most(seconds: int) -> Iterator[None]:
    """Fail instead of hanging the suite if a read blocks (a regression would otherwise never end)."""

    def expired(*_: Any) -> None:
        raise TimeoutError(f"still blocked after {seconds}s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def test_a_named_pipe_as_a_state_file_is_refused_not_waited_for(tmp_path: Path) -> None:
    sim, testbed = tmp_path / "sim", tmp_path / "testbed"
    sim.mkdir()
    testbed.mkdir()
    (sim / "kubeconfig").write_text("apiVersion: v1\nclusters: []\ncontexts: []\nusers: []\n")
    os.mkfifo(sim / "sim.json")
    os.mkfifo(testbed / "testbed.json")
    commands = [
        (["sim", "status", "--state-dir", str(sim)], "sim.json"),
        (["sim", "fault", "--state-dir", str(sim), "eu-a", "latency", "seconds=1"], "sim.json"),
        (["testbed", "status", "--state-dir", str(testbed)], "--state-dir"),
        (["testbed", "down", "--state-dir", str(testbed)], "--state-dir"),
    ]
    for argv, culprit in commands:
        with at_most(10):
            check(*run_bounded(lambda argv=argv: cli_outcome(argv)), "exit", 2, culprit)


def test_out_a_folder_is_refused_before_any_work(tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC)
    for argv in (
        ["snapshot", "--federation", str(spec), "--out", str(tmp_path)],
        ["history", "export", "--out", str(tmp_path)],
        ["history", "export", "--out", str(tmp_path / "missing" / "pods.csv")],
    ):
        outcome = run_bounded(lambda argv=argv: cli_outcome(argv))
        check(*outcome, "exit", 2, f"fedsched {argv[0]}: error: --out ")


def test_out_a_named_pipe_nothing_reads_is_refused_not_waited_for(tmp_path: Path) -> None:
    from airflow_provider_fedsched.cli._common import UsageError, open_output

    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)
    with at_most(10):
        outcome = run_bounded(lambda: raised(lambda: open_output(str(pipe), "--out"), UsageError))
    check(*outcome, "raised", "UsageError", "--out")
    assert "nothing reads" in outcome[0].message
    # With a reader, the same pipe is written as a file is.
    reader = os.open(pipe, os.O_RDONLY | os.O_NONBLOCK)
    try:
        with open_output(str(pipe), "--out") as handle:
            handle.write("pods\n")
        assert os.read(reader, 100) == b"pods\n"
    finally:
        os.close(reader)


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("--federation", "spec.yaml"),
        ("--pods", "pods.csv"),
        ("--copies", "5"),
        ("--window", "60"),
        ("--clusters", "2"),
    ],
)
def test_replay_options_a_scenario_would_ignore_are_refused(option: str, value: str) -> None:
    """With ``--scenario`` they were silently ignored: a replay that looked shaped as asked."""
    argv = ["replay", "--scenario", "seed-3x20", "--no-progress", "--json", option, value]
    check(*run_bounded(lambda: cli_outcome(argv)), "exit", 2, f"fedsched replay: error: {option}: ")
