"""Placement throughput across worker processes: N workers decide and reserve 1,000 tasks over 100 clusters.

Run: ``.venv-soak/bin/python benchmarks/bench_throughput.py [--quick]`` (``make soak-install`` first: the
soak's virtualenv has the PostgreSQL driver).

* Shared state: Airflow Variables in the metadata database on PostgreSQL, a private server from Debian's
  packages on loopback, started as the soak starts it (``soak/services.py``); each worker reads and writes
  the database as Airflow's own processes do outside the Task SDK.
* Clusters: 100 simulated clusters in this process (real HTTP on loopback), each with room for
  ``ROOM`` pods of the tasks' shape (1 cpu, 2 GiB) on two nodes, prices rising with the cluster's number
  (the cheapest are everyone's first choice). Their placement ledgers (one Lease each, compare-and-set on
  its resourceVersion) hold what the workers reserve. Snapshots are collected once (TTL 600 s).
* Per N in 1, 4, 16: a fresh federation name (nothing carries over), N worker processes started and
  ready, then at one instant each places its share of the 1,000 tasks one after another with
  ``FederationHook.place`` (decide on shared state, hold in the cluster's ledger and in shared state).

Reported per N: placements per second (placed tasks over the wall time from the start to the last
worker's end; N=1, measured in the same run, is the baseline), the p50/p99 of ``hook.place``, how many
tasks found no room (the federation has room for fewer than 1,000), and **over-commitment**: per cluster,
pods placed beyond its room (computed from its snapshot), summed; it must be 0. Each placement is also
checked against the ledgers: every placed task must be held in its cluster's ledger.
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

CLUSTERS = 100
TASKS = 1000
ROOM = 8
"""Pods of the tasks' shape each cluster holds (two nodes of 4 cpu): 800 in all, for 1,000 tasks."""
POD = {"cpu": 1000, "memory": 2 * 2**30}

WORKER = """
import json, sys, time
from pathlib import Path
from airflow_provider_fedsched.federation.request import TaskRequest
from airflow_provider_fedsched.hooks.federation import FederationHook
from airflow_provider_fedsched.state import AirflowVariableStateBackend
spec, kubeconfig, go, ready, worker, workers, tasks = sys.argv[1:8]
worker, workers, tasks = int(worker), int(workers), int(tasks)
hook = FederationHook(spec, kubeconfig=kubeconfig, state=AirflowVariableStateBackend())
request = TaskRequest(resources=json.loads(sys.argv[8]))
# Warm, as a worker that has placed a task before: connections resolved, snapshots decoded, the columnar
# index built (a decision without a reservation), the ledger's Kubernetes client loaded.
for cluster in hook.spec.clusters:
    hook.access(cluster.name)
hook.decide(request)
import kubernetes.client
Path(ready).touch()
while not Path(go).exists():
    time.sleep(0.001)
results = []
cpu = time.process_time()
for task in range(worker, tasks, workers):
    started = time.perf_counter()
    decision = hook.place(request, f"t{task:05d}")
    results.append((task, decision.outcome, decision.cluster, time.perf_counter() - started))
print(json.dumps({"results": results, "ended": time.time(), "cpu": time.process_time() - cpu}))
"""


def start_airflow(postgres: Any) -> dict[str, str]:
    """A throw-away AIRFLOW_HOME on ``postgres``, its metadata database migrated; the environment."""
    home = Path(tempfile.mkdtemp(prefix="fedsched-bench-tp-"))
    env = {
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": postgres.sqlalchemy_url,
        "AIRFLOW__LOGGING__LOGGING_LEVEL": "ERROR",
        "AIRFLOW__FEDSCHED__PLACEMENT_LEDGER": "True",
    }
    os.environ.update(env)
    from airflow.utils import db

    db.initdb()
    return env


def sim_config() -> dict[str, Any]:
    return {
        "time_scale": 1.0,
        "clusters": [
            {
                "name": f"c{i:03d}",
                "region": f"r{i % 5}",
                "prices": {"cpu_hour": round(0.01 + 0.0005 * i, 4), "memory_gib_hour": 0.001},
                "node_pools": [{"name": "p", "count": 2, "cpu": "4", "memory": "16Gi"}],
            }
            for i in range(CLUSTERS)
        ],
    }


