"""Fuzzing every ``fedsched`` verb's options (hypothesis), beyond ``replay`` (``test_fuzz_readers.py``).

Each example is one verb with a few of its options drawn from pools of good and hostile values (numbers
that are NaN, infinite, huge, negative or booleans; quantities, durations and timestamps out of range;
names and label pairs Kubernetes refuses; files that are missing, folders, devices, FIFOs, malformed or
names too long). Whatever is drawn, the command ends as an answer (0, or 3 for a placement that waits) or a
refusal: exit 2 with one last line ``fedsched VERB...: error: ...`` naming an option, argument or file it
was given; never a traceback, under 2 s and bounded memory (``harness``). ``--json`` output is one JSON
document. The verbs that run until stopped (``sim up``, ``testbed up``) always get one value they refuse
before starting anything.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.hostile.harness import MEMORY_LIMIT, TIME_LIMIT, Outcome, cli_outcome, run_bounded
from tests.hostile.test_files_and_cli import SNAPSHOTS, SPEC

FUZZ = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
NUMBERS = ["1", "2", "0", "-1", "1.5", "nan", "inf", "-inf", "1e308", "9" * 4000, "true", "x", "", "0x10"]
QUANTITIES = ["1", "500m", "8Gi", "0", "-1", "1e999999999", "nan", "true", "", "9" * 4000, "1.5.5", "8 Gi"]
DURATIONS = ["1h", "90m", "3600", "0", "-1", "nan", "inf", "1e308", "1h-1m", "true", "", "99999999d", "1x"]
TIMES = ["2025-06-01T08:00:00Z", "0001-01-01", "9999-12-31T23:59:59", "x", "", "2025-13-45", "nan", "1e308"]
NAMES = ["eu-a", "cn-a", "nope", "", "x" * 300, "a b", "é", "eu-customers", "eu-west-1"]
PAIRS = [
    "a=b",
    "=b",
    "a=",
    "a",
    "a==b",
    "x" * 70 + "=y",
    "gpu=" + "x" * 70,
    "Bad/key=v",
    "eu-a=nan",
    "eu-a=0.5",
    "eu-a=-1",
    "eu-a=true",
    "eu-a=1e308",
    "cost=nan",
    "cost=2",
    "nvidia.com/gpu=-1",
    "nvidia.com/gpu=1",
]
TOLERATIONS = ["a=b:NoSchedule", "a:NoSchedule", "a=b:Never", ":NoSchedule", "x", "a=b", "a b=c:NoSchedule"]
FLAG = [""]  # an option that takes no value


@pytest.fixture(scope="module")
def files() -> Iterator[dict[str, str]]:
    """Good and hostile files and folders, by role."""
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        spec = yaml.safe_load(SPEC)
        spec["tenants"] = [{"name": "team-a", "quota": {"cpu": "8"}, "budget": {"max_cost": 10}}]
        (root / "spec.yaml").write_text(yaml.safe_dump(spec))
        (root / "snapshots.yaml").write_text(SNAPSHOTS)
        (root / "malformed.yaml").write_text("clusters: [\n")
        (root / "empty").write_text("")
        (root / "dags").mkdir()
        (root / "state").mkdir()
        os.mkfifo(root / "fifo")
        yield {
            "spec": str(root / "spec.yaml"),
            "snapshots": str(root / "snapshots.yaml"),
            "malformed": str(root / "malformed.yaml"),
            "empty": str(root / "empty"),
            "folder": str(root / "dags"),
            "state": str(root / "state"),
            "fifo": str(root / "fifo"),
            "missing": str(root / "missing.yaml"),
            "under a file": str(root / "empty" / "x.yaml"),
            "long": str(root / ("x" * 300)),  # a name longer than a file system takes
            "out": str(root / "out.yaml"),
            "devnull": "/dev/null",
            "devzero": "/dev/zero",
        }


def _inputs(files: dict[str, str], *good: str) -> list[str]:
    """Paths to read: the good ones named, then every hostile kind."""
    hostile = [
        "malformed",
        "empty",
        "folder",
        "fifo",
        "missing",
        "under a file",
        "long",
        "devnull",
        "devzero",
    ]
    return [files[name] for name in (*good, *hostile)]


def verbs(files: dict[str, str]) -> dict[str, tuple[list[str], dict[str, list[str]]]]:
    """Each verb: the command line it starts from (good values), and its options with their pools (an
    option given again replaces the starting value, as argparse keeps the last)."""
    spec, snapshots, state = files["spec"], files["snapshots"], files["state"]
    kubeconfigs = _inputs(files)  # never a usable one: the fuzz must not wait for a cluster
    outputs = [files["out"], files["folder"], files["under a file"], files["long"], files["fifo"]]
    states = [state, files["empty"], files["missing"], files["devnull"], files["under a file"], files["long"]]
    place = {
        "--federation": _inputs(files, "spec"),
        "--snapshots": _inputs(files, "snapshots"),
        "--live": FLAG,
        "--kubeconfig": kubeconfigs,
        "--timeout": NUMBERS,
        "--cpu": QUANTITIES,
        "--memory": QUANTITIES,
        "--gpu": QUANTITIES,
        "--ephemeral-storage": QUANTITIES,
        "--resource": PAIRS,
        "--dataset": NAMES,
        "--node-selector": PAIRS,
        "--cluster-selector": PAIRS,
        "--toleration": TOLERATIONS,
        "--prefer-region": NAMES,
        "--prefer-group": NAMES,
        "--cluster": NAMES,
        "--namespace": ["default", "Bad_NS", "", "x" * 70, "kube-system"],
        "--duration": DURATIONS,
        "--cooldown": NAMES,
        "--forecast": PAIRS,
        "--weight": PAIRS,
        "--now": TIMES,
        "--json": FLAG,
        "--width": NUMBERS,
    }
    return {
        "place": (["place", "--federation", spec, "--snapshots", snapshots, "--now", TIMES[0]], place),
        "snapshot": (
            ["snapshot", "--federation", spec],
            {
                "--federation": _inputs(files, "spec"),
                "--kubeconfig": kubeconfigs,
                "--timeout": NUMBERS,
                "--json": FLAG,
                "--out": outputs,
            },
        ),
        "plan": (
            ["plan", "--dry-run", "--federation", spec, "--dags-folder", files["folder"]],
            {
                "--dags-folder": [
                    files["folder"],
                    files["spec"],
                    files["devzero"],
                    files["fifo"],
                    files["missing"],
                ],
                "--federation": _inputs(files, "spec"),
                "--kubeconfig": kubeconfigs,
                "--timeout": NUMBERS,
                "--horizon": DURATIONS,
                "--runs": NUMBERS,
                "--valid-for": DURATIONS,
                "--fallbacks": NUMBERS,
                "--json": FLAG,
            },
        ),
        "tenants": (
            ["tenants", "--federation", spec, "--snapshots", snapshots],
            {
                "--federation": _inputs(files, "spec"),
                "--snapshots": _inputs(files, "snapshots"),
                "--json": FLAG,
            },
        ),
        "cost": (
            ["cost", "--federation", spec],
            {
                "--federation": _inputs(files, "spec"),
                "--since": DURATIONS,
                "--by": ["tenant", "dag", "cluster", "day", "x", "", "tenant,dag"],
                "--json": FLAG,
            },
        ),
        "history export": (
            ["history", "export", "--out", files["out"]],
            {"--out": outputs, "--since": TIMES, "--until": TIMES, "--dag-id": NAMES},
        ),
        "audit": (
            ["audit", "--federation", spec],
            {
                "--federation": _inputs(files, "spec"),
                "--since": TIMES,
                "--until": TIMES,
                "--dataset": NAMES,
                "--json": FLAG,
                "--csv": FLAG,
            },
        ),
        "sim status": (["sim", "status", "--state-dir", state], {"--state-dir": states, "--json": FLAG}),
        "sim fault": (
            ["sim", "fault", "--state-dir", state],
            {
                "--state-dir": states,
                "cluster": NAMES,
                "kind": ["latency", "down", "fail", "bogus", ""],
                "args": PAIRS,
            },
        ),
        "sim up": (
            ["sim", "up", "--state-dir", state],
            {
                "--config": _inputs(files),
                "--time-scale": ["nan", "inf", "0", "-1", "1e308", "x", "true", "101"],
            },
        ),
        "testbed status": (
            ["testbed", "status", "--state-dir", state],
            {"--state-dir": states, "--json": FLAG},
        ),
        "testbed fault": (
            ["testbed", "fault", "--state-dir", state],
            {
                "--state-dir": states,
                "--timeout": NUMBERS,
                "member": NAMES,
                "kind": ["down", "pause-apiserver", "node-not-ready", "bogus", ""],
                "args": PAIRS,
            },
        ),
        "testbed down": (
            ["testbed", "down", "--state-dir", state],
            {"--state-dir": states, "--timeout": NUMBERS},
        ),
        "testbed up": (
            ["testbed", "up", "--state-dir", state],
            {
                "--config": _inputs(files),
                "--time-scale": ["nan", "inf", "0", "-1", "1e308", "x", "true", "101"],
            },
        ),
    }


POSITIONALS = ("cluster", "member", "kind", "args")
ALWAYS_REFUSED = {"sim up": "--time-scale", "testbed up": "--time-scale"}
"""Verbs that run until stopped: this option always comes from its pool, which holds only refused values."""


def command(files: dict[str, str], verb: str, chosen: dict[str, int]) -> tuple[list[str], list[str]]:
    """The command line for ``verb`` with the ``chosen`` options, and what a refusal may name."""
    argv, options = verbs(files)[verb]
    argv = list(argv)
    chosen = {option: pick for option, pick in chosen.items() if option in options}
    if verb in ALWAYS_REFUSED:
        chosen.setdefault(ALWAYS_REFUSED[verb], 0)
    positionals: dict[str, str] = {}
    if "kind" in options:  # a fault: its member and kind are required
        positionals = {
            name: options[name][chosen.get(name, 0) % len(options[name])]
            for name in POSITIONALS[:3]
            if name in options
        }
    culprits = [*positionals.values(), "metadata database"]  # the latter before `airflow db migrate`
    for option, pick in chosen.items():
        value = options[option][pick % len(options[option])]
        if option in POSITIONALS:
            continue
        argv += [option] if value == "" and options[option] is FLAG else [option, value]
        if os.sep in value:
            culprits.append(value)
    if positionals:
        argv += [value for name, value in positionals.items() if name != "args"]
        if "args" in chosen:
            argv.append(options["args"][chosen["args"] % len(options["args"])])
            culprits.append("fault argument")
    return argv, culprits + [item for item in argv if item.startswith("--")]


def _bounded(action: Any) -> Outcome:
    outcome, elapsed, peak = run_bounded(action)
    assert "Traceback" not in outcome.message, outcome.message
    assert elapsed < TIME_LIMIT, f"took {elapsed:.2f}s: {outcome.message[-500:]}"
    assert peak < MEMORY_LIMIT, f"raised the peak memory by {peak / 2**20:.0f} MiB"
    return outcome


FILE_ROLES = ("spec", "snapshots", "malformed", "empty", "folder", "state", "fifo", "missing", "under a file")
FILE_ROLES += ("long", "out", "devnull", "devzero")
SHAPES = verbs(dict.fromkeys(FILE_ROLES, ""))
"""Each verb's options (the values are paths only once the files exist)."""
VERBS = sorted(SHAPES)


