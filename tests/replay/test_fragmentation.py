"""The fragmentation protocol on small inputs: its rules (the pod list, the load, the binning), each node
binder's definition, the member's default binder and its node hint, the command's JSON and errors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from airflow_provider_fedsched import cli
from airflow_provider_fedsched.federation.fragmentation import TaskShape, Workload
from airflow_provider_fedsched.replay.binders import BINDERS, Member, Pod, kube_default
from airflow_provider_fedsched.replay.fragmentation import arrivals, read_pod_list
from airflow_provider_fedsched.replay.fragmentation_run import by_load, load_points
from airflow_provider_fedsched.replay.workload import Node
from tests.replay.fixture import POD_HEADER, write_trace


@pytest.fixture
def trace(tmp_path: Path) -> tuple[Path, Path]:
    return write_trace(tmp_path)


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(["replay", "--protocol", "fragmentation", "--no-progress", *argv])
    out, err = capsys.readouterr()
    return code, out, err


# ---------------------------------------------------------------- the protocol's rules


def test_the_pod_list_every_row_sorted_by_name_gpu_share_capped(tmp_path: Path) -> None:
    pods = tmp_path / "pods.csv"
    pods.write_text(
        POD_HEADER + "\n"
        "b,1000,100,1,1500,,BE,Failed,0,10,0\n"  # a share above one GPU counts as one GPU
        "a,2000,100,2,1000,T4|A10,LS,Pending,0,10,0\n"
        "c,500,100,0,300,,BE,Succeeded,0,10,0\n"  # no GPU asked: no share
    )
    listed = read_pod_list(pods)
    assert [task.name for task in listed.tasks] == ["a", "b", "c"]
    assert [pod.shape for pod in listed.pods] == [
        TaskShape(2000, 2, 1000, ("T4", "A10")),
        TaskShape(1000, 1, 1000),
        TaskShape(500),
    ]
    assert listed.gpu_total.tolist() == [2000, 1000, 0]
    assert listed.gpu_share.tolist() == [1000, 1000, 0]
    pods.write_text(POD_HEADER + "\nx,1000,100,2,500,,BE,Running,0,10,0\n")
    with pytest.raises(ValueError, match=r"line 2: gpu_milli: 500 on each of 2 GPUs \(num_gpu\)"):
        read_pod_list(pods)


def test_arrivals_shuffle_every_pod_then_draw_until_the_load_would_pass(trace: tuple[Path, Path]) -> None:
    pods = read_pod_list(trace[1])
    requested = int(pods.gpu_total.sum())
    capacity = requested  # the list asks for exactly the capacity: 1.3 x needs 30 % more
    order = arrivals(pods, capacity, 1.3, 42)
    assert sorted(order[: len(pods.tasks)].tolist()) == list(range(len(pods.tasks)))
    total = int(pods.gpu_total[order].sum())
    assert total <= 1.3 * capacity
    # The next draw would have passed the load by its share of one device, which stopped the list.
    rng = np.random.default_rng(42)
    rng.permutation(len(pods.tasks))
    for _ in order[len(pods.tasks) :]:
        rng.integers(len(pods.tasks))
    assert total + int(pods.gpu_share[int(rng.integers(len(pods.tasks)))]) > 1.3 * capacity
    assert np.array_equal(order, arrivals(pods, capacity, 1.3, 42))
    assert not np.array_equal(order, arrivals(pods, capacity, 1.3, 43))
    cut = arrivals(pods, capacity, 0.5, 42)  # a list asking more than the load: pods removed at random
    assert len(cut) < len(pods.tasks) and int(pods.gpu_total[cut].sum()) <= 0.5 * capacity
    assert len(set(cut.tolist())) == len(cut)


def test_the_value_at_a_load_is_the_mean_over_arrivals_rounding_there_else_within_a_point() -> None:
    arrived = np.array([9_400, 10_000, 10_600, 29_000, 31_000])  # thousandths of a GPU; 10 GPUs in all
    points = load_points(arrived, 10)
    assert points.tolist() == [94, 100, 106, 290, 310]
    values = np.array([1.0, 2.0, 3.0, 4.0, np.nan])
    assert by_load(points, values, [100, 291, 310, 50]) == {100: 2.0, 291: 4.0}
    assert load_points(np.array([10_050, 10_150]), 10).tolist() == [100, 102]  # half to even


# ---------------------------------------------------------------- the paper's binders, one rule each


def member(*nodes: tuple[str, int, int, str]) -> Member:
    workload = Workload(
        (TaskShape(1000, 1, 500), TaskShape(1000, 1, 1000), TaskShape(1000, 2, 1000)), (0.4, 0.3, 0.3)
    )
    return Member("m", [Node(name, cpu, 262144, gpus, model) for name, cpu, gpus, model in nodes], workload)


def share(milli: int, cpu: int = 1000) -> Pod:
    return Pod.of(TaskShape(cpu, 1, milli), 1024)


def choose(binder: str, m: Member, pod: Pod, seed: int = 0) -> tuple[str, int | None]:
    """The node's name (members sort their nodes by name) and the device."""
    node, device = BINDERS[binder](m, pod, m.feasible(pod), np.random.default_rng(seed))
    return m.names[node], device


