"""FederatedKubernetesOperator on the simulated federation: start-up overhead and failover time.

Run: ``.venv/bin/python benchmarks/bench_operator.py [--quick]``

Real Airflow (``dag.test()`` on SQLite) and the simulated federation (10 clusters of 50 nodes, in this
process). The same pod (1 cpu, 1 GiB, 0.2 s image start) is launched, alternately, by

* a plain ``KubernetesPodOperator`` bound to one cluster (the baseline, measured in the same run), and
* ``FederatedKubernetesOperator`` choosing among the 10 clusters (snapshots refreshed as needed);

the time measured is from ``execute()`` to the operator seeing its pod running (KubernetesPodOperator's
``on_pod_starting`` callback). Both check a starting pod every 0.5 s.

Fresh worker: a LocalExecutor or Celery task runs in a process of its own, which imports Airflow and the
DAG, reads the snapshots and decides, all for that one task. Measured as whole processes, alternating:
one process runs the KubernetesPodOperator DAG once (its DAG file imports nothing of this provider), the
next runs the federated one; each reports execute() -> pod running, and this process measures its wall
and CPU time (bytecode cached, as in an installed deployment).

Failover: after the federation's snapshot, the cheapest cluster runs out (its quota is taken, or its nodes
are filled so the pod is Unschedulable, grace 0 s). Measured from the first pod's create on that cluster
(the quota 403 arrives at once; the scheduler's Unschedulable verdict follows within ~0.1 s) to the pod
running on the next cluster: an upper bound on "first signal to Running elsewhere".
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from airflow_bench import airflow_home, fresh_federation, placement_record, priced_clusters

DAGS = Path(__file__).resolve().parent / "dags"
CLUSTERS = 10


def sim_config() -> dict[str, Any]:
    return priced_clusters(CLUSTERS, {"name": "p", "count": 50, "cpu": "16", "memory": "64Gi"})


def run(dag: Any) -> tuple[float, dict[str, Any] | None]:
    """Run the DAG once; return execute->running seconds and the placement record (if any)."""
    from operator_timing import STAMPS

    dag_run = dag.test()
    if "running" not in STAMPS:
        raise RuntimeError(f"{dag.dag_id}: the pod never ran ({dag_run.state})")
    return STAMPS["running"] - STAMPS["execute"], placement_record(dag.dag_id, dag_run.run_id)


def failover(fed: Any, dag: Any, workdir: Path, incident: str) -> float:
    from operator_timing import STAMPS

    from airflow_provider_fedsched.hooks.federation import FederationHook

    fresh_federation(fed, workdir, snapshot_ttl_seconds=120)
    FederationHook().collect()  # what the federation knows before the incident
    cheapest = fed["c00"]
    fillers: list[str] = []
    if incident == "quota":
        cheapest.set_quota("default", {"requests.cpu": "0"}, name="taken")
    else:
        for node in cheapest.nodes():
            name = f"filler-{uuid.uuid4().hex[:6]}"
            cheapest.create_pod(
                "default",
                {
                    "metadata": {"name": name, "annotations": {"sim.fedsched.io/duration": "3600"}},
                    "spec": {
                        "nodeName": node["metadata"]["name"],
                        "containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": "16"}}}],
                    },
                },
            )
            fillers.append(name)
    try:
        _, record = run(dag)
    finally:
        if incident == "quota":
            cheapest.set_quota("default", {"requests.cpu": "100000"}, name="taken")
        for name in fillers:
            cheapest.delete_pod("default", name, grace=0)
    assert record is not None
    outcomes = [(a["cluster"], a["outcome"]) for a in record["attempts"]]
    if outcomes[0] != ("c00", "insufficient") or len(outcomes) != 2:
        raise RuntimeError(f"unexpected placement for the {incident} incident: {outcomes}")
    first_create = datetime.fromisoformat(record["attempts"][0]["started_at"]).timestamp()
    return STAMPS["running"] - first_create


def one(kind: str) -> int:
    """In a fresh process: run the DAG of ``kind`` (kpo or federated) once; print execute -> running."""
    from airflow.dag_processing.dagbag import DagBag
    from operator_timing import STAMPS

    bag = DagBag(dag_folder=str(DAGS / f"bench_{kind}_dag.py"))
    dag = bag.get_dag(f"bench_{kind}")
    dag.test()
    print(json.dumps({"running_s": STAMPS["running"] - STAMPS["execute"] if "running" in STAMPS else None}))
    return 0


def fresh_workers(pairs: int, workdir: Path) -> dict[str, dict[str, list[float]]]:
    """Alternating fresh processes, each running one task; per kind its execute -> running, wall and CPU
    seconds. Bytecode is cached in ``workdir`` (written by a first, unmeasured run of each kind)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(workdir / "pycache")
    found: dict[str, dict[str, list[float]]] = {k: {"running": [], "wall": [], "cpu": []} for k in KINDS}
    for number in range(pairs + 1):
        for kind in KINDS if number % 2 else reversed(KINDS):
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            started = time.perf_counter()
            child = subprocess.run(
                [sys.executable, __file__, "--one", kind],
                env=env,
                capture_output=True,
                text=True,
                check=False,
            )
            wall = time.perf_counter() - started
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            lines = child.stdout.strip().splitlines()
            if child.returncode != 0 or not lines or json.loads(lines[-1])["running_s"] is None:
                raise RuntimeError(f"the {kind} worker failed ({child.returncode}): {child.stderr[-2000:]}")
            if number == 0:
                continue  # writes the bytecode caches
            cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
            found[kind]["running"].append(json.loads(lines[-1])["running_s"])
            found[kind]["wall"].append(wall)
            found[kind]["cpu"].append(cpu)
    return found


