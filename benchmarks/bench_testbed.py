"""Snapshot refresh on the real kube-apiserver (the test bed) vs the simulator, in the same run.

Run: ``.venv/bin/python benchmarks/bench_testbed.py [--nodes 500 2000] [--pods 10000] [--repeat 5]``
(needs ``make testbed``).

For each size, one member with N nodes (16 cpu / 64 Gi) and 10,000 pods bound to them (100m / 128Mi each,
not terminated) is served (a) by a real kube-apiserver v1.36 over etcd, TLS and RBAC (a test-bed cluster;
its nodes are not kwok-managed, so no lease traffic competes with the reads), and (b) by ``fedsched sim up``
in a separate process. ``FederationHook.collect`` refreshes that member's snapshot (list nodes, non-terminal
pods and quotas, then condense); the median of ``--repeat`` refreshes is reported, and the real one as a
ratio of the simulator's. Also reported: the time the test bed took to start, and its memory.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

CPU, MEMORY = "16", "64Gi"


def node(name: str) -> dict[str, Any]:
    capacity = {"cpu": CPU, "memory": MEMORY, "pods": "110", "ephemeral-storage": "100Gi"}
    return {
        "metadata": {
            "name": name,
            "labels": {"fedsched.io/node-pool": "p", "fedsched.io/kwok-managed": "false"},
        },
        "status": {
            "capacity": capacity,
            "allocatable": capacity,
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "ready"}],
        },
    }


def pod(name: str, node_name: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "annotations": {"sim.fedsched.io/duration": "36000"}},
        "spec": {
            "nodeName": node_name,
            "containers": [
                {
                    "name": "c",
                    "image": "busybox",
                    "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
                }
            ],
        },
    }


def populate(kubeconfig: Path, context: str, nodes: list[str], pods: int, create_nodes: bool) -> float:
    from kubernetes import client, config

    api = client.CoreV1Api(config.new_client_from_config(str(kubeconfig), context=context))
    api.api_client.configuration.connection_pool_maxsize = 16
    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=16) as pool:
        if create_nodes:
            list(pool.map(lambda n: api.create_node(node(n)), nodes))
        list(
            pool.map(
                lambda i: api.create_namespaced_pod("default", pod(f"p{i}", nodes[i % len(nodes)])),
                range(pods),
            )
        )
    return time.perf_counter() - started


def refresh_seconds(state_dir: Path, cluster: str, repeat: int) -> tuple[float, int, int]:
    from airflow_provider_fedsched.hooks.federation import FederationHook
    from airflow_provider_fedsched.state import FederationState, MemoryStateBackend

    hook = FederationHook(
        state_dir / "federation.yaml",
        kubeconfig=state_dir / "kubeconfig",
        state=FederationState(MemoryStateBackend()),
        snapshot_timeout=120.0,
    )
    snap = hook.collect([cluster])[cluster]
    assert snap.reachable, snap.reason
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        snap = hook.collect([cluster])[cluster]
        samples.append(time.perf_counter() - started)
        assert snap.reachable, snap.reason
    return (
        statistics.median(samples),
        len(snap.nodes),
        sum(len(n.pods) if hasattr(n, "pods") else 0 for n in snap.nodes),
    )


def bench_testbed(nodes: int, pods: int, repeat: int) -> dict[str, Any]:
    from airflow_provider_fedsched.testbed import TestbedFederation

    cfg = {"clusters": [{"name": "big", "node_pools": []}]}
    with TestbedFederation(cfg) as fed:
        cluster = fed.clusters["big"]
        names = [f"big-p-{i}" for i in range(nodes)]
        fill = populate(fed.kubeconfig_path, "big", names, pods, create_nodes=True)
        seconds, seen_nodes, _ = refresh_seconds(fed.state_dir, "big", repeat)
        rss = sum(cluster.memory_bytes().values())
        return {
            "refresh": seconds,
            "nodes": seen_nodes,
            "fill": fill,
            "startup": cluster.startup_seconds["ready"],
            "rss_mib": rss / 2**20,
        }


def bench_sim(nodes: int, pods: int, repeat: int) -> dict[str, Any]:
    directory = Path(tempfile.mkdtemp(prefix="fedsched-bench-sim-"))
    per_pool = 1000
    pools = [
        {"name": f"p{i}", "count": min(per_pool, nodes - i * per_pool), "cpu": CPU, "memory": MEMORY}
        for i in range((nodes + per_pool - 1) // per_pool)
    ]
    (directory / "sim.yaml").write_text(yaml.safe_dump({"clusters": [{"name": "big", "node_pools": pools}]}))
    fedsched = str(Path(sys.executable).with_name("fedsched"))
    process = subprocess.Popen(
        [fedsched, "sim", "up", "--config", str(directory / "sim.yaml"), "--state-dir", str(directory)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        for line in process.stdout:
            if "ready" in line:
                break
        from kubernetes import client, config

        api = client.CoreV1Api(config.new_client_from_config(str(directory / "kubeconfig"), context="big"))
        names = [n.metadata.name for n in api.list_node().items]
        fill = populate(directory / "kubeconfig", "big", names, pods, create_nodes=False)
        seconds, seen_nodes, _ = refresh_seconds(directory, "big", repeat)
        return {"refresh": seconds, "nodes": seen_nodes, "fill": fill}
    finally:
        process.terminate()
        process.wait(timeout=60)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, nargs="+", default=[500, 2000])
    parser.add_argument("--pods", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    rows = []
    for nodes in args.nodes:
        sim = bench_sim(nodes, args.pods, args.repeat)
        real = bench_testbed(nodes, args.pods, args.repeat)
        assert sim["nodes"] == real["nodes"] == nodes, (sim["nodes"], real["nodes"])
        rows.append((nodes, sim, real))
        print(f"measured {nodes} nodes: sim {sim['refresh']:.3f}s real {real['refresh']:.3f}s", flush=True)
    print(f"\n### Snapshot refresh: real kube-apiserver v1.36 vs the simulator ({args.pods:,} pods)\n")
    print(
        "| nodes | simulator (median, baseline) | kube-apiserver (median) | ratio "
        "| test bed start | test bed memory |"
    )
    print("|---:|---:|---:|---:|---:|---:|")
    for nodes, sim, real in rows:
        print(
            f"| {nodes:,} | {sim['refresh'] * 1000:.0f} ms | {real['refresh'] * 1000:.0f} ms | "
            f"{real['refresh'] / sim['refresh']:.2f}x | {real['startup']:.1f} s | {real['rss_mib']:.0f} MiB |"
        )
    print("\nFilling the member (nodes + pods through the API, 16 client threads):")
    for nodes, sim, real in rows:
        print(f"- {nodes:,} nodes: simulator {sim['fill']:.0f} s, kube-apiserver {real['fill']:.0f} s")
    print(
        f"\nCommand: .venv/bin/python benchmarks/bench_testbed.py --nodes {' '.join(map(str, args.nodes))} "
        f"--pods {args.pods} --repeat {args.repeat}"
    )


if __name__ == "__main__":
    main()
