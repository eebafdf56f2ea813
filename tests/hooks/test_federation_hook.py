"""FederationHook against the simulated federation: real HTTP, real clients, shared state in Airflow."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from airflow_provider_fedsched.federation.request import TaskRequest
from airflow_provider_fedsched.hooks.federation import FederationHook, poll_interval
from airflow_provider_fedsched.sim import SimFederation
from airflow_provider_fedsched.state import AirflowVariableStateBackend, FederationState, MemoryStateBackend

TIME_SCALE = 0.1


@pytest.fixture(scope="module")
def fed() -> Iterator[SimFederation]:
    with SimFederation(time_scale=TIME_SCALE) as federation:
        yield federation


@pytest.fixture
def spec_path(fed: SimFederation, tmp_path: Path) -> Path:
    """The sim's spec under a fresh name, so that shared state never leaks between tests."""
    spec = yaml.safe_load((fed.state_dir / "federation.yaml").read_text())
    spec["name"] = f"hook-{uuid.uuid4().hex[:8]}"
    path = tmp_path / "federation.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def memory_hook(fed: SimFederation, spec_path: Path, **kwargs: object) -> FederationHook:
    return FederationHook(
        spec_path,
        kubeconfig=fed.state_dir / "kubeconfig",
        state=FederationState(MemoryStateBackend()),
        **kwargs,
    )


def test_collects_every_cluster_concurrently(fed: SimFederation, spec_path: Path) -> None:
    hook = memory_hook(fed, spec_path)
    hook.collect()  # warm up imports and connections
    for handle in fed.handles.values():
        handle.faults.latency(1.0)
    try:
        snapshots = hook.collect()
    finally:
        for handle in fed.handles.values():
            handle.faults.latency(0)

    assert {name: snap.reachable for name, snap in snapshots.items()} == dict.fromkeys(fed.clusters, True)
    # Three clusters answering in 1 s each: one after another, their snapshots would be taken at least
    # 1 s apart (2 s from first to last); asked at once, they are taken together (the total wall time
    # depends on the machine's load, this spread hardly does).
    observed = sorted(snap.observed_at for snap in snapshots.values())
    assert (observed[-1] - observed[0]).total_seconds() < 1.0
    north = snapshots["north-gpu"]
    assert sum(node.allocatable.get("nvidia.com/gpu", 0) for node in north.nodes) == 8
    assert any(taint.key == "nvidia.com/gpu" for node in north.nodes for taint in node.taints)


def test_a_slow_cluster_is_unavailable_and_does_not_hold_up_the_others(
    fed: SimFederation, spec_path: Path
) -> None:
    hook = memory_hook(fed, spec_path, snapshot_timeout=2.0)
    hook.collect()
    fed["west-general"].faults.latency(3.0)
    try:
        started = time.monotonic()
        snapshots = hook.collect()
        elapsed = time.monotonic() - started
    finally:
        fed["west-general"].faults.latency(0)

    assert snapshots["east-cpu"].reachable and snapshots["north-gpu"].reachable
    west = snapshots["west-general"]
    assert not west.reachable
    assert west.reason is not None and "no answer" in west.reason and "within 2s" in west.reason
    assert elapsed < 3.0  # the others were not made to wait for the slow one


def test_api_down_then_back(fed: SimFederation, spec_path: Path) -> None:
    hook = memory_hook(fed, spec_path)
    fed["east-cpu"].faults.down()
    try:
        down = hook.collect(["east-cpu"])["east-cpu"]
    finally:
        fed["east-cpu"].faults.up()
    back = hook.collect(["east-cpu"])["east-cpu"]

    assert (
        not down.reachable
        and down.reason is not None
        and re.search(r"connection refused at https?://127\.0\.0\.1", down.reason)  # sim http, test bed https
    )
    assert "token" not in down.reason.lower()
    assert back.reachable and len(back.nodes) == 3
    decision = hook.engine.decide(
        TaskRequest(resources={"cpu": 1000}), {"east-cpu": down}, now=datetime.now(UTC)
    )
    assert decision.outcome != "placed"


