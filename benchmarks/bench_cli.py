"""Start-up cost of the ``fedsched`` command: each verb's wall time as a fresh process, against baselines
measured in the same run.

Run: ``.venv/bin/python benchmarks/bench_cli.py [--runs N]``

Baselines: ``python -c pass`` (the interpreter alone) and ``airflow version`` (what importing Airflow
costs). Measured, each the median of ``--runs`` fresh processes:

- Airflow's plugins loaded, as every Airflow process that loads them does (a task's, the scheduler's),
  against importing Airflow's plugin manager alone;
- ``fedsched place`` from the example spec and snapshot file, as a table and as JSON;
- ``fedsched snapshot`` of 4 simulated clusters (``fedsched sim up`` in its own process, on loopback),
  through the kubeconfig the simulator writes, and through Airflow connections (``AIRFLOW_CONN_*``
  variables), which needs Airflow.

Each command runs in two states, both with bytecode caches kept in this run's temporary directory
(``PYTHONPYCACHEPREFIX``), so nothing outside it is written: *warm*, after one unmeasured run has written
the caches (as after ``pip install`` or ``uv sync --compile-bytecode``, or any earlier run), and *cold*,
with no cache and none written (``PYTHONDONTWRITEBYTECODE=1``: every imported module is compiled from
source, as in a venv installed without bytecode on a machine that forbids writing it). Wall time is what a
user waits; CPU time (user + system of the process) is what the start-up costs whatever else the machine
is doing.

Goals (issue 14), warm: ``place`` under 1 s, ``snapshot`` of 4 local clusters under 1.5 s.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "example_dags"
BIN = Path(sys.executable).parent
CLUSTERS = 4
GOALS = {"place": 1.0, "snapshot": 1.5}
LOAD_PLUGINS = """
from airflow import plugins_manager
plugins_manager.ensure_plugins_loaded()
assert "fedsched" in [plugin.name for plugin in plugins_manager._get_plugins()[0]]
"""
"""What each Airflow process that loads plugins (a task's, the scheduler's) does with ours."""


def sim_config() -> dict[str, object]:
    pools = [{"name": "cpu", "count": 3, "cpu": "8", "memory": "32Gi"}]
    return {
        "clusters": [
            {"name": f"local-{index}", "region": f"local-{index}", "node_pools": pools}
            for index in range(CLUSTERS)
        ]
    }


@contextmanager
def simulator(workdir: Path) -> Iterator[Path]:
    """``fedsched sim up`` with 4 clusters in its own process; yields its state directory."""
    config = workdir / "sim.yaml"
    config.write_text(yaml.safe_dump(sim_config()))
    state = workdir / "state"
    process = subprocess.Popen(
        [str(BIN / "fedsched"), "sim", "up", "--config", str(config), "--state-dir", str(state)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert process.stdout is not None
        deadline = time.monotonic() + 120
        for line in process.stdout:
            if line.startswith("sim ready"):
                break
            if time.monotonic() > deadline:
                raise RuntimeError("the simulator did not start within 120 s")
        else:
            raise RuntimeError(f"the simulator exited ({process.wait()})")
        yield state
    finally:
        process.terminate()
        process.wait(timeout=30)


def timed(argv: list[str], env: Mapping[str, str], runs: int) -> tuple[float, float]:
    """Median (wall, CPU) seconds of ``argv`` as a fresh process; fails loudly if the command fails."""
    walls, cpus = [], []
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        result = subprocess.run(argv, env=dict(env), capture_output=True, text=True)
        walls.append(time.perf_counter() - start)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
        if result.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} exited {result.returncode}: {result.stderr[-2000:]}")
    return statistics.median(walls), statistics.median(cpus)


def states(workdir: Path, env: Mapping[str, str]) -> dict[str, dict[str, str]]:
    """The warm and the cold environment (see the module docstring)."""
    base = {k: v for k, v in env.items() if k not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX")}
    return {
        "warm": {**base, "PYTHONPYCACHEPREFIX": str(workdir / "pycache")},
        "cold": {**base, "PYTHONPYCACHEPREFIX": str(workdir / "no-pycache"), "PYTHONDONTWRITEBYTECODE": "1"},
    }


def measure(
    argv: list[str], envs: Mapping[str, Mapping[str, str]], runs: int
) -> dict[str, tuple[float, float]]:
    subprocess.run(argv, env=dict(envs["warm"]), capture_output=True, check=True)  # writes the caches
    return {state: timed(argv, env, runs) for state, env in envs.items()}


def connection_env(state: Path) -> dict[str, str]:
    """Each member as an ``AIRFLOW_CONN_*`` variable pointing at its kubeconfig context (the sim's own)."""
    env: dict[str, str] = {}
    kubeconfig = state / "kubeconfig"
    for cluster in yaml.safe_load((state / "federation.yaml").read_text())["clusters"]:
        extra = {"kube_config_path": str(kubeconfig), "cluster_context": cluster["name"]}
        env[f"AIRFLOW_CONN_{cluster['conn_id'].upper()}"] = json.dumps(
            {"conn_type": "kubernetes", "extra": extra}
        )
    return env


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--runs", type=int, default=3, help="fresh processes per command and state (default 3)"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="fedsched-bench-cli-") as tmp:
        workdir = Path(tmp)
        home = workdir / "airflow"
        home.mkdir()
        envs = states(
            workdir,
            {
                **os.environ,
                "AIRFLOW_HOME": str(home),
                "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
                "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
            },
        )
        fedsched = str(BIN / "fedsched")
        place = [fedsched, "place", "--federation", str(EXAMPLES / "federation.yaml")]
        place += ["--snapshots", str(EXAMPLES / "snapshots.yaml"), "--cpu", "2", "--memory", "4Gi"]
        rows: list[tuple[str, str, dict[str, tuple[float, float]]]] = [
            ("baseline", "`python -c pass`", measure([sys.executable, "-c", "pass"], envs, args.runs)),
            ("baseline", "`airflow version`", measure([str(BIN / "airflow"), "version"], envs, args.runs)),
            (
                "baseline",
                "Airflow's plugin manager imported",
                measure([sys.executable, "-c", "import airflow.plugins_manager"], envs, args.runs),
            ),
            (
                "plugins",
                "Airflow's plugins loaded, the Federation plugin among them (every Airflow process)",
                measure([sys.executable, "-c", LOAD_PLUGINS], envs, args.runs),
            ),
            ("place", "`fedsched place` (table)", measure(place, envs, args.runs)),
            ("place", "`fedsched place --json`", measure([*place, "--json"], envs, args.runs)),
        ]
        with simulator(workdir) as state:
            snapshot = [fedsched, "snapshot", "--federation", str(state / "federation.yaml")]
            kubeconfig = [*snapshot, "--kubeconfig", str(state / "kubeconfig")]
            rows.append(
                (
                    "snapshot",
                    f"`fedsched snapshot --kubeconfig` ({CLUSTERS} clusters)",
                    measure(kubeconfig, envs, args.runs),
                )
            )
            with_connections = {name: {**env, **connection_env(state)} for name, env in envs.items()}
            rows.append(
                (
                    "connections",
                    f"`fedsched snapshot` through Airflow connections ({CLUSTERS} clusters)",
                    measure(snapshot, with_connections, args.runs),
                )
            )
    interpreter = rows[0][2]["warm"][0]
    load = ", ".join(f"{value:.1f}" for value in os.getloadavg())
    print(
        f"Command: `python benchmarks/bench_cli.py --runs {args.runs}` (Python {platform.python_version()}, "
        f"{os.cpu_count()} CPUs, load average {load} at the end; median of {args.runs} fresh processes per "
        "command and state)\n"
    )
    print(
        "| command | warm: wall | warm: CPU | warm wall vs `python -c pass` | cold: wall | cold: CPU "
        "| goal (warm wall) |"
    )
    print("|---|---:|---:|---:|---:|---:|---|")
    verdicts = []
    for kind, label, result in rows:
        (wall, cpu), (cold_wall, cold_cpu) = result["warm"], result["cold"]
        goal = GOALS.get(kind)
        verdict = "" if goal is None else f"< {goal:g} s: {'met' if wall < goal else 'MISSED'}"
        if goal is not None:
            verdicts.append(wall < goal)
        print(
            f"| {label} | {wall:.2f} s | {cpu:.2f} s | {wall / interpreter:.0f}x | {cold_wall:.2f} s | "
            f"{cold_cpu:.2f} s | {verdict} |"
        )
    return 0 if all(verdicts) else 1


if __name__ == "__main__":
    sys.exit(main())
