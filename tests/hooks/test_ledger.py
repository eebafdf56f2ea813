"""Reservations that hold across worker processes: the member cluster's own ledger (a Lease, changed by
compare-and-set). Real processes, real HTTP, the simulated cluster; shared state in Airflow Variables."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from airflow_provider_fedsched.federation.request import GangRole, TaskRequest
from airflow_provider_fedsched.hooks import ledgers
from airflow_provider_fedsched.hooks.federation import FederationHook
from airflow_provider_fedsched.sim import SimFederation
from airflow_provider_fedsched.state import AirflowVariableStateBackend, FederationState, MemoryStateBackend
from airflow_provider_fedsched.state.process import ledgers_unavailable

SLOTS = 2
WORKERS = 4

# One cluster with room for SLOTS one-cpu pods.
CONFIG = {
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
REQUEST = TaskRequest(resources={"cpu": 1000, "memory": 2**30})

PLACE = """
import json, sys, time
from pathlib import Path
from airflow_provider_fedsched.federation.request import GangRole, TaskRequest
from airflow_provider_fedsched.hooks.federation import FederationHook
from airflow_provider_fedsched.state import AirflowVariableStateBackend
hook = FederationHook(sys.argv[1], kubeconfig=sys.argv[2], state=AirflowVariableStateBackend())
request = TaskRequest(resources={"cpu": 1000, "memory": 2**30})
hook.spec, hook.state, hook.access("solo")
Path(sys.argv[4]).touch()
while not Path(sys.argv[3]).exists():
    time.sleep(0.002)