def test_unauthorized_cluster_is_unavailable_with_a_reason_naming_it(
    fed: SimFederation, tmp_path: Path
) -> None:
    kubeconfig = yaml.safe_load((fed.state_dir / "kubeconfig").read_text())
    for user in kubeconfig["users"]:
        user["user"]["token"] = "wrong-token-value"
    bad = tmp_path / "kubeconfig"
    bad.write_text(yaml.safe_dump(kubeconfig))
    hook = FederationHook(
        fed.state_dir / "federation.yaml", kubeconfig=bad, state=FederationState(MemoryStateBackend())
    )

    snapshot = hook.collect(["north-gpu"])["north-gpu"]

    assert not snapshot.reachable
    assert snapshot.reason is not None and "401" in snapshot.reason and "north-gpu" in snapshot.reason
    assert "wrong-token-value" not in snapshot.reason


def test_single_flight_refresh_one_cluster_read_for_many_concurrent_tasks(
    fed: SimFederation, spec_path: Path
) -> None:
    shared = FederationState(MemoryStateBackend(), federation=spec_path.stem)
    hooks = [
        FederationHook(spec_path, kubeconfig=fed.state_dir / "kubeconfig", state=shared) for _ in range(8)
    ]
    hooks[0].spec  # noqa: B018 - parse once before the burst
    for handle in fed.handles.values():
        handle.reset_request_counts()
    barrier = threading.Barrier(len(hooks))
    results: list[dict[str, object]] = []

    def task(hook: FederationHook) -> None:
        barrier.wait()
        results.append(hook.snapshots())

    threads = [threading.Thread(target=task, args=(hook,)) for hook in hooks]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)

    assert len(results) == len(hooks) and all(len(r) == 3 for r in results)
    assert {name: handle.request_count("GET", "/api/v1/nodes") for name, handle in fed.handles.items()} == {
        name: 1 for name in fed.clusters
    }


@pytest.mark.sim  # starts a simulator of its own
def test_reservations_prevent_over_placement_in_a_burst(tmp_path: Path) -> None:
    config = {
        "time_scale": TIME_SCALE,
        "clusters": [
            {
                "name": "cheap",
                "region": "r1",
                "prices": {"cpu_hour": 0.01, "memory_gib_hour": 0.001},
                "node_pools": [{"name": "p", "count": 5, "cpu": "4", "memory": "16Gi"}],
            },
            {
                "name": "pricey",
                "region": "r1",
                "prices": {"cpu_hour": 0.05, "memory_gib_hour": 0.005},
                "node_pools": [{"name": "p", "count": 10, "cpu": "16", "memory": "64Gi"}],
            },
        ],
    }
    with SimFederation(config) as fed:
        hook = FederationHook(
            fed.state_dir / "federation.yaml",
            kubeconfig=fed.state_dir / "kubeconfig",
            state=FederationState(MemoryStateBackend()),
        )
        request = TaskRequest(resources={"cpu": 2000, "memory": 2 * 2**30}, expected_duration_seconds=600)
        placed: list[str] = []

        def burst(index: int) -> None:
            decision = hook.place(request, placement_id=f"burst-{index}")
            placed.append(str(decision.cluster))

        threads = [threading.Thread(target=burst, args=(i,)) for i in range(20)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)

    assert sorted(placed) == ["cheap"] * 10 + ["pricey"] * 10


def test_cooldown_and_snapshots_are_visible_from_a_second_worker_process(
    fed: SimFederation, spec_path: Path, airflow_db: None
) -> None:
    # The default shared state of an Airflow deployment: Variables in the metadata database.
    hook = FederationHook(
        spec_path, kubeconfig=fed.state_dir / "kubeconfig", state=AirflowVariableStateBackend()
    )
    hook.collect()
    until = hook.cool_down("east-cpu", "insufficient: quota")
    script = (
        "import json, sys\n"
        "from datetime import UTC, datetime\n"
        "from airflow_provider_fedsched.hooks.federation import FederationHook\n"
        "hook = FederationHook(sys.argv[1])\n"
        "now = datetime.now(UTC)\n"
        "snaps = hook.state.snapshots.newest([c.name for c in hook.spec.clusters])\n"
        "until, why = hook.cooldown('east-cpu', now)\n"
        "print(json.dumps({'snapshots': sorted(snaps), 'until': until.isoformat(), 'why': why}))\n"
    )
    worker = subprocess.run(
        [sys.executable, "-c", script, str(spec_path)], capture_output=True, text=True, timeout=120
    )
    assert worker.returncode == 0, worker.stderr[-2000:]
    seen = json.loads(worker.stdout.strip().splitlines()[-1])

    assert seen == {
        "snapshots": sorted(fed.clusters),
        "until": until.isoformat(),
        "why": "insufficient: quota",
    }


