"""The replay on a small generated trace: determinism, metrics that hold by construction, colocation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from airflow_provider_fedsched import cli
from airflow_provider_fedsched.replay import Settings, replay
from airflow_provider_fedsched.replay.cluster import ClusterState, Running
from airflow_provider_fedsched.replay.scenario import seed_3x20
from airflow_provider_fedsched.replay.simulator import _Replay, simulate
from airflow_provider_fedsched.replay.topology import Tide, build_federation
from airflow_provider_fedsched.replay.workload import (
    Node,
    Task,
    TraceShaping,
    read_nodes,
    read_pods,
    shape_trace,
)
from tests.replay.fixture import write_trace

ALL = "home,round-robin,random,least-loaded,cheapest,static-labels,fedsched,fedsched+colocation"


@pytest.fixture
def trace(tmp_path: Path) -> tuple[Path, Path]:
    return write_trace(tmp_path)


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(["replay", "--no-progress", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_json_has_every_policy_and_the_same_seed_gives_the_same_result(
    trace: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    nodes, pods = trace
    args = ["--nodes", str(nodes), "--pods", str(pods), "--clusters", "3", "--window", "600", "--json"]
    code, first, _ = run_cli(capsys, *args)
    assert code == 0
    again = run_cli(capsys, *args)[1]
    assert first == again
    document = json.loads(first)
    assert set(document["policies"]) == set(ALL.split(","))
    bound = document["lower_bound_makespan_s"]
    for name, result in document["policies"].items():
        assert set(result) == {
            "makespan_s",
            "utilization",
            "mean_wait_s",
            "p95_wait_s",
            "cost",
            "egress_gb",
            "sovereignty_violations",
            "unplaced",
            "failovers",
        }
        # Physics: no policy finishes before the lower bound, nor uses more than the federation has.
        assert result["makespan_s"] >= bound - 1e-6, name
        assert 0 < result["utilization"]["cpu"] <= 1 and 0 < result["utilization"]["gpu"] <= 1, name
        # Only home can leave pods unplaced: those whose home cluster has no node of their GPU type.
        assert result["unplaced"] == 0 or name == "home", name
    assert document["policies"]["fedsched"]["sovereignty_violations"] == 0
    assert document["policies"]["fedsched+colocation"]["sovereignty_violations"] == 0
    assert document["policies"]["home"]["sovereignty_violations"] == 0
    # The sovereignty-blind baselines do move restricted data somewhere it may not go.
    assert document["policies"]["round-robin"]["sovereignty_violations"] > 0


def test_a_different_seed_gives_a_different_federation(trace: tuple[Path, Path]) -> None:
    nodes, pods = trace
    tasks = shape_trace(read_pods(pods), TraceShaping(600, 3600, 1), 0)
    one = build_federation(read_nodes(nodes), tasks, clusters=3, seed=1)
    two = build_federation(read_nodes(nodes), tasks, clusters=3, seed=2)
    assert [t.home for t in one.tasks] != [t.home for t in two.tasks]


def test_table_and_plot(trace: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    nodes, pods = trace
    image = tmp_path / "replay.png"
    code, out, _ = run_cli(
        capsys,
        "--nodes",
        str(nodes),
        "--pods",
        str(pods),
        "--policies",
        "home,fedsched",
        "--plot",
        str(image),
    )
    assert code == 0
    assert "makespan lower bound" in out and "fedsched" in out and "pods/s" in out
    assert image.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--policies", "fedsched,fastest"], "--policies: unknown policy 'fastest'"),
        (["--clusters", "0"], "--clusters: must be 1..1,000"),
        (["--staleness", "-1"], "--staleness: -1.0 is not a number of seconds"),
        (["--copies", "0"], "--copies: must be 1..1,000"),
    ],
)
def test_bad_options_exit_2_naming_the_option(
    trace: tuple[Path, Path], capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    nodes, pods = trace
    code, out, err = run_cli(capsys, "--nodes", str(nodes), "--pods", str(pods), *argv)
    assert code == 2 and out == ""
    assert message in err and "Traceback" not in err


def test_bad_files_exit_2_naming_file_line_and_column(
    tmp_path: Path, trace: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    nodes, pods = trace
    broken = tmp_path / "broken.csv"
    lines = pods.read_text().splitlines()
    lines[3] = lines[3].replace(lines[3].split(",")[1], "lots", 1)
    broken.write_text("\n".join(lines) + "\n")
    code, _, err = run_cli(capsys, "--nodes", str(nodes), "--pods", str(broken))
    assert code == 2
    assert f"pods file {broken} line 4: cpu_milli: 'lots' is not a number" in err
    missing = tmp_path / "nodes.csv.gone"
    code, _, err = run_cli(capsys, "--nodes", str(missing), "--pods", str(pods))
    assert code == 2 and f"cannot read nodes file '{missing}': No such file" in err
    headless = tmp_path / "headless.csv"
    headless.write_text("sn,cpu_milli\nn1,1000\n")
    code, _, err = run_cli(capsys, "--nodes", str(headless), "--pods", str(pods))
    assert code == 2 and "missing column(s) memory_mib, gpu, model" in err
    code, _, err = run_cli(capsys, "--nodes", str(nodes))
    assert code == 2 and "--pods: required with --nodes" in err


def test_rising_online_load_evicts_borrowing_work_which_resumes_from_its_checkpoint() -> None:
    """One node: an online service requests most of it but uses little at night, a preemptible task
    borrows that; when the tide rises the task is evicted, fails over to the other cluster and finishes
    the work left since its last checkpoint."""
    nodes = [Node("a-1", 8000, 16384, 0, "", None), Node("b-1", 8000, 16384, 0, "", None)]
    service = Task("svc", 0.0, 40_000.0, 6000, 2048, 0, qos="LS", home="x", pinned=True)
    hog = Task("hog", 0.0, 40_000.0, 6000, 2048, 0, qos="Burstable", home="y", pinned=True)
    batch = Task("batch", 10.0, 7200.0, 6000, 2048, 0, qos="BE", home="x")
    federation = build_federation(nodes, [service, hog, batch], clusters=2, seed=0, keep_clusters=False)
    names = federation.names
    federation.tasks = [
        Task("svc", 0.0, 40_000.0, 6000, 2048, 0, qos="LS", home=names[0], pinned=True),
        Task("hog", 0.0, 3000.0, 6000, 2048, 0, qos="Burstable", home=names[1], pinned=True),
        Task("batch", 10.0, 1800.0, 6000, 2048, 0, qos="BE", home=names[0]),
    ]
    # Eight hours before the online peak the service uses a quarter of its request; within the hour it
    # uses more than the node can lend.
    federation.tide = Tide(low=0.0, high=1.0, peak_hour=14.0, start_hour_utc=6.0)
    federation.offsets = dict.fromkeys(names, 0)
    ledger = simulate(federation, "fedsched+colocation", Settings(checkpoint_seconds=600))
    result = ledger.result()
    assert result.unplaced == 0
    assert result.failovers >= 1
    assert "batch" in ledger.done
    assert ledger.first_start["batch"] - 10.0 < 60  # it borrowed at once
    # Evicted, it resumed elsewhere from its last checkpoint: it ran less than twice its work in all.
    assert result.makespan_s > 1800.0
    plain = simulate(federation, "fedsched", Settings())
    # Without colocation it waits for the Burstable hog (3000 s) to leave the other cluster.
    assert plain.first_start["batch"] >= 2990
    assert plain.result().failovers == 0


def test_seed_scenario_is_deterministic_and_fedsched_keeps_sovereignty() -> None:
    federation = seed_3x20(0)
    assert len(federation.names) == 3
    assert all(len(nodes) == 20 for nodes in federation.clusters.values())
    report = replay(federation, ["fedsched", "round-robin"], Settings(), "seed-3x20")
    again = replay(seed_3x20(0), ["fedsched", "round-robin"], Settings(), "seed-3x20")
    assert report.to_dict() == again.to_dict()
    assert report.results["fedsched"].sovereignty_violations == 0
    clusters = {n: ClusterState(n, federation.clusters[n], set(), True) for n in federation.names}
    assert sum(c.capacity[2] for c in clusters.values()) == 3 * 8 * 8 * 1000


def test_an_eviction_cools_nothing_down_and_the_cluster_is_left_only_until_it_answers_again() -> None:
    """The operator's rule: an eviction is about one pod or node, so no cooldown; the try leaves the
    cluster until a snapshot taken after the eviction (the hook's ``answered_since``)."""
    nodes = [Node("a-1", 8000, 16384, 0, "", None), Node("b-1", 8000, 16384, 0, "", None)]
    federation = build_federation(nodes, [], clusters=2, seed=0)
    names = federation.names
    federation.tasks = [
        Task("svc", 0.0, 40_000.0, 6000, 2048, 0, qos="LS", home=names[0], pinned=True),
        Task("hog", 0.0, 3000.0, 6000, 2048, 0, qos="Burstable", home=names[1], pinned=True),
        Task("batch", 10.0, 1800.0, 6000, 2048, 0, qos="BE", home=names[0]),
    ]
    federation.tide = Tide(low=0.0, high=1.0, peak_hour=14.0, start_hour_utc=6.0)
    federation.offsets = dict.fromkeys(names, 0)
    run = _Replay(federation, "fedsched+colocation", Settings(checkpoint_seconds=600), None)
    ledger = run.run()
    assert ledger.result().failovers >= 1 and "batch" in ledger.done
    assert run.cooldowns == {}
    state = run.state["batch"]
    assert state.excluded  # it did leave a cluster
    assert run.active_exclusions(state, True) == {}  # and that cluster has answered since


def test_the_federation_queue_starts_the_longest_waiting_task_first() -> None:
    """Two nodes, both busy; two short tasks arrive before a long one. When the nodes free up, fedsched
    (longest-first) starts the long one at once, which shortens the makespan; arrival order does not."""
    nodes = [Node("a-1", 8000, 16384, 0, "", None), Node("a-2", 8000, 16384, 0, "", None)]
    federation = build_federation(nodes, [], clusters=1, seed=0)
    home = federation.names[0]
    federation.tasks = [
        Task("busy-1", 0.0, 100.0, 8000, 2048, 0, qos="BE", home=home),
        Task("busy-2", 0.0, 100.0, 8000, 2048, 0, qos="BE", home=home),
        Task("short-1", 1.0, 100.0, 8000, 2048, 0, qos="BE", home=home),
        Task("short-2", 2.0, 100.0, 8000, 2048, 0, qos="BE", home=home),
        Task("long", 3.0, 1000.0, 8000, 2048, 0, qos="BE", home=home),
    ]
    ledger = simulate(federation, "fedsched", Settings())
    assert ledger.first_start["long"] < ledger.first_start["short-2"]
    federation.spec = federation.spec.model_copy(
        update={"policy": federation.spec.policy.merged({"queue_order": "arrival"})}
    )
    fifo = simulate(federation, "fedsched", Settings())
    assert fifo.first_start["short-2"] < fifo.first_start["long"]
    assert ledger.result().makespan_s < fifo.result().makespan_s


def test_the_binder_packs_gpus_only_where_the_spec_says_the_cluster_does() -> None:
    """``MostAllocated`` on the GPU: a 1-GPU pod goes to the node with the least GPU left that fits, so
    the empty node stays whole; the default spreads it to the least allocated node."""
    nodes = [Node("n1", 64000, 262144, 8, "V100"), Node("n2", 64000, 262144, 8, "V100")]
    seven = Task("seven", 0.0, 60.0, 4000, 1024, 7000)
    for packs_gpu, expected in ((True, "n1"), (False, "n2")):
        cluster = ClusterState("c", nodes, set(), packs_gpu=packs_gpu)
        first = cluster.pick_node(seven, False)
        assert first is not None and first.name == "n1"  # both empty: the first by name
        cluster.bind(first, Running(seven, "c", first, 0.0, 60.0, False, 1, 0.0))
        chosen = cluster.pick_node(Task("one", 0.0, 60.0, 4000, 1024, 1000), False)
        assert chosen is not None and chosen.name == expected