KINDS = ("kpo", "federated")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--one", choices=KINDS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        return one(args.one)
    repeat = 4 if args.quick else 8
    pairs = 2 if args.quick else 4
    airflow_home("fedsched-bench-op-", DAGS)
    from airflow.dag_processing.dagbag import DagBag

    from airflow_provider_fedsched.sim import SimFederation

    bag = DagBag(dag_folder=str(DAGS))
    kpo, federated = bag.get_dag("bench_kpo"), bag.get_dag("bench_federated")
    workdir = Path(tempfile.mkdtemp(prefix="fedsched-bench-op-spec-"))
    with SimFederation(sim_config()) as fed:
        os.environ.update(fed.airflow_env_vars())
        fresh_federation(fed, workdir, snapshot_ttl_seconds=120)
        run(kpo), run(federated)  # warm up: imports, DAG serialization, first snapshots
        plain, ours = [], []
        for _ in range(repeat):
            plain.append(run(kpo)[0])
            ours.append(run(federated)[0])
        # Fresh workers read the snapshots from shared state (a TTL long enough that none refreshes).
        fresh_federation(fed, workdir, snapshot_ttl_seconds=1800)
        from airflow_provider_fedsched.hooks.federation import FederationHook

        FederationHook().collect()
        fresh = fresh_workers(pairs, workdir)
        quota = [failover(fed, federated, workdir, "quota") for _ in range(3)]
        unschedulable = [failover(fed, federated, workdir, "unschedulable") for _ in range(3)]

    med_plain, med_ours = statistics.median(plain), statistics.median(ours)
    print(f"### FederatedKubernetesOperator on the simulated federation ({CLUSTERS} clusters x 50 nodes)\n")
    print("| measure | median | min | max | target |")
    print("|---|---:|---:|---:|---:|")
    print(
        "| KubernetesPodOperator, one cluster: execute() -> pod running (baseline) "
        f"| {med_plain * 1e3:.0f} ms "
        f"| {min(plain) * 1e3:.0f} ms | {max(plain) * 1e3:.0f} ms | - |"
    )
    print(
        f"| FederatedKubernetesOperator, {CLUSTERS} clusters: execute() -> pod running "
        f"| {med_ours * 1e3:.0f} ms "
        f"| {min(ours) * 1e3:.0f} ms | {max(ours) * 1e3:.0f} ms | - |"
    )
    print(f"| difference of medians (warm worker) | {(med_ours - med_plain) * 1e3:+.0f} ms | | | <= +25 ms |")
    print(
        f"| failover, quota 403: first create -> running elsewhere | {statistics.median(quota):.2f} s "
        f"| {min(quota):.2f} s | {max(quota):.2f} s | < 5 s |"
    )
    print(
        f"| failover, Unschedulable (grace 0 s): first create -> running elsewhere "
        f"| {statistics.median(unschedulable):.2f} s | {min(unschedulable):.2f} s "
        f"| {max(unschedulable):.2f} s | < 5 s |"
    )
    print(f"\n### Fresh worker processes, one task each ({pairs} pairs, alternating)\n")
    print(
        "| measure (median) | KubernetesPodOperator (baseline) | FederatedKubernetesOperator | difference "
        "| target |"
    )
    print("|---|---:|---:|---:|---:|")
    for measure, label in (
        ("running", "execute() -> pod running"),
        ("wall", "whole process, wall"),
        ("cpu", "whole process, CPU"),
    ):
        plain_fresh, ours_fresh = (statistics.median(fresh[kind][measure]) for kind in KINDS)
        target = "<= +60 ms" if measure == "running" else "-"
        print(
            f"| {label} | {plain_fresh * 1e3:.0f} ms | {ours_fresh * 1e3:.0f} ms "
            f"| {(ours_fresh - plain_fresh) * 1e3:+.0f} ms | {target} |"
        )
    print(
        f"\n{repeat} runs each in this process, alternating. Load average at the end: "
        f"{', '.join(f'{v:.1f}' for v in os.getloadavg())}. "
        f"Command: .venv/bin/python benchmarks/bench_operator.py{' --quick' if args.quick else ''}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
