"""The divided-jobs replay (replay/divided.py): Indexed Jobs placed whole or divided over the members."""

from __future__ import annotations

from airflow_provider_fedsched.replay.divided import Job, jobs_from_pods, replay_jobs
from airflow_provider_fedsched.replay.topology import build_federation
from airflow_provider_fedsched.replay.workload import Node, Task

HOME, OTHER = "cn-hangzhou", "cn-shanghai"
SOVEREIGN = f"data-{HOME}-0"
"""build_federation's first dataset of each member is restricted to that member's region."""


def two_members() -> list[Node]:
    """Two members of two 8-core nodes each: one 8-core pod per node."""
    return [Node(f"{c}-{i}", 8000, 32768, 0, "", c) for c in (HOME, OTHER) for i in range(2)]


def job(name: str, indices: int, arrival: float = 0.0, **extra: object) -> Job:
    pod = Task(name, arrival, 100.0, 8000, 1024, 0, **extra)  # type: ignore[arg-type]
    return Job(name, arrival, pod, (100.0,) * indices)


def test_jobs_from_the_pods_keep_every_pods_work_in_arrival_order_and_the_same_seed_deals_the_same() -> None:
    pods = [Task(f"p{i}", float(i), 10.0 + i, 1000, 512, 0) for i in range(100)]

    jobs = jobs_from_pods(list(reversed(pods)), seed=3)

    assert jobs == jobs_from_pods(pods, seed=3)
    assert [run for j in jobs for run in j.runs] == [pod.run for pod in pods]
    assert all(j.completions in (4, 8, 16, 32) for j in jobs[:-1])
    assert [j.arrival for j in jobs] == sorted(j.arrival for j in jobs)


def test_a_job_no_member_holds_whole_runs_divided_each_index_once() -> None:
    federation = build_federation(two_members(), [], clusters=2, seed=0, keep_clusters=True)
    jobs = [job("wide", 3)]  # three 8-core pods: no member has more than two nodes

    whole = replay_jobs(federation, jobs, "whole")
    divided = replay_jobs(federation, jobs, "divided")

    assert (whole.unplaced, whole.pods_run) == (1, {})
    assert divided.unplaced == 0
    assert sum(divided.pods_run["wide"].values()) == 3
    assert set(divided.pods_run["wide"]) == {HOME, OTHER}
    assert divided.makespan_s == 100.0 and divided.mean_wait_s == 0.0


def test_a_sovereign_divided_job_runs_only_in_its_region_and_waits_there_for_room() -> None:
    federation = build_federation(two_members(), [], clusters=2, seed=0, keep_clusters=True)
    jobs = [job("records", 3, datasets=(SOVEREIGN,))]

    divided = replay_jobs(federation, jobs, "divided")

    assert divided.pods_run == {"records": {HOME: 3}}
    assert divided.makespan_s == 200.0  # two at once on its two nodes, then the third


def test_while_each_member_has_one_node_busy_a_divided_job_starts_at_once_and_a_whole_one_waits() -> None:
    federation = build_federation(two_members(), [], clusters=2, seed=0, keep_clusters=True)
    busy = [job("busy-home", 1, datasets=(SOVEREIGN,)), job("busy-other", 1, datasets=(f"data-{OTHER}-0",))]
    jobs = [*busy, job("pair", 2, arrival=1.0)]  # one node free in each member from 0 s to 100 s

    whole = replay_jobs(federation, jobs, "whole")
    divided = replay_jobs(federation, jobs, "divided")

    assert divided.pods_run["pair"] == {HOME: 1, OTHER: 1}
    assert len(whole.pods_run["pair"]) == 1  # one member, once the busy pods are done there
    # pair's wait: none divided; whole, until the busy pods end (100 s) and the retry after (10 s).
    assert divided.mean_wait_s == 0.0
    assert whole.mean_wait_s == (0.0 + 0.0 + 109.0) / 3
    assert (divided.makespan_s, whole.makespan_s) == (101.0, 210.0)
    for result in (whole, divided):
        assert result.unplaced == 0
        counts = {name: sum(ran.values()) for name, ran in result.pods_run.items()}
        assert counts == {"busy-home": 1, "busy-other": 1, "pair": 2}


def test_divided_in_room_keeps_the_indices_beyond_room_in_the_federation_until_a_member_frees_room() -> None:
    federation = build_federation(two_members(), [], clusters=2, seed=0, keep_clusters=True)
    jobs = [job("records", 3, datasets=(SOVEREIGN,))]

    in_room = replay_jobs(federation, jobs, "divided-in-room")

    assert in_room.pods_run == {"records": {HOME: 3}}
    # Two at once; the third dealt at the retry after the first two end (100 s + 10 s), then runs 100 s.
    assert in_room.makespan_s == 210.0
    assert in_room.decisions == 2