@pytest.fixture(scope="module")
def warmed(files: dict[str, str]) -> dict[str, str]:
    """Each verb run once first: what a verb imports the first time (Airflow, the Kubernetes clients) is
    paid once per process, not by a bad input."""
    for verb in VERBS:
        cli_outcome(command(files, verb, {})[0])
    return files


@FUZZ
@given(st.data())
def test_fuzzed_command_lines(warmed: dict[str, str], data: st.DataObject) -> None:
    verb = data.draw(st.sampled_from(VERBS), label="verb")
    options = sorted(SHAPES[verb][1])
    chosen = data.draw(
        st.dictionaries(st.sampled_from(options), st.integers(0, 100), max_size=4), label="options"
    )
    argv, culprits = command(warmed, verb, chosen)
    outcome = _bounded(lambda: cli_outcome(argv))
    if outcome.value in (0, 3) and verb not in ALWAYS_REFUSED:
        if "--json" in argv:
            json.loads(outcome.message[outcome.message.index("{") :])
        return
    assert outcome.value == 2, (argv, outcome.message[-2000:])
    line = outcome.message.strip().splitlines()[-1]
    assert line.startswith(f"fedsched {argv[0]}"), (argv, line)
    assert ": error: " in line, (argv, line)
    assert any(culprit in line for culprit in culprits), (argv, culprits, line)