def at(m: Member, name: str) -> int:
    return m.names.index(name)


def test_gpu_packing_prefers_a_used_device_then_a_used_node_then_the_smallest_idle_node() -> None:
    m = member(("idle8", 64000, 8, "V100"), ("idle2", 64000, 2, "V100"), ("used", 64000, 8, "V100"))
    m.bind(at(m, "used"), Pod.of(TaskShape(1000, 1, 1000), 1024), None)  # one whole GPU taken
    assert choose("GpuPacking", m, share(500))[0] == "used"  # free devices on a node in use: 33-50
    m.bind(at(m, "idle8"), share(300), 3)
    assert choose("GpuPacking", m, share(500)) == ("idle8", 3)  # a device already shared: 50-100
    fresh = member(("idle8", 64000, 8, "V100"), ("idle2", 64000, 2, "V100"))
    assert choose("GpuPacking", fresh, share(500))[0] == "idle2"  # idle nodes: the fewer GPUs, the higher


def test_gpu_clustering_keeps_pods_of_a_kind_together() -> None:
    m = member(("a", 64000, 4, "V100"), ("b", 64000, 4, "V100"), ("c", 64000, 4, "V100"))
    m.rank = np.array([2, 0, 1])  # ties would go to b
    m.bind(at(m, "a"), share(300), 0)
    m.bind(at(m, "c"), Pod.of(TaskShape(1000, 1, 1000), 1024), None)
    assert choose("GpuClustering", m, share(500))[0] == "a"  # only sharing pods there: 75-100
    two = Pod.of(TaskShape(1000, 2, 1000), 1024)
    assert choose("GpuClustering", m, two)[0] == "b"  # an idle node: 25-50


def test_best_fit_and_dot_product_score_the_leftover() -> None:
    m = member(("roomy", 96000, 8, "V100"), ("tight", 16000, 1, "V100"))
    pod = Pod.of(TaskShape(8000, 1, 1000), 1024)
    assert choose("BestFit", m, pod)[0] == "tight"  # least cpu and GPU left afterwards
    assert choose("DotProd", m, pod)[0] == "tight"  # smallest (free . request)


def test_fgd_puts_a_sharing_pod_on_the_device_it_fills_and_random_draws_among_feasible_nodes() -> None:
    m = member(("n0", 64000, 2, "V100"), ("n1", 64000, 2, "V100"))
    m.bind(at(m, "n1"), share(500), 1)
    assert choose("FGD", m, share(500)) == ("n1", 1)  # fills the half GPU: a fragment less
    drawn = {choose("Random", m, share(500), seed)[0] for seed in range(20)}
    assert drawn == {"n0", "n1"}
    full = member(("n0", 1000, 2, "V100"), ("n1", 64000, 2, "V100"))
    assert {choose("Random", full, share(500, cpu=2000), seed)[0] for seed in range(20)} == {"n1"}


def test_the_member_default_binder_prefers_the_hint_when_it_fits() -> None:
    m = member(("a", 64000, 8, "V100"), ("b", 64000, 8, "V100"), ("cpu", 32000, 0, ""))
    m.bind(at(m, "b"), Pod.of(TaskShape(1000, 4, 1000), 1024), None)
    gpu = share(500)
    assert kube_default(m, gpu, m.feasible(gpu), True, None)[0] == at(m, "b")  # MostAllocated on the GPU
    assert kube_default(m, gpu, m.feasible(gpu), False, None)[0] == at(m, "a")  # LeastAllocated
    assert kube_default(m, gpu, m.feasible(gpu), True, at(m, "a")) == (at(m, "a"), 0)  # the hint
    cpu = Pod.of(TaskShape(1000), 1024)
    assert kube_default(m, cpu, m.feasible(cpu), True, None)[0] == at(m, "a")  # least allocated
    ignored = kube_default(m, gpu, m.feasible(gpu), True, at(m, "cpu"))  # a hint that cannot take it
    assert ignored[0] == at(m, "b")


