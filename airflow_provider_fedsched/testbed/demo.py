"""``make demo-real``: the demo DAG on real control planes, run by a real multi-process Airflow.

1. Bring the test bed up (three members, each etcd, kube-apiserver, kube-scheduler,
   kube-controller-manager and kwok nodes), with the shipped ``deploy/rbac-cluster.yaml`` and
   ``deploy/rbac.yaml`` as the provider's only permissions in every member.
2. Start Airflow as a deployment runs it: api-server, scheduler, dag-processor and triggerer, each its own
   process, LocalExecutor on SQLite, the members as connections in Airflow's database (added with
   ``airflow connections add``, as docs/deploy.md says).
3. Trigger ``example_dags/example_federated_dag.py``; once a task's pod runs in a member, stop that member's
   kube-apiserver (SIGSTOP: connections hang, as in a partition) for a minute, then let it go on.
4. Print where each task ran and why, and every pod and Job left in any cluster; with ``KEEP=1``, leave
   the Airflow UI up until Ctrl-C. Stop everything it started.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from airflow_provider_fedsched.demo import DAG_ID, left_behind

REPO = Path(__file__).resolve().parents[2]
WORK = REPO / ".demo-real"
TIME_SCALE = 20.0
"""Pods run 20x as long as the demo DAG's annotations say (1 s -> 20 s): the outage finds one running."""
OUTAGE_SECONDS = 60.0
OUTAGE_TASK = "nightly_etl"
"""Not preemptible, so it waits for its member (``unreachable_grace``, 5 min) and never runs twice."""
RUN_TIMEOUT = 900.0


def log(message: str) -> None:
    print(f"[demo-real] {message}", flush=True)


def add_connections(airflow: Any, fed: Any) -> list[str]:
    """Each member as an Airflow connection in the metadata database (``airflow connections add``)."""
    added = []
    for key, value in fed.airflow_env_vars().items():
        conn_id = key.removeprefix("AIRFLOW_CONN_").lower()
        airflow.cli("connections", "add", conn_id, "--conn-json", value)
        added.append(conn_id)
    return added


def running_pod_of(fed: Any, task_id: str) -> tuple[str, str] | None:
    """(member, pod name) once a pod of ``task_id`` runs somewhere."""
    for name, handle in fed.handles.items():
        for pod in handle.pods():
            labels = pod["metadata"].get("labels") or {}
            if labels.get("task_id") == task_id and pod["status"].get("phase") == "Running":
                return name, pod["metadata"]["name"]
    return None


def outage(fed: Any, stop: threading.Event, happened: list[str]) -> None:
    """Stop the kube-apiserver of the member where ``OUTAGE_TASK``'s pod runs, for ``OUTAGE_SECONDS``."""
    found = None
    while found is None and not stop.is_set():
        found = running_pod_of(fed, OUTAGE_TASK)
        if found is None:
            stop.wait(0.5)
    if found is None:
        return
    member, pod = found
    process = fed.clusters[member].processes["kube-apiserver"]
    log(f"incident: {member}'s kube-apiserver stopped (SIGSTOP) for {OUTAGE_SECONDS:.0f}s; {pod} runs there")
    process.pause()
    happened.append(member)
    try:
        stop.wait(OUTAGE_SECONDS)
    finally:
        process.resume()
    log(f"incident over: {member}'s kube-apiserver answers again")


def settle(fed: Any, timeout: float = 120.0) -> list[str]:
    """Pods of a finished run leave within a deletion or two; give them that long."""
    deadline = time.monotonic() + timeout
    while (left := left_behind(fed.handles)) and time.monotonic() < deadline:
        time.sleep(2.0)
    return left


def main() -> int:
    sys.path.insert(0, str(REPO))  # the soak's deployment: the same multi-process Airflow
    from airflow_provider_fedsched import demo
    from airflow_provider_fedsched.testbed import TestbedFederation
    from soak.deployment import ADMIN, Airflow, DeploymentError

    started = time.monotonic()
    keep = os.environ.get("KEEP", "") not in ("", "0")
    shutil.rmtree(WORK, ignore_errors=True)
    WORK.mkdir(parents=True)
    code = 1
    airflow: Airflow | None = None
    with TestbedFederation(state_dir=WORK / "testbed", time_scale=TIME_SCALE) as fed:
        fed.create_namespace("etl")
        log(
            f"test bed up in {fed.startup_seconds:.0f}s: "
            + ", ".join(f"{n} at {c.url}" for n, c in fed.clusters.items())
            + " (deploy/rbac-cluster.yaml and deploy/rbac.yaml applied in each)"
        )
        try:
            airflow = Airflow(
                home=WORK / "airflow",
                executor="local",
                postgres=None,
                redis=None,
                sim_env={},
                federation=WORK / "testbed" / "federation.yaml",
                kubeconfig=fed.kubeconfig_path,
                manifest=None,
                parallelism=8,
                celery_concurrency=0,
                preload=False,
                dag_files=(REPO / "example_dags" / "example_federated_dag.py",),
            )
            airflow.migrate()
            added = add_connections(airflow, fed)
            log(f"Airflow metadata database on SQLite; connections added: {', '.join(added)}")
            airflow.start()
            airflow.wait_ready(DAG_ID)
            log(f"Airflow up: {', '.join(airflow.processes)} at {airflow.api.base}")
            run_id = airflow.trigger(DAG_ID)
            log(
                f"triggered {DAG_ID} (run {run_id}); task logs in {(airflow.home / 'logs').relative_to(REPO)}"
            )
            stop, happened = threading.Event(), list[str]()
            incident = threading.Thread(target=outage, args=(fed, stop, happened), daemon=True)
            incident.start()
            deadline, state = time.monotonic() + RUN_TIMEOUT, None
            while time.monotonic() < deadline:
                state = airflow.run_state(DAG_ID, run_id)
                if state in ("success", "failed"):
                    break
                airflow.check_alive()
                time.sleep(3.0)
            stop.set()
            incident.join(timeout=10)
            run_took = time.monotonic() - started
            left = settle(fed)
            records = demo.summarize(airflow.env)
            print()
            demo.print_decision(records, "clickstream_rollup")
            demo.print_summary(records)
            log(
                f"pods and jobs left behind in any cluster: {len(left)}"
                + (" " + ", ".join(left) if left else "")
            )
            outage_note = f" (one kube-apiserver stopped for {OUTAGE_SECONDS:.0f}s)" if happened else ""
            log(f"DAG run {state or 'did not finish'} in {run_took:.0f}s end to end{outage_note}")
            code = 0 if state == "success" and not left and happened else 1
            if keep:
                log(f"Airflow UI: {airflow.api.base} (user {ADMIN[0]}, password {ADMIN[1]}); Ctrl-C to stop")
                signal.signal(signal.SIGTERM, signal.default_int_handler)
                try:
                    while True:
                        time.sleep(3600)
                except KeyboardInterrupt:
                    pass
        except DeploymentError as exc:
            log(f"Airflow failed: {exc}")
        finally:
            if airflow is not None:
                airflow.stop()
    log("stopped everything it started")
    return code


if __name__ == "__main__":
    sys.exit(main())