decision = hook.place(request, sys.argv[5])
print(json.dumps({"outcome": decision.outcome, "reason": decision.reason}))
"""


@pytest.fixture(scope="module")
def solo() -> Iterator[SimFederation]:
    with SimFederation(CONFIG) as federation:
        yield federation


@pytest.fixture
def spec_path(solo: SimFederation, tmp_path: Path) -> Path:
    spec = yaml.safe_load((solo.state_dir / "federation.yaml").read_text())
    spec["name"] = f"ledger-{uuid.uuid4().hex[:8]}"
    spec["policy"]["snapshot_ttl_seconds"] = 600  # every worker decides on the same snapshot
    path = tmp_path / "federation.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def place_concurrently(solo: SimFederation, spec_path: Path, tmp_path: Path, ledger: bool) -> list[str]:
    env = {"AIRFLOW__FEDSCHED__PLACEMENT_LEDGER": "True" if ledger else "False"}
    go = tmp_path / f"go-{ledger}"
    workers = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                PLACE,
                str(spec_path),
                str(solo.kubeconfig_path),
                str(go),
                str(tmp_path / f"ready-{ledger}-{i}"),
                f"p{ledger}-{i}",
            ],
            stdout=subprocess.PIPE,
            text=True,
            env={**__import__("os").environ, **env},
        )
        for i in range(WORKERS)
    ]
    deadline = time.monotonic() + 600  # each worker imports Airflow: slow on a loaded machine
    while not all((tmp_path / f"ready-{ledger}-{i}").exists() for i in range(WORKERS)):
        assert time.monotonic() < deadline, "the workers never got ready"
        time.sleep(0.05)
    go.touch()  # every worker places at the same moment, on the same snapshot
    outputs = [json.loads(w.communicate(timeout=180)[0].strip().splitlines()[-1]) for w in workers]
    return [o["outcome"] for o in outputs]


def test_the_ledger_never_holds_more_than_the_room(solo: SimFederation, spec_path: Path) -> None:
    hook = FederationHook(
        spec_path, kubeconfig=solo.kubeconfig_path, state=FederationState(MemoryStateBackend())
    )
    hook.collect()
    placed = [hook.place(REQUEST, f"one-{i}").outcome for i in range(SLOTS + 1)]
    assert placed == ["placed"] * SLOTS + ["wait"]
    assert set(ledgers.held(hook, "solo")) == {f"one-{i}" for i in range(SLOTS)}
    hook.release("solo", "one-0")
    assert hook.place(REQUEST, "one-again").outcome == "placed"


def test_reservations_hold_across_worker_processes(
    solo: SimFederation, spec_path: Path, tmp_path: Path, airflow_db: None
) -> None:
    """Four workers place one-cpu tasks at once on a cluster with room for two, all from one snapshot."""
    FederationHook(spec_path, kubeconfig=solo.kubeconfig_path, state=AirflowVariableStateBackend()).collect()
    outcomes = place_concurrently(solo, spec_path, tmp_path, ledger=True)
    assert outcomes.count("placed") == SLOTS and outcomes.count("wait") == WORKERS - SLOTS


def test_a_busy_ledger_is_waited_for_never_given_up_on(solo: SimFederation, spec_path: Path) -> None:
    """Twelve threads of one process place at once on room for two: the ledger's compare-and-set
    arbitrates (no process lock), losing writers retry while the room lasts, and a busy ledger is never
    mistaken for one the cluster cannot keep (which would leave only shared state to guard the room)."""
    hook = FederationHook(
        spec_path, kubeconfig=solo.kubeconfig_path, state=FederationState(MemoryStateBackend())
    )
    hook.collect()
    hook.access("solo")
    barrier = threading.Barrier(12)
    outcomes: list[str] = []

    def place(index: int) -> None:
        barrier.wait()
        outcomes.append(hook.place(REQUEST, f"burst-{index}").outcome)

    threads = [threading.Thread(target=place, args=(i,)) for i in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert sorted(outcomes) == ["placed"] * SLOTS + ["wait"] * (12 - SLOTS)
    assert len(ledgers.held(hook, "solo")) == SLOTS
    assert not ledgers_unavailable.marked((hook.spec.name, "solo"))


# A GPU pool (tainted) and one small CPU node: a GPU task's room is on the GPU nodes, a CPU task's on the
# CPU node only.
MIXED = {
    "time_scale": 0.1,
    "clusters": [
        {
            "name": "mixed",
            "region": "r1",
            "prices": {"cpu_hour": 0.01, "memory_gib_hour": 0.001, "gpu_hour": 1.0},
            "node_pools": [
                {
                    "name": "gpu",
                    "count": 2,
                    "cpu": "8",
                    "memory": "64Gi",
                    "extra": {"nvidia.com/gpu": "2"},
                    "taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}],
                },
                {"name": "cpu", "count": 1, "cpu": "3", "memory": "12Gi"},
            ],
        }
    ],
}


def test_the_ledger_judges_a_held_pod_where_it_can_land_as_the_decision_does(tmp_path: Path) -> None:
    """A GPU task held in the ledger takes room on the GPU nodes, not on the CPU node a CPU task needs: the
    ledger's check charges what it holds pod by pod, as the decision that chose the cluster did. (Charged
    as one sum to the nodes the CPU task may use, it said 'no room' where the decision had found some, and
    the task was sent elsewhere: the demo's clickstream_rollup left the cluster holding its 2 TB.)"""
    with SimFederation(MIXED) as federation:
        spec = yaml.safe_load((federation.state_dir / "federation.yaml").read_text())
        spec["policy"]["snapshot_ttl_seconds"] = 600
        path = tmp_path / "federation.yaml"
        path.write_text(yaml.safe_dump(spec))
        hook = FederationHook(
            path, kubeconfig=federation.kubeconfig_path, state=FederationState(MemoryStateBackend())
        )
        hook.collect()
        gpu = TaskRequest(
            resources={"cpu": 4000, "memory": 16 * 2**30, "nvidia.com/gpu": 2},
            tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        )
        cpu = TaskRequest(resources={"cpu": 2000, "memory": 8 * 2**30})
        assert hook.place(gpu, "gpu-task").cluster == "mixed"
        placed = hook.place(cpu, "cpu-task")
        assert (placed.outcome, placed.cluster) == ("placed", "mixed"), placed.reason
        assert set(ledgers.held(hook, "mixed")) == {"gpu-task", "cpu-task"}
        # The CPU node's room is still guarded: a second CPU task of the same size does not fit beside it.
        assert hook.place(cpu, "cpu-task-2").outcome == "wait"

        # A held gang counts as its pods: two 2-GPU workers take both GPU nodes, and a 2-GPU task finds no
        # room in the ledger (as one pod of their sum, it would fit no node and take nothing).
        for placement_id in ("gpu-task", "cpu-task"):
            hook.release("mixed", placement_id)
        worker = GangRole(count=2, resources={"cpu": 4000, "memory": 16 * 2**30, "nvidia.com/gpu": 2})
        gang = TaskRequest.for_gang([worker], tolerations=gpu.tolerations)
        assert hook.place(gang, "gang").cluster == "mixed"
        refused = hook.place(gpu, "gpu-task-2")
        assert refused.outcome == "wait" and "its ledger is full" in refused.reason, refused.reason
        assert set(ledgers.held(hook, "mixed")) == {"gang"}
