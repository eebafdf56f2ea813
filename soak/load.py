"""What the soak runs: its profiles, the simulated federation, and the manifest of federated tasks.

The manifest (JSON) is the one description of the load: the DAG file builds its mapped tasks from it and
the auditor reads what each task was meant to do (its datasets, whether it may move, whether it is meant
to fail by its own exit code or by a wait that times out on purpose). It is generated from a seed, so that
a run can be repeated.
"""

from __future__ import annotations

import json
import random
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

DAG_ID = "fedsched_soak"
NAMESPACE = "soak"
VAULT_NAMESPACE = "vault"
TASK_LABEL = "fedsched-soak/task"
"""Label the soak puts on every pod it asks for: ``<task_id>.<map_index>`` (its own key, whatever else
KubernetesPodOperator or the provider add)."""
OWN_EXIT_CODE = 3

CLUSTERS: list[dict[str, Any]] = [
    # name, region, proximity group, nodes x cpu: 19 one-cpu slots in all, far fewer than the tasks.
    {"name": "east-a", "region": "cn-east-1", "group": "cn-east", "nodes": 2, "cpu": "3", "cpu_hour": 0.02},
    {"name": "east-b", "region": "cn-east-1", "group": "cn-east", "nodes": 2, "cpu": "2", "cpu_hour": 0.03},
    {"name": "north", "region": "cn-north-1", "group": "cn-north", "nodes": 1, "cpu": "3", "cpu_hour": 0.04},
    {"name": "west", "region": "eu-west-1", "group": "eu-west", "nodes": 2, "cpu": "2", "cpu_hour": 0.05},
    {"name": "south", "region": "ap-south-1", "group": "ap-south", "nodes": 1, "cpu": "2", "cpu_hour": 0.06},
]
DATASETS: list[dict[str, Any]] = [
    {"name": "cn-events", "cluster": "east-a", "size_gb": 50, "allowed_regions": ["cn-east-1"]},
    {"name": "cn-archive", "cluster": "north", "size_gb": 80, "allowed_regions": ["cn-east-1", "cn-north-1"]},
    {"name": "eu-customers", "cluster": "west", "size_gb": 20, "allowed_regions": ["eu-west-1"]},
    {"name": "ap-vault", "cluster": "south", "size_gb": 5, "allowed_regions": ["ap-south-1"]},
    {"name": "open-logs", "cluster": "east-b", "size_gb": 30},
]
# What a regular task reads: nothing, a sovereign dataset, or an unrestricted one.
DATASET_MIX: list[tuple[list[str], int]] = [
    ([], 35),
    (["cn-events"], 20),
    (["cn-archive"], 15),
    (["eu-customers"], 15),
    (["open-logs"], 15),
]


LONG = (150.0, 180.0)
"""Seconds the CI profile's long pods run: past its last fault that needs a target (kill-etcd at 105 s,
looked for up to a minute) even when they start late."""


@dataclass(frozen=True)
class Group:
    """One mapped task of the soak DAG."""

    task_id: str
    count: int
    deferrable: bool
    preemptible: bool
    namespace: str = NAMESPACE
    cpu: str = "1"
    wait_timeout: float = 900.0
    retries: int = 2
    datasets: list[str] | None = None
    """Every task of the group reads these (otherwise drawn from DATASET_MIX)."""
    expect: str = "succeed"
    """``succeed``, or ``wait-timeout`` (the group is meant to time out waiting)."""
    failing: int = 0
    """How many of its tasks exit with OWN_EXIT_CODE (their own failure)."""
    gang: int = 0
    """A gang: each task is a FederatedKubernetesJobOperator Job of this many pods (all or nothing, in
    one cluster); 0: a FederatedKubernetesOperator pod."""
    duration: tuple[float, float] | None = None
    """Seconds each pod's container runs, if not the profile's."""


@dataclass(frozen=True)
class Profile:
    name: str
    groups: list[Group]
    duration: tuple[float, float]
    """Seconds each pod's container runs (uniform in this range)."""
    unreachable_grace: float
    deadline_minutes: float
    """The DAG run must end within this; what is still unfinished then is lost."""
    parallelism: int
    celery_concurrency: int
    faults: str
    """Name of the fault schedule (see ``soak.faults.SCHEDULES``)."""
    seed: int = 20250710
    executors: tuple[str, ...] = ("local", "celery")

    @property
    def tasks(self) -> int:
        return sum(g.count for g in self.groups)


