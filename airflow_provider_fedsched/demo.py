"""``make demo``: the main job on the embedded default, from nothing to a summary in about a minute.

1. Start the simulated federation (three Kubernetes API servers on loopback) and write its kubeconfig,
   federation spec and Airflow connections.
2. Set up an Airflow home on SQLite (``.demo/airflow``) with those connections.
3. Prepare two incidents: another team's job takes the remaining ``etl`` quota on the cheapest cluster
   right after the federation's last snapshot, and the preemptible task's first pod is evicted mid-run.
4. Run ``example_dags/example_federated_dag.py`` with ``airflow dags test``, stop everything, and print
   where each task ran and why, read back from the ``fedsched_placement`` XComs.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "example_dags"
DAG_ID = "example_federated"
WORK = REPO / ".demo"


def log(message: str) -> None:
    print(f"[demo] {message}", flush=True)


def airflow_env(sim_env: dict[str, str], federation: Path) -> dict[str, str]:
    home = WORK / "airflow"
    return {
        **os.environ,
        **sim_env,
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(EXAMPLES),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
        "AIRFLOW__FEDSCHED__FEDERATION_SPEC": str(federation),
        "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
    }


def airflow(args: list[str], env: dict[str, str], log_file: Path) -> int:
    executable = Path(sys.executable).with_name("airflow")
    with log_file.open("a") as out:
        return subprocess.call([str(executable), *args], env=env, stdout=out, stderr=subprocess.STDOUT)


OTHER_TEAM_POD = "other-team-etl"


def prepare_etl_namespace(fed: Any) -> None:
    """Every cluster has an ``etl`` namespace; east-cpu's has a quota of 4 cpu."""
    for cluster in fed.clusters.values():
        fed.call(cluster.create_namespace, "etl")
    fed["east-cpu"].set_quota("etl", {"requests.cpu": "4", "pods": "20"}, name="etl-compute")


