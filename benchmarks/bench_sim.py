"""Simulator throughput: pod create->Running cycles per second per cluster, and listing 5,000 pods.

Run: ``.venv/bin/python benchmarks/bench_sim.py``. The baseline is a ``/version`` round trip through the
same client, so results read as a ratio to the cost of one trivial request on this machine.
"""

from __future__ import annotations

import statistics
import time
from concurrent.futures import ThreadPoolExecutor

from kubernetes import client, config

from airflow_provider_fedsched.sim import SimFederation, wait_for

CYCLES = 200
LIST_PODS = 5000


def _pod(name: str) -> dict:
    return {
        "metadata": {
            "name": name,
            "annotations": {"sim.fedsched.io/duration": "3600", "sim.fedsched.io/startup-delay": "0"},
        },
        "spec": {
            "restartPolicy": "Never",
            "containers": [
                {"name": "base", "image": "busybox:1.36", "resources": {"requests": {"cpu": "1m"}}}
            ],
        },
    }


def main() -> None:
    cfg = {
        "time_scale": 0.001,
        "clusters": [
            {
                "name": f"bench-{i}",
                "node_pools": [{"name": "n", "count": 10, "cpu": "64", "memory": "256Gi", "pods": 1000}],
            }
            for i in range(2)
        ],
    }
    with SimFederation(cfg) as fed:
        apis = {
            h.name: client.CoreV1Api(config.new_client_from_config(str(fed.kubeconfig_path), context=h.name))
            for h in fed
        }
        api = apis["bench-0"]
        version = client.VersionApi(api.api_client)
        for _ in range(50):
            version.get_code()
        samples = []
        for _ in range(300):
            start = time.perf_counter()
            version.get_code()
            samples.append(time.perf_counter() - start)
        baseline = statistics.median(samples)

        def cycles(name: str) -> float:
            a = apis[name]
            start = time.perf_counter()
            for i in range(CYCLES):
                pod = f"cyc-{i}"
                a.create_namespaced_pod("default", _pod(pod))
                while a.read_namespaced_pod(pod, "default").status.phase != "Running":
                    pass
            return CYCLES / (time.perf_counter() - start)

        with ThreadPoolExecutor(len(apis)) as pool:
            rates = dict(zip(apis, pool.map(cycles, apis), strict=True))

        handle = fed["bench-0"]
        handle.scheduler.pause()
        handle.call(
            lambda: [handle.cluster.create_pod("default", _pod(f"list-{i}")) for i in range(LIST_PODS)]
        )
        wait_for(lambda: len(handle.pods("default")) >= LIST_PODS, 60)
        times = []
        for _ in range(5):
            start = time.perf_counter()
            items = api.list_namespaced_pod("default", _preload_content=False).data
            times.append(time.perf_counter() - start)
        raw_list = min(times)
        start = time.perf_counter()
        parsed = api.list_namespaced_pod("default")
        typed_list = time.perf_counter() - start
        count = len(parsed.items)

    print("| metric | value | target | vs baseline |")
    print("|---|---|---|---|")
    print(f"| baseline `/version` round trip (median) | {baseline * 1000:.2f} ms | - | 1x |")
    for name, rate in rates.items():
        per_cycle = 1 / rate
        print(
            f"| create->Running cycles/s ({name}, 2 clusters in parallel) | {rate:.0f}/s | >= 50/s | "
            f"{per_cycle / baseline:.1f}x baseline per cycle |"
        )
    print(
        f"| list {count} pods (HTTP+JSON, {len(items) / 1e6:.1f} MB) | {raw_list * 1000:.0f} ms | < 500 ms | "
        f"{raw_list / baseline:.0f}x |"
    )
    print(
        f"| list {count} pods into typed V1PodList (client-side parsing) | {typed_list * 1000:.0f} ms | - | "
        f"{typed_list / baseline:.0f}x |"
    )
    print("\nCommand: `.venv/bin/python benchmarks/bench_sim.py`")


if __name__ == "__main__":
    main()
