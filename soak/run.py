"""The soak driver: services, the clusters (its ground), Airflow, the load, the faults, then the audit.

``python -m soak --profile full|ci --executor local|celery --ground testbed|sim`` ends with one line,
``soak: executor=E ground=G tasks=N succeeded=N failed=N lost=N duplicates=N leaked=N
sovereignty_violations=N failed_by_fault=N faults=N minutes=M``, and exits 0 only when nothing was lost,
ran twice, was left behind or misplaced, every failure is explained and every scheduled fault was
applied. The ground is the test bed's real control planes (default; the members are connections in
Airflow's database, the deploy/ manifests the provider's only permissions, the audit logs the record of
what ran) or the simulated clusters (``sim``: their journals). Everything it wrote (each process's log,
the manifest, the journals, ``result.json``) stays in ``.soak/<profile>-<executor>[-sim]/``.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import shutil
import sys
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from soak import tasklogs
from soak.audit import Audit, Expectation, FaultWindow, Silence, TaskKey, audit, orphan_resets
from soak.clusters import ClusterError, Clusters
from soak.deployment import REPO, Airflow, session_cpu_seconds
from soak.faults import SILENCING, Injector, schedule
from soak.load import (
    DAG_ID,
    PROFILES,
    TASK_LABEL,
    Manifest,
    Profile,
    allowed_regions,
    manifest,
    regions,
    sim_config,
)
from soak.machine import MachineLoad
from soak.services import Postgres, postgres, redis
from soak.testbed import TestbedGround

SETTLE_SECONDS = 60.0
"""After the run ends, how long pods may take to leave the clusters before they count as left behind."""


def log(message: str) -> None:
    print(f"[soak] {message}", flush=True)


def key_of(labels: Mapping[str, str]) -> TaskKey | None:
    value = labels.get(TASK_LABEL)
    if not value or "." not in value:
        return None
    task_id, _, index = value.rpartition(".")
    return (task_id, int(index))


def expectations(plan: Manifest) -> list[Expectation]:
    return [
        Expectation(
            t.task_id,
            t.map_index,
            tuple(t.datasets),
            bool(plan.group(t.task_id)["preemptible"]),
            t.expect,
            t.exit_code,
        )
        for t in plan.tasks
    ]


def progress(airflow: Airflow, run_id: str) -> str:
    try:
        states = Counter(str(ti["state"]) for ti in airflow.api.task_instances(DAG_ID, run_id))
    except Exception as exc:  # the API server may be busy; progress is only informative
        return f"(task states unavailable: {exc})"
    return " ".join(f"{state} {count}" for state, count in sorted(states.items()))


Ground = Clusters | TestbedGround


def pods_left(clusters: Ground) -> int | None:
    total = 0
    for cluster in clusters.names:
        try:
            total += len(clusters.pods(cluster, selector=TASK_LABEL))
            if isinstance(clusters, TestbedGround):
                total += len(clusters.jobs(cluster, selector=TASK_LABEL))
        except ClusterError:
            return None
    return total


def ground_of(name: str, work: Path) -> Ground:
    if name == "sim":
        return Clusters(work / "sim", sim_config())
    return TestbedGround(work / "testbed", sim_config())


def archive(work: Path, keep: int = 6) -> None:
    """Move the previous run of this profile and executor to ``.soak/history/`` (the last ``keep`` stay)."""
    if not work.exists():
        return
    history = work.parent / "history"
    history.mkdir(exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(work.stat().st_mtime))
    shutil.move(str(work), str(history / f"{stamp}-{work.name}"))
    for old in sorted(history.iterdir())[:-keep]:
        shutil.rmtree(old, ignore_errors=True)


@contextlib.contextmanager
def maybe_redis(executor: str, work: Path) -> Iterator[Any]:
    if executor != "celery":
        yield None
        return
    with redis(work) as server:
        yield server


def soak(profile: Profile, executor: str, work: Path, ground: str = "testbed") -> int:
    started = time.monotonic()
    archive(work)
    work.mkdir(parents=True)
    plan = manifest(profile)
    manifest_path = work / "manifest.json"
    manifest_path.write_text(plan.to_json())
    log(
        f"profile {profile.name}: {profile.tasks} tasks over 5 clusters ({ground}), executor {executor}; "
        f"work dir {work}"
    )
    clusters = ground_of(ground, work)
    airflow: Airflow | None = None
    with postgres(work) as pg, maybe_redis(executor, work) as broker:
        log(f"PostgreSQL on 127.0.0.1:{pg.port}" + (f", Redis on 127.0.0.1:{broker.port}" if broker else ""))
        try:
            clusters.start()
            what = "test bed" if ground == "testbed" else "simulated federation"
            log(
                f"{what} up ({time.monotonic() - started:.0f}s): "
                + ", ".join(f"{n} {u}" for n, u in clusters.urls.items())
            )
            airflow = Airflow(
                home=work / "airflow",
                executor=executor,
                postgres=pg,
                redis=broker,
                sim_env=clusters.airflow_env(),
                federation=clusters.federation,
                kubeconfig=clusters.kubeconfig,
                manifest=manifest_path,
                parallelism=profile.parallelism,
                celery_concurrency=profile.celery_concurrency,
            )
            airflow.migrate()
            log(f"metadata database migrated ({time.monotonic() - started:.0f}s)")
            if isinstance(clusters, TestbedGround):
                added = clusters.connect(airflow)
                log(f"members as connections in Airflow's database: {', '.join(added)}")
            airflow.start()
            airflow.wait_ready(DAG_ID)
            log(f"Airflow up: {', '.join(airflow.processes)} ({time.monotonic() - started:.0f}s)")
            run_id = airflow.trigger(DAG_ID)
            t0, wall0 = time.monotonic(), time.time()
            log(f"triggered {DAG_ID} run {run_id}")
            injector = Injector(
                schedule(profile, executor, ground), clusters, airflow, plan, run_id, t0, database=pg.server
            )
            injector.start()
            machine = MachineLoad()
            deadline = t0 + profile.deadline_minutes * 60
            state, last_progress = None, 0.0
            while time.monotonic() < deadline:
                for revived in airflow.revive():
                    log(f"t={time.monotonic() - t0:.0f}s restarted {revived}, as a process supervisor would")
                state = airflow.run_state(DAG_ID, run_id)
                if state in ("success", "failed"):
                    break
                if time.monotonic() - last_progress >= 30:
                    last_progress = time.monotonic()
                    load = machine.sample()
                    log(f"t={last_progress - t0:.0f}s load {load:.1f}: {progress(airflow, run_id)}")
                time.sleep(3)
            run_minutes = (time.monotonic() - t0) / 60
            log(f"run ended: {state} after {run_minutes:.1f} min; {progress(airflow, run_id)}")
            cpu = airflow.cpu_seconds()
            if isinstance(clusters, TestbedGround):
                cpu.update(clusters.cpu_seconds())
            elif clusters.process is not None:
                cpu["simulated clusters"] = session_cpu_seconds(clusters.process.pid)
            log("CPU seconds used: " + ", ".join(f"{name} {seconds:.0f}" for name, seconds in cpu.items()))
            injector.finish()
            for record in injector.records:
                if record.applied_at is None:
                    print(record.line(), flush=True)
            for error in injector.errors:
                log(f"fault injector error: {error}")
            settle_until = time.monotonic() + SETTLE_SECONDS
            while (left := pods_left(clusters)) != 0 and time.monotonic() < settle_until:
                time.sleep(2)
            log(f"pods of the load still in the clusters after settling: {left}")
            result = collect_and_audit(clusters, airflow, plan, run_id, injector, wall0)
            if isinstance(clusters, TestbedGround):
                jobs_left(clusters, result)
            figures = [
                *(denials(clusters) if isinstance(clusters, TestbedGround) else []),
                tasklogs.summary(tasklogs.decision_seconds(airflow.home / "logs")),
                database_figures(pg),
                machine.summary(),
            ]
            minutes = (time.monotonic() - started) / 60
            write_result(work, profile, executor, ground, result, injector, minutes, state, cpu, figures)
            for line in result.lines():
                print(line)
            for line in figures:
                print(line, flush=True)
            print(result.summary(executor, len(injector.applied), minutes, ground), flush=True)
            return 0 if result.clean and len(injector.applied) == len(injector.records) else 1
        finally:
            if airflow is not None:
                airflow.stop()
            clusters.stop()


def database_figures(pg: Postgres) -> str:
    """What the provider left in the metadata database: shared-state Variables and XComs (informational)."""
    import psycopg2

    with (
        contextlib.closing(
            psycopg2.connect(
                host=pg.host, port=pg.port, user=pg.user, password=pg.password, dbname=pg.database
            )
        ) as connection,
        connection.cursor() as cursor,
    ):
        cursor.execute("SELECT count(*), coalesce(sum(length(val)), 0) FROM variable")
        variables, variable_bytes = cursor.fetchone()
        cursor.execute(
            "SELECT count(*), coalesce(sum(octet_length(value::text)), 0), "
            "coalesce(max(octet_length(value::text)), 0) FROM xcom"
        )
        xcoms, xcom_bytes, largest = cursor.fetchone()
    return (
        f"metadata database: {variables} Variables ({variable_bytes / 1e6:.1f} MB), {xcoms} XComs "
        f"({xcom_bytes / 1e6:.1f} MB, largest {largest / 1e3:.0f} KB)"
    )


def jobs_left(clusters: TestbedGround, result: Audit) -> None:
    """Jobs of the load still in a member after settling: left behind, as their pods would be."""
    for cluster in clusters.names:
        try:
            jobs = clusters.jobs(cluster, selector=TASK_LABEL)
        except ClusterError as exc:
            result.add("leaked", None, f"{cluster}: Jobs not listed ({exc})")
            result.leaked += 1
            continue
        for job in jobs:
            meta = job["metadata"]
            result.leaked += 1
            result.add(
                "leaked",
                key_of(meta.get("labels") or {}),
                f"Job {cluster}/{meta['namespace']}/{meta['name']} still in the API",
            )


def denials(clusters: TestbedGround) -> list[str]:
    """What the members refused the provider (403s in their audit logs; informational: a refusal while
    the soak had revoked its bindings is the fault's, any other means the manifests lack a rule)."""
    lines = []
    for cluster in clusters.names:
        found = clusters.provider_denials(cluster)
        if found:
            kinds = Counter(
                f"{d['verb']} {d['group'] + '/' if d['group'] else ''}{d['resource']}" for d in found
            )
            lines.append(
                f"provider denials in {cluster}: {len(found)} ("
                + ", ".join(f"{k} x{n}" for k, n in kinds.most_common())
                + ")"
            )
    return lines or ["provider denials: none in any member's audit log"]


def collect_and_audit(
    clusters: Ground, airflow: Airflow, plan: Manifest, run_id: str, injector: Injector, origin: float
) -> Audit:
    journals = []
    for cluster in clusters.names:
        journal = clusters.journal(cluster, selector=TASK_LABEL)
        journals.append(journal)
        (clusters.state_dir / f"journal-{cluster}.json").write_text(json.dumps(journal, indent=1))
    tis = airflow.api.task_instances(DAG_ID, run_id)
    (airflow.home / "task_instances.json").write_text(json.dumps(tis, indent=1))
    tries = {(ti["task_id"], ti["map_index"]): int(ti.get("try_number") or 1) for ti in tis}

    @functools.cache
    def try_log(key: TaskKey, number: int) -> str:
        return airflow.api.task_log(DAG_ID, run_id, key[0], key[1], number)

    def logs(key: TaskKey) -> str:
        return try_log(key, tries.get(key, 1))

    def try_logs(key: TaskKey) -> list[str]:
        return [try_log(key, n) for n in range(1, tries.get(key, 1) + 1)]

    return audit(
        journals,
        tis,
        expectations(plan),
        regions(),
        allowed_regions(),
        key_of,
        marked_failed=[r.task for r in injector.applied if r.kind == "mark-failed" and r.task],
        logs=logs,
        origin=origin,
        silences=silences(injector, origin),
        grace=plan.unreachable_grace,
        nodes_deleted=[r.target.partition("/")[0] for r in injector.applied if r.kind == "delete-node"],
        try_logs=try_logs,
        faults=[*fault_windows(injector, origin), *orphan_resets(_read(airflow.home / "scheduler.log"))],
    )


def _read(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else ""


def fault_windows(injector: Injector, origin: float) -> list[FaultWindow]:
    """Every fault applied, in the journals' wall-clock time (one without an end lasted an instant)."""
    return [
        FaultWindow(
            record.kind,
            record.target,
            origin + record.applied_at,
            origin + (record.ended_at if record.ended_at is not None else record.applied_at),
            record.task,
        )
        for record in injector.applied
        if record.applied_at is not None
    ]


def silences(injector: Injector, origin: float) -> list[Silence]:
    """The faults that kept a cluster's API (``down``) or a node (``node-not-ready``) from answering, in
    the journals' wall-clock time."""
    found = []
    for record in injector.applied:
        if record.kind not in SILENCING or record.applied_at is None:
            continue
        cluster, _, node = record.target.partition("/")
        end = origin + record.ended_at if record.ended_at is not None else float("inf")
        found.append(Silence(cluster, node or None, origin + record.applied_at, end))
    return found


def write_result(
    work: Path,
    profile: Profile,
    executor: str,
    ground: str,
    result: Audit,
    injector: Injector,
    minutes: float,
    state: str | None,
    cpu: dict[str, float],
    figures: list[str],
) -> None:
    (work / "result.json").write_text(
        json.dumps(
            {
                "summary": result.summary(executor, len(injector.applied), minutes, ground),
                "profile": profile.name,
                "executor": executor,
                "ground": ground,
                "run_state": state,
                "faults": [r.line() for r in injector.records],
                "findings": [f.line() for f in result.findings],
                "overcommits": result.overcommits,
                "unexplained": result.unexplained,
                "cpu_seconds": cpu,
                "figures": figures,
            },
            indent=1,
        )
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m soak", description=__doc__.split("\n\n")[0])
    parser.add_argument("--profile", choices=sorted(PROFILES), default="full")
    parser.add_argument("--executor", choices=("local", "celery"), default="local")
    parser.add_argument(
        "--ground",
        choices=("testbed", "sim"),
        default="testbed",
        help="the test bed's real control planes (needs `make testbed`), or the simulated clusters",
    )
    parser.add_argument(
        "--work", type=Path, help="work directory (default .soak/<profile>-<executor>, -sim on the simulator)"
    )
    args = parser.parse_args(argv)
    profile = PROFILES[args.profile]
    suffix = "-sim" if args.ground == "sim" else ""
    work = args.work or REPO / ".soak" / f"{profile.name}-{args.executor}{suffix}"
    return soak(profile, args.executor, work, args.ground)


if __name__ == "__main__":
    sys.exit(main())