@pytest.mark.parametrize(
    ("expected", "observed", "interval"),
    [(10, (), 2.0), (600, (), 20.0), (3 * 3600, (), 120.0), (None, (30, 900, 1200), 30.0), (None, (), 2.0)],
)
def test_health_cadence_follows_task_duration(
    expected: float | None, observed: tuple[float, ...], interval: float
) -> None:
    assert poll_interval(expected, observed) == interval


def test_fedsched_snapshot_and_live_place_from_a_kubeconfig(
    fed: SimFederation, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from airflow_provider_fedsched import cli

    out_file = tmp_path / "snap.yaml"
    federation, kubeconfig = str(fed.state_dir / "federation.yaml"), str(fed.state_dir / "kubeconfig")
    code = cli.main(
        ["snapshot", "--federation", federation, "--kubeconfig", kubeconfig, "--json", "--out", str(out_file)]
    )
    shown = json.loads(capsys.readouterr().out)

    assert code == 0
    rows = {row["cluster"]: row for row in shown["clusters"]}
    assert set(rows) == set(fed.clusters) and all(row["reachable"] for row in rows.values())
    assert rows["north-gpu"]["total"]["nvidia.com/gpu"] == "8"
    assert cli.main(["place", "--federation", federation, "--snapshots", str(out_file), "--cpu", "1"]) == 0
    capsys.readouterr()
    code = cli.main(
        [
            "place",
            "--federation",
            federation,
            "--live",
            "--kubeconfig",
            kubeconfig,
            "--gpu",
            "1",
            "--toleration",
            "nvidia.com/gpu=present:NoSchedule",
            "--json",
        ]
    )
    assert code == 0 and json.loads(capsys.readouterr().out)["cluster"] == "north-gpu"


def test_live_place_knows_a_request_above_a_hard_quota_can_never_fit(
    fed: SimFederation, capsys: pytest.CaptureFixture[str]
) -> None:
    """As a task decides (the placement cycle): a namespace whose hard quota is below the request is
    "never" on that cluster, and the explanation of the task placed elsewhere says so."""
    from airflow_provider_fedsched import cli

    federation, kubeconfig = str(fed.state_dir / "federation.yaml"), str(fed.state_dir / "kubeconfig")
    east = fed["east-cpu"]
    east.set_quota("etl", {"requests.cpu": "1"}, name="tiny")
    try:
        live = ["place", "--federation", federation, "--live", "--kubeconfig", kubeconfig]
        code = cli.main([*live, "--cpu", "2", "--namespace", "etl", "--json"])
    finally:
        east.set_quota("etl", {"requests.cpu": "1000"}, name="tiny")  # the module's other tests: room
    decision = json.loads(capsys.readouterr().out)
    assert code == 0 and decision["cluster"] != "east-cpu", decision["reason"]
    east_rejection = next(r for r in decision["rejected"] if r["cluster"] == "east-cpu")
    assert east_rejection["plugin"] == "Quota" and east_rejection["permanent"]
    assert "above the namespace's hard quota for cpu: it can never fit" in east_rejection["reason"]


def test_single_flight_refresh_across_worker_processes(
    fed: SimFederation, spec_path: Path, tmp_path: Path, airflow_db: None
) -> None:
    """Four worker processes need the same stale snapshots at once: only a refresh lease's winner reads a
    cluster, the others take its snapshot from shared state.

    Variables have no compare-and-set (:class:`LeaseStore`): a claim written later than the settle time
    after a rival's read-back wins too (one extra read, as documented). So the test counts each worker's
    wins and asserts that every read of a cluster was a winner's, and that fewer than all four workers
    read each cluster. A loaded CI machine had one such late claim in 836 tests."""
    go = tmp_path / "go"
    script = (
        "import json, sys, time\n"
        "from pathlib import Path\n"
        "from airflow_provider_fedsched.hooks.federation import FederationHook\n"
        "from airflow_provider_fedsched.state import AirflowVariableStateBackend\n"
        "hook = FederationHook(sys.argv[1], kubeconfig=sys.argv[2], state=AirflowVariableStateBackend())\n"
        "hook.spec, hook.state\n"
        "won = []\n"
        "claim = hook.state.leases.claim\n"
        "def counted(*args, **kwargs):\n"
        "    result = claim(*args, **kwargs)\n"
        "    won.extend(result)\n"
        "    return result\n"
        "hook.state.leases.claim = counted\n"
        "Path(sys.argv[4]).touch()\n"
        "while not Path(sys.argv[3]).exists():\n"
        "    time.sleep(0.005)\n"
        "print(json.dumps({'snapshots': len(hook.snapshots()), 'won': won}))\n"
    )
    for handle in fed.handles.values():
        handle.reset_request_counts()
    workers = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                script,
                str(spec_path),
                str(fed.state_dir / "kubeconfig"),
                str(go),
                str(tmp_path / f"ready-{i}"),
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        for i in range(4)
    ]
    deadline = time.monotonic() + 120
    while not all((tmp_path / f"ready-{i}").exists() for i in range(4)) and time.monotonic() < deadline:
        time.sleep(0.05)
    go.touch()  # all four start their decision at the same moment
    reports = [json.loads(worker.communicate(timeout=120)[0].strip().splitlines()[-1]) for worker in workers]

    assert [report["snapshots"] for report in reports] == [3] * 4
    wins = {name: sum(report["won"].count(name) for report in reports) for name in fed.clusters}
    reads = {name: handle.request_count("GET", "/api/v1/nodes") for name, handle in fed.handles.items()}
    # A worker that lost a lease read nothing itself (a winner may find a snapshot delivered meanwhile).
    assert all(reads[name] <= wins[name] for name in fed.clusters), (reads, wins)
    assert all(1 <= count < 4 for count in reads.values()), reads