# ---------------------------------------------------------------- the command


def test_json_shape_one_cluster_and_a_federation(
    trace: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    nodes, pods = trace
    code, out, err = run_cli(
        capsys, "--nodes", str(nodes), "--pods", str(pods), "--clusters", "1", "--seeds", "2", "--json"
    )
    assert code == 0, err
    result = json.loads(out)
    gpus = 12 * 2 + 4 * 8 - 4 * 2  # the fixture: 12 GPU nodes, a third of them with 8 V100s, the rest 2 T4s
    assert result["gpus"] == gpus and result["clusters"] == 1
    assert list(result["policies"]) == list(BINDERS)
    loads = [f"{x / 10:.1f}" for x in range(1, 14)]
    for summary in result["policies"].values():
        assert set(summary) == {"allocation", "fragmentation", "std", "sovereignty_violations"}
        assert list(summary["allocation"]) == loads == list(summary["std"])
        assert all(0.0 <= value <= 1.0 for value in summary["allocation"].values())
        assert summary["allocation"]["0.1"] == pytest.approx(0.1, abs=0.03)  # everything fits early
    code, out, err = run_cli(
        capsys,
        "--nodes",
        str(nodes),
        "--pods",
        str(pods),
        "--clusters",
        "2",
        "--seeds",
        "2",
        "--json",
        "--jobs",
        "1",
    )
    assert code == 0, err
    federated = json.loads(out)
    assert list(federated["policies"]) == [
        "home", "round-robin", "random", "least-loaded", "cheapest", "static-labels", "fedsched",
    ]  # fmt: skip
    assert federated["policies"]["fedsched"]["sovereignty_violations"] == 0
    again = run_cli(
        capsys,
        "--nodes",
        str(nodes),
        "--pods",
        str(pods),
        "--clusters",
        "2",
        "--seeds",
        "2",
        "--json",
        "--jobs",
        "2",
    )
    assert json.loads(again[1]) == federated  # worker processes change nothing


def test_table_and_plot(trace: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    nodes, pods = trace
    image = tmp_path / "allocation.png"
    code, out, _ = run_cli(
        capsys,
        "--nodes",
        str(nodes),
        "--pods",
        str(pods),
        "--clusters",
        "1",
        "--seeds",
        "1",
        "--policies",
        "FGD,BestFit",
        "--plot",
        str(image),
    )
    assert code == 0
    assert "GPU allocation % by arrived load" in out and "FGD" in out and "fragmentation ratio" in out
    assert image.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--seed", "3"], "--seed: not with --protocol fragmentation"),
        (["--copies", "2"], "--copies: not with --protocol fragmentation"),
        (["--load", "0"], "--load: must be above 0"),
        (["--seeds", "0"], "--seeds: must be 1 to 1000"),
        (
            ["--clusters", "1", "--policies", "fedsched"],
            "--policies: 'fedsched' not a policy of the fragmentation protocol with one cluster",
        ),
        (
            ["--clusters", "3", "--policies", "FGD"],
            "'FGD' not a policy of the fragmentation protocol with 3 clusters",
        ),
        (["--clusters", "99"], "--clusters: 99 members but only 24 nodes"),
    ],
)
def test_bad_options_exit_2_naming_the_option(
    trace: tuple[Path, Path], capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    nodes, pods = trace
    code, out, err = run_cli(capsys, "--nodes", str(nodes), "--pods", str(pods), *argv)
    assert code == 2 and out == ""
    assert message in err and "Traceback" not in err


def test_only_with_the_fragmentation_protocol(
    trace: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    nodes, pods = trace
    code = cli.main(["replay", "--no-progress", "--nodes", str(nodes), "--pods", str(pods), "--seeds", "3"])
    assert code == 2 and "--seeds: only with --protocol fragmentation" in capsys.readouterr().err


def test_progress_lines_on_stderr(trace: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    nodes, pods = trace
    code = cli.main(
        [
            "replay",
            "--protocol",
            "fragmentation",
            "--nodes",
            str(nodes),
            "--pods",
            str(pods),
            "--clusters",
            "1",
            "--seeds",
            "1",
            "--policies",
            "FGD",
            "--json",
        ]
    )
    out, err = capsys.readouterr()
    assert code == 0 and json.loads(out)["policies"]["FGD"]
    assert err.startswith("[1/1] FGD seed 42: ") and "% of the arrived GPU request allocated" in err