PROFILES: dict[str, Profile] = {
    "full": Profile(
        name="full",
        groups=[
            Group("sync_plain", 56, deferrable=False, preemptible=False, failing=2),
            Group("sync_resumable", 40, deferrable=False, preemptible=True),
            Group("deferred_plain", 60, deferrable=True, preemptible=False, failing=2),
            Group("deferred_resumable", 40, deferrable=True, preemptible=True),
            Group("gang_job", 10, deferrable=False, preemptible=False, gang=3),
            Group(
                "vault_wait",
                4,
                deferrable=True,
                preemptible=False,
                namespace=VAULT_NAMESPACE,
                datasets=["ap-vault"],
                wait_timeout=60.0,
                retries=0,
                expect="wait-timeout",
            ),
        ],
        duration=(8.0, 20.0),
        unreachable_grace=45.0,
        deadline_minutes=40.0,
        parallelism=24,
        celery_concurrency=12,
        faults="full",
    ),
    "ci": Profile(
        name="ci",
        groups=[
            # Pods that run for minutes, as real ones do, in members of two nodes (cn-events stays in
            # cn-east-1): whatever the machine's speed, the faults that need a Running pod or a deferred
            # task find one. The official CI at 01e06ad ran the rest of the load by 120 s and its node
            # fault (90 s) found no target.
            Group("long_sync", 2, deferrable=False, preemptible=False, datasets=["cn-events"], duration=LONG),
            Group(
                "long_deferred", 2, deferrable=True, preemptible=False, datasets=["cn-events"], duration=LONG
            ),
            Group("sync_plain", 12, deferrable=False, preemptible=False, failing=1),
            Group("sync_resumable", 8, deferrable=False, preemptible=True),
            Group("deferred_plain", 12, deferrable=True, preemptible=False, failing=1),
            Group("deferred_resumable", 8, deferrable=True, preemptible=True),
            Group("gang_job", 2, deferrable=False, preemptible=False, gang=3),
        ],
        # Long enough that the load still runs at the last fault (120 s) on a fast 2-core machine: with
        # 6-14 s the load ended at 2.0 min and three of the four faults were skipped.
        duration=(14.0, 30.0),
        unreachable_grace=30.0,
        # The database restart (120 s) ends the scheduler and its LocalExecutor workers; the restarted
        # scheduler resets the tasks they ran at its orphan check, every 300 s by default (Airflow's own
        # pace: a shorter check reset a loaded scheduler's own tasks, its heartbeat a minute late), and
        # their retries then adopt what the pods did: 446 s in the clean-clone run at 9740a17.
        deadline_minutes=10.0,
        parallelism=16,
        celery_concurrency=8,
        faults="ci",
        executors=("local",),
    ),
}


@dataclass
class TaskPlan:
    task_id: str
    map_index: int
    datasets: list[str]
    duration: float
    exit_code: int
    expect: str
    """``succeed``, ``exit`` (its own non-zero exit) or ``wait-timeout``."""

    @property
    def key(self) -> str:
        return f"{self.task_id}.{self.map_index}"


@dataclass
class Manifest:
    dag_id: str
    profile: str
    unreachable_grace: float
    groups: list[dict[str, Any]]
    tasks: list[TaskPlan] = field(default_factory=list)

    def to_json(self) -> str:
        return json.dumps(
            {
                "dag_id": self.dag_id,
                "profile": self.profile,
                "unreachable_grace": self.unreachable_grace,
                "groups": self.groups,
                "tasks": [asdict(t) for t in self.tasks],
            },
            indent=1,
        )

    @classmethod
    def from_json(cls, text: str) -> Manifest:
        data = json.loads(text)
        tasks = [TaskPlan(**t) for t in data["tasks"]]
        return cls(data["dag_id"], data["profile"], data["unreachable_grace"], data["groups"], tasks)

    @classmethod
    def read(cls, path: Path) -> Manifest:
        return cls.from_json(path.read_text())

    def group(self, task_id: str) -> dict[str, Any]:
        return next(g for g in self.groups if g["task_id"] == task_id)

    def tasks_of(self, task_id: str) -> list[TaskPlan]:
        return [t for t in self.tasks if t.task_id == task_id]


def manifest(profile: Profile) -> Manifest:
    rng = random.Random(profile.seed)
    choices, weights = zip(*DATASET_MIX, strict=True)
    out = Manifest(DAG_ID, profile.name, profile.unreachable_grace, [asdict(g) for g in profile.groups])
    for group in profile.groups:
        failing = set(rng.sample(range(group.count), group.failing))
        for index in range(group.count):
            datasets = (
                list(group.datasets) if group.datasets is not None else list(rng.choices(choices, weights)[0])
            )
            duration = round(rng.uniform(*(group.duration or profile.duration)), 1)
            exit_code = OWN_EXIT_CODE if index in failing else 0
            expect = group.expect if group.expect != "succeed" else ("exit" if exit_code else "succeed")
            out.tasks.append(TaskPlan(group.task_id, index, datasets, duration, exit_code, expect))
    return out


def sim_config(time_scale: float = 1.0) -> dict[str, Any]:
    """The simulated federation: five clusters, each with the soak's namespaces."""
    return {
        "time_scale": time_scale,
        "clusters": [
            {
                "name": c["name"],
                "region": c["region"],
                "group": c["group"],
                "prices": {"cpu_hour": c["cpu_hour"], "memory_gib_hour": 0.002, "egress_gb": 0.05},
                "namespaces": [NAMESPACE, VAULT_NAMESPACE],
                "node_pools": [{"name": "pool", "count": c["nodes"], "cpu": c["cpu"], "memory": "8Gi"}],
            }
            for c in CLUSTERS
        ],
        "datasets": DATASETS,
    }


def regions() -> dict[str, str]:
    return {c["name"]: c["region"] for c in CLUSTERS}


def allowed_regions() -> dict[str, list[str] | None]:
    return {d["name"]: d.get("allowed_regions") for d in DATASETS}