def room(snapshot: Any) -> int:
    """Pods of the tasks' shape the cluster's schedulable nodes hold, node by node."""
    return sum(
        min(node.free.get(name, 0) // amount for name, amount in POD.items())
        for node in snapshot.nodes
        if node.schedulable
    )


def postgres_cpu() -> float:
    """CPU seconds used so far by the PostgreSQL server's processes (its backends come and go)."""
    import psutil

    total = 0.0
    for process in psutil.process_iter(["name", "cpu_times"]):
        times = process.info["cpu_times"]
        if process.info["name"] in ("postgres", "postmaster") and times is not None:
            total += times.user + times.system
            # The server's main process reaps its backends: theirs is in its children's times.
            if process.parent() is None or process.parent().name() not in ("postgres", "postmaster"):
                total += times.children_user + times.children_system
    return total


def one_round(fed: Any, workdir: Path, workers: int, tasks: int) -> dict[str, Any]:
    import yaml

    from airflow_provider_fedsched.hooks.federation import FederationHook
    from airflow_provider_fedsched.hooks.ledgers import held
    from airflow_provider_fedsched.state import AirflowVariableStateBackend

    spec = yaml.safe_load((fed.state_dir / "federation.yaml").read_text())
    spec["name"] = f"tp-{uuid.uuid4().hex[:8]}"
    spec["policy"]["snapshot_ttl_seconds"] = 600
    path = workdir / f"{spec['name']}.yaml"
    path.write_text(yaml.safe_dump(spec))
    # A long timeout: the simulated clusters answer from this very process, busy collecting 100 of them.
    hook = FederationHook(
        path, kubeconfig=fed.kubeconfig_path, state=AirflowVariableStateBackend(), snapshot_timeout=60
    )
    snapshots = hook.collect()
    missing = sorted(name for name, snapshot in snapshots.items() if room(snapshot) != ROOM)
    if missing:
        raise RuntimeError(f"snapshots without the configured room: {missing}")
    rooms = {name: ROOM for name in snapshots}  # the clusters' true room: nothing else runs there
    go = workdir / f"go-{spec['name']}"
    processes = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                WORKER,
                str(path),
                str(fed.kubeconfig_path),
                str(go),
                str(workdir / f"ready-{spec['name']}-{i}"),
                str(i),
                str(workers),
                str(tasks),
                json.dumps(POD),
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        for i in range(workers)
    ]
    while not all((workdir / f"ready-{spec['name']}-{i}").exists() for i in range(workers)):
        if any(p.poll() is not None for p in processes):
            raise RuntimeError("a worker exited before it was ready")
        time.sleep(0.05)
    load_before = os.getloadavg()
    database_cpu = postgres_cpu()
    clusters_cpu = time.process_time()  # this process: the simulated clusters' API servers
    started = time.time()
    go.touch()
    outputs = [json.loads(p.communicate(timeout=1800)[0].strip().splitlines()[-1]) for p in processes]
    wall = max(o["ended"] for o in outputs) - started
    clusters_cpu = time.process_time() - clusters_cpu
    database_cpu = postgres_cpu() - database_cpu
    results = [r for o in outputs for r in o["results"]]
    placed: dict[str, list[str]] = {}
    for task, outcome, cluster, _ in results:
        if outcome == "placed":
            placed.setdefault(cluster, []).append(f"t{task:05d}")
    over = sum(max(0, len(ids) - rooms[cluster]) for cluster, ids in placed.items())
    ledgers = {name: held(hook, name) for name in rooms}
    unheld = sum(1 for cluster, ids in placed.items() for pid in ids if pid not in ledgers[cluster])
    latencies = sorted(r[3] for r in results)
    count = sum(len(ids) for ids in placed.values())
    return {
        "workers": workers,
        "tasks": len(results),
        "placed": count,
        "waited": sum(1 for r in results if r[1] == "wait"),
        "room": sum(rooms.values()),
        "wall_s": wall,
        "per_second": count / wall,
        "p50_ms": statistics.median(latencies) * 1000,
        "p99_ms": latencies[min(len(latencies) - 1, round(0.99 * (len(latencies) - 1)))] * 1000,
        "cpu_ms": {
            "workers": sum(o["cpu"] for o in outputs) / len(results) * 1000,
            "clusters": clusters_cpu / len(results) * 1000,
            "database": database_cpu / len(results) * 1000,
        },
        "over_commitment": over,
        "not_in_ledger": unheld,
        "load": f"{' '.join(f'{v:.1f}' for v in load_before)} -> "
        f"{' '.join(f'{v:.1f}' for v in os.getloadavg())}",
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="200 tasks, 1 and 4 workers")
    parser.add_argument("--workers", default="1,4,16")
    args = parser.parse_args()
    tasks = 200 if args.quick else TASKS
    counts = [1, 4] if args.quick else [int(n) for n in args.workers.split(",")]
    from airflow_provider_fedsched.sim import SimFederation
    from soak.services import postgres

    started = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix="fedsched-bench-tp-work-"))
    rows = []
    with postgres(work / "logs") as database:
        start_airflow(database)
        with SimFederation(sim_config()) as fed:
            for workers in counts:
                row = one_round(fed, work, workers, tasks)
                rows.append(row)
                print(
                    f"throughput: workers={workers} tasks={row['tasks']} placed={row['placed']} "
                    f"placements_per_s={row['per_second']:.1f} p50_ms={row['p50_ms']:.1f} "
                    f"p99_ms={row['p99_ms']:.1f} over_commitment={row['over_commitment']} "
                    f"not_in_ledger={row['not_in_ledger']} cpu_ms_per_task="
                    + "/".join(f"{k}:{v:.1f}" for k, v in row["cpu_ms"].items())
                    + f" load={row['load']}",
                    flush=True,
                )
    base = rows[0]["per_second"]
    command = "python benchmarks/bench_throughput.py" + (" --quick" if args.quick else "")
    print(f"\nCommand: `.venv-soak/{command.replace('python', 'bin/python', 1)}`\n")
    print(
        f"| workers | tasks | placed (room {rows[0]['room']}) | wall | placements/s | vs 1 worker "
        "| hook.place p50 / p99 | CPU per task: workers / cluster APIs / PostgreSQL | over-commitment "
        "| load average before -> after |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for row in rows:
        print(
            f"| {row['workers']} | {row['tasks']} | {row['placed']} | {row['wall_s']:.1f} s "
            f"| {row['per_second']:.1f} | {row['per_second'] / base:.2f}x "
            f"| {row['p50_ms']:.0f} / {row['p99_ms']:.0f} ms "
            f"| {' / '.join(f'{v:.1f}' for v in row['cpu_ms'].values())} ms "
            f"| {row['over_commitment']} | {row['load']} |"
        )
    print(f"\nTotal run time {time.perf_counter() - started:.0f} s.")
    return 0 if all(r["over_commitment"] == 0 and r["not_in_ledger"] == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
