"""Reservations across worker processes: how many tasks land on a cluster with room for three?

Run: ``.venv/bin/python benchmarks/bench_reservations.py [--quick]``

Real processes (one Python process per worker, as LocalExecutor and Celery run tasks), real HTTP, a
simulated cluster with room for 3 one-cpu pods, shared state in Airflow Variables (SQLite). 12 workers
start their placement at the same instant, all from the same snapshot. Measured in the same run:

* reservations in Variables only (``[fedsched] placement_ledger = False``): the baseline; Variables have
  no compare-and-set, so workers that read "room for 3" at the same moment all place;
* the placement ledger (a Lease in the cluster, compare-and-set on its resourceVersion).

The figure is placed tasks per free slot (1.0 = never over-placed) and the p50 time of ``hook.place``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SLOTS = 3
WORKERS = 12
PLACE = """
import json, sys, time
from pathlib import Path
from airflow_provider_fedsched.federation.request import TaskRequest
from airflow_provider_fedsched.hooks.federation import FederationHook
from airflow_provider_fedsched.state import AirflowVariableStateBackend
hook = FederationHook(sys.argv[1], kubeconfig=sys.argv[2], state=AirflowVariableStateBackend())
request = TaskRequest(resources={"cpu": 1000, "memory": 2**30})
hook.spec, hook.state, hook.access("solo")
Path(sys.argv[4]).touch()
while not Path(sys.argv[3]).exists():
    time.sleep(0.002)
started = time.monotonic()
decision = hook.place(request, sys.argv[5])
print(json.dumps({"outcome": decision.outcome, "seconds": time.monotonic() - started}))
"""


def airflow_home() -> None:
    home = Path(tempfile.mkdtemp(prefix="fedsched-bench-res-"))
    os.environ.update(
        {
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
            "AIRFLOW__LOGGING__LOGGING_LEVEL": "ERROR",
        }
    )
    from airflow.utils import db

    db.initdb()


def round_of(fed: Any, workdir: Path, ledger: bool) -> tuple[int, list[float]]:
    import yaml

    from airflow_provider_fedsched.hooks.federation import FederationHook
    from airflow_provider_fedsched.state import AirflowVariableStateBackend

    spec = yaml.safe_load((fed.state_dir / "federation.yaml").read_text())
    spec["name"] = f"bench-{uuid.uuid4().hex[:8]}"
    spec["policy"]["snapshot_ttl_seconds"] = 600
    path = workdir / f"{spec['name']}.yaml"
    path.write_text(yaml.safe_dump(spec))
    FederationHook(path, kubeconfig=fed.kubeconfig_path, state=AirflowVariableStateBackend()).collect()
    go = workdir / f"go-{spec['name']}"
    env = {**os.environ, "AIRFLOW__FEDSCHED__PLACEMENT_LEDGER": str(ledger)}
    workers = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                PLACE,
                str(path),
                str(fed.kubeconfig_path),
                str(go),
                str(workdir / f"ready-{spec['name']}-{i}"),
                f"p-{i}",
            ],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        for i in range(WORKERS)
    ]
    while not all((workdir / f"ready-{spec['name']}-{i}").exists() for i in range(WORKERS)):
        time.sleep(0.05)
    go.touch()
    results = [json.loads(w.communicate(timeout=300)[0].strip().splitlines()[-1]) for w in workers]
    return sum(r["outcome"] == "placed" for r in results), [r["seconds"] for r in results]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    rounds = 2 if args.quick else 5
    airflow_home()
    from airflow_provider_fedsched.sim import SimFederation

    config = {
        "time_scale": 0.1,
        "clusters": [
            {
                "name": "solo",
                "region": "r1",
                "prices": {"cpu_hour": 0.01, "memory_gib_hour": 0.001},
                "node_pools": [{"name": "p", "count": SLOTS, "cpu": "1", "memory": "4Gi"}],
            }
        ],
    }
    workdir = Path(tempfile.mkdtemp(prefix="fedsched-bench-res-spec-"))
    found: dict[bool, tuple[list[int], list[float]]] = {False: ([], []), True: ([], [])}
    with SimFederation(config) as fed:
        for _ in range(rounds):
            for ledger in (False, True):
                placed, seconds = round_of(fed, workdir, ledger)
                found[ledger][0].append(placed)
                found[ledger][1].extend(seconds)
    print(f"### Reservations across {WORKERS} worker processes, a cluster with room for {SLOTS}\n")
    print("| reservations kept in | placed per free slot (median, worst) | hook.place p50 | target |")
    print("|---|---:|---:|---:|")
    for ledger, label, target in (
        (False, "Airflow Variables only (baseline)", "-"),
        (True, "the cluster's ledger", "1.0"),
    ):
        placed, seconds = found[ledger]
        ratios = [p / SLOTS for p in placed]
        print(
            f"| {label} | {statistics.median(ratios):.2f}, {max(ratios):.2f} "
            f"| {statistics.median(seconds) * 1000:.0f} ms | {target} |"
        )
    print(f"\n{rounds} rounds; `.venv/bin/python benchmarks/bench_reservations.py`")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
