"""The fragmentation protocol on the Alibaba GPU trace, against the FGD paper's published figures.

The published table is the mean over ten seeds of the authors' simulator (Weng et al., USENIX ATC '23;
their repository's ``experiments/analysis/expected_results``): default pod list, the 1,213 GPU nodes, GPU
allocation at 100 % and 130 % of the GPU capacity arrived. Three seeds of this replay (42, 43, 44) are the
small sample pinned here; ``docs/replay.md`` has all ten.
"""

from __future__ import annotations

from airflow_provider_fedsched.replay.fragmentation import PUBLISHED, arrivals, read_pod_list, run_binder
from airflow_provider_fedsched.replay.fragmentation_run import summarize
from airflow_provider_fedsched.replay.workload import read_nodes
from tests.replay.test_alibaba_trace import trace_folder


def test_the_six_binders_reproduce_the_published_allocation_within_half_a_point() -> None:
    folder = trace_folder()
    nodes = read_nodes(folder / "openb_node_list_gpu_node.csv")
    pods = read_pod_list(folder / "openb_pod_list_default.csv")
    gpus = sum(node.gpus for node in nodes)
    assert (len(nodes), gpus) == (1213, 6212)
    seeds = (42, 43, 44)
    orders = {seed: arrivals(pods, gpus * 1000, 1.3, seed) for seed in seeds}
    measured = {}
    for binder, (at_100, at_130) in PUBLISHED.items():
        runs = [run_binder(binder, nodes, pods, orders[seed], seed, 1.3) for seed in seeds]
        summary = summarize(runs, gpus, [100, 130], 0.0)
        measured[binder] = (100 * summary.allocation[100], 100 * summary.allocation[130])
        assert abs(measured[binder][0] - at_100) <= 0.5, (binder, measured[binder])
        assert abs(measured[binder][1] - at_130) <= 0.5, (binder, measured[binder])
    # And the paper's ranking at 130 %: FGD first, then BestFit, the packers, DotProd, Random.
    order = sorted(measured, key=lambda name: measured[name][1], reverse=True)
    assert order[:2] == ["FGD", "BestFit"] and order[-2:] == ["DotProd", "Random"]