def take_snapshot(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The federation's first snapshot, stored in the Airflow home's shared state."""
    code = "from airflow_provider_fedsched.hooks.federation import FederationHook\nFederationHook().collect()"
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)


def take_remaining_etl_quota(fed: Any) -> None:
    """The quota incident: another team's job takes 3 of east-cpu's 4 etl cpus after the snapshot."""
    fed["east-cpu"].create_pod(
        "etl",
        {
            "metadata": {"name": OTHER_TEAM_POD, "annotations": {"sim.fedsched.io/duration": "3600"}},
            "spec": {
                "containers": [{"name": "main", "image": "busybox", "resources": {"requests": {"cpu": "3"}}}]
            },
        },
    )


def evict_first_backfill_pod(fed: Any, stop: threading.Event) -> None:
    """The incident for ``resumable_backfill``: evict its first pod once it is running."""
    while not stop.is_set():
        for name, handle in fed.handles.items():
            for pod in handle.pods():
                labels = pod["metadata"].get("labels") or {}
                if (
                    labels.get("task_id") == "resumable_backfill"
                    and labels.get("fedsched.io/cluster-attempt") == "1"
                    and pod["status"].get("phase") == "Running"
                ):
                    time.sleep(1.0)  # let it make some progress before the node runs out of memory
                    log(f"incident: node-pressure eviction of {pod['metadata']['name']} on {name}")
                    handle.faults.evict_pod(pod["metadata"]["namespace"], pod["metadata"]["name"])
                    return
        stop.wait(0.2)


def left_behind(handles: dict[str, Any]) -> list[str]:
    """Every pod and Job of the demo DAG still in any member (the other team's pod is not the DAG's)."""
    return [
        f"{name}/{item['metadata']['namespace']}/{kind}/{item['metadata']['name']}"
        for name, handle in handles.items()
        for kind, items in (("pod", handle.pods()), ("job", handle.jobs()))
        for item in items
        if (item["metadata"].get("labels") or {}).get("dag_id") == DAG_ID
    ]


def summarize(env: dict[str, str]) -> list[dict[str, Any]]:
    """Read every task's placement record back from the Airflow metadata database."""
    code = (
        "import json\n"
        "from airflow.models.xcom import XComModel\n"
        "from airflow.utils.session import create_session\n"
        "with create_session() as s:\n"
        f"    rows = s.query(XComModel).filter(XComModel.dag_id == {DAG_ID!r},\n"
        "                                     XComModel.key == 'fedsched_placement')\n"
        "    print(json.dumps([r.value for r in rows]))\n"
    )
    output = (
        subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
        .stdout.strip()
        .splitlines()[-1]
    )
    import json

    records = [json.loads(v) if isinstance(v, str) else v for v in json.loads(output)]
    return sorted(records, key=lambda r: r["started_at"])


def print_decision(records: list[dict[str, Any]], task_id: str) -> None:
    """One task's first decision table, as its task log shows it."""
    from airflow_provider_fedsched.federation.decision import Decision
    from airflow_provider_fedsched.render import decision_table

    for record in records:
        if record["task_id"] == task_id and record["decisions"]:
            log(f"the first decision of {task_id} (every task logs its own):")
            print(decision_table(Decision.from_dict(record["decisions"][0])))


def print_summary(records: list[dict[str, Any]]) -> None:
    from airflow_provider_fedsched.render import placement_summary

    print(placement_summary(records), end="")


LOGGER_SUFFIX = re.compile(r"\s+\[[A-Za-z_][\w.]*\](?: loc=\S+)?$")
"""What Airflow's log format appends to a line: the logger's name and, for some loggers, where it logged."""


def pod_lines(log_file: Path) -> list[str]:
    """What the pods printed, as streamed into the task logs (``[base] ...`` lines)."""
    lines = []
    for line in log_file.read_text(errors="replace").splitlines():
        _, found, text = line.partition("[base] ")
        if found:
            lines.append(LOGGER_SUFFIX.sub("", text).rstrip())
    return lines


def main() -> int:
    from airflow_provider_fedsched.sim import SimFederation

    started = time.monotonic()
    shutil.rmtree(WORK, ignore_errors=True)
    (WORK / "airflow").mkdir(parents=True)
    log_file = WORK / "airflow.log"
    with SimFederation(state_dir=WORK / "sim", time_scale=0.5) as fed:
        federation = WORK / "sim" / "federation.yaml"
        spec = yaml.safe_load(federation.read_text())
        # Snapshots are reused for up to half this TTL: the quota incident below happens inside that window.
        spec["policy"]["snapshot_ttl_seconds"] = 120
        federation.write_text(yaml.safe_dump(spec, sort_keys=False))
        prepare_etl_namespace(fed)
        log(f"simulated federation up: {', '.join(f'{n} at {c.url}' for n, c in fed.clusters.items())}")
        env = airflow_env(fed.airflow_env_vars(), federation)
        log("migrating the Airflow metadata database (SQLite)")
        if airflow(["db", "migrate"], env, log_file) != 0:
            log(f"airflow db migrate failed; see {log_file}")
            return 1
        log("taking the federation's first snapshot")
        snapshot = take_snapshot(env)
        if snapshot.returncode != 0:
            log(f"snapshot failed: {snapshot.stderr.strip().splitlines()[-1:]}")
            return 1
        log("incident: another team's job takes the remaining etl quota on east-cpu (after the snapshot)")
        take_remaining_etl_quota(fed)
        stop = threading.Event()
        watcher = threading.Thread(target=evict_first_backfill_pod, args=(fed, stop), daemon=True)
        watcher.start()
        log(f"running `airflow dags test {DAG_ID}` (task logs in {log_file.relative_to(REPO)})")
        code = airflow(["dags", "test", DAG_ID], env, log_file)
        stop.set()
        watcher.join(timeout=5)
        left = left_behind(fed.handles)
    records = summarize(env)
    print()
    print_decision(records, "nightly_etl")
    print_decision(records, "train_bert")
    print_summary(records)
    log("what the pods printed (streamed into the task logs):")
    for line in pod_lines(log_file):
        print(f"    {line}")
    log(f"pods and jobs left behind in any cluster: {len(left)}{' ' + ', '.join(left) if left else ''}")
    log(f"DAG run {'succeeded' if code == 0 else 'FAILED'} in {time.monotonic() - started:.0f}s end to end")
    return code


if __name__ == "__main__":
    sys.exit(main())