class _CountingBackend(MemoryStateBackend):
    """Counts the reads of shared state (each one a call through the API server for a task)."""

    def __init__(self) -> None:
        super().__init__()
        self.reads = 0

    def get(self, key: str) -> Any:
        self.reads += 1
        return super().get(key)

    def get_many(self, prefix: str) -> dict[str, Any]:
        self.reads += 1
        return super().get_many(prefix)


def test_a_worker_waiting_for_another_workers_refresh_polls_shared_state_sparingly(
    fed: SimFederation, spec_path: Path
) -> None:
    """Another worker holds the refresh lease of east-cpu and delivers its snapshot 3 s later. The waiting
    worker takes that snapshot (it reads no cluster itself) and, backing off, reads shared state a few
    times meanwhile, not every 50 ms (the full soak: twenty such workers kept the API server busy)."""
    from datetime import timedelta

    backend = _CountingBackend()
    shared = FederationState(backend, federation=spec_path.stem)
    hook = FederationHook(spec_path, kubeconfig=fed.state_dir / "kubeconfig", state=shared)
    other = FederationHook(spec_path, kubeconfig=fed.state_dir / "kubeconfig", state=shared)
    now = datetime.now(UTC)
    assert shared.leases.claim(["east-cpu"], "another-worker", now, timedelta(seconds=60)) == ["east-cpu"]
    for handle in fed.handles.values():
        handle.reset_request_counts()

    def deliver() -> None:
        snapshot = other.collect(["east-cpu"])["east-cpu"]
        assert snapshot.reachable

    timer = threading.Timer(3.0, deliver)
    backend.reads = 0
    timer.start()
    try:
        found = hook.snapshots(["east-cpu"], now=now)
    finally:
        timer.join(timeout=30)
    assert found["east-cpu"].reachable and found["east-cpu"].observed_at >= now
    assert fed["east-cpu"].request_count("GET", "/api/v1/nodes") == 1  # the other worker's, only
    assert backend.reads < 30, backend.reads  # polling every 50 ms would be 60 polls and more


def test_a_worker_that_asks_while_another_stores_its_refresh_takes_that_snapshot(
    fed: SimFederation, spec_path: Path
) -> None:
    """Another worker holding east-cpu's lease read it 2 s before this worker asked, and stores the
    snapshot (after its sweep) 1 s after. The snapshot is fresh by the policy's TTL: the waiting worker
    takes it and reads no cluster itself (CI: a worker that asked in between waited out the lease and read
    the cluster again)."""
    from datetime import timedelta

    shared = FederationState(MemoryStateBackend(), federation=spec_path.stem)
    hook = FederationHook(spec_path, kubeconfig=fed.state_dir / "kubeconfig", state=shared)
    other = FederationHook(
        spec_path, kubeconfig=fed.state_dir / "kubeconfig", state=FederationState(MemoryStateBackend())
    )
    now = datetime.now(UTC)
    read = other.collect(["east-cpu"])["east-cpu"]
    stored = read.model_copy(update={"observed_at": now - timedelta(seconds=2)})
    assert shared.leases.claim(["east-cpu"], "another-worker", now, timedelta(seconds=60)) == ["east-cpu"]
    for handle in fed.handles.values():
        handle.reset_request_counts()

    timer = threading.Timer(1.0, lambda: shared.snapshots.put([stored]))
    timer.start()
    try:
        found = hook.snapshots(["east-cpu"], now=now)
    finally:
        timer.join(timeout=30)
    assert found["east-cpu"].observed_at == stored.observed_at
    assert fed["east-cpu"].request_count("GET", "/api/v1/nodes") == 0


def test_snapshots_fresh_when_asked_are_read_again_after_a_long_wait(
    fed: SimFederation, spec_path: Path
) -> None:
    """east-cpu's snapshot is fresh when the worker asks (3 s of an 8 s TTL); north-gpu's refresh belongs
    to another worker, which delivers both 3 s later. The worker returns the newer east-cpu snapshot, not
    the one it started with (6 s old by then, soon past the TTL: the full soak's decisions waited on
    clusters found stale this way)."""
    from datetime import timedelta

    spec = yaml.safe_load(spec_path.read_text())
    spec["policy"]["snapshot_ttl_seconds"] = 8
    spec_path.write_text(yaml.safe_dump(spec))
    shared = FederationState(MemoryStateBackend(), federation=spec_path.stem)
    hook = FederationHook(spec_path, kubeconfig=fed.state_dir / "kubeconfig", state=shared)
    other = FederationHook(spec_path, kubeconfig=fed.state_dir / "kubeconfig", state=shared)
    taken = other.collect(["east-cpu"])["east-cpu"]
    first = taken.model_copy(update={"observed_at": datetime.now(UTC) - timedelta(seconds=3)})
    shared.snapshots.put([first])  # as another worker stored it 3 s ago
    now = datetime.now(UTC)
    assert shared.leases.claim(["north-gpu"], "another-worker", now, timedelta(seconds=60)) == ["north-gpu"]
    delivered: list[datetime] = []

    def deliver() -> None:
        delivered.append(datetime.now(UTC))
        other.collect(["east-cpu", "north-gpu"])

    timer = threading.Timer(3.0, deliver)
    timer.start()
    try:
        found = hook.snapshots(["east-cpu", "north-gpu"])
    finally:
        timer.join(timeout=30)
    assert found["north-gpu"].observed_at >= delivered[0]
    assert found["east-cpu"].observed_at >= delivered[0] > first.observed_at


def test_the_engine_is_given_each_reservation_in_the_order_it_was_held(
    fed: SimFederation, spec_path: Path
) -> None:
    """The node fit charges pods in flight one by one: the view lists each placement's requests, oldest
    first, and their sum is the cluster's reservation."""
    hook = FederationHook(
        spec_path, kubeconfig=fed.state_dir / "kubeconfig", state=FederationState(MemoryStateBackend())
    )
    small = TaskRequest(resources={"cpu": 500}, clusters=["east-cpu"])
    large = TaskRequest(resources={"cpu": 1500}, clusters=["east-cpu"])
    assert hook.place(small, placement_id="first").cluster == "east-cpu"
    assert hook.place(large, placement_id="second").cluster == "east-cpu"

    view = hook.view(["east-cpu"], namespace=None)

    assert [pod["cpu"] for pod in view.in_flight["east-cpu"]] == [500, 1500]
    assert view.reservations["east-cpu"]["cpu"] == 2000
